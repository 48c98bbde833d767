"""Proofs of the host-side rewrites of ``spec.rewrites`` (the runtime applies them before a launch).

Each ``prove_<claim>`` takes the rewrite under test as an optional argument, so a test can
hand it a mutant and see FAILED.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import rewrites
from spec.masks import ALIGNMENT_SHIFT
from spec.proofs.tools import difference, nonnegative, result
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


@claim("window_clamp",
       "for every query 0 <= i < N_q, key 0 <= j < N_k (integers, N_q, N_k >= 1) and alignment, "
       "-b <= j - (i + shift) <= b with b = window_side_bound(N_q, N_k): so clamping a window side to b "
       "attends exactly the same keys (exact integer inequalities)",
       r"-b \le j-(i+\text{shift}) \le b,\ b = N_q+N_k",
       scope="symbolic positions and lengths; mathematical integers Z, exact")
def prove_window_clamp(bound=rewrites.window_side_bound):
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
    return result("window_clamp", cases, "slack variables, sign decided by SymPy")
