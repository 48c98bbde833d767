"""Input checks and normalisations of the public entry points (no kernels, no imports of them).

Every limit comes from ``spec.assumptions.ASSUMPTIONS`` (the inputs the claims are proved
for), never typed a second time here. An input outside an assumption is either normalised
by the rewrite its enforcement names (``normalise_scale``, ``normalise_window``) or
rejected with an error naming the limit and the fix. Checks on tensor *contents* (the
``key_lengths`` range) run only in eager mode: a traced graph must not sync on data, and
the op clamps the lengths on the device instead (``key_len_range``).
"""

from __future__ import annotations

import math
import numbers
import operator

import torch

from spec.assumptions import ASSUMPTIONS, limit
from spec import launch as spec_launch
from spec import rewrites
from spec.mask_mod import MaskMod
from spec.masks import ALIGNMENTS

from generator.runtime import config, contract, launch

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


def check_tensor(t, name: str, *, optional: bool = False):
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}"
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
        raise ValueError(f"tensors must be on a CUDA device (or CPU with TRITON_INTERPRET=1), got {first}")
    return first


def check_qkv(q, k, v, *, fp8=False):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name)
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (batch, heads, seq, head_dim), got shape "
                             f"{tuple(t.shape)}; add the missing axes with unsqueeze")
    check_dtypes(q, k, v, fp8=fp8)
    B, Hq, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if v.shape[:3] == k.shape[:3] and v.shape[3] != Dk:
        raise ValueError(f"v has head_dim {v.shape[3]} but q and k have {Dk}: a value head dim that differs "
                         "from q/k's (MLA style) is not supported; pad v to k's head_dim (and slice the output)")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch (dim 0) and "
                         "head_dim (dim 3)")
    if Hq == 0 or Hkv == 0:
        raise ValueError(f"q and k need at least one head, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    check_heads(Hq, Hkv, D)
    check_seq_lens(Nq, Nk)


def check_dtypes(q, k, v, *, fp8=False):
    """One supported dtype for q, k, v [dtypes]; ``fp8``: the FP8 forward's rule instead (``check_fp8_dtypes``)."""
    if fp8:
        return check_fp8_dtypes(q, k, v)
    if q.dtype in launch.FP8_FORMATS or k.dtype in launch.FP8_FORMATS:
        raise TypeError(f"q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: FP8 inputs run the FP8 forward of "
                        "flash_attention, flash_attention_varlen and flash_attention_with_kvcache only (no backward); "
                        "elsewhere convert them with .to(torch.bfloat16) and multiply by their descales")
    if q.dtype not in DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; supported: {', '.join(limit('dtypes'))} (convert with .to())")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; "
                        "convert them with .to(q.dtype)")


# ----------------------------------------------------------------------------------
# FP8 forward (issue 30): FlashAttention 3's descales
# ----------------------------------------------------------------------------------
#: the output dtypes the FP8 forward stores (default bf16, as FlashAttention 3)
FP8_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def fp8_mode(k, descales) -> bool:
    """Whether a call runs the FP8 forward: K/V in an FP8 dtype, or any descale given."""
    return (isinstance(k, torch.Tensor) and k.dtype in launch.FP8_FORMATS) or any(d is not None for d in descales)


def check_fp8_dtypes(q, k, v):
    """The FP8 forward's dtypes [fp8_descales]: k and v in one FP8 format (float8_e4m3fn or float8_e5m2);
    q in that format too (both products in fp8), or float16/bfloat16 (an fp8 K/V cache upcast exactly)."""
    names = ", ".join(str(t) for t in launch.FP8_FORMATS)
    if k.dtype not in launch.FP8_FORMATS or v.dtype != k.dtype:
        raise TypeError(f"descales were given, so k and v must share one FP8 dtype ({names}), got {k.dtype}, "
                        f"{v.dtype}; quantise them (x / descale).to(torch.float8_e4m3fn) or drop the descales "
                        "[fp8_descales]")
    if q.dtype != k.dtype and q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q has dtype {q.dtype} with FP8 k, v ({k.dtype}): q must be {k.dtype} (FP8 products) or "
                        "float16/bfloat16 (the mixed path: K and V upcast exactly); convert q [fp8_descales]")


def check_fp8_descales(descales, B: int, Hkv: int, device) -> tuple:
    """``(q_descale, k_descale, v_descale)``: each None (1, as FlashAttention 3) or a float32 ``(B, Hkv)``
    tensor of finite values > 0 [fp8_descales] (an eager check: one host sync), any strides; returned
    checked, None as ones (the entry point gives them unit stride by the contract: one stride pair)."""
    out = []
    for name, d in zip(("q_descale", "k_descale", "v_descale"), descales):
        if d is None:
            out.append(torch.ones((B, Hkv), dtype=torch.float32, device=device))
            continue
        check_tensor(d, name)
        if d.dtype != torch.float32 or tuple(d.shape) != (B, Hkv):
            raise TypeError(f"{name} must be a float32 tensor of shape (batch, kv_heads) = {(B, Hkv)} "
                            f"(FlashAttention 3's layout), got {d.dtype} {tuple(d.shape)} [fp8_descales]")
        if d.device != device:
            raise ValueError(f"{name} is on {d.device}, q on {device}; move it with .to(q.device)")
        if not torch.compiler.is_compiling() and d.numel() and not bool(((d > 0) & torch.isfinite(d)).all()):
            raise ValueError(f"{name} must be finite and > 0 (a descale multiplies the dequantised tensor), got "
                             f"min {d.min().item()}, max {d.max().item()} [fp8_descales]")
        out.append(d)
    return tuple(out)


def check_fp8_call(out_dtype, scale, *, requires_grad, unsupported: dict):
    """The FP8 forward's other rules: no backward, an out dtype it stores, a positive scale, and the
    features it does not combine with (``unsupported``: name -> whether the call uses it)."""
    if requires_grad:
        raise RuntimeError("FP8 has no backward (as FlashAttention 3): q, k, v or a descale requires grad; run "
                           "the FP8 forward under torch.no_grad() (or .detach() the inputs), and train in bf16/fp16")
    if out_dtype is not None and out_dtype not in FP8_OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of torch.bfloat16, torch.float16, torch.float32 (FP8 output is "
                        f"stored in bf16 by default), got {out_dtype}")
    if scale is not None and not scale > 0:
        raise ValueError(f"scale must be > 0 with FP8 inputs, got {scale}; fold a sign into q before quantising")
    used = [name for name, on in unsupported.items() if on]
    if used:
        raise NotImplementedError(f"the FP8 forward does not support {', '.join(used)} yet; run in bf16/fp16 "
                                  "(dequantise: x.to(torch.bfloat16) * descale) for those")


def check_heads(Hq: int, Hkv: int, D: int):
    """GQA head counts and a head dim the kernels support [gqa_divides, head_dim_max]."""
    if Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv}) for GQA "
                         f"[{ASSUMPTIONS['gqa_divides'].name}]")
    if not 1 <= D <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim {D} outside 1..{MAX_HEAD_DIM} is not supported (the K/V tiles would not "
                         "fit on chip); split the heads [head_dim_max]")


def check_seq_lens(Nq: int, Nk: int):
    """Query and key lengths whose int32 tile bounds cannot overflow [seq_len_int32]."""
    if Nq + Nk > limit("seq_len_int32"):
        raise ValueError(f"N_q + N_k = {Nq + Nk} exceeds {limit('seq_len_int32')} (2^29): the kernels compute "
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
                             f"int32 offsets (at most {bound}, 2^31 - 1) [index_int32]; pass {name}.contiguous() "
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


def check_key_lengths(key_lengths, batch, n_k):
    check_tensor(key_lengths, "key_lengths")
    if key_lengths.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"key_lengths must be an int32 or int64 tensor, got {key_lengths.dtype}")
    if tuple(key_lengths.shape) != (batch,):
        raise ValueError(f"key_lengths must have shape (batch,) = ({batch},), got {tuple(key_lengths.shape)}")
    if torch.compiler.is_compiling():
        return  # no data-dependent check in a traced graph: the op clamps to [0, N_k] on the device
    lengths = key_lengths.tolist()  # the one sync: B ints read back (fewer device ops than a reduction)
    if lengths and (min(lengths) < 0 or max(lengths) > n_k):
        raise ValueError(f"key_lengths must lie in [0, N_k={n_k}], got {key_lengths.tolist()} [key_len_range]")


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


def check_inputs(q, k, v, *, causal=False, alignment="top_left", window=None, key_lengths=None, mask=None,
                 scale=None, block="auto", tma="auto", return_lse=False, fp8=False):
    """Every check of ``flash_attention``; returns ``(window, scale, block)`` normalised (``fp8``: the
    FP8 forward's dtype rule)."""
    check_qkv(q, k, v, fp8=fp8)
    check_tensor(mask, "mask", optional=True)
    check_tensor(key_lengths, "key_lengths", optional=True)
    check_device({"q": q, "k": k, "v": v, "mask": mask, "key_lengths": key_lengths})
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    check_bool(causal, "causal")
    if not isinstance(tma, bool) and not (isinstance(tma, str) and tma == "auto"):
        raise TypeError(f"tma must be \"auto\", True or False, got {tma!r}")
    check_bool(return_lse, "return_lse")
    B, Hq, Nq, _ = q.shape
    Nk = k.shape[2]
    if mask is not None:
        check_mask(mask, (B, Hq, Nq, Nk))
    if key_lengths is not None:
        check_key_lengths(key_lengths, B, Nk)
    check_index_width(q=q, k=k, v=v, mask=mask, out=tuple(q.shape))
    scale = check_scale(scale)
    block = check_block(block, auto=True)  # whether it is generated: checked by the op (no imports while tracing)
    window = None if window is None else normalise_window(check_window(window), spec_launch.dense_window, q, k)
    return window, scale, block


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


def check_score_mod_scale(scale, *, softcap=None, alibi_slopes=None):
    """[score_mod_scale] A softcap or ALiBi with ``0 < |scale| < 2^-64`` is refused: the kernels
    carry the modified score as ``c/scale`` or ``slope/scale`` in fp32 (claim score_mod_invariant's
    units), which overflows for so small a scale."""
    least = limit("score_mod_scale")
    if scale is None or (softcap is None and alibi_slopes is None) or scale == 0 or abs(scale) >= least:
        return
    which = " and ".join(name for name, v in (("softcap", softcap), ("alibi_slopes", alibi_slopes)) if v is not None)
    raise ValueError(f"scale={scale!r} with {which}: |scale| < 2^-64 is outside score_mod_scale (the kernels carry "
                     f"the modified score as c/scale or slope/scale in fp32, which overflows); the unmodified "
                     f"logits scale·q·k are below 2^-64·|q·k| there, so pass scale=0 for the same result "
                     f"(logits 0, then the cap and the bias)")


def check_score_mods(q, *, softcap=None, alibi_slopes=None, sinks=None):
    """The checks of the score modifications (issue 15), with FlashAttention's names: ``softcap``
    a finite number > 0, ``alibi_slopes`` float32 ``(Hq,)`` or ``(B, Hq)``, ``sinks`` float32
    ``(Hq,)``, on q's device. Returns ``softcap`` as a float (or None)."""
    B, Hq = q.shape[:2]
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real) or not 0 < softcap < math.inf:
            raise ValueError(f"softcap must be a finite number > 0 (Gemma 2 uses 50.0 for attention), got "
                             f"{softcap!r}; pass softcap=None for no cap")
        softcap = float(softcap)
    for name, t, shapes in (("alibi_slopes", alibi_slopes, ((Hq,), (B, Hq))), ("sinks", sinks, ((Hq,),))):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32 (FlashAttention's convention), got {t.dtype}; "
                            f"pass {name}.float()")
        if tuple(t.shape) not in shapes:
            want = " or ".join(str(sh) for sh in shapes)
            raise ValueError(f"{name} must have shape {want} (Hq = {Hq} query heads, B = {B}), got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it with .to(q.device)")
    return softcap


# ----------------------------------------------------------------------------------
# Attention dropout (issue 29)
# ----------------------------------------------------------------------------------
#: ``return_dropout_mask`` writes one byte per (b, h, i, j): for small problems (tests, inspection)
DROPOUT_MASK_MAX = 2**28


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
        raise ValueError(f"dropout on B·Hq·N_q·N_k = {elements} elements exceeds 2^62 [dropout_counter]: the Philox "
                         "counter of (b, h, i, j) must fit int64; split the batch")
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


def check_cache_values(cache_seqlens, block_table, capacity: int, page_size: int, num_pages: int) -> None:
    """The decode path's value checks, one host sync in eager mode: every length in ``[0, capacity]``
    [cache_len_range] and every page id a sequence reads in ``[0, num_pages)`` [page_ids_range].
    Under ``torch.compile`` nothing is read here: ``cache_arguments`` clamps on the device."""
    if torch.compiler.is_compiling():
        return
    if block_table is None:
        lengths = cache_seqlens.tolist()  # the one sync: B ints read back (fewer device ops than a reduction)
        if lengths and (min(lengths) < 0 or max(lengths) > capacity):
            raise ValueError(f"cache_seqlens must lie in [0, {capacity}] (the cache's capacity in keys), got "
                             f"{lengths} [cache_len_range]")
        return
    bad_len = (cache_seqlens < 0) | (cache_seqlens > capacity)
    pages_used = (cache_seqlens.clamp(0, capacity) + page_size - 1) // page_size
    used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages_used[:, None]
    bad_page = used & ((block_table < 0) | (block_table >= num_pages))
    flags = torch.stack([bad_len.any(), bad_page.any()]).tolist()  # the one sync
    if flags[0]:
        raise ValueError(f"cache_seqlens must lie in [0, {capacity}] (the cache's capacity in keys), got "
                         f"{cache_seqlens.tolist()} [cache_len_range]")
    if flags[1]:
        b, p = (int(i) for i in bad_page.nonzero()[0])
        raise ValueError(f"block_table[{b}, {p}] = {int(block_table[b, p])} is a page that sequence {b} reads "
                         f"(it holds keys {p * page_size}..), outside [0, num_pages={num_pages}) "
                         "[page_ids_range]; the unused tail of a row may hold anything (e.g. -1)")


def cache_arguments(cache_seqlens, block_table, capacity: int, num_pages: int):
    """``(cache_seqlens, block_table)`` as the decode kernel reads them: fresh, contiguous int32,
    clamped on the device to ``[0, capacity]`` and ``[0, num_pages - 1]`` (what keeps a traced
    graph, where ``check_cache_values`` does not run, inside the cache; eager values are checked)."""
    if torch.compiler.is_compiling():
        cache_seqlens = cache_seqlens.clamp(0, capacity)
        block_table = None if block_table is None else block_table.clamp(0, num_pages - 1)
    if cache_seqlens.dtype != torch.int32 or not cache_seqlens.is_contiguous():
        cache_seqlens = cache_seqlens.to(torch.int32).contiguous()
    return cache_seqlens, contract.unit_stride("flash_attention_with_kvcache", "block_table", block_table)


# ----------------------------------------------------------------------------------
# flash_attention_varlen (packed batches)
# ----------------------------------------------------------------------------------
#: what an omitted max_seqlen hint is passed to the op as: computed from the offsets
COMPUTE = -1


def check_packed_qkv(q, k, v, *, fp8=False):
    """``flash_attention_varlen``'s q, k, v: packed ``(total, H, D)``, one dtype, GQA heads."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must have rank 3 (total_tokens, heads, head_dim) in a packed batch, got shape "
                             f"{tuple(t.shape)}; for a padded (batch, heads, seq, head_dim) batch use flash_attention")
    check_dtypes(q, k, v, fp8=fp8)
    (_, hq, d), (_, hkv, dk) = q.shape, k.shape
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)} (total_k, Hkv, D), got {tuple(v.shape)}")
    if dk != d:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in head_dim (dim 2)")
    if min(hq, hkv, d) < 1:
        raise ValueError(f"heads and head_dim must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    check_heads(hq, hkv, d)


def check_cu_seqlens(name, cu):
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be an int32 torch.Tensor of B + 1 offsets, got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} must be int32 (FlashAttention's layout), got {cu.dtype}; convert with "
                        f"{name}.to(torch.int32)")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must have shape (B + 1,) with B >= 1 segments, got {tuple(cu.shape)}")


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
# flash_attention_with_kvcache
# ----------------------------------------------------------------------------------
def check_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, cache_batch_idx=None):
    """``flash_attention_with_kvcache``'s checks that read no tensor's values; returns
    ``(capacity, num_pages)`` (``num_pages`` 0 for a contiguous cache)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(t, name)
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4, got shape {tuple(t.shape)}: q is (batch, N_q, Hq, D), "
                             "the cache (batch, N_cache, Hkv, D) or, paged, (num_pages, page_size, Hkv, D) "
                             "(FlashAttention's layouts)")
    check_dtypes(q, k_cache, v_cache)
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    B, Nq, Hq, D = q.shape
    _, n_cache, Hkv, Dk = k_cache.shape
    if Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k_cache {tuple(k_cache.shape)} must agree in head_dim (dim 3)")
    if min(B, Nq, Hq, D, Hkv) < 1:
        raise ValueError(f"every dimension of q and of the cache's heads must be >= 1, got q {tuple(q.shape)}, "
                         f"k_cache {tuple(k_cache.shape)}")
    if Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of the cache's KV heads ({Hkv}) for GQA "
                         "[gqa_divides]")
    check_heads(Hq, Hkv, D)
    if block_table is None:
        if k_cache.shape[0] != B and cache_batch_idx is None:  # with cache_batch_idx: any number of rows
            raise ValueError(f"a contiguous cache must have q's batch ({B}) in dim 0, got {tuple(k_cache.shape)}; "
                             "a paged cache (num_pages, page_size, Hkv, D) needs block_table")
        capacity, num_pages = n_cache, 0
    else:
        if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2 \
                or block_table.shape[0] != B:
            raise ValueError(f"block_table must be an int32 tensor (batch={B}, max_pages), got "
                             f"{getattr(block_table, 'dtype', type(block_table).__name__)} "
                             f"{tuple(getattr(block_table, 'shape', ()))}; convert with .to(torch.int32)")
        if n_cache not in limit("page_sizes"):
            raise ValueError(f"page_size (k_cache dim 1) must be a power of two from 16 to 512, got {n_cache} "
                             "[page_sizes]")
        capacity, num_pages = block_table.shape[1] * n_cache, k_cache.shape[0]
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype not in (torch.int32, torch.int64) \
            or tuple(cache_seqlens.shape) != (B,):
        raise ValueError(f"cache_seqlens must be an int or an int32 tensor of shape (batch,) = ({B},), got "
                         f"{cache_seqlens!r}")
    # int32 offsets inside one (batch, head) slice: q's tokens, the cache's keys (or a page's slots)
    check_index_width(q=q.transpose(1, 2), k_cache=k_cache.transpose(1, 2), v_cache=v_cache.transpose(1, 2),
                             out=((Hq, Nq, D), (D, Hq * D, 1)))
    return capacity, num_pages


# ----------------------------------------------------------------------------------
# merge_state / merge_states
# ----------------------------------------------------------------------------------
def check_merge_pair(name: str, o: torch.Tensor, lse: torch.Tensor, lead: int = 0) -> None:
    """A partial result ``(o{name}, lse{name})`` of ``merge_state(s)``: o ``(..., D)``, lse float32 ``(...)``."""
    for what, t in ((f"o{name}", o), (f"lse{name}", lse)):
        check_tensor(t, what)
    if o.dtype not in DTYPES:
        raise TypeError(f"o{name} has dtype {o.dtype}; supported: float16, bfloat16, float32 (convert with .to())")
    if lse.dtype != torch.float32:
        raise TypeError(f"lse{name} must be float32 (natural-log LSE), got {lse.dtype}; convert with "
                        ".float() (FlashInfer's base-2 lse: multiply by math.log(2) first)")
    if o.dim() < 1 + lead or tuple(lse.shape) != tuple(o.shape[:-1]):
        raise ValueError(f"lse{name} must have o{name}'s shape without its last (head_dim) axis: o{name} "
                         f"{tuple(o.shape)} needs lse{name} {tuple(o.shape[:-1])}, got {tuple(lse.shape)}")
    if o.shape[-1] > limit("merge_head_dim_max"):
        raise ValueError(f"head_dim {o.shape[-1]} > {limit('merge_head_dim_max')} is not supported by the merge "
                         "kernel; split the last axis [merge_head_dim_max]")


# ----------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------
def check_softmax(x, dim, block):
    """``softmax``'s x (a tensor of a supported dtype, rank >= 1), ``dim`` as an int and ``block``
    as a pair; returns ``(dim, block)`` (a ``dim`` out of range raises ``IndexError`` at the move)."""
    check_tensor(x, "x")
    if x.dtype not in DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; supported: {', '.join(limit('dtypes'))} (convert with .to()) "
                        "[dtypes]")
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension; x is a scalar")
    check_device({"x": x})
    return _as_int(dim, "dim"), check_block(block)
