"""The public PyTorch entry points: input checks, then dispatch to a generated module.

``flash_attention`` has the semantics of ``spec.reference.attention`` (same argument names
and meaning). Every bad input raises an error that names the problem and the fix; the
kernels themselves assume checked inputs.

Non-contiguous inputs are accepted as they are: the kernels index q, k, v (and the mask)
through their strides, so no copy is made. Outputs are freshly allocated and contiguous.
"""

from __future__ import annotations

import importlib
import math

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakTensorKeyDictionary

from spec.mask_mod import REGISTRY as MASK_MODS, MaskMod
from spec.masks import ALIGNMENTS, alignment_shift

from generator.runtime import launch

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DEFAULT_BLOCK = (64, 64)


# ----------------------------------------------------------------------------------
# Dispatch: which generated module serves a block.
# ----------------------------------------------------------------------------------
def _index():
    return importlib.import_module("generated")


def _check_block(block) -> tuple[int, int]:
    try:
        bm, bn = block
        return int(bm), int(bn)
    except (TypeError, ValueError):
        raise ValueError(f"block must be a pair (B_r, B_c) of ints such as (64, 64), got {block!r}") from None


def module_for(kind: str, block, mask_mod: str | None = None) -> object:
    """The generated module of kernel ``kind`` for ``block = (B_r, B_c)`` (with the mask_mod of
    that name compiled in, when given); ValueError naming the command to run if absent."""
    block = _check_block(block)
    if mask_mod is not None:
        return _mask_mod_module(kind, block, MASK_MODS[mask_mod])
    kernels = _index().KERNELS
    if block not in kernels or kind not in kernels[block]:
        have = ", ".join(str(b) for b in sorted(kernels)) or "none"
        raise ValueError(
            f"block {block} has no generated {kind} kernel (generated blocks: {have}); emit it with "
            f"`python -m generator --br {block[0]} --bc {block[1]}`")
    return importlib.import_module(f"generated.{kernels[block][kind]}")


def _mask_mod_module(kind: str, block: tuple[int, int], mm: MaskMod) -> object:
    index = _index()
    command = index.COMMANDS.get(block, f"python -m generator --br {block[0]} --bc {block[1]}")
    emit = f"`{command} --mask-mod {mm.ref}`"
    name = index.MASK_MODS.get(block, {}).get(mm.name, {}).get(kind)
    if name is None:
        raise ValueError(f"mask_mod {mm.name!r} has no generated {kind} kernel for block {block}; emit it with {emit}")
    module = importlib.import_module(f"generated.{name}")
    if module.MASK_MOD_PREDICATE != str(mm.predicate):
        raise ValueError(f"generated/{name}.py was emitted for mask_mod {mm.name!r} = {module.MASK_MOD_PREDICATE}, "
                         f"but {mm.ref} is now {mm.predicate}; regenerate with {emit}")
    return module


# ----------------------------------------------------------------------------------
# Input checks.
# ----------------------------------------------------------------------------------
def _check_device(tensors: dict) -> torch.device:
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        raise ValueError(f"all tensors must be on one device, got {devices}; move them with .to(device)")
    if first.type == "cpu" and not launch.interpreting():
        raise RuntimeError(
            "CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 in the environment before "
            "importing generated (or move the tensors to a CUDA device)")
    if first.type not in ("cpu", "cuda"):
        raise ValueError(f"tensors must be on a CUDA device (or CPU with TRITON_INTERPRET=1), got {first}")
    return first


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (batch, heads, seq, head_dim), got shape "
                             f"{tuple(t.shape)}; add the missing axes with unsqueeze")
    if q.dtype not in DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; supported: float16, bfloat16, float32 (convert with .to())")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; "
                        "convert them with .to(q.dtype)")
    B, Hq, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch (dim 0) and "
                         "head_dim (dim 3)")
    if min(B, Hq, Nq, D, Hkv, Nk) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv}) for GQA")
    if D > launch.MAX_HEAD_DIM:
        raise ValueError(f"head_dim {D} > {launch.MAX_HEAD_DIM} is not supported (the K/V tiles would not "
                         "fit on chip); split the heads")


def _check_mask(mask, shape4):
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}; use mask.bool() "
                        "or key_lengths / window for structured masks")
    try:
        # broadcastable *to* shape4: the broadcast of both must be shape4 itself
        ok = mask.dim() <= 4 and torch.broadcast_shapes(tuple(mask.shape), shape4) == shape4
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} is not broadcastable to (batch, q_heads, N_q, N_k) "
                         f"= {shape4}")


def _check_key_lengths(key_lengths, batch, n_k):
    if key_lengths.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"key_lengths must be an int32 or int64 tensor, got {key_lengths.dtype}")
    if tuple(key_lengths.shape) != (batch,):
        raise ValueError(f"key_lengths must have shape (batch,) = ({batch},), got {tuple(key_lengths.shape)}")
    if bool((key_lengths < 0).any()) or bool((key_lengths > n_k).any()):  # one sync, like the reference
        raise ValueError(f"key_lengths must lie in [0, N_k={n_k}], got {key_lengths.tolist()}")


def _check_window(window):
    try:
        left, right = window
        ok = all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in (left, right))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"window must be a pair (left, right) of non-negative ints (keys j with "
                         f"-left <= j - i <= right are attended), got {window!r}")
    return int(left), int(right)


# ----------------------------------------------------------------------------------
# The dense mask: expanded view and tile map (cached per mask tensor).
# ----------------------------------------------------------------------------------
_BLOCK_MAPS = WeakTensorKeyDictionary()

EMPTY, PARTIAL, FULL = 0, 1, 2


def block_map(mask: torch.Tensor, n_q: int, n_k: int, block_m: int, block_n: int) -> torch.Tensor:
    """int8 map ``(Bm, Hm, cdiv(n_q, block_m), cdiv(n_k, block_n))`` of a bool mask's tiles:
    0 = no True (the kernels skip the tile), 2 = all True inside ``[0, n_q) x [0, n_k)`` (no
    per-element mask), 1 = partial. ``Bm``/``Hm`` stay 1 where the mask broadcasts.

    Computed once per (mask, version, shape, block) and cached while the mask is alive, so
    every head, batch and later the backward pass reuse it.
    """
    key = (mask._version, n_q, n_k, block_m, block_n)
    per_mask = _BLOCK_MAPS.setdefault(mask, {})
    if key not in per_mask:
        m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        m = m.expand(m.shape[0], m.shape[1], n_q, n_k)
        tm, tn = math.ceil(n_q / block_m), math.ceil(n_k / block_n)
        pad = (0, tn * block_n - n_k, 0, tm * block_m - n_q)
        tiles = (m.shape[0], m.shape[1], tm, block_m, tn, block_n)
        attended = F.pad(m.to(torch.int32), pad).reshape(tiles).sum((3, 5))
        valid = F.pad(torch.ones((n_q, n_k), dtype=torch.int32, device=mask.device), pad)
        valid = valid.reshape(tm, block_m, tn, block_n).sum((1, 3))
        per_mask.clear()  # one live map per mask: an older version is dead weight
        per_mask[key] = torch.where(attended == 0, EMPTY, torch.where(attended == valid, FULL, PARTIAL)).to(torch.int8)
    return per_mask[key]


def _expand_mask(mask, shape4):
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)).expand(shape4)


# ----------------------------------------------------------------------------------
# The implementation behind the custom op (checked inputs only).
# ----------------------------------------------------------------------------------
def mask_arguments(module, q, k, *, alignment, mask, scale) -> dict:
    """The launch arguments a generated forward or backward ``module`` derives from the public
    ones: ``sm_scale``, the alignment ``shift``, and a dense ``mask`` expanded to
    ``(B, Hq, N_q, N_k)`` with its ``block_map`` (cached per mask: the backward reuses the
    forward's)."""
    B, Hq, Nq, D = q.shape
    Nk = k.shape[2]
    dense, tiles = None, None
    if mask is not None:
        dense = _expand_mask(mask, (B, Hq, Nq, Nk))
        tiles = block_map(mask, Nq, Nk, module.BLOCK_M, module.BLOCK_N).expand(B, Hq, -1, -1)
    sm_scale = float(scale) if scale is not None else 1.0 / math.sqrt(D)
    return {"sm_scale": sm_scale, "shift": alignment_shift(alignment, Nq, Nk), "mask": dense, "block_map": tiles}


def mask_mod_arguments(mask_args) -> dict:
    """``mask_mod_args`` for a module with a mask_mod compiled in (the packed int32 parameters)."""
    return {} if mask_args is None else {"mask_mod_args": mask_args}


def attention_forward(module, q, k, v, *, causal, alignment, window, key_lengths, mask, scale, tma=False,
                      mask_args=None):
    """Run a generated forward ``module`` on checked inputs: returns ``(out, lse)``.
    ``tma``: the opt-in Hopper TMA path (``generator.runtime.launch.tma_operands`` has its rules);
    ``mask_args``: a mask_mod's packed parameters (``MaskMod.pack``)."""
    return module.forward(q, k, v, causal=causal, window=window, key_lengths=key_lengths, tma=tma,
                          **mask_arguments(module, q, k, alignment=alignment, mask=mask, scale=scale),
                          **mask_mod_arguments(mask_args))


def check_inputs(q, k, v, *, causal=False, alignment="top_left", window=None, key_lengths=None, mask=None,
                 scale=None, block=DEFAULT_BLOCK, tma=False):
    """Every check of ``flash_attention``; returns the normalised ``window``."""
    _check_qkv(q, k, v)
    _check_device({"q": q, "k": k, "v": v, "mask": mask, "key_lengths": key_lengths})
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if not isinstance(tma, bool):
        raise TypeError(f"tma must be True or False, got {tma!r}")
    B, Hq, Nq, _ = q.shape
    if mask is not None:
        _check_mask(mask, (B, Hq, Nq, k.shape[2]))
    if key_lengths is not None:
        _check_key_lengths(key_lengths, B, k.shape[2])
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number (default 1/sqrt(head_dim)), got {scale!r}")
    _check_block(block)  # whether it is generated: checked by the op (no imports while tracing)
    return None if window is None else _check_window(window)


def check_mask_mod(mask_mod, mask_args, q, k) -> torch.Tensor | None:
    """``mask_args`` packed for the kernels (``MaskMod.pack``: every problem named), or None."""
    if mask_mod is None:
        if mask_args is not None:
            raise ValueError("mask_args given without mask_mod; pass mask_mod=prefix_lm (or another "
                             "spec.masks.mask_mod) with them")
        return None
    if not isinstance(mask_mod, MaskMod):
        raise TypeError(f"mask_mod must be a spec.masks.mask_mod (e.g. spec.masks.prefix_lm, or a function "
                        f"decorated with @mask_mod), got {type(mask_mod).__name__}")
    return mask_mod.pack(mask_args, q.shape[0], q.shape[2], k.shape[2], device=q.device)


def flash_attention(q, k, v, *, causal=False, alignment="top_left", window=None, key_lengths=None, mask=None,
                    scale=None, return_lse=False, block=DEFAULT_BLOCK, tma=False, mask_mod=None, mask_args=None):
    """Softmax attention through the generated FlashAttention-2 kernels.

    Semantics of ``spec.reference.attention``: ``q (B, Hq, N_q, D)``, ``k, v (B, Hkv, N_k, D)``
    with ``Hq % Hkv == 0`` (GQA/MQA, no K/V copies); ``causal`` with ``alignment`` top_left
    (query i sees keys j <= i) or bottom_right (j <= i + N_k - N_q); ``window=(left, right)``:
    keys with -left <= j - (i + shift) <= right; ``key_lengths`` (B,) ints: keys j >= length
    are padding; ``mask`` bool broadcastable to (B, Hq, N_q, N_k), True = attend; ``scale``
    defaults to 1/sqrt(D). All masks intersect.

    Returns ``out`` (q's dtype, zeros on rows with no key), or ``(out, lse)`` with
    ``return_lse=True`` (lse float32 (B, Hq, N_q), natural log, -inf on rows with no key).
    ``block=(B_r, B_c)`` picks the generated kernels (see ``generated.KERNELS``).
    Inputs: fp16, bf16 or fp32 (one dtype), D in 1..256, any strides (no copies are made),
    CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``.

    ``mask_mod`` (``spec.masks.prefix_lm``, ``chunked``, ``sink_window``, ``document`` or your own
    ``@mask_mod``) with its parameters ``mask_args`` (``{name: int | (B,) | (B, N) tensor}``) is
    AND-ed with every other mask; its tiles are classified at their corners (claim mask_mod_sound).

    ``tma=True`` (off by default: no GPU has measured it yet) moves Q, K, V and O of the
    forward by Hopper's TMA. It raises ``ValueError`` on a machine without TMA (a GPU older
    than sm_90, a triton without tensor descriptors); inputs whose layout TMA cannot read
    (strides not multiples of 16 bytes, a misaligned view) run the pointer path with a
    ``TmaFallbackWarning`` naming the tensor and the rule. The backward is unchanged.
    """
    window = check_inputs(q, k, v, causal=causal, alignment=alignment, window=window, key_lengths=key_lengths,
                          mask=mask, scale=scale, block=block, tma=tma)
    packed = check_mask_mod(mask_mod, mask_args, q, k)
    out, lse = flash_attention_op(q, k, v, mask, key_lengths, causal, alignment,
                                  None if window is None else list(window),
                                  None if scale is None else float(scale), int(block[0]), int(block[1]), tma,
                                  None if mask_mod is None else mask_mod.name, packed)
    return (out, lse) if return_lse else out


def softmax(x: torch.Tensor, dim: int = -1, *, block=DEFAULT_BLOCK) -> torch.Tensor:
    """Softmax along ``dim`` with seed 000's online kernels (1-pass when the row fits one block
    of ``B_c`` columns, else 2-pass). fp16/bf16/fp32; the result has x's dtype and shape."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; supported: float16, bfloat16, float32 (convert with .to())")
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension; x is a scalar")
    _check_device({"x": x})
    module = module_for("softmax", block)
    moved = x.movedim(dim, -1)  # IndexError names a bad dim
    rows = moved.reshape(-1, moved.shape[-1]).contiguous()  # the kernel reads rows with unit stride
    if rows.numel() == 0:
        return torch.empty_like(x)
    return module.softmax_rows(rows).reshape(moved.shape).movedim(-1, dim)


# registers torch.ops.flashproof.flash_attention (it calls back into this module at run time)
from generator.runtime.custom_op import flash_attention_op  # noqa: E402
