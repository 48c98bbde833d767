"""A thin shim that lets FlashAttention 2's own tests call flashproof: FlashAttention's function
names and arguments translated to flashproof's, nothing computed here.

It holds what the kvcache and paged-varlen tests of FlashAttention's ``tests/test_flash_attn.py``
import from ``flash_attn`` (``tests/test_flash_attn_upstream.py`` imports them from here instead):

* ``flash_attn_varlen_func``, ``flash_attn_with_kvcache``: argument
  translation only (``window_size=(-1, -1)`` -> ``window``, ``softmax_scale`` -> ``scale``,
  ``softcap=0.0`` -> ``None``, ``return_softmax_lse`` -> ``return_lse``, flashproof's errors raised
  as FlashAttention's ``RuntimeError``);
* ``flash_attn.bert_padding.pad_input`` / ``unpad_input`` and ``flash_attn.layers.rotary.
  apply_rotary_emb``: FlashAttention's own pure-PyTorch code (the reference side of its tests),
  copied below with attribution (FlashAttention is BSD-3-Clause, Copyright (c) 2022-2025 Tri Dao).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from einops import rearrange

from generated import flash_attention_varlen, flash_attention_with_kvcache
from generator.runtime import contract

#: a window side FlashAttention writes -1 ("infinite"): flashproof clamps any side to N_q + N_k
#: (claim window_clamp), so a large int says the same
_UNBOUNDED = 2 ** 30


def _window(window_size, causal):
    """FlashAttention's ``window_size=(left, right)``, -1 meaning no limit (ints or a 2-element
    tensor, as its tests pass), as flashproof's ``window``: None when neither side is limited."""
    left, right = (int(w) for w in window_size)
    if left < 0 and right < 0:
        return None
    return (_UNBOUNDED if left < 0 else left, _UNBOUNDED if right < 0 else right)


def _options(softmax_scale, causal, window_size, softcap, alibi_slopes):
    return dict(scale=softmax_scale, causal=causal, window=_window(window_size, causal),
                softcap=softcap if softcap else None, alibi_slopes=alibi_slopes)


def _as_runtime_error(call):
    """FlashAttention raises RuntimeError (TORCH_CHECK) on a bad argument; flashproof raises
    ValueError/TypeError naming the fix. Same message, FlashAttention's type. FlashAttention also
    refuses out-of-range values (a length past the block table's pages): flashproof clamps them on the
    device unless its opt-in value checks are on, so the shim turns them on (one host sync a call)."""
    try:
        with contract.checking_values():
            return call()
    except (ValueError, TypeError) as e:
        raise RuntimeError(str(e)) from e


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    if return_attn_probs:
        raise NotImplementedError("return_attn_probs (FlashAttention's debugging S matrix) is not in flashproof")
    # Paged K/V is forward only in both. FlashAttention takes inputs that require grad and builds a
    # graph whose backward it cannot run; flashproof refuses them. FlashAttention's tests never
    # differentiate a paged call, so the shim makes that call without a graph.
    grad = torch.no_grad() if block_table is not None else contextlib.nullcontext()
    with grad:
        return _as_runtime_error(lambda: flash_attention_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
            block_table=block_table, **_options(softmax_scale, causal, window_size, softcap, alibi_slopes)))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=1, return_softmax_lse=False):
    return _as_runtime_error(lambda: flash_attention_with_kvcache(
        q, k_cache, v_cache, cache_seqlens, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_interleaved=rotary_interleaved, cache_leftpad=cache_leftpad, cache_batch_idx=cache_batch_idx,
        block_table=block_table, num_splits=num_splits, return_lse=return_softmax_lse,
        **_options(softmax_scale, causal, window_size, softcap, alibi_slopes)))


# ---- FlashAttention's pure-PyTorch reference helpers, copied (flash_attn/bert_padding.py) ----------

def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """flash_attn.bert_padding.unpad_input (plain indexing for its custom gather autograd function:
    the same values and gradients)."""
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    return (
        rearrange(hidden_states, "b s ... -> (b s) ...")[indices],
        indices,
        cu_seqlens,
        max_seqlen_in_batch,
        used_seqlens_in_batch,
    )


def pad_input(hidden_states, indices, batch, seqlen):
    """flash_attn.bert_padding.pad_input (index_put_first_axis written as an out-of-place index_put)."""
    output = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    output = output.index_put((indices,), hidden_states)
    return rearrange(output, "(b s) ... -> b s ...", b=batch)


# ---- flash_attn/layers/rotary.py's apply_rotary_emb, in PyTorch ---------------------------------

def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """flash_attn.layers.rotary.apply_rotary_emb (its Triton kernel ``rotary_kernel`` written in
    PyTorch): ``x (B, N, H, D)``, ``cos``/``sin`` ``(seqlen_ro, rotary_dim / 2)``; token ``t`` of batch
    ``b`` is rotated by row ``seqlen_offsets[b] + t`` (an int or a ``(B,)`` tensor), in fp32, and
    stored in x's dtype; rows past ``seqlen_ro`` rotate by 0 (cos 1, sin 0); lanes past
    ``rotary_dim`` are kept."""
    assert cu_seqlens is None and not inplace, "the shim's apply_rotary_emb has the tests' form only"
    B, N, H, D = x.shape
    half = cos.shape[-1]
    rows = torch.arange(N, device=x.device).unsqueeze(0) + torch.as_tensor(seqlen_offsets, device=x.device).reshape(
        -1, 1).long()  # (B or 1, N)
    inside = (rows < cos.shape[0]).unsqueeze(-1)
    safe = rows.clamp(max=cos.shape[0] - 1)
    c = torch.where(inside, cos[safe].float(), 1.0).unsqueeze(2)  # (B, N, 1, half)
    s = torch.where(inside, sin[safe].float(), 0.0).unsqueeze(2)
    xr = x[..., :2 * half].float()
    if interleaved:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        o = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    else:
        x0, x1 = xr[..., :half], xr[..., half:]
        o = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return torch.cat((o.to(x.dtype), x[..., 2 * half:]), dim=-1)
