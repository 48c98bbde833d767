"""Mask predicates and the tile classifier: one definition for reference, proofs and kernels.

Every structured mask kind is an *interval* of keys per query row ``i``::

    key_lo(i) <= j <= key_hi(i)          (and always 0 <= j < N_K)

with ``key_lo`` and ``key_hi`` non-decreasing in ``i``. Alignment enters through
``shift``: the aligned query position is ``i + shift`` with ``shift = 0`` (top-left: query
``i`` sees key ``j <= i``) or ``shift = N_K - N_Q`` (bottom-right: the last query sees the
last key). Several kinds intersect: ``lo = max(lo_k)``, ``hi = min(hi_k)``.

Because the bounds are monotone in ``i``, a tile of rows ``[start_m, start_m + B_r)`` needs
only its corner rows to decide which key tiles to visit:

* keys outside ``[kv_start, kv_end)`` are attended by no row of the tile (skip);
* keys inside ``[full_start, full_end)`` are attended by every row of the tile (full:
  no per-element predicate);
* the rest are partial and pay for the predicate.

The claim ``mask_tiles_sound`` proves both statements for every kind and every
combination, for all integer positions and block sizes, together with the kernel terms at
the end of this module: the narrowing of the ranges per kind, their rounding to whole tiles
(the tile loop of each kernel) and the element predicate of a partial tile. The dense
boolean mask (any pattern) is not an interval; it is classified per tile at run time from a
block map.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import sympy as sp

from spec import notation as n
from spec.terms import Term

ALIGNMENTS = ("top_left", "bottom_right")

#: aligned-position offset per alignment
ALIGNMENT_SHIFT = {"top_left": sp.Integer(0), "bottom_right": n.Nk - n.Nq}


@dataclass(frozen=True)
class MaskKind:
    """A structured mask: keys ``lo(i) <= j <= hi(i)``; ``None`` means unbounded."""

    name: str
    flag: str  # the kernel's constexpr that switches this kind on
    lo: sp.Expr | None
    hi: sp.Expr | None
    doc: str

    def predicate(self, i=n.i, j=n.j) -> sp.Basic:
        """``True`` where query ``i`` attends key ``j`` under this kind alone."""
        conds = []
        if self.lo is not None:
            conds.append(sp.Le(self.lo.subs(n.i, i), j))
        if self.hi is not None:
            conds.append(sp.Le(j, self.hi.subs(n.i, i)))
        return sp.And(*conds)


MASK_KINDS: dict[str, MaskKind] = {
    k.name: k
    for k in (
        MaskKind("causal", "IS_CAUSAL", None, n.i + n.shift,
                 "key j is visible to query i when j <= i + shift"),
        MaskKind("window", "HAS_WINDOW", n.i + n.shift - n.window_left,
                 n.i + n.shift + n.window_right,
                 "sliding window: -left <= j - (i + shift) <= right"),
        MaskKind("lengths", "HAS_LENGTHS", None, n.key_len - 1,
                 "per-batch key lengths: keys j >= key_len are padding"),
    )
}


def kind_sets():
    """Every non-empty combination of structured kinds (in MASK_KINDS order)."""
    names = list(MASK_KINDS)
    for r in range(1, len(names) + 1):
        yield from combinations(names, r)


def bounds(kinds) -> tuple[sp.Expr, sp.Expr]:
    """Combined ``(lo(i), hi(i))`` of an intersection of kinds, with the key range bounds."""
    los = [sp.Integer(0)] + [MASK_KINDS[k].lo for k in kinds if MASK_KINDS[k].lo is not None]
    his = [n.Nk - 1] + [MASK_KINDS[k].hi for k in kinds if MASK_KINDS[k].hi is not None]
    return sp.Max(*los), sp.Min(*his)


def predicate(kinds, i=n.i, j=n.j) -> sp.Basic:
    """Attend(i, j) for an intersection of kinds, including ``0 <= j < N_K``."""
    lo, hi = bounds(kinds)
    return sp.And(sp.Le(lo.subs(n.i, i), j), sp.Le(j, hi.subs(n.i, i)))


#: ``keep``: the element predicate of a partial tile (True = attend), and the masking of a
#: tile of scores: a masked logit is -oo, so its exp2 is exactly 0 (no finite sentinel such
#: as -1e4, which would leak weight into rows whose keys are all masked).
keep = sp.Symbol("keep")
MASK_TERM = Term(n.qk, sp.Piecewise((n.qk, keep), (n.NEG_INF, True)), "block_update",
                 "masked logits are -inf, so their probabilities are exactly 0")


# ----------------------------------------------------------------------------------
# Tile classifier: loop bounds for one query tile, per kind (the kernel intersects them).
# ----------------------------------------------------------------------------------
from spec.mask_mod import FIRST_ROW, LAST_ROW  # noqa: E402  (the tile's corners, one definition)


@dataclass(frozen=True)
class TileBounds:
    """Per-kind contributions to a query tile's key ranges (``None``: no constraint).

    ``kv_start``/``kv_end``: keys any row of the tile may attend lie in ``[kv_start, kv_end)``.
    ``full_start``/``full_end``: keys every row attends (given ``j < N_K``) lie in
    ``[full_start, full_end)``. The kernel takes ``max`` of the starts and ``min`` of the
    ends over the enabled kinds, starting from ``[0, N_K)``.
    """

    kv_start: sp.Expr | None
    kv_end: sp.Expr | None
    full_start: sp.Expr | None
    full_end: sp.Expr | None


@functools.lru_cache(maxsize=None)  # a pure function of the kind: every tile of every call reuses it
def tile_bounds(kind: str) -> TileBounds:
    """The classifier terms of one kind, from its monotone bounds at the tile's corner rows."""
    k = MASK_KINDS[kind]
    lo_first = None if k.lo is None else k.lo.subs(n.i, FIRST_ROW)
    lo_last = None if k.lo is None else k.lo.subs(n.i, LAST_ROW)
    hi_first = None if k.hi is None else k.hi.subs(n.i, FIRST_ROW) + 1
    hi_last = None if k.hi is None else k.hi.subs(n.i, LAST_ROW) + 1
    return TileBounds(kv_start=lo_first, kv_end=hi_last, full_start=lo_last, full_end=hi_first)


def classify_tile(kinds, start_m_, start_n_, br, bc, **params) -> str:
    """'skip' / 'full' / 'partial' for a concrete tile (numbers), from ``tile_bounds``.

    ``params`` gives numbers for N_Q, N_K, shift, window_left, window_right, key_len.
    This is the classifier the reference's tiled loop and the tests use; the kernels print
    the same ``tile_bounds`` terms.
    """
    env = {n.start_m: start_m_, n.B_r: br, **{_PARAM_SYMBOLS[key]: val for key, val in params.items()}}
    ranges = [(tb.kv_start, tb.kv_end, tb.full_start, tb.full_end) for tb in map(tile_bounds, kinds)]
    return _classify(ranges, env, n.Nk, start_n_, start_n_ + bc)  # keys [start_n, start_n + B_c)


def _classify(ranges, env, total, t0: int, t1: int) -> str:
    """Intersect per-kind ``(start, end, full_start, full_end)`` (from ``[0, total)``) at
    ``env`` and classify the tile ``[t0, t1)`` against them."""
    start, end, full_start, full_end = 0, int(env[total]), 0, int(env[total])
    for s, e, fs, fe in ranges:
        if s is not None:
            start = max(start, int(s.subs(env)))
            full_start = max(full_start, int(fs.subs(env)))
        if e is not None:
            end = min(end, int(e.subs(env)))
            full_end = min(full_end, int(fe.subs(env)))
    if t1 <= start or t0 >= end:
        return "skip"
    if t0 >= full_start and t1 <= full_end:
        return "full"
    return "partial"


_PARAM_SYMBOLS = {
    "N_Q": n.Nq, "N_K": n.Nk, "shift": n.shift, "window_left": n.window_left,
    "window_right": n.window_right, "key_len": n.key_len,
}


# ----------------------------------------------------------------------------------
# Numeric evaluation for the float64 reference: the same predicate, lambdified.
# ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)  # a SymPy substitution: once per shape, not once per kernel launch
def alignment_shift(alignment: str, nq, nk):
    """``ALIGNMENT_SHIFT[alignment]`` at ``N_q = nq``, ``N_k = nk``: an int on numbers, a SymPy term on symbolic
    sizes (the claims evaluate the launches on symbolic tensors: spec.launch.dense_shift, claim window_clamp)."""
    if alignment not in ALIGNMENT_SHIFT:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    shift = ALIGNMENT_SHIFT[alignment].subs({n.Nq: nq, n.Nk: nk})
    return shift if isinstance(nq, sp.Basic) or isinstance(nk, sp.Basic) else int(shift)


def dense_mask(kinds, nq: int, nk: int, **params) -> np.ndarray:
    """Boolean ``(nq, nk)`` array of ``predicate(kinds)``, True = attend."""
    pred = predicate(kinds)
    syms = [n.i, n.j] + [_PARAM_SYMBOLS[key] for key in params] + [n.Nq, n.Nk]
    f = sp.lambdify(syms, pred, modules="numpy")
    ii, jj = np.meshgrid(np.arange(nq), np.arange(nk), indexing="ij")
    out = f(ii, jj, *params.values(), nq, nk)
    return np.broadcast_to(np.asarray(out, dtype=bool), (nq, nk)).copy()


# ----------------------------------------------------------------------------------
# The dense mask's block map: one entry per tile, what the kernels read as ``tile_state``.
# ----------------------------------------------------------------------------------
#: a block map entry as the kernels read it: EMPTY skips the tile, PARTIAL loads the mask per element, FULL runs
#: the tile with no per-element mask (the kernels without a dense mask take FULL)
MAP_EMPTY, MAP_PARTIAL, MAP_FULL = 0, 1, 2


def map_state(attended, valid, where):
    """The block map entry of a tile holding ``valid`` elements of the mask (those inside ``[0, N_Q) x [0, N_K)``),
    ``attended`` of them True: EMPTY when none is, FULL when every one is, else PARTIAL. ``where(cond, a, b)`` is
    the caller's select (``torch.where`` on the runtime's per-tile counts, ``z3.If`` in claim mask_tiles_sound,
    which proves EMPTY only when no element is attended and FULL only when every one is)."""
    return where(attended == 0, MAP_EMPTY, where(attended == valid, MAP_FULL, MAP_PARTIAL))


# ----------------------------------------------------------------------------------
# Transposed classifier: query rows for one KEY tile (the backward dK/dV kernel, which
# fixes a key tile and loops over query tiles). Derived from the same monotone bounds by
# inverting them: hi(i) >= key  <=>  i >= (first row reaching key), lo(i) <= key  <=>
# i < (one past the last row starting by key).
# ----------------------------------------------------------------------------------
from spec.mask_mod import FIRST_KEY, LAST_KEY  # noqa: E402


@dataclass(frozen=True)
class RowBounds:
    """Per-kind contributions to a key tile's query-row ranges (``None``: no constraint).

    ``q_start``/``q_end``: rows that may attend some key of the tile lie in
    ``[q_start, q_end)``. ``full_start``/``full_end``: rows in ``[full_start, full_end)``
    attend every key of the tile under this kind. The kernel takes ``max`` of the starts and
    ``min`` of the ends over the enabled kinds, starting from ``[0, N_Q)``. (Keys ``j >= N_K``
    of a last, partial key tile need no predicate in the dK/dV kernel: their columns only
    feed rows of dK, dV that are never stored.)
    """

    q_start: sp.Expr | None
    q_end: sp.Expr | None
    full_start: sp.Expr | None
    full_end: sp.Expr | None


def _first_row_reaching(hi: sp.Expr, key: sp.Expr) -> sp.Expr:
    """Smallest row ``i >= 0`` with ``hi(i) >= key`` (``N_Q``: none), ``hi`` non-decreasing."""
    slope = sp.diff(hi, n.i)
    if slope == 1:
        return key - hi.subs(n.i, 0)
    if slope == 0:  # a row-independent bound (lengths): every row or none
        return sp.Piecewise((0, sp.Le(key, hi)), (n.Nq, True))
    raise ValueError(f"mask bound {hi} has slope {slope} in i; row_bounds inverts slopes 0 and 1 only")


def _rows_starting_by(lo: sp.Expr, key: sp.Expr) -> sp.Expr:
    """One past the largest row with ``lo(i) <= key`` (0: none), ``lo`` non-decreasing."""
    slope = sp.diff(lo, n.i)
    if slope == 1:
        return key - lo.subs(n.i, 0) + 1
    if slope == 0:
        return sp.Piecewise((n.Nq, sp.Le(lo, key)), (0, True))
    raise ValueError(f"mask bound {lo} has slope {slope} in i; row_bounds inverts slopes 0 and 1 only")


@functools.lru_cache(maxsize=None)
def row_bounds(kind: str) -> RowBounds:
    """The transposed classifier terms of one kind (key tile ``[start_n, start_n + B_c)``)."""
    k = MASK_KINDS[kind]
    return RowBounds(
        q_start=None if k.hi is None else _first_row_reaching(k.hi, FIRST_KEY),
        q_end=None if k.lo is None else _rows_starting_by(k.lo, LAST_KEY),
        full_start=None if k.hi is None else _first_row_reaching(k.hi, LAST_KEY),
        full_end=None if k.lo is None else _rows_starting_by(k.lo, FIRST_KEY),
    )


def classify_rows(kinds, start_n_, start_m_, br, bc, **params) -> str:
    """'skip' / 'full' / 'partial' for query tile ``start_m_`` seen from key tile ``start_n_``.

    The numeric twin of ``row_bounds`` (the dK/dV kernel prints the same terms); tests
    compare it with ``classify_tile`` on every tile pair.
    """
    env = {n.start_n: start_n_, n.B_c: bc, **{_PARAM_SYMBOLS[key]: val for key, val in params.items()}}
    ranges = [(rb.q_start, rb.q_end, rb.full_start, rb.full_end) for rb in map(row_bounds, kinds)]
    return _classify(ranges, env, n.Nq, start_m_, start_m_ + br)  # rows [start_m, start_m + B_r)


def _slack_branches(bound: sp.Expr):
    """``(value, substitution)`` per branch of ``bound``; a branch condition ``a <= b``
    becomes a nonnegative integer slack ``b - a = w`` (solved for a runtime parameter)."""
    if not isinstance(bound, sp.Piecewise):
        return [(bound, {})]
    (value, cond), (other, _) = bound.args  # _first_row_reaching/_rows_starting_by shape
    out = []
    a, b = cond.lts, cond.gts  # SymPy may flip a <= b into b >= a
    for branch_value, (a, b) in ((value, (a, b)), (other, (b + 1, a))):
        w = sp.Dummy("w", integer=True, nonnegative=True)
        param = sorted((b - a).free_symbols - {n.start_n, n.B_c}, key=str)[0]
        out.append((branch_value, {param: sp.solve(sp.Eq(b - a, w), param)[0]}))
    return out


def row_bounds_cases(bounds_of=row_bounds):
    """Proof hook for the transposed classifier: ``(case, residual)``, residual 0 = decided.

    For every kind, with slack variables ``t, u >= 0`` (never samples):

    * ``skip below``: a row ``i = q_start - 1 - t`` misses every key ``j = start_n + u``
      (``j - hi(i) - 1 >= 0``);
    * ``skip above``: a row ``i = q_end + t`` misses every key ``j = last - u``
      (``lo(i) - j - 1 >= 0``);
    * ``full``: rows in ``[full_start, full_end)`` reach every key of the tile
      (``hi(full_start + t) - (last - u) >= 0`` and ``(start_n + u) - lo(full_end - 1 - t) >= 0``).

    A branch whose row range is empty (``q_start = 0``, ``q_end = N_Q``, ``full_start = N_Q``,
    ``full_end = 0``) states nothing and is recorded as decided. ``bounds_of`` lets a test
    feed a mutated classifier and see a case fail.
    """
    t, u = sp.symbols("t u", integer=True, nonnegative=True)
    cases = []

    def decide(name, bound, vacuous, statement):
        for value, sub in _slack_branches(bound):
            if value == vacuous:
                cases.append((f"{name} [{value}: no rows]", sp.Integer(0)))
                continue
            e = sp.expand(statement(value).xreplace(sub))
            cases.append((f"{name} [{value}]", sp.Integer(0) if e.is_nonnegative else e))

    for kind, k in MASK_KINDS.items():
        rb = bounds_of(kind)
        if k.hi is not None:
            decide(f"{kind}: skip below", rb.q_start, 0,
                   lambda b: (FIRST_KEY + u) - k.hi.subs(n.i, b - 1 - t) - 1)
            decide(f"{kind}: full (hi)", rb.full_start, n.Nq,
                   lambda b: k.hi.subs(n.i, b + t) - (LAST_KEY - u))
        if k.lo is not None:
            decide(f"{kind}: skip above", rb.q_end, n.Nq,
                   lambda b: k.lo.subs(n.i, b + t) - (LAST_KEY - u) - 1)
            decide(f"{kind}: full (lo)", rb.full_end, 0,
                   lambda b: (FIRST_KEY + u) - k.lo.subs(n.i, b - 1 - t))
    return cases


# ----------------------------------------------------------------------------------
# The classifier as kernel terms: running ranges, narrowing per kind, rounding to tiles.
# Every line of a kernel's tile-loop arithmetic is one of these terms (printed by the
# generator); claim ``mask_tiles_sound`` proves them (spec.proofs.masks).
# ----------------------------------------------------------------------------------
CLASSIFIER_CLAIM = "mask_tiles_sound"

#: a query tile's key ranges and its loop bounds (multiples of B_c) in the forward and dQ kernels
kv_start, kv_end, full_start, full_end = sp.symbols("kv_start kv_end full_start full_end", integer=True)
kv_lo, kv_hi, full_lo, full_hi = sp.symbols("kv_lo kv_hi full_lo full_hi", integer=True)
#: a key tile's query-row ranges and its loop bounds (multiples of B_r) in the dK/dV kernel
q_start, q_end, q_full_start, q_full_end = sp.symbols("q_start q_end q_full_start q_full_end", integer=True)
q_lo, q_hi, q_full_lo, q_full_hi = sp.symbols("q_lo q_hi q_full_lo q_full_hi", integer=True)

KEY_RANGES = (kv_start, kv_end, full_start, full_end)
KEY_LOOP = (kv_lo, kv_hi, full_lo, full_hi)
ROW_RANGES = (q_start, q_end, q_full_start, q_full_end)
ROW_LOOP = (q_lo, q_hi, q_full_lo, q_full_hi)


def _init(ranges, total, notes) -> tuple[Term, ...]:
    """Every index of ``[0, total)`` in both ranges, before any kind narrows them."""
    start_note, full_note = notes
    return tuple(Term(sym, value, CLASSIFIER_CLAIM, note) for sym, value, note in zip(
        ranges, (sp.Integer(0), total, sp.Integer(0), total), (start_note, "", full_note, "")))


#: a query tile starts with every key of [0, N_K) attended by all rows; each enabled kind
#: then narrows the ranges (``bounds_terms``: max of the starts, min of the ends)
BOUNDS_INIT = _init(KEY_RANGES, n.Nk, ("keys any row may attend: [kv_start, kv_end)",
                                       "keys every row attends: [full_start, full_end)"))
#: a key tile starts with every query row of [0, N_Q) attending all its keys (``row_bounds_terms``)
ROW_BOUNDS_INIT = _init(ROW_RANGES, n.Nq, ("rows that may attend a key of the tile: [q_start, q_end)",
                                           "rows that attend every key of the tile: [q_full_start, q_full_end)"))


def _narrow(kind, ranges, values, what) -> list[Term]:
    """Narrow ``(start, end, full_start, full_end)`` by one kind's bounds: max of the starts,
    min of the ends (``None``: the kind does not constrain that end)."""
    return [Term(sym, op(sym, value), CLASSIFIER_CLAIM, f"{kind}: {sym.name} of the {what}")
            for sym, value, op in zip(ranges, values, (sp.Max, sp.Min, sp.Max, sp.Min)) if value is not None]


def bounds_terms(kind: str, tile_bounds=tile_bounds) -> list[Term]:
    """Narrow a query tile's key ranges by one kind's ``tile_bounds``."""
    tb = tile_bounds(kind)
    return _narrow(kind, KEY_RANGES, (tb.kv_start, tb.kv_end, tb.full_start, tb.full_end), "tile")


def row_bounds_terms(kind: str, row_bounds=row_bounds) -> list[Term]:
    """Narrow a key tile's query-row ranges by one kind's ``row_bounds``."""
    rb = row_bounds(kind)
    return _narrow(kind, ROW_RANGES, (rb.q_start, rb.q_end, rb.full_start, rb.full_end), "key tile")


def tile_loop(ranges, loop, block, notes) -> tuple[Term, ...]:
    """``(lo, hi, full_lo, full_hi)`` from ``(start, end, full_start, full_end)``, in tiles of ``block``.

    The kernel visits partial tiles ``[lo, full_lo)``, full tiles ``[full_lo, full_hi)`` (no
    predicate) and partial tiles ``[full_hi, hi)``. ``lo`` rounds down and ``hi`` up (no
    attended index is lost); the full range rounds *inwards* (a full tile lies inside
    ``[full_start, full_end)``); the clamps keep ``lo <= full_lo <= full_hi <= hi`` and every
    operand of ``//`` and ``cdiv`` non-negative (Triton's integer division truncates toward
    zero: it is floor only there; ``start`` and ``full_start`` are >= 0 by the max-narrowing).
    """
    start, end, fstart, fend = ranges
    lo, hi, flo, fhi = loop
    values = (block * sp.floor(start / block),
              sp.Max(lo, block * sp.ceiling(sp.Max(end, 0) / block)),
              sp.Min(hi, sp.Max(lo, block * sp.ceiling(fstart / block))),
              sp.Min(hi, sp.Max(flo, block * sp.floor(sp.Max(fend, 0) / block))))
    return tuple(Term(sym, value, CLASSIFIER_CLAIM, note) for sym, value, note in zip(loop, values, notes))


#: key ranges rounded to whole key tiles (forward and dQ kernels)
TILE_LOOP = tile_loop(KEY_RANGES, KEY_LOOP, n.B_c, (
    "first key tile any row attends", "end of the last key tile any row attends",
    "first tile every row attends in full", "end of the full tiles"))
#: query-row ranges rounded to whole query tiles (dK/dV kernel)
ROW_TILE_LOOP = tile_loop(ROW_RANGES, ROW_LOOP, n.B_r, (
    "first query tile that may reach this key tile", "end of the last query tile that may reach it",
    "first query tile that attends every key in full", "end of the full query tiles"))

#: the element predicate of a partial tile: first the key range 0 <= j < N_K, then each kind
#: (``&`` of the kinds is ``predicate(kinds)``; the claim checks the two agree)
KEEP_INIT = Term(keep, predicate(()), CLASSIFIER_CLAIM, "keys past N_K are padding of the last tile")


def keep_term(kind: str) -> Term:
    return Term(keep, sp.And(keep, MASK_KINDS[kind].predicate()), CLASSIFIER_CLAIM, MASK_KINDS[kind].doc)


# ----------------------------------------------------------------------------------
# User-defined masks: predicates of the monotone class, classified at the tile's corners
# (spec.mask_mod, claim mask_mod_sound). The public names live here, beside the kinds.
# ----------------------------------------------------------------------------------
from spec.mask_mod import (  # noqa: E402,F401
    BUILTINS as MASK_MOD_BUILTINS, MaskMod, NotInClass, chunked, document, mask_mod, prefix_lm, sink_window)
