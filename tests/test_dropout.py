"""Attention dropout (issue 29): FlashAttention 2's, with the forward's and backward's masks equal
by construction.

* The claims (``spec.proofs.dropout``: ``dropout_mask_same``, ``dropout_grads``) fail on their
  mutants in tests/test_mutants.py; hygiene rejects a second draw in tests/test_hygiene.py.
* Here, the kernels (``TRITON_INTERPRET=1``, tiny sizes): the forward and the gradients against the
  float64 reference applying the keep mask the kernels report (``return_dropout_mask``), with GQA,
  every mask, the score modifications, a mask_mod, fp16 and the packed (varlen) path; the keep rate
  within a binomial bound; masks that repeat under ``torch.manual_seed`` and differ across calls;
  ``dropout_p=0`` bitwise the kernels without dropout; ``p = 1`` rejected; ``torch.compile``;
  and the one keep term printed into the forward, dK/dV and dQ kernels.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from attention_cases import mask_arguments, on_device, random_inputs, to_cpu, to_device
from generated import flash_attention, flash_attention_varlen
from generator import render
from generator.checking import alibi_beta, attention_errors, case_tolerances
from spec import terms as T
from spec.printer import print_term
from spec.reference import attention as reference
from spec.reference import varlen_attention
from test_backward import grad_failures

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

SMALL = (16, 32)


def dropout_failures(out, lse, ref_out, ref_lse, q, k, v, p, *, softcap=False, alibi=None) -> list[str]:
    """``out`` against the reference within the forward bound of the case (``spec.error_bound``)
    scaled by ``1/(1 − p)``: the dropped weights sum to at most ``1/(1 − p)`` where the bound's
    sum to 1 (each kept weight carries one more fp32 rounding, of ``p·drop_scale``, well inside
    it); ``lse`` (undropped) within the bound itself. ``softcap``, ``alibi``: the case's score modifications
    (``forward_bound(softcap=, alibi=β)``)."""
    tol, lse_tol = case_tolerances(q, k, v, ref_lse=ref_lse, softcap=softcap, alibi=alibi)
    out_err, lse_err = attention_errors(out, lse, ref_out, ref_lse, v)
    failures = []
    if not out_err <= tol / (1 - p):
        failures.append(f"out: max error {out_err:.3g} x max|v| > {tol / (1 - p):.3g}")
    if not lse_err <= lse_tol:
        failures.append(f"lse: max error {lse_err:.3g} > {lse_tol:.3g}")
    return failures


def run(q, k, v, do, p, **kw):
    """The kernels forward and backward with dropout ``p``: ``(out, lse, keep, grads)`` on CPU."""
    leaves = [to_device(t).clone().requires_grad_() for t in (q, k, v)]
    out, lse, keep = flash_attention(*leaves, dropout_p=p, return_lse=True, return_dropout_mask=True,
                                     **to_device(kw))
    out.backward(to_device(do))
    return to_cpu((out.detach(), lse, keep, [t.grad for t in leaves]))


def reference_run(q, k, v, do, keep, p, **kw):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, lse = reference(*leaves, dropout_mask=keep, dropout_p=p, **kw)
    out.backward(do.double())
    return out.detach(), lse, [t.grad for t in leaves]


CASES = {
    "plain": dict(),
    "gqa causal": dict(Hq=4, Hkv=2, causal=True),
    "window bottom_right": dict(window=(5, 3), alignment="bottom_right", Nq=14),
    "lengths and dense mask": dict(B=2, key_lengths=[17, 6], mask="random"),
    "score mods": dict(softcap=20.0, alibi=True, sinks=True, causal=True),
    "mask_mod prefix_lm": dict(mask_mod="prefix_lm"),
    "fp16": dict(dtype=torch.float16, causal=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_gradients_match_the_reference_with_the_kernels_mask(name):
    case = dict(CASES[name])
    dtype = case.pop("dtype", torch.float32)
    B, Hq, Hkv, Nq, Nk = (case.pop(key, dflt) for key, dflt in (("B", 1), ("Hq", 2), ("Hkv", 1), ("Nq", 20),
                                                                  ("Nk", 24)))
    gen, q, k, v, do = random_inputs(dtype=dtype, B=B, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, D=16, seed=len(name), grad=True)
    kw = {key: case.pop(key) for key in ("causal", "window", "alignment") if key in case}
    lengths, mask = mask_arguments(gen, B, Hq, Nq, Nk, case.pop("key_lengths", None), case.pop("mask", None))
    kw.update({key: t for key, t in (("key_lengths", lengths), ("mask", mask)) if t is not None})
    if "softcap" in case:
        kw.update(softcap=case.pop("softcap"))
    if case.pop("alibi", False):
        kw.update(alibi_slopes=torch.rand(Hq, generator=gen))
    if case.pop("sinks", False):
        kw.update(sinks=torch.randn(Hq, generator=gen))
    if case.pop("mask_mod", None):
        from spec.masks import prefix_lm
        kw.update(mask_mod=prefix_lm, mask_args={"prefix": 7})
    assert not case
    p = 0.3
    torch.manual_seed(11)
    out, lse, keep, grads = run(q, k, v, do, p, block=SMALL, **kw)
    assert keep.shape == (B, Hq, Nq, Nk) and keep.dtype == torch.bool
    assert 0 < keep.float().mean() < 1  # a mask with both kept and dropped entries
    ref_out, ref_lse, ref_grads = reference_run(q, k, v, do, keep, p, **kw)
    alibi = alibi_beta(kw.get("alibi_slopes"), Nq, Nk, kw.get("alignment", "top_left"))
    assert dropout_failures(out, lse, ref_out, ref_lse, q, k, v, p, softcap=kw.get("softcap") is not None,
                            alibi=alibi) == []
    assert grad_failures(grads, ref_grads, dtype) == []
    # and not the reference without dropout (the check would catch a kernel that ignores the mask)
    undropped, _ = reference(q.double(), k.double(), v.double(), **kw)
    assert (out.double() - undropped).abs().max() > 10 * (out.double() - ref_out).abs().max()


def test_varlen_forward_and_gradients_match_the_reference():
    gen = torch.Generator().manual_seed(5)
    cu_q, cu_k = torch.tensor([0, 7, 7, 20], dtype=torch.int32), torch.tensor([0, 9, 15, 31], dtype=torch.int32)
    q, do = (torch.randn(20, 4, 16, generator=gen) for _ in range(2))
    k, v = (torch.randn(31, 2, 16, generator=gen) for _ in range(2))
    p = 0.25
    leaves = [to_device(t).clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(3)
    out, lse, keep = flash_attention_varlen(*leaves, *to_device((cu_q, cu_k)), causal=True, return_lse=True,
                                            dropout_p=p, return_dropout_mask=True, block=SMALL)
    out.backward(to_device(do))
    out, lse, keep, grads = to_cpu((out.detach(), lse, keep, [t.grad for t in leaves]))
    assert keep.shape == (4, 20, 31)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = varlen_attention(*ref, cu_q, cu_k, causal=True, dropout_mask=keep, dropout_p=p)
    ref_out.backward(do.double())
    tol, lse_tol = case_tolerances(*(t.transpose(0, 1)[None] for t in (q, k, v)), ref_lse=ref_lse)
    out_err, lse_err = attention_errors(out, lse, ref_out.detach(), ref_lse, v)
    assert out_err <= tol / (1 - p) and lse_err <= lse_tol
    assert grad_failures(grads, [t.grad for t in ref], torch.float32) == []


def test_keep_rate_within_a_binomial_bound():
    """n = 4·64·64 draws: the kept fraction is within 5 standard deviations of 1 − p (a false
    alarm has probability < 1e-6), per p; and the four heads' masks are not copies of each other."""
    q = torch.zeros(1, 4, 64, 16)
    for p in (0.1, 0.5, 0.9):
        torch.manual_seed(0)
        _, keep = on_device(flash_attention, q, q, q, dropout_p=p, return_dropout_mask=True, block=SMALL)
        n = keep.numel()
        assert abs(keep.float().mean().item() - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / n), (p, keep.float().mean())
        heads = keep.reshape(4, -1)
        assert all(not torch.equal(heads[a], heads[b]) for a in range(4) for b in range(a))


def test_masks_repeat_under_the_seed_and_differ_across_calls():
    gen, q, k, v = random_inputs(dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=12, Nk=20, D=16, seed=1)
    call = lambda: on_device(flash_attention, q, k, v, dropout_p=0.4, return_dropout_mask=True, block=SMALL)  # noqa: E731
    torch.manual_seed(7)
    out1, keep1 = call()
    out2, keep2 = call()  # the generator moved on: another seed and offset
    torch.manual_seed(7)
    out3, keep3 = call()
    assert torch.equal(keep1, keep3) and torch.equal(out1, out3)  # bitwise: same seed, same mask, same kernels
    assert not torch.equal(keep1, keep2) and not torch.equal(out1, out2)


def test_dropout_p_zero_is_bitwise_the_kernels_without_dropout():
    gen, q, k, v, do = random_inputs(dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=20, Nk=24, D=16, seed=2, grad=True)
    results = []
    for kw in ({}, {"dropout_p": 0.0}):
        leaves = [to_device(t).clone().requires_grad_() for t in (q, k, v)]
        state = torch.get_rng_state()
        out, lse = flash_attention(*leaves, causal=True, return_lse=True, block=SMALL, **kw)
        out.backward(to_device(do))
        assert torch.equal(torch.get_rng_state(), state)  # p = 0 draws nothing
        results.append(to_cpu((out.detach(), lse, *(t.grad for t in leaves))))
    for a, b in zip(*results):
        assert torch.equal(a, b)
    _, keep = on_device(flash_attention, q, k, v, dropout_p=0.0, return_dropout_mask=True, block=SMALL)
    assert keep.all() and keep.shape == (1, 2, 20, 24)


@pytest.mark.parametrize("p, error, words", [
    (1.0, ValueError, "dropout_p must be in [0, 1)"), (1.5, ValueError, "dropout_p must be in [0, 1)"),
    (-0.1, ValueError, "dropout_p must be in [0, 1)"), (float("nan"), ValueError, "dropout_p must be in [0, 1)"),
    (True, TypeError, "dropout_p must be a real number"), ("0.1", TypeError, "dropout_p must be a real number")])
def test_bad_dropout_p_is_rejected_with_its_fix(p, error, words):
    q = torch.zeros(1, 2, 4, 16)
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        on_device(flash_attention, q, q, q, dropout_p=p)


def test_return_dropout_mask_is_for_small_problems():
    from generator.runtime import checks

    with pytest.raises(ValueError, match="return_dropout_mask=True would write"):
        checks.check_dropout(0.1, True, checks.DROPOUT_MASK_MAX + 1)
    with pytest.raises(TypeError, match="return_dropout_mask"):
        q = torch.zeros(1, 1, 4, 16)
        on_device(flash_attention, q, q, q, return_dropout_mask=1)


def test_the_dropout_mask_limit_is_defined_once_in_spec_assumptions():
    """The returned mask's limit lives beside the other limits (spec.assumptions); checks reads that one."""
    from generator.runtime import checks
    from spec import assumptions

    assert checks.DROPOUT_MASK_MAX is assumptions.DROPOUT_MASK_MAX
    assert "DROPOUT_MASK_MAX =" not in open(checks.__file__).read()


def test_torch_compile_fullgraph_draws_and_differentiates():
    """inductor, fullgraph: the seed and offset are drawn inside the graph (a tensor into the op),
    forward and backward run, and two compiled calls drop different entries."""
    gen, q, k, v, do = random_inputs(dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=16, Nk=16, D=16, seed=4, grad=True)

    def f(q, k, v):
        return flash_attention(q, k, v, dropout_p=0.5, block=SMALL)
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    outs = []
    for _ in range(2):
        leaves = [to_device(t).clone().requires_grad_() for t in (q, k, v)]
        out = compiled(*leaves)
        out.backward(to_device(do))
        outs.append(to_cpu(out.detach()))
        assert all(torch.isfinite(to_cpu(t.grad)).all() for t in leaves)
    assert not torch.equal(outs[0], outs[1])


# ----------------------------------------------------------------------------------
# One printed term in all three kernels (claim dropout_mask_same's premise)
# ----------------------------------------------------------------------------------
GENERATED = Path(__file__).resolve().parent.parent / "generated"


def _functions(path: Path) -> dict[str, str]:
    source = path.read_text()
    tree = ast.parse(source)
    return {fn.name: ast.get_source_segment(source, fn) for fn in tree.body if isinstance(fn, ast.FunctionDef)}


@pytest.mark.parametrize("block", ["br64_bc64", "br16_bc32"])
def test_one_keep_term_at_the_same_coordinates_in_every_kernel(block):
    fwd, bwd = (_functions(GENERATED / f"attention_{kind}_{block}.py") for kind in ("fwd", "bwd"))
    keep = print_term(T.DROPOUT_KEEP, render.DROPOUT_NAMES)
    keep_t = print_term(T.DROPOUT_KEEP, render.DROPOUT_NAMES_T)
    base = print_term(T.DROPOUT_BASE)
    assert keep in fwd["_attn_fwd_tile"] and keep in bwd["_attn_bwd_dq_stage"] and keep in fwd["_dropout_keep"]
    assert keep_t in bwd["_attn_bwd_dkdv_stage"]
    for fn in (fwd["_attn_fwd"], bwd["_attn_bwd_dkdv"], bwd["_attn_bwd_dq"], fwd["_dropout_keep"]):
        assert base in fn
    # each kernel's box is its printed one (spec.terms.DROPOUT_BOXES, read by claim dropout_mask_same with the
    # kernel's spec.launch integers), a packed batch's rebinding too
    for kernel, fn in (("forward", fwd["_attn_fwd"]), ("dkdv", bwd["_attn_bwd_dkdv"]), ("dq", bwd["_attn_bwd_dq"]),
                       ("dropout_mask", fwd["_dropout_keep"])):
        assert all(print_term(t) in fn for t in T.DROPOUT_BOXES[kernel]), kernel
    for fn in (fwd["_attn_fwd"], bwd["_attn_bwd_dkdv"], bwd["_attn_bwd_dq"]):
        assert all(print_term(t) in fn for t in T.DROPOUT_BOX_PACKED)
    # the two layouts name the same coordinates: i the query row (offs_m), j the key (offs_n)
    for names in (render.DROPOUT_NAMES, render.DROPOUT_NAMES_T):
        assert names["i"].startswith("offs_m.to(tl.int64)") and names["j"].startswith("offs_n")
    assert sorted(render.DROPOUT_NAMES["i"][-9:] + render.DROPOUT_NAMES_T["i"][-9:]) == \
        sorted("[:, None]" + "[None, :]")
    # and no other draw anywhere in the files
    for funcs in (fwd, bwd):
        draws = [line.strip() for src in funcs.values() for line in src.splitlines() if "tl.rand" in line]
        assert set(draws) <= {keep, keep_t}, draws
