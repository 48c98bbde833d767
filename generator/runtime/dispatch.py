"""Which generated module serves a call, and the launch arguments derived from the public ones.

Shared by the forward op (``custom_op``) and the backward (``autograd``); imports neither
them nor ``api``. Nothing here is cached across calls: a user can change a mask in place
behind any key (``.numpy()``, ``.data``), so the block map is recomputed from the mask's
content on every launch (it costs one pass over the mask at its broadcast shape).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from spec.mask_mod import BUILTINS as MASK_MOD_BUILTINS, REGISTRY as MASK_MODS, MaskMod
from spec.score_mods import REGISTRY as SCORE_MODS, index_key as SM_index_key
from spec import launch as spec_launch
from spec import masks as spec_masks

from generator.runtime import config, launch
from generator.runtime import checks
from generator.runtime.checks import check_block, check_index_width

#: the package ``python -m generator`` writes by default; an ``--out`` package names itself
DEFAULT_PACKAGE = config.DEFAULT_PACKAGE

#: the block map's entries (spec.masks: what the kernels read as tile_state)
EMPTY, PARTIAL, FULL = spec_masks.MAP_EMPTY, spec_masks.MAP_PARTIAL, spec_masks.MAP_FULL


def module_for(kind: str, block, package: str = DEFAULT_PACKAGE, device: torch.device | None = None) -> object:
    """The generated module of kernel ``kind`` for ``block = (B_r, B_c)`` in ``package``; ValueError if absent.
    ``device``: the tensors' device; RuntimeError if they are CPU tensors but the module's kernels were
    compiled for a GPU (TRITON_INTERPRET=1 set after the module was imported)."""
    block = check_block(block)
    kernels = importlib.import_module(package).KERNELS
    if block not in kernels or kind not in kernels[block]:
        have = ", ".join(str(b) for b in sorted(kernels)) or "none"
        raise ValueError(
            f"block {block} has no generated {kind} kernel in {package} (generated blocks: {have}); emit it with "
            f"`python -m generator --br {block[0]} --bc {block[1]}`")
    return _usable_on(importlib.import_module(f"{package}.{kernels[block][kind]}"), device)


def mask_mod_module_for(kind: str, block, package: str, device: torch.device | None, mask_mod: str) -> object:
    """``module_for`` of the file with the mask_mod named ``mask_mod`` compiled in (``MASK_MODS`` of
    the package's index); ValueError naming the command that emits (or regenerates) it."""
    return _usable_on(_mask_mod_module(kind, check_block(block), MASK_MODS[mask_mod], package), device)


def score_mod_module_for(kind: str, block, package: str, device: torch.device | None, score_mod: str,
                         mask_mod: str | None = None) -> object:
    """``module_for`` of the file with the user score_mod named ``score_mod`` compiled in, and the
    mask_mod named ``mask_mod`` with it when given (``SCORE_MODS`` of the package's index); ValueError
    naming the command that emits (or regenerates) it."""
    block = check_block(block)
    sm = SCORE_MODS[score_mod]
    module = _modded_module(kind, block, package, sm, sm.expr, "score_mod", "SCORE_MODS", "SCORE_MOD_EXPR",
                            key=SM_index_key(score_mod, mask_mod))
    mm = None if mask_mod is None else MASK_MODS[mask_mod]
    if mm is not None and module.MASK_MOD_PREDICATE != str(mm.predicate):  # the mask_mod beside it: still the caller's
        raise ValueError(f"{module.__name__} was emitted for mask_mod {mask_mod!r} = {module.MASK_MOD_PREDICATE}, "
                         f"but {mm.ref} is now {mm.predicate}; regenerate with `{module.COMMAND}`")
    return _usable_on(module, device)


def module_of(kind: str, block, package: str, device, mask_mod: str | None, score_mod: str | None) -> object:
    """The generated module of ``kind`` for a call: the plain one, or the one with its mask_mod, its
    user score_mod, or both compiled in."""
    if score_mod is not None:
        return score_mod_module_for(kind, block, package, device, score_mod, mask_mod)
    if mask_mod is not None:
        return mask_mod_module_for(kind, block, package, device, mask_mod)
    return module_for(kind, block, package, device)


def _usable_on(module, device: torch.device | None) -> object:
    if device is not None and device.type == "cpu" and launch.compiled_for_gpu(module):
        raise RuntimeError(
            f"TRITON_INTERPRET=1 was set after {module.__name__} was imported, so its kernels were compiled for a "
            "GPU and cannot run CPU tensors: set TRITON_INTERPRET=1 in the environment before Python starts "
            "(or before the first call), or pass CUDA tensors")
    return module


def _mask_mod_module(kind: str, block: tuple[int, int], mm: MaskMod, package: str) -> object:
    """The module of ``kind`` with mask_mod ``mm`` compiled in; ValueError naming the command that
    emits it when absent, or that regenerates it when its predicate is not ``mm``'s any more."""
    return _modded_module(kind, block, package, mm, mm.predicate, "mask_mod", "MASK_MODS", "MASK_MOD_PREDICATE")


def _modded_module(kind: str, block: tuple[int, int], package: str, mod, expr, what: str, table: str,
                   recorded: str, key: str | None = None) -> object:
    """The module of ``kind`` with ``mod`` (a mask_mod or a score_mod: ``what``) compiled in, listed in
    the package index's ``table`` under ``key`` (default: its name; a score_mod with a mask_mod:
    ``spec.score_mods.index_key``); ValueError naming the command that emits it when absent, or that
    regenerates it when the module's ``recorded`` expression is not ``expr`` any more."""
    index = importlib.import_module(package)
    command = index.COMMANDS.get(block, f"python -m generator --br {block[0]} --bc {block[1]}")
    key = mod.name if key is None else key
    with_mm = key.partition("+")[2]  # the mask_mod a score_mod is asked with: a user one is named too
    extra = "" if not with_mm or any(m.name == with_mm for m in MASK_MOD_BUILTINS) else \
        f" --mask-mod {MASK_MODS[with_mm].ref}"
    emit = f"`{command} --{what.replace('_', '-')} {mod.ref}{extra}`"
    name = getattr(index, table, {}).get(block, {}).get(key, {}).get(kind)
    if name is None:
        both = f" with mask_mod {with_mm!r}" if with_mm else ""
        raise ValueError(f"{what} {mod.name!r}{both} has no generated {kind} kernel for block {block} in {package}; "
                         f"emit it with {emit}")
    module = importlib.import_module(f"{package}.{name}")
    if getattr(module, recorded) != str(expr):
        raise ValueError(f"{package}/{name}.py was emitted for {what} {mod.name!r} = {getattr(module, recorded)}, "
                         f"but {mod.ref} is now {expr}; regenerate with {emit}")
    return module


def block_map(mask: torch.Tensor, n_q: int, n_k: int, block_m: int, block_n: int) -> torch.Tensor:
    """int8 map ``(Bm, Hm, cdiv(n_q, block_m), cdiv(n_k, block_n))`` of a bool mask's tiles
    (``spec.launch.block_map_shape``): entry ``(r, c)`` is ``spec.masks.map_state`` of the tile's rows
    ``[r·block_m, (r+1)·block_m)`` and keys ``[c·block_n, (c+1)·block_n)`` inside ``[0, n_q) x [0, n_k)``
    (EMPTY: the kernels skip it; FULL: no per-element mask; PARTIAL), claim mask_tiles_sound.
    ``Bm``/``Hm`` stay 1 where the mask broadcasts. Computed from the mask's content at each call (no cache
    that an in-place edit could outdate).
    """
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    m = m.expand(m.shape[0], m.shape[1], n_q, n_k)
    tm, tn = spec_launch.block_map_shape(n_q, n_k, (block_m, block_n))
    # the mask padded with False to whole tiles, and a tile's count of valid elements (those inside the mask)
    pad = (0, tn * block_n - n_k, 0, tm * block_m - n_q)
    tiles = (m.shape[0], m.shape[1], tm, block_m, tn, block_n)
    attended = F.pad(m.to(torch.int32), pad).reshape(tiles).sum((3, 5))
    valid = F.pad(torch.ones((n_q, n_k), dtype=torch.int32, device=mask.device), pad)
    valid = valid.reshape(tm, block_m, tn, block_n).sum((1, 3))
    return spec_masks.map_state(attended, valid, torch.where).to(torch.int8)


def lengths_argument(key_lengths, k):
    """``key_lengths`` as the kernels read it: a fresh contiguous int32 tensor clamped on the device to
    ``spec.launch.key_length_bounds(k)`` (``[0, N_k]``: claim forward_addresses; the kernels index it with unit
    stride; ``key_len_range`` under torch.compile, where the eager range check does not run)."""
    if key_lengths is None:
        return None
    return key_lengths.clamp(*spec_launch.key_length_bounds(k)).to(torch.int32).contiguous()


def mask_arguments(module, q, k, *, alignment, mask, scale) -> dict:
    """The launch arguments a generated forward or backward ``module`` derives from the public
    ones: ``sm_scale``, the alignment ``shift``, and a dense ``mask`` expanded to
    ``(B, Hq, N_q, N_k)`` with its ``block_map``."""
    B, Hq, Nq, D = q.shape
    Nk = k.shape[2]
    dense, tiles = None, None
    if mask is not None:
        dense = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)).expand(B, Hq, Nq, Nk)
        # a module reads the map at its own tiles (claims forward_addresses, backward_kernel_addresses)
        tiles = block_map(mask, Nq, Nk, *spec_launch.block_map_tiles(module)).expand(B, Hq, -1, -1)
    sm_scale = checks.sm_scale_of(scale, D)
    return {"sm_scale": sm_scale, "shift": spec_launch.dense_shift(alignment, q, k), "mask": dense, "block_map": tiles}


def mask_mod_arguments(mask_args) -> dict:
    """``mask_mod_args`` for a module with a mask_mod compiled in (the packed int32 parameters)."""
    return {} if mask_args is None else {"mask_mod_args": mask_args}


def score_mod_arguments(score_f, score_i) -> dict:
    """``score_f``, ``score_i`` for a module with a user score_mod compiled in (``ScoreMod.pack``)."""
    return {} if score_f is None else {"score_f": score_f, "score_i": score_i}


def dropout_arguments(dropout_p, philox) -> dict:
    """The dropout keywords of a generated module's launch (none when off: its defaults)."""
    return {} if philox is None else {"dropout_p": dropout_p, "philox": philox}


def dropout_mask(block, package: str, philox, dropout_p: float, shape) -> torch.Tensor:
    """The keep mask (bool ``shape`` = ``(B, H, N_q, N_k)``) the kernels of ``block`` draw with
    ``philox`` at ``dropout_p``: their printed keep term at every element (the forward module's
    ``dropout_mask``); all True without dropout."""
    if philox is None:
        return torch.ones(shape, dtype=torch.bool)
    return module_for("fwd", block, package, philox.device).dropout_mask(philox, dropout_p, *shape)


def attention_forward(module, q, k, v, *, causal, alignment, window, key_lengths, mask, scale, tma=False,
                      softcap=None, alibi_slopes=None, sinks=None, mask_args=None, dropout_p=0.0, philox=None,
                      score_f=None, score_i=None, descales=None, out_dtype=None):
    """Run a generated forward ``module`` on checked inputs: returns ``(out, lse)``.
    ``tma``: the opt-in Hopper TMA path (``generator.runtime.launch.tma_operands`` has its rules);
    ``softcap``, ``alibi_slopes``, ``sinks``: the score modifications (``launch.score_mod_launch``);
    ``mask_args``: a mask_mod's packed parameters (``MaskMod.pack``); ``dropout_p``, ``philox``: the
    dropout (``checks.draw_philox``); ``descales``, ``out_dtype``: the FP8 forward (declared in ``contract``: ``q_descale``...)."""
    fp8 = {} if descales is None else {"descales": descales, "out_dtype": out_dtype}
    return module.forward(q, k, v, causal=causal, window=window, tma=tma, softcap=softcap, **fp8,
                          alibi_slopes=alibi_slopes, sinks=sinks, **dropout_arguments(dropout_p, philox),
                          key_lengths=lengths_argument(key_lengths, k),
                          **mask_arguments(module, q, k, alignment=alignment, mask=mask, scale=scale),
                          **mask_mod_arguments(mask_args), **score_mod_arguments(score_f, score_i))


def planned_forward(module, q, k, v, *, causal, alignment, window, key_lengths, scale, tma=False, softcap=None,
                    alibi_slopes=None, sinks=None, mask=None):
    """``run(q, k, v, key_lengths, alibi_slopes, sinks, mask=None) -> (out, lse)``: ``attention_forward``
    without a mask_mod or dropout for tensors of these shapes, strides, dtypes and device and these
    options, with its launch planned once (``module.forward_plan``: nothing of it depends on a value). A
    dense ``mask`` (one of the same metadata at every call) is expanded and its block map built from its
    content at each call (``mask_arguments``); the plan holds only what their shapes and strides give."""
    plan = module.forward_plan(q, k, v, causal=causal, window=window, tma=tma, softcap=softcap,
                               alibi_slopes=alibi_slopes, sinks=sinks,
                               key_lengths=lengths_argument(key_lengths, k),
                               **mask_arguments(module, q, k, alignment=alignment, mask=mask, scale=scale))

    def run(q, k, v, key_lengths, alibi_slopes, sinks, mask=None):
        dense = {} if mask is None else mask_arguments(module, q, k, alignment=alignment, mask=mask, scale=scale)
        return module.launch_forward(plan, q, k, v, key_lengths=lengths_argument(key_lengths, k),
                                     alibi_slopes=alibi_slopes, sinks=sinks, tma=tma, mask=dense.get("mask"),
                                     block_map=dense.get("block_map"))
    return run


def attention_backward(module, grad_out, grad_lse, q, k, v, out, lse, *, causal, alignment, window, key_lengths,
                       mask, scale, softcap=None, alibi_slopes=None, sinks=None, mask_args=None, dropout_p=0.0,
                       philox=None, score_f=None, score_i=None):
    """Run a generated backward ``module`` on checked inputs: returns ``(dq, dk, dv, dsink_rows)``
    (``dsink_rows``: each row's part of dL/dsink, ``None`` without sinks), and with a user score_mod
    ``dscore_f`` too (the gradient of its packed float parameters)."""
    check_index_width(grad_out=grad_out)  # the one input the forward's checks did not see
    return module.backward(grad_out, q, k, v, out, lse, grad_lse=grad_lse, causal=causal, window=window,
                           softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                           **dropout_arguments(dropout_p, philox),
                           key_lengths=lengths_argument(key_lengths, k),
                           **mask_arguments(module, q, k, alignment=alignment, mask=mask, scale=scale),
                           **mask_mod_arguments(mask_args), **score_mod_arguments(score_f, score_i))
