"""Score modifications (issue 15): softcap, ALiBi and attention sinks, forward and backward.

* The claims (``spec.proofs.score_mods``) fail on each of the issue's mutants (softcap dropped,
  ALiBi sign or alignment wrong, the modification after the mask, the sink added per tile or per
  split, the softcap or sink gradient wrong): tests/test_mutants.py; the split-KV combine on numbers.
* The kernels (under ``TRITON_INTERPRET=1``, tiny sizes) against the float64 reference
  ``spec.reference.attention`` with the same modifications: every combination of the three,
  with masks, GQA and both alignments, forward and backward (dq, dk, dv and dsinks), fp32, fp16
  and bf16, by Hypothesis; and the same check catches the mutants printed into the templates.
* The argument checks, and the off case printing nothing new into the kernels' arithmetic.
"""

from __future__ import annotations

import itertools

import pytest
import sympy as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_cases import mask_arguments, on_device, random_inputs, to_cpu, to_device
from generated import flash_attention
from generator import manifest, render
from generator.checking import TOLERANCES as FWD_TOL
from generator.checking import alibi_beta, attention_failures
from generator.runtime import api, dispatch
from generator.variants import BlockConfig
from spec import masks as M
from spec import recurrences as R
from spec import terms as T
from spec.reference import attention as reference

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

# The mutants, as terms: their claims fail on them in tests/test_mutants.py (one home for
# the claims' mutants); here the same terms are printed into the templates.
from test_mutants import (ALIBI_NO_SHIFT, ALIBI_SIGN, SINK_GRAD_SIGN, SOFTCAP_DROPPED,  # noqa: E402
                          SOFTCAP_DS_DROPPED, sink_per_split)


def test_split_combine_with_sink_numerically():
    """The split-KV combine of spec.recurrences on numbers, against the reference: the sink
    merged once is right for any number of splits; merged per split it is wrong from 2 on."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(s, generator=gen, dtype=torch.float64) for s in ((1, 1, 1, 4), (1, 1, 6, 4), (1, 1, 6, 1)))
    sink = torch.tensor([0.7], dtype=torch.float64)
    want_out, want_lse = reference(q, k, v, sinks=sink)
    logits = (q @ k.transpose(-1, -2) / 2).flatten().tolist()  # scale 1/sqrt(4)
    keys = [R.key_state(sp.Float(x), sp.Float(val)) for x, val in zip(logits, v.flatten().tolist())]
    for splits in ([keys], [keys[:2], keys[2:]], [keys[:1], keys[1:3], [], keys[3:]]):
        states = [R.fold(s) for s in splits]
        out, lse = R.normalise(R.combine_with_sink(states, sp.Float(0.7)))
        assert abs(float(out) - want_out.item()) < 1e-12 and abs(float(lse) - want_lse.item()) < 1e-12
        bad_out, _ = R.normalise(sink_per_split(states, sp.Float(0.7)))
        assert (abs(float(bad_out) - want_out.item()) > 1e-3) == (len(splits) > 1)


# ----------------------------------------------------------------------------------
# Kernels against the reference.
# ----------------------------------------------------------------------------------
#: the backward's tolerances: empirical (generator.checking; no bound covers the backward)
from generator.checking import GRAD_TOLERANCES_EMPIRICAL as BWD_TOL  # noqa: E402


def score_mod_tensors(mods, B, Hq, gen):
    """``{softcap, alibi_slopes, sinks}`` for the names in ``mods``: ALiBi slopes as in BLOOM
    (2^{-8h/H}, per batch entry when ``alibi_b``), sinks of either sign, a cap of 1 to 5."""
    kw = {}
    if "softcap" in mods:
        kw["softcap"] = float(1 + 4 * torch.rand((), generator=gen))
    if "alibi" in mods or "alibi_b" in mods:
        slopes = 2.0 ** (-8 * (torch.arange(Hq) + 1) / Hq)
        kw["alibi_slopes"] = (slopes * (1 + torch.rand((B, Hq), generator=gen)) if "alibi_b" in mods else slopes).float()
    if "sinks" in mods:
        kw["sinks"] = 2 * torch.randn(Hq, generator=gen)
    return kw


def mod_case(*, mods, dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=40, Nk=50, D=16, seed=0, causal=False,
             alignment="top_left", window=None, key_lengths=None, mask=None):
    gen, q, k, v, do = random_inputs(dtype=dtype, B=B, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, D=D, seed=seed, grad=True)
    key_lengths, mask = mask_arguments(gen, B, Hq, Nq, Nk, key_lengths, mask)
    kw = dict(causal=causal, alignment=alignment, window=window, key_lengths=key_lengths, mask=mask,
              **score_mod_tensors(mods, B, Hq, gen))
    return (q, k, v, do), kw


def forward_mod_failures(module, inputs, kw):
    """The kernel against float64 within the bound of this very case (claim forward_error_bound): its data,
    sizes and block, the cap, and ALiBi's β (the sink's fold is not in the bound: generator.checking)."""
    q, k, v, _ = inputs
    out, lse = on_device(api.attention_forward, module, q, k, v, scale=None, tma=False, **kw)
    ref_out, ref_lse = reference(q, k, v, **kw)
    alibi = alibi_beta(kw.get("alibi_slopes"), q.shape[2], k.shape[2], kw.get("alignment", "top_left"))
    return attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k, block_n=module.BLOCK_N,
                              softcap=kw.get("softcap") is not None, alibi=alibi)


def backward_mod_failures(inputs, kw, block=(64, 64)):
    """dq, dk, dv (and dsinks) of the kernels against float64 autograd of the reference,
    relative to each gradient's largest magnitude (floored at 1% of the largest of them)."""
    q, k, v, do = inputs
    sinks = kw.get("sinks")
    leaves = [to_device(t).detach().clone().requires_grad_() for t in (q, k, v) + ((sinks,) if sinks is not None else ())]
    kernel_kw = to_device(dict(kw, **({"sinks": None} if sinks is not None else {})))
    if sinks is not None:
        kernel_kw["sinks"] = leaves[3]
    flash_attention(*leaves[:3], block=block, **kernel_kw).backward(to_device(do))
    got = to_cpu([t.grad for t in leaves])
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_kw = dict(kw)
    if sinks is not None:
        ref_kw["sinks"] = sinks.double().requires_grad_()
        ref_leaves.append(ref_kw["sinks"])
    ref_out, _ = reference(*ref_leaves[:3], **ref_kw)
    ref_out.backward(do.double())
    want = [t.grad for t in ref_leaves]
    floor = 1e-2 * max(w.abs().max().item() for w in want[:3])
    failures = []
    for name, g, w in zip(("dq", "dk", "dv", "dsinks"), got, want):
        if g is None or not torch.isfinite(g).all():
            failures.append(f"{name}: missing or not finite")
            continue
        err = (g.double() - w).abs().max().item() / max(w.abs().max().item(), floor, 1e-30)
        if not err <= BWD_TOL[q.dtype]:
            failures.append(f"{name}: max error {err:.3g} x max|grad| > {BWD_TOL[q.dtype]:g}")
    return failures


MODS = ("softcap", "alibi", "alibi_b", "sinks")
#: every combination of the three modifications (ALiBi as (Hq,) or (B, Hq)) once, with masks
COMBINATIONS = [c for r in (1, 2, 3) for c in itertools.combinations(MODS, r) if not {"alibi", "alibi_b"} <= set(c)]
MASK_CASES = [dict(), dict(causal=True, alignment="bottom_right", Nq=50, Nk=30),
              dict(B=2, key_lengths=[0, 33], window=(9, 4)), dict(mask="empty_rows", Hq=4, Hkv=2)]


@pytest.mark.parametrize("mods", COMBINATIONS, ids="+".join)
def test_combinations_forward_and_backward(mods):
    """Each combination with one of the mask cases (rows with no key included), fp32."""
    case = MASK_CASES[COMBINATIONS.index(mods) % len(MASK_CASES)]
    inputs, kw = mod_case(mods=mods, seed=COMBINATIONS.index(mods), **case)
    assert forward_mod_failures(api.module_for("fwd", (64, 64)), inputs, kw) == []
    assert backward_mod_failures(inputs, kw) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision(dtype):
    """All three modifications at once, causal bottom-right, GQA, in fp16 and bf16."""
    inputs, kw = mod_case(mods=("softcap", "alibi_b", "sinks"), dtype=dtype, B=2, Hq=4, Hkv=2, Nq=30, Nk=45,
                          causal=True, alignment="bottom_right")
    assert forward_mod_failures(api.module_for("fwd", (16, 32)), inputs, kw) == []
    assert backward_mod_failures(inputs, kw, (16, 32)) == []


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_combinations(data):
    """Hypothesis over the modifications, masks, GQA, alignments, dtypes and blocks (tiny sizes)."""
    B, Hkv = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    Nk = data.draw(st.integers(1, 40))
    case = dict(dtype=data.draw(st.sampled_from(tuple(FWD_TOL))), B=B, Hkv=Hkv,
                Hq=Hkv * data.draw(st.sampled_from((1, 2))), Nq=data.draw(st.integers(1, 40)), Nk=Nk,
                D=data.draw(st.sampled_from((16, 24))), seed=data.draw(st.integers(0, 99)),
                causal=data.draw(st.booleans()), alignment=data.draw(st.sampled_from(M.ALIGNMENTS)),
                window=data.draw(st.none() | st.tuples(st.integers(0, 20), st.integers(0, 20))),
                key_lengths=data.draw(st.none() | st.lists(st.integers(0, Nk), min_size=B, max_size=B)),
                mask=data.draw(st.sampled_from((None, "random", "empty_rows"))))
    mods = data.draw(st.sampled_from(COMBINATIONS))
    block = data.draw(st.sampled_from(((16, 32), (64, 64))))
    inputs, kw = mod_case(mods=mods, **case)
    assert forward_mod_failures(api.module_for("fwd", block), inputs, kw) == []
    assert backward_mod_failures(inputs, kw, block) == []


def test_sinks_on_rows_with_no_key():
    """A row with no key gives out 0, lse = sink, and dL/dsink = dlse there (no NaN)."""
    inputs, kw = mod_case(mods=("sinks", "softcap"), B=2, key_lengths=[0, 20])
    q, k, v, _ = inputs
    out, lse = on_device(api.attention_forward, api.module_for("fwd", (16, 32)), q, k, v, scale=None, **kw)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.allclose(lse[0], kw["sinks"][:, None].expand_as(lse[0]), rtol=1e-6, atol=1e-6)
    sinks = to_device(kw["sinks"]).clone().requires_grad_()
    _, lse = flash_attention(*to_device((q, k, v)), key_lengths=to_device(kw["key_lengths"]), sinks=sinks,
                             softcap=kw["softcap"], return_lse=True)
    lse[0].sum().backward()  # L = Σ lse of batch 0 = N_q·sink per head: dL/dsink = N_q
    assert torch.allclose(to_cpu(sinks.grad), torch.full((2,), 40.0))


def test_minus_inf_sink_on_a_row_with_no_key_agrees_with_no_keys_at_all():
    """Issue 23 row 10: sinks = -inf on rows with no key (key_lengths = 0) gave NaN out, lse and dsinks,
    where N_k = 0 gives out 0, lse -inf. Now the kernel, the N_k = 0 path and the float64 reference agree:
    out 0, lse -inf, and dL/dsink = dlse there (the limit of a finite sink's, for which lse = sink)."""
    gen = torch.Generator().manual_seed(23)
    q = torch.randn(1, 2, 8, 16, generator=gen).requires_grad_()
    k, v = (torch.randn(1, 2, 20, 16, generator=gen) for _ in range(2))
    weights = torch.randn(1, 2, 8, generator=gen)
    results = {}
    for name, kk, vv, lengths in (("key_lengths 0", k, v, torch.tensor([0])), ("N_k 0", k[:, :, :0], v[:, :, :0], None)):
        sinks = torch.tensor([float("-inf"), 0.5]).requires_grad_()
        out, lse = on_device(flash_attention, q, kk, vv, key_lengths=lengths, sinks=sinks, return_lse=True,
                             block=(16, 32))
        torch.autograd.backward((out, lse), (torch.ones_like(out), weights))  # dlse = weights
        results[name] = (out.detach(), lse.detach(), sinks.grad.clone())
    got, want = results["key_lengths 0"], results["N_k 0"]
    for a in got:
        assert not torch.isnan(a).any(), got
    assert torch.equal(got[0], torch.zeros_like(got[0])) and torch.equal(got[1], want[1])
    assert torch.isinf(got[1][0, 0]).all() and (got[1][0, 0] < 0).all() and (got[1][0, 1] == 0.5).all()
    torch.testing.assert_close(got[2], want[2], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[2], weights.sum((0, 2)), rtol=1e-6, atol=1e-6)  # dL/dsink = Σ dlse per head
    sinks = torch.tensor([float("-inf"), 0.5], dtype=torch.float64, requires_grad=True)
    out, lse = reference(q.detach().double(), k.double(), v.double(), key_lengths=torch.tensor([0]), sinks=sinks)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(lse.float(), got[1])
    torch.autograd.backward((out, lse), (torch.ones_like(out), weights.double()))
    torch.testing.assert_close(sinks.grad.float(), got[2], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("scale", [1e-40, 1e-38, -1e-40, 2.0**-65, 0.0])
@pytest.mark.parametrize("mod", ["alibi", "softcap", "both"])
def test_tiny_scale_with_a_score_mod_is_accurate(scale, mod):
    """Issue 23 row 9: ALiBi with scale <= 1e-38 overflowed slope/scale (error 5e-2, NaN at 1e-40), the
    softcap's c/scale likewise, and such scales were then refused. The kernels now form no quotient by
    the scale (the modified score in log2 units, the tile at scale 1: claim score_mod_invariant), so any
    scale is accepted and matches float64, within the bound of the case: forward_bound(softcap=True) with
    the cap, forward_bound(alibi=β) with ALiBi (claim forward_error_bound (v), (vi))."""
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 2, 12, 16, generator=gen) for _ in range(3))
    kw = {"alibi_slopes": torch.tensor([0.5, 0.25])} if mod != "softcap" else {}
    kw.update({"softcap": 30.0} if mod != "alibi" else {})
    out, lse = on_device(flash_attention, q, k, v, scale=scale, return_lse=True, block=(16, 32), **kw)
    ref_out, ref_lse = reference(q.double(), k.double(), v.double(), scale=scale, **kw)
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k, scale=scale, block_n=32,
                              softcap=mod != "alibi", alibi=alibi_beta(kw.get("alibi_slopes"), 12, 12)) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("slopes,causal,alignment", [((8.0, -8.0), False, "top_left"),
                                                     ((8.0, 0.125), True, "bottom_right")])
def test_large_alibi_slopes_within_the_proven_bound(dtype, slopes, causal, alignment):
    """Issue 23 deliverable 2: ALiBi's tolerance is proven, forward_bound(alibi=β) (claim forward_error_bound
    (vi)): slope ±8 over 64 keys, |bias| up to β = 504, both signs (a negative slope rewards distance). Measured
    (fp32 / fp16 / bf16, 16 x 32 tiles): out 1.4e-7 / 2.5e-4 / 4.0e-3 x max|v| against bounds 4.6e-4 /
    1.4e-3 / 8.3e-3; lse within 4e-7 of bounds >= 2.3e-4."""
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=gen).to(dtype) for _ in range(3))
    kw = dict(alibi_slopes=torch.tensor(slopes), causal=causal, alignment=alignment)
    out, lse = on_device(flash_attention, q, k, v, return_lse=True, block=(16, 32), **kw)
    ref_out, ref_lse = reference(q.double(), k.double(), v.double(), **kw)
    alibi = alibi_beta(kw["alibi_slopes"], 64, 64, alignment)
    assert alibi == 504.0
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k, block_n=32, alibi=alibi) == []


@pytest.mark.parametrize("cap", [1e3, 1e4, 1e30])
def test_large_softcap_within_the_proven_bound(cap):
    """Issue 23 row 8: tanh by exp2 alone has an absolute error ~u, so c·t erred by ~c·u: on this case
    (3 keys, so each weight follows its own score) out / lse errors 3.9e-5 / 8e-5 at c = 1e3, 3.3e-4 /
    6.2e-4 at 1e4, 0.53 / 0.71 at 1e30 before the fix, ~1e-7 / 2e-7 after. The printed cap is relatively
    accurate (claim softcap_accuracy): fp32 against float64 within forward_bound(softcap=True), the bound
    of this very case (claim forward_error_bound), at every cap."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 40, 16, generator=gen)
    k, v = (torch.randn(1, 2, 3, 16, generator=gen) for _ in range(2))
    out, lse = on_device(flash_attention, q, k, v, softcap=cap, return_lse=True, block=(16, 32))
    ref_out, ref_lse = reference(q.double(), k.double(), v.double(), softcap=cap)
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k, softcap=True, block_n=32) == []


# ----------------------------------------------------------------------------------
# Mutants printed into the templates: the same numeric checks catch them.
# ----------------------------------------------------------------------------------
KERNEL_MUTANTS = {  # name: (kind, spec.terms group, its mutant, the modifications of the case)
    "softcap_dropped": ("fwd", "SOFTCAP", SOFTCAP_DROPPED, ("softcap",)),
    "alibi_sign": ("fwd", "ALIBI", ALIBI_SIGN, ("alibi",)),
    "alibi_no_shift": ("fwd", "ALIBI", ALIBI_NO_SHIFT, ("alibi",)),
    # a sink folded once per key tile: on this case's rows (several tiles) at least twice
    "sink_folded_twice": ("fwd", "SINK_FOLD", T.SINK_FOLD + T.SINK_FOLD, ("sinks",)),
    "softcap_ds_dropped": ("bwd", "SOFTCAP_DS", SOFTCAP_DS_DROPPED, ("softcap",)),
    "sink_grad_sign": ("bwd", "SINK_GRAD", SINK_GRAD_SIGN, ("sinks",)),
}
#: bottom-right with N_q < N_k (shift != 0: an alignment error shows), two key tiles of 64
MUTANT_CASE = dict(Nq=30, Nk=100, causal=True, alignment="bottom_right")


def _mutant_module(monkeypatch, tmp_path, name):
    kind, group, terms, _ = KERNEL_MUTANTS[name]
    monkeypatch.setattr(T, group, terms)
    variant = next(v for v in BlockConfig(64, 64).variants() if v.kind.name == kind)
    path = tmp_path / f"mutant_score_{name}.py"
    path.write_text(render.render_variant(variant))
    return manifest.import_file(path, f"mutant_score_{name}")


@pytest.mark.parametrize("name", list(KERNEL_MUTANTS))
def test_mutated_templates_are_caught(monkeypatch, tmp_path, name):
    kind, _, _, mods = KERNEL_MUTANTS[name]
    mod = _mutant_module(monkeypatch, tmp_path, name)
    inputs, kw = mod_case(mods=mods, **MUTANT_CASE)
    if kind == "fwd":
        assert forward_mod_failures(mod, inputs, kw), f"mutant {name} passed the forward check"
    else:
        monkeypatch.setattr(dispatch, "module_for", lambda k, block, *args, real=dispatch.module_for:
                            mod if k == "bwd" else real(k, block, *args))
        assert backward_mod_failures(inputs, kw), f"mutant {name} passed the gradient check"
    monkeypatch.undo()
    assert forward_mod_failures(api.module_for("fwd", (64, 64)), inputs, kw) == []
    assert backward_mod_failures(inputs, kw) == []


# ----------------------------------------------------------------------------------
# Arguments, and the off case.
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, error, words", [
    (dict(softcap=0.0), ValueError, "softcap must be a finite number > 0"),
    (dict(softcap=float("inf")), ValueError, "softcap"),
    (dict(alibi_slopes=torch.ones(2, dtype=torch.float64)), TypeError, "alibi_slopes must be float32"),
    (dict(alibi_slopes=torch.ones(3)), ValueError, "alibi_slopes must have shape (2,) or (1, 2)"),
    (dict(sinks=torch.ones(1, 2)), ValueError, "sinks must have shape (2,)"),
    (dict(sinks=[0.0, 0.0]), TypeError, "sinks must be a torch.Tensor"),
])
def test_argument_errors(kw, error, words):
    q = torch.zeros(1, 2, 4, 16)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        on_device(flash_attention, q, q, q, **kw)


def test_off_case_prints_nothing_else():
    """With every modification off the kernels run the unmodified lines: each score-mod line of
    a generated file sits under its constexpr (HAS_SOFTCAP / HAS_ALIBI / HAS_SINKS), and the
    rest of the printed arithmetic is the terms of the unmodified kernel."""
    ctx = render.score_mod_context()["score_mod"]
    for kind in ("fwd", "bwd"):
        source = render.render_variant(next(v for v in BlockConfig(64, 64).variants() if v.kind.name == kind))
        lines = source.splitlines()
        for slot, printed in ctx.items():
            for line in ([printed] if isinstance(printed, str) else printed):
                for at in [k for k, text in enumerate(lines) if text.strip() == line]:
                    guard = next(text for text in reversed(lines[:at]) if text.strip().startswith(("if ", "elif ")))
                    assert guard.strip() in ("if HAS_SOFTCAP:", "if HAS_ALIBI:", "if HAS_SINKS:", "elif HAS_ALIBI:",
                                             "if HAS_SOFTCAP or HAS_ALIBI:"), (kind, slot, guard)
