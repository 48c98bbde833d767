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
from spec.proofs.tools import decide, result


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
        if e in (sp.true, sp.false):  # a mask that admits every lane, or none
            return z3.BoolVal(bool(e))
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


def _split_of(z: _Z3, split_range, key_in_split, s, j):
    """The z3 terms ``(split_lo, split_hi, load mask)`` of split ``s`` and key ``j`` (SymPy
    symbols), from the printed terms."""
    env = terms.chain(split_range)
    sub = {P.split: s, n.j: j}
    mask = key_in_split.xreplace({sym: env[sym] for sym in env}).xreplace(sub)
    return tuple(z(env[sym].xreplace(sub)) for sym in (P.split_lo, P.split_hi)) + (z(mask),)


def _reads_cases(z, split_range, key_in_split, hypotheses, chunk_of, prefix=""):
    """The three cases of a split plan: no key outside [key_lo, key_len) is read, a key is read
    once, every key is read (by split (j − key_lo) // chunk, ``chunk_of(s)`` the split's size)."""
    L, K0, S, Bc, j = (z(x) for x in (n.key_len, P.key_lo, P.num_splits, n.B_c, n.j))

    def reads(tag):
        """A read (split s, tile t, lane r) of key j_tag, with the kernel's loop and load mask."""
        s, jj = (sp.Symbol(f"{name}_{tag}", integer=True) for name in ("s", "j"))
        lo, hi, mask = _split_of(z, split_range, key_in_split, s, jj)
        s, jj = z(s), z(jj)
        t, r = z3.Ints(f"t_{tag} r_{tag}")
        start = lo + t * Bc
        return (s, t, r, jj), [0 <= s, s < S, t >= 0, start < hi, 0 <= r, r < Bc, jj == start + r, mask]

    (s1, t1, r1, j1), read1 = reads(1)
    (s2, t2, r2, j2), read2 = reads(2)
    cases = [
        decide(prefix + "no key outside [key_lo, key_len) is read", hypotheses + read1, z3.And(K0 <= j1, j1 < L)),
        decide(prefix + "a key is read by one (split, tile, lane) only", hypotheses + read1 + read2 + [j1 == j2],
                z3.And(s1 == s2, t1 == t2, r1 == r2)),
    ]
    # every valid key is read: the witness split (j - key_lo) // chunk, and its tile and lane (t >= 0:
    # the loop starts at split_lo; without it a split_lo past j passed with a negative tile)
    s_w = sp.Symbol("s_w", integer=True)
    lo_w, hi_w, mask_w = _split_of(z, split_range, key_in_split, s_w, n.j)
    chunk_w = chunk_of(s_w)
    t_w = (j - lo_w) / Bc
    r_w = j - lo_w - t_w * Bc
    sw = z(s_w)
    cases.append(decide(prefix + "every key key_lo <= j < key_len is read (split (j - key_lo) // chunk)",
                         hypotheses + [K0 <= j, j < L, sw == (j - K0) / chunk_w],
                         z3.And(0 <= sw, sw < S, t_w >= 0, lo_w + t_w * Bc < hi_w, 0 <= r_w, r_w < Bc, mask_w)))
    return cases


@claim(P.CLAIM,
       "decode's KV reads: for all integers key_len, key_lo >= 0, num_splits >= 1, B_c >= 1, page_size >= 1, "
       "the splits [split_lo, split_hi) of spec.paged.SPLIT_RANGE (split = 0 … num_splits−1), read in "
       "key tiles j = start_n + r, start_n = split_lo + t·B_c < split_hi, 0 <= r < B_c, masked by "
       "j < split_hi, read every key key_lo <= j < key_len exactly once and no key outside [key_lo, key_len); "
       "so do the fixed-size splits of SPLIT_RANGE_FIXED (batch_invariant) for split_keys >= 1 and "
       "num_splits·split_keys >= key_len − key_lo; "
       "the paged gather (page_idx, slot) = (j // page_size, j − page_idx·page_size) gives "
       "0 <= slot < page_size, page_idx < cdiv(key_len, page_size) and j = page_idx·page_size + slot "
       "(one to one); decided by z3 over unbounded integers",
       r"\forall\, k_0 \le j < \mathrm{key\_len}:\ \exists!\,(s, t, r)\ \text{reading } j;\quad "
       r"j \mapsto (\lfloor j/P \rfloor,\ j \bmod P)\ \text{one to one}",
       terms=tuple(t.name for group in P.GROUPS.values() for t in group),
       scope="symbolic key_len, key_lo, num_splits, split_keys, B_c, page_size, split, tile and lane (z3); "
             "unbounded integers Z (not int32), exact")
def prove_paged_kv_reads(split_range=P.SPLIT_RANGE, key_ok=P.KEY_OK, page_gather=P.PAGE_GATHER,
                         split_range_fixed=P.SPLIT_RANGE_FIXED):
    ((key_in_split),) = (t.expr for t in key_ok)
    z = _Z3()
    L, K0, S, Bc, PS, j, SK = (z(x) for x in (n.key_len, P.key_lo, P.num_splits, n.B_c, P.page_size, n.j,
                                              P.split_keys))
    base = [K0 >= 0, S >= 1, Bc >= 1, PS >= 1]
    env = terms.chain(split_range)
    cases = _reads_cases(z, split_range, key_in_split, base,
                         lambda s: z(env[P.chunk].xreplace({P.split: s})) if P.chunk in env else z3.IntVal(1))
    cases += _reads_cases(z, split_range_fixed, key_in_split, base + [SK >= 1, S * SK >= L - K0],
                          lambda s: SK, prefix="fixed splits: ")
    # the paged gather
    env = terms.chain(page_gather)
    pidx, sl = z(env[P.page_idx]), z(env[P.slot])
    valid = base + [0 <= j, j < L]
    cases += [
        decide("0 <= slot < page_size", valid, z3.And(0 <= sl, sl < PS)),
        decide("j = page_idx·page_size + slot (the gather is one to one)", valid, j == pidx * PS + sl),
        decide("page_idx < cdiv(key_len, page_size) (block_table read inside the sequence's pages)",
                valid, z3.And(0 <= pidx, pidx < (L + PS - 1) / PS)),
    ]
    return result(P.CLAIM, cases, "z3 over unbounded integers")


BATCH_INVARIANT_CLAIM = "batch_invariant_splits"


def _merge_values(merge, sides: dict, exact: set) -> tuple[dict, list[str]]:
    """Every MERGE_STATE term's value with the sides given (``col`` read as the identity: one row),
    and the operations whose exact result is not one of ``exact`` (each term's expression is built
    unevaluated on the earlier terms' values, then every operation in it is evaluated on its own)."""
    env, inexact = {}, []
    for t in merge:
        expr = t.expr.replace(terms.col, lambda a: a)
        with sp.evaluate(False):
            tree = expr.xreplace({**env, **sides})
        for node in sp.preorder_traversal(tree):
            if not isinstance(node, sp.Expr) or node.is_Atom or isinstance(node, sp.Piecewise):
                continue  # leaves (inputs, constants) and selects (exact: one of their branches)
            if node.is_number and not node.has(sp.oo, n.NEG_INF):
                continue  # a constant (log2 e, ln 2): the printer folds it into one float literal
            value = node.doit()
            if value not in exact:
                inexact.append(f"{t.name}: {node} = {value}")
        env[t.symbol] = tree.doit()
    return env, inexact


@claim(BATCH_INVARIANT_CLAIM,
       "batch_invariant=True: a row's split plan is a function of that row's own lengths: every split's "
       "[split_lo, split_hi) in spec.paged.SPLIT_RANGE_FIXED has free symbols within {key_lo, key_len, split, "
       "split_keys} (not num_splits, which the batch's largest cache sets), a split with "
       "split·split_keys >= key_len − key_lo reads no key, the num_splits spec.paged.batch_invariant_num_splits gives "
       "the launch (the runtime's call) cover every key of a row of at most the cache's capacity (z3), and merging the empty partial (0, −inf) "
       "into a partial (o_a, lse_a) with lse_a finite (either side, or two empty ones) by spec.terms.MERGE_STATE "
       "returns that partial with every operation's exact result 0, 1, ±inf, ±o_a or ±lse_a, so each IEEE "
       "operation is exact given exp2(0) = 1, exp2(−inf) = 0, log2(1) = 0: the fold over a row's "
       "splits gives the same bits whatever number of trailing empty splits the batch adds",
       r"\mathrm{plan}(s) = f(k_0, \mathrm{key\_len}, s);\quad (o, \ell) \oplus (0, -\infty) = (o, \ell)\ "
       r"\text{bit for bit}",
       terms=tuple(t.name for t in P.SPLIT_RANGE_FIXED),
       scope="symbolic key_len, key_lo, split, split_keys (z3 over Z); the merge on symbolic finite o_a, lse_a: "
             "exact values, hence exact fp32 operations under the stated exp2/log2 facts")
def prove_batch_invariant_splits(split_range_fixed=P.SPLIT_RANGE_FIXED, merge=terms.MERGE_STATE,
                                 num_splits=P.batch_invariant_num_splits):
    env = terms.chain(split_range_fixed)
    own = {n.key_len, P.key_lo, P.split, P.split_keys}
    cases = []
    for sym in (P.split_lo, P.split_hi):
        extra = env[sym].free_symbols - own
        cases.append((f"{sym.name} depends on the row's key_lo, key_len and the split only",
                      sp.Integer(0) if not extra else sp.Tuple(*sorted(extra, key=str))))
    z = _Z3()
    L, K0, SK, s = (z(x) for x in (n.key_len, P.key_lo, P.split_keys, P.split))
    cases.append(decide("a split past the row's keys is empty (split_lo >= split_hi)",
                         [K0 >= 0, SK >= 1, s >= 0, s * SK >= L - K0],
                         z(env[P.split_lo]) >= z(env[P.split_hi])))
    # the launch's splits (num_splits of the runtime's function, for a cache of `capacity` keys) reach every key
    # of every row: the last split's end key_lo + num_splits·split_keys is past key_len <= capacity
    capacity = sp.Symbol("capacity", integer=True, positive=True)
    cases.append(decide("the launch's num_splits fixed splits cover every key: key_lo + num_splits·split_keys >= "
                         "key_len for key_len <= capacity", [K0 >= 0, SK >= 1, L >= 0, L <= z(capacity)],
                         K0 + z(num_splits(capacity, P.split_keys)) * SK >= L))
    o_x, lse_x = sp.symbols("o_x lse_x", real=True)  # a split's partial: lse finite
    # values whose IEEE operation is exact: 0, 1, ±inf, and the partial's own values (or their negation)
    exact = {sp.Integer(0), sp.Integer(1), n.NEG_INF, sp.oo, o_x, lse_x, -o_x, -lse_x}
    for name, sides, want in (
            ("an empty side b", {n.o_a: o_x, n.lse_a: lse_x, n.o_b: 0, n.lse_b: n.NEG_INF}, (o_x, lse_x)),
            ("an empty side a (the fold's start)", {n.o_a: 0, n.lse_a: n.NEG_INF, n.o_b: o_x, n.lse_b: lse_x},
             (o_x, lse_x)),
            ("two empty sides", {n.o_a: 0, n.lse_a: n.NEG_INF, n.o_b: 0, n.lse_b: n.NEG_INF}, (0, n.NEG_INF))):
        values, inexact = _merge_values(merge, sides, exact)
        got = (values.get(n.o), values.get(n.lse))
        cases.append((f"merge with {name} returns the other side", sp.Integer(0) if got == want else sp.Tuple(*got)))
        cases.append((f"merge with {name}: every operation's exact result is 0, 1, ±inf, ±o or ±lse",
                      sp.Integer(0) if not inexact else sp.Symbol("; ".join(inexact))))
    return result(BATCH_INVARIANT_CLAIM, cases, "free symbols; z3 over Z; exact merge values")
