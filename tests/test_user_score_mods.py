"""User score_mods (spec.score_mods, issue 28): the class, the derived backward, the kernels.

* The decorator refuses, with the reason, what is outside the class (not differentiable in ``s``
  or a float parameter, ``-inf``, a table index that can leave the table) and accepts the examples.
* Claim ``score_mod_derived`` holds and catches mutants of the printed forward, dS, gradient and
  scatter terms; claim ``score_mod_builtins`` (softcap and ALiBi as score_mods) catches a swap.
* ``python -m generator --score-mod`` emits forward and backward kernels (into a temporary package:
  the examples are not part of ``generated/``), hygiene-clean and ``--check``-clean.
* The kernels agree with the float64 reference (``spec.reference.attention(score_mod=...)``) in the
  output and in every gradient, the captured tensors' included (autograd through the reference),
  with causal, window, key lengths, bottom-right alignment and GQA, after softcap and ALiBi with a
  learnable sink, and with a mask_mod in the same call; the captured gradients are bitwise
  repeatable; the outputs agree with PyTorch's FlexAttention (CPU eager, forward: it has no CPU
  backward).
* The varlen path (per segment, gradients included) and the decode path (unsplit and split) agree
  with their float64 references.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import sympy as sp
import torch

from spec import notation as n
from spec import score_mods as SM
from spec.proofs import score_mod_user as P
from spec.reference import attention as reference
from spec.score_mods import NotInClass, score_mod
from spec.terms import Term

EXAMPLES = ("rel_bias", "temperature", "tanh_cap", "batch_scale", "alibi")
#: the examples whose forward error is proven (claim score_mod_error_bound); tanh_cap's is empirical
BOUNDED = tuple(name for name in EXAMPLES if getattr(SM, name).outside_bound() is None)
B, H, HK, N, D = 2, 2, 1, 40, 16  # GQA: two query heads per K/V head
BLOCK = (16, 32)


@pytest.fixture(scope="module")
def package(tmp_path_factory, proved):
    """The examples' kernels, emitted by the CLI into a package of their own (the proofs: the
    session's one ``prove_all()`` run, ``proved``)."""
    from generator import __main__ as cli
    from spec import claims

    root = tmp_path_factory.mktemp("score_mods")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(claims, "prove_all", lambda: list(proved.values()))
        refs = [f"spec.score_mods:{name}" for name in EXAMPLES]
        assert cli.main(["--br", str(BLOCK[0]), "--bc", str(BLOCK[1]), "--score-mod", *refs,
                         "--out", str(root / "sm_kernels")]) == 0
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("sm_kernels")
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "sm_kernels" or m.startswith("sm_kernels.")]:
            del sys.modules[name]


def args_for(name, gen, dtype=torch.float32):
    """Parameters of each example, tensors requiring grad."""
    if name == "rel_bias":
        return {"table": torch.randn(H, 9, generator=gen).requires_grad_(), "max_dist": 4}
    if name == "temperature":
        return {"inv_t": (torch.rand(H, generator=gen) + 0.5).requires_grad_()}
    if name == "tanh_cap":
        return {"cap": 3.0}
    if name == "batch_scale":
        return {"gain": (torch.rand(B, generator=gen) + 0.5).requires_grad_()}
    return {"slopes": (torch.rand(H, generator=gen) * 0.3).requires_grad_()}


def as_double(args):
    return {p: (x.double() if torch.is_tensor(x) else x) for p, x in args.items()}


# ----------------------------------------------------------------------------------
# The class
# ----------------------------------------------------------------------------------
def test_examples_are_analysed():
    assert SM.rel_bias.ints == ("max_dist",) and SM.rel_bias.tensors == {"table": 2}
    assert SM.rel_bias.reads[0].bounds == (SM.HEADS - 1, 2 * SM.Param("max_dist"))
    assert SM.temperature.tensors == {"inv_t": 1} and SM.tanh_cap.floats == ("cap",)
    assert SM.batch_scale.reads[0].bounds == (SM.BATCH - 1,)
    assert SM.temperature.derivative_s() == SM.Param("inv_t").__getitem__(SM.H_IDX)


def _refused(fn, match):
    with pytest.raises(NotInClass, match=match):
        score_mod(fn)


def test_outside_the_class_is_refused_with_the_reason():
    _refused(lambda s: sp.Abs(s), "not differentiable")
    _refused(lambda s, c: sp.Max(s, c), "not differentiable")
    _refused(lambda s, i, j: s + sp.floor(s), "not differentiable")
    _refused(lambda s, i, j: sp.Piecewise((s, i >= j), (0, True)), "Piecewise")
    _refused(lambda s: s ** s, "powers")
    _refused(lambda s, i, j: s + (-sp.oo), "mask_mod")
    _refused(lambda s, i, j: i < j, "not an expression")
    _refused(lambda s, i, j, t: s + t[j - i], "can leave the table")
    _refused(lambda s, i, j, t: s + t[sp.Min(sp.Max(j - i, -1), 3)], r"can leave \[0, 3\]")
    _refused(lambda s, h, i, j, t, c: s + t[h, sp.Min(sp.Max(j - i + c, 0), 2 * c)] * c, "index and as a value")
    _refused(lambda s, i, j, t: s + t[sp.Min(sp.Max(s, 0), 3)], "integer expression")
    _refused(lambda i, j: i + j, "must take the score")


def test_a_learnable_scalar_is_a_constant_index():
    """``t[0]``: a learnable scalar (a constant index, in the table when the tensor has an entry);
    a negative constant is refused with z3's reason."""
    @score_mod
    def global_temperature(s, t):
        return s * t[0]

    assert global_temperature.reads[0].bounds == (0,)
    assert global_temperature.derivative_s() == SM.Param("t")[0]
    with pytest.raises(ValueError, match="at least 1"):
        global_temperature.pack({"t": torch.ones(0)}, B, H)
    assert torch.equal(global_temperature.pack({"t": torch.full((1,), 2.0)}, B, H)[0], torch.tensor([2.0]))
    _refused(lambda s, t: s * t[-1], "can leave")


def test_clamped_and_per_head_reads_are_accepted():
    @score_mod
    def two_tables(s, b, h, i, j, shift, bias, gain, width):
        return s * gain[b, h] + bias[sp.Min(sp.Max(i + shift - j, 0), width)]

    assert two_tables.tensors == {"bias": 1, "gain": 2} and two_tables.ints == ("width",)
    assert [r.bounds for r in two_tables.reads] == [(SM.Param("width"),), (SM.BATCH - 1, SM.HEADS - 1)]


def test_pack_writes_the_vectors_whose_widths_the_entry_check_reads():
    """SF and SI as pack writes them have ScoreMod.widths' lengths (SF's in SI's dims): the vectors the
    decorator's entry check (spec.score_mods.entry_counterexample) bounds every load by."""
    @score_mod
    def tables(s, h, i, j, c, t1, t2, m):
        return s * c + t1[h, sp.Min(sp.Max(i - j, 0), m)] + t2[sp.Min(sp.Max(j, 0), m), h]

    sf, si = tables.pack({"c": 0.5, "t1": torch.ones(H, 4), "t2": torch.ones(3, H), "m": 2}, B, H)
    sf_width, si_width = tables.widths()
    assert len(si) == si_width == 5 and si.tolist() == [2, H, 4, 3, H]
    assert len(sf) == int(sf_width.replace(lambda x: isinstance(x, sp.Indexed) and x.base == SM.SI,
                                           lambda x: si.tolist()[int(x.indices[0])])) == 1 + 4 * H + 3 * H
    assert SM.entry_counterexample(tables) is None


# ----------------------------------------------------------------------------------
# The claims and their mutants
# ----------------------------------------------------------------------------------
def test_claims_hold(proved):
    assert proved["score_mod_derived"].proved and proved["score_mod_builtins"].proved
    assert proved["score_mod_error_bound"].proved


@pytest.mark.parametrize("name", BOUNDED)
def test_bound_cases_catch_a_miscount(name):
    """The generator's counting cases (claim score_mod_error_bound) hold for the printed term and fail on a
    count one short, and on a printed f with one more operation than its stated count."""
    sm = getattr(SM, name)
    assert not _fails(P.bound_cases(sm))
    assert _fails(P._counting_cases(sm, lambda s: s.roundings() - 1))
    longer = sm.kernel_form(sm.expr) * SM.SF[0] * 3 / 7  # two more multiplies, a rounded constant
    assert P.model_roundings(longer)[0] > sm.roundings()


def _fails(cases):
    return any(r != 0 for _, r in cases)


@pytest.mark.parametrize("name", EXAMPLES)
def test_derivative_cases_catch_mutated_printed_terms(name):
    sm = getattr(SM, name)
    assert not _fails(P.derivative_cases(sm))
    us_term, qk_term = sm.forward_terms()
    bad_fwd = (us_term, Term(qk_term.symbol, qk_term.expr + n.qk, qk_term.claim))
    assert _fails(P.derivative_cases(sm, forward=bad_fwd))  # the forward printed is not f
    ds = sm.ds_term()
    assert _fails(P.derivative_cases(sm, ds_term=Term(ds.symbol, 2 * ds.expr, ds.claim)))
    for k, (g, ix) in enumerate(sm.grad_terms()):
        grads = list(sm.grad_terms())
        grads[k] = (Term(g.symbol, 2 * g.expr, g.claim), ix)
        assert _fails(P.derivative_cases(sm, grads=grads)), "a doubled gradient"
        grads[k] = (g, Term(ix.symbol, ix.expr + 1, ix.claim))
        assert _fails(P.derivative_cases(sm, grads=grads)), "a gradient written to the next entry"
        assert _fails(P.derivative_cases(sm, grads=[])), "a read without its gradient"


def test_scatter_mutants_fail_the_claim():
    part, acc = SM.SCATTER
    assert not P.prove_score_mod_derived(scatter=(Term(part.symbol, 2 * part.expr, part.claim), acc)).proved
    assert not P.prove_score_mod_derived(scatter=(part, Term(acc.symbol, SM.sgpart, acc.claim))).proved


def test_builtins_claim_catches_a_swapped_instance():
    assert not P.prove_score_mod_builtins(tanh_cap=SM.temperature).proved
    assert not P.prove_score_mod_builtins(alibi=SM.rel_bias).proved


def test_reference_hook_matches_the_builtins():
    """The reference's score_mod hook with ALiBi and the tanh cap written as score_mods equals its
    built-in alibi_slopes and softcap (float64)."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, N, D, generator=gen, dtype=torch.float64) for _ in range(3))
    slopes = torch.rand(H, generator=gen, dtype=torch.float64)
    for kw in ({"causal": True}, {"causal": True, "alignment": "bottom_right"}):
        a, _ = reference(q, k[:, :, :30], v[:, :, :30], score_mod=SM.alibi, score_args={"slopes": slopes}, **kw)
        b, _ = reference(q, k[:, :, :30], v[:, :, :30], alibi_slopes=slopes, **kw)
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
    a, _ = reference(q, k, v, score_mod=SM.tanh_cap, score_args={"cap": 2.5})
    b, _ = reference(q, k, v, softcap=2.5)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


# ----------------------------------------------------------------------------------
# The generator
# ----------------------------------------------------------------------------------
def test_emitted_files_are_clean(package):
    from generator import hygiene, manifest
    from generator.variants import BlockConfig
    from pathlib import Path

    out = Path(package.__file__).parent
    assert manifest.check(out) == []
    config = BlockConfig(*BLOCK, score_mods=tuple(f"spec.score_mods:{x}" for x in EXAMPLES))
    printed, assigned, stages = hygiene.printed_lines()
    # every file of rel_bias (alone, with each mask_mod, decode); of the others, those without a mask_mod
    variants = [v for v in config.variants() if v.score_mod and (v.mask_mod is None or v.score_mod.endswith(":rel_bias"))]
    mine, mine_assigned = hygiene.variant_lines(variants)
    for v in variants:
        source = (out / v.filename).read_text()
        assert hygiene.check_source(source, set(printed) | mine, set(assigned) | mine_assigned, set(stages)) == []
    fwd = importlib.import_module("sm_kernels.attention_fwd_scoremod_rel_bias_br16_bc32")
    assert fwd.SCORE_MOD == "rel_bias" and "--score-mod" in fwd.COMMAND


@pytest.mark.parametrize("name", ["temperature", "tanh_cap"])
def test_each_backward_kernel_runs_its_printed_step_sequence(package, name):
    """Claim score_mod_derived runs ScoreMod.backward_terms' sequences as the kernels' bodies: the dQ stage calls
    _user_score_bwd once (its body those lines in that order, each gradient scattered after its entry), the dK/dV
    stage _user_score_ds once (the dS factor alone), and neither calls the other's."""
    import ast
    from pathlib import Path

    from spec.printer import print_term

    sm = getattr(SM, name)
    source = (Path(package.__file__).parent / f"attention_bwd_scoremod_{name}_br{BLOCK[0]}_bc{BLOCK[1]}.py").read_text()
    funcs = {f.name: f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)}

    def calls(fn):
        return [c.func.id for c in ast.walk(funcs[fn]) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                and c.func.id.startswith("_user_score")]
    assert calls("_attn_bwd_dq_stage") == ["_user_score", "_user_score_bwd"]
    assert calls("_attn_bwd_dkdv_stage") == ["_user_score", "_user_score_ds"]

    def body(fn):  # the statements after the docstring, before the return, as printed
        return [ast.unparse(st) for st in funcs[fn].body[1:-1]]
    code = lambda t: ast.unparse(ast.parse(print_term(t, SM.KERNEL_NAMES)))  # noqa: E731
    want = []
    for k, t in enumerate(steps := sm.backward_terms()):
        want.append(code(t))
        want += [f"_score_param_scatter(ScoreGrad, sg_base, {ix.name}, {g.name}, i, j, CHUNK)"
                 for at, g, ix in SM.scatter_points(steps) if at == k]
    assert body("_user_score_bwd") == want
    assert body("_user_score_ds") == [code(t) for t in sm.backward_terms(scatter=False)]


def test_generator_refuses_a_score_mod_outside_the_class(tmp_path, monkeypatch):
    from generator import __main__ as cli

    (tmp_path / "bad_mods.py").write_text(
        "import sympy as sp\nfrom spec.score_mods import score_mod\n\n"
        "def not_decorated(s):\n    return s\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["--br", "16", "--bc", "32", "--score-mod", "bad_mods:not_decorated",
                     "--out", str(tmp_path / "gen")]) == 2
    assert cli.main(["--br", "16", "--bc", "32", "--score-mod", "bad_mods:absent",
                     "--out", str(tmp_path / "gen")]) == 2
    sys.modules.pop("bad_mods", None)


def test_un_emitted_score_mod_raises_the_command_to_run():
    @score_mod
    def diagonal_bonus(s, i, j, bonus):
        return s + bonus

    q = torch.randn(1, 1, 16, 16)
    from generated import flash_attention

    with pytest.raises(ValueError, match=r"python -m generator --br 64 --bc 64 --score-mod "
                                         r"test_user_score_mods:diagonal_bonus"):
        flash_attention(q, q, q, score_mod=diagonal_bonus, score_args={"bonus": 1.0}, block=(64, 64))


# ----------------------------------------------------------------------------------
# The kernels
# ----------------------------------------------------------------------------------
def out_tolerance(name, q, k, v, args, tol, kw):
    """The output's tolerance (absolute): the proven bound of the case (``forward_bound(score_mod=(k, α,
    κ))`` times ``max|v|``) for a score_mod of the bounded class alone (no built-in softcap or ALiBi), else
    the empirical ``tol``."""
    from generator.checking import case_tolerances, score_mod_bound
    from spec.masks import alignment_shift

    sm = getattr(SM, name)
    if sm.outside_bound() is not None or kw.get("softcap") or kw.get("alibi_slopes") is not None:
        return tol
    nq, nk = q.shape[2], k.shape[2]
    bound = score_mod_bound(sm, args, q.shape[0], q.shape[1], nq, nk, alignment_shift(kw.get("alignment", "top_left"),
                                                                                     nq, nk))
    return case_tolerances(q.detach(), k.detach(), v.detach(), block_n=BLOCK[1], score_mod=bound)[0] * float(
        v.detach().abs().max())


def run_and_compare(package, name, dtype, tol, **kw):
    """Output (within the proven bound where there is one, else ``tol``) and every gradient (empirical:
    ``4·tol`` relative to each gradient's magnitude) against the float64 reference."""
    gen = torch.Generator().manual_seed(EXAMPLES.index(name))
    nk, d = kw.pop("nk", N), kw.pop("head_dim", D)
    q = torch.randn(B, H, N, d, generator=gen).to(dtype).requires_grad_()
    k, v = (torch.randn(B, HK, nk, d, generator=gen).to(dtype).requires_grad_() for _ in range(2))
    args = args_for(name, gen)
    sm = getattr(SM, name)
    out = package.flash_attention(q, k, v, score_mod=sm, score_args=args, block=BLOCK, **kw)
    want, _ = reference(q.double(), k.double(), v.double(), score_mod=sm, score_args=as_double(args), **kw)
    g = torch.randn(out.shape, generator=gen).to(dtype)
    tensors = [p for p, x in args.items() if torch.is_tensor(x)]
    got = torch.autograd.grad(out, (q, k, v, *[args[p] for p in tensors]), g)
    ref = torch.autograd.grad(want, (q, k, v, *[args[p] for p in tensors]), g.double())
    out_tol = out_tolerance(name, q, k, v, args, tol, kw)
    torch.testing.assert_close(out.double(), want, atol=out_tol, rtol=0)
    for label, a, b in zip(["q", "k", "v", *tensors], got, ref):
        scale = max(1.0, float(b.abs().max()))  # a summed parameter gradient grows with N²
        torch.testing.assert_close(a.double(), b.double(), atol=4 * tol * scale, rtol=4 * tol,
                                   msg=lambda m: f"{name} d{label}: {m}")
    return got


@pytest.mark.parametrize("name", EXAMPLES)
def test_kernels_match_the_reference_with_every_gradient(package, name):
    run_and_compare(package, name, torch.float32, 2e-5, causal=True)


@pytest.mark.parametrize("name, dtype, tol", [("rel_bias", torch.float16, 5e-3),
                                              ("temperature", torch.bfloat16, 4e-2)])
def test_half_precision(package, name, dtype, tol):
    run_and_compare(package, name, dtype, tol, causal=True)


@pytest.mark.parametrize("name, dtype", [(name, torch.float32) for name in BOUNDED]
                         + [("rel_bias", torch.float16), ("alibi", torch.bfloat16)])
def test_forward_within_the_proven_bound(package, name, dtype):
    """Output and lse within ``forward_bound(score_mod=(k, α, κ))`` of the case (claim
    score_mod_error_bound), bottom-right with GQA; large parameters, so the score_mod's own terms count."""
    from generator.checking import attention_failures, score_mod_bound

    gen = torch.Generator().manual_seed(31 + EXAMPLES.index(name))
    q = torch.randn(B, H, N, D, generator=gen).to(dtype)
    k, v = (torch.randn(B, HK, N + 8, D, generator=gen).to(dtype) for _ in range(2))
    args = {p: (8 * x.detach() if torch.is_tensor(x) else x) for p, x in args_for(name, gen).items()}
    sm = getattr(SM, name)
    kw = dict(causal=True, alignment="bottom_right")
    out, lse = package.flash_attention(q, k, v, score_mod=sm, score_args=args, block=BLOCK, return_lse=True, **kw)
    want, want_lse = reference(q.double(), k.double(), v.double(), score_mod=sm, score_args=as_double(args), **kw)
    bound = score_mod_bound(sm, args, B, H, N, N + 8, 8)
    assert bound[0] == sm.roundings() and bound[1] > 0
    failures = attention_failures(out, lse, want, want_lse, v, q=q, k=k, block_n=BLOCK[1], score_mod=bound)
    assert not failures, failures


def test_outside_the_bound_is_labelled_empirical():
    """tanh_cap (a function of the score) has no proven bound: the reason says so, the generator
    prints ``SCORE_MOD_ROUNDINGS = None`` with it, and forward_bound refuses a score_mod with the built-ins."""
    from generator.checking import score_mod_bound
    from spec.error_bound import forward_bound

    assert "function" in SM.tanh_cap.outside_bound() and SM.tanh_cap.roundings() is None
    assert score_mod_bound(SM.tanh_cap, {"cap": 3.0}, B, H, N, N) is None
    assert [SM.rel_bias.roundings(), SM.temperature.roundings(), SM.batch_scale.roundings(), SM.alibi.roundings()] \
        == [1, 1, 1, 3]
    with pytest.raises(ValueError, match="bounded alone"):
        forward_bound("fp32", 64, 32, 16, 4.0, softcap=True, score_mod=(1, 1.0, 0.0))


def test_emitted_files_state_the_rounding_count(package):
    from pathlib import Path

    source = lambda name: (Path(package.__file__).parent / f"attention_fwd_scoremod_{name}_br16_bc32.py").read_text()  # noqa: E731
    assert "SCORE_MOD_ROUNDINGS = 1\n" in source("rel_bias") and "SCORE_MOD_ROUNDINGS = 3\n" in source("alibi")
    assert "SCORE_MOD_ROUNDINGS = None\n" in source("tanh_cap")


def test_head_dim_above_64_with_its_dq_tile(package):
    """Above head dim 64 a tensor-reading score_mod's dQ kernel runs on the 32 x 32 tile (SCORE_GRAD_DQ):
    the output and every gradient, the table's included."""
    bwd = importlib.import_module(f"{package.__name__}.attention_bwd_scoremod_rel_bias_br16_bc32")
    assert bwd.launch_settings(80, 128)["dq"][0] == {"BLOCK_M": 32, "BLOCK_N": 32}
    assert bwd.launch_settings(90, 128)["dkdv"][0]["BLOCK_M"] == 16
    assert bwd.launch_settings(90, 128)["dq"][0] == {"BLOCK_M": 64, "BLOCK_N": 32}  # wgmma needs 64 rows
    run_and_compare(package, "rel_bias", torch.float32, 2e-5, causal=True, head_dim=72)


def test_with_window_key_lengths_bottom_right_and_gqa(package):
    run_and_compare(package, "rel_bias", torch.float32, 2e-5, causal=True, alignment="bottom_right", nk=56,
                    window=(9, 0), key_lengths=torch.tensor([50, 33]))
    run_and_compare(package, "batch_scale", torch.float32, 2e-5, window=(5, 7), key_lengths=torch.tensor([40, 17]))


def test_with_the_builtin_modifications_and_sinks(package):
    """After softcap and ALiBi, with a learnable sink: output and every gradient, the sink's and the
    table's included."""
    gen = torch.Generator().manual_seed(17)
    q = torch.randn(B, H, N, D, generator=gen).requires_grad_()
    k, v = (torch.randn(B, HK, N, D, generator=gen).requires_grad_() for _ in range(2))
    sinks = torch.randn(H, generator=gen).requires_grad_()
    slopes = torch.rand(H, generator=gen) * 0.3
    args = args_for("rel_bias", gen)
    kw = dict(causal=True, softcap=4.0, alibi_slopes=slopes)
    out = package.flash_attention(q, k, v, sinks=sinks, score_mod=SM.rel_bias, score_args=args, block=BLOCK, **kw)
    want, _ = reference(q.double(), k.double(), v.double(), sinks=sinks.double(), score_mod=SM.rel_bias,
                        score_args=as_double(args), **{**kw, "alibi_slopes": slopes.double()})
    g = torch.randn(out.shape, generator=gen)
    inputs = (q, k, v, sinks, args["table"])
    got = torch.autograd.grad(out, inputs, g)
    ref = torch.autograd.grad(want, inputs, g.double())
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    for label, a, b in zip(["q", "k", "v", "sinks", "table"], got, ref):
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a.double(), b.double(), atol=8e-5 * scale, rtol=8e-5, msg=lambda m: f"d{label}: {m}")


def test_captured_gradients_are_bitwise_repeatable(package):
    first = run_and_compare(package, "rel_bias", torch.float32, 2e-5, causal=True)
    again = run_and_compare(package, "rel_bias", torch.float32, 2e-5, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_alibi_as_a_score_mod_is_the_builtin(package):
    """The ALiBi score_mod's kernels and the built-in ALiBi kernels agree to fp32 rounding."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(B, H, N, D, generator=gen) for _ in range(3))
    slopes = torch.rand(H, generator=gen) * 0.3
    ours = package.flash_attention(q, k, v, causal=True, score_mod=SM.alibi, score_args={"slopes": slopes},
                                   block=BLOCK)
    builtin = package.flash_attention(q, k, v, causal=True, alibi_slopes=slopes, block=BLOCK)
    torch.testing.assert_close(ours, builtin, atol=2e-6, rtol=2e-6)


def flex_score_mod(name, args):
    """The same modification as a FlexAttention score_mod(score, b, h, q_idx, kv_idx)."""
    if name == "rel_bias":
        table, d = args["table"], args["max_dist"]
        return lambda score, b, h, qi, ki: score + table[h, torch.clamp(ki - qi + d, 0, 2 * d)]
    if name == "temperature":
        return lambda score, b, h, qi, ki: score * args["inv_t"][h]
    if name == "tanh_cap":
        return lambda score, b, h, qi, ki: args["cap"] * torch.tanh(score / args["cap"])
    if name == "batch_scale":
        return lambda score, b, h, qi, ki: score * args["gain"][b]
    return lambda score, b, h, qi, ki: score - args["slopes"][h] * torch.abs(qi - ki)


@pytest.mark.parametrize("name", EXAMPLES)
def test_outputs_agree_with_flex_attention_on_cpu(package, name):
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, N, D, generator=gen) for _ in range(3))
    args = {p: (x.detach() if torch.is_tensor(x) else x) for p, x in args_for(name, gen).items()}
    block_mask = flex.create_block_mask(lambda b, h, qi, ki: ki <= qi, B, None, N, N, device="cpu", BLOCK_SIZE=16)
    theirs = flex.flex_attention(q, k, v, score_mod=flex_score_mod(name, args), block_mask=block_mask)
    ours = package.flash_attention(q, k, v, causal=True, score_mod=getattr(SM, name), score_args=args, block=BLOCK)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("args, error, match", [
    ({}, ValueError, "missing"),
    ({"table": torch.zeros(H, 9), "max_dist": 4, "x": 1}, ValueError, "unknown"),
    ({"table": torch.zeros(H, 8), "max_dist": 4}, ValueError, "at least 9"),
    ({"table": torch.zeros(1, 9), "max_dist": 4}, ValueError, "at least 2"),
    ({"table": torch.zeros(H, 9), "max_dist": -1}, ValueError, "< 0"),
    ({"table": torch.zeros(H, 9), "max_dist": 4.0}, TypeError, "Python int"),
    ({"table": torch.zeros(H, 9, dtype=torch.int64), "max_dist": 4}, TypeError, "float tensor"),
    ({"table": torch.zeros(H * 9), "max_dist": 4}, ValueError, "2 dims"),
])
def test_bad_score_args_are_named(package, args, error, match):
    q = torch.randn(B, H, N, D)
    with pytest.raises(error, match=match):
        package.flash_attention(q, q, q, score_mod=SM.rel_bias, score_args=args, block=BLOCK)


def test_score_args_without_score_mod_are_refused(package):
    q = torch.randn(B, H, N, D)
    with pytest.raises(ValueError, match="without score_mod"):
        package.flash_attention(q, q, q, score_args={"cap": 1.0}, block=BLOCK)


def test_with_a_mask_mod(package):
    """A score_mod and a mask_mod in one call: the pair's kernels (emitted with every mask_mod of the
    config), output and every gradient against the reference with both."""
    from spec.masks import document, prefix_lm

    run_and_compare(package, "rel_bias", torch.float32, 2e-5, causal=True, mask_mod=prefix_lm,
                    mask_args={"prefix": 11})
    doc = torch.tensor([[0] * 15 + [1] * 25, [0] * 30 + [1] * 10])
    run_and_compare(package, "temperature", torch.float32, 2e-5, mask_mod=document,
                    mask_args={"doc_q": doc, "doc_k": doc})


def test_with_dropout(package):
    """Dropout and a score_mod in one call: the output and every gradient, the table's included, against
    the float64 reference applying the keep mask the kernels drew (``return_dropout_mask``). The output
    within the proven bound scaled by ``1/(1 − p)`` (as tests/test_dropout.py), the gradients empirical."""
    from generator.checking import attention_errors, case_tolerances, score_mod_bound

    gen = torch.Generator().manual_seed(23)
    nq, nk, p = 24, 28, 0.3
    q = torch.randn(B, H, nq, D, generator=gen).requires_grad_()
    k, v = (torch.randn(B, HK, nk, D, generator=gen).requires_grad_() for _ in range(2))
    args = args_for("rel_bias", gen)
    torch.manual_seed(5)
    out, lse, keep = package.flash_attention(q, k, v, causal=True, alignment="bottom_right", score_mod=SM.rel_bias,
                                             score_args=args, dropout_p=p, return_lse=True, return_dropout_mask=True,
                                             block=BLOCK)
    assert 0 < keep.float().mean() < 1
    want, want_lse = reference(q.double(), k.double(), v.double(), causal=True, alignment="bottom_right",
                               score_mod=SM.rel_bias, score_args=as_double(args), dropout_mask=keep, dropout_p=p)
    tol, lse_tol = case_tolerances(q.detach(), k.detach(), v.detach(), block_n=BLOCK[1], ref_lse=want_lse,
                                   score_mod=score_mod_bound(SM.rel_bias, args, B, H, nq, nk, nk - nq))
    out_err, lse_err = attention_errors(out.detach(), lse, want, want_lse, v.detach())
    assert out_err <= tol / (1 - p) and lse_err <= lse_tol, (out_err, tol, lse_err, lse_tol)
    g = torch.randn(out.shape, generator=gen)
    inputs = (q, k, v, args["table"])
    got = torch.autograd.grad(out, inputs, g)
    ref = torch.autograd.grad(want, inputs, g.double())
    for label, a, b in zip(["q", "k", "v", "table"], got, ref):
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a.double(), b.double(), atol=8e-5 * scale, rtol=8e-5, msg=lambda m: f"d{label}: {m}")


def test_host_work_is_constant_in_n(package, monkeypatch):
    """Per call, forward and backward, the host work with a score_mod does not grow with N: with the kernel
    launches stubbed (benchmarks.host), the call runs the same aten ops at N = 32 and N = 1024, none makes a
    tensor of N_q·N_k elements, and nothing evaluates the expression on the host (the reference's
    ``apply_torch`` / ``_evaluate`` fail if called): the table is packed once, read by the kernels."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from benchmarks import host

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.largest = [], 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.ops.append(str(func.overloadpacket))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if torch.is_tensor(t):
                    self.largest = max(self.largest, t.numel())
            return out

    def never(*a, **k):
        raise AssertionError("the score_mod was evaluated on the host")

    monkeypatch.setattr(SM.ScoreMod, "apply_torch", never)
    monkeypatch.setattr(SM, "_evaluate", never)
    gen = torch.Generator().manual_seed(2)
    table = torch.randn(H, 9, generator=gen, requires_grad=True)
    seen = {}
    with host.stubbed_launches() as launched:
        for n_ in (32, 1024):
            q = torch.randn(B, H, n_, D, generator=gen, requires_grad=True)
            k, v = (torch.randn(B, HK, n_, D, generator=gen, requires_grad=True) for _ in range(2))
            package.flash_attention(q, k, v, causal=True, score_mod=SM.rel_bias,  # plans the signature
                                    score_args={"table": table, "max_dist": 4}, block=BLOCK)
            launched.clear()
            with Record() as rec:
                out = package.flash_attention(q, k, v, causal=True, score_mod=SM.rel_bias,
                                              score_args={"table": table, "max_dist": 4}, block=BLOCK)
                torch.autograd.grad(out, (q, k, v, table), torch.ones_like(out))
            seen[n_] = (rec.ops, rec.largest, list(launched))
    assert len(seen[32][0]) > 10 and seen[32][0] == seen[1024][0] and seen[32][2] == seen[1024][2]
    assert "_attn_fwd" in seen[1024][2] and "_attn_bwd_dq" in seen[1024][2]
    assert seen[1024][1] < 1024 * 1024, seen[1024][1]


def test_a_pair_not_emitted_prints_the_command(package, tmp_path, monkeypatch):
    """A user mask_mod the package was not emitted with: the error names the command emitting the pair."""
    from spec.masks import mask_mod

    @mask_mod
    def band3(i, j, shift):
        return j <= i + shift + 3

    q = torch.randn(B, H, N, D)
    with pytest.raises(ValueError, match=r"score_mod 'tanh_cap' with mask_mod 'band3' has no generated fwd kernel"
                                         r".*--score-mod spec.score_mods:tanh_cap --mask-mod "
                                         r"test_user_score_mods:band3"):
        package.flash_attention(q, q, q, score_mod=SM.tanh_cap, score_args={"cap": 1.0}, mask_mod=band3,
                                block=BLOCK)


def test_score_mod_under_torch_compile(package):
    """fullgraph: the parameters are packed in the graph (the bounds check is plain Python, no SymPy
    at call time); the op and its backward trace through their fake implementations, and the
    captured tensor's gradient flows out of the compiled graph."""
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(B, H, N, D, generator=gen, requires_grad=True)
    k, v = (torch.randn(B, HK, N, D, generator=gen) for _ in range(2))
    table = torch.randn(H, 9, generator=gen, requires_grad=True)

    def f(q, k, v, table):
        out = package.flash_attention(q, k, v, causal=True, score_mod=SM.rel_bias,
                                      score_args={"table": table, "max_dist": 4}, block=BLOCK)
        return out.sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(q, k, v, table), (q, table))
    want = torch.autograd.grad(f(q, k, v, table), (q, table))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------------
# The packed (varlen) path
# ----------------------------------------------------------------------------------
CU_Q, CU_K = [0, 13, 13, 40], [0, 20, 29, 44]  # three segments, the middle one without queries


def _varlen_args(name, gen):
    """As ``args_for``, with a per-batch tensor over the segments (``b`` is the segment)."""
    if name == "batch_scale":
        return {"gain": (torch.rand(len(CU_Q) - 1, generator=gen) + 0.5).requires_grad_()}
    return args_for(name, gen)


@pytest.mark.parametrize("name, kw", [("rel_bias", {"causal": True}), ("batch_scale", {"window": (6, 3)})])
def test_varlen_matches_the_reference_with_every_gradient(package, name, kw):
    """``flash_attention_varlen(score_mod=...)``: per segment (``b`` the segment, ``i``, ``j`` and
    ``shift`` its own), output and every gradient, the captured tensors' included."""
    from spec.reference import varlen_attention

    gen = torch.Generator().manual_seed(21)
    cu_q, cu_k = (torch.tensor(c, dtype=torch.int32) for c in (CU_Q, CU_K))
    q = torch.randn(CU_Q[-1], H, D, generator=gen).requires_grad_()
    k, v = (torch.randn(CU_K[-1], HK, D, generator=gen).requires_grad_() for _ in range(2))
    args = _varlen_args(name, gen)
    sm = getattr(SM, name)
    out = package.flash_attention_varlen(q, k, v, cu_q, cu_k, score_mod=sm, score_args=args, block=BLOCK, **kw)
    want, _ = varlen_attention(q.double(), k.double(), v.double(), cu_q, cu_k, score_mod=sm,
                               score_args=as_double(args), **kw)
    g = torch.randn(out.shape, generator=gen)
    tensors = [p for p, x in args.items() if torch.is_tensor(x)]
    got = torch.autograd.grad(out, (q, k, v, *[args[p] for p in tensors]), g)
    ref = torch.autograd.grad(want, (q, k, v, *[args[p] for p in tensors]), g.double())
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    for label, a, b in zip(["q", "k", "v", *tensors], got, ref):
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a.double(), b.double(), atol=8e-5 * scale, rtol=8e-5, msg=lambda m: f"d{label}: {m}")


def test_varlen_refusals(package):
    q = torch.randn(CU_Q[-1], H, D)
    k = torch.randn(CU_K[-1], HK, D)
    cu_q, cu_k = (torch.tensor(c, dtype=torch.int32) for c in (CU_Q, CU_K))
    with pytest.raises(ValueError, match="at least 3"):  # a bare b reads an axis of B = 3 segments
        package.flash_attention_varlen(q, k, k, cu_q, cu_k, score_mod=SM.batch_scale,
                                       score_args={"gain": torch.ones(2)}, block=BLOCK)
    with pytest.raises(ValueError, match="without score_mod"):
        package.flash_attention_varlen(q, k, k, cu_q, cu_k, score_args={"gain": torch.ones(3)}, block=BLOCK)


# ----------------------------------------------------------------------------------
# The decode path (flash_attention_with_kvcache: inference, forward only)
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kw", [("rel_bias", {"causal": True, "num_splits": 2}),
                                      ("batch_scale", {"window": (7, 0), "num_splits": 1}),
                                      ("temperature", {"causal": True, "num_splits": 1})])
def test_decode_matches_the_reference(package, name, kw):
    """``flash_attention_with_kvcache(score_mod=...)``: ``b`` the batch entry, ``h`` the query head,
    ``i`` the new token, ``j`` the cache key, ``shift = cache_seqlens[b] − N_q``; out and lse, unsplit
    and split (the splits' partials merged)."""
    from spec.reference import kvcache_attention

    gen = torch.Generator().manual_seed(31)
    q = torch.randn(B, 3, H, D, generator=gen)
    k_cache, v_cache = (torch.randn(B, N, HK, D, generator=gen) for _ in range(2))
    lens = torch.tensor([29, 17], dtype=torch.int32)
    args = {p: (x.detach() if torch.is_tensor(x) else x) for p, x in args_for(name, gen).items()}
    sm = getattr(SM, name)
    out, lse = package.flash_attention_with_kvcache(q, k_cache, v_cache, lens, score_mod=sm, score_args=args,
                                                    return_lse=True, **kw)
    kw.pop("num_splits")
    want, want_lse, _, _ = kvcache_attention(q, k_cache, v_cache, lens, score_mod=sm, score_args=as_double(args),
                                             **kw)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-5, rtol=2e-5)


def test_decode_refusals(package):
    q = torch.randn(B, 3, H, D)
    cache = torch.randn(B, N, HK, D)
    lens = torch.tensor([29, 17], dtype=torch.int32)
    with pytest.raises(ValueError, match="at least 2"):  # a bare b reads an axis of B = 2 entries
        package.flash_attention_with_kvcache(q, cache, cache, lens, score_mod=SM.batch_scale,
                                             score_args={"gain": torch.ones(1)})
    with pytest.raises(ValueError, match="without score_mod"):
        package.flash_attention_with_kvcache(q, cache, cache, lens, score_args={"gain": torch.ones(2)})


def test_varlen_and_decode_under_torch_compile(package):
    """fullgraph: the varlen ops (their fakes return the score_mod's parameter gradient too) and the
    decode op trace with a score_mod; the captured table's gradient flows out of the compiled graph."""
    gen = torch.Generator().manual_seed(41)
    cu_q, cu_k = (torch.tensor(c, dtype=torch.int32) for c in (CU_Q, CU_K))
    q = torch.randn(CU_Q[-1], H, D, generator=gen, requires_grad=True)
    k, v = (torch.randn(CU_K[-1], HK, D, generator=gen) for _ in range(2))
    table = torch.randn(H, 9, generator=gen, requires_grad=True)

    def packed(q, k, v, table):
        return package.flash_attention_varlen(q, k, v, cu_q, cu_k, causal=True, score_mod=SM.rel_bias,
                                              score_args={"table": table, "max_dist": 4}, block=BLOCK).sum()

    got = torch.autograd.grad(torch.compile(packed, fullgraph=True, backend="aot_eager")(q, k, v, table), (q, table))
    want = torch.autograd.grad(packed(q, k, v, table), (q, table))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    qd, cache = torch.randn(B, 3, H, D, generator=gen), torch.randn(B, N, HK, D, generator=gen)
    lens = torch.tensor([29, 17], dtype=torch.int32)

    def decode(qd, cache, table):
        return package.flash_attention_with_kvcache(qd, cache, cache, lens, causal=True, score_mod=SM.rel_bias,
                                                    score_args={"table": table, "max_dist": 4}, num_splits=2)

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(decode, fullgraph=True, backend="aot_eager")(qd, cache, table),
                                   decode(qd, cache, table))
