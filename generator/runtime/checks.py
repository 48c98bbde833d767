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
from spec import rewrites
from spec.mask_mod import MaskMod
from spec.masks import ALIGNMENTS

from generator.runtime import launch

DTYPES = tuple(getattr(torch, name) for name in limit("dtypes"))
MAX_HEAD_DIM = limit("head_dim_max")
DEFAULT_BLOCK = (64, 64)

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


def check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name)
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (batch, heads, seq, head_dim), got shape "
                             f"{tuple(t.shape)}; add the missing axes with unsqueeze")
    check_dtypes(q, k, v)
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


def check_dtypes(q, k, v):
    """One supported dtype for q, k, v [dtypes]."""
    if q.dtype not in DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; supported: {', '.join(limit('dtypes'))} (convert with .to())")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; "
                        "convert them with .to(q.dtype)")


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
    A value may be a tensor or a shape (a freshly allocated, contiguous output of that shape)."""
    bound = limit("index_int32")
    for name, t in tensors.items():
        if t is None:
            continue
        shape, stride = (tuple(t.shape), t.stride()) if isinstance(t, torch.Tensor) else (t, None)
        if stride is None:  # contiguous: the last two dims have strides (D, 1)
            stride = (shape[-1], 1)
        if 0 in shape:
            continue
        reach = sum((size - 1) * abs(step) for size, step in zip(shape[-2:], stride[-2:]))
        if reach > bound:
            raise ValueError(f"{name} spans {reach} elements inside one (batch, head) slice, beyond the kernels' "
                             f"int32 offsets (2^31 - 1) [index_int32]; pass {name}.contiguous() or split the "
                             "sequence")


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
    if bool((key_lengths < 0).any()) or bool((key_lengths > n_k).any()):  # one sync, like the reference
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


def normalise_window(window, n_q: int, n_k: int):
    """Each side clamped to ``N_q + N_k`` (``spec.rewrites.window_clamp``, claim ``window_clamp``:
    the same keys are attended, and the kernels' int32 bounds cannot overflow) [window_bounded]."""
    return None if window is None else list(rewrites.window_clamp(window, n_q, n_k))


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
                 scale=None, block="auto", tma="auto", return_lse=False):
    """Every check of ``flash_attention``; returns ``(window, scale, block)`` normalised."""
    check_qkv(q, k, v)
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
    window = None if window is None else normalise_window(check_window(window), Nq, Nk)
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
