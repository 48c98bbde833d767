"""Packed variable-length batches (FlashAttention's ``cu_seqlens``): one home for the segments.

A packed batch stores the ``B`` sequences of a batch end to end: ``q (total_q, Hq, D)``,
``k, v (total_k, Hkv, D)`` and two int32 offset vectors ``cu_seqlens_q``, ``cu_seqlens_k`` of
``B + 1`` entries, non-decreasing, from 0 to the totals. Segment ``b`` is the query rows
``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` against the keys ``cu_seqlens_k[b]:cu_seqlens_k[b+1]``,
and on its slice it *is* the dense problem of ``spec.masks`` with ``N_Q``, ``N_K`` its lengths
and bottom-right alignment (FlashAttention's convention: the last query sees the last key).

The kernels map each program to one segment (its batch index ``b``) and print the three
assignments of ``SEGMENT`` below; everything after them (the tile classifier, the tile loop,
the online softmax) is the dense kernel's. Claim ``varlen_segments_sound``
(``spec.proofs.varlen``) proves that no row or key of another segment is ever addressed.
``segments`` checks a pair of offset vectors and lists the slices, for the float64 reference
and the runtime alike.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from spec import masks
from spec import notation as n
from spec.terms import Term

CLAIM = "varlen_segments_sound"

#: the offsets of segment b in the packed tensors: cu_seqlens_q[b], cu_seqlens_q[b+1], ...
seq_start_q, seq_end_q, seq_start_k, seq_end_k = sp.symbols(
    "seq_start_q seq_end_q seq_start_k seq_end_k", integer=True, nonnegative=True)

#: the segment's lengths and its alignment, in the kernel's names (N_Q, N_K, shift): the dense
#: kernel's scalars, so the classifier and the predicates that follow are the dense ones
SEGMENT = (
    Term(n.Nq, seq_end_q - seq_start_q, CLAIM, "queries of this segment: cu_seqlens_q[b+1] - cu_seqlens_q[b]"),
    Term(n.Nk, seq_end_k - seq_start_k, CLAIM, "keys of this segment: cu_seqlens_k[b+1] - cu_seqlens_k[b]"),
    Term(n.shift, masks.ALIGNMENT_SHIFT["bottom_right"], CLAIM,
         "bottom-right alignment per segment (FlashAttention): the last query sees the last key"),
)

#: the grid covers the longest segment, so a tile may start past a shorter segment's end. It then
#: gets an empty loop instead of an early ``return`` (which costs the compiled forward up to 65
#: registers per thread): a query tile past the segment's rows attends no key (forward, dQ), a
#: key tile past its keys is reached by no query row (dK/dV); their stores are masked anyway
ROWS_PAST_END = Term(n.Nk, sp.Piecewise((n.Nk, sp.Lt(n.start_m, n.Nq)), (0, True)), CLAIM,
                     "a query tile past this segment's rows attends no key: its loops are empty")
KEYS_PAST_END = Term(n.Nq, sp.Piecewise((n.Nq, sp.Lt(n.start_n, n.Nk)), (0, True)), CLAIM,
                     "a key tile past this segment's keys meets no query row: its loop is empty")

#: the alignment every segment uses (the reference passes it to spec.reference.attention)
ALIGNMENT = "bottom_right"


def segments(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int) -> list[tuple[int, int, int, int]]:
    """``[(q0, q1, k0, k1)]`` per segment from two offset vectors (any int sequence or tensor).

    Raises ``ValueError`` naming the problem: not one-dimensional, fewer than two entries,
    different lengths (a segment count must be shared), a first entry other than 0, a
    decreasing step, a last entry other than the packed total.
    """
    cus = {}
    for name, cu, total in (("cu_seqlens_q", cu_seqlens_q, total_q), ("cu_seqlens_k", cu_seqlens_k, total_k)):
        values = cu.tolist() if hasattr(cu, "tolist") else list(cu)
        if not isinstance(values, list) or any(isinstance(x, list) for x in values):
            raise ValueError(f"{name} must be one-dimensional (B + 1,), got {values!r}")
        if len(values) < 2:
            raise ValueError(f"{name} must hold B + 1 >= 2 offsets (one segment at least), got {values}")
        if values[0] != 0:
            raise ValueError(f"{name} must start at 0, got {name}[0] = {values[0]}")
        drops = [b for b in range(len(values) - 1) if values[b + 1] < values[b]]
        if drops:
            b = drops[0]
            raise ValueError(f"{name} must be non-decreasing (segment lengths >= 0), but {name}[{b + 1}] = "
                             f"{values[b + 1]} < {name}[{b}] = {values[b]}")
        if values[-1] != total:
            raise ValueError(f"{name} must end at the packed total {total} (the rows of "
                             f"{'q' if name.endswith('q') else 'k and v'}), got {name}[-1] = {values[-1]}")
        cus[name] = values
    cq, ck = cus["cu_seqlens_q"], cus["cu_seqlens_k"]
    if len(cq) != len(ck):
        raise ValueError(f"cu_seqlens_q has {len(cq)} entries and cu_seqlens_k {len(ck)}; both must hold B + 1 "
                         "(one query segment per key segment)")
    return [(cq[b], cq[b + 1], ck[b], ck[b + 1]) for b in range(len(cq) - 1)]


def packed_mask(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int, *, causal=False, window=None):
    """The whole packed batch as one dense bool mask ``(total_q, total_k)`` (True = attend): the
    block-diagonal of the segments, each block the predicate of ``spec.masks`` at the segment's
    lengths with bottom-right alignment. What a varlen call means, written as the dense mask a
    caller without varlen would pass (the benchmark's "dense bool mask" case, the docs' picture)."""
    kinds = tuple(kind for kind, on in (("causal", causal), ("window", window is not None)) if on)
    out = np.zeros((total_q, total_k), dtype=bool)
    for q0, q1, k0, k1 in segments(cu_seqlens_q, cu_seqlens_k, total_q, total_k):
        if q1 > q0 and k1 > k0:
            params = {"shift": masks.alignment_shift(ALIGNMENT, q1 - q0, k1 - k0)}
            if window is not None:
                params.update(window_left=window[0], window_right=window[1])
            out[q0:q1, k0:k1] = masks.dense_mask(kinds, q1 - q0, k1 - k0, **params) if kinds else True
    return out


# ----------------------------------------------------------------------------------
# Packed queries over paged caches (flash_attention_varlen(..., block_table=)): the decode launch's slots.
# The functions run unchanged on torch tensors (generator.runtime.varlen_paged calls them) and on the
# symbolic tensors of claim paged_varlen_slots (spec.proofs.varlen), which proves what they return.
# ----------------------------------------------------------------------------------
PAGED_CLAIM = "paged_varlen_slots"


def packed_tokens(cu_seqlens_q, total_q, ops):
    """Each packed query row's ``(segment, token, segment length)``, one entry per row ``r = 0 … total_q − 1``:
    segment ``s`` is the count of segment ends ``cu_seqlens_q[1:]`` at or before ``r`` (``searchsorted(...,
    right=True)``), so ``cu_seqlens_q[s] <= r < cu_seqlens_q[s + 1]`` (empty segments skipped); token ``r −
    cu_seqlens_q[s]``; length ``cu_seqlens_q[s + 1] − cu_seqlens_q[s]``. ``ops`` is ``torch`` in the runtime
    (``cu_seqlens_q`` a CPU tensor that ``segments`` checked) and claim paged_varlen_slots' symbolic namespace,
    which proves the map one to one onto the segments' tokens for every non-decreasing ``cu_seqlens_q``."""
    rows = ops.arange(total_q)
    seg = ops.searchsorted(cu_seqlens_q[1:], rows, right=True)
    start = cu_seqlens_q[seg]
    return seg, rows - start, cu_seqlens_q[seg + 1] - start


def paged_key_lengths(cu_seqlens_k):
    """Each segment's key count ``cu_seqlens_k[b + 1] − cu_seqlens_k[b]`` (``B`` entries): the decode launch's
    ``cache_seqlens``, segment ``b``'s keys ``0 … n_k − 1`` in its pages (claim paged_varlen_slots)."""
    return cu_seqlens_k[1:] - cu_seqlens_k[:-1]


def paged_slot(b, t, n_q, max_seqlen_q):
    """``(row, slot)`` of packed query token ``t`` of segment ``b`` (``n_q`` its queries) in the decode launch's
    queries ``(B, max_seqlen_q, Hq, D)``: row ``b``, slot ``max_seqlen_q − n_q + t`` — right-aligned, the first
    ``max_seqlen_q − n_q`` slots padding. The decode kernel aligns slot ``tok`` bottom-right, at key position
    ``tok + key_len − max_seqlen_q``: token t at ``key_len − n_q + t``, the segment's own bottom-right position.
    Numbers, tensors (one entry per token) or SymPy integers."""
    return b, max_seqlen_q - n_q + t


def paged_queries(q, rows, slots, batch, max_seqlen_q):
    """The decode launch's queries ``(batch, max_seqlen_q, Hq, D)``: zeros (the padding slots), token ``r`` of the
    packed ``q (total_q, Hq, D)`` at ``[rows[r], slots[r]]`` (``paged_slot``'s output)."""
    q_pad = q.new_zeros((batch, max_seqlen_q) + tuple(q.shape[1:]))
    q_pad[rows, slots] = q
    return q_pad


def paged_out(out, rows, slots):
    """The decode's ``out (B, max_seqlen_q, Hq, D_v)`` read back as varlen's ``(total_q, Hq, D_v)``: token ``r``'s
    row is ``out[rows[r], slots[r]]`` (the padding slots are never read)."""
    return out[rows, slots]


def paged_lse(lse, rows, slots):
    """The decode's ``lse (B, Hq, max_seqlen_q)`` read back in FlashAttention's varlen layout ``(Hq, total_q)``:
    element ``[h, r]`` is ``lse[rows[r], h, slots[r]]`` (torch puts the gathered dim first: ``(total_q, Hq)``,
    then transposed; a view, the caller makes it contiguous)."""
    return lse[rows, :, slots].t()
