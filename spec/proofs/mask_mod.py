"""Proof that the mask_mod tile classifier (``spec.mask_mod``) is sound for the whole class.

Made once, for every predicate the decorator admits, not per mask: the classifier of a
predicate is built only from the pieces proved here, so a new mask_mod needs no new proof.

1. **Direction rules** (``mask_mod.DIRECTION_RULES``): each rule the analysis applies to a
   node gives a direction the node really has. A child of direction ``d`` moves by an
   increment ``d·s`` (``s >= 0``); the node's increment must then have the sign the rule
   claims (``0``: no change). Sums and constant multiples by algebra; ``floor(x / c)``
   (``c >= 1``) by its definition ``floor(y) = y - r``, ``0 <= r < 1``: the increment is an
   integer ``> -1`` (or ``< 1``); ``max``/``min`` by their lattice rules (``implies``); a
   read ``t[x]`` of a non-decreasing tensor moves with ``x`` (the run time checks the ids
   are sorted); the kernels' clamp of a tensor index is non-decreasing.
2. **Corner lemma**: for an atom ``e`` monotone in ``i`` (direction ``di``) and in ``j``
   (``dj``), the corners ``mask_mod.corner`` picks satisfy ``e(min corner) <= e(i, j) <=
   e(max corner)`` for every ``(i, j)`` of the tile: by monotonicity in ``i`` then in ``j``,
   each step licensed by the corner lying on the right side of every row ``start_m + a``
   (``0 <= a < B_r``) and key ``start_n + b`` — decided by SymPy with slack variables, for
   every tile position and size and every direction pair. Reading the corners of a sorted
   per-position tensor is reading its per-tile min and max (the document-id atom).
3. **Atom rule** (``mask_mod.atom_rule``): ``all = e_min >= 0`` implies ``e >= 0`` on the tile,
   ``none = e_max < 0`` implies ``e < 0`` (integers), from the corner lemma's bounds.
4. **Kleene's rules** (``mask_mod.KLEENE``): if the children's pairs ``(all, none)`` are sound
   (``all`` => the child holds at the point, ``none`` => it fails), the combined pair is sound
   for ``&``, ``|`` (two and three operands) and ``~``: a propositional validity, decided by
   SymPy's SAT solver over every assignment. By induction on the tree, every Boolean
   combination of sound atoms is sound.

Hence: ``none`` on a tile => no entry of it is attended (skip is safe); ``all`` => every
entry is attended (running it without the predicate is exact).
"""

from __future__ import annotations

from itertools import product

import sympy as sp

from spec import mask_mod as MM
from spec import notation as n
from spec.proofs.tools import ZERO, nonnegative, result
from spec.proofs.masks import implies
from spec.registry import claim

DIRS = (-1, 0, 1)


def _sign_case(name, delta, d):
    """``delta`` has the sign of direction ``d`` (0: is zero)."""
    if d == 0:
        return name, ZERO if sp.expand(delta) == 0 else delta
    return name, nonnegative(sp.expand(d * delta))


def _direction_rule_cases(rules):
    s1, s2 = sp.symbols("s_1 s_2", integer=True, nonnegative=True)
    x1, x2 = sp.symbols("x_1 x_2", integer=True)
    c = sp.Symbol("c", positive=True)
    cases = []
    for d1, d2 in product(DIRS, DIRS):
        got = rules["add"]([d1, d2])
        if got is not None:
            cases.append(_sign_case(f"add({d1}, {d2}) -> {got}", d1 * s1 + d2 * s2, got))
        for sign in (1, -1):
            if d2 == 0:
                got = rules["scale"](sign, d1)
                cases.append(_sign_case(f"scale({sign}, {d1}) -> {got}", sign * c * d1 * s1, got))
        got = rules["extremum"]([d1, d2])
        if got is not None:
            for f in (sp.Max, sp.Min):
                delta = f(x1 + d1 * s1, x2 + d2 * s2) - f(x1, x2)
                name = f"{f.__name__.lower()}({d1}, {d2}) -> {got}"
                cases.append((name, implies([], got * delta) if got != 0 else
                              (ZERO if sp.expand(delta) == 0 else delta)))
    for d in DIRS:
        got = rules["floor"](d)
        # floor(y) = y - r, 0 <= r < 1: floor((x + d s)/c) - floor(x/c) = d s/c + r0 - r1, an integer;
        # an integer D with got·D > -1 has got·D >= 0
        if got == 0:
            cases.append((f"floor({d}) -> 0", ZERO if d == 0 else sp.Tuple(d, got)))
        else:
            r, u = sp.Symbol("r", nonnegative=True), sp.Symbol("u", positive=True)
            r0, r1 = (r, 1 - u) if got == 1 else (1 - u, r)
            strict = sp.expand(got * (d * s1 / c + r0 - r1) + 1)
            cases.append((f"floor({d}) -> {got}: integer increment times {got} > -1",
                          ZERO if strict.is_positive is True else strict))
        got = rules["read"](d)
        cases.append((f"read(t non-decreasing, index {d}) -> {got}", ZERO if got == d else sp.Tuple(d, got)))
    length = sp.Symbol("L", integer=True, positive=True)
    clamp = lambda x: sp.Min(sp.Max(x, 0), length - 1)  # noqa: E731  (the kernels' tensor read)
    cases.append(("clamp(x) = min(max(x, 0), L - 1) is non-decreasing", implies([], clamp(x1 + s1) - clamp(x1))))
    return cases


def _corner_cases(corner):
    """Every (di, dj) and min / max: the chosen corner is on the right side of every row and key."""
    a, c_, b, e = sp.symbols("a c b e", integer=True, nonnegative=True)
    tile = {n.B_r: a + 1 + c_, n.B_c: b + 1 + e}  # row start_m + a, key start_n + b inside the tile
    row, key = n.start_m + a, n.start_n + b
    cases = []
    for d, want, ends, point, axis in [(d, w, MM.ROWS, row, "i") for d in DIRS for w in ("min", "max")] + \
                                      [(d, w, MM.KEYS, key, "j") for d in DIRS for w in ("min", "max")]:
        if d == 0:
            continue  # e does not move along this axis: any corner gives its value
        at = MM.corner(d, want, ends) if corner is None else corner(d, want, ends)
        # min corner of a non-decreasing e: at <= point; of a non-increasing one: at >= point
        gap = (point - at) if (d > 0) == (want == "min") else (at - point)
        cases.append((f"corner {want} of an e with direction {d:+d} in {axis}: {at} bounds every {axis} of the tile",
                      nonnegative(sp.expand(gap.xreplace(tile)))))
    return cases


def _linear(rel):
    """``h`` with ``rel <=> h >= 0`` (integers)."""
    a, b = rel.lhs, rel.rhs
    return {sp.GreaterThan: a - b, sp.StrictGreaterThan: a - b - 1, sp.LessThan: b - a,
            sp.StrictLessThan: b - a - 1}[type(rel)]


def _atom_cases(rule):
    e, e_min, e_max = sp.symbols("e e_min e_max", integer=True)
    every, none = rule(e_min, e_max)
    return [
        ("atom: all (from e_min <= e) => e >= 0", implies([e - e_min, _linear(every)], e)),
        ("atom: none (from e <= e_max) => e < 0", implies([e_max - e, _linear(none)], -e - 1)),
    ]


def _kleene_cases(kleene):
    """Soundness of each rule as a propositional validity (SAT: no counterexample)."""
    cases = []
    for op, arity in (("and", 2), ("and", 3), ("or", 2), ("or", 3), ("not", 1)):
        every = sp.symbols(f"all_:{arity}")
        none = sp.symbols(f"none_:{arity}")
        point = sp.symbols(f"p_:{arity}")  # each child's value at one point of the tile
        sound = sp.And(*[sp.Implies(every[k], point[k]) & sp.Implies(none[k], ~point[k]) for k in range(arity)])
        states = list(zip(every, none))
        got_all, got_none = kleene["not"](states[0]) if op == "not" else kleene[op](states)
        value = {"and": sp.And, "or": sp.Or}[op](*point) if op != "not" else ~point[0]
        claim_ = sp.Implies(sound, sp.Implies(got_all, value) & sp.Implies(got_none, ~value))
        counter = sp.satisfiable(~claim_)
        cases.append((f"kleene {op}/{arity}: sound children => sound result",
                      ZERO if counter is False else sp.Tuple(*[sp.Eq(k, v) for k, v in counter.items()])))
    return cases


@claim(MM.CLAIM,
       "for every mask_mod predicate of the class (Boolean combinations of integer comparisons, each "
       "monotone in the query index i and in the key index j separately by the direction rules, document "
       "ids included), the three-valued corner classifier with Kleene's rules never skips a tile holding "
       "an attended entry and never runs without the predicate a tile holding a masked one — for all "
       "integer tile positions, block sizes and parameter values",
       r"\mathrm{none}(T)\Rightarrow\forall (i,j)\in T: \neg P(i,j);\quad "
       r"\mathrm{all}(T)\Rightarrow\forall (i,j)\in T: P(i,j)",
       terms=(),
       scope="symbolic: all integer tile positions, block sizes and parameter values; every predicate of the "
             "class (direction rules, corner lemma, atom rule, Kleene's connectives), exact; the built-ins by membership")  # its terms (mm_all, mm_none, mm_state) are per mask_mod: docs/mask_mod.md shows the built-ins
def prove_mask_mod_sound(rules=MM.DIRECTION_RULES, corner=None, rule=MM.atom_rule, kleene=MM.KLEENE):
    cases = _direction_rule_cases(rules) + _corner_cases(corner) + _atom_cases(rule) + _kleene_cases(kleene)
    cases += [(f"built-in {m.name} is in the class ({len(m.params)} parameter(s))", ZERO) for m in MM.BUILTINS]
    return result(MM.CLAIM, cases,
                  "direction rules, corner lemma for every direction pair, atom rule, Kleene's and/or/not: "
                  "sound for every predicate of the class")
