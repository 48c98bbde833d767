"""The forward epilogue (``terms.FORWARD_EPILOGUE``) and the softmax's second pass, proved on states.

After the last key tile a row's state is either finite (at least one key: ``m`` real,
``d' > 0``) or ``E`` (no key). The epilogue must give ``normalise(state) = (õ/d', m + log d')``
(natural log) for the first and ``(0, −∞)`` with no NaN for the second; the softmax kernel's
``a = p / l_safe`` likewise ``softmax`` and 0. Both on a tile of two rows (one of each kind)
and two output columns, so a term that broadcasts along the wrong axis fails too.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import recurrences as R
from spec import terms
from spec.proofs.tools import equal_cases, finite_state, result, run_terms
from spec.registry import claim

s = n.sm_scale


@claim("forward_epilogue",
       "the printed epilogue gives a row with at least one key (m real, d' > 0) o = õ/d' and "
       "lse = m + log d' (natural log), and a row with no key (E) o = 0, lse = −∞ with no NaN; the "
       "softmax kernel's a = p/l_safe is e^{x−m}/d' and 0 on a padding row",
       r"\mathrm{epilogue}(m, d', \tilde o) = (\tilde o/d',\ m+\log d'),\quad "
       r"\mathrm{epilogue}(E) = (0, -\infty)",
       scope="symbolic state (m real, d' > 0, õ real), 2 rows x 2 output columns; reals, exact",
       assumptions=())
def prove_forward_epilogue(epilogue=terms.FORWARD_EPILOGUE, normalise=terms.SOFTMAX_NORMALISE):
    a = finite_state("")
    o2 = sp.Symbol("o_2", real=True)  # the finite row's second output column
    # row 0 finite, row 1 empty (E); acc is 2 rows x 2 columns, m_i and l_i one per row
    env = {n.m_i: sp.Matrix([a.m * n.LOG2E, n.NEG_INF]), n.l_i: sp.Matrix([a.d, 0]),
           n.acc: sp.Matrix([[a.o, o2], [0, 0]])}
    fin = run_terms(epilogue, env)
    out, lse = fin[n.acc], fin[n.lse]
    want_o, want_lse = R.normalise(a)
    pairs = [
        ("finite row: acc = õ/d' (both columns)", (out[0, 0], out[0, 1]), (want_o, o2 / a.d)),
        ("finite row: lse = m + log d'", lse[0], want_lse),
        ("empty row (E): acc = 0 (no NaN)", (out[1, 0], out[1, 1]), (0, 0)),
        ("empty row (E): lse = -oo", lse[1], n.NEG_INF),
    ]
    # the softmax kernel: (m_N, d'_N) from its tile loop, then a = p / l_safe
    xs = sp.symbols("x_1:3", real=True)
    M = sp.Max(*xs)
    d = sp.Add(*[sp.exp(x - M) for x in xs])
    row = run_terms(normalise, {n.m_i: M * n.LOG2E, n.l_i: d, n.qk: sp.Matrix([xs]), n.qk_scale: n.LOG2E})
    pad = run_terms(normalise, {n.m_i: n.NEG_INF, n.l_i: 0, n.qk: sp.Matrix([[n.NEG_INF, n.NEG_INF]]),
                                n.qk_scale: n.LOG2E})
    pairs += [("softmax pass 2: a = e^{x - m_N}/d'_N", tuple(row[n.a]), tuple(R.safe_softmax(xs))),
              ("softmax padding row: a = 0 (no NaN)", tuple(pad[n.a]), (0, 0))]
    return result("forward_epilogue", equal_cases(pairs), "a finite row and an empty row, 2 output columns")
