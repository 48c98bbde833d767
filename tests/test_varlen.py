"""``generated.flash_attention_varlen``: packed batches (cu_seqlens) against the float64 reference,
the dense path segment by segment, NaN in the neighbours, empty segments, and bad inputs.

Interpreter cost is per (tile, segment, head): the packed batches here hold at most ~180 rows.
"""

from __future__ import annotations

import inspect
from itertools import accumulate

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_cases import BLOCKS, on_device, to_cpu, to_device
from generated import flash_attention, flash_attention_varlen
from generator.checking import attention_failures
from spec import varlen as V
from spec.reference import attention, varlen_attention
from test_backward import grad_failures

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")


def packed(lengths_q, lengths_k, *, Hq=2, Hkv=1, D=16, dtype=torch.float32, seed=0):
    """``q, k, v, do, cu_seqlens_q, cu_seqlens_k`` of a packed batch with these segment lengths."""
    gen = torch.Generator().manual_seed(seed)
    tq, tk = sum(lengths_q), sum(lengths_k)
    q, k, v, do = (torch.randn(shape, generator=gen).to(dtype)
                   for shape in ((tq, Hq, D), (tk, Hkv, D), (tk, Hkv, D), (tq, Hq, D)))
    cu = [torch.tensor([0, *accumulate(lengths)], dtype=torch.int32) for lengths in (lengths_q, lengths_k)]
    return q, k, v, do, *cu


def varlen_grads(q, k, v, do, cu_q, cu_k, **kw):
    """``(out, lse), (dq, dk, dv)`` of the kernels on the test device, back on CPU."""
    q, k, v = (to_device(t).detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention_varlen(q, k, v, *to_device((cu_q, cu_k)), return_lse=True, **kw)
    out.backward(to_device(do))
    return to_cpu((out.detach(), lse.detach())), to_cpu((q.grad, k.grad, v.grad))


def reference_grads(q, k, v, do, cu_q, cu_k, **kw):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, _ = varlen_attention(q, k, v, cu_q, cu_k, **kw)
    if not out.requires_grad:  # every segment without keys: nothing depends on q, k, v
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    return torch.autograd.grad(out, (q, k, v), do.double(), allow_unused=True, materialize_grads=True)


# ----------------------------------------------------------------------------------
# The public signature
# ----------------------------------------------------------------------------------
def test_signature_is_exactly_the_issues():
    assert str(inspect.signature(flash_attention_varlen)) == (
        "(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *, causal=False, "
        "window=None, scale=None, return_lse=False, block=(64, 64), softcap=None, alibi_slopes=None, sinks=None, "
        "dropout_p=0.0, return_dropout_mask=False, batch_invariant=False, block_table=None, q_descale=None, "
        "k_descale=None, v_descale=None, out_dtype=None)")


# ----------------------------------------------------------------------------------
# Hypothesis: segment lengths 0, 1, short, not multiples of the blocks; GQA, masks, dtypes, blocks
# ----------------------------------------------------------------------------------
LENGTHS = st.sampled_from((0, 1, 2, 5)) | st.integers(0, 45)


@st.composite
def varlen_cases(draw, dtypes):
    n = draw(st.integers(1, 4))
    Hkv = draw(st.integers(1, 2))
    return draw(st.sampled_from(BLOCKS)), dict(
        lengths_q=draw(st.lists(LENGTHS, min_size=n, max_size=n)),
        lengths_k=draw(st.lists(LENGTHS, min_size=n, max_size=n)),
        Hkv=Hkv, Hq=Hkv * draw(st.sampled_from((1, 2))), D=draw(st.sampled_from((16, 40))),
        dtype=draw(st.sampled_from(dtypes)), seed=draw(st.integers(0, 99))), dict(
        causal=draw(st.booleans()),
        window=draw(st.none() | st.tuples(st.integers(0, 20), st.integers(0, 20))))


@settings(max_examples=8)
@given(varlen_cases(dtypes=(torch.float32, torch.float16, torch.bfloat16)))
def test_forward_matches_the_reference(case):
    block, shape, kw = case
    q, k, v, _, cu_q, cu_k = packed(**shape)
    out, lse = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, return_lse=True, block=block, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == torch.float32
    assert attention_failures(out, lse, *varlen_attention(q, k, v, cu_q, cu_k, **kw), v) == [], (block, shape, kw)


@settings(max_examples=4)
@given(varlen_cases(dtypes=(torch.float32, torch.float16)))
def test_gradients_match_float64_autograd(case):
    block, shape, kw = case
    q, k, v, do, cu_q, cu_k = packed(**shape)
    _, got = varlen_grads(q, k, v, do, cu_q, cu_k, block=block, **kw)
    assert grad_failures(got, reference_grads(q, k, v, do, cu_q, cu_k, **kw), q.dtype) == [], (block, shape, kw)


def test_head_dims_above_128():
    """A packed causal batch at head dim 200 (BLOCK_D 256: the forward's one-stage packed settings,
    the backward's 16-key dK/dV and 32-row dQ tiles), forward and gradients, fp16."""
    q, k, v, do, cu_q, cu_k = packed([37, 0, 70], [50, 9, 70], Hq=4, Hkv=2, D=200, dtype=torch.float16, seed=3)
    (out, lse), got = varlen_grads(q, k, v, do, cu_q, cu_k, causal=True)
    assert attention_failures(out, lse, *varlen_attention(q, k, v, cu_q, cu_k, causal=True), v) == []
    assert grad_failures(got, reference_grads(q, k, v, do, cu_q, cu_k, causal=True), q.dtype) == []


def test_reference_is_the_block_diagonal_dense_mask():
    """The varlen reference equals the dense reference over the whole packed batch with the
    block-diagonal mask of spec.varlen.packed_mask (rows with no key: 0 and -inf in both)."""
    q, k, v, _, cu_q, cu_k = packed([3, 0, 7, 2], [5, 4, 0, 9], Hq=2, Hkv=1)
    for kw in (dict(), dict(causal=True), dict(window=(2, 1), causal=True)):
        mask = torch.from_numpy(V.packed_mask(cu_q, cu_k, q.shape[0], k.shape[0], **kw))
        out, lse = attention(*(t.transpose(0, 1)[None] for t in (q, k, v)), mask=mask)
        ref_out, ref_lse = varlen_attention(q, k, v, cu_q, cu_k, **kw)
        assert torch.allclose(out[0].transpose(0, 1), ref_out, atol=1e-12)
        assert torch.equal(lse[0].isinf(), ref_lse.isinf())
        assert torch.allclose(lse[0][~lse[0].isinf()], ref_lse[~ref_lse.isinf()], atol=1e-12)


# ----------------------------------------------------------------------------------
# A segment is the dense problem on its slice: the same tiling gives the same bits
# ----------------------------------------------------------------------------------
SEGMENTS = ([19, 1, 40], [33, 7, 25])  # not multiples of any block; n_q > n_k and n_q < n_k


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))
@pytest.mark.parametrize("kw", (dict(causal=True), dict(window=(6, 3))), ids=("causal", "window"))
def test_each_segment_is_bitwise_the_dense_path(dtype, kw):
    block = (16, 32)
    q, k, v, do, cu_q, cu_k = packed(*SEGMENTS, Hq=4, Hkv=2, dtype=dtype, seed=3)
    (out, lse), (dq, dk, dv) = varlen_grads(q, k, v, do, cu_q, cu_k, block=block, **kw)
    for b in range(len(SEGMENTS[0])):
        rows, keys = slice(*cu_q[b:b + 2].tolist()), slice(*cu_k[b:b + 2].tolist())
        dense = [t[s].transpose(0, 1)[None] for t, s in ((q, rows), (k, keys), (v, keys), (do, rows))]
        dense_in = [to_device(t).clone().requires_grad_() for t in dense[:3]]
        d_out, d_lse = flash_attention(*dense_in, alignment=V.ALIGNMENT, block=block, return_lse=True, **kw)
        d_out.backward(to_device(dense[3]))
        d_out, d_lse, *d_grads = to_cpu((d_out.detach(), d_lse.detach(), *(t.grad for t in dense_in)))
        assert torch.equal(out[rows], d_out[0].transpose(0, 1)) and torch.equal(lse[:, rows], d_lse[0])
        for got, want, s in zip((dq, dk, dv), d_grads, (rows, keys, keys)):
            assert torch.equal(got[s], want[0].transpose(0, 1))


# ----------------------------------------------------------------------------------
# No leaks, empty segments, hints, determinism
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", (dict(), dict(causal=True, window=(4, 0))), ids=("full", "causal_window"))
def test_nan_in_neighbouring_segments_never_leaks(kw):
    """NaN in every row of segments 0 and 2 (q, k, v and dO): segment 1's output, lse and
    gradients are bitwise those of the clean batch."""
    q, k, v, do, cu_q, cu_k = packed([17, 21, 9], [23, 30, 5], Hq=2, Hkv=1, seed=5)
    clean = varlen_grads(q, k, v, do, cu_q, cu_k, block=(16, 32), **kw)
    dirty = [t.clone() for t in (q, k, v, do)]
    for b in (0, 2):
        for t, cu in zip(dirty, (cu_q, cu_k, cu_k, cu_q)):
            t[cu[b]:cu[b + 1]] = float("nan")
    poisoned = varlen_grads(*dirty, cu_q, cu_k, block=(16, 32), **kw)
    rows, keys = slice(17, 38), slice(23, 53)
    for (c_out, c_lse), (p_out, p_lse) in ((clean[0], poisoned[0]),):
        assert torch.equal(c_out[rows], p_out[rows]) and torch.equal(c_lse[:, rows], p_lse[:, rows])
    for c, p, s in zip(clean[1], poisoned[1], (rows, keys, keys)):
        assert torch.isfinite(p[s]).all() and torch.equal(c[s], p[s])


def test_empty_segments_give_zeros_minus_inf_and_zero_gradients():
    lengths_q, lengths_k = [0, 4, 3, 0, 5], [6, 0, 3, 0, 2]  # no queries; no keys; both; neither
    q, k, v, do, cu_q, cu_k = packed(lengths_q, lengths_k, Hq=2, Hkv=2, seed=1)
    (out, lse), grads = varlen_grads(q, k, v, do, cu_q, cu_k, block=(16, 32), causal=True)
    assert all(torch.isfinite(g).all() for g in grads) and not torch.isnan(lse).any()
    no_keys = slice(0, 4)  # segment 1's queries
    assert torch.equal(out[no_keys], torch.zeros_like(out[no_keys]))
    assert torch.isneginf(lse[:, no_keys]).all() and torch.equal(grads[0][no_keys], torch.zeros_like(grads[0][no_keys]))
    no_queries = slice(0, 6)  # segment 0's keys
    assert not grads[1][no_queries].any() and not grads[2][no_queries].any()
    assert attention_failures(out, lse, *varlen_attention(q, k, v, cu_q, cu_k, causal=True), v) == []


def test_a_batch_without_queries_or_keys():
    q, k, v, _, cu_q, cu_k = packed([0, 0], [3, 2])
    out, lse = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, return_lse=True)
    assert out.shape == (0, 2, 16) and lse.shape == (2, 0)
    q, k, v, _, cu_q, cu_k = packed([2, 3], [0, 0])
    out, lse = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, return_lse=True)
    assert not out.any() and torch.isneginf(lse).all()


def test_max_seqlen_hints():
    q, k, v, _, cu_q, cu_k = packed([5, 20], [7, 3])
    want = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, block=(16, 32))
    assert torch.equal(on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, 50, 60, block=(16, 32)), want)
    assert torch.equal(on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, 20, 7, block=(16, 32)), want)
    assert torch.equal(on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, np.int64(20), torch.tensor(9),
                                 block=(16, 32)), want)
    for hints, name in (((19, None), "max_seqlen_q=19"), ((None, 6), "max_seqlen_k=6")):
        with pytest.raises(ValueError, match=f"{name} is smaller than the longest segment"):
            on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, *hints)


def test_gradients_are_deterministic():
    args = packed([9, 30], [40, 11], Hq=4, Hkv=2, seed=2)
    first, second = (varlen_grads(*args, block=(16, 32), causal=True)[1] for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


# ----------------------------------------------------------------------------------
# Bad inputs name the problem
# ----------------------------------------------------------------------------------
Q, K, VV, _, CU_Q, CU_K = packed([3, 4], [5, 2])
I32 = torch.int32


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((Q[None], K, VV, CU_Q, CU_K), {}, ValueError, "rank 3"),
    ((Q, K.double(), VV, CU_Q, CU_K), {}, TypeError, "share one dtype"),
    ((Q.int(), K, VV, CU_Q, CU_K), {}, TypeError, "supported: float16"),
    ((Q, K, VV[:-1], CU_Q, CU_K), {}, ValueError, r"v must have k's \(total_k, Hkv\)"),  # any D_v (MLA)
    ((Q.repeat(1, 1, 2), K, VV, CU_Q, CU_K), {}, ValueError, "head_dim"),
    ((Q[:, :1].repeat(1, 3, 1), K.repeat(1, 2, 1), VV.repeat(1, 2, 1), CU_Q, CU_K), {}, ValueError, "multiple of"),
    ((Q, K, VV, CU_Q.long(), CU_K), {}, TypeError, "cu_seqlens_q must be int32"),
    ((Q, K, VV, [0, 3, 7], CU_K), {}, TypeError, "cu_seqlens_q must be an int32 torch.Tensor"),
    ((Q, K, VV, CU_Q[None], CU_K), {}, ValueError, r"cu_seqlens_q must have shape \(B \+ 1,\)"),
    ((Q, K, VV, CU_Q[:1], CU_K[:1]), {}, ValueError, r"B >= 1"),
    ((Q, K, VV, torch.tensor([0, 3, 5, 7], dtype=I32), CU_K), {}, ValueError, "both must hold B \\+ 1"),
    ((Q, K, VV, torch.tensor([1, 3, 7], dtype=I32), CU_K), {}, ValueError, "must start at 0"),
    ((Q, K, VV, torch.tensor([0, 8, 7], dtype=I32), CU_K), {}, ValueError, "non-decreasing"),
    ((Q, K, VV, torch.tensor([0, 3, 6], dtype=I32), CU_K), {}, ValueError, "must end at the packed total 7"),
    ((Q, K, VV, CU_Q, torch.tensor([0, 5, 8], dtype=I32)), {}, ValueError,
     "cu_seqlens_k must end at the packed total 7"),
    ((Q, K, VV, CU_Q, CU_K, -1), {}, ValueError, "max_seqlen_q must be None"),
    ((Q, K, VV, CU_Q, CU_K, None, 2.5), {}, ValueError, "max_seqlen_k must be None"),
    ((Q, K, VV, CU_Q, CU_K), dict(window=(1,)), ValueError, "window must be a pair"),
    ((Q, K, VV, CU_Q, CU_K), dict(causal=1), TypeError, "causal must be True or False"),
    ((Q, K, VV, CU_Q, CU_K), dict(scale=float("nan")), ValueError, "scale must be a finite number"),
    ((Q, K, VV, CU_Q, CU_K), dict(block=(32, 32)), ValueError, "no generated fwd kernel"),
    ((Q, K, VV, CU_Q, CU_K), dict(block=64), ValueError, "block must be"),
])
def test_bad_inputs_name_the_problem(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        on_device(flash_attention_varlen, *args, **kwargs)


# ----------------------------------------------------------------------------------
# The custom op: fake implementation, torch.compile
# ----------------------------------------------------------------------------------
def test_custom_op_fake_and_compile():
    q, k, v, cu_q, cu_k = to_device((Q, K, VV, CU_Q, CU_K))
    op = torch.ops.flashproof.flash_attention_varlen.default
    torch.library.opcheck(op, (q, k, v, cu_q, cu_k, -1, -1, True, None, None, 64, 64),
                          test_utils=("test_schema", "test_faketensor"))

    def f(q, k, v, cu_q, cu_k):
        return flash_attention_varlen(q, k, v, cu_q, cu_k, 4, 5, causal=True) * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, cu_q, cu_k), f(q, k, v, cu_q, cu_k))


def test_packed_mask_is_block_diagonal():
    mask = V.packed_mask([0, 2, 5], [0, 3, 4], 5, 4, causal=True)
    assert not mask[:2, 3:].any() and not mask[2:, :3].any()  # nothing across segments
    # segment 1: 3 queries, 1 key, bottom-right: only its last query sees the key
    np.testing.assert_array_equal(mask[2:, 3], [False, False, True])


def test_strided_views_need_no_copy():
    """q, k, v unbound from one packed qkv tensor (total, 3, H, D), FlashAttention's qkvpacked layout:
    strided views, read through their strides, give the contiguous tensors' result bitwise (and the
    gradient of qkv is theirs, stacked)."""
    q, k, v, do, cu_q, cu_k = packed([9, 20], [9, 20], Hq=2, Hkv=2, seed=4)
    qkv = to_device(torch.stack([q, k, v], dim=1)).requires_grad_()
    views = qkv.unbind(1)
    assert not views[0].is_contiguous()
    out, lse = flash_attention_varlen(*views, *to_device((cu_q, cu_k)), causal=True, return_lse=True, block=(16, 32))
    out.backward(to_device(do))
    (want_out, want_lse), want_grads = varlen_grads(q, k, v, do, cu_q, cu_k, block=(16, 32), causal=True)
    assert torch.equal(to_cpu(out.detach()), want_out) and torch.equal(to_cpu(lse.detach()), want_lse)
    assert torch.equal(to_cpu(qkv.grad), torch.stack(want_grads, dim=1))


def test_strided_cu_seqlens_are_read_as_their_values():
    """Issue 24: offset vectors that are strided views (every other entry of a longer vector) give the
    contiguous vectors' result bitwise: the launch passes them as the kernels read them
    (spec.launch.varlen_cu_seqlens, claim varlen_addresses); the old kernels read entry b at offset b."""
    q, k, v, do, cu_q, cu_k = packed([5, 11, 0, 7], [9, 3, 4, 12], Hq=2, Hkv=1, seed=5)
    strided_q, strided_k = (torch.stack([cu, cu * 0], -1).flatten()[::2] for cu in (cu_q, cu_k))
    assert not strided_q.is_contiguous() and torch.equal(strided_q, cu_q)
    (got_out, got_lse), got_grads = varlen_grads(q, k, v, do, strided_q, strided_k, block=(16, 32), causal=True)
    (want_out, want_lse), want_grads = varlen_grads(q, k, v, do, cu_q, cu_k, block=(16, 32), causal=True)
    assert torch.equal(got_out, want_out) and torch.equal(got_lse, want_lse)
    assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads))


# ----------------------------------------------------------------------------------
# Score modifications (issue 15) per segment: softcap, ALiBi (bottom-right per segment), sinks
# ----------------------------------------------------------------------------------
def test_score_mods_match_the_per_segment_reference():
    """Softcap, (B, Hq) ALiBi slopes and learnable sinks on a packed causal batch against the
    float64 dense reference run segment by segment (bottom-right), forward and gradients of q,
    k, v and the sinks (one sink per head, summed over every segment's rows); an empty segment included."""
    lengths_q, lengths_k = [3, 0, 5], [4, 2, 7]
    q, k, v, do, cu_q, cu_k = packed(lengths_q, lengths_k, Hq=2, Hkv=1, D=16, seed=3)
    slopes = torch.tensor([[0.5, 0.25], [0.125, 1.0], [0.3, 0.7]])
    sinks = torch.tensor([0.4, -1.5])
    kw = dict(causal=True, softcap=2.0)
    # kernels
    qd, kd, vd, sd = (to_device(t).clone().requires_grad_() for t in (q, k, v, sinks))
    out, lse = flash_attention_varlen(qd, kd, vd, *to_device((cu_q, cu_k)), return_lse=True, block=(16, 32),
                                      alibi_slopes=to_device(slopes), sinks=sd, **kw)
    out.backward(to_device(do))
    (out, lse), grads = to_cpu((out.detach(), lse.detach())), to_cpu((qd.grad, kd.grad, vd.grad, sd.grad))
    # the reference, one dense problem per segment
    qr, kr, vr, sr = (t.double().requires_grad_() for t in (q, k, v, sinks))
    outs, lses = [], []
    for b in range(len(lengths_q)):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        o_b, l_b = attention(*(t[idx].transpose(0, 1)[None] for t, idx in ((qr, rows), (kr, keys), (vr, keys))),
                             alignment="bottom_right", alibi_slopes=slopes[b:b + 1].double(), sinks=sr, **kw)
        outs.append(o_b[0].transpose(0, 1))
        lses.append(l_b[0])
    want_out, want_lse = torch.cat(outs), torch.cat(lses, dim=1)
    want = torch.autograd.grad(want_out, (qr, kr, vr, sr), do.double())
    assert attention_failures(out, lse, want_out.detach(), want_lse.detach(), v) == []
    assert grad_failures(grads[:3], want[:3], q.dtype) == []
    torch.testing.assert_close(grads[3].double(), want[3], rtol=1e-4, atol=1e-4)


def test_score_mod_arguments_are_checked():
    # on the test device: the contract checks the device before shapes and dtypes
    q, k, v, _, cu_q, cu_k = to_device(packed([2, 3], [2, 3]))
    with pytest.raises(ValueError, match=r"alibi_slopes must have shape \(2,\) or \(2, 2\)"):
        flash_attention_varlen(q, k, v, cu_q, cu_k, alibi_slopes=to_device(torch.ones(3)))
    with pytest.raises(ValueError, match="softcap must be a finite number > 0"):
        flash_attention_varlen(q, k, v, cu_q, cu_k, softcap=-1.0)
    with pytest.raises(TypeError, match="sinks must be float32"):
        flash_attention_varlen(q, k, v, cu_q, cu_k, sinks=to_device(torch.zeros(2, dtype=torch.float64)))
