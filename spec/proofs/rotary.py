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
4. the launch line (``spec.rotary.kvcache_rotary``, the function the runtime calls): for symbolic
   ``cache_seqlens[b]``, ``N_new`` and token ``t``, and each of causal / windowed / neither, the printed
   ``ROTARY_POSITION`` at the start and PER_TOKEN it passes is the reference's row
   (``spec.rotary.kvcache_rotary_row``): new key t at ``cache_seqlens[b] + t``, the printed append index
   ``offs_j`` (``spec.addresses.APPEND_KEY``) of that key; query t at the same row when causal or windowed,
   else at ``cache_seqlens[b]``; both launches get the user's tables and layout, and the attention
   ``cache_seqlens[b] + N_new`` keys. With the contract's rules as hypotheses (``cache_len_range``:
   ``0 <= cache_seqlens[b] <= capacity − N_new``; ``rotary_cos``'s ``seqlen_ro >= capacity``) a key's row
   lies in ``[0, seqlen_ro)`` (``APPEND_ROW_OK`` holds: a key is never rotated by the fallback), and the
   fallback a row past the table gets (cos 1, sin 0) is the reference's: ``ROTATE`` keeps the lane. Which
   tensors are rotated (``spec.rotary.kvcache_appends``, the launches ``kvcache_append_op`` makes): new k
   into k_cache with the user's tables, layout and PER_TOKEN, new v into v_cache with none.
"""

from __future__ import annotations

import sympy as sp
import z3

from spec import addresses as A
from spec import rotary as R
from spec import terms
from spec.proofs.paged import _Z3
from spec.proofs.tools import decide, difference, result
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
       "a function of m − n only (SymPy, exact); the launch line spec.rotary.kvcache_rotary (what the runtime "
       "passes both _append_rows launches) gives new key t the row cache_seqlens[b] + t, its printed append index "
       "offs_j, and query t that row when causal or windowed, else cache_seqlens[b] (spec.rotary.kvcache_rotary_row, "
       "the reference's rule), with the user's tables and layout, and cache_seqlens[b] + N_new keys to attend; "
       "spec.rotary.kvcache_appends (the launches kvcache_append_op makes) writes new k into k_cache rotated with "
       "those tables and new v into v_cache unrotated, FlashAttention's rule "
       "(SymPy, symbolic cache_seqlens[b], N_new, t); given the contract's 0 <= cache_seqlens[b] <= capacity − N_new "
       "(cache_len_range) and seqlen_ro >= capacity (rotary_cos's rule), a key's row lies in [0, seqlen_ro) and "
       "APPEND_ROW_OK keeps it (z3); a row past the table rotates by cos 1, sin 0: ROTATE keeps the lane, the "
       "reference's rule",
       r"\mathrm{ROTATE}(a, b) = R(\theta)\begin{pmatrix}x_a\\x_b\end{pmatrix},\quad "
       r"\langle R_m q, R_n k\rangle = f(m - n)",
       terms=tuple(dict.fromkeys(t.name for group in R.GROUPS.values() for t in group)),
       scope="symbolic rotary_dim/2, pair, lane (z3 over Z); symbolic angle, positions and frequency, "
             "reals, exact (not fp32-rounded: the kernel rotates in fp32 and rounds once to the cache dtype)")
def prove_rotary_rotation(interleaved=R.INTERLEAVED, halves=R.HALVES, rotate=R.ROTATE,
                          position=R.ROTARY_POSITION, host=None, row_ok=A.APPEND_ROW_OK, appends=None):
    host = R.kvcache_rotary if host is None else host
    appends = R.kvcache_appends if appends is None else appends
    cases = _launch_line(host, position, rotate, row_ok) + _append_cases(appends)
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
            cases.append(decide(f"{name}: the {lane_name} lane of pair f reads column f, partner, sign {sign:+d}",
                                 pair_ok, z3.And(z(freq) == zf, z(pair) == z(partner), z(sgn) == sign,
                                                 z(rotated) if rotated not in (sp.true, sp.false)
                                                 else z3.BoolVal(bool(rotated)))))
        freq, pair, _ = (e.xreplace(sub_half) for e in _lane(index_terms, lane))
        cases.append(decide(f"{name}: a rotated lane reads a column < half and a partner < rotary_dim",
                             [zH >= 1, zd >= 0, zd < 2 * zH],
                             z3.And(0 <= z(freq), z(freq) < zH, 0 <= z(pair), z(pair) < 2 * zH)))
        kept = cond.xreplace({R.d: lane, **sub_half})
        cases.append(decide(f"{name}: lanes >= rotary_dim are kept", [zH >= 1, zd >= 2 * zH],
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


def _append_cases(appends):
    """Part 4, which tensors the append rotates (spec.rotary.kvcache_appends, what kvcache_append_op launches): on
    symbols, new k into k_cache with the user's tables, layout and PER_TOKEN, new v into v_cache with no tables
    (append_rows' ROTARY off), FlashAttention's rule."""
    k, v, k_cache, v_cache, cos_t, sin_t, inter, per = sp.symbols(
        "k v k_cache v_cache rotary_cos rotary_sin interleaved per_token")
    launches = tuple(appends(k, v, k_cache, v_cache, cos_t, sin_t, inter, per))
    pairs = [(a.new, a.cache) for a in launches]
    by_new = {a.new: a.rotary for a in launches}
    return [("the append launches new k into k_cache and new v into v_cache, once each",
             sp.Integer(0 if pairs == [(k, k_cache), (v, v_cache)] else 1)),
            ("new k is rotated with the user's tables, layout and PER_TOKEN",
             sp.Integer(0 if by_new.get(k) == dict(rotary_cos=cos_t, rotary_sin=sin_t, interleaved=inter,
                                                   per_token=per) else 1)),
            ("new v is written as it is (no rotary tables: FlashAttention rotates q and k, never v)",
             sp.Integer(0 if v in by_new and by_new[v].get("rotary_cos") is None
                        and by_new[v].get("rotary_sin") is None else 1))]


def _launch_line(host, position, rotate, row_ok):
    """Part 4: the rows spec.rotary.kvcache_rotary hands the two launches are the reference's."""
    cases = []
    (pos,) = position
    (key_term,) = A.APPEND_KEY
    cs, n_new, t = (sp.Symbol(s_, integer=True, nonnegative=True) for s_ in ("cache_seqlens_b", "N_new", "t"))
    cos_t, sin_t = sp.Symbol("rotary_cos"), sp.Symbol("rotary_sin")  # the user's tables, passed as they are
    window = (sp.Symbol("window_left", integer=True), sp.Symbol("window_right", integer=True))

    def row(start, per):  # the printed table row the kernel reads for token t (start_new: start as loaded)
        return pos.expr.xreplace({R.seqlen: start, R.per_token: per, R.tok: t})

    for causal, win in ((False, None), (True, None), (False, window), (True, window)):
        tag = f"causal={causal}, window={'None' if win is None else 'given'}"
        for inter in (True, False):
            ro = host(cs, n_new, causal, win, cos_t, sin_t, inter)
            same = ro.cos == cos_t and ro.sin == sin_t and ro.interleaved is inter
            cases.append((f"{tag}, interleaved={inter}: both launches get the user's tables and layout",
                          sp.Integer(0 if same else 1)))
        key_row = row(ro.key_start, ro.key_per_token)
        appended_at = key_term.expr.xreplace({A.start_new: ro.key_start, A.offs_t: t})
        cases.append((f"{tag}: new key t is rotated at the reference's row cache_seqlens[b] + t",
                      difference(key_row, R.kvcache_rotary_row(cs, t, query=False))))
        cases.append((f"{tag}: new key t is rotated at the row of its printed append index offs_j",
                      difference(key_row, appended_at)))
        query_row = row(ro.query_start, ro.query_per_token)
        cases.append((f"{tag}: query t is rotated at the reference's row",
                      difference(query_row, R.kvcache_rotary_row(cs, t, query=True, causal=causal, window=win))))
        if causal or win is not None:
            cases.append((f"{tag}: query t is rotated at the row its key is appended at (cache_seqlens[b] + t)",
                          difference(query_row, appended_at)))
        cases.append((f"{tag}: the attention runs over cache_seqlens[b] + N_new keys",
                      difference(ro.key_lengths, cs + n_new)))
    # a key's row inside the table, under the contract's rules (cache_len_range; seqlen_ro >= capacity)
    z = _Z3()
    ro = host(cs, n_new, True, None, cos_t, sin_t, True)
    cap, seqlen_ro = sp.Symbol("capacity", integer=True), sp.Symbol("seqlen_ro", integer=True)
    key_row = row(ro.key_start, ro.key_per_token)
    ((ok_term,),) = (row_ok,)
    kept = ok_term.expr.xreplace({A.offs_pos: key_row, A.seqlen_ro: seqlen_ro})
    contract = [0 <= z(cs), z(cs) + z(n_new) <= z(cap), z(seqlen_ro) >= z(cap), 0 <= z(t), z(t) < z(n_new)]
    cases.append(decide("a new key's row lies in [0, seqlen_ro) and APPEND_ROW_OK keeps it (cache_seqlens[b] "
                         "<= capacity − N_new, seqlen_ro >= capacity)", contract,
                         z3.And(0 <= z(key_row), z(key_row) < z(seqlen_ro),
                                z(kept) if kept not in (sp.true, sp.false) else z3.BoolVal(bool(kept)))))
    # a row past the table: the kernel's masked loads give cos 1, sin 0, and ROTATE keeps the lane
    cases.append(("a row past the table (cos 1, sin 0) keeps the lane, the reference's rule",
                  difference(_rotate_at(rotate, None, R.x, R.x_pair, R.ro_sign, 1, 0), R.x)))
    return cases
