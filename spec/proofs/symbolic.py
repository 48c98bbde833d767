"""The kernel terms at *symbolic* tile widths: ``B_c`` keys, head dim ``D``, any mask, any tiling.

The fixed-size claims (``block_update`` on 1..3 keys, ``backward_*`` on 3 keys) check the printed
terms on small symbolic blocks. Here the same terms are interpreted on a *generic entry*: the
scores of a tile are ``Q[j]`` for a symbolic key index ``j`` in ``[a, a + B_c)``, a row
reduction is ``Sum(·, (j, a, a + B_c − 1))``, a product ``dot`` sums over the index its two
operands share (``j`` for ``P V``, ``d`` in ``[1, D]`` for ``Q Kᵀ`` and ``dO Vᵀ``), broadcasts are the
identity on a generic entry. ``rowmax`` is an opaque real ``R`` (the tile's max): the tile update's
α-image does not depend on it, and the exponent bound only needs ``R >= Q[j]``.

Masked keys enter through an indicator: the printed ``MASK_TERM`` makes a masked score ``−∞``;
every sum the chain produces has a summand ``g(Q[j])`` with ``g(−∞) = 0`` (checked), so
``Σ_j g(mask(x_j)) = Σ_j κ_j g(x_j)`` for ``κ_j ∈ {0, 1}`` (1 = attended) — the sum over a
symbolic range with an indicator for the masked keys.

α(m, d, o) = (d e^m, o e^m) (claim ``merge_homomorphism``): the row's result depends on its state
only through α (``o/d``, ``log α_d``), and ⊕ maps to +.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import masks, structure, terms
from spec.proofs.tools import ZERO, equal_cases, natural_exp, nonnegative, push_factors, result
from spec.registry import claim

s = n.sm_scale
j, k, d = sp.symbols("j k d", integer=True)  # key index, second key index, head-dim index
D = sp.Symbol("D", integer=True, positive=True)  # head dim
a_, w_ = sp.Symbol("a", integer=True, nonnegative=True), sp.Symbol("w", integer=True, positive=True)
X, V, KAPPA, DO = (sp.IndexedBase(name, real=True) for name in ("x", "v", "kappa", "dO"))
Q = sp.IndexedBase("Q")  # the masked score of key j: x_j or -oo
R = sp.Symbol("R", real=True)  # rowmax of the tile (finite: some key attended)
o_d = sp.IndexedBase("o", real=True)  # the state's output, column d
ROWMAX = sp.Symbol("rowmax")


def interpret(expr, env, keys):
    """A kernel expression on a generic entry; ``keys = (j, first, last)`` is the tile's key range."""
    if isinstance(expr, sp.Symbol):
        return env.get(expr, expr)
    if not expr.args:
        return expr
    f = expr.func
    if f is terms.rowmax:
        return env[ROWMAX]
    args = [interpret(x, env, keys) for x in expr.args]
    if f is terms.rowsum:
        return sp.Sum(args[0], keys)
    if f is terms.dot:
        prod = args[0] * args[1]
        if args[0].has(keys[0]) and args[1].has(keys[0]):
            return sp.Sum(prod, keys)
        return sp.Sum(prod, (d, 1, D))
    if f in (terms.trans, terms.col, terms.row):
        return args[0]
    return f(*args)


def run(term_seq, env, keys):
    return {sym: interpret(e, env, keys) for sym, e in terms.chain(term_seq).items()}


def indicator(expr, keys, mask_term=masks.MASK_TERM):
    """Each ``Sum(g(Q[j]), keys)`` as ``Sum(κ_j g(x_j), keys)``, after checking ``g(masked) = 0``
    for the score the printed ``MASK_TERM`` gives a masked key (−∞); a summand that does not
    vanish there is returned as the residual (a masked key would leak weight)."""
    leaks = []
    masked = mask_term.expr.xreplace({n.qk: X[keys[0]], masks.keep: sp.false})
    masked = masked.args[0].expr if isinstance(masked, sp.Piecewise) else masked  # the branch taken

    def swap(sm):
        g = sm.function
        at_masked = natural_exp(g.xreplace({Q[keys[0]]: masked}))
        if sp.simplify(at_masked) != 0:
            leaks.append(g)
        return sp.Sum(KAPPA[keys[0]] * g.xreplace({Q[keys[0]]: X[keys[0]]}), *sm.limits)

    out = expr.replace(lambda e: isinstance(e, sp.Sum) and e.has(Q[keys[0]]), swap)
    return out, leaks


def _bound(sm):
    return {lim[0] for lim in sm.limits}


def pull_out(expr):
    """``Sum(c·f, L) -> c·Sum(f, L)`` for every factor ``c`` free of the summation indices (bottom-up)."""
    def out(sm):
        inner = pull_out(sm.function)
        free = [x for x in sp.Mul.make_args(inner) if not (x.free_symbols & _bound(sm))]
        dep = [x for x in sp.Mul.make_args(inner) if x.free_symbols & _bound(sm)]
        return sp.Mul(*free) * sp.Sum(sp.Mul(*dep), *sm.limits)
    return sp.expand(expr.replace(lambda e: isinstance(e, sp.Sum), out), power_exp=True)


def _rename(sm, depth):
    """Bound indices renamed by the sorted order of their ranges: equal sums look equal."""
    limits = sorted(sm.limits, key=lambda lim: (str(lim[1]), str(lim[2])))
    names = {lim[0]: sp.Symbol(f"ι{depth}_{pos}", integer=True) for pos, lim in enumerate(limits)}
    f = canonical(sm.function.xreplace(names), depth + 1)
    return sp.Sum(f, *[(names[v], lo, hi) for v, lo, hi in limits])


def _avoid(sm, names):
    """``sm`` with its bound indices that are in ``names`` renamed fresh (capture-avoiding)."""
    fresh = {v: sp.Dummy(v.name, integer=True) for v, _, _ in sm.limits if v in names}
    if not fresh:
        return sm
    return sp.Sum(sm.function.xreplace(fresh), *[(fresh.get(v, v), lo, hi) for v, lo, hi in sm.limits])


def _rename_outermost(expr, depth):
    """Rename the bound indices of the outermost sums (top-down: each renames its own nested sums
    one level deeper, so an inner sum's index is never captured by an outer one's new name)."""
    if isinstance(expr, sp.Sum):
        return _rename(expr, depth)
    if not expr.args or isinstance(expr, (sp.Symbol, sp.Indexed)):
        return expr
    return expr.func(*[_rename_outermost(x, depth) for x in expr.args])


def _flatten(expr):
    """Products with one summed factor moved inside it; nested sums as one multi-index sum."""
    def into(e):
        sums = [x for x in sp.Mul.make_args(e) if isinstance(x, sp.Sum)]
        if len(sums) != 1:
            return e
        rest = sp.Mul(*[x for x in sp.Mul.make_args(e) if x is not sums[0]])
        sm = _avoid(sums[0], rest.free_symbols)  # a free j of rest is not the sum's bound j
        return sp.Sum(sp.expand(rest * sm.function), *sm.limits)

    def nest(sm):
        out = 0
        for t in sp.Add.make_args(sp.expand(sm.function)):
            t = into(t)
            if isinstance(t, sp.Sum):
                t = _avoid(t, {v for v, _, _ in sm.limits})  # an inner index shadowing the outer one
                out += sp.Sum(t.function, *(list(t.limits) + list(sm.limits)))
            else:
                out += sp.Sum(t, *sm.limits)
        return out

    expr = sp.Add(*[into(t) for t in sp.Add.make_args(sp.expand(expr))])
    for _ in range(3):
        expr = expr.replace(lambda e: isinstance(e, sp.Sum), nest)
    return expr


def canonical(expr, depth=0):
    """Finite sums in one form: constants out (so ratios cancel), then products moved in, nested
    sums flattened (Fubini for finite sums), indices renamed by range, sums with equal ranges
    added into one (linearity)."""
    expr = _flatten(pull_out(sp.expand(expr, power_exp=True)))
    expr = _rename_outermost(expr, depth)
    grouped, rest = {}, []
    for t in sp.Add.make_args(sp.expand(expr)):
        if isinstance(t, sp.Sum):
            grouped.setdefault(t.limits, []).append(t.function)
        else:
            rest.append(t)
    sums = [sp.Sum(sp.expand(sp.Add(*fs)), *limits) for limits, fs in grouped.items()]
    return sp.Add(*rest, *[x for x in sums if x.function != 0])


def sum_zero(lhs, rhs):
    """Residual of ``lhs = rhs`` for expressions with finite sums (exp2 as exp, sums canonical)."""
    diff = canonical(push_factors(natural_exp(lhs - rhs)))
    if diff != 0 and not diff.has(sp.Sum):
        diff = sp.simplify(diff)
    return ZERO if diff == 0 else diff


def gradient(loss, wrt, entry, ranges):
    """``∂loss/∂wrt[entry]`` for a generic entry inside ``ranges`` (``{index: (lo, length)}``):
    each index ``x`` becomes ``lo + t_x`` and the length ``t_x + 1 + r_x`` (``t, r >= 0``)."""
    subs, back = {}, {}
    for k, (x, (lo, length)) in enumerate(ranges.items()):
        t, r = (sp.Symbol(f"{name}_{k}", integer=True, nonnegative=True) for name in ("t", "r"))
        subs[x], subs[length] = lo + t, t + 1 + r
        back[t], back[r] = x - lo, length - 1 - (x - lo)
    g = sp.diff(loss, wrt[entry]).xreplace(subs).doit()
    return g.xreplace(back)


def forward_env(m_i, l_i, acc_d):
    return {n.m_i: m_i, n.l_i: l_i, n.acc: acc_d, n.qk: Q[j], n.v: V[j, d], n.qk_scale: terms.QK_SCALE.expr,
            ROWMAX: R}


def alpha_of(out):
    """α of the kernel state (log2 units): ``(l_i 2^{m_i}, acc_d 2^{m_i})``."""
    return out[n.l_i] * terms.exp2(out[n.m_i]), out[n.acc] * terms.exp2(out[n.m_i])


def tile_alpha_cases(label, start, width, forward_tile, state, mask_term=masks.MASK_TERM):
    """α after one tile of keys ``[start, start + width)`` from ``state`` (natural units, α(state)
    given) equals α(state) + Σ_j κ_j (e^{s x_j}, e^{s x_j} v_jd)."""
    keys = (j, start, start + width - 1)
    m_nat, dd, od = state
    m_i = n.NEG_INF if m_nat == n.NEG_INF else m_nat * n.LOG2E
    out = run(forward_tile, forward_env(m_i, dd, od), keys)
    cases = []
    got = []
    for part in alpha_of(out):
        value, leaks = indicator(part, keys, mask_term)
        if leaks:
            cases.append((f"{label}: a masked key contributes (g(masked) != 0)", sp.Tuple(*leaks)))
        got.append(value)
    before_d = 0 if m_nat == n.NEG_INF else dd * sp.exp(m_nat)
    before_o = 0 if m_nat == n.NEG_INF else od * sp.exp(m_nat)
    want_d = before_d + sp.Sum(KAPPA[j] * sp.exp(s * X[j]), keys)
    want_o = before_o + sp.Sum(KAPPA[j] * sp.exp(s * X[j]) * V[j, d], keys)
    cases += [(f"{label}: α_d = α_d(state) + Σ_j κ_j e^(s x_j)", sum_zero(got[0], want_d)),
              (f"{label}: α_o = α_o(state) + Σ_j κ_j e^(s x_j) v_jd", sum_zero(got[1], want_o))]
    return cases


def _at_least_one_arg(expr):
    """``expr >= 0`` where ``expr = max(a, b, ...) + rest``: decided when ``a + rest >= 0`` for one
    argument (max is at least each of its arguments); else ``nonnegative`` as is."""
    expr = sp.expand(push_factors(expr))
    for term in sp.Add.make_args(expr):
        if isinstance(term, sp.Max):
            rest = expr - term
            if any(nonnegative(sp.expand(arg + rest)) == 0 for arg in term.args):
                return ZERO
    return nonnegative(expr)


FINITE = (sp.Symbol("m", real=True), sp.Symbol("d'", positive=True), o_d[d])
EMPTY = (n.NEG_INF, sp.Integer(0), sp.Integer(0))


@claim("tile_update_symbolic",
       "for a symbolic tile width B_c, head dim D and any set of masked keys (indicator κ_j), the "
       "printed tile update maps a state s to one with α = α(s) + Σ_{j<B_c} κ_j (e^{s x_j}, e^{s x_j} v_j) "
       "— the ⊕-fold of the attended keys (claim merge_homomorphism) — from a finite state or from E; "
       "E with every key masked stays E; every exponent is <= 0 and p_j = e^{s x_j − m}, α = e^{m_old − m}",
       r"\alpha(\mathrm{tile}(s; x_{1..B_c})) = \alpha(s) + \sum_{j=1}^{B_c}\kappa_j\,(e^{s x_j}, e^{s x_j}v_j)",
       terms=("qk", "m_ij", "m_safe", "p", "alpha", "l_ij", "l_i", "acc", "m_i"),
       scope="symbolic B_c, D and mask (SymPy Sum + indicator); reals, exact",
       assumptions=("scale_positive",))
def prove_tile_update_symbolic(forward_tile=terms.FORWARD_TILE, mask_term=masks.MASK_TERM, qk=terms.QK):
    width = n.B_c
    K_, Qrow = sp.IndexedBase("k", real=True), sp.IndexedBase("q", real=True)
    scores = interpret(qk.expr, {n.q: Qrow[d], n.k: K_[j, d]}, (j, 1, width))
    cases = [("QK: x_j = Σ_d q_d k_jd (head dim D symbolic)",
              sum_zero(scores, sp.Sum(Qrow[d] * K_[j, d], (d, 1, D))))]
    for label, state in (("finite state", FINITE), ("first tile (E)", EMPTY)):
        cases += tile_alpha_cases(f"B_c symbolic, {label}", sp.Integer(1), width, forward_tile, state, mask_term)
    # E and a fully masked tile: rowmax = -oo, every score -oo
    keys = (j, 1, width)
    out = run(forward_tile, {**forward_env(n.NEG_INF, 0, 0), n.qk: n.NEG_INF, ROWMAX: n.NEG_INF}, keys)
    cases += equal_cases([("E, every key masked: the state stays E",
                           (out[n.m_i], sp.simplify(out[n.l_i]), sp.simplify(out[n.acc])), (n.NEG_INF, 0, 0))])
    # exponents <= 0 for an attended key j: R = x_j + t (the max is at least x_j), finite state
    t = sp.Symbol("t", nonnegative=True)
    env = {**forward_env(FINITE[0] * n.LOG2E, FINITE[1], FINITE[2]), n.qk: X[j], ROWMAX: X[j] + t}
    chained = run(forward_tile, env, keys)
    p_entry = interpret(terms.chain(forward_tile)[n.p], env, keys)
    for name, value in (("p", p_entry), ("alpha", chained[n.alpha])):
        arg = value.args[0] if isinstance(value, terms.exp2) else value
        cases.append((f"exponent of {name} <= 0 (attended key j, symbolic B_c)", _at_least_one_arg(-arg * n.LN2)))
    # the exp2 rewrite, per generic entry: p_j = e^{s x_j - M}, alpha = e^{m - M}
    M = sp.Max(FINITE[0], s * (X[j] + t))
    cases += [("p_j = e^(s x_j − M) (natural units)", sum_zero(p_entry, sp.exp(s * X[j] - M))),
              ("alpha = e^(m_old − M)", sum_zero(chained[n.alpha], sp.exp(FINITE[0] - M)))]
    return result("tile_update_symbolic", cases, "generic entry, Sum over [1, B_c], indicator for masked keys")


@claim("every_tiling",
       "for any partition of the keys [0, N) into contiguous tiles of any sizes, visited in any order, "
       "the kernel's fold from the printed initial state has α = Σ_{j<N} κ_j (e^{s x_j}, e^{s x_j} v_j), the "
       "α of all attended keys (induction on the number of tiles visited), so out and lse do not depend "
       "on the tiling or the order",
       r"\alpha(\mathrm{fold}(T_{\pi(1)},\dots,T_{\pi(n)})) = \sum_{j<N}\kappa_j(e^{s x_j}, e^{s x_j}v_j)",
       terms=(),
       scope="symbolic tile starts and widths, any number of tiles and any order (induction); reals, exact",
       assumptions=("scale_positive",))
def prove_every_tiling(forward_tile=terms.FORWARD_TILE, forward_init=structure.FORWARD_INIT):
    keys_of = lambda lo, hi: (j, lo, hi - 1)  # noqa: E731
    # base (no tile visited): the printed initial state has α = 0, the empty sum
    init = {t.symbol: t.expr for t in forward_init}
    base = alpha_of({n.m_i: init[n.m_i], n.l_i: init[n.l_i], n.acc: init[n.acc]})
    cases = equal_cases([("base: α(initial state) = (0, 0)", tuple(sp.simplify(x) for x in base), (0, 0))])
    # step: a state whose α is the sum over the visited tiles (any set of them: finite or E) and
    # any unvisited tile [a, a + w): α grows by that tile's sum (tile_update at width w, start a)
    for label, state in (("visited tiles hold a key", FINITE), ("no key yet (E)", EMPTY)):
        cases += tile_alpha_cases(f"step: tile [a, a+w) after {label}", a_, w_, forward_tile, state)
    # the tiles partition [0, N): concatenating contiguous ranges (induction on the tile count)
    f = sp.IndexedBase("f")
    b_ = sp.Symbol("b", integer=True, nonnegative=True)
    concat = sp.Sum(f[j], keys_of(0, a_)) + sp.Sum(f[j], keys_of(a_, a_ + w_)) - sp.Sum(f[j], keys_of(0, a_ + w_))
    cases.append(("partition: Σ_[0,a) + Σ_[a,a+w) = Σ_[0,a+w)", ZERO if sp.simplify(concat) == 0 else concat))
    perm = sp.Sum(f[j], keys_of(0, a_)) + sp.Sum(f[j], keys_of(a_, b_)) - \
        (sp.Sum(f[j], keys_of(a_, b_)) + sp.Sum(f[j], keys_of(0, a_)))
    cases.append(("order: adding the tiles' sums in any order gives the same sum", ZERO if perm == 0 else perm))
    return result("every_tiling", cases, "induction on visited tiles; symbolic starts and widths")


@claim("backward_symbolic",
       "for a symbolic number of keys B_c and head dim D, with O and lse taken from the forward's printed "
       "tile update and epilogue: the backward's recomputed P is softmax(s x), Δ = rowsum(dO ∘ O) = "
       "rowsum(P ∘ dP), dS = P ∘ (dP − Δ) is the softmax Jacobian (diag P − P Pᵀ) applied to dP, "
       "dP = ∂<dO, O>/∂P, and with a free dlse = g the kernel's delta = Δ − g makes dS = "
       "∂(<dO, O> + g·lse)/∂(s x) (sp.diff of the sums)",
       r"P_j = \frac{e^{s x_j}}{\sum_k e^{s x_k}},\ \Delta = \sum_d dO_d O_d = \sum_j P_j dP_j,\ "
       r"dS_j = \sum_k (\delta_{jk}P_j - P_jP_k)\,dP_k,\ "
       r"P_j(dP_j - \Delta + g) = \frac{\partial(\langle dO, O\rangle + g\,\mathrm{lse})}{\partial y_j}",
       terms=(),
       scope="symbolic B_c and D, one query row (rows are independent); O and lse from the printed forward "
             "(one tile from E: every_tiling gives any tiling); reals, exact",
       assumptions=("scale_positive",))
def prove_backward_symbolic(forward_tile=terms.FORWARD_TILE, epilogue=terms.FORWARD_EPILOGUE,
                            backward_tile=terms.BACKWARD_TILE, backward_preprocess=terms.BACKWARD_PREPROCESS):
    keys = (j, 1, n.B_c)
    # forward: one tile of every key from E (any tiling gives the same α: claim every_tiling)
    fwd = run(tuple(forward_tile), {**forward_env(n.NEG_INF, 0, 0), n.qk: X[j]}, keys)
    l_fwd, acc_fwd, m_fwd = fwd[n.l_i], fwd[n.acc], fwd[n.m_i]
    ep = run(epilogue, {n.l_i: l_fwd, n.acc: acc_fwd, n.m_i: m_fwd}, keys)
    # the row has keys: l_i > 0, so the guards take their finite branches
    finite = lambda e: e.replace(lambda x: isinstance(x, sp.Piecewise), lambda x: x.args[-1].expr)  # noqa: E731
    O, lse = finite(ep[n.acc]), finite(ep[n.lse])
    total = sp.Sum(sp.exp(s * X[k]), (k, 1, n.B_c))
    env = {n.qk: X[j], n.qk_scale: terms.QK_SCALE.expr, n.lse: lse, n.do: DO[d], n.vT: V[j, d],
           n.o: O, ROWMAX: R}
    bwd = run(backward_tile, env, keys)
    P, dP = finite(bwd[n.p]), bwd[n.dp]
    cases = [("forward lse = log Σ_k e^(s x_k)", sum_zero(sp.exp(lse), total.xreplace({k: j}))),
             ("backward P_j = e^(s x_j) / Σ_k e^(s x_k)", sum_zero(P * total.xreplace({k: j}), sp.exp(s * X[j])))]
    delta = run(backward_preprocess, {**env, n.dlse: 0}, (d, 1, D))[n.delta]
    Pk, dPk = P.xreplace({j: k}), dP.xreplace({j: k})
    rowsum_p_dp = sp.Sum(Pk * dPk, (k, 1, n.B_c))
    cases.append(("Δ = rowsum(dO ∘ O) = rowsum(P ∘ dP)", sum_zero(delta, rowsum_p_dp)))
    ds = finite(run(backward_tile, {**env, n.delta: rowsum_p_dp}, keys)[n.ds])
    r = sp.Symbol("r", integer=True, nonnegative=True)
    jj = sp.Symbol("j_0", integer=True, positive=True)  # a key of the row: 1 <= j_0 <= B_c = j_0 + r
    row = {n.B_c: jj + r}
    P0, Pk, dPk = P.xreplace({j: jj}).xreplace(row), Pk.xreplace(row), dPk.xreplace(row)
    # the Kronecker delta picks k = j_0 (1 <= j_0 <= j_0 + r)
    jac = sp.Sum(sp.KroneckerDelta(jj, k) * P0 * dPk, (k, 1, jj + r)).doit() - P0 * sp.Sum(Pk * dPk, (k, 1, jj + r))
    cases.append(("dS_j = Σ_k (δ_jk P_j − P_j P_k) dP_k", sum_zero(ds.xreplace({j: jj}).xreplace(row), jac)))
    # the whole gradient, by sp.diff at symbolic B_c: dP = ∂<dO, O>/∂P for O = Σ_k P_k v_k, and with a
    # free dlse = g, dS_j = ∂(<dO, O> + g·lse)/∂y_j at the logits y = s·x (O = softmax(y) V, lse = log Σ e^y)
    Pf, Y, g = sp.IndexedBase("P", real=True), sp.IndexedBase("y", real=True), sp.Symbol("g", real=True)
    e_ = sp.Symbol("e", integer=True)
    keyset = {j: (1, n.B_c)}
    out_of_p = sp.Sum(DO[e_] * sp.Sum(Pf[k] * V[k, e_], (k, 1, n.B_c)), (e_, 1, D))
    cases.append(("dP_j = ∂<dO, O>/∂P_j (O = Σ_k P_k v_k)", sum_zero(dP, gradient(out_of_p, Pf, j, keyset))))
    z_ = sp.Symbol("z", integer=True)  # each sum its own index: SymPy's simplify may merge products of sums
    Z = sp.Sum(sp.exp(Y[z_]), (z_, 1, n.B_c))
    loss = sp.Sum(DO[e_] * sp.Sum(sp.exp(Y[k]) * V[k, e_], (k, 1, n.B_c)), (e_, 1, D)) / Z + g * sp.log(Z)
    delta_g = run(backward_preprocess, {**env, n.dlse: g}, (d, 1, D))[n.delta]
    cases.append(("dlse = g: delta = rowsum(P ∘ dP) − g", sum_zero(delta_g, rowsum_p_dp - g)))
    ds_g = finite(run(backward_tile, {**env, n.delta: delta_g}, keys)[n.ds])
    want = gradient(loss, Y, j, keyset).replace(lambda e: isinstance(e, sp.Indexed) and e.base == Y,
                                                 lambda e: s * X[e.indices[0]])
    cases.append(("dlse = g: dS_j = ∂(<dO, O> + g·lse)/∂y_j (y = s·x)", sum_zero(ds_g, want)))
    return result("backward_symbolic", cases, "generic key j, Sum over [1, B_c] and [1, D]")
