"""The float64 reference: tiled == direct, direct == torch SDPA, masks as the issue defines them.

Tolerances: everything is float64 on O(1) data, so 1e-12 absolute (online vs direct, and
vs SDPA) is ~1e4 ulps of headroom and still catches any wrong term.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from spec import masks
from spec.reference import attention, online_attention

TOL = 1e-12


def oracle_attend(B, Hq, Nq, Nk, causal=False, alignment="top_left", window=None,
                  key_lengths=None, mask=None) -> torch.Tensor:
    """The issue's mask semantics typed out independently of spec.masks (the test oracle)."""
    shift = 0 if alignment == "top_left" else Nk - Nq
    i = torch.arange(Nq)[:, None] + shift  # aligned query position
    j = torch.arange(Nk)[None, :]
    keep = torch.ones(B, Hq, Nq, Nk, dtype=torch.bool)
    if causal:
        keep &= j <= i
    if window is not None:
        left, right = window
        keep &= (j - i >= -left) & (j - i <= right)
    if key_lengths is not None:
        keep &= (j[None] < torch.as_tensor(key_lengths)[:, None, None])[:, None]
    if mask is not None:
        keep &= mask
    return keep


@st.composite
def problems(draw, with_user_mask=True):
    group, hkv = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    B, Nq, Nk = draw(st.integers(1, 2)), draw(st.integers(1, 14)), draw(st.integers(1, 14))
    D, Dv = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    Hq = hkv * group
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    q = torch.randn(B, Hq, Nq, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, hkv, Nk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, hkv, Nk, Dv, generator=g, dtype=torch.float64)
    kw = dict(causal=draw(st.booleans()), alignment=draw(st.sampled_from(masks.ALIGNMENTS)))
    if draw(st.booleans()):
        kw["window"] = (draw(st.integers(0, 6)), draw(st.integers(0, 6)))
    if draw(st.booleans()):
        kw["key_lengths"] = [draw(st.integers(0, Nk)) for _ in range(B)]
    if with_user_mask and draw(st.booleans()):
        shape = (draw(st.sampled_from([1, B])), draw(st.sampled_from([1, Hq])), Nq, Nk)
        kw["mask"] = torch.rand(shape, generator=g) < draw(st.sampled_from([0.2, 0.6, 0.95]))
    return q, k, v, kw


def max_abs(x: torch.Tensor) -> float:
    return x.abs().max().item() if x.numel() else 0.0


def assert_same(a, b, tol=TOL):
    (out_a, lse_a), (out_b, lse_b) = a, b
    assert not torch.isnan(out_a).any() and not torch.isnan(lse_a).any()
    assert torch.equal(torch.isneginf(lse_a), torch.isneginf(lse_b))
    assert (out_a - out_b).abs().max().item() <= tol
    finite = torch.isfinite(lse_a)
    if finite.any():
        assert (lse_a[finite] - lse_b[finite]).abs().max().item() <= tol


@given(problems(), st.integers(1, 9), st.integers(1, 9), st.sampled_from(["fa2", "fa1"]))
def test_online_equals_direct(problem, br, bc, order):
    q, k, v, kw = problem
    stats = {}
    assert_same(online_attention(q, k, v, br=br, bc=bc, order=order, stats=stats, **kw),
                attention(q, k, v, **kw))
    B, H, Nq, Nk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    assert stats["tiles"] == B * H * math.ceil(Nq / br) * math.ceil(Nk / bc)
    assert stats["tiles"] == stats["skip"] + stats["full"] + stats["partial"]


@given(problems())
def test_direct_matches_sdpa_where_defined(problem):
    q, k, v, kw = problem
    B, Hq, Nq, _ = q.shape
    Nk, group = k.shape[2], Hq // k.shape[1]
    attend = oracle_attend(B, Hq, Nq, Nk, **kw)
    out, lse = attention(q, k, v, **kw)
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                              v.repeat_interleave(group, 1), attn_mask=attend)
    rows = attend.any(-1)  # SDPA leaves rows with no key undefined (NaN)
    assert max_abs(out[rows] - expected[rows]) <= TOL
    # and the reference's own answer there: output 0, lse -inf
    assert (out[~rows] == 0).all() and torch.isneginf(lse[~rows]).all()
    assert torch.isfinite(lse[rows]).all()
    s = (q @ k.repeat_interleave(group, 1).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    lse_expected = torch.logsumexp(s.masked_fill(~attend, -math.inf), -1)
    assert max_abs(lse[rows] - lse_expected[rows]) <= TOL


def test_sdpa_conventions_causal_and_gqa():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64) for _ in range(2))
    out, _ = attention(q, k, v, causal=True, scale=0.3)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    assert (out - expected).abs().max().item() <= TOL  # SDPA's is_causal is top-left


def test_bottom_right_alignment_sees_the_last_keys():
    q = torch.zeros(1, 1, 2, 1, dtype=torch.float64)
    k = torch.zeros(1, 1, 5, 1, dtype=torch.float64)
    v = torch.arange(5, dtype=torch.float64).reshape(1, 1, 5, 1)
    top, _ = attention(q, k, v, causal=True)
    bottom, _ = attention(q, k, v, causal=True, alignment="bottom_right")
    assert top.flatten().tolist() == [0.0, 0.5]  # row 0 sees key 0; row 1 keys 0..1
    assert bottom.flatten().tolist() == [1.5, 2.0]  # row 0 sees keys 0..3; row 1 all five


@given(st.sampled_from(list(masks.kind_sets())), st.sampled_from(masks.ALIGNMENTS),
       st.integers(1, 12), st.integers(1, 12), st.integers(0, 5), st.integers(0, 5),
       st.integers(0, 12), st.integers(1, 6), st.integers(1, 6))
def test_classify_tile_against_the_dense_predicate(kinds, alignment, nq, nk, left, right, length,
                                                   br, bc):
    """A numeric cross-check of the classifier the reference uses (the proof is symbolic)."""
    length = min(length, nk)
    shift = masks.alignment_shift(alignment, nq, nk)
    attend = oracle_attend(1, 1, nq, nk, causal="causal" in kinds, alignment=alignment,
                           window=(left, right) if "window" in kinds else None,
                           key_lengths=[length] if "lengths" in kinds else None)[0, 0]
    params = dict(N_Q=nq, N_K=nk, shift=shift, window_left=left, window_right=right, key_len=length)
    for r0 in range(0, nq, br):
        for c0 in range(0, nk, bc):
            block = attend[r0:r0 + br, c0:c0 + bc]
            cls = masks.classify_tile(kinds, r0, c0, br, bc, **params)
            if cls == "skip":
                assert not block.any(), (r0, c0)
            if cls == "full":
                assert block.all() and c0 + bc <= nk, (r0, c0)


# ---------------------------------------------------------------- fully masked rows
def test_fully_masked_rows_give_zero_and_neg_inf_without_nan_gradients():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 1, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    kw = dict(causal=True, alignment="bottom_right", key_lengths=[3, 0])  # rows 0, 1 see nothing
    out, lse = attention(q, k, v, **kw)
    attend = oracle_attend(2, 2, 5, 3, **kw)
    empty = ~attend.any(-1)
    assert empty.sum() > 0 and (out[empty] == 0).all() and torch.isneginf(lse[empty]).all()
    (out.sum() + lse[~empty].sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[empty] == 0).all()
    assert torch.autograd.gradcheck(
        lambda q_, k_, v_: attention(q_, k_, v_, **kw)[0], (q.detach().requires_grad_(),
                                                           k.detach().requires_grad_(),
                                                           v.detach().requires_grad_()))


@pytest.mark.parametrize("order", ["fa2", "fa1"])
def test_online_gradients_flow(order):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 5, 2, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    assert torch.autograd.gradcheck(
        lambda a, b, c: online_attention(a, b, c, causal=True, br=2, bc=3, order=order)[0], (q, k, v))


def test_numpy_in_numpy_out():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 4, 3)) for _ in range(3))
    out, lse = attention(q, k, v, causal=True)
    assert isinstance(out, np.ndarray) and isinstance(lse, np.ndarray)
    assert out.dtype == np.float64 and out.shape == (1, 2, 4, 3) and lse.shape == (1, 2, 4)
    tiled, _ = online_attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                                causal=True, br=3, bc=2)
    assert isinstance(tiled, np.ndarray) and tiled.dtype == np.float64
    assert np.abs(tiled - attention(q.astype(np.float32), k.astype(np.float32),
                                    v.astype(np.float32), causal=True)[0]).max() <= TOL


def test_stats_count_skipped_tiles_and_bytes():
    q, k, v = (torch.randn(1, 1, 32, 4, dtype=torch.float64) for _ in range(3))
    dense, causal = {}, {}
    online_attention(q, k, v, br=8, bc=8, stats=dense)
    online_attention(q, k, v, br=8, bc=8, causal=True, stats=causal)
    assert dense == {**dense, "tiles": 16, "skip": 0, "full": 16, "partial": 0}
    assert causal["skip"] == 6 and causal["partial"] == 4 and causal["full"] == 6
    assert causal["kv_bytes"] == 10 * 8 * (4 + 4) * 8  # 10 visited tiles of 8 keys, K and V


# ---------------------------------------------------------------- clear errors
def _qkv(q_shape=(1, 2, 4, 3), k_shape=(1, 2, 5, 3), v_shape=(1, 2, 5, 3), dtype=torch.float64):
    return (torch.zeros(q_shape, dtype=dtype), torch.zeros(k_shape, dtype=dtype),
            torch.zeros(v_shape, dtype=dtype))


@pytest.mark.parametrize("args, kwargs, error, words", [
    (_qkv(q_shape=(2, 4, 3)), {}, ValueError, ["q must have rank 4", "(B, H, N, D)"]),
    ((torch.zeros(1, 2, 4, 3), *_qkv()[1:]), {}, TypeError, ["share one dtype", "float32", "cast"]),
    (_qkv(dtype=torch.int64), {}, TypeError, ["floating"]),
    (_qkv(q_shape=(1, 3, 4, 3)), {}, ValueError, ["Hq=3", "Hkv=2", "multiple"]),
    (_qkv(v_shape=(1, 2, 6, 3)), {}, ValueError, ["(B, Hkv, Nk)"]),
    (_qkv(k_shape=(1, 2, 5, 4), v_shape=(1, 2, 5, 4)), {}, ValueError, ["head dims differ"]),
    (_qkv(q_shape=(2, 2, 4, 3)), {}, ValueError, ["batch sizes differ"]),
    (_qkv(), {"alignment": "bottom"}, ValueError, ["alignment must be one of", "bottom_right"]),
    (_qkv(), {"window": (-1, 2)}, ValueError, ["window sizes must be >= 0", "(-1, 2)"]),
    (_qkv(), {"window": (1, 2, 3)}, TypeError, ["pair of ints"]),
    (_qkv(), {"key_lengths": [1, 2]}, ValueError, ["key_lengths must have shape (B,)"]),
    (_qkv(), {"key_lengths": [9]}, ValueError, ["[0, Nk=5]"]),
    (_qkv(), {"key_lengths": [1.5]}, TypeError, ["integers"]),
    (_qkv(), {"mask": torch.zeros(4, 5)}, TypeError, ["boolean", "True = attend"]),
    (_qkv(), {"mask": torch.ones(3, 5, dtype=torch.bool)}, ValueError, ["not broadcastable", "(1, 2, 4, 5)"]),
    (_qkv(), {"scale": "big"}, TypeError, ["scale must be a finite number"]),
    (([1.0], *_qkv()[1:]), {}, TypeError, ["q must be a torch.Tensor or a numpy.ndarray"]),
])
def test_bad_input_names_the_problem(args, kwargs, error, words):
    for fn in (attention, online_attention):
        with pytest.raises(error) as info:
            fn(*args, **kwargs)
        for word in words:
            assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("kwargs, words", [
    ({"br": 0}, ["br must be a positive int"]),
    ({"bc": 2.5}, ["bc must be a positive int"]),
    ({"order": "fa3"}, ["order must be 'fa2'", "'fa1'"]),
])
def test_bad_tiling_names_the_problem(kwargs, words):
    with pytest.raises(ValueError) as info:
        online_attention(*_qkv(), **kwargs)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("order", ["fa2", "fa1"])
def test_online_on_fully_masked_rows(order):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 2, 7, 3, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 1, 4, 3, generator=g, dtype=torch.float64) for _ in range(2))
    kw = dict(causal=True, alignment="bottom_right", key_lengths=[4, 0],
              mask=torch.rand(2, 2, 7, 4, generator=g) < 0.7)
    out, lse = online_attention(q, k, v, br=3, bc=3, order=order, **kw)
    assert_same((out, lse), attention(q, k, v, **kw))
    empty = ~oracle_attend(2, 2, 7, 4, **kw).any(-1)
    assert empty.sum() >= 14 and (out[empty] == 0).all() and torch.isneginf(lse[empty]).all()
