"""Issue 11, no silent wrong answer: each row of the issue's table, padding never read, the
accepted input range (``spec.assumptions``) enforced, torch.compile (inductor) and opcheck,
no stale caches, the first-hour rough edges, and a Hypothesis property over memory layouts.

Small sizes (the kernels run in Triton's interpreter); every case is compared with the float64
reference of ``spec.reference`` (forward and, where it matters, backward) with the tolerances
of ``generator.checking`` / ``test_backward``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import generated
from attention_cases import DEVICE, on_device, to_cpu, to_device
from generated import flash_attention, softmax
from generator import manifest
from generator.checking import attention_failures
from generator.variants import BlockConfig
from spec.reference import attention as reference
from test_backward import grad_failures

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = sorted(generated.KERNELS)
SMALL = (16, 32)  # the cheapest checked-in block: most cases run on it


def inputs(B=1, Hq=2, Hkv=1, Nq=20, Nk=30, D=16, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=gen).to(dtype)
                 for shape in ((B, Hq, Nq, D), (B, Hkv, Nk, D), (B, Hkv, Nk, D), (B, Hq, Nq, D)))


def kernel_fwd_bwd(q, k, v, do, **kw):
    """``(out, lse, (dq, dk, dv))`` of the public entry point on the test device, back on CPU."""
    q, k, v = (to_device(t).detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(q, k, v, return_lse=True, **to_device(kw))
    out.backward(to_device(do))
    return to_cpu((out.detach(), lse, (q.grad, k.grad, v.grad)))


def reference_fwd_bwd(q, k, v, do, **kw):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, lse = reference(q, k, v, **kw)
    out.backward(do.double())
    return out.detach(), lse, (q.grad, k.grad, v.grad)


def fwd_bwd_failures(q, k, v, do, *, ref_qkv=None, **kw) -> list[str]:
    """Kernel vs reference, forward and backward. ``ref_qkv``: the reference's inputs when the
    kernel's hold padding the reference must not see."""
    out, lse, grads = kernel_fwd_bwd(q, k, v, do, **kw)
    ref_kw = {key: val for key, val in kw.items() if key != "block"}
    ref_out, ref_lse, ref_grads = reference_fwd_bwd(*(ref_qkv or (q, k, v)), do, **ref_kw)
    return attention_failures(out, lse, ref_out, ref_lse, v) + grad_failures(grads, ref_grads, q.dtype)


# ==================================================================================
# Rows 1-9 of the issue's table
# ==================================================================================
@pytest.mark.parametrize("scale", [0.0, -0.5, -2.0, 0.25])
def test_row1_any_finite_scale_matches_the_reference(scale):
    """scale <= 0 used to give all-NaN rows (the running max assumes s > 0): now rewritten on the
    host to s' = |s| with q' = sign(s)·q (claim scale_sign_rewrite); dq keeps its sign."""
    q, k, v, do = inputs(Nq=16, Nk=16)
    assert fwd_bwd_failures(q, k, v, do, scale=scale, causal=True, key_lengths=torch.tensor([11]),
                            block=SMALL) == []


def test_row1_issue_example():
    q = torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    for scale in (0.0, -1.0):
        out = on_device(flash_attention, q, q, q, scale=scale, causal=True)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), reference(q, q, q, scale=scale, causal=True)[0], atol=1e-5,
                                   rtol=1e-5)


def test_row2_non_contiguous_key_lengths():
    q, k, v, do = inputs(B=2, Nk=40)
    lengths = torch.tensor([[5, 7], [40, 9]])[:, 0]  # stride 2
    assert not lengths.is_contiguous()
    assert fwd_bwd_failures(q, k, v, do, key_lengths=lengths, block=SMALL) == []


def _poisoned(k, v, lengths, value):
    """Copies of k, v with ``value`` (NaN, inf) at every key >= lengths[b], and the clean ones."""
    k2, v2, kc, vc = k.clone(), v.clone(), k.clone(), v.clone()
    for b, n in enumerate(lengths.tolist()):
        k2[b, :, n:], v2[b, :, n:] = value, value
        kc[b, :, n:], vc[b, :, n:] = 0.0, 0.0
    return k2, v2, kc, vc


PADDING_CASES = [(block, float("nan")) for block in BLOCKS] + [(SMALL, float("inf")), (SMALL, float("-inf"))]


@pytest.mark.parametrize("block, value", PADDING_CASES, ids=[f"{b}-{v}" for b, v in PADDING_CASES])
def test_row3_padding_is_never_read(block, value):
    """Keys at index >= key_lengths[b] hold NaN / inf (a KV cache from torch.empty): out, lse and
    every gradient equal the reference on clean inputs, and the padding keys' dK, dV are 0."""
    q, k, v, do = inputs(B=3, Hq=2, Hkv=1, Nq=9, Nk=37, D=16, seed=3)
    lengths = torch.tensor([20, 37, 0])
    k2, v2, kc, vc = _poisoned(k, v, lengths, value)
    for causal in (False, True):
        kw = dict(key_lengths=lengths, causal=causal, alignment="bottom_right")
        out, lse, (dq, dk, dv) = kernel_fwd_bwd(q, k2, v2, do, block=block, **kw)
        ref_out, ref_lse, ref_grads = reference_fwd_bwd(q, kc, vc, do, **kw)
        assert attention_failures(out, lse, ref_out, ref_lse, v) == []
        assert grad_failures((dq, dk, dv), ref_grads, q.dtype) == []
        assert not dk[0, :, 20:].any() and not dv[0, :, 20:].any()


def test_padding_is_never_read_on_the_tma_path():
    """TMA zero-fills only past N_K: the forward's partial tiles zero padding keys themselves."""
    from generator.runtime import launch

    if launch.tma_unsupported(torch.device(DEVICE)):
        pytest.skip(launch.tma_unsupported(torch.device(DEVICE)))
    q, k, v, _ = inputs(B=2, Hq=2, Hkv=1, Nq=9, Nk=37, D=16, seed=3)
    lengths = torch.tensor([20, 5])
    k2, v2, kc, vc = _poisoned(k, v, lengths, float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", launch.TmaFallbackWarning)  # the TMA path itself, not the fallback
        out, lse = on_device(flash_attention, q, k2, v2, key_lengths=lengths, tma=True, return_lse=True, block=SMALL)
    assert attention_failures(out, lse, *reference(q, kc, vc, key_lengths=lengths), v) == []


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_padding_past_n_k_is_never_read(block):
    """k, v are views of a longer buffer whose tail (keys >= N_k) is NaN: never read either."""
    q, k, v, do = inputs(B=1, Nq=9, Nk=37, seed=4)
    big_k = torch.full((1, 1, 64, 16), float("nan"))
    big_v = torch.full((1, 1, 64, 16), float("inf"))
    big_k[:, :, :37], big_v[:, :, :37] = k, v
    out, lse, grads = kernel_fwd_bwd(q, big_k[:, :, :37], big_v[:, :, :37], do, block=block, causal=True)
    ref_out, ref_lse, ref_grads = reference_fwd_bwd(q, k, v, do, causal=True)
    assert attention_failures(out, lse, ref_out, ref_lse, v) == []
    assert grad_failures(grads, ref_grads, q.dtype) == []


@pytest.mark.parametrize("window", [(4, 2**31 - 1), (2**31 - 1, 2**31 - 1), (2**40, 3), (np.int64(4), 2**31)])
def test_row4_huge_window_sides(window):
    """A side past int32 used to overflow the kernels' tile bounds (every row empty): the host
    clamps each side to N_q + N_k (claim window_clamp), which attends the same keys."""
    q, k, v, do = inputs(Nq=20, Nk=30)
    wide = tuple(min(int(w), 10**6) for w in window)
    out, lse = on_device(flash_attention, q, k, v, window=window, return_lse=True, block=SMALL)
    assert attention_failures(out, lse, *reference(q, k, v, window=wide), v) == []


@pytest.mark.parametrize("how", ["numpy", "data"])
def test_row5_mask_edited_in_place_between_calls(how):
    """No block map cached on mask._version: an edit through .numpy() or .data (no version bump)
    is seen by the next call, forward and backward."""
    if DEVICE != "cpu" and how == "numpy":
        pytest.skip(".numpy() needs a CPU tensor")
    q, k, v, do = inputs(Nq=20, Nk=40)
    mask = torch.rand(20, 40, generator=torch.Generator().manual_seed(5)) > 0.5
    mask[:, 32:] = False  # the second key tile of 32 is empty: a cached map would skip it
    mask = to_device(mask)
    first = flash_attention(*to_device((q, k, v)), mask=mask, block=SMALL)
    if how == "numpy":
        mask.numpy()[:, 32:] = True
    else:
        mask.data[:, 32:] = True
    edited = to_cpu(mask)
    assert fwd_bwd_failures(q, k, v, do, mask=mask, block=SMALL) == []
    assert not torch.equal(to_cpu(first), kernel_fwd_bwd(q, k, v, do, mask=mask, block=SMALL)[0])
    assert torch.equal(to_cpu(mask), edited)


def test_row6_softmax_is_differentiable():
    x = torch.randn(3, 50, generator=torch.Generator().manual_seed(6))
    w = torch.randn(3, 50, generator=torch.Generator().manual_seed(7))
    for dim, block in ((-1, SMALL), (0, (64, 64))):  # one-pass and two-pass kernels
        xs = to_device(x.clone().requires_grad_())
        ((softmax(xs, dim=dim, block=block) * to_device(w)).sum() + xs.sum()).backward()
        xt = x.clone().requires_grad_()
        ((torch.softmax(xt, dim=dim) * w).sum() + xt.sum()).backward()
        torch.testing.assert_close(to_cpu(xs.grad), xt.grad, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def out_package(tmp_path_factory):
    """A package emitted with ``--out`` for a block the repo's generated/ lacks (16, 16), imported
    by its own name."""
    root = tmp_path_factory.mktemp("out")
    manifest.emit(BlockConfig(16, 16), root / "kernels_rel11")
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("kernels_rel11")
    finally:
        sys.path.remove(str(root))


def test_row7_out_package_dispatches_to_itself(out_package):
    assert (16, 16) not in generated.KERNELS and (16, 16) in out_package.KERNELS
    q, k, v, do = inputs(Nq=20, Nk=30)
    out, lse = on_device(out_package.flash_attention, q, k, v, causal=True, block=(16, 16), return_lse=True)
    assert attention_failures(out, lse, *reference(q, k, v, causal=True), v) == []
    x = torch.randn(4, 40)
    torch.testing.assert_close(on_device(out_package.softmax, x, block=(16, 16)), torch.softmax(x, -1))
    with pytest.raises(ValueError, match="no generated fwd kernel in kernels_rel11"):
        on_device(out_package.flash_attention, q, k, v, block=(64, 64))  # the repo's block: not this package's


# ---- rows 8 and 9: torch.compile with inductor, fwd + bwd ----------------------------------
B_, HQ_, HKV_, N_, D_ = 2, 4, 2, 24, 16


def _compiled_case(x, kx, vx, lengths, mask, scale=None):
    """FlashAttention's native (B, N, H, D) layout, transposed views in; key_lengths, a mask, a
    window, causal and GQA at once."""
    out = flash_attention(x.transpose(1, 2), kx.transpose(1, 2), vx.transpose(1, 2), key_lengths=lengths,
                          mask=mask, window=(5, 3), causal=True, scale=scale, block=SMALL)
    return out.transpose(1, 2)


@pytest.fixture(scope="module")
def compiled_run():
    """One inductor compile (fullgraph) of the case, run forward and backward; shared by the tests."""
    gen = torch.Generator().manual_seed(8)
    x, kx, vx = (torch.randn(B_, N_, h, D_, generator=gen) for h in (HQ_, HKV_, HKV_))
    lengths, mask = torch.tensor([17, 24]), torch.rand(N_, N_, generator=gen) > 0.3
    do = torch.randn(B_, N_, HQ_, D_, generator=gen)
    compiled = torch.compile(_compiled_case, backend="inductor", fullgraph=True)
    leaves = [to_device(t).clone().requires_grad_() for t in (x, kx, vx)]
    out = compiled(*leaves, to_device(lengths), to_device(mask))
    out.backward(to_device(do))
    return (x, kx, vx, lengths, mask, do), to_cpu((out.detach(), *(t.grad for t in leaves)))


def test_row8_row9_inductor_fullgraph_forward_and_backward(compiled_run):
    (x, kx, vx, lengths, mask, do), (out, *grads) = compiled_run
    qkv = [t.transpose(1, 2) for t in (x, kx, vx)]
    kw = dict(key_lengths=lengths, mask=mask, window=(5, 3), causal=True)
    ref_out, ref_lse, ref_grads = reference_fwd_bwd(*qkv, do.transpose(1, 2), **kw)
    assert attention_failures(out.transpose(1, 2), ref_lse.float(), ref_out, ref_lse, qkv[2]) == []
    assert grad_failures([g.transpose(1, 2) for g in grads], ref_grads, torch.float32) == []


def test_compiled_graph_has_no_host_check_and_matches_eager(compiled_run):
    (x, kx, vx, lengths, mask, do), (out, *grads) = compiled_run
    leaves = [to_device(t).clone().requires_grad_() for t in (x, kx, vx)]
    eager = _compiled_case(*leaves, to_device(lengths), to_device(mask))
    eager.backward(to_device(do))
    assert torch.equal(to_cpu(eager.detach()), out)
    for got, want in zip(grads, to_cpu([t.grad for t in leaves])):
        assert torch.equal(got, want)


def _op_cases():
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(1, 20, 2, 16, generator=gen)
    kx = torch.randn(1, 24, 1, 16, generator=gen)
    contiguous = (x.transpose(1, 2).contiguous(), kx.transpose(1, 2).contiguous())
    strided = (x.transpose(1, 2), kx.transpose(1, 2))  # (B, N, H, D) memory
    lengths = torch.tensor([[13, 5]])[:, 0]
    return {"contiguous": contiguous, "transposed": strided, "lengths": lengths}


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_opcheck_every_op(layout):
    """torch.library.opcheck (schema, autograd registration, fake tensors, aot dispatch) for the
    forward op, the backward op and the softmax op, on contiguous and non-contiguous inputs."""
    cases = _op_cases()
    q, k = to_device(cases[layout])
    q, k = q.requires_grad_(), k.requires_grad_()
    lengths = to_device(cases["lengths"])
    args = (q, k, k, None, lengths, True, "top_left", [4, 3], 0.3, 16, 32, False, "generated")
    torch.library.opcheck(torch.ops.flashproof.flash_attention.default, args)
    out, lse = torch.ops.flashproof.flash_attention(*args)
    do = torch.randn_like(out)
    do = do if layout == "contiguous" else do.transpose(2, 3).contiguous().transpose(2, 3)
    bargs = (do, None, q.detach(), k.detach(), k.detach(), out.detach(), lse.detach(), None, lengths, True,
             "top_left", [4, 3], 0.3, 16, 32, "generated")
    torch.library.opcheck(torch.ops.flashproof.flash_attention_backward.default, bargs)
    rows = to_device(torch.randn(6, 5))
    rows = (rows if layout == "contiguous" else rows.t()).requires_grad_()
    torch.library.opcheck(torch.ops.flashproof.softmax.default, (rows, 16, 32, "generated"))


# ==================================================================================
# One source for the accepted input range: every assumption is enforced
# ==================================================================================
def _meta(*shape, stride=None):
    return torch.empty_strided(shape, stride or torch.empty(shape, device="meta").stride(), device="meta")


def _rejects(match, **kwargs):
    """flash_attention rejects the input (a value rule: with the opt-in value checks, which are on here)."""
    def run():
        from generator.runtime import contract

        q, k, v, _ = inputs()
        args = {"q": q, "k": k, "v": v, **kwargs}
        with pytest.raises((ValueError, TypeError), match=match), contract.checking_values():
            on_device(flash_attention, args.pop("q"), args.pop("k"), args.pop("v"), **args)
    return run


def _normalised(**kwargs):
    """The input is outside the assumption but its rewrite gives the reference's answer."""
    def run():
        q, k, v, do = inputs()
        ref_kw = {key: (tuple(min(w, 10**6) for w in val) if key == "window" else val) for key, val in kwargs.items()}
        out, lse, grads = kernel_fwd_bwd(q, k, v, do, block=SMALL, **kwargs)
        ref_out, ref_lse, ref_grads = reference_fwd_bwd(q, k, v, do, **ref_kw)
        assert attention_failures(out, lse, ref_out, ref_lse, v) == []
        assert grad_failures(grads, ref_grads, q.dtype) == []
    return run


def _index_int32():
    from generator.runtime import checks

    wide = _meta(1, 1, 2, 16, stride=(2**32, 2**32, 2**31, 1))  # (N-1)·stride_N = 2^31: one past int32
    with pytest.raises(ValueError, match=r"2\^31 - 1.*index_int32"):
        checks.check_index_width(k=wide)
    checks.check_index_width(k=_meta(1, 1, 2, 16, stride=(2**32, 2**32, 2**31 - 16, 1)))  # just inside


def _seq_len_int32():
    from generator.runtime import checks  # flash_attention's first check (meta tensors: no memory)

    q, k = _meta(1, 1, 1, 16), _meta(1, 1, 2**29, 16)  # N_q + N_k = 2^29 + 1
    with pytest.raises(ValueError, match="seq_len_int32"):
        checks.check_qkv(q, k, k)
    checks.check_qkv(q, k[:, :, 1:], k[:, :, 1:])  # 2^29: just inside


def _key_len_range():
    from generator.runtime import contract, dispatch

    with contract.checking_values():  # the opt-in checks reject
        _rejects(r"\[0, N_k=30\].*key_len_range", key_lengths=torch.tensor([31]))()
        _rejects(r"key_len_range", key_lengths=torch.tensor([-1]))()
    # by default each length is clamped on the device (the declared rule's clamp is the launch's)
    q, k, v, _ = inputs()
    assert dispatch.lengths_argument(torch.tensor([-3, 31, 7]), k).tolist() == [0, 30, 7]
    assert torch.equal(on_device(flash_attention, q, k, v, key_lengths=torch.tensor([31])),
                       on_device(flash_attention, q, k, v, key_lengths=torch.tensor([30])))


def _block_sizes():
    from generator.variants import BlockConfig  # the generator emits no other tile edge

    with pytest.raises(ValueError, match="--br"):
        BlockConfig(48, 64)
    BlockConfig(16, 256)  # just inside


def _dropout_counter():
    """B·Hq·N_q·N_k one past 2^62 with dropout on: rejected before any tensor is read."""
    from generator.runtime import checks

    with pytest.raises(ValueError, match=r"2\^62.*dropout_counter"):
        checks.check_dropout(0.1, False, 2**62 + 1)
    assert checks.check_dropout(0.1, False, 2**62) == 0.1
    assert checks.check_dropout(0.0, False, 2**62 + 1) == 0.0  # no dropout, no counter


def _decode_rejects(match, *, paged=False, page_size=16, clamped=None, **kwargs):
    """flash_attention_with_kvcache rejects an input just outside the assumption (issue 23; a value
    rule with the opt-in checks, and by default gives the result of the call with the values
    ``clamped``)."""
    def run():
        from generated import flash_attention_with_kvcache

        q, k = torch.zeros(1, 1, 1, 16), torch.zeros((3, page_size, 1, 16) if paged else (1, 32, 1, 16))
        args = {"cache_seqlens": torch.tensor([20], dtype=torch.int32), **kwargs}
        if paged:
            args.setdefault("block_table", torch.tensor([[0, 1]], dtype=torch.int32))
        from generator.runtime import contract

        with pytest.raises((ValueError, TypeError), match=match), contract.checking_values():
            on_device(flash_attention_with_kvcache, q, k, k, **args)
        if clamped:  # by default the value is clamped into range on the device: the clamped call's result
            got = on_device(flash_attention_with_kvcache, q, k, k, **args)
            assert torch.equal(got, on_device(flash_attention_with_kvcache, q, k, k, **{**args, **clamped}))
    return run


def _mask_args_int32():
    from spec.masks import prefix_lm

    _rejects(r"mask_args_int32", mask_mod=prefix_lm, mask_args={"prefix": -2**30 - 1}, block=SMALL)()
    _normalised(mask_mod=prefix_lm, mask_args={"prefix": -2**30}, causal=True)()  # just inside


def _merge_head_dim_max():
    from generated import merge_state

    o, lse = torch.zeros(2, 1025), torch.zeros(2)
    with pytest.raises(ValueError, match="merge_head_dim_max"):
        on_device(merge_state, o, lse, o, lse)


def _head_dim_max():
    """q/k's D and v's D_v (MLA: they may differ) each rejected one past 256; (256, 16) and (16, 256) inside."""
    from generator.runtime import checks

    _rejects("head_dim 257 outside 1..256", q=torch.zeros(1, 1, 4, 257), k=torch.zeros(1, 1, 4, 257),
             v=torch.zeros(1, 1, 4, 257))()
    _rejects(r"head_dim 257 outside 1..256 is not supported \(v:.*head_dim_max", q=torch.zeros(1, 1, 4, 16),
             k=torch.zeros(1, 1, 4, 16), v=torch.zeros(1, 1, 4, 257))()
    for d, dv in ((256, 16), (16, 256)):
        checks.check_qkv(_meta(1, 1, 4, d), _meta(1, 1, 4, d), _meta(1, 1, 4, dv))


def _decode_head_dim_max():
    """The absorbed MLA decode's limits: D = 577 or D_v = 513 rejected; (576, 512) with v a view of the
    k cache runs (a 20-key cache: the interpreter pads D to 1024)."""
    from generated import flash_attention_with_kvcache

    lens = torch.tensor([20], dtype=torch.int32)
    for d, dv, match in ((577, 512, "head_dim 577 outside 1..576"),
                         (576, 513, r"head_dim 513 outside 1..512 is not supported \(v_cache:")):
        k = torch.zeros(1, 32, 1, d)
        with pytest.raises(ValueError, match=match + r".*decode_head_dim_max"):
            on_device(flash_attention_with_kvcache, torch.zeros(1, 1, 1, d), k, k[..., :dv], lens)
    k = torch.randn(1, 32, 1, 576, generator=torch.Generator().manual_seed(0))
    out = on_device(flash_attention_with_kvcache, torch.ones(1, 1, 1, 576) / 24, k, k[..., :512], lens)
    assert out.shape == (1, 1, 1, 512) and torch.isfinite(out).all()


def _grid_axes():
    """B or Hq one past CUDA's 65535-program grid axis is refused naming the limit (the check itself: no tensor
    of 65536 heads is built), 65535 accepted; flash_attention refuses 2 heads with the limit lowered to 1."""
    from generator.runtime import checks
    from spec import assumptions

    for B, H in ((65536, 1), (1, 65536)):
        with pytest.raises(ValueError, match=r"more than the 65535 .*grid_axes"):
            checks.check_grid_axes("q", B, H)
    checks.check_grid_axes("q", 65535, 65535)
    old = assumptions.ASSUMPTIONS["grid_axes"]
    assumptions.ASSUMPTIONS["grid_axes"] = assumptions.Assumption(old.name, old.statement, old.enforcement, 1)
    try:
        _rejects(r"q: 2 query heads are more than the 1 .*grid_axes")()
    finally:
        assumptions.ASSUMPTIONS["grid_axes"] = old


ENFORCED = {
    "grid_axes": _grid_axes,
    "decode_head_dim_max": _decode_head_dim_max,
    "cache_len_range": _decode_rejects(r"\[0, 32\].*cache_len_range", cache_seqlens=torch.tensor([33],
                                                                                                 dtype=torch.int32),
                                       clamped=dict(cache_seqlens=torch.tensor([32], dtype=torch.int32))),
    "page_ids_range": _decode_rejects(r"page_ids_range", paged=True, block_table=torch.tensor([[0, 3]],
                                                                                            dtype=torch.int32),
                                      clamped=dict(block_table=torch.tensor([[0, 2]], dtype=torch.int32))),
    "page_sizes": _decode_rejects(r"page_sizes", paged=True, page_size=24, cache_seqlens=torch.tensor([8],
                                                                                                   dtype=torch.int32)),
    "num_splits_max": _decode_rejects(r"0\.\.64.*num_splits_max", num_splits=65),
    "merge_head_dim_max": _merge_head_dim_max,
    "mask_args_int32": _mask_args_int32,
    # FP8 (issue 30): a descale <= 0 (claim fp8_descale's descales are positive)
    "fp8_descales": _rejects(r"finite and > 0.*fp8_descales", q=inputs()[0].to(torch.float8_e4m3fn),
                             k=inputs()[1].to(torch.float8_e4m3fn), v=inputs()[2].to(torch.float8_e4m3fn),
                             k_descale=-torch.ones(inputs()[1].shape[:2])),
    "dtypes": _rejects("supported: float16, bfloat16, float32", q=inputs()[0].double(), k=inputs()[1].double(),
                       v=inputs()[2].double()),
    "head_dim_max": _head_dim_max,
    "gqa_divides": _rejects("multiple of key/value heads", q=torch.zeros(1, 3, 4, 16), k=torch.zeros(1, 2, 4, 16),
                            v=torch.zeros(1, 2, 4, 16)),
    "scale_finite": _rejects("finite number", scale=float("inf")),
    "scale_positive": _normalised(scale=-1e-3),
    "key_len_range": _key_len_range,
    "window_nonneg": _rejects("non-negative ints", window=(-1, 0)),
    "window_bounded": _normalised(window=(2**31, 2**31 - 1)),
    "seq_len_int32": _seq_len_int32,
    "index_int32": _index_int32,
    "block_sizes": _block_sizes,
    "alignment_shift": _rejects("alignment must be one of", alignment="middle"),
    "dropout_p_range": _rejects(r"dropout_p must be in \[0, 1\).*dropout_p_range", dropout_p=1.0),
    "dropout_counter": _dropout_counter,
}


def test_every_assumption_has_an_enforcement_test():
    from spec.assumptions import ASSUMPTIONS

    assert set(ENFORCED) == set(ASSUMPTIONS), "each assumption needs an input just outside it in ENFORCED"


@pytest.mark.parametrize("name", list(ENFORCED))
def test_runtime_enforces_the_assumption(name):
    from spec.assumptions import ASSUMPTIONS

    assumption = ASSUMPTIONS[name]
    assert assumption.enforcement.startswith(("reject", "rewrite: ", "clamp"))
    if assumption.enforcement.startswith("rewrite: "):  # names a claim that proves the rewrite
        from spec.claims import REGISTRY

        claim = assumption.enforcement.split()[1]
        assert claim in REGISTRY and REGISTRY[claim].prove().proved
    ENFORCED[name]()


def test_runtime_limits_are_read_from_the_assumptions(monkeypatch):
    """The checks read ASSUMPTIONS: lowering a limit there changes what the runtime accepts."""
    from generator.runtime import checks
    from spec import assumptions

    monkeypatch.setitem(assumptions.ASSUMPTIONS, "seq_len_int32",
                        assumptions.Assumption("seq_len_int32", "test", "reject", 40))
    q, k, v, _ = inputs(Nq=20, Nk=30)
    with pytest.raises(ValueError, match="exceeds 40"):
        checks.check_qkv(q, k, v)
    assert checks.MAX_HEAD_DIM == assumptions.limit("head_dim_max")
    assert [str(d).split(".")[1] for d in checks.DTYPES] == list(assumptions.limit("dtypes"))


# ==================================================================================
# Rough edges of the first hour
# ==================================================================================
@pytest.mark.parametrize("shape", ["B=0", "N_q=0", "N_k=0"])
def test_empty_inputs_give_empty_results_like_sdpa(shape):
    B, Nq, Nk = {"B=0": (0, 5, 6), "N_q=0": (1, 0, 6), "N_k=0": (1, 5, 0)}[shape]
    q, k, v, _ = inputs(B=B, Hq=2, Hkv=2, Nq=Nq, Nk=Nk)
    q, k, v = (to_device(t).requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(q, k, v, return_lse=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.detach(), k.detach(), v.detach())
    assert out.shape == sdpa.shape and lse.shape == (B, 2, Nq)
    assert not out.any() and torch.isneginf(lse).all()
    out.sum().backward()
    assert q.grad.shape == q.shape and not q.grad.any()


def test_value_of_another_batch_head_or_length_is_rejected_by_name():
    """v may have its own head dim (MLA, issue 27), not its own (batch, heads, keys)."""
    q, k, v, _ = inputs(D=16)
    with pytest.raises(ValueError, match=r"v must have k's shape \(\d+, \d+, \d+\) in every dim but the last"):
        flash_attention(q, k, torch.zeros(1, 1, 29, 8))


def test_forward_mode_ad_raises_like_sdpa():
    import torch.autograd.forward_ad as fwAD

    q, k, v, _ = to_device(inputs())
    with fwAD.dual_level():
        dual = fwAD.make_dual(q, torch.randn_like(q))
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            flash_attention(dual, k, v)


def test_double_backward_errors_at_the_first_create_graph_call():
    q, k, v, _ = to_device(inputs())
    q = q.requires_grad_()
    out = flash_attention(q, k, v)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    (grad,) = torch.autograd.grad(flash_attention(q, k, v).sum(), q)  # without create_graph: fine
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("transform", ["grad", "jacrev"])
def test_torch_func_transforms_say_why_not(transform):
    q, k, v, _ = to_device(inputs())
    f = getattr(torch.func, transform)(lambda x: flash_attention(x, k, v).sum())
    with pytest.raises(NotImplementedError, match="torch.func.grad.*use torch.autograd.grad"):
        f(q)


def test_autocast_is_honoured_like_sdpa():
    """Under CPU autocast (bfloat16) float32 inputs run in bfloat16, as SDPA's do; the CUDA path
    reads torch.get_autocast_dtype("cuda") the same way."""
    q, k, v, _ = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        if DEVICE == "cpu":
            out, lse = flash_attention(q, k, v, return_lse=True)
            assert out.dtype == sdpa.dtype == torch.bfloat16
            qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()  # what the kernel computed on
            assert attention_failures(out, lse, *reference(qb, kb, vb), vb, q=qb, k=kb) == []
    assert on_device(flash_attention, q, k, v).dtype == torch.float32  # autocast off again


@pytest.mark.parametrize("name, spelling", [("is_causal", "causal=True"), ("attn_mask", "mask="),
                                            ("softmax_scale", "scale="), ("return_softmax_lse", "return_lse=True")])
def test_sdpa_keyword_names_the_flashproof_equivalent(name, spelling):
    q, k, v, _ = inputs()
    with pytest.raises(TypeError, match=f"{name}.*{spelling}"):
        flash_attention(q, k, v, **{name: True})


def test_interpreter_set_after_import_is_named():
    """The kernels were imported (and so compiled for a GPU) before TRITON_INTERPRET=1 was set."""
    script = (
        "import os, torch, generated\n"
        "from generator.runtime import dispatch\n"
        "dispatch.module_for('fwd', (16, 32))\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "q = torch.randn(1, 1, 8, 16)\n"
        "try:\n"
        "    generated.flash_attention(q, q, q, block=(16, 32))\n"
        "except RuntimeError as e:\n"
        "    print('ERROR', e)\n")
    env = {key: val for key, val in os.environ.items() if key != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                       env={**env, "PYTHONPATH": str(ROOT)})
    assert "ERROR TRITON_INTERPRET=1 was set after generated.attention_fwd_br16_bc32 was imported" in r.stdout, \
        r.stdout + r.stderr


BAD_TYPES = [
    (dict(block=64), ValueError, "block must be (\"auto\" or )?a pair"),
    (dict(block=(64.0, 64)), ValueError, "block must be (\"auto\" or )?a pair"),
    (dict(block=(True, 64)), ValueError, "block must be (\"auto\" or )?a pair"),
    (dict(return_lse=1), TypeError, "return_lse must be True or False"),
    (dict(scale=True), TypeError, "scale must be a real number"),
    (dict(scale="0.1"), TypeError, "scale must be a real number"),
    (dict(key_lengths=[3]), TypeError, "key_lengths must be a torch.Tensor.*torch.tensor"),
    (dict(mask=[[True]]), TypeError, "mask must be a torch.Tensor"),
    (dict(window=(1.5, 2)), ValueError, "window must be a pair"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_TYPES, ids=[str(k) for k, _, _ in BAD_TYPES])
def test_argument_types_are_validated(kwargs, error, message):
    q, k, v, _ = inputs()
    with pytest.raises(error, match=message):
        flash_attention(q, k, v, **kwargs)
    with pytest.raises(TypeError, match="v must be a torch.Tensor, got list"):
        flash_attention(q, k, v.tolist())


def test_numpy_integers_are_accepted_where_ints_are():
    q, k, v, _ = inputs()
    out, lse = on_device(flash_attention, q, k, v, block=(np.int64(16), np.int32(32)), window=(np.int64(3), 4),
                         scale=np.float32(0.25), return_lse=True)
    assert attention_failures(out, lse, *reference(q, k, v, window=(3, 4), scale=0.25), v) == []


def test_softmax_empty_dim_and_all_masked_rows():
    assert on_device(softmax, torch.randn(3, 0)).shape == (3, 0)
    assert on_device(softmax, torch.randn(0, 4), dim=0).shape == (0, 4)
    # documented: a row of only -inf gives zeros (torch.softmax gives NaN), like a row with no key
    y = on_device(softmax, torch.tensor([[float("-inf")] * 5, [0.0, 1.0, float("-inf"), 2.0, 0.5]]))
    assert torch.equal(y[0], torch.zeros(5))
    torch.testing.assert_close(y[1], torch.softmax(torch.tensor([0.0, 1.0, float("-inf"), 2.0, 0.5]), -1))


# ---- CLI ------------------------------------------------------------------------------------
def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "generator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env)


def test_cli_user_errors_exit_2_without_a_traceback(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub"):  # --out at a file; a path no directory can be made at
        r = run_cli("--br", "16", "--bc", "16", "--out", str(out))
        assert r.returncode == 2 and "Traceback" not in r.stderr and "error:" in r.stderr, r.stderr
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "MANIFEST.json").write_text("{not json")
    r = run_cli("--out", str(corrupt))
    assert r.returncode == 2 and "MANIFEST.json is corrupt" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("--check", "--out", str(corrupt))
    assert r.returncode == 1 and "corrupt" in r.stdout and "Traceback" not in r.stderr


def test_cli_mask_may_be_repeated_or_comma_separated():
    from generator.__main__ import parser

    for argv in (["--mask", "causal", "--mask", "lengths"], ["--mask", "causal,lengths"],
                 ["--mask", "causal", "lengths"]):
        parsed = parser().parse_args(argv)
        assert sorted(k for group in parsed.mask for k in group) == ["causal", "lengths"]
    assert "comma-separated" in parser().format_help() and "repeated" in parser().format_help()


def test_emission_is_all_or_nothing(tmp_path, monkeypatch):
    manifest.emit(BlockConfig(16, 32), tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real, calls = os.replace, []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 4:  # part-way through the swap
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(manifest.ManifestError, match="No space left"):
        manifest.emit(BlockConfig(16, 32, num_warps=8), tmp_path)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert manifest.check(tmp_path) == []


def test_check_reports_stray_files_and_crlf(tmp_path):
    manifest.emit(BlockConfig(16, 32), tmp_path)
    (tmp_path / "attention_fwd_br8_bc8.py").write_text("# left over\n")
    fwd = tmp_path / "attention_fwd_br16_bc32.py"
    fwd.write_bytes(fwd.read_bytes().replace(b"\n", b"\r\n"))
    problems = {(p.file, p.status) for p in manifest.check(tmp_path)}
    assert ("attention_fwd_br8_bc8.py", "stray") in problems
    assert ("attention_fwd_br16_bc32.py", "edited") in problems


# ==================================================================================
# The Hypothesis layout property
# ==================================================================================
@st.composite
def layouts(draw, shape, *, fill=float("nan"), broadcastable=()):
    """``(make, kind)``: ``make(values)`` returns a view equal to ``values`` (of ``shape``) laid
    out as ``kind``: contiguous, permuted memory, a slice with offsets into a NaN-filled buffer,
    or expanded (stride 0) along a dim in ``broadcastable`` (then ``values`` is made constant there)."""
    kinds = ["contiguous", "permuted", "sliced"] + (["expanded"] if broadcastable else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "permuted":
        perm = draw(st.permutations(range(len(shape))))
        inverse = [perm.index(d) for d in range(len(shape))]
        return (lambda t: t.permute(perm).contiguous().permute(inverse)), f"permuted{tuple(perm)}"
    if kind == "sliced":
        lo = [draw(st.integers(0, 2)) for _ in shape]
        step = draw(st.sampled_from([1, 2]))

        def make(t):
            big_shape = [lo_d + n * (step if d == len(shape) - 2 else 1) + 1 for d, (lo_d, n) in
                         enumerate(zip(lo, t.shape))]
            big = torch.full(big_shape, fill, dtype=t.dtype)
            index = tuple(slice(lo_d, lo_d + n * (step if d == len(shape) - 2 else 1),
                                step if d == len(shape) - 2 else 1) for d, (lo_d, n) in enumerate(zip(lo, t.shape)))
            big[index] = t
            return big[index]
        return make, f"sliced{tuple(lo)}/{step}"
    if kind == "expanded":
        dim = draw(st.sampled_from(broadcastable))
        return (lambda t: t.narrow(dim, 0, 1).expand(t.shape)), f"expanded{dim}"
    return (lambda t: t.contiguous()), "contiguous"


@st.composite
def layout_cases(draw):
    B, Hkv = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    Hq = Hkv * draw(st.integers(1, 2))
    Nq, Nk, D = draw(st.integers(1, 24)), draw(st.integers(1, 40)), draw(st.sampled_from([8, 16]))
    shapes = {"q": (B, Hq, Nq, D), "k": (B, Hkv, Nk, D), "v": (B, Hkv, Nk, D), "do": (B, Hq, Nq, D),
              "mask": (B, 1, Nq, Nk)}
    make = {name: draw(layouts(shape, fill=(True if name == "mask" else float("nan")), broadcastable=(0, 2)))
            for name, shape in shapes.items()}
    lengths = draw(st.lists(st.integers(0, Nk), min_size=B, max_size=B))
    lengths_kind = draw(st.sampled_from(["contiguous", "strided", "expanded"]))
    flags = dict(causal=draw(st.booleans()), use_mask=draw(st.booleans()), use_lengths=draw(st.booleans()))
    return dict(shapes=shapes, make=make, lengths=lengths, lengths_kind=lengths_kind, seed=draw(st.integers(0, 99)),
                **flags)


def _lengths_tensor(values, kind):
    if kind == "strided":
        return torch.tensor([[n, -7] for n in values])[:, 0]
    if kind == "expanded":
        return torch.tensor(values[:1]).expand(len(values))
    return torch.tensor(values)


@settings(max_examples=12)
@given(layout_cases())
def test_any_layout_of_any_input_matches_the_reference(case):
    gen = torch.Generator().manual_seed(case["seed"])
    values = {name: torch.randn(shape, generator=gen) for name, shape in case["shapes"].items() if name != "mask"}
    values["mask"] = torch.rand(case["shapes"]["mask"], generator=gen) > 0.3
    views = {}
    for name, t in values.items():
        make, kind = case["make"][name]
        if kind.startswith("expanded"):  # the values themselves broadcast along that dim
            t = make(t).contiguous()
            values[name] = t
        views[name] = make(t)
        assert torch.equal(views[name], t)
    lengths = _lengths_tensor(case["lengths"], case["lengths_kind"])
    kw = dict(causal=case["causal"], mask=values["mask"] if case["use_mask"] else None,
              key_lengths=lengths.contiguous() if case["use_lengths"] else None)
    leaves = [to_device(views[n]) for n in "qkv"]
    for t in leaves:
        t.requires_grad_()
    view_kw = dict(kw, mask=to_device(views["mask"]) if case["use_mask"] else None,
                   key_lengths=to_device(lengths) if case["use_lengths"] else None)
    out, lse = flash_attention(*leaves, return_lse=True, block=SMALL, **view_kw)
    out.backward(to_device(views["do"]))
    ref_out, ref_lse, ref_grads = reference_fwd_bwd(values["q"], values["k"], values["v"], values["do"], **kw)
    assert attention_failures(to_cpu(out.detach()), to_cpu(lse), ref_out, ref_lse, values["v"]) == [], case
    assert grad_failures(to_cpu([t.grad for t in leaves]), ref_grads, torch.float32) == [], case
