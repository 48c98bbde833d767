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
"""

from __future__ import annotations

import sympy as sp

from spec import masks
from spec import notation as n
from spec.registry import claim
from spec.proof_tools import ZERO, nonnegative, result

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


def _classifier_components(kinds, tile_bounds):
    """The components the classifier takes max / min of (``masks.classify_tile``)."""
    starts, ends, full_starts, full_ends = [sp.Integer(0)], [n.Nk], [sp.Integer(0)], [n.Nk]
    for kind in kinds:
        tb = tile_bounds(kind)
        for comps, val in ((starts, tb.kv_start), (ends, tb.kv_end),
                           (full_starts, tb.full_start), (full_ends, tb.full_end)):
            if val is not None:
                comps.append(val)
    return starts, ends, full_starts, full_ends


def _tile_cases(kinds, alignment, tile_bounds, bounds):
    def at(expr):  # in the symbols of this case: row i of the tile, the tile height, alignment
        expr = sp.sympify(expr).xreplace(ROW).xreplace(HEIGHT)
        return expr if alignment == "shift free" else expr.xreplace(
            {n.shift: masks.ALIGNMENT_SHIFT[alignment]})

    lo, hi = bounds(kinds)
    los = [at(e) for e in _components(lo, sp.Max)]
    his = [at(e) for e in _components(hi, sp.Min)]
    starts, ends, full_starts, full_ends = [[at(e) for e in c]
                                            for c in _classifier_components(kinds, tile_bounds)]
    tag = f"{'+'.join(kinds)}, {alignment}"
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


@claim("mask_tiles_sound",
       "for causal (top-left and bottom-right alignment) and sliding-window predicates, the tile "
       "classifier the kernels use (skip / full / partial) never skips a tile holding an attended "
       "entry and never calls full a tile holding a masked one — for all integer tile positions "
       "and block sizes, not only sampled ones",
       r"\mathrm{skip}(T)\Rightarrow\forall (i,j)\in T: \neg\mathrm{attend}(i,j);\quad "
       r"\mathrm{full}(T)\Rightarrow\forall (i,j)\in T: \mathrm{attend}(i,j)",
       terms=("kv_start", "kv_end", "full_start", "full_end"))
def prove_mask_tiles_sound(tile_bounds=masks.tile_bounds, bounds=masks.bounds,
                           row_bounds=masks.row_bounds):
    cases = _rule_cases()
    for kinds in masks.kind_sets():
        for alignment in ("shift free",) + masks.ALIGNMENTS:
            cases += _tile_cases(kinds, alignment, tile_bounds, bounds)
    # the transposed classifier of the dK/dV kernel (query rows for a key tile)
    cases += [(f"row_bounds: {name}", res) for name, res in masks.row_bounds_cases(row_bounds)]
    return result("mask_tiles_sound", cases,
                  f"every combination of {list(masks.MASK_KINDS)}, symbolic tile, both "
                  f"alignments; key-tile (dK/dV) classifier per kind")
