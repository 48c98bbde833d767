"""Proofs of the host-side rewrites of ``spec.rewrites`` (the runtime applies them before a launch).

Each ``prove_<claim>`` takes the rewrite under test as an optional argument, so a test can
hand it a mutant and see FAILED.
"""

from __future__ import annotations

import sympy as sp

import z3

from spec import addresses as A
from spec import launch as L
from spec import notation as n
from spec import rewrites
from spec.proofs.addresses import _Z3A
from spec.masks import ALIGNMENT_SHIFT, MASK_KINDS
from spec.proofs.tools import decide, difference, nonnegative, result
from spec.registry import claim

D = 3  # head_dim of the symbolic q and k (the identity is per component: any D behaves alike)
_q = sp.Matrix(sp.symbols(f"q_1:{D + 1}", real=True))
_k = sp.Matrix(sp.symbols(f"k_1:{D + 1}", real=True))
_t = sp.Symbol("t", positive=True)


@claim("scale_sign_rewrite",
       "for every real scale s (s < 0, s = 0, s > 0) the rewrite (q', s') = scale_sign(q, s) has s' > 0 and "
       "s'·(q'·k) = s·(q·k) exactly, as polynomials in q and k (D = 3 symbolic components): the scaled "
       "logits, hence out, lse and every gradient through q' = ±q or 0·q, are unchanged",
       r"s' > 0,\quad s'\,(q'\cdot k) = s\,(q\cdot k)\ \text{for } s<0,\ s=0,\ s>0",
       scope="symbolic scale sign cases, head dim 3; reals, exact")
def prove_scale_sign_rewrite(rewrite=rewrites.scale_sign):
    cases = []
    for name, s in (("s < 0", -_t), ("s = 0", sp.Integer(0)), ("s > 0", _t)):
        q2, s2 = rewrite(_q, s)
        cases.append((f"{name}: s' > 0", sp.Integer(0) if sp.sympify(s2).is_positive else sp.sympify(s2)))
        cases.append((f"{name}: s'(q'.k) = s(q.k)", difference(sp.expand(s2 * q2.dot(_k)), sp.expand(s * _q.dot(_k)))))
    return result("scale_sign_rewrite", cases, "per sign of s, polynomial identity")


def _window_sites():
    """Each call site of the clamp (``spec.launch``): its function, the symbolic tensors it reads the
    lengths off, and the kernel problem's lengths (n_q, n_k) in terms of those tensors (z3 bounds)."""
    q4, k4 = A.symbolic("q", ("B", "N_q", "Hq", "D")), A.symbolic("k", ("B", "Hkv", "N_k", "D"))
    qd = A.symbolic("q", ("B", "Hq", "N_q", "D"))
    qp, kp = A.symbolic("q", ("total_q", "Hq", "D")), A.symbolic("k", ("total_k", "Hkv", "D"))
    # decode's caches (capacity: spec.launch.decode_capacity, evaluated here): every key a block table row or a
    # contiguous row addresses, key_len = cache_seqlens[b] (+ the appended) <= that count (cache_len_range)
    kc, bt = A.symbolic("k_cache", ("B", "N_cache", "Hkv", "D")), None
    kpg, bpg = A.symbolic("k_cache", ("num_pages", "PAGE_SIZE", "Hkv", "D")), A.symbolic("bt", ("B", "max_pages"))
    return {
        # flash_attention: the problem is the tensors' own lengths
        "dense": (L.dense_window, (qd, k4), lambda z, nq, nk: [nq == z(qd.shape[2]), nk == z(k4.shape[2])]),
        # varlen: a segment has at most the packed totals' rows
        "varlen": (L.varlen_window, (qp, kp), lambda z, nq, nk: [nq <= z(qp.shape[0]), nk <= z(kp.shape[0])]),
        # decode: N_q new tokens, key_len = cache_seqlens[b] <= the keys its cache row holds
        "decode": (L.decode_window, (q4, kc, bt), lambda z, nq, nk: [nq == z(q4.shape[1]), nk <= z(kc.shape[1])]),
        "decode, paged": (L.decode_window, (q4, kpg, bpg),
                          lambda z, nq, nk: [nq == z(q4.shape[1]), nk <= z(kpg.shape[1] * bpg.shape[1])]),
    }


@claim("window_clamp",
       "for every query 0 <= i < N_q, key 0 <= j < N_k (integers, N_q, N_k >= 1) and alignment, "
       "-b <= j - (i + shift) <= b with b = window_side_bound(N_q, N_k): so clamping a window side to b "
       "attends exactly the same keys (exact integer inequalities); and at each call site of spec.launch "
       "(dense_window, varlen_window, decode_window with decode_capacity, contiguous and paged: the functions the "
       "runtime calls, N_q and N_k read off the "
       "symbolic tensors it passes) the clamped window keeps exactly the keys the given one keeps, for every "
       "row, key and alignment of the kernel's problem (z3); the window sides every launch passes "
       "(spec.launch.window_arguments, by the kernels' parameter names) make the printed window kind keep exactly "
       "-left <= j - (i + shift) <= right (z3); and the dense launch's alignment shift "
       "(spec.launch.dense_shift of the symbolic q, k: what both directions' kernels get) is the reference's, 0 "
       "top-left and N_k - N_q bottom-right (z3)",
       r"-b \le j-(i+\text{shift}) \le b,\ b = N_q+N_k",
       scope="symbolic positions, lengths, shapes and window sides; mathematical integers Z, exact")
def prove_window_clamp(bound=rewrites.window_side_bound, sites=None, dense_shift=None, window_arguments=None):
    # slack variables: i = a, N_q = i + 1 + c, j = e, N_k = j + 1 + f, all a, c, e, f >= 0 integers
    a, c, e, f = sp.symbols("a c e f", integer=True, nonnegative=True)
    env = {n.Nq: a + 1 + c, n.Nk: e + 1 + f}
    i, j = a, e
    b = bound(env[n.Nq], env[n.Nk])
    cases = []
    for alignment, shift in ALIGNMENT_SHIFT.items():
        rel = j - (i + sp.sympify(shift).subs(env))
        cases.append((f"{alignment}: j - (i + shift) >= -b", nonnegative(sp.expand(rel + b))))
        cases.append((f"{alignment}: j - (i + shift) <= b", nonnegative(sp.expand(b - rel))))
    # the call sites: what the runtime passes keeps the same keys
    sites = _window_sites() if sites is None else sites
    for name, (site, tensors, problem) in sites.items():
        z = _Z3A()
        left, right = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("left", "right"))
        l2, r2 = (z(x) for x in site((left, right), *tensors))
        zl, zr = z(left), z(right)
        nq, nk, i, j = z3.Ints("n_q n_k i j")
        hyp = [zl >= 0, zr >= 0, 0 <= i, i < nq, 0 <= j, j < nk] + problem(z, nq, nk)
        hyp += [z(s) >= 1 for t in tensors for s in getattr(t, "shape", ()) if isinstance(s, sp.Symbol)]
        for alignment, shift in (("top_left", 0), ("bottom_right", nk - nq)):
            rel = j - (i + shift)
            kept = z3.And(-zl <= rel, rel <= zr)
            cases.append(decide(f"{name} call site, {alignment}: the clamped window keeps the same keys", hyp,
                                 kept == z3.And(-l2 <= rel, rel <= r2)))
    # the launch's window sides (spec.launch.window_arguments, by name) in the printed window kind keep the keys
    # -left <= j - (i + shift) <= right of the given window (every launcher passes **window_arguments)
    window_arguments = L.window_arguments if window_arguments is None else window_arguments
    z = _Z3A()
    left, right = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("left", "right"))
    kind = MASK_KINDS["window"]
    at = {getattr(n, name): value for name, value in window_arguments((left, right)).items()}
    i, j, shift = (sp.Symbol(x, integer=True) for x in ("i", "j", "shift"))
    lo, hi = (z(t.subs(at).subs({n.i: i, n.shift: shift})) for t in (kind.lo, kind.hi))
    rel = z(j) - (z(i) + z(shift))
    cases.append(decide("window_arguments: the printed window kind at the launch's sides keeps -left <= j - (i + "
                        "shift) <= right", [z(left) >= 0, z(right) >= 0],
                        z3.And(lo <= z(j), z(j) <= hi) == z3.And(-z(left) <= rel, rel <= z(right))))
    # the dense call site's alignment shift (spec.launch.dense_shift: what mask_arguments passes both directions)
    dense_shift = L.dense_shift if dense_shift is None else dense_shift
    _, (qd, kd), problem = sites["dense"]
    z = _Z3A()
    nq, nk = z3.Ints("n_q n_k")
    hyp = problem(z, nq, nk) + [z(s) >= 1 for t in (qd, kd) for s in t.shape if isinstance(s, sp.Symbol)]
    for alignment, want in (("top_left", 0), ("bottom_right", nk - nq)):
        cases.append(decide(f"dense call site, {alignment}: the launch's shift is the reference's", hyp,
                            z(sp.sympify(dense_shift(alignment, qd, kd))) == want))
    return result("window_clamp", cases, "slack variables, sign decided by SymPy; call sites by z3")
