"""Addresses: which element of which tensor a kernel's load or store reaches (issue 24).

A kernel reaches memory through a pointer and an integer offset, ``tl.load(X + offset)``. The
offsets below are kernel terms (printed by the generator, like the arithmetic of
``spec.terms``), built from the strides **as the launch passes them**: the launch arguments come
from one function per kernel in ``spec.launch``, and the claims (``spec.proofs.addresses``)
evaluate that function on a symbolic tensor (``Strided``: a shape and strides of SymPy integers)
and prove that each printed offset is the offset of the element the reference reads,
``Σ_d index_d · stride_d``, at an index inside the tensor's shape.

Covered: the decode kernel (``_decode_fwd``: Q, the paged ``block_table``, ``cache_seqlens``, K and V
of a contiguous or a paged cache, the partial ``o`` and ``lse``, an FP8 cache's descales), the varlen segment block (the
``cu_seqlens`` loads and the segment offsets of every Q/K/V/O/dO/dQ/dK/dV/lse/lse2/Δ pointer), the dense
forward (FP8's descales included), its TMA path's boxes (claim tma_addresses), softmax and the merges, the KV
append, the backward preprocess and the backward dK/dV and dQ kernels (a user score_mod's gradient rows
included). ``generator.hygiene`` refuses a pointer move that is no printed term, with no exception; a user score_mod's
parameter reads are its printed terms (claim score_mod_derived), whose entries' extent ``docs/verification.md`` lists
as outside the proofs.

The lanes every offset and mask is evaluated on are printed terms too (``*_LANES``: ``offs_x = base +
arange(width)``, ``tl.arange(0, width)``, and the tile starts they read), which the claims read rather than assume,
and so are the tile loops that produce those starts (``*_LOOPS``: ``for start_n in range(lo, hi, BLOCK_N):``, whose
start, stop and step the claims read) and the index loops over a K/V head's query heads and the merge's splits
(``for g in range(0, GROUP):``, ``for s in range(S):``).

``Strided`` implements the few tensor methods the launch functions use (``shape``, ``stride()``,
``view``, ``transpose``, ``contiguous``), so ``spec.launch`` runs unchanged on a torch tensor (the
runtime) and on a ``Strided`` (the claim).
"""

from __future__ import annotations

import sympy as sp

from spec import integers
from spec import notation as n
from spec import paged as P
from spec import rotary as RO
from spec import structure as ST
from spec import varlen as V
from spec import terms as T
from spec.terms import Term, col, row

CLAIM_DECODE = "decode_addresses"
CLAIM_VARLEN = "varlen_addresses"


def _int(name, **kw):
    return sp.Symbol(name, integer=True, **kw)


# ----------------------------------------------------------------------------------
# The symbolic tensor.
# ----------------------------------------------------------------------------------
def contiguous_strides(shape) -> tuple:
    """Row-major strides of ``shape`` (what ``torch.empty`` and ``.contiguous()`` give), as SymPy terms
    (``spec.integers.contiguous_strides``)."""
    return tuple(sp.sympify(s) for s in integers.contiguous_strides(shape))


class Strided:
    """A tensor as a kernel sees it: ``shape`` and ``strides`` (SymPy integers, in elements).

    Element ``index`` lives at ``offset_of(index) = Σ_d index_d · stride_d`` from the pointer the
    launch passes; it is inside the tensor when ``0 <= index_d < shape_d`` for every ``d``
    (``in_shape``)."""

    def __init__(self, name: str, shape, strides, ptr=None):
        self.name, self.shape, self.strides = name, tuple(sp.sympify(s) for s in shape), tuple(
            sp.sympify(s) for s in strides)
        # the address of element 0 (torch's data_ptr: the storage offset included); a view passes its base's
        self.ptr = sp.Symbol(f"{name}_ptr", integer=True) if ptr is None else ptr
        assert len(self.shape) == len(self.strides)

    # --- the torch methods the launch functions use -----------------------------------
    def stride(self, dim=None):
        return self.strides if dim is None else self.strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def data_ptr(self):
        return self.ptr

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

    def new_empty(self, shape, **_) -> "Strided":
        """A new tensor of ``shape``, contiguous (as ``torch.Tensor.new_empty`` makes it)."""
        return Strided(f"new_{self.name}", shape, contiguous_strides(tuple(sp.sympify(s) for s in shape)))

    new_zeros = new_empty  # the same layout (the values are no address's business)

    def transpose(self, a: int, b: int) -> "Strided":
        shape, strides = list(self.shape), list(self.strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return Strided(self.name, shape, strides, self.ptr)

    def __getitem__(self, key):
        """``t[None]``: a leading dimension of size 1 (stride 0)."""
        if key is None:
            return Strided(self.name, (1,) + self.shape, (0,) + self.strides, self.ptr)
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
    "stride_sink", "stride_lp", "stride_bi", "stride_sb", "stride_sh",
    "stride_qdesc_b", "stride_qdesc_h", "stride_kdesc_b", "stride_kdesc_h", "stride_vdesc_b", "stride_vdesc_h")}
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
#: decode's offsets compute every product of a stride in int64 — a factor is off_b, off_kvh, head, page or off_bc
#: (int64 already), or an int32 lane widened first, ``W(x)``: ``tl.cast(x, tl.int64)`` (the partials' split·stride_os
#: passes 2^31 with many splits of a large batch; no rule bounds block_table's strides) — except the cache's own
#: in-head products, slot or j times stride_kn and d times stride_kd: assumption index_int32 bounds a (batch or
#: page, head) slice of k_cache and v_cache (the contract checks it), so the key loop keeps them int32 (widened,
#: they cost 8-16% more loop instructions on sm_90). Claim decode_addresses checks the widths of the printed lines.
W = T.int64
#: the rows of Q (loaded once)
Q_OFFSET = Term(q_off, off_b * S_["stride_qb"] + W(col(tok)) * S_["stride_qn"] + col(head) * S_["stride_qh"]
                + W(row(offs_d)) * S_["stride_qd"], CLAIM_DECODE, "q[b, tok, head, d]")
#: paged: key j's physical page block_table[b, page_idx], then its row page·stride_kb + slot·stride_kn
BT_OFFSET = Term(bt_off, off_b * S_["stride_bt_b"] + W(P.page_idx) * S_["stride_bt_p"], CLAIM_DECODE,
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
    Term(o_off, W(P.split) * S_["stride_os"] + off_b * S_["stride_ob"] + W(col(tok)) * S_["stride_on"]
         + col(head) * S_["stride_oh"] + W(row(offs_dv)) * S_["stride_od"], CLAIM_DECODE, "out[split, b, tok, head, dv]"),
    Term(lse_off, W(P.split) * S_["stride_ls"] + off_b * S_["stride_lb"] + W(tok) * S_["stride_ln"]
         + head * S_["stride_lh"], CLAIM_DECODE, "lse[split, b, tok, head]"),
)
#: the row's sink (HAS_SINKS, unsplit): sinks[head]
sink_off = _int("sink_off")
SINK_OFFSET = Term(sink_off, head * S_["stride_sink"], CLAIM_DECODE, "sinks[head]")
#: an FP8 cache (issue 30): the three float32 (B, Hkv) descales of this program's (batch, KV head), each at its
#: own strides (spec.launch.descale_strides, passed by decode_launch); the shared _fp8_descales prints them
qdesc_off, kdesc_off, vdesc_off = _int("qdesc_off"), _int("kdesc_off"), _int("vdesc_off")
DECODE_DESCALE_OFFSETS = tuple(
    Term(sym, off_b * S_[f"stride_{x}desc_b"] + off_kvh * S_[f"stride_{x}desc_h"], CLAIM_DECODE,
         f"{x}_descale[b, kv head]") for sym, x in ((qdesc_off, "q"), (kdesc_off, "k"), (vdesc_off, "v")))
#: ALiBi (HAS_ALIBI): the row's slope alibi_slopes[head] ((Hq,): stride_sb = 0) or [b, head] ((B, Hq)), at the
#: strides spec.launch.decode_launch passes (spec.launch.slope_strides); the load has no mask, so a padding row
#: (row_ok false) reads head 0's slope (the shared _score_mod_scalars prints the offset, off_h = head_safe)
head_safe, row_ok = _int("head_safe"), sp.Symbol("row_ok")
DECODE_SLOPE_HEAD = (Term(head_safe, sp.Piecewise((head, row_ok), (0, True)), CLAIM_DECODE,
                          "the row's query head; a padding row reads head 0's slope"),)
#: (off_h: _score_mod_scalars' head parameter, the forward's off_h; the decode passes head_safe)
DECODE_SLOPE_OFFSET = (Term(_int("slope_off"), off_b * S_["stride_sb"] + _int("off_h", nonnegative=True)
                            * S_["stride_sh"], CLAIM_DECODE, "alibi_slopes[b, head_safe]"),)
#: the lanes' masks (issue 24: what a masked-off lane addresses is never dereferenced): the program's rows (GROUP
#: heads x N_Q tokens), q/k's head-dim columns (the main part, and MLA's tail [HEAD_DIM, HEAD_DIM + HEAD_DIM_TAIL):
#: offs_dt = HEAD_DIM + arange) and v/out's, at the head dims decode_launch passes (spec.launch.head_dims); claim
#: decode_addresses proves every lane each admits lies inside its tensor and every row and column the reference
#: reads is admitted. The key mask is spec.paged.KEY_OK (claims paged_kv_reads, decode_addresses).
#: A printed mask's name ends so (generator.hygiene: a load's or store's mask= reads such names only)
MASK_SUFFIX = "_ok"
HEAD_DIM_, HEAD_DIM_V_ = _int("HEAD_DIM", positive=True), _int("HEAD_DIM_V", positive=True)
HEAD_DIM_TAIL_ = _int("HEAD_DIM_TAIL", nonnegative=True)
d_ok, dv_ok, dt_ok = sp.Symbol("d_ok"), sp.Symbol("dv_ok"), sp.Symbol("dt_ok")
DECODE_ROW_OK = (Term(row_ok, sp.StrictLessThan(offs_m, GROUP * N_Q), CLAIM_DECODE,
                      "the program's rows: GROUP heads x N_Q tokens"),)
DECODE_COLUMNS_OK = (
    Term(d_ok, sp.StrictLessThan(offs_d, HEAD_DIM_), CLAIM_DECODE, "q/k's columns (main part)"),
    Term(dv_ok, sp.StrictLessThan(offs_dv, HEAD_DIM_V_), CLAIM_DECODE, "v/out's columns"),
)
DECODE_TAIL_OK = (Term(dt_ok, sp.StrictLessThan(offs_dt, HEAD_DIM_ + HEAD_DIM_TAIL_), CLAIM_DECODE,
                       "q/k's tail columns [HEAD_DIM, D)"),)
DECODE_GROUPS = {"row_ok": DECODE_ROW_OK, "columns_ok": DECODE_COLUMNS_OK, "tail_ok": DECODE_TAIL_OK,
                 "rows": DECODE_ROWS, "sink_offset": (SINK_OFFSET,), "key_len": (KEY_LEN,),
                 "leftpad_offset": (LEFTPAD_OFFSET,), "batch_idx_offset": (BATCH_IDX_OFFSET,), "q_offset": (Q_OFFSET,), "bt_offset": (BT_OFFSET,),
                 "paged_rows": PAGED_ROWS, "contiguous_rows": CONTIGUOUS_ROWS, "kv_offsets": KV_OFFSETS,
                 "q_tail_offset": (Q_TAIL_OFFSET,), "k_tail_offset": (K_TAIL_OFFSET,),
                 "out_offsets": OUT_OFFSETS, "descale_offsets": DECODE_DESCALE_OFFSETS,
                 "slope_head": DECODE_SLOPE_HEAD, "slope_offset": DECODE_SLOPE_OFFSET}

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
#: which tensor each pointer addresses
POINTER_TENSOR = {"Q": "q", "K": "k", "V": "v", "Out": "out", "Lse": "lse", "DO": "do", "DQ": "dq", "DK": "dk", "DV": "dv",
                  "Lse2": "lse2", "Delta": "delta"}
#: pointer -> (the segment start it moves by, the row stride it scales, the tensor's rows: q or k)
_POINTERS = {
    "fwd": (("Q", "q", "stride_qm"), ("K", "k", "stride_kn"), ("V", "k", "stride_vn"), ("Out", "q", "stride_om"),
            ("Lse", "q", "stride_lm")),
    "dkdv": (("Q", "q", "stride_qm"), ("DO", "q", "stride_dom"), ("K", "k", "stride_kn"), ("V", "k", "stride_vn"),
             ("DK", "k", "stride_dkn"), ("DV", "k", "stride_dvn"), ("Lse2", "q", "stride_rm"),
             ("Delta", "q", "stride_rm")),
    "dq": (("Q", "q", "stride_qm"), ("DO", "q", "stride_dom"), ("DQ", "q", "stride_dqm"), ("K", "k", "stride_kn"),
           ("V", "k", "stride_vn"), ("Lse2", "q", "stride_rm"), ("Delta", "q", "stride_rm")),
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


# ----------------------------------------------------------------------------------
# The dense forward (_attn_fwd, _attn_fwd_stage, _attn_fwd_tile, _score_mod_scalars): every load and
# store offset, for the strides spec.launch.forward_launch passes (claim forward_addresses).
# ----------------------------------------------------------------------------------
CLAIM_FORWARD = "forward_addresses"
#: the program's (batch, query head) and its K/V head (int64: GRID_HEAD below, spec.structure.GQA_HEAD),
#: its query tile's index, a key tile's first key
off_h = _int("off_h", nonnegative=True)
pid_m, start_n = _int("pid_m", nonnegative=True), _int("start_n", nonnegative=True)
#: the per-program parts of an offset, printed once before the key loop and passed to the stages
k_base, v_base, mask_base, map_base = (_int(s) for s in ("k_base", "v_base", "mask_base", "map_base"))
kl_off, slope_off, mask_off, map_off = (_int(s) for s in ("kl_off", "slope_off", "mask_off", "map_off"))
FORWARD_STRIDES = {name: _int(name) for name in (
    "stride_qb", "stride_qh", "stride_qm", "stride_qd", "stride_kb", "stride_kh", "stride_kn", "stride_kd",
    "stride_vb", "stride_vh", "stride_vn", "stride_vd", "stride_ob", "stride_oh", "stride_om", "stride_od",
    "stride_lb", "stride_lh", "stride_lm", "stride_mb", "stride_mh", "stride_mm", "stride_mn",
    "stride_map_b", "stride_map_h", "stride_map_m", "stride_map_n", "stride_sb", "stride_sh",
    "stride_kl", "stride_sink", "stride_mmb", "stride_keep_b", "stride_keep_h", "stride_keep_m", "stride_keep_n",
    "stride_qdesc_b", "stride_qdesc_h", "stride_kdesc_b", "stride_kdesc_h", "stride_vdesc_b", "stride_vdesc_h")}
F_ = FORWARD_STRIDES
#: the Q tile (loaded once) and the O tile (stored once): rows offs_m of head off_h of batch off_b
FWD_Q_OFFSET = (Term(q_off, off_b * F_["stride_qb"] + off_h * F_["stride_qh"] + col(offs_m) * F_["stride_qm"]
                     + row(offs_d) * F_["stride_qd"], CLAIM_FORWARD, "q[b, h, i, d]"),)
FWD_OUT_OFFSETS = (
    Term(o_off, off_b * F_["stride_ob"] + off_h * F_["stride_oh"] + col(offs_m) * F_["stride_om"]
         + row(offs_dv) * F_["stride_od"], CLAIM_FORWARD, "out[b, h, i, dv]"),
    Term(lse_off, off_b * F_["stride_lb"] + off_h * F_["stride_lh"] + W(offs_m) * F_["stride_lm"], CLAIM_FORWARD,
         "lse[b, h, i]"),
)
#: this program's K/V head (int64 scalars), then a tile's keys offs_n in it
FWD_KV_BASE = (
    Term(k_base, off_b * F_["stride_kb"] + off_kvh * F_["stride_kh"], CLAIM_FORWARD, "k[b, kv head]"),
    Term(v_base, off_b * F_["stride_vb"] + off_kvh * F_["stride_vh"], CLAIM_FORWARD, "v[b, kv head]"),
)
FWD_KV_OFFSETS = (
    Term(k_off, k_base + col(offs_n) * F_["stride_kn"] + row(offs_d) * F_["stride_kd"], CLAIM_FORWARD,
         "k[b, kv head, j, d]"),
    Term(v_off, v_base + col(offs_n) * F_["stride_vn"] + row(offs_dv) * F_["stride_vd"], CLAIM_FORWARD,
         "v[b, kv head, j, dv]"),
)
#: the head dim split (claim head_dim_split: D padded as a main part HEAD_DIM and a tail HEAD_DIM_TAIL, 192 =
#: 128 + 64): the tails q[b, h, i, dt] and k[b, kv head, j, dt], dt in [HEAD_DIM, D): the offsets above at lane offs_dt
FWD_TAIL_OFFSETS = (
    Term(q_tail_off, FWD_Q_OFFSET[0].expr.xreplace({offs_d: offs_dt}), CLAIM_FORWARD, "q[b, h, i, dt]"),
    Term(k_tail_off, FWD_KV_OFFSETS[0].expr.xreplace({offs_d: offs_dt}), CLAIM_FORWARD, "k[b, kv head, j, dt]"),
)
#: the dense bool mask's rows of this program (BLOCK_M x 1), then a partial tile's bits
FWD_MASK_BASE = (Term(mask_base, off_b * F_["stride_mb"] + off_h * F_["stride_mh"] + col(offs_m) * F_["stride_mm"],
                      CLAIM_FORWARD, "mask[b, h, i]"),)
FWD_MASK_OFFSET = (Term(mask_off, mask_base + row(offs_n) * F_["stride_mn"], CLAIM_FORWARD, "mask[b, h, i, j]"),)
#: the block map's row of this query tile, then one byte per key tile
FWD_MAP_BASE = (Term(map_base, off_b * F_["stride_map_b"] + off_h * F_["stride_map_h"] + W(pid_m) * F_["stride_map_m"],
                     CLAIM_FORWARD, "block_map[b, h, query tile]"),)
FWD_MAP_OFFSET = (Term(map_off, map_base + W(sp.floor(start_n / n.B_c)) * F_["stride_map_n"], CLAIM_FORWARD,
                       "block_map[b, h, query tile, key tile]"),)
#: key_lengths[b], sinks[h], the ALiBi slope of (b, h) ((Hq,) slopes: stride_sb = 0)
FWD_KEY_LEN = (Term(kl_off, off_b * F_["stride_kl"], CLAIM_FORWARD, "key_lengths[b]"),)
fsink_off = _int("fsink_off")
FWD_SINK = (Term(fsink_off, off_h * F_["stride_sink"], CLAIM_FORWARD, "sinks[h]"),)
SLOPE_OFFSET = (Term(slope_off, off_b * F_["stride_sb"] + off_h * F_["stride_sh"], CLAIM_FORWARD,
                     "alibi_slopes[b, h]"),)
#: the mask_mod's parameter row of batch entry b (int32; the printed predicate reads entries of it)
MaskModArgs, MM_row = sp.Symbol("MaskModArgs"), sp.Symbol("MM_row")
FWD_MM_ROW = (Term(MM_row, MaskModArgs + off_b * F_["stride_mmb"], CLAIM_FORWARD, "mask_mod_args[b]"),)
#: dropout's counter offset: word 1 of the Philox (seed, offset) pair (spec.launch.philox_words passes it contiguous)
rng_off = _int("rng_off")
FWD_RNG_OFFSET = (Term(rng_off, sp.Integer(1), CLAIM_FORWARD, "philox[1]: the counter offset"),)
#: _dropout_keep: the keep mask's element (b, h, i, j), its row index in int64 (offs_m64 = offs_m.to(int64))
offs_m64, keep_off = _int("offs_m64", nonnegative=True), _int("keep_off")
KEEP_OFFSET = (Term(keep_off, off_b * F_["stride_keep_b"] + off_h * F_["stride_keep_h"] + col(offs_m64)
                    * F_["stride_keep_m"] + W(row(offs_n)) * F_["stride_keep_n"], CLAIM_FORWARD, "keep[b, h, i, j]"),)
#: FP8 (issue 30): the three float32 (B, Hkv) descales of this program's (batch, KV head), each at its own
#: strides (spec.launch.descale_strides); packed, b is the segment (qdesc_off, ...: the decode's names)
FWD_DESCALE_OFFSETS = tuple(
    Term(sym, off_b * F_[f"stride_{x}desc_b"] + off_kvh * F_[f"stride_{x}desc_h"], CLAIM_FORWARD,
         f"{x}_descale[b, h // GROUP]") for sym, x in ((qdesc_off, "q"), (kdesc_off, "k"), (vdesc_off, "v")))
#: the lanes' masks (issue 24, masked-off lanes; the decode's: DECODE_ROW_OK above): the tile's rows inside q, the
#: head-dim columns (q/k's main part and tail, v/out's), and a key tile's keys inside k and before key_len (padding
#: keys, j >= key_len, may hold NaN or inf: never read). Claim forward_addresses proves every lane each admits lies
#: inside its tensor (and a key before key_len) and every row, column and key the reference reads is admitted.
N_K_ = _int("N_K", positive=True)
FWD_ROW_OK = (Term(row_ok, sp.StrictLessThan(offs_m, N_Q), CLAIM_FORWARD, "the tile's rows inside q"),)
FWD_COLUMNS_OK = tuple(Term(t.symbol, t.expr, CLAIM_FORWARD, t.note) for t in DECODE_COLUMNS_OK)
FWD_TAIL_OK = tuple(Term(t.symbol, t.expr, CLAIM_FORWARD, t.note) for t in DECODE_TAIL_OK)
FWD_KEY_OK = (Term(P.key_ok, sp.And(sp.StrictLessThan(offs_n, N_K_), sp.StrictLessThan(offs_n, n.key_len)),
                   CLAIM_FORWARD, "keys inside k, before key_len (padding keys: NaN, inf)"),)
#: the dense mask's and the dropout keep mask's columns: keys inside k (N_K), key_len aside (those read 0 / are kept)
n_ok = sp.Symbol("n_ok")
FWD_N_OK = (Term(n_ok, sp.StrictLessThan(offs_n, N_K_), CLAIM_FORWARD, "keys inside k"),)
FORWARD_GROUPS = {"row_ok": FWD_ROW_OK, "columns_ok": FWD_COLUMNS_OK, "tail_ok": FWD_TAIL_OK, "key_ok": FWD_KEY_OK,
                  "n_ok": FWD_N_OK,
                  "q_offset": FWD_Q_OFFSET, "out_offsets": FWD_OUT_OFFSETS, "kv_base": FWD_KV_BASE,
                  "kv_offsets": FWD_KV_OFFSETS, "mask_base": FWD_MASK_BASE, "mask_offset": FWD_MASK_OFFSET,
                  "map_base": FWD_MAP_BASE, "map_offset": FWD_MAP_OFFSET, "key_len": FWD_KEY_LEN,
                  "sink_offset": FWD_SINK, "slope_offset": SLOPE_OFFSET, "mm_row": FWD_MM_ROW,
                  "rng_offset": FWD_RNG_OFFSET, "keep_offset": KEEP_OFFSET, "q_tail_offset": FWD_TAIL_OFFSETS[:1],
                  "k_tail_offset": FWD_TAIL_OFFSETS[1:], "descale_offsets": FWD_DESCALE_OFFSETS}


# ----------------------------------------------------------------------------------
# The forward's TMA path (USE_TMA): the boxes its descriptors move, for the descriptors spec.launch.tma_descriptor
# builds over the operands spec.launch.forward_tma_operands names (claim tma_addresses).
# ----------------------------------------------------------------------------------
CLAIM_TMA = "tma_addresses"
#: the first row of this program's query tile (pid_m·BLOCK_M), the split head dim's first tail column
start_m_fwd = _int("start_m", nonnegative=True)
q_box, k_box, q_tail_box, k_tail_box = (_int(s) for s in ("q_box", "k_box", "q_tail_box", "k_tail_box"))
#: a box name ends so (generator.hygiene: a descriptor is read or written at such a name only)
BOX_SUFFIX = "_box"
#: [b, head, first row, first column] of a (B, H, N, D) tensor's descriptor, in int32 (TMA's coordinates);
#: Q's box is also the O tile's (same rows), K's also V's (same keys)
TMA_BOXES = {
    "q_box": (Term(q_box, T.box(T.int32(off_b), T.int32(off_h), T.int32(start_m_fwd), 0), CLAIM_TMA,
                   "q/out[b, h, start_m.., 0..]"),),
    "k_box": (Term(k_box, T.box(T.int32(off_b), T.int32(off_kvh), T.int32(start_n), 0), CLAIM_TMA,
                   "k/v[b, kv head, start_n.., 0..]"),),
    "q_tail_box": (Term(q_tail_box, T.box(T.int32(off_b), T.int32(off_h), T.int32(start_m_fwd), HEAD_DIM_), CLAIM_TMA,
                        "q[b, h, start_m.., HEAD_DIM..]"),),
    "k_tail_box": (Term(k_tail_box, T.box(T.int32(off_b), T.int32(off_kvh), T.int32(start_n), HEAD_DIM_), CLAIM_TMA,
                        "k[b, kv head, start_n.., HEAD_DIM..]"),),
}


def tma_element(descriptor, coords, lane):
    """What TMA moves at ``lane`` (``0 <= lane_d < block_d``) of a box at ``coords`` of ``descriptor`` =
    ``(shape, strides, block, padding)`` (spec.launch.tma_descriptor): ``(index, offset)``, the element ``coords +
    lane`` and its offset ``Σ_d (c_d + l_d)·stride_d``. TMA clips per dimension: a load zero-fills an
    element whose index is outside ``shape``, a store skips it (hardware hypothesis tma_out_of_bounds,
    spec.assumptions.HYPOTHESES)."""
    strides = descriptor[1]
    index = [sp.sympify(c) + l for c, l in zip(coords, lane)]
    return index, sp.Add(*[i * st for i, st in zip(index, strides)])


def box_coordinates(term: Term):
    """A printed box's coordinates, the int32 narrowing dropped (exact: each is inside its dimension, below
    2^31, claim tma_addresses); None when the term is not a box."""
    if not isinstance(term.expr, T.box):
        return None
    return [c.args[0] if isinstance(c, T.int32) else c for c in term.expr.args]


# ----------------------------------------------------------------------------------
# Softmax (_softmax_one_pass, _softmax_two_pass) and the merge kernels (_merge_state, _merge_states):
# row-major tiles of 2-D / 3-D tensors, every stride as spec.launch passes it (claim rows_addresses).
# ----------------------------------------------------------------------------------
CLAIM_ROWS = "rows_addresses"
s_split = _int("s", nonnegative=True)
ROW_STRIDES_2D = {name: _int(name) for name in (
    "stride_xr", "stride_xc", "stride_yr", "stride_yc",
    "stride_oa", "stride_oad", "stride_ob", "stride_obd", "stride_o", "stride_od", "stride_la", "stride_lb",
    "stride_l", "stride_os", "stride_or", "stride_osd", "stride_ls", "stride_lr", "stride_sink")}
R_ = ROW_STRIDES_2D
x_off, y_off = _int("x_off"), _int("y_off")
#: every product of a stride in int64 (a lane widened first, as decode's: W): softmax's x and the merges' partials
#: are any tensors the caller passes, with no contract rule bounding them by 2^31 elements (claim rows_addresses
#: checks the printed lines' widths)
SOFTMAX_OFFSETS = (
    Term(x_off, W(col(offs_m)) * R_["stride_xr"] + W(row(offs_n)) * R_["stride_xc"], CLAIM_ROWS, "x[r, c]"),
    Term(y_off, W(col(offs_m)) * R_["stride_yr"] + W(row(offs_n)) * R_["stride_yc"], CLAIM_ROWS, "y[r, c]"),
)
oa_off, ob_off, la_off, lb_off, mo_off, ml_off = (_int(s) for s in ("oa_off", "ob_off", "la_off", "lb_off",
                                                                    "mo_off", "ml_off"))
#: merge_state: side a and side b of row r, and the merged row
MERGE_OFFSETS = (
    Term(la_off, W(offs_m) * R_["stride_la"], CLAIM_ROWS, "lse_a[r]"),
    Term(lb_off, W(offs_m) * R_["stride_lb"], CLAIM_ROWS, "lse_b[r]"),
    Term(oa_off, W(col(offs_m)) * R_["stride_oa"] + W(row(offs_d)) * R_["stride_oad"], CLAIM_ROWS, "o_a[r, d]"),
    Term(ob_off, W(col(offs_m)) * R_["stride_ob"] + W(row(offs_d)) * R_["stride_obd"], CLAIM_ROWS, "o_b[r, d]"),
)
MERGE_OUT_OFFSETS = (
    Term(mo_off, W(col(offs_m)) * R_["stride_o"] + W(row(offs_d)) * R_["stride_od"], CLAIM_ROWS, "o[r, d]"),
    Term(ml_off, W(offs_m) * R_["stride_l"], CLAIM_ROWS, "lse[r]"),
)
#: merge_states: split s's partial of row r, and row r's sink (rows ordered with the query head last)
ls_off, os_off, msink_off = _int("ls_off"), _int("os_off"), _int("msink_off")
H_ = _int("H", positive=True)
MERGE_SPLIT_OFFSETS = (
    Term(ls_off, W(s_split) * R_["stride_ls"] + W(offs_m) * R_["stride_lr"], CLAIM_ROWS, "lse_s[s, r]"),
    Term(os_off, W(s_split) * R_["stride_os"] + W(col(offs_m)) * R_["stride_or"] + W(row(offs_d)) * R_["stride_osd"],
         CLAIM_ROWS, "o_s[s, r, d]"),
)
MERGE_SINK_OFFSET = (Term(msink_off, W(sp.Mod(offs_m, H_)) * R_["stride_sink"], CLAIM_ROWS, "sinks[r % H]"),)
#: the merges' masks (issue 24, masked-off lanes): rows r < R and columns d < D of the partials (claim rows_addresses:
#: exactly the rows and columns of o, every lane they admit inside every tensor)
R_ROWS, D_COLS = _int("R", positive=True), _int("D", positive=True)
MERGE_ROW_OK = (Term(row_ok, sp.StrictLessThan(offs_m, R_ROWS), CLAIM_ROWS, "rows inside x, the partials"),)
MERGE_D_OK = (Term(d_ok, sp.StrictLessThan(offs_d, D_COLS), CLAIM_ROWS, "columns inside the partials"),)
#: softmax's masks: the rows r < R are the merges' row_ok (MERGE_ROW_OK, one home), the columns c < N of x and y
N_COLS = _int("N", positive=True)
SOFTMAX_N_OK = (Term(n_ok, sp.StrictLessThan(offs_n, N_COLS), CLAIM_ROWS, "columns inside x"),)
ROWS_GROUPS = {"merge_row_ok": MERGE_ROW_OK, "merge_d_ok": MERGE_D_OK, "softmax_n_ok": SOFTMAX_N_OK,
               "softmax": SOFTMAX_OFFSETS, "merge": MERGE_OFFSETS, "merge_out": MERGE_OUT_OFFSETS,
               "merge_split": MERGE_SPLIT_OFFSETS, "merge_sink": MERGE_SINK_OFFSET}


# ----------------------------------------------------------------------------------
# The KV-cache append (_append_rows): new rows x (B, N_new, H, D) into the cache (contiguous or paged) or
# into a tensor of x's shape, the rotary tables' rows; every stride as spec.launch.append_launch passes it.
# ----------------------------------------------------------------------------------
CLAIM_APPEND = "append_addresses"
off_head, offs_t, offs_j = _int("off_head", nonnegative=True), _int("offs_t", nonnegative=True), _int("offs_j")
offs_pair, offs_freq, offs_pos = (_int(s, nonnegative=True) for s in ("offs_pair", "offs_freq", "offs_pos"))
APPEND_STRIDES = {name: _int(name) for name in (
    "stride_xb", "stride_xn", "stride_xh", "stride_xd", "stride_db", "stride_dn", "stride_dh", "stride_dd",
    "stride_bt_b", "stride_bt_p", "stride_cs", "stride_bi", "stride_cos_n", "stride_cos_d", "stride_sin_n",
    "stride_sin_d")}
AP_ = APPEND_STRIDES
acs_off, abi_off, abt_off = _int("acs_off"), _int("abi_off"), _int("abt_off")
#: the keys before the new ones, cache_seqlens[b] as the kernel loads it
start_new = _int("start_new")
x_base, dst_base = _int("x_base"), _int("dst_base")
xa_off, xp_off, dst_off, cos_off, sin_off = (_int(s) for s in ("xa_off", "xp_off", "dst_off", "cos_off", "sin_off"))
#: every product of a stride in int64, as decode's (W: a lane widened first): the append writes into the same
#: serving cache (claim append_addresses checks the printed lines' widths)
APPEND_LOOKUPS = (
    Term(acs_off, off_b * AP_["stride_cs"], CLAIM_APPEND, "cache_seqlens[b]"),
    Term(abi_off, off_b * AP_["stride_bi"], CLAIM_APPEND, "cache_batch_idx[b]"),
    Term(abt_off, off_b * AP_["stride_bt_b"] + W(P.page_idx) * AP_["stride_bt_p"], CLAIM_APPEND,
         "block_table[b, page_idx]"),
)
#: the new rows (token t of head off_head), then a lane d or its rotary partner
APPEND_X = (
    Term(x_base, off_b * AP_["stride_xb"] + W(col(offs_t)) * AP_["stride_xn"] + off_head * AP_["stride_xh"],
         CLAIM_APPEND, "x[b, t, head]"),
    Term(xa_off, x_base + W(row(offs_d)) * AP_["stride_xd"], CLAIM_APPEND, "x[b, t, head, d]"),
    Term(xp_off, x_base + W(row(offs_pair)) * AP_["stride_xd"], CLAIM_APPEND, "x[b, t, head, pair of d]"),
)
#: the destination's rows: a paged cache (page, slot), a contiguous cache (row off_bc, key j), a tensor like x
APPEND_DST_PAGED = (
    Term(dst_base, col(page) * AP_["stride_db"] + W(col(P.slot)) * AP_["stride_dn"] + off_head * AP_["stride_dh"],
         CLAIM_APPEND, "cache[page, slot, head]"),)
APPEND_DST_CACHE = (Term(dst_base, off_bc * AP_["stride_db"] + W(col(offs_j)) * AP_["stride_dn"]
                         + off_head * AP_["stride_dh"], CLAIM_APPEND, "cache[off_bc, j, head]"),)
APPEND_DST_TENSOR = (Term(dst_base, off_b * AP_["stride_db"] + W(col(offs_t)) * AP_["stride_dn"]
                          + off_head * AP_["stride_dh"], CLAIM_APPEND, "out[b, t, head]"),)
APPEND_DST = (Term(dst_off, dst_base + W(row(offs_d)) * AP_["stride_dd"], CLAIM_APPEND, "dst[row, head, d]"),)
APPEND_TABLES = (
    Term(cos_off, W(col(offs_pos)) * AP_["stride_cos_n"] + W(row(offs_freq)) * AP_["stride_cos_d"], CLAIM_APPEND,
         "cos[pos, freq]"),
    Term(sin_off, W(col(offs_pos)) * AP_["stride_sin_n"] + W(row(offs_freq)) * AP_["stride_sin_d"], CLAIM_APPEND,
         "sin[pos, freq]"),
)
#: new token t's cache index: the keys before it, then its own position t (the token, not the tile's lane)
APPEND_KEY = (Term(offs_j, start_new + offs_t, CLAIM_APPEND, "cache index of new token t: cache_seqlens[b] + t"),)
#: the tables' rows (SEQLEN_RO: rotary_cos.shape[0] as append_launch passes it); a row past them is not read and
#: rotates by 0 (cos 1, sin 0), FlashAttention's apply_rotary rule (its Triton kernel's mask rm_cs < seqlen_ro):
#: the host's keys never reach it (claim rotary_rotation), a causal q longer than the append can
seqlen_ro, pos_ok = _int("SEQLEN_RO", nonnegative=True), sp.Symbol("pos_ok")
APPEND_ROW_OK = (Term(pos_ok, sp.StrictLessThan(offs_pos, seqlen_ro), CLAIM_APPEND,
                      "the table row is read: pos < seqlen_ro (past it: cos 1, sin 0)"),)
#: the lanes rotary loads a partner and table entries for: d < rotary_dim = 2·ROTARY_HALF (ROTARY_HALF as
#: append_launch passes it), exactly the lanes spec.rotary.ROTATE rotates; the others are kept (claim append_addresses)
ro_ok = sp.Symbol("ro_ok")
APPEND_RO_LANE = (Term(ro_ok, sp.StrictLessThan(offs_d, 2 * RO.rotary_half), CLAIM_APPEND,
                       "a rotated lane: d < rotary_dim = 2·ROTARY_HALF (the others are kept)"),)
#: the append's lanes (issue 24, masked-off lanes): the tile's new tokens t < N_NEW and the columns d < HEAD_DIM
#: (x's N_new and D, as append_launch passes them); the loads and stores combine them (row_mask = t_ok & d_ok, the
#: partner's t_ok & ro_ok, the tables' also pos_ok). Claim append_addresses proves every lane each admits inside its
#: tensor and that they admit exactly the rows and columns the reference writes
N_NEW_ = _int("N_NEW", positive=True)
t_ok = sp.Symbol("t_ok")
APPEND_T_OK = (Term(t_ok, sp.StrictLessThan(offs_t, N_NEW_), CLAIM_APPEND, "the tile's new tokens: t < N_new"),)
APPEND_D_OK = (Term(d_ok, sp.StrictLessThan(offs_d, HEAD_DIM_), CLAIM_APPEND, "x's and the destination's columns"),)
APPEND_GROUPS = {"lookups": APPEND_LOOKUPS, "key": APPEND_KEY, "x": APPEND_X, "dst_paged": APPEND_DST_PAGED,
                 "dst_cache": APPEND_DST_CACHE, "dst_tensor": APPEND_DST_TENSOR, "dst": APPEND_DST,
                 "tables": APPEND_TABLES, "row_ok": APPEND_ROW_OK, "ro_lane": APPEND_RO_LANE, "t_ok": APPEND_T_OK,
                 "d_ok": APPEND_D_OK}


# ----------------------------------------------------------------------------------
# The backward's preprocess (_attn_bwd_preprocess): O, dO, dL/dlse, the saved lse, the backward's own rows
# (Δ, lse2, dsink: one layout, made by spec.launch.backward_row_tensors) and the sinks, for the strides
# spec.launch.preprocess_launch passes (claim backward_addresses). The dK/dV and dQ kernels: below.
# ----------------------------------------------------------------------------------
CLAIM_BACKWARD = "backward_addresses"
BACKWARD_STRIDES = {name: _int(name) for name in (
    "stride_ob", "stride_oh", "stride_om", "stride_od", "stride_dob", "stride_doh", "stride_dom", "stride_dod",
    "stride_lb", "stride_lh", "stride_lm", "stride_slb", "stride_slh", "stride_slm", "stride_rb", "stride_rh",
    "stride_rm", "stride_sink")}
B_ = BACKWARD_STRIDES
bo_off, bdo_off, dlse_off, slse_off, brow_off, bsink_off = (_int(s) for s in (
    "bo_off", "bdo_off", "dlse_off", "slse_off", "brow_off", "bsink_off"))
PREPROCESS_OFFSETS = (
    Term(bo_off, off_b * B_["stride_ob"] + off_h * B_["stride_oh"] + col(offs_m) * B_["stride_om"]
         + row(offs_d) * B_["stride_od"], CLAIM_BACKWARD, "out[b, h, i, d]"),
    Term(bdo_off, off_b * B_["stride_dob"] + off_h * B_["stride_doh"] + col(offs_m) * B_["stride_dom"]
         + row(offs_d) * B_["stride_dod"], CLAIM_BACKWARD, "grad_out[b, h, i, d]"),
    Term(dlse_off, off_b * B_["stride_lb"] + off_h * B_["stride_lh"] + W(offs_m) * B_["stride_lm"], CLAIM_BACKWARD,
         "grad_lse[b, h, i]"),
    Term(slse_off, off_b * B_["stride_slb"] + off_h * B_["stride_slh"] + W(offs_m) * B_["stride_slm"],
         CLAIM_BACKWARD, "lse[b, h, i] (saved by the forward)"),
    Term(brow_off, off_b * B_["stride_rb"] + off_h * B_["stride_rh"] + W(offs_m) * B_["stride_rm"], CLAIM_BACKWARD,
         "delta, lse2, dsink[b, h, i]"),
    Term(bsink_off, off_h * B_["stride_sink"], CLAIM_BACKWARD, "sinks[h]"),
)
#: the preprocess's masks (issue 24, masked-off lanes): its rows inside out (N_Q: preprocess_launch's rows) and the
#: columns d < HEAD_DIM; claim backward_addresses proves the lanes they admit inside every tensor, every row and
#: column admitted
BWD_PRE_ROW_OK = (Term(row_ok, sp.StrictLessThan(offs_m, N_Q), CLAIM_BACKWARD, "the tile's rows inside out"),)
BWD_PRE_D_OK = (Term(d_ok, sp.StrictLessThan(offs_d, HEAD_DIM_), CLAIM_BACKWARD, "out's columns"),)
BACKWARD_GROUPS = {"preprocess": PREPROCESS_OFFSETS, "row_ok": BWD_PRE_ROW_OK, "d_ok": BWD_PRE_D_OK}


# ----------------------------------------------------------------------------------
# The backward's dK/dV and dQ kernels (_attn_bwd_dkdv, _attn_bwd_dq, their stages, _attn_bwd_rows,
# _attn_bwd_mask): every load and store offset, for the strides spec.launch.dkdv_launch and
# spec.launch.dq_launch pass (claim backward_kernel_addresses; the packed batch: claim varlen_addresses).
# ----------------------------------------------------------------------------------
CLAIM_BACKWARD_KERNELS = "backward_kernel_addresses"
#: the map tiles of the dense block map both loops read (MAP_BLOCK: a multiple of each loop's tiles);
#: a dK/dV step's first query row, a dQ tile's first row (int32: program id x tile, or the loop's step)
MAP_BLOCK_M, MAP_BLOCK_N = _int("MAP_BLOCK_M", positive=True), _int("MAP_BLOCK_N", positive=True)
start_m = _int("start_m", nonnegative=True)
BACKWARD_KERNEL_STRIDES = {name: _int(name) for name in (
    "stride_qb", "stride_qh", "stride_qm", "stride_qd", "stride_kb", "stride_kh", "stride_kn", "stride_kd",
    "stride_vb", "stride_vh", "stride_vn", "stride_vd", "stride_dob", "stride_doh", "stride_dom", "stride_dod",
    "stride_dqb", "stride_dqh", "stride_dqm", "stride_dqd", "stride_dkb", "stride_dkh", "stride_dkn", "stride_dkd",
    "stride_dvb", "stride_dvh", "stride_dvn", "stride_dvd", "stride_rb", "stride_rh", "stride_rm",
    "stride_mb", "stride_mh", "stride_mm", "stride_mn", "stride_map_b", "stride_map_h", "stride_map_m",
    "stride_map_n", "stride_kl", "stride_sgp")}
BK_ = BACKWARD_KERNEL_STRIDES
#: the per-program (per query head) parts of an offset, int64 (off_b, off_kvh, off_h are), printed before
#: the loops and passed to the helpers with the unmoved pointers
bk_base, bv_base, bq_base, bdo_base, brow_base, bmask_base, mapc_base, mapr_base = (_int(s) for s in (
    "bk_base", "bv_base", "bq_base", "bdo_base", "brow_base", "bmask_base", "mapc_base", "mapr_base"))
bk_off, bv_off, bvt_off, dk_off, dv_off, dq_off = (_int(s) for s in ("bk_off", "bv_off", "bvt_off", "dk_off",
                                                                   "dv_off", "dq_off"))
q_rows_off, do_rows_off, drow_off, bmask_off, mapc_off, mapr_off, bkl_off = (_int(s) for s in (
    "q_rows_off", "do_rows_off", "drow_off", "bmask_off", "mapc_off", "mapr_off", "bkl_off"))
#: this program's K/V head (both kernels), then a tile's keys offs_n in it: K and V key-major (dK/dV's tiles,
#: dQ's K), V transposed (dQ's Vᵀ: d down the rows, keys across)
BWD_KV_BASE = (
    Term(bk_base, off_b * BK_["stride_kb"] + off_kvh * BK_["stride_kh"], CLAIM_BACKWARD_KERNELS, "k[b, kv head]"),
    Term(bv_base, off_b * BK_["stride_vb"] + off_kvh * BK_["stride_vh"], CLAIM_BACKWARD_KERNELS, "v[b, kv head]"),
)
BWD_KV_OFFSETS = (
    Term(bk_off, bk_base + col(offs_n) * BK_["stride_kn"] + row(offs_d) * BK_["stride_kd"], CLAIM_BACKWARD_KERNELS,
         "k[b, kv head, j, d]"),
    Term(bv_off, bv_base + col(offs_n) * BK_["stride_vn"] + row(offs_dv) * BK_["stride_vd"], CLAIM_BACKWARD_KERNELS,
         "v[b, kv head, j, dv]"),
)
BWD_VT_OFFSET = (Term(bvt_off, bv_base + row(offs_n) * BK_["stride_vn"] + col(offs_dv) * BK_["stride_vd"],
                      CLAIM_BACKWARD_KERNELS, "v[b, kv head, j, dv], transposed (dv down, j across)"),)
#: dK/dV's stores: its key tile of dk (D wide) and dv (D_v wide)
BWD_GRAD_KV = (
    Term(dk_off, off_b * BK_["stride_dkb"] + off_kvh * BK_["stride_dkh"] + col(offs_n) * BK_["stride_dkn"]
         + row(offs_d) * BK_["stride_dkd"], CLAIM_BACKWARD_KERNELS, "dk[b, kv head, j, d]"),
    Term(dv_off, off_b * BK_["stride_dvb"] + off_kvh * BK_["stride_dvh"] + col(offs_n) * BK_["stride_dvn"]
         + row(offs_dv) * BK_["stride_dvd"], CLAIM_BACKWARD_KERNELS, "dv[b, kv head, j, dv]"),
)
#: dQ's store: its row tile of dq
BWD_DQ = (Term(dq_off, off_b * BK_["stride_dqb"] + off_h * BK_["stride_dqh"] + col(offs_m) * BK_["stride_dqm"]
               + row(offs_d) * BK_["stride_dqd"], CLAIM_BACKWARD_KERNELS, "dq[b, h, i, d]"),)
#: a query head's rows: of q, of grad_out and of Δ / lse2 (one layout: spec.launch.backward_row_tensors)
BWD_ROW_BASE = (
    Term(bq_base, off_b * BK_["stride_qb"] + off_h * BK_["stride_qh"], CLAIM_BACKWARD_KERNELS, "q[b, h]"),
    Term(bdo_base, off_b * BK_["stride_dob"] + off_h * BK_["stride_doh"], CLAIM_BACKWARD_KERNELS, "grad_out[b, h]"),
    Term(brow_base, off_b * BK_["stride_rb"] + off_h * BK_["stride_rh"], CLAIM_BACKWARD_KERNELS, "delta, lse2[b, h]"),
)
#: _attn_bwd_rows: the rows offs_m of that head
BWD_ROWS = (
    Term(q_rows_off, bq_base + col(offs_m) * BK_["stride_qm"] + row(offs_d) * BK_["stride_qd"], CLAIM_BACKWARD_KERNELS,
         "q[b, h, i, d]"),
    Term(do_rows_off, bdo_base + col(offs_m) * BK_["stride_dom"] + row(offs_dv) * BK_["stride_dod"],
         CLAIM_BACKWARD_KERNELS, "grad_out[b, h, i, dv]"),
    Term(drow_off, brow_base + W(offs_m) * BK_["stride_rm"], CLAIM_BACKWARD_KERNELS, "delta, lse2[b, h, i]"),
)
#: the dense bool mask of a query head, then _attn_bwd_mask's element (i, j): the tiles of query rows and keys
#: the caller broadcasts to its layout (row-major for dQ, key-major for dK/dV)
BWD_MASK_BASE = (Term(bmask_base, off_b * BK_["stride_mb"] + off_h * BK_["stride_mh"], CLAIM_BACKWARD_KERNELS,
                      "mask[b, h]"),)
BWD_MASK = (Term(bmask_off, bmask_base + n.i * BK_["stride_mm"] + n.j * BK_["stride_mn"], CLAIM_BACKWARD_KERNELS,
                 "mask[b, h, i, j]"),)
#: the block map at MAP_BLOCK tiles: dK/dV's column of its key tile, then a row step's map tile; dQ's row of its
#: query tile, then a key tile's map tile
BWD_MAP_COL = (
    Term(mapc_base, off_b * BK_["stride_map_b"] + off_h * BK_["stride_map_h"]
         + W(sp.floor(start_n / MAP_BLOCK_N)) * BK_["stride_map_n"], CLAIM_BACKWARD_KERNELS, "block_map[b, h, :, key tile]"),
    Term(mapc_off, mapc_base + W(sp.floor(start_m / MAP_BLOCK_M)) * BK_["stride_map_m"], CLAIM_BACKWARD_KERNELS,
         "block_map[b, h, query tile, key tile]"),
)
BWD_MAP_ROW = (
    Term(mapr_base, off_b * BK_["stride_map_b"] + off_h * BK_["stride_map_h"]
         + W(sp.floor(start_m / MAP_BLOCK_M)) * BK_["stride_map_m"], CLAIM_BACKWARD_KERNELS, "block_map[b, h, query tile]"),
    Term(mapr_off, mapr_base + W(sp.floor(start_n / MAP_BLOCK_N)) * BK_["stride_map_n"], CLAIM_BACKWARD_KERNELS,
         "block_map[b, h, query tile, key tile]"),
)
BWD_KEY_LEN = (Term(bkl_off, off_b * BK_["stride_kl"], CLAIM_BACKWARD_KERNELS, "key_lengths[b]"),)
#: the head dim split (claim head_dim_split: D held as a main part HEAD_DIM and a tail HEAD_DIM_TAIL, 192 = 128 + 64):
#: k / dk at [b, kv head, j, dt], q / dq at [b, h, i, dt], dt in [HEAD_DIM, D): the offsets above at lane offs_dt
bk_tail_off, q_tail_rows_off, dk_tail_off, dq_tail_off = (_int(s) for s in (
    "bk_tail_off", "q_tail_rows_off", "dk_tail_off", "dq_tail_off"))
BWD_TAILS = (
    Term(bk_tail_off, BWD_KV_OFFSETS[0].expr.xreplace({offs_d: offs_dt}), CLAIM_BACKWARD_KERNELS, "k[b, kv head, j, dt]"),
    Term(q_tail_rows_off, BWD_ROWS[0].expr.xreplace({offs_d: offs_dt}), CLAIM_BACKWARD_KERNELS, "q[b, h, i, dt]"),
    Term(dk_tail_off, BWD_GRAD_KV[0].expr.xreplace({offs_d: offs_dt}), CLAIM_BACKWARD_KERNELS, "dk[b, kv head, j, dt]"),
    Term(dq_tail_off, BWD_DQ[0].expr.xreplace({offs_d: offs_dt}), CLAIM_BACKWARD_KERNELS, "dq[b, h, i, dt]"),
)
#: a user score_mod (issue 28): the dQ program (pid_m, off_h, off_b)'s own row of the parameter-gradient buffer
#: (grid[0]·grid[1]·grid[2] rows of len(SF) fp32 entries, spec.launch.score_grad_launch), num_pid_m = grid[0],
#: H = grid[1] (the query heads: spec.launch.dq_launch); then entry
#: offs_e of that row (the buffer's entries are contiguous: column stride 1); no two programs share a row
num_pid_m = _int("num_pid_m", positive=True)
offs_e = _int("offs_e", nonnegative=True)
sg_base, sg_off = _int("sg_base"), _int("sg_off")
BWD_SCORE_GRAD_ROW = (Term(sg_base, ((off_b * H_ + off_h) * num_pid_m + pid_m) * BK_["stride_sgp"], CLAIM_BACKWARD_KERNELS,
                           "score_grad[this program's row]"),)
BWD_SCORE_GRAD = (Term(sg_off, sg_base + offs_e, CLAIM_BACKWARD_KERNELS, "score_grad[row, e]"),)
#: _score_param_scatter's lanes: a chunk's entries offs_e up to the tile's largest entry hi (the chunks start at the
#: tile's smallest, lo, rounded down to a multiple of CHUNK: BACKWARD_KERNEL_LANES' first_e and e); claim
#: backward_kernel_addresses proves every entry it admits inside the gradient row and every entry lo..hi the tile
#: read admitted
sg_lo, sg_hi, entry_ok = _int("lo"), _int("hi"), sp.Symbol("entry_ok")
BWD_SCORE_GRAD_OK = (Term(entry_ok, sp.LessThan(offs_e, sg_hi), CLAIM_BACKWARD_KERNELS,
                          "the chunk's entries up to the tile's largest, hi"),)
#: the dK/dV and dQ kernels' masks (issue 24, masked-off lanes): the forward's comparisons (FWD_*_OK: one home), here
#: cited to claim backward_kernel_addresses, which proves every lane each admits inside its tensor and exactly the
#: rows i < N_Q, columns d < HEAD_DIM (dt < D, dv < HEAD_DIM_V), keys j < N_K (key_ok: and j < key_len) admitted
BWD_ROW_OK, BWD_COLUMNS_OK, BWD_TAIL_OK, BWD_KEY_OK, BWD_N_OK = (
    tuple(Term(t.symbol, t.expr, CLAIM_BACKWARD_KERNELS, t.note) for t in group)
    for group in (FWD_ROW_OK, FWD_COLUMNS_OK, FWD_TAIL_OK, FWD_KEY_OK, FWD_N_OK))
#: _attn_bwd_mask's dense mask tile: the element (i, j) of the caller's broadcast row and key tiles inside the mask,
#: row_ok's and n_ok's comparisons (one home) at i and j (claim backward_kernel_addresses: exactly i < N_Q, j < N_K)
ij_ok = sp.Symbol("ij_ok")
BWD_MASK_OK = (Term(ij_ok, sp.And(BWD_ROW_OK[0].expr.xreplace({offs_m: n.i}), BWD_N_OK[0].expr.xreplace({offs_n: n.j})),
                    CLAIM_BACKWARD_KERNELS, "the tile's elements (i, j) inside the mask"),)
BACKWARD_KERNEL_GROUPS = {"row_ok": BWD_ROW_OK, "columns_ok": BWD_COLUMNS_OK, "tail_ok": BWD_TAIL_OK,
                          "key_ok": BWD_KEY_OK, "n_ok": BWD_N_OK, "mask_ok": BWD_MASK_OK,
                          "kv_base": BWD_KV_BASE, "kv_offsets": BWD_KV_OFFSETS, "vt_offset": BWD_VT_OFFSET,
                          "grad_kv": BWD_GRAD_KV, "dq": BWD_DQ, "row_base": BWD_ROW_BASE, "rows": BWD_ROWS,
                          "mask_base": BWD_MASK_BASE, "mask": BWD_MASK, "map_col": BWD_MAP_COL, "map_row": BWD_MAP_ROW,
                          "key_len": BWD_KEY_LEN, "score_grad_row": BWD_SCORE_GRAD_ROW, "score_grad": BWD_SCORE_GRAD,
                          "score_grad_ok": BWD_SCORE_GRAD_OK,
                          "k_tail": BWD_TAILS[:1], "q_tail_rows": BWD_TAILS[1:2], "dk_tail": BWD_TAILS[2:3],
                          "dq_tail": BWD_TAILS[3:]}


# ----------------------------------------------------------------------------------
# The launch grid: which (tile, head, batch) a program is, for the grids spec.launch computes (claim
# launch_grid). CUDA caps a grid's axes 1 and 2 at spec.launch.GRID_AXIS_MAX = 65535 programs and axis 0 at
# 2^31 − 1, and launches axis 0 fastest. So a per-head kernel puts its tiles on axis 0, the head on axis 1 and
# the batch on axis 2 (FlashAttention's layout): each index is its program id, no product B·H is an axis,
# and the launch order is the one (tile, b·H + h) had (the tiles of one head side by side: their K/V
# reads can hit L2). Decode folds its row tiles and splits into axis 0, row tile fastest (both 64-head tiles
# of one split side by side), KV head on axis 1, batch on axis 2. The batch and head indices are int64 (their
# products with strides are), the tiles and the split int32.
# ----------------------------------------------------------------------------------
CLAIM_GRID = "launch_grid"
#: decode: its row tiles per (split, KV head), cdiv(GROUP·N_Q, BLOCK_M) (spec.launch.decode_launch passes it)
ROW_TILES = _int("ROW_TILES", positive=True)
#: the forward: its query tile (pid_m; start_m = pid_m·BLOCK_M)
GRID_TILE = (Term(pid_m, T.program_id(0), CLAIM_GRID, "grid axis 0: the query tile"),)
#: the per-head kernels (forward, dropout mask, preprocess, dQ): axis 1 the query head, axis 2 the batch entry
GRID_HEAD = (
    Term(off_h, T.int64(T.program_id(1)), CLAIM_GRID, "grid axis 1: the query head"),
    Term(off_b, T.int64(T.program_id(2)), CLAIM_GRID, "grid axis 2: the batch entry (packed: the segment)"),
)
#: dK/dV: axis 1 the K/V head, axis 2 the batch entry
GRID_KV_HEAD = (
    Term(off_kvh, T.int64(T.program_id(1)), CLAIM_GRID, "grid axis 1: the K/V head"),
    Term(off_b, T.int64(T.program_id(2)), CLAIM_GRID, "grid axis 2: the batch entry (packed: the segment)"),
)
#: decode: axis 0 holds ROW_TILES row tiles per split, the row tile fastest; then the K/V head and the batch entry
GRID_DECODE = (
    Term(pid_m, sp.Mod(T.program_id(0), ROW_TILES), CLAIM_GRID, "grid axis 0, fastest: the row tile"),
    Term(P.split, sp.floor(T.program_id(0) / ROW_TILES), CLAIM_GRID, "grid axis 0, then: the split"),
    Term(off_kvh, T.int64(T.program_id(1)), CLAIM_GRID, "grid axis 1: the K/V head"),
    Term(off_b, T.int64(T.program_id(2)), CLAIM_GRID, "grid axis 2: the batch entry"),
)
#: the KV append: axis 0 its token tiles, axis 1 the cache's (K/V) head, axis 2 the batch entry
GRID_APPEND = (
    Term(off_head, T.int64(T.program_id(1)), CLAIM_GRID, "grid axis 1: the K/V head"),
    Term(off_b, T.int64(T.program_id(2)), CLAIM_GRID, "grid axis 2: the batch entry"),
)
GRID_GROUPS = {"tile": GRID_TILE, "head": GRID_HEAD, "kv_head": GRID_KV_HEAD, "decode": GRID_DECODE,
               "append": GRID_APPEND}


# ----------------------------------------------------------------------------------
# The lanes (issue 24): the index vectors every printed offset and mask above is evaluated on, printed too —
# ``offs_x = base + arange(width)`` (``tl.arange(0, width)``: lane l at index base + l), and the simple tile starts
# they read (``start_m = pid_m * BLOCK_M``). Each address claim reads its kernels' lane terms (``base``, ``width``:
# spec.proofs.addresses._lane) instead of assuming them: a lane ``HEAD_DIM - 1 + arange(BLOCK_DT)`` or a row tile
# ``start_m + arange(BLOCK_N)`` fails it. The tile loops that produce the starts are printed too (``*_LOOPS``: ``for
# start_n in range(lo, hi, BLOCK_N):``, a ``tile_range`` term), and the claims read their start, stop and step.
# ----------------------------------------------------------------------------------
#: the head-dim tile widths (spec.launch.tile_widths: q/k's main part, its tail, v/out's) and the append's token tile
BLOCK_D_, BLOCK_DV_, BLOCK_DT_, BLOCK_T_ = (_int(s, positive=True) for s in ("BLOCK_D", "BLOCK_DV", "BLOCK_DT",
                                                                              "BLOCK_T"))
#: a user score_mod's gradient scatter: its entries per chunk, the chunk loop's first start and a chunk's start
CHUNK_, first_e, start_e = _int("CHUNK", positive=True), _int("first_e"), _int("start_e")


def _lanes_of(claim: str, **lanes) -> dict:
    """``{name: (Term,)}``: each lane ``symbol = expr`` (an ``(symbol, expr, note)`` triple) cited to ``claim``."""
    return {name: (Term(sym, expr, claim, note),) for name, (sym, expr, note) in lanes.items()}


def _head_dim_lanes(claim: str) -> dict:
    """q/k's main part ``arange(BLOCK_D)``, v/out's ``arange(BLOCK_DV)``, a split head dim's tail ``HEAD_DIM +
    arange(BLOCK_DT)`` (claim head_dim_split: columns [HEAD_DIM, D))."""
    return _lanes_of(claim,
                     d=(offs_d, T.arange(BLOCK_D_), "q/k's columns (padded; a split head dim's main part HEAD_DIM)"),
                     dv=(offs_dv, T.arange(BLOCK_DV_), "v/out's columns (padded; BLOCK_DV = BLOCK_D unless D_v != D)"),
                     dt=(offs_dt, HEAD_DIM_ + T.arange(BLOCK_DT_), "a split head dim's tail columns [HEAD_DIM, D)"))


#: decode (_decode_fwd): its rows (GROUP heads x N_Q tokens, BLOCK_M a program), the head dims, a key tile
DECODE_LANES = {
    **_lanes_of(CLAIM_DECODE, m=(offs_m, pid_m * n.B_r + T.arange(n.B_r), "this program's rows (row tile pid_m)"),
                n=(offs_n, start_n + T.arange(n.B_c), "a key tile's keys")),
    **_head_dim_lanes(CLAIM_DECODE)}
#: the dense forward (_attn_fwd, _attn_fwd_stage; _dropout_mask: its own grid, start_m from program id 0)
FORWARD_LANES = {
    **_lanes_of(CLAIM_FORWARD, start_m=(start_m, pid_m * n.B_r, "the query tile's first row"),
                start_m_pid=(start_m, T.program_id(0) * n.B_r, "the query tile's first row (grid axis 0)"),
                m=(offs_m, start_m + T.arange(n.B_r), "the query tile's rows"),
                n=(offs_n, start_n + T.arange(n.B_c), "a key tile's keys")),
    **_head_dim_lanes(CLAIM_FORWARD)}
#: the backward's preprocess (_attn_bwd_preprocess)
BACKWARD_LANES = _lanes_of(
    CLAIM_BACKWARD, start_m=(start_m, T.program_id(0) * n.B_r, "the row tile's first row (grid axis 0)"),
    m=(offs_m, start_m + T.arange(n.B_r), "the row tile's rows"),
    d=(offs_d, T.arange(BLOCK_D_), "out's columns (padded)"))
#: the dK/dV kernel (its key tile: start_n from program id 0; a row step's rows) and the dQ kernel (its row tile; a
#: key step's keys; a user score_mod's gradient scatter _score_param_scatter: its chunk loop's first start first_e
#: and a chunk's entries offs_e; the loop ``for start_e in range(first_e, hi + 1, CHUNK)`` is BACKWARD_KERNEL_LOOPS' e)
BACKWARD_KERNEL_LANES = {
    **_lanes_of(CLAIM_BACKWARD_KERNELS,
                start_n=(start_n, T.program_id(0) * n.B_c, "dK/dV: the key tile's first key (grid axis 0)"),
                start_m=(start_m, T.program_id(0) * n.B_r, "dQ: the row tile's first row (grid axis 0)"),
                m=(offs_m, start_m + T.arange(n.B_r), "a tile of query rows"),
                n=(offs_n, start_n + T.arange(n.B_c), "a tile of keys"),
                first_e=(first_e, sp.floor(sg_lo / CHUNK_) * CHUNK_,
                         "score_mod gradient: the chunk loop's first start, lo rounded down to a multiple of CHUNK"),
                e=(offs_e, start_e + T.arange(CHUNK_), "score_mod gradient: a chunk's entries")),
    **_head_dim_lanes(CLAIM_BACKWARD_KERNELS)}
#: softmax and the merges: row tile program id 0, columns of a block (one pass: the whole row) or a step
ROWS_LANES = _lanes_of(
    CLAIM_ROWS, m=(offs_m, T.program_id(0) * n.B_r + T.arange(n.B_r), "this program's rows (grid axis 0)"),
    n0=(offs_n, T.arange(n.B_c), "softmax, one pass: the row's columns"),
    n=(offs_n, start_n + T.arange(n.B_c), "softmax, two passes: a step's columns"),
    d=(offs_d, T.arange(BLOCK_D_), "the partials' columns"))
#: the KV append (_append_rows): a token tile (grid axis 0) and the head dim
APPEND_LANES = _lanes_of(
    CLAIM_APPEND, t=(offs_t, T.program_id(0) * BLOCK_T_ + T.arange(BLOCK_T_), "this program's new tokens (grid axis 0)"),
    d=(offs_d, T.arange(BLOCK_D_), "the row's columns"))
#: every kernel family's lanes, by the name its render context gives them
LANES = {"decode": DECODE_LANES, "forward": FORWARD_LANES, "backward": BACKWARD_LANES,
         "backward_kernels": BACKWARD_KERNEL_LANES, "rows": ROWS_LANES, "append": APPEND_LANES}


# ----------------------------------------------------------------------------------
# The tile loops (issue 24): the loop headers that produce the lanes' tile starts, printed from a term ``x =
# tile_range(start, stop, step)`` as ``for x in range(start, stop, step):`` (generator.hygiene rule 9 refuses any
# other loop header). The address claims read start, stop and step from the term (spec.proofs.addresses._Loop: the
# tiles x = start + t·step < stop) instead of assuming them: a step 2·BLOCK_N, a stop hi - 1 or a start lo + 1 fails.
# ``lo``, ``hi``: a stage's (or a scatter tile's) bounds, its parameters (a stage's from spec.structure's table,
# claim stages_cover).
# ----------------------------------------------------------------------------------
lo_, hi_ = _int("lo"), _int("hi")
#: decode (_decode_fwd): a split's key tiles
DECODE_LOOPS = _lanes_of(CLAIM_DECODE, n=(start_n, T.tile_range(P.split_lo, P.split_hi, n.B_c), "the split's key tiles"))
#: the dense forward: a stage's key tiles (_attn_fwd_stage), _dropout_keep's every key tile
FORWARD_LOOPS = _lanes_of(CLAIM_FORWARD, n=(start_n, T.tile_range(lo_, hi_, n.B_c), "a stage's key tiles [lo, hi)"),
                          n_all=(start_n, T.tile_range(0, N_K_, n.B_c), "every key tile"))
#: the dK/dV kernel's row steps and the dQ kernel's key steps (a stage's [lo, hi)), a user score_mod's gradient chunks,
#: and dK/dV's index loop over the GROUP query heads of its K/V head (g: spec.structure.GQA_GROUP_HEAD's, which maps it
#: to the query head off_kvh·GROUP + g)
BACKWARD_KERNEL_LOOPS = _lanes_of(
    CLAIM_BACKWARD_KERNELS, m=(start_m, T.tile_range(lo_, hi_, n.B_r), "a stage's row tiles [lo, hi)"),
    n=(start_n, T.tile_range(lo_, hi_, n.B_c), "a stage's key tiles [lo, hi)"),
    e=(start_e, T.tile_range(first_e, sg_hi + 1, CHUNK_), "score_mod gradient: the chunks up to the tile's largest entry"),
    g=(ST.g, T.tile_range(0, ST.group), "the query heads of this K/V head, each once"))
#: the merge's splits (_merge_states: split s's partial read at its printed offsets MERGE_SPLIT_OFFSETS)
S_SPLITS = _int("S", positive=True)
#: softmax's two passes: a row's column steps; _merge_states' index loop over the S splits
ROWS_LOOPS = _lanes_of(CLAIM_ROWS, n=(start_n, T.tile_range(0, N_COLS, n.B_c), "the row's column steps"),
                       s=(s_split, T.tile_range(S_SPLITS), "the splits, each once"))
#: every kernel family's loops, by the name its render context gives them
LOOPS = {"decode": DECODE_LOOPS, "forward": FORWARD_LOOPS, "backward_kernels": BACKWARD_KERNEL_LOOPS,
         "rows": ROWS_LOOPS}
