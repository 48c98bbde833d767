"""Proofs about the seeds' recurrences and the state algebra ``(m, d, o)`` with ``⊕``.

Each ``prove_<claim>`` takes the recurrence or operator under test as an optional argument
(default: the one in ``spec.recurrences``), so a test can hand it a mutant and see FAILED.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import recurrences as R
from spec import terms
from spec.registry import claim
from spec.proofs.tools import equal_cases, finite_state, result, run_terms, state_cases

# One query row: logits x[j], values v[j] (one output column), the step index i.
x = sp.IndexedBase("x", real=True)
v = sp.IndexedBase("v", real=True)
j = sp.Symbol("j", integer=True)
i = sp.Symbol("i", integer=True, positive=True)
m_prev = sp.Symbol("m_prev", real=True)  # m_{i-1}, the max of x_1..x_{i-1} (i >= 2)


def _sum_upto(f, upper):
    return sp.Sum(f, (j, 1, upper))


def _peel(s: sp.Sum) -> sp.Expr:
    """``Σ_{j=a}^{b} f = Σ_{j=a}^{b-1} f + f(b)``: split off the last term of a sum."""
    f, (jj, a, b) = s.function, s.limits[0]
    return sp.Sum(f, (jj, a, b - 1)) + f.subs(jj, b)


@claim("online_softmax_invariant",
       "induction step: if d'_{i-1} = Σ_{j<i} e^{x_j−m_{i-1}} then d'_i = Σ_{j≤i} e^{x_j−m_i}; "
       "same for o'_i / õ_i",
       r"d'_{i-1}=\sum_{j<i}e^{x_j-m_{i-1}} \Rightarrow d'_i=\sum_{j\le i}e^{x_j-m_i}"
       r"\text{ (same for } o'_i,\ \tilde o_i)",
       scope="induction step at a symbolic step i (SymPy Sum); kernel softmax on 3 keys; reals, exact")
def prove_online_softmax_invariant(online=R.online_step, fa1=R.fa1_step, fa2=R.fa2_step,
                                   forward_tile=terms.FORWARD_TILE,
                                   normalise=terms.SOFTMAX_NORMALISE):
    # Induction hypotheses, as sums over the keys seen before step i.
    d_hyp = _sum_upto(sp.exp(x[j] - m_prev), i - 1)
    ot_hyp = _sum_upto(sp.exp(x[j] - m_prev) * v[j], i - 1)  # FA2: õ_{i-1}
    m_i, d_i = online(m_prev, d_hyp, x[i])
    # What the invariant says at step i (with m_i = max(m_{i-1}, x_i)).
    d_goal = _peel(_sum_upto(sp.exp(x[j] - m_i), i))
    ot_goal = _peel(_sum_upto(sp.exp(x[j] - m_i) * v[j], i))
    x1, v1 = sp.symbols("x_1 v_1", real=True)
    xs = sp.symbols("x_1:4", real=True)
    m3 = online(online(online(R.NEG_INF, 0, xs[0])[0], 0, xs[1])[0], 0, xs[2])[0]
    cases = equal_cases([
        ("m_i = max_{j<=i} x_j (unrolled, 3 steps)", m3, sp.Max(*xs)),
        ("d'_i from d'_{i-1}", d_i, d_goal),
        ("õ_i from õ_{i-1} (FA2)", fa2(m_prev, d_hyp, ot_hyp, x[i], v[i])[2], ot_goal),
        ("o'_i from o'_{i-1} (FA1)", fa1(m_prev, d_hyp, ot_hyp / d_hyp, x[i], v[i])[2],
         ot_goal / d_goal),
        ("base: (m_1, d'_1) from E", online(R.NEG_INF, 0, x1), (x1, 1)),
        ("base: õ_1 from E", fa2(R.NEG_INF, 0, 0, x1, v1)[2], v1),
        ("base: o'_1 from E", fa1(R.NEG_INF, 0, 0, x1, v1)[2], v1),
        ("2-pass = 3-pass: a_i from (m_N, d'_N) = safe softmax = softmax",
         _two_pass_softmax(xs, online), tuple(R.softmax(xs))),
        ("kernel softmax (tile loop + SOFTMAX_NORMALISE) = safe softmax",
         _kernel_softmax(xs, forward_tile, normalise), tuple(R.safe_softmax(xs))),
        ("kernel tile update, one key, finite state: (m_i, l_i) = one online step",
         _kernel_step(forward_tile)[:2], online(m_prev, sp.Symbol("d_prev", positive=True), x[i])),
    ])
    return result("online_softmax_invariant", cases, "induction on i with symbolic sums")


def _kernel_step(forward_tile):
    """The kernel's tile update (``FORWARD_TILE``) on one key ``x_i`` (scale 1) from a finite state
    ``(m_prev, d_prev, õ_prev)``: ``(m, d, õ)`` in natural units."""
    env = {n.m_i: m_prev * n.LOG2E, n.l_i: sp.Symbol("d_prev", positive=True),
           n.acc: sp.Matrix([[sp.Symbol("õ_prev", real=True)]]), n.qk: sp.Matrix([[x[i]]]),
           n.v: sp.Matrix([[v[i]]]), n.qk_scale: n.LOG2E}
    out = run_terms(forward_tile, env)
    return out[n.m_i] * n.LN2, out[n.l_i], out[n.acc][0, 0]


def _two_pass_softmax(xs, online):
    """Seed 003's 2-pass online softmax: ``a_i = e^{x_i - m_N} / d'_N``."""
    m, d = R.NEG_INF, sp.Integer(0)
    for xx in xs:
        m, d = online(m, d, xx)
    return tuple(sp.exp(xx - m) / d for xx in xs)


def _kernel_softmax(xs, forward_tile, normalise):
    """The softmax kernel's terms: one tile of raw scores ``xs`` (scale 1/LOG2E·LOG2E = 1)."""
    env = {n.m_i: R.NEG_INF, n.l_i: 0, n.acc: sp.Matrix([[0]]), n.qk: sp.Matrix([xs]),
           n.v: sp.zeros(len(xs), 1), n.qk_scale: n.LOG2E}
    out = run_terms(tuple(forward_tile) + tuple(normalise), env)
    return tuple(out[n.a])


@claim("fa2_deferred_normalisation",
       "FA2's õ_N / d'_N equals FA1's o'_N",
       r"\tilde o_N / d'_N = o'_N",
       scope="induction step, symbolic; 2-step unrolling; kernel acc on one key; reals, exact")
def prove_fa2_deferred_normalisation(fa1=R.fa1_step, fa2=R.fa2_step, forward_tile=terms.FORWARD_TILE):
    mp, xi, vi, ot = sp.symbols("m_prev x_i v_i õ_prev", real=True)
    dp = sp.Symbol("d_prev", positive=True)
    # invariant o'_i = õ_i / d'_i: step, base, and two steps unrolled from E
    m1, d1, o1 = fa1(mp, dp, ot / dp, xi, vi)
    _, _, o2 = fa2(mp, dp, ot, xi, vi)
    xs, vs = sp.symbols("x_1:3", real=True), sp.symbols("v_1:3", real=True)
    s1 = s2 = (R.NEG_INF, sp.Integer(0), sp.Integer(0))
    for xk, vk in zip(xs, vs):
        s1, s2 = fa1(*s1, xk, vk), fa2(*s2, xk, vk)
    cases = equal_cases([
        ("step: o'_{i-1} = õ_{i-1}/d'_{i-1} => o'_i = õ_i/d'_i", o1, o2 / d1),
        ("base: o'_1 = õ_1/d'_1", fa1(R.NEG_INF, 0, 0, xi, vi)[2],
         fa2(R.NEG_INF, 0, 0, xi, vi)[2] / fa2(R.NEG_INF, 0, 0, xi, vi)[1]),
        ("unrolled N=2 from E", s1[2], s2[2] / s2[1]),
        ("kernel acc update, one key, finite state = the FA2 step õ_i",
         _kernel_step(forward_tile)[2],
         fa2(m_prev, sp.Symbol("d_prev", positive=True), sp.Symbol("õ_prev", real=True), x[i], v[i])[2]),
    ])
    return result("fa2_deferred_normalisation", cases, "induction and a 2-step unrolling")


@claim("merge_associative",
       "(a ⊕ b) ⊕ c = a ⊕ (b ⊕ c) for all finite and −∞ maxima",
       r"(a\oplus b)\oplus c = a\oplus(b\oplus c)",
       scope="symbolic states (finite or E); reals, exact")
def prove_merge_associative(merge=R.merge):
    cases = equal_cases(
        (label, merge(merge(a, b), c), merge(a, merge(b, c)))
        for label, (a, b, c) in state_cases("abc"))
    return result("merge_associative", cases, "each of a, b, c finite or E")


@claim("merge_commutative", "a ⊕ b = b ⊕ a", r"a\oplus b = b\oplus a",
       scope="symbolic states (finite or E); reals, exact")
def prove_merge_commutative(merge=R.merge):
    cases = equal_cases((label, merge(a, b), merge(b, a)) for label, (a, b) in state_cases("ab"))
    return result("merge_commutative", cases, "each of a, b finite or E")


@claim("merge_homomorphism",
       "α(m,d,o) = (d·eᵐ, o·eᵐ) maps ⊕ to +; hence every tiling, loop order (FA1 KV-outer, "
       "FA2 Q-outer) and split of the keys gives the same result in exact arithmetic",
       r"\alpha(a\oplus b)=\alpha(a)+\alpha(b),\quad \alpha(m,d,o)=(d e^m, o e^m)",
       scope="symbolic states; 5 groupings of 4 keys (every tiling: claim every_tiling); reals, exact")
def prove_merge_homomorphism(merge=R.merge):
    pairs = [(f"α(a⊕b) = α(a)+α(b) [{label}]", R.alpha_map(merge(a, b)),
              tuple(p + q for p, q in zip(R.alpha_map(a), R.alpha_map(b))))
             for label, (a, b) in state_cases("ab")]
    # Hence: any grouping/order of the keys has α = (Σ e^{x_j}, Σ e^{x_j} v_j) ...
    xs, vs = sp.symbols("x_1:5", real=True), sp.symbols("v_1:5", real=True)
    k = [R.key_state(xx, vv) for xx, vv in zip(xs, vs)]
    plain = (sp.Add(*[sp.exp(xx) for xx in xs]), sp.Add(*[sp.exp(xx) * vv for xx, vv in zip(xs, vs)]))
    groupings = {
        "left fold, tile 1 (FA2 loop)": R.fold(k, merge),
        "tiles of 2": merge(merge(k[0], k[1]), merge(k[2], k[3])),
        "tiles of 3 then 1": merge(merge(merge(k[0], k[1]), k[2]), k[3]),
        "right fold (split-KV reduction)": merge(k[0], merge(k[1], merge(k[2], k[3]))),
        "keys permuted": merge(merge(k[2], k[0]), merge(k[3], k[1])),
    }
    pairs += [(f"α({name}) = Σ α(key)", R.alpha_map(s), plain) for name, s in groupings.items()]
    # ... and the row's result depends on the state only through α.
    a = finite_state("a")
    out, lse = R.normalise(a)
    ad, ao = R.alpha_map(a)
    pairs += [("output o/d = α_o/α_d", out, ao / ad), ("lse m + log d = log α_d", lse, sp.log(ad))]
    return result("merge_homomorphism", equal_cases(pairs),
                  "homomorphism, 5 groupings of 4 keys, result as a function of α")


def normalised(s: R.State) -> tuple[sp.Expr, sp.Expr]:
    """A set of keys' partial result ``(o, lse)`` (``R.normalise``); no key at all stores the
    identity ``(0, -oo)``, what the kernels' epilogue writes for it (``l_safe``, ``lse``)."""
    return (sp.Integer(0), R.NEG_INF) if s == R.E else R.normalise(s)


def run_merge(x, y, merge_terms=terms.MERGE_STATE) -> tuple[sp.Expr, sp.Expr]:
    """The printed merge terms on two partial results ``x = (o_x, lse_x)``, ``y``: ``(o, lse)``."""
    out = run_terms(merge_terms, {n.o_a: x[0], n.lse_a: x[1], n.o_b: y[0], n.lse_b: y[1]})
    return out[n.o], out[n.lse]


def fold_merge(parts, merge_terms=terms.MERGE_STATE, identity=terms.MERGE_IDENTITY) -> tuple[sp.Expr, sp.Expr]:
    """The split-KV combine: the printed merge folded over ``parts`` from ``identity`` (0, -oo)."""
    acc = identity
    for x in parts:
        acc = run_merge(acc, x, merge_terms)
    return acc


@claim("lse_merge",
       "the printed merge of two normalised partial results (o, lse) (spec.terms.MERGE_STATE, "
       "natural-log lse) equals normalise(a ⊕ b) for states a, b each of ≥1 key or E (a pair of "
       "empty ones gives (0, -inf), no NaN); (0, -inf) is its identity on both sides and it is "
       "commutative; hence, by induction on the number of splits S (step: the a ⊕ b case with a "
       "the state of the splits folded so far) and merge_associative/merge_commutative, folding or "
       "tree-reducing any S ≥ 0 splits in any order gives normalise of the state of all keys; "
       "exact arithmetic",
       r"\mathrm{merge}((o_a, \mathrm{lse}_a), (o_b, \mathrm{lse}_b)) = "
       r"\mathrm{normalise}(a\oplus b),\quad \mathrm{merge}(x, (0, -\infty)) = x",
       scope="symbolic states (finite or E) and symbolic partials (o, lse); any number of splits by "
             "induction (S = 3 unrolled only in tests/test_merge.py); reals, exact")
def prove_lse_merge(merge=R.merge, merge_terms=terms.MERGE_STATE, identity=terms.MERGE_IDENTITY, unrolled=False):
    pairs = [(f"merge(n(a), n(b)) = n(a ⊕ b) [{label}]",
              run_merge(normalised(a), normalised(b), merge_terms), normalised(merge(a, b)))
             for label, (a, b) in state_cases("ab")]
    # identity and commutativity on arbitrary partial results (not only those of a state)
    x = sp.symbols("o_x lse_x", real=True)
    y = sp.symbols("o_y lse_y", real=True)
    empty = identity
    pairs += [("identity: merge(x, (0, -inf)) = x", run_merge(x, empty, merge_terms), x),
              ("identity: merge((0, -inf), x) = x", run_merge(empty, x, merge_terms), x),
              ("commutative: merge(x, y) = merge(y, x)", run_merge(x, y, merge_terms),
               run_merge(y, x, merge_terms))]
    # every partial result (o, lse), lse finite, is normalise of the state (lse, 1, o): so the
    # a ⊕ b case covers merging any two partials, and a fold or tree of merges over S splits is
    # normalise of the same fold or tree of ⊕ (induction on S / on the tree) = normalise of the
    # state of all keys, in any order (merge_associative, merge_commutative)
    pairs.append(("every partial x = n(lse_x, 1, o_x)", normalised(R.State(x[1], sp.Integer(1), x[0])), x))
    # S = 3 splits, unrolled (unrolled=True: a cross-check of the induction, run by
    # tests/test_merge.py; it costs 5 s, more than the rest of the registry, so prove_all skips it):
    # one fold in a non-sorted order, lse_1 >= lse_2 >= lse_3 (slack t >= 0)
    if unrolled:
        L = sp.Symbol("L", real=True)
        t1, t2 = sp.symbols("t_1 t_2", nonnegative=True)
        lses = (L, L - t1, L - t1 - t2)
        parts = list(zip(sp.symbols("o_1:4", real=True), lses))
        total = sp.Add(*[sp.exp(lse) for lse in lses])
        whole = (sp.Add(*[sp.exp(lse) * o for o, lse in parts]) / total, sp.log(total))
        pairs.append(("S = 3, fold in order 3, 1, 2",
                      fold_merge([parts[2], parts[0], parts[1]], merge_terms, identity), whole))
    return result("lse_merge", equal_cases(pairs),
                  "a, b finite or E; identity, commutativity; every partial is a state" + (
        "; S = 3 unrolled" if unrolled else ""))
