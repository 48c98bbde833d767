"""The generated forward kernels against the float64 spec reference (TRITON_INTERPRET=1 on CPU,
or compiled on a GPU with FLASHPROOF_TEST_DEVICE=cuda: see ``attention_cases.DEVICE``).

Every checked-in block config, every mask kind and their combinations, both alignments
(bottom-right with N_q > N_k leaves rows with no key), fully masked rows, GQA, head dims that
are not powers of two, shapes that are not multiples of the blocks. Tolerances: see
``generator.checking``. The mutants at the end show that this same check catches a wrong
term printed into the template.
"""

from __future__ import annotations

import itertools

import pytest
import sympy as sp
import torch
from hypothesis import HealthCheck, given, settings
from sympy.codegen.cfunctions import exp2, log2

from attention_cases import (
    BLOCKS, HEAD_DIMS, VARIANTS, cases, examples, forward_failures, forward_module, on_device, replace_term, to_cpu,
    to_device,
)
from generator import manifest, render
from generator.checking import attention_failures
from generator.runtime import api
from generator.variants import BlockConfig
from spec import masks as M
from spec import notation as n
from spec import terms as T
from spec.reference import attention as reference

# log2(0) = -inf is computed (and discarded by tl.where) on rows with no key
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------------
# Fixed grid: every block x every mask variant (fast, deterministic coverage).
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_mask_variants(block, variant):
    assert forward_failures(forward_module(block), **VARIANTS[variant]) == []


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("D", HEAD_DIMS)
def test_head_dims_and_dtypes(dtype, D):
    assert forward_failures(forward_module(), dtype=dtype, D=D, Nq=33, Nk=77, causal=True, seed=D) == []


@pytest.mark.parametrize("D", (1, 3, 255, 256))
def test_extreme_head_dims(D):
    """The ends of the supported range: D = 1 pads to a 16-wide tile, D = 256 fills the largest."""
    assert forward_failures(forward_module(), D=D, Nq=20, Nk=70, window=(30, 0), seed=D) == []


# ----------------------------------------------------------------------------------
# Hypothesis: random shapes, masks, dtypes and blocks.
# ----------------------------------------------------------------------------------


@settings(max_examples=examples(ci=20, explore=100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_n=200, max_window=80, dtypes=DTYPES))
def test_random_cases(block_case):
    block, case = block_case
    assert forward_failures(forward_module(block), **case) == []


# ----------------------------------------------------------------------------------
# Numerical safety.
# ----------------------------------------------------------------------------------
def test_shift_invariance_large_logits():
    """logits + 1e4 give the same softmax (no overflow: every exponent is <= 0).

    The shift enters through one extra coordinate (q_D = c, k_D = 1), so the kernel really
    sees logits near 1e4. fp32 spacing there is ~1e-3, which bounds the agreement.
    """
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((1, 2, 50, 31), generator=gen) for _ in range(3))
    scale = 0.2
    shift = 1e4
    q2 = torch.cat([q, torch.full((1, 2, 50, 1), shift / scale)], dim=-1)
    k2 = torch.cat([k, torch.ones((1, 2, 50, 1))], dim=-1)
    v2 = torch.cat([v, torch.zeros((1, 2, 50, 1))], dim=-1)
    for causal in (False, True):
        out, lse = on_device(api.attention_forward, forward_module(), q, k, v, causal=causal,
                             alignment="top_left", window=None, key_lengths=None, mask=None, scale=scale)
        out2, lse2 = on_device(api.attention_forward, forward_module(), q2, k2, v2, causal=causal,
                               alignment="top_left", window=None, key_lengths=None, mask=None, scale=scale)
        assert torch.isfinite(out2).all() and torch.isfinite(lse2).all()
        assert (out2[..., :-1] - out).abs().max() <= 2e-3 * v.abs().max()
        assert (lse2 - shift - lse).abs().max() <= 2e-3


def test_no_nan_on_fully_masked_inputs():
    """Every row without a key: out is exactly 0, lse exactly -inf, nothing is NaN."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn((2, 2, 40, 16), generator=gen) for _ in range(3))
    for kw in (dict(key_lengths=torch.tensor([0, 0])), dict(mask=torch.zeros((40, 40), dtype=torch.bool)),
               dict(causal=True, alignment="bottom_right", key_lengths=torch.tensor([0, 0]))):
        kw = {"causal": False, "alignment": "top_left", "window": None, "key_lengths": None, "mask": None,
              "scale": None, **kw}
        out, lse = on_device(api.attention_forward, forward_module(), q, k, v, **kw)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.isneginf(lse).all()


def test_empty_tiles_are_skipped():
    """A dense mask that hides every tile: the block map says so, the kernel reads no key."""
    mask = torch.zeros((70, 150), dtype=torch.bool)
    mask[:, 64:70] = True  # one partial key tile of 64
    tiles = api.block_map(mask, 70, 150, 64, 64)
    assert tiles.tolist() == [[[[0, 1, 0], [0, 1, 0]]]]
    mask[:, :64] = True  # in-place edit: the map follows the content (nothing is cached)
    assert api.block_map(mask, 70, 150, 64, 64).tolist() == [[[[2, 1, 0], [2, 1, 0]]]]


def test_non_contiguous_inputs():
    gen = torch.Generator().manual_seed(5)
    # the views are taken on the test device: moving a strided view would make it contiguous
    q = to_device(torch.randn((1, 40, 2, 32), generator=gen)).transpose(1, 2)  # (B, H, N, D), N stride != D
    k = to_device(torch.randn((1, 2, 32, 50), generator=gen)).transpose(2, 3)  # d is the slow axis
    v = to_device(torch.randn((1, 2, 50, 64), generator=gen))[..., ::2]  # stride 2 on d
    assert not any(t.is_contiguous() for t in (q, k, v))
    out, lse = on_device(api.attention_forward, forward_module(), q, k, v, causal=True, alignment="top_left",
                         window=None, key_lengths=None, mask=None, scale=None)
    q, k, v = to_cpu((q, k, v))
    ref_out, ref_lse = reference(q, k, v, causal=True)
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k) == []


# ----------------------------------------------------------------------------------
# Mutants: a wrong term printed into the template is caught by the same check.
# ----------------------------------------------------------------------------------
MUTANTS = {
    "alpha_wrong_sign": ("FORWARD_TILE", "alpha", exp2(n.m_safe - n.m_i)),
    "no_m_guard": ("FORWARD_TILE", "m_safe", n.m_ij),
    "l_not_rescaled": ("FORWARD_TILE", "l_i", n.l_i + n.l_ij),
    "finite_mask_value": ("MASK_TERM", "qk", sp.Piecewise((n.qk, M.keep), (-10000, True))),
    "lse_log2_units": ("FORWARD_EPILOGUE", "lse", n.m_i + log2(n.l_i)),
}


#: what the real tests run: several key tiles, a batch with no key at all, and (bottom-right,
#: N_q > N_k) tiles holding rows with keys beside rows without any
MUTANT_CASE = dict(B=2, Nq=150, Nk=120, causal=True, alignment="bottom_right", key_lengths=[0, 100])


def _mutant_module(monkeypatch, tmp_path, mutant):
    group, name, expr = MUTANTS[mutant]
    if group == "MASK_TERM":
        monkeypatch.setattr(M, "MASK_TERM", T.Term(n.qk, expr, "block_update"))
    else:
        monkeypatch.setattr(T, group, replace_term(getattr(T, group), name, expr))
    variant = BlockConfig(64, 64).variants()[0]
    path = tmp_path / f"mutant_{mutant}.py"
    path.write_text(render.render_variant(variant))
    return manifest.import_file(path)


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mutated_template_is_caught(monkeypatch, tmp_path, mutant):
    mod = _mutant_module(monkeypatch, tmp_path, mutant)
    failures = forward_failures(mod, **MUTANT_CASE)
    assert failures, f"mutant {mutant} passed the kernel-vs-reference check"
    # and the unmutated render of the same variant passes it
    monkeypatch.undo()
    assert forward_failures(forward_module(), **MUTANT_CASE) == []


def test_rounding_keeps_stage_ranges_ordered():
    """The three loop ranges tile [kv_lo, kv_hi) in order, full tiles inside [full_start, full_end)."""
    names = [t.name for t in M.TILE_LOOP]
    assert names == ["kv_lo", "kv_hi", "full_lo", "full_hi"]
    f = {t.symbol: t.expr for t in M.TILE_LOOP}
    for ks, ke, fs, fe, bn in itertools.product((0, 5, 64), (-3, 0, 70, 128), (0, 10, 64, 100), (-5, 0, 64, 90),
                                                (16, 64)):
        if fs < ks or fe > ke:
            continue  # tile_bounds guarantee full within kv (monotone bounds)
        env = {M.kv_start: ks, M.kv_end: ke, M.full_start: fs, M.full_end: fe, n.B_c: bn}
        vals = {}
        for sym in (M.kv_lo, M.kv_hi, M.full_lo, M.full_hi):
            vals[sym] = int(f[sym].subs({**env, **vals}))
        lo, hi, flo, fhi = (vals[s] for s in (M.kv_lo, M.kv_hi, M.full_lo, M.full_hi))
        assert lo <= flo <= fhi <= hi and lo % bn == hi % bn == flo % bn == fhi % bn == 0
        assert lo <= max(ks, 0) and (ke <= ks or hi >= ke)
        assert fhi == flo or (flo >= fs and fhi <= fe)
