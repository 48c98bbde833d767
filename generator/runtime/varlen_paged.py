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
The padding rows are computed and dropped (they read only the sequence's valid keys; claim
``paged_varlen_slots`` proves each packed row's (segment, token) (``spec.varlen.packed_tokens``), the
placement, the read-back of out and of lse in varlen's ``(Hq, total_q)`` layout, and that no padding slot
is read back: ``spec.varlen.paged_slot`` and its neighbours); the cost is
``B·max_seqlen_q`` query rows instead of ``total_q``: efficient when the lengths are alike (chunked
prefill of equal chunks, decode), wasteful for one long chunk among many single tokens. Forward only.

The inputs are checked by ``flash_attention_varlen``'s declaration (``generator.runtime.contract``,
its ``block_table`` rules: paged caches, page sizes, each sequence's keys within its pages, the page
ids it reads in range); the offsets' values by ``spec.varlen.segments``, as the packed path's.
"""

from __future__ import annotations

import torch

from spec import varlen as spec_varlen
from generator.runtime import checks, decode


def flash_attention_varlen_paged(package, a: dict):
    """See ``flash_attention_varlen``; ``a`` its arguments as ``contract.enforce`` returned them
    (``k``, ``v`` paged with ``block_table`` int32 ``(B, max_pages)``). Returns ``out`` ``(total_q, Hq, D_v)``
    (and ``lse`` float32 ``(Hq, total_q)``)."""
    q, cu_seqlens_q, cu_seqlens_k = a["q"], a["cu_seqlens_q"], a["cu_seqlens_k"]
    total_q, Hq, D = q.shape
    B = cu_seqlens_q.numel() - 1
    # the offsets checked by value (non-decreasing, from 0 to the totals): one host sync, as the packed path's
    cu_q, cu_k = cu_seqlens_q.cpu(), cu_seqlens_k.cpu()
    spec_varlen.segments(cu_q, cu_k, total_q, int(cu_k[-1]))
    # packed row r is token t = r − cu_seqlens_q[b] of segment b (n_q its queries): spec.varlen.packed_tokens
    seg, local, n_q = spec_varlen.packed_tokens(cu_q.long(), total_q, torch)
    longest = int(n_q.max()) if total_q else 0
    max_q = max(1, checks.check_hint("max_seqlen_q", a["max_seqlen_q"], longest))
    # the padded queries and their output: fresh, contiguous; int32 offsets inside one (sequence, head) slice
    checks.check_index_width(q=((max_q, D), (Hq * D, 1)))
    # token (b, t)'s (row, slot) in the decode launch's queries: spec.varlen.paged_slot (right-aligned, so the
    # decode's bottom-right slot is the segment's bottom-right position), scattered and read back by spec.varlen's
    # functions (claim paged_varlen_slots proves them and packed_tokens)
    rows, slots = (x.to(q.device) for x in spec_varlen.paged_slot(seg, local, n_q, max_q))
    q_pad = spec_varlen.paged_queries(q, rows, slots, B, max_q)
    n_k = spec_varlen.paged_key_lengths(cu_seqlens_k).to(torch.int32)
    out, lse = decode._kvcache(package, q_pad, a["k"], a["v"], n_k, block_table=a["block_table"], causal=a["causal"],
                               window=a["window"], scale=a["scale"], return_lse=True, softcap=a["softcap"],
                               alibi_slopes=a["alibi_slopes"], sinks=a["sinks"], batch_invariant=a["batch_invariant"])
    out = spec_varlen.paged_out(out, rows, slots)  # v's head dim D_v (MLA: D_v != D)
    if not a["return_lse"]:
        return out
    return out, spec_varlen.paged_lse(lse, rows, slots).contiguous()
