"""The backward's gradient accumulation and its key-major tile at *symbolic* tile sizes.

The printed backward terms (``BACKWARD_DKDV``, ``BACKWARD_DQ``, ``BACKWARD_SCALE``,
``BACKWARD_TILE``, ``BACKWARD_TILE_T``, ``BACKWARD_DKDV_T``) are interpreted on a *generic
entry* of each tile, with the tile's axes tracked: every value is ``(expr, axes)`` where
``axes`` names what its rows and columns run over — ``"q"`` (query rows ``i`` of a query tile
``[a, a + B_r)``), ``"k"`` (keys ``j`` of a key tile ``[c, c + B_c)``), ``"d"`` (head dim,
``[1, D]``), ``"*"`` (a broadcast axis). ``trans`` swaps the axes, ``col(x)`` / ``row(x)``
broadcast a per-query vector along the columns / rows, ``dot`` sums over the axis its
operands share, under a fresh index over that axis's symbolic range. Elementwise operations
need matching axes (``"*"`` matches any): a term that broadcasts or transposes along the wrong
axis is an *axis* failure, whatever the sizes — the symbolic counterpart of a shape error.

Both claims hold for symbolic ``B_r``, ``B_c``, ``D`` and tile starts; masked entries and rows
with no key enter through the printed ``MASK_TERM`` with an opaque predicate ``κ_ij`` and an
opaque saved lse ``L_i`` (which may be −∞), so one generic entry covers every mask.
Finite sums are compared in the canonical form of ``spec.proofs.symbolic`` (bound indices
renamed by range, linearity, Fubini); a gradient is ``sp.diff`` of a ``Sum`` of ``Indexed``
entries, its Kronecker deltas resolved for an entry inside the summed range.
"""

from __future__ import annotations

import itertools

import sympy as sp

from spec import masks, terms
from spec import notation as n
from spec.proofs.tools import ZERO, result
from spec.proofs.symbolic import gradient, sum_zero
from spec.registry import claim

s = n.sm_scale
i, j, d = sp.symbols("i j d", integer=True)  # a generic query row, key, head-dim column
a_, c_ = sp.symbols("a c", integer=True, nonnegative=True)  # first query row, first key of the tiles
D = sp.Symbol("D", integer=True, positive=True)
N_q, N_k = sp.symbols("N_q N_k", integer=True, positive=True)
INDEX = {"q": i, "k": j, "d": d}
RANGE = {"q": (a_, a_ + n.B_r - 1), "k": (c_, c_ + n.B_c - 1), "d": (1, D)}
Q, K, V, DO = (sp.IndexedBase(name, real=True) for name in ("Q", "K", "V", "dO"))
P, DS = sp.IndexedBase("P", real=True), sp.IndexedBase("dS", real=True)  # free: the chain rule's inputs
L, DELTA, KAPPA = sp.IndexedBase("L"), sp.IndexedBase("Delta", real=True), sp.IndexedBase("kappa")
DK0, DV0, DQ0 = (sp.IndexedBase(name, real=True) for name in ("dk0", "dv0", "dq0"))  # accumulators before


class AxisError(ValueError):
    """A term combines tiles along axes that do not match."""


def _join(axes_list):
    """The axes of an elementwise combination: scalars broadcast, ``"*"`` matches any axis."""
    shaped = [ax for ax in axes_list if ax]
    if not shaped:
        return ()
    if len({len(ax) for ax in shaped}) != 1:
        raise AxisError(f"axes {shaped}: a vector meets a tile without col/row")
    out = []
    for names in zip(*shaped):
        real = {x for x in names if x != "*"}
        if len(real) > 1:
            raise AxisError(f"axes {shaped} do not match")
        out.append(real.pop() if real else "*")
    return tuple(out)


class Interpreter:
    """Kernel expressions on a generic entry, with axes; fresh summation indices per ``dot``."""

    def __init__(self, ranges=RANGE):
        self.ranges, self.fresh = ranges, itertools.count()

    def __call__(self, expr, env):
        if expr in env:
            return env[expr]
        if not expr.args or isinstance(expr, sp.Symbol):
            return expr, ()
        f = expr.func
        vals = [self(x, env) for x in expr.args]
        if f is terms.trans:
            e, ax = vals[0]
            return e, tuple(reversed(ax))
        if f in (terms.col, terms.row):
            e, ax = vals[0]
            if len(ax) != 1:
                raise AxisError(f"{f.__name__} of a value with axes {ax}")
            return e, (ax[0], "*") if f is terms.col else ("*", ax[0])
        if f is terms.dot:
            (ea, axa), (eb, axb) = vals
            if len(axa) != 2 or len(axb) != 2 or axa[1] != axb[0] or axa[1] == "*":
                raise AxisError(f"dot of axes {axa} and {axb}")
            shared = axa[1]
            if shared in (axa[0], axb[1]):
                raise AxisError(f"dot of axes {axa} and {axb}: the summed axis is also a free one")
            k = sp.Symbol(f"{INDEX[shared]}_{next(self.fresh)}", integer=True)
            lo, hi = self.ranges[shared]
            summand = ea.xreplace({INDEX[shared]: k}) * eb.xreplace({INDEX[shared]: k})
            return sp.Sum(summand, (k, lo, hi)), (axa[0], axb[1])
        if f in (terms.rowsum, terms.rowmax):
            raise AxisError(f"{f.__name__} is not part of the backward's tiles")
        return f(*[e for e, _ in vals]), _join([ax for _, ax in vals])

    def run(self, term_seq, env):
        env = dict(env)
        for t in term_seq:
            env[t.symbol] = self(t.expr, env)
        return env


def tile_case(name, got, want_expr, want_axes):
    """``got = (expr, axes)`` against the wanted entry and axes: an axis failure names both."""
    expr, axes = got
    if axes != want_axes:
        return (f"{name}: axes", sp.Symbol(f"axes {axes} != {want_axes}"))
    return (name, sum_zero(expr, want_expr))


def attempt(name, thunk):
    """Run ``thunk() -> cases``; a term combining the wrong axes is one failed case."""
    try:
        return thunk()
    except AxisError as err:
        return [(f"{name}: axes", sp.Symbol(f"axis error: {err}"))]


@claim("backward_grads",
       "dV = Pᵀ dO, dK = scale·dSᵀ Q, dQ = scale·dS K, accumulated tile by tile: for symbolic B_r, B_c, D "
       "and tile starts, the printed dK/dV update adds a query tile's Σ_i P_ij dO_id and Σ_i dS_ij Q_id, the "
       "dQ update a key tile's Σ_j dS_ij K_jd; so from 0 (claim initial_state), over any partition of the "
       "query rows [0, N_q) (keys [0, N_k)) into tiles in any order, and after the printed scale, they are "
       "∂<dO, PV>/∂V, ∂<dS, s·QKᵀ>/∂K and ∂<dS, s·QKᵀ>/∂Q (sp.diff of the sums), for every entry",
       r"dV=P^\top dO,\quad dK=s\,dS^\top Q,\quad dQ=s\,dS\,K\quad(S=s\,QK^\top,\ O=PV)",
       scope="symbolic B_r, B_c, D, N_q, N_k and tile starts (generic entry, SymPy Sum, axes checked); "
             "P, dS free (their values: backward_symbolic, backward_ds); reals, exact")
def prove_backward_grads(backward_dkdv=terms.BACKWARD_DKDV, backward_dq=terms.BACKWARD_DQ,
                         backward_scale=terms.BACKWARD_SCALE):
    """With ``dS = ∂L/∂S`` and ``dO = ∂L/∂O`` free, the chain rule through ``S = s·Q Kᵀ`` and
    ``O = P V`` gives ``∂L/∂V = ∂<dO, PV>/∂V``, ``∂L/∂K = ∂<dS, S>/∂K``, ``∂L/∂Q = ∂<dS, S>/∂Q``.

    Step (one tile, any start, symbolic width): the printed update adds the tile's sum to a
    generic accumulator entry. Partition: the sums of contiguous tiles concatenate (the lemma of
    claim ``every_tiling``, rechecked here), and adding them commutes, so any tiling in any
    order gives the sum over all rows (keys). Gradient: the printed scale times that sum is
    ``sp.diff`` of the loss at the entry.
    """
    run = Interpreter()
    env = {n.p: (P[i, j], ("q", "k")), n.ds: (DS[i, j], ("q", "k")), n.q: (Q[i, d], ("q", "d")),
           n.do: (DO[i, d], ("q", "d")), n.k: (K[j, d], ("k", "d")),
           n.dk: (DK0[j, d], ("k", "d")), n.dv: (DV0[j, d], ("k", "d")), n.dq: (DQ0[i, d], ("q", "d"))}
    qs, ks = (i, a_, a_ + n.B_r - 1), (j, c_, c_ + n.B_c - 1)

    def steps():
        out = run.run(backward_dkdv, env)
        dq = run.run(backward_dq, env)[n.dq]
        return [tile_case("dK/dV step: dV += Σ_{i in tile} P_ij dO_id", out[n.dv],
                          DV0[j, d] + sp.Sum(P[i, j] * DO[i, d], qs), ("k", "d")),
                tile_case("dK/dV step: dK += Σ_{i in tile} dS_ij Q_id", out[n.dk],
                          DK0[j, d] + sp.Sum(DS[i, j] * Q[i, d], qs), ("k", "d")),
                tile_case("dQ step: dQ += Σ_{j in tile} dS_ij K_jd", dq,
                          DQ0[i, d] + sp.Sum(DS[i, j] * K[j, d], ks), ("q", "d"))]
    cases = attempt("steps", steps)
    # partition: contiguous tiles' sums concatenate, in any order (induction on the tile count)
    f, w, b = sp.IndexedBase("f"), sp.Symbol("w", integer=True, positive=True), sp.Symbol("b", integer=True)
    concat = sp.Sum(f[i], (i, 0, a_ - 1)) + sp.Sum(f[i], (i, a_, a_ + w - 1)) - sp.Sum(f[i], (i, 0, a_ + w - 1))
    cases.append(("partition: Σ_[0,a) + Σ_[a,a+w) = Σ_[0,a+w)", ZERO if sp.simplify(concat) == 0 else concat))
    # the whole sums, scaled once after the loop, are the gradients (generic entry)
    e_, k_, r_ = sp.symbols("e k r", integer=True)  # the losses' own indices (the entry is i, j, d)
    full_q, full_k = (i, 0, N_q - 1), (j, 0, N_k - 1)
    acc = {n.dk: (sp.Sum(DS[i, j] * Q[i, d], full_q), ("k", "d")),
           n.dq: (sp.Sum(DS[i, j] * K[j, d], full_k), ("q", "d"))}

    def grads():
        scaled = run.run(backward_scale, acc)
        S_entry = s * sp.Sum(Q[r_, e_] * K[k_, e_], (e_, 1, D))
        over = {"k": (k_, 0, N_k - 1), "q": (r_, 0, N_q - 1)}  # <dS, S>; the differentiated axis innermost
        dots = lambda inner, outer: sp.Sum(DS[r_, k_] * S_entry, over[inner], over[outer])  # noqa: E731
        out_loss = sp.Sum(DO[r_, e_] * P[r_, k_] * V[k_, e_], (k_, 0, N_k - 1), (e_, 1, D), (r_, 0, N_q - 1))
        return [
            ("dV = Σ_{i<N_q} P_ij dO_id = ∂<dO, PV>/∂V_jd",
             sum_zero(sp.Sum(P[i, j] * DO[i, d], full_q), gradient(out_loss, V, (j, d), {j: (0, N_k), d: (1, D)}))),
            tile_case("dK = scale·Σ_{i<N_q} dS_ij Q_id = ∂<dS, S>/∂K_jd", scaled[n.dk],
                      gradient(dots("k", "q"), K, (j, d), {j: (0, N_k), d: (1, D)}), ("k", "d")),
            tile_case("dQ = scale·Σ_{j<N_k} dS_ij K_jd = ∂<dS, S>/∂Q_id", scaled[n.dq],
                      gradient(dots("q", "k"), Q, (i, d), {i: (0, N_q), d: (1, D)}), ("q", "d")),
        ]
    cases += attempt("gradients", grads)
    return result("backward_grads", cases, "generic entry; symbolic B_r, B_c, D, N_q, N_k; sp.diff of sums")


@claim("backward_key_major",
       "the dK/dV kernel's key-major tile is the transpose of the row-major one — K Qᵀ = Sᵀ, Pᵀ, "
       "dPᵀ = V dOᵀ, dSᵀ with the per-query LSE and Δ broadcast along the columns (row) — and its "
       "dK, dV updates equal the row-major ones of claim backward_grads, entry by entry, for symbolic "
       "B_r, B_c, D, any mask and any saved lse; a query row with lse = −∞ gives a zero column of Pᵀ and dSᵀ",
       r"K Q^\top = S^\top,\ \ P^\top = 2^{S^\top \mathrm{qk}_{\mathrm{scale}} - \mathrm{row}(\mathrm{lse}_2)},"
       r"\ \ dP^\top = V\,dO^\top,\ \ dS^\top = P^\top\circ(dP^\top - \mathrm{row}(\Delta)),"
       r"\ \ dV \mathrel{+}= P^\top dO,\ \ dK \mathrel{+}= dS^\top Q",
       scope="symbolic B_r, B_c, D and tile starts (generic entry, SymPy Sum, axes checked), opaque mask "
             "predicate and saved lse (−∞ included); reals, exact")
def prove_backward_key_major(backward_tile=terms.BACKWARD_TILE, backward_tile_t=terms.BACKWARD_TILE_T,
                             backward_dkdv=terms.BACKWARD_DKDV, backward_dkdv_t=terms.BACKWARD_DKDV_T,
                             qk=terms.QK, mask_term=masks.MASK_TERM):
    """Both layouts on the same generic entry (query ``i``, key ``j``): the key-major value must
    have the row-major value's entry and the swapped axes. The mask is the printed ``MASK_TERM``
    with the predicate ``κ_ij`` (the key-major kernel evaluates it with ``i``, ``j`` broadcast the
    other way: the same entry); the saved lse ``L_i`` is opaque, so the guard ``lse2_safe`` stays
    a symbolic ``Piecewise`` in both. Then the guard's case: ``L_i = −∞`` and ``κ_ij`` false."""
    run = Interpreter()
    keep = sp.Eq(KAPPA[i, j], 1)  # opaque: attended or not
    env = {n.q: (Q[i, d], ("q", "d")), n.k: (K[j, d], ("k", "d")), n.v: (V[j, d], ("k", "d")),
           n.vT: (V[j, d], ("d", "k")), n.do: (DO[i, d], ("q", "d")), n.lse: (L[i], ("q",)),
           n.delta: (DELTA[i], ("q",)), n.qk_scale: (terms.QK_SCALE.expr, ()),
           n.dk: (DK0[j, d], ("k", "d")), n.dv: (DV0[j, d], ("k", "d"))}

    def masked(scores):
        e, ax = scores
        return mask_term.expr.xreplace({n.qk: e, masks.keep: keep}), ax

    row_state = [t for t in backward_tile if t.symbol in (n.lse2, n.lse2_safe)]
    scores_t = [t for t in backward_tile_t if t.symbol == n.qkT]

    def layouts(env):
        qk_rm, qk_km = run(qk.expr, env), run.run(scores_t, env)[n.qkT]
        rm = run.run(backward_tile, {**env, n.qk: masked(qk_rm)})
        km = run.run(row_state + [t for t in backward_tile_t if t.symbol != n.qkT], {**env, n.qkT: masked(qk_km)})
        rm = run.run(backward_dkdv, rm)
        km = run.run(backward_dkdv_t, km)
        return qk_rm, qk_km, rm, km

    def transposes():
        qk_rm, qk_km, rm, km = layouts(env)
        flip = lambda v: tuple(reversed(v[1]))  # noqa: E731
        cases = [tile_case("K Qᵀ = (Q Kᵀ)ᵀ", qk_km, qk_rm[0], flip(qk_rm))]
        for name, sym_km, sym_rm in (("pT = trans(p)", n.pT, n.p), ("dpT = trans(dp)", n.dpT, n.dp),
                                     ("dsT = trans(ds)", n.dsT, n.ds)):
            cases.append(tile_case(name, km[sym_km], rm[sym_rm][0], flip(rm[sym_rm])))
        for name, sym in (("dV update = row-major dV update", n.dv), ("dK update = row-major dK update", n.dk)):
            cases.append(tile_case(name, km[sym], rm[sym][0], rm[sym][1]))
        return cases

    def no_key():  # the guard: a query row with no key (lse = −∞, every entry masked)
        keyless = {**env, n.lse: (n.NEG_INF, ("q",))}
        _, _, _, km = layouts(keyless)
        return [(f"lse = −∞, κ_ij false: {name} entry = 0", sp.simplify(km[sym][0].xreplace({keep: sp.false})))
                for name, sym in (("pT", n.pT), ("dsT", n.dsT))]

    cases = attempt("key-major = transposed row-major", transposes) + attempt("no key", no_key)
    cases = [(name, sp.nan if isinstance(res, sp.Basic) and res.has(sp.nan) else res) for name, res in cases]
    return result("backward_key_major", cases, "generic entry; symbolic B_r, B_c, D; opaque mask and lse")
