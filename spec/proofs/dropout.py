"""Proofs about attention dropout (issue 29): one keep decision, and the gradients through it.

The kernels print ``terms.DROPOUT_BASE`` once per (batch, query head) and ``terms.DROPOUT_KEEP``
per element, in the forward, the dK/dV and the dQ kernel (``generator.render`` prints the same
two Term objects into all three, only the tile layout of ``i``, ``j`` differs), then
``terms.DROPOUT_P`` (forward), ``terms.DROPOUT_DV_T`` / ``DROPOUT_DP_T`` (dK/dV) and
``terms.DROPOUT_DP`` (dQ). Two claims:

* ``dropout_mask_same``: the keep decision is a function of ``(seed, rng_offset, b, h, i, j)``
  only (no tile start, tile size or loop counter: so no tile order can change it), through a
  Philox counter that is the mixed-radix index of ``(b, h, i, j)`` plus the call's offset,
  injective on the accepted sizes and computed in int64 without wrap-around (z3 over the
  integers, each printed operation's value in [0, 2^63)). Hence the backward's mask equals the
  forward's at every element: Triton's ``tl.rand`` is a pure function of (seed, counter).
* ``dropout_grads``: with ``Z`` the keep mask, ``O = (Z ∘ P/(1 − p)) V``: the printed forward
  keeps l (so lse) undropped and accumulates the dropped P; the printed backward gives
  ``dV = (Z ∘ P/(1 − p))ᵀ dO`` and ``dS = P ∘ (Z ∘ dP/(1 − p) − Δ)`` with ``Δ = rowsum(dO ∘ O)``
  (the preprocess's unchanged term), in both tile layouts: ``sp.diff`` of the loss.

``dropout_mask_same`` also reads each kernel's box (``terms.DROPOUT_BOXES``, printed per kernel, and a packed
batch's ``DROPOUT_BOX_PACKED``) at the integers ``spec.launch`` passes it (``box_launches``): the dK/dV program
knows the query heads as ``H_KV·GROUP``, the others as ``H``, and a box of ``H_KV`` heads fails it.

Each ``prove_<id>`` takes the terms under test as arguments; ``tests/test_mutants.py`` feeds
mutants (a wrong radix, a tile coordinate in the counter, an undropped dV, a dP without the
rescale, a dropped denominator) and watches the claims FAIL.
"""

from __future__ import annotations

import itertools
import warnings

import sympy as sp
import z3

from spec import notation as n
from spec import terms
from spec.proofs.tools import ZERO, interpret, reduce_zero, result, run_terms, z3_verdict
from spec.registry import claim

#: the coordinates and keys the keep decision may depend on; anything else (a tile start, a
#: block size, a loop counter) would make it depend on the tiling
COORDINATES = frozenset({n.drop_seed, n.rng_offset, n.drop_b, n.drop_heads, n.off_h, n.drop_nq, n.drop_nk,
                         n.drop_i0, n.drop_j0, n.i, n.j, n.dropout_p})
#: int64: the kernels compute the counter from int64 operands (off_b, off_h and the loaded offset
#: are int64; the row index is cast to int64 before its product)
INT64_MAX = 2**63 - 1
#: the accepted sizes (spec.assumptions: dropout_counter): B·H·N_q·N_k and the call's offset
#: each at most 2^62, so their sum stays below 2^63
COUNTER_LIMIT = 2**62


def _counter(base=terms.DROPOUT_BASE, keep=terms.DROPOUT_KEEP):
    """The Philox counter the printed keep term draws at, with the base substituted, and its seed."""
    draws = list(keep.expr.atoms(terms.philox_uniform))
    if len(draws) != 1:
        return None, None
    seed, offset = draws[0].args
    return seed, offset.xreplace({base.symbol: base.expr})


def _z3(expr, env):
    """A SymPy integer polynomial (Add, Mul, Symbol, Integer) as a z3 Int term, plus every
    intermediate value of the printed left-to-right evaluation (partial sums and products)."""
    parts = []

    def go(e):
        if isinstance(e, sp.Symbol):
            return env[e]
        if isinstance(e, sp.Integer):
            return z3.IntVal(int(e))
        if isinstance(e, (sp.Add, sp.Mul)):
            vals = [go(a) for a in e.args]
            acc = vals[0]
            for v in vals[1:]:
                acc = acc + v if isinstance(e, sp.Add) else acc * v
                parts.append(acc)
            return acc
        raise ValueError(f"no integer rule for {e!r}")
    return go(expr), parts


def box_launches(forward_launch=None, dropout_mask_launch=None, dkdv_launch=None, dq_launch=None,
                 dropout_mask_shape=None) -> dict:
    """``(packed?) -> {kernel: ints}``: the integers spec.launch passes each kernel that draws the mask, on
    symbolic tensors of one call: q ``(B, Hkv·G, N_q, D)``, k ``(B, Hkv, N_k, D)`` (packed: ``(total_q, Hkv·G, D)``,
    ``(total_k, Hkv, D)``), the dropout_mask helper's keep of the shape the host allocates,
    ``spec.launch.dropout_mask_shape(q, k)`` (the claim proves it ``(B, Hkv·G, N_q, N_k)``; packed ``(1, Hkv·G,
    total_q, total_k)``, the mask of the packed batch)."""
    from spec import addresses as A
    from spec import launch as L

    forward_launch = forward_launch or L.forward_launch
    dropout_mask_launch = dropout_mask_launch or L.dropout_mask_launch
    dropout_mask_shape = dropout_mask_shape or L.dropout_mask_shape
    dkdv_launch, dq_launch = dkdv_launch or L.dkdv_launch, dq_launch or L.dq_launch
    B, Hkv, G = sp.Symbol("B", integer=True, positive=True), sp.Symbol("Hkv", integer=True, positive=True), GQA_GROUP
    Hq = Hkv * G
    out = {}
    for packed in (False, True):
        if packed:
            total_q, total_k = (sp.Symbol(x, integer=True, positive=True) for x in ("total_q", "total_k"))
            rows, keys, lead = (total_q,), (total_k,), ()
            cu = A.symbolic("cu_seqlens_q", (B + 1,))
            extra = dict(cu_seqlens_q=cu)
        else:
            N_q, N_k = (sp.Symbol(x, integer=True, positive=True) for x in ("N_q", "N_k"))
            rows, keys, lead, extra = (N_q,), (N_k,), (B,), {}
        heads_first = lambda name, h, n_, d: A.symbolic(name, (*lead, h, *n_, d) if not packed  # noqa: E731
                                                        else (*n_, h, d))
        q, do, dq = (heads_first(x, Hq, rows, "D") for x in ("q", "do", "dq"))
        k, v, dk, dv = (heads_first(x, Hkv, keys, "D") for x in ("k", "v", "dk", "dv"))
        o = heads_first("out", Hq, rows, "D")
        lse = A.symbolic("lse", (*lead, Hq, *rows))
        nq, nk = rows[0], keys[0]
        rest = (A.symbolic("key_lengths", (B,)), A.symbolic("mask", (B, Hq, nq, nk)),
                A.symbolic("block_map", (B, Hq, 1, 1)), A.symbolic("alibi_slopes", (Hq,)))
        keep = dropout_mask_shape(q, k)
        ints = {
            "forward": forward_launch(q, k, v, o, lse, *rest, A.symbolic("sinks", (Hq,)), n.B_r,
                                      **({"max_seqlen_q": nq} if packed else {}), **extra)[1],
            "dropout_mask": dropout_mask_launch(A.symbolic("keep", keep), n.B_r)[1],
            "dkdv": dkdv_launch(q, k, v, do, dk, dv, lse, *rest, n.B_c,
                                **({"max_seqlen_k": nk} if packed else {}), **extra)[1],
            "dq": dq_launch(q, k, v, do, dq, lse, *rest, n.B_r, **({"max_seqlen_q": nq} if packed else {}), **extra)[1],
        }
        out[packed] = (ints, Hq, nq, nk, (1 if packed else B, keep))
    return out


#: the query heads per K/V head of the call (GQA; 1: MHA)
GQA_GROUP = sp.Symbol("G", integer=True, positive=True)
#: the coordinates of one element: batch entry (packed: the segment), query head, row and key of its slice
_b, _h = sp.Symbol("b", integer=True, nonnegative=True), sp.Symbol("h", integer=True, nonnegative=True)


def _box_at(box, ints, b):
    """``{drop_*: value}`` of a printed box run in order, its kernel names bound to the launch's ``ints`` and the
    program's batch entry ``off_b = b``."""
    env = terms.chain(box)
    names = {s for e in env.values() for s in sp.sympify(e).free_symbols}
    bind = {s: sp.sympify(ints[s.name]) for s in names if s.name in ints}
    bind.update({s: b for s in names if s.name == "off_b"})
    return {sym: sp.sympify(e).xreplace(bind) for sym, e in env.items()}


def box_cases(counter, boxes=terms.DROPOUT_BOXES, packed_box=terms.DROPOUT_BOX_PACKED, launches=None):
    """Every kernel that draws the mask, at its printed box and its launch's integers, draws at element
    ``(b, h, i, j)`` of its slice the counter the dropout_mask helper draws at ``keep[b, h, i, j]`` (packed:
    ``keep[0, h, cu_seqlens_q[b] + i, cu_seqlens_k[b] + j]``)."""
    cases = []
    launches = box_launches() if launches is None else launches
    I, J = sp.symbols("I J", integer=True, nonnegative=True)
    seq_q, seq_k = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("seq_start_q", "seq_start_k"))
    for packed, (ints, Hq, nq, nk, (batch, keep)) in launches.items():
        tag = "packed" if packed else "dense"
        # the keep mask the host allocates (spec.launch.dropout_mask_shape): one element per (b, query head, row, key)
        cases.append((f"{tag}: the host's keep mask is ({'1' if packed else 'B'}, H_q, N_q, N_k)",
                      ZERO if len(keep) == 4 and all(sp.expand(sp.sympify(a) - b) == 0
                                                     for a, b in zip(keep, (batch, Hq, nq, nk)))
                      else sp.Tuple(*keep)))
        # the dropout_mask helper's box (a packed batch's mask is one (1, H, total_q, total_k) entry)
        ref_box = _box_at(boxes["dropout_mask"], ints["dropout_mask"], sp.Integer(0) if packed else _b)
        ref = counter.xreplace(ref_box).xreplace({n.off_h: _h, n.i: I, n.j: J})
        want = {n.drop_b: 0 if packed else _b, n.drop_heads: Hq, n.drop_nq: nq, n.drop_nk: nk, n.drop_i0: 0,
                n.drop_j0: 0}
        cases.append((f"{tag}: the dropout_mask helper's box is keep's ({'0' if packed else 'b'}, H_q, N_q, N_k) from "
                      "row 0, key 0",
                      sp.Tuple(*[sp.expand(ref_box.get(s, s) - v) for s, v in want.items()])
                      if any(sp.expand(ref_box.get(s, s) - v) != 0 for s, v in want.items()) else ZERO))
        at = {n.off_h: _h, n.i: I - seq_q, n.j: J - seq_k} if packed else {n.off_h: _h, n.i: I, n.j: J}
        for kernel in ("forward", "dkdv", "dq"):
            box = boxes[kernel] + (tuple(packed_box) if packed else ())
            mine = counter.xreplace(_box_at(box, ints[kernel], _b)).xreplace(at)
            cases.append((f"{tag}: the {kernel} kernel's counter at (b, h, i, j) is the dropout_mask helper's at "
                          + ("keep[0, h, cu_seqlens_q[b] + i, cu_seqlens_k[b] + j]" if packed else "keep[b, h, i, j]"),
                          sp.expand(mine - ref)))
    return cases


@claim("dropout_mask_same",
       "the backward's dropout mask equals the forward's at every element, for every tile order: the printed "
       "keep term Z_ij = [philox(seed, c) >= p] depends only on (seed, rng_offset, b, h, i, j) (no tile start, "
       "block size or loop counter), with the counter c = rng_offset + ((b·H + h)·N_q + i)·N_k + j (packed "
       "batches: b = 0, i and j the global row and key); c is injective on the box b < B, h < H, i < N_q, "
       "j < N_k and every printed operation computing it stays in [0, 2^63) (int64: no wrap) when "
       "B·H·N_q·N_k <= 2^62 and rng_offset < 2^62; and each kernel's printed box (spec.terms.DROPOUT_BOXES: "
       "drop_b, drop_heads, drop_nq, drop_nk, drop_i0, drop_j0 in its own names; a packed batch's "
       "DROPOUT_BOX_PACKED after it) at the integers spec.launch passes it (forward_launch, dkdv_launch, dq_launch, "
       "dense and packed, dropout_mask_launch on the keep mask of spec.launch.dropout_mask_shape, the shape the host "
       "allocates) gives the forward, dK/dV and dQ kernels' counter at (b, query head h, "
       "i, j) the dropout_mask helper's at keep[b, h, i, j] (packed: keep[0, h, cu_seqlens_q[b] + i, "
       "cu_seqlens_k[b] + j]), Hq = Hkv·G query heads",
       r"Z_{bhij} = [\mathrm{philox}(\mathrm{seed}, o + ((bH + h)N_q + i)N_k + j) \ge p],\ "
       r"\text{injective in } (b,h,i,j),\ 0 \le c < 2^{63}",
       scope="symbolic B, H, N_q, N_k, rng_offset (z3 over the integers, nonlinear; int64 by bounding every "
             "intermediate); tl.rand taken as a pure function of (seed, counter): counter-based Philox; the boxes "
             "symbolic in B, Hkv, G, N_q, N_k (packed: total_q, total_k), off_h the program's query head (claims "
             "launch_grid, gqa_head_map), keep's shape the host allocates from spec.launch.dropout_mask_shape",
       assumptions=("dropout_counter",))
def prove_dropout_mask_same(base=terms.DROPOUT_BASE, keep=terms.DROPOUT_KEEP, boxes=terms.DROPOUT_BOXES,
                            packed_box=terms.DROPOUT_BOX_PACKED, launches=None):
    cases = []
    seed, counter = _counter(base, keep)
    if counter is None:
        return result("dropout_mask_same", [("one Philox draw per element", sp.Symbol("not exactly one draw"))],
                      "structure")
    # 1. a function of the coordinates only (so of no tile order)
    extra = (keep.expr.xreplace({base.symbol: base.expr}).free_symbols) - COORDINATES
    cases.append(("keep depends on (seed, offset, b, h, i, j) only",
                  ZERO if not extra else sp.Symbol("depends on " + ", ".join(sorted(map(str, extra))))))
    cases.append(("the draw is keyed by the seed", ZERO if seed == n.drop_seed else sp.Symbol(f"seed {seed}")))
    # 2. the counter is the call's offset plus the mixed-radix index of (b, h, row, key)
    row, key = n.drop_i0 + n.i, n.drop_j0 + n.j
    radix = ((n.drop_b * n.drop_heads + n.off_h) * n.drop_nq + row) * n.drop_nk + key
    cases.append(("counter = rng_offset + ((b·H + h)·N_q + i)·N_k + j",
                  sp.expand(counter - n.rng_offset - radix)))
    # 3. z3: injective on the box, and every printed intermediate in [0, 2^63)
    B = z3.Int("B")
    names = [n.rng_offset, n.drop_b, n.drop_heads, n.off_h, n.drop_nq, n.drop_nk, n.drop_i0, n.drop_j0, n.i, n.j]
    one, two = ({s: z3.Int(f"{s.name}{tag}") for s in names} for tag in ("", "'"))
    for env in (one, two):  # the sizes are shared
        for s in (n.drop_heads, n.drop_nq, n.drop_nk, n.rng_offset):
            env[s] = one[s]

    def box(env):
        r, c = env[n.drop_i0] + env[n.i], env[n.drop_j0] + env[n.j]
        return [env[n.drop_b] >= 0, env[n.drop_b] < B, env[n.off_h] >= 0, env[n.off_h] < env[n.drop_heads],
                env[n.drop_i0] >= 0, env[n.i] >= 0, r < env[n.drop_nq], env[n.drop_j0] >= 0, env[n.j] >= 0,
                c < env[n.drop_nk]]
    sizes = [B >= 1, one[n.drop_heads] >= 1, one[n.drop_nq] >= 1, one[n.drop_nk] >= 1,
             B * one[n.drop_heads] * one[n.drop_nq] * one[n.drop_nk] <= COUNTER_LIMIT,
             one[n.rng_offset] >= 0, one[n.rng_offset] < COUNTER_LIMIT]
    try:
        c1, parts = _z3(counter, one)
        c2, _ = _z3(counter, two)
    except (KeyError, ValueError) as err:
        return result("dropout_mask_same", cases + [("counter in z3", sp.Symbol(f"not an integer polynomial: {err}"))],
                      "structure")
    coords = lambda env: (env[n.drop_b], env[n.off_h], env[n.drop_i0] + env[n.i], env[n.drop_j0] + env[n.j])  # noqa: E731
    same = z3.And(*[x == y for x, y in zip(coords(one), coords(two))])
    cases.append(("injective: equal counters at (b, h, i, j) and (b', h', i', j') => equal coordinates",
                  z3_verdict(sizes + box(one) + box(two) + [c1 == c2], same)))
    in_int64 = z3.And(*[z3.And(x >= 0, x <= INT64_MAX) for x in parts + [c1]])
    cases.append(("int64: every printed operation's value in [0, 2^63)",
                  z3_verdict(sizes + box(one), in_int64)))
    # 4. every kernel's box, at its launch's integers: the same counter as the dropout_mask helper's element
    cases += box_cases(counter, boxes, packed_box, launches)
    return result("dropout_mask_same", cases, "structure (free symbols), SymPy identity, z3 over the integers")


# ----------------------------------------------------------------------------------
# The gradients through the dropout, on a 2 x 2 tile with head dim 2 (exact, symbolic entries)
# ----------------------------------------------------------------------------------
R_, C_, D_ = 2, 2, 2
ZT = sp.Symbol("Z_tile")  # stands for the keep tile in the printed Piecewise conditions


def _mat(name, rows, cols, **kw):
    return sp.Matrix(rows, cols, lambda r, c: sp.Symbol(f"{name}_{r}{c}", **kw))


def _as_product(expr):
    """``Piecewise((a, Eq(z, 1)), (0, True))`` -> ``z·a``: the same value for a keep bit z in {0, 1}
    (the ``0`` branch is checked structurally; any other Piecewise is left, and fails the case)."""
    def rule(e):
        (a, cond), _ = e.args
        return cond.lhs * a
    return expr.replace(
        lambda e: isinstance(e, sp.Piecewise) and len(e.args) == 2 and e.args[1] == (0, sp.true)
        and isinstance(e.args[0][1], sp.Eq) and e.args[0][1].rhs == 1, rule)


def _tile_eval(term_seq, env, keep_tile):
    """Run printed terms on matrices with the keep decision an entrywise ``Eq(z_ij, 1)``."""
    seq = [terms.Term(t.symbol, t.expr.xreplace({n.keep_drop: sp.Eq(ZT, 1)}), t.claim) for t in term_seq]
    with warnings.catch_warnings():  # the keep tile is a matrix of conditions Eq(z_ij, 1), entrywise
        warnings.simplefilter("ignore", sp.utilities.exceptions.SymPyDeprecationWarning)
        out = run_terms(seq, {**env, ZT: keep_tile})
    return {k: (v.applyfunc(_as_product) if isinstance(v, sp.MatrixBase) else _as_product(v)) for k, v in out.items()}


def _zero(expr):
    expr = sp.simplify(sp.expand(expr))
    return ZERO if expr == 0 else expr


@claim("dropout_grads",
       "through the dropout O = (Z ∘ P/(1 − p)) V (Z the keep mask, P the softmax): the printed forward tile "
       "accumulates Z ∘ P/(1 − p) into acc and keeps l (so lse) undropped; the printed backward gives "
       "dV = (Z ∘ P/(1 − p))ᵀ dO and dS = P ∘ (Z ∘ dP/(1 − p) − Δ), Δ = rowsum(dO ∘ O), in the dQ kernel's "
       "row-major and the dK/dV kernel's key-major tile: each entry equals sp.diff of <dO, O>",
       r"O=(Z\circ P/(1-p))V,\ dV=(Z\circ P/(1-p))^\top dO,\ dS=P\circ(Z\circ dP/(1-p)-\Delta),"
       r"\ \Delta=\mathrm{rowsum}(dO\circ O)",
       scope="fixed sizes: a 2 x 2 tile of (query, key), head dim 2, symbolic scores, values, dO, p and "
             "keep bits z in {0, 1}; the forward on one row of 2 keys from the initial state; reals, exact")
def prove_dropout_grads(forward_tile=terms.FORWARD_TILE_DROPOUT, dropout_p_term=terms.DROPOUT_P,
                        dropout_scale=terms.DROPOUT_SCALE,
                        dropout_dp=terms.DROPOUT_DP, dropout_dv_t=terms.DROPOUT_DV_T,
                        dropout_dp_t=terms.DROPOUT_DP_T, backward_tile=terms.BACKWARD_TILE,
                        backward_tile_t=terms.BACKWARD_TILE_T, preprocess=terms.BACKWARD_PREPROCESS):
    cases = []
    forward_tile = [dropout_p_term if t is terms.DROPOUT_P else t for t in forward_tile]
    pd = n.dropout_p
    c = interpret(dropout_scale.expr, {})  # the printed rescale, in the proof's p
    cases.append(("drop_scale = 1/(1 − p)", _zero(c - 1 / (1 - pd))))
    # --- the forward: one row of 2 keys from the initial state (m = −oo, l = 0, acc = 0)
    x = sp.symbols("x_1:3", real=True)
    z = sp.symbols("z_1:3", integer=True, nonnegative=True)
    V1 = _mat("v", 2, 1, real=True)
    env = {n.m_i: n.NEG_INF, n.l_i: 0, n.acc: sp.zeros(1, 1), n.qk: sp.Matrix([x]), n.v: V1,
           n.qk_scale: terms.QK_SCALE.expr, n.drop_scale: c}
    s = n.sm_scale
    den = sum(sp.exp(s * xx) for xx in x)
    want_o = sum(z[k] * c * sp.exp(s * x[k]) / den * V1[k, 0] for k in range(2))
    try:
        out = _tile_eval(list(forward_tile) + list(terms.FORWARD_EPILOGUE), env, sp.Matrix([z]))
        cases.append(("forward: out = Σ_j Z_j P_j/(1 − p) v_j", reduce_zero(out[n.acc][0, 0] - want_o)))
        cases.append(("forward: lse = log Σ_j e^{s x_j} (undropped)", reduce_zero(out[n.lse] - sp.log(den))))
    except (AttributeError, TypeError, ValueError) as err:  # a tile shape the terms cannot form
        cases.append(("forward: the printed tile on a row of 2 keys", sp.Symbol(f"not interpretable: {err}")))
    # --- the backward on a 2 x 2 tile: loss <dO, O>, O = (Z ∘ P/(1 − p)) V
    S = _mat("S", R_, C_, real=True)
    V, DO = _mat("V", C_, D_, real=True), _mat("dO", R_, D_, real=True)
    Z = _mat("z", R_, C_, integer=True, nonnegative=True)
    P = sp.Matrix(R_, C_, lambda r, k: sp.exp(S[r, k]) / sum(sp.exp(S[r, kk]) for kk in range(C_)))
    O = Z.multiply_elementwise(P) * c * V
    loss = sum(DO[r, d] * O[r, d] for r in range(R_) for d in range(D_))
    dV_want = sp.Matrix(C_, D_, lambda k, d: sp.diff(loss, V[k, d]))
    dS_want = sp.Matrix(R_, C_, lambda r, k: sp.diff(loss, S[r, k]))
    delta = run_terms(preprocess, {n.do: DO, n.o: O, n.dlse: 0})[n.delta]
    # dQ kernel (row-major): dp = dO Vᵀ, through the dropout, then dS
    tile = [t for t in backward_tile if t.symbol in (n.dp, n.ds)]
    ds_seq = [tile[0], dropout_dp, *tile[1:]]
    rm = _tile_eval(ds_seq, {n.do: DO, n.vT: V.T, n.p: P, n.delta: delta, n.drop_scale: c}, Z)
    # dK/dV kernel (key-major): dV from the dropped Pᵀ, dPᵀ = V dOᵀ through the dropout, dSᵀ
    km_dv = _tile_eval(dropout_dv_t, {n.pT: P.T, n.do: DO, n.dv: sp.zeros(C_, D_), n.drop_scale: c}, Z.T)
    tile_t = [t for t in backward_tile_t if t.symbol in (n.dpT, n.dsT)]
    km = _tile_eval([tile_t[0], dropout_dp_t, *tile_t[1:]],
                    {n.v: V, n.do: DO, n.pT: P.T, n.delta: delta, n.drop_scale: c}, Z.T)
    for (r, k) in itertools.product(range(R_), range(C_)):
        cases.append((f"dQ kernel: dS[{r},{k}] = ∂<dO, O>/∂S", _zero(rm[n.ds][r, k] - dS_want[r, k])))
        cases.append((f"dK/dV kernel: dSᵀ[{k},{r}] = ∂<dO, O>/∂S", _zero(km[n.dsT][k, r] - dS_want[r, k])))
    for (k, d) in itertools.product(range(C_), range(D_)):
        cases.append((f"dK/dV kernel: dV[{k},{d}] = ∂<dO, O>/∂V", _zero(km_dv[n.dv][k, d] - dV_want[k, d])))
    return result("dropout_grads", cases, "exact SymPy on a 2 x 2 tile, head dim 2; sp.diff of <dO, O>")
