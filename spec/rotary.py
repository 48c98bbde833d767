"""Rotary position embedding (RoPE): the rotation a KV-cache append applies to new keys and queries.

FlashAttention's ``flash_attn_with_kvcache(..., rotary_cos, rotary_sin, rotary_interleaved)``:
``rotary_cos``, ``rotary_sin`` are ``(seqlen_ro, rotary_dim / 2)`` tables; a vector ``x`` of head
dim ``D`` at position ``pos`` has its first ``rotary_dim`` lanes rotated pairwise, pair ``f`` by
the angle whose cosine and sine are ``cos[pos, f]``, ``sin[pos, f]``, and its other lanes kept:

* GPT-J (``interleaved=True``): the pairs are lanes ``(2f, 2f + 1)``;
* GPT-NeoX (``interleaved=False``): the pairs are lanes ``(f, f + rotary_dim / 2)``.

A pair ``(x_a, x_b)`` becomes ``(x_a·cos − x_b·sin, x_b·cos + x_a·sin)``: ``R(θ) (x_a, x_b)ᵀ``.

The kernel works lane by lane (one lane of a ``(tokens, D)`` tile each): lane ``d`` loads itself
``x`` and its partner ``x_pair`` (lane ``offs_pair``), the table entries of its pair
(column ``offs_freq``), and prints ``ROTATE``: ``x·cos + ro_sign·x_pair·sin``, ``ro_sign = −1`` on the
pair's first lane and ``+1`` on its second. The index terms below are the two layouts' pairings;
claim ``rotary_rotation`` (``spec.proofs.rotary``) proves that they pair the lanes the reference
(``spec.reference.rotary``) pairs, that ``ROTATE`` is then ``R(θ)`` on every pair, and that the
score ``⟨R_m q, R_n k⟩`` depends on ``m − n`` only.

``ROTARY_POSITION``: the table row of new token ``t`` (FlashAttention's docstring and its
``test_flash_attn_kvcache``): ``cache_seqlens[b] + t`` for keys, and for queries when causal or
windowed; ``cache_seqlens[b]`` for every query otherwise. ``cache_seqlens`` counts from the
row's index 0, so with ``cache_leftpad`` the table is still indexed by the cache index (FA2's
kernel adds ``leftpad_k`` back to its shifted position). ``kvcache_rotary`` is the launch line the runtime
calls (each launch's start and PER_TOKEN, the tables, the layout), ``kvcache_appends`` which of the append's
tensors it rotates (k, not v); ``kvcache_rotary_row`` the reference's rule
it is proved against. A row past the table is not read and rotates by 0 (cos 1, sin 0: FlashAttention's
apply_rotary rule; the load mask ``spec.addresses.APPEND_ROW_OK``).
"""

from __future__ import annotations

from typing import NamedTuple

import sympy as sp

from spec.terms import Term

CLAIM = "rotary_rotation"

d = sp.Symbol("offs_d", integer=True, nonnegative=True)  # the lane (head-dim index) of an element
rotary_half = sp.Symbol("ROTARY_HALF", integer=True, positive=True)  # rotary_dim / 2: pairs per vector
ro_freq = sp.Symbol("offs_freq", integer=True, nonnegative=True)  # the pair of lane d: its table column
ro_pair = sp.Symbol("offs_pair", integer=True, nonnegative=True)  # the other lane of that pair
ro_odd = sp.Symbol("ro_odd", integer=True, nonnegative=True)  # GPT-J: 1 on a pair's second lane
ro_second = sp.Symbol("ro_second", integer=True, nonnegative=True)  # GPT-NeoX: 1 on the second half
ro_sign = sp.Symbol("ro_sign", integer=True)  # −1 on a pair's first lane, +1 on its second
x, x_pair, cos, sin = sp.symbols("x x_pair cos sin", real=True)  # lane d, its partner, the table entries
x_ro = sp.Symbol("x_ro", real=True)  # the rotated lane

#: GPT-J: lanes (2f, 2f + 1) form pair f
INTERLEAVED = (
    Term(ro_freq, sp.floor(d / 2), CLAIM, "GPT-J: lanes 2f and 2f + 1 form pair f"),
    Term(ro_odd, d - 2 * ro_freq, CLAIM, "1 on the pair's second lane, 0 on its first"),
    Term(ro_pair, d + 1 - 2 * ro_odd, CLAIM, "the other lane of the pair: 2f <-> 2f + 1"),
    Term(ro_sign, 2 * ro_odd - 1, CLAIM, "−sin on the first lane, +sin on the second"),
)

#: GPT-NeoX: lanes (f, f + rotary_dim / 2) form pair f
HALVES = (
    Term(ro_second, sp.floor(d / rotary_half), CLAIM, "GPT-NeoX: 0 in the first half, 1 in the second"),
    Term(ro_freq, d - rotary_half * ro_second, CLAIM, "lanes f and f + rotary_dim/2 form pair f"),
    Term(ro_pair, d + rotary_half - 2 * rotary_half * ro_second, CLAIM, "the other lane of the pair: f <-> f + half"),
    Term(ro_sign, 2 * ro_second - 1, CLAIM, "−sin on the first lane, +sin on the second"),
)

#: the rotated lane: lanes past rotary_dim are kept (exactly: the select, not a multiply by 1)
ROTATE = (
    Term(x_ro, sp.Piecewise((x * cos + ro_sign * x_pair * sin, sp.StrictLessThan(d, 2 * rotary_half)), (x, True)),
         CLAIM, "R(θ) on the pair (x_a, x_b) -> (x_a cos − x_b sin, x_b cos + x_a sin); lanes >= rotary_dim kept"),
)

# the table row of a new token
seqlen = sp.Symbol("start_new", integer=True, nonnegative=True)  # cache_seqlens[b]: keys before the new ones
tok = sp.Symbol("offs_t", integer=True, nonnegative=True)  # the new token's index t
per_token = sp.Symbol("PER_TOKEN", integer=True, nonnegative=True)  # 1: position seqlen + t; 0: all at seqlen
ro_pos = sp.Symbol("offs_pos", integer=True, nonnegative=True)

#: FlashAttention: keys (and causal / windowed queries) at cache_seqlens[b] + t, other queries at cache_seqlens[b]
ROTARY_POSITION = (
    Term(ro_pos, seqlen + per_token * tok, CLAIM,
         "the table row: cache_seqlens[b] + t (keys; causal or windowed q), cache_seqlens[b] (other q)"),
)

GROUPS = {"interleaved": INTERLEAVED, "halves": HALVES, "rotate": ROTATE, "position": ROTARY_POSITION}


class KVCacheRotary(NamedTuple):
    """What ``flash_attention_with_kvcache`` hands the append kernel for the new keys and for q (its two
    ``_append_rows`` launches), and the key lengths the attention then runs over."""
    key_start: object  # cache_seqlens: new key t is written at key_start[b] + t and rotated at its table row
    key_per_token: int  # PER_TOKEN of the keys' launch
    query_start: object  # the table row of q's token 0
    query_per_token: int  # PER_TOKEN of q's launch
    cos: object  # the tables both launches read
    sin: object
    interleaved: bool  # INTERLEAVED of both launches
    key_lengths: object  # cache_seqlens + N_new: the keys attended after the append


def kvcache_rotary(cache_seqlens, n_new, causal, window, cos, sin, interleaved) -> KVCacheRotary:
    """The launch line of the append's rotary (the one function the runtime calls, claim ``rotary_rotation``
    quantifies over it): new keys at ``cache_seqlens[b] + t`` (PER_TOKEN 1), q at the same rows when
    ``causal`` or ``window`` (not None) is given, else every token of q at ``cache_seqlens[b]`` (PER_TOKEN 0),
    both with the user's tables and layout; ``cache_seqlens`` a ``(B,)`` tensor (or a symbol)."""
    per_query = int(bool(causal) or window is not None)
    return KVCacheRotary(cache_seqlens, 1, cache_seqlens, per_query, cos, sin, bool(interleaved),
                         cache_seqlens + n_new)


class AppendLaunch(NamedTuple):
    """One ``_append_rows`` launch of the append: ``new`` rows ``(B, N_new, Hkv, ·)`` written into ``cache`` at keys
    ``cache_seqlens[b] + t``, with ``rotary`` its rotary keywords of ``append_rows`` (empty: written as they are)."""
    new: object
    cache: object
    rotary: dict


def kvcache_appends(k, v, k_cache, v_cache, cos, sin, interleaved, per_token) -> tuple[AppendLaunch, ...]:
    """Which tensors the append rotates (the runtime's ``kvcache_append_op`` launches exactly these): new ``k``
    into ``k_cache`` with the user's tables (None: no rotary), layout and PER_TOKEN (``kvcache_rotary``'s keys'),
    new ``v`` into ``v_cache`` as it is — FlashAttention's ``flash_attn_with_kvcache`` rotates q and k, never v.
    Claim ``rotary_rotation`` evaluates it on symbols."""
    return (AppendLaunch(k, k_cache, dict(rotary_cos=cos, rotary_sin=sin, interleaved=interleaved,
                                          per_token=per_token)),
            AppendLaunch(v, v_cache, {}))


def pair_lanes(f, half, interleaved: bool):
    """The lanes ``(first, second)`` of pair ``f`` (table column ``f``) when ``rotary_dim = 2·half``:
    the reference's layout (``spec.reference.rotary`` reads it with integers, claim
    ``rotary_rotation`` with symbols)."""
    return (2 * f, 2 * f + 1) if interleaved else (f, f + half)


def kvcache_rotary_row(cache_seqlen, t, *, query: bool, causal: bool = False, window=None):
    """The table row of new token ``t`` the reference (``spec.reference.kvcache_attention``) rotates at,
    FlashAttention's ``flash_attn_with_kvcache`` rule: a key's, and a query's when ``causal`` or ``window``,
    ``cache_seqlens[b] + t`` (the key index the append writes token t at); any other query's
    ``cache_seqlens[b]``."""
    return cache_seqlen + t if not query or causal or window is not None else cache_seqlen


def rotation(x_a, x_b, cos_t, sin_t):
    """``R(θ) (x_a, x_b)ᵀ`` with ``cos θ``, ``sin θ`` given: the reference's rotation of one pair."""
    return x_a * cos_t - x_b * sin_t, x_b * cos_t + x_a * sin_t
