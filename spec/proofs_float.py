"""Floating point: the exponent of ``p`` under rounding and FMA contraction, and the error-bound lemmas.

``safety_bounds`` proves every exponent ``<= 0`` in exact arithmetic. In fp32 the kernel computes
``t = fl(qk·qk_scale)`` and ``m_ij = max(m_i, fl(qk_scale·rowmax(qk)))``; claim
``exponent_rounding`` proves, with z3:

* unfused (product and subtraction rounded separately): ``fl(t - m_safe) <= 0`` exactly, because
  rounding is monotone (IEEE 754 round-to-nearest; an axiom of the model) and ``fl(0) = 0``;
* contracted into one FMA (``fma(qk, qk_scale, -m_safe)``, what ``enable_fp_fusion`` may emit): the
  exponent is ``<= 2u·|m_safe|`` (u = 2^-24), so ``p <= 2^(2u|m|)`` (``< 1 + 2^-17`` for
  ``|m| <= 2^4``, ``<= 2`` for ``|m| <= 2^23``; scores are finite fp32 numbers: inf/NaN inputs give
  NaN, as in SDPA) — the stated ulp slack, which the error bound's
  exponent error already covers; z3's fp32 model shows the slack is needed (an exponent > 0
  exists). The kernels keep the printed line as it is and allow the contraction;
* a masked score (``-inf``) gives the exponent ``-inf`` (p = 0) whether fused or not, never NaN,
  with the guard ``m_safe``; without it, a fully masked row gives NaN.

Claim ``error_bound`` proves the lemmas ``spec.error_bound`` composes into the forward bound.
"""

from __future__ import annotations

import sympy as sp
import z3

from spec import notation as n
from spec import terms
from spec.proof_tools import ZERO, result
from spec.registry import claim

U = sp.Rational(1, 2**24)
#: (score x, qk_scale c) in fp32 where the fused exponent fma(x, c, -fl(c·x)) is positive (~2^-25):
#: c = 0.1307... is sm_scale·log2(e) for sm_scale ≈ 0.0906 (head dim ≈ 122)
FMA_WITNESS = ("9.56383800506591796875", "0.13070140779018402099609375")


def _verdict(facts, goal, timeout_ms=20000):
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*facts, z3.Not(goal))
    r = s.check()
    if r == z3.unsat:
        return ZERO
    return sp.Symbol(f"z3 {r}: {s.model() if r == z3.sat else ''}")


def _printed_form_cases(forward_tile):
    """The analysis is about this form of the printed terms: p's exponent ``qk·qk_scale − m_safe``
    with ``m_safe`` the guard of ``m_ij = max(m_i, qk_scale·rowmax(qk))``."""
    chained = {t.symbol: t.expr for t in forward_tile}
    want_p = terms.exp2(n.qk * n.qk_scale - terms.col(n.m_safe))
    want_m = sp.Max(n.m_i, n.qk_scale * terms.rowmax(n.qk))
    want_guard = sp.Piecewise((0, sp.Eq(n.m_ij, n.NEG_INF)), (n.m_ij, True))
    return [(f"printed {name} has the analysed form", ZERO if chained.get(sym) == want else sp.Tuple(chained.get(sym)))
            for name, sym, want in (("p", n.p, want_p), ("m_ij", n.m_ij, want_m), ("m_safe", n.m_safe, want_guard))]


@claim("exponent_rounding",
       "in fp32 round-to-nearest, p's exponent qk·qk_scale − m_safe is <= 0 when the product and the "
       "subtraction are rounded separately, and <= 2u·|m_safe| (u = 2^-24) when contracted into one "
       "FMA (the slack is needed: z3 finds a positive fused exponent); a masked score gives −∞, never "
       "NaN, fused or not, thanks to the guard m_safe",
       r"\mathrm{fl}(\mathrm{fl}(x c) - m) \le 0,\quad \mathrm{fma}(x, c, -m) \le 2u|m|,\quad "
       r"x=-\infty \Rightarrow -\infty",
       scope="symbolic scores and scale; reals with a monotone rounding (z3) and IEEE fp32 (z3 FP), rounded",
       assumptions=("scale_positive",))
def prove_exponent_rounding(forward_tile=terms.FORWARD_TILE, fused_slack=2 * U, guarded=True):
    cases = _printed_form_cases(forward_tile)
    # (1) unfused: rounding fl is monotone with fl(0) = 0 (IEEE round-to-nearest)
    fl = z3.Function("fl", z3.RealSort(), z3.RealSort())
    a, b = z3.Reals("a b")
    monotone = [z3.ForAll([a, b], z3.Implies(a <= b, fl(a) <= fl(b))), fl(0) == 0]
    x, X, c, mi = z3.Reals("x X c m_i")  # a score, the tile's max score, qk_scale, the old max
    m = z3.If(mi > fl(c * X), mi, fl(c * X))  # m_ij = max(m_i, fl(qk_scale·rowmax)), finite here
    cases.append(("unfused: fl(fl(x·c) − m_ij) <= 0 for x <= rowmax",
                  _verdict(monotone + [c > 0, x <= X], fl(fl(x * c) - m) <= 0)))
    # (2) fused: one rounding of x·c − m_ij, m_ij >= fl(c·X) = c·X(1 + d1); standard model |d| <= u
    d1, d2 = z3.Reals("d1 d2")
    u = z3.RealVal(str(U))
    rounded_max = c * X * (1 + d1)  # fl(qk_scale·rowmax)
    m_fused = z3.If(mi > rounded_max, mi, rounded_max)  # m_ij, either side holding the max
    model = [c > 0, x <= X, d1 <= u, d1 >= -u, d2 <= u, d2 >= -u]
    fused = (x * c - m_fused) * (1 + d2)
    abs_m = z3.If(m_fused >= 0, m_fused, -m_fused)
    cases.append(("fused: fma(x, c, −m_ij) <= slack·|m_ij| for x <= rowmax",
                  _verdict(model, fused <= z3.RealVal(str(fused_slack)) * abs_m)))
    # (3) the slack is needed: an IEEE fp32 witness (found by z3's FP solver, checked here by
    # evaluation): a realistic qk_scale and score, the key holding the max, a positive fused exponent
    F, rne = z3.Float32(), z3.RNE()
    xf, cf = (z3.FPVal(w, F) for w in FMA_WITNESS)
    mf = z3.fpMul(rne, cf, xf)  # m_ij = fl(qk_scale·x)
    arg = z3.simplify(z3.fpFMA(rne, xf, cf, z3.fpNeg(mf)))
    cases.append((f"fp32: fma(x, c, −fl(c·x)) = {arg} > 0 at x, c = {FMA_WITNESS}",
                  ZERO if z3.is_true(z3.simplify(z3.fpGT(arg, z3.FPVal(0.0, F)))) else sp.Symbol(str(arg))))
    # (4) a masked score: -inf, fused or not, with the guard (every row of the tile masked: m_ij = -inf)
    ninf = z3.fpMinusInfinity(F)
    mij = ninf  # a row with no key yet and a fully masked tile
    m_safe = z3.If(z3.fpIsInf(mij), z3.FPVal(0.0, F), mij) if guarded else mij
    for label, e in (("unfused", z3.fpSub(rne, z3.fpMul(rne, ninf, cf), m_safe)),
                     ("fused", z3.fpFMA(rne, ninf, cf, z3.fpNeg(m_safe)))):
        cases.append((f"fp32 {label}: a masked score on a fully masked row gives exponent −inf (not NaN)",
                      _verdict([z3.fpGT(cf, z3.FPVal(0.0, F)), z3.Not(z3.fpIsInf(cf)), z3.Not(z3.fpIsNaN(cf))],
                               z3.And(z3.fpIsInf(e), z3.fpIsNegative(e)))))
    return result("exponent_rounding", cases, "z3: monotone rounding, standard model, IEEE fp32")


@claim("error_bound",
       "the lemmas of the forward error bound (spec.error_bound): (1+γ_a)(1+γ_b) <= 1+γ_{a+b}; numerator "
       "weights within [1−a, 1+a] and a denominator within [1−b, 1+b] of the exact ones move the "
       "output by at most max|v|·(a+b)/(1−b); an absolute exponent error E is a relative weight error "
       "of at most e^E − 1",
       r"|\hat o - o|\le \max|v|\,\frac{a+b}{1-b},\quad (1+\gamma_a)(1+\gamma_b)\le 1+\gamma_{a+b}",
       scope="symbolic a, b, u, n (reals, z3 nonlinear arithmetic); the weight lemma for 3 keys; "
             "exact statements about the rounded model",
       assumptions=())
def prove_error_bound(weight_bound=None):
    cases = []
    na, nb, u = z3.Reals("n_a n_b u")
    gamma = lambda k: k * u / (1 - k * u)  # noqa: E731
    cases.append(("(1 + γ_a)(1 + γ_b) <= 1 + γ_(a+b) for (a+b)u < 1",
                  _verdict([na >= 0, nb >= 0, u > 0, (na + nb) * u < 1],
                           (1 + gamma(na)) * (1 + gamma(nb)) <= 1 + gamma(na + nb))))
    # the weight lemma, in three steps: ô − o = Σ_j w_j v_j (r_j/D − 1), with w_j >= 0, Σ w_j = 1
    a, b, D, r, V, K, e, vv = z3.Reals("a b D r V K e v")
    K_ab = (a + b) / (1 - b) if weight_bound is None else weight_bound
    cases.append(("r in [1−a, 1+a], D in [1−b, 1+b] => |r/D − 1| <= (a+b)/(1−b)",
                  _verdict([a >= 0, b >= 0, b < 1, r >= 1 - a, r <= 1 + a, D >= 1 - b, D <= 1 + b],
                           z3.And(r / D - 1 <= K_ab, 1 - r / D <= K_ab))))
    cases.append(("|v| <= V, |e| <= K => |v·e| <= V·K",
                  _verdict([V >= 0, K >= 0, vv <= V, vv >= -V, e <= K, e >= -K], z3.And(vv * e <= V * K,
                                                                                        -(vv * e) <= V * K))))
    w, pj = z3.Reals("w_0 w_1 w_2"), z3.Reals("p_0 p_1 p_2")
    M = z3.Real("M")
    convex = [M >= 0, sum(w) == 1] + [x >= 0 for x in w] + [z3.And(x <= M, x >= -M) for x in pj]
    total = sum(wj * x for wj, x in zip(w, pj))
    cases.append(("w_j >= 0, Σ w_j = 1, |p_j| <= M => |Σ w_j p_j| <= M (3 keys)",
                  _verdict(convex, z3.And(total <= M, -total <= M))))
    # exponent error -> weight error, with the lemma of safety_bounds: e^{-t} = 1/(1+r), r >= 0 for t >= 0
    E, t, rr = sp.symbols("E t r", nonnegative=True)
    below_one = 1 / (1 + rr)  # e^{-t}
    upper = sp.exp(E) * (1 - below_one)  # (e^E − 1) − (e^{E−t} − 1) for E' = E − t, t >= 0
    cases.append(("E' <= E: e^{E'} − 1 <= e^E − 1", ZERO if sp.factor(upper).is_nonnegative else upper))
    lower = (sp.exp(E) - 1) - (1 - sp.exp(-E))  # E' = −E: e^E + e^{−E} − 2 = (e^{E/2} − e^{−E/2})^2
    cases.append(("E' >= −E: 1 − e^{E'} <= e^E − 1",
                  ZERO if sp.expand(lower - (sp.exp(E / 2) - sp.exp(-E / 2)) ** 2) == 0 else lower))
    return result("error_bound", cases, "z3 nonlinear real arithmetic and SymPy")
