"""flash_attention_with_kvcache's FlashAttention extras: append k/v in place, rotary, cache_leftpad,
cache_batch_idx (contiguous and paged caches, GQA, score modifications), against the float64
reference ``spec.reference.kvcache_attention``; and ``batch_invariant=True`` (a request alone and
inside other batches gives the same bits).

Interpreter runs are slow: tiny sizes (D = 32, caches of at most a few hundred keys). Cache slots
that hold no valid key (past each row's end, before its left padding, unused pages) are NaN, so a
kernel that read one would return NaN.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from spec import reference
from generated import flash_attention_varlen, flash_attention_with_kvcache
from generator.runtime import contract
from generator.runtime.decode import BATCH_INVARIANT_SPLIT_KEYS

D = 32
#: |kernel − float64| / max|v| for out (the decode tests' tolerances), and for the cache rows written:
#: one rounding of a value of magnitude up to ~4 (rotated) to the dtype
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}
ROW_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
#: lse: the rotated q is rounded to its dtype before the scores (as in FlashAttention), so the
#: scores carry one relative rounding of q
LSE_TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def make(seed, *, B=2, Nq=3, n_new=3, Hkv=2, group=2, cap=96, lens=(10, 50), dtype=torch.float16, rotary_dim=None,
         page_size=None, leftpad=None, batch_idx=None, cache_rows=None):
    """q, k, v, the cache (contiguous, or paged through a scrambled table), cos/sin tables; every
    slot that is not a valid key is NaN."""
    g = torch.Generator().manual_seed(seed)
    Hq = Hkv * group
    q = torch.randn(B, Nq, Hq, D, generator=g).to(dtype)
    k = torch.randn(B, n_new, Hkv, D, generator=g).to(dtype)
    v = torch.randn(B, n_new, Hkv, D, generator=g).to(dtype)
    rows = cache_rows or B
    kc = torch.full((rows, cap, Hkv, D), float("nan"), dtype=dtype)
    vc = kc.clone()
    idx = list(range(B)) if batch_idx is None else batch_idx
    for b, L in enumerate(lens):
        lo = 0 if leftpad is None else leftpad[b]
        kc[idx[b], lo:L] = torch.randn(L - lo, Hkv, D, generator=g).to(dtype)
        vc[idx[b], lo:L] = torch.randn(L - lo, Hkv, D, generator=g).to(dtype)
    cos = sin = None
    if rotary_dim:
        angle = torch.rand(cap, rotary_dim // 2, generator=g) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)
    table = None
    if page_size is not None:  # the same keys in pages, through a scrambled block table
        pages = cap // page_size
        num_pages = B * pages + 2
        perm = torch.randperm(num_pages, generator=g)[:B * pages].view(B, pages).to(torch.int32)
        kp = torch.full((num_pages, page_size, Hkv, D), float("nan"), dtype=dtype)
        vp = kp.clone()
        for b in range(B):
            for p in range(pages):
                kp[perm[b, p]] = kc[b, p * page_size:(p + 1) * page_size]
                vp[perm[b, p]] = vc[b, p * page_size:(p + 1) * page_size]
        kc, vc, table = kp, vp, perm
    lens_t = torch.tensor(lens, dtype=torch.int32)
    pad_t = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32)
    idx_t = None if batch_idx is None else torch.tensor(batch_idx, dtype=torch.int32)
    return q, k, v, kc, vc, lens_t, cos, sin, table, pad_t, idx_t


def run_and_check(q, k, v, kc, vc, lens, cos, sin, table, pad, idx, *, dtype, interleaved=True, num_splits=0, **kw):
    want_o, want_lse, want_k, want_v = reference.kvcache_attention(
        q, kc, vc, lens, k=k, v=v, rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved,
        cache_leftpad=pad, cache_batch_idx=idx, block_table=table, **kw)
    kc, vc = kc.clone(), vc.clone()
    out, lse = flash_attention_with_kvcache(q, kc, vc, lens, k=k, v=v, rotary_cos=cos, rotary_sin=sin,
                                            rotary_interleaved=interleaved, cache_leftpad=pad, cache_batch_idx=idx,
                                            block_table=table, return_lse=True, num_splits=num_splits, **kw)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    scale_v = max(1.0, float(torch.nan_to_num(vc.double()).abs().max()))
    torch.testing.assert_close(out.double(), want_o, atol=TOL[dtype] * scale_v, rtol=TOL[dtype])
    torch.testing.assert_close(lse.double(), want_lse, atol=LSE_TOL[dtype], rtol=LSE_TOL[dtype])
    # the cache rows written equal the reference's (v: bit for bit; k: one rounding of the rotation)
    written = ~torch.isnan(want_k)
    torch.testing.assert_close(kc.double()[written], want_k[written], atol=ROW_TOL[dtype] * 4, rtol=ROW_TOL[dtype])
    if cos is None:
        assert torch.equal(kc.double()[written], want_k[written])
    assert torch.equal(vc.double()[written], want_v[written])
    # nothing else of the cache changed (NaN stays NaN)
    assert torch.equal(torch.isnan(kc), torch.isnan(want_k)) and torch.equal(torch.isnan(vc), torch.isnan(want_v))
    return out, lse


CASES = [  # (paged, leftpad, batch_idx, rotary_dim, interleaved, causal, window, group, dtype)
    (False, None, None, None, True, False, None, 1, torch.float32),
    (False, None, None, 32, True, True, None, 2, torch.float16),
    (False, None, None, 32, False, False, None, 2, torch.float16),
    (False, None, None, 16, False, True, None, 4, torch.bfloat16),  # partial rotary_dim, GPT-NeoX
    (False, None, None, 16, True, False, (7, 0), 2, torch.float32),  # partial, GPT-J, windowed q
    (False, [3, 0], None, 32, True, True, None, 2, torch.float16),
    (False, [4, 17], [2, 0], 16, False, True, None, 2, torch.float16),  # leftpad + batch_idx
    (False, None, [1, 3], None, True, False, (5, 2), 1, torch.float32),
    (True, None, None, 32, True, True, None, 2, torch.float16),
    (True, None, None, 16, False, False, None, 4, torch.float32),
    (True, None, None, None, True, True, (9, 0), 2, torch.bfloat16),
]


@pytest.mark.parametrize("paged, leftpad, batch_idx, rotary_dim, interleaved, causal, window, group, dtype", CASES)
def test_append_matches_float64(paged, leftpad, batch_idx, rotary_dim, interleaved, causal, window, group, dtype):
    prob = make(11, dtype=dtype, group=group, rotary_dim=rotary_dim, page_size=16 if paged else None,
                leftpad=leftpad, batch_idx=batch_idx, cache_rows=4 if batch_idx else None)
    run_and_check(*prob, dtype=dtype, interleaved=interleaved, causal=causal, window=window, num_splits=2)


@pytest.mark.parametrize("paged", [False, True])
def test_append_of_more_tokens_than_one_program_holds(paged):
    """More new tokens than ``_append_rows``' BLOCK_T (16): a second program per (b, head) writes tokens 16…
    Regression (audit of round three): its cache index ``offs_j`` from the tile's lanes ``tl.arange(0, BLOCK_T)``
    instead of the tokens ``offs_t`` proves every claim (``append_addresses`` takes ``j = start + t`` as its
    hypothesis) and passed every test (all appended at most 16 tokens): error 0.74."""
    from generated.attention_decode_br16_bc32 import APPEND_BLOCK_T

    n_new = 20
    assert n_new > APPEND_BLOCK_T
    prob = make(12, Nq=n_new, n_new=n_new, rotary_dim=32, page_size=16 if paged else None, dtype=torch.float32)
    run_and_check(*prob, dtype=torch.float32, causal=True)

@pytest.mark.parametrize("mod", ["softcap", "alibi", "sinks"])
@pytest.mark.parametrize("paged", [False, True])
def test_append_with_score_mods(mod, paged):
    group, Hkv = 2, 2
    kw = {"softcap": {"softcap": 5.0},
          "alibi": {"alibi_slopes": torch.tensor([0.3, 0.1, 0.05, 0.2])},
          "sinks": {"sinks": torch.tensor([0.5, -1.0, 2.0, 0.0])}}[mod]
    prob = make(12, rotary_dim=32, page_size=16 if paged else None, leftpad=None if paged else [2, 5],
                dtype=torch.float32, group=group, Hkv=Hkv)
    for splits in (1, 3):
        run_and_check(*prob, dtype=torch.float32, causal=True, num_splits=splits, **kw)


def test_leftpad_keys_are_never_read_and_rotary_counts_from_index_0():
    """Keys before cache_leftpad are NaN and never read; the rotary table row of new token t is
    cache_seqlens[b] + t whatever the left padding (FlashAttention's convention)."""
    q, k, v, kc, vc, lens, cos, sin, _, pad, _ = make(13, rotary_dim=32, leftpad=[8, 30], dtype=torch.float32)
    kc2 = kc.clone()
    out = flash_attention_with_kvcache(q, kc2, vc.clone(), lens, k=k, v=v, rotary_cos=cos, rotary_sin=sin,
                                       cache_leftpad=pad, causal=True)
    assert not torch.isnan(out).any()
    want = reference.rotary(k, cos, sin, lens[:, None] + torch.arange(k.shape[1]))
    for b in range(2):
        torch.testing.assert_close(kc2[b, lens[b]:lens[b] + k.shape[1]].double(), want[b], atol=1e-5, rtol=1e-5)


def test_rotary_positions_with_leftpad_are_flashattentions_not_shifted_by_the_padding():
    """FlashAttention's convention, read at its source (csrc/flash_attn/src/block_info.h subtracts
    leftpad_k from the cache length and flash_fwd_kernel.h adds it back to the cos/sin row of both
    k and q; tests/test_flash_attn.py::test_flash_attn_kvcache rotates with seqlen_offsets=
    cache_seqlens whatever cache_leftpad): the new keys and the queries are rotated at table row
    cache_seqlens[b] + t, counted from the row's index 0, not from cache_leftpad[b]. The output is
    the float64 reference's with that convention and measurably not the one with positions
    shifted by the padding (old keys in the cache are not re-rotated, so the two differ)."""
    q, k, v, kc, vc, lens, cos, sin, _, pad, _ = make(17, rotary_dim=32, leftpad=[8, 30], dtype=torch.float32)
    out = flash_attention_with_kvcache(q, kc.clone(), vc.clone(), lens, k=k, v=v, rotary_cos=cos, rotary_sin=sin,
                                       cache_leftpad=pad, causal=True)
    want, _, _, _ = reference.kvcache_attention(q, kc, vc, lens, k=k, v=v, rotary_cos=cos, rotary_sin=sin,
                                                cache_leftpad=pad, causal=True)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
    for b in range(2):  # the other convention, row by row: table row p holds what row p - pad[b] holds
        shifted = [torch.cat([t[:int(pad[b])], t[:t.shape[0] - int(pad[b])]]) for t in (cos, sin)]
        other, _, _, _ = reference.kvcache_attention(q[b:b + 1], kc[b:b + 1], vc[b:b + 1], lens[b:b + 1],
                                                     k=k[b:b + 1], v=v[b:b + 1], rotary_cos=shifted[0],
                                                     rotary_sin=shifted[1], cache_leftpad=pad[b:b + 1], causal=True)
        assert (out[b].double() - other[0]).abs().max() > 1e-2


def test_a_causal_q_longer_than_the_append_reads_no_table_row_past_seqlen_ro():
    """Causal, N_q = 4 > N_new = 1, cache_seqlens = capacity − N_new, tables of exactly capacity rows (the
    contract's seqlen_ro >= capacity, FlashAttention's assert): q's tokens 1..3 sit at rows capacity … capacity + 2,
    past the table. The kernel used to read them (the storage behind the tables' view, here 100s); now the rows
    are masked (spec.addresses.APPEND_ROW_OK) and rotate by 0, FlashAttention's apply_rotary rule, which the
    reference follows (claims rotary_rotation, append_addresses)."""
    g = torch.Generator().manual_seed(21)
    cap, n_new, Nq, half = 16, 1, 4, 4
    q = torch.randn(1, Nq, 2, D, generator=g)
    k, v = torch.randn(1, n_new, 1, D, generator=g), torch.randn(1, n_new, 1, D, generator=g)
    kc, vc = torch.randn(1, cap, 1, D, generator=g), torch.randn(1, cap, 1, D, generator=g)
    angle = torch.rand(cap, half, generator=g) * 2 * math.pi
    storage = torch.full((2, cap + Nq, half), 100.0)  # cos, sin; rows past the tables' view: not a table row
    storage[:, :cap] = torch.stack([angle.cos(), angle.sin()])
    cos, sin = storage[0, :cap], storage[1, :cap]
    lens = torch.tensor([cap - n_new], dtype=torch.int32)
    run_and_check(q, k, v, kc, vc, lens, cos, sin, None, None, None, dtype=torch.float32, causal=True)
    rows = reference.rotary(q, cos, sin, torch.tensor([[cap - 1, cap, cap + 1, cap + 2]]))
    assert torch.equal(rows[:, 1:], q[:, 1:].double())  # the reference: rows past the table keep q


def test_rotary_reference_is_complex_multiplication():
    """The reference's rotation, against its definition: pair f as a complex number times e^{iθ}."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, 1, 8, generator=g, dtype=torch.float64)
    angle = torch.rand(5, 3, generator=g, dtype=torch.float64)
    pos = torch.tensor([[1, 4]])
    for interleaved in (True, False):
        got = reference.rotary(x, angle.cos(), angle.sin(), pos, interleaved)
        lanes = [(2 * f, 2 * f + 1) if interleaved else (f, f + 3) for f in range(3)]
        for t in range(2):
            for f, (a, b) in enumerate(lanes):
                z = complex(x[0, t, 0, a], x[0, t, 0, b]) * complex(math.cos(angle[pos[0, t], f]),
                                                                    math.sin(angle[pos[0, t], f]))
                assert abs(got[0, t, 0, a] - z.real) < 1e-12 and abs(got[0, t, 0, b] - z.imag) < 1e-12
        assert torch.equal(got[..., 6:], x[..., 6:])  # lanes past rotary_dim kept


# FlashAttention's test_flash_attn_kvcache, a small grid of its parameters (its draws of
# cache_seqlens, cache_leftpad, cache_batch_idx and the rotary tables), against the float64 reference
FA_GRID = list(itertools.product(
    [(1, 128), (3, 80)],  # (seqlen_q, seqlen_k)
    ["mha", "gqa"], [False, True],  # mha_type, new_kv
    [0.0, 0.5, 1.0], [False, True],  # rotary_fraction, rotary_interleaved
    [None, 16],  # paged_kv_block_size
    [False, True], [False, True]))  # has_leftpad, has_batch_idx


def _fa_cases():
    out = []
    for (shape, mha, new_kv, frac, inter, page, leftpad, bidx) in FA_GRID:
        if not new_kv and frac > 0 or page is not None and (leftpad or bidx):
            continue  # FlashAttention skips these too
        out.append((shape, mha, new_kv, frac, inter, page, leftpad, bidx))
    return out[::6]  # every sixth case: the grid's corners and middle, within the interpreter's budget


@pytest.mark.parametrize("shape, mha_type, new_kv, rotary_fraction, rotary_interleaved, page, has_leftpad, "
                         "has_batch_idx", _fa_cases())
def test_flash_attn_kvcache_grid(shape, mha_type, new_kv, rotary_fraction, rotary_interleaved, page, has_leftpad,
                                 has_batch_idx):
    seqlen_q, seqlen_k = shape
    g = torch.Generator().manual_seed(hash((shape, mha_type, new_kv, rotary_fraction)) % 1000)
    dtype, B, nheads = torch.float16, 2, 4
    nheads_k = nheads if mha_type == "mha" else 2
    rotary_dim = math.floor(int(rotary_fraction * D) / 16) * 16
    seqlen_new = seqlen_q if new_kv else 0
    B_cache = B + 1 if has_batch_idx else B
    q = torch.randn(B, seqlen_q, nheads, D, generator=g).to(dtype)
    k = v = None
    if new_kv:
        k = torch.randn(B, seqlen_new, nheads_k, D, generator=g).to(dtype)
        v = torch.randn(B, seqlen_new, nheads_k, D, generator=g).to(dtype)
    k_cache = torch.randn(B_cache, seqlen_k, nheads_k, D, generator=g).to(dtype)
    v_cache = torch.randn(B_cache, seqlen_k, nheads_k, D, generator=g).to(dtype)
    cache_seqlens = torch.randint(0 if new_kv else 1, seqlen_k - seqlen_new + 1, (B,), generator=g, dtype=torch.int32)
    cache_leftpad = None
    if has_leftpad:
        cache_leftpad = torch.tensor([int(torch.randint(0, int(s), (1,), generator=g)) if s > 0 else 0
                                      for s in cache_seqlens], dtype=torch.int32)
    cache_batch_idx = torch.randperm(B_cache, generator=g)[:B].to(torch.int32) if has_batch_idx else None
    cos = sin = None
    if rotary_dim:
        angle = torch.rand(seqlen_k, rotary_dim // 2, generator=g) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)
    table = None
    kc, vc = k_cache, v_cache
    if page is not None:
        pages = seqlen_k // page
        perm = torch.randperm(B * pages, generator=g).view(B, pages).to(torch.int32)
        kc = torch.empty(B * pages, page, nheads_k, D, dtype=dtype)
        vc = torch.empty_like(kc)
        kc[perm.flatten().long()] = k_cache.reshape(B * pages, page, nheads_k, D)
        vc[perm.flatten().long()] = v_cache.reshape(B * pages, page, nheads_k, D)
        table = perm
    for causal in (False, True):
        run_and_check(q, k, v, kc, vc, cache_seqlens, cos, sin, table, cache_leftpad, cache_batch_idx, dtype=dtype,
                      interleaved=rotary_interleaved, causal=causal, num_splits=0)


def test_append_compiles_and_mutates_the_cache():
    """torch.compile sees the in-place write (the append op declares mutates_args)."""
    q, k, v, kc, vc, lens, cos, sin, _, _, _ = make(14, rotary_dim=32, dtype=torch.float32)
    kc, vc = kc.nan_to_num(), vc.nan_to_num()

    def f(q, kc, vc, k, v, lens, cos, sin):
        return flash_attention_with_kvcache(q, kc, vc, lens, k=k, v=v, rotary_cos=cos, rotary_sin=sin, causal=True)

    k1, v1, k2, v2 = kc.clone(), vc.clone(), kc.clone(), vc.clone()
    want = f(q, k1, v1, k, v, lens, cos, sin)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k2, v2, k, v, lens, cos, sin)
    assert torch.equal(got, want) and torch.equal(k2, k1) and torch.equal(v2, v1)
    assert not torch.equal(k2, kc)  # the cache was written


@pytest.mark.parametrize("bad, match", [
    (dict(rotary_cos="cos"), "rotate the new keys: pass k and v"),
    (dict(k="k"), "pass both k and v"),
    (dict(cache_leftpad=torch.tensor([60, 0], dtype=torch.int32)), "cache_leftpad must lie in"),
    (dict(cache_batch_idx=torch.tensor([0, 5], dtype=torch.int32)), "cache_batch_idx must index"),
    (dict(k="k_long"), "cache_seqlens must lie in"),
    (dict(batch_invariant=True, num_splits=3), "leave num_splits at 0"),
])
def test_errors_name_the_fix(bad, match):
    q, k, v, kc, vc, lens, cos, sin, _, _, _ = make(15, rotary_dim=16, dtype=torch.float32)
    values = {"cos": cos, "k": k, "k_long": torch.zeros(2, 60, 2, D)}
    kw = {name: values.get(x, x) if isinstance(x, str) else x for name, x in bad.items()}
    if "rotary_cos" in kw:
        kw["rotary_sin"] = sin
    if kw.get("k") is not None and kw["k"].shape[1] == 60:
        kw["v"] = kw["k"]
    with pytest.raises((ValueError, TypeError), match=match), contract.checking_values():  # the value rules' opt-in
        flash_attention_with_kvcache(q, kc, vc, lens, **kw)


def test_leftpad_with_a_paged_cache_is_refused():
    q, k, v, kc, vc, lens, _, _, table, _, _ = make(16, page_size=16, dtype=torch.float32)
    with pytest.raises(ValueError, match="contiguous cache only"):
        flash_attention_with_kvcache(q, kc, vc, lens, block_table=table, cache_leftpad=torch.zeros(2, dtype=torch.int32))


# ---------------------------------------------------------------- batch invariance (deliverable 3)
@pytest.mark.parametrize("paged", [False, True])
def test_batch_invariant_request_alone_and_in_other_batches(paged):
    """A request (2 new tokens over 700 cached keys, past one fixed split) gives the same bits alone, and
    inside two batches with other requests and caches of other capacities; without batch_invariant the
    split heuristic's choice may differ (here: fixed num_splits 1 vs 3 do differ), with it it cannot."""
    assert 700 > BATCH_INVARIANT_SPLIT_KEYS
    g = torch.Generator().manual_seed(5)
    dtype, Hkv, group, Nq = torch.float16, 1, 2, 2
    page = 64

    def cache_with(lens, cap):
        kc = torch.randn(len(lens), cap, Hkv, D, generator=g).to(dtype)
        return kc, torch.randn(kc.shape, generator=g).to(dtype)

    def run(q, kc, vc, lens, **kw):
        lens_t = torch.tensor(lens, dtype=torch.int32)
        if not paged:
            return flash_attention_with_kvcache(q, kc, vc, lens_t, causal=True, return_lse=True, **kw)
        B, cap = kc.shape[:2]
        table = torch.arange(B * cap // page, dtype=torch.int32).view(B, cap // page).flip(0).contiguous()
        kp = kc.view(B * cap // page, page, Hkv, D)[table.flatten().long().argsort()]
        vp = vc.view(B * cap // page, page, Hkv, D)[table.flatten().long().argsort()]
        return flash_attention_with_kvcache(q, kp, vp, lens_t, block_table=table, causal=True, return_lse=True, **kw)

    q0 = torch.randn(1, Nq, Hkv * group, D, generator=g).to(dtype)
    k0, v0 = cache_with([700], 768)
    alone, alone_lse = run(q0, k0, v0, [700], batch_invariant=True)
    for others, cap in (([50], 1024), ([2000, 3], 2048)):
        ko, vo = cache_with(others, cap)
        kc = torch.cat([torch.cat([k0, torch.zeros(1, cap - 768, Hkv, D, dtype=dtype)], 1), ko])
        vc = torch.cat([torch.cat([v0, torch.zeros(1, cap - 768, Hkv, D, dtype=dtype)], 1), vo])
        q = torch.cat([q0, torch.randn(len(others), Nq, Hkv * group, D, generator=g).to(dtype)])
        out, lse = run(q, kc, vc, [700] + others, batch_invariant=True)
        assert torch.equal(out[:1], alone) and torch.equal(lse[:1], alone_lse)
    # the claim is not vacuous: a different split plan of the same row changes its bits
    _, one = run(q0, k0, v0, [700], num_splits=1)
    _, three = run(q0, k0, v0, [700], num_splits=3)
    assert not torch.equal(one, three)


def test_batch_invariant_varlen_sequence_alone_and_packed():
    """flash_attention_varlen: a sequence's rows are bitwise the same alone and packed with others
    (each program reduces over its own segment's keys from the segment's first key)."""
    g = torch.Generator().manual_seed(6)
    H, dtype = 2, torch.float16
    seq = [torch.randn(37, H, D, generator=g).to(dtype) for _ in range(3)]

    def run(lens, xs):
        q = torch.cat([x[0] for x in xs])
        k = torch.cat([x[1] for x in xs])
        v = torch.cat([x[2] for x in xs])
        cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
        return flash_attention_varlen(q, k, v, cu, cu, causal=True, batch_invariant=True)

    alone = run([37], [seq])
    other = [torch.randn(n, H, D, generator=g).to(dtype) for n in (90,) for _ in range(3)]
    packed = run([90, 37], [other, seq])
    assert torch.equal(packed[90:], alone)


# ---------------------------------------------------------------- paged varlen (deliverable 2)
@pytest.mark.parametrize("page_size, causal, window, group", [(16, True, None, 2), (16, False, (5, 0), 1),
                                                             (512, True, None, 4), (64, False, None, 2)])
def test_varlen_over_paged_caches_matches_float64(page_size, causal, window, group):
    """flash_attention_varlen(q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, block_table=): the packed
    queries of each sequence over its keys in the pages of a scrambled table (NaN in every slot that
    holds no key), against the float64 packed reference on the same keys laid end to end; sequences
    of unequal query and key counts (a chunk of a prefill, decode tokens, an empty query segment)."""
    g = torch.Generator().manual_seed(21)
    dtype, Hkv = torch.float16, 2
    Hq = Hkv * group
    n_q, n_k = [5, 1, 0, 3], [40, 70, 9, 3]
    q = torch.randn(sum(n_q), Hq, D, generator=g).to(dtype)
    k = torch.randn(sum(n_k), Hkv, D, generator=g).to(dtype)
    v = torch.randn(sum(n_k), Hkv, D, generator=g).to(dtype)
    cu_q = torch.tensor([0] + list(itertools.accumulate(n_q)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(itertools.accumulate(n_k)), dtype=torch.int32)
    pages = max(-(-n // page_size) for n in n_k)
    num_pages = len(n_k) * pages + 1
    table = torch.randperm(num_pages, generator=g)[:len(n_k) * pages].view(len(n_k), pages).to(torch.int32)
    kp = torch.full((num_pages, page_size, Hkv, D), float("nan"), dtype=dtype)
    vp = kp.clone()
    for b in range(len(n_k)):
        for j in range(n_k[b]):
            kp[table[b, j // page_size], j % page_size] = k[cu_k[b] + j]
            vp[table[b, j // page_size], j % page_size] = v[cu_k[b] + j]
    out, lse = flash_attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, causal=causal, window=window,
                                      return_lse=True)
    want_o, want_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, window=window)
    assert out.shape == q.shape and lse.shape == (Hq, q.shape[0])
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), want_o, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-4, rtol=1e-4)
    # the same packed call through a contiguous copy of the keys (the dense varlen kernels) agrees
    dense = flash_attention_varlen(q, k, v, cu_q, cu_k, causal=causal, window=window)
    torch.testing.assert_close(out, dense, atol=TOL[dtype], rtol=TOL[dtype])
