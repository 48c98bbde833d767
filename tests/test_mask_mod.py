"""mask_mod: the class, its corner classifier (claim mask_mod_sound) and the generated kernels.

* Hypothesis draws random predicates of the class (random monotone atoms, random Boolean
  trees) and random tiles; the classifier never skips a tile holding an attended entry and
  never calls full a tile holding a masked one (every entry of the tile checked).
* The claim catches the mutants (a corner off by one, Kleene's ``|`` rule used for ``&``, a
  wrong direction rule), and the mutant classifiers are unsound on numbers too.
* The interval kinds (causal, window, key lengths) written as mask_mods classify every tile
  as ``masks.classify_tile`` does.
* Predicates outside the class are refused with the offending atom named.
* The kernels (forward and backward, every block config, GQA, three dtypes) agree with the
  float64 reference, and with PyTorch's FlexAttention (CPU eager) on the same masks.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_cases import BLOCKS, on_device
from generated import flash_attention
from spec import mask_mod as MM
from spec import masks
from spec import notation as n
from spec.proofs import mask_mod as PMM
from spec.masks import NotInClass, chunked, document, mask_mod, prefix_lm, sink_window
from spec.reference import attention as reference

i, j, shift = n.i, n.j, n.shift
T_Q, T_K, C = MM.Param("t_q"), MM.Param("t_k"), MM.Param("c")


# ----------------------------------------------------------------------------------
# Random predicates of the class
# ----------------------------------------------------------------------------------
@st.composite
def monotone_terms(draw):
    """A random integer expression monotone in i and in j separately."""
    a, b = draw(st.integers(-2, 2)), draw(st.integers(-2, 2))
    const = draw(st.integers(-6, 6))
    kind = draw(st.sampled_from(["linear", "floor", "tensor", "extremum"]))
    e = a * i + b * j + const + shift
    if kind == "floor":  # a multiple of floor((±i + ...)/c): chunked-style
        e = b * j + const + draw(st.sampled_from([1, -1, 2])) * sp.floor((draw(st.sampled_from([1, -1])) * i + shift) / C)
    elif kind == "tensor":  # reads of sorted per-position tensors (document ids)
        e = draw(st.sampled_from([1, -1])) * T_Q[i] + draw(st.sampled_from([1, -1])) * T_K[j] + const
    elif kind == "extremum":
        e = sp.Max(i + const, j) if draw(st.booleans()) else sp.Min(a * i, -j + const)
    return e


@st.composite
def atoms(draw):
    e = draw(monotone_terms())
    rel = draw(st.sampled_from([sp.Ge, sp.Gt, sp.Le, sp.Lt, sp.Eq, sp.Ne]))
    return rel(e, draw(st.integers(-3, 3)))


def trees(depth=2):
    if depth == 0:
        return atoms()
    sub = trees(depth - 1)
    return st.one_of(atoms(), st.builds(sp.And, sub, sub), st.builds(sp.Or, sub, sub), st.builds(sp.Not, sub))


def sorted_ids(draw, length):
    return np.sort(np.array(draw(st.lists(st.integers(0, 4), min_size=length, max_size=length))))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pred=trees())
def test_random_predicates_of_the_class_are_classified_soundly(data, pred):
    if pred in (sp.true, sp.false):
        return
    used = {str(s) for s in pred.free_symbols} | {str(x.base) for x in pred.atoms(sp.Indexed)}
    mm = MM.analyse(pred, "random", tuple(p for p in ("t_q", "t_k", "c") if p in used))
    nq, nk = data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20))
    br, bc = data.draw(st.sampled_from([1, 2, 4, 8])), data.draw(st.sampled_from([1, 2, 4, 8]))
    values = {"c": data.draw(st.integers(1, 5)), "t_q": sorted_ids(data.draw, nq), "t_k": sorted_ids(data.draw, nk)}
    s = data.draw(st.integers(-6, 6))
    dense = mm.dense(nq, nk, s, values)
    for r0 in range(0, nq, br):
        for c0 in range(0, nk, bc):
            cls = mm.classify(r0, c0, br, bc, nq, nk, s, values)
            tile = dense[r0:r0 + br, c0:c0 + bc]
            assert not (cls == "skip" and tile.any()), (pred, r0, c0, tile)
            assert not (cls == "full" and not tile.all()), (pred, r0, c0, tile)


@pytest.mark.parametrize("br", [1, 2, 4, 8])
def test_a_floor_of_a_split_fraction_is_classified_exactly(br):
    """Issue 23: ``floor((i + shift)/c) >= 1`` with c = 5, shift = -2, nq = 8. Expanded before it
    became integer division, the corner term was ``floor(shift/c + (BLOCK_M + start_m - 1)/c)``
    and the numeric model floored ``-0.4 + 1.4 = 0.9999999999999999``: the tile holding row 7
    (attended) was classified skip. Now the atoms divide integers: ``floor_div``."""
    mm = MM.analyse(sp.Ge(sp.floor((i + shift) / C), 1), "split_floor", ("c",))
    dense = mm.dense(8, 8, -2, {"c": 5})
    assert dense[7].all() and not dense[:7].any()
    for r0 in range(0, 8, br):
        for c0 in range(0, 8, 4):
            cls = mm.classify(r0, c0, br, 4, 8, 8, -2, {"c": 5})
            tile = dense[r0:r0 + br, c0:c0 + 4]
            assert not (cls == "skip" and tile.any()) and not (cls == "full" and not tile.all()), (r0, cls)
    assert mm.classify(8 - br, 0, br, 4, 8, 8, -2, {"c": 5}) == ("full" if br == 1 else "partial")
    assert not mm.tree.e.has(sp.floor) and mm.tree.e.has(MM.floor_div)


@pytest.mark.parametrize("a", [-2**31, -2**31 + 1, -7, -5, -1, 0, 1, 4, 5, 2**31 - 1])
@pytest.mark.parametrize("c", [1, 2, 5, 2**31 - 1])
def test_printed_floor_div_floors_in_int32_under_either_rounding(a, c):
    """The printed ``floor_div`` evaluated with numpy int32 (no overflow warnings), with ``//``
    truncating (compiled Triton, this Triton's interpreter) and flooring: floor(a/c) each time."""
    from spec.printer import print_expr

    text = print_expr(MM.floor_div(sp.Symbol("a", integer=True), sp.Symbol("c", integer=True)))

    class I32(int):  # an int32 whose // rounds as told
        trunc = True

        def _w(self, v):
            assert -2**31 <= v < 2**31, (text, a, c, v)
            return type(self)(v)

        def __floordiv__(self, o):
            q = abs(int(self)) // abs(int(o)) * (1 if (self < 0) == (o < 0) else -1) if self.trunc else int(self) // int(o)
            return self._w(q)

        __rfloordiv__ = lambda self, o: I32(o).__floordiv__(self)  # noqa: E731
        __sub__ = lambda self, o: self._w(int(self) - int(o))  # noqa: E731
        __rsub__ = lambda self, o: self._w(int(o) - int(self))  # noqa: E731
        __neg__ = lambda self: self._w(-int(self))  # noqa: E731

    class tl:
        where = staticmethod(lambda cond, x, y: x if cond else y)

    for trunc in (True, False):
        I32.trunc = trunc
        assert eval(text, {"tl": tl, "a": I32(a), "c": I32(c)}) == a // c


def test_every_builtin_is_exhaustively_sound_and_tight_where_it_should_be():
    """Small grids, every tile: sound; and a tile whose entries are all equal is never partial for
    the built-ins (their atoms are exact at the corners), so skipping and full tiles do happen."""
    docs = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4])
    cases = [(prefix_lm, {"prefix": 5}), (chunked, {"chunk": 4}), (sink_window, {"sinks": 2, "left": 3}),
             (document, {"doc_q": docs, "doc_k": docs})]
    for mm, values in cases:
        for s in (0, 3, -2):
            dense = mm.dense(16, 16, s, values)
            seen = set()
            for br, bc in ((2, 2), (4, 4), (2, 8)):
                for r0 in range(0, 16, br):
                    for c0 in range(0, 16, bc):
                        cls = mm.classify(r0, c0, br, bc, 16, 16, s, values)
                        tile = dense[r0:r0 + br, c0:c0 + bc]
                        assert not (cls == "skip" and tile.any()) and not (cls == "full" and not tile.all())
                        seen.add(cls)
            assert seen == {"skip", "full", "partial"}, (mm.name, s, seen)


# ----------------------------------------------------------------------------------
# The proof and its mutants
# ----------------------------------------------------------------------------------
def test_the_class_proof_holds():
    r = PMM.prove_mask_mod_sound()
    assert r.proved, r.detail


def off_by_one_corner(d, want, ends):  # the tile's first row/key moved one inwards
    return MM.corner(d, want, (ends[0] + 1, ends[1]))


def kleene_or_for_and(states):  # the "all" of & computed with |'s rule
    return sp.Or(*[a for a, _ in states]), sp.Or(*[x for _, x in states])


def test_corner_off_by_one_is_refuted_by_the_proof_and_unsound_on_numbers():
    r = PMM.prove_mask_mod_sound(corner=off_by_one_corner)
    assert not r.proved and "corner" in r.detail
    # numbers: causal j <= i with the first row moved in calls full a tile whose first row misses a key
    causal = MM.analyse(sp.Le(j, i), "causal", ())
    cls = causal.classify(4, 0, 4, 6, 8, 8, 0, {}, corner=off_by_one_corner)  # rows 4..7, keys 0..5
    assert cls == "full" and not causal.dense(8, 8, 0, {})[4:8, 0:6].all()


def test_kleene_or_used_for_and_is_refuted_by_the_proof_and_unsound_on_numbers():
    r = PMM.prove_mask_mod_sound(kleene={**MM.KLEENE, "and": kleene_or_for_and})
    assert not r.proved and "kleene and" in r.detail
    band = MM.analyse(sp.And(sp.Le(j, i), sp.Ge(j, i - 1)), "band", ())
    bad = [(r0, c0) for r0 in range(0, 8, 4) for c0 in range(0, 8, 4)
           if band.classify(r0, c0, 4, 4, 8, 8, 0, {}, kleene={**MM.KLEENE, "and": kleene_or_for_and}) == "full"
           and not band.dense(8, 8, 0, {})[r0:r0 + 4, c0:c0 + 4].all()]
    assert bad


@pytest.mark.parametrize("rule, mutant", [
    ("floor", lambda d: -d),  # floor reverses direction: wrong
    ("add", lambda dirs: max(dirs)),  # a sum of opposite directions called monotone
    ("scale", lambda sign, d: d),  # a negative multiple keeps the direction: wrong
])
def test_wrong_direction_rules_are_refuted(rule, mutant):
    r = PMM.prove_mask_mod_sound(rules={**MM.DIRECTION_RULES, rule: mutant})
    assert not r.proved, rule


# the atom-rule mutant (the wrong extreme) lives in tests/test_mutants.py, beside every claim's mutant


# ----------------------------------------------------------------------------------
# The interval kinds are instances of the class
# ----------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(kinds=st.sampled_from(list(masks.kind_sets())), nq=st.integers(1, 24), nk=st.integers(1, 24),
       br=st.sampled_from([2, 4, 16]), bc=st.sampled_from([4, 8, 16]), s=st.integers(-8, 8),
       wl=st.integers(0, 6), wr=st.integers(0, 6), data=st.data())
def test_generic_classifier_agrees_with_the_interval_kinds(kinds, nq, nk, br, bc, s, wl, wr, data):
    key_len = data.draw(st.integers(0, nk))
    pred = masks.predicate(kinds)  # including 0 <= j < N_K
    mm = MM.analyse(pred.xreplace({n.window_left: MM.Param("wl"), n.window_right: MM.Param("wr"),
                               n.key_len: MM.Param("kl")}), "kinds", ("wl", "wr", "kl"))
    params = dict(N_Q=nq, N_K=nk, shift=s, window_left=wl, window_right=wr, key_len=key_len)
    for r0 in range(0, nq, br):
        for c0 in range(0, nk, bc):
            want = masks.classify_tile(kinds, r0, c0, br, bc, **params)
            assert mm.classify(r0, c0, br, bc, nq, nk, s, {"wl": wl, "wr": wr, "kl": key_len}) == want


# ----------------------------------------------------------------------------------
# Outside the class: refused, naming the atom
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn, named", [
    (lambda i, j: i * j > 3, "i*j > 3"),
    (lambda i, j, w: (i - j) ** 2 <= w, "(i - j)**2 <= w"),
    (lambda i, j: j <= i / 2, "j <= i/2"),
    (lambda i, j, t: sp.Eq(t[i], t[j]), "t"),
    (lambda i, j, c: (j <= i) & (j // c >= i), "floor(j/c) >= i"),  # fine: this one is in the class
])
def test_predicates_outside_the_class_are_refused_with_the_atom_named(fn, named):
    if named == "floor(j/c) >= i":
        assert mask_mod(fn).name == "<lambda>"
        return
    with pytest.raises(NotInClass, match="atom|outside"):
        mask_mod(fn)
    try:
        mask_mod(fn)
    except NotInClass as e:
        assert named in str(e)


def test_undeclared_symbols_and_non_predicates_are_refused():
    with pytest.raises(NotInClass, match="undeclared"):
        mask_mod(lambda i, j: j <= i + sp.Symbol("w", integer=True))
    with pytest.raises(NotInClass, match="not a predicate"):
        mask_mod(lambda i, j: i + j)


# ----------------------------------------------------------------------------------
# Kernels: forward and backward vs the float64 reference, and vs FlexAttention
# ----------------------------------------------------------------------------------
DOCS = torch.tensor([[0] * 9 + [1] * 20 + [2] * 11, [0] * 33 + [1] * 7])
BUILTIN_CASES = [
    (prefix_lm, {"prefix": torch.tensor([17, 3])}, False),
    (chunked, {"chunk": 8}, True),
    (sink_window, {"sinks": 4, "left": 6}, False),
    (document, {"doc_q": DOCS, "doc_k": DOCS}, True),
]
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOL = {torch.float32: 2e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("case", range(len(BUILTIN_CASES)), ids=[c[0].name for c in BUILTIN_CASES])
def test_builtin_kernels_forward_and_backward_match_the_reference(block, case):
    mm, args, causal = BUILTIN_CASES[case]
    dtype = DTYPES[(case + BLOCKS.index(block)) % 3]
    gen = torch.Generator().manual_seed(case)
    B, H, Hk, N, D = 2, 2, 1, 40, 16  # GQA: two query heads per K/V head
    q, k, v = (torch.randn(B, h, N, D, generator=gen).to(dtype).requires_grad_() for h in (H, Hk, Hk))
    out = on_device(flash_attention, q, k, v, causal=causal, mask_mod=mm, mask_args=args, block=block)
    want, _ = reference(q.double(), k.double(), v.double(), causal=causal, mask_mod=mm, mask_args=args)
    g = torch.randn(out.shape, generator=gen).to(dtype)
    got = torch.autograd.grad(out, (q, k, v), g)
    ref = torch.autograd.grad(want, (q, k, v), g.double())
    tol = TOL[dtype]
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    for name, a, b in zip("qkv", got, ref):
        torch.testing.assert_close(a.double(), b.double(), atol=4 * tol, rtol=4 * tol, msg=lambda m: f"d{name}: {m}")


def test_mask_mod_is_anded_with_the_other_masks_bottom_right():
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, 2, 24, 16, generator=gen)
    k, v = (torch.randn(1, 2, 40, 16, generator=gen) for _ in range(2))
    kw = dict(causal=True, alignment="bottom_right", window=(9, 0), key_lengths=torch.tensor([35]),
              mask_mod=sink_window, mask_args={"sinks": 3, "left": 5})
    out = on_device(flash_attention, q, k, v, block=(16, 32), **kw)
    want, _ = reference(q, k, v, **kw)
    torch.testing.assert_close(out.double(), want.double(), atol=2e-5, rtol=2e-5)


def flex_mask(mm, args):
    """The same predicate as a FlexAttention mask_mod(b, h, q_idx, kv_idx) (shift 0)."""
    if mm is prefix_lm:
        return lambda b, h, qi, ki: (ki < args["prefix"][b]) | (ki <= qi)
    if mm is chunked:
        return lambda b, h, qi, ki: (qi // args["chunk"] == ki // args["chunk"]) & (ki <= qi)
    if mm is sink_window:
        return lambda b, h, qi, ki: (ki < args["sinks"]) | ((qi - args["left"] <= ki) & (ki <= qi))
    return lambda b, h, qi, ki: (args["doc_q"][b, qi] == args["doc_k"][b, ki]) & (ki <= qi)


def test_outputs_agree_with_flex_attention_on_cpu():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    gen = torch.Generator().manual_seed(3)
    B, H, N, D = 2, 2, 40, 16
    q, k, v = (torch.randn(B, H, N, D, generator=gen) for _ in range(3))
    for mm, args, causal in BUILTIN_CASES:
        block_mask = flex.create_block_mask(flex_mask(mm, args), B, None, N, N, device="cpu", BLOCK_SIZE=16)
        theirs = flex.flex_attention(q, k, v, block_mask=block_mask)
        ours = on_device(flash_attention, q, k, v, causal=causal, mask_mod=mm, mask_args=args, block=(16, 32))
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=2e-5, msg=lambda m: f"{mm.name}: {m}")


# ----------------------------------------------------------------------------------
# Errors that name the problem and the fix
# ----------------------------------------------------------------------------------
def test_un_emitted_mask_mod_raises_the_command_to_run():
    @mask_mod
    def diagonal_band(i, j, width):
        return (j <= i) & (j >= i - width)

    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(ValueError, match=r"python -m generator --br 64 --bc 64 --mask-mod "
                                         r"test_mask_mod:diagonal_band"):
        flash_attention(q, q, q, mask_mod=diagonal_band, mask_args={"width": 3}, block=(64, 64))


@pytest.mark.parametrize("args, match", [
    ({}, "missing"),
    ({"doc_q": DOCS, "doc_k": DOCS, "x": 1}, "unknown"),
    ({"doc_q": DOCS.flip(-1), "doc_k": DOCS}, "non-decreasing"),
    ({"doc_q": DOCS[:, :5], "doc_k": DOCS}, "shape"),
    ({"doc_q": DOCS.float(), "doc_k": DOCS}, "integers"),
])
def test_bad_mask_args_are_named(args, match):
    q = torch.randn(2, 1, 40, 16)
    with pytest.raises((ValueError, TypeError), match=match):
        flash_attention(q, q, q, mask_mod=document, mask_args=args, block=(16, 32))


def test_pack_writes_the_row_layout_the_kernels_read():
    """MaskMod.pack writes each parameter at MaskMod.row_layout's offset (what kernel_form reads, claim
    mask_mod_sound) in a fresh contiguous (B, width) row, so MM_row + e is mask_mod_args[b, e]."""
    probe = mask_mod(lambda i, j, t_q, t_k, c: t_k[j + c] >= t_q[i] + c)
    doc_q, doc_k = torch.tensor([[0, 0, 1], [2, 3, 3]]), torch.tensor([[0, 1, 1, 1], [2, 2, 3, 4]])
    row = probe.pack({"t_q": doc_q, "t_k": doc_k, "c": torch.tensor([5, 6])}, 2, 3, 4)
    assert row.shape == (2, probe.row_layout(3, 4)[1]) and row.stride() == (8, 1)
    assert row.tolist() == [[5, 0, 0, 1, 0, 1, 1, 1], [6, 2, 3, 3, 2, 2, 3, 4]]  # c, then t_q, then t_k
    back = probe.values(row, 1, 3, 4)
    assert back["c"] == 6 and back["t_q"].tolist() == [2, 3, 3] and back["t_k"].tolist() == [2, 2, 3, 4]


def test_chunk_must_be_positive():
    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(ValueError, match=">= 1"):
        flash_attention(q, q, q, mask_mod=chunked, mask_args={"chunk": 0})


def test_generator_emits_a_user_mask_mod(tmp_path, monkeypatch, proved):
    """`--mask-mod module:name` prints forward and backward kernels named after it; --check re-renders them.
    (The CLI's proof run is the session's one ``prove_all()``, ``proved``: the proofs are the claim
    tests' subject, the emission this test's.)"""
    from generator import __main__ as cli
    from generator import manifest
    from spec import claims

    monkeypatch.setattr(claims, "prove_all", lambda: list(proved.values()))

    (tmp_path / "user_masks.py").write_text(
        "from spec.masks import mask_mod\n\n@mask_mod\ndef band(i, j, width):\n    return (j <= i) & (j >= i - width)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "gen"
    assert cli.main(["--br", "16", "--bc", "32", "--mask-mod", "user_masks:band", "--out", str(out)]) == 0
    assert (out / "attention_fwd_maskmod_band_br16_bc32.py").exists()
    assert (out / "attention_bwd_maskmod_band_br16_bc32.py").exists()
    assert manifest.check(out) == []
    fwd = manifest.import_file(out / "attention_fwd_maskmod_band_br16_bc32.py")
    assert fwd.MASK_MOD == "band" and "--mask-mod user_masks:band" in fwd.COMMAND
    (tmp_path / "bad_masks.py").write_text(
        "from spec.masks import mask_mod\n\n@mask_mod\ndef square(i, j):\n    return i * j < 4\n")
    assert cli.main(["--br", "16", "--bc", "32", "--mask-mod", "bad_masks:square", "--out", str(out)]) == 2
    sys.modules.pop("user_masks", None)


def test_mask_mod_under_torch_compile():
    """fullgraph: the parameters are packed in the graph (the value checks need a host sync and
    run eagerly only); the op and its backward trace through their fake implementations."""
    q = torch.randn(2, 2, 40, 16, requires_grad=True)
    k, v = (torch.randn(2, 1, 40, 16) for _ in range(2))

    def f(q, k, v, docs):
        out = flash_attention(q, k, v, causal=True, mask_mod=document, mask_args={"doc_q": docs, "doc_k": docs},
                              block=(16, 32))
        return out.sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(on_device(compiled, q, k, v, DOCS), on_device(f, q, k, v, DOCS))


def test_mask_mod_kernels_compile_for_sm80_and_sm90_without_spills():
    """Ahead of time (no GPU), the worst case: document ids (two tensor reads per tile corner), causal,
    at the blocks ``block="auto"`` runs (``static.default_block`` per memory path, the backward of
    the default forward's: ``static.backward_block``), forward (and its TMA path on sm_90, the
    default there) and backward at head dim 128, and the TMA forward at head dim 64 too: every kernel
    compiles, on tensor cores, with no spill and no redundant MMA. (The 4-warp TMA forward spilled
    36/24 B at head dim 64: ``generator.variants.mask_mod_fwd_settings``. The static page,
    ``python -m benchmarks.static``, has every head dim.)"""
    from benchmarks import static

    jobs = []
    module = "generated.attention_{}_maskmod_document_{}"
    for arch in (80, 90):
        jobs += [static.Job(module.format("fwd", static.default_block(arch, 128)), arch, "bf16", 128, "causal"),
                 static.Job(module.format("bwd", static.backward_block(arch, 128)), arch, "bf16", 128, "causal")]
        if arch in static.TMA_ARCHS:
            jobs += [static.Job(module.format("fwd", static.default_block(arch, hd, tma=True)), arch, "bf16", hd,
                                "causal", tma=True) for hd in (64, 128)]
    rows = static.run_jobs(jobs)
    assert len(rows) >= len(jobs) and not [r for r in rows if "error" in r], rows
    bad = [(r["kernel"], r["arch"], r["head_dim"], r.get("tma"), r["spill_store_bytes"]) for r in rows
           if not (r["no_spill"] and r["tensor_cores"])]
    assert not bad, bad
    for r in rows:
        issued = r.get("mma_issued_per_needed")
        assert issued is None or issued <= 1.05, (r["kernel"], r["arch"], issued)


def test_mask_structure_benchmark_runs_small():
    """benchmarks/mask_mod.py at a tiny N (no timing meaning): both sides build their structure for
    every built-in; flashproof keeps one int32 row (4 bytes per scalar, 4 per id per tensor)."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    from benchmarks import mask_mod as bench

    rows = bench.measure(256, repeat=1)
    assert [r["mask"] for r in rows] == ["prefix_lm", "chunked", "sink_window", "document"]
    assert [r["flashproof_bytes"] for r in rows] == [4, 4, 8, 2 * 256 * 4]
    assert all(r["flex_bytes"] > 0 and r["flex_evaluations"] == 256 * 256 for r in rows)
    assert "| `document` | 256 |" in bench.table(rows)
