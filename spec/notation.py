"""The seeds' notation, defined once.

Every symbol the recurrences, the proofs, the reference and the kernels share lives here.
Names follow the seeds (000-004) and, where a kernel variable stands for the same
quantity, the kernel's name is the symbol's name:

=================  ===========================  ============================================
seed               kernel / symbol              meaning
=================  ===========================  ============================================
``x_i``            ``qk`` (a tile of them)      pre-softmax logit ``q . k_i`` (unscaled)
``m_i``            ``m_i``                      running max of the (scaled) logits seen
``d'_i``           ``l_i``                      running denominator ``sum_j e^{x_j - m_i}``
``o'_i``           ``acc / l_i``                FA1's normalised running output
``õ_i``            ``acc``                      FA2's un-normalised running output
``B_r``, ``B_c``   ``BLOCK_M``, ``BLOCK_N``     query / key tile sizes
``scale``          ``sm_scale``                 softmax scale, ``1/sqrt(D)`` by default
``log2(e)``        ``LOG2E``                    folded into ``qk_scale`` so kernels use exp2
=================  ===========================  ============================================

``l_i`` is the kernel's (and the Triton tutorial's) name for the seeds' ``d'_i``: the two
names denote one quantity. Kernels keep ``m_i`` in *log2 units* (``m_i = max(x)·scale·log2 e``);
the claim ``exp2_rewrite`` relates that form to the natural-exp definitions.

Symbols that may be ``-oo`` (a max over no keys) are ``extended_real``: SymPy's ``real``
implies finite and would silently decide ``Eq(m, -oo)`` as False.
"""

from __future__ import annotations

import sympy as sp

# --- constants ---------------------------------------------------------------------
LOG2E = 1 / sp.log(2)  #: log2(e); exp(x) == exp2(x * LOG2E)
LN2 = sp.log(2)  #: ln(2);  log(x) == log2(x) * LN2
NEG_INF = -sp.oo  #: the max over an empty set, and the masked logit

# --- per-row running state (kernel names) ------------------------------------------
m_i = sp.Symbol("m_i", extended_real=True)  # running max, log2 units (may be -oo)
l_i = sp.Symbol("l_i", nonnegative=True)  # running denominator d'_i
acc = sp.Symbol("acc", real=True)  # running un-normalised output õ_i (one column)
m_ij = sp.Symbol("m_ij", extended_real=True)  # max after this tile
m_safe = sp.Symbol("m_safe", real=True)  # m_ij with -oo replaced by 0 (the guard)
alpha = sp.Symbol("alpha", nonnegative=True)  # rescale factor of the old state
p = sp.Symbol("p", nonnegative=True)  # exp2 of shifted scaled scores (a tile)
l_ij = sp.Symbol("l_ij", nonnegative=True)  # row sum of p over this tile
qk = sp.Symbol("qk", extended_real=True)  # a tile of raw scores q.k (masked: -oo)
sm_scale = sp.Symbol("sm_scale", positive=True)  # softmax scale
qk_scale = sp.Symbol("qk_scale", positive=True)  # sm_scale * LOG2E
q, k, v, vT = sp.symbols("q k v vT", real=True)  # operand tiles
#: MLA (issue 27): the q/k columns past v's head dim, [D_v, D) (the rope part of an absorbed latent)
q_tail, k_tail = sp.symbols("q_tail k_tail", real=True)

# --- epilogue ----------------------------------------------------------------------
a = sp.Symbol("a", nonnegative=True)  # seed 000's softmax output a_i (a tile of them)
l_safe = sp.Symbol("l_safe", positive=True)
lse = sp.Symbol("lse", extended_real=True)  # natural-log log-sum-exp of a row

# --- backward ----------------------------------------------------------------------
o, do, dp, ds, delta = sp.symbols("o do dp ds delta", real=True)
dlse = sp.Symbol("dlse", real=True)  # dL/dlse_i: the gradient of the returned lse (0 if unused)
lse2 = sp.Symbol("lse2", extended_real=True)  # lse in log2 units
lse2_safe = sp.Symbol("lse2_safe", extended_real=True)
dq, dk, dv = sp.symbols("dq dk dv", real=True)  # gradient accumulators (fp32 tiles)

# --- backward, key-major (the dK/dV kernel: keys down the rows of every tile) --------
qkT = sp.Symbol("qkT", extended_real=True)  # the transposed scores K Qᵀ (masked: -oo)
pT = sp.Symbol("pT", nonnegative=True)  # Pᵀ: one column per query row
dpT, dsT = sp.symbols("dpT dsT", real=True)  # dPᵀ = V dOᵀ and dSᵀ
#: a split head dim's (claim head_dim_split) gradient columns [HEAD_DIM, D): dK's and dQ's tails (fp32 tiles)
dk_tail, dq_tail = sp.symbols("dk_tail dq_tail", real=True)

# --- merging two normalised partial results (split-KV combine, merge_state) ---------
# A partial result of a set of keys, normalised: o_x = õ/d' (one column), lse_x = m + log d'
# (natural log; -oo for no key). ``o`` and ``lse`` above name the merged result.
o_a, o_b = sp.symbols("o_a o_b", real=True)
lse_a, lse_b = sp.symbols("lse_a lse_b", extended_real=True)
lse_max = sp.Symbol("lse_max", extended_real=True)  # max(lse_a, lse_b): -oo if both are empty
lse_max_safe = sp.Symbol("lse_max_safe", real=True)  # lse_max with -oo replaced by 0 (the guard)
w_a, w_b, w_sum = sp.symbols("w_a w_b w_sum", nonnegative=True)  # e^{lse_x - lse_max}, their sum
w_sum_safe = sp.Symbol("w_sum_safe", positive=True)  # w_sum with 0 replaced by 1 (the guard)
s_a, s_b = sp.symbols("s_a s_b", nonnegative=True)  # each side's share e^{lse_x - lse}

# --- index space (masks) -----------------------------------------------------------
i, j = sp.symbols("i j", integer=True)  # query row, key column (0-based)
Nq, Nk = sp.symbols("N_Q N_K", integer=True, positive=True)  # sequence lengths
shift = sp.Symbol("shift", integer=True)  # alignment offset: aligned row is i + shift
window_left, window_right = sp.symbols("window_left window_right", integer=True, nonnegative=True)
key_len = sp.Symbol("key_len", integer=True, nonnegative=True)  # valid keys of this batch
B_r, B_c = sp.symbols("BLOCK_M BLOCK_N", integer=True, positive=True)  # tile sizes
start_m = sp.Symbol("start_m", integer=True, nonnegative=True)  # first row of a query tile
start_n = sp.Symbol("start_n", integer=True, nonnegative=True)  # first key of a key tile

#: Glossary used by the docs: symbol -> (seed notation, meaning).
GLOSSARY = {
    "m_i": ("m_i", "running max of the logits seen so far (kernels: log2 units)"),
    "l_i": ("d'_i", "running denominator; the kernel's l_i is the seeds' d'_i"),
    "acc": ("õ_i", "FA2's un-normalised running output; o'_i = acc / l_i"),
    "alpha": ("e^{m_{i-1}-m_i}", "rescale factor applied to the old state"),
    "p": ("e^{x_j - m_i}", "unnormalised probabilities of one tile"),
    "BLOCK_M": ("B_r", "query rows per tile"),
    "BLOCK_N": ("B_c", "keys per tile"),
    "lse": ("m_N + log d'_N", "log-sum-exp of a row, natural log"),
    "dlse": ("∂L/∂lse_i", "gradient of the returned lse; 0 when the loss does not use it"),
}

# --- score modifications (issue 15): softcap, ALiBi, attention sinks ------------------
softcap = sp.Symbol("softcap", positive=True)  # the cap c of s = c·tanh(scale·x / c)
softcap_in = sp.Symbol("softcap_in", real=True)  # scale / c, once per launch
softcap_out = sp.Symbol("softcap_out", real=True)  # into log2 units: c·log2 e (cap), scale·log2 e (ALiBi alone)
y = sp.Symbol("y", real=True)  # scale·x / c, the argument of the cap's tanh (a tile)
y2 = sp.Symbol("y2", nonnegative=True)  # y², the rational branch's variable (a tile)
t = sp.Symbol("t", real=True)  # tanh(scale·x / c), a tile of them (kept for the backward's 1 − t²)
slope = sp.Symbol("slope", nonnegative=True)  # the ALiBi slope of this (batch, query head)
alibi_coef = sp.Symbol("alibi_coef", real=True)  # slope·log2 e: the bias in log2 units
sink = sp.Symbol("sink", real=True)  # the learnable sink logit of this query head (natural log)
sink2 = sp.Symbol("sink2", real=True)  # the sink in log2 units
dsink = sp.Symbol("dsink", real=True)  # this query row's part of dL/dsink
tT = sp.Symbol("tT", real=True)  # t of the key-major (transposed) tile of the dK/dV kernel

# --- attention dropout (issue 29): FlashAttention 2's, one Philox draw per (b, h, i, j) --------
dropout_p = sp.Symbol("dropout_p", nonnegative=True)  # the drop probability p, 0 <= p < 1
drop_scale = sp.Symbol("drop_scale", positive=True)  # 1/(1 − p): a kept entry's rescale
drop_seed = sp.Symbol("drop_seed", integer=True, nonnegative=True)  # Philox key (from torch's generator)
rng_offset = sp.Symbol("rng_offset", integer=True, nonnegative=True)  # this call's Philox counter offset
drop_b = sp.Symbol("drop_b", integer=True, nonnegative=True)  # batch index b (0 for a packed batch)
off_h = sp.Symbol("off_h", integer=True, nonnegative=True)  # query head h
drop_heads = sp.Symbol("drop_heads", integer=True, positive=True)  # query heads H
drop_nq = sp.Symbol("drop_nq", integer=True, positive=True)  # rows N_q (a packed batch: total_q)
drop_nk = sp.Symbol("drop_nk", integer=True, positive=True)  # keys N_k (a packed batch: total_k)
drop_i0 = sp.Symbol("drop_i0", integer=True, nonnegative=True)  # the slice's first row (packed: cu_seqlens_q[b])
drop_j0 = sp.Symbol("drop_j0", integer=True, nonnegative=True)  # the slice's first key (packed: cu_seqlens_k[b])
drop_base = sp.Symbol("drop_base", integer=True, nonnegative=True)  # Philox offset of (b, h, i0, j0)
keep_drop = sp.Symbol("keep_drop")  # the keep decision of an entry (a boolean tile)
pT_drop = sp.Symbol("pT_drop", nonnegative=True)  # Z ∘ Pᵀ / (1 − p): the dropped Pᵀ of the dK/dV tile

# FP8 forward (issue 30): FlashAttention 3's per-(batch, KV head) descales and the scale of P
q_descale, k_descale, v_descale = sp.symbols("q_descale k_descale v_descale", positive=True)  # float32 (B, Hkv)
p_scale = sp.Symbol("p_scale", positive=True)  # the power of two P is scaled by before its fp8 cast
v_scale = sp.Symbol("v_scale", positive=True)  # v_descale / p_scale: the output's one descale
