"""The sink in split-KV decoding: merged exactly once per row, whatever the number of splits.

``flash_attention_with_kvcache`` with ``num_splits > 1`` runs the decode kernel without the
sink (each split writes the normalised partial ``(o_k, lse_k)`` of its keys) and folds the sink
in the combine: ``_merge_states`` (``generated/merge_state_br*.py``) runs the printed
``terms.MERGE_STATE`` over the splits from the identity ``(0, -inf)`` (``combine_step``), then
once more, after its loop, with side b the sink's partial ``terms.SINK_PARTIAL`` = ``(0, sink)``
(``combine_finish``). With ``num_splits == 1`` the decode kernel folds ``terms.SINK_FOLD`` in its
epilogue, as the dense forward does (claim ``sink_once``).

The claim is proved by induction on the number of splits S, on symbolic partials:

* invariant after k steps: ``acc = (N_k / D_k, log D_k)`` with ``D_k = Σ_{κ≤k} e^{lse_κ}``,
  ``N_k = Σ_{κ≤k} e^{lse_κ} o_κ`` (``acc = (0, -inf)`` while ``D_k = 0``: no split had a key);
* base: the fold starts from ``terms.MERGE_IDENTITY`` = (0, -inf), the invariant at k = 0;
* step: ``combine_step`` takes any acc satisfying it (a symbolic partial ``(O, L)`` is
  ``(N/D, log D)`` with ``D = e^L``) and any split's partial (or an empty one) to the invariant
  at k + 1, ``D`` grown by ``e^{lse_b}`` only, in both orders of ``L`` and ``lse_b``;
* finish: ``combine_finish`` takes the invariant's ``(N/D, log D)`` to
  ``(N / (e^{sink} + D), log(e^{sink} + D))``, and ``(0, -inf)`` to ``(0, sink)``.

Hence for every S ≥ 0 the combine returns ``Σ_k e^{lse_k} o_k / (e^{sink} + Σ_k e^{lse_k})``
and ``log(e^{sink} + Σ_k e^{lse_k})``: ``e^{sink}`` counted once. A cross-check ties this to
the definition and to the unsplit kernel on 2 splits of one key each. ``prove_sink_once_combine``
takes the schedule and the terms as arguments: ``tests/test_mutants.py`` feeds it a combine that
merges the sink after every split, one that never merges it, and a wrong sink partial, and
watches each FAIL.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import terms
from spec.proofs.tools import difference, equal_cases, natural_exp, result, run_terms
from spec.proofs.score_mods import _definition_with_sink, unsplit_kernel
from spec.proofs.softmax import run_merge
from spec.registry import claim


def sink_partial(sink, sink_terms=terms.SINK_PARTIAL):
    """The sink's normalised partial result ``(o, lse)`` as the printed SINK_PARTIAL assigns it."""
    got = run_terms(sink_terms, {n.sink: sink})
    return got[n.o_b], got[n.lse_b]


def combine_step(acc, partial, sink, merge_terms=terms.MERGE_STATE, sink_terms=terms.SINK_PARTIAL):
    """One iteration of ``_merge_states``' loop: MERGE_STATE with side a the running result and
    side b split s's partial (the sink takes no part)."""
    return run_merge(acc, partial, merge_terms)


def combine_finish(acc, sink, merge_terms=terms.MERGE_STATE, sink_terms=terms.SINK_PARTIAL):
    """After the loop, ``HAS_SINKS``: MERGE_STATE once more, side b the sink's partial."""
    return run_merge(acc, sink_partial(sink, sink_terms), merge_terms)


def combine(partials, sink, step=combine_step, finish=combine_finish, merge_terms=terms.MERGE_STATE,
            sink_terms=terms.SINK_PARTIAL, identity=terms.MERGE_IDENTITY):
    """The whole combine on a list of split partials: the fold from the identity, then finish."""
    acc = identity
    for x in partials:
        acc = step(acc, x, sink, merge_terms, sink_terms)
    return finish(acc, sink, merge_terms, sink_terms)


def _counterexample(lhs, rhs):
    """A point where ``lhs − rhs`` is numerically non-zero (30 digits; every symbol a distinct
    positive rational, which every symbol's assumptions admit), or None. A failed identity is
    then reported by its counterexample at once, instead of SymPy grinding to simplify a
    non-zero residual; a zero at the point proves nothing and falls through to ``difference``."""
    diff = natural_exp(sp.sympify(lhs) - sp.sympify(rhs))
    if diff.has(sp.oo, -sp.oo, sp.zoo, sp.nan):
        return None
    point = {x: sp.Rational(3 + 2 * k, 5 + 3 * k) for k, x in enumerate(sorted(diff.free_symbols, key=str))}
    value = diff.subs(point).evalf(30)
    if value.is_number and value.is_comparable and abs(value) > sp.Float("1e-20"):
        return sp.Tuple(value, sp.Dict(point))
    return None


def _residual(lhs, rhs):
    """The counterexample at the point if there is one, else ``difference``'s exact residual."""
    witness = _counterexample(lhs, rhs)
    return witness if witness is not None else difference(lhs, rhs)


def _induction_pairs(step, finish, merge_terms, sink_terms, identity, t):
    """``prove_sink_once_combine``'s induction cases ``(name, got, want)``, built one at a time."""
    sink = n.sink
    O, L, o_b, lse_b = sp.symbols("O L o_b lse_b", real=True)
    empty = terms.MERGE_IDENTITY
    yield ("base: the fold starts from the identity (0, -inf), the invariant with D = 0", identity, empty)
    # step: the running result (N/D, log D) is any finite partial (O, L) with D = e^L, N = O e^L;
    # side b a split's partial (o_b, lse_b) with lse_b = L ± t (both orders), or empty
    # (the larger lse written as the smaller + t, t >= 0)
    for label, (lse_run, lse_split) in (("the split's lse larger", (L, L + t)),
                                        ("the running lse larger", (L + t, L))):
        D, N = sp.exp(lse_run) + sp.exp(lse_split), O * sp.exp(lse_run) + o_b * sp.exp(lse_split)
        yield (f"step: (N/D, log D) and a split, {label}: D grows by e^(lse_b) only",
               step((O, lse_run), (o_b, lse_split), sink, merge_terms, sink_terms), (N / D, sp.log(D)))
    yield ("step: the identity (no key yet) and a split: (o_b, lse_b)",
           step(empty, (o_b, lse_b), sink, merge_terms, sink_terms), (o_b, lse_b))
    yield ("step: (O, L) and an empty split: unchanged", step((O, L), empty, sink, merge_terms, sink_terms), (O, L))
    yield ("step: the identity and an empty split: the identity",
           step(empty, empty, sink, merge_terms, sink_terms), empty)
    # finish: the sink's e^{sink} joins the sum exactly once
    for label, (lse_acc, sink_k) in (("sink larger", (L, L + t)), ("running lse larger", (sink + t, sink))):
        D = sp.exp(lse_acc) + sp.exp(sink_k)
        yield (f"finish: (N/D, log D) ⊕ (sink, 1, 0), {label}",
               finish((O, lse_acc), sink_k, merge_terms, sink_terms), (O * sp.exp(lse_acc) / D, sp.log(D)))
    yield ("finish: no split saw a key: out 0, lse = sink", finish(empty, sink, merge_terms, sink_terms), (0, sink))


@claim("sink_once_combine",
       "split-KV decoding counts the sink exactly once per row for every number of splits S ≥ 0: the "
       "combine (the printed MERGE_STATE folded over the splits' normalised partials (o_k, lse_k) from "
       "(0, -inf), then MERGE_STATE once with side b = SINK_PARTIAL = (0, sink)) returns "
       "(Σ_k e^{lse_k} o_k / (e^{sink} + Σ_k e^{lse_k}), log(e^{sink} + Σ_k e^{lse_k})), and (0, sink) "
       "when no split saw a key; i.e. the splits' states folded by ⊕, then ⊕ the state (sink, 1, 0) "
       "once, equals the unsplit state with the sink. By induction on S: base (the identity), step "
       "(any running partial (O, L) or the identity, with any split's partial or an empty one, both "
       "orders of L and lse_b: the running sum grows by e^{lse_b} only, no e^{sink}), finish (adds "
       "e^{sink} once); cross-checked against the definition and the unsplit kernel (SINK_FOLD in the "
       "epilogue) on 2 splits of 1 key; exact arithmetic",
       r"\Big(\bigoplus_{k=1}^{S} \sigma_k\Big)\oplus(\mathrm{sink},1,0):\ "
       r"\mathrm{lse}=\log\Big(e^{\mathrm{sink}}+\sum_{k=1}^{S} e^{\mathrm{lse}_k}\Big)\ \forall S\ge 0",
       scope="any number of splits S ≥ 0 by induction (base, step and finish checked on symbolic partials); "
             "the 2-split cross-check at fixed size; reals, exact (not rounded)")
def prove_sink_once_combine(step=combine_step, finish=combine_finish, merge_terms=terms.MERGE_STATE,
                            sink_terms=terms.SINK_PARTIAL, identity=terms.MERGE_IDENTITY):
    sink = n.sink
    t = sp.Symbol("t", nonnegative=True)
    # the induction's cases as a generator (as merge_commutative's): each case's sides are built only
    # when equal_cases reaches it, so within first_failure() a mutant stops at its first failing case
    # without building the rest (a mutated step's Piecewise takes seconds each); ``python -m spec``
    # builds and decides every case, in this order
    cases = equal_cases(_induction_pairs(step, finish, merge_terms, sink_terms, identity, t), _residual)
    if any(residual != 0 for _, residual in cases):  # the induction fails: FAILED, without the cross-check
        return result("sink_once_combine", cases, "induction on S: base, 5 step cases, 3 finish cases")
    # cross-check: 2 splits of one key each (partial (v_k, s·x_k)) = the definition with the sink
    # = the unsplit kernel (tile updates, SINK_FOLD once, epilogue) on the same keys
    x2, v1, v2 = sp.symbols("x_2 v_1 v_2", real=True)
    s = n.sm_scale
    x1 = x2 + t / s  # the first key's score is the larger (the other order is the step's)
    got = combine([(v1, s * x1), (v2, s * x2)], sink, step, finish, merge_terms, sink_terms, identity)
    cases += equal_cases([("2 splits of 1 key = the definition with the sink", got,
                           _definition_with_sink([(s * x1, v1), (s * x2, v2)], sink)),
                          ("2 splits of 1 key = the unsplit kernel with SINK_FOLD", got,
                           unsplit_kernel([[(x1, v1), (x2, v2)]]))], _residual)
    return result("sink_once_combine", cases,
                  "induction on S: base, 5 step cases, 3 finish cases; 2-split cross-check")
