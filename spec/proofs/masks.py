"""Proof that the tile classifier (``spec.masks.tile_bounds``) is sound.

For a query tile of rows ``[start_m, start_m + B_r)`` the classifier takes, over the enabled
kinds and the key range ``[0, N_K)``::

    kv_start   = max(0,   kv_start_k)      kv_end   = min(N_K, kv_end_k)
    full_start = max(0, full_start_k)      full_end = min(N_K, full_end_k)

and a key tile ``[start_n, start_n + B_c)`` is *skipped* when it lies outside
``[kv_start, kv_end)`` and *full* when it lies inside ``[full_start, full_end)``.

Soundness, for every row ``i`` of the tile (``i = start_m + a``, ``0 <= a < B_r``):

(a) an attended key ``lo(i) <= j <= hi(i)`` lies in ``[kv_start, kv_end)``: it is enough
    that each component of ``kv_start`` is below *some* component of ``lo(i) = max(...)``
    (then ``lo(i) >= kv_start``), and each component of ``kv_end`` is above some
    component of ``hi(i) + 1``;
(b) a key in ``[full_start, full_end)`` is attended: each component of ``lo(i)`` is below
    some component of ``full_start``, each component of ``hi(i) + 1`` above some component
    of ``full_end``.

Each comparison is linear in integer symbols with slack variables for the ranges, and its
sign is decided by SymPy's assumptions; an undecided one is a failed case. ``shift`` is a
free integer, which covers both alignments at once; the two alignments are also
substituted explicitly. Then the classifier's rule turns (a) and (b) into the statements
about skipped and full tiles. The transposed classifier of the dK/dV kernel
(``masks.row_bounds``) is checked by its own hook, ``masks.row_bounds_cases``.

The components are read off the very terms the kernels print (``masks.BOUNDS_INIT`` and
``masks.bounds_terms`` chained; ``masks.ROW_BOUNDS_INIT`` and ``masks.row_bounds_terms`` for
the dK/dV kernel), for every set of enabled kinds including none. The kernel then rounds the
ranges to whole tiles (``masks.TILE_LOOP``, ``masks.ROW_TILE_LOOP``) and runs three stages:
partial tiles ``[lo, full_lo)``, full tiles ``[full_lo, full_hi)``, partial ``[full_hi, hi)``;
``_tile_loop_cases`` proves the rounding sound (``implies``: max/min eliminated by their
lattice rules, floor/ceiling by their definitions). Last, the element predicate the partial
tiles evaluate (``masks.KEEP_INIT`` ``&`` ``masks.keep_term``) is ``masks.predicate``.
"""

from __future__ import annotations

from itertools import combinations

import sympy as sp

from spec import masks
from spec import notation as n
from spec import terms
from spec.registry import claim
from spec.proofs.tools import ZERO, decide, nonnegative, result

# A row of the tile and the tile height: i = start_m + a with 0 <= a <= B_r - 1.
a_row, c_row = sp.symbols("a c", integer=True, nonnegative=True)
ROW = {n.i: n.start_m + a_row}
HEIGHT = {n.B_r: a_row + 1 + c_row}


def _components(expr: sp.Expr, extremum) -> tuple[sp.Expr, ...]:
    return tuple(expr.args) if isinstance(expr, extremum) else (expr,)


def _covered(needs, offers, holds) -> sp.Basic:
    """0 if every component in ``needs`` has a witness in ``offers`` with ``holds(need, offer)``
    decided; else the needs left without a witness."""
    missing = [need for need in needs if not any(holds(need, offer) == 0 for offer in offers)]
    return ZERO if not missing else sp.Tuple(*missing)


def _tile_cases(kinds, alignment, lo_hi, ranged):
    """The four soundness cases of one kind set at one alignment. ``lo_hi``: the set's element
    bounds (``masks.bounds``); ``ranged``: the kernel's narrowed key ranges, its init terms then
    each kind's narrowing terms (``masks.bounds_terms``) substituted into one closed form each.
    Neither depends on the alignment: both are computed once per kind set by the caller."""
    def at(expr):  # in the symbols of this case: row i of the tile, the tile height, alignment
        expr = sp.sympify(expr).xreplace(ROW).xreplace(HEIGHT)
        return expr if alignment == "shift free" else expr.xreplace(
            {n.shift: masks.ALIGNMENT_SHIFT[alignment]})

    lo, hi = lo_hi
    los = [at(e) for e in _components(lo, sp.Max)]
    his = [at(e) for e in _components(hi, sp.Min)]
    starts, ends, full_starts, full_ends = [
        [at(e) for e in _components(ranged[sym], op)]
        for sym, op in zip(masks.KEY_RANGES, (sp.Max, sp.Min, sp.Max, sp.Min))]
    tag = f"{'+'.join(kinds) or 'no kind'}, {alignment}"
    return [
        (f"{tag}: attended j >= kv_start", _covered(starts, los, lambda c, lo_: nonnegative(lo_ - c))),
        (f"{tag}: attended j < kv_end", _covered(ends, his, lambda e, hi_: nonnegative(e - hi_ - 1))),
        (f"{tag}: j >= full_start => j >= lo(i)",
         _covered(los, full_starts, lambda lo_, f: nonnegative(f - lo_))),
        (f"{tag}: j < full_end => j <= hi(i)",
         _covered(his, full_ends, lambda hi_, g: nonnegative(hi_ - g + 1))),
    ]


def _rule_cases():
    """The classifier's rule on the four combined bounds, for a key ``j = start_n + b`` of the tile."""
    kv_start, kv_end, full_start, full_end = sp.symbols("kv_start kv_end full_start full_end", integer=True)
    b, e, t, u = sp.symbols("b e t u", integer=True, nonnegative=True)
    width = {n.B_c: b + 1 + e}  # 0 <= b <= B_c - 1
    j = n.start_n + b
    skip_left = {kv_start: n.start_n + n.B_c + t}  # start_n + B_c <= kv_start
    skip_right = {n.start_n: kv_end + t}  # start_n >= kv_end
    # start_n >= full_start and start_n + B_c <= full_end
    full = {n.start_n: full_start + t, full_end: full_start + t + n.B_c + u}

    def holds(expr, *subs):
        for sub in subs:
            expr = expr.xreplace(sub)
        return nonnegative(expr)

    return [
        ("rule: skipped (left) => j < kv_start", holds(kv_start - 1 - j, skip_left, width)),
        ("rule: skipped (right) => j >= kv_end", holds(j - kv_end, skip_right)),
        ("rule: full => j >= full_start", holds(j - full_start, full)),
        ("rule: full => j < full_end", holds(full_end - 1 - j, full, width)),
    ]


# ----------------------------------------------------------------------------------
# Implications between piecewise-linear integer expressions (max, min, +, integer scalars)
# ----------------------------------------------------------------------------------
def _extremum(expr):
    """A ``(coefficient, Max/Min)`` at an additive position of ``expr``, or None."""
    for term in sp.Add.make_args(sp.expand(expr)):
        coeff, rest = term.as_coeff_Mul()
        if isinstance(rest, (sp.Max, sp.Min)):
            return coeff, rest
    return None


def _alternatives(expr, coeff, node):
    """``expr`` with that one additive occurrence of ``node`` replaced by each of its arguments,
    and ``at_least_each``: for ``c·max`` with ``c > 0`` (or ``c·min`` with ``c < 0``) ``expr`` is
    at least every alternative (a goal needs one of them; a hypothesis, equal to one of them,
    splits into cases); otherwise it is at most every one (a goal needs all of them; a
    hypothesis gives all of them)."""
    rest = sp.expand(expr) - coeff * node
    alts = [rest + coeff * a for a in node.args]
    at_least_each = (coeff > 0) == isinstance(node, sp.Max)
    return alts, at_least_each


def _is_free(sym) -> bool:
    return sym.is_integer is True and sym.is_nonnegative is None and sym.is_nonpositive is None


def _assume(hyps):
    """Turn linear hypotheses ``h >= 0`` into slack substitutions ``v = ... + w`` (``w >= 0``) for a
    free integer ``v`` with coefficient +-1. None: a hypothesis, or the sum of two, is decided
    negative (no such case).
    Returns ``(substitution, hypotheses left without such a v)``."""
    sub, pending, changed = {}, list(hyps), True
    while changed:
        changed, rest = False, []
        for h in pending:
            h = sp.expand(h.xreplace(sub))
            if h.is_negative is True:
                return None
            if h.is_nonnegative is True:
                continue
            free = [v for v in sorted(h.free_symbols, key=str) if _is_free(v) and h.coeff(v) in (1, -1)]
            if not free:
                rest.append(h)
                continue
            v, w = free[0], sp.Dummy("w", integer=True, nonnegative=True)
            c = h.coeff(v)
            value = sp.expand((w - (h - c * v)) / c)  # h = w, solved for v
            sub = {k: sp.expand(x.xreplace({v: value})) for k, x in sub.items()} | {v: value}
            changed = True
        pending = rest
    if any(sp.expand(f + g).is_negative is True for f, g in combinations(pending, 2)):
        return None  # two hypotheses contradict each other
    return sub, pending


def implies(hyps, goal) -> sp.Basic:
    """0 when ``all(h >= 0 for h in hyps)`` implies ``goal >= 0`` for all integer values of the
    free symbols (signs from SymPy's assumptions); else the goal left undecided.

    ``max``/``min`` are eliminated by their lattice rules, never by samples: a hypothesis
    ``c·max(a, b) + r >= 0`` (``c > 0``) splits into the cases ``c·a + r >= 0`` and ``c·b + r >= 0``;
    ``c·min(a, b) + r >= 0`` gives both; a goal ``c·min(a, b) + r >= 0`` needs both and
    ``c·max(a, b) + r >= 0`` one of them (tried in turn). Linear hypotheses become slack
    substitutions (``_assume``); a case with a hypothesis decided negative holds vacuously.
    """
    linear = [h for h in hyps if _extremum(h) is None]
    assumed = _assume(linear)
    if assumed is None:
        return ZERO  # contradictory hypotheses: no such case
    sub, left = assumed
    for k, h in enumerate(hyps):
        node = _extremum(h.xreplace(sub))
        if node is None:
            continue
        alts, at_least_each = _alternatives(h.xreplace(sub), *node)
        others = [x.xreplace(sub) for x in hyps[:k] + hyps[k + 1:]]
        if at_least_each:  # h equals one alternative: every case must hold
            for a in alts:
                res = implies(others + [a], goal.xreplace(sub))
                if res != 0:
                    return res
            return ZERO
        return implies(others + alts, goal.xreplace(sub))
    return _goal(sp.expand(goal.xreplace(sub)), left)


def _goal(goal, facts=()) -> sp.Basic:
    """``goal >= 0`` given ``facts >= 0`` (linear): decided for ``goal`` minus a sum of at most
    two facts (``goal = fact + rest`` with both >= 0)."""
    node = _extremum(goal)
    if node is None:
        combos = [()] + [(f,) for f in facts] + list(combinations(facts, 2))
        return ZERO if any(nonnegative(goal - sum(c)) == 0 for c in combos) else goal
    # try each extremum at an additive position: "at most every" ones first (no information lost)
    nodes = {(c, x) for c, x in (t.as_coeff_Mul() for t in sp.Add.make_args(goal)) if isinstance(x, (sp.Max, sp.Min))}
    nodes = sorted(nodes, key=lambda cx: ((cx[0] > 0) == isinstance(cx[1], sp.Max), str(cx)))
    for coeff, x in nodes:
        alts, at_least_each = _alternatives(goal, coeff, x)
        if at_least_each:
            if any(_goal(a, facts) == 0 for a in alts):
                return ZERO
        elif all(_goal(a, facts) == 0 for a in alts):
            return ZERO
    return goal


# ----------------------------------------------------------------------------------
# The kernel's tile loop: narrowed ranges rounded to whole tiles (spec.masks.tile_loop)
# ----------------------------------------------------------------------------------
def _multiple_of(expr, block) -> bool:
    """``expr`` is ``block`` times an integer: a max/min of such, or ``block·floor/ceiling(...)``."""
    if isinstance(expr, (sp.Max, sp.Min)):
        return all(_multiple_of(a, block) for a in expr.args)
    return sp.expand(expr / block).is_integer is True


def _tile_loop_cases(tag, loop_terms, ranges, block):
    """Soundness of the rounding, for all integers ``end``, ``full_end``, ``start, full_start >= 0``
    (derived per kind set by ``_sign_cases``) and every block size ``B >= 1``:

    * every ``//`` / ``cdiv`` operand is >= 0 (Triton's division truncates: floor only there);
    * ``lo, hi, full_lo, full_hi`` are multiples of ``B`` and ``lo <= full_lo <= full_hi <= hi``:
      the three stages partition the visited tiles;
    * (a) an index ``start <= j < end`` lies in ``[lo, hi)``: no attended index is skipped;
    * (b) a tile ``[t, t + B)`` of the full stage (``full_lo <= t``, ``t + B <= full_hi``) lies in
      ``[full_start, full_end)``: a tile run without the predicate holds no masked entry.

    ``B·floor(x/B)`` and ``B·ceiling(x/B)`` are replaced by their definitions ``x - r`` and
    ``x + r`` with a slack ``r >= 0`` (the bound ``r <= B - 1`` only makes the loop tight and is
    not needed: the statements hold for every ``r >= 0``, hence for the true one).
    """
    start, end, fstart, fend = ranges
    s, fs = sp.symbols("s f_s", integer=True, nonnegative=True)  # start, full_start: >= 0
    e, fe, j, t = sp.symbols("e f_e j t", integer=True)
    b = sp.Symbol("b", integer=True, nonnegative=True)  # B = 1 + b
    env = {start: s, end: e, fstart: fs, fend: fe}
    loop = terms.chain(loop_terms)  # lo, hi, full_lo, full_hi in closed form
    values = [v.xreplace(env) for v in loop.values()]
    divisions = sorted(set().union(*(v.atoms(sp.floor, sp.ceiling) for v in values)), key=str)
    cases = [(f"{tag}: {type(d).__name__} operand {sp.expand(d.args[0] * block)} >= 0 (Triton // truncates)",
              nonnegative(sp.expand(d.args[0] * block))) for d in divisions]
    cases += [(f"{tag}: {sym} is a multiple of {block}", ZERO if _multiple_of(v, block) else v)
              for sym, v in zip(loop, values)]
    # definitional substitution of floor / ceiling, then B = 1 + b
    defs = {}
    for k, d in enumerate(divisions):
        r, x = sp.Symbol(f"r_{k}", integer=True, nonnegative=True), d.args[0] * block
        defs[d] = (x - r if isinstance(d, sp.floor) else x + r) / block
    lo, hi, flo, fhi = [sp.expand(v.xreplace(defs)).xreplace({block: 1 + b}) for v in values]
    B = 1 + b
    cases += [
        (f"{tag}: lo <= full_lo", implies([], flo - lo)),
        (f"{tag}: full_lo <= full_hi", implies([], fhi - flo)),
        (f"{tag}: full_hi <= hi", implies([], hi - fhi)),
        (f"{tag}: start <= j < end => j >= lo", implies([j - s, e - j - 1], j - lo)),
        (f"{tag}: start <= j < end => j < hi", implies([j - s, e - j - 1], hi - j - 1)),
        (f"{tag}: full tile [t, t+B) => t >= full_start", implies([t - flo, fhi - t - B], t - fs)),
        (f"{tag}: full tile [t, t+B) => t + B <= full_end", implies([t - flo, fhi - t - B], fe - t - B)),
    ]
    return cases


def _narrowed(init, narrowing, kinds):
    """The kernel's ranges after the init terms and the narrowing of each kind, closed form."""
    return terms.chain(list(init) + [t for kind in kinds for t in narrowing(kind)])


def _sign_cases(tag, ranged, starts):
    """``start >= 0`` and ``full_start >= 0`` after narrowing (the loop's ``//`` needs them)."""
    return [(f"{tag}: {sym} >= 0", nonnegative(ranged[sym])) for sym in starts]


def _row_narrowing_cases(kinds, row_bounds, row_bounds_init=masks.ROW_BOUNDS_INIT):
    """The dK/dV kernel's narrowed query-row ranges are the intersection of the per-kind ranges
    (each sound by ``row_bounds_cases``) and the row range ``[0, N_Q)``: each component of the
    kernel's ``q_start`` is a sound start (and so on), each sound full start is below the
    kernel's ``q_full_start`` (its max), each sound full end above ``q_full_end``."""
    ranged = _narrowed(row_bounds_init, lambda k: masks.row_bounds_terms(k, row_bounds), kinds)
    per_kind = [row_bounds(kind) for kind in kinds]
    sound = {f: [getattr(rb, f) for rb in per_kind if getattr(rb, f) is not None]
             for f in ("q_start", "q_end", "full_start", "full_end")}
    zero = [sp.Integer(0)]
    tag = f"rows {'+'.join(kinds) or 'no kind'}"
    got = {sym: ranged[sym] for sym in masks.ROW_RANGES}
    return [
        (f"{tag}: q_start", _covered(_components(got[masks.q_start], sp.Max), zero + sound["q_start"],
                                     lambda c, b: nonnegative(b - c))),
        (f"{tag}: q_end", _covered(_components(got[masks.q_end], sp.Min), [n.Nq] + sound["q_end"],
                                   lambda c, b: nonnegative(c - b))),
        (f"{tag}: q_full_start", _covered(zero + sound["full_start"], _components(got[masks.q_full_start], sp.Max),
                                          lambda b, c: nonnegative(c - b))),
        (f"{tag}: q_full_end", _covered([n.Nq] + sound["full_end"], _components(got[masks.q_full_end], sp.Min),
                                        lambda b, c: nonnegative(b - c))),
    ] + _sign_cases(tag, ranged, (masks.q_start, masks.q_full_start))


def _keep_cases(kinds, keep_init, keep_term):
    """The kernel's element predicate (``keep``: the key range, then ``&`` each kind) is
    ``masks.predicate(kinds)``: every conjunct of one is implied by a conjunct of the other."""
    keep = terms.chain([keep_init] + [keep_term(kind) for kind in kinds])[masks.keep]
    pred = masks.predicate(kinds)

    def conjuncts(p):  # (lower bounds of j, upper bounds of j)
        lows, highs = [], []
        for c in sp.And.make_args(p):
            if not isinstance(c, sp.Le) or n.j not in (c.lhs, c.rhs):
                return None
            if c.rhs == n.j:
                lows += _components(c.lhs, sp.Max)
            else:
                highs += _components(c.rhs, sp.Min)
        return lows, highs

    tag = f"keep {'+'.join(kinds) or 'no kind'}"
    kc, pc = conjuncts(keep), conjuncts(pred)
    if kc is None or pc is None:
        return [(f"{tag}: not a conjunction of bounds on j", sp.Tuple(keep, pred))]
    stronger = lambda x, y: nonnegative(x - y)  # noqa: E731  (x >= y)
    return [
        (f"{tag}: keep => predicate (lows)", _covered(pc[0], kc[0], lambda need, have: stronger(have, need))),
        (f"{tag}: keep => predicate (highs)", _covered(pc[1], kc[1], lambda need, have: stronger(need, have))),
        (f"{tag}: predicate => keep (lows)", _covered(kc[0], pc[0], lambda need, have: stronger(have, need))),
        (f"{tag}: predicate => keep (highs)", _covered(kc[1], pc[1], lambda need, have: stronger(need, have))),
    ]


def _map_state_cases(map_state):
    """The dense mask's block map (``spec.masks.map_state``, what the runtime evaluates per tile with torch.where):
    from a tile's count of valid elements and of attended ones among them, every entry is one of the three codes
    the kernels read, EMPTY (skipped) only when no element is attended and FULL (no per-element mask) only when
    every valid one is. The counts' facts are the hypotheses: ``0 <= attended <= valid`` (a sum of 0/1 values over
    the valid elements; ``valid >= 1``: a tile of the map holds an element), some element attended iff
    ``attended >= 1``, some masked iff ``attended <= valid - 1``."""
    import z3

    attended, valid = z3.Ints("attended valid")
    some_attended, some_masked = z3.Bools("some_element_attended some_element_masked")
    counts = [valid >= 1, 0 <= attended, attended <= valid, some_attended == (attended >= 1),
              some_masked == (attended <= valid - 1)]
    state = map_state(attended, valid, z3.If)
    codes = (masks.MAP_EMPTY, masks.MAP_PARTIAL, masks.MAP_FULL)
    return [decide("dense block map: every entry is EMPTY, PARTIAL or FULL", counts,
                   z3.Or(*[state == code for code in codes])),
            decide("dense block map: EMPTY (the kernels skip the tile) only when no element is attended", counts,
                   z3.Implies(state == masks.MAP_EMPTY, z3.Not(some_attended))),
            decide("dense block map: FULL (no per-element mask) only when every valid element is attended", counts,
                   z3.Implies(state == masks.MAP_FULL, z3.Not(some_masked)))]


@claim("mask_tiles_sound",
       "for causal (top-left and bottom-right alignment), sliding-window and key-length predicates, "
       "the tile classifier and tile loops the kernels print (ranges narrowed per kind, rounded to whole "
       "tiles; skip / full / partial) never skip a tile holding an attended entry and never run without "
       "the predicate a tile holding a masked one — for all integer tile positions and block sizes, "
       "not only sampled ones; and the dense mask's block map entry (spec.masks.map_state, what the runtime "
       "evaluates per tile from its counts of valid and attended elements) is EMPTY only when no element of the "
       "tile is attended and FULL only when every valid one is (z3, for all counts 0 <= attended <= valid)",
       r"\mathrm{skip}(T)\Rightarrow\forall (i,j)\in T: \neg\mathrm{attend}(i,j);\quad "
       r"\mathrm{full}(T)\Rightarrow\forall (i,j)\in T: \mathrm{attend}(i,j)",
       terms=("kv_start", "kv_end", "full_start", "full_end"),
       scope="symbolic positions, lengths and block sizes; mathematical integers Z (int32: int32_index_arithmetic), exact",
       assumptions=('key_len_range', 'alignment_shift'))
def prove_mask_tiles_sound(tile_bounds=masks.tile_bounds, bounds=masks.bounds, row_bounds=masks.row_bounds,
                           bounds_init=masks.BOUNDS_INIT, tile_loop=masks.TILE_LOOP,
                           row_tile_loop=masks.ROW_TILE_LOOP, keep_init=masks.KEEP_INIT,
                           keep_term=masks.keep_term, row_bounds_init=masks.ROW_BOUNDS_INIT,
                           map_state=masks.map_state):
    cases = _rule_cases()
    every_set = [()] + list(masks.kind_sets())
    for kinds in every_set:
        lo_hi = bounds(kinds)
        ranged = _narrowed(bounds_init, lambda k: masks.bounds_terms(k, tile_bounds), kinds)
        for alignment in ("shift free",) + masks.ALIGNMENTS:
            cases += _tile_cases(kinds, alignment, lo_hi, ranged)
        cases += _sign_cases(f"keys {'+'.join(kinds) or 'no kind'}", ranged, (masks.kv_start, masks.full_start))
        cases += _keep_cases(kinds, keep_init, keep_term)
    # the transposed classifier of the dK/dV kernel (query rows for a key tile)
    cases += [(f"row_bounds: {name}", res) for name, res in masks.row_bounds_cases(row_bounds)]
    for kinds in every_set:
        cases += _row_narrowing_cases(kinds, row_bounds, row_bounds_init)
    # the rounding of both loops to whole tiles
    cases += _tile_loop_cases("key loop", tile_loop, masks.KEY_RANGES, n.B_c)
    cases += _tile_loop_cases("query loop", row_tile_loop, masks.ROW_RANGES, n.B_r)
    # the dense mask's tiles, classified by the runtime from their contents (spec.masks.map_state)
    cases += _map_state_cases(map_state)
    return result("mask_tiles_sound", cases,
                  f"every combination of {list(masks.MASK_KINDS)} (and none), symbolic tile, both "
                  f"alignments; kernel narrowing, element predicate, key-tile (dK/dV) classifier and both "
                  f"tile loops' rounding")
