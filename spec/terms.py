"""The expressions a kernel evaluates, named exactly as in the kernel.

Each *kernel term* is an assignment ``name = expr``: ``expr`` may use the names assigned
before it, the notation's symbols, and the row operations below. The generator prints
these assignments into the Triton templates (``spec.printer``); the claims in
``spec.claims`` prove them against the seeds' definitions by substituting the chain of
assignments and interpreting the row operations on symbolic blocks. Nothing here knows
about Triton.

Row operations are uninterpreted SymPy functions:

* ``rowmax(X)``  -> max over the key axis of a (B_r, B_c) tile   (``tl.max(X, 1)``)
* ``rowsum(X)``  -> sum over the key axis                        (``tl.sum(X, 1)``)
* ``dot(A, B)``  -> matrix product of two tiles                  (``tl.dot``)
* ``trans(A)``   -> transpose of a tile                          (``tl.trans``)
* ``col(x)``     -> a per-row vector broadcast across columns    (``x[:, None]``)
* ``row(x)``     -> a per-column vector broadcast across rows    (``x[None, :]``): in a
  key-major tile (keys down the rows, query rows across, ``BACKWARD_TILE_T``) the per-query
  vectors (LSE, Δ) run along the columns
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy.codegen.cfunctions import exp2, log2

from spec import notation as n


class rowmax(sp.Function):
    """Max over the key axis of a tile."""


class rowsum(sp.Function):
    """Sum over the key axis of a tile."""


class dot(sp.Function):
    """Matrix product of two tiles (accumulated in fp32)."""


class trans(sp.Function):
    """Transpose of a tile."""


class col(sp.Function):
    """Broadcast a per-row vector across the columns of a tile."""


class row(sp.Function):
    """Broadcast a per-column vector across the rows of a tile (the transpose of ``col``)."""


ROW_OPS = (rowmax, rowsum, dot, trans, col, row)


class int32(sp.Function):
    """An integer narrowed to int32 (``x.to(tl.int32)``): its value where it fits (the claim that prints it
    says why it does)."""


class int64(sp.Function):
    """An integer widened to int64 (``x.to(tl.int64)``): the same value (a program's batch and head index, so
    that their products with strides are int64)."""


class program_id(sp.Function):
    """The launch grid's program index along axis ``args[0]`` (``tl.program_id(axis)``): in ``[0, grid[axis])``
    for the grid ``spec.launch`` computes (claim launch_grid)."""


class arange(sp.Function):
    """A tile's lanes ``0, 1, ..., n - 1`` (``tl.arange(0, n)``, ``n`` a power-of-two constexpr): a lane term
    ``offs_x = base + arange(n)`` (spec.addresses.*_LANES) puts lane ``l`` at index ``base + l``; the address
    claims read ``base`` and ``n`` from the printed term."""


class tile_range(sp.Function):
    """A loop's values ``start, start + step, ... < stop`` (``for x in range(start, stop, step):``): a loop term
    ``x = tile_range(start, stop, step)`` (spec.addresses.*_LOOPS) prints as that loop header; the address claims read
    ``start``, ``stop`` and ``step`` from the printed term (``bounds``: the values ``x = start + t·step < stop``). Its
    arguments are Python ``range``'s: ``tile_range(stop)`` and ``tile_range(start, stop)`` (step 1) are the index
    loops over the GQA group's query heads and the merge's splits, printed as written (``range(S)``)."""

    @property
    def bounds(self):
        """``(start, stop, step)``, ``range``'s defaults filled in (start 0, step 1)."""
        args = self.args
        if not 1 <= len(args) <= 3:
            raise TypeError(f"tile_range takes range's 1 to 3 arguments (start, stop, step), got {len(args)}")
        start, stop = (sp.Integer(0), args[0]) if len(args) == 1 else args[:2]
        return start, stop, args[2] if len(args) == 3 else sp.Integer(1)

    def _latex(self, printer):
        return r"\operatorname{range}\left(%s\right)" % ", ".join(printer._print(a) for a in self.args)


class box(sp.Function):
    """A TMA box's coordinates ``[c_0, ..., c_{n-1}]``, one per dimension of its descriptor's tensor: the box's
    first element (spec.addresses.tma_element)."""


@dataclass(frozen=True)
class Term:
    """One kernel assignment ``name = expr`` with the claim that licenses it."""

    symbol: sp.Symbol  # the kernel variable assigned (a notation symbol)
    expr: sp.Expr
    claim: str  # id of the claim in spec.claims this step relies on
    note: str = ""  # why, in one line (printed as a comment beside the kernel line)

    @property
    def name(self) -> str:
        return self.symbol.name


def is_neg_inf(x: sp.Expr) -> sp.Basic:
    """The guard predicate ``x == -inf``."""
    return sp.Eq(x, n.NEG_INF)


# ----------------------------------------------------------------------------------
# Forward, FA2 loop order (one query tile, loop over key tiles), log2 units.
# ----------------------------------------------------------------------------------
#: the scale folded with log2(e) once, outside the loop
QK_SCALE = Term(n.qk_scale, n.sm_scale * n.LOG2E, "exp2_rewrite",
                "fold log2(e) into the softmax scale once: exp(s·x) = exp2(x·qk_scale)")

#: the raw scores of one tile, S = Q K^T (K loaded row-major and transposed on chip)
QK = Term(n.qk, dot(n.q, trans(n.k)), "block_update",
          "x = q . k_j for the whole tile, accumulated in fp32")

#: MLA (issue 27): the head dim split at D_v, q = [q | q_tail], k = [k | k_tail] with q, k the first D_v
#: columns and the tails [D_v, D) (DeepSeek's rope part: 64 of 576); the tail's product is added, so
#: S is the whole inner product without padding D to a power of two (claim head_dim_split)
QK_TAIL = Term(n.qk, n.qk + dot(n.q_tail, trans(n.k_tail)), "head_dim_split",
               "S += q_tail . k_tail_j: the columns [D_v, D), accumulated in fp32")
QK_TAIL_GROUP = (QK_TAIL,)

#: the tile update, in the order the kernel runs it
FORWARD_TILE = (
    Term(n.m_ij, sp.Max(n.m_i, rowmax(n.qk) * n.qk_scale), "online_softmax_invariant",
         "m_i <- max(m_{i-1}, rowmax of this tile)"),
    Term(n.m_safe, sp.Piecewise((0, is_neg_inf(n.m_ij)), (n.m_ij, True)), "merge_identity",
         "guard: a row with no key yet has m = -inf; shifting by 0 keeps -inf - (-inf) out"),
    Term(n.p, exp2(n.qk * n.qk_scale - col(n.m_safe)), "block_update",
         "every exponent is <= 0 (safety_bounds); masked logits give exactly 0"),
    Term(n.alpha, exp2(n.m_i - n.m_safe), "online_softmax_invariant",
         "rescale the old state from the old max to the new one"),
    Term(n.l_ij, rowsum(n.p), "block_update", "this tile's part of d'_i"),
    Term(n.l_i, n.l_i * n.alpha + n.l_ij, "online_softmax_invariant",
         "d'_i = d'_{i-1} e^{m_{i-1}-m_i} + sum_j e^{x_j-m_i}"),
    Term(n.acc, n.acc * col(n.alpha) + dot(n.p, n.v), "fa2_deferred_normalisation",
         "õ_i = õ_{i-1} e^{m_{i-1}-m_i} + P V; no division inside the loop (FA2)"),
    Term(n.m_i, n.m_ij, "online_softmax_invariant", "carry the new max"),
)

#: after the last key tile: one division, and the row's log-sum-exp (natural log)
FORWARD_EPILOGUE = (
    Term(n.l_safe, sp.Piecewise((1, sp.Eq(n.l_i, 0)), (n.l_i, True)), "forward_epilogue",
         "guard: a row with no key keeps acc = 0 and must not divide 0 by 0"),
    Term(n.acc, n.acc / col(n.l_safe), "forward_epilogue",
         "the single normalisation of FA2: o'_N = õ_N / d'_N"),
    Term(n.lse, sp.Piecewise((n.NEG_INF, sp.Eq(n.l_i, 0)), ((n.m_i + log2(n.l_i)) * n.LN2, True)),
         "forward_epilogue", "lse = m + log d' in natural log; -inf for a row with no key"),
)

#: seed 000's second pass of the 2-pass online softmax: a_i = e^{x_i - m_N} / d'_N, after
#: the tile loop (``FORWARD_TILE`` without ``acc``) has produced the row's final m_i, l_i
SOFTMAX_NORMALISE = (
    Term(n.m_safe, sp.Piecewise((0, is_neg_inf(n.m_i)), (n.m_i, True)), "merge_identity",
         "guard: a padding row (all -inf) must not compute -inf - (-inf)"),
    Term(n.p, exp2(n.qk * n.qk_scale - col(n.m_safe)), "exp2_rewrite",
         "e^{x_j - m_N} recomputed in log2 units from the final max"),
    FORWARD_EPILOGUE[0],
    Term(n.a, n.p / col(n.l_safe), "online_softmax_invariant", "a_j = e^{x_j - m_N} / d'_N"),
)

# ----------------------------------------------------------------------------------
# Backward (recompute P from the saved LSE; dS from the softmax Jacobian).
# ----------------------------------------------------------------------------------
BACKWARD_PREPROCESS = (
    Term(n.delta, rowsum(n.do * n.o) - n.dlse, "backward_delta",
         "Δ_i = rowsum(dO ∘ O); a gradient of lse enters as −dlse, since ∂lse_i/∂S_ij = P_ij"),
)

BACKWARD_TILE = (
    Term(n.lse2, n.lse * n.LOG2E, "exp2_rewrite", "the saved natural-log LSE in log2 units"),
    Term(n.lse2_safe, sp.Piecewise((sp.oo, is_neg_inf(n.lse2)), (n.lse2, True)), "merge_identity",
         "guard: a row with no key has lse = -inf; +inf makes its P exactly 0"),
    Term(n.p, exp2(n.qk * n.qk_scale - col(n.lse2_safe)), "exp2_rewrite",
         "P recomputed from the saved LSE: e^{s·x - lse}"),
    Term(n.dp, dot(n.do, n.vT), "backward_ds", "dP = dO V^T"),
    Term(n.ds, n.p * (n.dp - col(n.delta)), "backward_ds", "dS = P ∘ (dP − Δ)"),
)

#: the gradients from dS and P (S = scale·Q Kᵀ, O = P V), accumulated in fp32 over tiles;
#: the softmax scale of dQ and dK is applied once, after the loop (BACKWARD_SCALE).
#: BACKWARD_DKDV states dK, dV in the row-major tile of BACKWARD_TILE (claim backward_grads);
#: the dK/dV kernel prints their key-major twins BACKWARD_TILE_T / BACKWARD_DKDV_T below.
BACKWARD_DKDV = (
    Term(n.dv, n.dv + dot(trans(n.p), n.do), "backward_grads",
         "dV = Pᵀ dO, summed over query tiles (and the query heads of a GQA group)"),
    Term(n.dk, n.dk + dot(trans(n.ds), n.q), "backward_grads", "dK = scale · dSᵀ Q, unscaled in the loop"),
)

#: the dK/dV kernel's tile, key-major as in Triton tutorial 06: the program's key tile is the
#: first operand of every product, so each dot has M = B_c rows (a Hopper wgmma needs M = 64
#: per warpgroup; the row-major dK/dV products had M = the query step). Each term is the
#: transpose of its row-major twin in BACKWARD_TILE (claim backward_key_major), and the per-query
#: vectors (LSE, Δ) broadcast along the columns: ``row``, where the row-major tile has ``col``.
#: ``lse2``, ``lse2_safe`` (BACKWARD_TILE[:2]) are per-query vectors, shared by both layouts.
#: Q is loaded row-major like dO and transposed on chip: the tutorial loads ``qT`` transposed
#: from memory, a load Triton does not software-pipeline (and, compiled for sm_80, one that
#: leaves the kernel more registers short).
BACKWARD_TILE_T = (
    Term(n.qkT, dot(n.k, trans(n.q)), "backward_key_major",
         "Sᵀ = K Qᵀ: M = B_c rows, the key tile"),
    Term(n.pT, exp2(n.qkT * n.qk_scale - row(n.lse2_safe)), "backward_key_major",
         "Pᵀ from the saved LSE, one LSE per column; a column with lse = -inf is exactly 0"),
    Term(n.dpT, dot(n.v, trans(n.do)), "backward_key_major", "dPᵀ = V dOᵀ"),
    Term(n.dsT, n.pT * (n.dpT - row(n.delta)), "backward_key_major", "dSᵀ = Pᵀ ∘ (dPᵀ − Δ), one Δ per column"),
)
BACKWARD_DKDV_T = (
    Term(n.dv, n.dv + dot(n.pT, n.do), "backward_key_major",
         "dV += Pᵀ dO, summed over query steps (and the query heads of a GQA group)"),
    Term(n.dk, n.dk + dot(n.dsT, n.q), "backward_key_major", "dK += dSᵀ Q, scaled once after the loop"),
)
BACKWARD_DQ = (
    Term(n.dq, n.dq + dot(n.ds, n.k), "backward_grads", "dQ = scale · dS K, unscaled in the loop"),
)
BACKWARD_SCALE = (  # in kernel order: the dK/dV program, then the dQ program
    Term(n.dk, n.dk * n.sm_scale, "backward_grads", "∂S/∂K = scale · Q: one multiply per element"),
    Term(n.dq, n.dq * n.sm_scale, "backward_grads", "∂S/∂Q = scale · K: one multiply per element"),
)
#: the backward's split head dim (MLA, issue 27; claim head_dim_split): q = [q | q_tail], k = [k | k_tail] as in the
#: forward (192 = 128 + 64), so the key-major scores add the tails' product, and dK, dQ get their tail columns
#: [HEAD_DIM, D) as tiles of their own: dK_tail = scale · dSᵀ Q_tail, dQ_tail = scale · dS K_tail (the dQ kernel's
#: row-major scores add QK_TAIL, the forward's term). In kernel order: the dK/dV loop, its epilogue, dQ's.
BACKWARD_TAIL = (
    Term(n.qkT, n.qkT + dot(n.k_tail, trans(n.q_tail)), "head_dim_split",
         "Sᵀ += K_tail Q_tailᵀ: the columns [HEAD_DIM, D), accumulated in fp32"),
    Term(n.dk_tail, n.dk_tail + dot(n.dsT, n.q_tail), "head_dim_split",
         "dK's tail columns += dSᵀ Q_tail, scaled once after the loop"),
    Term(n.dk_tail, n.dk_tail * n.sm_scale, "head_dim_split", "dK's tail columns: ∂S/∂K = scale · Q_tail"),
    Term(n.dq_tail, n.dq_tail + dot(n.ds, n.k_tail), "head_dim_split",
         "dQ's tail columns += dS K_tail, scaled once after the loop"),
    Term(n.dq_tail, n.dq_tail * n.sm_scale, "head_dim_split", "dQ's tail columns: ∂S/∂Q = scale · K_tail"),
)

# ----------------------------------------------------------------------------------
# Merging two normalised partial results by their LSEs (split-KV combine, merge_state).
# ----------------------------------------------------------------------------------
#: (o_a, lse_a) ⊞ (o_b, lse_b) -> (o, lse): the ⊕ of two states, seen through normalise
#: (o = õ/d', lse = m + log d', natural log). Per row: the weights, then the output tile
#: (``col``: one weight per row across the head dim). Guarded like FORWARD_EPILOGUE, so a
#: pair of empty partials (lse = -inf) merges to o = 0, lse = -inf with no NaN, and an empty
#: side is the identity (claim lse_merge). The merge_state and split-KV combine kernels print
#: these lines; the combine folds them over the splits from the identity (0, -inf).
MERGE_STATE = (
    Term(n.lse_max, sp.Max(n.lse_a, n.lse_b), "lse_merge", "shift both sides by the larger lse"),
    Term(n.lse_max_safe, sp.Piecewise((0, is_neg_inf(n.lse_max)), (n.lse_max, True)), "lse_merge",
         "guard: two empty sides have lse = -inf; shifting by 0 keeps -inf - (-inf) out"),
    Term(n.w_a, exp2((n.lse_a - n.lse_max_safe) * n.LOG2E), "lse_merge",
         "e^{lse_a - lse_max} <= 1 in exp2 form; an empty side weighs exactly 0"),
    Term(n.w_b, exp2((n.lse_b - n.lse_max_safe) * n.LOG2E), "lse_merge", "e^{lse_b - lse_max}"),
    Term(n.w_sum, n.w_a + n.w_b, "lse_merge", "e^{lse - lse_max}"),
    Term(n.w_sum_safe, sp.Piecewise((1, sp.Eq(n.w_sum, 0)), (n.w_sum, True)), "lse_merge",
         "guard: two empty sides must not divide 0 by 0 (nor take log 0)"),
    Term(n.s_a, n.w_a / n.w_sum_safe, "lse_merge", "side a's share e^{lse_a - lse}"),
    Term(n.s_b, n.w_b / n.w_sum_safe, "lse_merge", "side b's share e^{lse_b - lse}"),
    Term(n.o, n.o_a * col(n.s_a) + n.o_b * col(n.s_b), "lse_merge",
         "o = (d_a o_a + d_b o_b) / (d_a + d_b) in the common scale"),
    Term(n.lse, sp.Piecewise((n.NEG_INF, sp.Eq(n.w_sum, 0)),
                             (n.lse_max_safe + log2(n.w_sum_safe) * n.LN2, True)), "lse_merge",
         "lse = log(e^{lse_a} + e^{lse_b}) in natural log; -inf when both sides are empty"),
)
#: the partial result of no key, (o, lse) = (0, -inf): the identity of MERGE_STATE, where a
#: fold over the splits starts (and what a split with no valid key writes)
MERGE_IDENTITY = (sp.Integer(0), n.NEG_INF)

#: all named term groups the kernels print, for the printer, the fingerprint and the docs
#: (BACKWARD_DKDV is not printed: the kernel prints its key-major form, BACKWARD_DKDV_T)
GROUPS = {
    "qk_scale": (QK_SCALE,),
    "qk": (QK,),
    "qk_tail": QK_TAIL_GROUP,
    "forward_tile": FORWARD_TILE,
    "forward_epilogue": FORWARD_EPILOGUE,
    "softmax_normalise": SOFTMAX_NORMALISE,
    "backward_preprocess": BACKWARD_PREPROCESS,
    "backward_tile": BACKWARD_TILE,
    "backward_tile_t": BACKWARD_TILE_T,
    "backward_dkdv_t": BACKWARD_DKDV_T,
    "backward_dq": BACKWARD_DQ,
    "backward_scale": BACKWARD_SCALE,
    "backward_tail": BACKWARD_TAIL,
    "merge_state": MERGE_STATE,
}


def chain(terms) -> dict[sp.Symbol, sp.Expr]:
    """Substitute each assignment into the later ones: symbol -> closed expression.

    Later assignments to the same name (``m_i``, ``l_i``, ``acc``) shadow earlier ones, so
    the result maps each name to its value at the end of the sequence, written in the
    values the names had at its start.
    """
    env: dict[sp.Symbol, sp.Expr] = {}
    for t in terms:
        env[t.symbol] = t.expr.xreplace(env)
    return env


# ----------------------------------------------------------------------------------
# Score modifications (issue 15): softcap, ALiBi, attention sinks. FlashAttention / FA4
# semantics: the natural-log score of (i, j) is
#     s_ij = c·tanh(scale·x_ij / c) − slope·|i + shift − j|        (x_ij = q_i · k_j)
# with the softcap applied after scaling and before masking, the bias after the cap, and
# the sink an extra natural-log logit per row (not scaled) with value 0.
#
# A modification turns the raw score ``qk`` into the modified score in log2 units (the cap's
# ``c·log2 e·t``, or ``qk·scale·log2 e`` when only ALiBi is on, minus ``slope·log2 e·|i + shift − j|``),
# and the kernel then runs its tile lines with ``qk_scale = 1`` (MOD_TILE_SCALE), so ``qk ·
# qk_scale = s · log2(e)`` (claim score_mod_invariant). No quotient by the scale is formed: the
# raw-score units c/scale and slope/scale overflowed fp32 for tiny scales (issue 23, row 9). With
# a modification off, its constexpr compiles the lines out and the kernel is the unmodified one,
# line for line. Each group is a list of printed lines, so any template (the forward, the
# backward, and any later kernel: varlen, decode) prints them through the one jinja include
# ``score_mod.jinja``.
# ----------------------------------------------------------------------------------
#: once per launch: the constants of the cap
SOFTCAP_SCALARS = (
    Term(n.softcap_in, n.sm_scale / n.softcap, "score_mod_invariant",
         "scale / c: the argument y = scale·x / c of tanh"),
    Term(n.softcap_out, n.softcap * n.LOG2E, "score_mod_invariant",
         "c·log2 e: the capped score c·t in log2 units"),
)
#: once per launch, ALiBi without the cap: the factor that takes the raw score into log2 units
SCORE_LOG2_SCALAR = Term(n.softcap_out, n.sm_scale * n.LOG2E, "score_mod_invariant",
                         "scale·log2 e: without the cap, the raw score into log2 units")
#: where the cap's t switches from Lambert's rational form (|y| below it) to the exp2 form
SOFTCAP_SPLIT = sp.Integer(1)
#: Lambert's continued fraction tanh y = y/(1 + y²/(3 + y²/(5 + y²/(7 + y²/(9 + ...))))), cut after 9: its
#: convergent C_4(y) = y·(945 + 105 y² + y⁴) / (945 + 420 y² + 15 y⁴), positive integer coefficients
#: (exact in fp32, no cancellation: relative error O(u), claim softcap_accuracy), in Horner form
SOFTCAP_RATIONAL = n.y * (945 + n.y2 * (105 + n.y2)) / (945 + n.y2 * (420 + 15 * n.y2))
#: the exp2 form of tanh: exact, and relatively accurate where |y| >= SOFTCAP_SPLIT (no cancellation)
SOFTCAP_EXP2 = 1 - 2 / (exp2(n.y * 2 * n.LOG2E) + 1)
#: per tile, after QK and before the mask: the cap (t is kept for the backward's 1 − t²). tanh by
#: exp2 alone, 1 − 2/(2^{2y log2 e} + 1), has an absolute error ~u: relative u/|y| for small y, so
#: c·t erred by ~c·u (issue 23 row 8); below |y| = 1 the rational form is relatively accurate
SOFTCAP = (
    Term(n.y, n.qk * n.softcap_in, "softcap_accuracy", "y = scale·x / c"),
    Term(n.y2, n.y * n.y, "softcap_accuracy", "y², the rational form's variable"),
    Term(n.t, sp.Piecewise((SOFTCAP_RATIONAL, sp.Abs(n.y) < SOFTCAP_SPLIT), (SOFTCAP_EXP2, True)), "softcap_accuracy",
         "t = tanh(y): Lambert's convergent for |y| < 1, else by exp2; relative error <= SOFTCAP_REL, "
         "in [−1, 1], no NaN selected for any x (2^{+inf} gives 1)"),
    Term(n.qk, n.t * n.softcap_out, "score_mod_invariant",
         "s·log2 e = c·t·log2 e, applied after scaling and before masking"),
)
#: per tile, ALiBi without the cap: the raw score into log2 units
SCORE_LOG2 = (
    Term(n.qk, n.qk * n.softcap_out, "score_mod_invariant", "s·log2 e = x·scale·log2 e, before the bias"),
)
#: once per (batch, query head): the ALiBi slope in log2 units (no division by the scale)
ALIBI_SCALAR = Term(n.alibi_coef, n.slope * n.LOG2E, "score_mod_invariant",
                    "slope·log2 e: the bias enters the score in log2 units")
#: per tile, after the cap (or SCORE_LOG2) and before the mask: the bias −slope·|i + shift − j|
ALIBI = (
    Term(n.qk, n.qk - n.alibi_coef * sp.Abs(n.i + n.shift - n.j), "score_mod_invariant",
         "s −= slope·|i + shift − j| (log2 units): shift = N_k − N_q bottom-right, 0 top-left"),
)
#: once per program, with a modification on: the modified scores are in log2 units already, so the
#: tile lines (FORWARD_TILE, BACKWARD_TILE, BACKWARD_TILE_T) run with the scale 1
MOD_TILE_SCALE = Term(n.qk_scale, sp.Integer(1), "score_mod_invariant",
                      "the modified scores are in log2 units: the tile's qk·qk_scale is qk")
#: the epilogue of an unsplit kernel, before FORWARD_EPILOGUE: the sink as the state
#: (sink, 1, 0) merged by ⊕ exactly once per row (claim sink_once). A finite sink makes m_ij
#: finite (a row with no key gets l_i = 1, acc = 0, lse = sink); a sink of -inf on a row with
#: no key leaves m_ij = -inf, so the shift is guarded like the tile update's: l_i = 0, and the
#: epilogue gives out 0, lse = -inf, as N_k = 0 and split-KV's combine do (issue 23, row 10).
SINK_FOLD = (
    Term(n.sink2, n.sink * n.LOG2E, "sink_once", "the sink logit in log2 units (not scaled)"),
    # the max is a stabiliser (exact arithmetic cancels any finite m_ij): what it must guarantee is
    # that no exponent of the fold is > 0, which claim score_mod_bounds proves
    Term(n.m_ij, sp.Max(n.m_i, n.sink2), "score_mod_bounds", "max over the row's keys and the sink"),
    Term(n.m_safe, sp.Piecewise((0, is_neg_inf(n.m_ij)), (n.m_ij, True)), "sink_once",
         "guard: sink = -inf on a row with no key; shifting by 0 keeps -inf - (-inf) out"),
    Term(n.alpha, exp2(n.m_i - n.m_safe), "sink_once", "rescale the row's state to the new max"),
    Term(n.l_i, n.l_i * n.alpha + exp2(n.sink2 - n.m_safe), "sink_once",
         "d' gains e^{sink − m}: the sink is one more key ..."),
    Term(n.acc, n.acc * col(n.alpha), "sink_once", "... whose value is 0: õ is only rescaled"),
    Term(n.m_i, n.m_ij, "sink_once", "carry the new max"),
)
#: split-KV's combine (decode): after MERGE_STATE's fold over the splits, the sink's normalised
#: partial result is side b of MERGE_STATE once more, exactly once per row (claim
#: sink_once_combine). A sink is one key of logit sink and value 0: its partial is (0, sink).
SINK_PARTIAL = (
    Term(n.lse_b, n.sink, "sink_once_combine", "the sink's partial: lse = sink (natural log, not scaled) ..."),
    Term(n.o_b, sp.Integer(0), "sink_once_combine", "... and o = 0 (the sink's value is 0)"),
)
#: the backward's preprocess: this row's part of dL/dsink = −Σ_i e^{sink − lse_i}·delta_i
#: (delta = Δ − dlse); the runtime sums the rows of each head. lse = -inf only when sink = -inf
#: on a row with no key: the sink is then the row's only entry, P_sink = 1 (its value for every
#: finite sink there, lse = sink), so dsink = dlse, as the N_k = 0 path's lse = sink gives.
SINK_GRAD = (
    Term(n.dsink, -sp.Piecewise((1, is_neg_inf(n.lse)), (sp.exp(n.sink - n.lse), True)) * n.delta, "sink_grad",
         "∂L/∂sink of this row: P_sink·(0 − delta), P_sink = e^{sink − lse} (1 on a row of lse = -inf)"),
)
#: the backward, after dS: the chain rule through the cap, ∂s/∂(scale·x) = 1 − t²
SOFTCAP_DS = (
    Term(n.ds, n.ds * (1 - n.t * n.t), "softcap_grad", "dS through the cap: ∂(c·tanh(y))/∂y = 1 − t²"),
)
#: the same in the dK/dV kernel's key-major tile (t of the transposed scores: tT)
SOFTCAP_DS_T = (
    Term(n.dsT, n.dsT * (1 - n.tT * n.tT), "softcap_grad", "dSᵀ through the cap: 1 − tT², entrywise"),
)

GROUPS.update({
    "softcap_scalars": SOFTCAP_SCALARS,
    "score_log2_scalar": (SCORE_LOG2_SCALAR,),
    "softcap": SOFTCAP,
    "score_log2": SCORE_LOG2,
    "alibi_scalar": (ALIBI_SCALAR,),
    "alibi": ALIBI,
    "mod_tile_scale": (MOD_TILE_SCALE,),
    "sink_fold": SINK_FOLD,
    "sink_partial": SINK_PARTIAL,
    "sink_grad": SINK_GRAD,
    "softcap_ds": SOFTCAP_DS,
    "softcap_ds_t": SOFTCAP_DS_T,
})


# ----------------------------------------------------------------------------------
# Attention dropout (issue 29): FlashAttention 2's. After normalisation each P_ij is kept with
# probability 1 − p and scaled by 1/(1 − p); lse is the undropped one. The keep decision is ONE
# term of (seed, offset, b, h, i, j): a Philox uniform at the counter
#     rng_offset + ((b·H + h)·N_q + i)·N_k + j
# (a packed batch: b = 0, i and j its global rows and keys), printed identically into the
# forward, the dK/dV and the dQ kernels, so the backward regenerates the forward's mask at every
# element whatever the tile order (claim dropout_mask_same). Triton's ``tl.rand`` is a pure
# function of (seed, offset): counter-based Philox, no state.
# ----------------------------------------------------------------------------------
class philox_uniform(sp.Function):
    """Triton's counter-based Philox draw, a float in [0, 1), of ``(seed, offset)``
    (``tl.rand(seed, offset)``): a pure function of its arguments."""

    is_extended_real = True


#: once per launch: the rescale of a kept entry
DROPOUT_SCALE = Term(n.drop_scale, 1 / (1 - n.dropout_p), "dropout_grads",
                     "1/(1 − p): a kept entry is rescaled, so E[Z/(1 − p)] = 1")
#: once per (batch, query head): the Philox offset of the slice's first element (b, h, i0, j0)
DROPOUT_BASE = Term(n.drop_base, n.rng_offset + ((n.drop_b * n.drop_heads + n.off_h) * n.drop_nq + n.drop_i0)
                    * n.drop_nk + n.drop_j0, "dropout_mask_same",
                    "counter of (b, h, i0, j0): rng_offset + ((b·H + h)·N_q + i0)·N_k + j0, int64")
#: dropout's box (drop_b, drop_heads, drop_nq, drop_nk, drop_i0, drop_j0) of each kernel that draws the mask, in the
#: kernel's own names: its program's batch entry and the launch's integers (spec.launch's forward_launch,
#: dropout_mask_launch, dkdv_launch, dq_launch: H the query heads; dK/dV has H_KV and GROUP). Claim
#: dropout_mask_same evaluates each box at its launch's integers and proves every kernel's counter at (b, query head,
#: i, j) the dropout_mask helper's at keep[b, h, i, j]
_box_b, _box_h, _box_hkv, _box_group, _box_nq, _box_nk = (
    sp.Symbol("off_b", integer=True, nonnegative=True), *sp.symbols("H H_KV GROUP N_Q N_K", integer=True, positive=True))


def dropout_box(heads) -> tuple[Term, ...]:
    """A kernel's box: ``(B, heads, N_Q, N_K)`` with ``heads`` the query heads in its launch's names, rows and keys
    from 0 (a packed batch then rebinds ``DROPOUT_BOX_PACKED``)."""
    claim = "dropout_mask_same"
    return (Term(n.drop_b, _box_b, claim, "the box's batch entry: this program's"),
            Term(n.drop_heads, heads, claim, "the box's heads: the query heads (spec.launch's integers)"),
            Term(n.drop_nq, _box_nq, claim, "the box's rows"), Term(n.drop_nk, _box_nk, claim, "the box's keys"),
            Term(n.drop_i0, sp.Integer(0), "dropout_mask_same", "the slice's first row"),
            Term(n.drop_j0, sp.Integer(0), "dropout_mask_same", "the slice's first key"))


#: per kernel: the forward and dQ programs and the dropout_mask helper's (_dropout_keep) know the query heads as H,
#: the dK/dV program (one per K/V head, looping over its GROUP query heads) as H_KV·GROUP
DROPOUT_BOXES = {"forward": dropout_box(_box_h), "dropout_mask": dropout_box(_box_h),
                 "dkdv": dropout_box(_box_hkv * _box_group), "dq": dropout_box(_box_h)}
#: a packed batch's box (1, H, total_q, total_k): batch entry 0, the segment's rows and keys at their packed places
#: (cu_seqlens_q[b], cu_seqlens_k[b]; N_Q, N_K are the launch's totals when the box is taken)
DROPOUT_BOX_PACKED = (
    Term(n.drop_b, sp.Integer(0), "dropout_mask_same", "a packed batch is one batch entry"),
    Term(n.drop_i0, sp.Symbol("seq_start_q", integer=True, nonnegative=True), "dropout_mask_same",
         "the segment's first row, packed"),
    Term(n.drop_j0, sp.Symbol("seq_start_k", integer=True, nonnegative=True), "dropout_mask_same",
         "the segment's first key, packed"),
)
#: per element of a tile (either layout): the keep decision Z_ij
DROPOUT_KEEP = Term(n.keep_drop, sp.GreaterThan(philox_uniform(n.drop_seed, n.drop_base + n.i * n.drop_nk + n.j),
                                                n.dropout_p, evaluate=False), "dropout_mask_same",
                    "Z_ij: Philox at (seed, offset of (b, h, i, j)); kept with probability 1 − p")
#: the forward, after l_i (the denominator is the undropped one) and before acc: P ← Z ∘ P/(1 − p)
DROPOUT_P = Term(n.p, sp.Piecewise((n.p * n.drop_scale, n.keep_drop), (0, True)), "dropout_grads",
                 "dropped and rescaled P enters P V only; l_i (so lse) stays undropped")
#: the forward's tile with dropout: FORWARD_TILE with DROPOUT_P before the acc update
FORWARD_TILE_DROPOUT = tuple(t for tile in FORWARD_TILE for t in ((DROPOUT_P, tile) if tile.name == "acc" else (tile,)))
#: the dQ kernel, after dP and before dS: dP ← Z ∘ dP/(1 − p) (the gradient through the dropout)
DROPOUT_DP = Term(n.dp, sp.Piecewise((n.dp * n.drop_scale, n.keep_drop), (0, True)), "dropout_grads",
                  "dP through the dropout: ∂O/∂P_ij carries Z_ij/(1 − p)")
#: the dK/dV kernel's key-major tile: dV from the dropped Pᵀ, dPᵀ through the dropout
DROPOUT_DV_T = (
    Term(n.pT_drop, sp.Piecewise((n.pT * n.drop_scale, n.keep_drop), (0, True)), "dropout_grads",
         "Z ∘ Pᵀ/(1 − p): the P that O = P V used"),
    Term(n.dv, n.dv + dot(n.pT_drop, n.do), "dropout_grads", "dV += (Z ∘ P/(1 − p))ᵀ dO"),
)
DROPOUT_DP_T = Term(n.dpT, sp.Piecewise((n.dpT * n.drop_scale, n.keep_drop), (0, True)), "dropout_grads",
                    "dPᵀ through the dropout, entrywise")

GROUPS.update({
    "dropout_scale": (DROPOUT_SCALE,),
    "dropout_base": (DROPOUT_BASE,),
    "dropout_keep": (DROPOUT_KEEP,),
    "dropout_p": (DROPOUT_P,),
    "dropout_dp": (DROPOUT_DP,),
    "dropout_dv_t": DROPOUT_DV_T,
    "dropout_dp_t": (DROPOUT_DP_T,),
    **{f"dropout_box.{kernel}": box for kernel, box in DROPOUT_BOXES.items()},
    "dropout_box_packed": DROPOUT_BOX_PACKED,
})


# ----------------------------------------------------------------------------------
# FP8 forward (issue 30): FlashAttention 3's descales. q, k, v arrive quantised (e4m3 or e5m2) with
# float32 descales per (batch, KV head): the dequantised tensors are q·q_descale, k·k_descale,
# v·v_descale. The kernel keeps the tiles in fp8 for both products (fp8 tensor cores) and moves
# every descale out of the loop (claim fp8_descale):
#     S = (q·k)·q_descale·k_descale               the descales folded into qk_scale, once per program
#     P V: P·p_scale cast to fp8 by the dot        p_scale a power of two (P <= 1 stays below the
#                                                  format's max, small weights above its subnormals)
#     O = acc / l · (v_descale / p_scale)          acc in fp32, one multiply after the division
# The mixed path (a bf16/fp16 query on an fp8 K/V cache) upcasts K and V to the query's dtype
# (exact) with q_descale = 1 and p_scale = 1: the same terms.
# ----------------------------------------------------------------------------------
#: once per program: the softmax scale, both descales of S and log2(e), one factor
FP8_QK_SCALE = Term(n.qk_scale, n.sm_scale * n.q_descale * n.k_descale * n.LOG2E, "fp8_descale",
                    "S = (q·k)·q_descale·k_descale: the descales folded into the scale once, out of the loop")
#: per tile, after l_i (the denominator is the unscaled P) and before acc: P in fp8's range
FP8_P = Term(n.p, n.p * n.p_scale, "fp8_descale",
             "P·p_scale (a power of two: exact) before P V casts it to fp8; l_i keeps the unscaled P")
#: once per program: the output's descale, v_descale over the scale of P (exact: a power of two)
FP8_V_SCALE = Term(n.v_scale, n.v_descale / n.p_scale, "fp8_descale",
                   "v_descale / p_scale: V's descale and P's scale leave the loop as one factor")
#: after FORWARD_EPILOGUE's division: the one descale of the output
FP8_OUT = Term(n.acc, n.acc * n.v_scale, "fp8_descale",
               "O = (P·p_scale)(V) / l · v_descale / p_scale: fp32, one multiply per element")

GROUPS.update({
    "fp8_qk_scale": (FP8_QK_SCALE,),
    "fp8_p": (FP8_P,),
    "fp8_v_scale": (FP8_V_SCALE,),
    "fp8_out": (FP8_OUT,),
})
