"""Addresses: which element of which tensor a kernel's load or store reaches (issue 24).

A kernel reaches memory through a pointer and an integer offset, ``tl.load(X + offset)``. The
offsets below are kernel terms (printed by the generator, like the arithmetic of
``spec.terms``), built from the strides **as the launch passes them**: the launch arguments come
from one function per kernel in ``spec.launch``, and the claims (``spec.proofs.addresses``)
evaluate that function on a symbolic tensor (``Strided``: a shape and strides of SymPy integers)
and prove that each printed offset is the offset of the element the reference reads,
``Σ_d index_d · stride_d``, at an index inside the tensor's shape.

Covered so far: the decode kernel (``_decode_fwd``: Q, the paged ``block_table``,
``cache_seqlens``, K and V of a contiguous or a paged cache, the partial ``o`` and ``lse``) and the
varlen segment block (the ``cu_seqlens`` loads and the segment offsets of every Q/K/V/O/dO/dQ/dK/dV
pointer). The dense kernels' own pointer lines are not yet printed terms: ``generator.hygiene``
lists them as reviewed gaps (``POINTER_GAPS``), and so does ``docs/verification.md``.

``Strided`` implements the few tensor methods the launch functions use (``shape``, ``stride()``,
``view``, ``transpose``, ``contiguous``), so ``spec.launch`` runs unchanged on a torch tensor (the
runtime) and on a ``Strided`` (the claim).
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import paged as P
from spec import varlen as V
from spec.terms import Term, col, row

CLAIM_DECODE = "decode_addresses"
CLAIM_VARLEN = "varlen_addresses"


def _int(name, **kw):
    return sp.Symbol(name, integer=True, **kw)


# ----------------------------------------------------------------------------------
# The symbolic tensor.
# ----------------------------------------------------------------------------------
def contiguous_strides(shape) -> tuple:
    """Row-major strides of ``shape`` (what ``torch.empty`` and ``.contiguous()`` give)."""
    out, acc = [], sp.Integer(1)
    for size in reversed(shape):
        out.append(acc)
        acc = acc * size
    return tuple(reversed(out))


class Strided:
    """A tensor as a kernel sees it: ``shape`` and ``strides`` (SymPy integers, in elements).

    Element ``index`` lives at ``offset_of(index) = Σ_d index_d · stride_d`` from the pointer the
    launch passes; it is inside the tensor when ``0 <= index_d < shape_d`` for every ``d``
    (``in_shape``)."""

    def __init__(self, name: str, shape, strides):
        self.name, self.shape, self.strides = name, tuple(sp.sympify(s) for s in shape), tuple(
            sp.sympify(s) for s in strides)
        assert len(self.shape) == len(self.strides)

    # --- the torch methods the launch functions use -----------------------------------
    def stride(self, dim=None):
        return self.strides if dim is None else self.strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return sp.Mul(*self.shape)

    def is_contiguous_form(self) -> bool:
        return all(sp.expand(a - b) == 0 for a, b in zip(self.strides, contiguous_strides(self.shape)))

    def contiguous(self) -> "Strided":
        return Strided(self.name, self.shape, contiguous_strides(self.shape))

    def view(self, *shape) -> "Strided":
        """A view of a contiguous tensor (as torch requires here); one ``-1`` is inferred."""
        if not self.is_contiguous_form():
            raise ValueError(f"view of the non-contiguous {self.name}")
        shape = list(shape)
        if -1 in shape:
            known = sp.Mul(*[s for s in shape if s != -1])
            shape[shape.index(-1)] = sp.cancel(self.numel() / known)
        if sp.expand(sp.Mul(*shape) - self.numel()) != 0:
            raise ValueError(f"view {shape} of {self.name} {self.shape}: a different number of elements")
        return Strided(self.name, shape, contiguous_strides(shape))

    def transpose(self, a: int, b: int) -> "Strided":
        shape, strides = list(self.shape), list(self.strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return Strided(self.name, shape, strides)

    def __getitem__(self, key):
        """``t[None]``: a leading dimension of size 1 (stride 0)."""
        if key is None:
            return Strided(self.name, (1,) + self.shape, (0,) + self.strides)
        raise TypeError("Strided supports t[None] only")

    # --- addresses --------------------------------------------------------------------
    def offset_of(self, index) -> sp.Expr:
        assert len(index) == len(self.shape), (self.name, index)
        return sp.Add(*[i * s for i, s in zip(index, self.strides)])

    def in_shape(self, index) -> list:
        """``0 <= index_d < shape_d`` for every d, as SymPy relations."""
        return [rel for i, s in zip(index, self.shape) for rel in (sp.Ge(i, 0), sp.Lt(i, s))]


def symbolic(name: str, shape) -> Strided:
    """A tensor of ``shape`` (names or SymPy sizes) with arbitrary non-negative strides
    ``{name}_s0, {name}_s1, …`` (torch's strides are >= 0; 0 for an expanded dimension)."""
    sizes = [_int(s, positive=True) if isinstance(s, str) else sp.sympify(s) for s in shape]
    strides = [_int(f"{name}_s{d}", nonnegative=True) for d in range(len(sizes))]
    return Strided(name, sizes, strides)


# ----------------------------------------------------------------------------------
# Decode (_decode_fwd): the program's rows, and every load and store offset.
# ----------------------------------------------------------------------------------
#: kernel names: program ids, lanes, strides as the kernel's parameters (spec.launch.decode_launch)
off_b, off_kvh, offs_m, offs_d, offs_dv, offs_dt, offs_n = (_int(s, nonnegative=True) for s in (
    "off_b", "off_kvh", "offs_m", "offs_d", "offs_dv", "offs_dt", "offs_n"))
#: offs_d runs over q/k's head dim D, offs_dv over v/out's D_v (MLA: D_v != D, v may be a view of k); with the
#: head dim split (MLA, D > D_v: claim head_dim_split) offs_d runs over q/k's first D_v columns and offs_dt
#: over their tail [D_v, D)
tok, head, page, k_rows, v_rows = (_int(s) for s in ("tok", "head", "page", "k_rows", "v_rows"))
q_off, k_off, v_off, o_off, lse_off, bt_off = (_int(s) for s in
                                               ("q_off", "k_off", "v_off", "o_off", "lse_off", "bt_off"))
#: a printed address term's name ends so (generator.hygiene: a pointer moves by such a name only)
OFFSET_SUFFIX = "_off"
GROUP, N_Q, H_KV = (_int(s, positive=True) for s in ("GROUP", "N_Q", "H_KV"))
DECODE_STRIDES = {name: _int(name) for name in (
    "stride_qb", "stride_qn", "stride_qh", "stride_qd", "stride_kb", "stride_kn", "stride_kh", "stride_kd",
    "stride_vb", "stride_vn", "stride_vh", "stride_vd", "stride_os", "stride_ob", "stride_on", "stride_oh",
    "stride_od", "stride_ls", "stride_lb", "stride_ln", "stride_lh", "stride_bt_b", "stride_bt_p", "stride_cs",
    "stride_sink", "stride_lp", "stride_bi")}
S_ = DECODE_STRIDES

#: row offs_m of a program is query head off_kvh·GROUP + offs_m // N_Q, new token offs_m % N_Q
DECODE_ROWS = (
    Term(tok, sp.Mod(offs_m, N_Q), CLAIM_DECODE, "the row's new token (rows are GROUP x N_Q)"),
    Term(head, off_kvh * GROUP + sp.floor(offs_m / N_Q), CLAIM_DECODE, "the row's query head"),
)
#: batch b's valid keys: cache_seqlens[b]
cs_off = _int("cs_off")
KEY_LEN = Term(cs_off, off_b * S_["stride_cs"], CLAIM_DECODE, "cache_seqlens[b]")
#: HAS_LEFTPAD: batch b's first valid key cache_leftpad[b]
lp_off = _int("lp_off")
LEFTPAD_OFFSET = Term(lp_off, off_b * S_["stride_lp"], CLAIM_DECODE, "cache_leftpad[b]")
#: HAS_BATCH_IDX (contiguous cache): batch b reads cache row off_bc = cache_batch_idx[b] (else off_bc = b)
bi_off = _int("bi_off")
off_bc = _int("off_bc", nonnegative=True)
BATCH_IDX_OFFSET = Term(bi_off, off_b * S_["stride_bi"], CLAIM_DECODE, "cache_batch_idx[b]")
#: the rows of Q (loaded once)
Q_OFFSET = Term(q_off, off_b * S_["stride_qb"] + col(tok) * S_["stride_qn"] + col(head) * S_["stride_qh"]
                + row(offs_d) * S_["stride_qd"], CLAIM_DECODE, "q[b, tok, head, d]")
#: paged: key j's physical page block_table[b, page_idx], then its row page·stride_kb + slot·stride_kn
BT_OFFSET = Term(bt_off, off_b * S_["stride_bt_b"] + P.page_idx * S_["stride_bt_p"], CLAIM_DECODE,
                 "block_table[b, page_idx]")
PAGED_ROWS = (
    Term(k_rows, page * S_["stride_kb"] + P.slot * S_["stride_kn"], CLAIM_DECODE, "k_cache[page, slot]"),
    Term(v_rows, page * S_["stride_vb"] + P.slot * S_["stride_vn"], CLAIM_DECODE, "v_cache[page, slot]"),
)
CONTIGUOUS_ROWS = (
    Term(k_rows, off_bc * S_["stride_kb"] + offs_n * S_["stride_kn"], CLAIM_DECODE, "k_cache[off_bc, j]"),
    Term(v_rows, off_bc * S_["stride_vb"] + offs_n * S_["stride_vn"], CLAIM_DECODE, "v_cache[off_bc, j]"),
)
#: the split head dim's tail (MLA): q[b, tok, head, dt] and k_cache[row, kvh, dt], dt in [D_v, D)
q_tail_off, k_tail_off = _int("q_tail_off"), _int("k_tail_off")
Q_TAIL_OFFSET = Term(q_tail_off, Q_OFFSET.expr.xreplace({offs_d: offs_dt}), CLAIM_DECODE, "q[b, tok, head, dt]")
KV_OFFSETS = (
    Term(k_off, off_kvh * S_["stride_kh"] + col(k_rows) + row(offs_d) * S_["stride_kd"], CLAIM_DECODE,
         "k_cache[row, kv head, d]"),
    Term(v_off, off_kvh * S_["stride_vh"] + col(v_rows) + row(offs_dv) * S_["stride_vd"], CLAIM_DECODE,
         "v_cache[row, kv head, dv]"),
)
K_TAIL_OFFSET = Term(k_tail_off, off_kvh * S_["stride_kh"] + col(k_rows) + row(offs_dt) * S_["stride_kd"], CLAIM_DECODE,
                     "k_cache[row, kv head, dt]")
#: the split's partial result: out[split, b, tok, head, d] and lse[split, b, tok, head]
OUT_OFFSETS = (
    Term(o_off, P.split * S_["stride_os"] + off_b * S_["stride_ob"] + col(tok) * S_["stride_on"]
         + col(head) * S_["stride_oh"] + row(offs_dv) * S_["stride_od"], CLAIM_DECODE, "out[split, b, tok, head, dv]"),
    Term(lse_off, P.split * S_["stride_ls"] + off_b * S_["stride_lb"] + tok * S_["stride_ln"]
         + head * S_["stride_lh"], CLAIM_DECODE, "lse[split, b, tok, head]"),
)
#: the row's sink (HAS_SINKS, unsplit): sinks[head]
sink_off = _int("sink_off")
SINK_OFFSET = Term(sink_off, head * S_["stride_sink"], CLAIM_DECODE, "sinks[head]")
DECODE_GROUPS = {"rows": DECODE_ROWS, "sink_offset": (SINK_OFFSET,), "key_len": (KEY_LEN,),
                 "leftpad_offset": (LEFTPAD_OFFSET,), "batch_idx_offset": (BATCH_IDX_OFFSET,), "q_offset": (Q_OFFSET,), "bt_offset": (BT_OFFSET,),
                 "paged_rows": PAGED_ROWS, "contiguous_rows": CONTIGUOUS_ROWS, "kv_offsets": KV_OFFSETS,
                 "q_tail_offset": (Q_TAIL_OFFSET,), "k_tail_offset": (K_TAIL_OFFSET,),
                 "out_offsets": OUT_OFFSETS}

# ----------------------------------------------------------------------------------
# Varlen: the segment's offsets (cu_seqlens loads) and the pointers moved to its first row.
# ----------------------------------------------------------------------------------
CuSeqlensQ, CuSeqlensK = sp.IndexedBase("CuSeqlensQ"), sp.IndexedBase("CuSeqlensK")
#: the cu_seqlens loads (the launch passes them contiguous: element b at offset b)
SEGMENT_LOADS = (
    Term(V.seq_start_q, CuSeqlensQ[off_b], CLAIM_VARLEN, "cu_seqlens_q[b]"),
    Term(V.seq_end_q, CuSeqlensQ[off_b + 1], CLAIM_VARLEN, "cu_seqlens_q[b + 1]"),
    Term(V.seq_start_k, CuSeqlensK[off_b], CLAIM_VARLEN, "cu_seqlens_k[b]"),
    Term(V.seq_end_k, CuSeqlensK[off_b + 1], CLAIM_VARLEN, "cu_seqlens_k[b + 1]"),
)
#: the row-stride parameters of the varlen kernels: which tensor's spec.launch.packed_strides feeds each
#: (the launch passes them in the kernel's parameter order)
ROW_STRIDES = {"stride_qm": "q", "stride_kn": "k", "stride_vn": "v", "stride_om": "out", "stride_dom": "do",
               "stride_dqm": "dq", "stride_dkn": "dk", "stride_dvn": "dv"}
#: which tensor each pointer addresses
POINTER_TENSOR = {"Q": "q", "K": "k", "V": "v", "Out": "out", "DO": "do", "DQ": "dq", "DK": "dk", "DV": "dv"}
#: pointer -> (the segment start it moves by, the row stride it scales, the tensor's rows: q or k)
_POINTERS = {
    "fwd": (("Q", "q", "stride_qm"), ("K", "k", "stride_kn"), ("V", "k", "stride_vn"), ("Out", "q", "stride_om")),
    "dkdv": (("Q", "q", "stride_qm"), ("DO", "q", "stride_dom"), ("K", "k", "stride_kn"), ("V", "k", "stride_vn"),
             ("DK", "k", "stride_dkn"), ("DV", "k", "stride_dvn")),
    "dq": (("Q", "q", "stride_qm"), ("DO", "q", "stride_dom"), ("DQ", "q", "stride_dqm"), ("K", "k", "stride_kn"),
           ("V", "k", "stride_vn")),
}


def segment_pointers(kernel: str) -> tuple[Term, ...]:
    """``X = X + seq_start · stride_row`` for every pointer of ``kernel`` ('fwd', 'dkdv', 'dq'): the
    tensor's rows start at its segment's first row (queries: ``cu_seqlens_q[b]``, keys: ``cu_seqlens_k[b]``)."""
    out = []
    for ptr, side, stride in _POINTERS[kernel]:
        p = sp.Symbol(ptr)
        start = V.seq_start_q if side == "q" else V.seq_start_k  # int64: _varlen_segment returns them cast
        out.append(Term(p, p + start * sp.Symbol(stride, integer=True), CLAIM_VARLEN,
                        f"row 0 of this segment's {'queries' if side == 'q' else 'keys'}"))
    return tuple(out)


SEGMENT_POINTERS = {kernel: segment_pointers(kernel) for kernel in _POINTERS}
