"""``flash_attention_with_kvcache``: attention of a few new query tokens over a KV cache.

One op per file (Liger-Kernel style): the input checks, the split heuristic and the launcher
of the generated decode kernel (``generated/attention_decode_br*_bc*.py``), whose splits write
normalised partial results that ``merge_state``'s fold (``generated/merge_state_br*.py``)
combines. Both kernels print their arithmetic from the spec (claims ``lse_merge``,
``paged_kv_reads`` and the dense forward's; the score modifications' ``score_mod_invariant``,
``sink_once`` unsplit and ``sink_once_combine`` split). Inference only: no autograd.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from generator.runtime import api, checks, config, contract
from generator.runtime.config import DECODE_BLOCK  # noqa: F401  (the block whose decode kernel serves this op)

MAX_SPLITS = 16
#: keys a split streams at least, and at least this many per query row of its program: a split
#: writes one fp32 partial (o, lse) per row and the merge reads it back, ~8 (D + 1) bytes a row
#: against ~4 D bytes of K and V (fp16) per key, so 128 keys a row keep partials under ~2 %
MIN_KEYS_PER_SPLIT = 256
KEYS_PER_ROW = 128


def default_num_splits(programs: int, max_keys: int, num_sms: int, rows: int = 1) -> int:
    """``num_splits=0``: enough splits that ``programs x splits`` fills the GPU's SMs.

    ``programs`` is B x Hkv x row blocks (the grid without splitting), ``rows`` the query rows of
    one program (GQA group x N_q), ``max_keys`` the cache's capacity in keys (no device sync to
    read ``cache_seqlens``). One split when the grid already fills the SMs; else
    ``ceil(num_sms / programs)`` splits, at most ``MAX_SPLITS`` and at most one per
    ``max(MIN_KEYS_PER_SPLIT, KEYS_PER_ROW x rows)`` keys (a short cache is not worth splitting,
    and the fp32 partials stay a few percent of the K/V bytes: benchmarks.hbm_decode).
    """
    if programs >= num_sms:
        return 1
    keys_per_split = max(MIN_KEYS_PER_SPLIT, KEYS_PER_ROW * rows)
    return max(1, min(MAX_SPLITS, math.ceil(num_sms / programs), max_keys // keys_per_split))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the CPU interpreter runs programs one at a time: splitting gains nothing


def flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, block_table=None, causal=False,
                                 window=None, scale=None, num_splits=0, return_lse=False, softcap=None,
                                 alibi_slopes=None, sinks=None):
    """Attention of ``N_q`` new tokens over a KV cache (decode, speculative decoding, chunked prefill).

    FlashAttention's layouts and names: ``q`` ``(B, N_q, Hq, D)``; a contiguous cache ``k_cache``,
    ``v_cache`` ``(B, N_cache, Hkv, D)``, or a paged cache ``(num_pages, page_size, Hkv, D)`` with
    ``block_table`` int32 ``(B, max_pages)`` (key ``j`` of batch ``b`` is slot ``j % page_size`` of
    page ``block_table[b, j // page_size]``; ``page_size`` any power of two from 16 to 256);
    ``cache_seqlens`` int32 ``(B,)`` or an int: keys ``0 … cache_seqlens[b] − 1`` are attended and
    the rest of the cache is never read (NaN there does not matter). ``Hq % Hkv == 0`` (GQA/MQA:
    the query heads of one KV head share each K/V tile read). ``causal`` and ``window=(left,
    right)`` are bottom-right aligned to ``cache_seqlens[b]``: token ``i`` of ``N_q`` sits at
    position ``cache_seqlens[b] − N_q + i``. ``scale`` defaults to ``1/sqrt(D)``.

    ``num_splits``: the keys of each sequence are cut into that many splits run by separate
    programs (Flash-Decoding) whose normalised partial results are merged by ``merge_states``;
    ``1`` is the unsplit kernel, ``0`` picks ``default_num_splits`` (enough programs to fill
    the GPU's SMs when ``B x Hkv`` is small). The result depends on ``num_splits`` only by
    rounding.

    Returns ``out`` ``(B, N_q, Hq, D)`` in q's dtype (zeros for a token with no key), or
    ``(out, lse)`` with ``return_lse=True``, ``lse`` float32 ``(B, Hq, N_q)``, natural log.
    Inference only: raises if gradients are requested.

    Score modifications, as ``flash_attention``'s (FlashAttention's conventions): ``softcap``
    (float > 0) gives ``softcap·tanh(scale·q·k / softcap)``, after scaling and before masking;
    ``alibi_slopes`` (float32 ``(Hq,)`` or ``(B, Hq)``) adds ``−slope·|i + shift − j|`` with
    token ``i`` at position ``i + shift``, ``shift = cache_seqlens[b] − N_q`` (bottom-right:
    FlashAttention's bias); ``sinks`` (float32 ``(Hq,)``, natural log, not scaled) is one extra
    logit per head and row, ``lse = log(e^{sink} + Σ_j e^{s_j})``; a row with no key gives out 0
    and lse = sink. The sink is merged exactly once per row whatever ``num_splits``: in the
    unsplit kernel's epilogue, or after the splits' merge (claims ``sink_once``,
    ``sink_once_combine``).
    """
    return _kvcache(config.DEFAULT_PACKAGE, q, k_cache, v_cache, cache_seqlens, block_table=block_table,
                    causal=causal, window=window, scale=scale, num_splits=num_splits, return_lse=return_lse,
                    softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)


def _kvcache(package, q, k_cache, v_cache, cache_seqlens, *, block_table=None, causal=False, window=None,
             scale=None, num_splits=0, return_lse=False, softcap=None, alibi_slopes=None, sinks=None):
    checks.check_tensor(q, "q")
    if not isinstance(cache_seqlens, torch.Tensor):  # an int (numpy integers too): every sequence's length
        cache_seqlens = torch.full((q.shape[0],), checks._as_int(cache_seqlens, "cache_seqlens"), dtype=torch.int32,
                                   device=q.device)
    capacity, num_pages = checks.check_kvcache(q, k_cache, v_cache, cache_seqlens, block_table)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k_cache, v_cache, sinks)):
        raise RuntimeError("flash_attention_with_kvcache is inference only and has no backward: call it under "
                           "torch.no_grad() / torch.inference_mode() or detach q, k_cache, v_cache (and sinks); "
                           "for training use flash_attention (differentiable)")
    checks.check_device({"q": q, "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens,
                         "block_table": block_table})
    checks.check_bool(causal, "causal")
    checks.check_bool(return_lse, "return_lse")
    # the same checks as flash_attention's (q as (B, Hq, N_q, D): a view, no copy)
    softcap = checks.check_score_mods(q.transpose(1, 2), softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)
    scale = checks.check_scale(scale)
    num_splits = checks.check_num_splits(num_splits)
    B, Nq, Hq, D = q.shape
    page_size = k_cache.shape[1]
    checks.check_cache_values(cache_seqlens, block_table, capacity, page_size, num_pages)  # eager: one sync
    # the proven host rewrites of flash_attention: s <= 0 -> s' > 0 (scale_sign_rewrite); each window side
    # clamped to N_q + capacity, at least every sequence's N_q + cache_seqlens[b] (window_clamp)
    q, scale = checks.normalise_scale(q, scale)
    window = None if window is None else checks.normalise_window(checks.check_window(window), Nq, capacity)
    # lengths and page ids as the kernel reads them (clamped on the device under torch.compile), the
    # block table and the sinks at unit stride (copies of strided views)
    cache_seqlens, block_table = checks.cache_arguments(cache_seqlens, block_table, capacity, num_pages)
    out, lse = kvcache_op(q, k_cache, v_cache, cache_seqlens, block_table, causal, window,
                          checks.sm_scale_of(scale, D), num_splits, softcap, alibi_slopes,
                          contract.unit_stride("flash_attention_with_kvcache", "sinks", sinks), package)
    return (out, lse) if return_lse else out


api.IMPLEMENTATIONS["flash_attention_with_kvcache"] = _kvcache


@torch.library.custom_op("flashproof::flash_attention_with_kvcache", mutates_args=())
def kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
               block_table: Optional[torch.Tensor], causal: bool, window: Optional[list[int]], sm_scale: float,
               num_splits: int, softcap: Optional[float] = None, alibi_slopes: Optional[torch.Tensor] = None,
               sinks: Optional[torch.Tensor] = None,
               package: str = config.DEFAULT_PACKAGE) -> tuple[torch.Tensor, torch.Tensor]:
    """The launches on checked inputs (a custom op with a fake, so torch.compile traces through)."""
    B, Nq, Hq, D = q.shape
    block = config.block_for("decode", package)
    module = api.module_for("decode", block, package, q.device)
    if num_splits == 0:  # the heuristic, here in the op (torch.compile does not trace the package lookup)
        rows = Hq // k_cache.shape[2] * Nq  # the query rows of one KV head
        per_program = min(rows, block[0])  # at most B_r rows per program (the kernel's MAX_BLOCK_M)
        capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        num_splits = default_num_splits(B * k_cache.shape[2] * math.ceil(rows / per_program), capacity,
                                        _num_sms(q.device), per_program)
    if num_splits > 1:  # the fp32 partials (S, B, N_q, Hq, D): split s starts at s·B·N_q·Hq·D (int32)
        checks.check_index_width(o_partials=((num_splits, B * Nq * Hq * D), (B * Nq * Hq * D, 1)))
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device)
    args = dict(sm_scale=sm_scale, num_splits=num_splits, causal=causal,
                window=None if window is None else tuple(window), softcap=softcap, alibi_slopes=alibi_slopes)
    # the sink is merged exactly once per row: by the unsplit kernel's epilogue, or after the merge
    if num_splits == 1:  # the split's partial result is the output: written in place, no merge
        module.forward_splits(q, k_cache, v_cache, cache_seqlens, block_table, out[None],
                              lse.transpose(1, 2)[None], sinks=sinks, **args)
    else:  # fp32 partials (S, B, N_q, Hq, D), then merge_state's fold over the splits
        o_part = torch.empty((num_splits, B, Nq, Hq, D), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((num_splits, B, Nq, Hq), dtype=torch.float32, device=q.device)
        module.forward_splits(q, k_cache, v_cache, cache_seqlens, block_table, o_part, lse_part, **args)
        merge = api.module_for("merge", block, package, q.device)
        # rows ordered (B, N_q, Hq): row r's query head is r % Hq, its sink sinks[r % Hq]
        _, merged_lse = merge.merge_states_rows(o_part.view(num_splits, -1, D), lse_part.view(num_splits, -1),
                                                out=out.view(-1, D), sinks=sinks)
        lse.copy_(merged_lse.view(B, Nq, Hq).transpose(1, 2))
    return out, lse


@kvcache_op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, causal, window, sm_scale, num_splits, softcap=None,
      alibi_slopes=None, sinks=None, package=config.DEFAULT_PACKAGE):
    B, Nq, Hq, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((B, Hq, Nq), dtype=torch.float32)
