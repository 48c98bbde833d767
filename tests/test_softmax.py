"""Seed 000's online softmax kernels (1-pass and 2-pass) against float64 torch.softmax, on
``attention_cases.DEVICE`` (FLASHPROOF_TEST_DEVICE)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sympy.codegen.cfunctions import exp2

import generated
from attention_cases import on_device, replace_term
from generator import manifest, render
from generator.variants import BlockConfig
from spec import notation as n
from spec import terms as T

TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}  # absolute, on values in [0, 1]
BLOCKS = sorted(generated.KERNELS)


def failures(y, x, dim=-1, tol=None):
    tol = TOL[x.dtype] if tol is None else tol
    ref = torch.softmax(x.double(), dim=dim)
    err = (y.double() - ref).abs().max().item()
    return [] if err <= tol and y.dtype == x.dtype else [f"max error {err:.3g} > {tol}"]


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 200), dtype=st.sampled_from(list(TOL)),
       block=st.sampled_from(BLOCKS), seed=st.integers(0, 9))
def test_rows(rows, cols, dtype, block, seed):
    """cols <= B_c runs the 1-pass kernel, cols > B_c the 2-pass one."""
    x = (torch.randn((rows, cols), generator=torch.Generator().manual_seed(seed)) * 5).to(dtype)
    assert failures(on_device(generated.softmax, x, block=block), x) == []


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_any_dim_and_large_logits(dim):
    """Shift invariance: logits near 1e4 (exp would overflow) give finite, correct rows.
    x * log2(e) ~ 1.4e4 is rounded to fp32 spacing 2^-10, hence the looser 2e-3."""
    x = torch.randn(7, 90, 3) * 30 + 1e4
    y = on_device(generated.softmax, x, dim=dim)
    assert torch.isfinite(y).all()
    assert failures(y, x, dim=dim, tol=2e-3) == []


def test_mutated_alpha_is_caught(monkeypatch, tmp_path):
    """The 2-pass kernel with alpha printed the wrong way round gives wrong rows."""
    monkeypatch.setattr(T, "FORWARD_TILE", replace_term(T.FORWARD_TILE, "alpha", exp2(n.m_safe - n.m_i)))
    variant = BlockConfig(16, 32).variants()[1]
    assert variant.kind.name == "softmax"
    (tmp_path / "sm.py").write_text(render.render_variant(variant))
    mutant = manifest.import_file(tmp_path / "sm.py")
    x = torch.randn(5, 100)
    assert failures(on_device(mutant.softmax_rows, x), x) != []
    assert failures(on_device(generated.softmax, x, block=(16, 32)), x) == []
