"""Proofs that the printed offsets (``spec.addresses``) reach the intended elements, for the
arguments the launch functions (``spec.launch``) pass.

Each claim evaluates the launch function on symbolic tensors (``spec.addresses.symbolic``: every
size and stride a free integer, strides >= 0), substitutes its output (strides, sizes, grid) into
the printed offset terms, and proves

* **the element**: the offset equals ``Σ_d index_d · stride_d`` of the element the reference reads
  (a polynomial identity in the symbolic strides, reduced by SymPy to a canonical zero; a loaded
  value — ``cu_seqlens[b]``, ``block_table[b, p]`` — is an uninterpreted function of the offset it
  is loaded from, so reading the wrong entry leaves a residual);
* **the extent**: that index lies inside the tensor's shape, for every program of the launch grid
  and every lane the load or store's mask lets through (decided by z3 over unbounded integers;
  lanes the mask turns off are not dereferenced: ``tl.load``/``tl.store`` with that mask).

The kernel's address arithmetic is integer arithmetic on int64 (``off_b``, ``off_kvh``, the heads,
the segment starts and the pages are cast to int64 before they scale a stride); the proofs are
over mathematical integers, which int64 represents for every tensor smaller than 2^63 elements.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
import re

import sympy as sp
import z3

from spec import addresses as A
from spec import launch as L
from spec import notation as n
from spec import paged as P
from spec import rotary as RO
from spec import terms
from spec import varlen as V
from spec.printer import print_term
from spec.proofs.paged import _Z3
from spec.proofs.tools import ZERO, difference, result
from spec.proofs.tools import decide as _decide  # the claims' one z3 case
from spec.proofs.z3_int32 import narrow_stride_arithmetic
from spec.registry import claim
from spec.terms import col, row


def _lanes(e):
    """A tile offset lane by lane: ``x[:, None]`` and ``x[None, :]`` are ``x`` at the lane; a widening
    ``tl.cast(x, tl.int64)`` is ``x`` (the same value: the widths are ``_widths_case``'s)."""
    return sp.sympify(e).replace(col, lambda x: x).replace(row, lambda x: x).replace(terms.int64, lambda x: x)


def _widths_case(name, chain, widths, allowed=()):
    """The integer widths of printed lines, as the kernel computes them (``spec.proofs.z3_int32.
    narrow_stride_arithmetic`` on each line of ``chain``, in the kernel's order: a line's value has the width
    its operations give it, and a later line reads it so; ``widths``: the names the template gives int64
    itself, e.g. a page loaded ``.to(tl.int64)``): 0 when every ``*``, ``+``, ``-`` on a stride is int64, or
    its strides all belong to one set of ``allowed`` (the (row, column) strides of a tensor whose in-head offset
    ``row·stride_row + col·stride_col`` assumption index_int32 bounds: claim int32_index_arithmetic proves each
    product and their sum of an unmasked lane fit int32); else the other int32 operations, by line."""
    widths, found = dict(widths), []
    for t in chain:
        _, w, narrow = narrow_stride_arithmetic(print_term(t, comment=False), widths)
        widths[t.symbol.name] = w
        found += [f"{t.symbol.name}: {op}" for op in narrow
                  if not any(set(re.findall(r"stride_\w+", op)) <= set(pair) for pair in allowed)]
    return (name, ZERO if not found else sp.Symbol("int32 arithmetic on a stride in " + "; ".join(found)))


class _Z3A(_Z3):
    """``spec.proofs.paged``'s SymPy -> z3 map, plus ``Mod`` (non-negative operands)."""

    def __call__(self, e):
        e = sp.sympify(e)
        if isinstance(e, terms.int64):  # a widening: the same value
            return self(e.args[0])
        if isinstance(e, terms.program_id):  # a program's index on grid axis a
            return self.vars.setdefault(f"program_id_{int(e.args[0])}", z3.Int(f"program_id_{int(e.args[0])}"))
        if isinstance(e, sp.Mod):
            return self(e.args[0]) % self(e.args[1])
        if isinstance(e, sp.StrictGreaterThan):
            return self(e.lhs) > self(e.rhs)
        if isinstance(e, sp.GreaterThan):
            return self(e.lhs) >= self(e.rhs)
        return super().__call__(e)


def _grid_program(group, grid, ints, z):
    """One program of ``grid``, ``program_id(a)`` in ``[0, grid[a])``, and the z3 value there of each printed
    term of ``group`` (``spec.addresses.GRID_GROUPS``, its sizes as ``ints`` passes them): ``(hyp, {symbol:
    value})``."""
    hyp = [z3.And(0 <= z(terms.program_id(a)), z(terms.program_id(a)) < z(sp.sympify(g))) for a, g in enumerate(grid)]
    values = {}
    for t in group:
        sizes = {s: sp.sympify(ints[s.name]) for s in t.expr.free_symbols if s.name in ints}
        values[t.symbol] = z(t.expr.xreplace(sizes))
    return hyp, values


# ----------------------------------------------------------------------------------
# Decode.
# ----------------------------------------------------------------------------------
def _decode_tensors(paged: bool):
    q = A.symbolic("q", ("B", "N_q", "Hq", "D"))
    rows = ("NP", "PS", "Hkv") if paged else ("B_cache", "N_cache", "Hkv")
    # two head dims: k's D and v's D_v (MLA; any strides, so v may be a view of k's storage)
    k, v = A.symbolic("k", (*rows, "D")), A.symbolic("v", (*rows, "Dv"))
    out = A.symbolic("out", ("S", "B", "N_q", "Hq", "Dv"))
    lse = A.symbolic("lse", ("S", "B", "N_q", "Hq"))
    cs = A.symbolic("cache_seqlens", ("B",))
    bt = A.symbolic("block_table", ("B", "MP")) if paged else None
    sinks = A.symbolic("sinks", ("Hq",))
    leftpad, batch_idx = A.symbolic("cache_leftpad", ("B",)), A.symbolic("cache_batch_idx", ("B",))
    # an FP8 cache's descales: three float32 (B, Hkv), each at its own strides
    descales = tuple(A.symbolic(f"{x}_descale", ("B", "Hkv")) for x in "qkv")
    return q, k, v, out, lse, cs, bt, sinks, leftpad, batch_idx, descales


#: the in-head (row, column) strides of the tensors assumption index_int32 bounds (checked by the runtime: q, k, v,
#: mask, out, grad_out; dq, dk, dv made contiguous in q's, k's, v's shapes): the dense kernels keep these
#: products in int32 (claim int32_index_arithmetic: each product and their sum of an unmasked lane fit)
INDEX_INT32_STRIDES = {
    "forward": (("stride_qm", "stride_qd"), ("stride_om", "stride_od"), ("stride_kn", "stride_kd"),
                ("stride_vn", "stride_vd"), ("stride_mm", "stride_mn")),
    "preprocess": (("stride_om", "stride_od"), ("stride_dom", "stride_dod")),
    # decode: a (batch or page, head) slice of k_cache, v_cache (spec.launch.decode_launch passes their row and
    # column strides as stride_kn, stride_kd and stride_vn, stride_vd)
    "decode": (("stride_kn", "stride_kd"), ("stride_vn", "stride_vd")),
    "backward": (("stride_qm", "stride_qd"), ("stride_dom", "stride_dod"), ("stride_kn", "stride_kd"),
                 ("stride_vn", "stride_vd"), ("stride_dqm", "stride_dqd"), ("stride_dkn", "stride_dkd"),
                 ("stride_dvn", "stride_dvd"), ("stride_mm", "stride_mn")),
}
#: the dense kernels' width case
DENSE_WIDTHS = ("every int32 product or sum of a stride in the printed offsets is an in-head product of q, k, v, "
                "out, grad_out, dq, dk, dv or the mask (bounded by index_int32); every other is int64 (a factor "
                "off_b, off_h, off_kvh, a base, or a lane widened by tl.cast(·, tl.int64))")

#: decode's width case (its name, after "paged: " / "contiguous: ")
DECODE_WIDTHS = ("every int32 product or sum of a stride in the printed offsets is an in-head product of the k or v "
                 "cache (bounded by index_int32); every other is int64 (a factor off_b, off_kvh, head, page, off_bc, "
                 "or a lane widened by tl.cast(·, tl.int64))")

#: ALiBi slopes as the decode accepts them (checks.check_score_mods), any strides (a view, a stride-0 expand)
DECODE_SLOPES = {"(Hq,)": ("Hq",), "(B, Hq)": ("B", "Hq")}


@claim(A.CLAIM_DECODE,
       "decode's addresses: for all shapes and non-negative strides of q (B, N_q, Hq, D), a contiguous "
       "(B_cache, N_cache, Hkv, D) or paged (num_pages, PAGE_SIZE, Hkv, D) k cache and a v cache of the same "
       "rows with its own head dim D_v (two head dims, any strides: v may be a view of k), out (S, B, N_q, Hq, D_v), "
       "lse (S, B, N_q, Hq), cache_seqlens, cache_leftpad, cache_batch_idx (B,) and block_table (B, max_pages), with the strides, sizes and "
       "grid spec.launch.decode_launch passes (the function the launcher calls), every printed offset of "
       "_decode_fwd (spec.addresses: q, cache_seqlens, cache_leftpad, cache_batch_idx, block_table, k/v rows, "
       "out, lse, FP8's descales) is the offset of the element the reference reads — q[b, tok, head, d], cache_seqlens[b], "
       "cache_leftpad[b], cache_batch_idx[b], block_table[b, j // PAGE_SIZE], "
       "k_cache[block_table[b, j // PAGE_SIZE], j % PAGE_SIZE, kvh, d] (paged) or k_cache[off_bc, j, kvh, d] "
       "(off_bc = b, or cache_batch_idx[b] with HAS_BATCH_IDX), v_cache likewise at dv, "
       "out[split, b, tok, head, dv], lse[split, b, tok, head], sinks[head], an FP8 cache's "
       "q/k/v_descale[b, kvh] (three float32 (B, Hkv) tensors, any strides: spec.launch.descale_strides, through "
       "decode_launch; the shared _fp8_descales), the ALiBi slope alibi_slopes[head] ((Hq,)) or [b, head] ((B, Hq)) "
       "at any strides (spec.launch.slope_strides, through decode_launch; the offset printed into the shared "
       "_score_mod_scalars at off_h = head_safe, head 0 on a padding row) — and that element lies inside the "
       "tensor's shape for every program of the grid (row tiles x splits, Hkv, B: program_id 0, 1, 2, split as "
       "spec.addresses.GRID_DECODE prints it) and every lane "
       "its printed mask lets through (row_ok, d_ok, dv_ok, dt_ok: spec.addresses.DECODE_*_OK; key_ok: "
       "spec.paged.KEY_OK, a key lane it admits in a tile of the printed split plan is a key key_lo <= j < key_len), "
       "every row and column the reference reads admitted "
       "(d < HEAD_DIM, dv < HEAD_DIM_V, the head dims decode_launch passes (spec.launch.head_dims), "
       "which cover every column: HEAD_DIM + HEAD_DIM_TAIL = D, HEAD_DIM_V = D_v; the slope's load has no mask: every "
       "lane, padding rows included); "
       "the tile widths the decode launcher pads those head dims to (spec.launch.decode_tile_widths of "
       "decode_launch's head dims, for every D in 1..576, D_v in 1..512, fp8 products or not) reach them: "
       "BLOCK_D >= HEAD_DIM, BLOCK_DT >= HEAD_DIM_TAIL, BLOCK_DV >= HEAD_DIM_V, each a power of two >= 16; "
       "with the head dim split at D_v (MLA, claim head_dim_split) the tails q[b, tok, head, dt] and "
       "k_cache[..., kvh, dt] for HEAD_DIM <= dt < D; and with v_cache = k_cache[..., :D_v] (k's pointer and "
       "strides) the v offset at lane d is the k offset (the kernel uses its K tile as V): for each v cache for which "
       "spec.launch.decode_v_is_k (the launcher's per-call choice of V_IS_K) holds — k_cache[..., :D_v] must be one; a "
       "second cache of k's layout, one at k's pointer with other strides or a cache of its own are tried — the V "
       "address (pointer + offset) at lane d is the K address and HEAD_DIM = HEAD_DIM_V (given Hq = GROUP·Hkv, 0 <= cache_seqlens[b] <= "
       "capacity, B_cache = B without cache_batch_idx, cache_batch_idx entries in [0, B_cache) and, paged, "
       "block_table entries in [0, num_pages)); the rows (GROUP heads x N_q tokens) "
       "map one to one onto the (head, token) pairs of the KV head; and the merge's row views "
       "(decode_partial_rows, decode_merged_out, decode_merged_lse) put merged row r = (b·N_q + t)·Hq + h "
       "at out[b, t, h] and lse[b, h, t], where the kernel wrote partial (split, b, t, h), and with one split the "
       "in-place views (decode_unsplit_outputs of the op's out (B, N_q, Hq, D_v) and lse (B, Hq, N_q)) put the "
       "kernel's (0, b, t, h) at out[b, t, h] and lse[b, h, t]; and every product or sum "
       "of a stride in the printed offsets is int64 (no q, out or block_table size bounds it by 2^31), but the k and "
       "v caches' in-head products, int32 and bounded by index_int32" + "; the lanes are the printed ones (spec.addresses.DECODE_LANES: offs_m = pid_m·BLOCK_M + arange(BLOCK_M), offs_d, offs_dv, offs_dt = HEAD_DIM + arange(BLOCK_DT), offs_n = start_n + arange(BLOCK_N), each read from its term as base + arange(width), not assumed): the row tiles' lanes reach every row g·N_q + t once, a split's key tiles (the printed loop start_n in range(split_lo, split_hi, BLOCK_N), spec.addresses.DECODE_LOOPS, start, stop and step read) every key of the split once, and each column of q/k is admitted by exactly one lane of offs_d or offs_dt (given the tile widths' facts above)",
       r"\mathrm{off}(X, \mathrm{idx}) = \sum_d \mathrm{idx}_d\,\mathrm{stride}_d,\quad 0\le\mathrm{idx}_d<n_d",
       terms=tuple(dict.fromkeys(t.name for g in (*A.DECODE_GROUPS.values(), *A.DECODE_LANES.values(), *A.DECODE_LOOPS.values()) for t in g)),
       scope="symbolic shapes, strides (>= 0), grid, lanes and loaded values (SymPy canonical zero for the "
             "offsets, z3 for the extents); mathematical integers Z, which the kernel's int64 arithmetic is for tensors "
             "under 2^63 elements: every product and sum of a stride in the printed lines is int64 (a factor off_b, "
             "off_kvh, head, head_safe, page, off_bc, or tok, d, split, page_idx widened by tl.cast(·, tl.int64)) "
             "but the k and v caches' in-head products slot·stride_kn or j·stride_kn and d·stride_kd, int32 and "
             "bounded by index_int32 (claim int32_index_arithmetic); widths read from the printed text with "
             "Triton's typing: a stride int32 whenever its value fits; page and off_bc the "
             "template's .to(tl.int64) loads); the FP8 descales: (B, Hkv) indexed by q's batch b (not the cache row "
             "off_bc), contiguous and paged alike, their offsets int64 (off_b, off_kvh)")
def prove_decode_addresses(launch=None, groups=A.DECODE_GROUPS, partial_rows=None, merged_out=None, merged_lse=None,
                           v_is_k=None, tile_widths=None, key_ok=P.KEY_OK, lanes=A.DECODE_LANES,
                           loops=A.DECODE_LOOPS, unsplit_outputs=None):
    launch = L.decode_launch if launch is None else launch
    v_is_k = L.decode_v_is_k if v_is_k is None else v_is_k
    partial_rows = L.decode_partial_rows if partial_rows is None else partial_rows
    merged_out = L.decode_merged_out if merged_out is None else merged_out
    merged_lse = L.decode_merged_lse if merged_lse is None else merged_lse
    unsplit_outputs = L.decode_unsplit_outputs if unsplit_outputs is None else unsplit_outputs
    cases = []
    block_m = sp.Symbol("BLOCK_M", integer=True, positive=True)
    for paged in (True, False):
        tag = "paged" if paged else "contiguous"
        q, k, v, out, lse, cs, bt, sinks, leftpad, batch_idx, descales = _decode_tensors(paged)
        grid, ints, constexprs = launch(q, k, v, out, lse, cs, bt, block_m, sinks, cache_leftpad=leftpad,
                                        cache_batch_idx=batch_idx, split_keys=sp.Symbol("split_keys", integer=True),
                                        descales=descales)
        launched = {sym: ints[sym.name] for sym in (*A.DECODE_STRIDES.values(), A.GROUP, A.N_Q, A.H_KV)}
        launched[P.page_size] = constexprs["PAGE_SIZE"]
        B, N_q, Hq, D = q.shape
        Hkv = k.shape[2]
        env = terms.chain(groups["rows"])
        tok, head = (env[x].xreplace(launched).xreplace(launched) for x in (A.tok, A.head))

        def at(term, extra=None):
            """A printed offset with the launch's arguments and the rows' tok/head substituted."""
            value = _lanes(term.expr).xreplace({A.tok: tok, A.head: head}).xreplace(extra or {})
            return sp.expand(value.xreplace(launched).xreplace(launched))

        d, dv, j = A.offs_d, A.offs_dv, n.j
        # --- the widths: no int32 product of a stride (a cache row can pass 2^31 elements) ------------------
        # the printed lines in the kernel's order: the grid's split, the rows, the slope's head (passed to
        # _score_mod_scalars as its off_h), the page gather, the rows of the cache, then every offset; the
        # template's own widths: page and off_bc are loaded .to(tl.int64) (off_bc = off_b without an index)
        firsts = ("rows", "slope_head", "paged_rows", "contiguous_rows")
        order = (*A.GRID_DECODE, *groups["rows"], *groups["slope_head"],
                 terms.Term(A.off_h, A.head_safe, A.CLAIM_DECODE, "the call passes head_safe as off_h"),
                 *(P.PAGE_GATHER if paged else ()), *groups["paged_rows" if paged else "contiguous_rows"],
                 *(t for name, g in groups.items() if name not in firsts for t in g))
        cases.append(_widths_case(f"{tag}: {DECODE_WIDTHS}", order, {A.page.name: 64, A.off_bc.name: 64},
                                  INDEX_INT32_STRIDES["decode"]))
        # --- the element each offset reaches (polynomial identities) -------------------------------
        (key_len,) = groups["key_len"]
        (q_term,) = groups["q_offset"]
        (bt_term,) = groups["bt_offset"]
        cases.append((f"{tag}: q offset is q[b, tok, head, d]",
                      difference(at(q_term), sp.expand(q.offset_of((A.off_b, tok, head, d))))))
        cases.append((f"{tag}: cache_seqlens offset is cache_seqlens[b]",
                      difference(at(key_len), sp.expand(cs.offset_of((A.off_b,))))))
        (lp_term,), (bi_term,) = groups["leftpad_offset"], groups["batch_idx_offset"]
        cases.append((f"{tag}: cache_leftpad offset is cache_leftpad[b]",
                      difference(at(lp_term), sp.expand(leftpad.offset_of((A.off_b,))))))
        cases.append((f"{tag}: cache_batch_idx offset is cache_batch_idx[b]",
                      difference(at(bi_term), sp.expand(batch_idx.offset_of((A.off_b,))))))
        rows = {t.symbol: t for t in groups["paged_rows" if paged else "contiguous_rows"]}
        kv = {t.symbol: t for t in groups["kv_offsets"]}
        page_of = sp.Function("block_table_at")  # the page a block_table element holds
        if paged:
            gather = {x: e.xreplace(launched) for x, e in terms.chain(P.PAGE_GATHER).items()}
            bt_at = at(bt_term, {P.page_idx: gather[P.page_idx]})
            cases.append((f"{tag}: block_table offset is block_table[b, j // PAGE_SIZE]",
                          difference(bt_at, sp.expand(bt.offset_of((A.off_b, gather[P.page_idx]))))))
            page = page_of(bt_at)
            index = lambda x: (page_of(sp.expand(bt.offset_of((A.off_b, gather[P.page_idx])))),  # noqa: E731
                               gather[P.slot], A.off_kvh, x)
            sub = {A.page: page, P.slot: gather[P.slot], P.page_idx: gather[P.page_idx]}
        else:
            index = lambda x: (A.off_bc, j, A.off_kvh, x)  # noqa: E731  (off_bc: b, or cache_batch_idx[b])
            sub = {A.offs_n: j}
        kv_values = {}  # the k and v offsets at their lanes, as the launch passes the strides
        for side, tensor, rows_sym, off_sym, lane in (("k", k, A.k_rows, A.k_off, d), ("v", v, A.v_rows, A.v_off, dv)):
            value = at(kv[off_sym], {rows_sym: _lanes(rows[rows_sym].expr)}).xreplace(sub)
            value = sp.expand(value.xreplace(launched))
            cases.append((f"{tag}: {side} offset is {side}_cache[{'block_table[b, j // PS], j % PS' if paged else 'off_bc, j'}"
                          f", kvh, {'d' if lane == d else 'dv'}]",
                          difference(value, sp.expand(tensor.offset_of(index(lane))))))
            kv_values[side] = value
        # the head dim split at D_v (MLA, claim head_dim_split): the tails' offsets at lane dt in [D_v, D)
        dt = A.offs_dt
        (q_tail_term,), (k_tail_term,) = groups["q_tail_offset"], groups["k_tail_offset"]
        cases.append((f"{tag}: q tail offset is q[b, tok, head, dt]",
                      difference(at(q_tail_term), sp.expand(q.offset_of((A.off_b, tok, head, dt))))))
        k_tail = sp.expand(at(k_tail_term, {A.k_rows: _lanes(rows[A.k_rows].expr)}).xreplace(sub).xreplace(launched))
        cases.append((f"{tag}: k tail offset is k_cache[..., kvh, dt]",
                      difference(k_tail, sp.expand(k.offset_of(index(dt))))))
        # V_IS_K (spec.launch.decode_v_is_k, per call): the kernel then uses the K tile it loaded as V, so for every
        # v cache the launch takes it for, each V address (pointer + offset at lane d) is the K address, and the K
        # tile's columns d < HEAD_DIM are V's dv < HEAD_DIM_V. The layouts tried: k_cache[..., :D_v] (k's pointer
        # and strides, D_v = D - E <= D: the absorbed layout, which it must take), a second cache of k's layout
        # (another pointer), one at k's pointer with other strides, a v cache of its own
        narrow = (*k.shape[:3], D - sp.Symbol("E", integer=True, nonnegative=True))
        layouts = {"k_cache[..., :D_v]": A.Strided("v", narrow, k.strides, k.data_ptr()),
                   "a second cache of k's layout": A.Strided("v", narrow, k.strides),
                   "k's pointer, other strides": A.Strided("v", narrow, v.strides, k.data_ptr()),
                   "its own cache": v}
        for what, vl in layouts.items():
            taken = bool(v_is_k(k, vl))
            if what == "k_cache[..., :D_v]":
                cases.append((f"{tag}: V_IS_K for v_cache = k_cache[..., :D_v]",
                              sp.Integer(0) if taken else sp.Symbol("the absorbed layout not taken")))
            if not taken:
                continue
            v_at_d = sp.expand(kv_values["v"].xreplace(dict(zip(v.strides, vl.strides))).xreplace({dv: d}))
            cases.append((f"{tag}: V_IS_K for {what}: the V address at lane d is the K address",
                          difference(vl.data_ptr() + v_at_d, k.data_ptr() + kv_values["k"])))
            vx = launch(q, k, vl, out, lse, cs, bt, block_m, sinks, cache_leftpad=leftpad, cache_batch_idx=batch_idx,
                        split_keys=sp.Symbol("split_keys", integer=True), descales=descales)[2]
            zv = _Z3A()
            cases.append(_decide(f"{tag}: V_IS_K for {what}: the K tile's columns are V's (HEAD_DIM = HEAD_DIM_V)",
                                 [zv(D) >= 1, zv(vl.shape[3]) >= 1],
                                 zv(sp.sympify(vx["HEAD_DIM"])) == zv(sp.sympify(vx["HEAD_DIM_V"]))))
        # an FP8 cache: each descale at this program's (batch, KV head), at its own strides
        for term, x, tensor in zip(groups["descale_offsets"], "qkv", descales):
            cases.append((f"{tag}: {x}desc_off is {x}_descale[b, off_kvh]",
                          difference(at(term), sp.expand(tensor.offset_of((A.off_b, A.off_kvh))))))
        # ALiBi: the slope of the row's head (head_safe: head 0 on a padding row, whose load has no mask), at the
        # strides decode_launch passes for each accepted layout of the slopes
        (safe_term,), (slope_term,) = groups["slope_head"], groups["slope_offset"]
        safe = {ok: safe_term.expr.xreplace({A.row_ok: sp.true if ok else sp.false}).xreplace({A.head: head})
                for ok in (True, False)}
        slope_cases = {}
        for stag, shape in DECODE_SLOPES.items():
            slopes = A.symbolic("alibi_slopes", shape)
            s_ints = launch(q, k, v, out, lse, cs, bt, block_m, sinks, cache_leftpad=leftpad, cache_batch_idx=batch_idx,
                            split_keys=sp.Symbol("split_keys", integer=True), descales=descales,
                            alibi_slopes=slopes)[1]
            s_launched = {**launched, **{A.S_[x]: s_ints[x] for x in ("stride_sb", "stride_sh")}}
            at_head = (lambda h: (h,)) if len(shape) == 1 else (lambda h: (A.off_b, h))  # noqa: E731
            for ok, what in ((True, "row_ok lanes: alibi_slopes[{}head]"), (False, "padding lanes: alibi_slopes[{}0]")):
                got = sp.expand(_lanes(slope_term.expr).xreplace({A.off_h: safe[ok]}).xreplace(s_launched))
                want = sp.expand(slopes.offset_of(at_head(head if ok else sp.Integer(0))))
                cases.append((f"{tag}: slopes {stag}: slope offset at {what.format('' if len(shape) == 1 else 'b, ')}",
                              difference(got, want)))
            slope_cases[stag] = (slopes, at_head)
        (sink_term,) = groups["sink_offset"]
        cases.append((f"{tag}: sink offset is sinks[head]",
                      difference(at(sink_term), sp.expand(sinks.offset_of((head,))))))
        o_term, l_term = (t for t in groups["out_offsets"])
        cases.append((f"{tag}: out offset is out[split, b, tok, head, dv]",
                      difference(at(o_term), sp.expand(out.offset_of((P.split, A.off_b, tok, head, dv))))))
        cases.append((f"{tag}: lse offset is lse[split, b, tok, head]",
                      difference(at(l_term), sp.expand(lse.offset_of((P.split, A.off_b, tok, head))))))
        # --- the extents (z3) ----------------------------------------------------------------------
        z = _Z3A()
        Bz, Nqz, Hqz, Dz, Dvz, Hkvz, bm = (z(x) for x in (B, N_q, Hq, D, v.shape[3], Hkv, block_m))
        g_true = z3.Int("group_true")
        hyp = [x >= 1 for x in (Bz, Nqz, Hqz, Dz, Dvz, Hkvz, bm, g_true)] + [Hqz == g_true * Hkvz]
        lane = z3.Int("lane")
        Gz = z(sp.sympify(ints["GROUP"]))
        row_tiles = z(sp.sympify(ints["ROW_TILES"]))
        # the grid (row tiles x splits, Hkv, B): each program's (row tile, split, kv head, b) as the printed
        # spec.addresses.GRID_DECODE splits it (claim launch_grid: one to one onto them)
        grid_hyp, prog = _grid_program(A.GRID_DECODE, grid, ints, z)
        # the printed lanes (spec.addresses.DECODE_LANES), read: offs_m = base + arange(width) at the program's row
        # tile, the head dims' offs_d, offs_dv, offs_dt (its base HEAD_DIM the launch's split), a key tile's offs_n
        dims = {A.HEAD_DIM_: constexprs["HEAD_DIM"], A.HEAD_DIM_V_: constexprs["HEAD_DIM_V"],
                A.HEAD_DIM_TAIL_: constexprs["HEAD_DIM_TAIL"]}
        ln, shapes = _read_lanes(z, lanes, ("m", "d", "dv", "dt", "n"), dims)
        cases += [(f"{tag}: {name}", value) for name, value in shapes]
        hyp += grid_hyp + [0 <= lane, lane < z(ln["m"].width)]
        offb, kvh, split = prog[A.off_b], prog[A.off_kvh], prog[P.split]
        m = ln["m"].start((z(A.pid_m), prog[A.pid_m])) + lane
        zsub = lambda e: z3.substitute(z(e), (z(A.off_b), offb), (z(A.off_kvh), kvh), (z(A.offs_m), m))  # noqa: E731
        hyp.append(z(A.offs_m) >= 0)
        tok_z, head_z = zsub(tok.xreplace(launched)), zsub(head.xreplace(launched))
        # the printed masks (spec.addresses: row_ok, d_ok, dv_ok, dt_ok) at the launch's sizes and head dims
        # (spec.launch.head_dims: q/k split at D_v), on the printed lanes offs_d, offs_dv, offs_dt
        ok_at = _lanes_ok(z, groups, ("row_ok", "columns_ok", "tail_ok"), {**launched, **dims})
        row_ok = ok_at[A.row_ok](m)
        dz, dvz = z(d), z(dv)
        # the lanes' column bounds: the launch's head dims (spec.launch.head_dims: q/k split at D_v)
        hyp, cover = _head_dim_lanes(constexprs, D, v.shape[3], z, hyp)
        cases.append((f"{tag}: {cover[0]}", cover[1]))
        main_z, tail_z = z(sp.sympify(constexprs["HEAD_DIM"])), z(sp.sympify(constexprs["HEAD_DIM_TAIL"]))
        d_ok, dv_ok = ok_at[A.d_ok](dz, ln["d"]), ok_at[A.dv_ok](dvz, ln["dv"])
        inside = lambda idx, shape: z3.And(*[z3.And(0 <= i, i < s) for i, s in zip(idx, shape)])  # noqa: E731
        cases.append(_decide(f"{tag}: q[b, tok, head, d] inside q (lanes row_ok & d_ok)", hyp + [row_ok, d_ok],
                             inside((offb, tok_z, head_z, dz), (Bz, Nqz, Hqz, Dz))))
        # the split's tail lanes: HEAD_DIM <= dt < HEAD_DIM + HEAD_DIM_TAIL (the launch's split of D)
        dtz = z(A.offs_dt)
        dt_ok = ok_at[A.dt_ok](dtz, ln["dt"])
        # no element missed or read twice: every column c < D of q/k is a lane of offs_d that d_ok admits or of
        # offs_dt that dt_ok admits, not both, every column c < D_v of v/out one of offs_dv that dv_ok admits (the
        # tile widths reach them: _tile_width_cases' facts)
        c = z3.Int("column")
        qk_cover, qk_once, v_cover = _columns_admitted(c, ok_at[A.d_ok], ok_at[A.dt_ok], ok_at[A.dv_ok], ln)
        widths = _width_hyp(z, main_z, tail_z, z(sp.sympify(constexprs["HEAD_DIM_V"])))
        cases.append(_decide(f"{tag}: every column c < D of q/k is admitted by one lane (d_ok at d = c, or dt_ok at "
                             "dt = c)", hyp + widths + [0 <= c, c < Dz], z3.And(qk_cover, qk_once)))
        cases.append(_decide(f"{tag}: every column c < D_v of v/out is admitted (dv_ok at dv = c)",
                             hyp + widths + [0 <= c, c < Dvz], v_cover))
        cases.append(_decide(f"{tag}: q[b, tok, head, dt] inside q (lanes row_ok & dt_ok)", hyp + [row_ok, dt_ok],
                             inside((offb, tok_z, head_z, dtz), (Bz, Nqz, Hqz, Dz))))
        cases.append(_decide(f"{tag}: cache_seqlens[b] inside cache_seqlens", hyp, inside((offb,), (Bz,))))
        cases.append(_decide(f"{tag}: cache_leftpad[b], cache_batch_idx[b] inside theirs (B,)", hyp,
                             inside((offb,), (Bz,))))
        cases.append(_decide(f"{tag}: q/k/v_descale[b, kvh] inside (B, Hkv)", hyp,
                             z3.And(*[inside((offb, kvh), [z(x) for x in t.shape]) for t in descales])))
        for stag, (slopes, at_head) in slope_cases.items():
            for ok, row_lanes in ((True, [row_ok]), (False, [z3.Not(row_ok)])):
                cases.append(_decide(f"{tag}: slopes {stag}[{'b, ' if len(slopes.shape) == 2 else ''}head_safe] inside "
                                     f"({'row_ok' if ok else 'padding'} lanes; the load has no mask)", hyp + row_lanes,
                                     inside([zsub(x.xreplace(launched)) for x in at_head(safe[ok])],
                                            [z(x) for x in slopes.shape])))
        S_z = z(out.shape[0])
        cases.append(_decide(f"{tag}: out/lse[split, b, tok, head, dv] inside out and lse (lanes row_ok & dv_ok)",
                             hyp + [row_ok, dv_ok, S_z >= 1],
                             inside((split, offb, tok_z, head_z, dvz), (S_z, Bz, Nqz, Hqz, Dvz))))
        # the rows map one to one onto (query head of this KV head, token): row g·N_q + t is in the grid
        g2, t2, mz = z3.Int("g2"), z3.Int("t2"), z(A.offs_m)
        tok_m = z3.substitute(z(tok.xreplace(launched)), (z(A.off_kvh), kvh))
        head_m = z3.substitute(z(head.xreplace(launched)), (z(A.off_kvh), kvh))
        cases.append(_decide(f"{tag}: row g·N_q + t is (head kvh·GROUP + g, token t), in the grid and row_ok",
                             hyp + [0 <= g2, g2 < Gz, 0 <= t2, t2 < Nqz, mz == g2 * Nqz + t2],
                             z3.And(tok_m == t2, head_m == kvh * Gz + g2, mz / bm < row_tiles, ok_at[A.row_ok](mz))))
        # ... and the row tiles' printed lanes offs_m reach each row g·N_q + t < GROUP·N_q once (program pid_m's)
        cases += [(f"{tag}: {name}", value) for name, value in _tiling_cases(
            "rows", ln["m"], hyp, 0, Gz * Nqz, bm, lambda t_: z3.And(0 <= t_, t_ < row_tiles),
            lambda t_: [(z(A.pid_m), t_)])]
        # keys: a lane the printed key_ok (spec.paged.KEY_OK) admits, j one of the printed lanes offs_n of a tile of
        # the printed key loop (spec.addresses.DECODE_LOOPS: start_n in range(split_lo, split_hi, B_c), read), is a key 0 <= key_lo
        # <= j < key_len, and the tiles' lanes reach every key of the split's [split_lo, split_hi) once, for the
        # printed split plans (spec.paged.SPLIT_RANGE and, batch_invariant, SPLIT_RANGE_FIXED); then (below)
        # 0 <= j < key_len <= capacity: inside the cache (every valid key is admitted once: claim paged_kv_reads)
        jz, key_len_z = z(j), z3.Int("key_len_value")
        for plan, split_range, plan_hyp in (
                ("", P.SPLIT_RANGE, []),
                ("fixed splits: ", P.SPLIT_RANGE_FIXED,
                 [z(P.split_keys) >= 1, z(P.num_splits) * z(P.split_keys) >= z(n.key_len) - z(P.key_lo)])):
            env = terms.chain(split_range)
            lo_z, hi_z = (z(env[x]) for x in (P.split_lo, P.split_hi))
            mask_z = z(key_ok[0].expr.xreplace(env))
            t_z, r_z = z3.Int("key_tile"), z3.Int("key_lane")
            Lk, K0k, Bck, Sk, sk = (z(x) for x in (n.key_len, P.key_lo, n.B_c, P.num_splits, P.split))
            split_hyp = plan_hyp + [K0k >= 0, Sk >= 1, 0 <= sk, sk < Sk, Bck >= 1]
            loop = _Loop(z, loops["n"], env)
            cases.append(_decide(f"{tag}: {plan}a key lane key_ok admits is a key key_lo <= j < key_len",
                                 split_hyp + [loop.visited(t_z), ln["n"].holds(jz, *loop.at(t_z)), mask_z],
                                 z3.And(0 <= K0k, K0k <= jz, jz < Lk)))
            cases += [(f"{tag}: {plan}{name}", value) for name, value in _loop_cases(
                "the split's key tiles", ln["n"], loop, split_hyp, lo_z, hi_z)]
        if paged:
            PSz, MPz, NPz = z(k.shape[1]), z(bt.shape[1]), z(k.shape[0])
            page_z = z3.Int("page_value")
            key_hyp = hyp + [0 <= jz, jz < key_len_z, key_len_z <= MPz * PSz, MPz >= 1, PSz >= 1, NPz >= 1,
                             0 <= page_z, page_z < NPz]
            cases.append(_decide(f"{tag}: block_table[b, j // PAGE_SIZE] inside block_table (lanes key_ok)", key_hyp,
                                 inside((offb, jz / PSz), (Bz, MPz))))
            cases.append(_decide(f"{tag}: k_cache[page, j % PAGE_SIZE, kvh, d] inside the cache (lanes key_ok & d_ok)",
                                 key_hyp + [d_ok], inside((page_z, jz % PSz, kvh, dz), (NPz, PSz, Hkvz, Dz))))
            cases.append(_decide(f"{tag}: v_cache[page, j % PAGE_SIZE, kvh, dv] inside the cache (lanes key_ok & dv_ok)",
                                 key_hyp + [dv_ok], inside((page_z, jz % PSz, kvh, dvz), (NPz, PSz, Hkvz, Dvz))))
            cases.append(_decide(f"{tag}: k_cache[page, j % PAGE_SIZE, kvh, dt] inside the cache (lanes key_ok & dt_ok)",
                                 key_hyp + [dt_ok], inside((page_z, jz % PSz, kvh, dtz), (NPz, PSz, Hkvz, Dz))))
        else:
            Ncz, Bcz, offbc = z(k.shape[1]), z(k.shape[0]), z3.Int("off_bc_value")
            key_hyp = hyp + [0 <= jz, jz < key_len_z, key_len_z <= Ncz]
            # the cache row: b without cache_batch_idx (the cache then has B rows: the runtime's check),
            # else the loaded cache_batch_idx[b], assumed in [0, cache batch) (checked by the host)
            for what, row_hyp in (("b (B_cache = B)", [offbc == offb, Bcz == Bz]),
                                  ("cache_batch_idx[b] in [0, B_cache)", [0 <= offbc, offbc < Bcz])):
                cases.append(_decide(f"{tag}: k_cache[off_bc, j, kvh, d] inside the cache, off_bc = {what} "
                                     "(lanes key_ok & d_ok)",
                                     key_hyp + row_hyp + [d_ok], inside((offbc, jz, kvh, dz), (Bcz, Ncz, Hkvz, Dz))))
                cases.append(_decide(f"{tag}: v_cache[off_bc, j, kvh, dv] inside the cache, off_bc = {what} "
                                     "(lanes key_ok & dv_ok)",
                                     key_hyp + row_hyp + [dv_ok], inside((offbc, jz, kvh, dvz), (Bcz, Ncz, Hkvz, Dvz))))
                cases.append(_decide(f"{tag}: k_cache[off_bc, j, kvh, dt] inside the cache, off_bc = {what} "
                                     "(lanes key_ok & dt_ok)",
                                     key_hyp + row_hyp + [dt_ok], inside((offbc, jz, kvh, dtz), (Bcz, Ncz, Hkvz, Dz))))
    # --- the merge of the splits: row views (polynomial identities on contiguous partials) --------
    S, B, N_q, Hq, D = (sp.Symbol(s, integer=True, positive=True) for s in ("S", "B", "N_q", "Hq", "D"))
    o_part = A.Strided("o_part", (S, B, N_q, Hq, D), A.contiguous_strides((S, B, N_q, Hq, D)))
    l_part = A.Strided("lse_part", (S, B, N_q, Hq), A.contiguous_strides((S, B, N_q, Hq)))
    o_rows, l_rows = partial_rows(o_part, l_part)
    s, b, t, h, d = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("s", "b", "t", "h", "d"))
    r = (b * N_q + t) * Hq + h
    cases.append(("merge: partial o[s, b, t, h, d] is row r of the fold's (S, R, D)",
                  difference(sp.expand(o_rows.offset_of((s, r, d))), sp.expand(o_part.offset_of((s, b, t, h, d))))))
    cases.append(("merge: partial lse[s, b, t, h] is row r of the fold's (S, R)",
                  difference(sp.expand(l_rows.offset_of((s, r))), sp.expand(l_part.offset_of((s, b, t, h))))))
    out_t = A.Strided("out", (B, N_q, Hq, D), A.contiguous_strides((B, N_q, Hq, D)))
    cases.append(("merge: merged row r, d is out[b, t, h, d]",
                  difference(sp.expand(merged_out(out_t).offset_of((r, d))), sp.expand(out_t.offset_of((b, t, h, d))))))
    merged = A.Strided("merged_lse", (B * N_q * Hq,), (1,))
    cases.append(("merge: lse[b, h, t] is merged row r",
                  difference(sp.expand(merged_lse(merged, B, N_q, Hq).offset_of((b, h, t))), sp.expand(r))))
    # one split (audit of issue 24's additions): the kernel writes the op's out (B, N_q, Hq, D_v) and lse (B, Hq, N_q)
    # in place through decode_unsplit_outputs' (1, B, N_q, Hq[, D_v]) views, the strides decode_launch passes
    lse_op = A.Strided("lse", (B, Hq, N_q), A.contiguous_strides((B, Hq, N_q)))
    o_view, l_view = unsplit_outputs(out_t, lse_op)
    cases.append(("unsplit: out[0, b, t, h, d] is out[b, t, h, d]",
                  difference(sp.expand(o_view.offset_of((0, b, t, h, d))), sp.expand(out_t.offset_of((b, t, h, d))))))
    cases.append(("unsplit: lse[0, b, t, h] is lse[b, h, t]",
                  difference(sp.expand(l_view.offset_of((0, b, t, h))), sp.expand(lse_op.offset_of((b, h, t))))))
    # (cached per (launch, tile_widths): the same functions give the same cases; a mutant's lambda is a new key)
    cases += _decode_width_cases(launch, L.decode_tile_widths if tile_widths is None else tile_widths)
    return result(A.CLAIM_DECODE, cases, "offsets by SymPy (canonical zero), extents by z3, contiguous and paged")


@functools.lru_cache(maxsize=8)
def _decode_width_cases(launch, tile_widths) -> tuple:
    """The decode's tile widths (``tile_widths``: spec.launch.decode_tile_widths) at the head dims ``launch`` passes
    (its constexprs, symbolic in k's D and v's D_v, evaluated at every accepted pair, fp8 products or not): each at
    least its head dim (so ``arange(BLOCK_*)`` reaches every column the lane masks let through), a power of two
    >= 16. A case's residual names the first head dims that break it."""
    from spec.assumptions import limit

    q, k, v, out, lse, cs, bt, sinks, leftpad, batch_idx, descales = _decode_tensors(False)
    _, _, constexprs = launch(q, k, v, out, lse, cs, bt, sp.Symbol("BLOCK_M", integer=True, positive=True), sinks,
                              cache_leftpad=leftpad, cache_batch_idx=batch_idx, descales=descales)
    names = ("HEAD_DIM", "HEAD_DIM_TAIL", "HEAD_DIM_V")
    dims = sp.lambdify((k.shape[3], v.shape[3]), [sp.sympify(constexprs[x]) for x in names], "math")
    facts = ("BLOCK_D >= HEAD_DIM", "BLOCK_DT >= HEAD_DIM_TAIL", "BLOCK_DV >= HEAD_DIM_V",
             "BLOCK_D, BLOCK_DT, BLOCK_DV are powers of two >= 16")

    def holds(main, tail, dv, w):  # facts' truth values, in their order (a power of two: x & (x − 1) == 0)
        bd, bt, bv = w["BLOCK_D"], w["BLOCK_DT"], w["BLOCK_DV"]
        return (bd >= main, bt >= tail, bv >= dv,
                bd >= 16 and bt >= 16 and bv >= 16 and not (bd & (bd - 1) or bt & (bt - 1) or bv & (bv - 1)))
    top_d, top_dv = limit("decode_head_dim_max")
    first = {}
    for fp8 in (False, True):
        for D in range(1, top_d + 1):
            for Dv in range(1, top_dv + 1):
                main, tail, dv = dims(D, Dv)  # Python ints (lambdify's math printer: Min is min)
                w = tile_widths({"HEAD_DIM": main, "HEAD_DIM_TAIL": tail, "HEAD_DIM_V": dv}, fp8)
                ok = holds(main, tail, dv, w)
                if not all(ok):
                    for name, fact in zip(facts, ok):
                        if not fact and name not in first:
                            first[name] = sp.Symbol(f"D={D}, D_v={Dv}, fp8={fp8}: {w}")
    return tuple((f"tile widths (spec.launch.decode_tile_widths, every D in 1..{top_d}, D_v in 1..{top_dv}): {name}",
                  first.get(name, sp.Integer(0))) for name in facts)


# ----------------------------------------------------------------------------------
# Varlen.
# ----------------------------------------------------------------------------------
@claim(A.CLAIM_VARLEN,
       "varlen's addresses: for all packed q (total_q, Hq, D), k (total_k, Hkv, D), v (total_k, Hkv, D_v) "
       "(two head dims) with any non-negative "
       "strides and cu_seqlens_q/k (B + 1,) with any stride, the segment block's printed loads read "
       "cu_seqlens_q/k[b] and [b + 1] of the tensors spec.launch.varlen_cu_seqlens passes (inside their shape "
       "for every program of spec.launch.varlen_grid's grid), and every pointer the segment moves "
       "(spec.addresses.SEGMENT_POINTERS: Q, K, V, Out of the forward, Q, dO, K, V, dK, dV of dK/dV, Q, dO, "
       "dQ, K, V of dQ; Lse (Hq, total_q) of the forward, Lse2 and Δ (Hq, total_q) of both backward kernels; "
       "every pointer a kernel addresses is moved), followed by the forward's printed offsets "
       "(spec.addresses.FORWARD_GROUPS, for the strides spec.launch.forward_launch passes a packed batch) or the "
       "backward kernels' printed offsets (spec.addresses.BACKWARD_KERNEL_GROUPS, for the strides "
       "spec.launch.dkdv_launch and dq_launch pass a packed batch), a split head dim's tails among them (claim "
       "head_dim_split: q, k, dq, dk at lane dt), reaches element (cu[b] + i, h, d) of its tensor "
       "(lse, lse2, Δ: (h, cu[b] + i)) "
       "— the segment's row i, queries from cu_seqlens_q and keys from cu_seqlens_k — inside the tensor for "
       "0 <= i < the segment's length, given the host's check of the offsets (non-decreasing, from 0 to the "
       "totals); the grid's cdiv(max_seqlen, B) tiles cover every segment no longer than max_seqlen, and the "
       "backward's grids, from both hints passed by name (max_seqlen_q=, max_seqlen_k=: what backward_varlen "
       "passes dkdv_launch and dq_launch), cover every key of a segment of at most max_seqlen_k keys (dK/dV) and "
       "every query row of one of at most max_seqlen_q rows (dQ)",
       r"\mathrm{X} + \mathrm{cu}[b]\,s_{row} + i\,s_{row} + h\,s_h + d\,s_d = "
       r"\mathrm{off}(X, (\mathrm{cu}[b]+i, h, d))",
       terms=tuple(t.name for t in A.SEGMENT_LOADS) + tuple(sorted({t.name for g in A.SEGMENT_POINTERS.values()
                                                                    for t in g})),
       scope="symbolic totals, heads, head dim, strides (>= 0), segment and offsets' values (uninterpreted), "
             "grid (SymPy canonical zero for the elements, z3 for the extents); mathematical integers Z (the "
             "segment starts are int64 when they scale a stride)")
def prove_varlen_addresses(loads=A.SEGMENT_LOADS, pointers=A.SEGMENT_POINTERS, cu_seqlens=None, grid=None,
                           forward_groups=A.FORWARD_GROUPS, forward_launch=None, backward_groups=A.BACKWARD_KERNEL_GROUPS,
                           dkdv_launch=None, dq_launch=None):
    forward_launch = L.forward_launch if forward_launch is None else forward_launch
    dkdv_launch = L.dkdv_launch if dkdv_launch is None else dkdv_launch
    dq_launch = L.dq_launch if dq_launch is None else dq_launch
    cu_seqlens = L.varlen_cu_seqlens if cu_seqlens is None else cu_seqlens
    grid = L.varlen_grid if grid is None else grid
    tensors = {"q": A.symbolic("q", ("total_q", "Hq", "D")), "k": A.symbolic("k", ("total_k", "Hkv", "D")),
               "v": A.symbolic("v", ("total_k", "Hkv", "Dv"))}
    cu_in = {side: A.symbolic(f"cu_{side}", ("B1",)) for side in "qk"}
    passed = dict(zip("qk", cu_seqlens(cu_in["q"], cu_in["k"])))
    mem = {"q": sp.Function("cu_seqlens_q_at"), "k": sp.Function("cu_seqlens_k_at")}  # value at an element offset
    cases = []
    # the loads: which element each reads
    values = {}
    side_of = {A.CuSeqlensQ: "q", A.CuSeqlensK: "k"}
    for term in loads:
        # each load of the term: the value at the element offset it reads (another pointer: a residual)
        values[term.symbol] = term.expr.replace(
            lambda e: isinstance(e, sp.Indexed),
            lambda e: mem[side_of[e.base]](sp.expand(e.indices[0])) if e.base in side_of
            else sp.Symbol(f"reads {e}"))
    want = {V.seq_start_q: ("q", A.off_b), V.seq_end_q: ("q", A.off_b + 1),
            V.seq_start_k: ("k", A.off_b), V.seq_end_k: ("k", A.off_b + 1)}
    for sym, (side, idx) in want.items():
        got = values.get(sym, sp.Symbol(f"{sym} not loaded"))
        cases.append((f"{sym} is cu_seqlens_{side}[{idx}]",
                      difference(got, mem[side](sp.expand(passed[side].offset_of((idx,)))))))
    # the pointers: element (cu[b] + i, h, d) of the tensor
    q_shape, k_shape = ("total_q", "Hq", "D"), ("total_k", "Hkv", "D")
    o_shape, v_shape = ("total_q", "Hq", "Dv"), ("total_k", "Hkv", "Dv")  # v's head dim D_v (MLA)
    tensors.update(out=A.symbolic("out", o_shape), do=A.symbolic("do", o_shape), dq=A.symbolic("dq", q_shape),
                   dk=A.symbolic("dk", k_shape), dv=A.symbolic("dv", v_shape))
    tensors["lse"] = A.symbolic("lse", ("Hq", "total_q"))
    # the backward's Δ and lse2 (Hq, total_q): made by spec.launch.backward_row_tensors from the saved lse
    tensors["delta"], tensors["lse2"], _ = L.backward_row_tensors(tensors["lse"], False)
    starts = {V.seq_start_q: values.get(V.seq_start_q, V.seq_start_q),
              V.seq_start_k: values.get(V.seq_start_k, V.seq_start_k)}
    i, h, d = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("i", "h", "d"))
    # the forward: its own launch (spec.launch.forward_launch, packed) and printed offsets (FORWARD_GROUPS)
    placeholder = lambda name, dims: A.symbolic(name, (1,) * dims)  # noqa: E731  (flags compile the reads out)
    _, fints = forward_launch(tensors["q"], tensors["k"], tensors["v"], tensors["out"], tensors["lse"],
                              placeholder("key_lengths", 1), placeholder("mask", 4), placeholder("block_map", 4),
                              placeholder("alibi_slopes", 1), placeholder("sinks", 1), n.B_r,
                              cu_seqlens_q=passed["q"], max_seqlen_q=sp.Symbol("max_seqlen", integer=True))
    flaunched = {sym: sp.sympify(fints[name]) for name, sym in A.F_.items() if name in fints}
    fg = {t.symbol: t for group in forward_groups.values() for t in group}
    fwd_offset = {"Q": (A.q_off,), "K": (A.k_off, A.k_base), "V": (A.v_off, A.v_base), "Out": (A.o_off,),
                  "Lse": (A.lse_off,)}
    # the backward kernels: their own launches (spec.launch.dkdv_launch, dq_launch, packed) and printed offsets
    # (spec.addresses.BACKWARD_KERNEL_GROUPS)
    bwd_args = (tensors["q"], tensors["k"], tensors["v"], tensors["do"])
    bwd_rest = (placeholder("key_lengths", 1), placeholder("mask", 4), placeholder("block_map", 4),
                placeholder("alibi_slopes", 1))
    # both hints by name, as backward_varlen passes them to both launches (each picks its own)
    hints = {name: sp.Symbol(name, integer=True, nonnegative=True) for name in ("max_seqlen_q", "max_seqlen_k")}
    kgrid, kints = dkdv_launch(*bwd_args, tensors["dk"], tensors["dv"], tensors["delta"], *bwd_rest, n.B_c,
                               cu_seqlens_q=passed["q"], **hints)
    qgrid, qints = dq_launch(*bwd_args, tensors["dq"], tensors["delta"], *bwd_rest, n.B_r, cu_seqlens_q=passed["q"],
                             **hints)
    blaunched = {kernel: {sym: sp.sympify(ints[name]) for name, sym in A.BK_.items() if name in ints}
                 for kernel, ints in (("dkdv", kints), ("dq", qints))}
    bg = {t.symbol: t for group in backward_groups.values() for t in group}
    rows = (A.drow_off, A.brow_base)
    bwd_offset = {"dkdv": {"Q": (A.q_rows_off, A.bq_base), "DO": (A.do_rows_off, A.bdo_base), "K": (A.bk_off, A.bk_base),
                           "V": (A.bv_off, A.bv_base), "DK": (A.dk_off,), "DV": (A.dv_off,), "Lse2": rows, "Delta": rows},
                  "dq": {"Q": (A.q_rows_off, A.bq_base), "DO": (A.do_rows_off, A.bdo_base), "DQ": (A.dq_off,),
                         "K": (A.bk_off, A.bk_base), "V": (A.bvt_off, A.bv_base), "Lse2": rows, "Delta": rows}}
    # a split head dim's tails (claim head_dim_split), addressed from the same moved pointers
    tail_offset = {"fwd": {"Q": ((A.q_tail_off,),), "K": ((A.k_tail_off, A.k_base),)},
                   "dkdv": {"Q": ((A.q_tail_rows_off, A.bq_base),), "K": ((A.bk_tail_off, A.bk_base),),
                            "DK": ((A.dk_tail_off,),)},
                   "dq": {"Q": ((A.q_tail_rows_off, A.bq_base),), "K": ((A.bk_tail_off, A.bk_base),),
                          "DQ": ((A.dq_tail_off,),)}}
    for kernel, group in pointers.items():
        # every pointer the kernel addresses is moved (a pointer left at row 0 reads segment 0's rows)
        addressed = set(fwd_offset) if kernel == "fwd" else set(bwd_offset[kernel])
        unmoved = sorted(addressed - {t.symbol.name for t in group})
        cases.append((f"{kernel}: every pointer the kernel addresses is moved to its segment",
                      sp.Symbol(f"unmoved: {', '.join(unmoved)}") if unmoved else sp.Integer(0)))
        for term in group:
            ptr = term.symbol.name
            name = A.POINTER_TENSOR[ptr]
            tensor = tensors[name]
            side = "q" if "total_q" in {str(x) for x in tensor.shape} else "k"
            start = mem[side](sp.expand(passed[side].offset_of((A.off_b,))))
            groups_, offsets_, ints_ = ((fg, fwd_offset, flaunched) if kernel == "fwd"
                                        else (bg, bwd_offset[kernel], blaunched[kernel]))
            # the pointer moved by the printed move, then each printed offset from it: the dense one and a
            # split head dim's tail (claim head_dim_split: lane dt of the same tensor)
            for off, *bases in (offsets_[ptr], *tail_offset[kernel].get(ptr, ())):
                offset = _lanes(groups_[off].expr)
                for base in bases:
                    offset = offset.xreplace({base: _lanes(groups_[base].expr)})
                offset = offset.xreplace({A.offs_m: i, A.offs_n: i, A.offs_d: d, A.offs_dv: d, A.offs_dt: d,
                                          A.off_h: h, A.off_kvh: h})  # the lane d of either head dim (D or D_v)
                moved = sp.expand(term.expr - term.symbol).xreplace(ints_).xreplace(starts)
                address = sp.expand(moved + offset.xreplace(ints_))
                per_row = name in ("lse", "lse2", "delta")
                index = (h, start + i) if per_row else (start + i, h, d)
                where = "h, cu_seqlens_q[b] + i" if per_row else f"cu_seqlens_{side}[b] + i, h, d"
                label = f" ({off.name})" if (off, *bases) != offsets_[ptr] else ""
                cases.append((f"{kernel}: {ptr} reaches {name}[{where}]{label}",
                              difference(address, sp.expand(tensor.offset_of(index)))))
    # the extents (z3): the program's segment b has cu[b + 1] inside cu_seqlens; a row i < length inside
    z = _Z3A()
    B1, H = z(cu_in["q"].shape[0]), z3.Int("Hq")
    max_seqlen, block = z3.Ints("max_seqlen BLOCK")
    g = grid(sp.Symbol("max_seqlen", integer=True, nonnegative=True), sp.Symbol("BLOCK", integer=True, positive=True),
             passed["q"], sp.Symbol("Hq", integer=True, positive=True))
    g0 = z(g[0])
    grid_hyp, prog = _grid_program(A.GRID_HEAD, g, {}, z)  # the (tile, head, segment) split: claim launch_grid
    offb = prog[A.off_b]
    hyp = [B1 >= 2, H >= 1, block >= 1, max_seqlen >= 0] + grid_hyp
    cases.append(_decide("every program's segment b has cu_seqlens[b + 1] inside cu_seqlens (B + 1 entries)", hyp,
                         z3.And(0 <= offb, offb + 1 < B1)))
    lo, hi, total, row_i = z3.Ints("cu_b cu_b1 total row")
    cases.append(_decide("a segment row cu[b] + i (0 <= i < cu[b+1] - cu[b]) is inside the packed rows",
                         [0 <= lo, lo <= hi, hi <= total, 0 <= row_i, row_i < hi - lo], z3.And(0 <= lo + row_i,
                                                                                                lo + row_i < total)))
    length = z3.Int("segment_length")
    cases.append(_decide("the grid's cdiv(max_seqlen, B) tiles of B rows cover a segment of n <= max_seqlen rows",
                         [block >= 1, max_seqlen >= 0, 0 <= length, length <= max_seqlen],
                         g0 * block >= length))
    # which hint sizes which backward grid (backward_varlen passes both by name; a swapped pair leaves dQ rows of a
    # segment longer than max_seqlen_k unwritten): the dK/dV grid's tiles cover every key of a segment of n_k <=
    # max_seqlen_k keys, the dQ grid's every query row of a segment of n_q <= max_seqlen_q rows
    n_q, n_k = z3.Ints("segment_queries segment_keys")
    cases.append(_decide("the backward's hints by name (dkdv_launch, dq_launch given max_seqlen_q=, max_seqlen_k=): "
                         "the dK/dV grid covers every key of a segment of n_k <= max_seqlen_k keys, the dQ grid every "
                         "query row of a segment of n_q <= max_seqlen_q",
                         [z(n.B_c) >= 1, z(n.B_r) >= 1, 0 <= n_q, n_q <= z(hints["max_seqlen_q"]), 0 <= n_k,
                          n_k <= z(hints["max_seqlen_k"])],
                         z3.And(z(kgrid[0]) * z(n.B_c) >= n_k, z(qgrid[0]) * z(n.B_r) >= n_q)))
    return result(A.CLAIM_VARLEN, cases, "elements by SymPy (canonical zero, uninterpreted loaded values), "
                                         "extents by z3")


# ----------------------------------------------------------------------------------
# The dense forward.
# ----------------------------------------------------------------------------------
#: names the kernel holds in int64 (cast at the grid split, or sums with such a term): a product with one
#: of them is int64; every other product is int32 (the lanes, the strides, pid_m, start_n)
_INT64 = {A.off_b, A.off_h, A.off_kvh, A.k_base, A.v_base, A.mask_base, A.map_base}


def _int32_part(expr) -> sp.Expr:
    """The terms of an offset with no int64 factor: the products the kernel computes in int32."""
    return sp.Add(*[t for t in sp.Add.make_args(sp.expand(_lanes(expr))) if not (t.free_symbols & _INT64)])


#: the tile constants each direction's module holds, by the names spec.launch.block_map_tiles reads: the forward's
#: (BLOCK_M, BLOCK_N); the backward's MAP_BLOCK besides its loops' tiles
_FORWARD_MODULE = SimpleNamespace(BLOCK_M=n.B_r, BLOCK_N=n.B_c)
_BACKWARD_MODULE = SimpleNamespace(BLOCK_M=n.B_r, BLOCK_N=n.B_c, MAP_BLOCK=(A.MAP_BLOCK_M, A.MAP_BLOCK_N))


def _map_tile_case(name, tiles, divisors):
    """The block map built at ``tiles`` (spec.launch.block_map_tiles: entry (r, c) classifies rows [r·rows,
    (r+1)·rows) and keys [c·keys, (c+1)·keys)) classifies the kernel's tile: the entry its printed index reads,
    ``start // divisor`` on each axis, holds every element of its tile [start, start + BLOCK) (BLOCK_M rows,
    BLOCK_N keys). A tile start is a multiple of BLOCK (the grid's tiles and the loops rounded to whole tiles:
    claim mask_tiles_sound), the divisor a multiple of BLOCK (the forward's BLOCK itself; the backward's MAP_BLOCK:
    generator.variants.bwd_map_block), so a start is the s-th BLOCK inside the r-th run of divisor / BLOCK tiles.
    At divisor = BLOCK (the forward) this holds for every r only when the map's tile is BLOCK exactly."""
    z = _Z3A()
    hyp, goal = [], []
    for axis, block, divisor, size in (("rows", n.B_r, divisors[0], tiles[0]), ("keys", n.B_c, divisors[1], tiles[1])):
        bz, dz, tz = z(block), z(sp.sympify(divisor)), z(sp.sympify(size))
        a, r, s_, e = z3.Ints(f"{axis}_per_map_tile {axis}_map_index {axis}_sub_tile {axis}_lane")
        start = (r * a + s_) * bz  # the kernel's tile start
        hyp += [bz >= 1, a >= 1, dz == a * bz, r >= 0, 0 <= s_, s_ < a, 0 <= e, e < bz]
        index = start / dz  # the printed index of the map entry read (z3's floor division; non-negative operands)
        goal += [index * tz <= start + e, start + e < index * tz + tz]
    return _decide(name, hyp, z3.And(*goal))


def _forward_tensors(map_tiles=None):
    map_tiles = L.block_map_tiles if map_tiles is None else map_tiles
    q = A.symbolic("q", ("B", "Hq", "N_Q", "D"))
    # two head dims: q/k's D and v/out's D_v (MLA)
    k, v = A.symbolic("k", ("B", "Hkv", "N_K", "D")), A.symbolic("v", ("B", "Hkv", "N_K", "Dv"))
    out, lse = A.symbolic("out", (*q.shape[:3], v.shape[3])), A.symbolic("lse", q.shape[:3])
    B, Hq, N_Q, N_K = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    mask = A.symbolic("mask", (B, Hq, N_Q, N_K))
    # the dense mask's block map as the runtime builds it: at the forward's tiles (spec.launch.block_map_tiles)
    block_map = A.symbolic("block_map", (B, Hq, *L.block_map_shape(N_Q, N_K, map_tiles(_FORWARD_MODULE))))
    slopes = {"(Hq,)": A.symbolic("alibi_slopes", (Hq,)), "(B, Hq)": A.symbolic("alibi_slopes", (B, Hq))}
    return dict(q=q, k=k, v=v, out=out, lse=lse, key_lengths=A.symbolic("key_lengths", (B,)), mask=mask,
                block_map=block_map, slopes=slopes, sinks=A.symbolic("sinks", (Hq,)),
                mask_mod_args=A.symbolic("mask_mod_args", (B, "P")), philox=A.symbolic("philox", (2,)),
                descales=tuple(A.symbolic(f"{x}_descale", (B, k.shape[1])) for x in "qkv"))


@claim(A.CLAIM_FORWARD,
       "the dense forward's addresses: for all shapes and non-negative strides of q (B, Hq, N_Q, D), k "
       "(B, Hkv, N_K, D), v (B, Hkv, N_K, D_v), out (B, Hq, N_Q, D_v) (two head dims: MLA), lse (B, Hq, N_Q), key_lengths (B,), the dense mask (B, Hq, N_Q, N_K) and its block map "
       "(B, Hq, cdiv(N_Q, BLOCK_M), cdiv(N_K, BLOCK_N)) (broadcast: stride 0; built at spec.launch.block_map_tiles, "
       "the tiles the runtime builds it at: the entry a kernel tile reads classifies exactly that tile's rows and keys), "
       "ALiBi slopes (Hq,) or (B, Hq), sinks "
       "(Hq,), mask_mod_args (B, P) and the Philox pair (2,), with the strides, sizes and grid "
       "spec.launch.forward_launch passes (the function both launchers call; philox through "
       "spec.launch.philox_words), every printed offset of _attn_fwd, _attn_fwd_stage, _attn_fwd_tile and "
       "_score_mod_scalars (spec.addresses.FORWARD_GROUPS) is the offset of the element the reference reads — "
       "q[b, h, i, d], out[b, h, i, dv], lse[b, h, i], k[b, h // GROUP, j, d], v[.., j, dv], the split head dim's "
       "tails q[b, h, i, dt] and k[b, h // GROUP, j, dt] (claim head_dim_split), mask[b, h, i, j], block_map[b, h, i // BLOCK_M, "
       "j0 // BLOCK_N], key_lengths[b], sinks[h], slopes[h] or [b, h], mask_mod_args[b, 0] (its row stride "
       "from spec.launch.mask_mod_strides, the function both directions' launches call), FP8's q/k/v_descale[b, h // GROUP] "
       "(three float32 (B, Hkv) tensors, any strides: spec.launch.descale_strides), philox[1], and "
       "_dropout_keep's keep[b, h, i, j] for the strides and grid spec.launch.dropout_mask_launch passes — and lies "
       "inside the tensor for every program of the grid and every lane the load's or store's printed mask lets through "
       "(spec.addresses.FWD_*_OK: row_ok, key_ok, n_ok, d_ok, dt_ok, dv_ok; a key key_ok admits is < key_len, and every "
       "row, column and key the reference reads is admitted; key_lengths as the runtime clamps it to "
       "spec.launch.key_length_bounds keeps exactly [0, N_K], a length L in it unchanged and key_ok at the clamped "
       "key_len admitting exactly the keys j < L; out and lse as both launchers allocate them, "
       "spec.launch.forward_outputs (forward_plan's strides, launch_forward's tensors), row-major and holding every "
       "out[b, h, i, dv], lse[b, h, i] the stores admit) (rows "
       "i < N_Q, keys j < N_K, d < HEAD_DIM, HEAD_DIM <= dt < HEAD_DIM + HEAD_DIM_TAIL, dv < HEAD_DIM_V: the head dims "
       "forward_launch passes (spec.launch.head_dims, for any split point HEAD_DIM in [1, D] the runtime picks), "
       "which cover every column: HEAD_DIM + HEAD_DIM_TAIL = D, HEAD_DIM_V = D_v; key tiles start inside [0, N_K), as the stages visit them: claim "
       "mask_tiles_sound), given Hq = GROUP·Hkv; the tile widths the runtime launches with (spec.launch.tile_widths, for every D, D_v in 1..head_dim_max, fp8 products or not) reach those columns: BLOCK_D >= HEAD_DIM, BLOCK_DT >= HEAD_DIM_TAIL, BLOCK_DV >= D_v, each a power of two >= 16, its split HEAD_DIM + HEAD_DIM_TAIL = D with a tail only when HEAD_DIM = BLOCK_D; the grid covers every (b, h, i); the int32 part of "
       "q/out/k/v/mask's offsets (and the tails') is exactly the in-head offset row·stride_row + col·stride_col that "
       "assumption index_int32 bounds (claim int32_index_arithmetic), and every other product of a stride is int64"
       + "; the lanes are the printed ones (spec.addresses.FORWARD_LANES: start_m = pid_m·BLOCK_M (_dropout_keep: program_id(0)·BLOCK_M), offs_m = start_m + arange(BLOCK_M), offs_n = start_n + arange(BLOCK_N), offs_d, offs_dv, offs_dt = HEAD_DIM + arange(BLOCK_DT), each read from its term as base + arange(width), not assumed): the grid's row tiles reach every row of q once (and _dropout_keep's every row of keep), a stage's key tiles (the printed loop start_n in range(lo, hi, BLOCK_N), spec.addresses.FORWARD_LOOPS, its start, stop and step read) every key of [lo, hi) once (_dropout_keep's range(0, N_K, BLOCK_N) every key), and each column of q/k is admitted by exactly one lane of offs_d or offs_dt",
       r"\mathrm{off}(X, (b, h, i, d)) = b\,s_b + h\,s_h + i\,s_i + d\,s_d,\quad 0\le\mathrm{idx}<\mathrm{shape}",
       terms=tuple(dict.fromkeys(t.name for g in (*A.FORWARD_GROUPS.values(), *A.FORWARD_LANES.values(), *A.FORWARD_LOOPS.values()) for t in g)),
       scope="symbolic shapes, strides (>= 0), grid and lanes (SymPy canonical zero for the offsets, z3 over "
             "unbounded integers for the extents; the tile widths by evaluating spec.launch.tile_widths at every accepted "
             "(D, D_v); the runtime's clamp of key_lengths taken as torch's clamp(L, lo, hi) = min(max(L, lo), hi), "
             "of unbounded integers); off_b, off_h, off_kvh and the per-program bases are int64, the "
             "in-head products int32 (bounded by index_int32 for q, out, k, v and mask: claim "
             "int32_index_arithmetic), every other product of a stride int64 (lse's offs_m, the block map's tile "
             "indices and _dropout_keep's keys widened by tl.cast(·, tl.int64); the width case reads the printed lines "
             "with Triton's typing: a stride int32 whenever its value fits); the packed "
             "(varlen) form is claim varlen_addresses' (FP8's descales there: the same printed term with b the "
             "segment, (B, Hkv) with B the segments by the contract; their extent is checked here for the dense "
             "grid only)")
def prove_forward_addresses(launch=None, groups=A.FORWARD_GROUPS, philox_words=None, dropout_mask_launch=None,
                            widths=None, lanes=A.FORWARD_LANES, loops=A.FORWARD_LOOPS, key_length_bounds=None,
                            outputs=None, map_tiles=None):
    launch = L.forward_launch if launch is None else launch
    key_length_bounds = L.key_length_bounds if key_length_bounds is None else key_length_bounds
    outputs = L.forward_outputs if outputs is None else outputs
    map_tiles = L.block_map_tiles if map_tiles is None else map_tiles
    dropout_mask_launch = L.dropout_mask_launch if dropout_mask_launch is None else dropout_mask_launch
    philox_words = L.philox_words if philox_words is None else philox_words
    t = _forward_tensors(map_tiles)
    q, k, v, out, lse = (t[x] for x in ("q", "k", "v", "out", "lse"))
    B, Hq, N_Q, D = q.shape
    Hkv, N_K = k.shape[1], k.shape[2]
    from spec import structure as S

    # the widths, in the kernel's order (the grid, the K/V head, then every group: bases before their offsets);
    # the template widens _dropout_keep's rows itself (offs_m64 = offs_m.to(tl.int64))
    cases = [_widths_case(DENSE_WIDTHS, (*A.GRID_TILE, *A.GRID_HEAD, S.GQA_HEAD, *(t for g in groups.values() for t in g)),
                          {A.offs_m64.name: 64}, INDEX_INT32_STRIDES["forward"])]
    g = {name: {term.symbol: term for term in group} for name, group in groups.items()}
    i, j, d, dv = A.offs_m, A.offs_n, A.offs_d, A.offs_dv
    # the lanes arange(BLOCK_D), HEAD_DIM + arange(BLOCK_DT), arange(BLOCK_DV) reach every column the masks below
    # let through, at the widths and split the runtime launches with (spec.launch.tile_widths)
    cases += _tile_width_cases(widths)
    for tag, slopes in t["slopes"].items():
        grid, ints = launch(q, k, v, out, lse, t["key_lengths"], t["mask"], t["block_map"], slopes, t["sinks"], n.B_r,
                            t["mask_mod_args"], descales=t["descales"], head_dim=A.HEAD_DIM_)
        launched = {sym: sp.sympify(ints[name]) for name, sym in A.F_.items() if name in ints}
        launched.update({A.GROUP: sp.sympify(ints["GROUP"])})

        def at(term, *chained):
            """A printed offset, with the chained base terms, the lanes and the launch's strides."""
            e = _lanes(term.expr)
            for base in chained:
                e = e.xreplace({base.symbol: _lanes(base.expr)})
            return sp.expand(e.xreplace(launched))

        def same(name, got, tensor, index):
            cases.append((name, difference(got, sp.expand(tensor.offset_of(index)))))

        if tag == "(Hq,)":
            same("q offset is q[b, h, i, d]", at(g["q_offset"][A.q_off]), q, (A.off_b, A.off_h, i, d))
            same("out offset is out[b, h, i, dv]", at(g["out_offsets"][A.o_off]),
                 out, (A.off_b, A.off_h, i, dv))
            same("lse offset is lse[b, h, i]", at(g["out_offsets"][A.lse_off]), lse,
                 (A.off_b, A.off_h, i))
            for side, tensor, off, base, lane in (("k", k, A.k_off, A.k_base, d), ("v", v, A.v_off, A.v_base, dv)):
                same(f"{side} offset is {side}[b, off_kvh, j, {'d' if lane == d else 'dv'}]",
                     at(g["kv_offsets"][off], g["kv_base"][base]), tensor, (A.off_b, A.off_kvh, j, lane))
            # the head dim split (claim head_dim_split): the tails at lane dt in [HEAD_DIM, D)
            same("q tail offset is q[b, h, i, dt]", at(g["q_tail_offset"][A.q_tail_off]), q,
                 (A.off_b, A.off_h, i, A.offs_dt))
            same("k tail offset is k[b, off_kvh, j, dt]", at(g["k_tail_offset"][A.k_tail_off], g["kv_base"][A.k_base]),
                 k, (A.off_b, A.off_kvh, j, A.offs_dt))
            same("mask offset is mask[b, h, i, j]", at(g["mask_offset"][A.mask_off], g["mask_base"][A.mask_base]),
                 t["mask"], (A.off_b, A.off_h, i, j))
            same("block map offset is block_map[b, h, pid_m, start_n // BLOCK_N]",
                 at(g["map_offset"][A.map_off], g["map_base"][A.map_base]), t["block_map"],
                 (A.off_b, A.off_h, A.pid_m, sp.floor(A.start_n / n.B_c)))
            same("key_lengths offset is key_lengths[b]", at(g["key_len"][A.kl_off]), t["key_lengths"], (A.off_b,))
            same("sink offset is sinks[h]", at(g["sink_offset"][A.fsink_off]), t["sinks"], (A.off_h,))
            (mm,) = groups["mm_row"]
            same("MM_row is row b of mask_mod_args", at(mm) - A.MaskModArgs, t["mask_mod_args"], (A.off_b, 0))
            # FP8: each descale at this program's (batch, KV head), at its own strides
            for term, x, tensor in zip(groups["descale_offsets"], "qkv", t["descales"]):
                same(f"{x}desc_off is {x}_descale[b, off_kvh]", at(term), tensor, (A.off_b, A.off_kvh))
            (rng,) = groups["rng_offset"]
            same("rng_off is philox[1] (as spec.launch.philox_words passes it)", at(rng), philox_words(t["philox"]),
                 (1,))
            # the int32 part of each offset is the in-head offset assumption index_int32 bounds
            for name, got, want in (
                    ("q", _int32_part(at(g["q_offset"][A.q_off])), i * ints["stride_qm"] + d * ints["stride_qd"]),
                    ("out", _int32_part(at(g["out_offsets"][A.o_off])), i * ints["stride_om"] + dv * ints["stride_od"]),
                    ("k", _int32_part(g["kv_offsets"][A.k_off].expr.xreplace(launched)),
                     j * ints["stride_kn"] + d * ints["stride_kd"]),
                    ("v", _int32_part(g["kv_offsets"][A.v_off].expr.xreplace(launched)),
                     j * ints["stride_vn"] + dv * ints["stride_vd"]),
                    ("q tail", _int32_part(at(g["q_tail_offset"][A.q_tail_off])),
                     i * ints["stride_qm"] + A.offs_dt * ints["stride_qd"]),
                    ("k tail", _int32_part(g["k_tail_offset"][A.k_tail_off].expr.xreplace(launched)),
                     j * ints["stride_kn"] + A.offs_dt * ints["stride_kd"]),
                    ("mask", _int32_part(g["mask_base"][A.mask_base].expr.xreplace(launched))
                     + _int32_part(g["mask_offset"][A.mask_off].expr.xreplace(launched)),
                     i * ints["stride_mm"] + j * ints["stride_mn"])):
                cases.append((f"{name}: the int32 products are the in-head offset row·stride_row + col·stride_col",
                              difference(got, sp.expand(want))))
        same(f"slopes {tag}: slope offset is alibi_slopes[{'h' if tag == '(Hq,)' else 'b, h'}]",
             at(g["slope_offset"][A.slope_off]), slopes, (A.off_h,) if tag == "(Hq,)" else (A.off_b, A.off_h))
        # --- the extents (z3) ----------------------------------------------------------------------
        if tag != "(Hq,)":
            cases.append(_decide("slopes (B, Hq): [b, h] inside", _grid_hyp(grid, ints, q, k)[0],
                                 _inside(_grid_hyp(grid, ints, q, k)[1][:2], (B, Hq))))
            continue
        z = _Z3A()
        # the printed lanes (spec.addresses.FORWARD_LANES), read: offs_m = start_m + arange(BLOCK_M) with the printed
        # start_m = pid_m·BLOCK_M, offs_n = start_n + arange(BLOCK_N) of a key tile, the head dims' offs_d, offs_dv,
        # offs_dt (its base HEAD_DIM the launch's split)
        ln, shapes = _read_lanes(z, lanes, ("m", "n", "d", "dv", "dt"), {A.HEAD_DIM_: ints["HEAD_DIM"]}, ("start_m",))
        cases += shapes
        hyp, (offb, offh, offkvh, pidm, row) = _grid_hyp(grid, ints, q, k, ln["m"])
        jz, dz, dvz, sn = z(j), z(d), z(dv), z(A.start_n)
        # the lanes' column bounds are the launch's head dims (spec.launch.head_dims), for any split point the
        # runtime picks in [1, D] (spec.launch.head_dim_split)
        hyp, cover = _head_dim_lanes(ints, D, v.shape[3], z, hyp)
        cases.append(cover)
        # the printed masks (spec.addresses: row_ok, d_ok, dv_ok, dt_ok, key_ok, n_ok) at the launch's sizes and head
        # dims, on the lanes tl.arange makes (offs_d, offs_dv, offs_n >= 0; offs_dt = HEAD_DIM + arange >= HEAD_DIM);
        # key_len: key_lengths[b] (a loaded value >= 0) or N_K
        key_len_z = z(n.key_len)
        sizes = {A.N_Q: ints["N_Q"], A.N_K_: ints["N_K"], A.HEAD_DIM_: ints["HEAD_DIM"],
                 A.HEAD_DIM_V_: ints["HEAD_DIM_V"], A.HEAD_DIM_TAIL_: ints["HEAD_DIM_TAIL"]}
        ok_at = _lanes_ok(z, groups, ("row_ok", "columns_ok", "tail_ok", "key_ok", "n_ok"), sizes)
        row_ok = ok_at[A.row_ok](row)
        d_ok, dv_ok = ok_at[A.d_ok](dz, ln["d"]), ok_at[A.dv_ok](dvz, ln["dv"])
        # a key lane of a visited key tile (its first key start_n in [0, N_K): claim mask_tiles_sound)
        key_ok, n_ok = ok_at[P.key_ok](jz, ln["n"]), ok_at[A.n_ok](jz, ln["n"])
        hyp = hyp + [key_len_z >= 0, sn >= 0]
        # the row tiles' lanes reach every row of q once (the grid's cdiv(N_Q, BLOCK_M) programs); a stage's key tiles
        # (the printed loop spec.addresses.FORWARD_LOOPS: start_n in range(lo, hi, BLOCK_N), read; lo, hi the stage's,
        # claims stages_cover, mask_tiles_sound) reach every key of [lo, hi) once
        lo, hi = z(A.lo_), z(A.hi_)
        cases += _tiling_cases("rows", ln["m"], [z(N_Q) >= 1, z(n.B_r) >= 1], 0, z(N_Q), z(n.B_r),
                               lambda t_: z3.And(0 <= t_, t_ < z(sp.sympify(grid[0]))), lambda t_: [(z(A.pid_m), t_)])
        cases += _loop_cases("a stage's key tiles", ln["n"], _Loop(z, loops["n"]), [lo >= 0], lo, hi)
        # a key lane key_ok admits is a key the reference reads (j < key_len: padding keys may hold NaN or inf), and
        # every such key is admitted; n_ok (the dense mask's and dropout's columns) admits exactly the keys of k;
        # row_ok every row of q
        # the runtime's clamp of key_lengths (spec.launch.key_length_bounds; dispatch.lengths_argument: torch's
        # clamp(L, lo, hi) = min(max(L, lo), hi)) keeps exactly [0, N_K]: every length lands in it, one in it passes
        # unchanged, and key_ok at the clamped key_len admits exactly the keys j < L the reference reads
        length = z3.Int("key_length")
        lo_kl, hi_kl = (z(sp.sympify(x)) for x in key_length_bounds(k))
        clamped = z3.If(z3.If(length < lo_kl, lo_kl, length) > hi_kl, hi_kl, z3.If(length < lo_kl, lo_kl, length))
        cases.append(_decide("key_lengths clamp (spec.launch.key_length_bounds): every length lands in [0, N_K], one "
                             "in [0, N_K] passes unchanged", [z(N_K) >= 1],
                             z3.And(0 <= clamped, clamped <= z(N_K),
                                    z3.Implies(z3.And(0 <= length, length <= z(N_K)), clamped == length))))
        cases.append(_decide("key_ok at the clamped key_len admits exactly the keys j < L the reference reads "
                             "(0 <= L <= N_K)", hyp + [0 <= jz, 0 <= length, length <= z(N_K)],
                             z3.substitute(ok_at[P.key_ok](jz), (key_len_z, clamped)) == (jz < length)))
        c = z3.Int("lane_value")
        cases.append(_decide("a key lane key_ok admits is a key j < key_len of k, and every such key is admitted",
                             hyp + [0 <= jz], z3.And(z3.Implies(key_ok, z3.And(jz < key_len_z, jz < z(N_K))),
                                                     z3.Implies(z3.And(jz < key_len_z, jz < z(N_K)),
                                                                ok_at[P.key_ok](jz)))))
        cases.append(_decide("n_ok admits exactly the keys j < N_K; row_ok exactly the rows i < N_Q",
                             hyp + [0 <= jz, 0 <= c],
                             z3.And(ok_at[A.n_ok](jz) == (jz < z(N_K)), ok_at[A.row_ok](c) == (c < z(N_Q)))))
        cases.append(_decide("q[b, h, i, d] inside (lanes i < N_Q, d < HEAD_DIM)", hyp + [row_ok, d_ok],
                             _inside((offb, offh, row, dz), q.shape)))
        cases.append(_decide("out[b, h, i, dv] inside (lanes i < N_Q, dv < HEAD_DIM_V)", hyp + [row_ok, dv_ok,
                                                                                        z(v.shape[3]) >= 1],
                             _inside((offb, offh, row, dvz), out.shape)))
        cases.append(_decide("lse[b, h, i] inside (lanes i < N_Q)", hyp + [row_ok], _inside((offb, offh, row), lse.shape)))
        # the outputs as both launchers make them (spec.launch.forward_outputs: forward_plan's meta tensors,
        # launch_forward's real ones): every element the stores admit lies inside them, in a row-major layout (no two
        # elements share an offset)
        made = {name: A.Strided(name, shape, strides) for name, (shape, strides) in outputs(q, v).items()}
        cases.append(_decide("out and lse as launched (spec.launch.forward_outputs) hold out[b, h, i, dv] (lanes i < "
                             "N_Q, dv < HEAD_DIM_V) and lse[b, h, i]", hyp + [row_ok, dv_ok, z(v.shape[3]) >= 1],
                             z3.And(_inside((offb, offh, row, dvz), made["out"].shape),
                                    _inside((offb, offh, row), made["lse"].shape))))
        cases += [(f"{name} as launched (spec.launch.forward_outputs) is row-major: stride {dim}",
                   difference(sp.sympify(got), want)) for name, tensor in made.items()
                  for dim, (got, want) in enumerate(zip(tensor.strides, A.contiguous_strides(tensor.shape)))]
        cases.append(_decide("k[b, off_kvh, j, d] inside (lanes j < N_K, d < HEAD_DIM)", hyp + [key_ok, d_ok],
                             _inside((offb, offkvh, jz, dz), k.shape)))
        cases.append(_decide("v[b, off_kvh, j, dv] inside (lanes j < N_K, dv < HEAD_DIM_V)", hyp + [key_ok, dv_ok],
                             _inside((offb, offkvh, jz, dvz), v.shape)))
        # the split's tail lanes: HEAD_DIM <= dt < HEAD_DIM + HEAD_DIM_TAIL (the launch's split of D)
        dtz = z(A.offs_dt)
        main_z = z(sp.sympify(ints["HEAD_DIM"]))
        dt_ok = ok_at[A.dt_ok](dtz, ln["dt"])
        qk_cover, qk_once, v_cover = _columns_admitted(c, ok_at[A.d_ok], ok_at[A.dt_ok], ok_at[A.dv_ok], ln)
        widths_hyp = _width_hyp(z, main_z, z(sp.sympify(ints["HEAD_DIM_TAIL"])), z(sp.sympify(ints["HEAD_DIM_V"])))
        cases.append(_decide("every column c < D of q/k is admitted by one lane (d_ok at d = c, or dt_ok at dt = c), "
                             "every c < D_v of v/out by dv_ok", hyp + widths_hyp + [0 <= c],
                             z3.And(z3.Implies(c < z(D), z3.And(qk_cover, qk_once)),
                                    z3.Implies(c < z(v.shape[3]), v_cover))))
        cases.append(_decide("q[b, h, i, dt] inside (lanes i < N_Q, dt < HEAD_DIM + HEAD_DIM_TAIL = D)",
                             hyp + [row_ok, dt_ok], _inside((offb, offh, row, dtz), q.shape)))
        cases.append(_decide("k[b, off_kvh, j, dt] inside (lanes j < N_K, dt < HEAD_DIM + HEAD_DIM_TAIL = D)",
                             hyp + [key_ok, dt_ok], _inside((offb, offkvh, jz, dtz), k.shape)))
        cases.append(_decide("mask[b, h, i, j] inside (lanes i < N_Q, j < N_K)", hyp + [row_ok, n_ok],
                             _inside((offb, offh, row, jz), t["mask"].shape)))
        tile = [sn >= 0, sn < z(N_K), sn % z(n.B_c) == 0]
        cases.append(_decide("block_map[b, h, pid_m, start_n // BLOCK_N] inside (a visited key tile starts in [0, N_K))",
                             hyp + tile, _inside((offb, offh, pidm, sn / z(n.B_c)), t["block_map"].shape)))
        cases.append(_map_tile_case("the block map's entry [pid_m, start_n // BLOCK_N], built at spec.launch."
                                    "block_map_tiles, classifies exactly the rows [pid_m·BLOCK_M, +BLOCK_M) and keys "
                                    "[start_n, +BLOCK_N) of the kernel's tile", map_tiles(_FORWARD_MODULE),
                                    (n.B_r, n.B_c)))
        cases.append(_decide("key_lengths[b], sinks[h], slopes[h], mask_mod_args[b, 0] inside", hyp + [z(sp.Symbol(
            "P", integer=True, positive=True)) >= 1], z3.And(_inside((offb,), (B,)), _inside((offh,), (Hq,)),
                                                             _inside((offb, 0), t["mask_mod_args"].shape))))
        cases.append(_decide("q/k/v_descale[b, off_kvh] inside (B, Hkv)", hyp,
                             _inside((offb, offkvh), t["descales"][0].shape)))
        cases.append(_decide("philox[1] inside philox (2,)", [], _inside((z3.IntVal(1),), (2,))))
        # the grid covers every row of every (batch, query head): cdiv(N_Q, BLOCK_M) tiles, Hq heads, B entries
        cases.append(_decide("the grid covers every (b, h, i): grid[0]·BLOCK_M >= N_Q, grid[1:] = (Hq, B)",
                             [x >= 1 for x in (z(B), z(Hq), z(N_Q), z(n.B_r))],
                             z3.And(z(sp.sympify(grid[0])) * z(n.B_r) >= z(N_Q),
                                    z(sp.sympify(grid[1])) == z(Hq), z(sp.sympify(grid[2])) == z(B))))
    # _dropout_keep: the keep mask (B, H, N_Q, N_K) it writes, at the strides dropout_mask_launch passes
    keep = A.symbolic("keep", ("B", "Hq", "N_Q", "N_K"))
    kgrid, kints = dropout_mask_launch(keep, n.B_r)
    klaunched = {sym: sp.sympify(kints[name]) for name, sym in A.F_.items() if name in kints}
    (keep_term,) = groups["keep_offset"]
    got = sp.expand(_lanes(keep_term.expr).xreplace({A.offs_m64: i}).xreplace(klaunched))
    cases.append(("_dropout_keep: keep offset is keep[b, h, i, j]",
                  difference(got, sp.expand(keep.offset_of((A.off_b, A.off_h, i, j))))))
    z = _Z3A()
    # its printed lanes: offs_m = start_m + arange(BLOCK_M) with its own start_m = program_id(0)·BLOCK_M, offs_n of
    # a key tile of its printed loop (spec.addresses.FORWARD_LOOPS n_all: start_n in range(0, N_K, BLOCK_N), read),
    # start_n >= 0
    kn, shapes = _read_lanes(z, lanes, ("m", "n"), starts=("start_m_pid",))
    cases += [(f"_dropout_keep: {name}", value) for name, value in shapes]
    hyp, (offb, offh, _, pidm, row) = _grid_hyp(kgrid, kints, q, k, kn["m"])
    # its printed store mask row_ok & n_ok (the forward's terms) at the sizes the launch passes
    ksizes = {A.N_Q: kints.get("N_Q", keep.shape[2]), A.N_K_: kints.get("N_K", keep.shape[3])}
    ok_at = _lanes_ok(z, groups, ("row_ok", "n_ok"), ksizes)
    keep_lanes = [ok_at[A.row_ok](row), ok_at[A.n_ok](z(j), kn["n"]), z(A.start_n) >= 0]
    cases.append(_decide("_dropout_keep: keep[b, h, i, j] inside (lanes row_ok & n_ok), the grid covers every row",
                         hyp + keep_lanes,
                         z3.And(_inside((offb, offh, row, z(j)), keep.shape),
                                z(sp.sympify(kgrid[0])) * z(n.B_r) >= z(N_Q))))
    cases += [(f"_dropout_keep: {name}", value) for name, value in _tiling_cases(
        "rows", kn["m"], [z(N_Q) >= 1, z(n.B_r) >= 1], 0, z(N_Q), z(n.B_r),
        lambda t_: z3.And(0 <= t_, t_ < z(sp.sympify(kgrid[0]))), lambda t_: [(z(terms.program_id(0)), t_)])]
    nk = z(sp.sympify(ksizes[A.N_K_]))
    cases += [(f"_dropout_keep: {name}", value) for name, value in _loop_cases(
        "key tiles", kn["n"], _Loop(z, loops["n_all"], {A.N_K_: ksizes[A.N_K_]}), [nk >= 1], 0, nk)]
    return result(A.CLAIM_FORWARD, cases, "offsets by SymPy (canonical zero), extents by z3")


def _head_dim_lanes(ints, D, Dv, z, hyp):
    """The launch's head dims (``spec.launch.head_dims`` through the launch function: ``ints`` or ``constexprs``):
    ``(hyp, case)``, ``hyp`` with the split point ``HEAD_DIM`` the launch was given in ``[1, D]`` and ``D_v >= 1``,
    and the case that the lanes cover every column and no more: ``HEAD_DIM + HEAD_DIM_TAIL = D`` (q, k: each column
    of the inner product read once, claim head_dim_split) and ``HEAD_DIM_V = D_v`` (v, out: every output column
    written). With the extents' cases (lanes ``d < HEAD_DIM``, ``dv < HEAD_DIM_V`` inside the tensors) a launch
    passing q's head dim for v's fails: D > D_v reads and writes past v's and out's columns, D < D_v leaves out's
    columns D… unwritten."""
    main, tail, hdv = (z(sp.sympify(ints[x])) for x in ("HEAD_DIM", "HEAD_DIM_TAIL", "HEAD_DIM_V"))
    hyp = hyp + [z(D) >= 1, z(Dv) >= 1, 1 <= z(A.HEAD_DIM_), z(A.HEAD_DIM_) <= z(D)]
    return hyp, _decide("the head dims' lanes cover every column: HEAD_DIM + HEAD_DIM_TAIL = D, HEAD_DIM_V = D_v "
                        "(spec.launch.head_dims)", hyp,
                        z3.And(1 <= main, tail >= 0, main + tail == z(D), hdv == z(Dv)))


def _width_cases(title, widths, axes, points, facts) -> tuple[tuple[str, sp.Basic], ...]:
    """The cases of a launch's tile widths function, checked on its output at every head dim the contract accepts:
    ``w = widths(*p)`` at each point ``p`` of ``points`` (values of ``axes``: the head dims, and the fp8 flag where
    the widths take one), one case ``"{title}: {name}"`` per fact ``name: holds(w, *p)``, residual 0 when it holds
    at every point, else a symbol naming the first point that breaks it and the widths there."""
    first = {}
    for p in points:
        w = widths(*p)
        for name, holds in facts.items():
            if name not in first and not holds(w, *p):
                first[name] = sp.Symbol(", ".join(f"{a}={v}" for a, v in zip(axes, p)) + f": {w}")
    return tuple((f"{title}: {name}", first.get(name, ZERO)) for name in facts)


@functools.lru_cache(maxsize=8)
def _tile_width_cases(widths=None) -> tuple[tuple[str, sp.Basic], ...]:
    """What the kernels' lanes need of the tile widths the runtime launches with (``spec.launch.tile_widths``),
    checked on its output for every head dim the contract accepts (q/k's D and v's D_v in ``1..head_dim_max``,
    q/k's products on fp8 operands or not): the split's parts ``HEAD_DIM + HEAD_DIM_TAIL = D`` (``HEAD_DIM >= 1``)
    and ``HEAD_DIM_V = D_v``; ``arange(BLOCK_D)``, ``HEAD_DIM + arange(BLOCK_DT)``, ``arange(BLOCK_DV)`` reach
    every column the masks let through (each width at least its head dim); a tail only when ``HEAD_DIM =
    BLOCK_D`` (a box or tile of the main part ends where the tail begins); each width a power of two (tl.arange)
    of at least 16 (tl.dot's K). A case's residual names the first head dims that break it (``_width_cases``)."""
    from spec.assumptions import limit

    top = limit("head_dim_max")
    facts = {
        "the split covers D and v's head dim is D_v: HEAD_DIM + HEAD_DIM_TAIL = D, HEAD_DIM >= 1, HEAD_DIM_V = D_v":
            lambda w, D, Dv, fp8: w.HEAD_DIM + w.HEAD_DIM_TAIL == D and w.HEAD_DIM >= 1 and w.HEAD_DIM_TAIL >= 0
            and w.HEAD_DIM_V == Dv,
        "BLOCK_D >= HEAD_DIM": lambda w, *_: w.BLOCK_D >= w.HEAD_DIM,
        "BLOCK_DT >= HEAD_DIM_TAIL": lambda w, *_: w.BLOCK_DT >= w.HEAD_DIM_TAIL,
        "BLOCK_DV >= HEAD_DIM_V": lambda w, *_: w.BLOCK_DV >= w.HEAD_DIM_V,
        "a tail only when HEAD_DIM = BLOCK_D": lambda w, *_: w.HEAD_DIM_TAIL == 0 or w.HEAD_DIM == w.BLOCK_D,
        "BLOCK_D, BLOCK_DT, BLOCK_DV are powers of two >= 16": lambda w, *_: all(
            x >= 16 and x & (x - 1) == 0 for x in (w.BLOCK_D, w.BLOCK_DT, w.BLOCK_DV)),
    }
    points = ((D, Dv, fp8) for fp8 in (False, True) for D in range(1, top + 1) for Dv in range(1, top + 1))
    return _width_cases(f"tile widths (spec.launch.tile_widths, every D, D_v in 1..{top})",
                        L.tile_widths if widths is None else widths, ("D", "D_v", "fp8"), points, facts)


#: the lane each printed mask guards, by the mask's name (the kernels' loads and stores: row_ok on the rows offs_m,
#: d_ok / dv_ok / dt_ok on the columns offs_d / offs_dv / offs_dt, key_ok and n_ok on the keys offs_n); a mask's term
#: reading another lane is then a free symbol the proofs cannot discharge
_MASK_LANE = {A.row_ok: A.offs_m, A.d_ok: A.offs_d, A.dv_ok: A.offs_dv, A.dt_ok: A.offs_dt, P.key_ok: A.offs_n,
              A.n_ok: A.offs_n, A.t_ok: A.offs_t, A.ro_ok: A.offs_d, A.pos_ok: A.offs_pos, A.ij_ok: (n.i, n.j),
              A.entry_ok: A.offs_e}


class _Lane:
    """A printed lane ``offs_x = base + arange(width)`` (spec.addresses.*_LANES), read from its term instead of
    assumed (issue 24): ``base`` and ``width`` (SymPy; ``sub`` substitutes the printed tile start it reads and the
    launch's sizes), ``shape`` the case that the term has that form (one ``arange``, coefficient 1; a failing case
    names the term otherwise), ``start(*pairs)`` the base in z3 (``pairs``: z3 substitutions placing it at one
    program or tile), ``holds(x, *pairs)`` the z3 Bool "x is one of the lane's indices": ``base <= x < base +
    width``."""

    def __init__(self, z, group, sub=None):
        (term,) = group
        e = sp.expand(sp.sympify(term.expr).xreplace(sub or {}))
        found = sorted(e.atoms(terms.arange), key=str)
        self.z, self.name = z, term.name
        self.width = found[0].args[0] if len(found) == 1 else sp.Integer(1)
        self.base = e.xreplace({a: sp.Integer(0) for a in found})
        ok = len(found) == 1 and sp.expand(e - self.base - found[0]) == 0
        self.shape = (f"the printed lane {term.name} = {term.expr} is base + arange(width)",
                      ZERO if ok else sp.Symbol(f"{term.name} = {term.expr}: not base + arange(width)"))

    def start(self, *pairs):
        b = self.z(self.base)
        return z3.substitute(b, *pairs) if pairs else b

    def holds(self, x, *pairs):
        b = self.start(*pairs)
        return z3.And(b <= x, x < b + self.z(self.width))


def _read_lanes(z, lanes, names, sub=None, starts=()):
    """``({name: _Lane}, shape cases)`` for the printed lanes ``lanes[name]`` of ``names`` at ``sub``, each lane's
    printed tile start (``starts``: names of ``lanes`` holding ``start_m = ...``, ``start_n = ...``) substituted."""
    sub = dict(sub or {})
    for s_ in starts:
        (t,) = lanes[s_]
        sub[t.symbol] = t.expr
    read = {name: _Lane(z, lanes[name], sub) for name in names}
    return read, [lane.shape for lane in read.values()]


class _Loop:
    """A printed tile loop ``for x in range(start, stop, step):`` (spec.addresses.*_LOOPS: ``x = tile_range(start,
    stop, step)``), read from its term instead of assumed (issue 24; ``sub`` substitutes the printed bounds and the
    launch's sizes it reads): ``first``, ``stop``, ``step`` in z3, ``visited(t)`` the z3 Bool "the loop runs tile t"
    (``t >= 0`` and ``start + t·step < stop``), ``at(t)`` the z3 pair placing the loop's variable (the tile start the
    lane's base reads) at tile t."""

    def __init__(self, z, group, sub=None):
        (term,) = group
        start, stop, step = (sp.sympify(a).xreplace(sub or {}) for a in term.expr.bounds)
        self.var, self.first, self.stop, self.step = z(term.symbol), z(start), z(stop), z(step)

    def visited(self, t):
        return z3.And(t >= 0, self.first + t * self.step < self.stop)

    def at(self, t):
        return [(self.var, self.first + t * self.step)]


def _loop_cases(tag, lane, loop, hyp, lo, hi):
    """``_tiling_cases`` of a printed tile loop (a ``_Loop``) over the intended ``[lo, hi)``: its start, stop and step
    are the term's, so a step other than the lane's width, a stop short of ``hi`` or a start past ``lo`` fails."""
    return _tiling_cases(tag, lane, hyp, lo, hi, loop.step, loop.visited, loop.at, first=loop.first)


def _index_loop_cases(names, loop, hyp, member, value, position):
    """An index loop (a printed ``_Loop`` of step 1, ``for g in range(0, GROUP):``) reaches every intended index once and
    nothing else: ``member(i)`` the z3 Bool "i is an intended index" (as the reference has them), ``value(x)`` the index
    the loop's value ``x`` reaches (as the kernel computes it), ``position(i)`` the loop value the reference gives index
    ``i``. Index ``i`` is reached at iteration ``t = (position(i) - first) // step``, which is visited; no index is
    reached at two visited iterations; every visited iteration reaches an intended index (``names``: the three cases'
    names). A start past 0, a stop one short or a step 2 fails the first; a value outside the intended set the last."""
    i, t, t1, t2 = z3.Ints(f"{loop.var}_index {loop.var}_t {loop.var}_t1 {loop.var}_t2")
    x = lambda t_: loop.first + t_ * loop.step  # noqa: E731  (the loop's value at iteration t_)
    at = (position(i) - loop.first) / loop.step
    every, once, only = names
    return [_decide(every, hyp + [member(i)], z3.And(loop.visited(at), value(x(at)) == i)),
            _decide(once, hyp + [loop.visited(t1), loop.visited(t2), value(x(t1)) == value(x(t2))], t1 == t2),
            _decide(only, hyp + [loop.visited(t)], member(value(x(t))))]


#: backward_kernel_addresses' cases of dK/dV's loop over the GROUP query heads of its K/V head (prefixed "dkdv: ")
HEAD_LOOP_CASES = (
    "the loop over g (for g in range(0, GROUP)): every query head h < H_q that spec.reference maps to this K/V head "
    "(h // (H_q // H_kv) = off_kvh) is off_kvh·GROUP + g at a visited g",
    "the loop over g: no query head is reached at two visited g",
    "the loop over g: every visited g's query head off_kvh·GROUP + g is in [0, H_q) and maps to this K/V head")
#: rows_addresses' cases of _merge_states' loop over the splits (prefixed "merge_states: ")
SPLIT_LOOP_CASES = ("the loop over s (for s in range(S)): every split s < S is visited",
                    "the loop over s: no split is visited twice", "the loop over s: every visited s is a split, in [0, S)")


def _tiling_cases(tag, lane, hyp, lo, hi, step, visited, at, first=None):
    """The tiles of a loop or grid reach every index of ``[lo, hi)`` through ``lane`` exactly once: index ``i`` is in
    the lanes of tile ``t = (i - first) // step`` (``first``: the first tile's start, ``lo`` unless a printed loop
    says otherwise), which is visited (``visited(t)``), and no index is in the lanes of two visited tiles (``at(t)``:
    the z3 pairs placing the lane's base at tile t). A lane narrower than the step misses indices, a wider one or a
    shifted base reaches one twice (or past the tile)."""
    i, t1, t2 = z3.Ints(f"{lane.name}_i {lane.name}_t1 {lane.name}_t2")
    t = (i - (lo if first is None else first)) / step
    return [_decide(f"{tag}: every index in [lo, hi) is in the lanes {lane.name} of a visited tile", hyp + [
                lo <= i, i < hi, step >= 1], z3.And(visited(t), lane.holds(i, *at(t)))),
            _decide(f"{tag}: no index is in the lanes {lane.name} of two tiles", hyp + [
                step >= 1, visited(t1), visited(t2), lane.holds(i, *at(t1)), lane.holds(i, *at(t2))], t1 == t2)]


def _width_hyp(z, main, tail, dv):
    """The tile widths' facts ``_tile_width_cases`` proves of spec.launch.tile_widths (BLOCK_D >= HEAD_DIM, BLOCK_DT >=
    HEAD_DIM_TAIL, BLOCK_DV >= HEAD_DIM_V, a tail only when HEAD_DIM = BLOCK_D), on the width names the printed lanes
    read (spec.addresses.BLOCK_D_, ...)."""
    bd, bdt, bdv = (z(x) for x in (A.BLOCK_D_, A.BLOCK_DT_, A.BLOCK_DV_))
    return [bd >= main, bdt >= tail, bdv >= dv, z3.Or(tail == 0, main == bd), bd >= 1, bdt >= 1, bdv >= 1]


def _lane_ok(z, term, sizes):
    """A printed lane mask (an ``_ok`` term of spec.addresses) at the launch's ``sizes``, as the z3 Bool it gives one
    lane: ``ok(x)`` is the mask with its lane (``_MASK_LANE``) ``= x``; ``ok(x, lane)`` adds that ``x`` is one of the
    printed lane's indices (a ``_Lane``: ``tl.arange``'s lanes from the base the kernel prints, ``offs_dt = HEAD_DIM
    + arange(BLOCK_DT)`` from HEAD_DIM). A mask of a 2-D tile's elements (``ij_ok``: lanes ``(i, j)``, its caller's)
    takes a tuple, ``ok((x, y))``, and its lanes a tuple of ``_Lane``, ``ok((x, y), (rows, keys))``."""
    lanes = _MASK_LANE[term.symbol]
    mask, lanes = z(term.expr.xreplace(sizes)), [z(x) for x in (lanes if isinstance(lanes, tuple) else (lanes,))]

    def ok(x, of=None):
        xs = x if isinstance(x, tuple) else (x,)
        at = z3.substitute(mask, *zip(lanes, xs))
        if of is None:
            return at
        return z3.And(*[lane_.holds(v) for lane_, v in zip(of if isinstance(of, tuple) else (of,), xs)], at)
    return ok


def _lanes_ok(z, groups, names, sizes):
    """The printed lane masks of ``groups[name]`` for each of ``names``, by symbol (``row_ok``, ``d_ok``, ...): each
    ``_lane_ok`` at ``sizes``."""
    return {t.symbol: _lane_ok(z, t, sizes) for name in names for t in groups[name]}


def _columns_admitted(c, d_ok, dt_ok, dv_ok, lanes):
    """No column missed or read twice: ``(q/k's column c is admitted, by one lane only, v/out's column c is
    admitted)`` as z3 Bools, from the ``_lane_ok`` masks on the printed lanes (``lanes``: the ``_Lane`` of d, dt, dv)
    — q/k's column ``c`` by ``d_ok`` at a lane ``d = c`` of ``offs_d`` or by the tail's ``dt_ok`` at a lane ``dt =
    c`` of ``offs_dt``, not both (the inner product reads each column once); v/out's by ``dv_ok`` at ``dv = c``."""
    main, tail = d_ok(c, lanes["d"]), dt_ok(c, lanes["dt"])
    return z3.Or(main, tail), z3.Not(z3.And(main, tail)), dv_ok(c, lanes["dv"])


def _inside(idx, shape):
    z = _Z3A()
    return z3.And(*[z3.And(0 <= x, x < (z(sp.sympify(s)) if not isinstance(s, z3.ArithRef) else s))
                    for x, s in zip(idx, shape)])


def _grid_hyp(grid, ints, q, k, rows=None):
    """Hypotheses of one program of ``grid`` and one row lane: ``(hyp, (off_b, off_h, off_kvh, pid_m, row))``
    in z3, the program split as spec.addresses.GRID_TILE, GRID_HEAD and spec.structure.GQA_HEAD print it, the row the
    printed lane ``rows`` (a ``_Lane`` of offs_m) gives at the program's pid_m (None: the TMA boxes, which read no
    row lane, take ``pid_m·BLOCK_M + lane``)."""
    from spec import structure as S

    z = _Z3A()
    B, Hq, Hkv = (z(x) for x in (q.shape[0], q.shape[1], k.shape[1]))
    group_true, lane = z3.Ints("group_true lane")
    hyp = [x >= 1 for x in (B, Hq, Hkv, z(q.shape[2]), z(q.shape[3]), z(k.shape[2]), z(n.B_r), z(n.B_c), group_true)]
    grid_hyp, prog = _grid_program(A.GRID_TILE + A.GRID_HEAD, grid, ints, z)  # claim launch_grid
    width = z(n.B_r) if rows is None else z(rows.width)
    hyp += [Hq == group_true * Hkv, 0 <= lane, lane < width] + grid_hyp
    offb, offh, pidm = prog[A.off_b], prog[A.off_h], prog[A.pid_m]
    offkvh = z3.substitute(z(S.GQA_HEAD.expr.xreplace({S.group: sp.sympify(ints.get("GROUP", 1))})),
                           (z(A.off_h), offh))
    start = pidm * z(n.B_r) if rows is None else rows.start((z(A.pid_m), pidm))
    return hyp, (offb, offh, offkvh, pidm, start + lane)


# ----------------------------------------------------------------------------------
# The forward's TMA path.
# ----------------------------------------------------------------------------------
BLOCK_D, BLOCK_DV, BLOCK_DT, TAIL = (sp.Symbol(s, integer=True, positive=True) for s in (
    "BLOCK_D", "BLOCK_DV", "BLOCK_DT", "HEAD_DIM_TAIL"))


@claim(A.CLAIM_TMA,
       "the forward's TMA boxes: for all shapes and non-negative strides of q (B, Hq, N_Q, D), k (B, Hkv, N_K, D), "
       "v (B, Hkv, N_K, D_v), out (B, Hq, N_Q, D_v), with the operands spec.launch.forward_tma_operands names, the "
       "descriptors spec.launch.tma_descriptor builds over them (their shapes and strides, a [1, 1, rows, width] box) "
       "and the grid spec.launch.forward_launch passes, each printed box (spec.addresses.TMA_BOXES: Q's and Out's "
       "q_box, K's and V's k_box, the split head dim's q_tail_box, k_tail_box) moves at box lane (r, c) the element "
       "q[b, h, start_m + r, c], out[b, h, start_m + r, c], k/v[b, h // GROUP, start_n + r, c], q[b, h, start_m + r, "
       "HEAD_DIM + c], k[b, h // GROUP, start_n + r, HEAD_DIM + c] (the element the reference reads, at its offset Σ "
       "idx·stride); its box is the pointer path's tile (BLOCK_M or BLOCK_N rows, BLOCK_D, BLOCK_DV or BLOCK_DT "
       "wide); a lane's element lies inside the tensor exactly when the pointer path's mask lets that lane through "
       "(rows i < N_Q or keys j < N_K, columns d < HEAD_DIM, dv < D_v, tail columns < HEAD_DIM + HEAD_DIM_TAIL = D), "
       "and every descriptor asks for zero fill (padding 'zero'), so under the hardware hypothesis tma_out_of_bounds "
       "TMA's per-dimension clipping (zero-filled loads, skipped stores) is the pointer path's masked load "
       "(other=0) and store; in a masked key tile the padding select tl.where(key_ok[:, None], x, 0.0) on K, V and "
       "K's tail keeps the lanes the printed key_ok admits (forward_addresses' FWD_KEY_OK), so a lane loaded and kept "
       "is exactly one the pointer path's masked load admits, a key j < key_len the reference reads; and every coordinate lies inside its dimension (b < B, h < H, a tile's first row < N, "
       "the tail's first column HEAD_DIM < D), so its int32 cast is exact; the box widths are the runtime's: the tile widths the runtime launches with (spec.launch.tile_widths, for every D, D_v in 1..head_dim_max, fp8 products or not) reach those columns: BLOCK_D >= HEAD_DIM, BLOCK_DT >= HEAD_DIM_TAIL, BLOCK_DV >= D_v, each a power of two >= 16, its split HEAD_DIM + HEAD_DIM_TAIL = D with a tail only when HEAD_DIM = BLOCK_D",
       r"\mathrm{box}(b, h, i_0, d_0)[r, c] = X[b, h, i_0 + r, d_0 + c],\quad "
       r"\mathrm{inside} \iff \mathrm{mask}",
       terms=tuple(t.name for g in A.TMA_BOXES.values() for t in g),
       scope="symbolic shapes, strides (>= 0), grid, tile sizes and lanes (SymPy canonical zero for the offsets, z3 "
             "over unbounded integers for the rest); the head dim split and the widths as the launch makes them "
             "(spec.launch.tile_widths, evaluated at every accepted (D, D_v): HEAD_DIM <= BLOCK_D, D = HEAD_DIM + "
             "HEAD_DIM_TAIL, a tail only when HEAD_DIM = BLOCK_D, D_v <= BLOCK_DV, HEAD_DIM_TAIL <= BLOCK_DT, the "
             "facts the z3 cases then take of the symbolic widths); a key tile's first key < N_K as the stages visit them (claim "
             "mask_tiles_sound); TMA's clipping is the hardware hypothesis tma_out_of_bounds (spec.assumptions."
             "HYPOTHESES, not proved: the documented semantics of cuTensorMapEncodeTiled's oobFill and PTX "
             "cp.async.bulk.tensor — out-of-bound elements zero-filled on load, not written on store), checked on the "
             "interpreter's emulation by tests/test_tma.py, on the hardware only on an sm_90 GPU; the int32 casts exact "
             "for dimensions below 2^31 (launch.tma_layout_problem refuses larger ones)",
       hypotheses=("tma_out_of_bounds",))
def prove_tma_addresses(boxes=A.TMA_BOXES, operands=None, descriptor=None, launch=None, widths=None,
                        lanes=A.FORWARD_LANES, key_ok=A.FWD_KEY_OK):
    operands = L.forward_tma_operands if operands is None else operands
    descriptor = L.tma_descriptor if descriptor is None else descriptor
    launch = L.forward_launch if launch is None else launch
    t = _forward_tensors()
    q, k, v, out = (t[x] for x in ("q", "k", "v", "out"))
    B, Hq, N_Q, D = q.shape
    N_K, Dv = k.shape[2], v.shape[3]
    grid, ints = launch(q, k, v, out, t["lse"], t["key_lengths"], t["mask"], t["block_map"], t["slopes"]["(Hq,)"],
                        t["sinks"], n.B_r)
    ops = operands(q, k, v, out, n.B_r, n.B_c, BLOCK_D, BLOCK_DV, BLOCK_DT)
    r, c = (sp.Symbol(x, integer=True) for x in ("lane_r", "lane_c"))
    start_m = A.start_m_fwd
    z = _Z3A()
    hyp, (offb, offh, offkvh, pidm, _) = _grid_hyp(grid, ints, q, k)
    hd, bd, bdv, bdt, tail, Dz, Dvz = (z(x) for x in (A.HEAD_DIM_, BLOCK_D, BLOCK_DV, BLOCK_DT, TAIL, D, Dv))
    # the split and the widths as the runtime launches them: what the first cases prove of spec.launch.tile_widths'
    # output for every accepted head dim, used here as facts of the symbolic widths
    cases = list(_tile_width_cases(widths))
    hyp += [1 <= hd, hd <= bd, tail >= 0, Dz == hd + tail, z3.Implies(tail > 0, hd == bd), Dvz <= bdv,
            tail <= bdt, z(A.start_n) >= 0, z(A.start_n) < z(N_K), z(N_K) >= 1, Dvz >= 1]
    # the query tile's first row: the printed start_m (spec.addresses.FORWARD_LANES, pid_m·BLOCK_M) at the program's pid_m
    (start_term,) = lanes["start_m"]
    program = [(z(A.off_b), offb), (z(A.off_h), offh), (z(A.off_kvh), offkvh),
               (z(start_m), z3.substitute(z(start_term.expr), (z(A.pid_m), pidm)))]
    # per operand: its printed box, the element the reference reads at lane (r, c), the pointer path's tile
    # (rows, width) and mask (as the element's index), and whether it is a split head dim's tail (read when > 0)
    row_q, row_k = start_m + r, A.start_n + r
    want = {
        "q": ("q_box", (A.off_b, A.off_h, row_q, c), (n.B_r, BLOCK_D), lambda i: z3.And(i[2] < z(N_Q), i[3] < hd), 0),
        "out": ("q_box", (A.off_b, A.off_h, row_q, c), (n.B_r, BLOCK_DV),
                lambda i: z3.And(i[2] < z(N_Q), i[3] < Dvz), 0),
        "k": ("k_box", (A.off_b, A.off_kvh, row_k, c), (n.B_c, BLOCK_D), lambda i: z3.And(i[2] < z(N_K), i[3] < hd), 0),
        "v": ("k_box", (A.off_b, A.off_kvh, row_k, c), (n.B_c, BLOCK_DV),
              lambda i: z3.And(i[2] < z(N_K), i[3] < Dvz), 0),
        "q_tail": ("q_tail_box", (A.off_b, A.off_h, row_q, A.HEAD_DIM_ + c), (n.B_r, BLOCK_DT),
                  lambda i: z3.And(i[2] < z(N_Q), i[3] < hd + tail), 1),
        "k_tail": ("k_tail_box", (A.off_b, A.off_kvh, row_k, A.HEAD_DIM_ + c), (n.B_c, BLOCK_DT),
                  lambda i: z3.And(i[2] < z(N_K), i[3] < hd + tail), 1),
    }
    for param, (box_name, index, tile, mask, is_tail) in want.items():
        if param not in ops:
            cases.append((f"{param}: an operand of the TMA launch", sp.Symbol(f"missing operand {param}")))
            continue
        tensor, rows, width = ops[param]
        desc = descriptor(tensor, rows, width)
        (term,) = boxes[box_name]
        coords = A.box_coordinates(term)
        if coords is None or len(coords) != len(tensor.shape):
            cases.append((f"{param}: {box_name} is a box of {len(tensor.shape)} coordinates",
                          sp.Symbol(f"not a box: {term.expr}")))
            continue
        ref = dict(q=q, out=out, k=k, v=v, q_tail=q, k_tail=k)[param]
        block = [difference(a, b) for a, b in zip(desc[2], (1, 1, *tile))] if len(desc[2]) == 4 else [desc[2]]
        cases.append((f"{param}: the box is the pointer path's tile [1, 1, {tile[0]}, {tile[1]}]",
                      sp.Integer(0) if all(x == 0 for x in block) else sp.Tuple(*block)))
        # the fill tma_out_of_bounds states: zeros (a NaN fill would reach the dot through the padding columns)
        fill = desc[3] if len(desc) > 3 else None
        cases.append((f"{param}: the descriptor's out-of-bound fill is zero (padding 'zero')",
                      sp.Integer(0) if fill == L.TMA_PADDING == "zero" else sp.Symbol(f"padding {fill!r}")))
        if len(desc[0]) != len(tensor.shape) or len(desc[2]) != len(tensor.shape):
            continue  # the descriptor is not over the tensor's dimensions: failed above
        got_index, offset = A.tma_element(desc, coords, (0, 0, r, c))
        cases.append((f"{param}: box lane (r, c) moves {ref.name}{list(index)} (offset Σ idx·stride)",
                      difference(sp.expand(offset), sp.expand(ref.offset_of(index)))))
        # the extents (z3): lanes of the descriptor's box, the program's (b, h, tile) by the launch grid
        lanes = [0 <= z(r), z(r) < z(sp.sympify(desc[2][2])), 0 <= z(c), z(c) < z(sp.sympify(desc[2][3]))]
        idx = [z3.substitute(z(sp.sympify(x)), *program) for x in got_index]
        shape = [z(sp.sympify(x)) for x in desc[0]]
        inside = z3.And(*[z3.And(0 <= x, x < s_) for x, s_ in zip(idx, shape)])
        side = hyp + lanes + ([tail > 0] if is_tail else [])
        cases.append(_decide(f"{param}: a lane's element is inside the tensor exactly when the pointer path's mask "
                             "lets it through (TMA's clipping = the masked load/store)", side, inside == mask(idx)))
        if row_k in index:  # a key tile: in a masked tile the padding select keeps the printed key_ok's lanes, at the
            # tile's keys offs_n = start_n + r (key_len >= 0: key_lengths[b] or N_K)
            (keep,) = key_ok
            kept = _lane_ok(z, keep, {A.N_K_: ints["N_K"]})(idx[2])
            cases.append(_decide(f"{param}: in a masked tile a lane TMA loads and the padding select keeps (key_ok) "
                                 "is exactly one the pointer path's masked load admits, a key j < key_len the "
                                 "reference reads", side + [z(n.key_len) >= 0],
                                 z3.And(inside, kept) == z3.And(mask(idx), idx[2] < z(n.key_len))))
        origin = [z3.substitute(z(sp.sympify(x)), *program) for x in coords]
        cases.append(_decide(f"{param}: every coordinate of the box lies inside its dimension (int32 exact)", side,
                             z3.And(*[z3.And(0 <= x, x < s_) for x, s_ in zip(origin, shape)])))
    return result(A.CLAIM_TMA, cases, "offsets by SymPy (canonical zero), clipping and extents by z3")


# ----------------------------------------------------------------------------------
# Softmax and the merge kernels.
# ----------------------------------------------------------------------------------
#: rows_addresses' and append_addresses' width case
ROWS_WIDTHS = "every product and sum of a stride in the printed offsets is int64 (a lane widened by tl.cast(·, tl.int64))"
APPEND_WIDTHS = ("every product and sum of a stride in the printed offsets is int64 (a factor off_b, off_head, page, "
                 "off_bc, or a lane widened by tl.cast(·, tl.int64))")


@claim(A.CLAIM_ROWS,
       "softmax's and the merge kernels' addresses: for all shapes and non-negative strides of softmax's x, y "
       "(R, N), merge_state's o_a, o_b, o (R, D) and lse_a, lse_b, lse (R,), merge_states' o_s (S, R, D), lse_s "
       "(S, R), o (R, D), lse (R,) and sinks (H,), with the strides, sizes and grids spec.launch.softmax_launch, "
       "merge_state_launch and merge_states_launch pass (the functions the launchers call; softmax's kernel the one "
       "softmax_launch picks), every printed "
       "offset (spec.addresses.ROWS_GROUPS) is the offset of the element the reference reads — x/y[r, c], "
       "o_a/o_b/o[r, d], lse_a/lse_b/lse[r], o_s[s, r, d], lse_s[s, r], sinks[r % H] — inside the tensor for "
       "every program of the grid, split s the loop over the splits visits and lane the mask lets through (r < R, c < N, "
       "d < D), and the grid covers every row; merge_states' loop over the splits (the printed for s in range(S), "
       "spec.addresses.ROWS_LOOPS s, its start, stop and step read) visits each split s < S exactly once and no other; every product or sum of a stride in the printed offsets is int64" + "; the lanes are the printed ones (spec.addresses.ROWS_LANES: offs_m = program_id(0)·BLOCK_M + arange(BLOCK_M), softmax's offs_n = arange(BLOCK_N) (one pass) or start_n + arange(BLOCK_N) (two passes), the merges' offs_d = arange(BLOCK_D), each read from its term as base + arange(width), not assumed): the row tiles' lanes reach every row once, softmax's column steps (the printed loop start_n in range(0, N, BLOCK_N), spec.addresses.ROWS_LOOPS, start, stop and step read) every column once, its one pass (launched where softmax_launch's one_pass holds: N <= BLOCK_N) every column once, and the merges' offs_d (BLOCK_D = spec.launch.merge_block_d(D), the width both merge launchers pass, checked at every D in 1..merge_head_dim_max: a power of two >= D) every column",
       r"\mathrm{off}(X, (r, c)) = r\,s_r + c\,s_c,\quad 0\le r<R,\ 0\le c<N",
       terms=tuple(dict.fromkeys(t.name for g in (*A.ROWS_GROUPS.values(), *A.ROWS_LANES.values(), *A.ROWS_LOOPS.values()) for t in g)),
       scope="symbolic shapes, strides (>= 0), grid and lanes (SymPy canonical zero for the offsets, z3 for the "
             "extents); mathematical integers Z, which the kernels' int64 arithmetic is for tensors under 2^63 elements: "
             "every product and sum of a stride in the printed lines is int64 (offs_m, s, the columns widened "
             "by tl.cast(·, tl.int64); widths read from the printed text with Triton's typing: a stride int32 whenever its value "
             "fits); softmax's pick of one pass as the relation softmax_launch returns on symbolic N, BLOCK_N (z3); the "
             "merges' BLOCK_D = spec.launch.merge_block_d(D) evaluated at every D in 1..merge_head_dim_max (the "
             "contract's bound; D = 0 launches no kernel)")
def prove_rows_addresses(groups=A.ROWS_GROUPS, softmax_launch=None, merge_state_launch=None,
                         merge_states_launch=None, lanes=A.ROWS_LANES, loops=A.ROWS_LOOPS, merge_block_d=None):
    softmax_launch = L.softmax_launch if softmax_launch is None else softmax_launch
    merge_state_launch = L.merge_state_launch if merge_state_launch is None else merge_state_launch
    merge_states_launch = L.merge_states_launch if merge_states_launch is None else merge_states_launch
    block_m = n.B_r
    r, c, d, s = A.offs_m, A.offs_n, A.offs_d, A.s_split
    # the widths: every product of a stride int64 (the lanes widened: x and the partials are any tensors)
    cases = [_widths_case(ROWS_WIDTHS, [t for group in groups.values() for t in group], {})]
    # the merges' tile width as both launchers pass it (spec.launch.merge_block_d), at every accepted head dim: the
    # hypothesis BLOCK_D >= D of their column case below
    cases += _merge_width_cases(L.merge_block_d if merge_block_d is None else merge_block_d)
    # the printed lanes (spec.addresses.ROWS_LANES), read: the program's rows offs_m = program_id(0)·BLOCK_M +
    # arange(BLOCK_M), softmax's columns (one pass: offs_n = arange(BLOCK_N); two passes: start_n + arange(BLOCK_N) at
    # start_n in range(0, N, BLOCK_N), the printed loop spec.addresses.ROWS_LOOPS, read), the merges' offs_d
    zl = _Z3A()
    ln, shapes = _read_lanes(zl, lanes, ("m", "n0", "n", "d"))
    cases += shapes
    pid0 = zl(terms.program_id(0))
    col_lanes = {c: lambda x, ok: z3.Or(ok(x, ln["n0"]), ok(x, ln["n"])), d: lambda x, ok: ok(x, ln["d"])}

    def check(kernel, grid, ints, pairs, bounds, masks=None, splits=None, one_pass=None):
        """``pairs``: (name, printed term, tensor, index); ``bounds``: (symbol, bound) of the load masks; ``masks``:
        the printed row and column masks (the merges': row_ok, d_ok; softmax's row_ok, n_ok), which then bound the
        rows and the first lane's columns (d, or softmax's c: a lane of either pass's offs_n) instead, and must admit
        exactly the rows r < R and columns d < D (c < N). The rows are the printed lanes offs_m of the program.
        ``splits``: merge_states' printed loop over the splits (spec.addresses.ROWS_LOOPS s: ``for s in range(S)``,
        read), whose values s are the split indices the offsets are evaluated at, and which must reach each split s < S
        once and no other. ``one_pass``: softmax's choice of kernel as its launch returns it (a relation on N and
        BLOCK_N, or a bool)."""
        lanes = bounds
        launched = {sym: sp.sympify(ints[name]) for name, sym in A.R_.items() if name in ints}
        launched.update({A.H_: sp.sympify(ints.get("H", 1))})
        for name, term, tensor, index in pairs:
            got = sp.expand(_lanes(term.expr).xreplace(launched))
            cases.append((f"{kernel}: {name}", difference(got, sp.expand(tensor.offset_of(index)))))
        z = _Z3A()
        pid, lane = z3.Ints("pid lane")
        rows = z(sp.sympify(ints["R"]))
        hyp = [rows >= 1, z(block_m) >= 1, 0 <= pid, pid < z(sp.sympify(grid[0])), 0 <= lane,
               lane < z(ln["m"].width), z(A.start_n) >= 0]
        row = ln["m"].start((pid0, pid)) + lane
        sub = lambda e: z3.substitute(z(e), (z(r), row))  # noqa: E731
        lane_hyp = [row < rows] + [z3.And(0 <= z(x), z(x) < z(sp.sympify(bound))) for x, bound in lanes]
        if splits is not None:  # s: a value of the printed loop over the splits, at a visited iteration
            loop, size = _Loop(z, splits, {A.S_SPLITS: sp.sympify(ints["S"])}), z(sp.sympify(ints["S"]))
            t_s = z3.Int("s_t")
            lane_hyp += [loop.visited(t_s), loop.var == loop.first + t_s * loop.step]
            cases.extend((f"{kernel}: {name}", value) for name, value in _index_loop_cases(
                SPLIT_LOOP_CASES, loop, [size >= 1], lambda x: z3.And(0 <= x, x < size),
                lambda x: x, lambda x: x))
        if masks is not None:
            col, (cname, csize) = lanes[0][0], {d: ("d", "D"), c: ("c", "N")}[lanes[0][0]]
            sizes = {A.R_ROWS: ints["R"], A.D_COLS: ints.get("D", 0), A.N_COLS: ints.get("N", 0)}
            row_ok, col_ok = (_lane_ok(z, m, sizes) for m in masks)
            width = z(sp.sympify(lanes[0][1]))  # o's (x's) columns
            lane_hyp = [row_ok(row), col_lanes[col](z(col), col_ok)] + lane_hyp[2:]
            v = z3.Int("lane_value")
            cases.append(_decide(f"{kernel}: row_ok admits exactly the rows r < R, {masks[1].symbol} exactly the columns "
                                 f"{cname} < {csize}", [rows >= 1, width >= 1, 0 <= v],
                                 z3.And(row_ok(v) == (v < rows), col_ok(v) == (v < width))))
        for name, term, tensor, index in pairs:
            hyp_t = hyp + lane_hyp + [z(x) >= 1 for x in tensor.shape]
            cases.append(_decide(f"{kernel}: {name.split(' is ')[-1]} inside (lanes r < R"
                                 + "".join(f", {x} < {b}" for x, b in lanes)
                                 + (", s a split the loop visits" if splits is not None else "") + ")", hyp_t,
                                 _inside([sub(sp.sympify(i)) for i in index], tensor.shape)))
        cases.append(_decide(f"{kernel}: the grid covers every row", [rows >= 1, z(block_m) >= 1],
                             z(sp.sympify(grid[0])) * z(block_m) >= rows))
        # the program's lanes reach every row once; the column lanes every column: softmax's two passes through
        # their steps' lanes once (whatever N), its one pass (launched when the launch's one_pass holds) and the
        # merges (BLOCK_D >= D: _merge_width_cases) through the block's lanes, once each (distinct lanes)
        cases.extend((f"{kernel}: {name}", value) for name, value in _tiling_cases(
            "rows", ln["m"], [rows >= 1], 0, rows, z(block_m), lambda t_: z3.And(0 <= t_, t_ < z(sp.sympify(grid[0]))),
            lambda t_: [(pid0, t_)]))
        col, width = lanes[0][0], z(sp.sympify(lanes[0][1]))
        v = z3.Int("column")
        if col == c:
            cases.extend((f"{kernel}: two passes: {name}", value) for name, value in _loop_cases(
                "column steps", ln["n"], _Loop(z, loops["n"], {A.N_COLS: sp.sympify(lanes[0][1])}), [width >= 1], 0,
                width))
            picked = sp.sympify(one_pass)
            picked = z3.BoolVal(bool(picked)) if isinstance(picked, sp.logic.boolalg.BooleanAtom) else z(picked)
            cases.append(_decide(f"{kernel}: one pass (when spec.launch.softmax_launch picks it): every column c < N "
                                 "is a lane of offs_n", [width >= 1, picked, 0 <= v, v < width], ln["n0"].holds(v)))
        else:
            cases.append(_decide(f"{kernel}: every column d < D is a lane of offs_d (BLOCK_D >= D)",
                                 [width >= 1, z(A.BLOCK_D_) >= width, 0 <= v, v < width], ln["d"].holds(v)))

    def offsets(group):
        return {t.symbol: t for t in groups[group]}

    # softmax
    x, y = A.symbolic("x", ("R", "N")), A.symbolic("y", ("R", "N"))
    grid, ints, one_pass = softmax_launch(x, y, block_m, n.B_c)
    g = offsets("softmax")
    check("softmax", grid, ints, [("x offset is x[r, c]", g[A.x_off], x, (r, c)),
                                  ("y offset is y[r, c]", g[A.y_off], y, (r, c))], [(c, x.shape[1])],
          (*groups["merge_row_ok"], *groups["softmax_n_ok"]), one_pass=one_pass)
    # merge_state
    o_a, o_b, o = (A.symbolic(nm, ("R", "D")) for nm in ("o_a", "o_b", "o"))
    l_a, l_b, lse = (A.symbolic(nm, ("R",)) for nm in ("lse_a", "lse_b", "lse"))
    grid, ints = merge_state_launch(o_a, l_a, o_b, l_b, o, lse, block_m)
    g, go = offsets("merge"), offsets("merge_out")
    check("merge_state", grid, ints, [
        ("lse_a offset is lse_a[r]", g[A.la_off], l_a, (r,)), ("lse_b offset is lse_b[r]", g[A.lb_off], l_b, (r,)),
        ("o_a offset is o_a[r, d]", g[A.oa_off], o_a, (r, d)), ("o_b offset is o_b[r, d]", g[A.ob_off], o_b, (r, d)),
        ("o offset is o[r, d]", go[A.mo_off], o, (r, d)), ("lse offset is lse[r]", go[A.ml_off], lse, (r,))],
        [(d, o.shape[1])], (*groups["merge_row_ok"], *groups["merge_d_ok"]))
    # merge_states
    o_s, l_s = A.symbolic("o_s", ("S", "R", "D")), A.symbolic("lse_s", ("S", "R"))
    o, lse, sinks = A.symbolic("o", ("R", "D")), A.symbolic("lse", ("R",)), A.symbolic("sinks", ("H",))
    grid, ints = merge_states_launch(o_s, l_s, o, lse, sinks, block_m)
    g, gs = offsets("merge_split"), offsets("merge_sink")
    check("merge_states", grid, ints, [
        ("lse_s offset is lse_s[s, r]", g[A.ls_off], l_s, (s, r)), ("o_s offset is o_s[s, r, d]", g[A.os_off], o_s,
                                                                   (s, r, d)),
        ("o offset is o[r, d]", go[A.mo_off], o, (r, d)), ("lse offset is lse[r]", go[A.ml_off], lse, (r,)),
        ("sink offset is sinks[r % H]", gs[A.msink_off], sinks, (sp.Mod(r, sinks.shape[0]),))],
        [(d, o.shape[1])], (*groups["merge_row_ok"], *groups["merge_d_ok"]), splits=loops["s"])
    return result(A.CLAIM_ROWS, cases, "offsets by SymPy (canonical zero), extents by z3")


@functools.lru_cache(maxsize=4)
def _merge_width_cases(merge_block_d) -> tuple[tuple[str, sp.Basic], ...]:
    """The merges' tile width (``merge_block_d``: spec.launch.merge_block_d, what both merge launchers and their AOT
    compile pass) at every head dim their contract accepts (``1..merge_head_dim_max``; D = 0 launches no kernel):
    at least ``D`` (so ``arange(BLOCK_D)`` reaches every column ``d_ok`` lets through) and a power of two
    (tl.arange). A case's residual names the first head dim that breaks it (``_width_cases``)."""
    from spec.assumptions import limit

    top = limit("merge_head_dim_max")
    return _width_cases(f"the merges' columns arange(BLOCK_D) reach every d < D (spec.launch.merge_block_d, every D "
                        f"in 1..{top})", merge_block_d, ("D",), ((D,) for D in range(1, top + 1)),
                        {"BLOCK_D >= D": lambda w, D: w >= D,
                         "BLOCK_D is a power of two": lambda w, D: w >= 1 and w & (w - 1) == 0})


# ----------------------------------------------------------------------------------
# The KV-cache append.
# ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _append_tile_width_case(block_d=None):
    """The append's columns are lanes of ``tl.arange(0, BLOCK_D)``, ``BLOCK_D = spec.launch.block_d(D)`` as its
    launcher passes it (``block_d``; None: that function): at least ``D`` for every head dim the contract accepts,
    so ``d_ok`` (d < HEAD_DIM = D) is the only bound on the columns. The residual names the first head dim that
    breaks it (``_width_cases``)."""
    from spec.assumptions import limit

    top = limit("head_dim_max")
    (case,) = _width_cases("the tile's columns arange(BLOCK_D) reach every d < D", block_d or L.block_d, ("D",),
                           ((D,) for D in range(1, top + 1)),
                           {f"spec.launch.block_d(D) >= D for D in 1..{top}": lambda w, D: w >= D})
    return case


@claim(A.CLAIM_APPEND,
       "the KV-cache append's addresses: for all shapes and non-negative strides of x (B, N_new, H, D), the "
       "destination (a contiguous cache (B_cache, N_cache, H, D), a paged cache (num_pages, PAGE_SIZE, H, D) or a "
       "tensor like x), cache_seqlens and cache_batch_idx (B,), block_table (B, max_pages) and the rotary tables "
       "cos, sin (seqlen_ro, R), with the strides and grid spec.launch.append_launch passes (the function the "
       "launcher calls), every printed offset of _append_rows (spec.addresses.APPEND_GROUPS) is the offset of the "
       "element the reference reads or writes — cache_seqlens[b], cache_batch_idx[b], block_table[b, j // "
       "PAGE_SIZE], x[b, t, head, d] and its rotary partner x[b, t, head, pair], cache[block_table[b, j // "
       "PAGE_SIZE], j % PAGE_SIZE, head, d] (paged), cache[off_bc, j, head, d] (contiguous; off_bc = b or "
       "cache_batch_idx[b]), out[b, t, head, d], cos/sin[pos, freq] — with j = cache_seqlens[b] + t, the token's "
       "cache index the reference appends at, against the printed offs_j (APPEND_KEY, cache_seqlens[b] as loaded); "
       "and x, the "
       "destination, cache_seqlens, cache_batch_idx and block_table are read or written inside their shapes for "
       "every program of the grid and every lane its load's or store's mask admits (given cache_seqlens[b] + "
       "N_new <= the capacity, page ids in [0, num_pages), cache_batch_idx entries in [0, B_cache), B_cache = B "
       "without it): the masks are the printed t_ok, d_ok (APPEND_T_OK, APPEND_D_OK: t < N_NEW, d < HEAD_DIM at the "
       "N_NEW and HEAD_DIM append_launch passes), x and the destination read and written for lanes t_ok & d_ok "
       "(row_mask), block_table for lanes t_ok; t_ok and d_ok admit exactly the rows t < N_new and the columns "
       "d < D the reference writes (the grid reaches every t < N_new, the tile's arange(BLOCK_D), BLOCK_D = "
       "spec.launch.block_d(D), every d < D for every accepted D); "
       "the printed rotary lane mask ro_ok (APPEND_RO_LANE, at ROTARY_HALF = R as append_launch passes it) "
       "admits exactly the lanes d < rotary_dim = 2R of the tile, the lanes spec.rotary.ROTATE rotates; "
       "for every rotary lane (t_ok & ro_ok, the partner's and the tables' mask) of "
       "either layout (spec.rotary's printed lane terms) the partner x[b, t, head, pair] is inside x (given "
       "rotary_dim = 2R <= D, rotary_cos's contract rule) and, for either PER_TOKEN, the tables cos, sin are read "
       "at [pos, freq] inside (seqlen_ro, R) for every lane whose row passes the printed mask pos_ok "
       "(APPEND_ROW_OK: pos < SEQLEN_RO as append_launch passes it); every product or sum of a stride in the printed "
       "offsets is int64" + "; the lanes are the printed ones (spec.addresses.APPEND_LANES: offs_t = program_id(0)·BLOCK_T + arange(BLOCK_T), offs_d = arange(BLOCK_D), each read from its term as base + arange(width), not assumed): the token tiles' lanes reach every new token once and offs_d every column (BLOCK_D = block_d(D) >= D)",
       r"\mathrm{off}(X, \mathrm{idx}) = \sum_d \mathrm{idx}_d\,\mathrm{stride}_d",
       terms=tuple(dict.fromkeys(t.name for g in (*A.APPEND_GROUPS.values(), *A.APPEND_LANES.values()) for t in g)),
       scope="symbolic shapes, strides (>= 0), grid, lanes and loaded values (SymPy canonical zero for the offsets, "
             "z3 for the extents); mathematical integers Z, which the kernel's int64 arithmetic is for tensors under 2^63 "
             "elements: every product and sum of a stride in the printed lines is int64 (a factor off_b, off_head, "
             "page, off_bc, or t, j, slot, d, pos, freq widened by tl.cast(·, tl.int64); widths read from the printed text with "
             "Triton's typing; page, off_bc the template's .to(tl.int64) loads)")
def prove_append_addresses(groups=A.APPEND_GROUPS, launch=None, lanes=A.APPEND_LANES, block_d=None):
    launch = L.append_launch if launch is None else launch
    lane_terms = lanes
    ((row_ok_term,),) = (groups["row_ok"],)
    (t_ok_term,), (d_ok_term,) = groups["t_ok"], groups["d_ok"]
    block_t = sp.Symbol("BLOCK_T", integer=True, positive=True)
    x = A.symbolic("x", ("B", "N_new", "H", "D"))
    B, N_new, H, D = x.shape
    cs, bi, bt = A.symbolic("cache_seqlens", (B,)), A.symbolic("cache_batch_idx", (B,)), A.symbolic(
        "block_table", (B, "MP"))
    cos, sin = A.symbolic("cos", ("seqlen_ro", "R")), A.symbolic("sin", ("seqlen_ro", "R"))
    dsts = {"paged": A.symbolic("cache", ("NP", "PS", H, D)), "cache": A.symbolic("cache", ("B_cache", "N_cache", H, D)),
            "tensor": A.symbolic("out", x.shape)}
    t, d, j = A.offs_t, A.offs_d, A.offs_j
    lookups = {term.symbol: term for term in groups["lookups"]}
    xs = {term.symbol: term for term in groups["x"]}
    (dst_term,) = groups["dst"]
    tables = {term.symbol: term for term in groups["tables"]}
    cases = []
    page_of = sp.Function("block_table_at")
    # the widths, in the kernel's order (grid, lookups, key, the page gather, the destinations, tables); page and
    # off_bc are loaded .to(tl.int64) by the template (off_bc = off_b without an index), start_new .to(tl.int32)
    order = (*A.GRID_APPEND, *groups["lookups"], *groups["key"], *P.PAGE_GATHER,
             *(t for name, g in groups.items() if name not in ("lookups", "key") for t in g))
    cases.append(_widths_case(APPEND_WIDTHS, order, {A.page.name: 64, A.off_bc.name: 64}))
    cases.append(_append_tile_width_case(block_d))
    for kind, dst in dsts.items():
        grid, ints = launch(x, dst, cs, bt if kind == "paged" else cs, bi, cos, sin, block_t)
        launched = {sym: sp.sympify(ints[name]) for name, sym in A.AP_.items() if name in ints}

        def at(term, sub=None):
            e = _lanes(term.expr)
            for base, value in (sub or {}).items():
                e = e.xreplace({base: value})
            return sp.expand(e.xreplace(launched))

        def same(name, got, tensor, index):
            cases.append((f"{kind}: {name}", difference(got, sp.expand(tensor.offset_of(index)))))

        x_rows = {A.x_base: _lanes(xs[A.x_base].expr)}
        same("x offset is x[b, t, head, d]", at(xs[A.xa_off], x_rows), x, (A.off_b, t, A.off_head, d))
        same("partner offset is x[b, t, head, pair]", at(xs[A.xp_off], x_rows), x, (A.off_b, t, A.off_head,
                                                                                   A.offs_pair))
        same("cache_seqlens offset is cache_seqlens[b]", at(lookups[A.acs_off]), cs, (A.off_b,))
        for name, term, tensor in (("cos", tables[A.cos_off], cos), ("sin", tables[A.sin_off], sin)):
            same(f"{name} offset is {name}[pos, freq]", at(term), tensor, (A.offs_pos, A.offs_freq))
        z = _Z3A()
        lane = z3.Int("lane")
        dims = [z(sp.sympify(s_)) >= 1 for s_ in (B, N_new, H, D, block_t)]
        # the program (token tile, head, b) as spec.addresses.GRID_APPEND splits it (claim launch_grid)
        grid_hyp, prog = _grid_program(A.GRID_APPEND, grid, ints, z)
        # the printed lanes (spec.addresses.APPEND_LANES), read: the program's tokens offs_t = program_id(0)·BLOCK_T +
        # arange(BLOCK_T), the columns offs_d = arange(BLOCK_D)
        ln, shapes = _read_lanes(z, lane_terms, ("t", "d"))
        cases += [(f"{kind}: {name}", value) for name, value in shapes]
        hyp = dims + grid_hyp + [0 <= lane, lane < z(ln["t"].width)]
        b0, h0, pid2 = prog[A.off_b], prog[A.off_head], z(terms.program_id(0))
        tz = ln["t"].start() + lane
        # the printed masks t_ok, d_ok (APPEND_T_OK, APPEND_D_OK) at the N_NEW and HEAD_DIM append_launch passes, on
        # the printed lanes offs_t, offs_d: the lanes' hypotheses, row_mask = t_ok & d_ok
        bounds = {A.N_NEW_: sp.sympify(ints["N_NEW"]), A.HEAD_DIM_: sp.sympify(ints["HEAD_DIM"])}
        t_ok, d_ok = (_lane_ok(z, term, bounds) for term in (t_ok_term, d_ok_term))
        lanes = [t_ok(tz), ln["d"].holds(z(d)), d_ok(z(d))]
        c = z3.Int("lane_value")
        cases.append(_decide(f"{kind}: t_ok admits exactly the new tokens t < N_new (every row the reference "
                             "writes)", dims + [0 <= c], t_ok(c) == (c < z(N_new))))
        cases.append(_decide(f"{kind}: d_ok admits exactly the columns d < D (every column the reference "
                             "writes)", dims + [0 <= c], d_ok(c) == (c < z(D))))
        # the token tiles' lanes reach every new token once; the lanes offs_d every column (BLOCK_D >= D: the
        # launcher's block_d(D))
        cases += [(f"{kind}: {name}", value) for name, value in _tiling_cases(
            "token tiles", ln["t"], dims, 0, z(N_new), z(block_t),
            lambda t_: z3.And(0 <= t_, t_ < z(sp.sympify(grid[0]))), lambda t_: [(pid2, t_)])]
        col = z3.Int("column")
        cases.append(_decide(f"{kind}: every column d < D is a lane of offs_d that d_ok admits (BLOCK_D >= D)",
                             dims + [z(A.BLOCK_D_) >= z(D), 0 <= col, col < z(D)],
                             z3.And(ln["d"].holds(col), d_ok(col))))
        cases.append(_decide(f"{kind}: x[b, t, head, d] inside (lanes t_ok & d_ok)", hyp + lanes,
                             _inside((b0, tz, h0, z(d)), x.shape)))
        cases.append(_decide(f"{kind}: cache_seqlens[b] inside", hyp, _inside((b0,), (B,))))
        cases.append(_decide(f"{kind}: the grid covers every (b, head, t)", dims,
                             z3.And(z(sp.sympify(grid[2])) == z(B), z(sp.sympify(grid[1])) == z(H),
                                    z(sp.sympify(grid[0])) * z(block_t) >= z(N_new))))
        dst_rows = {term.symbol: term for term in groups[f"dst_{kind}"]}[A.dst_base]
        # new token t's cache index: the printed offs_j (cache_seqlens[b] loaded as start_new), which the
        # reference's index j = cache_seqlens[b] + t must equal
        start, start_value = z3.Int("cache_seqlens_value"), sp.Symbol("cache_seqlens_value", integer=True)
        (key_term,) = groups["key"]
        j_printed = _lanes(key_term.expr).xreplace({A.start_new: start_value})
        j_ref = start_value + t
        jz = z3.substitute(z(j_printed), (z(t), tz))
        # the rotary lanes the loads' mask admits (t < N_new, d < 2·ROTARY_HALF; the tables' rows also
        # the printed pos_ok, APPEND_ROW_OK) at the ROTARY_HALF and SEQLEN_RO append_launch passes: the partner lane and
        # the table column of either layout (spec.rotary's printed terms), the row of either PER_TOKEN
        (pos_term,) = RO.ROTARY_POSITION
        half = sp.sympify(ints["ROTARY_HALF"])
        pos_ok = _lane_ok(z, row_ok_term, {A.seqlen_ro: sp.sympify(ints["SEQLEN_RO"])})
        # the printed lane mask ro_ok (APPEND_RO_LANE) at that ROTARY_HALF: exactly the lanes d < rotary_dim =
        # 2·R (R the tables' columns) and exactly the lanes spec.rotary.ROTATE rotates (the others are kept), on
        # every lane of the printed offs_d (the partner's and the tables' masks t_ok & ro_ok carry no d_ok)
        (lane_term,) = groups["ro_lane"]
        lane_z = _lane_ok(z, lane_term, {RO.rotary_half: half})(z(d))
        (rotate_term,) = RO.ROTATE
        rotated = rotate_term.expr.args[0][1].xreplace({RO.rotary_half: half})
        cases.append(_decide(f"{kind}: the rotary lanes ro_ok are d < rotary_dim = 2·R, the lanes ROTATE rotates",
                             hyp + [ln["d"].holds(z(d))],
                             z3.And(lane_z == (z(d) < 2 * z(cos.shape[1])), lane_z == z(rotated))))
        # the partner's and the tables' lanes: ro_mask = t_ok & ro_ok (rotary_dim = 2R <= D: rotary_cos's rule)
        ro_lanes = hyp + [t_ok(tz), ln["d"].holds(z(d)), lane_z, 2 * z(cos.shape[1]) <= z(D)]
        for layout, index_terms in (("GPT-J", RO.INTERLEAVED), ("GPT-NeoX", RO.HALVES)):
            env = {s_: e.xreplace({RO.rotary_half: half}) for s_, e in terms.chain(index_terms).items()}
            freq, pair = z(env[RO.ro_freq]), z(env[RO.ro_pair])
            cases.append(_decide(f"{kind}: {layout}: partner x[b, t, head, pair] inside (rotary lanes; rotary_dim "
                                 "<= D, rotary_cos's rule)", ro_lanes, _inside((b0, tz, h0, pair), x.shape)))
            for per in (0, 1):
                pos = pos_term.expr.xreplace({RO.seqlen: start_value, RO.per_token: per})
                pz = z3.substitute(z(pos), (z(t), tz))
                cases.append(_decide(f"{kind}: {layout}: cos/sin[pos, freq] inside (PER_TOKEN = {per}; rotary lanes "
                                     "whose row passes pos_ok; cache_seqlens[b] >= 0)",
                                     ro_lanes + [0 <= start, pos_ok(pz)],
                                     z3.And(_inside((pz, freq), cos.shape), _inside((pz, freq), sin.shape))))
        if kind == "paged":
            chain = {s_: e.xreplace(launched) for s_, e in terms.chain(P.PAGE_GATHER).items()}
            gather, ref = ({s_: e.xreplace({n.j: jj, P.page_size: dst.shape[1]}) for s_, e in chain.items()}
                           for jj in (j_printed, j_ref))
            bt_at = at(lookups[A.abt_off], {P.page_idx: gather[P.page_idx]})
            same("block_table offset is block_table[b, j // PAGE_SIZE], j = cache_seqlens[b] + t", bt_at, bt,
                 (A.off_b, ref[P.page_idx]))
            page = page_of(sp.expand(bt.offset_of((A.off_b, ref[P.page_idx]))))
            got = at(dst_term, {A.dst_base: _lanes(dst_rows.expr)}).xreplace(
                {A.page: page_of(bt_at), P.slot: gather[P.slot], P.page_idx: gather[P.page_idx]})
            same("cache offset is cache[block_table[b, j // PS], j % PS, head, d], j = cache_seqlens[b] + t",
                 sp.expand(got), dst, (page, ref[P.slot], A.off_head, d))
            PSz, MPz, NPz, pz = z(dst.shape[1]), z(bt.shape[1]), z(dst.shape[0]), z3.Int("page_value")
            cap = [0 <= start, start + z(N_new) <= MPz * PSz, PSz >= 1, MPz >= 1, NPz >= 1,
                   0 <= pz, pz < NPz]
            cases.append(_decide("paged: block_table[b, j // PS] inside (lanes t_ok: the load's mask)",
                                 hyp + [t_ok(tz)] + cap, _inside((b0, jz / PSz), bt.shape)))
            cases.append(_decide("paged: cache[page, j % PS, head, d] inside (lanes t_ok & d_ok)", hyp + lanes + cap,
                                 _inside((pz, jz % PSz, h0, z(d)), (NPz, PSz, z(H), z(D)))))
        elif kind == "cache":
            same("cache_batch_idx offset is cache_batch_idx[b]", at(lookups[A.abi_off]), bi, (A.off_b,))
            got = at(dst_term, {A.dst_base: _lanes(dst_rows.expr)}).xreplace({j: j_printed})
            same("cache offset is cache[off_bc, j, head, d], j = cache_seqlens[b] + t", sp.expand(got), dst,
                 (A.off_bc, j_ref, A.off_head, d))
            Ncz, Bcz, offbc = z(dst.shape[1]), z(dst.shape[0]), z3.Int("off_bc_value")
            cap = [0 <= start, start + z(N_new) <= Ncz]
            for what, row_hyp in (("b (B_cache = B)", [offbc == b0, Bcz == z(B)]),
                                  ("cache_batch_idx[b] in [0, B_cache)", [0 <= offbc, offbc < Bcz])):
                cases.append(_decide(f"cache: cache[off_bc, j, head, d] inside, off_bc = {what} (lanes t_ok & "
                                     "d_ok)", hyp + lanes + cap + row_hyp,
                                     z3.And(_inside((offbc, jz, h0, z(d)), (Bcz, Ncz, z(H), z(D))),
                                            _inside((b0,), (B,)))))
        else:
            got = at(dst_term, {A.dst_base: _lanes(dst_rows.expr)})
            same("out offset is out[b, t, head, d]", got, dst, (A.off_b, t, A.off_head, d))
            cases.append(_decide("tensor: out[b, t, head, d] inside (lanes t_ok & d_ok)", hyp + lanes,
                                 _inside((b0, tz, h0, z(d)), dst.shape)))
    return result(A.CLAIM_APPEND, cases, "offsets by SymPy (canonical zero), extents by z3")


# ----------------------------------------------------------------------------------
# The backward's preprocess.
# ----------------------------------------------------------------------------------
@claim(A.CLAIM_BACKWARD,
       "the backward preprocess's addresses: for all shapes and non-negative strides of out, grad_out (B, Hq, N_Q, D) "
       "or packed (total_q, Hq, D), grad_lse and the saved lse (B, Hq, N_Q) or packed (Hq, total_q) and sinks (Hq,), "
       "with Δ, lse2 and dsink made by spec.launch.backward_row_tensors and the strides and grid "
       "spec.launch.preprocess_launch passes (the functions both launchers call), every printed offset of "
       "_attn_bwd_preprocess (spec.addresses.BACKWARD_GROUPS) is the offset of the element the reference reads or "
       "writes — out/grad_out[b, h, i, d], grad_lse/lse/Δ/lse2/dsink[b, h, i] (packed: [i, h, d], [h, i]), "
       "sinks[h] — inside the tensor for every program of the grid and every lane i < N_Q, d < HEAD_DIM (the width "
       "preprocess_launch passes: HEAD_DIM = D, every column of out), and the grid "
       "covers every (b, h, i); the dK/dV and dQ kernels' offsets are claim backward_kernel_addresses'" + "; the lanes are the printed ones (spec.addresses.BACKWARD_LANES: start_m = program_id(0)·BLOCK_M, offs_m = start_m + arange(BLOCK_M), offs_d = arange(BLOCK_D), each read from its term as base + arange(width), not assumed): the row tiles' lanes reach every row once, offs_d every column of out (BLOCK_D >= D: the launchers pass tile_widths' BLOCK_DV)",
       r"\mathrm{off}(X, (b, h, i)) = b\,s_b + h\,s_h + i\,s_i",
       terms=tuple(dict.fromkeys(t.name for g in (*A.BACKWARD_GROUPS.values(), *A.BACKWARD_LANES.values()) for t in g)),
       scope="symbolic shapes, strides (>= 0), grid and lanes, dense and packed (SymPy canonical zero for the "
             "offsets, z3 for the extents); mathematical integers Z (off_b, off_h int64; out's and grad_out's in-row "
             "products int32, bounded by index_int32 (claim int32_index_arithmetic); grad_lse's, lse's and Δ/lse2's "
             "row products int64, offs_m widened by tl.cast(·, tl.int64): the width case reads the printed lines)")
def prove_backward_addresses(groups=A.BACKWARD_GROUPS, launch=None, row_tensors=None, lanes=A.BACKWARD_LANES):
    launch = L.preprocess_launch if launch is None else launch
    row_tensors = L.backward_row_tensors if row_tensors is None else row_tensors
    g = {t.symbol: t for t in groups["preprocess"]}
    i, d = A.offs_m, A.offs_d
    # the widths: out's and grad_out's in-head products int32 (index_int32), every other product int64
    cases = [_widths_case(DENSE_WIDTHS, (*A.GRID_TILE, *A.GRID_HEAD, *groups["preprocess"]), {},
                          INDEX_INT32_STRIDES["preprocess"])]
    for packed in (False, True):
        tag = "packed" if packed else "dense"
        if packed:
            out, do = A.symbolic("out", ("total_q", "Hq", "D")), A.symbolic("do", ("total_q", "Hq", "D"))
            rows_shape = (out.shape[1], out.shape[0])
        else:
            out, do = A.symbolic("out", ("B", "Hq", "N_Q", "D")), A.symbolic("do", ("B", "Hq", "N_Q", "D"))
            rows_shape = out.shape[:3]
        dlse, lse, sinks = A.symbolic("grad_lse", rows_shape), A.symbolic("lse", rows_shape), A.symbolic(
            "sinks", (out.shape[1],))
        delta, lse2, dsink = row_tensors(lse, True)
        grid, ints = launch(out, do, dlse, lse, delta, sinks, n.B_r)
        launched = {sym: sp.sympify(ints[name]) for name, sym in A.B_.items() if name in ints}
        b = sp.Integer(0) if packed else A.off_b  # a packed batch runs as one batch (batch strides 0)
        full = (lambda t: (i, A.off_h, d)) if packed else (lambda t: (A.off_b, A.off_h, i, d))  # noqa: E731
        row = (lambda t: (A.off_h, i)) if packed else (lambda t: (A.off_b, A.off_h, i))  # noqa: E731

        def same(name, sym, tensor, index):
            got = sp.expand(_lanes(g[sym].expr).xreplace(launched).xreplace({A.off_b: b}))
            cases.append((f"{tag}: {name}", difference(got, sp.expand(tensor.offset_of(index)))))

        same("out offset is out[b, h, i, d]", A.bo_off, out, full(out))
        same("grad_out offset is grad_out[b, h, i, d]", A.bdo_off, do, full(do))
        same("grad_lse offset is grad_lse[b, h, i]", A.dlse_off, dlse, row(dlse))
        same("lse offset is lse[b, h, i]", A.slse_off, lse, row(lse))
        for name, t in (("delta", delta), ("lse2", lse2), ("dsink", dsink)):
            same(f"row offset is {name}[b, h, i]", A.brow_off, t, row(t))
        same("sink offset is sinks[h]", A.bsink_off, sinks, (A.off_h,))
        # extents: program (pid_m, h, b) of the grid, split as spec.addresses.GRID_HEAD prints it (claim launch_grid)
        z = _Z3A()
        lane = z3.Int("lane")
        N = z(sp.sympify(ints["N_Q"]))
        dims = [z(x) >= 1 for x in (*out.shape, n.B_r)]
        grid_hyp, prog = _grid_program(A.GRID_HEAD, grid, ints, z)
        # the printed lanes (spec.addresses.BACKWARD_LANES), read: offs_m = start_m + arange(BLOCK_M) with the printed
        # start_m = program_id(0)·BLOCK_M, offs_d = arange(BLOCK_D)
        ln, shapes = _read_lanes(z, lanes, ("m", "d"), starts=("start_m",))
        cases += [(f"{tag}: {name}", value) for name, value in shapes]
        hyp = dims + grid_hyp + [0 <= lane, lane < z(ln["m"].width)]
        offb, offh, iz = prog[A.off_b], prog[A.off_h], ln["m"].start() + lane
        # the printed masks row_ok, d_ok (spec.addresses.BWD_PRE_*_OK) at preprocess_launch's N_Q and HEAD_DIM, on the
        # printed lane offs_d: every column of out and grad_out, no more
        sizes = {A.N_Q: ints["N_Q"], A.HEAD_DIM_: ints["HEAD_DIM"]}
        ok_at = _lanes_ok(z, groups, ("row_ok", "d_ok"), sizes)
        row_ok, d_ok = ok_at[A.row_ok], ok_at[A.d_ok]
        lane_hyp = [row_ok(iz), d_ok(z(d), ln["d"])]
        c = z3.Int("lane_value")
        cases.append(_decide(f"{tag}: row_ok admits exactly the rows i < N_Q, d_ok exactly the columns d < D", dims + [0 <= c],
                             z3.And(row_ok(c) == (c < N), d_ok(c) == (c < z(out.shape[-1])))))
        # the row tiles' lanes reach every row once; the lanes offs_d every column of out (at the width the launchers
        # pass: tile_widths' BLOCK_DV >= D_v, _tile_width_cases)
        cases += [(f"{tag}: {name}", value) for name, value in _tiling_cases(
            "rows", ln["m"], dims, 0, N, z(n.B_r), lambda t_: z3.And(0 <= t_, t_ < z(sp.sympify(grid[0]))),
            lambda t_: [(z(terms.program_id(0)), t_)])]
        cases.append(_decide(f"{tag}: every column c < D of out is a lane of offs_d that d_ok admits",
                             dims + [z(A.BLOCK_D_) >= z(out.shape[-1]), 0 <= c, c < z(out.shape[-1])],
                             d_ok(c, ln["d"])))
        cases.append(_decide(f"{tag}: the lanes d < HEAD_DIM cover out's columns: HEAD_DIM = D", dims,
                             z(sp.sympify(ints["HEAD_DIM"])) == z(out.shape[-1])))
        if packed:
            cases.append(_decide("packed: the one batch: off_b = 0", hyp, offb == 0))
        idx_full = (iz, offh, z(d)) if packed else (offb, offh, iz, z(d))
        idx_row = (offh, iz) if packed else (offb, offh, iz)
        cases.append(_decide(f"{tag}: out/grad_out[b, h, i, d] inside (lanes i < N_Q, d < D)", hyp + lane_hyp,
                             _inside(idx_full, out.shape)))
        cases.append(_decide(f"{tag}: grad_lse/lse/delta/lse2/dsink[b, h, i] and sinks[h] inside (lanes i < N_Q)",
                             hyp + lane_hyp, z3.And(_inside(idx_row, rows_shape), _inside((offh,), sinks.shape))))
        batch = z(sp.sympify(1 if packed else out.shape[0]))
        cases.append(_decide(f"{tag}: the grid covers every (b, h, i)", dims,
                             z3.And(z(sp.sympify(grid[0])) * z(n.B_r) >= N, z(sp.sympify(grid[1])) == z(out.shape[1]),
                                    z(sp.sympify(grid[2])) == batch)))
    return result(A.CLAIM_BACKWARD, cases, "offsets by SymPy (canonical zero), extents by z3")


# ----------------------------------------------------------------------------------
# The backward's dK/dV and dQ kernels.
# ----------------------------------------------------------------------------------
#: the backward's per-program bases (int64 sums with off_b, off_kvh or off_h)
_INT64_BWD = {A.bk_base, A.bv_base, A.bq_base, A.bdo_base, A.brow_base, A.bmask_base, A.mapc_base, A.mapr_base}


def _backward_tensors(map_tiles=None):
    map_tiles = L.block_map_tiles if map_tiles is None else map_tiles
    q, do = A.symbolic("q", ("B", "Hq", "N_Q", "D")), A.symbolic("do", ("B", "Hq", "N_Q", "Dv"))
    # two head dims: q/k's D and v/grad_out's D_v (MLA); the gradients with their own strides
    k, v = A.symbolic("k", ("B", "Hkv", "N_K", "D")), A.symbolic("v", ("B", "Hkv", "N_K", "Dv"))
    dq, dk, dv = A.symbolic("dq", q.shape), A.symbolic("dk", k.shape), A.symbolic("dv", v.shape)
    B, Hq, N_Q, N_K = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    lse = A.symbolic("lse", (B, Hq, N_Q))
    delta, lse2, _ = L.backward_row_tensors(lse, False)
    return dict(q=q, do=do, k=k, v=v, dq=dq, dk=dk, dv=dv, delta=delta, lse2=lse2,
                key_lengths=A.symbolic("key_lengths", (B,)), mask=A.symbolic("mask", (B, Hq, N_Q, N_K)),
                # the dense mask's block map as the runtime builds it: at MAP_BLOCK (spec.launch.block_map_tiles)
                block_map=A.symbolic("block_map", (B, Hq, *L.block_map_shape(N_Q, N_K, map_tiles(_BACKWARD_MODULE)))),
                slopes={"(Hq,)": A.symbolic("alibi_slopes", (Hq,)), "(B, Hq)": A.symbolic("alibi_slopes", (B, Hq))},
                mask_mod_args=A.symbolic("mask_mod_args", (B, "P")))


@claim(A.CLAIM_BACKWARD_KERNELS,
       "the backward dK/dV and dQ kernels' addresses: for all shapes and non-negative strides of q (B, Hq, N_Q, D), "
       "k (B, Hkv, N_K, D), v (B, Hkv, N_K, D_v) (two head dims), grad_out (B, Hq, N_Q, D_v), dq, dk, dv (the "
       "shapes of q, k, v, their own strides), key_lengths (B,), the dense mask (B, Hq, N_Q, N_K), the block map "
       "(B, Hq, cdiv(N_Q, MAP_BLOCK_M), cdiv(N_K, MAP_BLOCK_N)) (built at spec.launch.block_map_tiles, the tiles "
       "the runtime builds it at: the entry a kernel tile reads holds that tile, given MAP_BLOCK a multiple of "
       "BLOCK_M, BLOCK_N), ALiBi slopes (Hq,) or (B, Hq) and mask_mod_args "
       "(B, P), with Δ and lse2 made by spec.launch.backward_row_tensors and the strides, sizes and grids "
       "spec.launch.dkdv_launch and dq_launch pass (the functions both launchers call), every printed offset of "
       "_attn_bwd_dkdv, _attn_bwd_dq, their stages, _attn_bwd_rows and _attn_bwd_mask "
       "(spec.addresses.BACKWARD_KERNEL_GROUPS) is the offset of the element the reference reads or writes — "
       "k/dk[b, kvh, j, d], v/dv[b, kvh, j, dv] (dQ's Vᵀ tile transposed), q/dq[b, h, i, d], grad_out[b, h, i, dv], "
       "a split head dim's tails k/dk[b, kvh, j, dt] and q/dq[b, h, i, dt] (claim head_dim_split), "
       "Δ/lse2[b, h, i], mask[b, h, i, j], block_map[b, h, i0 // MAP_BLOCK_M, j0 // MAP_BLOCK_N], key_lengths[b], "
       "and (the forward's printed terms at the backward's strides) alibi_slopes[h] or [b, h], mask_mod_args[b] — "
       "with h = kvh·GROUP + g (dK/dV's loop over the group) or the program's head and kvh = h // GROUP (dQ), and "
       "lies inside the tensor for every program of the grid and every lane the load or store's mask lets through "
       "(i < N_Q, j < N_K, d < HEAD_DIM, HEAD_DIM <= dt < HEAD_DIM + HEAD_DIM_TAIL, dv < HEAD_DIM_V: the head dims "
       "dkdv_launch and dq_launch pass (spec.launch.head_dims, any split point in [1, D]), which cover every column: "
       "HEAD_DIM + HEAD_DIM_TAIL = D, HEAD_DIM_V = D_v; a full tile's rows and keys are inside by claim mask_tiles_sound; "
       "in _attn_bwd_dkdv, _attn_bwd_dq, _attn_bwd_dq_stage and _attn_bwd_rows these are the printed masks spec.addresses.BWD_*_OK, which "
       "admit exactly the rows i < N_Q, keys j < N_K (key_ok: and j < key_len, the padding keys never read) and those "
       "columns, in _attn_bwd_mask the printed ij_ok (BWD_MASK_OK: row_ok's and n_ok's comparisons at the tile's i, j), "
       "which admits exactly the mask's elements i < N_Q, j < N_K), "
       "the tile widths the runtime launches with (spec.launch.tile_widths, for every D, D_v in 1..head_dim_max, fp8 products or not) reach those columns: BLOCK_D >= HEAD_DIM, BLOCK_DT >= HEAD_DIM_TAIL, BLOCK_DV >= D_v, each a power of two >= 16, its split HEAD_DIM + HEAD_DIM_TAIL = D with a tail only when HEAD_DIM = BLOCK_D, "
       "every visited tile start i0 < N_Q, j0 < N_K; the grids cover every key tile (dK/dV) and row tile (dQ) of "
       "every (b, head); the in-head products the kernels compute in int32 are exactly row·stride_row + "
       "col·stride_col of q, grad_out, k, v, dq, dk, dv and the mask, every other product of a stride is int64; "
       "the packed batch is claim varlen_addresses'. A user "
       "score_mod's parameter gradient (dQ): for any launch grid (G0, G1, G2), program (pid_m, h, b)'s entry e "
       "(sg_base, sg_off) is score_grad[(b·G1 + h)·G0 + pid_m, e] of the buffer spec.launch.score_grad_launch makes "
       "from that grid (both launchers pass it the grid they launch), inside it for every lane e of "
       "_score_param_scatter's chunks the printed entry_ok = offs_e <= hi admits (BWD_SCORE_GRAD_OK), every entry "
       "lo <= e <= hi the tile read a lane of a visited chunk that entry_ok admits (lo, hi: its smallest and largest), no "
       "entry a lane of two chunks (its gradient added once), and no two "
       "programs share a row (the deterministic fixed-order sum needs no atomics)" + "; the lanes are the printed ones (spec.addresses.BACKWARD_KERNEL_LANES: dK/dV's start_n = program_id(0)·BLOCK_N, dQ's start_m = program_id(0)·BLOCK_M, offs_m = start_m + arange(BLOCK_M), offs_n = start_n + arange(BLOCK_N), offs_d, offs_dv, offs_dt = HEAD_DIM + arange(BLOCK_DT), and a user score_mod's gradient chunks first_e = floor(lo / CHUNK)·CHUNK, offs_e = start_e + arange(CHUNK), each read from its term as base + arange(width), not assumed): the grid's tiles reach every key (dK/dV) or row (dQ) once, a loop's steps (the printed loops range(lo, hi, BLOCK), spec.addresses.BACKWARD_KERNEL_LOOPS, start, stop and step read) every row (dK/dV) or key (dQ) of [lo, hi) once, and each column of q/k is admitted by exactly one lane of offs_d or offs_dt; dK/dV's loop over the query heads of its K/V head (the printed for g in range(0, GROUP), BACKWARD_KERNEL_LOOPS g, start, stop and step read) gives, for every K/V head off_kvh of the grid, each query head h < H_q that spec.reference maps to it (repeat_interleave: h // (H_q // H_kv) = off_kvh) as the head off_kvh·GROUP + g the kernel computes (spec.structure.GQA_GROUP_HEAD) at exactly one visited g, and no head outside [0, H_q) or of another K/V head; the offsets above are those of the visited g's head",
       r"\mathrm{off}(X, \mathrm{idx}) = \sum_d \mathrm{idx}_d\,\mathrm{stride}_d,\quad 0\le\mathrm{idx}_d<n_d",
       terms=tuple(dict.fromkeys(t.name for g in (*A.BACKWARD_KERNEL_GROUPS.values(), *A.BACKWARD_KERNEL_LANES.values(), *A.BACKWARD_KERNEL_LOOPS.values()) for t in g)),
       scope="symbolic shapes, strides (>= 0), grids, GQA groups and lanes (SymPy canonical zero for the offsets, "
             "z3 over unbounded integers for the extents; the tile widths by evaluating spec.launch.tile_widths at "
             "every accepted (D, D_v)); off_b, off_kvh, off_h and the per-program bases are int64, "
             "the in-head products int32 (bounded by index_int32 for q, k, v, grad_out and the mask — _attn_bwd_mask's "
             "tile i·stride_mm + j·stride_mn included: claim int32_index_arithmetic; dq, dk, dv are made contiguous "
             "in q's, k's, v's shapes); every other product of a stride int64 (Δ/lse2's offs_m and the block map's "
             "tile indices widened by tl.cast(·, tl.int64); the width case reads the printed lines with Triton's "
             "typing); dense launches (the packed form: claim varlen_addresses); the score_mod gradient row: any grid, "
             "the entries e the score_mod reads assumed in [0, len(SF)) (the user's indices), the scatter's chunk loop "
             "(range(first_e, hi + 1, CHUNK)), first_e and the chunk's lanes offs_e the printed terms, the loop read as "
             "its starts first_e + k·CHUNK < hi + 1; "
             "sg_base int64 (off_b, "
             "off_h: the width case) and below the buffer's element count (the extent case), which torch holds in "
             "int64")
def prove_backward_kernel_addresses(groups=A.BACKWARD_KERNEL_GROUPS, dkdv_launch=None, dq_launch=None,
                                    row_tensors=None, score_grad_launch=None, widths=None, lanes=A.BACKWARD_KERNEL_LANES,
                                    loops=A.BACKWARD_KERNEL_LOOPS, map_tiles=None):
    from spec import structure as S

    map_tiles = L.block_map_tiles if map_tiles is None else map_tiles

    score_grad_launch = L.score_grad_launch if score_grad_launch is None else score_grad_launch
    dkdv_launch = L.dkdv_launch if dkdv_launch is None else dkdv_launch
    dq_launch = L.dq_launch if dq_launch is None else dq_launch
    t = _backward_tensors(map_tiles)
    if row_tensors is not None:  # a mutated spec.launch.backward_row_tensors
        t["delta"], t["lse2"], _ = row_tensors(A.symbolic("lse", t["q"].shape[:3]), False)
    q, do, k, v, dq, dk, dv = (t[x] for x in ("q", "do", "k", "v", "dq", "dk", "dv"))
    B, Hq, N_Q, D = q.shape
    Hkv, N_K, Dv = k.shape[1], k.shape[2], v.shape[3]
    g = {t_.symbol: t_ for group in groups.values() for t_ in group}
    fg = {t_.symbol: t_ for group in A.FORWARD_GROUPS.values() for t_ in group}
    i, j, d, dv_, b, h, kvh = A.offs_m, A.offs_n, A.offs_d, A.offs_dv, A.off_b, A.off_h, A.off_kvh
    # the widths (both kernels' lines: off_b, off_h and off_kvh int64 in each, from the grid or the GQA map)
    cases = [_widths_case(DENSE_WIDTHS, (*A.GRID_TILE, *A.GRID_HEAD, S.GQA_HEAD,
                                         *(t_ for group in groups.values() for t_ in group)),
                          {}, INDEX_INT32_STRIDES["backward"])]
    # the lanes arange(BLOCK_D), HEAD_DIM + arange(BLOCK_DT), arange(BLOCK_DV) reach every column the masks let
    # through, at the widths and split the runtime launches with (spec.launch.tile_widths)
    cases += list(_tile_width_cases(widths))
    common = (t["key_lengths"], t["mask"], t["block_map"])
    launches = {}
    for tag, slopes in t["slopes"].items():
        launches[tag] = (dkdv_launch(q, k, v, do, dk, dv, t["delta"], *common, slopes, n.B_c, t["mask_mod_args"],
                                     head_dim=A.HEAD_DIM_),
                         dq_launch(q, k, v, do, dq, t["delta"], *common, slopes, n.B_r, t["mask_mod_args"],
                                   head_dim=A.HEAD_DIM_))
    for kernel, index in (("dkdv", 0), ("dq", 1)):
        grid, ints = launches["(Hq,)"][index]
        launched = {sym: sp.sympify(ints[name]) for name, sym in A.BK_.items() if name in ints}
        launched.update({sym: sp.sympify(ints[name]) for name, sym in A.F_.items() if name in ints})

        def at(sym, *bases):
            e = _lanes(g[sym].expr)
            for base in bases:
                e = e.xreplace({base: _lanes(g[base].expr)})
            return sp.expand(e.xreplace(launched))

        def same(name, got, tensor, idx):
            cases.append((f"{kernel}: {name}", difference(got, sp.expand(tensor.offset_of(idx)))))

        # --- the element each offset reaches (polynomial identities) -------------------------------
        same("k offset is k[b, kvh, j, d]", at(A.bk_off, A.bk_base), k, (b, kvh, j, d))
        # the head dim split (claim head_dim_split): the tails at lane dt in [HEAD_DIM, D)
        same("k tail offset is k[b, kvh, j, dt]", at(A.bk_tail_off, A.bk_base), k, (b, kvh, j, A.offs_dt))
        same("q tail offset is q[b, h, i, dt]", at(A.q_tail_rows_off, A.bq_base), q, (b, h, i, A.offs_dt))
        if kernel == "dkdv":
            same("dk tail offset is dk[b, kvh, j, dt]", at(A.dk_tail_off), dk, (b, kvh, j, A.offs_dt))
        else:
            same("dq tail offset is dq[b, h, i, dt]", at(A.dq_tail_off), dq, (b, h, i, A.offs_dt))
        if kernel == "dkdv":
            same("v offset is v[b, kvh, j, dv]", at(A.bv_off, A.bv_base), v, (b, kvh, j, dv_))
            same("dk offset is dk[b, kvh, j, d]", at(A.dk_off), dk, (b, kvh, j, d))
            same("dv offset is dv[b, kvh, j, dv]", at(A.dv_off), dv, (b, kvh, j, dv_))
            same("block map offset is block_map[b, h, start_m // MAP_BLOCK_M, start_n // MAP_BLOCK_N]",
                 at(A.mapc_off, A.mapc_base), t["block_map"],
                 (b, h, sp.floor(A.start_m / A.MAP_BLOCK_M), sp.floor(A.start_n / A.MAP_BLOCK_N)))
        else:
            same("v tile offset is v[b, kvh, j, dv] (transposed)", at(A.bvt_off, A.bv_base), v, (b, kvh, j, dv_))
            same("dq offset is dq[b, h, i, d]", at(A.dq_off), dq, (b, h, i, d))
            same("block map offset is block_map[b, h, start_m // MAP_BLOCK_M, start_n // MAP_BLOCK_N]",
                 at(A.mapr_off, A.mapr_base), t["block_map"],
                 (b, h, sp.floor(A.start_m / A.MAP_BLOCK_M), sp.floor(A.start_n / A.MAP_BLOCK_N)))
        same("q offset is q[b, h, i, d]", at(A.q_rows_off, A.bq_base), q, (b, h, i, d))
        same("grad_out offset is grad_out[b, h, i, dv]", at(A.do_rows_off, A.bdo_base), do, (b, h, i, dv_))
        for name in ("delta", "lse2"):
            same(f"row offset is {name}[b, h, i]", at(A.drow_off, A.brow_base), t[name], (b, h, i))
        same("mask offset is mask[b, h, i, j]", at(A.bmask_off, A.bmask_base).xreplace({n.i: i, n.j: j}), t["mask"],
             (b, h, i, j))
        same("key_lengths offset is key_lengths[b]", at(A.bkl_off), t["key_lengths"], (b,))
        (mm,) = A.FORWARD_GROUPS["mm_row"]
        same("MM_row is row b of mask_mod_args (the forward's term)",
             sp.expand(_lanes(mm.expr).xreplace(launched)) - A.MaskModArgs, t["mask_mod_args"], (b, 0))
        for tag, slopes in t["slopes"].items():
            slaunched = {sym: sp.sympify(launches[tag][index][1][name]) for name, sym in A.F_.items()
                         if name in launches[tag][index][1]}
            same(f"slopes {tag}: slope offset is alibi_slopes[{'h' if tag == '(Hq,)' else 'b, h'}] (the forward's term)",
                 sp.expand(fg[A.slope_off].expr.xreplace(slaunched)), slopes, (h,) if tag == "(Hq,)" else (b, h))
        # the int32 products: the in-head offset row·stride_row + col·stride_col
        int32 = [("q", A.q_rows_off, i * ints["stride_qm"] + d * ints["stride_qd"]),
                 ("grad_out", A.do_rows_off, i * ints["stride_dom"] + dv_ * ints["stride_dod"]),
                 ("k", A.bk_off, j * ints["stride_kn"] + d * ints["stride_kd"]),
                 ("q tail", A.q_tail_rows_off, i * ints["stride_qm"] + A.offs_dt * ints["stride_qd"]),
                 ("k tail", A.bk_tail_off, j * ints["stride_kn"] + A.offs_dt * ints["stride_kd"])]
        int32 += ([("v", A.bv_off, j * ints["stride_vn"] + dv_ * ints["stride_vd"]),
                   ("dk", A.dk_off, j * ints["stride_dkn"] + d * ints["stride_dkd"]),
                   ("dk tail", A.dk_tail_off, j * ints["stride_dkn"] + A.offs_dt * ints["stride_dkd"]),
                   ("dv", A.dv_off, j * ints["stride_dvn"] + dv_ * ints["stride_dvd"])] if kernel == "dkdv" else
                  [("v", A.bvt_off, j * ints["stride_vn"] + dv_ * ints["stride_vd"]),
                   ("dq", A.dq_off, i * ints["stride_dqm"] + d * ints["stride_dqd"]),
                   ("dq tail", A.dq_tail_off, i * ints["stride_dqm"] + A.offs_dt * ints["stride_dqd"])])
        # _attn_bwd_mask's tile: the rows i and keys j its caller broadcasts (both layouts)
        int32 += [("mask", A.bmask_off, n.i * ints["stride_mm"] + n.j * ints["stride_mn"])]
        for name, sym, want in int32:
            got = sp.Add(*[x for x in sp.Add.make_args(sp.expand(_lanes(g[sym].expr).xreplace(launched)))
                           if not (x.free_symbols & (_INT64 | _INT64_BWD))])
            cases.append((f"{kernel}: {name}: the int32 products are the in-head offset row·stride_row + col·stride_col",
                          difference(got, sp.expand(want))))
        # --- the extents (z3) ----------------------------------------------------------------------
        z = _Z3A()
        Bz, Hqz, Hkvz, Nqz, Nkz, Dz, Dvz = (z(sp.sympify(x)) for x in (B, Hq, Hkv, N_Q, N_K, D, Dv))
        group_true, lane, gz = z3.Ints("group_true lane g")
        pid0 = z(terms.program_id(0))  # the tile: start = program_id(0)·BLOCK
        bm, bn, mbm, mbn = z(n.B_r), z(n.B_c), z(A.MAP_BLOCK_M), z(A.MAP_BLOCK_N)
        hyp = [x >= 1 for x in (Bz, Hqz, Hkvz, Nqz, Nkz, Dz, Dvz, bm, bn, mbm, mbn, group_true)]
        # the program's (tile, head, b), split as spec.addresses.GRID_KV_HEAD / GRID_HEAD print it (claim launch_grid)
        grid_hyp, prog = _grid_program(A.GRID_KV_HEAD if kernel == "dkdv" else A.GRID_HEAD, grid, ints, z)
        hyp += [Hqz == group_true * Hkvz, 0 <= lane] + grid_hyp
        # the printed lanes (spec.addresses.BACKWARD_KERNEL_LANES), read: the program's tile (dK/dV: offs_n = start_n +
        # arange(BLOCK_N) with the printed start_n = program_id(0)·BLOCK_N; dQ: offs_m with start_m = program_id(0)·
        # BLOCK_M), a loop step's tile (dK/dV: offs_m at start_m in range(lo, hi, BLOCK_M); dQ: offs_n at start_n in
        # range(lo, hi, BLOCK_N): the printed loops spec.addresses.BACKWARD_KERNEL_LOOPS, read), the head dims' offs_d,
        # offs_dv, offs_dt
        own, step = ("n", "m") if kernel == "dkdv" else ("m", "n")
        ln, shapes = _read_lanes(z, lanes, ("d", "dv", "dt", step), {A.HEAD_DIM_: sp.sympify(ints["HEAD_DIM"])})
        prog_lane, shapes_own = _read_lanes(z, lanes, (own,), starts=(f"start_{own}",))
        ln[own] = prog_lane[own]
        cases += [(f"{kernel}: {name}", value) for name, value in shapes + shapes_own]
        hyp += [lane < z(ln[own].width)]
        if kernel == "dkdv":  # program (key tile, kvh, b); the loop over the group's query heads
            offb, offkvh = prog[A.off_b], prog[A.off_kvh]
            group_head = z(S.GQA_GROUP_HEAD.expr.xreplace({S.group: sp.sympify(ints["GROUP"])}))

            def head_of(g_value):  # the query head the kernel computes from off_kvh and g (spec.structure)
                return z3.substitute(group_head, (z(A.off_kvh), offkvh), (z(S.g), g_value))
            # the printed loop over the GROUP query heads of this K/V head (spec.addresses.BACKWARD_KERNEL_LOOPS g:
            # for g in range(0, GROUP), its start, stop and step read): it reaches every query head h < H_q that
            # spec.reference maps to this K/V head (repeat_interleave: h // (H_q // H_kv) = off_kvh) once, and no other
            heads = _Loop(z, loops["g"], {S.group: sp.sympify(ints["GROUP"])})
            group_ref = Hqz / Hkvz
            cases += [(f"{kernel}: {name}", value) for name, value in _index_loop_cases(
                HEAD_LOOP_CASES, heads, list(hyp),
                lambda h_: z3.And(0 <= h_, h_ < Hqz, h_ / group_ref == offkvh), head_of, lambda h_: h_ % group_ref)]
            g_step = z3.Int("g_t")  # the offsets below at a visited g
            hyp += [heads.visited(g_step), gz == heads.first + g_step * heads.step]
            offh = head_of(gz)
            jz, iz = ln["n"].start() + lane, z(i)
            tile_n, tile_m = pid0 * bn, z(A.start_m)
            tile_hyp = [tile_m >= 0, tile_m < Nqz]
            own_count, own_step, step_count, step_size = Nkz, bn, Nqz, bm
        else:  # program (row tile, h, b); its K/V head by spec.structure.GQA_HEAD
            offb, offh = prog[A.off_b], prog[A.off_h]
            offkvh = z3.substitute(z(S.GQA_HEAD.expr.xreplace({S.group: sp.sympify(ints["GROUP"])})),
                                   (z(A.off_h), offh))
            iz, jz = ln["m"].start() + lane, z(j)
            tile_m, tile_n = pid0 * bm, z(A.start_n)
            tile_hyp = [tile_n >= 0, tile_n < Nkz]
            own_count, own_step, step_count, step_size = Nqz, bm, Nkz, bn
        # a loop step's tile starts at or after 0 (claim mask_tiles_sound: in [0, N))
        hyp += tile_hyp[:1]
        # the grid's tiles reach every key (dK/dV) or row (dQ) once; a loop's steps (range(lo, hi, BLOCK)) every row
        # (dK/dV) or key (dQ) of [lo, hi) once
        lo, hi = z(A.lo_), z(A.hi_)
        cases += [(f"{kernel}: {name}", value) for name, value in _tiling_cases(
            "the grid's tiles", ln[own], [own_count >= 1, own_step >= 1], 0, own_count, own_step,
            lambda t_: z3.And(0 <= t_, t_ < z(sp.sympify(grid[0]))), lambda t_: [(pid0, t_)])]
        cases += [(f"{kernel}: {name}", value) for name, value in _loop_cases(
            "a loop's tiles", ln[step], _Loop(z, loops[step]), [lo >= 0, step_count >= 1], lo, hi)]
        # the printed masks (spec.addresses.BWD_*_OK) at the launch's sizes: the lanes they admit are the hypotheses
        sizes = {sym: sp.sympify(ints[name]) for sym, name in ((A.N_Q, "N_Q"), (A.N_K_, "N_K"), (A.HEAD_DIM_, "HEAD_DIM"),
                                                              (A.HEAD_DIM_V_, "HEAD_DIM_V"),
                                                              (A.HEAD_DIM_TAIL_, "HEAD_DIM_TAIL"))}
        ok_at = _lanes_ok(z, groups, ("row_ok", "columns_ok", "tail_ok", "key_ok", "n_ok"), sizes)
        row_ok = ok_at[A.row_ok](iz, ln["m"])
        key_ok = ok_at[A.n_ok](jz, ln["n"])  # the stores' keys; key_ok's loads: a subset (below)
        # the lanes' column bounds: the launch's head dims (spec.launch.head_dims), any split point in [1, D]
        hyp, cover = _head_dim_lanes(ints, D, Dv, z, hyp)
        cases.append((f"{kernel}: {cover[0]}", cover[1]))
        main_z, tail_z = z(sp.sympify(ints["HEAD_DIM"])), z(sp.sympify(ints["HEAD_DIM_TAIL"]))
        d_ok, dv_ok = ok_at[A.d_ok](z(d), ln["d"]), ok_at[A.dv_ok](z(dv_), ln["dv"])
        v_z, kl, c = z(sp.sympify(ints["HEAD_DIM_V"])), z(n.key_len), z3.Int("lane_value")
        qk_cover, qk_once, v_cover = _columns_admitted(c, ok_at[A.d_ok], ok_at[A.dt_ok], ok_at[A.dv_ok], ln)
        cases.append(_decide(f"{kernel}: every column c < D of q/k is admitted by one lane (d_ok at d = c, or dt_ok at "
                             "dt = c), every c < D_v of v/grad_out by dv_ok", hyp + _width_hyp(z, main_z, tail_z, v_z)
                             + [0 <= c], z3.And(z3.Implies(c < Dz, z3.And(qk_cover, qk_once)),
                                                z3.Implies(c < Dvz, v_cover))))
        cases.append(_decide(
            f"{kernel}: row_ok, n_ok, key_ok, d_ok, dv_ok, dt_ok admit exactly the rows i < N_Q, keys j < N_K (key_ok: "
            "and j < key_len), columns d < HEAD_DIM, dv < HEAD_DIM_V, dt < HEAD_DIM + HEAD_DIM_TAIL",
            hyp + [0 <= c], z3.And(ok_at[A.row_ok](c) == (c < Nqz), ok_at[A.n_ok](c) == (c < Nkz),
                                   ok_at[P.key_ok](c) == z3.And(c < Nkz, c < kl),
                                   ok_at[A.d_ok](c) == (c < main_z), ok_at[A.dv_ok](c) == (c < v_z),
                                   ok_at[A.dt_ok](c) == (c < main_z + tail_z))))
        head_side = ("dk, dv" if kernel == "dkdv" else "")
        cases.append(_decide(f"{kernel}: k{', ' + head_side if head_side else ''}[b, kvh, j, d] inside (lanes j < N_K, "
                             "d < HEAD_DIM)", hyp + [key_ok, d_ok], _inside((offb, offkvh, jz, z(d)), k.shape)))
        # the split's tail lanes: HEAD_DIM <= dt < HEAD_DIM + HEAD_DIM_TAIL (the launch's split of D)
        dt_ok = ok_at[A.dt_ok](z(A.offs_dt), ln["dt"])
        cases.append(_decide(f"{kernel}: k{', dk' if kernel == 'dkdv' else ''}[b, kvh, j, dt] inside (lanes j < N_K, "
                             "dt < HEAD_DIM + HEAD_DIM_TAIL = D)", hyp + [key_ok, dt_ok],
                             _inside((offb, offkvh, jz, z(A.offs_dt)), k.shape)))
        cases.append(_decide(f"{kernel}: q{', dq' if kernel == 'dq' else ''}[b, h, i, dt] inside (lanes i < N_Q, "
                             "dt < HEAD_DIM + HEAD_DIM_TAIL = D)", hyp + [row_ok, dt_ok],
                             _inside((offb, offh, iz, z(A.offs_dt)), q.shape)))
        cases.append(_decide(f"{kernel}: v[b, kvh, j, dv] inside (lanes j < N_K, dv < HEAD_DIM_V)",
                             hyp + [key_ok, dv_ok], _inside((offb, offkvh, jz, z(dv_)), v.shape)))
        cases.append(_decide(f"{kernel}: q{', dq' if kernel == 'dq' else ''}[b, h, i, d] inside (lanes i < N_Q, "
                             "d < HEAD_DIM)", hyp + [row_ok, d_ok], _inside((offb, offh, iz, z(d)), q.shape)))
        cases.append(_decide(f"{kernel}: grad_out[b, h, i, dv] inside (lanes i < N_Q, dv < HEAD_DIM_V)",
                             hyp + [row_ok, dv_ok], _inside((offb, offh, iz, z(dv_)), do.shape)))
        cases.append(_decide(f"{kernel}: delta, lse2[b, h, i] inside (lanes i < N_Q)",
                             hyp + [row_ok], _inside((offb, offh, iz), t["delta"].shape)))
        # _attn_bwd_mask's dense tile: the printed ij_ok at the caller's rows i and keys j (both layouts)
        ij_ok = _lanes_ok(z, groups, ("mask_ok",), sizes)[A.ij_ok]
        cases.append(_decide(f"{kernel}: mask[b, h, i, j] inside (lanes ij_ok: i < N_Q, j < N_K)",
                             hyp + [ij_ok((iz, jz), (ln["m"], ln["n"]))], _inside((offb, offh, iz, jz), t["mask"].shape)))
        c2 = z3.Int("lane_value_2")
        cases.append(_decide(f"{kernel}: ij_ok admits exactly the mask's elements i < N_Q, j < N_K (every element the "
                             "reference reads)", hyp + [0 <= c, 0 <= c2], ij_ok((c, c2)) == z3.And(c < Nqz, c2 < Nkz)))
        cases.append(_decide(f"{kernel}: block_map[b, h, i0 // MAP_BLOCK_M, j0 // MAP_BLOCK_N] inside (a visited "
                             "tile starts at i0 < N_Q, j0 < N_K)", hyp + tile_hyp + [tile_n < Nkz, tile_m < Nqz],
                             _inside((offb, offh, tile_m / mbm, tile_n / mbn), t["block_map"].shape)))
        cases.append(_decide(f"{kernel}: key_lengths[b], slopes[h] / [b, h], mask_mod_args[b, 0] inside",
                             hyp + [z(sp.Symbol("P", integer=True, positive=True)) >= 1],
                             z3.And(_inside((offb,), (B,)), _inside((offb, offh), (B, Hq)),
                                    _inside((offb, 0), t["mask_mod_args"].shape))))
        dims = [x >= 1 for x in (Bz, Hqz, Hkvz, Nqz, Nkz, bm, bn)]
        if kernel == "dkdv":
            cases.append(_decide("dkdv: the grid covers every key tile of every (b, kv head): grid[0]·BLOCK_N >= N_K, "
                                 "grid[1:] = (Hkv, B)", dims, z3.And(z(sp.sympify(grid[0])) * bn >= Nkz,
                                                                     z(sp.sympify(grid[1])) == Hkvz,
                                                                     z(sp.sympify(grid[2])) == Bz)))
            # (the group loop's heads: HEAD_LOOP_CASES above, on the printed loop and the launch's GROUP)
        else:
            cases.append(_decide("dq: the grid covers every row tile of every (b, h): grid[0]·BLOCK_M >= N_Q, "
                                 "grid[1:] = (Hq, B), and the kernel's H is grid[1] (the score_mod gradient's rows)",
                                 dims, z3.And(z(sp.sympify(grid[0])) * bm >= Nqz, z(sp.sympify(grid[1])) == Hqz,
                                              z(sp.sympify(grid[2])) == Bz, z(sp.sympify(ints["H"])) == z(sp.sympify(grid[1])))))
    # both kernels read the map at MAP_BLOCK (the printed index terms above): the map the runtime builds at
    # spec.launch.block_map_tiles' tiles holds each kernel's tile in the entry it reads
    cases.append(_map_tile_case("dkdv, dq: the block map's entry [start_m // MAP_BLOCK_M, start_n // MAP_BLOCK_N], "
                                "built at spec.launch.block_map_tiles, holds the rows [start_m, +BLOCK_M) and keys "
                                "[start_n, +BLOCK_N) of the kernel's tile", map_tiles(_BACKWARD_MODULE),
                                (A.MAP_BLOCK_M, A.MAP_BLOCK_N)))
    cases += _score_grad_cases(g, score_grad_launch, lanes, loops)
    return result(A.CLAIM_BACKWARD_KERNELS, cases, "offsets by SymPy (canonical zero), extents by z3")


def _score_grad_cases(g, score_grad_launch, lanes, loops) -> list:
    """A user score_mod's parameter-gradient rows (dQ): for any launch grid (G0, G1, G2) (dense or packed: the
    buffer is made from the grid the launch uses; the kernel's H is G1, checked in the caller), program (pid_m,
    h, b)'s entry e is score_grad[(b·G1 + h)·G0 + pid_m, e] of the buffer spec.launch.score_grad_launch makes,
    inside it, and two programs never share a row; _score_param_scatter's printed lanes (``lanes``' first_e and e)
    reach every entry the tile read, each in one chunk only."""
    score_f = A.symbolic("score_f", ("P",))
    G0, G1, G2 = (sp.Symbol(s, integer=True, positive=True) for s in ("G0", "G1", "G2"))
    buf, ints = score_grad_launch(score_f, (G0, G1, G2))
    launched = {A.BK_["stride_sgp"]: sp.sympify(ints["stride_sgp"]), A.num_pid_m: G0, A.H_: G1}
    got = sp.expand(g[A.sg_off].expr.xreplace({A.sg_base: g[A.sg_base].expr}).xreplace(launched))
    row = (A.off_b * G1 + A.off_h) * G0 + A.pid_m
    cases = [("dq: score_grad offset is score_grad[(b·grid[1] + h)·grid[0] + pid_m, e]",
              difference(got, sp.expand(buf.offset_of((row, A.offs_e)))))]
    # the printed row (sg_base / stride_sgp), of two programs (pid_m, h, b) and (pid_m2, h2, b2) of the grid
    z = _Z3A()
    printed_row = sp.cancel(g[A.sg_base].expr.xreplace({A.num_pid_m: G0, A.H_: G1}) / A.BK_["stride_sgp"])
    p0, h0, b0, p1, h1, b1, e = z3.Ints("pid_m h b pid_m2 h2 b2 e")
    g0, g1, g2, P_ = z(G0), z(G1), z(G2), z(score_f.shape[0])
    row0 = z3.substitute(z(printed_row), (z(A.pid_m), p0), (z(A.off_h), h0), (z(A.off_b), b0))
    row1 = z3.substitute(z(printed_row), (z(A.pid_m), p1), (z(A.off_h), h1), (z(A.off_b), b1))
    hyp = [g0 >= 1, g1 >= 1, g2 >= 1, P_ >= 1] + [z3.And(0 <= x, x < gx) for x, gx in (
        (p0, g0), (h0, g1), (b0, g2), (p1, g0), (h1, g1), (b1, g2))]
    # _score_param_scatter's printed lanes (spec.addresses.BACKWARD_KERNEL_LANES first_e and e), read: the tile read
    # entries lo..hi, inside [0, len(SF)) (the user's indices); its printed chunk loop (spec.addresses.
    # BACKWARD_KERNEL_LOOPS e: ``for start_e in range(first_e, hi + 1, CHUNK)``, read) visits the starts first_e +
    # k·CHUNK < hi + 1, chunk k's lanes offs_e = start_e +
    # arange(width) read from the printed term; the load and store move the entries the printed entry_ok admits
    lo, hi, chunk, k = z(A.sg_lo), z(A.sg_hi), z(A.CHUNK_), z3.Int("k")
    (first,) = lanes["first_e"]
    read, shapes = _read_lanes(z, lanes, ("e",))
    lane = read["e"]
    cases += [(f"dq: {name}", value) for name, value in shapes]
    entry_ok = _lane_ok(z, g[A.entry_ok], {})(e)
    tile = [0 <= lo, lo <= hi, hi < P_, chunk >= 1]

    loop = _Loop(z, loops["e"], {A.first_e: first.expr})
    visited, at = loop.visited, loop.at  # the loop's chunk k_ (start first_e + k_·step below its stop), its start_e

    cases.append(_decide("dq: score_grad[row, e] inside (programs of the grid, chunk lanes e entry_ok admits)",
                         hyp + tile + [visited(k), lane.holds(e, *at(k)), entry_ok], _inside((row0, e), buf.shape)))
    # every entry lo <= e <= hi the tile read is a lane of a visited chunk (k = (e − first_e) // CHUNK) that entry_ok
    # admits, and no entry is a lane of two visited chunks (its gradient added once)
    k_e = (e - loop.first) / loop.step
    cases.append(_decide("dq: every entry lo <= e <= hi the tile read is a chunk lane entry_ok admits",
                         tile + [lo <= e, e <= hi], z3.And(visited(k_e), lane.holds(e, *at(k_e)), entry_ok)))
    k1, k2 = z3.Ints("k1 k2")
    cases.append(_decide(f"dq: no entry is in the lanes {lane.name} of two chunks (its gradient added once)",
                         tile + [visited(k1), visited(k2), lane.holds(e, *at(k1)), lane.holds(e, *at(k2))], k1 == k2))
    cases.append(_decide("dq: two programs of the grid never share a score_grad row (no atomics needed)",
                         hyp + [z3.Or(p0 != p1, h0 != h1, b0 != b1)], row0 != row1))
    return cases


# ----------------------------------------------------------------------------------
# The launch grids: inside CUDA's limits, each program one (tile, head, batch).
# ----------------------------------------------------------------------------------
@claim(A.CLAIM_GRID,
       "the launch grids fit CUDA's and name each program once: for all sizes the contract accepts (B and Hq at "
       "most grid_axes' 65535, B a packed batch's segments; Hq = GROUP·Hkv; N_q + N_k <= 2^29 and a packed "
       "max_seqlen <= 2^29; tiles of at least 16 rows; decode: ceil(GROUP·N_q / 16) x splits <= 2^31 − 1), every grid "
       "spec.launch computes — forward_launch, dropout_mask_launch, preprocess_launch (dense and packed), "
       "dkdv_launch, dq_launch, varlen_grid (the packed forward, dK/dV, dQ), append_launch and decode_launch — has "
       "axis 0 <= "
       "2^31 − 1 and axes 1, 2 <= GRID_AXIS_MAX = 65535 (CUDA's gridDim limits), and the printed split of the "
       "program ids (spec.addresses.GRID_GROUPS) maps the grid's programs one to one onto (tile, head, batch) in "
       "[0, tiles) x [0, heads) x [0, B) — decode: (row tile, split, KV head, batch) in [0, ROW_TILES) x [0, S) x "
       "[0, Hkv) x [0, B) —, and the program of each such tuple is launched at the place the (tile, b·heads + h) "
       "grid (decode: (row tile, split, b·Hkv + kvh)) gave it: the tiles of one head side by side",
       r"\mathrm{grid}_0 \le 2^{31}-1,\ \mathrm{grid}_{1,2} \le 65535,\quad "
       r"(p_0, p_1, p_2) \mapsto (p_0, p_1, p_2) \text{ or } (p_0 \bmod R, \lfloor p_0/R \rfloor, p_1, p_2)"
       r"\text{ a bijection, } (p_2 G_1 + p_1) G_0 + p_0 = (b H + h)\,T + t",
       scope="symbolic sizes and tile sizes (z3 over the integers, nonlinear); the kernels' program ids are int32 "
             "(each below 2^31 by the axis bounds proved here, and % and // of non-negative int32 values are exact)",
       assumptions=("grid_axes", "seq_len_int32", "block_sizes", "gqa_divides"))
def prove_launch_grid(groups=A.GRID_GROUPS, launches=None, accepted=None):
    from spec.assumptions import limit

    accepted = limit("grid_axes") if accepted is None else accepted
    launches = _grid_launches() if launches is None else launches
    cases = []
    for tag, (grid, ints, kind, sizes, hyp) in launches.items():
        z = _Z3A()
        zs = {k: z(sp.sympify(v)) for k, v in sizes.items()}
        symbols = set().union(*(sp.sympify(v).free_symbols for v in (*grid, *sizes.values())))
        dims = [z(s) >= (0 if s.name == "max_seqlen" else 1) for s in symbols]
        accept = [zs["batch"] <= accepted, zs["Hq"] <= accepted] + [h(z) for h in hyp]
        gz = [z(sp.sympify(x)) for x in grid]
        cases.append(_decide(f"{tag}: axis 0 <= 2^31 - 1, axes 1, 2 <= {L.GRID_AXIS_MAX} (CUDA's limits)",
                             dims + accept, z3.And(gz[0] <= L.GRID_AXIS0_MAX, gz[1] <= L.GRID_AXIS_MAX,
                                                   gz[2] <= L.GRID_AXIS_MAX, *[x >= 0 for x in gz])))
        # one program p and its tuple, a second program p' (fresh ids) and its tuple
        hyp_p, prog = _grid_program(groups[kind] if kind != "tile_head" else groups["tile"] + groups["head"],
                                    grid, ints, z)
        pid = [z(terms.program_id(a)) for a in range(3)]
        other = [z3.Int(f"other_program_id_{a}") for a in range(3)]
        again = lambda e: z3.substitute(e, *zip(pid, other))  # noqa: E731
        hyp_q = [again(h) for h in hyp_p]
        if kind == "decode":
            row_tiles, S_ = z(sp.sympify(ints["ROW_TILES"])), zs["splits"]
            names = ("row tile", "split", "kv head", "batch")
            ranges = (row_tiles, S_, zs["heads"], zs["batch"])
            tup = (prog[A.pid_m], prog[P.split], prog[A.off_kvh], prog[A.off_b])
            target = z3.Ints("t_tile t_split t_head t_batch")
            witness = (target[1] * row_tiles + target[0], target[2], target[3])
            old_place = ((target[3] * zs["heads"] + target[2]) * S_ + target[1]) * row_tiles + target[0]
        else:
            head = {"kv_head": prog.get(A.off_kvh), "append": prog.get(A.off_head)}.get(kind, prog.get(A.off_h))
            names = ("tile", "head", "batch")
            ranges = (zs["tiles"], zs["heads"], zs["batch"])
            tup = (prog[A.pid_m] if kind == "tile_head" else pid[0], head, prog[A.off_b])
            target = z3.Ints("t_tile t_head t_batch")
            witness = tuple(target)
            old_place = (target[2] * zs["heads"] + target[1]) * zs["tiles"] + target[0]
        in_range = lambda vals: z3.And(*[z3.And(0 <= x, x < r) for x, r in zip(vals, ranges)])  # noqa: E731
        cases.append(_decide(f"{tag}: every program's ({', '.join(names)}) is in range", dims + hyp_p, in_range(tup)))
        cases.append(_decide(f"{tag}: two programs never share a ({', '.join(names)})",
                             dims + hyp_p + hyp_q + [z3.Or(*[a != b for a, b in zip(pid, other)])],
                             z3.Or(*[x != again(x) for x in tup])))
        at = lambda e: z3.substitute(e, *zip(pid, witness))  # noqa: E731
        place = (witness[2] * gz[1] + witness[1]) * gz[0] + witness[0]
        cases.append(_decide(f"{tag}: each ({', '.join(names)}) in range is a program of the grid, launched where "
                             "the old grid launched it", dims + [in_range(target)],
                             z3.And(*[at(h) for h in hyp_p], *[at(x) == t for x, t in zip(tup, target)],
                                    place == old_place)))
    return result(A.CLAIM_GRID, cases, "z3 over the integers (nonlinear)")


def _grid_launches() -> dict:
    """``tag -> (grid, ints, group kind, sizes, accepted)`` of every launch whose grid has a program split
    (spec.addresses.GRID_GROUPS): the spec.launch functions on symbolic tensors; ``sizes`` the tiles, heads,
    batch (and Hq, decode's splits) the split must reach; ``accepted`` the contract's other bounds (z3)."""
    seq = 2**29  # seq_len_int32
    G = sp.Symbol("GROUP_TRUE", integer=True, positive=True)
    blk = lambda z, b: z3.And(16 <= z(b), z(b) <= 256)  # noqa: E731  (block_sizes)
    t = _forward_tensors()
    q, k = t["q"], t["k"]
    B, Hq, N_Q, _ = q.shape
    Hkv, N_K = k.shape[1], k.shape[2]
    dense = [lambda z: z3.And(z(N_Q) >= 1, z(N_K) >= 1, z(N_Q) + z(N_K) <= seq), lambda z: z(Hq) == z(G) * z(Hkv)]
    out = {}
    grid, ints = L.forward_launch(q, k, t["v"], t["out"], t["lse"], t["key_lengths"], t["mask"], t["block_map"],
                                  t["slopes"]["(Hq,)"], t["sinks"], n.B_r, t["mask_mod_args"], descales=t["descales"])
    out["forward"] = (grid, ints, "tile_head", dict(tiles=sp.ceiling(N_Q / n.B_r), heads=Hq, batch=B, Hq=Hq),
                      dense + [lambda z: blk(z, n.B_r)])
    keep = A.symbolic("keep", (B, Hq, N_Q, N_K))
    grid, ints = L.dropout_mask_launch(keep, n.B_r)
    out["dropout mask"] = (grid, ints, "head", dict(tiles=sp.ceiling(N_Q / n.B_r), heads=Hq, batch=B, Hq=Hq),
                           dense + [lambda z: blk(z, n.B_r)])
    bt = _backward_tensors()
    for kernel, launch, block, kind, heads, n_rows in (
            ("dkdv", L.dkdv_launch, n.B_c, "kv_head", Hkv, N_K), ("dq", L.dq_launch, n.B_r, "head", Hq, N_Q)):
        grid, ints = launch(bt["q"], bt["k"], bt["v"], bt["do"], bt[f"d{kernel[-1]}" if kernel == "dq" else "dk"],
                            *((bt["dv"],) if kernel == "dkdv" else ()), bt["delta"], bt["key_lengths"], bt["mask"],
                            bt["block_map"], bt["slopes"]["(Hq,)"], block, bt["mask_mod_args"])
        out[kernel] = (grid, ints, kind, dict(tiles=sp.ceiling(n_rows / block), heads=heads, batch=B, Hq=Hq),
                       dense + [lambda z, block=block: blk(z, block)])
    # the preprocess, dense and packed (one batch: rows the packed total)
    total = sp.Symbol("total_q", integer=True, positive=True)
    for tag, o_shape, r_shape, batch, rows in (("preprocess", (B, Hq, N_Q, "D"), (B, Hq, N_Q), B, N_Q),
                                               ("packed preprocess", (total, Hq, "D"), (Hq, total), 1, total)):
        o, lse = A.symbolic("out", o_shape), A.symbolic("lse", r_shape)
        grid, ints = L.preprocess_launch(o, A.symbolic("do", o_shape), lse, lse, lse, A.symbolic("sinks", (Hq,)),
                                         n.B_r)
        out[tag] = (grid, ints, "head", dict(tiles=sp.ceiling(rows / n.B_r), heads=Hq, batch=batch, Hq=Hq),
                    [lambda z, rows=rows: z(rows) <= seq, lambda z: blk(z, n.B_r)])
    # a packed batch (forward, dK/dV, dQ): varlen_grid over the longest segment, per head and segment
    max_seqlen, block = sp.Symbol("max_seqlen", integer=True, nonnegative=True), sp.Symbol("BLOCK", integer=True,
                                                                                          positive=True)
    heads = sp.Symbol("heads", integer=True, positive=True)
    cu = A.symbolic("cu_seqlens", ("B1",))
    segments = cu.shape[0] - 1
    grid = L.varlen_grid(max_seqlen, block, cu, heads)
    out["packed (varlen_grid)"] = (grid, {}, "head", dict(tiles=sp.ceiling(max_seqlen / block), heads=heads,
                                                          batch=segments, Hq=heads),
                                   [lambda z: z(max_seqlen) <= seq, lambda z: blk(z, block), lambda z: z(segments) >= 1])
    # the KV append: (token tiles, H, B); its heads are the cache's Hkv <= Hq
    x = A.symbolic("x", ("B", "N_new", "H", "D"))
    B_, N_new, H_ = x.shape[0], x.shape[1], x.shape[2]
    block_t = sp.Symbol("BLOCK_T", integer=True, positive=True)
    table, cos = A.symbolic("block_table", (B_, "MP")), A.symbolic("cos", ("NR", "R"))
    grid, ints = L.append_launch(x, A.symbolic("cache", ("NC", "PS", H_, "D")), A.symbolic("cache_seqlens", (B_,)),
                                 table, A.symbolic("cache_batch_idx", (B_,)), cos, A.symbolic("sin", cos.shape), block_t)
    out["append"] = (grid, ints, "append", dict(tiles=sp.ceiling(N_new / block_t), heads=H_, batch=B_, Hq=H_),
                     [lambda z: z(N_new) <= seq, lambda z: blk(z, block_t)])
    # decode: (row tiles x splits, Hkv, B)
    dq_, dk_, dv_, dout, dlse, cs, _, sinks, leftpad, batch_idx, descales = _decode_tensors(False)
    block_m = sp.Symbol("BLOCK_M", integer=True, positive=True)
    grid, ints, _ = L.decode_launch(dq_, dk_, dv_, dout, dlse, cs, None, block_m, sinks, cache_leftpad=leftpad,
                                    cache_batch_idx=batch_idx, split_keys=sp.Symbol("split_keys", integer=True),
                                    descales=descales)
    dB, dNq, dHq, _ = dq_.shape
    dHkv, S_ = dk_.shape[2], dout.shape[0]
    out["decode"] = (grid, ints, "decode", dict(heads=dHkv, batch=dB, Hq=dHq, splits=S_),
                     [lambda z: z(dHq) == z(G) * z(dHkv), lambda z: z(dNq) <= seq, lambda z: blk(z, block_m),
                      lambda z: (z(G) * z(dNq) + 15) / 16 * z(S_) <= 2**31 - 1])
    return out
