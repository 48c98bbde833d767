"""The kernel <-> claim map is checked, not declared: mutate each printed term in turn and the claim
its kernel line cites (``(claim: id)``) must report FAILED.

Every term the generator prints (the catalogue ``spec.printed``: the kernel terms, masks, structure,
segments, pages, rotary and the printed addresses) is replaced by a wrong version (``mutant``), handed
to the cited claim's proof through the parameter whose default *is* that term or its group (or a dict
of groups holding it), and the proof must fail. A cited claim with no such parameter cannot be checking the line: that fails too.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
import sympy as sp

from spec import masks, printed, terms
from spec import notation as n
from spec.claims import REGISTRY

#: the unsound direction of each integer range / loop bound: a range that misses attended keys
#: (kv_*, q_start/q_end, *_lo/*_hi) or that runs masked keys without the predicate (full_*)
B_c, B_r = n.B_c, n.B_r
UNSOUND = {
    masks.kv_start: 1, masks.kv_end: -1, masks.full_start: -1, masks.full_end: 1,
    masks.q_start: 1, masks.q_end: -1, masks.q_full_start: -1, masks.q_full_end: 1,
    masks.kv_lo: B_c, masks.kv_hi: -B_c, masks.full_lo: -B_c, masks.full_hi: B_c,
    masks.q_lo: B_r, masks.q_hi: -B_r, masks.q_full_lo: -B_r, masks.q_full_hi: B_r,
}


def mutant(term: terms.Term) -> terms.Term:
    """A wrong version of ``term``: a range moved the unsound way, a constant changed, a predicate
    with its last conjunct dropped, a tile loop's step doubled, any other value doubled."""
    e = term.expr
    if isinstance(e, terms.tile_range):  # a tile loop (spec.addresses.*_LOOPS): its step doubled
        start, stop, step = e.bounds
        return replace(term, expr=terms.tile_range(start, stop, 2 * step))
    if term.symbol in UNSOUND:
        return replace(term, expr=e + UNSOUND[term.symbol])
    if isinstance(e, (sp.And, sp.Or, sp.core.relational.Relational)):  # a predicate (Symbol is a Boolean too)
        return replace(term, expr=sp.And(*e.args[:-1]) if isinstance(e, sp.And) else sp.true)
    if e.is_number:
        return replace(term, expr=sp.Integer(0) if e.is_infinite else e + 1)
    return replace(term, expr=2 * e)


def printed_groups():
    """``(label, group, index)`` for every printed term (``spec.printed``): its group object and
    its place in it (``index`` None: a term standing alone)."""
    out = [(f"{name}[{k}] {t.name}", group, k) for name, group in printed.term_groups().items()
           for k, t in enumerate(group)]
    out += [(f"{name} {t.name}", t, None) for name, t in printed.single_terms().items()]
    return out


#: printed terms whose mutation no claim can catch, and why (out of this test's scope). The ring
#: claims (spec.ring) cite no printed term: ring attention runs the forward kernel per step, its
#: layout and merge order are host-side (claims ring_* are checked by tests/test_mutants.py).
OUT_OF_SCOPE = {
    # the merge's shift by the larger lse is a numerical stabiliser: in exact arithmetic any finite
    # shift gives the same (o, lse), so lse_merge (exact) cannot see it; only fp32 range needs it,
    # and no claim models the merge in fp32 (a gap, reported)
    "merge_state[0] lse_max": "exact arithmetic cancels the shift",
    "merge_state[1] lse_max_safe": "exact arithmetic cancels the shift",
    # a split twice as long still reads every key exactly once (fewer splits do the work): the
    # claim is about which keys are read, not about the load balance
    "paged.split_range[0] chunk": "a coarser split is still correct",
}


def prove_with(claim_id: str, group, index, bad):
    """Run ``claim_id``'s proof with the term (``group[index]``, or ``group`` itself when ``index``
    is None) replaced by ``bad``: through every parameter whose default is the group or the term."""
    term = group if index is None else group[index]
    mutated_group = bad if index is None else tuple(bad if k == index else t for k, t in enumerate(group))
    kwargs = {}
    for name, p in inspect.signature(REGISTRY[claim_id].prove).parameters.items():
        if p.default is group:
            kwargs[name] = mutated_group
        elif p.default is term:
            kwargs[name] = bad
        elif isinstance(p.default, dict) and any(g is group for g in p.default.values()):  # groups by name
            kwargs[name] = {k: mutated_group if g is group else g for k, g in p.default.items()}
    assert kwargs, f"claim {claim_id} takes no parameter holding this term: it cannot be checking it"
    return REGISTRY[claim_id].prove(**kwargs)


@pytest.mark.parametrize("label, group, index", printed_groups(), ids=lambda x: x if isinstance(x, str) else "")
def test_mutating_a_printed_term_fails_its_cited_claim(label, group, index):
    if label in OUT_OF_SCOPE:
        pytest.skip(OUT_OF_SCOPE[label])
    term = group if index is None else group[index]
    bad = mutant(term)
    assert bad.expr != term.expr
    result = prove_with(term.claim, group, index, bad)
    assert not result.proved, f"{label}: mutated to {bad.expr}, claim {term.claim} still PROVED"


# The per-kind narrowing and predicate terms are built by functions of the kind (masks.bounds_terms,
# row_bounds_terms, keep_term): mutate what they print through the function the claim takes.
NARROWINGS = {  # the claim's parameter: (the bounds of a kind, its fields, the range symbol of each field)
    "tile_bounds": (masks.tile_bounds, ("kv_start", "kv_end", "full_start", "full_end"), masks.KEY_RANGES),
    "row_bounds": (masks.row_bounds, ("q_start", "q_end", "full_start", "full_end"), masks.ROW_RANGES),
}


@pytest.mark.parametrize("kind", list(masks.MASK_KINDS))
@pytest.mark.parametrize("param, index", [(p, i) for p in NARROWINGS for i in range(4)])
def test_mutating_a_kind_narrowing_fails_mask_tiles_sound(kind, param, index):
    bounds_of, fields, ranges = NARROWINGS[param]
    field, original = fields[index], bounds_of(kind)
    if getattr(original, field) is None:
        pytest.skip(f"{kind} does not narrow {field}")
    moved = replace(original, **{field: getattr(original, field) + UNSOUND[ranges[index]]})
    bounds = lambda k: moved if k == kind else bounds_of(k)  # noqa: E731
    assert not REGISTRY["mask_tiles_sound"].prove(**{param: bounds}).proved


@pytest.mark.parametrize("kind", list(masks.MASK_KINDS))
def test_mutating_a_kind_predicate_fails_mask_tiles_sound(kind):
    def keep(k):
        t = masks.keep_term(k)
        return mutant(t) if k == kind else t
    assert not REGISTRY["mask_tiles_sound"].prove(keep_term=keep).proved


def test_a_mutant_fails_the_same_cases_before_and_after_its_claim_proved(monkeypatch):
    """The proofs keep what they proved per process (spec.proofs.tools: z3 queries by their text): a mutated
    printed term fails the same cases of its cited claim whether the unmutated claim ran before it in the same
    process or not, and the unmutated claim proves again after the mutant."""
    from spec.proofs import tools

    monkeypatch.setattr(tools, "_PROVED_QUERIES", set())  # nothing proved yet in this process
    label, group, index = next(g for g in printed_groups() if g[0] == "addresses.FORWARD.columns_ok[0] d_ok")
    claim_id = group[index].claim

    def failed_cases():
        result = prove_with(claim_id, group, index, mutant(group[index]))
        assert not result.proved, f"{label}: claim {claim_id} still PROVED"
        return [name for name, residual in result.cases if residual != 0]

    before = failed_cases()
    assert REGISTRY[claim_id].prove().proved and tools._PROVED_QUERIES
    assert failed_cases() == before
    assert REGISTRY[claim_id].prove().proved
