"""merge_state / merge_states: the claim lse_merge on the printed terms (with a mutant per
property), the generated kernels against float64, empty states, and the autograd."""

from __future__ import annotations

import pytest
import sympy as sp
import torch
from sympy.codegen.cfunctions import exp2

from spec import notation as n
from spec.proofs import softmax as PS
from spec import terms
from test_mutants import assert_failed, swap

from generated import merge_state, merge_states


# ---------------------------------------------------------------- the claim catches mutants
def _failed_cases(result):
    return {name.rsplit("[", 1)[0] for name, res in result.cases if res != 0}


def test_lse_merge_is_proved_on_the_printed_terms(proved):
    results = proved
    assert results["lse_merge"].proved, results["lse_merge"].detail
    assert PS.prove_lse_merge.__defaults__[1] is terms.MERGE_STATE  # the terms the kernels print


def test_three_splits_unrolled_agree_with_the_induction():
    """The cross-check prove_all skips for time: S = 3 partials folded in order 3, 1, 2."""
    r = PS.prove_lse_merge(unrolled=True)
    assert r.proved, r.detail
    assert any(name.startswith("S = 3") for name, _ in r.cases)


def test_lse_without_the_log_sum_is_refuted():
    """merge = normalise(a ⊕ b): an lse that keeps only the larger side is caught."""
    lse = sp.Piecewise((n.NEG_INF, sp.Eq(n.w_sum, 0)), (n.lse_max_safe, True))
    r = PS.prove_lse_merge(merge_terms=swap(terms.MERGE_STATE, n.lse, lse))
    assert_failed(r)
    assert "merge(n(a), n(b)) = n(a ⊕ b) [a,b]" in _failed_cases(r)


def test_base2_weights_are_refuted():
    """FlashInfer's base-2 lse fed to natural-log arithmetic: weights exp2(lse) without log2(e)."""
    base2 = exp2(n.lse_a - n.lse_max_safe)
    r = PS.prove_lse_merge(merge_terms=swap(terms.MERGE_STATE, n.w_a, base2))
    assert_failed(r)
    assert "merge(n(a), n(b)) = n(a ⊕ b) [a,b]" in _failed_cases(r)


def test_unguarded_shift_is_refuted_by_the_empty_pair():
    """Empty states: without the lse_max guard two empty sides compute -inf - (-inf) = NaN."""
    r = PS.prove_lse_merge(merge_terms=swap(terms.MERGE_STATE, n.lse_max_safe, n.lse_max))
    assert_failed(r)
    assert _failed_cases(r) == {"merge(n(a), n(b)) = n(a ⊕ b) [E,E]"}


def test_finite_sentinel_for_an_empty_split_is_refuted():
    """Identity: an empty split written as lse = -1e4 (a finite 'minus infinity') is not neutral."""
    r = PS.prove_lse_merge(identity=(sp.Integer(0), sp.Integer(-10000)))
    assert_failed(r)
    assert "identity: merge(x, (0, -inf)) = x" in _failed_cases(r)


def test_one_sided_merge_is_refuted_as_not_commutative():
    """Any order: a merge that weighs only side a's o (a 'running output' bug) is caught."""
    r = PS.prove_lse_merge(merge_terms=swap(terms.MERGE_STATE, n.o, n.o_a))
    assert_failed(r)
    assert "commutative: merge(x, y) = merge(y, x)" in _failed_cases(r)


def test_fold_from_a_phantom_key_is_refuted():
    """Any number of splits: a fold started from lse = 0 (an accumulator holding one phantom key
    of weight e^0) is caught: the start is not the identity, so the induction over the splits
    (step: the pair case; start: the identity) fails at its base. (No mutant can pass the pair
    and identity cases and fail the S = 3 unrolling: that is the induction.)"""
    r = PS.prove_lse_merge(identity=(sp.Integer(0), sp.Integer(0)))
    assert_failed(r)
    assert "identity: merge((0, -inf), x) = x" in _failed_cases(r)


# ---------------------------------------------------------------- the kernels vs float64
def reference_merge(o, lse):
    """float64: the partials (S, ..., D), (S, ...) merged from the definition e^{lse_s} / Σ e^{lse}."""
    o, lse = o.double(), lse.double()
    total = torch.logsumexp(lse, 0)
    w = torch.exp(lse - torch.where(torch.isinf(total), 0, total))
    return (w[..., None] * o).sum(0), total


def partials(S, shape, D, dtype, seed=0, empty=()):
    g = torch.Generator().manual_seed(seed)
    o = torch.randn((S, *shape, D), generator=g).to(dtype)
    lse = (3 * torch.randn((S, *shape), generator=g)).float()
    for s in empty:  # split s has no key: what the decode kernels write for it
        o[s], lse[s] = 0, float("-inf")
    return o, lse


TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_merge_state_matches_float64(dtype):
    o, lse = partials(2, (3, 5), 24, dtype)
    lse[1, 0, :2] = float("-inf")  # one side empty on two rows
    o[1, 0, :2] = 0
    out, out_lse = merge_state(o[0], lse[0], o[1], lse[1])
    ref_o, ref_lse = reference_merge(o, lse)
    assert out.dtype == dtype and out_lse.dtype == torch.float32 and out.shape == (3, 5, 24)
    torch.testing.assert_close(out.double(), ref_o, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(out_lse.double(), ref_lse, atol=1e-5, rtol=1e-6)


def test_two_empty_states_give_zero_and_minus_inf():
    o = torch.zeros(2, 4, 16)
    lse = torch.full((2, 4), float("-inf"))
    for out, out_lse in (merge_state(o[0], lse[0], o[1], lse[1]), merge_states(o, lse)):
        assert torch.equal(out, torch.zeros(4, 16))
        assert torch.equal(out_lse, torch.full((4,), float("-inf")))


@pytest.mark.parametrize("S", [1, 3, 16])
def test_merge_states_matches_float64_in_any_order(S):
    o, lse = partials(S, (2, 3), 20, torch.float32, seed=S, empty=(0,) if S > 1 else ())
    out, out_lse = merge_states(o, lse)
    ref_o, ref_lse = reference_merge(o, lse)
    torch.testing.assert_close(out.double(), ref_o, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(out_lse.double(), ref_lse, atol=1e-5, rtol=1e-6)
    perm = torch.randperm(S, generator=torch.Generator().manual_seed(1))
    out_p, lse_p = merge_states(o[perm], lse[perm])
    torch.testing.assert_close(out_p, out, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(lse_p, out_lse, atol=1e-5, rtol=1e-6)


def test_merge_states_equals_attention_over_all_keys():
    """Splits of the keys attended separately, then merged = attention over all keys (float64)."""
    from spec import reference
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 4, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 40, 16, generator=g, dtype=torch.float64) for _ in range(2))
    bounds = [0, 7, 30, 40]
    parts = [reference.attention(q, k[:, :, a:b], v[:, :, a:b]) for a, b in zip(bounds, bounds[1:])]
    # a split with no valid key (key_lengths 0): the partial (0, -inf)
    parts.append(reference.attention(q, k[:, :, :8], v[:, :, :8], key_lengths=torch.tensor([0])))
    o = torch.stack([p[0] for p in parts]).float()
    lse = torch.stack([p[1] for p in parts]).float()
    out, out_lse = merge_states(o, lse)
    want, want_lse = reference.attention(q, k, v)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_lse.double(), want_lse, atol=1e-5, rtol=1e-5)


def test_merge_states_of_no_split_is_the_identity():
    out, out_lse = merge_states(torch.zeros(0, 3, 8), torch.zeros(0, 3))
    assert torch.equal(out, torch.zeros(3, 8)) and torch.equal(out_lse, torch.full((3,), float("-inf")))


# ---------------------------------------------------------------- autograd vs float64
def test_merge_state_gradients_match_float64():
    o, lse = partials(2, (6,), 8, torch.float32, seed=5)
    lse[1, 0] = float("-inf")  # an empty side: its gradients are exactly 0
    o[1, 0] = 0
    lse[1, 1] = lse[0, 1]  # a tie of the two lses
    leaves = [t.clone().requires_grad_() for t in (o[0], lse[0], o[1], lse[1])]
    out, out_lse = merge_state(*leaves)
    g = torch.Generator().manual_seed(6)
    do, dlse = torch.randn(out.shape, generator=g), torch.randn(out_lse.shape, generator=g)
    got = torch.autograd.grad((out, out_lse), leaves, (do, dlse))

    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ro, rl = reference_merge(torch.stack([ref_leaves[0], ref_leaves[2]]), torch.stack([ref_leaves[1], ref_leaves[3]]))
    want = torch.autograd.grad((ro, rl), ref_leaves, (do.double(), dlse.double()))
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)
    assert torch.equal(got[2][0], torch.zeros(8)) and got[3][0] == 0


def test_merge_state_gradient_of_two_empty_states_is_zero_not_nan():
    leaves = [torch.zeros(2, 4, requires_grad=True), torch.full((2,), float("-inf"), requires_grad=True),
              torch.zeros(2, 4, requires_grad=True), torch.full((2,), float("-inf"), requires_grad=True)]
    out, out_lse = merge_state(*leaves)
    (out.sum() + out_lse.clamp(min=-1).sum()).backward()
    for t in leaves:
        assert torch.equal(t.grad, torch.zeros_like(t))


def test_merge_states_is_differentiable_as_a_fold():
    o, lse = partials(3, (2,), 4, torch.float32, seed=7)
    o.requires_grad_()
    out, _ = merge_states(o, lse)
    out.sum().backward()
    ro = o.detach().double().requires_grad_()
    reference_merge(ro, lse)[0].sum().backward()
    torch.testing.assert_close(o.grad.double(), ro.grad, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- errors that name the fix
def test_merge_state_rejects_a_base2_or_half_lse_and_mismatched_shapes():
    o = torch.zeros(2, 8)
    with pytest.raises(TypeError, match="float32.*math.log\\(2\\)"):
        merge_state(o, torch.zeros(2, dtype=torch.float16), o, torch.zeros(2))
    with pytest.raises(ValueError, match="without its last"):
        merge_state(o, torch.zeros(3), o, torch.zeros(2))
    with pytest.raises(ValueError, match="share shape and dtype"):
        merge_state(o, torch.zeros(2), o.half(), torch.zeros(2))


def test_flashinfer_base2_conversion_in_the_docstring():
    assert "lse = lse_base2 * math.log(2)" in merge_state.__doc__ and "base 2" in merge_state.__doc__
