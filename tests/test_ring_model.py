"""The ring's communication model (benchmarks/ring.py) against what the runtime sends and runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks import ring as model
from generator.runtime import ring as runtime
from spec import masks as M
from spec import ring as RG


def test_step_bytes_are_the_tensors_the_ring_sends():
    """Forward: the K, V shard; backward: K, V and the fp32 dK, dV partial sums (runtime._Ring.post)."""
    s = model.Shape(hq=8, hkv=2, d=16, b=2)
    k = torch.zeros(1, s.hkv, 48, s.d, dtype=torch.bfloat16)
    assert model.step_bytes(48, s) == 2 * k.nbytes
    assert model.step_bytes(48, s, backward=True) == 2 * k.nbytes + 2 * k.float().nbytes


@pytest.mark.parametrize("layout", RG.LAYOUTS)
def test_step_fraction_is_the_attended_share_of_the_plan(layout):
    """The fraction the model charges a causal step equals the attended share of the step's
    n x n block in the dense causal mask, up to the diagonal's n/2 extra entries."""
    P, C = 3, 32
    slots = RG.LAYOUTS[layout].slots
    N, n = P * slots * C, slots * C
    dense = M.dense_mask(("causal",), N, N, shift=0)
    for r in range(P):
        rows = np.concatenate([np.arange(g * C, (g + 1) * C) for g in RG.chunks_of(layout, P, r)])
        for src in range(P):
            cols = np.concatenate([np.arange(g * C, (g + 1) * C) for g in RG.chunks_of(layout, P, src)])
            share = dense[np.ix_(rows, cols)].mean()
            assert abs(model.step_fraction(layout, P, r, src, True) - share) <= slots / (2 * C) + 1e-12


def test_threshold_balances_compute_and_transfer():
    for s in model.SHAPES.values():
        for bw in model.LINKS.values():
            for frac in (1.0, 0.5):
                for bwd in (False, True):
                    n = model.overlap_threshold(s, bw, frac, bwd)
                    t_comm = model.step_bytes(n, s, bwd) / bw
                    t_compute = model.step_flops(n, s, frac, bwd) / model.FLOPS
                    assert t_compute == pytest.approx(t_comm, rel=1e-12)


def test_zigzag_balances_causal_work():
    s, bw = model.Shape(), model.LINKS["NVLink 4 (H100 SXM)"]
    N, P = 16384 * 4, 4
    zigzag = model.ring_time(N, P, "zigzag", True, s, bw)
    contiguous = model.ring_time(N, P, "contiguous", True, s, bw)
    full = model.ring_time(N, P, "zigzag", False, s, bw)
    assert zigzag == pytest.approx(full / 2) and contiguous > 1.5 * zigzag


def test_the_model_page_is_current():
    page = (model.DOCS_PERF / "ring.md").read_text()
    assert page == model.markdown_page("ring_overlap.png", model.threshold_rows(), model.balance_rows())
    assert runtime.LAYOUTS == tuple(RG.LAYOUTS)
