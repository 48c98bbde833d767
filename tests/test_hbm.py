"""The HBM-traffic model (benchmarks/hbm.py) against an instrumented count of real loads.

The instrumented count is ``spec.reference.online_attention(..., order="fa2", stats=...)``:
the float64 reference's tiled loop, which asks ``spec.masks.classify_tile`` about every
(query tile, key tile) pair, skips what it says to skip, and counts the bytes of Q it loads,
of K and V for every tile it visits (keys past the end are not loaded), and of O and the
row statistic it writes. The model, a closed form over the classifier's terms, must match
those counts byte for byte.

The reference counts at the inputs' element size, the row statistic (lse) included; the
kernel writes lse in fp32, so the comparison uses fp32 inputs, where both are 4 bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import hbm
from spec.reference import online_attention

FP32 = 4


def instrumented_count(nq, nk, d, br, bc, kinds, mask_args, batch=1, heads=1, mask=None):
    """The reference's traffic counts for one random problem (batch x heads summed)."""
    rng = np.random.default_rng(nq * 1000 + nk)
    q = rng.standard_normal((batch, heads, nq, d)).astype(np.float32)
    k, v = (rng.standard_normal((batch, heads, nk, d)).astype(np.float32) for _ in range(2))
    key_lens = mask_args.get("key_len")
    stats = {}
    online_attention(q, k, v, causal="causal" in kinds, alignment=mask_args.get("alignment", "top_left"),
                     window=mask_args.get("window"),
                     key_lengths=None if key_lens is None else np.array(key_lens),
                     mask=mask, br=br, bc=bc, order="fa2", stats=stats)
    return stats


def model_count(nq, nk, d, br, bc, kinds, mask_args, batch=1, heads=1, mask=None):
    """The model summed over (batch, head) as the reference sums its counts."""
    per_head = []
    for b in range(batch):
        args = dict(mask_args)
        if "key_len" in args:
            args["key_len"] = args["key_len"][b]
        for h in range(heads):
            dense = None if mask is None else np.broadcast_to(mask, (batch, heads, nq, nk))[b, h]
            per_head.append(hbm.flash_forward(nq, d, br, bc, kinds, n_k=nk, dtype_bytes=FP32, mask=dense,
                                              **args))
    return {"q_bytes": sum(t.q for t in per_head),
            "kv_bytes": sum(t.k + t.v for t in per_head),
            "o_bytes": sum(t.o + t.lse for t in per_head),
            "mask": sum(t.mask for t in per_head)}


def _reference_keys(stats):
    """The reference's counts under the model's names (the mask's bytes as one number)."""
    return {"q_bytes": stats["q_bytes"], "kv_bytes": stats["kv_bytes"], "o_bytes": stats["o_bytes"],
            "mask": stats["map_bytes"] + stats["mask_bytes"]}


CASES = [
    # (nq, nk, d, br, bc, kinds, mask args); lengths are per batch entry (batch = their count)
    (77, 77, 8, 16, 32, (), {}),
    (77, 77, 8, 16, 32, ("causal",), {}),
    (64, 64, 16, 64, 64, ("causal",), {}),
    (50, 93, 8, 32, 16, ("causal",), {"alignment": "bottom_right"}),
    (93, 50, 8, 16, 16, ("causal",), {"alignment": "bottom_right"}),
    (101, 101, 8, 16, 32, ("window",), {"window": (20, 5)}),
    (90, 130, 8, 32, 32, ("lengths",), {"key_len": [70, 130]}),
    (120, 120, 8, 32, 16, ("causal", "window"), {"window": (24, 0)}),
    (100, 100, 8, 16, 32, ("causal", "lengths"), {"key_len": [45, 7]}),
]


@pytest.mark.parametrize("nq,nk,d,br,bc,kinds,mask_args", CASES)
def test_model_equals_instrumented_count(nq, nk, d, br, bc, kinds, mask_args):
    batch = len(mask_args.get("key_len", [None]))
    stats = instrumented_count(nq, nk, d, br, bc, kinds, mask_args, batch=batch, heads=2)
    model = model_count(nq, nk, d, br, bc, kinds, mask_args, batch=batch, heads=2)
    assert model == _reference_keys(stats)


def _document_mask(n, docs, rng):
    """A block-diagonal (document) mask with random boundaries, plus a few holes."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=docs - 1, replace=False))
    doc = np.searchsorted(cuts, np.arange(n), side="right")
    mask = doc[:, None] == doc[None, :]
    mask[rng.random((n, n)) < 0.02] = False
    return mask


DENSE_CASES = [
    # (nq, nk, br, bc, kinds, mask args, mask shape): per-head masks and a broadcast one
    (77, 77, 16, 32, (), {}, "per_head"),
    (96, 96, 32, 16, ("causal",), {}, "per_head"),
    (90, 130, 16, 16, ("lengths",), {"key_len": [70, 130]}, "broadcast"),
    (64, 100, 16, 32, ("causal", "window"), {"alignment": "bottom_right", "window": (30, 0)}, "broadcast"),
]


@pytest.mark.parametrize("nq,nk,br,bc,kinds,mask_args,shape", DENSE_CASES)
def test_dense_mask_traffic_equals_instrumented_count(nq, nk, br, bc, kinds, mask_args, shape):
    """With a dense mask the model also counts the block-map bytes and the partial tiles' mask
    bytes, and skips the K/V of tiles the mask empties, exactly as the reference loads them."""
    rng = np.random.default_rng(nq + nk)
    batch, heads = len(mask_args.get("key_len", [None, None])), 2
    if shape == "per_head":
        mask = np.stack([np.stack([_document_mask(max(nq, nk), 3, rng)[:nq, :nk] for _ in range(heads)])
                         for _ in range(batch)])
    else:
        mask = _document_mask(max(nq, nk), 4, rng)[:nq, :nk]
    stats = instrumented_count(nq, nk, 8, br, bc, kinds, mask_args, batch=batch, heads=heads, mask=mask)
    assert stats["map_bytes"] > 0 and stats["mask_bytes"] > 0 and stats["skip"] > 0
    model = model_count(nq, nk, 8, br, bc, kinds, mask_args, batch=batch, heads=heads, mask=mask)
    assert model == _reference_keys(stats)
    # sensitive: forgetting that an empty block skips its K/V changes the count
    without_skip = model_count(nq, nk, 8, br, bc, kinds, mask_args, batch=batch, heads=heads,
                               mask=np.ones_like(mask))
    assert without_skip["kv_bytes"] != stats["kv_bytes"]


def test_mutant_model_without_skipping_is_caught():
    """The comparison is sensitive: a model that forgets the mask's skipped tiles disagrees."""
    stats = instrumented_count(77, 77, 8, 16, 16, ("causal",), {})
    assert stats["skip"] > 0
    assert model_count(77, 77, 8, 16, 16, ("causal",), {})["kv_bytes"] == stats["kv_bytes"]
    assert model_count(77, 77, 8, 16, 16, (), {})["kv_bytes"] != stats["kv_bytes"]


def test_theorem2_closed_forms():
    """Unmasked: K/V re-read once per query tile; standard: S and P written and read."""
    N, d, b = 1000, 64, 2
    for br in (16, 64, 128):
        t = hbm.flash_forward(N, d, br, 64)
        assert t.k == t.v == N * d * b * -(-N // br)
        assert t.total == 2 * N * d * b + 2 * N * d * b * -(-N // br) + N * hbm.LSE_BYTES
    s = hbm.standard(N, d)
    assert s.total == (4 * N * d + 4 * N * N) * b


def test_trend_of_figure_2():
    """Less traffic than standard attention, falling with the tile height, halved by causal."""
    d = 64
    for N in hbm.SEQ_LENS:
        assert hbm.flash_forward(N, d, 64, 64).total < hbm.standard(N, d).total
        # causal K/V reads: T(T+1)/2 of the T^2 tiles, T = N / 64 query tiles
        T = N // 64
        assert hbm.flash_forward(N, d, 64, 64, ("causal",)).k * 2 * T == hbm.flash_forward(N, d, 64, 64).k * (T + 1)
    totals = [hbm.flash_forward(4096, d, br, 64).total for br in hbm.BLOCK_ROWS]
    assert totals == sorted(totals, reverse=True)


def test_docs_page_is_current():
    """docs/performance/hbm.md is what the model prints now (regenerate: python -m benchmarks.hbm)."""
    from benchmarks.common import DOCS_PERF

    assert (DOCS_PERF / "hbm.md").read_text() == hbm.markdown_page("hbm_traffic.png"), \
        "docs/performance/hbm.md is stale: run python -m benchmarks.hbm"


def test_varlen_model_is_the_instrumented_count_of_each_segment():
    """A packed batch costs what its segments cost as dense problems with bottom-right alignment
    (the reference's tiled loop on each slice), plus 16 bytes of offsets per program; the tile
    pairs computed are the pairs the reference does not skip. A segment without keys reads its Q
    and writes O and lse (the reference's loop cannot run on zero keys: counted by hand)."""
    lengths_q, lengths_k, d, br, bc = [37, 0, 70, 5, 9], [50, 9, 33, 1, 0], 8, 16, 32
    kinds, window = ("causal", "window"), (9, 3)
    model = hbm.varlen_forward(lengths_q, lengths_k, d, br, bc, kinds, dtype_bytes=FP32, window=window)
    want = {"q_bytes": 9 * d * FP32, "kv_bytes": 0, "o_bytes": 9 * (d + 1) * FP32, "tiles": 0}
    for nq, nk in zip(lengths_q, lengths_k):
        if nq and nk:
            stats = instrumented_count(nq, nk, d, br, bc, kinds, {"alignment": "bottom_right", "window": window})
            for key in ("q_bytes", "kv_bytes", "o_bytes"):
                want[key] += stats[key]
            want["tiles"] += stats["tiles"] - stats["skip"]
    got = {"q_bytes": model.q, "kv_bytes": model.k + model.v, "o_bytes": model.o + model.lse, "tiles": model.tiles}
    assert got == want
    assert model.mask == len(lengths_q) * -(-70 // br) * hbm.VARLEN_OFFSET_BYTES


def test_packed_documents_skip_work_three_ways():
    """Packed causal documents: all three layouts skip most of the unmasked kernel's tiles; varlen
    reads no mask bytes and computes no padded row."""
    t = hbm.packed_traffic(lengths=(300, 90, 20), d=16, br=16, bc=32)
    assert t["varlen"].tiles < t["no mask"].tiles and t["dense bool mask"].tiles < t["no mask"].tiles
    assert t["varlen"].q == t["dense bool mask"].q < t["padding"].q
    assert t["varlen"].mask < t["dense bool mask"].mask
