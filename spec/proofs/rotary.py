"""Proof of claim ``rotary_rotation``: the append kernel's rotary lanes are the reference's rotation.

Three parts, all on the printed terms of ``spec.rotary``:

1. the pairing (integers, z3 over unbounded integers): for every ``half >= 1`` and pair
   ``0 <= f < half``, the kernel's lane terms at the pair's first lane ``a`` give table column
   ``f``, partner ``b`` and sign ``−1``, at its second lane ``b`` column ``f``, partner ``a`` and
   sign ``+1``, where ``(a, b) = spec.rotary.pair_lanes(f, half)`` is the reference's layout; both
   lanes are rotated (``d < rotary_dim``) and every rotated lane reads a column ``< half`` and a
   partner ``< rotary_dim``; a lane ``d >= rotary_dim`` is not rotated;
2. the rotation (SymPy, exact): ``ROTATE`` on lanes ``a`` and ``b`` with those signs is
   ``spec.rotary.rotation``, ``R(θ) (x_a, x_b)ᵀ``, for a symbolic angle θ;
3. relative positions (SymPy, exact): with ``θ = m·ω`` for the query and ``n·ω`` for the key, the
   pair's score ``(R_m q)·(R_n k)`` equals ``(q_a k_a + q_b k_b)·cos((m − n)ω) + (q_a k_b −
   q_b k_a)·sin((m − n)ω)``: a function of ``m − n`` only (a whole head is a sum of such pairs
   and of unrotated lanes, which carry no position).
"""

from __future__ import annotations

import sympy as sp
import z3

from spec import rotary as R
from spec import terms
from spec.proofs.paged import _Z3, _decide
from spec.proofs.tools import difference, result
from spec.registry import claim


def _lane(index_terms, lane):
    """The kernel's ``(ro_freq, ro_pair, ro_sign)`` at lane ``lane`` (a SymPy expression)."""
    env = terms.chain(index_terms)
    return tuple(env[s].xreplace({R.d: lane}) for s in (R.ro_freq, R.ro_pair, R.ro_sign))


def _rotate_at(rotate, lane, x_val, pair_val, sign, cos_t, sin_t):
    """``ROTATE`` at ``lane`` on the values given, its select taken on the branch z3 decided."""
    (term,) = rotate
    value = term.expr.args[0][0] if isinstance(term.expr, sp.Piecewise) else term.expr
    sub = {R.x: x_val, R.x_pair: pair_val, R.ro_sign: sign, R.cos: cos_t, R.sin: sin_t}
    return value.xreplace(sub if lane is None else {**sub, R.d: lane})


@claim(R.CLAIM,
       "rotary embedding (spec.rotary): for all integers half >= 1 and pairs 0 <= f < half, the printed lane "
       "terms of GPT-J (INTERLEAVED) and GPT-NeoX (HALVES) give the pair's lanes (a, b) = pair_lanes(f, half) "
       "table column f, partners b <-> a and signs −1, +1, every lane d < 2·half reads a column < half and a "
       "partner < 2·half and lanes d >= 2·half are kept (z3, unbounded integers); new token t reads table row "
       "cache_seqlens[b] + t (PER_TOKEN = 1: keys, causal or windowed queries) or cache_seqlens[b] (0); ROTATE on (a, b) is the "
       "reference's R(θ)(x_a, x_b) for a symbolic angle θ, and the score (R_{mω} q)·(R_{nω} k) of a pair is "
       "a function of m − n only (SymPy, exact)",
       r"\mathrm{ROTATE}(a, b) = R(\theta)\begin{pmatrix}x_a\\x_b\end{pmatrix},\quad "
       r"\langle R_m q, R_n k\rangle = f(m - n)",
       terms=tuple(dict.fromkeys(t.name for group in R.GROUPS.values() for t in group)),
       scope="symbolic rotary_dim/2, pair, lane (z3 over Z); symbolic angle, positions and frequency, "
             "reals, exact (not fp32-rounded: the kernel rotates in fp32 and rounds once to the cache dtype)")
def prove_rotary_rotation(interleaved=R.INTERLEAVED, halves=R.HALVES, rotate=R.ROTATE,
                          position=R.ROTARY_POSITION):
    cases = []
    # the table row of new token t: FlashAttention's cache_seqlens[b] + t (PER_TOKEN = 1), cache_seqlens[b] (0)
    (pos,) = position
    for per, want in ((1, R.seqlen + R.tok), (0, R.seqlen)):
        cases.append((f"the table row with PER_TOKEN = {per}", difference(pos.expr.xreplace({R.per_token: per}), want)))
    z = _Z3()
    f, H, lane = (sp.Symbol(s, integer=True) for s in ("f", "half_", "lane"))
    zf, zH, zd = z(f), z(H), z(lane)
    (rot_term,) = rotate
    cond = rot_term.expr.args[0][1] if isinstance(rot_term.expr, sp.Piecewise) else sp.true  # lanes rotated
    for name, index_terms, inter in (("GPT-J", interleaved, True), ("GPT-NeoX", halves, False)):
        sub_half = {R.rotary_half: H}
        a, b = R.pair_lanes(f, H, inter)
        pair_ok = [zH >= 1, zf >= 0, zf < zH]
        for lane_name, lane_e, partner, sign in (("first", a, b, -1), ("second", b, a, 1)):
            freq, pair, sgn = (e.xreplace(sub_half) for e in _lane(index_terms, lane_e))
            rotated = cond.xreplace({R.d: lane_e, **sub_half})
            cases.append(_decide(f"{name}: the {lane_name} lane of pair f reads column f, partner, sign {sign:+d}",
                                 pair_ok, z3.And(z(freq) == zf, z(pair) == z(partner), z(sgn) == sign,
                                                 z(rotated) if rotated not in (sp.true, sp.false)
                                                 else z3.BoolVal(bool(rotated)))))
        freq, pair, _ = (e.xreplace(sub_half) for e in _lane(index_terms, lane))
        cases.append(_decide(f"{name}: a rotated lane reads a column < half and a partner < rotary_dim",
                             [zH >= 1, zd >= 0, zd < 2 * zH],
                             z3.And(0 <= z(freq), z(freq) < zH, 0 <= z(pair), z(pair) < 2 * zH)))
        kept = cond.xreplace({R.d: lane, **sub_half})
        cases.append(_decide(f"{name}: lanes >= rotary_dim are kept", [zH >= 1, zd >= 2 * zH],
                             z3.Not(z(kept)) if kept not in (sp.true, sp.false) else z3.BoolVal(kept == sp.false)))
    if not (isinstance(rot_term.expr, sp.Piecewise) and rot_term.expr.args[-1] == (R.x, True)):
        cases.append(("lanes >= rotary_dim keep x", rot_term.expr))
    # the rotation of one pair, and the score's dependence on m − n only
    xa, xb, qa, qb, ka, kb = sp.symbols("x_a x_b q_a q_b k_a k_b", real=True)
    theta = sp.Symbol("theta", real=True)

    def rotate_pair(va, vb, angle):
        return (_rotate_at(rotate, None, va, vb, -1, sp.cos(angle), sp.sin(angle)),
                _rotate_at(rotate, None, vb, va, 1, sp.cos(angle), sp.sin(angle)))

    got, want = rotate_pair(xa, xb, theta), R.rotation(xa, xb, sp.cos(theta), sp.sin(theta))
    cases.append(("ROTATE is R(θ) on the pair's first lane", difference(got[0], want[0])))
    cases.append(("ROTATE is R(θ) on the pair's second lane", difference(got[1], want[1])))
    # the angles m·ω, n·ω as symbols α, β (expand_trig splits cos(α − β), not cos(m ω − n ω))
    alpha, beta = sp.symbols("alpha beta", real=True)
    rq, rk = rotate_pair(qa, qb, alpha), rotate_pair(ka, kb, beta)
    score = rq[0] * rk[0] + rq[1] * rk[1]
    relative = (qa * ka + qb * kb) * sp.cos(alpha - beta) + (qa * kb - qb * ka) * sp.sin(alpha - beta)
    cases.append(("(R_m q)·(R_n k) depends on m − n only",
                  sp.expand(sp.expand_trig(score - relative))))
    return result(R.CLAIM, cases, "z3 over unbounded integers (lanes); SymPy expand_trig (rotation)")
