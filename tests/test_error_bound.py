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

from generator.checking import DTYPE_NAMES, alibi_beta, attention_errors, attention_failures, case_tolerances
from generator.runtime import api
from spec.error_bound import carried_factor, forward_bound, gamma, n_tiles, out_bound, regime_bound, weight_factor

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


@st.composite
def alibi_cases(draw):
    dtype = draw(st.sampled_from(list(DTYPE_NAMES)))
    nq, nk = draw(st.integers(1, 24)), draw(st.integers(1, 64))
    slopes = draw(st.lists(st.sampled_from([0.0625, 0.5, 8.0, -0.5, -8.0]), min_size=2, max_size=2))
    magnitude = draw(st.sampled_from([1.0, 4.0]))
    causal = draw(st.booleans())
    alignment = draw(st.sampled_from(["top_left", "bottom_right"]))
    seed = draw(st.integers(0, 2**16))
    return dtype, nq, nk, slopes, magnitude, causal, alignment, seed


@settings(max_examples=6, deadline=None)
@given(alibi_cases())
def test_kernel_with_alibi_stays_within_the_error_bound(case):
    """ALiBi (issue 23 deliverable 2): forward_bound(alibi=β) (claim forward_error_bound (vi)), β the case's
    largest |slope·(i + shift − j)| — slopes up to ±8, so bias magnitudes up to ~500 — never left."""
    dtype, nq, nk, slopes, magnitude, causal, alignment, seed = case
    gen = torch.Generator().manual_seed(seed)
    q = (magnitude * torch.randn(1, 2, nq, 16, generator=gen)).to(dtype)
    k = (magnitude * torch.randn(1, 2, nk, 16, generator=gen)).to(dtype)
    v = torch.randn(1, 2, nk, 16, generator=gen).to(dtype)
    kw = dict(causal=causal, alignment=alignment, alibi_slopes=torch.tensor(slopes))
    module = forward_module(BLOCK)
    out, lse = on_device(api.attention_forward, module, q, k, v, window=None, key_lengths=None, mask=None,
                         scale=None, **kw)
    ref_out, ref_lse = reference(q, k, v, **kw)
    alibi = alibi_beta(kw["alibi_slopes"], nq, nk, alignment)
    out_tol, lse_tol = case_tolerances(q, k, v, block_n=module.BLOCK_N, ref_lse=ref_lse, alibi=alibi)
    out_err, lse_err = attention_errors(out, lse, ref_out, ref_lse, v)
    assert out_err <= out_tol, f"out error {out_err:.3g} > bound {out_tol:.3g} ({case})"
    assert lse_err <= lse_tol, f"lse error {lse_err:.3g} > bound {lse_tol:.3g} ({case})"


def test_alibi_enters_the_bound():
    """β adds to every exponent's error (~7u·β natural units: the bias's γ_4, the add, and 2u from the max and the
    rescales; the score's share gains ~2u·s·A: the add and log2 e's rounding) and grows the bound; the
    case's β is max|slope| times the largest |i + shift − j|; a regime check refuses ALiBi without q, k."""
    plain = forward_bound("fp32", 64, 32, 16, 4.0)
    biased = forward_bound("fp32", 64, 32, 16, 4.0, alibi=504.0)
    assert biased.out > plain.out and biased.lse_abs > plain.lse_abs
    u = 2.0**-24
    assert 7 * u * 504 < biased.exponent - plain.exponent < 7.001 * u * 504 + 2.001 * u * 4.0
    assert alibi_beta(torch.tensor([0.5, -8.0]), 10, 30, "top_left") == 8.0 * 29
    assert alibi_beta(torch.tensor([0.5, -8.0]), 10, 30, "bottom_right") == 8.0 * 29
    assert alibi_beta(torch.tensor([1.0]), 30, 10, "bottom_right") == 29.0 and alibi_beta(None, 3, 3) is None
    with pytest.raises(ValueError, match="regime tolerances do not cover ALiBi"):
        attention_failures(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1), torch.zeros(1, 1, 1, 1).double(),
                           torch.zeros(1, 1, 1).double(), torch.ones(1, 1, 1, 1), alibi=1.0)


def test_bound_grows_with_its_inputs():
    """More keys, larger scores, a coarser dtype: never a smaller bound (and gamma_n is n u/(1-n u))."""
    base = forward_bound("fp32", 128, 64, 32, 4.0)
    assert forward_bound("fp32", 4096, 64, 32, 4.0).out > base.out
    assert forward_bound("fp32", 128, 64, 32, 40.0).out > base.out
    assert forward_bound("fp16", 128, 64, 32, 4.0).out > base.out
    assert forward_bound("bf16", 128, 64, 32, 4.0).out > forward_bound("fp16", 128, 64, 32, 4.0).out
    assert math.isclose(gamma(3), 3 * 2.0**-24 / (1 - 3 * 2.0**-24))


def test_the_numeric_bound_is_inf_exactly_where_the_proof_assumes_nothing():
    """``out_bound`` is proved for the denominator's factor ``b = weight_factor(ρ_w, ρ_den) < 1`` (claims
    forward_error_bound, fp8_error_bound); in floats (``Numbers.over_one_minus``) it is finite exactly there and
    ``inf`` wherever that hypothesis fails (``b >= 1``, NaN), and ``forward_bound``'s ``out`` and ``lse_abs``
    with it."""
    below, above = 1 - 2.0**-20, 1 + 2.0**-20  # b = either, exactly
    for rho_w, rho_den in [(0.0, 0.0), (0.25, 0.5), (0.0, below), (below, 0.0), (0.0, 1.0), (1.0, 0.0), (0.5, 0.5),
                           (0.0, above), (math.inf, 0.0), (math.nan, 0.0)]:
        b = weight_factor(rho_w, rho_den)
        out = out_bound(rho_w, 0.0, rho_den, 2.0**-24, 2.0**-8, abs_num=1e-3)
        assert math.isinf(out) == (not b < 1) and out > 0, (rho_w, rho_den, b, out)
    # forward_bound: b = weight_factor(e^E − 1, ρ_den) crosses 1 as s·A grows (E ≈ s·A·D·u)
    n_k, block_n, d = 256, 64, 128
    rho_den = carried_factor(gamma(block_n), n_tiles(n_k, block_n))
    seen = set()
    for scaled_abs in (2.0**k for k in range(12, 20)):
        bound = forward_bound("bf16", n_k, block_n, d, scaled_abs, lse=1.0)
        past = not weight_factor(math.expm1(bound.exponent), rho_den) < 1
        assert math.isinf(bound.out) == past == math.isinf(bound.lse_abs), (scaled_abs, bound)
        seen.add(past)
    assert seen == {False, True}


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


def test_the_fp8_mma_bound_is_for_fp8_products_and_contains_the_fp32_one():
    """``forward_bound(..., fp8_mma=True)`` (claim fp8_mma_bound): only for FP8 products (an fp16/bf16 q on an
    FP8 cache runs its products in its own dtype: refused), and every field at least the fp32-accumulation
    bound's (the MMA's partials add a relative 2^-7 where fp32 adds γ_n)."""
    with pytest.raises(ValueError, match="fp8_mma is the products of an FP8 dtype"):
        forward_bound("bf16", 128, 64, 64, 5.0, descaled=True, fp8_mma=True)
    for fmt in ("e4m3", "e5m2"):
        for n_k, block_n, d in ((40, 32, 32), (4096, 64, 128)):
            fp32 = forward_bound(fmt, n_k, block_n, d, 5.0, lse=5.0)
            mma = forward_bound(fmt, n_k, block_n, d, 5.0, lse=5.0, fp8_mma=True)
            assert all(m > f for m, f in zip(mma, fp32)), (fmt, n_k, mma, fp32)
