"""Proofs about the kernel terms themselves (``spec.terms``), run on symbolic blocks.

The generator prints ``terms.FORWARD_TILE`` & co. into the Triton templates; these proofs
take the same Term objects, substitute their chain (``terms.chain``) and give the row
operations their meaning on a block of 1..3 symbolic keys (``proof_tools.interpret``).
Kernels keep ``m_i`` in log2 units: a natural-units state ``(m, d, o)`` enters as
``m_i = m·log2(e)``, ``l_i = d``, ``acc = o``, and raw scores ``qk = x`` meet the natural
logits ``sm_scale·x`` of the recurrences.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp
from sympy.codegen.cfunctions import exp2

from spec import masks
from spec import notation as n
from spec import recurrences as R
from spec import terms
from spec.registry import claim
from spec.proofs.tools import (
    ZERO,
    equal_cases,
    finite_state,
    interpret,
    nonnegative,
    result,
    run_terms,
    scalar,
)

s = n.sm_scale  # the softmax scale: natural logits are s·x


def _keys(count: int, name: str = "x"):
    return list(sp.symbols(f"{name}_1:{count + 1}", real=True))


def forward_env(state: R.State, xs, vs, qk_scale=terms.QK_SCALE) -> dict:
    """Kernel variables for one query row entering a key tile in state ``state``."""
    return {n.m_i: state.m * n.LOG2E, n.l_i: state.d, n.acc: sp.Matrix([[state.o]]),
            n.qk: sp.Matrix([xs]), n.v: sp.Matrix(len(vs), 1, vs), n.qk_scale: qk_scale.expr}


def kernel_tile(state: R.State, xs, vs, tile=terms.FORWARD_TILE, qk_scale=terms.QK_SCALE):
    """The state (natural units) after the kernel's tile update on raw scores ``xs``."""
    out = run_terms(tile, forward_env(state, xs, vs, qk_scale))
    return R.State(out[n.m_i] * n.LN2, out[n.l_i], scalar(out[n.acc]))


def _inner(A, B) -> sp.Expr:
    """``<A, B> = Σ A ∘ B`` over all entries."""
    return sp.Add(*[a * b for a, b in zip(A, B)])


def masked_scores(xs, masked, mask_term=masks.MASK_TERM) -> list:
    """The kernel's masking term applied to raw scores: key ``k`` is kept unless ``k in masked``."""
    return [interpret(mask_term.expr, {n.qk: x, masks.keep: sp.false if k in masked else sp.true})
            for k, x in enumerate(xs)]


def _nan_case(values) -> sp.Basic:
    """Residual of "this evaluates to NaN": 0 if some value is NaN, else the values."""
    values = [sp.sympify(val) for val in values]
    return ZERO if any(val.has(sp.nan) for val in values) else sp.Tuple(*values)


def _unguarded(term_seq):
    """The same terms with the ``-oo`` guards removed (what a naive kernel would do)."""
    naked = {n.m_safe: n.m_ij, n.l_safe: n.l_i, n.lse2_safe: n.lse2}
    return tuple(replace(t, expr=naked[t.symbol]) if t.symbol in naked else t for t in term_seq)


# ----------------------------------------------------------------------------------
@claim("merge_identity",
       "E = (−∞, 0, 0) is an identity, and in the guarded form the kernels use, E ⊕ E = E "
       "with no NaN (unguarded it is NaN — show that too)",
       r"E\oplus a = a\oplus E = a,\quad E\oplus_{\mathrm{guarded}} E = E,\quad "
       r"E\oplus_{\mathrm{naive}}E=\mathrm{NaN}",
       scope="symbolic states; kernel guards on fixed tiles (2 keys); reals, exact")
def prove_merge_identity(merge=R.merge, forward_tile=terms.FORWARD_TILE,
                         epilogue=terms.FORWARD_EPILOGUE, backward_tile=terms.BACKWARD_TILE,
                         normalise=terms.SOFTMAX_NORMALISE, mask_term=masks.MASK_TERM):
    a = finite_state("a")
    vs = sp.symbols("v_1:3", real=True)
    masked = masked_scores(_keys(2), (0, 1), mask_term)  # a tile with every key masked
    dp = sp.Matrix([sp.symbols("dp_1:3", real=True)])
    finite = sp.Symbol("m", real=True)
    guards = [(group, t) for group, seq in (("forward tile", forward_tile), ("softmax normalise", normalise),
                                            ("backward tile", backward_tile))
              for t in seq if t.symbol in (n.m_safe, n.lse2_safe)]
    cases = equal_cases([
        (f"{group}: the guard {t.name} leaves a finite value unchanged",
         t.expr.xreplace({sym: finite for sym in t.expr.free_symbols}), finite) for group, t in guards
    ] + [
        ("E ⊕ a = a", merge(R.E, a), a),
        ("a ⊕ E = a", merge(a, R.E), a),
        ("E ⊕ E = E (guarded, no NaN)", merge(R.E, R.E), R.E),
        # the kernel: a fully masked tile on a row with no key yet keeps it at E ...
        ("kernel tile: masked tile on E stays E", kernel_tile(R.E, masked, vs, forward_tile), R.E),
    ])
    # ... the epilogue writes output 0 and lse -oo ...
    fin = run_terms(epilogue, {n.m_i: n.NEG_INF, n.l_i: 0, n.acc: sp.Matrix([[0]])})
    probs = run_terms(normalise, {n.m_i: n.NEG_INF, n.l_i: 0, n.qk: sp.Matrix([masked]),
                                  n.qk_scale: terms.QK_SCALE.expr})[n.a]
    cases += equal_cases([("kernel epilogue on E: acc = 0, lse = -oo",
                           (scalar(fin[n.acc]), fin[n.lse]), (0, n.NEG_INF)),
                          ("kernel softmax of a padding row: a = 0", tuple(probs), (0, 0))])
    # ... and the backward recomputes P = 0, dS = 0 from lse = -oo.
    bwd_env = {n.lse: n.NEG_INF, n.qk: sp.Matrix([masked]), n.qk_scale: terms.QK_SCALE.expr,
               n.delta: sp.Symbol("delta", real=True)}
    without_dp = [t for t in backward_tile if t.symbol != n.dp]  # dP: any values at all
    bwd = run_terms(without_dp, {**bwd_env, n.dp: dp})
    cases += equal_cases([("kernel backward on lse = -oo: P = 0, dS = 0",
                           tuple(bwd[n.p]) + tuple(bwd[n.ds]), (0,) * 4)])
    # Without the guards every one of these is NaN.
    naive_fin = run_terms(_unguarded(epilogue), {n.m_i: n.NEG_INF, n.l_i: 0, n.acc: sp.Matrix([[0]])})
    naive_bwd = run_terms(_unguarded(without_dp), {**bwd_env, n.dp: dp})
    cases += [
        ("naive ⊕: E ⊕ E is NaN", _nan_case(R.merge(R.E, R.E, guarded=False))),
        ("naive kernel tile (no m_safe) on E is NaN",
         _nan_case(kernel_tile(R.E, masked, vs, _unguarded(forward_tile)))),
        ("naive epilogue (no l_safe) on E is NaN", _nan_case([scalar(naive_fin[n.acc])])),
        ("naive backward (no lse2_safe) on lse = -oo is NaN", _nan_case(list(naive_bwd[n.p]))),
    ]
    return result("merge_identity", cases, "finite a and E; kernel guards on a fully masked row")


@claim("head_dim_split",
       "the scores of a head dim split at column D_v (q = [q | q_tail], k = [k | k_tail], the tails the columns "
       "[D_v, D)) are the whole inner product: the printed QK then QK_TAIL give S = Σ_{d=1}^{D} q_d k_d for "
       "every split point and tail width, and so do the backward's key-major Sᵀ = K Qᵀ then its tail's product "
       "(BACKWARD_TAIL); the gradients' tail columns are the whole gradients' columns [D_v, D): the printed "
       "dK_tail (+= dSᵀ Q_tail, then × scale) gives column D_v + t of dK = scale·dSᵀQ, and dQ_tail (+= dS K_tail, "
       "then × scale) column D_v + t of dQ = scale·dS K, for every tail column t. The decode kernel splits at "
       "the value head dim (MLA's absorbed 576 = 512 + 64); the forward and backward kernels at the largest "
       "power of two below D where that saves padding (spec.launch.head_dim_split: 192 = 128 + 64, "
       "48 = 32 + 16), the split point D_v here",
       r"S = Q_{[0,D_v)}K_{[0,D_v)}^\top + Q_{[D_v,D)}K_{[D_v,D)}^\top = QK^\top,\quad "
       r"dK_{[D_v,D)} = \mathrm{scale}\cdot dS^\top Q_{[D_v,D)},\quad dQ_{[D_v,D)} = \mathrm{scale}\cdot dS\,K_{[D_v,D)}",
       terms=("qk", "qkT", "dk_tail", "dq_tail"),
       scope="symbolic D_v >= 1, tail width >= 1, N query rows and M keys (SymPy sums over the column ranges, "
             "combined into one; a gradient's tail column D_v + t for a symbolic t in [1, T], summed over the "
             "symbolic rows or keys of one tile: the sum over tiles is the main columns' claim backward_grads'); "
             "reals, exact (the kernel accumulates each product in fp32: rounding as any inner product)")
def prove_head_dim_split(qk=terms.QK, qk_tail=terms.QK_TAIL_GROUP, qk_t=terms.BACKWARD_TILE_T[0],
                         backward_tail=terms.BACKWARD_TAIL):
    d, t, i, j = (sp.Symbol(s, integer=True) for s in ("d", "t", "i", "j"))
    Dv, T = sp.Symbol("D_v", integer=True, positive=True), sp.Symbol("T", integer=True, positive=True)
    N, M = sp.Symbol("N", integer=True, positive=True), sp.Symbol("M", integer=True, positive=True)
    Qc, Kc = sp.IndexedBase("Q", real=True), sp.IndexedBase("K", real=True)  # rows of Q (i, d), keys of K (j, d)
    dS = sp.IndexedBase("dS", real=True)  # dS[i, j]: query row i, key j
    i0, j0 = sp.Symbol("i_0", integer=True), sp.Symbol("j_0", integer=True)  # the element / row the sums are at
    main, tail = sp.Sum(Qc[i0, d] * Kc[j0, d], (d, 1, Dv)), sp.Sum(Qc[i0, d] * Kc[j0, d], (d, Dv + 1, Dv + T))
    # each product the printed lines may form, as the sum it is at one element: the scores' element (i0, j0)
    # (row-major and key-major alike: a score is symmetric in its operands' roles), dK's tail column D_v + t of
    # key j0 (summed over the tile's N query rows), dQ's tail column D_v + t of row i0 (over its M keys); a
    # pairing of the wrong operands is a symbol no identity can cancel
    products = {(n.q, ("T", n.k)): main, (n.k, ("T", n.q)): main,
                (n.q_tail, ("T", n.k_tail)): tail, (n.k_tail, ("T", n.q_tail)): tail,
                (n.dsT, n.q_tail): sp.Sum(dS[i, j0] * Qc[i, Dv + t], (i, 1, N)),
                (n.dsT, n.q): sp.Sum(dS[i, j0] * Qc[i, t], (i, 1, N)),  # the main column t: not the tail's
                (n.ds, n.k_tail): sp.Sum(dS[i0, j] * Kc[j, Dv + t], (j, 1, M)),
                (n.ds, n.k): sp.Sum(dS[i0, j] * Kc[j, t], (j, 1, M))}

    def product(e):
        a, b = e.args
        key = (a, ("T", b.args[0]) if isinstance(b, terms.trans) else b)
        return products.get(key, sp.Symbol(f"dot({a}, {b}) pairs no operands whose columns match"))

    def value(group, sym, start):
        return terms.chain(group)[sym].xreplace({start: 0} if start is not None else {}).replace(
            lambda e: isinstance(e, terms.dot), product)

    whole = sp.Sum(Qc[i0, d] * Kc[j0, d], (d, 1, Dv + T))
    by_name = {}
    for term in backward_tail:
        by_name.setdefault(term.name, []).append(term)
    scores_t = value((qk_t, *by_name.get("qkT", ())), n.qkT, None)
    dk_tail = value(by_name.get("dk_tail", ()), n.dk_tail, n.dk_tail)
    dq_tail = value(by_name.get("dq_tail", ()), n.dq_tail, n.dq_tail)
    cases = [
        ("S = q·k over [1, D_v] + q_tail·k_tail over [D_v + 1, D] = q·k over [1, D]",
         sp.simplify(value((qk, *qk_tail), n.qk, None) - whole)),
        ("backward Sᵀ = k·q over [1, D_v] + k_tail·q_tail over [D_v + 1, D] = q·k over [1, D]",
         sp.simplify(scores_t - whole)),
        ("dK_tail column t = scale · Σ_i dS[i, j] Q[i, D_v + t]: column D_v + t of dK",
         sp.simplify(dk_tail - n.sm_scale * sp.Sum(dS[i, j0] * Qc[i, Dv + t], (i, 1, N)))),
        ("dQ_tail column t = scale · Σ_j dS[i, j] K[j, D_v + t]: column D_v + t of dQ",
         sp.simplify(dq_tail - n.sm_scale * sp.Sum(dS[i0, j] * Kc[j, Dv + t], (j, 1, M)))),
    ]
    return result("head_dim_split", cases,
                  "SymPy: the column sums combined into one (sum_simplify); the gradients' tail columns against "
                  "the whole gradient's, symbolic D_v, tail width, tile rows and keys")


@claim("block_update",
       "the kernel's tile update equals the ⊕-fold of single-key states, for a symbolic block",
       r"\mathrm{tile}(s; x_{1..B_c}, v_{1..B_c}) = s\oplus(x_1,1,v_1)\oplus\cdots\oplus(x_{B_c},1,v_{B_c})",
       scope="fixed sizes: B_c = 1..3 keys, one row, one column (symbolic B_c: tile_update_symbolic); reals, exact")
def prove_block_update(merge=R.merge, forward_tile=terms.FORWARD_TILE, mask_term=masks.MASK_TERM,
                       qk=terms.QK):
    # the scores of the tile: x_j = q . k_j (head dim 2)
    q_row = sp.Matrix([sp.symbols("q_1:3", real=True)])
    k_rows = sp.Matrix(2, 2, lambda a, b: sp.Symbol(f"k_{a + 1}{b + 1}", real=True))
    pairs = [("QK: x_j = q . k_j", tuple(interpret(qk.expr, {n.q: q_row, n.k: k_rows})),
              tuple((q_row * k_rows[r, :].T)[0, 0] for r in range(2)))]
    for width, masked_sets in ((1, [(), (0,)]), (2, [(), (1,), (0, 1)]), (3, [(), (0,), (0, 1, 2)])):
        xs, vs = _keys(width), _keys(width, "v")
        for label, state in (("finite state", finite_state("")), ("first tile, m=-oo", R.E)):
            for masked in masked_sets:
                scores = masked_scores(xs, masked, mask_term)
                keys = [R.key_state(s * xs[k], vs[k]) for k in range(width) if k not in masked]
                name = f"B_c={width}, {label}, masked keys {list(masked)}"
                pairs.append((name, kernel_tile(state, scores, vs, forward_tile),
                              R.fold([state] + keys, merge)))
    return result("block_update", equal_cases(pairs),
                  "B_c = 1..3 symbolic keys, finite or -oo state, masked keys")


@claim("exp2_rewrite",
       "the kernel's exp2 expressions with folded log2(e)·scale equal the natural-exp definitions",
       r"2^{x\cdot \mathrm{scale}\cdot\log_2 e - m\log_2 e} = e^{\mathrm{scale}\cdot x - m}",
       scope="fixed sizes: 2 keys (per generic entry: tile_update_symbolic); reals, exact",
       assumptions=('scale_positive',))
def prove_exp2_rewrite(forward_tile=terms.FORWARD_TILE, epilogue=terms.FORWARD_EPILOGUE,
                       backward_tile=terms.BACKWARD_TILE, qk_scale=terms.QK_SCALE,
                       normalise=terms.SOFTMAX_NORMALISE):
    xs, vs = _keys(2), _keys(2, "v")
    a = finite_state("")
    fwd = run_terms(forward_tile, forward_env(a, xs, vs, qk_scale))
    M = sp.Max(a.m, *[s * xx for xx in xs])  # the new max, natural units
    fin = run_terms(epilogue, {n.m_i: a.m * n.LOG2E, n.l_i: a.d, n.acc: sp.Matrix([[a.o]])})
    lse = sp.Symbol("L", real=True)  # a saved (finite) natural-log lse
    bwd = run_terms([t for t in backward_tile if t.symbol in (n.lse2, n.lse2_safe, n.p)],
                    {n.lse: lse, n.qk: sp.Matrix([xs]), n.qk_scale: qk_scale.expr})
    second_pass = run_terms(normalise, {n.m_i: M * n.LOG2E, n.l_i: a.d, n.qk: sp.Matrix([xs]),
                                        n.qk_scale: qk_scale.expr})
    x = xs[0]
    pairs = [
        ("softmax pass 2: p = e^{s·x_j - m_N}", tuple(second_pass[n.p]),
         tuple(sp.exp(s * xx - M) for xx in xs)),
        ("exp2(x·qk_scale) = exp(sm_scale·x)", exp2(x * qk_scale.expr), sp.exp(s * x)),
        ("alpha = e^{m_old - m_new}", fwd[n.alpha], sp.exp(a.m - M)),
        ("p = e^{s·x_j - m_new}", tuple(fwd[n.p]), tuple(sp.exp(s * xx - M) for xx in xs)),
        ("m_ij·ln2 = max(m, s·x_j)", fwd[n.m_ij] * n.LN2, M),
        ("lse = m + log d", fin[n.lse], a.m + sp.log(a.d)),
        ("backward p = e^{s·x_j - lse}", tuple(bwd[n.p]), tuple(sp.exp(s * xx - lse) for xx in xs)),
    ]
    return result("exp2_rewrite", equal_cases(pairs), "forward tile, epilogue and backward P")


@claim("safety_bounds",
       "every exponent argument is ≤ 0; 1 ≤ d'_i ≤ i; |o_i| ≤ max_j |v_j| (convex combination)",
       r"x_j - m_i \le 0,\quad 1\le d'_i\le i,\quad |o_i|\le\max_j|v_j|",
       scope="2-3 keys and an induction on i; reals, exact (fp32: exponent_rounding)",
       assumptions=('scale_positive',))
def prove_safety_bounds(forward_tile=terms.FORWARD_TILE, epilogue=terms.FORWARD_EPILOGUE,
                        online=R.online_step):
    cases = _exponents_nonpositive(forward_tile) + _denominator_bounds(online)
    cases += _convex_output(forward_tile, epilogue)
    return result("safety_bounds", cases, "signs decided by SymPy on slack variables")


def _exponents_nonpositive(forward_tile):
    """Every exp2 argument of the tile update is <= 0, case by case on who holds the max."""
    a = finite_state("")
    x1, x2 = _keys(2)
    t0, t1, t2 = sp.symbols("t_0:3", nonnegative=True)  # slack: how far below the max
    vs = _keys(2, "v")
    # (state, scores) per case; the case condition is built into the substitution
    scenarios = {
        "old max m holds the max": (a, [(a.m - t1) / s, (a.m - t2) / s]),
        "x_1 holds the max": (a._replace(m=s * x1 - t0), [x1, x1 - t2 / s]),
        "x_2 holds the max": (a._replace(m=s * x2 - t0), [x2 - t1 / s, x2]),
        "first tile (m=-oo), x_2 masked": (R.E, [x1, n.NEG_INF]),
        "first tile (m=-oo), all masked": (R.E, [n.NEG_INF, n.NEG_INF]),
    }
    chained = terms.chain(forward_tile)
    arguments = [(sym.name, e.args[0]) for sym in (n.p, n.alpha) for e in chained[sym].atoms(exp2)]
    cases = []
    for label, (state, scores) in scenarios.items():
        env = forward_env(state, scores, vs)
        for name, arg in arguments:  # interpreted before exp2 evaluates: -oo stays visible
            for k, value in enumerate(sp.Matrix([interpret(arg, env)])):
                cases.append((f"{label}: exponent of {name}[{k}] <= 0", nonnegative(-value)))
    return cases


def _denominator_bounds(online):
    """Induction: 1 <= d'_{i-1} <= i-1  =>  1 <= d'_i <= i (and d'_1 = 1)."""
    u, w, t, r = sp.symbols("u w t r", nonnegative=True)
    xi = sp.Symbol("x_i", real=True)
    d_prev = 1 + u  # 1 <= d'_{i-1}
    i = d_prev + 1 + w  # d'_{i-1} <= i - 1
    # Lemma (exp is increasing): for t >= 0, 0 < e^{-t} <= 1, i.e. e^{-t} = 1/(1+r), r >= 0.
    below_one = {sp.exp(-t): 1 / (1 + r)}
    cases = []
    for label, (m_prev, x) in {"m_{i-1} holds the max": (xi + t, xi),
                               "x_i holds the max": (xi - t, xi)}.items():
        d = online(m_prev, d_prev, x)[1].xreplace(below_one)
        cases += [(f"{label}: d'_i >= 1", nonnegative(d - 1)), (f"{label}: d'_i <= i", nonnegative(i - d))]
    d1 = online(R.NEG_INF, 0, xi)[1]
    cases += [("base: d'_1 >= 1", nonnegative(d1 - 1)), ("base: d'_1 <= 1", nonnegative(1 - d1))]
    return cases


def _convex_output(forward_tile, epilogue):
    """o = Σ w_j v_j with w_j >= 0, Σ w_j = 1: so -V <= o <= V when every |v_j| <= V."""
    xs = _keys(3)
    V = sp.Symbol("V", nonnegative=True)  # max_j |v_j|
    r = sp.symbols("r_1:4", nonnegative=True)  # slack: V - v_j, or v_j + V
    cases = []
    for label, vs, goal in (("o <= max|v|", [V - rj for rj in r], lambda o: V - o),
                            ("o >= -max|v|", [rj - V for rj in r], lambda o: o + V)):
        env = forward_env(R.E, xs, vs)
        out = run_terms(tuple(forward_tile) + tuple(epilogue), env)
        cases.append((f"{label} (B_c=3 keys from E)", nonnegative(goal(scalar(out[n.acc])))))
    return cases


@claim("backward_delta",
       "Δ_i = rowsum(dO ∘ O) = rowsum(P ∘ dP); the kernel's delta is Δ_i − dlse_i, which is Δ_i "
       "when the loss does not use lse (dlse = 0)",
       r"\Delta_i=\mathrm{rowsum}(dO\circ O)=\mathrm{rowsum}(P\circ dP),\quad "
       r"\mathrm{delta}_i=\Delta_i-d\mathrm{lse}_i",
       scope="fixed sizes: 3 keys, head dim 2, O and lse from the definition (at symbolic B_c, D with O and "
             "lse from the printed forward epilogue: backward_symbolic); reals, exact")
def prove_backward_delta(backward_preprocess=terms.BACKWARD_PREPROCESS,
                         backward_tile=terms.BACKWARD_TILE):
    env, probs = _backward_block(keys=3, head_dim=2)
    bwd = run_terms(backward_tile, env)
    p, dp = bwd[n.p], bwd[n.dp]
    rowsum_p_dp = sp.Add(*[a * b for a, b in zip(p, dp)])
    g = sp.Symbol("g", real=True)  # a gradient of this row's lse
    pairs = [
        ("dlse = 0: rowsum(dO∘O) = rowsum(P∘dP), kernel P and dP",
         run_terms(backward_preprocess, {**env, n.dlse: 0})[n.delta], rowsum_p_dp),
        ("dlse = g: delta = rowsum(P∘dP) − g",
         run_terms(backward_preprocess, {**env, n.dlse: g})[n.delta], rowsum_p_dp - g),
        ("kernel P (from the saved lse) = softmax", tuple(p), tuple(probs)),
    ]
    return result("backward_delta", equal_cases(pairs), "3 keys, head dim 2")


@claim("backward_ds",
       "dS = P ∘ (dP − Δ) from the softmax Jacobian; with the kernel's delta = Δ − dlse it is "
       "∂L/∂S for L = <dO, O> + dlse·lse",
       r"dS = P\circ(dP-\Delta) = J_{\mathrm{softmax}}^\top dP,\quad "
       r"P\circ(dP-\Delta+d\mathrm{lse}) = \frac{\partial}{\partial S}"
       r"\big(\langle dO, O\rangle + d\mathrm{lse}\cdot\mathrm{lse}\big)",
       scope="fixed sizes: 3 keys, head dim 2, by sp.diff, O and lse from the definition (at symbolic B_c, D "
             "with O and lse from the printed forward epilogue, dlse = g included: backward_symbolic); reals, exact")
def prove_backward_ds(backward_preprocess=terms.BACKWARD_PREPROCESS,
                      backward_tile=terms.BACKWARD_TILE):
    """Two cases on one symbolic row of 3 keys, both from the kernel's own delta term.

    With ``dlse = 0``: dS is the softmax Jacobian applied to dP (and dP = ∂<dO, O>/∂P).
    With a free ``dlse = g``: dS is the whole gradient, by ``sp.diff`` on the scaled
    logits ``y_j = s·x_j``, of ``L = <dO, softmax(y) V> + g·log Σ_j e^{y_j}`` — so the
    ``− dlse`` of ``BACKWARD_PREPROCESS`` is what ``∂lse_i/∂S_ij = P_ij`` asks for.
    """
    env, _ = _backward_block(keys=3, head_dim=2)
    logits = [s * xx for xx in env[n.qk]]
    y = sp.symbols("y_1:4", real=True)  # the scaled logits s·x_j, as free variables
    at_logits = dict(zip(y, logits))

    bwd = run_terms(backward_tile, {**env, n.delta: run_terms(backward_preprocess, {**env, n.dlse: 0})[n.delta]})
    # dP = ∂<dO, O>/∂P with O = P V: differentiate with P as free symbols
    P = sp.symbols("P_1:4", real=True)
    vjp = [gr.subs(at_logits) for gr in R.softmax_vjp(y, list(bwd[n.dp]))]

    g = sp.Symbol("g", real=True)  # dL/dlse of this row
    with_lse = run_terms(backward_tile, {**env, n.delta: run_terms(backward_preprocess, {**env, n.dlse: g})[n.delta]})
    loss = _inner(env[n.do], sp.Matrix([R.softmax(y)]) * env[n.v]) + g * sp.log(sp.Add(*[sp.exp(yj) for yj in y]))
    pairs = [
        ("dP_j = ∂<dO, O>/∂P_j", tuple(bwd[n.dp]), tuple(sp.diff(_inner(env[n.do], sp.Matrix([P]) * env[n.v]), pj)
                                                         for pj in P)),
        ("dlse = 0: dS = J^T dP (softmax Jacobian)", tuple(bwd[n.ds]), tuple(vjp)),
        ("dlse = g: dS = ∂(<dO, O> + g·lse)/∂S", tuple(with_lse[n.ds]),
         tuple(sp.diff(loss, yj).subs(at_logits) for yj in y)),
    ]
    return result("backward_ds", equal_cases(pairs), "3 keys, head dim 2, gradients by sp.diff")


def _backward_block(keys: int, head_dim: int):
    """Kernel variables of one query row in the backward, with O and lse from the definition."""
    xs = _keys(keys)
    V = sp.Matrix(keys, head_dim, lambda a, b: sp.Symbol(f"v_{a + 1}{b + 1}", real=True))
    dO = sp.Matrix(1, head_dim, lambda _, b: sp.Symbol(f"dO_{b + 1}", real=True))
    probs = R.softmax([s * xx for xx in xs])
    O = sp.Matrix([probs]) * V
    lse = sp.log(sp.Add(*[sp.exp(s * xx) for xx in xs]))
    env = {n.qk: sp.Matrix([xs]), n.qk_scale: terms.QK_SCALE.expr, n.lse: lse,
           n.v: V, n.vT: V.T, n.do: dO, n.o: O}
    return env, probs
