"""flash_attention_with_kvcache with softcap, ALiBi and attention sinks (issue 15) against float64.

The reference is ``spec.reference.attention`` (float64, the score modifications from their
definitions) on each batch entry's first ``cache_seqlens[b]`` keys, bottom-right aligned: token
``i`` of ``N_q`` at position ``cache_seqlens[b] − N_q + i``. Every cache slot and page past a
length is NaN (``test_decode.make_problem``), so a kernel that read one would return NaN.
The sink must count once per row whatever ``num_splits`` (claim ``sink_once_combine``; the
mutants that merge it per split are in tests/test_mutants.py). Interpreter runs are slow:
a few tiny problems (B = 2, N_q <= 3, GQA 2 x 2 heads, caches of at most 70 keys, D = 16).
"""

from __future__ import annotations

import math

import pytest
import torch
from test_decode import D, TOL, make_problem

from generated import flash_attention_with_kvcache
from generator import checking
from spec import reference

#: lse is fp32 on chip in every dtype: a bound of fp32 rounding over ~70 keys
LSE_TOL = 1e-4


def score_mods(mods, B, Hq, seed):
    """``{softcap, alibi_slopes, sinks}`` for the names in ``mods`` (``all``: the three): BLOOM's
    slopes 2^{-8h/Hq} ((B, Hq) per batch entry for ``alibi_b``), sinks of either sign, a cap of 2."""
    g = torch.Generator().manual_seed(1000 + seed)
    mods = {"softcap", "alibi", "sinks"} if mods == "all" else {mods}
    kw = {}
    if "softcap" in mods:
        kw["softcap"] = 2.0
    if "alibi" in mods or "alibi_b" in mods:
        slopes = 2.0 ** (-8 * (torch.arange(Hq) + 1) / Hq)
        kw["alibi_slopes"] = (slopes * (1 + torch.rand(B, Hq, generator=g)) if "alibi_b" in mods else slopes).float()
    if "sinks" in mods:
        kw["sinks"] = 2 * torch.randn(Hq, generator=g)
    return kw


def reference_decode(q, k, v, lens, *, causal, softcap=None, alibi_slopes=None, sinks=None):
    """float64 per batch entry: out (B, N_q, Hq, D), lse (B, Hq, N_q). An empty cache row gives
    out 0 and lse = sink (-inf without sinks)."""
    B, Nq, Hq, _ = q.shape
    outs, lses = [], []
    for b in range(B):
        L = int(lens[b])
        if L == 0:
            outs.append(torch.zeros(Nq, Hq, D, dtype=torch.float64))
            lse = sinks.double()[:, None].expand(Hq, Nq) if sinks is not None else torch.full((Hq, Nq), -math.inf)
            lses.append(lse.to(torch.float64))
            continue
        slopes = alibi_slopes[b:b + 1] if alibi_slopes is not None and alibi_slopes.dim() == 2 else alibi_slopes
        qq = q[b:b + 1].transpose(1, 2).double()
        kk, vv = (t[b:b + 1, :L].transpose(1, 2).double() for t in (k, v))
        o, lse = reference.attention(qq, kk, vv, causal=causal, alignment="bottom_right", softcap=softcap,
                                     alibi_slopes=slopes, sinks=sinks)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses)


def run(q, k, v, lens_t, paged, table, num_splits, causal=False, **kw):
    kc, vc = paged if paged else (k, v)
    return flash_attention_with_kvcache(q, kc, vc, lens_t, block_table=table, causal=causal, num_splits=num_splits,
                                        return_lse=True, **kw)


#: (modification, num_splits, page_size or None, dtype, causal): every modification alone and all
#: three, unsplit, 2 and several splits, contiguous and paged, the three dtypes
CASES = [
    ("softcap", 1, None, torch.float32, False),
    ("softcap", 3, 16, torch.float16, True),
    ("alibi", 1, 16, torch.float32, True),
    ("alibi_b", 2, None, torch.bfloat16, False),
    ("sinks", 1, None, torch.float16, True),
    ("sinks", 4, 32, torch.float32, False),
    ("all", 1, 16, torch.bfloat16, True),
    ("all", 2, None, torch.float32, True),
    ("all", 5, 16, torch.float16, False),
]


@pytest.mark.parametrize("mods,num_splits,page_size,dtype,causal", CASES)
def test_decode_score_mods_match_float64(mods, num_splits, page_size, dtype, causal):
    """GQA (2 query heads per KV head, 2 KV heads), 3 new tokens, lengths 70 and 2: with causal,
    the first token of the short entry sees no key (out 0, lse = sink)."""
    lens = [70, 2]
    q, k, v, lens_t, paged, table = make_problem(7, 2, 3, 2, 2, lens, dtype, page_size)
    kw = score_mods(mods, 2, 4, 7)
    out, lse = run(q, k, v, lens_t, paged, table, num_splits, causal=causal, **kw)
    want_o, want_lse = reference_decode(q, k, v, lens, causal=causal, **kw)
    assert out.dtype == dtype and out.shape == q.shape and lse.dtype == torch.float32
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    torch.testing.assert_close(out.double(), want_o, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(lse.double(), want_lse, atol=LSE_TOL, rtol=LSE_TOL)


@pytest.mark.parametrize("num_splits,page_size", [(1, None), (4, 16)])
def test_empty_cache_row_gives_zero_and_the_sink(num_splits, page_size):
    """cache_seqlens[b] = 0: out exactly 0 and lse exactly the head's sink, unsplit and split."""
    q, k, v, lens_t, paged, table = make_problem(8, 2, 2, 2, 1, [0, 33], torch.float16, page_size, capacity=40)
    kw = score_mods("all", 2, 2, 8)
    out, lse = run(q, k, v, lens_t, paged, table, num_splits, **kw)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.equal(lse[0], kw["sinks"][:, None].expand(2, 2))
    want_o, want_lse = reference_decode(q, k, v, [0, 33], causal=False, **kw)
    torch.testing.assert_close(out.double(), want_o, atol=TOL[torch.float16], rtol=TOL[torch.float16])
    torch.testing.assert_close(lse.double(), want_lse, atol=LSE_TOL, rtol=LSE_TOL)


def test_sink_is_counted_once_whatever_num_splits():
    """num_splits = 1 (sink in the kernel's epilogue) and 2, 4, 7 (sink after the merge) agree to
    fp32 rounding, and lse with the sink is log(e^sink + e^lse without it) for every split count:
    a sink merged once per split would add (S − 1)·e^sink."""
    lens = [70, 45]
    q, k, v, lens_t, _, _ = make_problem(9, 2, 2, 2, 2, lens, torch.float32)
    sinks = torch.tensor([1.5, -0.5, 3.0, 0.0])
    one, lse1 = run(q, k, v, lens_t, None, None, 1, sinks=sinks)
    for s in (2, 4, 7):
        out, lse = run(q, k, v, lens_t, None, None, s, sinks=sinks)
        assert (out - one).abs().max() <= 2e-6 and (lse - lse1).abs().max() <= 2e-6, s
        _, plain = run(q, k, v, lens_t, None, None, s)
        once = torch.logaddexp(plain.double(), sinks.double()[None, :, None])
        torch.testing.assert_close(lse.double(), once, atol=2e-6, rtol=0)


@pytest.mark.parametrize("page_size", [None, 16])
def test_minus_inf_sink_on_an_empty_cache_row_agrees_whatever_num_splits(page_size):
    """Issue 23 row 10: sinks = -inf with cache_seqlens[b] = 0 gave NaN out and lse unsplit
    (num_splits = 1: the kernel's sink fold) and 0 / -inf split (the combine). Now both give out 0,
    lse -inf there, and agree with the float64 reference everywhere."""
    q, k, v, lens_t, paged, table = make_problem(10, 2, 2, 2, 1, [0, 33], torch.float32, page_size, capacity=40)
    sinks = torch.tensor([float("-inf"), 0.25])
    one, lse1 = run(q, k, v, lens_t, paged, table, 1, sinks=sinks)
    two, lse2 = run(q, k, v, lens_t, paged, table, 2, sinks=sinks)
    for out, lse in ((one, lse1), (two, lse2)):
        assert not torch.isnan(out).any() and not torch.isnan(lse).any()
        assert torch.equal(out[0], torch.zeros_like(out[0]))
        assert torch.equal(lse[0, 0], torch.full_like(lse[0, 0], float("-inf"))) and (lse[0, 1] == 0.25).all()
    assert (one - two).abs().max() <= 2e-6 and torch.equal(torch.isinf(lse1), torch.isinf(lse2))
    want_o, want_lse = reference_decode(q, k, v, [0, 33], causal=False, sinks=sinks)
    torch.testing.assert_close(one.double(), want_o, atol=TOL[torch.float32], rtol=TOL[torch.float32])
    torch.testing.assert_close(lse1.double(), want_lse, atol=LSE_TOL, rtol=LSE_TOL)


def test_score_mod_inputs_are_checked():
    """The same checks as flash_attention's (checks.check_score_mods), and no gradient through sinks."""
    q, k, v, lens, _, _ = make_problem(10, 1, 1, 2, 1, [20], torch.float32)
    with pytest.raises(ValueError, match="softcap must be a finite number > 0"):
        flash_attention_with_kvcache(q, k, v, lens, softcap=-1.0)
    with pytest.raises(TypeError, match="sinks must be float32"):
        flash_attention_with_kvcache(q, k, v, lens, sinks=torch.zeros(2, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"alibi_slopes must have shape \(2,\) or \(1, 2\)"):
        flash_attention_with_kvcache(q, k, v, lens, alibi_slopes=torch.ones(3))
    with pytest.raises(RuntimeError, match="inference only"):
        flash_attention_with_kvcache(q, k, v, lens, sinks=torch.zeros(2, requires_grad=True))


def test_the_kernels_print_the_score_mod_terms():
    """The decode kernel includes the dense forward's printed softcap / ALiBi lines and SINK_FOLD;
    the merge kernel prints SINK_PARTIAL, then the fold lines once more, after its split loop."""
    from pathlib import Path

    from generator import render
    from spec.printer import print_term
    from spec import terms

    root = Path(__file__).resolve().parent.parent / "generated"
    decode_src = (root / "attention_decode_br64_bc64.py").read_text()
    for t in terms.SOFTCAP_SCALARS + terms.SOFTCAP + terms.ALIBI + (terms.ALIBI_SCALAR,) + terms.SINK_FOLD:
        assert print_term(t) in decode_src, t.name
    merge_src = (root / "merge_state_br64_bc64.py").read_text()
    fold = render.fold_lines()
    after_loop = merge_src[merge_src.index("if HAS_SINKS:"):]
    assert all(print_term(t) in after_loop for t in terms.SINK_PARTIAL)
    assert all(line in after_loop for line in fold)


def test_custom_op_with_score_mods_compiles():
    """torch.compile traces the op with the score modifications (the custom op's fake)."""
    q, k, v, lens, _, _ = make_problem(11, 1, 1, 2, 1, [30], torch.float32)
    k, v = k.nan_to_num(), v.nan_to_num()
    kw = score_mods("all", 1, 2, 11)

    def f(q, k, v, lens):
        return flash_attention_with_kvcache(q, k, v, lens, causal=True, num_splits=2, **kw)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, lens), f(q, k, v, lens))


#: ALiBi slopes as views with their own strides: a (Hq,) slice of stride 2, a (B, Hq) transpose (strides (1, B)),
#: a (Hq,) expanded to (B, Hq) (batch stride 0); values 0.05-0.25, a different one per (batch, head)
SLOPE_VIEWS = {
    "(Hq,) stride 2": lambda g, B, Hq: (0.05 + 0.2 * torch.rand(2 * Hq, generator=g))[::2],
    "(B, Hq) transposed": lambda g, B, Hq: (0.05 + 0.2 * torch.rand(Hq, B, generator=g)).t(),
    "(B, Hq) expanded": lambda g, B, Hq: (0.05 + 0.2 * torch.rand(Hq, generator=g)).expand(B, Hq),
}


@pytest.mark.parametrize("layout", list(SLOPE_VIEWS))
def test_decode_alibi_slopes_at_any_strides(layout):
    """Issue 24: decode reads the ALiBi slopes at the strides spec.launch.decode_launch takes from the tensor as
    passed (claim decode_addresses); each view gives the float64 reference's result within the case's bound
    (generator.checking, ALiBi's β included). GQA 2 x 2 heads, 2 new tokens, 40 keys, two splits."""
    B, Hq, lens = 2, 4, [40, 37]
    q, k, v, lens_t, _, _ = make_problem(11, B, 2, 2, 2, lens, torch.float32, capacity=40)
    slopes = SLOPE_VIEWS[layout](torch.Generator().manual_seed(11), B, Hq)
    assert not slopes.is_contiguous()
    out, lse = run(q, k, v, lens_t, None, None, 2, causal=True, alibi_slopes=slopes)
    want_o, want_lse = reference_decode(q, k, v, lens, causal=True, alibi_slopes=slopes)
    for b, L in enumerate(lens):  # per batch entry: its keys (no NaN past the length) and its shift
        head_first = lambda t: t[b:b + 1].transpose(1, 2)  # noqa: E731  (B, N, H, D) -> (1, H, N, D)
        slope_b = slopes[b] if slopes.dim() == 2 else slopes
        failures = checking.attention_failures(
            head_first(out), lse[b:b + 1], head_first(want_o), want_lse[b:b + 1], head_first(v)[:, :, :L],
            q=head_first(q), k=head_first(k)[:, :, :L], alibi=checking.alibi_beta(slope_b, 2, L, shift=L - 2))
        assert failures == [], (layout, b, failures)
