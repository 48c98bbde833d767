"""Proofs for ring attention (``spec.ring``): the layouts, the causal block pairs, the merge order.

Two kinds of proof:

* integer statements over a *symbolic* world size ``P``, rank, source rank, chunk slots,
  chunk size and positions are handed to z3 (linear and non-linear integer arithmetic, with
  the classifier's ``floor``/``ceiling`` as integer division): PROVED when z3 reports the
  negation unsatisfiable, FAILED with z3's counterexample otherwise (or when z3 gives up);
* the merge-order statement is SymPy algebra on the state ``(m, d, o)`` (``spec.recurrences``),
  reduced to a canonical zero like every other claim, with an induction over symbolic ``P``.

Each ``prove_<claim>`` takes what it checks as arguments (layouts, classifier, merge), so a
test can feed a mutant and see FAILED.
"""

from __future__ import annotations

import sympy as sp
import z3

from spec import masks as M
from spec import notation as n
from spec import recurrences as R
from spec import ring as RG
from spec.proofs.tools import decide, equal_cases, result, state_cases
from spec.registry import claim


# ----------------------------------------------------------------------------------
# SymPy -> z3 for the integer terms of spec.ring and spec.masks.
# ----------------------------------------------------------------------------------
def to_z3(e, env: dict):
    """z3 term of an integer SymPy expression or condition; ``env`` maps its symbols. Real terms too
    (``env`` mapping to z3 reals): rationals, integer powers (negative: a quotient, reals only) and Abs
    (spec.proofs.score_mods' rational functions)."""
    e = sp.sympify(e)
    if e is sp.true or e is sp.false:
        return z3.BoolVal(bool(e))
    if e.is_Integer:
        return z3.IntVal(int(e))
    if e.is_Rational:
        return z3.RealVal(str(e))
    if e.is_Symbol:
        return env[e]
    if isinstance(e, sp.Pow) and e.exp.is_Integer:
        base, out = to_z3(e.base, env), z3.RealVal(1)
        for _ in range(abs(int(e.exp))):
            out = out * base
        return out if e.exp >= 0 else 1 / out
    if isinstance(e, sp.Abs):
        x = to_z3(e.args[0], env)
        return z3.If(x >= 0, x, -x)
    args = [to_z3(a, env) for a in e.args] if not isinstance(e, (sp.floor, sp.ceiling, sp.Piecewise)) else None
    if isinstance(e, sp.Add):
        return z3.Sum(args)
    if isinstance(e, sp.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(e, (sp.Max, sp.Min)):
        out = args[0]
        for a in args[1:]:
            out = z3.If(a > out, a, out) if isinstance(e, sp.Max) else z3.If(a < out, a, out)
        return out
    if isinstance(e, (sp.floor, sp.ceiling)):  # of num/den with den > 0: z3's div is floor division there
        num, den = (to_z3(x, env) for x in sp.fraction(sp.together(e.args[0])))
        return num / den if isinstance(e, sp.floor) else -((-num) / den)
    if isinstance(e, sp.Piecewise):
        (value, cond), rest = e.args[0], e.args[1:]
        other = to_z3(sp.Piecewise(*rest), env) if rest and rest[0][1] is not sp.true else to_z3(rest[0][0], env)
        return z3.If(to_z3(cond, env), to_z3(value, env), other)
    ops = {sp.Eq: lambda a, b: a == b, sp.Ne: lambda a, b: a != b, sp.Lt: lambda a, b: a < b,
           sp.Le: lambda a, b: a <= b, sp.Gt: lambda a, b: a > b, sp.Ge: lambda a, b: a >= b,
           sp.And: z3.And, sp.Or: z3.Or, sp.Not: z3.Not}
    if type(e) in ops:
        return ops[type(e)](*args)
    raise TypeError(f"no z3 form for {type(e).__name__}: {e}")


Z3_P, Z3_R, Z3_SRC, Z3_T, Z3_U, Z3_G, Z3_C, Z3_A, Z3_B = z3.Ints("P r src t u g C a b")


def _chunk(layout: RG.Layout, r, t):
    return to_z3(layout.chunk, {RG.P: Z3_P, RG.rank: r, RG.slot: t})


def _slot_range(layout: RG.Layout, t):
    return z3.And(0 <= t, t < layout.slots)


def _world():
    return [Z3_P >= 1, 0 <= Z3_R, Z3_R < Z3_P, 0 <= Z3_SRC, Z3_SRC < Z3_P]


# ----------------------------------------------------------------------------------
# Claims.
# ----------------------------------------------------------------------------------
@claim("ring_layout_partition",
       "for every world size P >= 1 (symbolic, z3) and each layout of spec.ring, the map (rank r, slot t) -> "
       "chunk is a bijection onto the P·T chunks with the stated inverse (owner, owner_slot), and a rank's "
       "slots hold increasing chunks: every key and every query lies in exactly one shard, in order",
       r"\forall P\ge 1:\ (r,t)\mapsto g(r,t)\ \text{is a bijection}\ [0,P)\times[0,T)\to[0,PT),"
       r"\ g(r,t)<g(r,t+1)", terms=(),
       scope="symbolic world size P, rank and chunk (z3), the layouts' fixed slot counts; mathematical "
             "integers Z (not int32), exact")
def prove_ring_layout_partition(layouts=None):
    layouts = RG.LAYOUTS if layouts is None else layouts
    cases = []
    for name, lay in layouts.items():
        g_of = _chunk(lay, Z3_R, Z3_T)
        env = {RG.P: Z3_P, RG.chunk: Z3_G}
        owner, owner_slot = to_z3(lay.owner, env), to_z3(lay.owner_slot, env)
        total = lay.slots * Z3_P
        slot_ok = _slot_range(lay, Z3_T)
        cases += [
            decide(f"{name}: chunk(r, t) in [0, P·T)", _world() + [slot_ok], z3.And(0 <= g_of, g_of < total)),
            decide(f"{name}: owner(g) holds g", [Z3_P >= 1, 0 <= Z3_G, Z3_G < total],
                     z3.And(0 <= owner, owner < Z3_P, 0 <= owner_slot, owner_slot < lay.slots,
                            _chunk(lay, owner, owner_slot) == Z3_G)),
            decide(f"{name}: owner(chunk(r, t)) = (r, t)", _world() + [slot_ok],
                     z3.And(z3.substitute(owner, (Z3_G, g_of)) == Z3_R,
                            z3.substitute(owner_slot, (Z3_G, g_of)) == Z3_T)),
            decide(f"{name}: slots in increasing order", _world() + [0 <= Z3_T, Z3_T + 1 < lay.slots],
                     g_of < _chunk(lay, Z3_R, Z3_T + 1)),
        ]
    return result("ring_layout_partition", cases, "z3 over symbolic P, r, t, g")


Z3_GQ, Z3_GK = z3.Ints("g_q g_k")


def _chunk_classes(layout: RG.Layout, conditions, step_pair=None):
    """z3 ``(visited, full)`` of the block pair (query chunk g_q, key chunk g_k) of a step, chunk
    size C: the classifier's inputs are ``spec.ring.step_pair``'s (what ``plan_step`` classifies
    with, its sequence length P·T·C included), on z3 terms, for any two chunks g_q, g_k."""
    step_pair = RG.step_pair if step_pair is None else step_pair
    sub = step_pair(layout.name, Z3_P, Z3_R, Z3_SRC, Z3_T, Z3_U, Z3_C,
                    chunk_of=lambda _name, _world, r, _t: Z3_GQ if r is Z3_R else Z3_GK)
    env = {sym: (value if isinstance(value, z3.ExprRef) else z3.IntVal(value)) for sym, value in sub.items()}
    return tuple(to_z3(c, env) for c in conditions)


def _visits(gq, gk):
    """The block classes at chunk granularity: the kernel visits key chunk g_k iff g_k <= g_q ..."""
    return gk <= gq


def _runs_full(gq, gk):
    """... and runs it without its mask iff g_k < g_q (every chunk of one position is full)."""
    return z3.Or(gk < gq, z3.And(Z3_C == 1, gk == gq))


def _attends(gq, gk, a, b):
    """Position gq·C + a attends gk·C + b (top-left causal, 0 <= a, b < C), linear in the chunks."""
    return z3.Or(gk < gq, z3.And(gk == gq, b <= a))


def _causal(alignment, i, j, n_q, n_k):
    """The spec's causal mask (``spec.masks.MASK_KINDS['causal']``, shift of ``alignment``) on z3
    positions: query ``i`` attends key ``j`` of an ``n_q`` x ``n_k`` problem."""
    pred = M.MASK_KINDS["causal"].predicate().subs(n.shift, M.ALIGNMENT_SHIFT[alignment])
    return to_z3(pred, {n.i: i, n.j: j, n.Nq: n_q, n.Nk: n_k})


def _slice_cases(name, lay, step_slices, classes):
    """The slices of each step's call (``step_slices``: what the runtime cuts q, k, v with): for every
    plan the step can take — no mask, the own shard, and another shard's plan whichever of
    ``spec.ring.step_plans`` matches its classes — the slices lie inside the shard, hold exactly the
    plan's slots, and the call (its mask, ``spec.ring.CALL_ALIGNMENT``) computes exactly the pairs
    the global mask attends: ``in rows ∧ in cols ∧ call mask ⟺ attended`` for every local query
    position x·C + a and key position y·C + b of the shard (slots x, y; offsets 0 <= a, b < C)."""
    world = _world() + [Z3_C >= 1]
    offsets = [0 <= Z3_A, Z3_A < Z3_C, 0 <= Z3_B, Z3_B < Z3_C]
    local = lay.slots * Z3_C  # the positions of a shard (the local q, the held K/V)
    situations = [("no mask", RG.unmasked_plan(lay.slots), [], lambda gq, gk: z3.BoolVal(True)),
                  ("own shard", RG.own_shard_plan(lay.slots), [Z3_SRC == Z3_R], None)]
    for plan in RG.step_plans(lay.slots):
        match = z3.And(*[classes[xy][plan.expected(*xy)] for xy in classes])
        situations.append((f"another shard, plan {plan.kind} rows {plan.rows} cols {plan.cols}", plan,
                           [Z3_SRC != Z3_R, match], None))
    cases = []
    for label, plan, hyp, attended in situations:
        attended = attended or (lambda gq, gk: _attends(gq, gk, Z3_A, Z3_B))  # the global causal mask
        (r0, r1), (c0, c1) = step_slices(plan, Z3_C)
        r0, r1, c0, c1 = (z3.IntVal(v) if isinstance(v, int) else v for v in (r0, r1, c0, c1))
        cases.append(decide(f"{name}, {label}: slices inside the shard [0, T·C)", world + hyp,
                              z3.And(0 <= r0, r0 <= r1, r1 <= local, 0 <= c0, c0 <= c1, c1 <= local)))
        exact, pairs = [], []
        for x in range(lay.slots):
            i = x * Z3_C + Z3_A
            exact.append((z3.And(r0 <= i, i < r1)) == z3.BoolVal(plan.rows[0] <= x < plan.rows[1]))
            exact.append((z3.And(c0 <= i, i < c1)) == z3.BoolVal(plan.cols[0] <= x < plan.cols[1]))
            for y in range(lay.slots):
                j = y * Z3_C + Z3_B
                call = _causal(RG.CALL_ALIGNMENT, i - r0, j - c0, r1 - r0, c1 - c0) if plan.causal else z3.BoolVal(True)
                computed = z3.And(r0 <= i, i < r1, c0 <= j, j < c1, call)
                pairs.append(computed == attended(_chunk(lay, Z3_R, z3.IntVal(x)), _chunk(lay, Z3_SRC, z3.IntVal(y))))
        cases.append(decide(f"{name}, {label}: the slices hold exactly the plan's slots", world + hyp + offsets,
                              z3.And(*exact)))
        cases.append(decide(f"{name}, {label}: the call computes exactly the attended pairs", world + hyp + offsets,
                              z3.And(*pairs)))
    # a slot's positions x·C + a are its own: a slice takes each position of the shard once
    a2 = z3.Int("a2")
    cases += [decide(f"{name}: slots {x} and {x2} hold disjoint positions", world + offsets + [0 <= a2, a2 < Z3_C],
                       x * Z3_C + Z3_A != x2 * Z3_C + a2)
              for x in range(lay.slots) for x2 in range(lay.slots) if x < x2]
    return cases


@claim("ring_causal_blocks",
       "for every P >= 1, rank, source rank, slots and chunk size C (symbolic, z3) and both layouts, the causal "
       "classifier at block granularity (the forward kernel's tile-loop terms with B_r = B_c = C), fed "
       "spec.ring.step_pair's inputs (the function plan_step classifies with, its sequence length P·T·C "
       "included), visits the key chunk g_k of query chunk g_q iff g_k <= g_q and runs it without a mask iff "
       "g_k < g_q (or C = 1), for any two chunks of the sequence; position g_q·C + a attends g_k·C + b "
       "(0 <= a, b < C) iff g_k < g_q or g_k = g_q and b <= a; hence, on each layout's chunks, it never skips a "
       "block pair with an attended (i, j), runs a full pair only when all of it is attended, calls a pair "
       "partial only on the diagonal (its mask is the chunk's top-left causal mask), the own shard's local "
       "top-left causal mask is the global one, and every other step's T x T classes match one of "
       "spec.ring.step_plans: one kernel call per step; and the slices the runtime cuts q, k, v (dO, O, lse, "
       "dQ, dK, dV) with, spec.ring.step_slices of the step's plan (no mask: unmasked_plan; the own shard: "
       "own_shard_plan; another shard: any step_plans entry matching its classes), lie inside the shard "
       "[0, T·C), hold exactly the plan's slots (a local position x·C + a is in the rows slice iff slot x is "
       "in the plan's rows; keys likewise; distinct slots' positions are disjoint), and the call on them "
       "(unmasked, or causal at spec.ring.CALL_ALIGNMENT: spec.masks' causal predicate on the sliced "
       "positions) computes exactly the (query, key) pairs of the rank's queries and the held shard that the "
       "global mask attends (every key without a mask)",
       r"\mathrm{visit}\iff g_k\le g_q,\ \ \mathrm{full}\iff g_k<g_q,\ \ "
       r"\mathrm{skip}\Rightarrow\forall (i,j): j>i,\ \ \mathrm{full}\Rightarrow\forall (i,j): j\le i,\ \ "
       r"\mathrm{partial}\Rightarrow g_q=g_k,\ \ \text{classes}\in\text{plans},\ \ "
       r"i\in\mathrm{rows}\wedge j\in\mathrm{cols}\wedge\mathrm{call}(i,j)\iff\mathrm{attends}(i,j)", terms=(),
       scope="symbolic P, ranks, slots, chunks and chunk size C = B_r = B_c (z3; the classifier and the "
             "positions with C symbolic, the layouts' consequences linear in the chunks, the slices for each "
             "plan at symbolic C and every concrete slot pair, each case in its own z3 context); causal "
             "top-left or no mask; mathematical integers Z (int32: int32_index_arithmetic covers the tile "
             "loop; the slices are host ints), exact")
def prove_ring_causal_blocks(layouts=None, conditions=None, step_pair=None, step_slices=None):
    layouts = RG.LAYOUTS if layouts is None else layouts
    conditions = RG.pair_conditions() if conditions is None else conditions
    step_slices = RG.step_slices if step_slices is None else step_slices
    offsets = [0 <= Z3_A, Z3_A < Z3_C, 0 <= Z3_B, Z3_B < Z3_C]
    # the positions: gq·C + a attends gk·C + b under the global causal mask (N_Q = N_K = N: either
    # alignment) iff the chunks do, at chunk granularity (C symbolic)
    n_total = z3.Int("N")
    cases = [decide("positions: attended at chunk granularity", [Z3_C >= 1] + offsets,
                      _causal("top_left", Z3_GQ * Z3_C + Z3_A, Z3_GK * Z3_C + Z3_B, n_total, n_total)
                      == _attends(Z3_GQ, Z3_GK, Z3_A, Z3_B))]
    for name, lay in layouts.items():
        world = _world() + [Z3_C >= 1]
        n_chunks = lay.slots * Z3_P
        # 1. the kernel's classifier on step_pair's inputs, for any two chunks of the sequence
        visited, full = _chunk_classes(lay, conditions, step_pair)
        chunks = [0 <= Z3_GQ, Z3_GQ < n_chunks, 0 <= Z3_GK, Z3_GK < n_chunks]
        cases += [
            decide(f"{name}: visits key chunk g_k iff g_k <= g_q", world + chunks,
                     visited == _visits(Z3_GQ, Z3_GK)),
            decide(f"{name}: runs key chunk g_k unmasked iff g_k < g_q", world + chunks,
                     full == _runs_full(Z3_GQ, Z3_GK)),
        ]
        # 2. the layout's chunks (linear in P, r, src): which pairs the classes cover
        gq, gk = _chunk(lay, Z3_R, Z3_T), _chunk(lay, Z3_SRC, Z3_U)
        inside = [_slot_range(lay, Z3_T), _slot_range(lay, Z3_U)] + offsets
        in_sequence = z3.And(0 <= gq, gq < n_chunks, 0 <= gk, gk < n_chunks)  # where step 1 holds
        v, f, att = _visits(gq, gk), _runs_full(gq, gk), _attends(gq, gk, Z3_A, Z3_B)
        cases += [
            decide(f"{name}: never skips an attended pair", world + inside, z3.And(in_sequence, z3.Implies(att, v))),
            decide(f"{name}: full pairs are fully attended", world + inside, z3.Implies(f, att)),
            decide(f"{name}: partial pairs are diagonal", world + inside, z3.Implies(z3.And(v, z3.Not(f)), gq == gk)),
        ]
        # the own shard (src = r): the top-left causal mask on the shard's local positions
        # (slot·C + offset) is the global one (the local one at chunk granularity: the positions case)
        cases.append(decide(f"{name}: own shard: local causal mask = global", world + inside + [Z3_SRC == Z3_R],
                              att == _attends(Z3_T, Z3_U, Z3_A, Z3_B)))
        # another rank's shard: the step's class matrix (concrete slots) matches a one-call plan
        classes = {}
        for x in range(lay.slots):
            for y in range(lay.slots):
                cq, ck = _chunk(lay, Z3_R, z3.IntVal(x)), _chunk(lay, Z3_SRC, z3.IntVal(y))
                v, f = _visits(cq, ck), _runs_full(cq, ck)
                classes[x, y] = {RG.EMPTY: z3.Not(v), RG.FULL: z3.And(v, f), RG.PARTIAL: z3.And(v, z3.Not(f))}
        plans = [z3.And(*[classes[xy][plan.expected(*xy)] for xy in classes]) for plan in RG.step_plans(lay.slots)]
        cases.append(decide(f"{name}: another shard's step matches a one-call plan", world + [Z3_SRC != Z3_R],
                              z3.Or(*plans)))
        # 3. the slices the runtime takes (spec.ring.step_slices) for each plan a step can take
        cases += _slice_cases(name, lay, step_slices, classes)
    return result("ring_causal_blocks", cases, "z3 over symbolic P, r, src, slots, chunks, C, positions")


def _step_of_case(layout: str, step_of, max_world: int = 4) -> tuple[str, object]:
    """The runtime's step (``spec.ring.step_of``) for every P <= ``max_world``, rank, step and mask: it holds the
    shard of ``source_rank(r, s, P)``, and its plan computes block pair (query slot x, key slot y) exactly as the
    global causal mask classes chunk ``chunks_of(r)[x]`` against ``chunks_of(src)[y]`` (unmasked: every pair
    full; the own shard: the causal call)."""
    slots = RG.LAYOUTS[layout].slots
    for P in range(1, max_world + 1):
        for r in range(P):
            for s in range(P):
                src = RG.source_rank(r, s, P)
                qc, kc = RG.chunks_of(layout, P, r), RG.chunks_of(layout, P, src)
                for causal in (False, True):
                    got, plan = step_of(layout, P, r, s, causal, 2)
                    ok = got == src
                    if not causal:
                        ok = ok and plan == RG.unmasked_plan(slots)
                    elif src == r:
                        ok = ok and plan == RG.own_shard_plan(slots)
                    else:
                        ok = ok and all(plan.expected(x, y) == (RG.FULL if kc[y] < qc[x] else RG.EMPTY)
                                        for x in range(slots) for y in range(slots))
                    if not ok:
                        return (f"{layout}: the runtime's step (step_of) holds source_rank's shard and plans its "
                                f"chunks' causal pairs", sp.Symbol(f"P{P}_rank{r}_step{s}_causal{int(causal)}"))
    return (f"{layout}: the runtime's step (step_of) holds source_rank's shard and plans its chunks' causal pairs",
            sp.Integer(0))


@claim("ring_schedule",
       "the K/V shard a rank holds at each step of the ring is the one plan_step is asked about: for every "
       "P >= 1, rank 0 <= r < P and step 0 <= s < P - 1 (symbolic, z3; the ring runs steps 0 … P − 1), "
       "spec.ring.source_rank(r, 0, P) = r, source_rank(r, s + 1, P) = source_rank(previous_rank(r, P), s, P) (the shard received at step s + 1 "
       "is the one the previous rank held at step s) and previous_rank(next_rank(r)) = r (each send meets its "
       "receive); the runtime takes its peers from these functions and each step's source and plan from "
       "spec.ring.step_of, which for every P <= 4, rank, step, layout and mask holds source_rank's shard and plans "
       "block pair (query slot x, key slot y) full exactly where the rank's chunk x lies after the source's chunk y "
       "(unmasked: every pair; the own shard: the causal call)",
       r"\mathrm{src}(r,0)=r,\quad \mathrm{src}(r,s+1)=\mathrm{src}(\mathrm{prev}(r),s)", terms=(),
       scope="symbolic P, rank and step (z3, integer mod); the runtime's step: every P <= 4 (concrete, both "
             "layouts, chunk size 2); mathematical integers Z, exact")
def prove_ring_schedule(source_rank=None, previous_rank=None, next_rank=None, step_of=None):
    source_rank = RG.source_rank if source_rank is None else source_rank
    previous_rank = RG.previous_rank if previous_rank is None else previous_rank
    next_rank = RG.next_rank if next_rank is None else next_rank
    s = z3.Int("s")
    world = [Z3_P >= 1, 0 <= Z3_R, Z3_R < Z3_P]
    prev = previous_rank(Z3_R, Z3_P)
    cases = [
        decide("step 0: a rank holds its own shard", world, source_rank(Z3_R, 0, Z3_P) == Z3_R),
        decide("previous_rank(r) is a rank", world, z3.And(0 <= prev, prev < Z3_P)),
        decide("step s + 1: the shard the previous rank held at step s", world + [s >= 0, s + 1 < Z3_P],
                 source_rank(Z3_R, s + 1, Z3_P) == source_rank(prev, s, Z3_P)),
        decide("a send to next_rank meets that rank's receive from previous_rank", world,
                 previous_rank(next_rank(Z3_R, Z3_P), Z3_P) == Z3_R),
    ]
    step_of = RG.step_of if step_of is None else step_of
    cases += [_step_of_case(layout, step_of) for layout in RG.LAYOUTS]
    return result("ring_schedule", cases, "z3 over symbolic P, r, s; the runtime's step for every P <= 4")


@claim("ring_merge_order",
       "ring attention merges the P steps' states in arrival order with ⊕: for every P >= 0 (induction with "
       "symbolic sums) α(s_1 ⊕ … ⊕ s_P) = Σ_k α(s_k), an empty step (E) adding 0; swapping two adjacent arrivals "
       "leaves the state unchanged (each of x, a, b finite or E), so every arrival order gives the same state; "
       "with ring_layout_partition (each key in one shard), merge_homomorphism and lse_merge, every rank's "
       "(o, lse) equals single-device attention in exact arithmetic, for any P, layout and arrival order",
       r"\alpha\Big(\bigoplus_{k=1}^{P} s_{\pi(k)}\Big)=\sum_{k=1}^{P}\alpha(s_k)\ \ \forall P,\ \forall\pi",
       terms=(), scope="any P by induction (symbolic sums), adjacent swaps on symbolic states (finite or E); "
                       "reals, exact (not the fp32 rounding of the merges)")
def prove_ring_merge_order(merge=R.merge):
    k = sp.Symbol("k", integer=True)
    Pn = sp.Symbol("P", integer=True, nonnegative=True)
    A, Bv = sp.IndexedBase("A", positive=True), sp.IndexedBase("B", real=True)  # α of step k: (Σ e^x, Σ e^x v)
    M, m = sp.symbols("M m", real=True)

    def state_with_alpha(mx, ad, ao):  # a finite state whose α is (ad, ao), max mx
        return R.State(mx, ad * sp.exp(-mx), ao * sp.exp(-mx))

    def peel(total):
        f, (kk, lo, hi) = total.function, total.limits[0]
        return sp.Sum(f, (kk, lo, hi - 1)) + f.subs(kk, hi)

    sum_a, sum_b = sp.Sum(A[k], (k, 1, Pn)), sp.Sum(Bv[k], (k, 1, Pn))
    folded = state_with_alpha(M, sum_a, sum_b)  # induction hypothesis: α(fold of P steps) = Σ α(s_k)
    step = state_with_alpha(m, A[Pn + 1], Bv[Pn + 1])
    goal = (peel(sp.Sum(A[k], (k, 1, Pn + 1))), peel(sp.Sum(Bv[k], (k, 1, Pn + 1))))
    pairs = [
        ("base P = 0: α(E) = empty sum", R.alpha_map(merge(R.E, R.E)), (0, 0)),
        ("step P -> P+1 (a non-empty step)", R.alpha_map(merge(folded, step)), goal),
        ("step P -> P+1 (an empty step: E)", R.alpha_map(merge(folded, R.E)), (sum_a, sum_b)),
        ("step from E (every earlier step empty)", R.alpha_map(merge(R.E, step)), (A[Pn + 1], Bv[Pn + 1])),
    ]
    pairs += [(f"swap adjacent arrivals [{label}]", merge(merge(x, a), b), merge(merge(x, b), a))
              for label, (x, a, b) in state_cases("xab")]
    # instance: zigzag, P = 2, rank 0 (chunks 0, 3) — the steps it runs in both arrival orders
    chunks = [R.key_state(*sp.symbols(f"x_{g} v_{g}", real=True)) for g in range(4)]
    single = R.fold(chunks[:1], merge)  # query chunk 0 attends chunk 0 only; chunk 3 attends 0..3
    own, other = merge(chunks[0], chunks[3]), merge(chunks[1], chunks[2])
    last_row = R.fold(chunks, merge)
    pairs += [
        ("zigzag P=2, rank 0, slot 0: own shard, then rank 1's (E)", R.alpha_map(merge(merge(R.E, chunks[0]), R.E)),
         R.alpha_map(single)),
        ("zigzag P=2, rank 0, slot 1: arrival (0, 1)", R.alpha_map(merge(own, other)), R.alpha_map(last_row)),
        ("zigzag P=2, rank 0, slot 1: arrival (1, 0)", R.alpha_map(merge(other, own)), R.alpha_map(last_row)),
    ]
    return result("ring_merge_order", equal_cases(pairs), "induction on P, adjacent swaps, a P=2 instance")
