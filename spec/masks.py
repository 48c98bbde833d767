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
combination, for all integer positions and block sizes. The dense boolean mask (any
pattern) is not an interval; it is classified per tile at run time from a block map.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import sympy as sp

from spec import notation as n

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


# ----------------------------------------------------------------------------------
# Tile classifier: loop bounds for one query tile, per kind (the kernel intersects them).
# ----------------------------------------------------------------------------------
FIRST_ROW = n.start_m
LAST_ROW = n.start_m + n.B_r - 1


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
    kv_start, kv_end, full_start, full_end = 0, int(env[n.Nk]), 0, int(env[n.Nk])
    for kind in kinds:
        tb = tile_bounds(kind)
        if tb.kv_start is not None:
            kv_start = max(kv_start, int(tb.kv_start.subs(env)))
            full_start = max(full_start, int(tb.full_start.subs(env)))
        if tb.kv_end is not None:
            kv_end = min(kv_end, int(tb.kv_end.subs(env)))
            full_end = min(full_end, int(tb.full_end.subs(env)))
    c0, c1 = start_n_, start_n_ + bc  # keys [c0, c1)
    if c1 <= kv_start or c0 >= kv_end:
        return "skip"
    if c0 >= full_start and c1 <= full_end:
        return "full"
    return "partial"


_PARAM_SYMBOLS = {
    "N_Q": n.Nq, "N_K": n.Nk, "shift": n.shift, "window_left": n.window_left,
    "window_right": n.window_right, "key_len": n.key_len,
}


# ----------------------------------------------------------------------------------
# Numeric evaluation for the float64 reference: the same predicate, lambdified.
# ----------------------------------------------------------------------------------
def alignment_shift(alignment: str, nq: int, nk: int) -> int:
    if alignment not in ALIGNMENT_SHIFT:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    return int(ALIGNMENT_SHIFT[alignment].subs({n.Nq: nq, n.Nk: nk}))


def dense_mask(kinds, nq: int, nk: int, **params) -> np.ndarray:
    """Boolean ``(nq, nk)`` array of ``predicate(kinds)``, True = attend."""
    pred = predicate(kinds)
    syms = [n.i, n.j] + [_PARAM_SYMBOLS[key] for key in params] + [n.Nq, n.Nk]
    f = sp.lambdify(syms, pred, modules="numpy")
    ii, jj = np.meshgrid(np.arange(nq), np.arange(nk), indexing="ij")
    out = f(ii, jj, *params.values(), nq, nk)
    return np.broadcast_to(np.asarray(out, dtype=bool), (nq, nk)).copy()
