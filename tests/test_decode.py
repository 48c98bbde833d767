"""flash_attention_with_kvcache: contiguous and paged caches against float64, splits, GQA, masks.

Interpreter runs are slow: Hypothesis draws a few tiny problems (N_q <= 8, cache lengths up to
300, D = 16); every cache slot and page not holding a valid key is NaN, so a kernel that read
one would return NaN.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spec import reference
from generated import flash_attention_with_kvcache
from generator.runtime.decode import MAX_SPLITS, default_num_splits
from generator.runtime import contract

D = 16
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}


def reference_decode(q, k, v, lens, *, causal, window, scale=None):
    """float64, per batch: attention over the cache's first lens[b] keys, bottom-right aligned."""
    B, Nq, Hq, _ = q.shape
    outs, lses = [], []
    for b in range(B):
        L = int(lens[b])
        qq = q[b:b + 1].transpose(1, 2).double()
        if L == 0:
            outs.append(torch.zeros(Nq, Hq, D, dtype=torch.float64))
            lses.append(torch.full((Hq, Nq), float("-inf"), dtype=torch.float64))
            continue
        kk, vv = (t[b:b + 1, :L].transpose(1, 2).double() for t in (k, v))
        o, lse = reference.attention(qq, kk, vv, causal=causal, alignment="bottom_right", window=window, scale=scale)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses)


def make_problem(seed, B, Nq, group, Hkv, lens, dtype, page_size=None, capacity=None):
    """q, a contiguous cache (NaN past each length) and, with page_size, the same keys in a paged
    cache with a scrambled block table (NaN in every unused slot and page)."""
    g = torch.Generator().manual_seed(seed)
    capacity = capacity or max(max(lens), 1)
    q = torch.randn(B, Nq, Hkv * group, D, generator=g).to(dtype)
    k = torch.randn(B, capacity, Hkv, D, generator=g).to(dtype)
    v = torch.randn(B, capacity, Hkv, D, generator=g).to(dtype)
    for b, L in enumerate(lens):
        k[b, L:], v[b, L:] = float("nan"), float("nan")
    lens_t = torch.tensor(lens, dtype=torch.int32)
    if page_size is None:
        return q, k, v, lens_t, None, None
    max_pages = -(-capacity // page_size)
    num_pages = B * max_pages + 3  # spare pages, never referenced: NaN
    perm = torch.randperm(num_pages, generator=g)[:B * max_pages].view(B, max_pages).to(torch.int32)
    kp = torch.full((num_pages, page_size, Hkv, D), float("nan")).to(dtype)
    vp = kp.clone()
    for b, L in enumerate(lens):
        for j in range(L):
            page, slot = perm[b, j // page_size], j % page_size
            kp[page, slot], vp[page, slot] = k[b, j], v[b, j]
    return q, k, v, lens_t, (kp, vp), perm


def check(out, lse, q, k, v, lens, *, causal, window, dtype):
    want_o, want_lse = reference_decode(q, k, v, lens, causal=causal, window=window)
    assert out.dtype == dtype and out.shape == q.shape and lse.dtype == torch.float32
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    torch.testing.assert_close(out.double(), want_o, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-4, rtol=1e-4)


@settings(max_examples=6)
@given(B=st.integers(1, 2), Nq=st.integers(1, 8), group=st.sampled_from([1, 2, 4]), Hkv=st.integers(1, 2),
       lens=st.lists(st.integers(0, 300), min_size=2, max_size=2), page_size=st.sampled_from([None, 16, 32, 64]),
       splits=st.integers(1, 16), causal=st.booleans(), window=st.sampled_from([None, (20, 0), (3, 5)]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), seed=st.integers(0, 99))
def test_decode_matches_float64(B, Nq, group, Hkv, lens, page_size, splits, causal, window, dtype, seed):
    lens = lens[:B]
    q, k, v, lens_t, paged, table = make_problem(seed, B, Nq, group, Hkv, lens, dtype, page_size)
    kc, vc = paged if paged else (k, v)
    out, lse = flash_attention_with_kvcache(q, kc, vc, lens_t, block_table=table, causal=causal, window=window,
                                            num_splits=splits, return_lse=True)
    check(out, lse, q, k, v, lens, causal=causal, window=window, dtype=dtype)


@pytest.mark.parametrize("page_size", [16, 128, 256])
def test_paged_equals_contiguous(page_size):
    """The same keys through a scrambled block table give the same bits as the contiguous cache."""
    lens = [300, 37]
    q, k, v, lens_t, (kp, vp), table = make_problem(1, 2, 3, 2, 2, lens, torch.float16, page_size, capacity=300)
    got = flash_attention_with_kvcache(q, kp, vp, lens_t, block_table=table, causal=True, num_splits=3)
    want = flash_attention_with_kvcache(q, k, v, lens_t, causal=True, num_splits=3)
    assert torch.equal(got, want)


@pytest.mark.parametrize("layout", ["rows of a wider table", "every other column", "transposed"])
def test_strided_block_tables_are_honoured(layout):
    """Issue 24: the block table is read through both strides the launch passes
    (spec.launch.decode_launch, claim decode_addresses), whatever its layout; the old kernel assumed
    a column stride of 1 and read pages of the neighbouring column."""
    lens = [70, 33]
    q, k, v, lens_t, (kp, vp), table = make_problem(2, 2, 2, 2, 1, lens, torch.float32, 16, capacity=80)
    junk = torch.full_like(table, kp.shape[0] - 1)  # a spare page, all NaN: reading it shows
    if layout == "rows of a wider table":
        strided = torch.cat([table, junk], 1)[:, :table.shape[1]]
    elif layout == "every other column":
        strided = torch.stack([table, junk], -1).flatten(1)[:, ::2]
    else:
        strided = table.t().contiguous().t()
    assert torch.equal(strided, table)
    got, lse = flash_attention_with_kvcache(q, kp, vp, lens_t, block_table=strided, num_splits=2, return_lse=True)
    check(got, lse, q, k, v, lens, causal=False, window=None, dtype=torch.float32)


def test_num_splits_changes_only_rounding():
    """Splits 1..16 agree within a bound of fp32 rounding (the merge is exact in real arithmetic)."""
    lens = [300, 190]
    q, k, v, lens_t, _, _ = make_problem(2, 2, 1, 4, 1, lens, torch.float32)
    one, lse1 = flash_attention_with_kvcache(q, k, v, lens_t, num_splits=1, return_lse=True)
    for s in (2, 5, 16):
        out, lse = flash_attention_with_kvcache(q, k, v, lens_t, num_splits=s, return_lse=True)
        assert (out - one).abs().max() <= 2e-6 and (lse - lse1).abs().max() <= 2e-6, s


def test_int_cache_seqlens_and_default_scale_and_splits():
    q, k, v, _, _, _ = make_problem(3, 1, 1, 2, 1, [40], torch.float32)
    k, v = k.nan_to_num(), v.nan_to_num()
    out = flash_attention_with_kvcache(q, k, v, 40, scale=0.5)
    want, _ = reference_decode(q, k, v, [40], causal=False, window=None, scale=0.5)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)


def test_batch_invariant_splits_fold_into_axis_0_and_past_it_are_refused():
    """batch_invariant puts one split per 512 keys on the decode grid's axis 0 (row tiles x splits, CUDA's
    2^31 - 1; claim launch_grid): 65536 splits, past the 65535 an axis 1 held before, now launch (stubbed: nothing
    runs; an expanded cache: no memory), and row tiles x splits past 2^31 - 1 (2^17 query rows on a 2^28-key
    cache: 2^13 tiles x 2^19 splits) is refused before any launch, naming num_splits and the fix."""
    from benchmarks import host
    from generator.runtime.decode import BATCH_INVARIANT_SPLIT_KEYS
    from spec.launch import GRID_AXIS_MAX

    for n_q, keys, refused in ((1, GRID_AXIS_MAX * BATCH_INVARIANT_SPLIT_KEYS + 1, False), (2**17, 2**28, True)):
        q = torch.zeros(1, 1, 1, 16).expand(1, n_q, 1, 16)
        cache = torch.zeros(1, 1, 1, 16).expand(1, keys, 1, 16)
        with host.stubbed_launches() as launched:
            if refused:
                with pytest.raises(ValueError, match=r"num_splits: .*2147483647.*batch_invariant=False.*grid_axes"):
                    flash_attention_with_kvcache(q, cache, cache, 8, batch_invariant=True)
            else:
                flash_attention_with_kvcache(q, cache, cache, 8, batch_invariant=True)
        assert bool(launched) != refused, keys


def test_default_num_splits_fills_the_sms():
    assert default_num_splits(programs=8, max_keys=128 * 1024, num_sms=132) == MAX_SPLITS
    assert default_num_splits(programs=64, max_keys=128 * 1024, num_sms=132) == 3
    assert default_num_splits(programs=200, max_keys=128 * 1024, num_sms=132) == 1  # grid already full
    assert default_num_splits(programs=8, max_keys=600, num_sms=132) == 2  # short cache: few splits
    assert default_num_splits(programs=8, max_keys=100, num_sms=132) == 1


def test_gradients_are_refused_with_the_reason():
    q, k, v, lens, _, _ = make_problem(4, 1, 1, 1, 1, [20], torch.float32)
    with pytest.raises(RuntimeError, match="inference only.*torch.no_grad"):
        flash_attention_with_kvcache(q.requires_grad_(), k, v, lens)


def test_bad_inputs_name_the_fix():
    q, k, v, lens, _, _ = make_problem(5, 1, 1, 1, 1, [20], torch.float32)
    with pytest.raises(ValueError, match="int32"):
        flash_attention_with_kvcache(q, k, v, lens, block_table=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="power of two from 16 to 512"):
        flash_attention_with_kvcache(q, k[:, :12].contiguous(), v[:, :12].contiguous(), 5,
                                     block_table=torch.zeros(1, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="cache_seqlens must lie in"), contract.checking_values():
        flash_attention_with_kvcache(q, k, v, 21)
    with pytest.raises(ValueError, match="multiple of the cache's KV heads"):
        flash_attention_with_kvcache(q.expand(1, 1, 3, D).contiguous(), k.expand(1, 20, 2, D).contiguous(),
                                     v.expand(1, 20, 2, D).contiguous(), lens)


def test_the_kernels_print_the_spec_terms():
    """The decode kernel prints the dense forward's tile and epilogue and spec.paged's index terms;
    the merge kernel prints MERGE_STATE (pair and fold): no hand-typed second copy."""
    from pathlib import Path

    from generator import render
    from spec.printer import print_term
    from spec import paged, terms

    root = Path(__file__).resolve().parent.parent / "generated"
    decode_src = (root / "attention_decode_br64_bc64.py").read_text()
    for t in terms.FORWARD_TILE + terms.FORWARD_EPILOGUE + paged.SPLIT_RANGE:
        assert print_term(t) in decode_src, t.name
    for t in paged.PAGE_GATHER:
        assert print_term(t, {"j": "offs_n"}) in decode_src, t.name
    merge_src = (root / "merge_state_br64_bc64.py").read_text()
    for t in terms.MERGE_STATE:
        assert print_term(t) in merge_src and print_term(t, render.FOLD_NAMES) in merge_src, t.name


def test_custom_op_fake_and_compile():
    q, k, v, lens, _, _ = make_problem(6, 1, 1, 2, 1, [30], torch.float32)
    k, v = k.nan_to_num(), v.nan_to_num()

    def f(q, k, v, lens):
        return flash_attention_with_kvcache(q, k, v, lens, causal=True, num_splits=2)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, lens), f(q, k, v, lens))
