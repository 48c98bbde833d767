"""Ring attention (context parallelism): which keys a rank holds, and which block pairs it runs.

A sequence of ``N`` positions is cut into ``P·T`` equal *chunks* of ``C = N / (P·T)``
positions; rank ``r`` holds ``T`` of them, concatenated in increasing order (its *shard*):

* ``contiguous`` (``T = 1``): rank ``r`` holds chunk ``r``;
* ``zigzag`` (``T = 2``): rank ``r`` holds chunks ``r`` and ``2P − 1 − r`` — under a causal
  mask every rank then has the same work (ring-flash-attention's layout).

The same layout places q, k and v. At step ``s`` of the ring, rank ``r`` holds the K/V shard
of rank ``src = (r − s) mod P`` and runs its query chunks against that shard's key chunks:
``T × T`` *block pairs*. Under a causal mask each pair is classified by the kernels' own tile
classifier (``spec.masks``: the terms ``BOUNDS_INIT``, ``bounds_terms("causal")`` and
``TILE_LOOP`` the forward kernel prints) at *block granularity*: ``B_r = B_c = C``, the query
tile starting at the query chunk's first position and the key tile at the key chunk's. A key
tile before ``kv_lo`` or from ``kv_hi`` on is skipped (*empty*: its state is ⊕'s identity E),
one in ``[full_lo, full_hi)`` is *full* (no mask), any other is *partial* — for chunk-aligned
pairs exactly the *diagonal* pair, whose mask is the top-left causal mask of the chunk.

Every step is one kernel call (``plan_step``): the rank's own shard (step 0) runs the top-left
causal kernel over the whole shard; another rank's shard runs the rectangle of its full pairs
(``step_plans``), or nothing. Claim ``ring_causal_blocks`` (``spec.proofs.ring``) proves, for
symbolic ``P``, rank, source rank, slots, chunk size and positions, that the classifier never
skips an attended pair, that full pairs are fully attended, that partial pairs are diagonal,
that the own shard's local causal mask is the global one, that every other step's classes
match a plan, and that the slices the runtime cuts q, k, v with (``step_slices`` of the plan) lie
inside the shard, hold exactly the plan's slots, and make the call compute exactly the pairs the
global mask attends. Claim ``ring_layout_partition`` proves each layout gives every
chunk to exactly one (rank, slot); claim ``ring_merge_order`` proves that merging the steps'
partial results by ⊕ in any arrival order equals single-device attention.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy as sp

from spec import masks as M
from spec import notation as n
from spec import terms as T

#: world size, rank, slot of a chunk within a rank's shard, global chunk index
P, rank, slot, chunk = sp.symbols("P r t g", integer=True)


@dataclass(frozen=True)
class Layout:
    """How a sequence is cut among ``P`` ranks: ``slots`` chunks per rank; ``chunk`` is the
    global chunk index of slot ``t`` of rank ``r`` (SymPy, in ``P``, ``r``, ``t``); ``owner``
    and ``owner_slot`` invert it (rank and slot holding global chunk ``g``)."""

    name: str
    slots: int
    chunk: sp.Expr
    owner: sp.Expr
    owner_slot: sp.Expr
    doc: str


LAYOUTS: dict[str, Layout] = {
    lay.name: lay
    for lay in (
        Layout("contiguous", 1, rank, chunk, sp.Integer(0), "rank r holds positions [r·C, (r+1)·C)"),
        Layout("zigzag", 2,
               sp.Piecewise((rank, sp.Eq(slot, 0)), (2 * P - 1 - rank, True)),
               sp.Piecewise((chunk, chunk < P), (2 * P - 1 - chunk, True)),
               sp.Piecewise((0, chunk < P), (1, True)),
               "rank r holds chunks r and 2P−1−r of C = N/(2P) positions (balanced causal work)"),
    )
}


@functools.lru_cache(maxsize=None)
def chunks_of(layout: str, world_size: int, rank_: int) -> tuple[int, ...]:
    """The global chunk indices of a rank's shard, slot by slot (numbers)."""
    lay = LAYOUTS[layout]
    return tuple(int(lay.chunk.subs({P: world_size, rank: rank_, slot: t})) for t in range(lay.slots))


# ----------------------------------------------------------------------------------
# The causal classifier at block granularity: the forward kernel's tile loop (printed terms,
# claim mask_tiles_sound) with one chunk per tile.
# ----------------------------------------------------------------------------------
#: kv_lo, kv_hi, full_lo, full_hi of a query tile, as closed forms in start_m, B_r, B_c, N_K, shift
CAUSAL_LOOP = T.chain(M.BOUNDS_INIT + tuple(M.bounds_terms("causal")) + M.TILE_LOOP)


def sequence_length(layout: str, world_size, size):
    """The positions of the whole sequence: ``P·T`` chunks of ``size`` (numbers or symbols)."""
    return world_size * LAYOUTS[layout].slots * size


def chunk_index(layout: str, world_size, rank_, slot_):
    """Global chunk of slot ``slot_`` of rank ``rank_`` (numbers: ``chunks_of``)."""
    return chunks_of(layout, world_size, rank_)[slot_]


def step_pair(layout: str, world_size, rank_, src, x, y, size, chunk_of=chunk_index) -> dict:
    """The classifier's inputs for block pair (query slot ``x`` of ``rank_``, key slot ``y`` of the
    K/V shard of ``src``) of a step: the one function ``plan_step`` classifies with and claim
    ``ring_causal_blocks`` quantifies over (``chunk_of``: how a slot's chunk is computed, numbers
    here, z3 terms in the proof)."""
    return pair_substitution(chunk_of(layout, world_size, rank_, x), chunk_of(layout, world_size, src, y), size,
                             sequence_length(layout, world_size, size))


def next_rank(rank_, world_size):
    """The rank this one sends its K/V shard to at every step."""
    return (rank_ + 1) % world_size


def previous_rank(rank_, world_size):
    """The rank this one receives a K/V shard from at every step."""
    return (rank_ - 1) % world_size


def source_rank(rank_, step, world_size):
    """Whose K/V shard ``rank_`` holds at ``step``: its own at step 0, then, received from
    ``previous_rank`` once a step, the shard of ``rank_ − step`` (claim ``ring_schedule``)."""
    return (rank_ - step) % world_size


def pair_substitution(q_chunk, k_chunk, size, total) -> dict:
    """The classifier's inputs for the block pair (query chunk, key chunk) of ``size``
    positions in a sequence of ``total`` (top-left causal: ``shift = 0``), and the key tile's
    start ``start_n``."""
    return {n.start_m: q_chunk * size, n.start_n: k_chunk * size, n.B_r: size, n.B_c: size,
            n.Nq: total, n.Nk: total, n.shift: 0}


def pair_conditions(loop=None) -> tuple[sp.Basic, sp.Basic]:
    """``(visited, full)`` for the key tile starting at ``start_n``: the kernel visits tiles
    ``[kv_lo, kv_hi)`` and runs ``[full_lo, full_hi)`` without a mask. ``loop`` (default
    ``CAUSAL_LOOP``) lets a test feed a mutated classifier."""
    loop = CAUSAL_LOOP if loop is None else loop
    lo, hi, flo, fhi = (loop[s] for s in M.KEY_LOOP)
    return (sp.And(lo <= n.start_n, n.start_n < hi), sp.And(flo <= n.start_n, n.start_n < fhi))


EMPTY, FULL, PARTIAL = "empty", "full", "partial"


@functools.lru_cache(maxsize=None)
def _pair_class_fn():
    visited, full = pair_conditions()
    args = [n.start_m, n.start_n, n.B_r, n.B_c, n.Nq, n.Nk, n.shift]
    return sp.lambdify(args, visited, "math"), sp.lambdify(args, full, "math"), args


def classify(substitution: dict) -> str:
    """'empty' / 'full' / 'partial' of one causal block pair (numbers: ``step_pair``'s output),
    from ``pair_conditions``."""
    visited, full, args = _pair_class_fn()
    values = [substitution[a] for a in args]
    return EMPTY if not visited(*values) else FULL if full(*values) else PARTIAL


def classify_pair(q_chunk: int, k_chunk: int, size: int, total: int) -> str:
    """``classify`` of the pair (query chunk, key chunk) of ``size`` positions in a sequence of ``total``."""
    return classify(pair_substitution(q_chunk, k_chunk, size, total))


# ----------------------------------------------------------------------------------
# Step plans: one kernel call per step.
# ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepPlan:
    """The one kernel call of a step: ``kind`` 'empty' (no call: the step contributes E), 'full'
    (query slots ``rows`` against key slots ``cols``, no mask) or 'causal' (the rank's own
    shard: all its slots against all, top-left causal — the global mask there, since a shard's
    slots hold increasing chunks)."""

    kind: str
    rows: tuple[int, int]  # slots [start, stop)
    cols: tuple[int, int]

    @property
    def causal(self) -> bool:
        """Whether the call runs under the causal mask (aligned ``CALL_ALIGNMENT``), else unmasked."""
        return self.kind == "causal"

    def expected(self, x: int, y: int) -> str:
        """The class of block pair (query slot x, key slot y) this plan computes correctly."""
        inside = self.rows[0] <= x < self.rows[1] and self.cols[0] <= y < self.cols[1]
        return FULL if self.kind == "full" and inside else EMPTY


#: the alignment of a step's causal call: the own shard's slots against themselves, top-left
CALL_ALIGNMENT = "top_left"


def unmasked_plan(slots: int) -> StepPlan:
    """Without a mask: every query slot against every key slot of the shard, no mask."""
    return StepPlan("full", (0, slots), (0, slots))


def own_shard_plan(slots: int) -> StepPlan:
    """The rank's own shard under a causal mask: all its slots against all, top-left causal."""
    return StepPlan("causal", (0, slots), (0, slots))


def step_slices(plan: StepPlan, size):
    """``((row_start, row_stop), (col_start, col_stop))``: the positions of the rank's local q (and
    dO, O, lse, dQ) and of the held K/V shard (and its dK, dV) that the step's kernel call reads and
    writes, the plan's slots ``[start, stop)`` times the chunk size ``size`` (numbers, or z3 terms in
    claim ``ring_causal_blocks``, which proves they are exactly the plan's slots, inside the shard)."""
    return tuple((span[0] * size, span[1] * size) for span in (plan.rows, plan.cols))


@functools.lru_cache(maxsize=None)
def step_plans(slots: int) -> tuple[StepPlan, ...]:
    """The plans of a step on another rank's shard, for ``slots`` chunks per rank: empty, or a
    full rectangle of consecutive slots."""
    spans = [(a, b) for a in range(slots) for b in range(a + 1, slots + 1)]
    return (StepPlan("empty", (0, 0), (0, 0)),) + tuple(StepPlan("full", rows, cols) for rows in spans for cols in spans)


@functools.lru_cache(maxsize=None)
def step_of(layout: str, world_size: int, rank_: int, step: int, causal: bool, size: int) -> tuple[int, StepPlan]:
    """``(src, plan)`` of ``rank_``'s step ``step``: the rank whose K/V shard it holds (``source_rank``) and the
    plan of its queries against that shard (``plan_step``); the runtime's step (claim ring_schedule checks the
    plan's block pairs against the global causal mask of the rank's and the source's chunks)."""
    src = source_rank(rank_, step, world_size)
    return src, plan_step(layout, world_size, rank_, src, causal, size)


def plan_step(layout: str, world_size: int, rank_: int, src: int, causal: bool, size: int) -> StepPlan:
    """The plan of the step where ``rank_`` holds the K/V shard of ``src`` (chunks of ``size``
    positions). Without a mask every pair is full; with one, the own shard is the causal plan
    and another rank's shard is classified pair by pair (causal, block granularity), the
    classes matching one of ``step_plans`` (claim ``ring_causal_blocks``: one always does)."""
    slots = LAYOUTS[layout].slots
    if not causal:
        return unmasked_plan(slots)
    if src == rank_:
        return own_shard_plan(slots)
    classes = {(x, y): classify(step_pair(layout, world_size, rank_, src, x, y, size))
               for x in range(slots) for y in range(slots)}
    for plan in step_plans(slots):
        if all(classes[x, y] == plan.expected(x, y) for x, y in classes):
            return plan
    raise AssertionError(f"no step plan matches the classes {classes} ({layout}, P={world_size}, "
                         f"rank {rank_}, K/V of rank {src}); claim ring_causal_blocks says this cannot happen")
