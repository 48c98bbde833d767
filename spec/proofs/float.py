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

Claim ``error_bound`` proves the lemmas ``spec.error_bound`` composes into the forward bound, and
claim ``forward_error_bound`` proves the composition itself (the functions ``forward_bound`` evaluates,
on symbolic reals) from the standard model: every key's exponent error, the roundings of the carried
``acc`` and ``l_i`` counted in the printed tile update, and the ratio, division and store for ``out``;
for ``lse``, the same ``l_i`` through the printed epilogue's log2, the add of ``m_i`` and the multiply by
``ln 2`` (the computed max cancels exactly).
"""

from __future__ import annotations

import itertools

import sympy as sp
import z3
from sympy.codegen.cfunctions import log2

from spec import error_bound, terms
from spec import notation as n
from spec.proofs.tools import ZERO, expanded_residual, result
from spec.proofs.tools import z3_verdict as _verdict
from spec.registry import claim

U = sp.Rational(1, 2**24)
#: (score x, qk_scale c) in fp32 where the fused exponent fma(x, c, -fl(c·x)) is positive (~2^-25):
#: c = 0.1307... is sm_scale·log2(e) for sm_scale ≈ 0.0906 (head dim ≈ 122)
FMA_WITNESS = ("9.56383800506591796875", "0.13070140779018402099609375")


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
       scope="symbolic a, b, u, n (reals, z3 nonlinear arithmetic); the weight lemma for 3 keys (for any "
             "number of keys: forward_error_bound's generic key and finite-sum lemma); exact statements about "
             "the rounded model",
       assumptions=())
def prove_error_bound(weight_bound=None):
    cases = []
    na, nb, u = z3.Reals("n_a n_b u")
    gamma = lambda k: error_bound.gamma_of(k, u)  # noqa: E731
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


def _roundings(expr, carried):
    """How many roundings the value ``carried`` goes through in ``expr``: each Add/Mul on its path to
    the root rounds once per extra operand (a binary operation per rounding, as compiled); a
    broadcast does not round; any other function of it counts one (conservative). None: absent."""
    if expr == carried:
        return 0
    below = [r for r in (_roundings(x, carried) for x in expr.args) if r is not None]
    if not below:
        return None
    if isinstance(expr, (sp.Add, sp.Mul)):
        return max(below) + len(expr.args) - 1
    return max(below) + (0 if isinstance(expr, (terms.col, terms.row)) else 1)


def scaled_score_roundings(qk_scale_expr):
    """How many times the scaled score ``x·qk_scale`` is rounded, counted in a printed ``qk_scale``: its
    operations on ``sm_scale``, one per fp32 constant (an irrational literal such as log2 e, rounded once
    when compiled), and the product ``x·qk_scale``. None: ``sm_scale`` is absent."""
    count = _roundings(qk_scale_expr, n.sm_scale)
    constants = sum(1 for f in sp.Mul.make_args(qk_scale_expr) if f.is_number and not f.is_Rational)
    return None if count is None else count + constants + 1


@claim("forward_error_bound",
       "in the standard model (every fp32 operation fl(x∘y) = (x∘y)(1+δ), |δ| <= u; exp2 within U_FUNC "
       "(relative), log2 within U_FUNC·(1 + |log2 x|); ln monotone with ln(xy) = ln x + ln y; "
       "P cast to the input dtype, |δ_p| <= u_p; the stored out, u_out; hypotheses: the inner-product lemma "
       "|fl(a·b) − a·b| <= γ_n Σ|a_i b_i| for the tile's dot, rowsum and q·k (any summation order), no "
       "underflow or overflow), one query row, any N_k, B_c, head dim D and number of tiles T: (i) every key's "
       "computed exponent — its rounded score, p's subtraction of the running max (product and subtraction "
       "rounded separately), its later rescales' exponents (they telescope, induction on tiles) and its at "
       "most T + 1 exp2 factors — is within E = exponent_error = s·A·score_factor(γ_D, γ_3, u) (SCALE_ROUNDINGS = 3, "
       "counted in the printed QK_SCALE: log2 e as an fp32 constant, the product, x·qk_scale) + "
       "(T+1)·(−log(1 − U_FUNC)) of s·x_j − m_T (A = max_j Σ_d |q_d k_jd|); (ii) the printed acc and l_i "
       "updates round the carried weight TILE_ROUNDINGS = 2 times per later tile (counted in the printed "
       "terms; induction on T: within γ_{2T}); (iii) for one generic key lifted by the finite-sum lemma "
       "|S| <= C, |t| <= c ⇒ |S + t| <= C + c, the ratio, the division and the store give "
       "|out^ − out| <= max|v|·out_bound(e^E − 1, ρ_num, ρ_den, u, u_out) — the formula "
       "spec.error_bound.forward_bound evaluates; (iv) for a row with a key, the printed lse = (m_i + "
       "log2 l_i)·ln 2 (its form checked, LSE_ROUNDINGS = 3 roundings after log2 counted: the add, ln 2 in "
       "fp32, the multiply): the computed max m_T cancels exactly (lse = m ln 2 + ln L for any real m), "
       "l_i = L(1 + θ) with |θ| <= b from (iii), every computed exponent <= 0 and the key that set m_T at 0 "
       "(monotone rounding) give e^{−E} <= L <= N_k e^E, so |lse^ − lse| <= lse_bound(E, −log(1 − b), "
       "log N_k, |lse|) = d + γ_3(|lse| + d), d = −log(1 − b) + U_FUNC·(1 + log N_k + E − log(1 − b)) — the "
       "formula forward_bound evaluates; and forward_bound, the function the tolerances call, is that "
       "composition (T = max(1, ceil(N_k/B_c)) tiles, every term; checked in SymPy on symbolic sizes); (v) with "
       "the softcap on, every key's capped score c·tanh(s·x/c) is computed within s·A·softcap_score_factor(γ_D, "
       "γ_2, γ_5, ρ_t, u) (ρ_t = SOFTCAP_REL, claim softcap_accuracy; tanh 1-Lipschitz and |tanh a| <= |a| as "
       "hypotheses), for every cap, and forward_bound(softcap=True) is (i)–(iv) with that factor; (vi) with ALiBi on "
       "(cap on or off), positions i, j and |shift| below 2^24, the printed bias alibi_coef·|i + shift − j| "
       "(alibi_coef = fl(slope·fl(log2 e)); the distance formed from i, j exact in fp32 and shift: at most one "
       "rounding, none below 2^24; the product; ALIBI_ROUNDINGS = 4, counted in the printed ALIBI_SCALAR and "
       "ALIBI) is within "
       "γ_4·|b| of b = slope·log2 e·|i + shift − j| and is added to the score once (one rounding, the printed form "
       "checked; an FMA contraction of the two rounds less), the raw score without the cap is taken into log2 "
       "units with SCORE_LOG2_ROUNDINGS = 3 roundings (log2 e, scale·log2 e, the product; qk_scale = 1 exact; "
       "counted), so every key's exponent is within E = alibi_exponent(s·A, φ, β, γ_4, u) + (T+1)·(−log(1 − "
       "U_FUNC)), φ the score's factor (score_factor(γ_D, γ_3, u) or the cap's) and β >= max_j |slope·(i + shift − "
       "j)| of the row (any real slope, natural units), and forward_bound(alibi=β) is (i)–(iv) with that E; the "
       "backward has no bound (its tolerances are empirical)",
       r"|\hat o - o| \le \max|v|\left(\frac{a+b}{1-b}(1+u)(1+u_{out}) + (1+u)(1+u_{out}) - 1\right),\ "
       r"a = (1+\rho_w)(1+\rho_{num}) - 1,\ b = (1+\rho_w)(1+\rho_{den}) - 1,\ \rho_w = e^E - 1;\ "
       r"|\widehat{lse} - lse| \le d + \gamma_3(|lse| + d),\ d = \lambda + U_f(1 + \log N_k + E + \lambda),\ "
       r"\lambda = -\log(1-b)",
       terms=(),
       scope="symbolic u, u_p, u_out, U_FUNC, γ_D, B_c, T, N_k (z3 nonlinear reals; one generic key + "
             "finite-sum lemma, induction on tiles); rounded: standard model, no underflow/overflow, the "
             "inner-product lemma as a hypothesis, p's exponent unfused (FMA: exponent_rounding bounds its "
             "sign only; log2 and ln axioms above); out and lse (rows with a key; the empty row's −∞: "
             "forward_epilogue); spec.error_bound.forward_bound checked symbolically to be this composition for "
             "every dtype, softcap off and on, ALiBi off and on (symbolic β: any slope; positions i, j "
             "and |shift| below 2^24, exact in fp32; the bias's 4 roundings and its add counted in the printed "
             "terms); the backward has no bound (empirical tolerances)",
       assumptions=("scale_positive",))
def prove_forward_error_bound(out_bound=error_bound.out_bound, forward_tile=terms.FORWARD_TILE,
                              tile_roundings=error_bound.TILE_ROUNDINGS, exponent_factor=error_bound.score_factor,
                              lse_bound=error_bound.lse_bound, forward_epilogue=terms.FORWARD_EPILOGUE,
                              lse_roundings=error_bound.LSE_ROUNDINGS, bound=None,
                              softcap_factor=error_bound.softcap_score_factor,
                              alibi_factor=error_bound.alibi_exponent, alibi_terms=(terms.ALIBI_SCALAR,) + terms.ALIBI,
                              alibi_roundings=error_bound.ALIBI_ROUNDINGS,
                              score_log2_terms=(terms.SCORE_LOG2_SCALAR,) + terms.SCORE_LOG2 + (terms.MOD_TILE_SCALE,),
                              score_log2_roundings=error_bound.SCORE_LOG2_ROUNDINGS,
                              scale_roundings=error_bound.SCALE_ROUNDINGS, qk_scale=terms.QK_SCALE):
    chained = {t.symbol: t.expr for t in forward_tile}
    cases = []
    # (1) the printed form the count is about: new keys enter through one dot / rowsum, then one add
    for name, sym, want in (("acc", n.acc, n.acc * terms.col(n.alpha) + terms.dot(n.p, n.v)),
                            ("l_ij", n.l_ij, terms.rowsum(n.p)), ("l_i", n.l_i, n.l_i * n.alpha + n.l_ij)):
        cases.append((f"printed {name} has the analysed form", ZERO if chained.get(sym) == want
                      else sp.Tuple(chained.get(sym))))
    for name, sym in (("acc", n.acc), ("l_i", n.l_i)):
        count = _roundings(chained[sym], sym)
        cases.append((f"the carried {name} is rounded <= TILE_ROUNDINGS = {tile_roundings} times per tile",
                      ZERO if count is not None and count <= tile_roundings else sp.Symbol(f"{count} roundings")))
    u, k, T = z3.Reals("u k T")
    g = lambda m: error_bound.gamma_of(m, u)  # noqa: E731  γ_m on symbolic reals
    R = tile_roundings
    # (2) induction on the tiles: a key's carried factor (1 + θ), |θ| <= γ_{R t}, after R more roundings
    th = z3.Real("theta")
    ds = z3.Reals(" ".join(f"delta_{r}" for r in range(R)))
    model = [u > 0, k >= 0, (k + R) * u < 1, th <= g(k), th >= -g(k)] + [z3.And(x <= u, x >= -u) for x in ds]
    f = (1 + th) * _product([1 + x for x in ds])
    cases.append((f"step: |θ| <= γ_k, {R} roundings => |(1+θ)Π(1+δ) − 1| <= γ_(k+{R})",
                  _verdict(model, z3.And(f - 1 <= g(k + R), 1 - f <= g(k + R)))))
    cases.append(("a key entering at tile t: one rounding (the add), |δ| <= u <= γ_(R t), t >= 1",
                  _verdict([u > 0, T >= 1, R * T * u < 1], u <= g(R * T))))
    # (3) products of factors: x in 1 ± α, y in 1 ± β => xy in 1 ± weight_factor(α, β) (cast × dot,
    # tile-local × carried, exponent × rounding)
    al, be, x, y = z3.Reals("alpha beta x y")
    wf = error_bound.weight_factor(al, be)
    cases.append(("x in 1±α, y in 1±β => |xy − 1| <= weight_factor(α, β)",
                  _verdict([al >= 0, be >= 0, x >= 1 - al, x <= 1 + al, y >= 1 - be, y <= 1 + be],
                           z3.And(x * y - 1 <= wf, 1 - x * y <= wf))))
    tl = z3.Real("tile_local")
    cf = error_bound.carried_factor(tl, T, u_n=g)
    cases.append(("carried_factor(ρ, T) = weight_factor(ρ, γ_(R T))",
                  _verdict([T >= 1, u > 0, R * T * u < 1, tl >= 0], cf == error_bound.weight_factor(tl, g(R * T)))))
    # (4) one generic key, then the finite-sum lemma: the sums' errors are bounded by the sums of bounds
    w, v, M, a, b, fk = z3.Reals("w v M a b f")
    key = [w >= 0, M >= 0, v <= M, v >= -M, a >= 0, b >= 0]
    cases += [
        ("generic key: f in 1±a => |w f v − w v| <= a·M·w",
         _verdict(key + [fk >= 1 - a, fk <= 1 + a], z3.And(w * fk * v - w * v <= a * M * w,
                                                               w * v - w * fk * v <= a * M * w))),
        ("generic key: |w v| <= M·w", _verdict(key, z3.And(w * v <= M * w, -(w * v) <= M * w))),
        ("generic key: f in 1±b => |w f − w| <= b·w",
         _verdict(key + [fk >= 1 - b, fk <= 1 + b], z3.And(w * fk - w <= b * w, w - w * fk <= b * w))),
    ]
    S, C, t, c = z3.Reals("S C t c")
    cases.append(("finite sums (induction on N_k, base 0): |S| <= C, |t| <= c => |S + t| <= C + c",
                  _verdict([S <= C, -S <= C, t <= c, -t <= c], z3.And(S + t <= C + c, -(S + t) <= C + c))))
    # (5) the ratio of the rounded sums (divided by W = Σ w_j > 0: n = N/W, n^ = N^/W, l^ = L^/W),
    # the division and the store: out_bound, in three steps
    rw, rn, rd, uo, nn, nh, lh, e, x, ell, K = z3.Reals("rho_w rho_num rho_den u_out n nh lh e x ell K")
    a_, b_ = error_bound.weight_factor(rw, rn), error_bound.weight_factor(rw, rd)
    signs = [rw >= 0, rn >= 0, rd >= 0, M >= 0, b_ < 1]
    cases.append(("|n| <= M, |n^ − n| <= a·M, |l^ − 1| <= b => |n^ − n·l^| <= (a+b)·M",
                  _verdict(signs + [nn <= M, -nn <= M, nh - nn <= a_ * M, nn - nh <= a_ * M,
                                    lh - 1 <= b_, 1 - lh <= b_],
                           z3.And(nh - nn * lh <= (a_ + b_) * M, nn * lh - nh <= (a_ + b_) * M))))
    cases.append(("|e| <= (a+b)·M, l^ >= 1 − b > 0 => |e/l^| <= M·(a+b)/(1−b)   (n^/l^ − n = e/l^)",
                  _verdict(signs + [e <= (a_ + b_) * M, -e <= (a_ + b_) * M, lh >= 1 - b_],
                           z3.And(e / lh <= M * (a_ + b_) / (1 - b_), -e / lh <= M * (a_ + b_) / (1 - b_)))))
    last = 1 + error_bound.weight_factor(u, uo)  # (1 + δ)(1 + δ_out) in [2 − last, last] by (3)
    cases.append(("|x − n| <= M·K, |n| <= M, ℓ = (1+δ)(1+δ_out) => |x·ℓ − n| <= M·(K·last + last − 1)",
                  _verdict([M >= 0, K >= 0, u > 0, uo >= 0, nn <= M, -nn <= M, x - nn <= M * K, nn - x <= M * K,
                            ell <= last, ell >= 2 - last],
                           z3.And(x * ell - nn <= M * (K * last + last - 1), nn - x * ell <= M * (K * last + last - 1)))))
    cases.append(("out_bound(ρ_w, ρ_num, ρ_den, u, u_out) >= K·last + last − 1 with K = (a+b)/(1−b)",
                  _verdict(signs + [u > 0, uo >= 0],
                           out_bound(rw, rn, rd, u, uo, num=REALS) >= (a_ + b_) / (1 - b_) * last + last - 1)))
    cases += _exponent_cases(exponent_factor, softcap_factor, scale_roundings, qk_scale)
    cases += _alibi_cases(alibi_factor, exponent_factor, softcap_factor, alibi_terms, alibi_roundings,
                          score_log2_terms, score_log2_roundings)
    cases += _lse_cases(lse_bound, forward_epilogue, lse_roundings)
    cases += _composition_cases(bound or error_bound.forward_bound)
    return result("forward_error_bound", cases, "z3 nonlinear real arithmetic; generic key + finite-sum lemma; "
                  "forward_bound checked symbolically to be the stated composition")


class Reals(error_bound.Numbers):
    """``spec.error_bound.Numbers`` on the claims' reals (z3, SymPy): the quotient by the denominator's
    ``1 − b`` is a plain division, the claims' hypothesis ``b < 1`` (floats past it: ``inf``)."""

    over_one_minus = staticmethod(lambda x, b: x / (1 - b))


#: the bound's lemmas (``out_bound``) evaluated on z3 or SymPy reals
REALS = Reals()


def symbolic_numbers(u, uf, up, uo, p_abs=0):
    """``spec.error_bound.Numbers`` in SymPy: the roundoffs ``u``, ``U_FUNC``, ``u_p``, ``u_out`` (and FP8's
    ``p_abs``) symbolic for every dtype, ``γ_m = m u / (1 − m u)``, the functions SymPy's (a class: call it)."""
    class Symbolic(Reals):
        U, U_FUNC = u, uf
        unit_roundoff = {dtype: up for dtype in error_bound.UNIT_ROUNDOFF}
        u_store = {dtype: uo for dtype in error_bound.U_STORE}
        p_abs = {dtype: p_abs for dtype in error_bound.UNIT_ROUNDOFF}
        gamma = staticmethod(lambda m: error_bound.gamma_of(m, u))
        ceil = staticmethod(sp.ceiling)
        max = staticmethod(sp.Max)
        abs = staticmethod(sp.Abs)
        exp = staticmethod(sp.exp)
        log = staticmethod(sp.log)
        log1p = staticmethod(lambda x: sp.log(1 + x))
        expm1 = staticmethod(lambda x: sp.exp(x) - 1)

    return Symbolic


def _composition_cases(bound, score_mod=False):
    """``forward_bound`` (what the tolerances use), evaluated in SymPy on symbolic sizes and roundoffs,
    equals the composition this claim states, built here from the proved lemmas: ``T = max(1,
    ceil(N_k / B_c))`` tiles, ``E = s·A·score_factor(γ_D, γ_3, u) + (T + 1)(−log(1 − U_FUNC))``, ``ρ_w =
    e^E − 1``, ``ρ_num = carried_factor(weight_factor(u_p, γ_{B_c}), T)``, ``ρ_den =
    carried_factor(γ_{B_c}, T)``, ``out = out_bound(ρ_w, ρ_num, ρ_den, u, u_out)``, ``lse =
    lse_bound(E, −log(1 − b), log max(N_k, 1), |lse|)`` with ``b = weight_factor(ρ_w, ρ_den)`` — the
    lemmas as ``spec.error_bound`` defines them, which the cases above prove. ``score_mod``: instead, the
    composition with a user score_mod's ``E = score_mod_exponent(s·A, α, κ, γ_D, γ_5, γ_k, γ_4, u) + (T +
    1)(−log(1 − U_FUNC))`` (symbolic ``k``, ``α``, ``κ``; claim score_mod_error_bound)."""
    exponent_factor, out_bound, lse_bound = error_bound.score_factor, error_bound.out_bound, error_bound.lse_bound
    u, uf, up, uo, sA = sp.symbols("u U_f u_p u_out sA", positive=True)
    nk, bc, d = sp.symbols("N_k B_c D", integer=True, positive=True)
    lse = sp.Symbol("lse", real=True)
    gam = lambda m: error_bound.gamma_of(m, u)  # noqa: E731  γ_m
    Symbolic = symbolic_numbers(u, uf, up, uo)
    rho_t = sp.Symbol("rho_t", positive=True)
    Symbolic.SOFTCAP_REL = rho_t
    beta = sp.Symbol("beta", nonnegative=True)  # ALiBi's max_j |slope·(i + shift − j)|
    T = sp.Max(1, sp.ceiling(nk / bc))
    cases = []
    k, alpha, kappa = sp.Symbol("k", positive=True, integer=True), *sp.symbols("alpha kappa", nonnegative=True)
    variants = ([(False, None, (k, alpha, kappa))] if score_mod
                else [(sc, al, None) for sc, al in itertools.product((False, True), (None, beta))])
    for softcap, alibi, user in variants:
        if user is not None:
            E = (error_bound.score_mod_exponent(sA, alpha, kappa, gam(d), gam(error_bound.SCORE_MOD_SCALE_ROUNDINGS),
                                                gam(k), gam(error_bound.SCORE_MOD_BACK_ROUNDINGS), u)
                 + (T + 1) * (-sp.log(1 - uf)))
        elif alibi is None:
            factor = (error_bound.softcap_score_factor(gam(d), gam(2), gam(5), rho_t, u) if softcap
                      else exponent_factor(gam(d), gam(3), u))
            E = sA * factor + (T + 1) * (-sp.log(1 - uf))
        else:  # the score's factor (the cap's, or the raw score into log2 units), then the bias and its add
            factor = (error_bound.softcap_score_factor(gam(d), gam(2), gam(5), rho_t, u) if softcap
                      else exponent_factor(gam(d), gam(error_bound.SCORE_LOG2_ROUNDINGS), u))
            E = (error_bound.alibi_exponent(sA, factor, alibi, gam(error_bound.ALIBI_ROUNDINGS), u)
                 + (T + 1) * (-sp.log(1 - uf)))
        rho_w = sp.exp(E) - 1
        rho_num = error_bound.carried_factor(error_bound.weight_factor(up, gam(bc)), T, gam)
        rho_den = error_bound.carried_factor(gam(bc), T, gam)
        want = error_bound.Bound(
            out_bound(rho_w, rho_num, rho_den, u, uo, num=REALS),
            lse_bound(E, -sp.log(1 - error_bound.weight_factor(rho_w, rho_den)), sp.log(sp.Max(nk, 1)), sp.Abs(lse),
                      u, uf),
            E)
        for dtype in error_bound.UNIT_ROUNDOFF:
            if dtype in error_bound.FP8:
                continue  # FP8's composition (descales, P's subnormal error, no softcap): claim fp8_error_bound
            try:
                got = bound(dtype, nk, bc, d, sA, lse, num=Symbolic(), softcap=softcap,
                            **({} if alibi is None else {"alibi": alibi}), **({} if user is None else {"score_mod": user}))
            except Exception as e:  # noqa: BLE001  (a bound that cannot run symbolically is not checked: a failed case)
                got = error_bound.Bound(*(sp.Symbol(f"{type(e).__name__}: {e}"),) * 3)
            for field in error_bound.Bound._fields:
                # the same lemmas applied to the same arguments cancel structurally; anything else is a residual
                # (expanded, not simplified: a wrong composition is reported, never searched for an identity)
                residual = expanded_residual(getattr(got, field) - getattr(want, field))
                mods = (", softcap" if softcap else "") + (", alibi" if alibi is not None else "") + (
                    ", score_mod (k, α, κ)" if user is not None else "")
                cases.append((f"forward_bound({dtype}{mods}).{field} is the stated composition (symbolic N_k, B_c, "
                              f"D, s·A, u, u_p, u_out, U_FUNC{', ρ_t' if softcap else ''}"
                              f"{', β' if alibi is not None else ''})", residual))
    return cases


def _softcap_score_cases(softcap_factor):
    """The capped score (softcap on), natural units: exact ``P = c·tanh(s x/c)``, computed ``V = Q·f`` with
    ``Q = c·tanh(y^)``, ``y^ = fl(x^·fl(s/c))`` (so ``c·y^ = s·x^·ℓ``, ``ℓ`` in ``1 ± γ_2``), ``f = (1 + r)·ℓ_5``
    (t's relative error ``|r| <= ρ_t``, claim softcap_accuracy; ``fl(log2 e)``, ``fl(c·log2 e)``, ``t·softcap_out``,
    then the tile's product by ``qk_scale = 1``, exact: 3 roundings, ``ℓ_5`` in ``1 ± γ_5`` an upper count). Hypotheses: tanh is 1-Lipschitz and ``|tanh a| <= |a|``,
    so ``|Q − P| <= |s x^ ℓ − s x| <= F_0`` and ``|Q| <= |s x^ ℓ| <= B_0`` (the score cases above)."""
    u, sA, gD, g4, rho, Q, P, f, F0, B0 = z3.Reals("u sA g_D g_5 rho Q P f F0 B0")
    g2 = error_bound.gamma_of(2, u)
    phi = error_bound.weight_factor(rho, g4)
    ab = lambda t: z3.If(t >= 0, t, -t)  # noqa: E731
    base = [u > 0, u < z3.RealVal("0.01"), sA >= 0, gD >= 0, g4 >= 0, rho >= 0]
    facts = base + [F0 == sA * ((1 + gD) * (1 + g2) - 1), B0 == sA * (1 + gD) * (1 + g2), ab(Q - P) <= F0,
                    ab(Q) <= B0, f <= 1 + phi, f >= 1 - phi]
    return [
        ("softcap: |Q − P| <= F_0, |Q| <= B_0, f in 1 ± weight_factor(ρ_t, γ_5) => |Q f − P| <= F_0 + B_0·φ, "
         "|Q f| <= B_0(1 + φ)", _verdict(facts, z3.And(ab(Q * f - P) <= F0 + B0 * phi, ab(Q * f) <= B0 * (1 + phi)))),
        ("softcap: F_0 + B_0·φ + 2u·B_0(1 + φ) <= s·A·softcap_score_factor(γ_D, γ_2, γ_5, ρ_t, u)",
         _verdict(facts, F0 + B0 * phi + 2 * u * B0 * (1 + phi) <= sA * softcap_factor(gD, g2, g4, rho, u))),
    ]


def _exponent_cases(exponent_factor, softcap_factor=error_bound.softcap_score_factor,
                    scale_roundings=error_bound.SCALE_ROUNDINGS, qk_scale=terms.QK_SCALE):
    """E: a key's computed exponent (log2 units, p's and its rescales' summed) against the exact
    ``y_j − m_T`` relative to the final computed max ``m_T`` (the shift cancels in out); the scaled
    score rounds ``scale_roundings`` times, counted in the printed ``qk_scale``."""
    u, A, c, gD, x, xh, ell, th, m0, mT, S, d, B, F = z3.Reals("u A c g_D x xh ell th m0 mT S delta B F")
    k = scale_roundings
    g2 = error_bound.gamma_of(k, u)  # γ_k
    base = [u > 0, u < z3.RealVal("0.01"), A >= 0, c > 0, gD >= 0]
    score = base + [x <= A, -x <= A, xh - x <= gD * A, x - xh <= gD * A, ell <= 1 + g2, ell >= 1 - g2]
    # the printed qk_scale = sm_scale·log2 e: its product, log2 e as an fp32 constant (compiled), then x·qk_scale
    count = scaled_score_roundings(qk_scale.expr)
    cases = [
        (f"printed qk_scale and x·qk_scale round <= SCALE_ROUNDINGS = {k} times",
         ZERO if count is not None and count <= k else sp.Symbol(f"{count} roundings")),
        (f"(1+δ)^{k} in 1 ± γ_{k}: (1 + u)^{k} − 1 <= γ_{k}",
         _verdict(base, z3.And((1 + u) ** k - 1 <= g2, 1 - (1 - u) ** k <= g2))),
        (f"score: |x^ − x| <= γ_D·A, |x| <= A => |x^·c·ℓ − x·c| <= c·A·((1+γ_D)(1+γ_{k}) − 1)",
         _verdict(score, z3.And(xh * c * ell - x * c <= c * A * ((1 + gD) * (1 + g2) - 1),
                                x * c - xh * c * ell <= c * A * ((1 + gD) * (1 + g2) - 1)))),
        (f"score: |x^·c·ℓ| <= c·A·(1+γ_D)(1+γ_{k}) =: B",
         _verdict(score, z3.And(xh * c * ell <= c * A * (1 + gD) * (1 + g2), -xh * c * ell <= c * A * (1 + gD) * (1 + g2)))),
    ]
    m1, m2 = z3.Reals("m_t m_t1")
    cases.append(("rescales (induction on tiles, base 0): |S| <= u(m_t − m0), m_t1 >= m_t, |δ| <= u => "
                  "|S + δ·(m_t − m_t1)| <= u(m_t1 − m0)",
                  _verdict([u > 0, m1 >= m0, m2 >= m1, S <= u * (m1 - m0), -S <= u * (m1 - m0), d <= u, -d <= u],
                           z3.And(S + d * (m1 - m2) <= u * (m2 - m0), -(S + d * (m1 - m2)) <= u * (m2 - m0)))))
    y = z3.Real("y")  # the exact scaled score x·c
    ce = (th - m0) * (1 + d) + (m0 - mT) + S  # p's rounded exponent, then the rescales' (telescoped)
    cases.append(("exponent: |t^ − y| <= F, t^ <= m0 <= m_T, |t^|, |m_T| <= B => |ce − (y − m_T)| <= F + 2u·B",
                  _verdict([u > 0, d <= u, -d <= u, th <= m0, m0 <= mT, th >= -B, mT <= B, F >= 0,
                            th - y <= F, y - th <= F, S <= u * (mT - m0), -S <= u * (mT - m0)],
                           z3.And(ce - (y - mT) <= F + 2 * u * B, (y - mT) - ce <= F + 2 * u * B))))
    total = c * A * ((1 + gD) * (1 + g2) - 1) + 2 * u * c * A * (1 + gD) * (1 + g2)
    cases.append((f"F + 2u·B <= c·A·score_factor(γ_D, γ_{k}, u)",
                  _verdict(base, total <= c * A * exponent_factor(gD, g2, u))))
    cases += _softcap_score_cases(softcap_factor)
    cases.append(("c·ln 2 = s: log2 units times ln 2 are natural units (printed qk_scale)",
                  ZERO if sp.simplify(terms.QK_SCALE.expr * n.LN2 - n.sm_scale) == 0 else terms.QK_SCALE.expr))
    P_, q_, w_, r_ = z3.Reals("P q w r")  # (1 + U_FUNC)^n, 1 + U_FUNC, a product so far, one exp2 factor
    cases.append(("exp2 factors (induction): w in [1/P, P], r in [1/q, q] => w·r in [1/(P q), P q]",
                  _verdict([P_ >= 1, q_ >= 1, w_ >= 1 / P_, w_ <= P_, r_ >= 1 / q_, r_ <= q_],
                           z3.And(w_ * r_ >= 1 / (P_ * q_), w_ * r_ <= P_ * q_))))
    uf = z3.Real("U_f")
    cases.append(("one exp2 factor: |δ| <= U_FUNC => 1 + δ in [1/q, q], q = 1/(1 − U_FUNC) = e^(−log(1 − U_FUNC))",
                  _verdict([uf > 0, uf < 1, d <= uf, -d <= uf], z3.And(1 + d >= 1 - uf, 1 + d <= 1 / (1 - uf)))))
    return cases


def _product_roundings(expr, env):
    """Roundings of a printed product against its exact value: one per binary multiply, one per irrational
    constant rounded to fp32, one per integer-valued factor of integer symbols (the distance |i + shift − j|:
    its int → fp32 conversion, or, as the kernels pass i and j in fp32, the add of shift — i, j and |shift|
    below 2^24 are exact in fp32 and i − j is exact), and those of a factor an earlier term computed (``env``);
    ``−1`` is an exact negation, a plain symbol an fp32 value. None: a factor of another kind."""
    factors = [f for f in sp.Mul.make_args(expr) if f != -1]
    count = len(factors) - 1
    for f in factors:
        if f in env:
            count += env[f]
        elif f.is_number:
            count += 0 if f.is_Integer else 1
        elif f.is_Symbol:
            continue
        elif f.is_integer and all(x.is_integer for x in f.free_symbols):
            count += 1
        else:
            return None
    return count


def _printed_products(term_list):
    """``(env, update)``: the roundings of each scalar term (``_product_roundings``) and the last term, the
    per-tile update of ``qk``."""
    env = {}
    for t in term_list[:-1]:
        env[t.symbol] = _product_roundings(t.expr, env)
    return env, term_list[-1]


def _alibi_cases(alibi_factor, exponent_factor, softcap_factor, alibi_terms, alibi_roundings, score_log2_terms,
                 score_log2_roundings):
    """(vi) ALiBi: the printed bias ``t^ = fl(fl(−alibi_coef·fl(|i + shift − j|)) + q^)``, ``alibi_coef =
    fl(slope·fl(log2 e))`` (log2 units), its roundings counted in the printed terms, and the lemma: the score's
    ``F_q + 2u·B_q <= s·A·φ`` and ``B_q <= s·A·(1 + φ)`` with ``|b| <= β`` give ``F_t + 2u·B_t <=
    alibi_exponent(s·A, φ, β, γ_k, u)``, which the exponent case above (any ``F``, ``B``) turns into ``E``."""
    cases = []
    # (1) the printed form and its roundings: the bias is a product (its roundings counted), added once
    env, update = _printed_products(alibi_terms)
    expr = update.expr
    added = sp.Add.make_args(expr)
    bias = sp.Add(*[a for a in added if a != n.qk])
    form = update.symbol == n.qk and isinstance(expr, sp.Add) and len(added) == 2 and n.qk in added
    cases.append(("printed ALiBi: qk + bias, one add (one rounding)", ZERO if form else sp.Tuple(update.symbol, expr)))
    count = _product_roundings(bias, env) if form else None
    cases.append((f"the printed bias is rounded <= ALIBI_ROUNDINGS = {alibi_roundings} times (log2 e, slope·log2 e, "
                  "the distance |i + shift − j| (one rounding counted, none below 2^24), the product)",
                  ZERO if count is not None and count <= alibi_roundings else sp.Symbol(f"{count} roundings")))
    natural = sp.simplify(bias.xreplace({s_: t.expr for t in alibi_terms[:-1] for s_ in (t.symbol,)}) * n.LN2
                          + n.slope * sp.Abs(n.i + n.shift - n.j))
    cases.append(("bias·ln 2 = −slope·|i + shift − j|: the printed bias in log2 units is the natural-units bias",
                  natural))
    env2, score = _printed_products(score_log2_terms[:-1])
    tile_scale = score_log2_terms[-1]
    scount = _product_roundings(score.expr, env2) if score.symbol == n.qk else None
    cases.append((f"ALiBi without the cap: the raw score into log2 units is rounded <= SCORE_LOG2_ROUNDINGS = "
                  f"{score_log2_roundings} times, the tile's qk_scale = 1 exact",
                  ZERO if scount is not None and scount <= score_log2_roundings and tile_scale.symbol == n.qk_scale
                  and tile_scale.expr == 1 else sp.Symbol(f"{scount} roundings, qk_scale = {tile_scale.expr}")))
    in_log2 = score.expr.xreplace({t.symbol: t.expr for t in score_log2_terms[:-2]}) * n.LN2
    cases.append(("raw score·(scale·log2 e)·ln 2 = scale·x: log2 units", sp.simplify(in_log2 - n.qk * n.sm_scale)))
    # (2) k roundings in 1 ± γ_k (the product lemma (3) iterated: (1 + u)^k − 1 <= γ_k)
    u = z3.Real("u")
    for k in sorted({alibi_roundings, score_log2_roundings}):
        cases.append((f"(1 + u)^{k} − 1 <= γ_{k}: {k} roundings in 1 ± γ_{k}",
                      _verdict([u > 0, k * u < 1], (1 + u) ** k - 1 <= error_bound.gamma_of(k, u))))
    # (3) the score's F_q, B_q against its factor φ: the raw score into log2 units (any γ_s), or the cap's
    A, c, gD, gs, x, xh, ell, sA, g5, rho = z3.Reals("A c g_D g_s x xh ell sA g_5 rho")
    base = [u > 0, u < z3.RealVal("0.01"), A >= 0, c > 0, gD >= 0, gs >= 0]
    score = base + [x <= A, -x <= A, xh - x <= gD * A, x - xh <= gD * A, ell <= 1 + gs, ell >= 1 - gs]
    Fq, Bq = c * A * ((1 + gD) * (1 + gs) - 1), c * A * (1 + gD) * (1 + gs)
    cases += [
        ("score (any γ_s): |x^·c·ℓ − x·c| <= F_q, |x^·c·ℓ| <= B_q",
         _verdict(score, z3.And(xh * c * ell - x * c <= Fq, x * c - xh * c * ell <= Fq, xh * c * ell <= Bq,
                                -xh * c * ell <= Bq))),
        ("score (any γ_s): F_q + 2u·B_q <= c·A·φ, B_q <= c·A·(1 + φ), φ = score_factor(γ_D, γ_s, u)",
         _verdict(base, z3.And(Fq + 2 * u * Bq <= c * A * exponent_factor(gD, gs, u),
                               Bq <= c * A * (1 + exponent_factor(gD, gs, u))))),
    ]
    g2 = error_bound.gamma_of(2, u)
    B0 = sA * (1 + gD) * (1 + g2)
    cases.append(("softcap: B_q = B_0(1 + weight_factor(ρ_t, γ_5)) <= s·A·(1 + softcap_score_factor(γ_D, γ_2, γ_5, ρ_t, u))",
                  _verdict([u > 0, u < z3.RealVal("0.01"), sA >= 0, gD >= 0, g5 >= 0, rho >= 0],
                           B0 * (1 + error_bound.weight_factor(rho, g5)) <= sA * (1 + softcap_factor(gD, g2, g5, rho, u)))))
    # (4) the lemma, in three steps: the bias's roundings, the add, the total
    ab = lambda t: z3.If(t >= 0, t, -t)  # noqa: E731
    b, th, beta, gk, q, qh, bh, d, F, B, phi = z3.Reals("b theta beta g_k q qh bh delta F_q B_q phi")
    cases.append(("bias: |b| <= β, |θ| <= γ_k => |b(1+θ) − b| <= γ_k·β, |b(1+θ)| <= (1+γ_k)·β",
                  _verdict([beta >= 0, gk >= 0, ab(b) <= beta, ab(th) <= gk],
                           z3.And(ab(b * (1 + th) - b) <= gk * beta, ab(b * (1 + th)) <= (1 + gk) * beta))))
    Ft = F + gk * beta + u * (B + (1 + gk) * beta)
    Bt = (1 + u) * (B + (1 + gk) * beta)
    add = [u > 0, u < z3.RealVal("0.01"), beta >= 0, gk >= 0, F >= 0, B >= 0, ab(qh - q) <= F, ab(qh) <= B,
           ab(bh - b) <= gk * beta, ab(bh) <= (1 + gk) * beta, ab(d) <= u]
    t_hat = (qh - bh) * (1 + d)
    cases.append(("add: t^ = (q^ − b^)(1 + δ) => |t^ − (q − b)| <= F_t, |t^| <= B_t",
                  _verdict(add, z3.And(ab(t_hat - (q - b)) <= Ft, ab(t_hat) <= Bt))))
    cases.append(("F_q + 2u·B_q <= s·A·φ, B_q <= s·A(1 + φ) => F_t + 2u·B_t <= alibi_exponent(s·A, φ, β, γ_k, u)",
                  _verdict([u > 0, u < z3.RealVal("0.01"), sA >= 0, phi >= 0, beta >= 0, gk >= 0, F >= 0, B >= 0,
                            F + 2 * u * B <= sA * phi, B <= sA * (1 + phi)],
                           Ft + 2 * u * Bt <= alibi_factor(sA, phi, beta, gk, u))))
    # (5) log2 units to natural units: c·ln 2 = s and slope·log2 e·ln 2 = slope scale both arguments alike
    X, Y, C, P_, G, U_ = sp.symbols("X Y C phi g u", positive=True)
    cases.append(("alibi_exponent is homogeneous in (s·A, β): log2 units times ln 2 are natural units",
                  sp.expand(alibi_factor(C * X, P_, C * Y, G, U_) - C * alibi_factor(X, P_, Y, G, U_))))
    return cases


def _rounded_constants(expr):
    """The irrational constants in ``expr`` (each is rounded to fp32 once where the kernel uses it)."""
    return sum(1 for x in sp.preorder_traversal(expr) if x.is_number and not x.is_Rational)


def _lse_cases(lse_bound, forward_epilogue, lse_roundings):
    """The printed ``lse = (m_i + log2 l_i)·ln 2`` for a row with a key (``l_i > 0``), natural units:
    ``lse = m ln 2 + ln L`` exactly for the computed ``m = m_T`` (it cancels), ``l_i = L(1 + θ)`` with
    ``|θ| <= b`` (the generic key and finite-sum lemma above), then log2 and the last roundings."""
    printed = {t.symbol: t.expr for t in forward_epilogue}.get(n.lse)
    finite = (n.m_i + log2(n.l_i)) * n.LN2
    want = sp.Piecewise((n.NEG_INF, sp.Eq(n.l_i, 0)), (finite, True))
    cases = [("printed lse has the analysed form", ZERO if printed == want else sp.Tuple(printed))]
    branch = printed.args[-1].expr if isinstance(printed, sp.Piecewise) else printed
    count = _roundings(branch, log2(n.l_i)) if branch is not None else None
    count = None if count is None else count + _rounded_constants(branch)
    cases.append((f"after log2, the printed lse rounds <= LSE_ROUNDINGS = {lse_roundings} times (operations "
                  "and fp32 constants)",
                  ZERO if count is not None and count <= lse_roundings else sp.Symbol(f"{count} roundings")))
    # (1) exact: for any real m, Σ_j e^{y_j} = e^{m ln 2} L, so lse = m ln 2 + ln L = ln 2·(m + log2 L)
    m, Lp = sp.Symbol("m", real=True), sp.Symbol("L", positive=True)
    j, N = sp.symbols("j N_k", integer=True, nonnegative=True)
    y = sp.Function("y", real=True)
    residuals = (sp.exp(n.LN2 * m) * sp.Sum(sp.exp(y(j) - n.LN2 * m), (j, 0, N - 1)) - sp.Sum(sp.exp(y(j)), (j, 0, N - 1)),
                 sp.expand_log(sp.log(sp.exp(n.LN2 * m) * Lp)) - n.LN2 * (m + sp.expand_func(log2(Lp))))
    residuals = [sp.simplify(r) for r in residuals]
    cases.append(("exact: Σ e^{y_j} = e^{m ln 2}·L (L = Σ e^{y_j − m ln 2}), ln(e^{m ln 2}·L) = ln 2·(m + log2 L): "
                  "the computed max m_T cancels", ZERO if all(r == 0 for r in residuals) else sp.Tuple(*residuals)))
    # (2) the denominator: l^ = L(1 + θ), |θ| <= b < 1 (generic key, finite sums) => l^/L in [e^{-λ}, e^{λ}]
    b, th = z3.Reals("b theta")
    cases.append(("|θ| <= b < 1 => 1 − b <= 1 + θ <= 1/(1 − b): l^/L within [e^{−λ}, e^{λ}], λ = −log(1 − b)",
                  _verdict([b >= 0, b < 1, th <= b, th >= -b], z3.And(1 + th >= 1 - b, (1 + th) * (1 - b) <= 1))))
    # (3) the magnitude of L: every computed exponent <= 0, the key that set m_T has exponent 0 (monotone
    # rounding; p's exponent is exponent_rounding's unfused case), so e^{-E} <= L <= N_k e^E
    fl = z3.Function("fl", z3.RealSort(), z3.RealSort())
    a_, b_ = z3.Reals("a b")
    monotone = [z3.ForAll([a_, b_], z3.Implies(a_ <= b_, fl(a_) <= fl(b_))), fl(0) == 0]
    x, X, c, mi = z3.Reals("x X c m_i")
    m_new = z3.If(mi > fl(c * X), mi, fl(c * X))
    cases.append(("computed exponents (log2 units) <= 0: p's fl(fl(x·c) − m_ij) and a rescale's fl(m_i − m_ij)",
                  _verdict(monotone + [c > 0, x <= X], z3.And(fl(fl(x * c) - m_new) <= 0, fl(mi - m_new) <= 0))))
    cases.append(("the key that sets the max (x = rowmax, m_ij = fl(c·x) >= m_i) has exponent fl(fl(x·c) − m_ij) = 0, "
                  "its later rescales fl(m_T − m_T) = 0",
                  _verdict(monotone + [c > 0, mi <= fl(c * X)], z3.And(fl(fl(X * c) - m_new) == 0,
                                                                        fl(m_new - m_new) == 0))))
    ce, ce0, e, e0, F, E, l2 = z3.Reals("ce ce0 e e0 F E ln2")
    near = lambda got, exact: [got * l2 - exact <= F, exact - got * l2 <= F]  # noqa: E731  (i), without exp2's part
    cases.append(("exact exponents: |ce·ln 2 − e| <= F <= E (claim (i)), ce <= 0, ce_0 = 0 => e <= E, e_0 >= −E",
                  _verdict([l2 > 0, F >= 0, F <= E, ce <= 0, ce0 == 0] + near(ce, e) + near(ce0, e0),
                           z3.And(e <= E, e0 >= -E))))
    S, w, W, W0, k = z3.Reals("S w W W0 k")
    cases.append(("L's finite sum (induction on N_k, base one key w_0 >= W_0): S <= k·W, S >= W_0, 0 <= w <= W => "
                  "W_0 <= S + w <= (k+1)·W; so e^{−E} <= L <= N_k·e^E",
                  _verdict([k >= 1, S <= k * W, S >= W0, w >= 0, w <= W], z3.And(S + w <= (k + 1) * W, S + w >= W0))))
    # (4) logarithms (ln monotone, ln(xy) = ln x + ln y)
    bs, Ns, Es = sp.Symbol("b", positive=True), sp.Symbol("N_k", positive=True), sp.Symbol("E", nonnegative=True)
    logs = [sp.expand_log(sp.log(1 / (1 - bs)), force=True) + sp.log(1 - bs),
            sp.expand_log(sp.log(Ns * sp.exp(Es))) - (sp.log(Ns) + Es), sp.expand_log(sp.log(sp.exp(-Es))) + Es]
    lr, lL, ll, lam, lnN = z3.Reals("ln_r ln_L ln_l lambda ln_N")
    logs = [sp.simplify(r) for r in logs]
    composed = _verdict([lam >= 0, E >= 0, lnN >= 0, lr <= lam, lr >= -lam, lL >= -E, lL <= lnN + E, ll == lL + lr],
                        z3.And(ll - lL <= lam, lL - ll <= lam, ll <= lnN + E + lam, -ll <= lnN + E + lam))
    cases.append(("logs: ln(1/(1−b)) = λ, ln(N_k e^E) = log N_k + E; ln l^ = ln L + ln(l^/L) => |ln l^ − ln L| <= λ, "
                  "|ln l^| <= log N_k + E + λ", composed if all(r == 0 for r in logs) else sp.Tuple(*logs)))
    # (5) the printed operations: log2 within U_FUNC·(1 + |log2 x|), then LSE_ROUNDINGS roundings
    u, uf, lse, m_, e1, X_, Y, eta, d_, g_ = z3.Reals("u U_f lse m e1 X Y eta d g")
    R = lse_roundings
    gR = error_bound.gamma_of(R, u)
    ab = lambda t: z3.If(t >= 0, t, -t)  # noqa: E731
    d = lam + uf * (1 + lnN + E + lam)
    cases.append(("log2: lse = ln 2·m + ln L, X = ln 2·(m + log2 l^ + ε), |ln 2·ε| = |e1| <= U_FUNC·(ln 2 + |ln l^|), "
                  "ln 2 < 1 => |X − lse| <= d = λ + U_FUNC·(1 + log N_k + E + λ)",
                  _verdict([l2 > 0, l2 < 1, uf >= 0, lam >= 0, E >= 0, lnN >= 0, ll - lL <= lam, lL - ll <= lam,
                            ab(ll) <= lnN + E + lam, ab(e1) <= uf * (l2 + ab(ll)), lse == l2 * m_ + lL],
                           ab(l2 * m_ + ll + e1 - lse) <= d)))
    ds = z3.Reals(" ".join(f"delta_{r}" for r in range(R)))
    f = _product([1 + x for x in ds])
    cases.append((f"{R} roundings (the add, fp32 ln 2, the multiply): |Π(1+δ) − 1| <= γ_{R}",
                  _verdict([u > 0, R * u < 1] + [z3.And(x <= u, x >= -u) for x in ds], ab(f - 1) <= gR)))
    cases.append(("|X − Y| <= d, |η| <= g => |X(1+η) − Y| <= d + g·(|Y| + d)",
                  _verdict([d_ >= 0, g_ >= 0, ab(X_ - Y) <= d_, ab(eta) <= g_],
                           ab(X_ * (1 + eta) - Y) <= d_ + g_ * (ab(Y) + d_))))
    la = z3.Real("lse_abs")
    cases.append((f"lse_bound(E, λ, log N_k, |lse|, u, U_FUNC) >= d + γ_{R}·(|lse| + d)",
                  _verdict([u > 0, R * u < 1, uf >= 0, lam >= 0, E >= 0, lnN >= 0, la >= 0],
                           lse_bound(E, lam, lnN, la, u, uf) >= d + gR * (la + d))))
    return cases


def _product(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out
