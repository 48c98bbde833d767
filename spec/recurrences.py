"""The seeds' recurrences, written once in SymPy.

Notation of the seeds (003): logits ``x_1..x_N`` of one query row, running max ``m_i``,
running denominator ``d'_i``, FA1's normalised running output ``o'_i`` and FA2's deferred
(un-normalised) output ``õ_i``. Everything here works on *natural-exp* definitions; the
kernels' exp2 form is related to them by the claim ``exp2_rewrite``.

Three views of the same computation:

* **3-pass safe softmax** (``safe_softmax``): max, then denominator, then the map.
* **2-pass online softmax** (``online_step``): ``m_i`` and ``d'_i`` in one loop.
* **1-pass attention**: FA1 (``fa1_step``) keeps ``o'_i`` normalised at every step; FA2
  (``fa2_step``) keeps ``õ_i`` un-normalised and divides once at the end.

and one algebra that explains why tiling works: the state ``s = (m, d, o)`` of a processed
set of keys and the merge ``⊕`` (``merge``), with identity ``E = (-oo, 0, 0)`` and the map
``α(m, d, o) = (d·e^m, o·e^m)`` that turns ``⊕`` into ``+`` (``alpha_map``).

The kernels guard ``-oo - (-oo)`` with ``m_safe`` (``spec.terms``); ``merge(..., guarded=True)``
uses that very guard expression, so the proofs about the guarded ``⊕`` are about the kernel's.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import sympy as sp

from spec import notation as n
from spec import terms

NEG_INF = n.NEG_INF


class State(NamedTuple):
    """The state of a processed set of keys of one query row (one output column).

    ``m``: max of their logits (``-oo`` for no key); ``d = Σ e^{x_j - m}``;
    ``o = Σ e^{x_j - m} v_j`` (FA2's un-normalised output).
    """

    m: sp.Expr
    d: sp.Expr
    o: sp.Expr


#: the state of no key at all: the identity of ⊕ (claim merge_identity)
E = State(NEG_INF, sp.Integer(0), sp.Integer(0))


def key_state(x: sp.Expr, v: sp.Expr) -> State:
    """The state of a single key with logit ``x`` and value ``v``: ``(x, e^0, e^0·v)``."""
    return State(x, sp.Integer(1), v)


# ----------------------------------------------------------------------------------
# 3-pass safe softmax and 2-pass online softmax (seed 003, algorithms 1 and 2)
# ----------------------------------------------------------------------------------
def softmax(xs: Sequence[sp.Expr]) -> list[sp.Expr]:
    """The definition: ``e^{x_i} / Σ_j e^{x_j}`` (overflows in floating point; safe_softmax doesn't)."""
    total = sp.Add(*[sp.exp(x) for x in xs])
    return [sp.exp(x) / total for x in xs]


def safe_softmax(xs: Sequence[sp.Expr]) -> list[sp.Expr]:
    """``a_i = e^{x_i - m_N} / d_N`` with ``m_N = max x``, ``d_N = Σ e^{x_j - m_N}``."""
    m_N = sp.Max(*xs)
    d_N = sp.Add(*[sp.exp(x - m_N) for x in xs])
    return [sp.exp(x - m_N) / d_N for x in xs]


def online_step(m_prev: sp.Expr, d_prev: sp.Expr, x: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """One step of online softmax: ``m_i = max(m_{i-1}, x_i)``,
    ``d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i}``."""
    m = sp.Max(m_prev, x)
    return m, d_prev * sp.exp(m_prev - m) + sp.exp(x - m)


def fa1_step(m_prev, d_prev, o_prev, x, v) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """FA1: ``o'_i = o'_{i-1} d'_{i-1} e^{m_{i-1} - m_i} / d'_i + e^{x_i - m_i} v_i / d'_i``."""
    m, d = online_step(m_prev, d_prev, x)
    return m, d, o_prev * d_prev * sp.exp(m_prev - m) / d + sp.exp(x - m) * v / d


def fa2_step(m_prev, d_prev, o_prev, x, v) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """FA2: ``õ_i = õ_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i} v_i`` (no division in the loop)."""
    m, d = online_step(m_prev, d_prev, x)
    return m, d, o_prev * sp.exp(m_prev - m) + sp.exp(x - m) * v


# ----------------------------------------------------------------------------------
# The state algebra
# ----------------------------------------------------------------------------------
_M_SAFE = next(t.expr for t in terms.FORWARD_TILE if t.symbol == n.m_safe)


def guard(m: sp.Expr) -> sp.Expr:
    """The kernel's guard ``m_safe`` (``spec.terms``) applied to ``m``: 0 where ``m = -oo``.

    The guard does not depend on units (0 is 0 in natural and in log2 units), so the same
    term guards the natural-exp ``⊕`` here and the exp2 tile update in the kernels.
    """
    return _M_SAFE.xreplace({n.m_ij: m})


def merge(a: State, b: State, guarded: bool = True) -> State:
    """``a ⊕ b = (m, d_a e^{m_a - m} + d_b e^{m_b - m}, o_a e^{m_a - m} + o_b e^{m_b - m})``,
    ``m = max(m_a, m_b)``.

    ``guarded`` shifts by ``guard(m)`` instead of ``m`` (what the kernels do): the rescale
    factor of a side whose max is ``-oo`` is then ``e^{-oo} = 0`` even when both maxima are
    ``-oo``, where the unguarded form evaluates ``-oo - (-oo) = NaN``.
    """
    m = sp.Max(a.m, b.m)
    shift = guard(m) if guarded else m
    fa, fb = sp.exp(a.m - shift), sp.exp(b.m - shift)
    return State(m, a.d * fa + b.d * fb, a.o * fa + b.o * fb)


def fold(states: Sequence[State], merge=merge) -> State:
    """Left fold of ``⊕`` starting from ``E`` (the order the kernels visit key tiles)."""
    acc = E
    for s in states:
        acc = merge(acc, s)
    return acc


def alpha_map(s: State) -> tuple[sp.Expr, sp.Expr]:
    """``α(m, d, o) = (d e^m, o e^m)``: the plain sums ``(Σ e^{x_j}, Σ e^{x_j} v_j)``."""
    return s.d * sp.exp(s.m), s.o * sp.exp(s.m)


def normalise(s: State) -> tuple[sp.Expr, sp.Expr]:
    """The row's result from its state: output ``o / d`` and ``lse = m + log d``."""
    return s.o / s.d, s.m + sp.log(s.d)


# ----------------------------------------------------------------------------------
# Softmax backward (per row): y = softmax(s), dL/ds = J^T dL/dy
# ----------------------------------------------------------------------------------
def softmax_vjp(ss: Sequence[sp.Expr], dy: Sequence[sp.Expr]) -> list[sp.Expr]:
    """``dL/ds_j = Σ_k dL/dy_k ∂y_k/∂s_j``, differentiating the definition ``softmax``
    (smooth, unlike the ``Max`` inside ``safe_softmax``; the two are equal)."""
    y = softmax(ss)
    return [sp.Add(*[dy[kk] * sp.diff(y[kk], s) for kk in range(len(ss))]) for s in ss]


# ----------------------------------------------------------------------------------
# Score modifications (issue 15): the definitions the kernels' terms are proved against
# ----------------------------------------------------------------------------------
def softcap_score(y: sp.Expr, c: sp.Expr) -> sp.Expr:
    """The capped natural-log score ``c·tanh(y / c)`` of a scaled score ``y = scale·x``."""
    return c * sp.tanh(y / c)


def alibi_bias(slope: sp.Expr, i: sp.Expr, j: sp.Expr, shift: sp.Expr) -> sp.Expr:
    """ALiBi's bias ``−slope·|i + shift − j|`` (shift: the alignment's, ``spec.masks``)."""
    return -slope * sp.Abs(i + shift - j)


def sink_state(sink: sp.Expr) -> State:
    """The sink as a state: one extra key of logit ``sink`` (not scaled) and value 0."""
    return State(sink, sp.Integer(1), sp.Integer(0))


def combine_with_sink(splits: Sequence[State], sink: sp.Expr) -> State:
    """Split-KV's combine: the splits' states merged by ``⊕``, then the sink's state merged
    by ``⊕`` exactly once, whatever the number of splits (claim sink_once)."""
    return merge(fold(splits), sink_state(sink))
