"""KV-cache decoding: which keys a split reads, and where a key of a paged cache lives.

``flash_attention_with_kvcache`` runs one program per (KV split, batch, KV head). Batch ``b``
has the valid keys ``key_lo … key_len − 1``: ``key_len = cache_seqlens[b]`` (plus the keys just
appended), ``key_lo = cache_leftpad[b]`` (0 without left padding); the rest of the cache is
never read. The keys are cut into ``num_splits`` contiguous splits of ``chunk`` keys (a whole
number of key tiles); split ``split`` reads ``[split_lo, split_hi)`` tile by tile, each load
masked by ``j < split_hi``. With ``batch_invariant=True`` the splits have a fixed size
``split_keys`` instead (``SPLIT_RANGE_FIXED``, a multiple of the key tile set by the host, not by
the batch), and the grid has ``num_splits = cdiv(capacity, split_keys)`` splits: a row's plan is a
function of its own ``key_lo``, ``key_len`` only (claim ``batch_invariant_splits``). In a paged cache ``(num_pages, page_size, Hkv, D)`` key ``j`` of
batch ``b`` lives in physical page ``block_table[b, page_idx]`` at slot ``slot``.

Every line of that index arithmetic in the decode kernel is a term below (printed by the
generator); claim ``paged_kv_reads`` (``spec.proofs.paged``) proves that every valid key is read
exactly once, no key ``>= key_len`` is read, and the gather ``j -> (page_idx, slot)`` is one to
one with ``slot < page_size`` and ``page_idx < cdiv(key_len, page_size)``.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec.integers import cdiv
from spec.terms import Term

CLAIM = "paged_kv_reads"

num_splits = sp.Symbol("num_splits", integer=True, positive=True)  # KV splits per (batch, KV head)
split = sp.Symbol("split", integer=True, nonnegative=True)  # this program's split, < num_splits
chunk = sp.Symbol("chunk", integer=True, nonnegative=True)  # keys per split, a multiple of B_c
split_lo, split_hi = sp.symbols("split_lo split_hi", integer=True)  # this split's keys [lo, hi)
key_lo = sp.Symbol("key_lo", integer=True, nonnegative=True)  # the first valid key: cache_leftpad[b], or 0
split_keys = sp.Symbol("split_keys", integer=True, positive=True)  # batch_invariant: keys per split, fixed
page_size = sp.Symbol("PAGE_SIZE", integer=True, positive=True)  # keys per page (a power of two)
page_idx = sp.Symbol("page_idx", integer=True, nonnegative=True)  # logical page of key j
slot = sp.Symbol("slot", integer=True, nonnegative=True)  # key j's slot in its page

#: the keys of this program's split (before the tile loop)
SPLIT_RANGE = (
    Term(chunk, n.B_c * sp.ceiling(sp.ceiling((n.key_len - key_lo) / num_splits) / n.B_c), CLAIM,
         "keys per split: cdiv(key_len - key_lo, num_splits) rounded up to whole key tiles"),
    Term(split_lo, key_lo + split * chunk, CLAIM, "this split's first key"),
    Term(split_hi, sp.Min(split_lo + chunk, n.key_len), CLAIM,
         "this split's end; never past cache_seqlens[b] (no key >= key_len is read)"),
)

#: batch_invariant=True: splits of a fixed split_keys keys (a multiple of B_c), from key_lo; a split
#: past the row's keys is empty (its partial is the merge's identity)
SPLIT_RANGE_FIXED = (
    Term(split_lo, key_lo + split * split_keys, CLAIM, "this split's first key: fixed-size splits from key_lo"),
    Term(split_hi, sp.Min(split_lo + split_keys, n.key_len), CLAIM,
         "this split's end; never past the row's keys (an empty split when split_lo >= key_len)"),
)


def batch_invariant_num_splits(capacity, split_keys):
    """``num_splits`` of a ``batch_invariant`` decode launch: fixed splits of ``split_keys`` keys enough for a cache
    of ``capacity`` keys, at least one (``flash_attention_with_kvcache`` calls it; claim batch_invariant_splits
    proves the splits cover every key of every row). Numbers, or SymPy sizes (the claim's)."""
    if isinstance(capacity, sp.Basic) or isinstance(split_keys, sp.Basic):
        return sp.Max(1, cdiv(capacity, split_keys))
    return max(1, cdiv(capacity, split_keys))


#: the load mask of a key tile j = start_n + arange(B_c), start_n in range(split_lo, split_hi, B_c), printed as
#: ``key_ok`` at j = offs_n: claim paged_kv_reads proves it admits every valid key once and none outside [key_lo,
#: key_len); claim decode_addresses reads it too (every key it admits lies inside the cache)
key_ok = sp.Symbol("key_ok")
KEY_OK = (Term(key_ok, sp.StrictLessThan(n.j, split_hi), CLAIM,
               "the load mask: keys of this split only (never one >= cache_seqlens[b])"),)

#: key j's page and slot in a paged cache (the page itself: block_table[b, page_idx])
PAGE_GATHER = (
    Term(page_idx, sp.floor(n.j / page_size), CLAIM, "logical page of key j"),
    Term(slot, n.j - page_idx * page_size, CLAIM, "key j's slot inside its page"),
)

GROUPS = {"split_range": SPLIT_RANGE, "split_range_fixed": SPLIT_RANGE_FIXED, "page_gather": PAGE_GATHER,
          "key_ok": KEY_OK}
