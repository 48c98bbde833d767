"""FP8 forward (issue 30): the descales cancel exactly, and the error bound of the FP8 kernel.

The FP8 kernel runs both products on the quantised tiles (``q``, ``k``, ``v`` in e4m3 or e5m2) and
moves FlashAttention 3's descales out of the loop (``spec.terms.FP8_*``):

* ``qk_scale = s·q_descale·k_descale·log2 e`` (``FP8_QK_SCALE``): the scaled scores of the quantised
  tiles are those of the dequantised ones;
* ``p ← p·p_scale`` after ``l_i`` and before ``P V`` (``FP8_P``), whose dot casts it to fp8;
* after the division, ``acc ← acc·v_scale`` with ``v_scale = v_descale / p_scale`` (``FP8_V_SCALE``,
  ``FP8_OUT``).

Claim ``fp8_descale`` proves, in exact arithmetic (the fp8 cast as the identity), that the FP8 kernel
is the dense kernel on the dequantised inputs: the kernel state ``(m_i, l_i, acc)`` of the FP8 tile
update is the dense one's with ``acc`` times ``p_scale / v_descale`` — an invariant that the printed
initial state satisfies and every tile update keeps, at a symbolic tile width, head dim and start,
from a state with or without keys, whatever keys are masked (their scores enter as symbols that may
be ``−∞``) — so, by induction on the tiles, for every tiling and order (as claim ``every_tiling`` for
the dense kernel); the epilogue then gives the dense ``out`` and ``lse`` exactly.

Claim ``fp8_error_bound`` proves ``spec.error_bound.forward_bound``'s FP8 case on top of
``forward_error_bound``'s lemmas: the fp8 grid (the cast of ``P·p_scale`` errs by at most
``u·x + eta``: checked on every grid point below ``p_scale``, exact rationals), the absolute error it
leaves in the numerator, the two extra roundings of the descaled ``qk_scale`` and the extra multiply
of ``out``, and the composition itself (symbolic sizes and roundoffs).
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp
import z3

from spec import error_bound, structure, terms
from spec import notation as n
from spec.proofs.float import REALS, _verdict, scaled_score_roundings, symbolic_numbers
from spec.proofs.symbolic import D, R, ROWMAX, Q, V, a_, d, j, run, sum_zero, w_
from spec.proofs.tools import ZERO, expanded_residual, result
from spec.registry import claim

s = n.sm_scale
QD, KD, VD, PS = n.q_descale, n.k_descale, n.v_descale, n.p_scale


def _fp8_tile(forward_tile, fp8_p):
    """The FP8 kernel's tile: the dense tile with ``fp8_p`` just before the ``acc`` update (the
    template's slot between ``tile_head`` and ``tile_tail``, as dropout's)."""
    return tuple(t for tile in forward_tile for t in ((fp8_p, tile) if tile.name == "acc" else (tile,)))


@claim("fp8_descale",
       "the FP8 kernel (q, k, v quantised, float32 descales per (batch, KV head)) is the dense kernel on the "
       "dequantised inputs q·q_descale, k·k_descale, v·v_descale, in exact arithmetic (the fp8 casts as the "
       "identity): qk_scale = s·q_descale·k_descale·log2 e gives the dequantised scaled scores; with "
       "p ← p·p_scale before P V the state is the dense one with acc·p_scale/v_descale — the printed initial "
       "state has it and every tile update keeps it (symbolic tile width, start and head dim, any masked keys, "
       "from a state with keys or from E), so for every tiling and order (induction on tiles); after the "
       "division acc·v_scale, v_scale = v_descale/p_scale, is the dense out, lse unchanged; p_scale is a "
       "power of two at most the format's max (P·p_scale is exact in fp32 and never saturates)",
       r"\mathrm{fp8}(q, k, v; d_q, d_k, d_v) = \mathrm{attn}(d_q q, d_k k, d_v v),\quad "
       r"\mathrm{acc}_{fp8} = \mathrm{acc}\cdot p_{scale}/d_v",
       scope="symbolic B_c, D, tile start, masks (generic entry, SymPy Sum), any number of tiles (induction); "
             "reals, exact (the rounding: fp8_error_bound); e4m3 and e5m2's p_scale",
       assumptions=("scale_positive",))
def prove_fp8_descale(forward_tile=terms.FORWARD_TILE, epilogue=terms.FORWARD_EPILOGUE, qk=terms.QK,
                      qk_scale=terms.QK_SCALE, fp8_qk_scale=terms.FP8_QK_SCALE, fp8_p=terms.FP8_P,
                      fp8_v_scale=terms.FP8_V_SCALE, fp8_out=terms.FP8_OUT, formats=error_bound.FP8,
                      forward_init=structure.FORWARD_INIT):
    keys = (j, a_, a_ + w_ - 1)
    # (1) the scaled scores: the quantised tiles' x·qk_scale is the dequantised tiles' x·(s·log2 e)
    Qrow, K_ = sp.IndexedBase("q", real=True), sp.IndexedBase("k", real=True)
    from spec.proofs.symbolic import interpret as generic
    x8 = generic(qk.expr, {n.q: Qrow[d], n.k: K_[j, d]}, keys)
    x = generic(qk.expr, {n.q: QD * Qrow[d], n.k: KD * K_[j, d]}, keys)
    cases = [("scores: (q·k)·fp8 qk_scale = (q d_q · k d_k)·qk_scale (symbolic D)",
              sum_zero(x8 * fp8_qk_scale.expr, x * qk_scale.expr))]
    # (2) the invariant in the printed initial state: acc = 0 on both sides
    init = {t.symbol: t.expr for t in forward_init}
    cases.append(("initial state: acc_fp8 = acc·p_scale/v_descale", sp.simplify(init[n.acc] - init[n.acc] * PS / VD)))
    # (3) one tile [a, a + w) from any state: the dense tile on the dequantised scores and values,
    # the FP8 tile on the quantised ones with acc_fp8 = acc·p_scale/v_descale
    tile8 = _fp8_tile(forward_tile, fp8_p)
    o = sp.IndexedBase("o", real=True)[d]
    for label, (m_i, l_i, acc) in (("a state with keys", (sp.Symbol("m", real=True) * n.LOG2E,
                                                          sp.Symbol("l", positive=True), o)),
                                   ("E (no key yet)", (n.NEG_INF, sp.Integer(0), sp.Integer(0)))):
        dense = run(forward_tile, {n.m_i: m_i, n.l_i: l_i, n.acc: acc, n.qk: QD * KD * Q[j], n.v: VD * V[j, d],
                                   n.qk_scale: qk_scale.expr, ROWMAX: QD * KD * R}, keys)
        fp8 = run(tile8, {n.m_i: m_i, n.l_i: l_i, n.acc: acc * PS / VD, n.qk: Q[j], n.v: V[j, d],
                          n.qk_scale: fp8_qk_scale.expr, ROWMAX: R}, keys)
        for name in (n.m_i, n.l_i):
            cases.append((f"tile [a, a+w) from {label}: {name} is the dense one",
                          ZERO if fp8[name] == dense[name] else sum_zero(fp8[name], dense[name])))
        cases.append((f"tile [a, a+w) from {label}: acc_fp8 = acc·p_scale/v_descale (symbolic B_c, D)",
                      sum_zero(fp8[n.acc], dense[n.acc] * PS / VD)))
    # (4) the epilogue: the division, then the descale, give the dense out; lse unchanged
    m, l = sp.Symbol("m", extended_real=True), sp.Symbol("l", nonnegative=True)
    dense = run(epilogue, {n.m_i: m, n.l_i: l, n.acc: o}, keys)
    fp8 = run((fp8_v_scale, *epilogue, fp8_out), {n.m_i: m, n.l_i: l, n.acc: o * PS / VD}, keys)
    cases.append(("epilogue: (acc·p_scale/v_descale / l)·v_scale = acc / l",
                  sp.simplify(sp.piecewise_fold(fp8[n.acc] - dense[n.acc]))))
    cases.append(("epilogue: lse unchanged", ZERO if fp8[n.lse] == dense[n.lse] else sp.Tuple(fp8[n.lse])))
    # (5) p_scale: a power of two (P·p_scale and v_descale/p_scale exact in fp32), P·p_scale <= p_scale <= max
    for name, f in formats.items():
        ps = Fraction(f.p_scale)
        power_of_two = ps.denominator == 1 and ps.numerator & (ps.numerator - 1) == 0
        cases.append((f"{name}: p_scale = {f.p_scale:g} is a power of two <= max = {f.max:g}",
                      ZERO if power_of_two and ps <= Fraction(f.max) else sp.Symbol(f"p_scale {f.p_scale}")))
    return result("fp8_descale", cases, "generic entry at symbolic B_c and D, SymPy Sum; induction on tiles")


def fp8_grid(f: error_bound.Fp8Format, top: float) -> list[Fraction]:
    """The non-negative finite values of the format up to ``top``, exactly: subnormals ``k·2^(min_exp −
    mantissa)``, then ``(1 + k/2^mantissa)·2^e`` for e >= min_exp."""
    step = Fraction(2) ** (f.min_exp - f.mantissa)
    grid = [k * step for k in range(2 ** f.mantissa)]
    e = f.min_exp
    while Fraction(2) ** e <= Fraction(top):
        grid += [(1 + Fraction(k, 2 ** f.mantissa)) * Fraction(2) ** e for k in range(2 ** f.mantissa)]
        e += 1
    return [g for g in grid if g <= Fraction(f.max)]


@claim("fp8_error_bound",
       "spec.error_bound.forward_bound's FP8 case (e4m3, e5m2), on forward_error_bound's lemmas: (i) round to "
       "nearest on the fp8 grid errs by at most u·x + eta for every 0 <= x <= p_scale (every gap below p_scale "
       "checked exactly), so the cast of P·p_scale is P(1 + δ) + ε, |δ| <= u, |ε| <= eta/p_scale = p_abs; "
       "(ii) ε's part of the numerator, times the dot's and carried roundings (1 + ρ_den) and the later "
       "rescales (each computed alpha <= 1 + U_FUNC, their product <= e^E), over the exact denominator "
       ">= e^{−E}, is at most N_k·p_abs·e^{2E}·(1 + ρ_den)·max|v| (fp8_abs_num); (iii) with it, "
       "|out^ − out| <= max|v|·out_bound(ρ_w, ρ_num, ρ_den, u_div, u_out, abs_num); (iv) the printed FP8 "
       "qk_scale rounds SCALE_ROUNDINGS_DESCALED − 1 times (its products and fp32 constants: counted), so the "
       "exponent error is forward_error_bound's with γ_D and γ_5; out's descale is one more multiply "
       "(u_div = (1+u)^2 − 1); lse is forward_error_bound's (l_i sums the unscaled P: checked in the FP8 "
       "tile); forward_bound(e4m3 / e5m2) is this composition, and forward_bound(fp16 / bf16, descaled) (the "
       "mixed path: an fp8 K/V cache upcast exactly) the same with c = 0 (symbolic sizes and roundoffs)",
       r"|\mathrm{fl}_8(x) - x| \le u x + \eta,\quad |\hat o - o| \le \max|v|\left(\frac{a+b+c}{1-b}\ell + "
       r"\ell - 1\right),\ c = N_k\frac{\eta}{p_{scale}}e^{2E}(1+\rho_{den})",
       terms=(),
       scope="the grids of e4m3fn and e5m2 below p_scale (exact rationals, every gap); symbolic u, u_p, u_out, "
             "U_FUNC, γ_D, B_c, T, N_k (z3 nonlinear reals); rounded: the standard model, fp32 accumulation of "
             "the fp8 products (the inner-product lemma as a hypothesis: sm_90's fp8 wgmma accumulates with "
             "fewer bits, a gap), no fp32 underflow or overflow, the descales positive and finite",
       assumptions=("scale_positive",))
def prove_fp8_error_bound(out_bound=error_bound.out_bound, bound=error_bound.forward_bound, formats=error_bound.FP8,
                          fp8_qk_scale=terms.FP8_QK_SCALE, forward_tile=terms.FORWARD_TILE, fp8_p=terms.FP8_P,
                          scale_roundings=error_bound.SCALE_ROUNDINGS_DESCALED):
    cases = []
    # (i) the grid: a value x in [g, g') rounds to g or g', error <= (g' − g)/2 <= u·g + eta <= u·x + eta
    for name, f in formats.items():
        grid = fp8_grid(f, f.p_scale)
        u, eta = Fraction(f.u), Fraction(f.eta)
        bad = [(g, h) for g, h in zip(grid, grid[1:]) if (h - g) / 2 > u * g + eta]
        covers = grid[-1] >= Fraction(f.p_scale)
        cases.append((f"{name}: every gap of the grid up to p_scale = {f.p_scale:g} ({len(grid)} values) has "
                      f"(g' − g)/2 <= u·g + eta (u = {f.u:g}, eta = {f.eta:g})",
                      ZERO if not bad and covers else sp.Symbol(f"gaps {bad[:2]} covers={covers}")))
    p, sig, e_, u8, eta, dl = z3.Reals("p sigma e u8 eta delta")
    cases.append(("P·σ cast: |fl8(pσ) − pσ| <= u8·pσ + eta => |fl8(pσ)/σ − p| <= u8·p + eta/σ",
                  _verdict([p >= 0, sig > 0, u8 >= 0, eta >= 0, e_ <= u8 * p * sig + eta, -e_ <= u8 * p * sig + eta],
                           z3.And(e_ / sig <= u8 * p + eta / sig, -e_ / sig <= u8 * p + eta / sig))))
    # (ii) the absolute part of the numerator
    M, v, eps, F, N, X, W, S = z3.Reals("M v eps F N X W S")
    cases.append(("generic key: |ε| <= p_abs, |v| <= M, 0 <= F <= X => |ε·v·F| <= p_abs·M·X",
                  _verdict([M >= 0, eta >= 0, v <= M, -v <= M, eps <= eta, -eps <= eta, F >= 0, F <= X],
                           z3.And(eps * v * F <= eta * M * X, -(eps * v * F) <= eta * M * X))))
    uf, al = z3.Reals("U_f alpha")
    cases.append(("a computed rescale alpha = exp2(e)(1 + δ), e <= 0, |δ| <= U_FUNC: alpha <= 1/(1 − U_FUNC) "
                  "(so a product of at most T + 1 of them is <= e^{(T+1)(−log(1 − U_FUNC))} <= e^E)",
                  _verdict([uf > 0, uf < 1, al >= 0, al <= 1, dl <= uf, -dl <= uf], al * (1 + dl) <= 1 / (1 - uf))))
    cases.append(("the sum over N_k keys over the exact denominator W >= e^{−E}: |S| <= N·p_abs·M·X, W >= 1/X, "
                  "X > 0 => |S/W| <= N·p_abs·M·X²",
                  _verdict([N >= 0, eta >= 0, M >= 0, X > 0, W >= 1 / X, S <= N * eta * M * X, -S <= N * eta * M * X],
                           z3.And(S / W <= N * eta * M * X * X, -S / W <= N * eta * M * X * X))))
    # (iii) the ratio with the absolute term, the division and the descale, the store
    rw, rn, rd, uu, uo, nn, nh, lh, e, c, ell = z3.Reals("rho_w rho_num rho_den u u_out n nh lh e c ell")
    a_w, b_w = error_bound.weight_factor(rw, rn), error_bound.weight_factor(rw, rd)
    signs = [rw >= 0, rn >= 0, rd >= 0, M >= 0, c >= 0, b_w < 1]
    cases.append(("|n| <= M, |n^ − n| <= (a + c)·M, |l^ − 1| <= b => |n^ − n·l^| <= (a+b+c)·M",
                  _verdict(signs + [nn <= M, -nn <= M, nh - nn <= (a_w + c) * M, nn - nh <= (a_w + c) * M,
                                    lh - 1 <= b_w, 1 - lh <= b_w],
                           z3.And(nh - nn * lh <= (a_w + b_w + c) * M, nn * lh - nh <= (a_w + b_w + c) * M))))
    cases.append(("|e| <= (a+b+c)·M, l^ >= 1 − b > 0 => |e/l^| <= M·(a+b+c)/(1−b)",
                  _verdict(signs + [e <= (a_w + b_w + c) * M, -e <= (a_w + b_w + c) * M, lh >= 1 - b_w],
                           z3.And(e / lh <= M * (a_w + b_w + c) / (1 - b_w), -e / lh <= M * (a_w + b_w + c) / (1 - b_w)))))
    d1, d2 = z3.Reals("d1 d2")
    cases.append(("the division and the descale: (1+δ1)(1+δ2) within 1 ± weight_factor(u, u)",
                  _verdict([uu > 0, d1 <= uu, -d1 <= uu, d2 <= uu, -d2 <= uu],
                           z3.And((1 + d1) * (1 + d2) - 1 <= error_bound.weight_factor(uu, uu),
                                  1 - (1 + d1) * (1 + d2) <= error_bound.weight_factor(uu, uu)))))
    ud = error_bound.weight_factor(uu, uu)
    last = 1 + error_bound.weight_factor(ud, uo)
    K = (a_w + b_w + c) / (1 - b_w)
    cases.append(("|x − n| <= M·K, ℓ within 1 ± (last − 1) => |x·ℓ − n| <= M·(K·last + last − 1) <= "
                  "M·out_bound(ρ_w, ρ_num, ρ_den, u_div, u_out, c)",
                  _verdict(signs + [uu > 0, uo >= 0, nn <= M, -nn <= M, ell <= last, ell >= 2 - last,
                                    e - nn <= M * K, nn - e <= M * K],
                           z3.And(e * ell - nn <= M * out_bound(rw, rn, rd, ud, uo, c, num=REALS),
                                  nn - e * ell <= M * out_bound(rw, rn, rd, ud, uo, c, num=REALS)))))
    # (iv) the descaled exponent: the printed qk_scale's roundings, then the score lemma with γ_r
    count = scaled_score_roundings(fp8_qk_scale.expr)  # its products, fp32 constants, then x·qk_scale
    cases.append((f"printed FP8 qk_scale and x·qk_scale round <= SCALE_ROUNDINGS_DESCALED = {scale_roundings} times",
                  ZERO if count is not None and count <= scale_roundings else sp.Symbol(f"{count} roundings")))
    u, A, cc, gD, x, xh, lr, B, F2, th, m0, mT, S2, dd = z3.Reals("u A c g_D x xh ell B F th m0 mT S d")
    gr = error_bound.gamma_of(scale_roundings, u)
    base = [u > 0, u < z3.RealVal("0.01"), A >= 0, cc > 0, gD >= 0]
    score = base + [x <= A, -x <= A, xh - x <= gD * A, x - xh <= gD * A, lr <= 1 + gr, lr >= 1 - gr]
    cases.append((f"score: |x^ − x| <= γ_D·A, ℓ in 1 ± γ_{scale_roundings} => "
                  f"|x^·c·ℓ − x·c| <= c·A·((1+γ_D)(1+γ_{scale_roundings}) − 1), |x^·c·ℓ| <= c·A(1+γ_D)(1+γ_r)",
                  _verdict(score, z3.And(xh * cc * lr - x * cc <= cc * A * ((1 + gD) * (1 + gr) - 1),
                                         x * cc - xh * cc * lr <= cc * A * ((1 + gD) * (1 + gr) - 1),
                                         xh * cc * lr <= cc * A * (1 + gD) * (1 + gr),
                                         -xh * cc * lr <= cc * A * (1 + gD) * (1 + gr)))))
    total = cc * A * ((1 + gD) * (1 + gr) - 1) + 2 * u * cc * A * (1 + gD) * (1 + gr)
    cases.append((f"F + 2u·B <= c·A·score_factor(γ_D, γ_{scale_roundings}, u) (forward_error_bound's exponent "
                  "lemma with this score)", _verdict(base, total <= cc * A * error_bound.score_factor(gD, gr, u))))
    # lse: l_i sums the unscaled P (FP8's scale enters after l_i), so forward_error_bound's lse holds
    chained = terms.chain(_fp8_tile(forward_tile, fp8_p))
    cases.append(("in the FP8 tile, l_i does not see p_scale (lse is forward_error_bound's)",
                  ZERO if not chained[n.l_i].has(n.p_scale) and chained[n.acc].has(n.p_scale)
                  else sp.Tuple(chained[n.l_i])))
    cases += _composition_cases(bound, out_bound, formats, scale_roundings)
    return result("fp8_error_bound", cases, "exact rationals on the fp8 grids; z3 nonlinear reals; forward_bound "
                  "checked symbolically to be the FP8 composition")


def _composition_cases(bound, out_bound, formats, scale_roundings):
    """``forward_bound(e4m3 / e5m2)`` evaluated in SymPy on symbolic sizes and roundoffs equals the FP8
    composition built here from the lemmas above and forward_error_bound's."""
    u, uf, up, uo, sA, pa = sp.symbols("u U_f u_p u_out sA p_abs", positive=True)
    nk, bc, dd = sp.symbols("N_k B_c D", integer=True, positive=True)
    lse = sp.Symbol("lse", real=True)
    gam = lambda m: error_bound.gamma_of(m, u)  # noqa: E731
    Symbolic = symbolic_numbers(u, uf, up, uo, pa)

    T = sp.Max(1, sp.ceiling(nk / bc))
    E = sA * error_bound.score_factor(gam(dd), gam(scale_roundings), u) + (T + 1) * (-sp.log(1 - uf))
    rho_w = sp.exp(E) - 1
    rho_num = error_bound.carried_factor(error_bound.weight_factor(up, gam(bc)), T, gam)
    rho_den = error_bound.carried_factor(gam(bc), T, gam)
    lse_want = error_bound.lse_bound(E, -sp.log(1 - error_bound.weight_factor(rho_w, rho_den)), sp.log(sp.Max(nk, 1)),
                                     sp.Abs(lse), u, uf)
    cases = []
    # FP8 products (P cast to fp8: its subnormal error c), and the mixed path (fp16/bf16 products on an
    # fp8 K/V cache upcast exactly: the descales only, c = 0)
    for name, c in [(f, nk * pa * sp.exp(2 * E) * (1 + rho_den)) for f in formats] + [("fp16", 0), ("bf16", 0)]:
        want = error_bound.Bound(out_bound(rho_w, rho_num, rho_den, error_bound.weight_factor(u, u), uo, c, num=REALS),
                                 lse_want, E)
        cases += _bound_cases(lambda: bound(name, nk, bc, dd, sA, lse, num=Symbolic(), descaled=True), want,
                              f"forward_bound({name}, descaled).{{}} is the FP8 composition (symbolic N_k, B_c, D, "
                              "s·A, u, u_p, u_out, p_abs, U_FUNC)")
    return cases


def _bound_cases(call, want, label):
    """One case per field of ``Bound``: ``call()`` (a ``forward_bound`` in SymPy) minus ``want``, expanded
    (``label.format(field)``); a bound that cannot run symbolically fails every field."""
    try:
        got = call()
    except Exception as exc:  # noqa: BLE001  (a bound that cannot run symbolically: a failed case)
        got = error_bound.Bound(*(sp.Symbol(f"{type(exc).__name__}: {exc}"),) * 3)
    cases = []
    for field in error_bound.Bound._fields:
        cases.append((label.format(field), expanded_residual(getattr(got, field) - getattr(want, field))))
    return cases


@claim("fp8_mma_bound",
       "forward_bound(e4m3 / e5m2, fp8_mma=True) bounds the compiled sm_90 FP8 kernel, whose products run on the "
       "fp8 MMA, under one hardware hypothesis: an fp8 wgmma instruction (FP8_MMA_K = 32 exact products) from a "
       "zero accumulator returns their sum within FP8_MMA_ERR·Σ|a_i b_i| (2^-7: twice the error 2^-8 + 2^-13 + "
       "2^-21 of an accumulator aligning the products to the largest one's binade and truncating to 13 fraction "
       "bits, proved here). (i) every printed dot passes max_num_imprecise_acc = FP8_MAX_IMPRECISE_ACC = 32 = "
       "FP8_MMA_K, so Triton adds each instruction's partial to the fp32 accumulator with an fp32 add; (ii) a partial within "
       "ε·S_c of its products' sum then rounded by (1 + θ), |θ| <= γ, is within ((1+ε)(1+γ) − 1)·S_c: summed "
       "over the ceil(n/32) partials, a dot of n fp8 products errs by at most fp8_dot_factor(n)·Σ|a_i b_i|, "
       "which replaces γ_D in the score (forward_error_bound's exponent lemma); (iii) P V's key enters its "
       "instruction's partial (FP8_MMA_ERR for γ_{B_c}) and then acc·alpha and one add per instruction, "
       "1 + ceil(B_c/32) roundings per tile (fp8_tile_roundings for TILE_ROUNDINGS); (iv) forward_bound(..., "
       "fp8_mma=True) is this composition (symbolic sizes, roundoffs and ε); out, lse and the rest as "
       "fp8_error_bound",
       r"|\widehat{a\cdot b} - a\cdot b| \le \left((1+\varepsilon)(1+\gamma_{\lceil n/32\rceil}) - 1\right)"
       r"\sum|a_i b_i|,\quad \varepsilon = 2^{-7}",
       terms=(),
       scope="the hardware hypothesis fp8_mma_error (spec.assumptions.HYPOTHESES; FP8_MMA_ERR, not proved: an upper "
             "bound on sm_90's fp8 wgmma, k = 32, from a zero accumulator; the model it doubles is proved for exact "
             "rationals); Triton's lowering of "
             "max_num_imprecise_acc (promotion after every k = 32 instruction at 32; stated, not proved); symbolic u, u_p, "
             "u_out, U_FUNC, ε, B_c, T, N_k, D (z3 nonlinear reals, SymPy); the standard model for the fp32 adds, "
             "no fp32 underflow or overflow",
       assumptions=("scale_positive",), hypotheses=("fp8_mma_error",))
def prove_fp8_mma_bound(bound=error_bound.forward_bound, mma_err=error_bound.FP8_MMA_ERR,
                        mma_k=error_bound.FP8_MMA_K, mma_bits=error_bound.FP8_MMA_BITS,
                        imprecise=error_bound.FP8_MAX_IMPRECISE_ACC, qk=terms.QK, forward_tile=terms.FORWARD_TILE,
                        dot_factor=error_bound.fp8_dot_factor, tile_roundings=error_bound.fp8_tile_roundings,
                        print_line=None):
    from spec.printer import fp8_imprecise_arg, print_term
    print_line = print_line or (lambda term: print_term(term, comment=False))
    cases = []
    # (i) the printed dots promote after every instruction
    acc = next(t for t in forward_tile if t.name == "acc")
    for term in (qk, acc):
        line = print_line(term)
        cases.append((f"printed {term.name}: every tl.dot passes max_num_imprecise_acc = {imprecise} = FP8_MMA_K "
                      f"= {mma_k} (promote after each instruction)",
                      ZERO if imprecise == mma_k and line.count("tl.dot(") >= 1
                      and line.count("tl.dot(") == line.count(f", {fp8_imprecise_arg(mma_k)})") else sp.Symbol(line)))
    # the hypothesis covers the modelled accumulator (exact rationals), and the model's bound (z3 reals)
    tau = Fraction(1, 2 ** mma_bits)
    model = mma_k * tau + tau * (1 + mma_k * tau)
    cases.append((f"FP8_MMA_ERR = {mma_err:g} >= the model's K·τ + τ(1 + K·τ) = {float(model):.6g} (K = {mma_k}, "
                  f"τ = 2^-{mma_bits})", ZERO if Fraction(mma_err) >= model else sp.Symbol(f"{mma_err} < {model}")))
    k_, t_, S, M, E1, s_, dl = z3.Reals("K tau S M E1 s delta")
    cases.append(("model: K products each truncated below τ·M (M the largest |product| <= S), the sum truncated "
                  "by (1 + δ), |δ| <= τ => |(s + E1)(1 + δ) − s| <= (K·τ + τ(1 + K·τ))·S",
                  _verdict([k_ >= 1, t_ > 0, t_ < 1, M >= 0, M <= S, s_ <= S, -s_ <= S, E1 <= k_ * t_ * M,
                            -E1 <= k_ * t_ * M, dl <= t_, -dl <= t_],
                           z3.And((s_ + E1) * (1 + dl) - s_ <= (k_ * t_ + t_ * (1 + k_ * t_)) * S,
                                  s_ - (s_ + E1) * (1 + dl) <= (k_ * t_ + t_ * (1 + k_ * t_)) * S))))
    # (ii) one instruction's partial, then the fp32 adds it goes through
    eps, g, th, sh = z3.Reals("eps gamma theta sh")
    cases.append(("partial: |ŝ − s| <= ε·S, |s| <= S, |θ| <= γ => |ŝ(1 + θ) − s| <= ((1+ε)(1+γ) − 1)·S "
                  "(summed over the partials: fp8_dot_factor)",
                  _verdict([eps >= 0, g >= 0, S >= 0, s_ <= S, -s_ <= S, sh - s_ <= eps * S, s_ - sh <= eps * S,
                            th <= g, -th <= g],
                           z3.And(sh * (1 + th) - s_ <= ((1 + eps) * (1 + g) - 1) * S,
                                  s_ - sh * (1 + th) <= ((1 + eps) * (1 + g) - 1) * S))))
    # (iii)-(iv) the composition, symbolic
    u, uf, up, uo, sA, pa, ep = sp.symbols("u U_f u_p u_out sA p_abs epsilon", positive=True)
    nk, bc, dd = sp.symbols("N_k B_c D", integer=True, positive=True)
    lse = sp.Symbol("lse", real=True)
    gam = lambda m: error_bound.gamma_of(m, u)  # noqa: E731
    Symbolic = symbolic_numbers(u, uf, up, uo, pa)
    Symbolic.FP8_MMA_ERR = ep
    num = Symbolic()
    dot_want = (1 + ep) * (1 + gam(sp.ceiling(dd / mma_k))) - 1
    cases.append(("fp8_dot_factor(D) = (1 + ε)(1 + γ_{ceil(D/32)}) − 1 (symbolic D, ε)",
                  sp.expand(dot_factor(dd, num) - dot_want)))
    cases.append(("fp8_tile_roundings(B_c) = 1 + ceil(B_c/32): acc·alpha, one add per instruction",
                  sp.expand(tile_roundings(bc, num) - (1 + sp.ceiling(bc / mma_k)))))
    T = sp.Max(1, sp.ceiling(nk / bc))
    r = scale_roundings = error_bound.SCALE_ROUNDINGS_DESCALED
    E = sA * error_bound.score_factor(dot_want, gam(scale_roundings), u) + (T + 1) * (-sp.log(1 - uf))
    rho_w = sp.exp(E) - 1
    rho_num = error_bound.carried_factor(error_bound.weight_factor(up, ep), T, gam, 1 + sp.ceiling(bc / mma_k))
    rho_den = error_bound.carried_factor(gam(bc), T, gam)
    lse_want = error_bound.lse_bound(E, -sp.log(1 - error_bound.weight_factor(rho_w, rho_den)),
                                     sp.log(sp.Max(nk, 1)), sp.Abs(lse), u, uf)
    c = nk * pa * sp.exp(2 * E) * (1 + rho_den)
    want = error_bound.Bound(error_bound.out_bound(rho_w, rho_num, rho_den, error_bound.weight_factor(u, u), uo, c,
                                                   num=REALS), lse_want, E)
    for name in error_bound.FP8:
        cases += _bound_cases(lambda: bound(name, nk, bc, dd, sA, lse, num=num, descaled=True, fp8_mma=True), want,
                              f"forward_bound({name}, fp8_mma=True).{{}} is the sm_90 composition (symbolic N_k, "
                              f"B_c, D, s·A, u, u_p, u_out, p_abs, ε; γ_{r} for qk_scale)")
    return result("fp8_mma_bound", cases, "exact rationals; z3 nonlinear reals; forward_bound checked symbolically "
                  "to be the sm_90 composition")
