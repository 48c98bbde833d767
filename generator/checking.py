"""Kernel output vs the float64 spec reference, with explicit tolerances (tests and demo).

Tolerances are relative to ``max|v|`` (the output is a convex combination of rows of V, so
that is its natural scale):

* fp32 ``1e-5``: fp32 arithmetic and ``input_precision="ieee"`` dots;
* fp16 ``2e-3``: P is rounded to fp16 before P V (11-bit mantissa, ~5e-4 per element);
* bf16 ``2e-2``: P rounded to bf16 (8-bit mantissa, ~4e-3 per element).

``lse`` must be ``-inf`` exactly on the rows where the reference's is, and elsewhere within
the same tolerance times ``max(1, |lse|)``.
"""

from __future__ import annotations

import torch

TOLERANCES = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


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


def attention_failures(out, lse, ref_out, ref_lse, v) -> list[str]:
    """Human-readable failures (empty when the kernel matches the reference)."""
    tol = TOLERANCES[v.dtype]
    out_err, lse_err = attention_errors(out, lse, ref_out, ref_lse, v)
    failures = []
    if not out_err <= tol:
        failures.append(f"out: max error {out_err:.3g} x max|v| > {tol:g}")
    if not lse_err <= tol:
        failures.append(f"lse: max error {lse_err:.3g} > {tol:g}")
    return failures
