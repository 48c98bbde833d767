"""``flash_attention_varlen(..., block_table=)``: a packed batch of queries over paged K/V caches.

FlashAttention 2's form of ``flash_attn_varlen_func`` with ``block_table``: ``q`` is packed
``(total_q, Hq, D)`` with ``cu_seqlens_q``; ``k_cache``, ``v_cache`` are paged caches
``(num_pages, page_size, Hkv, D)``; ``cu_seqlens_k`` gives each sequence's key count (cumulative),
its keys ``0 … n_k − 1`` living in the pages ``block_table[b]`` (chunked prefill over a page table).

The launch is the KV-cache decode kernel's (``generated/attention_decode_br*``): its paged gather
and split ranges are ``spec.paged``'s terms (claim ``paged_kv_reads``: every key of a sequence read
exactly once, none past ``n_k``, inside the sequence's pages). Its rows are ``(B, N_q)`` with one
``N_q`` for the batch, bottom-right aligned, so each sequence's queries are placed at the *end* of
``max_seqlen_q`` slots (left padding): query ``t`` of sequence ``b`` then sits at key position
``n_k − n_q + t``, the packed form's bottom-right alignment, for causal, window and ALiBi alike.
The padding rows are computed and dropped (they read only the sequence's valid keys); the cost is
``B·max_seqlen_q`` query rows instead of ``total_q``: efficient when the lengths are alike (chunked
prefill of equal chunks, decode), wasteful for one long chunk among many single tokens. Forward only.
"""

from __future__ import annotations

import torch

from spec import varlen as spec_varlen
from generator.runtime import decode


def flash_attention_varlen_paged(q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, block_table, *,
                                 causal, window, scale, return_lse, softcap, alibi_slopes, sinks, batch_invariant,
                                 package):
    """See ``flash_attention_varlen``; ``k_cache``, ``v_cache`` paged with ``block_table`` int32
    ``(B, max_pages)``. Returns ``out`` ``(total_q, Hq, D_v)`` (and ``lse`` float32 ``(Hq, total_q)``)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError(f"q must be packed (total_q, Hq, D), got {tuple(getattr(q, 'shape', ())) or type(q).__name__}")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
            raise ValueError(f"{name} must be an int32 tensor (B + 1,) of offsets from 0, got "
                             f"{getattr(cu, 'dtype', type(cu).__name__)} {tuple(getattr(cu, 'shape', ()))}")
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"cu_seqlens_q has {cu_seqlens_q.numel()} entries and cu_seqlens_k {cu_seqlens_k.numel()}; "
                         "both must hold B + 1 (one query segment per sequence of the page table)")
    total_q, Hq, D = q.shape
    B = cu_seqlens_q.numel() - 1
    # the offsets checked by value (non-decreasing, from 0 to the totals): one host sync, as the dense varlen's
    cu_q, cu_k = cu_seqlens_q.cpu(), cu_seqlens_k.cpu()
    spec_varlen.segments(cu_q, cu_k, total_q, int(cu_k[-1]))
    n_q = (cu_q[1:] - cu_q[:-1]).long()
    longest = int(n_q.max()) if B else 0
    if max_seqlen_q is not None and max_seqlen_q < longest:
        raise ValueError(f"max_seqlen_q={max_seqlen_q} is smaller than the longest segment ({longest}); pass {longest} "
                         "or more, or None to compute it")
    max_q = max(1, longest if max_seqlen_q is None else int(max_seqlen_q))
    # row r of segment b (local token t) -> slot b·max_q + (max_q − n_q[b]) + t: right-aligned in its slots
    seg = torch.repeat_interleave(torch.arange(B), n_q)
    local = torch.arange(total_q) - cu_q[:-1].long()[seg]
    dest = (seg * max_q + (max_q - n_q[seg]) + local).to(q.device)
    q_pad = q.new_zeros((B * max_q, Hq, D)).index_copy_(0, dest, q).view(B, max_q, Hq, D)
    n_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
    out, lse = decode._kvcache(package, q_pad, k_cache, v_cache, n_k, block_table=block_table, causal=causal,
                                            window=window, scale=scale, return_lse=True, softcap=softcap,
                                            alibi_slopes=alibi_slopes, sinks=sinks, batch_invariant=batch_invariant)
    out = out.reshape(B * max_q, Hq, out.shape[-1])[dest]  # v_cache's head dim D_v (MLA: D_v != D)
    if not return_lse:
        return out
    return out, lse.transpose(1, 2).reshape(B * max_q, Hq)[dest].t().contiguous()
