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

import sympy as sp
import z3

from spec import addresses as A
from spec import launch as L
from spec import notation as n
from spec import paged as P
from spec import terms
from spec import varlen as V
from spec.proofs.paged import _Z3, _decide
from spec.proofs.tools import difference, result
from spec.registry import claim
from spec.terms import col, row


def _lanes(e):
    """A tile offset lane by lane: ``x[:, None]`` and ``x[None, :]`` are ``x`` at the lane."""
    return sp.sympify(e).replace(col, lambda x: x).replace(row, lambda x: x)


class _Z3A(_Z3):
    """``spec.proofs.paged``'s SymPy -> z3 map, plus ``Mod`` (non-negative operands)."""

    def __call__(self, e):
        e = sp.sympify(e)
        if isinstance(e, sp.Mod):
            return self(e.args[0]) % self(e.args[1])
        if isinstance(e, sp.StrictGreaterThan):
            return self(e.lhs) > self(e.rhs)
        if isinstance(e, sp.GreaterThan):
            return self(e.lhs) >= self(e.rhs)
        return super().__call__(e)


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
    return q, k, v, out, lse, cs, bt, sinks, leftpad, batch_idx


@claim(A.CLAIM_DECODE,
       "decode's addresses: for all shapes and non-negative strides of q (B, N_q, Hq, D), a contiguous "
       "(B_cache, N_cache, Hkv, D) or paged (num_pages, PAGE_SIZE, Hkv, D) k cache and a v cache of the same "
       "rows with its own head dim D_v (two head dims, any strides: v may be a view of k), out (S, B, N_q, Hq, D_v), "
       "lse (S, B, N_q, Hq), cache_seqlens, cache_leftpad, cache_batch_idx (B,) and block_table (B, max_pages), with the strides, sizes and "
       "grid spec.launch.decode_launch passes (the function the launcher calls), every printed offset of "
       "_decode_fwd (spec.addresses: q, cache_seqlens, cache_leftpad, cache_batch_idx, block_table, k/v rows, "
       "out, lse) is the offset of the element the reference reads — q[b, tok, head, d], cache_seqlens[b], "
       "cache_leftpad[b], cache_batch_idx[b], block_table[b, j // PAGE_SIZE], "
       "k_cache[block_table[b, j // PAGE_SIZE], j % PAGE_SIZE, kvh, d] (paged) or k_cache[off_bc, j, kvh, d] "
       "(off_bc = b, or cache_batch_idx[b] with HAS_BATCH_IDX), v_cache likewise at dv, "
       "out[split, b, tok, head, dv], lse[split, b, tok, head], sinks[head] — and that element lies inside the "
       "tensor's shape for every program of the grid and every lane its mask lets through (d < D, dv < D_v); "
       "with the head dim split at D_v (MLA, claim head_dim_split) the tails q[b, tok, head, dt] and "
       "k_cache[..., kvh, dt] for HEAD_DIM <= dt < D; and with v_cache = k_cache[..., :D_v] (k's pointer and "
       "strides) the v offset at lane d is the k offset (the kernel uses its K tile as V) (given Hq = GROUP·Hkv, 0 <= cache_seqlens[b] <= "
       "capacity, B_cache = B without cache_batch_idx, cache_batch_idx entries in [0, B_cache) and, paged, "
       "block_table entries in [0, num_pages)); the rows (GROUP heads x N_q tokens) "
       "map one to one onto the (head, token) pairs of the KV head; and the merge's row views "
       "(decode_partial_rows, decode_merged_out, decode_merged_lse) put merged row r = (b·N_q + t)·Hq + h "
       "at out[b, t, h] and lse[b, h, t], where the kernel wrote partial (split, b, t, h)",
       r"\mathrm{off}(X, \mathrm{idx}) = \sum_d \mathrm{idx}_d\,\mathrm{stride}_d,\quad 0\le\mathrm{idx}_d<n_d",
       terms=tuple(t.name for g in A.DECODE_GROUPS.values() for t in g),
       scope="symbolic shapes, strides (>= 0), grid, lanes and loaded values (SymPy canonical zero for the "
             "offsets, z3 for the extents); mathematical integers Z (the kernel's products are int64 where a "
             "factor is off_b, off_kvh, head or page; tok·stride, slot·stride and d·stride are int32 products "
             "not proven free of overflow)")
def prove_decode_addresses(launch=None, groups=A.DECODE_GROUPS, partial_rows=None, merged_out=None, merged_lse=None):
    launch = L.decode_launch if launch is None else launch
    partial_rows = L.decode_partial_rows if partial_rows is None else partial_rows
    merged_out = L.decode_merged_out if merged_out is None else merged_out
    merged_lse = L.decode_merged_lse if merged_lse is None else merged_lse
    cases = []
    block_m = sp.Symbol("BLOCK_M", integer=True, positive=True)
    for paged in (True, False):
        tag = "paged" if paged else "contiguous"
        q, k, v, out, lse, cs, bt, sinks, leftpad, batch_idx = _decode_tensors(paged)
        grid, ints, constexprs = launch(q, k, v, out, lse, cs, bt, block_m, sinks, cache_leftpad=leftpad,
                                        cache_batch_idx=batch_idx, split_keys=sp.Symbol("split_keys", integer=True))
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
        # V_IS_K (the absorbed layout, v_cache = k_cache[..., :D_v]: k's pointer and strides): the V tile at
        # lane d is the K tile's, so the kernel may use the K tile it loaded as V
        as_view = dict(zip(v.strides, k.strides))
        v_is_k = sp.expand(kv_values["v"].xreplace(as_view).xreplace({dv: d}))
        cases.append((f"{tag}: v_cache = k_cache[..., :D_v]: v offset at lane d is k's",
                      difference(v_is_k, kv_values["k"])))
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
        split, pid1, pid2, lane = z3.Ints("split pid1 pid2 lane")
        Gz = z(sp.sympify(ints["GROUP"]))
        grid_z = [z(sp.sympify(x)) for x in grid]
        hyp += [0 <= split, split < grid_z[0], 0 <= pid1, pid1 < grid_z[1], 0 <= pid2, pid2 < grid_z[2],
                0 <= lane, lane < bm]
        offb, kvh = pid1 / z(sp.sympify(ints["H_KV"])), pid1 % z(sp.sympify(ints["H_KV"]))  # spec.structure.GRID_LINES
        m = pid2 * bm + lane
        zsub = lambda e: z3.substitute(z(e), (z(A.off_b), offb), (z(A.off_kvh), kvh), (z(A.offs_m), m))  # noqa: E731
        hyp.append(z(A.offs_m) >= 0)
        tok_z, head_z = zsub(tok.xreplace(launched)), zsub(head.xreplace(launched))
        row_ok = m < Gz * z(sp.sympify(ints["N_Q"]))
        dz, dvz = z(d), z(dv)
        d_ok = z3.And(0 <= dz, dz < Dz)
        dv_ok = z3.And(0 <= dvz, dvz < Dvz)
        inside = lambda idx, shape: z3.And(*[z3.And(0 <= i, i < s) for i, s in zip(idx, shape)])  # noqa: E731
        cases.append(_decide(f"{tag}: q[b, tok, head, d] inside q (lanes row_ok & d_ok)", hyp + [row_ok, d_ok],
                             inside((offb, tok_z, head_z, dz), (Bz, Nqz, Hqz, Dz))))
        # the split's tail lanes: HEAD_DIM <= dt < HEAD_DIM + HEAD_DIM_TAIL = D (the launch's split of D)
        dtz, main_z = z(A.offs_dt), z3.Int("HEAD_DIM")
        dt_ok = z3.And(1 <= main_z, main_z <= Dz, main_z <= dtz, dtz < Dz)
        cases.append(_decide(f"{tag}: q[b, tok, head, dt] inside q (lanes row_ok & dt_ok)", hyp + [row_ok, dt_ok],
                             inside((offb, tok_z, head_z, dtz), (Bz, Nqz, Hqz, Dz))))
        cases.append(_decide(f"{tag}: cache_seqlens[b] inside cache_seqlens", hyp, inside((offb,), (Bz,))))
        cases.append(_decide(f"{tag}: cache_leftpad[b], cache_batch_idx[b] inside theirs (B,)", hyp,
                             inside((offb,), (Bz,))))
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
                             z3.And(tok_m == t2, head_m == kvh * Gz + g2, mz / bm < grid_z[2],
                                    mz < Gz * z(sp.sympify(ints["N_Q"])))))
        # keys: j < split_hi <= key_len <= capacity (the load mask key_ok; claim paged_kv_reads)
        jz, key_len_z = z(j), z3.Int("key_len_value")
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
    return result(A.CLAIM_DECODE, cases, "offsets by SymPy (canonical zero), extents by z3, contiguous and paged")


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
       "dQ, K, V of dQ), with the dense kernels' address form off_b·stride_b + h·stride_h + i·stride_row + "
       "d·stride_d and spec.launch.packed_strides' strides, reaches element (cu[b] + i, h, d) of its tensor "
       "— the segment's row i, queries from cu_seqlens_q and keys from cu_seqlens_k — inside the tensor for "
       "0 <= i < the segment's length, given the host's check of the offsets (non-decreasing, from 0 to the "
       "totals); the grid's cdiv(max_seqlen, B) tiles cover every segment no longer than max_seqlen",
       r"\mathrm{X} + \mathrm{cu}[b]\,s_{row} + i\,s_{row} + h\,s_h + d\,s_d = "
       r"\mathrm{off}(X, (\mathrm{cu}[b]+i, h, d))",
       terms=tuple(t.name for t in A.SEGMENT_LOADS) + tuple(sorted({t.name for g in A.SEGMENT_POINTERS.values()
                                                                    for t in g})),
       scope="symbolic totals, heads, head dim, strides (>= 0), segment and offsets' values (uninterpreted), "
             "grid (SymPy canonical zero for the elements, z3 for the extents); mathematical integers Z (the "
             "segment starts are int64 when they scale a stride); the dense address form is the kernels' "
             "hand-written pointer lines (a listed gap)")
def prove_varlen_addresses(loads=A.SEGMENT_LOADS, pointers=A.SEGMENT_POINTERS, cu_seqlens=None, strides=None, grid=None):
    cu_seqlens = L.varlen_cu_seqlens if cu_seqlens is None else cu_seqlens
    strides = L.packed_strides if strides is None else strides
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
    row_stride = {sp.Symbol(name, integer=True): strides(tensors[t])[2] for name, t in A.ROW_STRIDES.items()}
    starts = {V.seq_start_q: values.get(V.seq_start_q, V.seq_start_q),
              V.seq_start_k: values.get(V.seq_start_k, V.seq_start_k)}
    i, h, d = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("i", "h", "d"))
    for kernel, group in pointers.items():
        for term in group:
            ptr = term.symbol.name
            name = A.POINTER_TENSOR[ptr]
            tensor = tensors[name]
            side = "q" if tensor.shape[0].name == "total_q" else "k"
            sb, sh, sm, sd = strides(tensor)
            moved = sp.expand(term.expr - term.symbol).xreplace(row_stride).xreplace(starts)
            address = sp.expand(moved + A.off_b * sb + h * sh + i * sm + d * sd)  # the dense kernel's address form
            start = mem[side](sp.expand(passed[side].offset_of((A.off_b,))))
            cases.append((f"{kernel}: {ptr} reaches {name}[cu_seqlens_{side}[b] + i, h, d]",
                          difference(address, sp.expand(tensor.offset_of((start + i, h, d))))))
    # the extents (z3): the program's segment b has cu[b + 1] inside cu_seqlens; a row i < length inside
    z = _Z3A()
    B1, H = z(cu_in["q"].shape[0]), z3.Int("Hq")
    max_seqlen, block = z3.Ints("max_seqlen BLOCK")
    g = grid(sp.Symbol("max_seqlen", integer=True, nonnegative=True), sp.Symbol("BLOCK", integer=True, positive=True),
             passed["q"], sp.Symbol("Hq", integer=True, positive=True))
    g0, g1 = z(g[0]), z(g[1])
    pid1, hh = z3.Ints("pid1 head")
    offb = pid1 / H
    hyp = [B1 >= 2, H >= 1, block >= 1, max_seqlen >= 0, 0 <= pid1, pid1 < g1]
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
    return result(A.CLAIM_VARLEN, cases, "elements by SymPy (canonical zero, uninterpreted loaded values), "
                                         "extents by z3")
