"""Issue 27: a value head dim D_v ≠ q/k's D (DeepSeek's MLA shapes) on every path, against float64.

The kernels carry two head dims: ``BLOCK_D`` for the Q/K/dQ/dK tiles and ``BLOCK_DV`` for the
V/O/dO/dV tiles (both padded to powers of two, masked on their own width). Here, at odd pairs
(D_v < D and D_v > D), fp32 and fp16, GQA and MQA:

* ``flash_attention`` forward (out ``(B, Hq, N_q, D_v)``, lse) and backward (dq, dk ``D``; dv ``D_v``)
  with masks, padding keys holding NaN (never read), score modifications, a mask_mod, the TMA path
  (interpreted descriptors) and v a strided view;
* ``flash_attention_varlen`` forward and backward;
* ``flash_attention_with_kvcache``: the absorbed MLA decode at a scaled-down shape (D = 72 = 64
  latent + 8 rope, D_v = 64) with a paged latent cache and ``v_cache = k_cache[..., :64]``, a view
  the kernel reads through its strides (no copy), split and unsplit.

``ring_attention`` with D_v ≠ D runs in tests/test_ring.py (its gloo processes); the limits
(``head_dim_max``, ``decode_head_dim_max``) in tests/test_reliability.py. Interpreter sizes are
tiny (N <= 40).
"""

from __future__ import annotations

import pytest
import torch

from attention_cases import on_device, to_cpu, to_device
from generated import flash_attention, flash_attention_varlen, flash_attention_with_kvcache
from generator.checking import GRAD_TOLERANCES_EMPIRICAL, attention_failures
from spec import reference
from spec.masks import prefix_lm

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

BLOCK = (16, 32)
#: (D, D_v): v narrower, v wider, neither a power of two (48 pads to 64, 32 does not)
PAIRS = [(32, 16), (16, 32), (48, 32)]


def _inputs(D, Dv, Hq, Hkv, dtype, Nq=24, Nk=37, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, Hq, Nq, D, generator=g).to(dtype)
    k = torch.randn(1, Hkv, Nk, D, generator=g).to(dtype)
    v = torch.randn(1, Hkv, Nk, Dv, generator=g).to(dtype)
    do = torch.randn(1, Hq, Nq, Dv, generator=g).to(dtype)
    return q, k, v, do


def _fwd_bwd(q, k, v, do, **kw):
    """out, lse and (dq, dk, dv) of the kernels, back on CPU."""
    q, k, v = (to_device(t).detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(q, k, v, return_lse=True, **to_device(kw))
    out.backward(to_device(do))
    return to_cpu((out.detach(), lse.detach(), (q.grad, k.grad, v.grad)))


def _reference(q, k, v, do, **kw):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, lse = reference.attention(q, k, v, **kw)
    out.backward(do.double())
    return out.detach(), lse.detach(), (q.grad, k.grad, v.grad)


def _grad_errors(got, want):
    """max |g − w| / max|w| per gradient (floored at 1% of the largest, as tests/test_backward.py)."""
    floor = 1e-2 * max(w.abs().max().item() for w in want)
    return [(g.double() - w).abs().max().item() / max(w.abs().max().item(), floor) for g, w in zip(got, want)]


def _check(q, k, v, do, kernel_kw=None, **kw):
    out, lse, grads = _fwd_bwd(q, k, v, do, block=BLOCK, **(kernel_kw or {}), **kw)
    # padding keys' NaN reach the kernels only: the reference (and the bound) see zeros there
    k, v = torch.nan_to_num(k), torch.nan_to_num(v)
    ref_out, ref_lse, ref_grads = _reference(q, k, v, do, **kw)
    assert out.shape == (*q.shape[:3], v.shape[3]) and out.dtype == q.dtype
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k, scale=kw.get("scale")) == []
    errors = _grad_errors(grads, ref_grads)
    assert all(e <= GRAD_TOLERANCES_EMPIRICAL[q.dtype] for e in errors), errors


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("D, Dv", PAIRS, ids=[f"D{d}-Dv{dv}" for d, dv in PAIRS])
def test_forward_backward_odd_head_dim_pairs(D, Dv, dtype):
    """GQA (4 query heads on 2 K/V heads) for D_v < D, MQA (1 K/V head) otherwise; causal
    bottom-right plus a window; padding keys past key_lengths hold NaN in k and v."""
    Hq, Hkv = (4, 2) if Dv < D else (2, 1)
    q, k, v, do = _inputs(D, Dv, Hq, Hkv, dtype)
    k[:, :, 30:], v[:, :, 30:] = float("nan"), float("nan")
    _check(q, k, v, do, causal=True, alignment="bottom_right", window=(20, 3),
           key_lengths=torch.tensor([30]))


def test_dropout_at_mla_shape():
    """Dropout with D_v ≠ D: the reference applies the keep mask the kernels drew (their
    ``return_dropout_mask``), forward within the bound scaled by 1/(1 − p), gradients as above."""
    from test_dropout import dropout_failures, reference_run, run

    q, k, v, do = _inputs(40, 24, 4, 2, torch.float32, Nq=20, Nk=29, seed=3)
    p = 0.3
    out, lse, keep, grads = run(q, k, v, do, p, causal=True, block=BLOCK)
    ref_out, ref_lse, ref_grads = reference_run(q, k, v, do, keep, p, causal=True)
    assert out.shape == (1, 4, 20, 24) and 0 < keep.float().mean() < 1
    assert dropout_failures(out, lse, ref_out, ref_lse, q, k, v, p) == []
    errors = _grad_errors(grads, ref_grads)
    assert all(e <= GRAD_TOLERANCES_EMPIRICAL[q.dtype] for e in errors), errors


def test_score_mods_mask_and_mask_mod_at_mla_shape():
    """softcap, ALiBi, sinks (with their gradient) and a dense mask at (32, 16); a mask_mod at (16, 32)."""
    q, k, v, do = _inputs(32, 16, 4, 2, torch.float32, seed=1)
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(1, 1, 24, 37, generator=g) > 0.3
    slopes, sinks = torch.rand(4, generator=g), torch.randn(4, generator=g)
    kernel_sinks = to_device(sinks.clone()).requires_grad_()  # a leaf on the test device
    out, lse, grads = _fwd_bwd(q, k, v, do, block=BLOCK, mask=mask, softcap=5.0, alibi_slopes=slopes,
                               sinks=kernel_sinks)
    ref_sinks = sinks.double().requires_grad_()
    ref_out, ref_lse, ref_grads = _reference(q, k, v, do, mask=mask, softcap=5.0, alibi_slopes=slopes,
                                             sinks=ref_sinks)
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k) == []
    assert max(_grad_errors(grads, ref_grads)) <= GRAD_TOLERANCES_EMPIRICAL[torch.float32]
    dsinks = (kernel_sinks.grad.cpu().double() - ref_sinks.grad).abs().max().item()
    assert dsinks <= 1e-4 * max(1.0, ref_sinks.grad.abs().max().item()), dsinks

    q, k, v, do = _inputs(16, 32, 2, 1, torch.float32, seed=3)
    _check(q, k, v, do, causal=True, mask_mod=prefix_lm, mask_args={"prefix": 9})


def test_v_as_a_strided_view_and_the_tma_path():
    """v = a slice of a wider tensor (D_v = 16 of 40 columns: row stride 40) on the pointer path; the
    TMA path (interpreted descriptors) with V and O boxes at BLOCK_DV = 16, Q and K at BLOCK_D = 32."""
    q, k, _, do = _inputs(32, 16, 2, 2, torch.float32, seed=4)
    wide = torch.randn(1, 2, 37, 40, generator=torch.Generator().manual_seed(5))
    v = wide[..., 8:24]
    assert not v.is_contiguous()
    _check(q, k, v, do, causal=True)
    v = v.contiguous()
    out_tma, lse_tma = on_device(flash_attention, q, k, v, return_lse=True, block=BLOCK, tma=True)
    out_ptr, lse_ptr = on_device(flash_attention, q, k, v, return_lse=True, block=BLOCK, tma=False)
    ref_out, ref_lse = reference.attention(q.double(), k.double(), v.double())
    assert attention_failures(out_tma, lse_tma, ref_out, ref_lse, v, q=q, k=k) == []
    assert torch.equal(out_tma, out_ptr) and torch.equal(lse_tma, lse_ptr)


def test_empty_keys_give_zeros_of_the_value_width():
    q, k, v, _ = _inputs(32, 16, 2, 1, torch.float32, Nk=0)
    out, lse = on_device(flash_attention, q, k, v, return_lse=True)
    assert out.shape == (1, 2, 24, 16) and not out.any() and torch.isneginf(lse).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_varlen_forward_backward(dtype):
    """Two segments (5 queries on 9 keys, 12 on 21), causal, GQA 4/2, D = 32, D_v = 16."""
    g = torch.Generator().manual_seed(6)
    cu_q, cu_k = torch.tensor([0, 5, 17], dtype=torch.int32), torch.tensor([0, 9, 30], dtype=torch.int32)
    q, k = torch.randn(17, 4, 32, generator=g).to(dtype), torch.randn(30, 2, 32, generator=g).to(dtype)
    v, do = torch.randn(30, 2, 16, generator=g).to(dtype), torch.randn(17, 4, 16, generator=g).to(dtype)
    qq, kk, vv = (to_device(t).clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention_varlen(qq, kk, vv, to_device(cu_q), to_device(cu_k), causal=True, return_lse=True,
                                      block=BLOCK)
    out.backward(to_device(do))
    out, lse, grads = to_cpu((out.detach(), lse.detach(), (qq.grad, kk.grad, vv.grad)))
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref_out, ref_lse = reference.varlen_attention(q64, k64, v64, cu_q, cu_k, causal=True)
    ref_out.backward(do.double())
    assert out.shape == (17, 4, 16)
    # the per-row check of attention_failures on a (1, total, H, D_v) view
    assert attention_failures(out[None], lse.T[None], ref_out.detach()[None], ref_lse.detach().T[None], v) == []
    errors = _grad_errors(grads, (q64.grad, k64.grad, v64.grad))
    assert all(e <= GRAD_TOLERANCES_EMPIRICAL[dtype] for e in errors), errors


def _latent_cache(seed, dtype, D=72, Dv=64, Hkv=1, page_size=16, lens=(37, 20)):
    """The absorbed MLA decode, scaled down: one latent head of D = 64 + 8 (rope) columns in a paged
    cache with a scrambled block table, NaN in every slot past a length and in the unused page;
    v_cache = k_cache[..., :D_v], a view sharing k_cache's storage."""
    g = torch.Generator().manual_seed(seed)
    B, max_pages = len(lens), 3
    num_pages = B * max_pages + 1
    kc = torch.full((num_pages, page_size, Hkv, D), float("nan"))
    table = torch.randperm(num_pages, generator=g)[:B * max_pages].view(B, max_pages).to(torch.int32)
    for b, L in enumerate(lens):
        for j in range(L):
            kc[table[b, j // page_size], j % page_size] = torch.randn(Hkv, D, generator=g)
    kc = kc.to(dtype)
    return kc, kc[..., :Dv], table, torch.tensor(lens, dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_absorbed_decode_with_a_paged_latent_cache(num_splits, dtype, monkeypatch):
    """16 query heads on one latent head (MQA, as DeepSeek's absorbed decode), 2 new tokens, causal;
    v_cache is a view of k_cache that reaches the kernel as it is: same storage, k_cache's strides."""
    kc, vc, table, lens = _latent_cache(7, dtype)
    q = torch.randn(2, 2, 16, 72, generator=torch.Generator().manual_seed(8)).to(dtype)
    from generator.runtime import api, config

    module = api.module_for("decode", config.block_for("decode"), config.DEFAULT_PACKAGE, to_device(q).device)
    seen = []
    launch = module.launch_splits

    def spy(plan, q_, k_cache, v_cache, *args, **kwargs):
        seen.append((v_cache.data_ptr() == k_cache.data_ptr(), v_cache.stride() == k_cache.stride(),
                     v_cache.shape[-1]))
        return launch(plan, q_, k_cache, v_cache, *args, **kwargs)

    monkeypatch.setattr(module, "launch_splits", spy)
    # on the test device, v_cache a view of the moved k_cache (moving the view alone would copy it)
    q_d, kc_d, lens_d = to_device((q, kc, lens))
    out, lse = flash_attention_with_kvcache(q_d, kc_d, kc_d[..., :vc.shape[-1]], lens_d, block_table=to_device(table),
                                            causal=True, num_splits=num_splits, return_lse=True)
    out, lse = to_cpu((out, lse))
    assert seen == [(True, True, 64)]  # the view itself, not a copy
    # the kernel splits q/k's head dim at D_v (64 + a tail of 8, not padded to 128) and uses its K tile as V
    assert module.head_dims(q, kc, vc) == (64, 8, True) and module.head_dims(q, kc, vc.clone())[2] is False
    ref_out, ref_lse, _, _ = reference.kvcache_attention(q, kc, vc, lens, block_table=table, causal=True)
    assert out.shape == (2, 2, 16, 64) and out.dtype == dtype
    # attention_failures wants (B, H, N, D_v) and (B, H, N): the decode layout is (B, N_q, Hq, D_v)
    failures = attention_failures(out.transpose(1, 2), lse, ref_out.transpose(1, 2), ref_lse, torch.nan_to_num(vc))
    assert failures == [], failures


def test_decode_contiguous_cache_with_a_wider_value():
    """D_v > D on the contiguous cache (GQA 4/2, D = 16, D_v = 40), split in 2: out is D_v wide."""
    g = torch.Generator().manual_seed(9)
    q, kc, vc = torch.randn(2, 1, 4, 16, generator=g), torch.randn(2, 48, 2, 16, generator=g), \
        torch.randn(2, 48, 2, 40, generator=g)
    lens = torch.tensor([48, 33], dtype=torch.int32)
    kc[1, 33:], vc[1, 33:] = float("nan"), float("nan")
    out, lse = to_cpu(flash_attention_with_kvcache(*to_device((q, kc, vc, lens)), num_splits=2, return_lse=True))
    ref_out, ref_lse, _, _ = reference.kvcache_attention(q, kc, vc, lens)
    assert out.shape == (2, 1, 4, 40)
    assert attention_failures(out.transpose(1, 2), lse, ref_out.transpose(1, 2), ref_lse,
                              torch.nan_to_num(vc)) == []


def test_paged_varlen_with_a_latent_cache():
    """flash_attention_varlen(..., block_table=) (FlashAttention 2's paged form, through the decode kernel)
    at D = 40, D_v = 32 with v_cache = k_cache[..., :32]: two sequences of 5 and 3 new tokens on 21 and 9
    keys, causal; vs varlen_attention on the gathered keys."""
    g = torch.Generator().manual_seed(10)
    page, lens_k, lens_q = 16, (21, 9), (5, 3)
    kc = torch.randn(5, page, 2, 40, generator=g)
    table = torch.tensor([[3, 1], [4, 0]], dtype=torch.int32)
    q = torch.randn(sum(lens_q), 4, 40, generator=g)
    cu_q = torch.tensor([0, 5, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 21, 30], dtype=torch.int32)
    out = to_cpu(flash_attention_varlen(*to_device((q, kc, kc[..., :32], cu_q, cu_k)), causal=True,
                                        block_table=to_device(table)))
    keys = torch.cat([torch.cat([kc[table[b, j // page], j % page][None] for j in range(n)]) for b, n in enumerate(lens_k)])
    ref_out, _ = reference.varlen_attention(q.double(), keys.double(), keys[..., :32].double(), cu_q, cu_k, causal=True)
    assert out.shape == (8, 4, 32)
    err = (out.double() - ref_out).abs().max().item() / keys[..., :32].abs().max().item()
    assert err <= 1e-5, err


def test_a_cached_plan_reads_a_separate_v_of_the_views_strides():
    """The decode plan is kept per call signature (shapes, strides), never per address: after a call with
    v_cache = k_cache[..., :64] (the K tile serves as V), a call with a separate v of the same shape and
    strides but other values must read that v (V_IS_K is chosen per call)."""
    kc, vc, table, lens = _latent_cache(11, torch.float32)
    q = torch.randn(2, 1, 16, 72, generator=torch.Generator().manual_seed(12))
    other = torch.empty_strided(vc.shape, vc.stride())
    other.copy_(torch.randn(vc.shape, generator=torch.Generator().manual_seed(13)))
    for v in (vc, other):
        out = to_cpu(flash_attention_with_kvcache(*to_device((q, kc, v, lens)), block_table=to_device(table)))
        ref, _, _, _ = reference.kvcache_attention(q, kc, v, lens, block_table=table)
        err = (out.double() - ref).abs().max().item() / torch.nan_to_num(v).abs().max().item()
        assert err <= 1e-5, err


# ---------------------------------------------------------------- the training kernels' head dim split
def test_training_head_dims_split_where_padding_wastes():
    """``launch.head_dim_split``: 192 = 128 + 64 (Q·Kᵀ over 192 columns, not 256), 48 = 32 + 16, 40 = 32 + 8;
    no split (tail 0, compiled out) where it saves nothing: powers of two, 200 (128 + 72 pads to 256 too),
    24 (16 + 8 pads to 32 too)."""
    from generator.runtime import launch

    assert [launch.head_dim_split(d) for d in (192, 160, 96, 48, 40)] == [(128, 64), (128, 32), (64, 32), (32, 16),
                                                                          (32, 8)]
    assert all(launch.head_dim_split(d) == (d, 0) for d in (8, 16, 24, 32, 64, 128, 200, 256))


@pytest.mark.parametrize("D, Dv", [(40, 24), (48, 48)], ids=["D40-Dv24", "D48-Dv48"])
def test_split_head_dim_forward_backward(D, Dv):
    """The forward split at 32 + 8 (a tail narrower than its 16-wide tile) and 32 + 16 (D_v = D), fp32,
    GQA, causal bottom-right, padding keys holding NaN (the tail's loads are masked as the main part's)."""
    q, k, v, do = _inputs(D, Dv, 4, 2, torch.float32, Nq=20, Nk=33, seed=7)
    k[:, :, 27:], v[:, :, 27:] = float("nan"), float("nan")
    _check(q, k, v, do, causal=True, alignment="bottom_right", key_lengths=torch.tensor([27]))


def test_split_head_dim_tma_path_equals_the_pointer_path():
    """The TMA path (interpreted descriptors) reads the tails through descriptors of block BLOCK_DT at
    column HEAD_DIM: at D = 48 (32 + 16) it equals the pointer path bit for bit and the float64 reference."""
    q, k, v, _ = _inputs(48, 32, 2, 2, torch.float32, seed=8)
    out_tma, lse_tma = on_device(flash_attention, q, k, v, return_lse=True, block=BLOCK, tma=True, causal=True)
    out_ptr, lse_ptr = on_device(flash_attention, q, k, v, return_lse=True, block=BLOCK, tma=False, causal=True)
    ref_out, ref_lse = reference.attention(q.double(), k.double(), v.double(), causal=True)
    assert attention_failures(out_tma, lse_tma, ref_out, ref_lse, v, q=q, k=k) == []
    assert torch.equal(out_tma, out_ptr) and torch.equal(lse_tma, lse_ptr)


def test_a_dropped_tail_in_the_forward_is_caught(monkeypatch, tmp_path):
    """Mutant: the forward printed with QK_TAIL's product dropped (S = the main columns' only). Claim
    head_dim_split refutes the term, and the kernel rendered with it fails the float64 check at D = 48."""
    from dataclasses import replace

    from generator import manifest, render
    from generator.variants import BlockConfig
    from spec import notation as n
    from spec import terms as T
    from spec.proofs.kernel import prove_head_dim_split

    dropped = replace(T.QK_TAIL, expr=n.qk)
    assert not prove_head_dim_split(qk_tail=(dropped,)).proved
    monkeypatch.setattr(T, "QK_TAIL", dropped)
    variant = BlockConfig(*BLOCK).variants()[0]  # the forward (KINDS["fwd"] first)
    path = tmp_path / "mutant_dropped_tail.py"
    path.write_text(render.render_variant(variant))
    mutant = manifest.import_file(path)
    q, k, v, _ = _inputs(48, 32, 2, 2, torch.float32, seed=9)
    out, lse = on_device(mutant.forward, q, k, v, sm_scale=48 ** -0.5)
    ref_out, ref_lse = reference.attention(q.double(), k.double(), v.double())
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k) != []


def test_split_head_dim_varlen_forward():
    """The packed-batch forward with the head dim split (48 = 32 + 16): the tails are read through the
    segment-moved Q and K pointers, causal, GQA 4/2, D_v = 32, fp32, against float64."""
    g = torch.Generator().manual_seed(10)
    cu_q, cu_k = torch.tensor([0, 5, 17], dtype=torch.int32), torch.tensor([0, 9, 30], dtype=torch.int32)
    q, k, v = torch.randn(17, 4, 48, generator=g), torch.randn(30, 2, 48, generator=g), torch.randn(30, 2, 32, generator=g)
    out, lse = flash_attention_varlen(*to_device((q, k, v, cu_q, cu_k)), causal=True, return_lse=True, block=BLOCK)
    out, lse = to_cpu((out, lse))
    ref_out, ref_lse = reference.varlen_attention(q.double(), k.double(), v.double(), cu_q, cu_k, causal=True)
    assert out.shape == (17, 4, 32)
    assert attention_failures(out[None], lse.T[None], ref_out[None], ref_lse.T[None], v) == []


# ---------------------------------------------------------------- the backward's head dim split
@pytest.mark.parametrize("D, Dv", [(192, 128), (128, 64)], ids=["D192-Dv128", "D128-Dv64"])
def test_backward_at_the_issue_head_dims(D, Dv):
    """The issue's training pairs at a tiny N (interpreter): (192, 128) runs the backward split as 128 + 64
    (Sᵀ, dK and dQ each as a main and a tail product, claim head_dim_split), (128, 64) unsplit with D_v = D/2.
    fp32, GQA 2/1, causal bottom-right, padding keys holding NaN, forward and gradients against float64."""
    q, k, v, do = _inputs(D, Dv, 2, 1, torch.float32, Nq=9, Nk=14, seed=14)
    k[:, :, 11:], v[:, :, 11:] = float("nan"), float("nan")
    _check(q, k, v, do, causal=True, alignment="bottom_right", key_lengths=torch.tensor([11]))


def test_split_head_dim_varlen_backward():
    """The packed-batch backward with the head dim split (48 = 32 + 16): the q, k tails read and the dq, dk
    tails written through the segment-moved pointers (claim varlen_addresses), causal, GQA 4/2, D_v = 32,
    fp32, the gradients against float64."""
    g = torch.Generator().manual_seed(15)
    cu_q, cu_k = torch.tensor([0, 5, 13], dtype=torch.int32), torch.tensor([0, 9, 21], dtype=torch.int32)
    q, k, v = torch.randn(13, 4, 48, generator=g), torch.randn(21, 2, 48, generator=g), torch.randn(21, 2, 32, generator=g)
    do = torch.randn(13, 4, 32, generator=g)
    leaves = [to_device(t).detach().clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention_varlen(*leaves, *to_device((cu_q, cu_k)), causal=True, block=BLOCK)
    out.backward(to_device(do))
    grads = to_cpu(tuple(t.grad for t in leaves))
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref_out, _ = reference.varlen_attention(*ref_leaves, cu_q, cu_k, causal=True)
    ref_out.backward(do.double())
    errors = _grad_errors(grads, [t.grad for t in ref_leaves])
    assert all(e <= GRAD_TOLERANCES_EMPIRICAL[torch.float32] for e in errors), errors


def test_an_unscaled_tail_gradient_is_caught(monkeypatch, tmp_path):
    """Mutant: the backward printed with dK's tail columns left unscaled (no × sm_scale after the loop: the
    main columns' BACKWARD_SCALE not carried to the tail). Claim head_dim_split refutes the term, and the kernel
    rendered with it fails the float64 check of dk at D = 48 (32 + 16), while dq and dv stay right. (A tail
    product taken with the main columns does not compile: the main and tail tiles differ in width.)"""
    from dataclasses import replace

    from generator import manifest, render
    from generator.variants import BlockConfig
    from spec import notation as n
    from spec import terms as T
    from spec.proofs.kernel import prove_head_dim_split

    tail = list(T.BACKWARD_TAIL)
    tail[2] = replace(tail[2], expr=n.dk_tail)
    assert not prove_head_dim_split(backward_tail=tuple(tail)).proved
    monkeypatch.setattr(T, "BACKWARD_TAIL", tuple(tail))
    variant = next(v for v in BlockConfig(*BLOCK).variants() if v.kind.name == "bwd")
    path = tmp_path / "mutant_unscaled_tail.py"
    path.write_text(render.render_variant(variant))
    mutant = manifest.import_file(path)
    q, k, v, do = _inputs(48, 32, 2, 2, torch.float32, Nq=10, Nk=13, seed=16)
    out, lse = reference.attention(q.double(), k.double(), v.double())
    grads = on_device(mutant.backward, do, q, k, v, out.float(), lse.float(), sm_scale=48 ** -0.5)[:3]
    _, _, ref_grads = _reference(q, k, v, do)
    errors = _grad_errors(grads, ref_grads)
    assert errors[1] > GRAD_TOLERANCES_EMPIRICAL[torch.float32] and max(errors[0], errors[2]) <= 1e-4, errors


# ---------------------------------------------------------------- the forward's launch settings at MLA pairs
def test_forward_settings_keyed_by_both_head_dims():
    """The forward's launch settings are keyed by the padded widths of q/k and of v
    (``launch.fwd_settings_key``), so DeepSeek's (192, 128) on the 64x64 pointer path (sm_80's default,
    sm_90's fallback) runs the MLA bucket of generator.variants.FWD_SM80 (4 warps, 2 stages; its packed
    kernel one stage), while the square 192 and 256, (256, 128), dropout, FP8 and a mask_mod keep the
    square bucket's 8 warps (4 spill there: the table's docstring). Keyed by the wider width alone, as
    before, (192, 128) took 8 warps."""
    from generated import attention_fwd_br64_bc64 as fwd, attention_fwd_maskmod_document_br64_bc64 as fwd_mm
    from generator.variants import FWD_SM80

    mla, square = FWD_SM80[(64, 64)][(192, 128)], FWD_SM80[(64, 64)][256]
    assert (mla["num_warps"], square["num_warps"]) == (4, 8)
    for arch in (80, 90):
        assert fwd.launch_settings(arch, 192, 128) == mla
        assert fwd.launch_settings(arch, 192, 64) == mla
        assert fwd.launch_settings(arch, 192, 128, varlen=True) == dict(mla, num_stages=1)
        for d, dv in ((192, 192), (256, 128), (128, 256), (256, 256)):
            assert fwd.launch_settings(arch, d, dv) == square, (d, dv)
        assert fwd.launch_settings(arch, 192, 128, dropout=True) == square
        assert fwd.launch_settings(arch, 192, 128, fp8=True) == square
        assert fwd_mm.launch_settings(arch, 192, 128) == square
        assert fwd.launch_settings(arch, 128, 64) == fwd.launch_settings(arch, 128)  # the (128, 128) bucket
    # the ahead-of-time compile (benchmarks.static) takes the same settings as the launch
    a = fwd.aot_compile_args("bf16", 192, head_dim_v=128, arch=80)
    assert (a["num_warps"], a["num_stages"]) == (4, 2)
    a = fwd.aot_compile_args("bf16", 192, head_dim_v=128, arch=80, dropout=True)
    assert (a["num_warps"], a["num_stages"]) == (8, 2)
