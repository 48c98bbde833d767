"""Input checks and normalisations of the public entry points (no kernels, no imports of them).

Every limit comes from ``spec.assumptions.ASSUMPTIONS`` (the inputs the claims are proved
for), never typed a second time here. An input outside an assumption is either normalised
by the rewrite its enforcement names (``normalise_scale``, ``normalise_window``) or
rejected with an error naming the limit and the fix. Checks on tensor *contents* (the
``key_lengths`` range) are an opt-in (``contract.checking_values``, ``FLASHPROOF_CHECK_VALUES=1``):
a call must not sync on data (a CUDA graph cannot capture it), so by default each such value is
clamped into its range on the device instead (``key_len_range``).
"""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Callable

import torch

from spec.assumptions import ASSUMPTIONS, DROPOUT_MASK_MAX, limit
from spec import rewrites
from spec.mask_mod import MaskMod
from spec.score_mods import ScoreMod

from generator.runtime import config, launch

DTYPES = tuple(getattr(torch, name) for name in limit("dtypes"))
MAX_HEAD_DIM = limit("head_dim_max")
DEFAULT_BLOCK = config.DEFAULT_BLOCK

#: keyword names of SDPA / FlashAttention / FlexAttention -> the flashproof spelling
FOREIGN_KEYWORDS = {
    "is_causal": "causal=True",
    "attn_mask": "mask= (a bool tensor, True = attend)",
    "softmax_scale": "scale=",
    "sm_scale": "scale=",
    "window_size": "window=(left, right)",
    "seqlens_k": "key_lengths=",
    "cache_seqlens": "key_lengths=",
    "enable_gqa": "nothing: GQA is automatic when q has a multiple of k's heads",
    "return_softmax_lse": "return_lse=True",
}


def reject_foreign_keywords(kwargs: dict, where: str) -> None:
    for name in kwargs:
        if name in FOREIGN_KEYWORDS:
            raise TypeError(f"{where}() got SDPA/FlashAttention keyword {name!r}; flashproof spells it "
                            f"{FOREIGN_KEYWORDS[name]}")
    if kwargs:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {sorted(kwargs)}")


def _as_int(value, what: str) -> int:
    """``value`` as a Python int: ints and numpy/torch integer scalars, never bool or float."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}") from None


_AUTO_OR = '"auto" or '


def check_block(block, auto: bool = False):
    """``block`` as a pair ``(B_r, B_c)`` of Python ints (numpy integers accepted), or ``"auto"``
    where ``auto`` allows it (``flash_attention`` picks the block per device and head dim)."""
    if auto and isinstance(block, str) and block == "auto":
        return block
    if isinstance(block, (str, bytes, torch.Tensor)) or not hasattr(block, "__len__") or len(block) != 2:
        raise ValueError(f"block must be {_AUTO_OR if auto else ''}a pair (B_r, B_c) of ints such as (64, 64), "
                         f"got {block!r}")
    try:
        return _as_int(block[0], "block[0]"), _as_int(block[1], "block[1]")
    except TypeError as e:
        raise ValueError(f"block must be {_AUTO_OR if auto else ''}a pair (B_r, B_c) of ints such as (64, 64), "
                         f"got {block!r} ({e})") from None


def check_bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_tensor(t, name: str, *, optional: bool = False, fix: str = ""):
    """The contract's ``is_tensor`` rule (an entry point's fast path may run it before ``contract.enforce``)."""
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{fix}, got {type(t).__name__}"
                        + (f"; wrap it with torch.tensor({name})" if isinstance(t, (list, tuple)) else ""))


def check_device(tensors: dict) -> torch.device:
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        raise ValueError(f"all tensors must be on one device, got {devices}; move them with .to(device)")
    if first.type == "cpu":
        if not launch.interpreting():
            raise RuntimeError(
                "CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 in the environment before "
                "importing generated (or move the tensors to a CUDA device)")
    if first.type not in ("cpu", "cuda"):
        raise ValueError(f"{', '.join(devices)} must be on a CUDA device (or CPU with TRITON_INTERPRET=1), got {first}")
    return first


# flash_attention's (and ring_attention's) q, k, v, one check per constraint: the declared rules
# (generator.runtime.contract) call them one by one, check_qkv all of them in that order
def check_rank4(name: str, t) -> None:
    if t.dim() != 4:
        raise ValueError(f"{name} must have rank 4 (batch, heads, seq, head_dim), got shape "
                         f"{tuple(t.shape)}; add the missing axes with unsqueeze")


def check_v_like_k(k, v, k_name: str = "k", v_name: str = "v") -> None:
    """v has k's shape but for its head dim D_v, which may differ (MLA: D_v ≠ D; checked on its own)."""
    if v.dim() != k.dim() or v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"{v_name} must have {k_name}'s shape {tuple(k.shape[:-1])} in every dim but the last (its own "
                         f"head_dim D_v), got {tuple(v.shape)}")


def check_qk_agree(q, k) -> None:
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch (dim 0) and "
                         "head_dim (dim 3)")


def check_some_heads(q, k) -> None:
    if q.shape[1] == 0 or k.shape[1] == 0:  # (B, H, N, D) and packed (total, H, D) alike
        raise ValueError(f"q and k need at least one head, got q {tuple(q.shape)}, k {tuple(k.shape)}")


def check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name)
        check_rank4(name, t)
    check_dtypes(q, k, v)
    check_v_like_k(k, v)
    check_qk_agree(q, k)
    check_some_heads(q, k)
    check_heads(q.shape[1], k.shape[1], q.shape[3], v.shape[3])
    check_seq_lens(q.shape[2], k.shape[2])


def check_supported_dtype(name: str, t, fp8: bool = False) -> None:
    """A supported dtype [dtypes] (``fp8``: an entry point with the FP8 forward, which also takes
    float8_e4m3fn / float8_e5m2 [fp8_descales])."""
    if t.dtype not in DTYPES and not (fp8 and t.dtype in launch.FP8_FORMATS):
        also = f" (or {', '.join(map(str, launch.FP8_FORMATS))}: the FP8 forward)" if fp8 else ""
        raise TypeError(f"{name} has dtype {t.dtype}; supported: {', '.join(limit('dtypes'))}{also} "
                        "(convert with .to())")


def check_dtypes(q, k, v, fp8: bool = False):
    """One supported dtype for q, k, v [dtypes]; ``fp8`` (``flash_attention``, ``flash_attention_varlen``):
    FP8 inputs take the FP8 forward's rule instead (``check_fp8_dtypes``)."""
    if any(t.dtype in launch.FP8_FORMATS for t in (q, k, v)):
        if not fp8:
            raise TypeError(f"q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: FP8 inputs run the FP8 forward of "
                            "flash_attention and flash_attention_varlen only (no backward); elsewhere convert them "
                            "with .to(torch.bfloat16) and multiply by their descales")
        return check_fp8_dtypes(q, k, v)
    check_supported_dtype("q", q)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; "
                        "convert them with .to(q.dtype)")


# ----------------------------------------------------------------------------------
# FP8 forward (issue 30): FlashAttention 3's descales. The building blocks of the declared rules of
# q_descale, k_descale, v_descale and out_dtype (generator.runtime.contract)
# ----------------------------------------------------------------------------------
#: the output dtypes the FP8 forward stores (default bf16, as FlashAttention 3)
FP8_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
FP8_NAMES = ("q_descale", "k_descale", "v_descale")


def fp8_mode(k, descales) -> bool:
    """Whether a call asks for the FP8 forward: K/V in an FP8 dtype, or any descale given (the contract
    then refuses descales on non-FP8 K/V)."""
    return (isinstance(k, torch.Tensor) and k.dtype in launch.FP8_FORMATS) or any(d is not None for d in descales)


def check_fp8_dtypes(q, k, v):
    """The FP8 forward's dtypes [fp8_descales]: k and v in one FP8 format (float8_e4m3fn or float8_e5m2);
    q in that format too (both products in fp8), or float16/bfloat16 (an fp8 K/V upcast exactly)."""
    names = ", ".join(str(t) for t in launch.FP8_FORMATS)
    if k.dtype not in launch.FP8_FORMATS or v.dtype != k.dtype:
        raise TypeError(f"FP8 inputs: k and v must share one FP8 dtype ({names}), got q {q.dtype}, k {k.dtype}, "
                        f"v {v.dtype}; quantise them (x / descale).to(torch.float8_e4m3fn) [fp8_descales]")
    if q.dtype != k.dtype and q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q has dtype {q.dtype} with FP8 k, v ({k.dtype}): q must be {k.dtype} (FP8 products) or "
                        "float16/bfloat16 (the mixed path: K and V upcast exactly); convert q [fp8_descales]")


def check_fp8_descale_kv(name: str, k) -> None:
    """A descale only with FP8 k, v [fp8_descales]."""
    if k.dtype not in launch.FP8_FORMATS:
        raise TypeError(f"{name} is given but k has dtype {k.dtype}: descales go with FP8 k, v "
                        f"({', '.join(map(str, launch.FP8_FORMATS))}); drop {name} or quantise k and v [fp8_descales]")


def check_fp8_descale_shape(name: str, d, B: int, Hkv: int) -> None:
    if tuple(d.shape) != (B, Hkv):
        raise ValueError(f"{name} must have shape (batch, kv_heads) = {(B, Hkv)} (FlashAttention 3's layout), got "
                         f"{tuple(d.shape)} [fp8_descales]")


def fp8_descale_flags(d):
    """A descale's value rule (eager): some element not finite and > 0."""
    return ~((d > 0) & torch.isfinite(d)).all()


def fp8_descale_error(name: str, d) -> str:
    return (f"{name} must be finite and > 0 (a descale multiplies the dequantised tensor), got min "
            f"{d.min().item()}, max {d.max().item()} [fp8_descales]")


def check_fp8_out_dtype(name: str, out_dtype) -> None:
    if out_dtype not in FP8_OUT_DTYPES:
        raise TypeError(f"{name} must be one of torch.bfloat16, torch.float16, torch.float32 (the FP8 output is "
                        f"stored in bf16 by default), got {out_dtype!r}")


def check_fp8_only(name: str, k) -> None:
    """``out_dtype`` is the FP8 forward's: other inputs give q's dtype."""
    if k.dtype not in launch.FP8_FORMATS:
        raise TypeError(f"{name} is the FP8 forward's (k, v in float8 with descales), got it for {k.dtype} inputs; "
                        "the output has q's dtype, convert it with .to()")


def check_not_fp8(name: str, value, on: bool = True) -> None:
    """A feature the FP8 forward does not combine with (yet): ``on`` whether the call uses it."""
    if on:
        raise ValueError(f"{name} is not supported with FP8 inputs (the FP8 forward takes masks only: causal, window, "
                         f"key_lengths, mask); run in bf16/fp16 (dequantise: x.to(torch.bfloat16) * descale) for "
                         f"{name}")


def check_gqa(Hq: int, Hkv: int, kv: str = "key/value heads", of: str = "q and k"):
    """GQA head counts [gqa_divides]."""
    if Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of {kv} ({Hkv}) for GQA, the head counts of {of} "
                         f"[{ASSUMPTIONS['gqa_divides'].name}]")


def check_grid_axes(name: str, batch: int, heads: int) -> None:
    """The batch and the query heads of a call fit CUDA's grid axes 2 and 1 (``spec.launch.head_grid``,
    ``decode_launch``: claim launch_grid) [grid_axes]; ``name`` the argument they are read from."""
    most = limit("grid_axes")
    for what, size, axis in (("batch entries", batch, 2), ("query heads", heads, 1)):
        if size > most:
            raise ValueError(f"{name}: {size} {what} are more than the {most} a CUDA launch grid's axis {axis} holds "
                             f"(the kernels launch one program per tile, head and batch entry); split the call into "
                             f"chunks of at most {most} {what} [grid_axes]")


def check_decode_rows(name: str, rows: int, splits: int) -> None:
    """Decode's axis 0 (row tiles x splits, rows per program at least 16) fits CUDA's 2^31 - 1 [grid_axes]:
    ``rows`` = GROUP x N_q query rows per KV head, ``splits`` the most splits the call can take."""
    from spec import launch as spec_launch

    programs, most = spec_launch.cdiv(rows, 16) * splits, spec_launch.GRID_AXIS0_MAX
    if programs > most:
        raise ValueError(f"{name}: {rows} query rows per KV head (GROUP x N_q) in {splits} splits take up to {programs} "
                         f"programs on the decode grid's axis 0, more than CUDA's {most} (spec.launch.GRID_AXIS0_MAX); "
                         f"pass fewer new tokens per call, or fewer splits (batch_invariant=False) [grid_axes]")


def check_head_dim(D: int, of: str = "q, k, v", bound: int | None = None, assumption: str = "head_dim_max"):
    """A head dim the kernels support [head_dim_max] (``bound``/``assumption``: another limit's, e.g.
    decode's pair ``decode_head_dim_max``)."""
    bound = MAX_HEAD_DIM if bound is None else bound
    if not 1 <= D <= bound:
        raise ValueError(f"head_dim {D} outside 1..{bound} is not supported ({of}: the K/V tiles would not "
                         f"fit on chip); split the heads [{assumption}]")


def check_heads(Hq: int, Hkv: int, D: int, Dv: int | None = None):
    """GQA head counts and head dims the kernels support [gqa_divides, head_dim_max]: q/k's ``D`` and
    v's ``Dv`` (None: ``D``), each in range on its own (they may differ: MLA)."""
    check_gqa(Hq, Hkv)
    check_head_dim(D)
    if Dv is not None:
        check_head_dim(Dv, "v")


def check_seq_lens(Nq: int, Nk: int):
    """Query and key lengths whose int32 tile bounds cannot overflow [seq_len_int32]."""
    if Nq + Nk > limit("seq_len_int32"):
        raise ValueError(f"q and k: N_q + N_k = {Nq + Nk} exceeds {limit('seq_len_int32')}: the kernels compute "
                         "tile bounds in int32 [seq_len_int32]; split the sequence (e.g. ring attention)")


def check_index_width(**tensors) -> None:
    """Every in-slice element offset ``(N-1)|stride_N| + (D-1)|stride_D|`` fits int32 (``index_int32``).
    A value may be a tensor, a shape (a freshly allocated, contiguous output of that shape) or a
    ``(shape, strides)`` pair (the rows of one slice as a kernel walks them: a varlen segment, a
    (batch, head) slice of a KV cache). Only the last two dims are summed: the kernels offset the
    batch and head (and a segment's or page's first row) in int64."""
    bound = limit("index_int32")
    for name, t in tensors.items():
        if t is None:
            continue
        if isinstance(t, torch.Tensor):
            shape, stride = tuple(t.shape), t.stride()
        elif len(t) == 2 and isinstance(t[0], tuple):
            shape, stride = t
        else:
            shape, stride = tuple(t), None
        if stride is None:  # contiguous: the last two dims have strides (D, 1)
            stride = (shape[-1], 1)
        if 0 in shape:
            continue
        reach = sum((size - 1) * abs(step) for size, step in zip(shape[-2:], stride[-2:]))
        if reach > bound:
            raise ValueError(f"{name} spans {reach} elements inside one (batch, head) slice, beyond the kernels' "
                             f"int32 offsets (at most {power_text(bound)}) [index_int32]; pass {name}.contiguous() "
                             "or split the sequence")


def check_mask(mask, shape4):
    check_tensor(mask, "mask")
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


def check_window(window):
    try:
        left, right = window
        left, right = _as_int(left, "window[0]"), _as_int(right, "window[1]")
        ok = left >= 0 and right >= 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"window must be a pair (left, right) of non-negative ints (keys j with "
                         f"-left <= j - i <= right are attended), got {window!r} [window_nonneg]")
    return left, right


def normalise_window(window, site, *tensors):
    """Each side clamped to ``N_q + N_k`` read off the tensors by ``site`` (one of
    ``spec.launch.dense_window``, ``varlen_window``, ``decode_window``: claim ``window_clamp`` proves
    the same keys are attended at each site, and the kernels' int32 bounds cannot overflow)
    [window_bounded]."""
    return None if window is None else list(site(window, *tensors))


def check_scale(scale):
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number (default 1/sqrt(head_dim)), got {type(scale).__name__} "
                        f"{scale!r}")
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number (default 1/sqrt(head_dim)), got {scale!r} [scale_finite]")
    return scale


def sm_scale_of(scale: float | None, head_dim: int) -> float:
    """The softmax scale a kernel gets: ``scale``, or ``1/sqrt(head_dim)`` when it is None."""
    return float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)


def normalise_scale(q: torch.Tensor, scale: float | None):
    """``(q', s')`` with ``s' > 0`` and the same scaled logits (``spec.rewrites.scale_sign``, claim
    ``scale_sign_rewrite``) [scale_positive]. Torch ops, so autograd carries dq back through it."""
    if scale is None:
        return q, None
    q, scale = rewrites.scale_sign(q, scale)
    return q, float(scale)


def check_score_mod(score_mod, score_args, batch, heads, device):
    """``(score_f, score_i)``: a user score_mod's packed parameters (``ScoreMod.pack`` for ``batch``
    entries, or segments, and ``heads`` query heads, on ``device``), or ``(None, None)`` without one;
    every problem names the parameter and the fix."""
    if score_mod is None:
        if score_args:
            raise ValueError("score_args given without score_mod; pass score_mod=<your @score_mod> with them")
        return None, None
    if not isinstance(score_mod, ScoreMod):
        raise TypeError(f"score_mod must be a spec.score_mods.score_mod (a function decorated with @score_mod), "
                        f"got {type(score_mod).__name__}")
    return score_mod.pack(score_args, int(batch), int(heads), device=device)


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


def check_softcap(softcap) -> float:
    """``softcap``: a finite number > 0, as a float."""
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real) or not 0 < softcap < math.inf:
        raise ValueError(f"softcap must be a finite number > 0 (Gemma 2 uses 50.0 for attention), got "
                         f"{softcap!r}; pass softcap=None for no cap")
    return float(softcap)


def check_float32(name: str, t) -> None:
    """A score modification's tensor (``alibi_slopes``, ``sinks``): float32, FlashAttention's convention."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"{name} must be float32 (FlashAttention's convention), got {t.dtype}; "
                        f"pass {name}.float()")


def check_shape_in(name: str, t, shapes, B: int, Hq: int) -> None:
    if tuple(t.shape) not in shapes:
        want = " or ".join(str(sh) for sh in shapes)
        raise ValueError(f"{name} must have shape {want} (Hq = {Hq} query heads, B = {B}), got {tuple(t.shape)}")


def check_score_mods(q, *, softcap=None, alibi_slopes=None, sinks=None):
    """The checks of the score modifications (issue 15), with FlashAttention's names: ``softcap``
    a finite number > 0, ``alibi_slopes`` float32 ``(Hq,)`` or ``(B, Hq)``, ``sinks`` float32
    ``(Hq,)``, on q's device. Returns ``softcap`` as a float (or None)."""
    B, Hq = q.shape[:2]
    softcap = None if softcap is None else check_softcap(softcap)
    for name, t, shapes in (("alibi_slopes", alibi_slopes, ((Hq,), (B, Hq))), ("sinks", sinks, ((Hq,),))):
        if t is None:
            continue
        check_float32(name, t)
        check_shape_in(name, t, shapes, B, Hq)
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it with .to(q.device)")
    return softcap


# ----------------------------------------------------------------------------------
# Attention dropout (issue 29)
# ----------------------------------------------------------------------------------
def power_text(n: int) -> str:
    """``n`` as ``2^e`` when it is a power of two, as ``2^e - 1`` when it is one past a large one (how errors and the
    README write such limits), else its digits."""
    if n > 0 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    if n >= 1023 and (n + 1) & n == 0:
        return f"2^{n.bit_length()} - 1"
    return str(n)


def check_dropout(dropout_p, return_dropout_mask, elements: int) -> float:
    """``dropout_p`` as a float in ``[0, 1)`` [dropout_p_range]; with dropout on, ``elements`` =
    B·Hq·N_q·N_k within the Philox counter's int64 range [dropout_counter]; ``return_dropout_mask``
    a bool, for at most ``DROPOUT_MASK_MAX`` elements."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a real number in [0, 1), got {type(dropout_p).__name__} {dropout_p!r}")
    p = float(dropout_p)
    if not 0.0 <= p < limit("dropout_p_range"):
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r} [dropout_p_range]: p = 1 would drop every "
                         "attention weight (the output is 0 and the rescale 1/(1 - p) infinite); pass p < 1, or "
                         "dropout_p=0.0 for no dropout")
    check_bool(return_dropout_mask, "return_dropout_mask")
    if p > 0 and elements > limit("dropout_counter"):
        raise ValueError(f"dropout_p > 0 on B·Hq·N_q·N_k = {elements} elements exceeds "
                         f"{power_text(limit('dropout_counter'))} "
                         "[dropout_counter]: the Philox counter of (b, h, i, j) must fit int64; split the batch")
    if return_dropout_mask and elements > DROPOUT_MASK_MAX:
        raise ValueError(f"return_dropout_mask=True would write a {elements}-element mask (B·Hq·N_q·N_k, one byte "
                         f"each; at most {DROPOUT_MASK_MAX}): it is meant for small problems; pass "
                         "return_dropout_mask=False")
    return p


def draw_philox(device: torch.device) -> torch.Tensor:
    """This call's dropout randomness: int64 ``(2,)``, a Philox seed and a counter offset in
    ``[0, 2^62)`` drawn from torch's default generator of ``device`` (``torch.manual_seed``
    reproduces a run; each call draws anew, so two calls drop different entries). A tensor on the
    device: no host sync, and ``torch.compile`` traces the draw."""
    return torch.randint(0, limit("dropout_counter"), (2,), dtype=torch.int64, device=device)


# ----------------------------------------------------------------------------------
# The small tensors and the decode path's values (issue 23)
# ----------------------------------------------------------------------------------
def check_num_splits(num_splits) -> int:
    """``num_splits``: an int (numpy / torch integer scalars accepted, never bool) in
    ``0..num_splits_max``."""
    num_splits = _as_int(num_splits, "num_splits")
    if not 0 <= num_splits <= limit("num_splits_max"):
        raise ValueError(f"num_splits must be an int in 0..{limit('num_splits_max')} (0: the heuristic), got "
                         f"{num_splits!r} [num_splits_max]")
    return num_splits


def cache_arguments(cache_seqlens, block_table):
    """``(cache_seqlens, block_table)`` as the decode kernel reads them: contiguous int32 (their
    values already clamped into range by the declared value rules, ``contract.keep_values``)."""
    from generator.runtime import contract  # contract imports this module

    if cache_seqlens.dtype != torch.int32 or not cache_seqlens.is_contiguous():
        cache_seqlens = cache_seqlens.to(torch.int32).contiguous()
    return cache_seqlens, contract.unit_stride("flash_attention_with_kvcache", "block_table", block_table)


# ----------------------------------------------------------------------------------
# flash_attention_varlen (packed batches)
# ----------------------------------------------------------------------------------
#: what an omitted max_seqlen hint is passed to the op as: computed from the offsets
COMPUTE = -1


def check_rank3_packed(name: str, t) -> None:
    """``flash_attention_varlen``'s packed ``(total, H, D)`` tensors."""
    if t.dim() != 3:
        raise ValueError(f"{name} must have rank 3 (total_tokens, heads, head_dim) in a packed batch, got shape "
                         f"{tuple(t.shape)}; for a padded (batch, heads, seq, head_dim) batch use flash_attention")


def check_packed_qk_agree(q, k) -> None:
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in head_dim (dim 2)")


def check_cu_seqlens(name, cu):
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be an int32 torch.Tensor of B + 1 offsets, got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} must be int32 (FlashAttention's layout), got {cu.dtype}; convert with "
                        f"{name}.to(torch.int32)")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must have shape (B + 1,) with B >= 1 segments, got {tuple(cu.shape)}")


def check_hint(name: str, hint: int, real: int) -> int:
    """A ``max_seqlen`` hint against the longest real segment: ``real`` where it is ``COMPUTE``; a hint
    below it is refused (a smaller grid would silently drop that segment's last rows)."""
    if hint == COMPUTE or hint is None:
        return real
    if hint < real:
        raise ValueError(f"{name}={hint} is smaller than the longest segment ({real}); pass {real} or more, "
                         f"or None to compute it")
    return hint


def check_max_seqlen(name, value):
    """An int (Python, numpy or a 0-d integer tensor's ``operator.index``) >= 0, or ``COMPUTE``."""
    if value is None:
        return COMPUTE
    try:
        hint = operator.index(value)
    except TypeError:
        hint = None
    if hint is None or isinstance(value, bool) or hint < 0:
        raise ValueError(f"{name} must be None (computed from the offsets) or an int >= 0, got {value!r}")
    return int(hint)


# ----------------------------------------------------------------------------------
# merge_state / merge_states
# ----------------------------------------------------------------------------------
def check_merge_o(name: str, o: torch.Tensor, lead: int = 0) -> None:
    """A partial output of ``merge_state(s)``: a supported dtype, ``(..., D)`` (``lead`` leading split
    axes before), ``D`` within the merge kernel's tile [dtypes, merge_head_dim_max]."""
    check_supported_dtype(name, o)
    if o.dim() < 1 + lead:
        raise ValueError(f"{name} must have shape {'(S, ..., head_dim)' if lead else '(..., head_dim)'}, got "
                         f"{tuple(o.shape)}")
    if o.shape[-1] > limit("merge_head_dim_max"):
        raise ValueError(f"{name} has head_dim {o.shape[-1]} > {limit('merge_head_dim_max')}: not supported by the "
                         "merge kernel; split the last axis [merge_head_dim_max]")


def check_merge_lse(name: str, lse: torch.Tensor, o_name: str, o: torch.Tensor) -> None:
    """The lse of a partial output: float32, natural log, ``o``'s shape without its head dim."""
    if lse.dtype != torch.float32:
        raise TypeError(f"{name} must be float32 (natural-log LSE), got {lse.dtype}; convert with "
                        ".float() (FlashInfer's base-2 lse: multiply by math.log(2) first)")
    if tuple(lse.shape) != tuple(o.shape[:-1]):
        raise ValueError(f"{name} must have {o_name}'s shape without its last (head_dim) axis: {o_name} "
                         f"{tuple(o.shape)} needs {name} {tuple(o.shape[:-1])}, got {tuple(lse.shape)}")


# ----------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------
def check_not_scalar(name: str, x) -> None:
    """``softmax``'s x has at least one dimension (a ``dim`` out of range raises ``IndexError`` at the move)."""
    if x.dim() == 0:
        raise ValueError(f"softmax needs at least one dimension; {name} is a scalar")


# ----------------------------------------------------------------------------------
# Rules: the building blocks of the declared contract (``generator.runtime.contract``)
# ----------------------------------------------------------------------------------
#: the stages of ``contract.enforce``, in order: what an argument is (type, dtype, rank), its relations
#: to the others (shapes, devices, pairs), the values of its elements (clamped on the device; checked, one
#: host sync, only as the opt-in ``contract.checking_values``);
#: ``IN_OP``: a value the op itself must read on the host, also under ``torch.compile`` (varlen's
#: offsets size its grid): declared here, checked by the op with the same function, not by ``enforce``;
#: ``PEERS``: the same on every rank of the call's process group (``agree``: ``ring_attention``), compared
#: by ``contract.enforce`` in one all_gather after every local rule, so every rank raises the same error
KIND, RELATION, VALUES, IN_OP, PEERS = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Rule:
    """One declared constraint of one argument (``contract.Arg.rules``).

    ``check(name, value, ctx)`` raises the error that names the argument, the problem and the fix
    (``ctx``: every argument of the call by name, as checked so far). A ``VALUES`` rule reads the
    tensor's elements: ``flags(value, ctx)`` is a 0-d bool tensor, True when violated, computed on
    the device with every other value rule of the call and read back in one sync
    (``contract.check_values``); only then ``check`` runs (it may sync: it is the error path). That
    sync is an opt-in (``contract.checking_values``; never under ``torch.compile``): by default a
    call reads no value on the host, and ``clamp(value, ctx)`` (device operations only) gives the
    value the call goes on with, inside the rule's range, so no read leaves the tensors it indexes
    (``contract.keep_values``); ``clamp=None``: the range is kept further down (``kept`` says
    where), or, for a rule no clamp can keep, only the opt-in check holds it (``kept`` says what
    happens without). ``when(ctx)``: the calls the rule applies to; ``convert(value,
    ctx)``: the value the call goes on with (it checks too: ``enforce`` calls it instead of ``check``);
    ``bad(ctx, name)``: ``{argument: value}`` changes to a valid
    call that break this rule (the contract test derives one refused input per rule from it; a
    ``PEERS`` rule's changes are made on one rank only). A ``PEERS`` rule (``agree``) has a ``fact(value,
    ctx)``: ``width`` ints, what every rank must share; its ``check(name, every, ctx)`` gets every rank's."""
    text: str
    check: Callable
    stage: int = RELATION
    flags: Callable | None = None
    when: Callable | None = None
    convert: Callable | None = None
    bad: Callable | None = None
    clamp: Callable | None = None
    kept: str = ""
    fact: Callable | None = None
    width: int = 0


def _shape(t) -> tuple:
    return tuple(getattr(t, "shape", ())) or type(t).__name__


def _describe(t) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else f"{type(t).__name__} {t!r}"


def _raise(kind, message: str):
    raise kind(message)


def _other_dtype(t: torch.Tensor, allowed) -> torch.Tensor:
    """``t`` in a dtype outside ``allowed`` (a rule's refused input)."""
    for dt in (torch.float64, torch.float16, torch.float32, torch.int16, torch.int32):
        if dt not in allowed:
            return t.to(dt)
    raise AssertionError(allowed)


def is_tensor(fix: str = "") -> Rule:
    def check(name, v, ctx):
        check_tensor(v, name, fix=fix)
    return Rule("a torch.Tensor", check, KIND, bad=lambda c, n: {n: [1.0, 2.0]})


def is_bool() -> Rule:
    return Rule("True or False (not 1)", lambda n, v, c: check_bool(v, n), KIND, bad=lambda c, n: {n: 1})


def rank(r: int, layout: str, kind=ValueError) -> Rule:
    def check(name, v, ctx):
        if v.dim() != r:
            raise kind(f"{name} must have rank {r} {layout}, got shape {tuple(v.shape)}")
    return Rule(f"rank {r}", check, KIND, bad=lambda c, n: {n: c[n][None]})


def dtype_in(dtypes, fix: str, kind=TypeError) -> Rule:
    def check(name, v, ctx):
        if v.dtype not in dtypes:
            raise kind(f"{name} has dtype {v.dtype}; {fix}")
    return Rule("dtype " + "/".join(str(d).replace("torch.", "") for d in dtypes), check, KIND,
                bad=lambda c, n: {n: _other_dtype(c[n], dtypes)})


def same_dtype(other: str, kind=TypeError) -> Rule:
    def check(name, v, ctx):
        if v.dtype != ctx[other].dtype:
            raise kind(f"{name} has dtype {v.dtype} but {other} has {ctx[other].dtype}; convert it with "
                       f".to({other}.dtype)")
    return Rule(f"{other}'s dtype", check, KIND,
                bad=lambda c, n: {n: c[n].to(torch.float64 if c[n].dtype != torch.float64 else torch.float32)})


def shape_is(expected: Callable, text: str, fix: str = "", bad=None) -> Rule:
    """``expected(ctx)``: the shape the argument must have (``text`` says it in letters)."""
    def check(name, v, ctx):
        want = tuple(expected(ctx))
        if tuple(v.shape) != want:
            raise ValueError(f"{name} must have shape {text} = {want}, got {tuple(v.shape)}{fix}")

    def grown(c, n):  # the last dim one longer
        t = c[n]
        return {n: torch.cat([t, t.narrow(-1, 0, 1)], -1) if t.dim() and t.shape[-1] else t[None]}
    return Rule(f"shape {text}", check, bad=bad or grown)


def pair(other: str, why: str) -> Rule:
    """Given only together with ``other`` (``k`` and ``v``, ``rotary_cos`` and ``rotary_sin``)."""
    def check(name, v, ctx):
        if ctx[other] is None:
            raise ValueError(f"{name} given without {other}: pass both {name} and {other} ({why}) or neither")
    return Rule(f"with {other}", check, KIND, bad=lambda c, n: {other: None})


def requires(other: str, why: str, bad: Callable | None = None) -> Rule:
    def check(name, v, ctx):
        if ctx[other] is None:
            raise ValueError(f"{name} needs {other}: {why}")
    return Rule(f"needs {other}", check, bad=bad or (lambda c, n: {other: None}))


def excludes(other: str, why: str, bad: Callable) -> Rule:
    def check(name, v, ctx):
        if ctx[other] is not None:
            raise ValueError(f"{name} with {other}: {name} {why}")
    return Rule(f"not with {other}", check, when=lambda ctx: ctx[other] is not None, bad=bad)


def same_device(first: str) -> Rule:
    """On the device of ``first`` (the entry point's leading tensor, checked by ``supported_device``)."""
    def check(name, v, ctx):
        if v.device != ctx[first].device:
            raise ValueError(f"{name} is on {v.device} but {first} is on {ctx[first].device}; move it with "
                             f".to({first}.device)")
    return Rule(f"on {first}'s device", check, bad=lambda c, n: {n: c[n].to("meta")})


def supported_device() -> Rule:
    def check(name, v, ctx):
        check_device({name: v})
    return Rule("a CUDA device (CPU under TRITON_INTERPRET=1)", check, KIND, bad=lambda c, n: {n: c[n].to("meta")})


def no_grad(entry: str, fix: str) -> Rule:
    """Inference only: a tensor that requires a gradient (with grad mode on) is refused."""
    def check(name, v, ctx):
        if v.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(f"{entry} is inference only and has no backward, but {name} requires grad: {fix}")
    return Rule("no gradient (inference only)", check, KIND,
                bad=lambda c, n: {n: c[n].detach().clone().requires_grad_() if c[n].is_floating_point() else None})


def values(text: str, flags: Callable, error: Callable, when=None, bad=None, clamp=None, kept: str = "") -> Rule:
    """A rule on a tensor's elements (``Rule``: checked only as an opt-in, one sync for the call;
    else ``clamp``ed on the device); ``error(name, value, ctx)`` is the message, built on the error
    path. A rule without ``clamp`` says in ``kept`` what holds its range without the check."""
    if clamp is None and not kept:
        raise ValueError(f"value rule {text!r}: declare its device clamp, or say in kept= what holds without it")

    def check(name, v, ctx):
        raise ValueError(error(name, v, ctx))
    return Rule(text, check, VALUES, flags=flags, when=when, bad=bad, clamp=clamp, kept=kept)


def in_op(text: str, fn: Callable, bad: Callable, when=None) -> Rule:
    """A rule the op checks (``IN_OP``): ``fn(name, value, ctx)`` is what it runs, named here so the
    declaration lists it and the contract test derives its refused input."""
    return Rule(text + " (checked by the op)", fn, IN_OP, when=when, bad=bad)


def agree(text: str, fact: Callable, width: int, show: Callable, fix: str, bad: Callable) -> Rule:
    """The same on every rank of the call's process group (``PEERS``): ``fact(value, ctx)``, ``width``
    ints (``show(fact)`` says it in words), is gathered from every rank with every other ``PEERS`` rule
    of the call (``contract.enforce``: one all_gather), and ``check`` sees them all, so every rank raises
    the same error, naming the first rank that differs from rank 0 and the ``fix``."""
    def check(name, every, ctx):
        for r, theirs in enumerate(every):
            if theirs != every[0]:
                raise ValueError(f"{name} must be alike on every rank of the process group ({text}), but rank {r} "
                                 f"passes {show(theirs)} and rank 0 {show(every[0])}; {fix}")
    return Rule(f"alike on every rank: {text} (one all_gather)", check, PEERS, bad=bad, fact=fact, width=width)


def call(text: str, fn: Callable, stage: int = RELATION, convert=None, when=None, bad=None) -> Rule:
    """A rule whose check is one of this module's functions: ``fn(name, value, ctx)`` raises."""
    return Rule(text, fn, stage, when=when, convert=convert, bad=bad)
