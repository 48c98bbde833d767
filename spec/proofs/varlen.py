"""Proof that a packed (varlen) kernel never reads or writes across segments.

The varlen kernels map each program to one segment ``b`` and print ``spec.varlen.SEGMENT``:
``N_Q``, ``N_K`` from the offsets ``cu_seqlens[b]``, ``cu_seqlens[b+1]`` and the bottom-right
``shift``; they then offset every Q/K/V/O pointer by the segment's first row and run the dense
kernel on the slice. So a segment is sound when

(a) its lengths are non-negative and an index ``0 <= j < N_K`` (``0 <= i < N_Q``) addressed at
    ``cu_seqlens_k[b] + j`` lies inside ``[cu_seqlens_k[b], cu_seqlens_k[b+1])``, and a later
    segment's addresses all lie past it (so no two segments share a row);
(b) the dense kernel on the slice addresses keys ``0 <= j < N_K`` only: partial tiles mask their
    loads and their scores by ``j < N_K`` (``masks.KEEP_INIT``; claim ``mask_tiles_sound``), and
    the full tiles, loaded without a mask, lie in ``[full_start, full_end)`` (``mask_tiles_sound``),
    so it is enough that the narrowed ``full_end <= N_K`` (``q_full_end <= N_Q`` for the dK/dV
    kernel's query tiles) for every set of kinds;
(c) its ``shift`` is the alignment the reference gives a segment (``spec.varlen.ALIGNMENT``);
(d) a segment without keys (``N_K = 0``) visits no key tile, and one without queries
    (``N_Q = 0``) no query tile in the dK/dV kernel: no key of the neighbours is ever loaded
    for it, its rows get output 0 and ``lse = -inf``, its keys zero gradients; and a tile that
    starts past its segment's end (``ROWS_PAST_END``, ``KEYS_PAST_END``) is given exactly that
    empty case, a tile inside it its real lengths;
(e) the launch grid of ``cdiv(max_seqlen, B)`` tiles per segment covers every row of a segment
    with ``n <= max_seqlen`` (which is why a smaller ``max_seqlen`` hint is an error).

Every inequality is decided on slack variables (``end = start + w``, ``w >= 0``), never on samples.
"""

from __future__ import annotations

import sympy as sp

from spec import addresses as A
from spec import launch as L
from spec import masks
from spec import notation as n
from spec import terms
from spec import varlen as V
from spec.proofs.tools import difference, nonnegative, result
from spec.proofs.masks import implies
from spec.registry import claim

#: slack variables: the segment lengths, a row/key index's distance to the segment's ends,
#: the gap to a later segment, an index of it, and the max_seqlen hint's excess
w_q, w_k, t, u, gap, j_next, excess, r = sp.symbols("w_q w_k t u gap j_next excess r", integer=True,
                                                    nonnegative=True)
#: monotone offsets: cu_seqlens[b+1] = cu_seqlens[b] + w
MONOTONE = {V.seq_end_q: V.seq_start_q + w_q, V.seq_end_k: V.seq_start_k + w_k}


def _address_cases(tag, length, start, end):
    """Index ``j`` in ``[0, length)`` addressed at ``start + j``: inside ``[start, end)``, and
    before every address of a later segment (which starts at ``end + gap``)."""
    first, last = t, length - 1 - u  # 0 <= j, and j <= length - 1
    return [
        (f"{tag}: length >= 0", nonnegative(length.xreplace(MONOTONE))),
        (f"{tag}: start + j >= cu[b] (j = t >= 0)", nonnegative(sp.expand(start + first - start))),
        (f"{tag}: start + j < cu[b+1] (j = length - 1 - u)",
         nonnegative(sp.expand((end - 1 - (start + last)).xreplace(MONOTONE)))),
        (f"{tag}: a later segment's index lies past start + j",
         nonnegative(sp.expand((end + gap + j_next - (start + last) - 1).xreplace(MONOTONE)))),
    ]


def _loop(init, narrowing, loop, kinds, at=None):
    """A kernel's ranges and tile loop in closed form: init, each kind's narrowing, the rounding.
    ``at`` substitutes into every term *before* chaining (``N_K = 0``: SymPy must not simplify
    with the symbol's ``positive`` assumption first)."""
    seq = list(init) + [term for kind in kinds for term in narrowing(kind)] + list(loop)
    if at:
        seq = [terms.Term(x.symbol, x.expr.xreplace(at), x.claim, x.note) for x in seq]
    return terms.chain(seq)


@claim(V.CLAIM,
       "for a packed batch (cu_seqlens, FlashAttention's varlen layout), the segment terms the kernels print "
       "(N_Q, N_K from the offsets, the bottom-right shift) and the dense tile loop they then run address only "
       "rows and keys of their own segment [cu[b], cu[b+1]) — for all integer offsets, lengths (0 included) and "
       "block sizes (mathematical integers: the int32 offsets are non-negative, so their differences cannot "
       "overflow, and the kernels scale them to pointers in int64): lengths >= 0, segments disjoint, full tiles "
       "(no load mask) below N_K (N_Q in dK/dV) for every kind set, the reference's bottom-right alignment, no tile visited by a segment without keys or "
       "queries nor by a tile past its segment's end, and the launch grid (spec.launch.varlen_grid, the one the "
       "launchers use) of cdiv(max_seqlen, B) tiles covering every segment no longer than max_seqlen",
       r"0\le j<N_K \Rightarrow \mathrm{cu}_k[b]\le \mathrm{cu}_k[b]+j<\mathrm{cu}_k[b+1];\quad "
       r"\mathrm{full}(T)\Rightarrow T\subseteq[0,N_K)",
       terms=("N_Q", "N_K", "shift"),
       scope="symbolic offsets, lengths (0 included) and block sizes (z3/SymPy); mathematical integers Z "
             "(offsets non-negative int32, pointers int64; not the int32 tile bounds of a segment), exact")
def prove_varlen_segments_sound(segment=V.SEGMENT, rows_past_end=V.ROWS_PAST_END, keys_past_end=V.KEYS_PAST_END,
                                bounds_init=masks.BOUNDS_INIT,
                                row_bounds_init=masks.ROW_BOUNDS_INIT, tile_loop=masks.TILE_LOOP,
                                row_tile_loop=masks.ROW_TILE_LOOP, grid=None):
    grid = L.varlen_grid if grid is None else grid
    seg = terms.chain(segment)
    nq, nk = seg[n.Nq], seg[n.Nk]
    # (a) addresses of rows and keys
    cases = _address_cases("keys", nk, V.seq_start_k, V.seq_end_k)
    cases += _address_cases("rows", nq, V.seq_start_q, V.seq_end_q)
    # (c) the alignment of the reference's segment problem, at the segment's lengths
    reference_shift = masks.ALIGNMENT_SHIFT[V.ALIGNMENT].xreplace({n.Nq: nq, n.Nk: nk})
    cases.append(("shift is the reference's alignment of a segment", difference(seg[n.shift], reference_shift)))
    # (d') a tile past the segment's end (the grid covers the longest one) is emptied, one inside kept
    for term, first, length, kept in ((rows_past_end, n.start_m, n.Nq, n.Nk), (keys_past_end, n.start_n, n.Nk, n.Nq)):
        past, inside = term.expr.xreplace({first: length + t}), term.expr.xreplace({first: length - 1 - t})
        cases.append((f"{first} >= {length}: {term.name} = 0", difference(past, sp.Integer(0))))
        cases.append((f"{first} < {length}: {term.name} unchanged", difference(inside, kept)))
    every_set = [()] + list(masks.kind_sets())
    for kinds in every_set:
        tag = "+".join(kinds) or "no kind"
        keys = _loop(bounds_init, masks.bounds_terms, tile_loop, kinds)
        rows = _loop(row_bounds_init, masks.row_bounds_terms, row_tile_loop, kinds)
        # (b) full tiles run without a load mask: they must end inside the segment
        cases.append((f"{tag}: full_end <= N_K", implies([], n.Nk - keys[masks.full_end])))
        cases.append((f"{tag}: q_full_end <= N_Q", implies([], n.Nq - rows[masks.q_full_end])))
        # (d) an empty segment visits no tile: hi <= lo once N_K (N_Q) is 0
        no_keys = _loop(bounds_init, masks.bounds_terms, tile_loop, kinds, at={n.Nk: sp.Integer(0)})
        no_rows = _loop(row_bounds_init, masks.row_bounds_terms, row_tile_loop, kinds, at={n.Nq: sp.Integer(0)})
        cases.append((f"{tag}: N_K = 0 visits no key tile", implies([], no_keys[masks.kv_lo] - no_keys[masks.kv_hi])))
        cases.append((f"{tag}: N_Q = 0 visits no query tile (dK/dV)",
                      implies([], no_rows[masks.q_lo] - no_rows[masks.q_hi])))
    # (e) the grid: cdiv(max_seqlen, B) tiles of B rows cover n <= max_seqlen rows
    #     (B·ceiling(M/B) = M + r with r >= 0, the definition of the ceiling)
    #     the grid is spec.launch.varlen_grid's, the launchers' (claim varlen_addresses proves its
    #     axis 1 too); its tiles: ceiling(M/B), by the definition of the ceiling (M + r)/B, r >= 0
    length, block = sp.symbols("n B", integer=True, positive=True)
    max_seqlen = length + excess
    tiles = grid(max_seqlen, block, A.symbolic("cu_seqlens", ("B1",)), 1)[0]
    covered = (block * tiles).xreplace({sp.ceiling(max_seqlen / block): (max_seqlen + r) / block})
    cases.append(("grid cdiv(max_seqlen, B)·B covers a segment of n <= max_seqlen rows",
                  nonnegative(sp.expand(covered - length))))
    return result(V.CLAIM, cases,
                  f"segment offsets and lengths on slack variables; full-tile ends and empty segments for every "
                  f"combination of {list(masks.MASK_KINDS)} (and none), both kernels' loops")

