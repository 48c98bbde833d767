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
from typing import NamedTuple, Optional

import torch

from generator.runtime import api, checks, config, contract, dispatch, launch, plans
from generator.runtime.config import DECODE_BLOCK  # noqa: F401  (the block whose decode kernel serves this op)
from spec import launch as spec_launch
from spec import paged as spec_paged
from spec import rotary as spec_rotary

MAX_SPLITS = 16
#: keys a split streams at least, and at least this many per query row of its program: a split
#: writes one fp32 partial (o, lse) per row and the merge reads it back, ~8 (D + 1) bytes a row
#: against ~4 D bytes of K and V (fp16) per key, so 128 keys a row keep partials under ~2 %
MIN_KEYS_PER_SPLIT = 256
KEYS_PER_ROW = 128
#: ``batch_invariant=True``: every split holds this many keys (a multiple of the key tile B_c), so a
#: row's split plan depends on its own length only (claim batch_invariant_splits); 512 keys keep a
#: split's fp32 partial (~8 (D + 1) bytes a query row) under ~2 % of its K/V bytes (~2·512·D·2)
#: for up to 8 query rows per KV head
BATCH_INVARIANT_SPLIT_KEYS = 512


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


def flash_attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, k=None, v=None, rotary_cos=None,
                                 rotary_sin=None, rotary_interleaved=True, cache_leftpad=None, cache_batch_idx=None,
                                 block_table=None, causal=False, window=None, scale=None, num_splits=0,
                                 return_lse=False, softcap=None, alibi_slopes=None, sinks=None,
                                 batch_invariant=False, score_mod=None, score_args=None, q_descale=None,
                                 k_descale=None, v_descale=None, out_dtype=None):
    """Attention of ``N_q`` new tokens over a KV cache (decode, speculative decoding, chunked prefill).

    FlashAttention's layouts and names: ``q`` ``(B, N_q, Hq, D)``; a contiguous cache ``k_cache``,
    ``v_cache`` ``(B, N_cache, Hkv, D)``, or a paged cache ``(num_pages, page_size, Hkv, D)`` with
    ``block_table`` int32 ``(B, max_pages)`` (key ``j`` of batch ``b`` is slot ``j % page_size`` of
    page ``block_table[b, j // page_size]``; ``page_size`` any power of two from 16 to 512);
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

    MLA (DeepSeek's absorbed decode): ``v_cache`` may have its own head dim ``D_v`` (``D <= 576``,
    ``D_v <= 512``), and may be a view of ``k_cache``'s storage, ``v_cache = k_cache[..., :D_v]``: it is
    read through its strides, never copied.

    Returns ``out`` ``(B, N_q, Hq, D_v)`` in q's dtype (zeros for a token with no key), or
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

    Appending (FlashAttention's ``flash_attn_with_kvcache``): ``k``, ``v`` ``(B, N_new, Hkv, D)``
    are written **in place** into the cache at keys ``cache_seqlens[b] … cache_seqlens[b] + N_new −
    1`` (contiguous or paged), then attended: the attention runs over ``cache_seqlens[b] + N_new``
    keys (``cache_seqlens`` itself is not updated). ``rotary_cos``, ``rotary_sin``
    ``(seqlen_ro >= capacity, rotary_dim / 2)`` rotate the new keys at positions
    ``cache_seqlens[b] + t`` before they are written, and q at the same positions when ``causal`` or
    ``window`` is given, else every token of q at ``cache_seqlens[b]``; ``rotary_interleaved=True``
    pairs lanes ``(2f, 2f + 1)`` (GPT-J), ``False`` lanes ``(f, f + rotary_dim/2)`` (GPT-NeoX);
    lanes past ``rotary_dim`` are kept, and a row past ``seqlen_ro`` (a causal q longer than the append,
    near the capacity) rotates by 0, FlashAttention's ``apply_rotary_emb`` rule (spec.rotary, claim
    ``rotary_rotation``). ``cache_leftpad``
    int32 ``(B,)``: row ``b``'s keys start at ``cache_leftpad[b]`` (keys before it are never read;
    ``cache_seqlens`` still counts from index 0, and so do the rotary positions, as in
    FlashAttention). ``cache_batch_idx`` int32 ``(B,)``: batch ``b`` uses cache row
    ``cache_batch_idx[b]`` of a contiguous cache with any number of rows. Neither with a paged cache.

    ``batch_invariant=True``: the keys are split in fixed-size splits of
    ``BATCH_INVARIANT_SPLIT_KEYS`` keys from ``cache_leftpad[b]`` and merged in order, so each row's
    reduction order is a function of its own lengths only and a request's output is bitwise the
    same whatever else is in the batch (claim ``batch_invariant_splits``); ``num_splits`` must be 0.

    ``score_mod`` with ``score_args``: as ``flash_attention``'s (your own ``@score_mod``, its decode
    kernel emitted with ``python -m generator --score-mod module:name``), with ``b`` the batch entry,
    ``h`` the query head, ``i`` the new token (``0 … N_q − 1``), ``j`` the cache key and ``shift =
    cache_seqlens[b] − N_q`` (after an append: its new length); inference only, like the rest.

    An FP8 cache (FlashAttention 3's, docs/fp8.md): ``k_cache``, ``v_cache`` in ``torch.float8_e4m3fn`` (or
    ``float8_e5m2``) with ``k_descale``, ``v_descale`` float32 ``(B, Hkv)`` (each None: 1), contiguous or paged,
    split or not: attention on ``k_cache·k_descale``, ``v_cache·v_descale`` (claim ``fp8_descale``, per split;
    the merge is linear in the partials). ``q`` in the cache's format with ``q_descale`` (both products in
    fp8, out bf16) or fp16/bf16 (K and V upcast exactly, out in q's dtype); ``out_dtype`` bf16/fp16/fp32 to
    choose. New ``k``, ``v`` are copied into the FP8 cache as they are (FlashAttention 3's rule): quantise
    them with the cache's descales first; rotary, the score modifications and a score_mod are refused
    with an FP8 cache.
    """
    # by position, in _kvcache's order (21 keywords passed on cost more than the rest of a cached call's Python)
    return _kvcache(config.DEFAULT_PACKAGE, q, k_cache, v_cache, cache_seqlens, k, v, rotary_cos, rotary_sin,
                    rotary_interleaved, cache_leftpad, cache_batch_idx, block_table, causal, window, scale, num_splits,
                    return_lse, softcap, alibi_slopes, sinks, batch_invariant, score_mod, score_args, q_descale,
                    k_descale, v_descale, out_dtype)


class _Checked(NamedTuple):
    """What ``flash_attention_with_kvcache``'s checks derive from a call's metadata (no values)."""
    capacity: int
    num_pages: int
    n_new: int
    softcap: Optional[float]
    scale: Optional[float]
    num_splits: int
    window: Optional[list]
    split_keys: int


#: per call signature (``_signature``): the ``_Checked`` of a call that passed every check, and its launch
#: plan (``_Launch``) once an eager call has run the op's body directly (``generator.runtime.plans``)
_PLANS = plans.PlanCache()


def _signature(package, q, k_cache, v_cache, cache_seqlens, block_table, causal, window, scale, num_splits,
               return_lse, softcap, alibi_slopes, sinks, batch_invariant, rotary_interleaved):
    """The key of a call whose checks read nothing but these (no append, no rotary, no leftpad or
    batch index: their checks read values), or None (not cached: the full path every call)."""
    options = plans.options_key(causal, window, scale, num_splits, return_lse, softcap, batch_invariant,
                                rotary_interleaved)
    if options is None:
        return None
    try:
        return (package, plans.tensor_key(q), plans.tensor_key(k_cache), plans.tensor_key(v_cache),
                plans.tensor_key(cache_seqlens), plans.tensor_key(block_table), plans.tensor_key(alibi_slopes),
                plans.tensor_key(sinks), torch.is_grad_enabled(), launch.interpreting(), options)
    except AttributeError:  # an argument that is no tensor: the full path names it
        return None


def _arguments(q, k_cache, v_cache, cache_seqlens, k, v, rotary_cos, rotary_sin, rotary_interleaved, cache_leftpad,
               cache_batch_idx, block_table, causal, window, scale, num_splits, return_lse, softcap, alibi_slopes,
               sinks, batch_invariant, score_mod=None, score_args=None, q_descale=None, k_descale=None, v_descale=None,
               out_dtype=None) -> dict:
    return {"q": q, "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens, "k": k, "v": v,
            "rotary_cos": rotary_cos, "rotary_sin": rotary_sin, "rotary_interleaved": rotary_interleaved,
            "cache_leftpad": cache_leftpad, "cache_batch_idx": cache_batch_idx, "block_table": block_table,
            "causal": causal, "window": window, "scale": scale, "num_splits": num_splits, "return_lse": return_lse,
            "softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks, "batch_invariant": batch_invariant,
            "score_mod": score_mod, "score_args": score_args, "q_descale": q_descale, "k_descale": k_descale,
            "v_descale": v_descale, "out_dtype": out_dtype}


def _check(arguments: dict):
    """Every rule of the declared contract but the value rules (``generator.runtime.contract``);
    returns ``(_Checked, cache_leftpad, cache_batch_idx)`` (those two as contiguous int32)."""
    a = contract.enforce("flash_attention_with_kvcache", arguments, values=False)
    q, k_cache, block_table = a["q"], a["k_cache"], a["block_table"]
    capacity = spec_launch.decode_capacity(k_cache, block_table)  # claim window_clamp
    num_pages = k_cache.shape[0] if block_table is not None else 0
    n_new = 0 if a["k"] is None else a["k"].shape[1]
    # each window side clamped to N_q + capacity, at least every sequence's N_q + cache_seqlens[b] (window_clamp)
    # (the clamp at this call site is spec.launch.decode_window, the one claim window_clamp evaluates)
    window = checks.normalise_window(a["window"], spec_launch.decode_window, q, k_cache, block_table)
    num_splits, split_keys = a["num_splits"], 0
    if a["batch_invariant"]:  # the grid covers the capacity; a row's splits past its keys are empty
        split_keys = BATCH_INVARIANT_SPLIT_KEYS
        num_splits = spec_paged.batch_invariant_num_splits(capacity, split_keys)  # claim batch_invariant_splits
    rows = [contract.unit_stride("flash_attention_with_kvcache", name, a[name]) for name in
            ("cache_leftpad", "cache_batch_idx")]
    return (_Checked(capacity, num_pages, n_new, a["softcap"], a["scale"], num_splits, window, split_keys),
            *[None if t is None else t.to(torch.int32) for t in rows], a.get("packed_score_args", (None, None)), a)


def _kvcache(package, q, k_cache, v_cache, cache_seqlens, k=None, v=None, rotary_cos=None, rotary_sin=None,
             rotary_interleaved=True, cache_leftpad=None, cache_batch_idx=None, block_table=None, causal=False,
             window=None, scale=None, num_splits=0, return_lse=False, softcap=None, alibi_slopes=None, sinks=None,
             batch_invariant=False, score_mod=None, score_args=None, q_descale=None, k_descale=None, v_descale=None,
             out_dtype=None):
    checks.check_tensor(q, "q")
    # an FP8 cache (issue 30): checked every call and planned per call (its descales ride the plan)
    fp8 = checks.fp8_mode(k_cache, (q_descale, k_descale, v_descale)) or out_dtype is not None
    if not isinstance(cache_seqlens, torch.Tensor):  # an int (numpy integers too): every sequence's length
        cache_seqlens = torch.full((q.shape[0],), checks._as_int(cache_seqlens, "cache_seqlens"), dtype=torch.int32,
                                   device=q.device)
    # the checks of shapes, dtypes, strides, devices and options: once per call signature (plans)
    key = None
    if k is None and v is None and rotary_cos is None and rotary_sin is None and cache_leftpad is None \
            and cache_batch_idx is None and score_mod is None and score_args is None and not fp8 \
            and not torch.compiler.is_compiling():
        key = _signature(package, q, k_cache, v_cache, cache_seqlens, block_table, causal, window, scale, num_splits,
                         return_lse, softcap, alibi_slopes, sinks, batch_invariant, rotary_interleaved)
    entry = _PLANS.get(key) if key is not None else None
    arguments = _arguments(q, k_cache, v_cache, cache_seqlens, k, v, rotary_cos, rotary_sin, rotary_interleaved,
                           cache_leftpad, cache_batch_idx, block_table, causal, window, scale, num_splits, return_lse,
                           softcap, alibi_slopes, sinks, batch_invariant, score_mod, score_args, q_descale, k_descale,
                           v_descale, out_dtype)
    score_f = score_i = None
    if entry is None:
        checked, arguments["cache_leftpad"], arguments["cache_batch_idx"], (score_f, score_i), a = _check(arguments)
        # the plan: what the checks derived, the launch plan (once run directly), the value rules that apply,
        # and whether the tensors may skip the custom op (plans.plain: their types and gradients, in the key)
        entry = _PLANS.record(key, [checked, None, contract.value_rules("flash_attention_with_kvcache", arguments),
                                    plans.plain(q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes,
                                                sinks)])
    checked, n_new = entry[0], entry[0].n_new
    # the declared value rules, every call (values can change in place): each value clamped into its
    # range on the device, no host sync (the named errors: contract.checking_values, one sync)
    contract.keep_values("flash_attention_with_kvcache", arguments, entry[2])
    cache_seqlens, block_table = arguments["cache_seqlens"], arguments["block_table"]
    cache_leftpad, cache_batch_idx = arguments["cache_leftpad"], arguments["cache_batch_idx"]
    # the proven host rewrite of flash_attention: s <= 0 -> s' > 0 (scale_sign_rewrite)
    q, scale = checks.normalise_scale(q, checked.scale)
    # lengths and page ids as the kernel reads them (contiguous int32), the block table and the sinks at
    # unit stride (copies of strided views)
    cache_seqlens, block_table = checks.cache_arguments(cache_seqlens, block_table)
    sinks = contract.unit_stride("flash_attention_with_kvcache", "sinks", sinks)
    if k is not None:
        # the append's launch line (spec.rotary.kvcache_rotary, claim rotary_rotation): k (rotated) and v written
        # in place at keys cache_seqlens[b] + t, q rotated at the same rows (causal / windowed) or all at
        # cache_seqlens[b]; then cache_seqlens + N_new keys attended
        ro = spec_rotary.kvcache_rotary(cache_seqlens, n_new, causal, checked.window, rotary_cos, rotary_sin,
                                        rotary_interleaved)
        kvcache_append_op(k_cache, v_cache, k, v, ro.key_start, block_table, cache_batch_idx, ro.cos, ro.sin,
                          ro.interleaved, bool(ro.key_per_token), package)
        if rotary_cos is not None:
            q = rotary_q_op(q, ro.query_start, ro.cos, ro.sin, ro.interleaved, bool(ro.query_per_token), package)
        cache_seqlens = ro.key_lengths
    if fp8:
        out, lse = _kvcache_fp8(package, q, k_cache, v_cache, cache_seqlens, block_table, causal, checked, scale,
                                cache_leftpad, cache_batch_idx, a)
    elif key is not None and entry[3] and plans.dispatcher_idle():
        # eager, nothing for the dispatcher to do: the op's body itself, with the launch plan of this signature
        if entry[1] is None:
            entry[1] = _plan(q, k_cache, v_cache, cache_seqlens, block_table, *_options(causal, checked, scale, q),
                             alibi_slopes, sinks, package, None, None, checked.split_keys)
        out, lse = _run(entry[1], q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, sinks, None, None)
    else:
        options = _options(causal, checked, scale, q)
        out, lse = kvcache_op(q, k_cache, v_cache, cache_seqlens, block_table, *options, alibi_slopes, sinks,
                              package, cache_leftpad, cache_batch_idx, checked.split_keys,
                              None if score_mod is None else score_mod.name, score_f, score_i)
    return (out, lse) if return_lse else out


def _kvcache_fp8(package, q, k_cache, v_cache, cache_seqlens, block_table, causal, checked, scale, cache_leftpad,
                 cache_batch_idx, a):
    """``(out, lse)`` of an FP8 cache (issue 30) on checked inputs (``a``: ``contract.enforce``'s values; its
    rules refuse a gradient, rotary, the score modifications, a score_mod, a scale <= 0 and new k, v not in the
    cache's format): the splits and their merge as every decode, each split's kernel with the descales
    (claim ``fp8_descale``), out in ``api.fp8_out_dtype``. Planned per call (the descales ride the plan) and
    run eagerly under torch.compile (``_fp8_run``: no custom op)."""
    descales = api.fp8_descales("flash_attention_with_kvcache", a, q.shape[0], k_cache.shape[2], q.device)
    out_dtype = api.fp8_out_dtype(q, a["out_dtype"])
    return _fp8_run(q, k_cache, v_cache, cache_seqlens, block_table, _options(causal, checked, scale, q), package,
                    cache_leftpad, cache_batch_idx, checked.split_keys, descales, out_dtype)


@torch.compiler.disable
def _fp8_run(q, k_cache, v_cache, cache_seqlens, block_table, options, package, cache_leftpad, cache_batch_idx,
             split_keys, descales, out_dtype):
    plan = _plan(q, k_cache, v_cache, cache_seqlens, block_table, *options, None, None, package, cache_leftpad,
                 cache_batch_idx, split_keys, descales=descales, out_dtype=out_dtype)
    return _run(plan, q, k_cache, v_cache, cache_seqlens, block_table, None, None, cache_leftpad, cache_batch_idx,
                out_dtype=out_dtype)


def _options(causal, checked: _Checked, scale, q) -> tuple:
    """``kvcache_op``'s options after its tensors: causal, the window, the kernel's scale, splits, softcap."""
    return causal, checked.window, checks.sm_scale_of(scale, q.shape[3]), checked.num_splits, checked.softcap


@torch.library.custom_op("flashproof::kvcache_append", mutates_args=("k_cache", "v_cache"))
def kvcache_append_op(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      cache_seqlens: torch.Tensor, block_table: Optional[torch.Tensor],
                      cache_batch_idx: Optional[torch.Tensor], rotary_cos: Optional[torch.Tensor],
                      rotary_sin: Optional[torch.Tensor], rotary_interleaved: bool, per_token: bool,
                      package: str = config.DEFAULT_PACKAGE) -> None:
    """Write ``k`` (rotated when ``rotary_cos`` is given, at table rows ``cache_seqlens[b] + t`` when
    ``per_token``) and ``v`` into the cache in place, at keys ``cache_seqlens[b] + t`` (declared to torch.library
    as mutating both caches, so torch.compile orders it before the attention that reads them)."""
    module = api.module_for("decode", config.block_for("decode", package), package, k.device)
    # which tensors are rotated: spec.rotary.kvcache_appends (k with the tables, v as it is; claim rotary_rotation)
    for append in spec_rotary.kvcache_appends(k, v, k_cache, v_cache, rotary_cos, rotary_sin, rotary_interleaved,
                                              per_token):
        module.append_rows(append.new, append.cache, cache_seqlens, block_table=block_table,
                           cache_batch_idx=cache_batch_idx, **append.rotary)


@kvcache_append_op.register_fake
def _(k_cache, v_cache, k, v, cache_seqlens, block_table, cache_batch_idx, rotary_cos, rotary_sin,
      rotary_interleaved, per_token, package=config.DEFAULT_PACKAGE):
    return None


@torch.library.custom_op("flashproof::rotary_q", mutates_args=())
def rotary_q_op(q: torch.Tensor, cache_seqlens: torch.Tensor, rotary_cos: torch.Tensor, rotary_sin: torch.Tensor,
                rotary_interleaved: bool, per_token: bool, package: str = config.DEFAULT_PACKAGE) -> torch.Tensor:
    """q rotated at ``cache_seqlens[b] + t`` (``per_token``) or ``cache_seqlens[b]``, in q's dtype."""
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    api.module_for("decode", config.block_for("decode", package), package, q.device).append_rows(
        q, out, cache_seqlens, to_cache=False, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        interleaved=rotary_interleaved, per_token=per_token)
    return out


@rotary_q_op.register_fake
def _(q, cache_seqlens, rotary_cos, rotary_sin, rotary_interleaved, per_token, package=config.DEFAULT_PACKAGE):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


api.IMPLEMENTATIONS["flash_attention_with_kvcache"] = _kvcache


class _Launch(NamedTuple):
    """A decode call's launch plan: a function of its tensors' metadata and options only."""
    module: object  # the generated decode module
    merge: object  # the generated merge module (None: one split, no merge)
    num_splits: int
    splits: tuple  # the decode module's splits_plan
    lse_shape: tuple  # (B, Hq, N_q)
    merging: tuple = ()  # the merge module's merge_states_plan (with splits)
    lse_merged_in_place: bool = False  # the merge's (R,) lse is the output's layout (N_q = 1): no copy


def _plan(q, k_cache, v_cache, cache_seqlens, block_table, causal, window, sm_scale, num_splits, softcap, alibi_slopes, sinks, package,
          cache_leftpad, cache_batch_idx, split_keys, score_mod=None, descales=None, out_dtype=None) -> _Launch:
    """The launch plan of ``kvcache_op``'s body for these tensors (their metadata) and options:
    the modules (``score_mod``: the decode module with that user score_mod compiled in), the number of
    splits (the heuristic for 0) and the decode module's ``splits_plan``; ``descales`` (an FP8 cache's, held
    by the plan: never kept) and ``out_dtype`` (None: q's)."""
    out_dtype = out_dtype or q.dtype
    B, Nq, Hq, D = q.shape
    block = config.block_for("decode", package)
    module = dispatch.module_of("decode", block, package, q.device, None, score_mod)
    if num_splits == 0:  # the heuristic, here in the op (torch.compile does not trace the package lookup)
        rows = Hq // k_cache.shape[2] * Nq  # the query rows of one KV head
        per_program = min(rows, block[0])  # at most B_r rows per program (the kernel's MAX_BLOCK_M)
        capacity = spec_launch.decode_capacity(k_cache, block_table)
        num_splits = default_num_splits(B * k_cache.shape[2] * math.ceil(rows / per_program), capacity,
                                        _num_sms(q.device), per_program)
    Dv = v_cache.shape[3]  # v's head dim (MLA: D_v != D; v_cache may be a view of k_cache): out's
    # the fp32 partials (S, B, N_q, Hq, D_v): split s starts at s·B·N_q·Hq·D_v, an int64 product in the kernels
    # (claims decode_addresses, rows_addresses); the bound stays: the merge's row index r < B·N_q·Hq is int32
    if num_splits > 1:
        checks.check_index_width(o_partials=((num_splits, B * Nq * Hq * Dv), (B * Nq * Hq * Dv, 1)))
    # the sink is merged exactly once per row: by the unsplit kernel's epilogue, or after the merge;
    # batch_invariant (split_keys > 0) always merges, so a row's path does not depend on the grid
    merged = not (num_splits == 1 and split_keys == 0)
    # the layouts the kernel writes: out and lse's (B, N_q, Hq) view in place for one split, else the fp32
    # partials (S, B, N_q, Hq[, D]); only their strides enter the plan (meta tensors: no memory)
    if merged:
        o_part = torch.empty((num_splits, B, Nq, Hq, Dv), dtype=torch.float32, device="meta")
        lse_part = torch.empty((num_splits, B, Nq, Hq), dtype=torch.float32, device="meta")
    else:
        # out and lse as _run allocates them, seen as decode_launch's (1, B, N_q, Hq[, D_v]) (claim decode_addresses)
        o_part, lse_part = spec_launch.decode_unsplit_outputs(
            torch.empty((B, Nq, Hq, Dv), dtype=out_dtype, device="meta"),
            torch.empty((B, Hq, Nq), dtype=torch.float32, device="meta"))
    splits = module.splits_plan(q, k_cache, v_cache, cache_seqlens, block_table, o_part, lse_part, sm_scale=sm_scale,
                                num_splits=num_splits, causal=causal, window=None if window is None else tuple(window),
                                softcap=softcap, alibi_slopes=alibi_slopes, sinks=None if merged else sinks,
                                cache_leftpad=cache_leftpad, cache_batch_idx=cache_batch_idx, split_keys=split_keys,
                                descales=descales)
    if not merged:
        return _Launch(module, None, num_splits, splits, (B, Hq, Nq))
    # the merge of the splits' rows into out: spec.launch's views (claim decode_addresses)
    merge = api.module_for("merge", block, package, q.device)
    o_rows, lse_rows = spec_launch.decode_partial_rows(o_part, lse_part)
    merging = merge.merge_states_plan(o_rows, lse_rows, spec_launch.decode_merged_out(
        torch.empty((B, Nq, Hq, Dv), dtype=out_dtype, device="meta")), sinks)
    # the merged lse (R,) seen as the output's (B, Hq, N_q): where it is that layout (N_q = 1, every
    # dim of size > 1 at the contiguous stride), the merge writes the output's lse itself
    as_output = spec_launch.decode_merged_lse(torch.empty(lse_rows.shape[1:], device="meta"), B, Nq, Hq)
    contiguous = torch.empty((B, Hq, Nq), device="meta").stride()
    in_place = all(a == b for size, a, b in zip(as_output.shape, as_output.stride(), contiguous) if size > 1)
    return _Launch(module, merge, num_splits, splits, (B, Hq, Nq), merging, in_place)


def _run(plan: _Launch, q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, sinks, cache_leftpad,
         cache_batch_idx, score_f=None, score_i=None, out_dtype=None):
    """``(out, lse)``: the launches of ``plan`` on these tensors (of the plan's metadata); ``score_f``,
    ``score_i``: a user score_mod's packed parameters (its module's launch takes them); ``out_dtype``: the
    plan's (None: q's)."""
    scored = dispatch.score_mod_arguments(score_f, score_i)
    # contiguous, v's head dim D_v
    out = q.new_empty((*q.shape[:3], v_cache.shape[3]), dtype=out_dtype or q.dtype)
    lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=q.device)
    if plan.merge is None:  # one split: the kernel writes out and lse in place (the plan holds their views)
        plan.module.launch_splits(plan.splits, q, k_cache, v_cache, cache_seqlens, block_table, out, lse,
                                  alibi_slopes=alibi_slopes, sinks=sinks, cache_leftpad=cache_leftpad,
                                  cache_batch_idx=cache_batch_idx, **scored)
        return out, lse
    # fp32 partials (S, B, N_q, Hq, D), then merge_state's fold over the splits
    B, Hq, Nq = plan.lse_shape
    o_part = torch.empty((plan.num_splits, B, Nq, Hq, v_cache.shape[3]), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((plan.num_splits, B, Nq, Hq), dtype=torch.float32, device=q.device)
    plan.module.launch_splits(plan.splits, q, k_cache, v_cache, cache_seqlens, block_table, o_part, lse_part,
                              alibi_slopes=alibi_slopes, cache_leftpad=cache_leftpad, cache_batch_idx=cache_batch_idx,
                              **scored)
    # rows ordered (B, N_q, Hq): row r's query head is r % Hq, its sink sinks[r % Hq]; the plan holds the
    # strides of spec.launch's row views of o_part, lse_part and out (claim decode_addresses)
    if plan.lse_merged_in_place:
        plan.merge.launch_merge_states(plan.merging, o_part, lse_part, out, lse, sinks)
        return out, lse
    merged_lse = torch.empty((B * Nq * Hq,), dtype=torch.float32, device=q.device)
    plan.merge.launch_merge_states(plan.merging, o_part, lse_part, out, merged_lse, sinks)
    lse.copy_(spec_launch.decode_merged_lse(merged_lse, B, Nq, Hq))
    return out, lse


#: ``kvcache_op``'s launch plans per signature of its inputs (the calls through the op: torch.compile's
#: graphs, dispatch modes, tensor subclasses)
_LAUNCHES = plans.PlanCache()


@torch.library.custom_op("flashproof::flash_attention_with_kvcache", mutates_args=())
def kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
               block_table: Optional[torch.Tensor], causal: bool, window: Optional[list[int]], sm_scale: float,
               num_splits: int, softcap: Optional[float] = None, alibi_slopes: Optional[torch.Tensor] = None,
               sinks: Optional[torch.Tensor] = None,
               package: str = config.DEFAULT_PACKAGE, cache_leftpad: Optional[torch.Tensor] = None,
               cache_batch_idx: Optional[torch.Tensor] = None, split_keys: int = 0, score_mod: Optional[str] = None,
               score_f: Optional[torch.Tensor] = None, score_i: Optional[torch.Tensor] = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The launches on checked inputs (a custom op with a fake, so torch.compile traces through), planned
    once per signature of its inputs (``_LAUNCHES``)."""
    key = plans.signature((q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, sinks, cache_leftpad,
                           cache_batch_idx), (causal, None if window is None else tuple(window), sm_scale,
                                              num_splits, softcap, package, split_keys, score_mod))
    plan = _LAUNCHES.get(key) if key is not None else None
    if plan is None:
        plan = _LAUNCHES.record(key, _plan(q, k_cache, v_cache, cache_seqlens, block_table, causal, window, sm_scale,
                                           num_splits, softcap, alibi_slopes, sinks, package, cache_leftpad,
                                           cache_batch_idx, split_keys, score_mod))
    return _run(plan, q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, sinks, cache_leftpad,
                cache_batch_idx, score_f, score_i)


@kvcache_op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, causal, window, sm_scale, num_splits, softcap=None,
      alibi_slopes=None, sinks=None, package=config.DEFAULT_PACKAGE, cache_leftpad=None, cache_batch_idx=None,
      split_keys=0, score_mod=None, score_f=None, score_i=None):
    B, Nq, Hq, _ = q.shape
    return q.new_empty((B, Nq, Hq, v_cache.shape[3])), q.new_empty((B, Hq, Nq), dtype=torch.float32)
