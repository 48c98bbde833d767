"""``TRITON_INTERPRET=1 python -m generator.demo``: run a generated kernel, compare with the spec.

Runs the 64x64 forward kernel on a small causal input (CPU interpreter, or CUDA when one is
present and TRITON_INTERPRET is unset) and prints its max error against the float64
``spec.reference.attention``, with PASS/FAIL at the fp32 tolerance of ``generator.checking``.
"""

from __future__ import annotations

import sys

import torch

from generator.checking import TOLERANCES, attention_errors
from generator.runtime import launch


def main() -> int:
    device = "cpu" if launch.interpreting() or not torch.cuda.is_available() else "cuda"
    if device == "cpu" and not launch.interpreting():
        print("no CUDA device: run with TRITON_INTERPRET=1 to use Triton's CPU interpreter", file=sys.stderr)
        return 2
    from generated import flash_attention  # after the interpreter setting is known
    from spec.reference import attention

    gen = torch.Generator().manual_seed(0)
    B, H, N, D = 1, 2, 100, 64
    q, k, v = (torch.randn((B, H, N, D), generator=gen).to(device) for _ in range(3))
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True, block=(64, 64))
    ref_out, ref_lse = attention(q.cpu(), k.cpu(), v.cpu(), causal=True)
    out_err, lse_err = attention_errors(out.cpu(), lse.cpu(), ref_out, ref_lse, v.cpu())
    tol = TOLERANCES[torch.float32]
    ok = out_err <= tol and lse_err <= tol
    print(f"flash_attention (generated/attention_fwd_br64_bc64.py) on {device}: B={B} H={H} N={N} D={D}, causal, fp32")
    print(f"max |out - reference| / max|v| = {out_err:.3e}   max lse error = {lse_err:.3e}   tolerance {tol:g}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
