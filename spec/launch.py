"""Launch arguments: one function per kernel, what the runtime passes and the claims quantify over.

A kernel's offsets (``spec.addresses``) are only right for the strides, sizes and grid the launch
passes. So those arguments are computed here, once, by plain Python that runs unchanged on torch
tensors (``generator.runtime`` and the generated launchers call it) and on ``spec.addresses.Strided``
symbolic tensors (claims ``decode_addresses``, ``varlen_addresses``, ``window_clamp``): what the
claims prove about these functions' output is what the runtime passes, with no second copy.

Integers are combined with ``cdiv`` (``triton.cdiv`` on numbers, ``ceiling`` on SymPy sizes).
"""

from __future__ import annotations

import sympy as sp

from spec import rewrites


def cdiv(a, b):
    """``ceil(a / b)`` for ``b > 0``: numbers (as ``triton.cdiv``) or SymPy integers."""
    if isinstance(a, sp.Basic) or isinstance(b, sp.Basic):
        return sp.ceiling(sp.sympify(a) / b)
    return -(-a // b)


# ----------------------------------------------------------------------------------
# The window rewrite at each call site (claim window_clamp): N_q and N_k read off the tensors.
# ----------------------------------------------------------------------------------
def dense_window(window, q, k):
    """``flash_attention``: q ``(B, Hq, N_q, D)``, k ``(B, Hkv, N_k, D)``."""
    return rewrites.window_clamp(window, q.shape[2], k.shape[2])


def varlen_window(window, q, k):
    """``flash_attention_varlen``: q ``(total_q, Hq, D)``, k ``(total_k, Hkv, D)``; a segment has at most
    the totals' rows, so the totals' bound is wide enough for every segment."""
    return rewrites.window_clamp(window, q.shape[0], k.shape[0])


def decode_window(window, q, capacity):
    """``flash_attention_with_kvcache``: q ``(B, N_q, Hq, D)``, at most ``capacity`` keys per sequence."""
    return rewrites.window_clamp(window, q.shape[1], capacity)


# ----------------------------------------------------------------------------------
# Decode: _decode_fwd's grid and integer arguments; the merge's row views.
# ----------------------------------------------------------------------------------
def decode_launch(q, k_cache, v_cache, out, lse, cache_seqlens, block_table, block_m, sinks=None,
                  cache_leftpad=None, cache_batch_idx=None, split_keys=0):
    """``(grid, ints, constexprs)`` of one ``_decode_fwd`` launch: ``ints`` the kernel's integer
    parameters by name (every stride as the tensor has it, the sizes), ``grid`` = (splits, B x Hkv,
    row blocks), ``constexprs`` the page size and rows per program.

    q ``(B, N_q, Hq, D)``; the cache ``(B, N_cache, Hkv, D)`` or, with ``block_table`` ``(B,
    max_pages)``, ``(num_pages, PAGE_SIZE, Hkv, D)``; ``out`` ``(S, B, N_q, Hq, D)``, ``lse`` ``(S, B,
    N_q, Hq)`` (S splits: the grid's first axis is ``out``'s); ``cache_seqlens`` ``(B,)``; ``sinks``
    ``(Hq,)`` or None (then stride 0: never read); ``cache_leftpad``, ``cache_batch_idx`` ``(B,)`` or
    None (then stride 0 and ``HAS_LEFTPAD`` / ``HAS_BATCH_IDX`` off: never read); ``split_keys > 0``:
    fixed-size splits (``BATCH_INVARIANT``)."""
    B, N_Q, HQ, _ = q.shape
    H_KV = k_cache.shape[2]
    group = HQ // H_KV
    num_splits = out.shape[0]
    paged = block_table is not None
    table = block_table if paged else cache_seqlens[None]  # a placeholder when not paged: never read
    ints = dict(zip(("stride_qb", "stride_qn", "stride_qh", "stride_qd"), q.stride()))
    ints.update(zip(("stride_kb", "stride_kn", "stride_kh", "stride_kd"), k_cache.stride()))
    ints.update(zip(("stride_vb", "stride_vn", "stride_vh", "stride_vd"), v_cache.stride()))
    ints.update(zip(("stride_os", "stride_ob", "stride_on", "stride_oh", "stride_od"), out.stride()))
    ints.update(zip(("stride_ls", "stride_lb", "stride_ln", "stride_lh"), lse.stride()))
    ints.update(stride_bt_b=table.stride(0), stride_bt_p=table.stride(1), stride_cs=cache_seqlens.stride(0),
                stride_sink=sinks.stride(0) if sinks is not None else 0,
                stride_lp=cache_leftpad.stride(0) if cache_leftpad is not None else 0,
                stride_bi=cache_batch_idx.stride(0) if cache_batch_idx is not None else 0,
                H_KV=H_KV, GROUP=group, N_Q=N_Q, num_splits=num_splits, split_keys=split_keys)
    grid = (num_splits, B * H_KV, cdiv(group * N_Q, block_m))
    constexprs = dict(BLOCK_M=block_m, PAGED=paged, PAGE_SIZE=k_cache.shape[1] if paged else 1,
                      HAS_LEFTPAD=cache_leftpad is not None, HAS_BATCH_IDX=cache_batch_idx is not None,
                      BATCH_INVARIANT=split_keys > 0)
    return grid, ints, constexprs


def decode_partial_rows(o_part, lse_part):
    """The splits' partials ``(S, B, N_q, Hq[, D])`` as merge rows: ``(S, R, D)``, ``(S, R)``, row
    ``r = (b·N_q + t)·Hq + h`` (the fold merges row r over the splits)."""
    S, D = o_part.shape[0], o_part.shape[-1]
    return o_part.view(S, -1, D), lse_part.view(S, -1)


def decode_merged_out(out):
    """The output ``(B, N_q, Hq, D)`` (contiguous) as the merge's ``(R, D)`` rows."""
    return out.view(-1, out.shape[-1])


def decode_merged_lse(merged_lse, B, N_q, Hq):
    """The merged rows' lse ``(R,)`` as the op's ``lse`` layout ``(B, Hq, N_q)``."""
    return merged_lse.view(B, N_q, Hq).transpose(1, 2)


# ----------------------------------------------------------------------------------
# Varlen: the forward's grid and the tensors its segment block reads.
# ----------------------------------------------------------------------------------
def varlen_cu_seqlens(cu_seqlens_q, cu_seqlens_k):
    """The offset vectors as the kernels read them: contiguous (element b at offset b)."""
    return cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()


def packed_strides(t):
    """``(batch, head, row, dim)`` strides of a packed ``(total, H, D)`` tensor, as the attention
    kernels take them: batch stride 0, since an ``IS_VARLEN`` program offsets its pointers by its
    segment's first row (``cu_seqlens[b]``) instead."""
    return 0, t.stride(1), t.stride(0), t.stride(2)


def varlen_grid(max_seqlen, block, cu_seqlens, heads):
    """``(cdiv(max_seqlen, block), B x heads)``: one program per tile of ``block`` rows (queries for the
    forward and dQ, keys for dK/dV) and per (segment, head); ``B = len(cu_seqlens) - 1``."""
    return cdiv(max_seqlen, block), (cu_seqlens.shape[0] - 1) * heads
