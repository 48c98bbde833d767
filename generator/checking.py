"""Kernel output vs the float64 spec reference, with tolerances derived from the error bound.

The tolerances are not argued by hand: they are ``spec.error_bound.forward_bound`` — a forward
error bound in the standard model of floating point (fp32 accumulation; P and ``out`` rounded
to the input dtype), relative to ``max|v|`` (the output is a convex combination of rows of V).

* With ``q`` and ``k`` given, the bound of that very case: its ``N_k``, ``B_c``, head dim and data
  (``s·max Σ_d |q_d k_jd|``);
* without, ``TOLERANCES[dtype]``: the bound at the test regime ``spec.error_bound.REGIME``
  (N_k <= 4096, D <= 128, any B_c, scaled scores of standard-normal inputs).

With the softcap (``softcap=True``) the bound is ``forward_bound(softcap=True)``: the printed cap's error is
relative for every cap (claims ``softcap_accuracy``, ``forward_error_bound``). With ALiBi (``alibi=β``, from
``alibi_beta``: ``max|slope| · max|i + shift − j|`` of the case) it is ``forward_bound(alibi=β)``: the printed
bias's roundings (4, and its add) enter every exponent's error as ``~7u·β`` (claim ``forward_error_bound``
(vi)); the regime tolerances ``TOLERANCES`` do not include it, so an ALiBi case passes ``q``, ``k`` and ``alibi``.
The sink's fold (``spec.terms.SINK_FOLD``) is not in the bound: with sinks the tolerances are the bound's
numbers without it.

``lse`` must be ``-inf`` exactly on the rows where the reference's is, and elsewhere within the
bound's absolute lse error (measured, as before, relative to ``max(1, |lse|)``).

The backward has no bound: its tolerances (``GRAD_TOLERANCES_EMPIRICAL``) are **empirical**,
chosen by measurement against the float64 reference, and say nothing proved (docs: "What is
proven, what is tested").
"""

from __future__ import annotations

import math

import torch

from spec.error_bound import REGIME, alibi_reach, forward_bound, regime_bound
from spec.masks import alignment_shift

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
#: out tolerance per dtype at the test regime (spec.error_bound.REGIME), relative to max|v|
TOLERANCES = {dtype: regime_bound(name).out for dtype, name in DTYPE_NAMES.items()}
LSE_TOLERANCES = {dtype: regime_bound(name).lse_abs for dtype, name in DTYPE_NAMES.items()}
#: EMPIRICAL, not derived: the gradients' tolerance (relative to max|grad|) per dtype, chosen by
#: measurement (fp32 errors ~1e-6, fp16 ~1e-3, bf16 ~1e-2: P and dS rounded to the input dtype);
#: no claim bounds the backward's rounding
GRAD_TOLERANCES_EMPIRICAL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 4e-2}


def alibi_beta(alibi_slopes, n_q: int, n_k: int, alignment: str = "top_left", shift: int | None = None):
    """``β`` of a case with ALiBi slopes (None without): ``max|slope|`` times the largest ``|i + shift − j|``
    over its ``N_q × N_k`` entries (``shift`` from the alignment unless given, e.g. a decode's
    ``cache_seqlens − N_q``), a bound of every row's ``max_j |slope·(i + shift − j)|``."""
    if alibi_slopes is None:
        return None
    shift = alignment_shift(alignment, n_q, n_k) if shift is None else shift
    slope = torch.as_tensor(alibi_slopes).double().abs().max().item() if torch.as_tensor(alibi_slopes).numel() else 0.0
    return alibi_reach(slope, n_q, n_k, shift)


def case_tolerances(q, k, v, *, scale=None, block_n=None, ref_lse=None, softcap=False, dtype=None,
                    descaled=None, alibi=None, fp8_mma=False) -> tuple[float, float]:
    """``(out, lse)`` tolerances of one case from the bound: its sizes and its data (``block_n``
    None: the largest bound over the block sizes a kernel may use; ``softcap``: the scores capped;
    ``alibi``: the case's ``β`` (``alibi_beta``) with ALiBi slopes).
    ``dtype`` (a name of ``spec.error_bound.UNIT_ROUNDOFF``, default v's) and ``descaled``: the FP8
    forward's case, with q, k, v the dequantised tensors (``forward_bound``'s arguments); ``fp8_mma``: its
    products on sm_90's fp8 MMA (the compiled kernel on Hopper: claim ``fp8_mma_bound``)."""
    D = q.shape[-1]
    s = abs(scale) if scale is not None else 1 / math.sqrt(D)
    group = q.shape[1] // k.shape[1]
    kk = k.double().abs().repeat_interleave(group, dim=1)
    scaled_abs = s * (q.double().abs() @ kk.transpose(-1, -2)).max().item() if q.numel() and k.numel() else 0.0
    finite = ref_lse[torch.isfinite(ref_lse)] if ref_lse is not None else torch.zeros(1)
    lse_max = finite.abs().max().item() if finite.numel() else 0.0
    blocks = REGIME["block_ns"] if block_n is None else (block_n,)
    bounds = [forward_bound(dtype or DTYPE_NAMES[v.dtype], k.shape[2], bn, D, scaled_abs, lse_max, softcap=softcap,
                            descaled=descaled, alibi=alibi, fp8_mma=fp8_mma)
              for bn in blocks]
    return max(b.out for b in bounds), max(b.lse_abs for b in bounds)


def attention_errors(out, lse, ref_out, ref_lse, v) -> tuple[float, float]:
    """(max |out - ref| / max|v|, max lse error / max(1, |lse|)); inf when NaN or -inf rows differ."""
    if not (torch.isfinite(out).all() and not torch.isnan(lse).any()):
        return float("inf"), float("inf")
    scale = max(v.abs().max().item() if v.numel() else 0.0, 1e-30)  # a packed batch may hold no key
    out_err = (out.double() - ref_out).abs().max().item() / scale if out.numel() else 0.0
    empty = torch.isneginf(ref_lse)
    if not torch.equal(torch.isneginf(lse), empty):
        return out_err, float("inf")
    rows = ~empty
    lse_err = 0.0
    if rows.any():
        diff = (lse.double()[rows] - ref_lse[rows]).abs() / ref_lse[rows].abs().clamp_min(1.0)
        lse_err = diff.max().item()
    return out_err, lse_err


def attention_failures(out, lse, ref_out, ref_lse, v, *, q=None, k=None, scale=None, block_n=None,
                       softcap=False, alibi=None) -> list[str]:
    """Human-readable failures (empty when the kernel matches the reference within the bound)."""
    if q is not None and k is not None:
        tol, lse_tol = case_tolerances(q, k, v, scale=scale, block_n=block_n, ref_lse=ref_lse, softcap=softcap,
                                       alibi=alibi)
    elif alibi is not None:
        raise ValueError("attention_failures: the regime tolerances do not cover ALiBi; pass q and k with alibi= "
                         "(the bound of the case, spec.error_bound.forward_bound(alibi=β))")
    else:
        tol, lse_tol = TOLERANCES[v.dtype], LSE_TOLERANCES[v.dtype]
    out_err, lse_err = attention_errors(out, lse, ref_out, ref_lse, v)
    failures = []
    if not out_err <= tol:
        failures.append(f"out: max error {out_err:.3g} x max|v| > {tol:.3g} (spec.error_bound)")
    if not lse_err <= lse_tol:
        failures.append(f"lse: max error {lse_err:.3g} > {lse_tol:.3g} (spec.error_bound)")
    return failures
