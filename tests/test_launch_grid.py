"""The launch grids stay inside CUDA's limits (issue 24, claim launch_grid): axis 0 at most 2^31 - 1, axes 1 and 2
at most 65535 (spec.launch.GRID_AXIS_MAX). Calls whose B x H passes 65535 (many short sequences: the old grids put
B x H on one axis, which CUDA refuses) are run with every launch stubbed (nothing runs: the interpreter would take
65536 programs) and each grid a kernel gets is checked; expanded inputs: no memory per batch entry."""

from __future__ import annotations

import contextlib

import torch

from generated import flash_attention, flash_attention_varlen, flash_attention_with_kvcache
from spec.launch import GRID_AXIS0_MAX, GRID_AXIS_MAX


@contextlib.contextmanager
def recorded_grids():
    """Within: every ``kernel[grid](...)`` launch is skipped and ``(kernel name, grid)`` recorded."""
    from triton.runtime.jit import KernelInterface

    grids: list[tuple[str, tuple]] = []

    def getitem(kernel, grid):
        name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "fn", None), "__name__", "kernel")
        return lambda *args, **kwargs: grids.append((name, tuple(grid)))

    original = KernelInterface.__getitem__
    KernelInterface.__getitem__ = getitem
    try:
        yield grids
    finally:
        KernelInterface.__getitem__ = original


def assert_within_cuda(grids, kernels):
    assert {name for name, _ in grids} >= set(kernels), grids
    for name, grid in grids:
        grid = tuple(grid) + (1,) * (3 - len(grid))
        assert 1 <= grid[0] <= GRID_AXIS0_MAX and 1 <= grid[1] <= GRID_AXIS_MAX and 1 <= grid[2] <= GRID_AXIS_MAX, (
            name, grid)


def test_dense_forward_and_backward_of_65536_heads_fit_the_grid():
    """B = 4096, Hq = 16 (B x H = 65536, the old axis 1 one past CUDA's limit), GQA onto 4 K/V heads."""
    q0 = torch.zeros(1, 1, 4, 16, requires_grad=True)
    kv0 = torch.zeros(1, 1, 4, 16, requires_grad=True)
    q, k = q0.expand(4096, 16, 4, 16), kv0.expand(4096, 4, 4, 16)
    with recorded_grids() as grids:
        out = flash_attention(q, k, k, causal=True)
        out.backward(torch.zeros(1, 1, 1, 1).expand(out.shape))
    assert_within_cuda(grids, ("_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq"))
    assert ("_attn_fwd", (1, 16, 4096)) in grids, grids


def test_varlen_of_many_segments_fits_the_grid():
    """40000 one-row segments of 2 heads (80000 (segment, head) pairs)."""
    segments = 40000
    cu = torch.arange(segments + 1, dtype=torch.int32)
    q = torch.zeros(1, 1, 16).expand(segments, 2, 16)
    with recorded_grids() as grids:
        flash_attention_varlen(q, q, q, cu, cu, 1, 1)
    assert_within_cuda(grids, ("_attn_fwd",))


def test_decode_of_65536_kv_heads_fits_the_grid():
    """B = 8192, Hkv = 8 (B x Hkv = 65536, the old axis 2 one past CUDA's limit), a new K/V row appended."""
    B, H = 8192, 8
    q = torch.zeros(1, 1, 1, 16).expand(B, 1, H, 16)
    cache = torch.zeros(B, 8, H, 16)
    with recorded_grids() as grids:
        flash_attention_with_kvcache(q, cache, cache, torch.full((B,), 4, dtype=torch.int32), k=q, v=q, num_splits=2)
    assert_within_cuda(grids, ("_decode_fwd", "_append_rows"))
    assert ("_decode_fwd", (2, H, B)) in grids, grids
