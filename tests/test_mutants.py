"""Every proof can fail: feed it a mutated operator or kernel term and watch it say FAILED.

The five mutants of issue 3 come first; then one mutant per remaining claim, so no claim
passes vacuously.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import sympy as sp
import torch
from sympy.codegen.cfunctions import exp2

from spec import masks
from spec import notation as n
from spec.proofs import backward as PB
from spec.proofs import kernel as K
from spec.proofs import mask_mod as PMM
from spec.proofs import masks as PM
from spec.proofs import ring as PRING
from spec.proofs import score_mods as PSM
from spec.proofs import sink_combine as PSC
from spec.proofs import softmax as PS
from spec.proofs import tools
from spec.proofs import varlen as PV
from spec import recurrences as R
from spec import reference, terms
from spec import varlen as V
from spec import ring as RING


def swap(term_seq, symbol, expr):
    """``term_seq`` with the (first) assignment to ``symbol`` replaced by ``expr``."""
    out, done = [], False
    for t in term_seq:
        if t.symbol == symbol and not done:
            t, done = replace(t, expr=expr), True
        out.append(t)
    assert done, f"no term assigns {symbol}"
    return tuple(out)


def assert_failed(result):
    assert not result.proved, f"mutant survived {result.id}"
    assert result.status == "FAILED"
    assert any(res != 0 for _, res in result.cases)


# ---------------------------------------------------------------- the issue's five mutants
def merge_without_rescaling_d(a, b, guarded=True):
    return R.merge(a, b, guarded)._replace(d=a.d + b.d)


def merge_o_with_other_sides_factor(a, b, guarded=True):
    m = sp.Max(a.m, b.m)
    fa, fb = sp.exp(a.m - R.guard(m)), sp.exp(b.m - R.guard(m))
    return R.State(m, a.d * fa + b.d * fb, a.o * fb + b.o * fa)


def merge_without_guard(a, b, guarded=True):
    return R.merge(a, b, guarded=False)


@pytest.mark.parametrize("prove", [PS.prove_merge_homomorphism, K.prove_block_update, PS.prove_lse_merge])
def test_merge_without_rescaling_d_is_refuted(prove):
    assert_failed(prove(merge=merge_without_rescaling_d))


@pytest.mark.parametrize("prove", [PS.prove_merge_homomorphism, PS.prove_merge_associative,
                                   K.prove_block_update])
def test_merge_rescaling_o_with_the_other_factor_is_refuted(prove):
    assert_failed(prove(merge=merge_o_with_other_sides_factor))


@pytest.mark.parametrize("prove", [K.prove_merge_identity, PS.prove_merge_associative])
def test_identity_without_the_guard_is_refuted(prove):
    r = prove(merge=merge_without_guard)
    assert_failed(r)
    assert any(res.has(sp.nan) for _, res in r.cases)  # the failure is the NaN itself


@pytest.mark.parametrize("group, symbol, naked", [
    ("forward_tile", n.m_safe, n.m_ij),
    ("epilogue", n.l_safe, n.l_i),
    ("backward_tile", n.lse2_safe, n.lse2),
])
def test_kernel_terms_without_their_guard_are_refuted(group, symbol, naked):
    seq = {"forward_tile": terms.FORWARD_TILE, "epilogue": terms.FORWARD_EPILOGUE,
           "backward_tile": terms.BACKWARD_TILE}[group]
    assert_failed(K.prove_merge_identity(**{group: swap(seq, symbol, naked)}))


def test_unguarded_tile_update_is_refuted_by_block_update():
    assert_failed(K.prove_block_update(forward_tile=swap(terms.FORWARD_TILE, n.m_safe, n.m_ij)))


FINITE_MASK = replace(masks.MASK_TERM, expr=sp.Piecewise((n.qk, masks.keep), (-10**4, True)))


@pytest.mark.parametrize("prove", [K.prove_merge_identity, K.prove_block_update])
def test_finite_mask_value_is_refuted_by_the_claims(prove):
    with tools.first_failure():  # the claim FAILS at its first failing case (spec.proofs.tools.first_failure)
        assert_failed(prove(mask_term=FINITE_MASK))


def fully_masked_rows_are_empty(out, lse, attend) -> bool:
    """Rows with no attended key must give output 0 and lse = -inf (and nowhere NaN)."""
    empty = ~attend.any(-1)
    return (bool(empty.any()) and not torch.isnan(out).any() and not torch.isnan(lse).any()
            and bool((out[empty] == 0).all()) and bool(torch.isneginf(lse[empty]).all()))


def test_finite_mask_value_is_caught_by_the_reference_check(monkeypatch):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    lengths = torch.tensor([0])  # every key is padding: every row is fully masked
    attend = torch.zeros(1, 2, 6, 6, dtype=torch.bool)
    out, lse = reference.attention(q, k, v, key_lengths=lengths)
    assert fully_masked_rows_are_empty(out, lse, attend)
    monkeypatch.setattr(reference, "MASKED_LOGIT", -1e4)
    out, lse = reference.attention(q, k, v, key_lengths=lengths)
    assert not fully_masked_rows_are_empty(out, lse, attend)  # it averages v instead


def causal_off_by_one(field, delta):
    def tile_bounds(kind):
        tb = masks.tile_bounds(kind)
        return replace(tb, **{field: getattr(tb, field) + delta}) if kind == "causal" else tb
    return tile_bounds


@pytest.mark.parametrize("field, delta", [("kv_end", -1), ("full_end", +1)])
def test_causal_classifier_off_by_one_is_refuted(field, delta):
    r = PM.prove_mask_tiles_sound(tile_bounds=causal_off_by_one(field, delta))
    assert_failed(r)
    assert all(res == 0 for name, res in r.cases if "causal" not in name)  # only causal breaks


def test_window_classifier_off_by_one_is_refuted():
    def tile_bounds(kind):
        tb = masks.tile_bounds(kind)
        return replace(tb, kv_start=tb.kv_start + 1) if kind == "window" else tb
    assert_failed(PM.prove_mask_tiles_sound(tile_bounds=tile_bounds))


def test_classifier_that_uses_the_wrong_corner_row_is_refuted():
    def tile_bounds(kind):  # kv_end from the first row instead of the last
        tb = masks.tile_bounds(kind)
        k = masks.MASK_KINDS[kind]
        return replace(tb, kv_end=k.hi.subs(n.i, masks.FIRST_ROW) + 1) if k.hi is not None else tb
    assert_failed(PM.prove_mask_tiles_sound(tile_bounds=tile_bounds))


# ---------------------------------------------------------------- the kernels' tile loops
B, KS, KE, FS, FE = n.B_c, masks.kv_start, masks.kv_end, masks.full_start, masks.full_end
LOOP_MUTANTS = {  # name: (the loop it feeds, the mutated term, the case that must catch it)
    "kv_hi rounded down": ("tile_loop", masks.kv_hi, sp.Max(masks.kv_lo, B * sp.floor(sp.Max(KE, 0) / B)),
                           "key loop: start <= j < end => j < hi"),
    "kv_lo rounded up": ("tile_loop", masks.kv_lo, B * sp.ceiling(KS / B), "key loop: start <= j < end => j >= lo"),
    "full_lo rounded down": ("tile_loop", masks.full_lo,
                             sp.Min(masks.kv_hi, sp.Max(masks.kv_lo, B * sp.floor(FS / B))),
                             "key loop: full tile [t, t+B) => t >= full_start"),
    "full_hi rounded up": ("tile_loop", masks.full_hi,
                           sp.Min(masks.kv_hi, sp.Max(masks.full_lo, B * sp.ceiling(sp.Max(FE, 0) / B))),
                           "key loop: full tile [t, t+B) => t + B <= full_end"),
    "kv_hi without the max(., 0) clamp": ("tile_loop", masks.kv_hi, sp.Max(masks.kv_lo, B * sp.ceiling(KE / B)),
                                          "key loop: ceiling operand e >= 0 (Triton // truncates)"),
    "full_hi without the max(., 0) clamp": ("tile_loop", masks.full_hi,
                                            sp.Min(masks.kv_hi, sp.Max(masks.full_lo, B * sp.floor(FE / B))),
                                            "key loop: floor operand f_e >= 0 (Triton // truncates)"),
    "full_lo not clamped to kv_hi": ("tile_loop", masks.full_lo, sp.Max(masks.kv_lo, B * sp.ceiling(FS / B)),
                                     "key loop: full_lo <= full_hi"),
    "full_lo not a whole tile": ("tile_loop", masks.full_lo, sp.Min(masks.kv_hi, sp.Max(masks.kv_lo, FS)),
                                 "key loop: full_lo is a multiple of BLOCK_N"),
    "q_hi rounded down": ("row_tile_loop", masks.q_hi,
                          sp.Max(masks.q_lo, n.B_r * sp.floor(sp.Max(masks.q_end, 0) / n.B_r)),
                          "query loop: start <= j < end => j < hi"),
}


@pytest.mark.parametrize("mutant", list(LOOP_MUTANTS))
def test_tile_loop_mutant_is_refuted(mutant):
    loop, symbol, expr, case = LOOP_MUTANTS[mutant]
    terms_ = {"tile_loop": masks.TILE_LOOP, "row_tile_loop": masks.ROW_TILE_LOOP}[loop]
    r = PM.prove_mask_tiles_sound(**{loop: swap(terms_, symbol, expr)})
    assert_failed(r)
    assert dict(r.cases)[case] != 0, [name for name, res in r.cases if res != 0]


def test_negative_initial_start_is_refuted():
    """kv_start = -1 keeps every key (sound for skipping) but makes `kv_start // BLOCK_N` truncate."""
    init = swap(masks.BOUNDS_INIT, masks.kv_start, sp.Integer(-1))
    r = PM.prove_mask_tiles_sound(bounds_init=init)
    assert_failed(r)
    assert dict(r.cases)["keys no kind: kv_start >= 0"] != 0


def test_full_range_past_the_keys_is_refuted():
    init = swap(masks.BOUNDS_INIT, masks.full_end, n.Nk + 1)  # the padding key N_K would run unmasked
    assert_failed(PM.prove_mask_tiles_sound(bounds_init=init))


def test_element_predicate_that_disagrees_with_the_spec_is_refuted():
    def keep_term(kind):  # causal with j < i + shift: the diagonal dropped
        t = masks.keep_term(kind)
        return replace(t, expr=sp.And(masks.keep, sp.Lt(n.j, n.i + n.shift))) if kind == "causal" else t
    assert_failed(PM.prove_mask_tiles_sound(keep_term=keep_term))
    no_padding = replace(masks.KEEP_INIT, expr=sp.Le(0, n.j))  # keys past N_K kept
    assert_failed(PM.prove_mask_tiles_sound(keep_init=no_padding))


# ---------------------------------------------------------------- one mutant per other claim
def test_online_step_without_rescaling_is_refuted():
    def online(m_prev, d_prev, x):
        m = sp.Max(m_prev, x)
        return m, d_prev + sp.exp(x - m)
    with tools.first_failure():
        assert_failed(PS.prove_online_softmax_invariant(online=online))


def test_fa1_step_that_forgets_the_old_denominator_is_refuted():
    def fa1(m_prev, d_prev, o_prev, x, v):
        m, d = R.online_step(m_prev, d_prev, x)
        return m, d, o_prev * sp.exp(m_prev - m) / d + sp.exp(x - m) * v / d
    assert_failed(PS.prove_fa2_deferred_normalisation(fa1=fa1))


def test_merge_that_favours_the_left_side_is_refuted_by_commutativity():
    def merge(a, b, guarded=True):
        good = R.merge(a, b, guarded)
        return good._replace(o=good.o + a.o)
    assert_failed(PS.prove_merge_commutative(merge=merge))


def test_scale_without_log2e_is_refuted():
    assert_failed(K.prove_exp2_rewrite(qk_scale=replace(terms.QK_SCALE, expr=n.sm_scale)))


def test_lse_in_log2_units_is_refuted():
    lse_term = terms.FORWARD_EPILOGUE[-1]
    log2_lse = sp.Piecewise((n.NEG_INF, sp.Eq(n.l_i, 0)), (n.m_i + sp.log(n.l_i, 2), True))
    assert_failed(K.prove_exp2_rewrite(epilogue=swap(terms.FORWARD_EPILOGUE, lse_term.symbol, log2_lse)))


def test_probabilities_shifted_by_the_old_max_are_refuted_by_safety():
    stale = exp2(n.qk * n.qk_scale - terms.col(n.m_i))  # the old max: exponent can be > 0
    assert_failed(K.prove_safety_bounds(forward_tile=swap(terms.FORWARD_TILE, n.p, stale)))


def test_delta_without_o_is_refuted():
    pre = swap(terms.BACKWARD_PREPROCESS, n.delta, terms.rowsum(n.do))
    assert_failed(K.prove_backward_delta(backward_preprocess=pre))


@pytest.mark.parametrize("prove", [K.prove_backward_ds, K.prove_backward_delta])
def test_lse_gradient_folded_with_the_wrong_sign_is_refuted(prove):
    """delta = rowsum(dO∘O) + dlse: right when the loss ignores lse, wrong as soon as it does."""
    pre = swap(terms.BACKWARD_PREPROCESS, n.delta, terms.rowsum(n.do * n.o) + n.dlse)
    r = prove(backward_preprocess=pre)
    assert_failed(r)
    assert all(res == 0 for name, res in r.cases if "dlse = g" not in name)  # only the lse case breaks


def test_ds_with_the_wrong_sign_is_refuted():
    wrong = n.p * (n.dp + terms.col(n.delta))
    assert_failed(K.prove_backward_ds(backward_tile=swap(terms.BACKWARD_TILE, n.ds, wrong)))


def test_dk_from_p_instead_of_ds_is_refuted():
    wrong = n.dk + terms.dot(terms.trans(n.p), n.q)
    assert_failed(PB.prove_backward_grads(backward_dkdv=swap(terms.BACKWARD_DKDV, n.dk, wrong)))


def test_dq_without_the_scale_is_refuted():
    assert_failed(PB.prove_backward_grads(backward_scale=swap(terms.BACKWARD_SCALE, n.dq, n.dq)))


# ---------------------------------------------------------------- the key-major dK/dV tile
KEY_MAJOR_MUTANTS = {  # name: (the argument of prove_backward_key_major, symbol, mutated expr, wrong axis?)
    "pT with col (per row) instead of row (per column)": (
        "backward_tile_t", n.pT, exp2(n.qkT * n.qk_scale - terms.col(n.lse2_safe)), True),
    "delta broadcast on the wrong axis": ("backward_tile_t", n.dsT, n.pT * (n.dpT - terms.col(n.delta)), True),
    "dk accumulated with dsT transposed again": (
        "backward_dkdv_t", n.dk, n.dk + terms.dot(terms.trans(n.dsT), n.q), True),
    "scores row-major (Q Kᵀ) in the key-major tile": ("backward_tile_t", n.qkT, terms.dot(n.q, terms.trans(n.k)), True),
    "dpT as dO Vᵀ": ("backward_tile_t", n.dpT, terms.dot(n.do, terms.trans(n.v)), True),
    "dv from dsT instead of pT": ("backward_dkdv_t", n.dv, n.dv + terms.dot(n.dsT, n.do), False),
    "dsT with the wrong sign of delta": ("backward_tile_t", n.dsT, n.pT * (n.dpT + terms.row(n.delta)), False),
}


@pytest.mark.parametrize("mutant", list(KEY_MAJOR_MUTANTS))
def test_key_major_mutant_is_refuted(mutant):
    """Each mutant fails at symbolic B_r, B_c, D: one that transposes or broadcasts along the wrong
    axis as an axis failure (the symbolic shape error), the others by value."""
    group, symbol, expr, wrong_axis = KEY_MAJOR_MUTANTS[mutant]
    seq = {"backward_tile_t": terms.BACKWARD_TILE_T, "backward_dkdv_t": terms.BACKWARD_DKDV_T}[group]
    r = PB.prove_backward_key_major(**{group: swap(seq, symbol, expr)})
    assert_failed(r)
    failed = [name for name, res in r.cases if res != 0]
    assert any(name.endswith(": axes") for name in failed) == wrong_axis, failed


def test_backward_grads_with_an_untransposed_p_is_an_axis_failure():
    """dV += P dO (no trans): the product sums keys against query rows, whatever the sizes."""
    r = PB.prove_backward_grads(backward_dkdv=swap(terms.BACKWARD_DKDV, n.dv, n.dv + terms.dot(n.p, n.do)))
    assert_failed(r)
    assert any(name.endswith(": axes") for name, res in r.cases if res != 0)


def test_key_major_tile_without_the_guard_is_refuted():
    """lse2_safe -> lse2: a query row with no key gives NaN columns instead of zero ones."""
    r = PB.prove_backward_key_major(backward_tile=swap(terms.BACKWARD_TILE, n.lse2_safe, n.lse2))
    assert_failed(r)
    assert all(res == 0 for name, res in r.cases if "lse = −∞" not in name)  # only the no-key case breaks
    assert any(res.has(sp.nan) for name, res in r.cases if "pT entry = 0" in name)


# ---------------------------------------------------------------- packed (varlen) segments
SEG_MUTANTS = {  # name: (the mutated SEGMENT term, its expression, a case that must catch it)
    "N_K one key too long": (n.Nk, V.seq_end_k - V.seq_start_k + 1, "keys: start + j < cu[b+1] (j = length - 1 - u)"),
    "N_Q from the key offsets": (n.Nq, V.seq_end_q - V.seq_start_k, "rows: length >= 0"),
    "top-left shift": (n.shift, sp.Integer(0), "shift is the reference's alignment of a segment"),
}


@pytest.mark.parametrize("mutant", list(SEG_MUTANTS))
def test_varlen_segment_mutant_is_refuted(mutant):
    symbol, expr, case = SEG_MUTANTS[mutant]
    r = PV.prove_varlen_segments_sound(segment=swap(V.SEGMENT, symbol, expr))
    assert_failed(r)
    assert dict(r.cases)[case] != 0, [name for name, res in r.cases if res != 0]


def test_varlen_tile_past_the_end_kept_alive_is_refuted():
    """start_m <= N_Q instead of <: the tile starting exactly at the segment's end keeps its keys."""
    off_by_one = replace(V.ROWS_PAST_END, expr=sp.Piecewise((n.Nk, sp.Le(n.start_m, n.Nq)), (0, True)))
    r = PV.prove_varlen_segments_sound(rows_past_end=off_by_one)
    assert_failed(r)
    assert dict(r.cases)["start_m >= N_Q: N_K = 0"] != 0


def test_varlen_full_tiles_past_the_segment_are_refuted():
    """full_end = N_K + 1: the key after the segment (the next segment's first) would be loaded
    without a mask; the same mutant is caught by the segment claim, not only by mask_tiles_sound."""
    r = PV.prove_varlen_segments_sound(bounds_init=swap(masks.BOUNDS_INIT, masks.full_end, n.Nk + 1))
    assert_failed(r)
    assert dict(r.cases)["causal: full_end <= N_K"] != 0
    rows = PV.prove_varlen_segments_sound(row_bounds_init=swap(masks.ROW_BOUNDS_INIT, masks.q_full_end, n.Nq + 1))
    assert dict(rows.cases)["no kind: q_full_end <= N_Q"] != 0


def test_varlen_loop_that_visits_an_empty_segment_is_refuted():
    """kv_hi at least one tile: a segment without keys would read its neighbour's first tile."""
    loop = swap(masks.TILE_LOOP, masks.kv_hi, sp.Max(masks.kv_lo + n.B_c, n.B_c * sp.ceiling(sp.Max(KE, 0) / n.B_c)))
    r = PV.prove_varlen_segments_sound(tile_loop=loop)
    assert_failed(r)
    assert dict(r.cases)["no kind: N_K = 0 visits no key tile"] != 0


def test_every_claim_has_a_mutant_here():
    import inspect
    import sys

    from spec.claims import REGISTRY

    source = inspect.getsource(sys.modules[__name__])
    for cid in REGISTRY:
        assert f"prove_{cid}" in source, f"no mutant feeds prove_{cid}"


# ---------------------------------------------------------------- score modifications (issue 15)
SOFTCAP_DROPPED = swap(terms.SOFTCAP, n.qk, n.qk)
ALIBI_SIGN = swap(terms.ALIBI, n.qk, n.qk + n.alibi_coef * sp.Abs(n.i + n.shift - n.j))
ALIBI_NO_SHIFT = swap(terms.ALIBI, n.qk, n.qk - n.alibi_coef * sp.Abs(n.i - n.j))
SINK_GRAD_SIGN = swap(terms.SINK_GRAD, n.dsink, sp.exp(n.sink - n.lse) * n.delta)
SOFTCAP_DS_DROPPED = swap(terms.SOFTCAP_DS, n.ds, n.ds)


def sink_per_split(splits, sink):
    """The mutant combine: every split merges the sink's state (a sink per split)."""
    return R.fold([R.merge(s, R.sink_state(sink)) for s in splits])


@pytest.mark.parametrize("mutant", ["softcap_dropped", "alibi_sign", "alibi_no_shift", "mask_before_mod"])
def test_score_mod_invariant_catches(mutant):
    kw = {"softcap_dropped": dict(softcap_terms=SOFTCAP_DROPPED), "alibi_sign": dict(alibi_terms=ALIBI_SIGN),
          "alibi_no_shift": dict(alibi_terms=ALIBI_NO_SHIFT), "mask_before_mod": dict(mod_before_mask=False)}[mutant]
    with tools.first_failure():
        assert_failed(PSM.prove_score_mod_invariant(**kw))


@pytest.mark.parametrize("mutant", ["t_unbounded", "bias_positive", "sink_fold_unguarded_max"])
def test_score_mod_bounds_catches(mutant):
    kw = {"t_unbounded": dict(softcap_terms=swap(terms.SOFTCAP, n.t, 1 - 2 / (exp2(n.qk * n.softcap_in) - 1))),
          "bias_positive": dict(alibi_terms=ALIBI_SIGN),
          # the sink fold shifted by the old max only: e^{sink - m} > 1 when the sink is larger
          "sink_fold_unguarded_max": dict(sink_fold=swap(terms.SINK_FOLD, n.m_ij, n.m_i))}[mutant]
    assert_failed(PSM.prove_score_mod_bounds(**kw))


#: issue 23 row 10: the sink fold shifted by the unguarded max (sink = -inf on a row with no key:
#: -inf - (-inf), NaN), and dsink's e^{sink - lse} unguarded (NaN where lse = sink = -inf)
SINK_FOLD_UNGUARDED = tuple(replace(t, expr=t.expr.xreplace({n.m_safe: n.m_ij})) for t in terms.SINK_FOLD
                            if t.symbol != n.m_safe)
SINK_GRAD_UNGUARDED = swap(terms.SINK_GRAD, n.dsink, -sp.exp(n.sink - n.lse) * n.delta)


def test_sink_claims_catch_the_unguarded_minus_inf_sink():
    with tools.first_failure():  # the detail names the first failing case, as without it
        res = PSM.prove_sink_once(sink_fold=SINK_FOLD_UNGUARDED)
        assert_failed(res)
        assert "sink = -oo" in res.detail
        res = PSM.prove_sink_grad(sink_grad=SINK_GRAD_UNGUARDED)
    assert_failed(res)
    assert "sink = -oo" in res.detail


def test_sink_once_catches_a_sink_per_tile_and_per_split():
    with tools.first_failure():
        assert_failed(PSM.prove_sink_once(forward_tile=terms.FORWARD_TILE + terms.SINK_FOLD, sink_fold=()))
        assert_failed(PSM.prove_sink_once(combine=sink_per_split))
        assert_failed(PSM.prove_sink_once(sink_fold=()))  # no sink at all


# ------------------------------------------- the split-KV decode combine (sink_once_combine)
def _step_with_sink(acc, partial, sink, merge_terms, sink_terms):
    """The mutant combine step: every split merges the sink's partial after its own (once per split)."""
    return PSC.combine_finish(PSC.combine_step(acc, partial, sink, merge_terms, sink_terms), sink, merge_terms,
                              sink_terms)


def _finish_without_sink(acc, sink, merge_terms, sink_terms):
    return acc


@pytest.mark.parametrize("mutant", ["sink_per_split", "sink_per_split_and_once", "sink_never",
                                    "sink_partial_value_1", "sink_partial_scaled"])
def test_sink_once_combine_catches(mutant):
    """The induction's step sees the sink merged per split (with or without the final merge), the
    finish sees it missing, and a wrong SINK_PARTIAL (value 1, or the sink in log2 units) fails too."""
    kw = {"sink_per_split": dict(step=_step_with_sink, finish=_finish_without_sink),
          "sink_per_split_and_once": dict(step=_step_with_sink),
          "sink_never": dict(finish=_finish_without_sink),
          "sink_partial_value_1": dict(sink_terms=swap(terms.SINK_PARTIAL, n.o_b, sp.Integer(1))),
          "sink_partial_scaled": dict(sink_terms=swap(terms.SINK_PARTIAL, n.lse_b, n.sink * n.LOG2E))}[mutant]
    with tools.first_failure():
        res = PSC.prove_sink_once_combine(**kw)
    assert_failed(res)
    failing = [label for label, residual in res.cases if residual != 0]
    if mutant.startswith("sink_per_split"):  # caught by the induction step itself, not only the end-to-end check
        assert any(label.startswith("step:") for label in failing), failing


# issue 23 row 8: the cap's t, its rational branch and the counts behind SOFTCAP_REL
SOFTCAP_EXP2_ONLY = swap(terms.SOFTCAP, n.t, terms.SOFTCAP_EXP2)  # the old line: absolute error ~u
SOFTCAP_CF_COEF = swap(terms.SOFTCAP, n.t, sp.Piecewise(
    (n.y * (945 + n.y2 * (105 + n.y2)) / (945 + n.y2 * (420 + 14 * n.y2)), sp.Abs(n.y) < 1), (terms.SOFTCAP_EXP2, True)))
SOFTCAP_SHORT_CF = swap(terms.SOFTCAP, n.t, sp.Piecewise(  # C_3, cut after 7: ~100u at |y| = 1
    (n.y * (105 + 10 * n.y2) / (105 + n.y2 * (45 + n.y2)), sp.Abs(n.y) < 1), (terms.SOFTCAP_EXP2, True)))
SOFTCAP_SPLIT_LOW = swap(terms.SOFTCAP, n.t, sp.Piecewise(
    (terms.SOFTCAP_RATIONAL, sp.Abs(n.y) < sp.Rational(1, 8)), (terms.SOFTCAP_EXP2, True)))
SOFTCAP_Y_UNSCALED = swap(terms.SOFTCAP, n.y, n.qk)
SOFTCAP_Y2_WRONG = swap(terms.SOFTCAP, n.y2, n.y)


@pytest.mark.parametrize("mutant", ["exp2_only", "cf_coefficient", "short_cf", "split_low", "y_unscaled", "y2_wrong",
                                    "fewer_roundings", "smaller_cf_bound", "exp2_bound_too_small"])
def test_softcap_accuracy_catches(mutant):
    kw = {"exp2_only": dict(softcap_terms=SOFTCAP_EXP2_ONLY), "cf_coefficient": dict(softcap_terms=SOFTCAP_CF_COEF),
          "short_cf": dict(softcap_terms=SOFTCAP_SHORT_CF), "split_low": dict(softcap_terms=SOFTCAP_SPLIT_LOW),
          "y_unscaled": dict(softcap_terms=SOFTCAP_Y_UNSCALED), "y2_wrong": dict(softcap_terms=SOFTCAP_Y2_WRONG),
          "fewer_roundings": dict(num_roundings=5), "smaller_cf_bound": dict(cf=2.0**-30),
          "exp2_bound_too_small": dict(exp2_branch=2.0**-24)}[mutant]
    assert_failed(PSM.prove_softcap_accuracy(**kw))


# issue 23 row 9: the modified score in log2 units, the tile at scale 1, no quotient by the scale
@pytest.mark.parametrize("mutant", ["tile_scale_kept", "score_log2_dropped", "score_log2_scalar_unfolded",
                                    "alibi_raw_units", "softcap_raw_units"])
def test_score_mod_log2_units_catch(mutant):
    kw = {"tile_scale_kept": dict(mod_tile_scale=replace(terms.MOD_TILE_SCALE, expr=terms.QK_SCALE.expr)),
          "score_log2_dropped": dict(score_log2=swap(terms.SCORE_LOG2, n.qk, n.qk)),
          "score_log2_scalar_unfolded": dict(score_log2_scalar=replace(terms.SCORE_LOG2_SCALAR, expr=n.sm_scale)),
          # the old raw-score units: slope / scale and c / scale (they overflowed fp32 for tiny scales)
          "alibi_raw_units": dict(alibi_scalar=replace(terms.ALIBI_SCALAR, expr=n.slope / n.sm_scale)),
          "softcap_raw_units": dict(softcap_scalars=swap(terms.SOFTCAP_SCALARS, n.softcap_out,
                                                         n.softcap / n.sm_scale))}[mutant]
    with tools.first_failure():
        assert_failed(PSM.prove_score_mod_invariant(**kw))


def _alibi_exponent_without_the_bias_roundings(scaled_abs, factor, bias, g_k, u):
    """alibi_exponent with the bias's own roundings dropped (γ_k): only the add's, as if the bias were exact."""
    return scaled_abs * ((1 + factor) * (1 + u * (1 + 2 * u)) - 1) + bias * ((1 + u) * (1 + 2 * u) - 1)


@pytest.mark.parametrize("mutant", ["bias_roundings_dropped", "score_add_dropped", "miscounted_bias",
                                    "miscounted_score_log2", "printed_bias_rounded_once_more",
                                    "forward_bound_ignores_alibi", "forward_bound_alibi_with_the_plain_scale"])
def test_forward_error_bound_catches_alibi_mutants(mutant):
    """Issue 23 deliverable 2, ALiBi in the bound (claim forward_error_bound (vi)): the lemma without the bias's
    γ_4 or without the add's rounding of the score is refuted by z3; a count below the printed terms' (the bias's
    4 roundings, the raw score's 3 into log2 units) or a printed bias with one more rounding fails the count;
    forward_bound ignoring alibi=β, or using the plain path's γ_2 for the score, is not the stated composition."""
    from spec import error_bound as EB

    def plain_scale(dtype, n_k, block_n, head_dim, scaled_abs, lse=0.0, num=EB.FLOATS, softcap=False, *, alibi=None):
        if alibi is None or softcap:
            return EB.forward_bound(dtype, n_k, block_n, head_dim, scaled_abs, lse, num, softcap, alibi=alibi)
        # the raw score's 3 roundings into log2 units counted as the plain path's 2: a smaller E
        scale_rounding = EB.alibi_exponent(scaled_abs, EB.score_factor(num.gamma(head_dim), num.gamma(3), num.U),
                                           0, 0, num.U) - EB.alibi_exponent(
            scaled_abs, EB.score_factor(num.gamma(head_dim), num.gamma(2), num.U), 0, 0, num.U)
        b = EB.forward_bound(dtype, n_k, block_n, head_dim, scaled_abs, lse, num, softcap, alibi=alibi)
        return EB.Bound(b.out, b.lse_abs, b.exponent - scale_rounding)

    rounded_twice = terms.Term(n.qk, n.qk - n.alibi_coef * n.LOG2E * n.LN2 * sp.Float(1.0) * sp.Abs(n.i + n.shift - n.j),
                               "score_mod_invariant", "the bias rounded once more")
    kw = {"bias_roundings_dropped": dict(alibi_factor=_alibi_exponent_without_the_bias_roundings),
          "score_add_dropped": dict(alibi_factor=lambda sA, phi, b, g, u: sA * phi + b * ((1 + g) * (1 + u) * (1 + 2 * u) - 1)),
          "miscounted_bias": dict(alibi_roundings=3),
          "miscounted_score_log2": dict(score_log2_roundings=2),
          "printed_bias_rounded_once_more": dict(alibi_terms=(terms.ALIBI_SCALAR, rounded_twice)),
          "forward_bound_ignores_alibi": dict(bound=lambda *a, alibi=None, **k: EB.forward_bound(*a, **k)),
          "forward_bound_alibi_with_the_plain_scale": dict(bound=plain_scale)}[mutant]
    assert_failed(PF.prove_forward_error_bound(**kw))


def test_softcap_bounds_and_error_bound_catch():
    # a rational branch that leaves [-1, 1]: y·(945 + ...)/(945 − ...) grows past 1 before |y| = 1
    wide = swap(terms.SOFTCAP, n.t, sp.Piecewise(
        (n.y * (945 + n.y2 * (105 + n.y2)) / (945 + n.y2 * (15 * n.y2 - 420)), sp.Abs(n.y) < 1), (terms.SOFTCAP_EXP2, True)))
    assert_failed(PSM.prove_score_mod_bounds(softcap_terms=wide))
    # the error bound's softcap factor without t's error (or without the output roundings)
    from spec import error_bound as EB
    assert_failed(PF.prove_forward_error_bound(softcap_factor=lambda gd, g2, g5, rho, u: EB.score_factor(gd, g2, u)))
    assert_failed(PF.prove_forward_error_bound(
        softcap_factor=lambda gd, g2, g5, rho, u: (1 + gd) * (1 + g2) * (1 + rho) * (1 + 2 * u) - 1))
    # forward_bound ignoring the softcap: not the stated composition
    assert_failed(PF.prove_forward_error_bound(bound=lambda *a, softcap=False, **kw: EB.forward_bound(*a, **kw)))


def test_gradient_claims_catch():
    assert_failed(PSM.prove_softcap_grad(softcap_ds=SOFTCAP_DS_DROPPED))
    assert_failed(PSM.prove_softcap_grad(softcap_terms=SOFTCAP_DROPPED))
    assert_failed(PSM.prove_sink_grad(sink_grad=SINK_GRAD_SIGN))


# ---------------------------------------------------------------- the host rewrites (issue 11)
@pytest.mark.parametrize("mutant", ["abs_without_flip", "keep_sign"])
def test_scale_rewrite_claim_catches_mutants(mutant):
    from spec.proofs.rewrites import prove_scale_sign_rewrite  # q' = q with s' = |s|: the logits change sign

    rewrite = {"abs_without_flip": lambda q, s: (q, abs(s)) if s != 0 else (q * 0, 1),
               "keep_sign": lambda q, s: (q, s)}[mutant]
    assert not prove_scale_sign_rewrite(rewrite).proved


def test_window_clamp_claim_catches_a_too_tight_bound():
    from spec.proofs.rewrites import prove_window_clamp

    assert prove_window_clamp().proved
    assert not prove_window_clamp(lambda n_q, n_k: n_k).proved  # bottom_right with N_q < N_k needs more


def test_decode_window_clamped_to_one_page_is_refuted():
    """Audit of issue 24's additions: decode's capacity taken as k_cache.shape[1] with a paged cache (one page,
    not PAGE_SIZE·max_pages) clamped a window to N_q + PAGE_SIZE (out 0.86 off, paged, window (30, 0))."""
    from spec import rewrites
    from spec.proofs.rewrites import _window_sites, prove_window_clamp

    sites = _window_sites()
    site, tensors, problem = sites["decode, paged"]
    sites["decode, paged"] = (lambda w, q, k_cache, bt: rewrites.window_clamp(w, q.shape[1], k_cache.shape[1]),
                              tensors, problem)
    r = prove_window_clamp(sites=sites)
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    assert failing and all(name.startswith("decode, paged call site") for name in failing), failing


def test_window_sides_swapped_at_launch_are_refuted():
    """Audit of issue 24's additions: the launch's window sides swapped (`window_right, window_left = window`, in
    generator.runtime.launch.mask_launch or the decode launcher) put out 2.6 off (window (7, 2)); the sides now
    ride spec.launch.window_arguments, which claim window_clamp reads through the printed window kind."""
    from spec.proofs.rewrites import prove_window_clamp

    r = prove_window_clamp(window_arguments=lambda w: {"window_left": w[1], "window_right": w[0]})
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    assert failing == ["window_arguments: the printed window kind at the launch's sides keeps -left <= j - (i + "
                       "shift) <= right"], failing


def test_dense_shift_with_its_lengths_swapped_is_refuted():
    """Audit of issue 24's additions: the dense launch's shift as alignment_shift(alignment, N_k, N_q) put out
    2.9 off (causal, bottom-right, N_q = 24, N_k = 40) in both directions."""
    from spec import masks, notation
    from spec.proofs.rewrites import prove_window_clamp

    def swapped(alignment, q, k):
        return masks.ALIGNMENT_SHIFT[alignment].subs({notation.Nq: k.shape[2], notation.Nk: q.shape[2]})
    r = prove_window_clamp(dense_shift=swapped)
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    assert failing == ["dense call site, bottom_right: the launch's shift is the reference's"], failing


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_block_map_at_swapped_tiles_is_refuted(direction):
    """Audit of issue 24's conversions: dispatch.mask_arguments building the dense block map at (BLOCK_N, BLOCK_M)
    tiles put out 0.95 off (mask, block (16, 32)); the tiles are now spec.launch.block_map_tiles, which both
    directions' address claims read (the forward's entry must classify exactly its tile, the backward's hold it)."""
    from spec import launch as L
    from spec.proofs import addresses as PA

    def swapped(module):
        rows, keys = L.block_map_tiles(module)
        return keys, rows
    prove = {"forward": PA.prove_forward_addresses, "backward": PA.prove_backward_kernel_addresses}[direction]
    r = prove(map_tiles=swapped)
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    assert any(name.startswith("the block map's entry") or name.startswith("dkdv, dq: the block map's entry")
               for name in failing), failing


_MAP_STATE_MUTANTS = {
    "partial_called_full": lambda a, v, where: where(a == 0, 0, 2),
    "one_short_called_full": lambda a, v, where: where(a == 0, 0, where(a >= v - 1, 2, 1)),
    "one_attended_called_empty": lambda a, v, where: where(a <= 1, 0, where(a == v, 2, 1))}


def test_block_map_partial_tile_called_full_is_refuted():
    """The runtime's classification of a dense mask's tiles (dispatch.block_map evaluates spec.masks.map_state
    with torch.where): a partial tile called FULL runs without the per-element mask; claim mask_tiles_sound
    fails on it (and on the near misses below, its map cases alone)."""
    from spec.proofs import masks as PM

    r = PM.prove_mask_tiles_sound(map_state=_MAP_STATE_MUTANTS["partial_called_full"])
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    assert failing == ["dense block map: FULL (no per-element mask) only when every valid element is attended"], failing


@pytest.mark.parametrize("mutant", ["one_short_called_full", "one_attended_called_empty"])
def test_block_map_near_misses_are_refuted(mutant):
    from spec import masks as M
    from spec.proofs import masks as PM

    assert (M.MAP_EMPTY, M.MAP_PARTIAL, M.MAP_FULL) == (0, 1, 2)  # the codes the mutants above spell
    failing = [name for name, res in PM._map_state_cases(_MAP_STATE_MUTANTS[mutant]) if res != 0]
    assert failing == ["dense block map: EMPTY (the kernels skip the tile) only when no element is attended"
                       if mutant == "one_attended_called_empty" else
                       "dense block map: FULL (no per-element mask) only when every valid element is attended"]
    assert all(res == 0 for _, res in PM._map_state_cases(M.map_state))


def test_ring_step_with_rank_and_source_swapped_is_refuted():
    """Audit of issue 24's additions: the runtime's step planned as plan_step(layout, P, src, rank, ...) (the two
    ranks swapped) attended future keys on rank 0 and skipped rank 0's keys on rank 1 (P = 2, causal)."""
    from spec import ring as RG
    from spec.proofs.ring import prove_ring_schedule

    def swapped(layout, P, rank, step, causal, size):
        src = RG.source_rank(rank, step, P)
        return src, RG.plan_step(layout, P, src, rank, causal, size)
    r = prove_ring_schedule(step_of=swapped)
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    assert failing == [f"{layout}: the runtime's step (step_of) holds source_rank's shard and plans its chunks' "
                       "causal pairs" for layout in RG.LAYOUTS], failing


# ---------------------------------------------------------------- decode's KV reads (spec.paged)
def _paged_failures(**mutant):
    from spec.proofs import paged as PP
    r = PP.prove_paged_kv_reads(**mutant)
    assert_failed(r)
    return {name for name, res in r.cases if res != 0}


def test_split_end_past_cache_seqlens_is_refuted():
    """split_hi = split_lo + chunk without the min: the last split reads keys >= key_len."""
    from spec import paged
    hi = swap(paged.SPLIT_RANGE, paged.split_hi, paged.split_lo + paged.chunk)
    assert _paged_failures(split_range=hi) == {"no key outside [key_lo, key_len) is read"}


def test_splits_rounded_down_are_refuted():
    """chunk = key_len // num_splits: the keys of the remainder are never read."""
    from spec import paged
    short = swap(paged.SPLIT_RANGE, paged.chunk, sp.floor((n.key_len - paged.key_lo) / paged.num_splits))
    assert "every key key_lo <= j < key_len is read (split (j - key_lo) // chunk)" in _paged_failures(split_range=short)


def test_splits_from_zero_ignore_the_left_padding():
    """split_lo = split·chunk (no key_lo): split 0 reads the left padding before cache_leftpad[b]."""
    from spec import paged
    from0 = swap(paged.SPLIT_RANGE, paged.split_lo, paged.split * paged.chunk)
    assert "no key outside [key_lo, key_len) is read" in _paged_failures(split_range=from0)


def test_fixed_splits_past_the_row_end_are_refuted():
    """batch_invariant's fixed splits without the min(…, key_len): the last split reads past the row."""
    from spec import paged
    hi = swap(paged.SPLIT_RANGE_FIXED, paged.split_hi, paged.split_lo + paged.split_keys)
    assert _paged_failures(split_range_fixed=hi) == {"fixed splits: no key outside [key_lo, key_len) is read"}


# ---------------------------------------------------------------- batch invariance (issue 26)
def test_a_split_size_from_the_batch_is_refuted():
    """Fixed splits sized by num_splits (which the batch's largest cache sets): the plan of a row then
    depends on the batch, and batch_invariant_splits says so."""
    from spec import paged
    from spec.proofs import paged as PP
    by_batch = swap(paged.SPLIT_RANGE_FIXED, paged.split_lo,
                    paged.key_lo + paged.split * paged.split_keys * paged.num_splits)
    r = PP.prove_batch_invariant_splits(split_range_fixed=by_batch)
    assert_failed(r)
    assert {name for name, res in r.cases if res != 0} >= {"split_lo depends on the row's key_lo, key_len and the split only"}


def test_batch_invariant_splits_rounded_down_are_refuted():
    """The runtime's split count floor(capacity / split_keys) (audit of round three: a 600-key cache lost keys
    512…, error 0.43, while every claim proved): the launch's splits no longer cover every key."""
    import sympy as sp
    from spec.proofs import paged as PP
    r = PP.prove_batch_invariant_splits(num_splits=lambda capacity, keys: sp.Max(1, sp.floor(capacity / keys)))
    assert_failed(r)
    assert [name for name, res in r.cases if res != 0] == [
        "the launch's num_splits fixed splits cover every key: key_lo + num_splits·split_keys >= key_len for key_len "
        "<= capacity"]

def test_a_merge_exact_only_in_real_arithmetic_is_refuted():
    """lse = log(e^{lse_a} + e^{lse_b}) without the shift by lse_max: the same value in real
    arithmetic, but merging an empty split then rounds (log2(exp2(lse·log2 e))): a row's bits would
    depend on how many empty splits the batch adds."""
    from sympy.codegen.cfunctions import log2 as log2_
    from spec.proofs import paged as PP
    unshifted = swap(terms.MERGE_STATE, n.lse, log2_(exp2(n.lse_a * n.LOG2E) + exp2(n.lse_b * n.LOG2E)) * n.LN2)
    r = PP.prove_batch_invariant_splits(merge=unshifted)
    assert_failed(r)
    assert any("every operation's exact result" in name for name, res in r.cases if res != 0)


# ---------------------------------------------------------------- rotary embedding (issue 26)
def _rotary_failures(**mutant):
    from spec.proofs import rotary as PRO
    r = PRO.prove_rotary_rotation(**mutant)
    assert_failed(r)
    return {name for name, res in r.cases if res != 0}


def test_rotary_with_the_sign_flipped_is_refuted():
    """x·cos − sign·x_pair·sin rotates by −θ: still relative (⟨R_{−m} q, R_{−n} k⟩ depends on m − n), but
    not the reference's rotation: the claim's first part catches it."""
    from spec import rotary as RO
    flipped = swap(RO.INTERLEAVED, RO.ro_sign, 1 - 2 * RO.ro_odd)
    failed = _rotary_failures(interleaved=flipped)
    assert any(name.startswith("GPT-J: the first lane") for name in failed)


def test_rotary_halves_paired_with_the_wrong_partner_are_refuted():
    from spec import rotary as RO
    wrong = swap(RO.HALVES, RO.ro_pair, RO.d + RO.rotary_half - RO.rotary_half * RO.ro_second)
    assert any(name.startswith("GPT-NeoX") for name in _rotary_failures(halves=wrong))


def test_rotary_reading_the_lane_column_is_refuted():
    """cos[pos, d] instead of cos[pos, d // 2] (GPT-J): the pair's lanes read different angles."""
    from spec import rotary as RO
    wrong = swap(RO.INTERLEAVED, RO.ro_freq, RO.d)
    assert any(name.startswith("GPT-J") for name in _rotary_failures(interleaved=wrong))


def test_rotary_not_a_rotation_is_refuted():
    """x·cos + x_pair·sin on both lanes (no sign): not R(θ), and the score is not relative."""
    from spec import rotary as RO
    (term,) = RO.ROTATE
    bad = (replace(term, expr=sp.Piecewise((RO.x * RO.cos + RO.x_pair * RO.sin, RO.d < 2 * RO.rotary_half),
                                            (RO.x, True))),)
    failed = _rotary_failures(rotate=bad)
    assert "(R_m q)·(R_n k) depends on m − n only" in failed and "ROTATE is R(θ) on the pair's first lane" in failed


def test_rotary_rotating_the_tail_lanes_is_refuted():
    """The select on d < rotary_dim dropped (partial rotary_dim would rotate every lane)."""
    from spec import rotary as RO
    (term,) = RO.ROTATE
    bad = (replace(term, expr=sp.Piecewise((RO.x * RO.cos + RO.ro_sign * RO.x_pair * RO.sin, sp.true))),)
    assert _rotary_failures(rotate=bad)


def test_rotary_position_without_the_token_is_refuted():
    from spec import rotary as RO
    bad = swap(RO.ROTARY_POSITION, RO.ro_pos, RO.seqlen)
    assert "the table row with PER_TOKEN = 1" in _rotary_failures(position=bad)


def _host(**change):
    """spec.rotary.kvcache_rotary with some of its outputs changed (a host-glue mutant)."""
    from spec import rotary as RO

    def host(cs, n_new, causal, window, cos, sin, interleaved):
        ro = RO.kvcache_rotary(cs, n_new, causal, window, cos, sin, interleaved)
        return ro._replace(**{name: f(ro, cs, n_new) for name, f in change.items()})
    return host


def test_kvcache_append_rotating_v_is_refuted():
    """Audit of issue 24's conversions: kvcache_append_op appending v with the rotary tables too put out 0.13
    off (causal); which tensors are rotated is now spec.rotary.kvcache_appends, which the op launches and claim
    rotary_rotation reads."""
    from spec import rotary as RO

    def v_rotated(k, v, k_cache, v_cache, cos, sin, interleaved, per_token):
        keys, _ = RO.kvcache_appends(k, v, k_cache, v_cache, cos, sin, interleaved, per_token)
        return keys, RO.AppendLaunch(v, v_cache, dict(keys.rotary))
    assert _rotary_failures(appends=v_rotated) == {
        "new v is written as it is (no rotary tables: FlashAttention rotates q and k, never v)"}


def test_rotary_q_at_the_positions_after_the_append_is_refuted():
    """The audit edit (round three): q rotated at cache_seqlens + N_new, the positions after the append (error
    1.19, 1.05 causal; only test_kvcache_append saw it): the query rows are no longer the reference's, nor, causal
    or windowed, the rows their keys are appended at."""
    failed = _rotary_failures(host=_host(query_start=lambda ro, cs, n_new: cs + n_new))
    assert {f"{tag}: query t is rotated at the reference's row" for tag in (
        "causal=False, window=None", "causal=True, window=None", "causal=False, window=given",
        "causal=True, window=given")} <= failed
    assert "causal=True, window=None: query t is rotated at the row its key is appended at (cache_seqlens[b] + t)" \
        in failed


def test_rotary_host_glue_mutants_are_refuted():
    """Keys rotated all at cache_seqlens[b] (PER_TOKEN 0); q per token only when causal (the window forgotten); q
    given the other layout; the attention run over cache_seqlens[b] keys (the append not counted)."""
    failed = _rotary_failures(host=_host(key_per_token=lambda ro, cs, n_new: 0))
    assert "causal=False, window=None: new key t is rotated at the row of its printed append index offs_j" in failed
    from spec import rotary as RO

    def causal_only(cs, n_new, causal, window, cos, sin, interleaved):
        return RO.kvcache_rotary(cs, n_new, causal, None, cos, sin, interleaved)
    assert "causal=False, window=given: query t is rotated at the reference's row" in _rotary_failures(
        host=causal_only)
    failed = _rotary_failures(host=_host(interleaved=lambda ro, cs, n_new: not ro.interleaved))
    assert "causal=True, window=None, interleaved=True: both launches get the user's tables and layout" in failed
    failed = _rotary_failures(host=_host(key_lengths=lambda ro, cs, n_new: cs))
    assert "causal=True, window=None: the attention runs over cache_seqlens[b] + N_new keys" in failed


def test_rotary_table_row_mask_mutants_are_refuted():
    """The printed mask on the tables' rows (spec.addresses.APPEND_ROW_OK) dropped, or pos <= SEQLEN_RO (one row
    past the table): append_addresses' cos/sin extents fail; a mask one row short refuses a key's row
    (rotary_rotation)."""
    from spec.proofs import addresses as PAD_
    (term,) = AD.APPEND_ROW_OK
    for bad in (sp.true, sp.LessThan(AD.offs_pos, AD.seqlen_ro)):
        mutated = dict(AD.APPEND_GROUPS, row_ok=(replace(term, expr=bad),))
        failing = _failing(PAD_.prove_append_addresses(groups=mutated))
        assert all("cos/sin[pos, freq] inside" in name for name in failing)
        assert len(failing) == 12, failing  # 3 destinations x 2 layouts x 2 PER_TOKEN
    short = (replace(term, expr=sp.StrictLessThan(AD.offs_pos, AD.seqlen_ro - 1)),)
    assert any(name.startswith("a new key's row lies in [0, seqlen_ro)") for name in _rotary_failures(row_ok=short))


def test_rotary_lane_mask_mutants_are_refuted():
    """The printed rotary lane mask (spec.addresses.APPEND_RO_LANE, ro_ok) one lane long, d <= 2·ROTARY_HALF: the
    lane d = rotary_dim reads a partner outside x (GPT-NeoX: lane −R) and a table column past R, and is not a lane
    ROTATE rotates; one half short, d < ROTARY_HALF: the mask is no longer the rotated lanes (the second half would
    read cos 1, sin 0: kept unrotated)."""
    from spec import rotary as RO
    from spec.proofs import addresses as PAD_
    (term,) = AD.APPEND_RO_LANE
    lanes = [f"{kind}: the rotary lanes ro_ok are d < rotary_dim = 2·R, the lanes ROTATE rotates"
             for kind in ("paged", "cache", "tensor")]
    long_ = (replace(term, expr=sp.LessThan(AD.offs_d, 2 * RO.rotary_half)),)
    failing = _failing(PAD_.prove_append_addresses(groups=dict(AD.APPEND_GROUPS, ro_lane=long_)))
    assert set(lanes) <= set(failing), failing
    for kind in ("paged", "cache", "tensor"):
        for layout in ("GPT-J", "GPT-NeoX"):
            assert f"{kind}: {layout}: partner x[b, t, head, pair] inside (rotary lanes; rotary_dim <= D, " \
                   "rotary_cos's rule)" in failing, failing
    short = (replace(term, expr=sp.StrictLessThan(AD.offs_d, RO.rotary_half)),)
    assert _failing(PAD_.prove_append_addresses(groups=dict(AD.APPEND_GROUPS, ro_lane=short))) == lanes


def _append_launch_failing(**change):
    from spec import launch as LA_
    from spec.proofs import addresses as PAD_

    def bad(x, dst, cs, table, bi, cos, sin, block_t):
        grid, ints = LA_.append_launch(x, dst, cs, table, bi, cos, sin, block_t)
        return grid, dict(ints, **{name: f(ints, cos) for name, f in change.items()})
    return _failing(PAD_.prove_append_addresses(launch=bad))


def test_rotary_tables_launched_with_one_row_too_many_are_refuted():
    """append_launch passing SEQLEN_RO = seqlen_ro + 1: the mask admits a row past the tables."""
    failing = _append_launch_failing(SEQLEN_RO=lambda ints, cos: ints["SEQLEN_RO"] + 1)
    assert len(failing) == 12 and all("cos/sin[pos, freq] inside" in name for name in failing), failing


def test_rotary_half_launched_from_the_tables_rows_is_refuted():
    """ROTARY_HALF = rotary_cos.shape[0] (the rows, not the columns): rotary lanes read table columns past R
    and partner lanes past D."""
    failing = _append_launch_failing(ROTARY_HALF=lambda ints, cos: cos.shape[0])
    assert any("partner x[b, t, head, pair] inside" in name for name in failing), failing
    assert any("cos/sin[pos, freq] inside" in name for name in failing), failing


def test_page_slot_off_by_one_is_refuted():
    from spec import paged
    gather = swap(paged.PAGE_GATHER, paged.slot, n.j - paged.page_idx * paged.page_size + 1)
    assert "0 <= slot < page_size" in _paged_failures(page_gather=gather)


# ---------------------------------------------------------------- ring attention (issue 17)
def _ring_zigzag(chunk, owner=None, owner_slot=None):
    lay = RING.LAYOUTS["zigzag"]
    return {"zigzag": RING.Layout("zigzag", 2, chunk, lay.owner if owner is None else owner,
                                  lay.owner_slot if owner_slot is None else owner_slot, "mutant")}


def test_ring_layout_mutant_is_caught():
    """A zigzag that gives rank r chunk 2P-2-r leaves chunk 2P-1 to nobody."""
    mutant = _ring_zigzag(sp.Piecewise((RING.rank, sp.Eq(RING.slot, 0)), (2 * RING.P - 2 - RING.rank, True)))
    res = PRING.prove_ring_layout_partition(mutant)
    assert not res.proved and "zigzag" in res.detail


def test_ring_slot_order_mutant_is_caught():
    """Slots in decreasing order: the own shard's local causal mask is no longer the global one."""
    chunk = sp.Piecewise((2 * RING.P - 1 - RING.rank, sp.Eq(RING.slot, 0)), (RING.rank, True))
    mutant = _ring_zigzag(chunk, owner_slot=sp.Piecewise((1, RING.chunk < RING.P), (0, True)))
    assert not PRING.prove_ring_layout_partition(mutant).proved
    res = PRING.prove_ring_causal_blocks(mutant)
    # the own-shard case itself is refuted (under load another case may also come back 'unknown'
    # from z3's timeout and be reported first, so the detail line alone is not read)
    assert not res.proved and any("own shard" in name and residual != 0 for name, residual in res.cases), res.cases


def _ring_loop_mutant(symbol, value):
    loop = dict(RING.CAUSAL_LOOP)
    loop[symbol] = value(loop)
    return RING.pair_conditions(loop)


@pytest.mark.parametrize("symbol, value, case", [
    (masks.kv_hi, lambda loop: loop[masks.kv_hi] - n.B_c, "visits key chunk"),  # drops the last visited tile: the diagonal
    (masks.full_hi, lambda loop: loop[masks.kv_hi], "unmasked"),                # every visited tile run without its mask
])
def test_ring_classifier_mutants_are_caught(symbol, value, case):
    res = PRING.prove_ring_causal_blocks(conditions=_ring_loop_mutant(symbol, value))
    assert not res.proved
    assert any(case in name and "counterexample" in str(r) for name, r in res.cases), res.detail


def test_ring_source_rank_plus_step_is_caught():
    """Issue 24 (c): the source rank (rank + step) % P names the wrong shard from P = 3 on (at P = 2
    it coincides with the shard received): claim ring_schedule FAILS on it."""
    res = PRING.prove_ring_schedule(source_rank=lambda r, s, P: (r + s) % P)
    assert not res.proved
    assert dict(res.cases)["step s + 1: the shard the previous rank held at step s"] != 0


def test_ring_peers_that_do_not_meet_are_caught():
    res = PRING.prove_ring_schedule(next_rank=lambda r, P: (r + 2) % P)
    assert not res.proved and "meets" in res.detail


def test_ring_plan_with_the_wrong_sequence_length_is_caught():
    """Issue 24 (g): the step plan's sequence length P·C (not P·T·C) for zigzag drops attended pairs:
    claim ring_causal_blocks reads spec.ring.step_pair, the function plan_step classifies with."""
    def step_pair(layout, world_size, rank_, src, x, y, size, chunk_of=RING.chunk_index):
        return RING.pair_substitution(chunk_of(layout, world_size, rank_, x), chunk_of(layout, world_size, src, y),
                                      size, world_size * size)

    res = PRING.prove_ring_causal_blocks(step_pair=step_pair)
    assert not res.proved
    assert dict(res.cases)["zigzag: visits key chunk g_k iff g_k <= g_q"] != 0


def test_ring_plan_step_classifies_with_step_pair(monkeypatch):
    """plan_step reads spec.ring.sequence_length through step_pair (what the claim proves), not a
    private copy: the mutant length changes its plans (drops the attended key chunk 2P-1-src)."""
    good = RING.plan_step("zigzag", 3, 0, 1, True, 4)
    monkeypatch.setattr(RING, "sequence_length", lambda layout, world_size, size: world_size * size)
    assert RING.plan_step("zigzag", 3, 0, 1, True, 4) != good


_STEP_SLICES = RING.step_slices  # the function under test (a monkeypatched RING.step_slices calls the mutant)


def _slices_ending_one_early(plan, size):
    """The rows slice ends at ``rows[1]·size - 1``: the last query of the plan's last slot is dropped."""
    (r0, r1), cols = _STEP_SLICES(plan, size)
    return (r0, r1 - 1), cols


def _slices_from_the_other_half(plan, size):
    """The rows slice starts at the zigzag's other slot (``(T - 1 - rows[0])·size``)."""
    (_, r1), cols = _STEP_SLICES(plan, size)
    slots = max(plan.rows[1], plan.cols[1], 1)
    return ((slots - 1 - plan.rows[0]) * size, r1), cols


@pytest.mark.parametrize("slices, failing", [
    (_slices_ending_one_early, "contiguous, own shard: the slices hold exactly the plan's slots"),
    (_slices_from_the_other_half, "zigzag, another shard, plan full rows (1, 2) cols (0, 2): the call computes "
                                  "exactly the attended pairs"),
])
def test_ring_slice_mutants_are_caught(slices, failing):
    """Issue 24: the slices the runtime takes (spec.ring.step_slices) are in claim ring_causal_blocks."""
    res = PRING.prove_ring_causal_blocks(step_slices=slices)
    assert not res.proved
    assert dict(res.cases)[failing] != 0, res.detail


def test_ring_runtime_slices_with_step_slices(monkeypatch):
    """The runtime's step slices q and the K/V shard with spec.ring.step_slices (the function the claim
    proves) and runs the call at spec.ring.CALL_ALIGNMENT, not with a private copy."""
    from types import SimpleNamespace

    from generator.runtime import ring as runtime_ring

    ring, opts = SimpleNamespace(rank=0, size=2), {"layout": "zigzag", "causal": True}
    good = runtime_ring._Step(opts, ring, 1, 4)  # rank 0 holds chunks 0, 3 and, at step 1, rank 1's 1, 2
    assert (good.rows, good.cols) == (slice(4, 8), slice(0, 8))  # chunk 3's queries see both key chunks
    monkeypatch.setattr(RING, "step_slices", _slices_ending_one_early)
    assert runtime_ring._Step(opts, ring, 1, 4).rows == slice(4, 7)


def test_ring_merge_order_mutant_is_caught():
    """A merge that forgets to rescale its right operand depends on the arrival order."""
    def unscaled(a, b):
        good = R.merge(a, b)
        return R.State(good.m, good.d - b.d * sp.exp(b.m - R.guard(good.m)) + b.d, good.o)

    res = PRING.prove_ring_merge_order(unscaled)
    assert not res.proved


# ---------------------------------------------------------------- verification claims (issue 12)
# The six mutants the issue names, each caught by a claim (the template edits also by the
# hygiene check, tests/test_hygiene.py):
#   acc/(2*l_safe)           -> forward_epilogue (and every claim the citation test runs)
#   acc*1.000004 (template)  -> generator.hygiene (a claim cannot see a template line)
#   stage 1 MASKED=False     -> stages_cover (and generator.hygiene)
#   window=(4, 2**31-1)      -> int32_index_arithmetic
#   unguarded exponent, FMA  -> exponent_rounding
#   off_h % GROUP            -> gqa_head_map (and generator.hygiene)
from spec.proofs import epilogue as PE  # noqa: E402
from spec.proofs import float as PF  # noqa: E402
from spec.proofs import int32 as PI  # noqa: E402
from spec.proofs import structure as PST  # noqa: E402
from spec.proofs import symbolic as PSY  # noqa: E402
from spec import structure  # noqa: E402


def test_epilogue_dividing_by_twice_l_is_refuted():
    bad = swap(terms.FORWARD_EPILOGUE[1:], n.acc, n.acc / (2 * terms.col(n.l_safe)))
    r = PE.prove_forward_epilogue(epilogue=terms.FORWARD_EPILOGUE[:1] + bad)
    assert_failed(r)
    assert any("finite row: acc" in name for name, res in r.cases if res != 0)


def test_lse_without_the_empty_row_guard_is_refuted():
    naked = swap(terms.FORWARD_EPILOGUE, n.lse, (n.m_i + sp.codegen.cfunctions.log2(n.l_i)) * n.LN2)
    assert_failed(PE.prove_forward_epilogue(epilogue=naked))


def test_stage_one_unmasked_is_refuted():
    stages = (structure.KEY_STAGES[0]._replace(masked=False),) + structure.KEY_STAGES[1:]
    r = PST.prove_stages_cover(key_stages=stages)
    assert_failed(r)
    assert dict(r.cases)["key loop: unmasked stage 1 is [full_lo, full_hi)"] != 0


def test_stages_with_a_gap_are_refuted():
    gap = (structure.ROW_STAGES[0], structure.ROW_STAGES[2])
    assert_failed(PST.prove_stages_cover(row_stages=gap))


def test_int32_window_overflow_is_refuted():
    """window=(4, 2**31 - 1) accepted as is (no clamp to N_q + N_k): z3 finds the overflow."""
    r = PI.prove_int32_index_arithmetic(window_max=2**31 - 1)
    assert_failed(r)
    assert any("window_right" in str(res) or "window_left" in str(res) for _, res in r.cases if res != 0)


def test_int32_sequence_limit_too_large_is_refuted():
    assert_failed(PI.prove_int32_index_arithmetic(seq_len_max=2**31 - 1))


def test_gqa_head_map_mod_is_refuted():
    r = PST.prove_gqa_head_map(gqa_head="off_kvh = off_h % GROUP")
    assert_failed(r)


def test_initial_state_not_e_is_refuted():
    assert_failed(PST.prove_initial_state(forward_init=swap(structure.FORWARD_INIT, n.m_i, sp.Integer(0))))


def test_unguarded_exponent_under_fma_is_refuted():
    """Claiming the exponent <= 0 under FMA (no ulp slack) is false; z3 finds the counterexample."""
    r = PF.prove_exponent_rounding(fused_slack=0)
    assert_failed(r)
    assert dict(r.cases)["fused: fma(x, c, −m_ij) <= slack·|m_ij| for x <= rowmax"] != 0


def test_exponent_without_the_guard_is_refuted():
    """m_ij in place of m_safe: a fully masked row computes -inf - (-inf) = NaN, fused or not."""
    r = PF.prove_exponent_rounding(guarded=False)
    assert_failed(r)
    assert sum(res != 0 for name, res in r.cases if "masked score" in name) == 2


def test_exponent_analysis_of_a_different_printed_form_is_refuted():
    stale = swap(terms.FORWARD_TILE, n.p, exp2(n.qk * n.qk_scale - terms.col(n.m_i)))
    assert_failed(PF.prove_exponent_rounding(forward_tile=stale))


def test_error_bound_lemma_with_a_smaller_bound_is_refuted():
    import z3

    a, b = z3.Reals("a b")
    assert_failed(PF.prove_error_bound(weight_bound=a + b))


def _out_bound_without_the_product_of_the_last_roundings(rho_w, rho_num, rho_den, u, u_out, num=None):
    """The formula before the proof: (a+b)/(1−b)·(1+u)(1+u_out) + u + u_out misses u·u_out·max|v|."""
    from spec.error_bound import weight_factor

    a, b = weight_factor(rho_w, rho_num), weight_factor(rho_w, rho_den)
    return (a + b) / (1 - b) * (1 + u) * (1 + u_out) + u + u_out


def test_forward_error_bound_with_a_too_small_out_bound_is_refuted():
    r = PF.prove_forward_error_bound(out_bound=_out_bound_without_the_product_of_the_last_roundings)
    assert_failed(r)
    assert [name for name, res in r.cases if res != 0] == [
        "out_bound(ρ_w, ρ_num, ρ_den, u, u_out) >= K·last + last − 1 with K = (a+b)/(1−b)"]


def test_forward_error_bound_with_a_too_small_exponent_error_is_refuted():
    """The exponent factor before the proof, (γ_D + 2γ_3)(1 + γ_2): below γ_D(1+γ_2) + γ_2 + 2u·B/(c A) — refuted
    for the plain score (γ_2) and for ALiBi's raw score into log2 units (any γ_s, (vi))."""
    r = PF.prove_forward_error_bound(exponent_factor=lambda g_d, g_2, u: (g_d + 2 * g_2) * (1 + g_2))
    assert_failed(r)
    assert [name for name, res in r.cases if res != 0] == [
        "F + 2u·B <= c·A·score_factor(γ_D, γ_3, u)",
        "score (any γ_s): F_q + 2u·B_q <= c·A·φ, B_q <= c·A·(1 + φ), φ = score_factor(γ_D, γ_s, u)"]


def test_forward_error_bound_counts_the_fp32_constant_of_qk_scale(monkeypatch):
    """SCALE_ROUNDINGS = 2 (log2 e's rounding to an fp32 constant, which the compiled kernel performs and
    the interpreter does not, left out): the printed qk_scale's count refutes it, and forward_bound built
    on it is not the stated composition."""
    from spec import error_bound as EB

    r = PF.prove_forward_error_bound(scale_roundings=2)
    assert_failed(r)
    assert "3 roundings" in str(dict(r.cases)["printed qk_scale and x·qk_scale round <= SCALE_ROUNDINGS = 2 times"])
    monkeypatch.setattr(EB, "SCALE_ROUNDINGS", 2)
    monkeypatch.setattr(EB.exponent_error, "__defaults__", (EB.FLOATS, False, 2))
    r = PF.prove_forward_error_bound()
    assert_failed(r)
    assert any(name.startswith("forward_bound(fp32).out") for name, res in r.cases if res != 0)


def test_forward_error_bound_counts_the_roundings_of_the_printed_update():
    """acc = (acc·alpha)·alpha' + P V: three roundings of the carried acc per tile, not TILE_ROUNDINGS = 2."""
    extra = n.acc * terms.col(n.alpha) * n.m_i + terms.dot(n.p, n.v)
    r = PF.prove_forward_error_bound(forward_tile=swap(terms.FORWARD_TILE, n.acc, extra))
    assert_failed(r)
    assert "3 roundings" in str(dict(r.cases)["the carried acc is rounded <= TILE_ROUNDINGS = 2 times per tile"])


def _lse_bound_without_the_log2_error(exponent, log_den, log_n, lse_abs, u, u_func):
    """The lse bound without log2's own error U_FUNC·(1 + log N_k + E + λ): only the denominator's λ and
    the last roundings."""
    g = EB.gamma_of(3, u)
    return log_den + g * (lse_abs + log_den)


def test_forward_error_bound_fails_when_forward_bound_counts_tiles_as_keys(monkeypatch):
    """Issue 24's audit edit: forward_bound with T = N_k tiles (keys counted as tiles: the fp32 tolerance
    6x looser, nothing failed). The claim evaluates forward_bound symbolically and compares it with the
    composition it states: FAILED."""
    from spec import error_bound as EB

    monkeypatch.setattr(EB, "n_tiles", lambda n_k, block_n, num=EB.FLOATS: n_k)
    r = PF.prove_forward_error_bound()
    assert_failed(r)
    assert "is the stated composition" in r.detail


def _bound_without_the_cast_of_p(dtype, n_k, block_n, head_dim, scaled_abs, lse=0.0, num=None, softcap=False, *,
                                 alibi=None):
    """forward_bound with a dropped term: the numerator's rounding of P to the input dtype (u_p). (It takes
    forward_bound's softcap and alibi, ignored: without them the claim's call raised a TypeError, and the case
    failed on that, not on the dropped term.)"""
    from spec import error_bound as EB

    num = num or EB.FLOATS
    tiles = EB.n_tiles(n_k, block_n, num)
    E = EB.exponent_error(head_dim, tiles, scaled_abs, num)
    rho_w = num.expm1(E)
    rho_num = EB.carried_factor(num.gamma(block_n), tiles, num.gamma)  # u_p dropped
    rho_den = EB.carried_factor(num.gamma(block_n), tiles, num.gamma)
    out = EB.out_bound(rho_w, rho_num, rho_den, num.U, num.u_store[dtype], num=num)
    lse_abs = EB.lse_bound(E, -num.log1p(-EB.weight_factor(rho_w, rho_den)), num.log(num.max(n_k, 1)),
                           num.abs(lse), num.U, num.U_FUNC)
    return EB.Bound(out, lse_abs, E)


def test_forward_error_bound_fails_on_a_forward_bound_with_a_dropped_term():
    r = PF.prove_forward_error_bound(bound=_bound_without_the_cast_of_p)
    assert_failed(r)
    assert "forward_bound(fp32).out is the stated composition" in r.detail
    assert "Error" not in r.detail, r.detail  # refuted on the value, not because the bound could not run


def test_forward_error_bound_with_a_too_small_lse_bound_is_refuted():
    r = PF.prove_forward_error_bound(lse_bound=_lse_bound_without_the_log2_error)
    assert_failed(r)
    assert [name for name, res in r.cases if res != 0] == [
        "lse_bound(E, λ, log N_k, |lse|, u, U_FUNC) >= d + γ_3·(|lse| + d)"]


def test_forward_error_bound_counts_the_roundings_of_the_printed_lse():
    """lse = (m_i + log2 l_i)·ln 2·alpha: a fourth rounding after log2, not LSE_ROUNDINGS = 3."""
    from sympy.codegen.cfunctions import log2

    extra = sp.Piecewise((n.NEG_INF, sp.Eq(n.l_i, 0)), ((n.m_i + log2(n.l_i)) * n.LN2 * n.alpha, True))
    r = PF.prove_forward_error_bound(forward_epilogue=swap(terms.FORWARD_EPILOGUE, n.lse, extra))
    assert_failed(r)
    assert "4 roundings" in str(dict(r.cases)[
        "after log2, the printed lse rounds <= LSE_ROUNDINGS = 3 times (operations and fp32 constants)"])


def test_symbolic_tile_without_rescaling_l_is_refuted():
    r = PSY.prove_tile_update_symbolic(forward_tile=swap(terms.FORWARD_TILE, n.l_i, n.l_i + n.l_ij))
    assert_failed(r)


def test_symbolic_tile_with_a_finite_mask_value_is_refuted():
    r = PSY.prove_tile_update_symbolic(mask_term=FINITE_MASK)
    assert_failed(r)
    assert any("masked key contributes" in name for name, res in r.cases if res != 0)


def test_every_tiling_with_a_wrong_acc_update_is_refuted():
    wrong = n.acc + terms.dot(n.p, n.v)  # acc not rescaled by alpha
    assert_failed(PSY.prove_every_tiling(forward_tile=swap(terms.FORWARD_TILE, n.acc, wrong)))


def test_backward_from_a_wrong_forward_epilogue_is_refuted():
    """O from the forward's printed epilogue: halving it breaks Δ = rowsum(P ∘ dP)."""
    bad = swap(terms.FORWARD_EPILOGUE[1:], n.acc, n.acc / (2 * terms.col(n.l_safe)))
    r = PSY.prove_backward_symbolic(epilogue=terms.FORWARD_EPILOGUE[:1] + bad)
    assert_failed(r)
    assert dict(r.cases)["Δ = rowsum(dO ∘ O) = rowsum(P ∘ dP)"] != 0


def test_lse_gradient_with_the_wrong_sign_is_refuted_at_symbolic_width():
    """delta = rowsum(dO∘O) + dlse: only the dlse = g cases of backward_symbolic break."""
    pre = swap(terms.BACKWARD_PREPROCESS, n.delta, terms.rowsum(n.do * n.o) + n.dlse)
    r = PSY.prove_backward_symbolic(backward_preprocess=pre)
    assert_failed(r)
    assert {name for name, res in r.cases if res != 0} == {
        "dlse = g: delta = rowsum(P ∘ dP) − g", "dlse = g: dS_j = ∂(<dO, O> + g·lse)/∂y_j (y = s·x)"}


def test_canonical_sums_do_not_capture_indices():
    """The canonical form of finite sums renames bound indices without capture: a nested sum inside
    exp keeps its own index, and a free j multiplied into a sum over a bound j stays free."""
    i_, d_, j_ = sp.symbols("i d j", integer=True)
    N, Dm = sp.symbols("N D", integer=True, positive=True)
    A, x = sp.IndexedBase("A"), sp.IndexedBase("x")
    assert PSY.sum_zero(sp.Sum(sp.exp(sp.Sum(A[i_, d_], (d_, 1, Dm))), (i_, 1, N)),
                        sp.Sum(sp.exp(sp.Sum(A[d_, i_], (d_, 1, Dm))), (i_, 1, N))) != 0
    assert PSY.sum_zero(x[j_] * sp.Sum(x[j_], (j_, 1, N)), sp.Sum(x[j_] ** 2, (j_, 1, N))) != 0


def test_backward_ds_with_the_wrong_sign_is_refuted_at_symbolic_width():
    wrong = n.p * (n.dp + terms.col(n.delta))
    assert_failed(PSY.prove_backward_symbolic(backward_tile=swap(terms.BACKWARD_TILE, n.ds, wrong)))


def test_mask_mod_printed_floor_div_without_the_floor_correction_is_refuted():
    """mask_mod_sound reads the printer's floor_div text back in int32: plain ``a // c`` (truncating
    in compiled Triton) and the old correction ``(a // c) * c > a`` (its product overflows int32
    when // floors, a = -2**31, c = 2**31 - 1) both fail it."""
    for text in ("a // c", "tl.where((a // c) * c > a, a // c - 1, a // c)"):
        r = PMM.prove_mask_mod_sound(printed_floor_div=text)
        assert_failed(r)
        assert "printed floor_div" in r.detail


def _relation_reading_gt_as_ge(original):
    """The audit edit of issue 24: the analyser reads ``a > b`` as ``a - b >= 0``."""
    def relation(rel):
        return [rel.lhs - rel.rhs] if isinstance(rel, sp.StrictGreaterThan) else original(rel)
    return relation


def test_mask_mod_analyser_reading_gt_as_ge_fails_at_decoration_and_in_the_claim(monkeypatch):
    """The analyser (predicate -> atoms) is checked by z3 against the predicate: the edit fails at
    the decorator (AnalyserError naming the counterexample) and mask_mod_sound fails."""
    from spec import mask_mod as MM

    monkeypatch.setattr(MM, "_relation", _relation_reading_gt_as_ge(MM._relation))
    with pytest.raises(MM.AnalyserError, match="differs from the predicate"):
        MM.mask_mod(lambda i, j: i > j)
    r = PMM.prove_mask_mod_sound()
    assert_failed(r)
    assert "AnalyserError" in r.detail


def test_mask_mod_analyser_splitting_a_floor_fails_the_claim(monkeypatch):
    """An analyser that expands a floor's fraction before making it integer division (the corner
    term ``floor(shift/c + (BLOCK_M + start_m - 1)/c)`` of issue 23) is refused: its atoms are
    not integer-exact, at decoration and in mask_mod_sound."""
    from spec import mask_mod as MM

    def split(e):  # floors left as float floors, their fractions split
        return sp.sympify(e).replace(lambda x: isinstance(x, sp.floor), lambda f: sp.floor(sp.expand(f.args[0])))

    monkeypatch.setattr(MM, "exact_floors", split)
    with pytest.raises(MM.NotInClass, match="integer-valued"):
        MM.mask_mod(lambda i, j, shift, c: (i + shift) // c >= 1)
    assert_failed(PMM.prove_mask_mod_sound())


def _kernel_form_clamping_to(end):
    """``MaskMod.kernel_form`` with a tensor index clamped into ``[0, end(length)]`` (the kernels': ``length - 1``)."""
    from spec import mask_mod as MM

    def kernel_form(self, expr):
        slots = self._slots()

        def read(ix):
            name, (index,) = str(ix.base), ix.indices
            length = n.Nq if self.tensors[name] == "i" else n.Nk
            return MM.MM_ROW[slots[name] + sp.Min(sp.Max(index, 0), end(length))]

        expr = MM.exact_floors(expr).replace(lambda x: isinstance(x, sp.Indexed), read)
        return expr.xreplace({MM.Param(p): MM.MM_ROW[slots[p]] for p in self.scalars})
    return kernel_form


def test_mask_mod_parameter_load_past_its_row_fails_at_decoration_and_in_the_claim(monkeypatch):
    """Issue 24: a tensor read clamped to its length (not length - 1) reads one entry past the tensor's part
    of MM_row — past the row for the last tensor: mask_mod_sound's row cases fail, and so does the decorator
    (AnalyserError)."""
    from spec import mask_mod as MM

    past_the_end = _kernel_form_clamping_to(lambda length: length)
    r = PMM.prove_mask_mod_sound(kernel_form=past_the_end)
    assert not r.proved
    failed = [name for name, res in r.cases if res != 0]
    assert "kernel form of document: its 10 parameter loads read entries of [0, N_K + N_Q), the row pack writes " \
           "(z3, all N_Q, N_K >= 1)" in failed and all("parameter loads" in name for name in failed), failed
    monkeypatch.setattr(MM.MaskMod, "kernel_form", past_the_end)
    with pytest.raises(MM.AnalyserError, match="reads outside the row"):
        MM.mask_mod(lambda i, j, doc_q, doc_k: sp.Eq(doc_q[i], doc_k[j]))


def test_score_mod_flat_index_with_the_wrong_row_stride_fails_at_decoration(monkeypatch):
    """A user score_mod's SF entries (issue 24): a flat index t[e_1, e_2] -> off + e_1·d_1 + e_2 (the row
    stride from the wrong axis) reads past SF when d_1 > d_2: the decorator's z3 check
    (spec.score_mods.entry_counterexample) names it with LayoutError."""
    from spec import score_mods as SM

    assert SM.entry_counterexample(SM.rel_bias) is None

    def wrong_stride(self, read):
        _, islot, tens = self._slots()
        off, dims = tens[read.tensor]
        flat = sp.Integer(0)
        for a, e in enumerate(read.indices):
            flat = flat * dims[a - 1] + e if a else e
        return self._ints(off + flat, islot)

    monkeypatch.setattr(SM.ScoreMod, "flat_index", wrong_stride)
    assert SM.entry_counterexample(SM.rel_bias) not in (None, "unknown")
    with pytest.raises(SM.LayoutError, match="reads outside SF"):
        SM.score_mod(lambda s, h, i, j, table, w: s + table[h, sp.Min(sp.Max(i - j, 0), w)])


def test_mask_mod_atom_rule_with_the_wrong_extreme_is_refuted():
    """mask_mod_sound: an atom classified from the wrong extreme of its tile (the least value
    where the greatest decides) is caught by the proof (more mutants: tests/test_mask_mod.py)."""
    r = PMM.prove_mask_mod_sound(rule=lambda lo, hi: (sp.Ge(hi, 0), sp.Lt(lo, 0)))
    assert not r.proved and "atom" in r.detail


# ---------------------------------------------------------------- issue 24: addresses and the launch line
# The audit's edits, each applied where it now lives (a spec term or the spec.launch function the
# runtime calls) and refuted by the claim that reads it; typed into a template instead, the same
# edits fail generator.hygiene (tests/test_hygiene.py::test_unprinted_pointer_arithmetic_is_caught).
from spec import addresses as AD  # noqa: E402
from spec import launch as LA  # noqa: E402
from spec import rewrites as RW  # noqa: E402
from spec.assumptions import limit  # noqa: E402
from spec.proofs import addresses as PAD  # noqa: E402
from spec.proofs import rewrites as PRW  # noqa: E402


def _failing(result):
    assert_failed(result)
    return [name for name, res in result.cases if res != 0]


def test_block_table_row_stride_from_its_shape_is_refuted():
    """(a) paged decode passes block_table.shape[-1] as the table's row stride."""
    def launch(q, k, v, out, lse, cache_seqlens, block_table, block_m, sinks=None, **serving):
        grid, ints, constexprs = LA.decode_launch(q, k, v, out, lse, cache_seqlens, block_table, block_m, sinks,
                                                  **serving)
        if block_table is not None:
            ints = dict(ints, stride_bt_b=block_table.shape[-1])
        return grid, ints, constexprs

    failing = _failing(PAD.prove_decode_addresses(launch=launch))
    assert "paged: block_table offset is block_table[b, j // PAGE_SIZE]" in failing, failing


def test_block_table_without_its_column_stride_is_refuted():
    """The kernel's old block-table address, off_b·stride_bt_b + page_idx (column stride 1)."""
    bt = swap(AD.DECODE_GROUPS["bt_offset"], AD.bt_off, AD.off_b * AD.S_["stride_bt_b"] + AD.P.page_idx)
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, bt_offset=bt)))
    assert "paged: block_table offset is block_table[b, j // PAGE_SIZE]" in failing, failing


def test_decode_key_offset_with_the_query_head_is_refuted():
    kv = swap(AD.KV_OFFSETS, AD.k_off, AD.head * AD.S_["stride_kh"] + terms.col(AD.k_rows)
              + terms.row(AD.offs_d) * AD.S_["stride_kd"])
    assert "contiguous: k offset is k_cache[off_bc, j, kvh, d]" in _failing(
        PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, kv_offsets=kv)))


def test_contiguous_rows_of_b_not_the_cache_batch_row_are_refuted():
    """cache_batch_idx ignored: the contiguous rows at off_b·stride_kb, not off_bc·stride_kb."""
    rows = swap(AD.CONTIGUOUS_ROWS, AD.k_rows, AD.off_b * AD.S_["stride_kb"] + AD.offs_n * AD.S_["stride_kn"])
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, contiguous_rows=rows)))
    # the k rows also carry the split head dim's tail (MLA) and, V_IS_K, stand in for v's
    assert failing == ["contiguous: k offset is k_cache[off_bc, j, kvh, d]",
                       "contiguous: k tail offset is k_cache[..., kvh, dt]",
                       "contiguous: V_IS_K for k_cache[..., :D_v]: the V address at lane d is the K address"], failing


def test_leftpad_and_batch_index_offsets_are_refuted():
    """cache_leftpad read with cache_seqlens' stride; cache_batch_idx read at b + 1."""
    lp = (AD.Term(AD.lp_off, AD.off_b * AD.S_["stride_cs"], AD.CLAIM_DECODE, "wrong stride"),)
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, leftpad_offset=lp)))
    assert sorted(failing) == ["contiguous: cache_leftpad offset is cache_leftpad[b]",
                               "paged: cache_leftpad offset is cache_leftpad[b]"], failing
    bi = (AD.Term(AD.bi_off, (AD.off_b + 1) * AD.S_["stride_bi"], AD.CLAIM_DECODE, "one entry late"),)
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, batch_idx_offset=bi)))
    assert sorted(failing) == ["contiguous: cache_batch_idx offset is cache_batch_idx[b]",
                               "paged: cache_batch_idx offset is cache_batch_idx[b]"], failing


def test_decode_rows_that_swap_token_and_head_are_refuted():
    rows = swap(AD.DECODE_ROWS, AD.tok, sp.floor(AD.offs_m / AD.N_Q))
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, rows=rows)))
    assert any("row g·N_q + t" in name for name in failing), failing


def test_decode_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: decode's printed masks (spec.addresses.DECODE_ROW_OK, DECODE_COLUMNS_OK,
    spec.paged.KEY_OK) are what decode_addresses quantifies over. d_ok with <= admits column HEAD_DIM (past q and
    k when there is no tail) and one row past GROUP x N_Q writes past out (one proof for both: k's case is d_ok's
    alone, out's row_ok's); the key mask without the cache_seqlens bound (j < split_lo + chunk: the last split's
    whole tiles) admits keys past the row's; masks one short miss q/k's last column and a row of the KV head."""
    from spec import paged
    (d_ok, dv_ok), (row_ok,), (key_ok,) = AD.DECODE_COLUMNS_OK, AD.DECODE_ROW_OK, paged.KEY_OK

    def masks(d, rows):
        return dict(AD.DECODE_GROUPS, columns_ok=(replace(d_ok, expr=d), dv_ok), row_ok=(replace(row_ok, expr=rows),))
    wide = _failing(PAD.prove_decode_addresses(groups=masks(sp.LessThan(AD.offs_d, AD.HEAD_DIM_),
                                                            sp.StrictLessThan(AD.offs_m, AD.GROUP * AD.N_Q + 1))))
    for tag in ("paged", "contiguous"):
        assert f"{tag}: q[b, tok, head, d] inside q (lanes row_ok & d_ok)" in wide, wide
        assert f"{tag}: out/lse[split, b, tok, head, dv] inside out and lse (lanes row_ok & dv_ok)" in wide, wide
    assert "paged: k_cache[page, j % PAGE_SIZE, kvh, d] inside the cache (lanes key_ok & d_ok)" in wide, wide
    unbounded = (replace(key_ok, expr=sp.StrictLessThan(n.j, paged.split_lo + paged.chunk)),)
    assert sorted(_failing(PAD.prove_decode_addresses(key_ok=unbounded))) == sorted(
        f"{tag}: {plan}a key lane key_ok admits is a key key_lo <= j < key_len"
        for tag in ("paged", "contiguous") for plan in ("", "fixed splits: "))
    short = _failing(PAD.prove_decode_addresses(groups=masks(sp.StrictLessThan(AD.offs_d, AD.HEAD_DIM_ - 1),
                                                             sp.StrictLessThan(AD.offs_m, AD.GROUP * AD.N_Q - 1))))
    assert sorted(short) == sorted(
        f"{tag}: {what}" for tag in ("paged", "contiguous")
        for what in ("every column c < D of q/k is admitted by one lane (d_ok at d = c, or dt_ok at dt = c)",
                     "row g·N_q + t is (head kvh·GROUP + g, token t), in the grid and row_ok")), short


def test_forward_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: the dense forward's printed masks (spec.addresses.FWD_ROW_OK, FWD_COLUMNS_OK,
    FWD_KEY_OK, FWD_N_OK) are what forward_addresses quantifies over: d_ok with <= and one row past N_Q (one proof:
    k's case is d_ok's alone, lse's row_ok's) read past q, k, lse; the key mask without its key_len bound admits
    padding keys (NaN, inf); a v column mask one short misses out's last column."""
    G = AD.FORWARD_GROUPS
    (d_ok, dv_ok), (row_ok,), (key_ok,) = AD.FWD_COLUMNS_OK, AD.FWD_ROW_OK, AD.FWD_KEY_OK
    wide = _failing(PAD.prove_forward_addresses(groups=dict(
        G, columns_ok=(replace(d_ok, expr=sp.LessThan(AD.offs_d, AD.HEAD_DIM_)), dv_ok),
        row_ok=(replace(row_ok, expr=sp.StrictLessThan(AD.offs_m, AD.N_Q + 1)),))))
    assert {"k[b, off_kvh, j, d] inside (lanes j < N_K, d < HEAD_DIM)", "lse[b, h, i] inside (lanes i < N_Q)",
            "q[b, h, i, d] inside (lanes i < N_Q, d < HEAD_DIM)"} <= set(wide), wide
    no_len = (replace(key_ok, expr=sp.StrictLessThan(AD.offs_n, AD.N_K_)),)
    assert sorted(_failing(PAD.prove_forward_addresses(groups=dict(G, key_ok=no_len)))) == [
        "a key lane key_ok admits is a key j < key_len of k, and every such key is admitted",
        "key_ok at the clamped key_len admits exactly the keys j < L the reference reads (0 <= L <= N_K)"]
    short = (d_ok, replace(dv_ok, expr=sp.StrictLessThan(AD.offs_dv, AD.HEAD_DIM_V_ - 1)))
    assert _failing(PAD.prove_forward_addresses(groups=dict(G, columns_ok=short))) == [
        "every column c < D of q/k is admitted by one lane (d_ok at d = c, or dt_ok at dt = c), every c < D_v of v/out "
        "by dv_ok"]


def test_backward_preprocess_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: the preprocess's printed row_ok and d_ok (spec.addresses.BWD_PRE_ROW_OK,
    BWD_PRE_D_OK) are what backward_addresses quantifies over: one row past N_Q and d <= HEAD_DIM read past out and
    the row tensors; a column mask one short misses out's last column (Δ would drop its product)."""
    G = AD.BACKWARD_GROUPS
    (row_ok,), (d_ok,) = AD.BWD_PRE_ROW_OK, AD.BWD_PRE_D_OK
    wide = _failing(PAD.prove_backward_addresses(groups=dict(
        G, row_ok=(replace(row_ok, expr=sp.StrictLessThan(AD.offs_m, AD.N_Q + 1)),),
        d_ok=(replace(d_ok, expr=sp.LessThan(AD.offs_d, AD.HEAD_DIM_)),))))
    for tag in ("dense", "packed"):
        assert f"{tag}: out/grad_out[b, h, i, d] inside (lanes i < N_Q, d < D)" in wide, wide
        assert f"{tag}: grad_lse/lse/delta/lse2/dsink[b, h, i] and sinks[h] inside (lanes i < N_Q)" in wide, wide
    short = (replace(d_ok, expr=sp.StrictLessThan(AD.offs_d, AD.HEAD_DIM_ - 1)),)
    assert _failing(PAD.prove_backward_addresses(groups=dict(G, d_ok=short))) == [
        f"{tag}: {what}" for tag in ("dense", "packed")
        for what in ("row_ok admits exactly the rows i < N_Q, d_ok exactly the columns d < D",
                     "every column c < D of out is a lane of offs_d that d_ok admits")]


def test_merge_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: the merges' printed row_ok and d_ok (spec.addresses.MERGE_ROW_OK, MERGE_D_OK)
    are what rows_addresses quantifies over: one row past R and d <= D read and write past every partial; a column
    mask one short leaves o's last column unmerged."""
    G = AD.ROWS_GROUPS
    (row_ok,), (d_ok,) = AD.MERGE_ROW_OK, AD.MERGE_D_OK
    wide = _failing(PAD.prove_rows_addresses(groups=dict(
        G, merge_row_ok=(replace(row_ok, expr=sp.StrictLessThan(AD.offs_m, AD.R_ROWS + 1)),),
        merge_d_ok=(replace(d_ok, expr=sp.LessThan(AD.offs_d, AD.D_COLS)),))))
    assert {"merge_state: o_a[r, d] inside (lanes r < R, offs_d < D)", "merge_state: lse[r] inside (lanes r < R, offs_d < D)",
            "merge_states: o_s[s, r, d] inside (lanes r < R, offs_d < D, s a split the loop visits)"} <= set(wide), wide
    short = (replace(d_ok, expr=sp.StrictLessThan(AD.offs_d, AD.D_COLS - 1)),)
    assert _failing(PAD.prove_rows_addresses(groups=dict(G, merge_d_ok=short))) == [
        f"{k}: row_ok admits exactly the rows r < R, d_ok exactly the columns d < D" for k in ("merge_state", "merge_states")]


def test_softmax_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: softmax's printed row_ok (the merges' MERGE_ROW_OK) and n_ok
    (spec.addresses.SOFTMAX_N_OK) are what rows_addresses quantifies over: c <= N reads and writes one column past
    x and y; a column mask one short leaves y's last column unwritten."""
    G = AD.ROWS_GROUPS
    (n_ok,) = AD.SOFTMAX_N_OK
    wide = _failing(PAD.prove_rows_addresses(groups=dict(
        G, softmax_n_ok=(replace(n_ok, expr=sp.LessThan(AD.offs_n, AD.N_COLS)),))))
    assert {"softmax: x[r, c] inside (lanes r < R, offs_n < N)", "softmax: y[r, c] inside (lanes r < R, offs_n < N)",
            "softmax: row_ok admits exactly the rows r < R, n_ok exactly the columns c < N"} == set(wide), wide
    short = (replace(n_ok, expr=sp.StrictLessThan(AD.offs_n, AD.N_COLS - 1)),)
    assert _failing(PAD.prove_rows_addresses(groups=dict(G, softmax_n_ok=short))) == [
        "softmax: row_ok admits exactly the rows r < R, n_ok exactly the columns c < N"]


def test_backward_kernel_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: the dK/dV and dQ kernels' printed row_ok, n_ok, key_ok (spec.addresses.BWD_*_OK,
    the forward's comparisons) are what backward_kernel_addresses quantifies over: i <= N_Q reads and writes one
    row past q, dq and the row tensors; j <= N_K one key past k, dk, dv; a key mask without key_len admits the
    padding keys (NaN, inf) it must never read; _attn_bwd_mask's ij_ok with i <= N_Q, or without its key conjunct,
    reads past the dense mask."""
    G = AD.BACKWARD_KERNEL_GROUPS
    (row_ok,), (n_ok,), (key_ok,) = AD.BWD_ROW_OK, AD.BWD_N_OK, AD.BWD_KEY_OK
    exact = ("{}: row_ok, n_ok, key_ok, d_ok, dv_ok, dt_ok admit exactly the rows i < N_Q, keys j < N_K (key_ok: and "
             "j < key_len), columns d < HEAD_DIM, dv < HEAD_DIM_V, dt < HEAD_DIM + HEAD_DIM_TAIL")
    rows = _failing(PAD.prove_backward_kernel_addresses(groups=dict(
        G, row_ok=(replace(row_ok, expr=sp.LessThan(AD.offs_m, AD.N_Q)),))))
    assert {exact.format("dq"), "dq: q, dq[b, h, i, d] inside (lanes i < N_Q, d < HEAD_DIM)",
            "dkdv: delta, lse2[b, h, i] inside (lanes i < N_Q)"} <= set(rows), rows
    keys = _failing(PAD.prove_backward_kernel_addresses(groups=dict(
        G, n_ok=(replace(n_ok, expr=sp.LessThan(AD.offs_n, AD.N_K_)),))))
    assert {exact.format("dkdv"), "dkdv: k, dk, dv[b, kvh, j, d] inside (lanes j < N_K, d < HEAD_DIM)"} <= set(keys)
    no_len = (replace(key_ok, expr=sp.StrictLessThan(AD.offs_n, AD.N_K_)),)
    assert _failing(PAD.prove_backward_kernel_addresses(groups=dict(G, key_ok=no_len))) == [
        exact.format(k) for k in ("dkdv", "dq")]
    # _attn_bwd_mask's printed ij_ok (spec.addresses.BWD_MASK_OK): i <= N_Q reads a row past the mask; the key
    # conjunct dropped reads keys past N_K
    (ij_ok,) = AD.BWD_MASK_OK
    mask_cases = [f"{k}: {case}" for k in ("dkdv", "dq") for case in (
        "mask[b, h, i, j] inside (lanes ij_ok: i < N_Q, j < N_K)",
        "ij_ok admits exactly the mask's elements i < N_Q, j < N_K (every element the reference reads)")]
    for mutant in (sp.And(sp.LessThan(n.i, AD.N_Q), sp.StrictLessThan(n.j, AD.N_K_)), sp.StrictLessThan(n.i, AD.N_Q)):
        assert _failing(PAD.prove_backward_kernel_addresses(groups=dict(
            G, mask_ok=(replace(ij_ok, expr=mutant),)))) == mask_cases


def _lane(lanes, name, expr):
    """``lanes`` (a family's spec.addresses.*_LANES) with lane ``name`` printed as ``expr``."""
    (t,) = lanes[name]
    return dict(lanes, **{name: (replace(t, expr=expr),)})


#: (prover, family, lane, mutated term, a case that must fail): edits a real bug would make to a printed lane
LANE_MUTANTS = [
    # the split head dim's tail one column early: column HEAD_DIM - 1 in both q/k parts (read twice), D - 1 in none
    ("decode_addresses", AD.DECODE_LANES, "dt", AD.HEAD_DIM_ - 1 + terms.arange(AD.BLOCK_DT_),
     "paged: every column c < D of q/k is admitted by one lane (d_ok at d = c, or dt_ok at dt = c)"),
    # a row tile the width of a key tile: rows missed (BLOCK_N < BLOCK_M) or written by two programs
    ("forward_addresses", AD.FORWARD_LANES, "m", AD.start_m + terms.arange(n.B_c),
     "rows: no index is in the lanes offs_m of two tiles"),
    # the query tile's first row one past pid_m·BLOCK_M: row 0 never computed
    ("forward_addresses", AD.FORWARD_LANES, "start_m", AD.pid_m * n.B_r + 1,
     "rows: every index in [lo, hi) is in the lanes offs_m of a visited tile"),
    # dK/dV's key tile one tile late (and the dQ loop's keys shifted): key tile 0 never read
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LANES, "n", AD.start_n + n.B_c + terms.arange(n.B_c),
     "dkdv: the grid's tiles: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # dK/dV's key tile from the head's program id
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LANES, "start_n", terms.program_id(1) * n.B_c,
     "dkdv: the grid's tiles: no index is in the lanes offs_n of two tiles"),
    # a user score_mod's gradient chunk one entry late: the chunk's first entry (lo when CHUNK divides it) never
    # gets its gradient
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LANES, "e", AD.start_e + 1 + terms.arange(AD.CHUNK_),
     "dq: every entry lo <= e <= hi the tile read is a chunk lane entry_ok admits"),
    # a gradient chunk twice the loop's step: an entry in two chunks gets its gradient added twice
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LANES, "e", AD.start_e + terms.arange(2 * AD.CHUNK_),
     "dq: no entry is in the lanes offs_e of two chunks (its gradient added once)"),
    # the chunk loop one chunk early: entries below 0 (before the program's gradient row) loaded and stored
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LANES, "first_e", (sp.floor(AD.sg_lo / AD.CHUNK_) - 1) * AD.CHUNK_,
     "dq: score_grad[row, e] inside (programs of the grid, chunk lanes e entry_ok admits)"),
    # softmax's one pass from column 1
    ("rows_addresses", AD.ROWS_LANES, "n0", 1 + terms.arange(n.B_c),
     "softmax: one pass (when spec.launch.softmax_launch picks it): every column c < N is a lane of offs_n"),
    # the append's token tile from the head's program id
    ("append_addresses", AD.APPEND_LANES, "t", terms.program_id(1) * AD.BLOCK_T_ + terms.arange(AD.BLOCK_T_),
     "paged: token tiles: no index is in the lanes offs_t of two tiles"),
    # a lane that is no tl.arange(0, width) shifted (every other lane every other column)
    ("backward_addresses", AD.BACKWARD_LANES, "d", 2 * terms.arange(AD.BLOCK_D_),
     "dense: the printed lane offs_d = 2*arange(BLOCK_D) is base + arange(width)"),
]


@pytest.mark.parametrize("claim_id, lanes, name, expr, case", LANE_MUTANTS,
                         ids=[f"{c}-{name}" for c, _, name, _, _ in LANE_MUTANTS])
def test_a_mutated_lane_fails_its_address_claim(claim_id, lanes, name, expr, case):
    """Issue 24: the address claims read the printed lanes (spec.addresses.*_LANES: offs_x = base + arange(width),
    and the tile starts) instead of assuming them, so a lane the kernel would compute wrongly — one column early, a
    block too narrow or too wide, a tile from the wrong program id — fails the claim (before, every claim still proved)."""
    prove = getattr(PAD, f"prove_{claim_id}")
    failing = _failing(prove(lanes=_lane(lanes, name, expr)))
    assert case in failing, failing


def _loop(loops, name, **changes):
    """``loops`` (a family's spec.addresses.*_LOOPS) with loop ``name``'s term changed (``expr``: its tile_range;
    ``symbol``: its variable)."""
    (t,) = loops[name]
    return dict(loops, **{name: (replace(t, **changes),)})


_lo, _hi, _range = AD.lo_, AD.hi_, terms.tile_range
#: (prover, family, loop, the term's changes, a case that must fail): edits a real bug would make to a loop header
LOOP_HEADER_MUTANTS = [
    # the forward stage's key loop two tiles a step: every other key tile never read
    ("forward_addresses", AD.FORWARD_LOOPS, "n", dict(expr=_range(_lo, _hi, 2 * n.B_c)),
     "a stage's key tiles: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # ... its stop one short (range(lo, hi - 1, BLOCK_N)): the stage's last key tile skipped when it holds one key
    ("forward_addresses", AD.FORWARD_LOOPS, "n", dict(expr=_range(_lo, _hi - 1, n.B_c)),
     "a stage's key tiles: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # ... its variable another tile start than the lane's base reads
    ("forward_addresses", AD.FORWARD_LOOPS, "n", dict(symbol=AD.start_m),
     "a stage's key tiles: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # _dropout_keep's key loop from the second tile: key tile 0's keep bits never written
    ("forward_addresses", AD.FORWARD_LOOPS, "n_all", dict(expr=_range(n.B_c, AD.N_K_, n.B_c)),
     "_dropout_keep: key tiles: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # decode's split keys one short of the split's end
    ("decode_addresses", AD.DECODE_LOOPS, "n", dict(expr=_range(AD.P.split_lo, AD.P.split_hi - 1, n.B_c)),
     "paged: the split's key tiles: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # the dK/dV row loop from the stage's second row tile
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LOOPS, "m", dict(expr=_range(_lo + n.B_r, _hi, n.B_r)),
     "dkdv: a loop's tiles: every index in [lo, hi) is in the lanes offs_m of a visited tile"),
    # the dQ key loop one key short of a tile a step: a key in two tiles (its dq added twice)
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LOOPS, "n", dict(expr=_range(_lo, _hi, n.B_c - 1)),
     "dq: a loop's tiles: no index is in the lanes offs_n of two tiles"),
    # the score_mod gradient's chunk loop stopping at hi (range(first_e, hi, CHUNK)): entry hi dropped when a chunk
    # starts there
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LOOPS, "e", dict(expr=_range(AD.first_e, AD.sg_hi, AD.CHUNK_)),
     "dq: every entry lo <= e <= hi the tile read is a chunk lane entry_ok admits"),
    # softmax's column passes one column short
    ("rows_addresses", AD.ROWS_LOOPS, "n", dict(expr=_range(0, AD.N_COLS - 1, n.B_c)),
     "softmax: two passes: column steps: every index in [lo, hi) is in the lanes offs_n of a visited tile"),
    # dK/dV's loop over the query heads of its K/V head from the second head, one head short, every other head: a
    # query head's dK, dV contribution never added (before issue 24's last loop gap, every claim still proved)
    *[("backward_kernel_addresses", AD.BACKWARD_KERNEL_LOOPS, "g", dict(expr=expr), f"dkdv: {PAD.HEAD_LOOP_CASES[0]}")
      for expr in (_range(1, structure.group), _range(0, structure.group - 1), _range(0, structure.group, 2))],
    # ... one head past the group: the next K/V head's first query head (or one past H_q) added in
    ("backward_kernel_addresses", AD.BACKWARD_KERNEL_LOOPS, "g", dict(expr=_range(0, structure.group + 1)),
     f"dkdv: {PAD.HEAD_LOOP_CASES[2]}"),
    # _merge_states' loop over the splits one short, from the second split: a split's partial never merged
    *[("rows_addresses", AD.ROWS_LOOPS, "s", dict(expr=expr), f"merge_states: {PAD.SPLIT_LOOP_CASES[0]}")
      for expr in (_range(AD.S_SPLITS - 1), _range(1, AD.S_SPLITS))],
    # ... one past the last split: a partial read past o_s and lse_s
    ("rows_addresses", AD.ROWS_LOOPS, "s", dict(expr=_range(AD.S_SPLITS + 1)), f"merge_states: {PAD.SPLIT_LOOP_CASES[2]}"),
]


@pytest.mark.parametrize("claim_id, loops, name, changes, case", LOOP_HEADER_MUTANTS,
                         ids=[f"{c}-{name}-{k}" for k, (c, _, name, _, _) in enumerate(LOOP_HEADER_MUTANTS)])
def test_a_mutated_loop_fails_its_address_claim(claim_id, loops, name, changes, case):
    """Issue 24: the address claims read the printed tile loops (spec.addresses.*_LOOPS: for x in range(start, stop,
    step)) instead of assuming them, so a loop header the kernel would run wrongly — a step other than the lane's
    width, a stop one short, a start a tile late, another variable than the lane's tile start — fails the claim
    (before, the loops were template text and every claim still proved)."""
    prove = getattr(PAD, f"prove_{claim_id}")
    failing = _failing(prove(loops=_loop(loops, name, **changes)))
    assert case in failing, failing


def _narrow(group):
    """A group of printed terms with every int64 widening dropped: the int32 products the kernels had."""
    return tuple(AD.Term(t.symbol, t.expr.replace(terms.int64, lambda x: x), t.claim, t.note) for t in group)


def test_decode_int32_products_of_a_stride_are_refuted():
    """Issue 24: decode's products of a stride in int32 (the kernel before the widening): the partial's
    split·stride_os wraps once the fp32 partials of many splits pass 2^31 elements, tok·stride_on, q's and the
    block table's likewise (no rule bounds them). The cache's own in-head products stay int32 (index_int32 bounds
    its slices): the width case accepts them, and an accepted cache slice reaching 2^32 fails their int32 case."""
    result = PAD.prove_decode_addresses(groups={name: _narrow(group) for name, group in AD.DECODE_GROUPS.items()})
    assert _failing(result) == [f"{tag}: {PAD.DECODE_WIDTHS}" for tag in ("paged", "contiguous")], _failing(result)
    said = {name: str(res) for name, res in result.cases}
    for tag in ("paged", "contiguous"):
        for line in ("q_off: stride_qn * tok[:, None]", "q_off: stride_qd * offs_d[None, :]",
                     "q_tail_off: stride_qd * offs_dt[None, :]", "bt_off: page_idx * stride_bt_p",
                     "o_off: split * stride_os", "o_off: stride_on * tok[:, None]", "o_off: stride_od * offs_dv[None, :]",
                     "lse_off: split * stride_ls", "lse_off: stride_ln * tok"):
            assert line in said[f"{tag}: {PAD.DECODE_WIDTHS}"], (tag, line, said[f"{tag}: {PAD.DECODE_WIDTHS}"])
        assert "k_rows" not in said[f"{tag}: {PAD.DECODE_WIDTHS}"] and "k_off" not in said[f"{tag}: {PAD.DECODE_WIDTHS}"]
    assert PI._offset_case("decode's k cache", "D", index_limit=2**32)[1] != 0


def test_rows_and_append_int32_products_of_a_stride_are_refuted():
    """Issue 24: softmax's, the merges' and the KV append's products of a stride in int32 (the kernels before the
    widening): x[r, c] at r·stride_xr wraps once x passes 2^31 elements; the append's j·stride_dn writes a cache
    row past 2^31 elements to a wrapped address."""
    result = PAD.prove_rows_addresses(groups={name: _narrow(group) for name, group in AD.ROWS_GROUPS.items()})
    assert _failing(result) == [PAD.ROWS_WIDTHS], _failing(result)
    said = str(dict(result.cases)[PAD.ROWS_WIDTHS])
    for line in ("x_off: stride_xr * offs_m[:, None]", "la_off: offs_m * stride_la", "os_off: s * stride_os",
                 "mo_off: stride_od * offs_d[None, :]", "msink_off: stride_sink * (offs_m % H)"):
        assert line in said, (line, said)
    result = PAD.prove_append_addresses(groups={name: _narrow(group) for name, group in AD.APPEND_GROUPS.items()})
    assert _failing(result) == [PAD.APPEND_WIDTHS], _failing(result)
    said = str(dict(result.cases)[PAD.APPEND_WIDTHS])
    for line in ("dst_base: stride_dn * offs_j[:, None]", "dst_base: stride_dn * slot[:, None]",
                 "x_base: stride_xn * offs_t[:, None]", "abt_off: page_idx * stride_bt_p"):
        assert line in said, (line, said)


def test_dense_int32_products_outside_index_int32_are_refuted():
    """Issue 24: the dense kernels' products that no contract rule bounds, in int32 (the kernels before the
    widening): the forward's lse offs_m·stride_lm and block-map tile products, the preprocess's and the dK/dV and
    dQ kernels' Δ/lse2 offs_m·stride_rm, their block-map products. Each fails its claim's width case."""
    for prove, groups, lines in (
            (PAD.prove_forward_addresses, AD.FORWARD_GROUPS,
             ("lse_off: offs_m * stride_lm", "map_base: pid_m * stride_map_m",
              "map_off: stride_map_n * (start_n // BLOCK_N)", "keep_off: stride_keep_n * offs_n[None, :]")),
            (PAD.prove_backward_addresses, AD.BACKWARD_GROUPS,
             ("dlse_off: offs_m * stride_lm", "slse_off: offs_m * stride_slm", "brow_off: offs_m * stride_rm")),
            (PAD.prove_backward_kernel_addresses, AD.BACKWARD_KERNEL_GROUPS,
             ("drow_off: offs_m * stride_rm", "mapc_base: stride_map_n * (start_n // MAP_BLOCK_N)",
              "mapr_off: stride_map_n * (start_n // MAP_BLOCK_N)"))):
        result = prove(groups={name: _narrow(group) for name, group in groups.items()})
        assert _failing(result) == [PAD.DENSE_WIDTHS], _failing(result)
        said = str(dict(result.cases)[PAD.DENSE_WIDTHS])
        assert all(line in said for line in lines), (lines, said)


def test_mask_tile_offset_past_the_accepted_bound_is_refuted():
    """Issue 24: the backward's mask tile i·stride_mm + j·stride_mn stays int32; claim int32_index_arithmetic
    proves it fits from assumption index_int32's bound, so accepting a mask whose in-head offset reaches 2^32
    fails the mask's case (a tile printed with the strides swapped: test_backward_address_mask_tile_transposed)."""
    assert PI._offset_case("the mask", "N_K")[1] == 0
    assert PI._offset_case("the mask", "N_K", index_limit=2**32)[1] != 0


def test_merged_lse_in_the_wrong_layout_is_refuted():
    """(f) decode's merged lse viewed as (B, Hq, N_q) instead of (B, N_q, Hq) transposed."""
    failing = _failing(PAD.prove_decode_addresses(merged_lse=lambda m, B, Nq, Hq: m.view(B, Hq, Nq)))
    assert failing == ["merge: lse[b, h, t] is merged row r"], failing


def test_unsplit_decode_lse_in_the_wrong_layout_is_refuted():
    """Audit of issue 24's additions: one unsplit decode launch writes the op's lse (B, Hq, N_q) in place through a
    (1, B, N_q, Hq) view; viewing it untransposed (as if (B, N_q, Hq)) put lse 0.76 off (N_q = 3, Hq = 4)."""
    def unsplit(out, lse):
        B, Hq, Nq = lse.shape
        return out[None], lse.view(B, Nq, Hq)[None]
    failing = _failing(PAD.prove_decode_addresses(unsplit_outputs=unsplit))
    assert failing == ["unsplit: lse[0, b, t, h] is lse[b, h, t]"], failing


def test_key_lengths_clamped_one_short_is_refuted():
    """Second audit of issue 24's conversions: ``dispatch.lengths_argument`` clamping key lengths to ``[0, N_k - 1]``
    (out 0.25 off for a key length N_k: its last key dropped). The bounds are spec.launch.key_length_bounds, which
    claim forward_addresses reads through the printed key_ok."""
    failing = _failing(PAD.prove_forward_addresses(key_length_bounds=lambda k: (0, k.shape[2] - 1)))
    assert failing == ["key_lengths clamp (spec.launch.key_length_bounds): every length lands in [0, N_K], one in "
                       "[0, N_K] passes unchanged",
                       "key_ok at the clamped key_len admits exactly the keys j < L the reference reads "
                       "(0 <= L <= N_K)"], failing


def test_forward_out_allocated_at_q_head_dim_is_refuted():
    """Second audit of issue 24's conversions: the forward's ``out`` allocated ``(B, Hq, N_Q, D)`` (q's head dim)
    while the kernel writes D_v columns (D < D_v: past the buffer). forward_plan and launch_forward both take the
    layout from spec.launch.forward_outputs, which claim forward_addresses reads."""
    def at_d(q, v):
        outputs = LA.forward_outputs(q, v)
        shape = tuple(q.shape)
        return dict(outputs, out=(shape, AD.contiguous_strides(shape)))
    failing = _failing(PAD.prove_forward_addresses(outputs=at_d))
    assert failing == ["out and lse as launched (spec.launch.forward_outputs) hold out[b, h, i, dv] (lanes i < N_Q, "
                       "dv < HEAD_DIM_V) and lse[b, h, i]"], failing


def test_varlen_backward_hints_swapped_are_refuted():
    """Second audit of issue 24's conversions: ``backward_varlen(…, max_k, max_q)`` (dq 1.6e10: rows of a segment
    longer than max_seqlen_k never written). The launcher passes both hints by name to spec.launch.dkdv_launch and
    dq_launch, which pick their own; each given the other's fails claim varlen_addresses' hint case."""
    def swapped(fn):
        return lambda *a, max_seqlen_q=None, max_seqlen_k=None, **kw: fn(*a, max_seqlen_q=max_seqlen_k,
                                                                         max_seqlen_k=max_seqlen_q, **kw)
    name = ("the backward's hints by name (dkdv_launch, dq_launch given max_seqlen_q=, max_seqlen_k=): the dK/dV grid "
            "covers every key of a segment of n_k <= max_seqlen_k keys, the dQ grid every query row of a segment of "
            "n_q <= max_seqlen_q")
    for kw in ({"dkdv_launch": swapped(LA.dkdv_launch)}, {"dq_launch": swapped(LA.dq_launch)}):
        failing = _failing(PAD.prove_varlen_addresses(**kw))
        assert failing == [name], failing


def test_varlen_keys_offset_by_the_query_start_are_refuted():
    """(d) the varlen K pointer moved by the query segment's start."""
    pointers = dict(AD.SEGMENT_POINTERS)
    pointers["fwd"] = swap(pointers["fwd"], sp.Symbol("K"),
                           sp.Symbol("K") + n_varlen_start_q() * sp.Symbol("stride_kn", integer=True))
    failing = _failing(PAD.prove_varlen_addresses(pointers=pointers))
    # the split head dim's K tail (claim head_dim_split) is read from the same moved pointer: it fails with it
    assert failing == ["fwd: K reaches k[cu_seqlens_k[b] + i, h, d]",
                       "fwd: K reaches k[cu_seqlens_k[b] + i, h, d] (k_tail_off)"], failing


def n_varlen_start_q():
    return V.seq_start_q


def test_cu_seqlens_end_read_minus_one_is_refuted():
    """(e) cu_seqlens_q's end read one entry early (and, as the audit typed it, minus one)."""
    for end in (AD.CuSeqlensQ[AD.off_b], AD.CuSeqlensQ[AD.off_b + 1] - 1):
        loads = swap(AD.SEGMENT_LOADS, V.seq_end_q, end)
        assert "seq_end_q is cu_seqlens_q[off_b + 1]" in _failing(PAD.prove_varlen_addresses(loads=loads))


def test_cu_seqlens_passed_strided_are_refuted():
    """The offset vectors passed as the caller gave them (any stride) to kernels that read entry b at b."""
    failing = _failing(PAD.prove_varlen_addresses(cu_seqlens=lambda cu_q, cu_k: (cu_q, cu_k)))
    assert "seq_start_q is cu_seqlens_q[off_b]" in failing


def test_varlen_grid_rounded_down_is_refuted():
    """The grid's ceiling, read from spec.launch.varlen_grid (the launcher's), not a private copy."""
    failing = _failing(PAD.prove_varlen_addresses(grid=lambda m, b, cu, h: (m // b, (cu.shape[0] - 1) * h)))
    assert any("cover a segment" in name for name in failing), failing


def test_window_clamped_to_n_q_twice_is_refuted():
    """(b) normalise_window(..., N_q, N_q) instead of (N_q, N_k), at each call site."""
    for site, (fn, tensors, problem) in PRW._window_sites().items():
        sites = PRW._window_sites()
        if site == "dense":
            bad = lambda w, q, k: RW.window_clamp(w, q.shape[2], q.shape[2])  # noqa: E731
        elif site == "varlen":
            bad = lambda w, q, k: RW.window_clamp(w, q.shape[0], q.shape[0])  # noqa: E731
        else:
            bad = lambda w, q, k_cache, block_table: RW.window_clamp(w, q.shape[1], q.shape[1])  # noqa: E731
        sites[site] = (bad, tensors, problem)
        failing = _failing(PRW.prove_window_clamp(sites=sites))
        assert all(name.startswith(f"{site} call site") for name in failing) and failing, (site, failing)


def test_varlen_segments_grid_rounded_down_is_refuted():
    """varlen_segments_sound's grid case reads spec.launch.varlen_grid (the launchers'), not a copy."""
    failing = _failing(PV.prove_varlen_segments_sound(grid=lambda m, b, cu, h: (sp.floor(m / b), 0)))
    assert failing == ["grid cdiv(max_seqlen, B)·B covers a segment of n <= max_seqlen rows"], failing


# ---------------------------------------------------------------- attention dropout (issue 29)
from spec.proofs import dropout as PD  # noqa: E402


def _keep_at(counter):
    """DROPOUT_KEEP drawing at another counter."""
    return replace(terms.DROPOUT_KEEP, expr=sp.GreaterThan(terms.philox_uniform(n.drop_seed, counter), n.dropout_p,
                                                           evaluate=False))


MASK_MUTANTS = {
    # the row stride N_q where N_k belongs: rows i and i + 1 overlap once N_q != N_k
    "wrong radix": {"keep": _keep_at(n.drop_base + n.i * n.drop_nq + n.j)},
    # a tile start in the counter: the mask would depend on the tiling (the dK/dV kernel's tiles differ)
    "tile coordinate": {"keep": _keep_at(n.drop_base + n.i * n.drop_nk + n.j - n.start_n)},
    # the head left out of the base: every head of a batch entry draws the same mask
    "no head": {"base": replace(terms.DROPOUT_BASE, expr=terms.DROPOUT_BASE.expr.subs(n.off_h, 0))},
    # a 32-bit-style counter without the batch: collides across batch entries
    "no batch": {"base": replace(terms.DROPOUT_BASE, expr=terms.DROPOUT_BASE.expr.subs(n.drop_b, 0))},
}


@pytest.mark.parametrize("mutant", list(MASK_MUTANTS))
def test_dropout_counter_mutant_is_refuted(mutant):
    assert_failed(PD.prove_dropout_mask_same(**MASK_MUTANTS[mutant]))


def test_dropout_mask_same_z3_case_refutes_an_overlapping_counter():
    """The z3 injectivity case itself (not only the SymPy identity) fails on a counter whose
    coordinates overlap: rows strided by N_k − 1."""
    r = PD.prove_dropout_mask_same(keep=_keep_at(n.drop_base + n.i * (n.drop_nk - 1) + n.j))
    assert_failed(r)
    assert dict(r.cases)["injective: equal counters at (b, h, i, j) and (b', h', i', j') => equal coordinates"] != 0


def test_dropout_mask_same_refutes_a_dkdv_box_of_kv_heads():
    """The audit's edit (round three): the dK/dV kernel's dropout box with H_KV heads, not H_KV·GROUP (B=2, GQA 4:2:
    dK 0.63). The boxes are printed terms the claim evaluates at each kernel's spec.launch integers; a hand-typed box
    line in the template is refused by hygiene rule 2 (drop_heads is a printed term's name)."""
    from generator import hygiene
    from generator.render import render_variant
    from generator.variants import BlockConfig
    from spec.printer import print_term

    boxes = dict(terms.DROPOUT_BOXES, dkdv=terms.dropout_box(sp.Symbol("H_KV", integer=True, positive=True)))
    r = PD.prove_dropout_mask_same(boxes=boxes)
    assert_failed(r)
    assert [name for name, res in r.cases if res != 0] == [
        "dense: the dkdv kernel's counter at (b, h, i, j) is the dropout_mask helper's at keep[b, h, i, j]"]
    # the same edit typed into the dK/dV kernel's source
    source = render_variant(next(v for v in BlockConfig(64, 64).variants() if v.kind.name == "bwd"))
    line = print_term(terms.DROPOUT_BOXES["dkdv"][1])
    assert source.count(line) == 1
    printed, assigned, stages = hygiene.printed_lines()
    found = hygiene.check_source(source.replace(line, "drop_heads = H_KV"), set(printed), set(assigned), set(stages))
    assert any("drop_heads = H_KV" in p and "only a printed spec term" in p for p in found), found


def test_dropout_mask_same_refutes_a_keep_mask_of_kv_heads():
    """The keep mask return_dropout_mask allocates is spec.launch.dropout_mask_shape's (the runtime's api and varlen
    call it): one of H_KV heads (k's, not q's) fails dropout_mask_same, dense and packed, and the kernels' counters
    no longer match the mask the helper draws."""
    def kv_heads(q, k):
        return (q.shape[0], k.shape[1], q.shape[2], k.shape[2]) if q.dim() == 4 else (1, k.shape[1], q.shape[0],
                                                                                        k.shape[0])
    r = PD.prove_dropout_mask_same(launches=PD.box_launches(dropout_mask_shape=kv_heads))
    assert_failed(r)
    failing = [name for name, res in r.cases if res != 0]
    for tag, shape in (("dense", "B"), ("packed", "1")):
        assert f"{tag}: the host's keep mask is ({shape}, H_q, N_q, N_k)" in failing, failing
    assert "dense: the forward kernel's counter at (b, h, i, j) is the dropout_mask helper's at keep[b, h, i, j]" \
        in failing, failing


GRAD_MUTANTS = {
    # dV from the undropped Pᵀ
    "dV undropped": {"dropout_dv_t": (terms.DROPOUT_DV_T[0],
                                      replace(terms.DROPOUT_DV_T[1], expr=n.dv + terms.dot(n.pT, n.do)))},
    # dP masked but not rescaled by 1/(1 − p)
    "dP not rescaled": {"dropout_dp": replace(terms.DROPOUT_DP, expr=sp.Piecewise((n.dp, n.keep_drop), (0, True)))},
    # the key-major dPᵀ without the dropout
    "dPT undropped": {"dropout_dp_t": replace(terms.DROPOUT_DP_T, expr=n.dpT)},
    # the forward without the dropout line (P V undropped)
    "forward undropped": {"forward_tile": terms.FORWARD_TILE},
    # the forward dropping P before the row sum: l (and lse) of the dropped row
    "forward drops the denominator": {"forward_tile": tuple(
        t for tile in terms.FORWARD_TILE for t in ((terms.DROPOUT_P, tile) if tile.name == "l_ij" else (tile,)))},
    # the rescale 1/(1 + p)
    "scale sign": {"dropout_scale": replace(terms.DROPOUT_SCALE, expr=1 / (1 + n.dropout_p))},
}


@pytest.mark.parametrize("mutant", list(GRAD_MUTANTS))
def test_dropout_gradient_mutant_is_refuted(mutant):
    assert_failed(PD.prove_dropout_grads(**GRAD_MUTANTS[mutant]))


def test_decode_value_and_out_offsets_at_the_key_head_dim_are_refuted():
    """MLA (issue 27): v and out printed at offs_d, q/k's head dim lane (the single-head-dim kernel),
    instead of offs_dv: the element is wrong (offs_d ≠ offs_dv) and, with D > D_v, outside v and out."""
    kv = swap(AD.KV_OFFSETS, AD.v_off, AD.off_kvh * AD.S_["stride_vh"] + terms.col(AD.v_rows)
              + terms.row(AD.offs_d) * AD.S_["stride_vd"])
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, kv_offsets=kv)))
    assert sorted(failing) == ["contiguous: v offset is v_cache[off_bc, j, kvh, dv]",
                               "paged: v offset is v_cache[block_table[b, j // PS], j % PS, kvh, dv]"], failing
    o_term, l_term = AD.OUT_OFFSETS
    out = (AD.Term(AD.o_off, o_term.expr.xreplace({AD.offs_dv: AD.offs_d}), AD.CLAIM_DECODE, "at offs_d"), l_term)
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, out_offsets=out)))
    assert sorted(failing) == ["contiguous: out offset is out[split, b, tok, head, dv]",
                               "paged: out offset is out[split, b, tok, head, dv]"], failing


def test_varlen_dv_moved_by_dk_row_stride_is_refuted():
    """MLA (issue 27): the dK/dV kernel's DV pointer moved by dK's row stride (the old launch passed dv
    with dk's strides): wrong once dv (total_k, Hkv, D_v) and dk (total_k, Hkv, D) differ."""
    pointers = dict(AD.SEGMENT_POINTERS)
    pointers["dkdv"] = swap(pointers["dkdv"], sp.Symbol("DV"),
                            sp.Symbol("DV") + V.seq_start_k * sp.Symbol("stride_dkn", integer=True))
    failing = _failing(PAD.prove_varlen_addresses(pointers=pointers))
    assert failing == ["dkdv: DV reaches dv[cu_seqlens_k[b] + i, h, d]"], failing


def test_launches_passing_q_head_dim_for_v_are_refuted():
    """Audit of round three: a launch passing q/k's head dim D as HEAD_DIM_V (D=16, D_v=32: out error 1e38, columns
    D… never written; D > D_v: reads and writes past v's and out's columns). HEAD_DIM_V is spec.launch.head_dims'
    output now; a launch function overriding it fails the address claims' coverage and extent cases."""
    def wrong_v(fn):
        def launch(q, k, v, *args, **kwargs):
            grid, ints, *rest = fn(q, k, v, *args, **kwargs)
            if rest:  # decode: (grid, ints, constexprs)
                return grid, ints, dict(rest[0], HEAD_DIM_V=q.shape[-1])
            return grid, dict(ints, HEAD_DIM_V=q.shape[-1])
        return launch

    cover = "the head dims' lanes cover every column: HEAD_DIM + HEAD_DIM_TAIL = D, HEAD_DIM_V = D_v (spec.launch.head_dims)"
    failing = _failing(PAD.prove_forward_addresses(launch=wrong_v(LA.forward_launch)))
    assert cover in failing and "v[b, off_kvh, j, dv] inside (lanes j < N_K, dv < HEAD_DIM_V)" in failing, failing
    failing = _failing(PAD.prove_backward_kernel_addresses(dkdv_launch=wrong_v(LA.dkdv_launch)))
    assert f"dkdv: {cover}" in failing, failing
    failing = _failing(PAD.prove_backward_kernel_addresses(dq_launch=wrong_v(LA.dq_launch)))
    assert f"dq: {cover}" in failing, failing
    failing = _failing(PAD.prove_backward_addresses(launch=lambda out, do, *a: (
        LA.preprocess_launch(out, do, *a)[0], dict(LA.preprocess_launch(out, do, *a)[1], HEAD_DIM=2 * out.shape[-1]))))
    assert "dense: the lanes d < HEAD_DIM cover out's columns: HEAD_DIM = D" in failing, failing
    assert "dense: out/grad_out[b, h, i, d] inside (lanes i < N_Q, d < D)" in failing, failing
    failing = _failing(PAD.prove_decode_addresses(launch=wrong_v(LA.decode_launch)))
    assert f"paged: {cover}" in failing and "contiguous: out/lse[split, b, tok, head, dv] inside out and lse (lanes " \
        "row_ok & dv_ok)" in failing, failing


def test_decode_v_is_k_without_the_pointer_check_is_refuted():
    """Audit of round three: decode taking the absorbed V_IS_K variant for any v cache of k's layout (no
    ``v_cache.data_ptr() == k_cache.data_ptr()``: two caches of one layout, V read as K, error 1.2); and one that never
    takes it (MLA's absorbed decode reading its latent rows twice)."""
    failing = _failing(PAD.prove_decode_addresses(v_is_k=LA.decode_v_shares_k_layout))
    assert failing == [f"{tag}: V_IS_K for a second cache of k's layout: the V address at lane d is the K address"
                       for tag in ("paged", "contiguous")], failing
    failing = _failing(PAD.prove_decode_addresses(v_is_k=lambda k, v: False))
    assert failing == [f"{tag}: V_IS_K for v_cache = k_cache[..., :D_v]" for tag in ("paged", "contiguous")], failing


def test_append_cache_index_at_the_tile_lane_is_refuted():
    """Audit of round three: the append's ``offs_j = start_new + tl.arange(0, BLOCK_T)`` (the tile's lanes, not the
    tokens: 20 new tokens, error 0.74). offs_j is a printed term (APPEND_KEY) now; at the lane it fails
    append_addresses' offsets (the extents still hold: each lane stays inside the cache)."""
    block_t = sp.Symbol("BLOCK_T", integer=True, positive=True)
    lane = (terms.Term(AD.offs_j, AD.start_new + AD.offs_t - terms.program_id(0) * block_t, AD.CLAIM_APPEND,
                       "the tile's lane"),)
    assert _failing(PAD.prove_append_addresses(groups=dict(AD.APPEND_GROUPS, key=lane))) == [
        "paged: block_table offset is block_table[b, j // PAGE_SIZE], j = cache_seqlens[b] + t",
        "paged: cache offset is cache[block_table[b, j // PS], j % PS, head, d], j = cache_seqlens[b] + t",
        "cache: cache offset is cache[off_bc, j, head, d], j = cache_seqlens[b] + t"]


def test_head_dim_split_mutants_are_refuted():
    """MLA (issue 27), claim head_dim_split: the tail's product dropped, or taken with the main q columns."""
    from spec.proofs.kernel import prove_head_dim_split

    assert prove_head_dim_split().proved
    for bad in (terms.QK_TAIL.expr.xreplace({n.q_tail: n.q}), n.qk):
        tail = (replace(terms.QK_TAIL, expr=bad),)
        assert_failed(prove_head_dim_split(qk_tail=tail))


def test_backward_head_dim_split_mutants_are_refuted():
    """The backward's split head dim (claim head_dim_split, BACKWARD_TAIL): Sᵀ's tail product dropped or taken
    with the main q columns, dK's tail from the main q columns, dQ's tail from the main k columns or from dSᵀ,
    either tail left unscaled: each fails the claim on its own case."""
    from spec.proofs.kernel import prove_head_dim_split

    tail = terms.BACKWARD_TAIL
    mutants = {0: (n.qkT, tail[0].expr.xreplace({n.q_tail: n.q})), 1: (tail[1].expr.xreplace({n.q_tail: n.q}),),
               2: (n.dk_tail,), 3: (tail[3].expr.xreplace({n.k_tail: n.k}), tail[3].expr.xreplace({n.ds: n.dsT})),
               4: (n.dq_tail,)}
    for index, bads in mutants.items():
        for bad in bads:
            mutated = tail[:index] + (replace(tail[index], expr=bad),) + tail[index + 1:]
            assert_failed(prove_head_dim_split(backward_tail=mutated))


def test_backward_tail_offsets_at_the_main_lane_are_refuted():
    """The backward's split head dim: the k, q, dk, dq tails addressed at offs_d (the main columns) instead of
    offs_dt (claim backward_kernel_addresses), as a template that reused the main tile's offsets would."""
    groups = dict(AD.BACKWARD_KERNEL_GROUPS)
    for name in ("k_tail", "q_tail_rows", "dk_tail", "dq_tail"):
        (term,) = groups[name]
        groups[name] = (AD.Term(term.symbol, term.expr.xreplace({AD.offs_dt: AD.offs_d}), term.claim, "x"),)
    failing = _failing(PAD.prove_backward_kernel_addresses(groups=groups))
    for want in ("dkdv: k tail offset is k[b, kvh, j, dt]", "dq: q tail offset is q[b, h, i, dt]",
                 "dkdv: dk tail offset is dk[b, kvh, j, dt]", "dq: dq tail offset is dq[b, h, i, dt]"):
        assert want in failing, failing


def test_forward_tail_offsets_at_the_main_lane_are_refuted():
    """The forward's split head dim (claim head_dim_split): the tails addressed at offs_d (the main columns)
    instead of offs_dt, as a template that reused the main tile's offsets would."""
    def at_main(term):
        return (AD.Term(term.symbol, term.expr.xreplace({AD.offs_dt: AD.offs_d}), AD.CLAIM_FORWARD, "x"),)

    failing = _failing(PAD.prove_forward_addresses(groups=dict(
        AD.FORWARD_GROUPS, q_tail_offset=at_main(AD.FORWARD_GROUPS["q_tail_offset"][0]),
        k_tail_offset=at_main(AD.FORWARD_GROUPS["k_tail_offset"][0]))))
    assert "q tail offset is q[b, h, i, dt]" in failing and "k tail offset is k[b, off_kvh, j, dt]" in failing, failing


def test_decode_tail_offset_at_the_main_lane_is_refuted():
    """MLA: k's tail addressed at offs_d (the main columns) instead of offs_dt."""
    k_tail = (AD.Term(AD.k_tail_off, AD.K_TAIL_OFFSET.expr.xreplace({AD.offs_dt: AD.offs_d}), AD.CLAIM_DECODE, "x"),)
    failing = _failing(PAD.prove_decode_addresses(groups=dict(AD.DECODE_GROUPS, k_tail_offset=k_tail)))
    assert sorted(failing) == ["contiguous: k tail offset is k_cache[..., kvh, dt]",
                               "paged: k tail offset is k_cache[..., kvh, dt]"], failing


# ---------------------------------------------------------------- issue 24: the dense forward's addresses
# Each edit is one a real bug would make (the hand-written lines they replace assumed it), applied to the
# printed term or to spec.launch.forward_launch, and refuted by claim forward_addresses.
FG = AD.FORWARD_GROUPS


def _forward_failing(**kw):
    return _failing(PAD.prove_forward_addresses(**kw))


def test_forward_address_lse_assumed_contiguous_is_refuted():
    """The old kernel's lse row, (off_b·H + off_h)·N_Q + offs_m: right only for a contiguous (B, H, N_Q)."""
    H, N_Q = sp.Symbol("H", integer=True), sp.Symbol("N_Q", integer=True)
    outs = swap(FG["out_offsets"], AD.lse_off, (AD.off_b * H + AD.off_h) * N_Q + AD.offs_m)
    assert _forward_failing(groups=dict(FG, out_offsets=outs)) == ["lse offset is lse[b, h, i]"]


def test_forward_address_kv_of_the_query_head_is_refuted():
    """GQA dropped: K's head from off_h, not off_kvh = off_h // GROUP."""
    base = swap(FG["kv_base"], AD.k_base, AD.off_b * AD.F_["stride_kb"] + AD.off_h * AD.F_["stride_kh"])
    failing = _forward_failing(groups=dict(FG, kv_base=base))
    # the split head dim's K tail moves from the same base (claim head_dim_split)
    assert failing == ["k offset is k[b, off_kvh, j, d]", "k tail offset is k[b, off_kvh, j, dt]"], failing


def test_forward_address_mask_without_its_head_stride_is_refuted():
    """The dense mask read as if broadcast over heads (its head stride dropped)."""
    base = swap(FG["mask_base"], AD.mask_base, AD.off_b * AD.F_["stride_mb"] + terms.col(AD.offs_m) * AD.F_["stride_mm"])
    assert _forward_failing(groups=dict(FG, mask_base=base)) == ["mask offset is mask[b, h, i, j]"]


def test_forward_address_block_map_by_key_not_tile_is_refuted():
    """The block map indexed by the tile's first key instead of its tile number."""
    off = swap(FG["map_offset"], AD.map_off, AD.map_base + terms.int64(AD.start_n) * AD.F_["stride_map_n"])
    failing = _forward_failing(groups=dict(FG, map_offset=off))
    assert failing == ["block map offset is block_map[b, h, pid_m, start_n // BLOCK_N]"], failing


def test_forward_address_key_lengths_at_b_is_refuted():
    """The old kernel's KeyLens + off_b: right only for a contiguous key_lengths."""
    kl = swap(FG["key_len"], AD.kl_off, AD.off_b)
    assert _forward_failing(groups=dict(FG, key_len=kl)) == ["key_lengths offset is key_lengths[b]"]


def test_forward_address_launch_bugs_are_refuted():
    """spec.launch.forward_launch edited: v passed with k's strides; the grid rounded down; slopes (Hq,)
    passed with their strides swapped; the Philox pair passed as given (the kernel reads word 1 at +1)."""
    def v_as_k(q, k, v, *rest, **kw):
        grid, ints = LA.forward_launch(q, k, v, *rest, **kw)
        return grid, dict(ints, **dict(zip(LA.FORWARD_STRIDE_NAMES["v"], LA.attention_strides(k))))

    assert _forward_failing(launch=v_as_k) == ["v offset is v[b, off_kvh, j, dv]"]

    def rounded_down(*args, **kw):
        grid, ints = LA.forward_launch(*args, **kw)
        return (sp.floor(ints["N_Q"] / args[10]), *grid[1:]), ints

    assert _forward_failing(launch=rounded_down) == [
        "rows: every index in [lo, hi) is in the lanes offs_m of a visited tile",
        "the grid covers every (b, h, i): grid[0]·BLOCK_M >= N_Q, grid[1:] = (Hq, B)"]

    def swapped_slopes(*args, **kw):
        grid, ints = LA.forward_launch(*args, **kw)
        return grid, dict(ints, stride_sb=ints["stride_sh"], stride_sh=ints["stride_sb"])

    assert "slopes (Hq,): slope offset is alibi_slopes[h]" in _forward_failing(launch=swapped_slopes)
    assert _forward_failing(philox_words=lambda p: p) == ["rng_off is philox[1] (as spec.launch.philox_words passes it)"]


# ---------------------------------------------------------------- issue 24: softmax's and the merges' addresses
RG = AD.ROWS_GROUPS


def test_rows_address_unit_column_stride_is_refuted():
    """The old kernels' `X + r·stride_r + c`: right only for a unit column stride."""
    soft = swap(RG["softmax"], AD.x_off, terms.int64(terms.col(AD.offs_m)) * AD.R_["stride_xr"] + terms.row(AD.offs_n))
    assert _failing(PAD.prove_rows_addresses(groups=dict(RG, softmax=soft))) == ["softmax: x offset is x[r, c]"]
    merge = swap(RG["merge"], AD.la_off, AD.offs_m)
    assert _failing(PAD.prove_rows_addresses(groups=dict(RG, merge=merge))) == ["merge_state: lse_a offset is lse_a[r]"]


def test_rows_address_sink_of_the_row_not_its_head_is_refuted():
    """merge_states' sink read at floor(r / H) (the token) instead of r % H (the query head)."""
    sink = swap(RG["merge_sink"], AD.msink_off, terms.int64(sp.floor(AD.offs_m / AD.H_)) * AD.R_["stride_sink"])
    failing = _failing(PAD.prove_rows_addresses(groups=dict(RG, merge_sink=sink)))
    assert failing == ["merge_states: sink offset is sinks[r % H]"], failing


def test_rows_address_launch_bugs_are_refuted():
    """The launch functions edited: y written with x's strides; the split stride of lse_s from o_s; the grid
    rounded down; softmax's one pass picked for rows up to two column tiles (columns BLOCK_N..N never read); the
    merges' BLOCK_D half the head dim or the power of two below it (D = 3 on 2 lanes: column 2 never read)."""
    def y_as_x(x, y, block_m, block_n):
        grid, ints, one_pass = LA.softmax_launch(x, y, block_m, block_n)
        return grid, dict(ints, stride_yr=ints["stride_xr"], stride_yc=ints["stride_xc"]), one_pass

    assert _failing(PAD.prove_rows_addresses(softmax_launch=y_as_x)) == ["softmax: y offset is y[r, c]"]

    def lse_split_from_o(*args):
        grid, ints = LA.merge_states_launch(*args)
        return grid, dict(ints, stride_ls=ints["stride_os"])

    failing = _failing(PAD.prove_rows_addresses(merge_states_launch=lse_split_from_o))
    assert failing == ["merge_states: lse_s offset is lse_s[s, r]"], failing

    def rounded_down(*args):
        grid, ints = LA.merge_state_launch(*args)
        return (sp.floor(ints["R"] / args[-1]),), ints

    failing = _failing(PAD.prove_rows_addresses(merge_state_launch=rounded_down))
    assert failing == ["merge_state: the grid covers every row",
                       "merge_state: rows: every index in [lo, hi) is in the lanes offs_m of a visited tile"], failing

    def one_pass_up_to_two_tiles(x, y, block_m, block_n):
        grid, ints, _ = LA.softmax_launch(x, y, block_m, block_n)
        return grid, ints, x.shape[1] <= 2 * block_n

    failing = _failing(PAD.prove_rows_addresses(softmax_launch=one_pass_up_to_two_tiles))
    assert failing == ["softmax: one pass (when spec.launch.softmax_launch picks it): every column c < N is a lane "
                       "of offs_n"], failing
    width = f"the merges' columns arange(BLOCK_D) reach every d < D (spec.launch.merge_block_d, every D in " \
            f"1..{limit('merge_head_dim_max')}): "
    failing = _failing(PAD.prove_rows_addresses(merge_block_d=lambda D: D // 2))
    assert failing == [width + "BLOCK_D >= D", width + "BLOCK_D is a power of two"], failing  # D = 1: 0 lanes
    failing = _failing(PAD.prove_rows_addresses(merge_block_d=lambda D: LA.merge_block_d(D + 1) // 2))
    assert failing == [width + "BLOCK_D >= D"], failing


def test_forward_address_dropout_keep_assumed_contiguous_is_refuted():
    """_dropout_keep's old row, (b·H + h)·N_Q·N_K + i·N_K + j: right only for a contiguous keep mask."""
    H, N_Q, N_K = (sp.Symbol(x, integer=True) for x in ("H", "N_Q", "N_K"))
    keep = swap(FG["keep_offset"], AD.keep_off, (AD.off_b * H + AD.off_h) * N_Q * N_K
                + terms.col(AD.offs_m64) * N_K + terms.row(AD.offs_n))
    assert _forward_failing(groups=dict(FG, keep_offset=keep)) == ["_dropout_keep: keep offset is keep[b, h, i, j]"]


# ---------------------------------------------------------------- issue 24: the KV-cache append's addresses
APG = AD.APPEND_GROUPS


def test_append_address_block_table_without_its_column_stride_is_refuted():
    """The old append kernel's block-table entry, off_b·stride_bt_b + page_idx (column stride 1)."""
    look = swap(APG["lookups"], AD.abt_off, AD.off_b * AD.AP_["stride_bt_b"] + AD.P.page_idx)
    failing = _failing(PAD.prove_append_addresses(groups=dict(APG, lookups=look)))
    # the page read from the wrong entry moves the cache row too
    assert failing == ["paged: block_table offset is block_table[b, j // PAGE_SIZE], j = cache_seqlens[b] + t",
                       "paged: cache offset is cache[block_table[b, j // PS], j % PS, head, d], j = cache_seqlens[b] + t"
                       ], failing


def test_append_address_cache_seqlens_at_b_is_refuted():
    """The old kernel's CacheSeqlens + off_b: right only for a contiguous cache_seqlens."""
    look = swap(APG["lookups"], AD.acs_off, AD.off_b)
    failing = _failing(PAD.prove_append_addresses(groups=dict(APG, lookups=look)))
    assert sorted(failing) == [f"{k}: cache_seqlens offset is cache_seqlens[b]" for k in ("cache", "paged", "tensor")]


def test_append_address_launch_with_sin_read_by_cos_strides_is_refuted():
    def bad(x, dst, cs, table, bi, cos, sin, block_t):
        grid, ints = LA.append_launch(x, dst, cs, table, bi, cos, sin, block_t)
        return grid, dict(ints, stride_sin_n=ints["stride_cos_n"], stride_sin_d=ints["stride_cos_d"])

    failing = _failing(PAD.prove_append_addresses(launch=bad))
    assert sorted(failing) == [f"{k}: sin offset is sin[pos, freq]" for k in ("cache", "paged", "tensor")]


def test_append_tile_narrower_than_its_head_dim_is_refuted():
    """The append launched with BLOCK_D the power of two below D (D = 3 on 2 lanes: column 2 never written)."""
    failing = _failing(PAD.prove_append_addresses(block_d=lambda D: LA.next_power_of_2(D + 1) // 2))
    assert failing == ["the tile's columns arange(BLOCK_D) reach every d < D: spec.launch.block_d(D) >= D for D in "
                       f"1..{limit('head_dim_max')}"], failing


def test_append_lane_masks_are_read_by_the_claim():
    """Issue 24, masked-off lanes: the append's printed masks t_ok, d_ok (spec.addresses.APPEND_T_OK, APPEND_D_OK)
    are what append_addresses quantifies over. t_ok with <= admits token N_new (past x, out and the cache's
    capacity; the paged block_table row too) and d_ok without HEAD_DIM (every lane of the BLOCK_D tile) reads and
    writes past D (one proof for both); masks one short miss the last token and column the reference writes; a
    launch passing HEAD_DIM = D + 1 admits column D."""
    (t_ok,), (d_ok,) = APG["t_ok"], APG["d_ok"]

    def masks(t, d):
        return dict(APG, t_ok=(replace(t_ok, expr=t),), d_ok=(replace(d_ok, expr=d),))
    kinds = ("paged", "cache", "tensor")
    exact = [f"{k}: {what}" for k in kinds for what in (
        "t_ok admits exactly the new tokens t < N_new (every row the reference writes)",
        "d_ok admits exactly the columns d < D (every column the reference writes)")]
    wide = _failing(PAD.prove_append_addresses(groups=masks(sp.LessThan(AD.offs_t, AD.N_NEW_), sp.true)))
    for name in exact + [f"{k}: x[b, t, head, d] inside (lanes t_ok & d_ok)" for k in kinds] + [
            "paged: block_table[b, j // PS] inside (lanes t_ok: the load's mask)",
            "paged: cache[page, j % PS, head, d] inside (lanes t_ok & d_ok)",
            "cache: cache[off_bc, j, head, d] inside, off_bc = b (B_cache = B) (lanes t_ok & d_ok)",
            "tensor: out[b, t, head, d] inside (lanes t_ok & d_ok)",
            "tensor: GPT-J: partner x[b, t, head, pair] inside (rotary lanes; rotary_dim <= D, rotary_cos's rule)"]:
        assert name in wide, (name, wide)
    short = _failing(PAD.prove_append_addresses(groups=masks(sp.StrictLessThan(AD.offs_t, AD.N_NEW_ - 1),
                                                             sp.StrictLessThan(AD.offs_d, AD.HEAD_DIM_ - 1))))
    # (d_ok one short also leaves column D - 1 outside the lanes it admits: the printed lanes' column case)
    assert sorted(short) == sorted(exact + [f"{k}: every column d < D is a lane of offs_d that d_ok admits (BLOCK_D >= D)"
                                            for k in kinds]), short

    def bad(x, dst, cs, table, bi, cos, sin, block_t):
        grid, ints = LA.append_launch(x, dst, cs, table, bi, cos, sin, block_t)
        return grid, dict(ints, HEAD_DIM=ints["HEAD_DIM"] + 1)
    launched = _failing(PAD.prove_append_addresses(launch=bad))
    assert "cache: x[b, t, head, d] inside (lanes t_ok & d_ok)" in launched, launched
    assert [name for name in exact if name in launched] == exact[1::2], launched


# ---------------------------------------------------------------- issue 24: the backward preprocess's addresses
def test_backward_address_rows_assumed_contiguous_are_refuted():
    """The old preprocess's rows, off_bh·N_Q + offs_m, for the saved lse: right only for a contiguous (B, H, N_Q)."""
    H, N_Q = sp.Symbol("H", integer=True), sp.Symbol("N_Q", integer=True)
    pre = swap(AD.PREPROCESS_OFFSETS, AD.slse_off, (AD.off_b * H + AD.off_h) * N_Q + AD.offs_m)
    failing = _failing(PAD.prove_backward_addresses(groups={**AD.BACKWARD_GROUPS, "preprocess": pre}))
    assert failing == ["dense: lse offset is lse[b, h, i]", "packed: lse offset is lse[b, h, i]"], failing


def test_backward_address_launch_bugs_are_refuted():
    """dL/dlse passed with the saved lse's strides (the autograd one may be expanded); lse2 made in another
    layout than Δ's (the preprocess writes both with Δ's strides)."""
    def dlse_as_lse(out, do, grad_lse, lse, delta, sinks, block_m):
        grid, ints = LA.preprocess_launch(out, do, grad_lse, lse, delta, sinks, block_m)
        return grid, dict(ints, stride_lb=ints["stride_slb"], stride_lh=ints["stride_slh"], stride_lm=ints["stride_slm"])

    failing = _failing(PAD.prove_backward_addresses(launch=dlse_as_lse))
    assert failing == ["dense: grad_lse offset is grad_lse[b, h, i]", "packed: grad_lse offset is grad_lse[b, h, i]"]

    def lse2_transposed(lse, sinks):
        delta, lse2, dsink = LA.backward_row_tensors(lse, sinks)
        return delta, lse2.transpose(0, 1), dsink

    failing = _failing(PAD.prove_backward_addresses(row_tensors=lse2_transposed))
    assert "dense: row offset is lse2[b, h, i]" in failing, failing

# ---------------------------------------------------------------- issue 24: the backward dK/dV and dQ kernels' addresses
# Edits a real bug would make, applied to the printed term (spec.addresses.BACKWARD_KERNEL_GROUPS) or to the
# spec.launch function the runtime calls, each refuted by claim backward_kernel_addresses (the packed batch:
# varlen_addresses).
BKG = AD.BACKWARD_KERNEL_GROUPS


def _bwd_failing(**kw):
    return _failing(PAD.prove_backward_kernel_addresses(**kw))


def test_backward_address_dq_v_tile_by_k_strides_is_refuted():
    """dQ's Vᵀ tile addressed with K's strides: right only when v is laid out like k (not for MLA's D_v != D)."""
    S = AD.BK_
    vt = swap(BKG["vt_offset"], AD.bvt_off, AD.bv_base + terms.row(AD.offs_n) * S["stride_kn"]
              + terms.col(AD.offs_dv) * S["stride_kd"])
    failing = _bwd_failing(groups=dict(BKG, vt_offset=vt))
    assert failing == ["dq: v tile offset is v[b, kvh, j, dv] (transposed)",
                       "dq: v: the int32 products are the in-head offset row·stride_row + col·stride_col"], failing


def test_backward_address_query_rows_of_the_kv_head_are_refuted():
    """GQA: dK/dV's loop reads the Q rows of the K/V head (off_kvh) instead of the group's query head off_h."""
    rb = swap(BKG["row_base"], AD.bq_base, AD.off_b * AD.BK_["stride_qb"] + AD.off_kvh * AD.BK_["stride_qh"])
    failing = _bwd_failing(groups=dict(BKG, row_base=rb))
    # the split head dim's q tail (claim head_dim_split) reads from the same base: it fails with it
    assert failing == ["dkdv: q tail offset is q[b, h, i, dt]", "dkdv: q offset is q[b, h, i, d]",
                       "dq: q tail offset is q[b, h, i, dt]", "dq: q offset is q[b, h, i, d]"], failing


def test_backward_address_mask_tile_transposed_is_refuted():
    """The key-major tile's mask bits read with i and j swapped (the mask's row stride scaling the key)."""
    S = AD.BK_
    mask = swap(BKG["mask"], AD.bmask_off, AD.bmask_base + n.j * S["stride_mm"] + n.i * S["stride_mn"])
    failing = _bwd_failing(groups=dict(BKG, mask=mask))
    # its int32 products are no longer the in-head offset i·stride_mm + j·stride_mn index_int32 bounds either
    int32 = "mask: the int32 products are the in-head offset row·stride_row + col·stride_col"
    assert failing == ["dkdv: mask offset is mask[b, h, i, j]", f"dkdv: {int32}",
                       "dq: mask offset is mask[b, h, i, j]", f"dq: {int32}"], failing


def test_backward_address_block_map_at_the_loop_tile_is_refuted():
    """dK/dV's block map read at the row step (start_m // BLOCK_M) instead of its map tile (// MAP_BLOCK_M)."""
    col = swap(BKG["map_col"], AD.mapc_off, AD.mapc_base + terms.int64(sp.floor(AD.start_m / n.B_r)) * AD.BK_["stride_map_m"])
    failing = _bwd_failing(groups=dict(BKG, map_col=col))
    assert failing == ["dkdv: block map offset is block_map[b, h, start_m // MAP_BLOCK_M, start_n // MAP_BLOCK_N]"]


def test_backward_address_launch_bugs_of_the_kernels_are_refuted():
    """dv passed with dk's strides (MLA: dv is (B, Hkv, N_K, D_v)); dQ's grid rounded down; lse2 made in another
    layout than Δ's (both kernels read them with Δ's strides)."""
    def dv_as_dk(*args, **kw):
        grid, ints = LA.dkdv_launch(*args, **kw)
        return grid, dict(ints, **{f"stride_dv{x}": ints[f"stride_dk{x}"] for x in "bhnd"})

    failing = _bwd_failing(dkdv_launch=dv_as_dk)
    assert failing == ["dkdv: dv offset is dv[b, kvh, j, dv]"], failing

    def rounded_down(q, k, v, do, dq, delta, *rest, **kw):
        grid, ints = LA.dq_launch(q, k, v, do, dq, delta, *rest, **kw)
        return (sp.floor(ints["N_Q"] / rest[4]), *grid[1:]), ints

    failing = _bwd_failing(dq_launch=rounded_down)
    assert failing == ["dq: the grid's tiles: every index in [lo, hi) is in the lanes offs_m of a visited tile",
                       "dq: the grid covers every row tile of every (b, h): grid[0]·BLOCK_M >= N_Q, grid[1:] = (Hq, B), "
                       "and the kernel's H is grid[1] (the score_mod gradient's rows)"]

    def lse2_transposed(lse, sinks):
        delta, lse2, dsink = LA.backward_row_tensors(lse, sinks)
        return delta, lse2.transpose(0, 1), dsink

    failing = _bwd_failing(row_tensors=lse2_transposed)
    assert failing == ["dkdv: row offset is lse2[b, h, i]", "dq: row offset is lse2[b, h, i]"], failing


def test_backward_address_group_loop_with_the_wrong_group_is_refuted():
    """dK/dV's group loop with GROUP = Hq // Hkv replaced by Hkv: its query heads h = kvh·GROUP + g leave Hq."""
    def wrong_group(q, k, *rest, **kw):
        grid, ints = LA.dkdv_launch(q, k, *rest, **kw)
        return grid, dict(ints, GROUP=k.shape[1])

    failing = _bwd_failing(dkdv_launch=wrong_group)
    assert f"dkdv: {PAD.HEAD_LOOP_CASES[2]}" in failing, failing


def test_varlen_backward_rows_not_moved_to_the_segment_are_refuted():
    """A packed batch's Δ / lse2 rows read from row 0 (the old lse_off_b moved by hand, now a printed move): the
    pointer moves of dK/dV without Lse2's are refuted by claim varlen_addresses."""
    pointers = dict(AD.SEGMENT_POINTERS, dkdv=tuple(t for t in AD.SEGMENT_POINTERS["dkdv"] if t.symbol.name != "Lse2"))
    failing = _failing(PAD.prove_varlen_addresses(pointers=pointers))
    assert failing == ["dkdv: every pointer the kernel addresses is moved to its segment"], failing
    # moved by the keys' start instead of the queries'
    moved = swap(AD.SEGMENT_POINTERS["dq"], sp.Symbol("Lse2"), sp.Symbol("Lse2") + V.seq_start_k
                 * sp.Symbol("stride_rm", integer=True))
    failing = _failing(PAD.prove_varlen_addresses(pointers=dict(AD.SEGMENT_POINTERS, dq=moved)))
    assert failing == ["dq: Lse2 reaches lse2[h, cu_seqlens_q[b] + i]"], failing


# ----------------------------------------------------------------------------------
# User score_mods (issue 28): claims score_mod_derived and score_mod_builtins
# ----------------------------------------------------------------------------------
def _score_mod_mutants():
    from spec import score_mods as SM

    class Doubled(SM.ScoreMod):
        """rel_bias whose printed dS factor is doubled (the forward unchanged)."""

        def ds_term(self, ds=n.ds):
            t = SM.ScoreMod.ds_term(self, ds)
            return replace(t, expr=2 * t.expr)

    class NextEntry(SM.ScoreMod):
        """temperature whose gradient lands on the next head's entry."""

        def grad_terms(self):
            return tuple((g, replace(ix, expr=ix.expr + 1)) for g, ix in SM.ScoreMod.grad_terms(self))

    as_mutant = lambda cls, sm: cls(*[getattr(sm, f) for f in sm.__dataclass_fields__])  # noqa: E731
    return {"dS factor doubled": as_mutant(Doubled, SM.rel_bias),
            "gradient on the next entry": as_mutant(NextEntry, SM.temperature)}


@pytest.mark.parametrize("mutant", ["dS factor doubled", "gradient on the next entry"])
def test_score_mod_derived_refutes_a_mutated_instance(mutant):
    from spec.proofs import score_mod_user as PSU

    assert_failed(PSU.prove_score_mod_derived(examples=(_score_mod_mutants()[mutant],)))


def test_score_mod_derived_refutes_the_gradients_taken_after_the_ds_factor():
    """The audit's edit (round three): the dQ kernel's captured-tensor gradients taken after dS is multiplied by
    ∂f/∂s (temperature's d inv_t off by 8 %). The steps are ScoreMod.backward_terms' sequence, printed as
    _user_score_bwd's body in that order; the claim runs it. Also refused: the dK/dV kernel scattering too."""
    from spec import score_mods as SM
    from spec.proofs import score_mod_user as PSU

    (dq, _), (dkdv, _) = PSU.BACKWARD_KERNELS
    steps = SM.temperature.backward_terms()
    swapped = {dq: (steps[-1], *steps[:-1]), dkdv: SM.temperature.backward_terms(scatter=False)}
    failing = [name for name, r in PSU.derivative_cases(SM.temperature, backward=swapped) if r != 0]
    assert failing == [f"{dq}: every gradient is scattered before ds·∂f/∂s (it reads ∂L/∂f)",
                       f"{dq}: scattered sgrad_0 = ∂L/∂SF[offs_sp_0] = ∂L/∂f·∂logit/∂SF[offs_sp_0]"], failing

    class GradsAfterDs(SM.ScoreMod):
        def backward_terms(self, scatter=True):
            steps = SM.ScoreMod.backward_terms(self, scatter)
            return (steps[-1], *steps[:-1])

    mutant = GradsAfterDs(*[getattr(SM.temperature, f) for f in SM.temperature.__dataclass_fields__])
    twice = {dq: steps, dkdv: steps}
    assert [name for name, r in PSU.derivative_cases(SM.temperature, backward=twice) if r != 0] == [
        f"{dkdv}: no gradient scattered (the dQ kernel scatters every element once)"]
    assert_failed(PSU.prove_score_mod_derived(examples=(mutant,)))


def test_score_mod_builtins_refutes_a_swapped_instance():
    from spec import score_mods as SM
    from spec.proofs import score_mod_user as PSU

    assert_failed(PSU.prove_score_mod_builtins(tanh_cap=SM.temperature))
    assert_failed(PSU.prove_score_mod_builtins(alibi=SM.rel_bias))


def test_score_mod_error_bound_refutes_a_miscount(monkeypatch):
    """Claim score_mod_error_bound FAILS on a rounding count one short (rel_bias's f stated at 0, alibi's at 2),
    on a scaled score counted at 4, and on a score_mod_exponent without the rounding of f."""
    from spec import error_bound as EB
    from spec import score_mods as SM
    from spec.proofs import score_mod_user as PSU

    r = PSU.prove_score_mod_error_bound(roundings=lambda sm: SM.ScoreMod.roundings(sm) - 1)
    assert_failed(r)
    assert dict(r.cases)["alibi: every monomial of the printed f carries <= 2 roundings"] != 0
    assert_failed(PSU.prove_score_mod_error_bound(
        score_mod_exponent=lambda sA, al, ka, gd, gs, gk, gb, u: EB.score_mod_exponent(sA, al, ka, gd, gs, 0, gb, u)))
    monkeypatch.setattr(EB, "SCORE_MOD_SCALE_ROUNDINGS", 4)
    assert_failed(PSU.prove_score_mod_error_bound(examples=(SM.rel_bias,)))


# ---------------------------------------------------------------- FP8 forward (issue 30)
from spec import error_bound as EB  # noqa: E402
from spec.proofs import fp8 as P8  # noqa: E402

#: one wrong version of each FP8 term: claim fp8_descale must fail on each
DESCALE_MUTANTS = {
    # S without k's descale
    "qk_scale misses k_descale": {"fp8_qk_scale": replace(terms.FP8_QK_SCALE,
                                                           expr=n.sm_scale * n.q_descale * n.LOG2E)},
    # the descale divided instead of multiplied
    "qk_scale divides by q_descale": {"fp8_qk_scale": replace(terms.FP8_QK_SCALE,
                                                               expr=n.sm_scale * n.k_descale * n.LOG2E / n.q_descale)},
    # P not scaled before P V (the epilogue still divides by p_scale)
    "P not scaled": {"fp8_p": replace(terms.FP8_P, expr=n.p)},
    # v_scale without P's scale
    "v_scale = v_descale": {"fp8_v_scale": replace(terms.FP8_V_SCALE, expr=n.v_descale)},
    # the output's descale forgotten
    "out not descaled": {"fp8_out": replace(terms.FP8_OUT, expr=n.acc)},
    # a P scale above e4m3's max (P·p_scale would saturate)
    "p_scale 512 > 448": {"formats": {**EB.FP8, "e4m3": EB.FP8["e4m3"]._replace(p_scale=512.0)}},
}


@pytest.mark.parametrize("mutant", list(DESCALE_MUTANTS))
def test_fp8_descale_mutant_is_refuted(mutant):
    assert_failed(P8.prove_fp8_descale(**DESCALE_MUTANTS[mutant]))


def _bound_without_subnormals(dtype, *args, num=EB.FLOATS, **kw):
    """forward_bound with P's subnormal error dropped (p_abs = 0): the FP8 composition must notice."""
    class NoAbs(type(num)):
        p_abs = {name: 0 for name in num.p_abs}
    return EB.forward_bound(dtype, *args, num=NoAbs(), **kw)


def _out_bound_without_abs(rho_w, rho_num, rho_den, u_div, u_store, abs_num=0, num=EB.FLOATS):
    return EB.out_bound(rho_w, rho_num, rho_den, u_div, u_store, num=num)


#: wrong versions of the FP8 bound's pieces: claim fp8_error_bound must fail on each
BOUND_MUTANTS = {
    # eta too small: the e4m3 grid's subnormal gaps exceed u·g + eta
    "eta halved": {"formats": {**EB.FP8, "e4m3": EB.FP8["e4m3"]._replace(eta=2.0**-11)}},
    # e5m2 with e4m3's unit roundoff
    "e5m2 u = 2^-4": {"formats": {**EB.FP8, "e5m2": EB.FP8["e5m2"]._replace(u=2.0**-4)}},
    # the descaled qk_scale counted as forward_error_bound's two roundings
    "scale roundings 2": {"scale_roundings": 2},
    # the bound without P's subnormal error
    "no subnormal term": {"bound": _bound_without_subnormals},
    # out_bound ignoring the absolute term
    "out_bound drops abs_num": {"out_bound": _out_bound_without_abs},
    # P scaled before l_i (the denominator would see p_scale)
    "P scaled before l_i": {"forward_tile": tuple(x for t in terms.FORWARD_TILE
                                                   for x in ((t, terms.FP8_P) if t.name == "p" else (t,)))},
}


@pytest.mark.parametrize("mutant", list(BOUND_MUTANTS))
def test_fp8_error_bound_mutant_is_refuted(mutant):
    assert_failed(P8.prove_fp8_error_bound(**BOUND_MUTANTS[mutant]))


def _bound_ignoring_fp8_mma(dtype, *args, fp8_mma=False, **kw):
    return EB.forward_bound(dtype, *args, **kw)


def _line_without_promotion(term):
    from spec.printer import FP8_IMPRECISE_ARG, print_term
    line = print_term(term, comment=False)
    assert f", {FP8_IMPRECISE_ARG}" in line  # the mutant removes what the printer prints
    return line.replace(f", {FP8_IMPRECISE_ARG}", "")


#: wrong versions of the sm_90 fp8 MMA bound's pieces: claim fp8_mma_bound must fail on each
MMA_MUTANTS = {
    # the printed dots left at Triton's default (the whole sum in the MMA's narrow accumulator)
    "dots not promoted": {"print_line": _line_without_promotion},
    "promotion after 2^30 products": {"imprecise": 2**30},
    # 0: Triton then compiles no wgmma at all (not the kernel the hypothesis is about)
    "promotion at 0": {"imprecise": 0},
    # a hypothesis below the modelled accumulator's error
    "epsilon below the model": {"mma_err": 2.0**-9},
    # the score's dot counted as an fp32 inner product
    "score dot gamma_D": {"dot_factor": lambda n, num=None: (num or EB.FLOATS).gamma(n)},
    # P V's tile counted with the dense kernel's two roundings
    "two roundings per tile": {"tile_roundings": lambda block_n, num=None: 2},
    # forward_bound without the sm_90 terms
    "bound ignores fp8_mma": {"bound": _bound_ignoring_fp8_mma},
}


@pytest.mark.parametrize("mutant", list(MMA_MUTANTS))
def test_fp8_mma_bound_mutant_is_refuted(mutant):
    assert_failed(P8.prove_fp8_mma_bound(**MMA_MUTANTS[mutant]))


# ---------------------------------------------------------------- issue 24: the last hand-written addresses
# The TMA boxes (claim tma_addresses), FP8's descale loads and the mask_mod row stride (forward_addresses), a user
# score_mod's gradient rows (backward_kernel_addresses): each edit a real bug would make, applied to the printed
# term or to the spec.launch function the runtime calls.
def _tma_failing(**kw):
    return _failing(PAD.prove_tma_addresses(**kw))


def test_tma_tail_box_at_column_zero_is_refuted():
    """The split head dim's tail read from column 0 (the main part's columns again) instead of HEAD_DIM."""
    box = swap(AD.TMA_BOXES["q_tail_box"], AD.q_tail_box,
               terms.box(terms.int32(AD.off_b), terms.int32(AD.off_h), terms.int32(AD.start_m_fwd), 0))
    failing = _tma_failing(boxes=dict(AD.TMA_BOXES, q_tail_box=box))
    assert failing == ["q_tail: box lane (r, c) moves q[off_b, off_h, lane_r + start_m, HEAD_DIM + lane_c] "
                       "(offset Σ idx·stride)"], failing


def test_tma_kv_box_of_the_query_head_is_refuted():
    """GQA dropped on the TMA path: K/V's box at the query head off_h (heads past Hkv clipped to zeros)."""
    box = swap(AD.TMA_BOXES["k_box"], AD.k_box,
               terms.box(terms.int32(AD.off_b), terms.int32(AD.off_h), terms.int32(AD.start_n), 0))
    failing = _tma_failing(boxes=dict(AD.TMA_BOXES, k_box=box))
    assert "k: box lane (r, c) moves k[off_b, off_kvh, lane_r + start_n, lane_c] (offset Σ idx·stride)" in failing
    assert "v: every coordinate of the box lies inside its dimension (int32 exact)" in failing, failing


@pytest.mark.parametrize("mutant", ["no key_len", "<= key_len"])
def test_tma_padding_select_mutants_are_refuted(mutant):
    """The TMA path's padding select (tl.where(key_ok[:, None], x, 0.0)) keeps the printed key_ok's lanes: without
    its key_len conjunct it keeps the padding keys (NaN, inf) TMA loads from inside k; j <= key_len keeps one."""
    (key_ok,) = AD.FWD_KEY_OK
    expr = {"no key_len": sp.StrictLessThan(AD.offs_n, AD.N_K_),
            "<= key_len": sp.And(sp.StrictLessThan(AD.offs_n, AD.N_K_), sp.LessThan(AD.offs_n, n.key_len))}[mutant]
    assert _tma_failing(key_ok=(replace(key_ok, expr=expr),)) == [
        f"{param}: in a masked tile a lane TMA loads and the padding select keeps (key_ok) is exactly one the pointer "
        "path's masked load admits, a key j < key_len the reference reads" for param in ("k", "v", "k_tail")]


def test_tma_descriptor_bugs_are_refuted():
    """spec.launch edited: a descriptor over (B·H, N, D) (a box past N would read the next head's rows instead of
    zeros), V's box BLOCK_D wide (MLA: D_v != D), the descriptor's strides of b and h swapped."""
    def flattened(t, rows, width):
        return ([t.shape[0] * t.shape[1], t.shape[2], t.shape[3]], [t.stride(1), t.stride(2), t.stride(3)],
                [1, rows, width], "zero")

    assert all(name.endswith("]") and "the box is the pointer path's tile" in name
               for name in _tma_failing(descriptor=flattened))

    def v_at_k_width(q, k, v, out, bm, bn, bd, bdv, bdt=0):
        return dict(LA.forward_tma_operands(q, k, v, out, bm, bn, bd, bdv, bdt), v=(v, bn, bd))

    assert _tma_failing(operands=v_at_k_width) == ["v: the box is the pointer path's tile [1, 1, BLOCK_N, BLOCK_DV]"]

    def swapped(t, rows, width):
        shape, strides, block, padding = LA.tma_descriptor(t, rows, width)
        return shape, [strides[1], strides[0], *strides[2:]], block, padding

    assert len(_tma_failing(descriptor=swapped)) == 6  # each operand's element

    def nan_fill(t, rows, width):  # Triton's padding="nan": the padding columns' NaN would reach the dot
        return (*LA.tma_descriptor(t, rows, width)[:3], "nan")

    assert _tma_failing(descriptor=nan_fill) == [
        f"{x}: the descriptor's out-of-bound fill is zero (padding 'zero')"
        for x in ("q", "out", "k", "v", "q_tail", "k_tail")]


def _narrow_block_d(D, Dv, fp8=False):
    w = LA.tile_widths(D, Dv, fp8)
    return w._replace(BLOCK_D=w.BLOCK_D // 2)


def _narrow_block_dt(D, Dv, fp8=False):
    w = LA.tile_widths(D, Dv, fp8)
    return w._replace(BLOCK_DT=LA.block_d(w.HEAD_DIM_TAIL // 2, fp8))


def _narrow_block_dv(D, Dv, fp8=False):
    w = LA.tile_widths(D, Dv, fp8)
    return w._replace(BLOCK_DV=LA.block_d(Dv - 1))


#: spec.launch.tile_widths edited, and the cases of it each address claim must fail: BLOCK_D one power of two
#: too small (D = 64 on arange(32): columns 32..63 never read; 8 wide below 16; a split's main part 32 on a
#: 16-wide tile), BLOCK_DT the block of half the tail (96 = 64 + 32 on a 16-wide tail), BLOCK_DV padding D_v - 1
#: (D_v = 17 on 16 lanes)
WIDTH_MUTANTS = {
    "BLOCK_D halved": (_narrow_block_d, ["BLOCK_D >= HEAD_DIM", "a tail only when HEAD_DIM = BLOCK_D",
                                         "BLOCK_D, BLOCK_DT, BLOCK_DV are powers of two >= 16"]),
    "BLOCK_DT of half the tail": (_narrow_block_dt, ["BLOCK_DT >= HEAD_DIM_TAIL"]),
    "BLOCK_DV of D_v - 1": (_narrow_block_dv, ["BLOCK_DV >= HEAD_DIM_V"]),
}


@pytest.mark.parametrize("mutant", list(WIDTH_MUTANTS))
def test_a_tile_narrower_than_its_head_dim_is_refuted(mutant):
    """The address claims read the tile widths the runtime launches with (spec.launch.tile_widths) and fail, on
    exactly the broken width's cases, when one is narrower than its head dim: all three on the first mutant,
    tma_addresses (the quickest) on the others (the cases are one helper's, _tile_width_cases)."""
    widths, want = WIDTH_MUTANTS[mutant]
    prefix = f"tile widths (spec.launch.tile_widths, every D, D_v in 1..{limit('head_dim_max')}): "
    claims = (PAD.prove_forward_addresses, PAD.prove_backward_kernel_addresses, PAD.prove_tma_addresses)
    for prove in claims if mutant == next(iter(WIDTH_MUTANTS)) else claims[2:]:
        assert _failing(prove(widths=widths)) == [prefix + name for name in want], (mutant, prove.__name__)


def test_a_decode_tile_narrower_than_its_head_dim_is_refuted():
    """decode_addresses reads the decode's tile widths (spec.launch.decode_tile_widths, which its launcher and AOT
    compile call) at decode_launch's head dims: v's tile padded from q/k's main part (narrower than D_v when
    D < D_v) and the tail left unpadded (no power of two) fail exactly their cases. The claim's width cases are
    _decode_width_cases' (prove_decode_addresses(tile_widths=...) passes the mutant there; run here alone: the
    whole claim takes seconds more)."""
    def mutant(head_dims, fp8=False):
        w = LA.decode_tile_widths(head_dims, fp8)
        return dict(w, BLOCK_DV=LA.block_d(head_dims["HEAD_DIM"]), BLOCK_DT=max(head_dims["HEAD_DIM_TAIL"], 1))
    top_d, top_dv = limit("decode_head_dim_max")
    prefix = f"tile widths (spec.launch.decode_tile_widths, every D in 1..{top_d}, D_v in 1..{top_dv}): "
    cases = PAD._decode_width_cases(LA.decode_launch, mutant)
    assert [name for name, residual in cases if residual != 0] == [
        prefix + "BLOCK_DV >= HEAD_DIM_V", prefix + "BLOCK_D, BLOCK_DT, BLOCK_DV are powers of two >= 16"]


def test_fp8_descale_offset_bugs_are_refuted():
    """The old kernel's one stride pair (q_descale's) for the three descales; a descale read at the query head."""
    def one_pair(*args, **kw):
        grid, ints = LA.forward_launch(*args, **kw)
        return grid, dict(ints, stride_kdesc_b=ints["stride_qdesc_b"], stride_kdesc_h=ints["stride_qdesc_h"],
                          stride_vdesc_b=ints["stride_qdesc_b"], stride_vdesc_h=ints["stride_qdesc_h"])

    assert _forward_failing(launch=one_pair) == ["kdesc_off is k_descale[b, off_kvh]", "vdesc_off is v_descale[b, off_kvh]"]
    desc = swap(FG["descale_offsets"], AD.vdesc_off, AD.off_b * AD.F_["stride_vdesc_b"] + AD.off_h * AD.F_["stride_vdesc_h"])
    assert _forward_failing(groups=dict(FG, descale_offsets=desc)) == ["vdesc_off is v_descale[b, off_kvh]"]


def test_decode_fp8_descale_offset_bugs_are_refuted():
    """An FP8 cache's descales on the decode (the shared _fp8_descales, claim decode_addresses): q_descale's
    stride pair for all three (the fp8kv branch's one pair), k_descale read at the cache row off_bc instead of
    q's batch b, v_descale at the query head of the program's first row."""
    def one_pair(*args, **kw):
        grid, ints, constexprs = LA.decode_launch(*args, **kw)
        return grid, dict(ints, stride_kdesc_b=ints["stride_qdesc_b"], stride_kdesc_h=ints["stride_qdesc_h"],
                          stride_vdesc_b=ints["stride_qdesc_b"], stride_vdesc_h=ints["stride_qdesc_h"]), constexprs

    assert _failing(PAD.prove_decode_addresses(launch=one_pair)) == [
        f"{tag}: {x}desc_off is {x}_descale[b, off_kvh]" for tag in ("paged", "contiguous") for x in "kv"]
    DG = AD.DECODE_GROUPS
    desc = swap(DG["descale_offsets"], AD.kdesc_off, AD.off_bc * AD.S_["stride_kdesc_b"]
                + AD.off_kvh * AD.S_["stride_kdesc_h"])
    assert _failing(PAD.prove_decode_addresses(groups=dict(DG, descale_offsets=desc))) == [
        "paged: kdesc_off is k_descale[b, off_kvh]", "contiguous: kdesc_off is k_descale[b, off_kvh]"]
    desc = swap(DG["descale_offsets"], AD.vdesc_off, AD.off_b * AD.S_["stride_vdesc_b"]
                + AD.off_kvh * AD.GROUP * AD.S_["stride_vdesc_h"])
    assert _failing(PAD.prove_decode_addresses(groups=dict(DG, descale_offsets=desc))) == [
        "paged: vdesc_off is v_descale[b, off_kvh]", "contiguous: vdesc_off is v_descale[b, off_kvh]"]


def test_decode_slope_strides_and_head_are_refuted():
    """Decode's ALiBi slope (issue 24: its strides passed by hand until then): decode_launch passing the strides of
    contiguous slopes whatever the tensor (a strided view or an expanded one read wrong), the offset with the batch
    stride dropped (a (B, Hq) tensor read as (Hq,)), and head_safe without its padding select (a padding row past
    the last head reads outside the slopes: the load has no mask)."""
    def contiguous_slopes(*args, alibi_slopes=None, **kw):
        grid, ints, constexprs = LA.decode_launch(*args, alibi_slopes=alibi_slopes, **kw)
        if alibi_slopes is None:
            return grid, ints, constexprs
        return grid, dict(ints, stride_sb=alibi_slopes.shape[-1] if alibi_slopes.dim() == 2 else 0,
                          stride_sh=1), constexprs

    tags = ("paged", "contiguous")
    assert _failing(PAD.prove_decode_addresses(launch=contiguous_slopes)) == [
        f"{tag}: slopes {stag}: slope offset at {lanes}" for tag in tags for stag, lanes in (
            ("(Hq,)", "row_ok lanes: alibi_slopes[head]"), ("(B, Hq)", "row_ok lanes: alibi_slopes[b, head]"),
            ("(B, Hq)", "padding lanes: alibi_slopes[b, 0]"))]
    DG = AD.DECODE_GROUPS
    no_batch = swap(DG["slope_offset"], AD.slope_off, AD.off_h * AD.S_["stride_sh"])
    assert _failing(PAD.prove_decode_addresses(groups=dict(DG, slope_offset=no_batch))) == [
        f"{tag}: slopes (B, Hq): slope offset at {lanes}" for tag in tags
        for lanes in ("row_ok lanes: alibi_slopes[b, head]", "padding lanes: alibi_slopes[b, 0]")]
    unsafe = swap(DG["slope_head"], AD.head_safe, sp.Piecewise((AD.head, AD.row_ok), (AD.head, True)))
    assert _failing(PAD.prove_decode_addresses(groups=dict(DG, slope_head=unsafe))) == [
        f"{tag}: {what}" for tag in tags for what in (
            "slopes (Hq,): slope offset at padding lanes: alibi_slopes[0]",
            "slopes (B, Hq): slope offset at padding lanes: alibi_slopes[b, 0]",
            "slopes (Hq,)[head_safe] inside (padding lanes; the load has no mask)",
            "slopes (B, Hq)[b, head_safe] inside (padding lanes; the load has no mask)")]


def test_mask_mod_row_stride_by_hand_is_refuted():
    """stride_mmb taken from the wrong dimension of mask_mod_args (the launcher used to pass it by hand; it is
    spec.launch.mask_mod_strides' now, in forward_launch and the backward launches)."""
    def column_stride(*args, **kw):
        grid, ints = LA.forward_launch(*args, **kw)
        return grid, dict(ints, stride_mmb=args[11].stride(1))

    assert _forward_failing(launch=column_stride) == ["MM_row is row b of mask_mod_args"]


def test_score_grad_row_bugs_are_refuted():
    """A user score_mod's gradient: the row of the query head only (pid_m dropped: the programs of a head race on
    one row), the buffer made with grid[0] rows only, the buffer made transposed (entries strided by the rows); the
    scatter's lane mask entry_ok one entry long (offs_e <= hi + 1) or short (offs_e < hi)."""
    row = swap(BKG["score_grad_row"], AD.sg_base, (AD.off_b * AD.H_ + AD.off_h) * AD.BK_["stride_sgp"])
    failing = _bwd_failing(groups=dict(BKG, score_grad_row=row))
    assert failing == ["dq: score_grad offset is score_grad[(b·grid[1] + h)·grid[0] + pid_m, e]",
                       "dq: two programs of the grid never share a score_grad row (no atomics needed)"], failing

    def short(score_f, grid):
        buf = score_f.new_zeros((grid[0], score_f.numel()))
        return buf, {"stride_sgp": buf.stride(0)}

    assert _bwd_failing(score_grad_launch=short) == [
        "dq: score_grad[row, e] inside (programs of the grid, chunk lanes e entry_ok admits)"]

    def transposed(score_f, grid):
        buf = score_f.new_zeros((score_f.numel(), grid[0] * grid[1] * grid[2])).transpose(0, 1)
        return buf, {"stride_sgp": buf.stride(0)}

    assert _bwd_failing(score_grad_launch=transposed) == [
        "dq: score_grad offset is score_grad[(b·grid[1] + h)·grid[0] + pid_m, e]"]
    # _score_param_scatter's printed lane mask (spec.addresses.BWD_SCORE_GRAD_OK): one entry past hi moves an entry
    # past the row (hi = len(SF) − 1); < for <= drops the tile's largest entry from its gradient
    (entry_ok,) = AD.BWD_SCORE_GRAD_OK
    for mutant, case in ((sp.LessThan(AD.offs_e, AD.sg_hi + 1), "score_grad[row, e] inside (programs of the grid, "
                                                                  "chunk lanes e entry_ok admits)"),
                         (sp.StrictLessThan(AD.offs_e, AD.sg_hi), "every entry lo <= e <= hi the tile read is a chunk "
                                                                  "lane entry_ok admits")):
        assert _bwd_failing(groups=dict(BKG, score_grad_ok=(replace(entry_ok, expr=mutant),))) == [f"dq: {case}"]


# ---------------------------------------------------------------- issue 24: the grid's ceiling (claim launch_grid)
def test_decode_grid_split_with_mod_and_div_swapped_is_refuted():
    """Decode's axis 0 split with % and // exchanged (row tile = pid // ROW_TILES, split = pid % ROW_TILES):
    the row tile leaves [0, ROW_TILES) and the old launch order is lost."""
    tile, split, *rest = AD.GRID_DECODE
    pid = tile.expr.args[0]
    swapped = (replace(tile, expr=sp.floor(pid / AD.ROW_TILES)), replace(split, expr=sp.Mod(pid, AD.ROW_TILES)), *rest)
    failing = _failing(PAD.prove_launch_grid(groups=dict(AD.GRID_GROUPS, decode=swapped)))
    assert "decode: every program's (row tile, split, kv head, batch) is in range" in failing, failing


def test_grid_head_and_batch_axes_swapped_are_refuted():
    """The per-head kernels reading the head off axis 2 and the batch off axis 1."""
    head, batch = AD.GRID_HEAD
    swapped = (replace(head, expr=batch.expr), replace(batch, expr=head.expr))
    failing = _failing(PAD.prove_launch_grid(groups=dict(AD.GRID_GROUPS, head=swapped)))
    assert "forward: every program's (tile, head, batch) is in range" in failing, failing


def test_grid_limit_one_past_cuda_is_refuted():
    """The contract accepting B or Hq = 65536 (the grid_axes limit off by one): axis 1 or 2 passes CUDA's 65535."""
    failing = _failing(PAD.prove_launch_grid(accepted=LA.GRID_AXIS_MAX + 1))
    assert "forward: axis 0 <= 2^31 - 1, axes 1, 2 <= 65535 (CUDA's limits)" in failing, failing
    assert "decode: axis 0 <= 2^31 - 1, axes 1, 2 <= 65535 (CUDA's limits)" in failing, failing


def test_batch_times_heads_on_one_axis_is_refuted():
    """The old grid, (tiles, B·Hq) with the product on axis 1: more than 65535 programs there for accepted
    shapes (B = Hq = 65535), and the head split no longer the printed one."""
    def launch(q, *args, **kw):
        grid, ints = LA.forward_launch(q, *args, **kw)
        return (grid[0], grid[1] * grid[2], 1), ints

    launches = PAD._grid_launches()
    grid, ints, kind, sizes, hyp = launches["forward"]
    t = PAD._forward_tensors()
    old, _ = launch(t["q"], t["k"], t["v"], t["out"], t["lse"], t["key_lengths"], t["mask"], t["block_map"],
                    t["slopes"]["(Hq,)"], t["sinks"], n.B_r, t["mask_mod_args"], descales=t["descales"])
    failing = _failing(PAD.prove_launch_grid(launches={"forward": (old, ints, kind, sizes, hyp)}))
    assert "forward: axis 0 <= 2^31 - 1, axes 1, 2 <= 65535 (CUDA's limits)" in failing, failing


# ---------------------------------------------------------------- paged varlen's slots (docs/verification.md's audit)
def _paged_lse_untransposed(lse, rows, slots):
    """The audit's edit: the decode's (B, Hq, max_q) lse read as if it were (B·max_q, Hq) rows (lse error 0.54)."""
    B, Hq, max_q = lse.shape
    return lse.reshape(B * max_q, Hq)[rows * max_q + slots].t()


def test_paged_varlen_left_aligned_queries_are_refuted():
    """The audit's edit: each segment's queries left-aligned in their max_seqlen_q slots (causal, unequal lengths:
    error 0.81): padding slots are read back and a token's decode position is no longer k_len − n_q + t."""
    failing = _failing(PV.prove_paged_varlen_slots(slot=lambda b, t, n_q, max_q: (b, t)))
    assert "no padding slot: slot >= max_seqlen_q − n_q[b]" in failing, failing
    assert "the decode's position of the slot is the reference's k_len − n_q + t" in failing, failing


def test_paged_varlen_lse_without_its_transpose_is_refuted():
    """The audit's edit (the decode lse gathered without its transpose), and the varlen layout dropped (the
    gathered (total_q, Hq) returned, not FlashAttention's (Hq, total_q))."""
    failing = _failing(PV.prove_paged_varlen_slots(lse_rows=_paged_lse_untransposed))
    assert failing == ["paged_lse's [h, r] is the decode lse[row, h, slot] the kernel wrote"], failing
    failing = _failing(PV.prove_paged_varlen_slots(lse_rows=lambda lse, rows, slots: lse[rows, :, slots]))
    assert "paged_lse is FlashAttention's varlen (Hq, total_q)" in failing, failing


def _packed_tokens_mutant(start=0, end=1, right=True, token_from=0):
    """spec.varlen.packed_tokens with the segment searched among cu[start:] (the ends: 1) and the token counted
    from cu[s + token_from] (0: the segment's start)."""
    def tokens(cu, total_q, ops):
        rows = ops.arange(total_q)
        seg = ops.searchsorted(cu[end:] if start == 0 else cu[:-1], rows, right=right)
        return seg, rows - cu[seg + token_from], cu[seg + 1] - cu[seg]
    return tokens


def test_paged_varlen_row_to_token_map_is_proved():
    """Packed row r -> (segment, token) (spec.varlen.packed_tokens, the runtime's map) is in claim
    paged_varlen_slots: the token counted from the next segment's start, the search's side flipped (a row at a
    segment's start put in the one before) and the search among the starts (s one too many) each fail it."""
    row_in_segment = "row r lies in its segment s: 0 <= s < B, cu[s] <= r < cu[s+1]"
    token = "row r is token t = r − cu[s] of segment s, 0 <= t < n_q[s] = cu[s+1] − cu[s]"
    onto = "onto: token t of segment s (0 <= t < cu[s+1] − cu[s]) is packed row cu[s] + t < total_q, read as (s, t)"
    assert PV.prove_paged_varlen_slots(tokens=_packed_tokens_mutant()).proved  # the mutant factory's identity
    failing = _failing(PV.prove_paged_varlen_slots(tokens=_packed_tokens_mutant(token_from=1)))
    assert failing == [token, onto], failing
    for mutant in (_packed_tokens_mutant(right=False), _packed_tokens_mutant(start=-1)):
        failing = _failing(PV.prove_paged_varlen_slots(tokens=mutant))
        assert failing == [row_in_segment, token, onto], failing


def test_paged_varlen_key_lengths_as_the_offsets_are_refuted():
    """The decode launch's cache_seqlens (spec.varlen.paged_key_lengths) read as the offsets' ends cu_seqlens_k[1:]
    (segment b would attend the keys of every segment before it) fails paged_varlen_slots; and on numbers the
    function is torch's per-segment count."""
    failing = _failing(PV.prove_paged_varlen_slots(key_lengths=lambda cu: cu[1:]))
    assert failing == ["segment b's key lengths entry (the decode's key_len) is cu_seqlens_k[b+1] − cu_seqlens_k[b], "
                       "SEGMENT's N_K"], failing
    assert V.paged_key_lengths(torch.tensor([0, 3, 3, 7])).tolist() == [3, 0, 4]


def test_paged_varlen_claims_model_of_searchsorted_is_torchs():
    """The claim's torch.searchsorted (spec.proofs.varlen._SearchOps.contract) holds of torch's answers, and
    spec.varlen.packed_tokens on torch gives each row's segment and token (empty segments included)."""
    for cu in ([0, 2, 2, 5], [0, 0, 3], [0, 1, 2, 3, 3], [0, 4]):
        cu = torch.tensor(cu, dtype=torch.int32)
        seg, tok, length = V.packed_tokens(cu.long(), int(cu[-1]), torch)
        want = [(b, t) for b in range(len(cu) - 1) for t in range(int(cu[b + 1] - cu[b]))]
        assert list(zip(seg.tolist(), tok.tolist())) == want
        assert length.tolist() == [int(cu[b + 1] - cu[b]) for b, _ in want]
        for right in (True, False):
            ops = PV._SearchOps()
            ops.searchsorted(PV._Offsets(sp.Function("cu"), len(cu))[1:], ops.arange(int(cu[-1])), right=right)
            got = torch.searchsorted(cu[1:], torch.arange(int(cu[-1])), right=right)
            for p, i in enumerate(got.tolist()):
                z = PV._Z3Functions()
                facts = ops.contract(z, p) + [z.functions["cu"](k) == int(c) for k, c in enumerate(cu)]
                answer = z.functions["searchsorted_0"](p)
                # torch's answer is the only one the contract allows
                for statement, verdict in ((answer == i, PV.z3.sat), (answer != i, PV.z3.unsat)):
                    solver = PV.z3.Solver()
                    solver.add(*facts, statement)
                    assert solver.check() == verdict, (cu, right, p, i)


def test_paged_varlen_claims_model_of_indexing_is_torchs():
    """prove_paged_varlen_slots reads spec.varlen's functions on symbolic tensors (torch's indexing semantics,
    spec.proofs.varlen._Elements): on numbers they give what torch gives, for the functions and the lse mutant."""
    B, max_q, Hq, D = 3, 4, 2, 3
    n_q = torch.tensor([2, 0, 4])
    seg = torch.repeat_interleave(torch.arange(B), n_q)
    local = torch.arange(len(seg)) - (torch.cumsum(n_q, 0) - n_q)[seg]
    rows, slots = V.paged_slot(seg, local, n_q[seg], max_q)
    index = [PV._Index(len(seg), lambda p, x=x: int(x[int(p)])) for x in (rows, slots)]

    def same(fn, shape, *extra):
        x = torch.arange(torch.Size(shape).numel()).view(shape)
        got = fn(x, rows, slots, *extra)
        model = fn(PV._Elements("x", shape), *index, *extra)
        assert tuple(model.shape) == tuple(got.shape)
        for idx in itertools.product(*map(range, got.shape)):
            name, src = model.at(idx)
            assert x[tuple(int(i) for i in src)] == got[idx], (fn, idx)
    same(V.paged_lse, (B, Hq, max_q))
    same(_paged_lse_untransposed, (B, Hq, max_q))
    same(V.paged_out, (B, max_q, Hq, D))
    q = torch.arange(len(seg) * Hq * D).view(len(seg), Hq, D) + 1
    q_pad = V.paged_queries(q, rows, slots, B, max_q)
    model = V.paged_queries(PV._Elements("q", q.shape), *index, B, max_q)
    ((shape, src), value), = model.writes
    assert tuple(model.shape) == tuple(q_pad.shape) and tuple(shape) == tuple(q.shape)
    for idx in itertools.product(*map(range, shape)):
        assert q_pad[tuple(int(i) for i in src(idx))] == q[tuple(int(i) for i in value.at(idx)[1])]
    assert int((q_pad != 0).sum()) == q.numel()  # every other element of q_pad: a padding zero
