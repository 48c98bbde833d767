"""The forward error bound (``spec.error_bound``): Hypothesis searches for inputs where the kernel's
``out`` or ``lse`` leaves it, and must never find one.

The kernel runs as generated (16 x 32 tiles, the Triton interpreter here, the GPU when
FLASHPROOF_TEST_DEVICE=cuda) against the float64 reference on the same inputs. The search leans
on what the bound says is hard: large scores (magnitude up to 16 per element, so the exponents'
absolute errors grow with ``s·A``), several key tiles, nearly tied keys, each input dtype.
"""

from __future__ import annotations

import math

import pytest
import torch
from attention_cases import forward_module, on_device, reference
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.checking import DTYPE_NAMES, attention_errors, case_tolerances
from generator.runtime import api
from spec.error_bound import forward_bound, gamma, regime_bound

BLOCK = (16, 32)


@st.composite
def bound_cases(draw):
    dtype = draw(st.sampled_from(list(DTYPE_NAMES)))
    nq, nk = draw(st.integers(1, 24)), draw(st.integers(1, 80))
    d = draw(st.sampled_from([8, 16, 32]))
    magnitude = draw(st.sampled_from([0.05, 1.0, 4.0, 16.0]))
    ties = draw(st.booleans())
    causal = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return dtype, nq, nk, d, magnitude, ties, causal, seed


@settings(max_examples=12, deadline=None)
@given(bound_cases())
def test_kernel_stays_within_the_error_bound(case):
    dtype, nq, nk, d, magnitude, ties, causal, seed = case
    gen = torch.Generator().manual_seed(seed)
    q = (magnitude * torch.randn(1, 1, nq, d, generator=gen)).to(dtype)
    k = (magnitude * torch.randn(1, 1, nk, d, generator=gen))
    if ties:  # keys equal up to a tiny perturbation: exponents that cancel to near 0
        k = k[:, :, :1] + 1e-3 * torch.randn(1, 1, nk, d, generator=gen)
    k = k.to(dtype)
    v = torch.randn(1, 1, nk, d, generator=gen).to(dtype)
    module = forward_module(BLOCK)
    out, lse = on_device(api.attention_forward, module, q, k, v, causal=causal, alignment="bottom_right",
                         window=None, key_lengths=None, mask=None, scale=None)
    ref_out, ref_lse = reference(q, k, v, causal=causal, alignment="bottom_right")
    out_tol, lse_tol = case_tolerances(q, k, v, block_n=module.BLOCK_N, ref_lse=ref_lse)
    out_err, lse_err = attention_errors(out, lse, ref_out, ref_lse, v)
    assert out_err <= out_tol, f"out error {out_err:.3g} > bound {out_tol:.3g} ({case})"
    assert lse_err <= lse_tol, f"lse error {lse_err:.3g} > bound {lse_tol:.3g} ({case})"


def test_bound_grows_with_its_inputs():
    """More keys, larger scores, a coarser dtype: never a smaller bound (and gamma_n is n u/(1-n u))."""
    base = forward_bound("fp32", 128, 64, 32, 4.0)
    assert forward_bound("fp32", 4096, 64, 32, 4.0).out > base.out
    assert forward_bound("fp32", 128, 64, 32, 40.0).out > base.out
    assert forward_bound("fp16", 128, 64, 32, 4.0).out > base.out
    assert forward_bound("bf16", 128, 64, 32, 4.0).out > forward_bound("fp16", 128, 64, 32, 4.0).out
    assert math.isclose(gamma(3), 3 * 2.0**-24 / (1 - 3 * 2.0**-24))


def test_the_softcap_is_bounded_without_fp8_descales_only():
    """FP8 takes no softcap (the contract refuses it): forward_bound refuses to compose the two rather than
    return a number no claim covers (claim forward_error_bound's softcap case counts qk_scale's 2
    roundings, fp8_error_bound's descaled qk_scale 5 and no cap)."""
    assert forward_bound("bf16", 128, 64, 32, 4.0, softcap=True).out > forward_bound("bf16", 128, 64, 32, 4.0).out
    for dtype, descaled in (("e4m3", None), ("e5m2", None), ("bf16", True)):
        with pytest.raises(ValueError, match="no softcap"):
            forward_bound(dtype, 128, 64, 32, 4.0, softcap=True, descaled=descaled)


def test_tolerances_are_the_bound_at_the_test_regime():
    from generator.checking import TOLERANCES

    for dtype, name in DTYPE_NAMES.items():
        assert TOLERANCES[dtype] == regime_bound(name).out
