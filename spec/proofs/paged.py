"""Proof of claim ``paged_kv_reads``: the decode kernel's split ranges, key tiles and paged gather.

The index terms (``spec.paged``) are integer arithmetic with ``//``, ``cdiv``, ``min`` and
products of unknowns (``split · chunk``), over *all* integers, not sampled ones. SymPy's
assumptions do not decide such statements, so each one is handed to the SMT solver z3 as
``not statement`` over unbounded integers: PROVED only when z3 answers *unsat* (no integer
counterexample exists); *sat* (with the counterexample) or *unknown* is a FAILED case.
``floor(a/b)`` for ``b > 0`` is z3's integer division (the floor), ``ceiling(a/b)`` is
``(a + b − 1) / b``; the operands are non-negative in every statement, as in the kernel.
"""

from __future__ import annotations

import sympy as sp
import z3

from spec import notation as n
from spec import paged as P
from spec import terms
from spec.registry import claim
from spec.proofs.tools import result


class _Z3:
    """SymPy integer expressions -> z3 terms (only the nodes the index terms use)."""

    def __init__(self):
        self.vars: dict[str, z3.ArithRef] = {}

    def __call__(self, e):
        e = sp.sympify(e)
        if isinstance(e, sp.Symbol):
            return self.vars.setdefault(e.name, z3.Int(e.name))
        if isinstance(e, sp.Integer):
            return z3.IntVal(int(e))
        if isinstance(e, sp.Add):
            return z3.Sum([self(a) for a in e.args])
        if isinstance(e, sp.Mul):
            return z3.Product([self(a) for a in e.args])
        if isinstance(e, (sp.floor, sp.ceiling)):
            num, den = sp.fraction(sp.together(e.args[0]))
            a, b = self(num), self(den)
            return a / b if isinstance(e, sp.floor) else (a + b - 1) / b
        if isinstance(e, (sp.Min, sp.Max)):
            out = self(e.args[0])
            for x in e.args[1:]:
                y = self(x)
                out = z3.If(out <= y, out, y) if isinstance(e, sp.Min) else z3.If(out >= y, out, y)
            return out
        if isinstance(e, sp.StrictLessThan):
            return self(e.lhs) < self(e.rhs)
        if isinstance(e, sp.LessThan):
            return self(e.lhs) <= self(e.rhs)
        if isinstance(e, sp.And):
            return z3.And(*[self(a) for a in e.args])
        raise TypeError(f"no z3 rule for {type(e).__name__}: {e}")


def _decide(name: str, hypotheses, statement) -> tuple[str, sp.Basic]:
    """(name, 0) when z3 proves ``hypotheses => statement`` for all integers; else the
    counterexample (or 'unknown') as the residual."""
    solver = z3.Solver()
    solver.set("timeout", 20000)
    solver.add(*hypotheses, z3.Not(statement))
    verdict = solver.check()
    if verdict == z3.unsat:
        return name, sp.Integer(0)
    if verdict == z3.sat:
        return name, sp.Symbol(f"counterexample: {solver.model()}")
    return name, sp.Symbol(f"z3 {verdict}: {solver.reason_unknown()}")


def _split_of(z: _Z3, split_range, key_in_split, s, j):
    """The z3 terms ``(chunk, split_lo, split_hi, load mask)`` of split ``s`` and key ``j``
    (SymPy symbols), from the printed terms."""
    env = terms.chain(split_range)
    sub = {P.split: s, n.j: j}
    mask = key_in_split.xreplace({sym: env[sym] for sym in env}).xreplace(sub)
    return tuple(z(env[sym].xreplace(sub)) for sym in (P.chunk, P.split_lo, P.split_hi)) + (z(mask),)


@claim(P.CLAIM,
       "decode's KV reads: for all integers key_len >= 0, num_splits >= 1, B_c >= 1, page_size >= 1, "
       "the splits [split_lo, split_hi) of spec.paged.SPLIT_RANGE (split = 0 … num_splits−1), read in "
       "key tiles j = start_n + r, start_n = split_lo + t·B_c < split_hi, 0 <= r < B_c, masked by "
       "j < split_hi, read every key 0 <= j < key_len exactly once and no key outside [0, key_len); "
       "the paged gather (page_idx, slot) = (j // page_size, j − page_idx·page_size) gives "
       "0 <= slot < page_size, page_idx < cdiv(key_len, page_size) and j = page_idx·page_size + slot "
       "(one to one); decided by z3 over unbounded integers",
       r"\forall\, 0 \le j < \mathrm{key\_len}:\ \exists!\,(s, t, r)\ \text{reading } j;\quad "
       r"j \mapsto (\lfloor j/P \rfloor,\ j \bmod P)\ \text{one to one}",
       terms=tuple(t.name for group in P.GROUPS.values() for t in group),
       scope="symbolic key_len, num_splits, B_c, page_size, split, tile and lane (z3); unbounded "
             "integers Z (not int32), exact")
def prove_paged_kv_reads(split_range=P.SPLIT_RANGE, key_in_split=P.KEY_IN_SPLIT, page_gather=P.PAGE_GATHER):
    z = _Z3()
    L, S, Bc, PS, j = (z(x) for x in (n.key_len, P.num_splits, n.B_c, P.page_size, n.j))
    base = [L >= 0, S >= 1, Bc >= 1, PS >= 1]

    def reads(tag):
        """A read (split s, tile t, lane r) of key j_tag, with the kernel's loop and load mask."""
        s, jj = (sp.Symbol(f"{name}_{tag}", integer=True) for name in ("s", "j"))
        _, lo, hi, mask = _split_of(z, split_range, key_in_split, s, jj)
        s, jj = z(s), z(jj)
        t, r = z3.Ints(f"t_{tag} r_{tag}")
        start = lo + t * Bc
        return (s, t, r, jj), [0 <= s, s < S, t >= 0, start < hi, 0 <= r, r < Bc, jj == start + r, mask]

    (s1, t1, r1, j1), read1 = reads(1)
    (s2, t2, r2, j2), read2 = reads(2)
    cases = [
        _decide("no key outside [0, key_len) is read", base + read1, z3.And(0 <= j1, j1 < L)),
        _decide("a key is read by one (split, tile, lane) only", base + read1 + read2 + [j1 == j2],
                z3.And(s1 == s2, t1 == t2, r1 == r2)),
    ]
    # every valid key is read: the witness split j // chunk, and its tile and lane (t >= 0: the loop
    # starts at split_lo; without it a split_lo past j passed with a negative tile)
    s_w = sp.Symbol("s_w", integer=True)
    chunk_w, lo_w, hi_w, mask_w = _split_of(z, split_range, key_in_split, s_w, n.j)
    t_w = (j - lo_w) / Bc
    r_w = j - lo_w - t_w * Bc
    sw = z(s_w)
    cases.append(_decide("every key 0 <= j < key_len is read (split j // chunk)",
                         base + [0 <= j, j < L, sw == j / chunk_w],
                         z3.And(0 <= sw, sw < S, t_w >= 0, lo_w + t_w * Bc < hi_w, 0 <= r_w, r_w < Bc, mask_w)))
    # the paged gather
    env = terms.chain(page_gather)
    pidx, sl = z(env[P.page_idx]), z(env[P.slot])
    valid = base + [0 <= j, j < L]
    cases += [
        _decide("0 <= slot < page_size", valid, z3.And(0 <= sl, sl < PS)),
        _decide("j = page_idx·page_size + slot (the gather is one to one)", valid, j == pidx * PS + sl),
        _decide("page_idx < cdiv(key_len, page_size) (block_table read inside the sequence's pages)",
                valid, z3.And(0 <= pidx, pidx < (L + PS - 1) / PS)),
    ]
    return result(P.CLAIM, cases, "z3 over unbounded integers")
