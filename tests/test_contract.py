"""Issue 23: one contract for every entry point. Regressions of rows 1-7 and 11-15 of the issue's
table (each failed on main at 3c1f80b), the declaration (``generator.runtime.contract``) against
the README's input-contract table, a package emitted with ``--out`` calling every entry point,
and the layout property over every tensor argument of every entry point.

Small sizes: the kernels run in Triton's interpreter. Every numeric case is compared with the
float64 reference (``spec.reference``) within ``generator.checking``'s tolerances, or bitwise with
the same call on contiguous copies.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_cases import on_device, to_cpu, to_device
from generated import (flash_attention, flash_attention_varlen, flash_attention_with_kvcache, merge_state,
                       merge_states)
from generator.checking import attention_failures
from spec import assumptions
from spec.masks import document, prefix_lm
from spec.reference import attention as reference, varlen_attention

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

ROOT = Path(__file__).resolve().parent.parent
SMALL = (16, 32)
D = 16


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def strided(values: torch.Tensor, fill=-7) -> torch.Tensor:
    """``values`` (1-d) as a non-contiguous view: every other element of a buffer twice as long."""
    buf = torch.full((2 * values.numel(),), fill, dtype=values.dtype)
    buf[::2] = values
    return buf[::2]


def packed(lengths_q, lengths_k, Hq=2, Hkv=1, seed=0):
    tq, tk = sum(lengths_q), sum(lengths_k)
    q, k, v = randn(tq, Hq, D, seed=seed), randn(tk, Hkv, D, seed=seed + 1), randn(tk, Hkv, D, seed=seed + 2)
    cu = [torch.tensor(np.cumsum([0, *lens]), dtype=torch.int32) for lens in (lengths_q, lengths_k)]
    return q, k, v, *cu


def decode_problem(B=2, Nq=2, Hq=2, Hkv=1, capacity=40, lens=(30, 17), seed=0):
    q = randn(B, Nq, Hq, D, seed=seed)
    k, v = randn(B, capacity, Hkv, D, seed=seed + 1), randn(B, capacity, Hkv, D, seed=seed + 2)
    return q, k, v, torch.tensor(lens, dtype=torch.int32)


def reference_decode(q, k, v, lens, **kw):
    """float64, per batch: attention over the first lens[b] keys, bottom-right aligned."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        L = int(lens[b])
        o, lse = reference(q[b:b + 1].transpose(1, 2).double(), k[b:b + 1, :L].transpose(1, 2).double(),
                           v[b:b + 1, :L].transpose(1, 2).double(), alignment="bottom_right", **kw)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses)


def paged(k, v, page_size=16, spare=2, seed=0):
    """The contiguous cache ``k, v`` as pages in a scrambled order, and its block table."""
    B, cap, H, _ = k.shape
    pages = -(-cap // page_size)
    num = B * pages + spare
    perm = torch.randperm(num, generator=torch.Generator().manual_seed(seed))[:B * pages].view(B, pages)
    kp, vp = torch.full((num, page_size, H, D), float("nan")), torch.full((num, page_size, H, D), float("nan"))
    for b in range(B):
        for j in range(cap):
            kp[perm[b, j // page_size], j % page_size] = k[b, j]
            vp[perm[b, j // page_size], j % page_size] = v[b, j]
    return kp, vp, perm.to(torch.int32)


# ==================================================================================
# Rows 1-3: small tensors through any strides
# ==================================================================================
def test_row1_varlen_non_contiguous_cu_seqlens():
    q, k, v, cu_q, cu_k = packed([5, 0, 9], [7, 4, 6])
    want = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, causal=True, return_lse=True, block=SMALL)
    got = on_device(flash_attention_varlen, q, k, v, strided(cu_q), strided(cu_k), causal=True, return_lse=True,
                    block=SMALL)
    assert attention_failures(*got, *varlen_attention(q, k, v, cu_q, cu_k, causal=True), v) == []
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_row2_non_contiguous_sinks_dense_and_varlen():
    sinks = torch.tensor([0.5, -1.0])
    q, k, v = randn(1, 2, 9, D), randn(1, 1, 12, D, seed=1), randn(1, 1, 12, D, seed=2)
    ref_out, ref_lse = reference(q.double(), k.double(), v.double(), causal=True, sinks=sinks.double())
    for s in (sinks, strided(sinks)):
        leaf = to_device(s.clone() if s.is_contiguous() else s).requires_grad_()
        out, lse = flash_attention(*to_device((q, k, v)), causal=True, sinks=leaf, return_lse=True, block=SMALL)
        out.sum().backward()
        assert attention_failures(to_cpu(out.detach()), to_cpu(lse), ref_out, ref_lse, v) == []
        if s is sinks:
            dsinks = to_cpu(leaf.grad)
        else:
            assert torch.equal(to_cpu(leaf.grad), dsinks)
    q, k, v, cu_q, cu_k = packed([4, 6], [5, 8])
    want = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, sinks=sinks, return_lse=True, block=SMALL)
    got = on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, sinks=strided(sinks), return_lse=True, block=SMALL)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("layout", ["column_slice", "transposed"])
def test_row3_kvcache_block_table_any_strides(layout):
    q, k, v, lens = decode_problem()
    kp, vp, table = paged(k, v)
    if layout == "column_slice":  # every other column of a wider table (the others out of range)
        wide = torch.full((table.shape[0], 2 * table.shape[1]), 10**6, dtype=torch.int32)
        wide[:, ::2] = table
        view = wide[:, ::2]
    else:  # column-major memory
        view = table.t().contiguous().t()
    want = on_device(flash_attention_with_kvcache, q, kp, vp, lens, block_table=table, return_lse=True)
    got = on_device(flash_attention_with_kvcache, q, kp, vp, lens, block_table=view, return_lse=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert attention_failures(*got, *reference_decode(q, k, v, lens), v) == []


# ==================================================================================
# Rows 4-7: the decode path's values
# ==================================================================================
@pytest.mark.parametrize("scale", [0.0, -0.3])
def test_row4_kvcache_scale_not_positive_is_rewritten(scale):
    q, k, v, lens = decode_problem()
    for splits in (1, 3):
        got = on_device(flash_attention_with_kvcache, q, k, v, lens, scale=scale, num_splits=splits,
                        return_lse=True, causal=True)
        assert attention_failures(*got, *reference_decode(q, k, v, lens, scale=scale, causal=True), v) == []


def test_row5_kvcache_huge_window_side_is_clamped():
    q, k, v, lens = decode_problem()
    got = on_device(flash_attention_with_kvcache, q, k, v, lens, window=(4, 2**31 - 1), return_lse=True)
    assert attention_failures(*got, *reference_decode(q, k, v, lens, window=(4, 10**6)), v) == []


@pytest.mark.parametrize("bad", [-1, "num_pages"])
def test_row6_page_ids_out_of_range_are_rejected_or_clamped(bad):
    """With the opt-in value checks a page id a sequence reads outside [0, num_pages) is refused; by
    default it is clamped into that range on the device (no host sync): the call gives the result of
    the call with the clamped id, bit for bit."""
    from generator.runtime import contract

    q, k, v, lens = decode_problem()
    kp, vp, table = paged(k, v)
    table = table.clone()
    valid = table.clone()
    table[1, 1] = kp.shape[0] if bad == "num_pages" else bad  # batch 1 uses pages 0 and 1 (17 keys)
    valid[1, 1] = kp.shape[0] - 1 if bad == "num_pages" else 0
    with pytest.raises(ValueError, match=r"block_table.*\[0, num_pages"), contract.checking_values():
        on_device(flash_attention_with_kvcache, q, kp, vp, lens, block_table=table)
    got = on_device(flash_attention_with_kvcache, q, kp, vp, lens, block_table=table, return_lse=True)
    want = on_device(flash_attention_with_kvcache, q, kp, vp, lens, block_table=valid, return_lse=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    table[1, 1:] = -1  # pages past cache_seqlens are never read: any id (vLLM pads with -1)
    lens = torch.tensor([30, 16], dtype=torch.int32)
    got = on_device(flash_attention_with_kvcache, q, kp, vp, lens, block_table=table, return_lse=True)
    assert attention_failures(*got, *reference_decode(q, k, v, lens), v) == []


def test_row7_kvcache_under_compile_clamps_cache_seqlens_on_the_device():
    q, k, v, _ = decode_problem(capacity=32)
    # the cache is a view of a larger buffer poisoned with NaN past its capacity
    big_k, big_v = (torch.full((2, 64, 1, D), float("nan")) for _ in range(2))
    big_k[:, :32], big_v[:, :32] = k, v
    kc, vc = big_k[:, :32], big_v[:, :32]
    lens = torch.tensor([50, 20], dtype=torch.int32)  # 50 > capacity 32
    compiled = torch.compile(lambda *a: flash_attention_with_kvcache(*a, return_lse=True), backend="eager",
                             fullgraph=True)
    got = on_device(compiled, q, kc, vc, lens)
    clamped = torch.tensor([32, 20], dtype=torch.int32)
    assert all(torch.equal(a, b) for a, b in zip(got, on_device(
        flash_attention_with_kvcache, q, kc, vc, clamped, return_lse=True)))
    assert not got[0].isnan().any()


# ==================================================================================
# Rows 11-15
# ==================================================================================
def test_row11_mask_args_whose_int32_differences_overflow_are_rejected():
    bound = assumptions.limit("mask_args_int32")
    q, k, v = randn(1, 1, 8, D), randn(1, 1, 8, D, seed=1), randn(1, 1, 8, D, seed=2)
    with pytest.raises(ValueError, match=rf"mask_args\['prefix'\].*{bound}.*mask_args_int32"):
        on_device(flash_attention, q, k, v, mask_mod=prefix_lm, mask_args={"prefix": -2**31 + 8}, block=SMALL)
    ids = torch.tensor([-1] * 4 + [2**31 - 1] * 4)
    with pytest.raises(ValueError, match=r"mask_args\['doc_q'\].*mask_args_int32"):
        on_device(flash_attention, q, k, v, mask_mod=document, mask_args={"doc_q": ids, "doc_k": ids}, block=SMALL)
    # just inside: the same masks as the reference
    for args, mm in (({"prefix": -bound}, prefix_lm), ({"doc_q": ids.clamp(max=bound), "doc_k": ids.clamp(max=bound)},
                                                        document)):
        got = on_device(flash_attention, q, k, v, mask_mod=mm, mask_args=args, causal=True, return_lse=True,
                        block=SMALL)
        assert attention_failures(*got, *reference(q, k, v, mask_mod=mm, mask_args=args, causal=True), v) == []


def _lower_index_limit(monkeypatch, value):
    monkeypatch.setitem(assumptions.ASSUMPTIONS, "index_int32",
                        assumptions.Assumption("index_int32", "test", "reject", value))


def test_row12_varlen_checks_int32_offsets_inside_a_segment(monkeypatch):
    q, k, v, cu_q, cu_k = packed([5, 9], [7, 30])
    # k (37, 1, 16): its longest segment (30 keys) reaches (30 - 1)·16 + 15 = 479 elements; q's (9 rows at row
    # stride 32) 271. The whole packed k would reach (37 - 1)·16 + 15 = 591: the check is per segment.
    _lower_index_limit(monkeypatch, 478)
    with pytest.raises(ValueError, match="k spans 479 .*index_int32"):
        on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, block=SMALL)
    _lower_index_limit(monkeypatch, 479)
    on_device(flash_attention_varlen, q, k, v, cu_q, cu_k, block=SMALL)


def test_row12_kvcache_checks_int32_offsets(monkeypatch):
    q, k, v, lens = decode_problem(capacity=40)  # k reaches (40 - 1)·16 + 15 = 639 inside a (batch, head)
    _lower_index_limit(monkeypatch, 638)
    with pytest.raises(ValueError, match="index_int32"):
        on_device(flash_attention_with_kvcache, q, k, v, lens)
    _lower_index_limit(monkeypatch, 639)
    on_device(flash_attention_with_kvcache, q, k, v, lens, num_splits=1)


def test_row13_merge_with_head_dim_zero_gives_the_merged_lse():
    lse_a, lse_b = randn(3, 4), randn(3, 4, seed=1)
    lse_a[0, 0] = lse_b[0, 0] = float("-inf")
    o = torch.zeros(3, 4, 0)
    out, lse = on_device(merge_state, o, lse_a, o, lse_b)
    assert out.shape == (3, 4, 0)
    torch.testing.assert_close(lse, torch.logaddexp(lse_a, lse_b), rtol=1e-6, atol=1e-6, equal_nan=False)
    out, lse = on_device(merge_states, torch.zeros(2, 3, 4, 0), torch.stack([lse_a, lse_b]))
    assert out.shape == (3, 4, 0)
    torch.testing.assert_close(lse, torch.logaddexp(lse_a, lse_b), rtol=1e-6, atol=1e-6)


def test_row15_kvcache_scalar_types_are_flash_attentions():
    q, k, v, lens = decode_problem()
    with pytest.raises(TypeError, match="scale must be a real number"):
        on_device(flash_attention_with_kvcache, q, k, v, lens, scale=True)
    with pytest.raises(TypeError, match="num_splits must be an int"):
        on_device(flash_attention_with_kvcache, q, k, v, lens, num_splits=True)
    got = on_device(flash_attention_with_kvcache, q, k, v, lens, scale=np.float32(0.25), num_splits=np.int64(2))
    want = on_device(flash_attention_with_kvcache, q, k, v, lens, scale=0.25, num_splits=2)
    assert torch.equal(got, want)
    with pytest.raises(TypeError, match="scale must be a real number"):
        on_device(flash_attention, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=True)


# ==================================================================================
# Row 14 and deliverable 5: a package emitted with --out runs every entry point on its own kernels
# ==================================================================================
PACKAGE = "kernels_contract23"


@pytest.fixture(scope="module")
def emitted(tmp_path_factory, proved):
    """``python -m generator --br 16 --bc 16 --out DIR/kernels_contract23``: a block the repo's
    generated/ lacks, imported by its own name from a temporary directory. The CLI runs in this
    process on the session's proofs (``proved``: one ``prove_all()`` per run; the CLI's own proof
    run is tests/test_generator_cli.py's)."""
    import generated
    from generator import __main__ as cli
    from spec import claims

    assert (16, 16) not in generated.KERNELS
    root = tmp_path_factory.mktemp("emitted")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(claims, "prove_all", lambda: list(proved.values()))
        assert cli.main(["--br", "16", "--bc", "16", "--out", str(root / PACKAGE)]) == 0
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE), root
    finally:
        sys.path.remove(str(root))


def _ran_own_kernel(kind: str) -> bool:
    return f"{PACKAGE}.{'merge_state' if kind == 'merge' else 'attention_' + kind}_br16_bc16" in sys.modules


def test_row14_every_entry_point_of_an_emitted_package_runs_its_own_kernels(emitted):
    pkg, root = emitted
    assert pkg.KERNELS.keys() == {(16, 16)}
    # flash_attention and softmax
    q, k, v = randn(1, 2, 9, D), randn(1, 1, 12, D, seed=1), randn(1, 1, 12, D, seed=2)
    got = on_device(pkg.flash_attention, q, k, v, causal=True, block=(16, 16), return_lse=True)
    assert attention_failures(*got, *reference(q, k, v, causal=True), v) == [] and _ran_own_kernel("fwd")
    x = randn(3, 40)
    torch.testing.assert_close(on_device(pkg.softmax, x, block=(16, 16)), torch.softmax(x, -1))
    # varlen, forward and backward
    q, k, v, cu_q, cu_k = packed([5, 9], [7, 12])
    leaves = [to_device(t).requires_grad_() for t in (q, k, v)]
    out, lse = pkg.flash_attention_varlen(*leaves, to_device(cu_q), to_device(cu_k), causal=True, block=(16, 16),
                                          return_lse=True)
    out.sum().backward()
    assert attention_failures(to_cpu(out.detach()), to_cpu(lse), *varlen_attention(q, k, v, cu_q, cu_k, causal=True),
                              v) == []
    assert _ran_own_kernel("bwd") and all(t.grad is not None for t in leaves)
    with pytest.raises(ValueError, match=f"no generated fwd kernel in {PACKAGE}"):
        on_device(pkg.flash_attention_varlen, q, k, v, cu_q, cu_k, block=(64, 64))  # the repo's block
    # decode, unsplit and split (the split path merges with the package's merge kernel)
    q, k, v, lens = decode_problem()
    for splits in (1, 3):
        got = on_device(pkg.flash_attention_with_kvcache, q, k, v, lens, num_splits=splits, return_lse=True)
        assert attention_failures(*got, *reference_decode(q, k, v, lens), v) == []
    assert _ran_own_kernel("decode") and _ran_own_kernel("merge")
    # merge_state(s)
    o, ls = randn(2, 3, D), randn(2, 3, seed=4)
    o_m, lse_m = on_device(pkg.merge_state, o[0], ls[0], o[1], ls[1])
    want = on_device(merge_state, o[0], ls[0], o[1], ls[1])
    torch.testing.assert_close((o_m, lse_m), want)
    torch.testing.assert_close(on_device(pkg.merge_states, o, ls), want)
    # ring attention on a one-rank group
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{root / 'ring_store'}", rank=0, world_size=1)
    try:
        q, k, v = randn(1, 2, 8, D), randn(1, 1, 8, D, seed=1), randn(1, 1, 8, D, seed=2)
        got = on_device(pkg.ring_attention, q, k, v, causal=True, block=(16, 16), return_lse=True)
        assert attention_failures(*got, *reference(q, k, v, causal=True), v) == []
        with pytest.raises(ValueError, match=f"no generated fwd kernel in {PACKAGE}"):
            on_device(pkg.ring_attention, q, k, v, block=(64, 64))
    finally:
        dist.destroy_process_group()


# ==================================================================================
# The declaration: every argument once, the README printed from it
# ==================================================================================
def test_every_public_argument_is_declared_once():
    import inspect

    import generated
    from generator.runtime import contract

    for entry, args in contract.ENTRY_POINTS.items():
        names = [a.name for a in args]
        assert len(names) == len(set(names)), entry
        assert names == list(inspect.signature(getattr(generated, entry)).parameters), entry
        for a in args:
            assert set(a.assumptions) <= set(assumptions.ASSUMPTIONS), (entry, a.name)
            assert a.strides.split(";")[0] in (contract.ANY, contract.COPIED, contract.ROWS, contract.NONE)


def test_every_assumption_is_answered_by_some_argument():
    from generator.runtime import contract

    named = {n for args in contract.ENTRY_POINTS.values() for a in args for n in a.assumptions}
    assert named == set(assumptions.ASSUMPTIONS)


def test_readme_input_contract_is_the_declaration():
    from generator.runtime import contract

    section = contract.readme_section((ROOT / "README.md").read_text())
    assert section == contract.markdown(), "run: python -m generator.runtime.contract --write"


def test_limits_in_the_declaration_are_read_from_the_assumptions(monkeypatch):
    from generator.runtime import contract

    monkeypatch.setitem(assumptions.ASSUMPTIONS, "num_splits_max",
                        assumptions.Assumption("num_splits_max", "test", "reject", 7))
    assert "0..7" in contract.markdown()
    q, k, v, lens = decode_problem()
    with pytest.raises(ValueError, match=r"0\.\.7 .*num_splits_max"):
        on_device(flash_attention_with_kvcache, q, k, v, lens, num_splits=8)


def test_page_sizes_in_the_declaration_are_read_from_the_assumptions(monkeypatch):
    """The page sizes were typed by hand ("16 to 512") in the paged cache's error and varlen's block_table
    text: a lowered ``page_sizes`` limit must show in both."""
    from generator.runtime import contract

    monkeypatch.setitem(assumptions.ASSUMPTIONS, "page_sizes",
                        assumptions.Assumption("page_sizes", "test", "reject", (16, 32)))
    varlen_table = contract.markdown().split("**`flash_attention_varlen`**")[1].split("**`")[0]
    assert "page_size 16..32" in varlen_table and "512" not in varlen_table
    q, k, v, lens = decode_problem(capacity=64)
    with pytest.raises(ValueError, match=r"power of two from 16 to 32, got 64 \[page_sizes\]"):
        on_device(flash_attention_with_kvcache, q, k, v, lens, block_table=torch.tensor([[0], [1]], dtype=torch.int32))


def test_the_sequence_length_limit_in_the_declaration_is_read_from_the_assumptions(monkeypatch):
    """"N_q + N_k ≤ 2^29" was typed by hand in the rules of flash_attention's and varlen's q (and "(2^29)" in
    the error): a lowered ``seq_len_int32`` limit must show in the tables and the error."""
    from generator.runtime import contract

    monkeypatch.setitem(assumptions.ASSUMPTIONS, "seq_len_int32",
                        assumptions.Assumption("seq_len_int32", "test", "reject", 16))
    tables = contract.markdown().split("| assumption |")[0]
    assert "N_q + N_k ≤ 2^4" in tables and "total_q + total_k ≤ 2^4" in tables and "2^29" not in tables
    q, k, v = randn(1, 1, 9, D), randn(1, 1, 8, D, seed=1), randn(1, 1, 8, D, seed=2)
    with pytest.raises(ValueError, match=r"N_q \+ N_k = 17 exceeds 16: the kernels compute tile bounds in int32 \[seq_len_int32\]"):
        on_device(flash_attention, q, k, v, block=SMALL)


def test_the_dropout_limits_in_the_declaration_are_read_from_their_homes(monkeypatch):
    """"at most 2^28" (the returned mask) was typed by hand in the tables, and "exceeds 2^62" in the counter's
    error: a lowered limit must show in both."""
    from generator.runtime import checks, contract

    monkeypatch.setattr(checks, "DROPOUT_MASK_MAX", 2**10)
    monkeypatch.setitem(assumptions.ASSUMPTIONS, "dropout_counter",
                        assumptions.Assumption("dropout_counter", "test", "reject", 100))
    tables = contract.markdown().split("| assumption |")[0]
    assert "at most 2^10 elements" in tables and "a returned mask ≤ 2^10" in tables and "2^28" not in tables
    q, k, v = randn(1, 1, 8, D), randn(1, 1, 16, D, seed=1), randn(1, 1, 16, D, seed=2)
    with pytest.raises(ValueError, match=r"= 128 elements exceeds 100 \[dropout_counter\]"):
        on_device(flash_attention, q, k, v, dropout_p=0.5, block=SMALL)


def test_the_index_limit_in_the_error_is_read_from_the_assumptions(monkeypatch):
    """The int32 offsets' error said "(at most {bound}, 2^31 - 1)": "2^31 - 1" typed by hand beside the limit."""
    _lower_index_limit(monkeypatch, 100)
    q, k, v = randn(1, 1, 8, D), randn(1, 1, 8, D, seed=1), randn(1, 1, 8, D, seed=2)
    with pytest.raises(ValueError, match=r"q spans 127 elements .*\(at most 100\) \[index_int32\]") as raised:
        on_device(flash_attention, q, k, v, block=SMALL)
    assert "2^31" not in str(raised.value)


# ==================================================================================
# Deliverable 4: any layout of any tensor argument of any entry point, bitwise
# ==================================================================================
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KINDS = ("contiguous", "permuted", "sliced", "expanded")


@st.composite
def layout(draw, rank: int, expandable=()):
    """``(kind, parameters)`` of a view: permuted memory, a slice at an offset with a step along
    one dim (strided), or a broadcast (stride 0) along a dim in ``expandable``."""
    kind = draw(st.sampled_from(KINDS if expandable else KINDS[:3]))
    if kind == "permuted":
        return kind, tuple(draw(st.permutations(range(rank))))
    if kind == "sliced":
        return kind, (tuple(draw(st.integers(0, 2)) for _ in range(rank)), draw(st.integers(0, rank - 1)),
                      draw(st.sampled_from([2, 3])))
    if kind == "expanded":
        return kind, draw(st.sampled_from(expandable))
    return kind, None


def as_layout(t: torch.Tensor, how, fill) -> torch.Tensor:
    """``t``'s values (``expanded``: its first slice along the dim, broadcast) laid out as ``how``;
    differentiable, so gradients reach ``t``."""
    kind, p = how
    if kind == "permuted":
        inverse = [p.index(d) for d in range(t.dim())]
        return t.permute(p).contiguous().permute(inverse)
    if kind == "sliced":
        lo, dim, step = p
        steps = [step if d == dim else 1 for d in range(t.dim())]
        big = torch.full([lo_d + n * s + 1 for lo_d, n, s in zip(lo, t.shape, steps)], fill, dtype=t.dtype)
        index = tuple(slice(lo_d, lo_d + n * s, s) for lo_d, n, s in zip(lo, t.shape, steps))
        big[index] = t
        return big[index]
    if kind == "expanded":
        return t.narrow(p, 0, 1).expand(t.shape)
    return t


def fill_of(t):
    return True if t.dtype == torch.bool else (-7 if not t.is_floating_point() else float("nan"))


def _dense_case(g):
    B, Hq, Hkv, Nq, Nk = 2, 2, 1, 9, 12
    doc_q, doc_k = torch.tensor([[0] * 4 + [1] * 5, [0] * 9]), torch.tensor([[0] * 5 + [1] * 7, [0] * 3 + [2] * 9])
    tensors = {"q": torch.randn(B, Hq, Nq, D, generator=g), "k": torch.randn(B, Hkv, Nk, D, generator=g),
               "v": torch.randn(B, Hkv, Nk, D, generator=g), "key_lengths": torch.tensor([12, 7]),
               "mask": torch.rand(B, 1, Nq, Nk, generator=g) > 0.2, "alibi_slopes": torch.rand(B, Hq, generator=g),
               "sinks": torch.randn(Hq, generator=g), "doc_q": doc_q, "doc_k": doc_k}
    expandable = {"q": (0, 1, 2), "k": (0, 2), "v": (0, 2), "key_lengths": (0,), "mask": (0, 2, 3),
                  "alibi_slopes": (0, 1), "sinks": (0,), "doc_q": (0,), "doc_k": (0,)}

    def call(t):
        return flash_attention(t["q"], t["k"], t["v"], key_lengths=t["key_lengths"], mask=t["mask"],
                               alibi_slopes=t["alibi_slopes"], sinks=t["sinks"], mask_mod=document,
                               mask_args={"doc_q": t["doc_q"], "doc_k": t["doc_k"]}, return_lse=True, block=SMALL)
    return tensors, expandable, ("q", "k", "v", "sinks"), call


def _varlen_case(g):
    tensors = {"q": torch.randn(9, 2, D, generator=g), "k": torch.randn(12, 1, D, generator=g),
               "v": torch.randn(12, 1, D, generator=g), "cu_seqlens_q": torch.tensor([0, 4, 9], dtype=torch.int32),
               "cu_seqlens_k": torch.tensor([0, 5, 12], dtype=torch.int32),
               "alibi_slopes": torch.rand(2, 2, generator=g), "sinks": torch.randn(2, generator=g)}
    expandable = {"q": (0, 1, 2), "k": (0, 2), "v": (0, 2), "alibi_slopes": (0, 1), "sinks": (0,)}

    def call(t):
        return flash_attention_varlen(t["q"], t["k"], t["v"], t["cu_seqlens_q"], t["cu_seqlens_k"], causal=True,
                                      alibi_slopes=t["alibi_slopes"], sinks=t["sinks"], return_lse=True, block=SMALL)
    return tensors, expandable, ("q", "k", "v", "sinks"), call


def _kvcache_case(g):
    q, k, v, lens = decode_problem(seed=int(torch.randint(0, 99, (), generator=g)))
    kp, vp, table = paged(k, v)
    tensors = {"q": q, "k_cache": kp, "v_cache": vp, "cache_seqlens": lens, "block_table": table,
               "alibi_slopes": torch.rand(2, generator=g), "sinks": torch.randn(2, generator=g)}
    expandable = {"q": (0, 1, 2), "k_cache": (1, 3), "v_cache": (1, 3), "cache_seqlens": (0,), "block_table": (0,),
                  "alibi_slopes": (0,), "sinks": (0,)}

    def call(t):
        with torch.no_grad():
            return flash_attention_with_kvcache(t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"],
                                                block_table=t["block_table"], alibi_slopes=t["alibi_slopes"],
                                                sinks=t["sinks"], causal=True, num_splits=2, return_lse=True)
    return tensors, expandable, (), call


def _merge_state_case(g):
    tensors = {"o_a": torch.randn(3, 4, D, generator=g), "lse_a": torch.randn(3, 4, generator=g),
               "o_b": torch.randn(3, 4, D, generator=g), "lse_b": torch.randn(3, 4, generator=g)}
    expandable = {name: (0, 1) for name in tensors}

    def call(t):
        return merge_state(t["o_a"], t["lse_a"], t["o_b"], t["lse_b"])
    return tensors, expandable, tuple(tensors), call


def _merge_states_case(g):
    tensors = {"o": torch.randn(3, 2, 4, D, generator=g), "lse": torch.randn(3, 2, 4, generator=g)}
    expandable = {"o": (0, 1, 2), "lse": (0, 1, 2)}

    def call(t):
        with torch.no_grad():  # the kernel (with gradients required it is a fold of merge_state)
            return merge_states(t["o"], t["lse"])
    return tensors, expandable, (), call


def _ring_case(g):
    from generated import ring_attention

    tensors = {"q": torch.randn(1, 2, 8, D, generator=g), "k": torch.randn(1, 1, 8, D, generator=g),
               "v": torch.randn(1, 1, 8, D, generator=g)}
    expandable = {"q": (2, 3), "k": (2,), "v": (2,)}

    def call(t):
        return ring_attention(t["q"], t["k"], t["v"], causal=True, layout="contiguous", return_lse=True, block=SMALL)
    return tensors, expandable, ("q", "k", "v"), call


def _softmax_case(g):
    from generated import softmax

    tensors = {"x": torch.randn(3, 5, 7, generator=g)}

    def call(t):
        return (softmax(t["x"], dim=1, block=SMALL),)
    return tensors, {"x": (0, 1, 2)}, ("x",), call


def _kvcache_append_case(g):
    """The KV-cache extras on a contiguous cache of 3 rows: append k/v (rotated), left padding, batch index.
    Every call writes the same rows with the same values, so repeated calls see the same cache."""
    q, k_cache, v_cache, lens = decode_problem(seed=int(torch.randint(0, 99, (), generator=g)))
    k_cache, v_cache = (torch.cat([c, torch.randn(1, *c.shape[1:], generator=g)]) for c in (k_cache, v_cache))
    angle = torch.rand(k_cache.shape[1], 4, generator=g) * 6.28
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": lens - 3,
               "k": torch.randn(2, 3, 1, D, generator=g), "v": torch.randn(2, 3, 1, D, generator=g),
               "rotary_cos": angle.cos(), "rotary_sin": angle.sin(),
               "cache_leftpad": torch.tensor([2, 0], dtype=torch.int32),
               "cache_batch_idx": torch.tensor([2, 0], dtype=torch.int32)}
    expandable = {"q": (0, 1, 2), "k": (0, 2), "v": (0, 2), "rotary_cos": (0, 1), "rotary_sin": (0, 1),
                  "cache_seqlens": (0,), "cache_leftpad": (0,)}

    def call(t):
        with torch.no_grad():
            return flash_attention_with_kvcache(
                t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"], k=t["k"], v=t["v"],
                rotary_cos=t["rotary_cos"], rotary_sin=t["rotary_sin"], rotary_interleaved=False,
                cache_leftpad=t["cache_leftpad"], cache_batch_idx=t["cache_batch_idx"], causal=True, num_splits=2,
                return_lse=True)
    return tensors, expandable, (), call


def _varlen_paged_case(g):
    """flash_attention_varlen over paged caches (block_table): k, v are the pages."""
    q, k, v, lens = decode_problem(seed=int(torch.randint(0, 99, (), generator=g)))
    kp, vp, table = paged(k, v)
    tensors = {"q": torch.randn(5, 2, D, generator=g), "k": kp, "v": vp,
               "cu_seqlens_q": torch.tensor([0, 3, 5], dtype=torch.int32),
               "cu_seqlens_k": torch.tensor([0, int(lens[0]), int(lens[0] + lens[1])], dtype=torch.int32),
               "block_table": table}
    expandable = {"q": (0, 1, 2), "k": (1, 3), "v": (1, 3), "block_table": (0,)}

    def call(t):
        with torch.no_grad():
            return flash_attention_varlen(t["q"], t["k"], t["v"], t["cu_seqlens_q"], t["cu_seqlens_k"], causal=True,
                                          block_table=t["block_table"], return_lse=True)
    return tensors, expandable, (), call


def _fp8_tensors(g, q_shape, kv_shape, B):
    """FP8 q, k, v (e4m3) and their float32 (B, Hkv) descales (issue 30)."""
    fp8 = torch.float8_e4m3fn
    tensors = {"q": torch.randn(*q_shape, generator=g).to(fp8), "k": torch.randn(*kv_shape, generator=g).to(fp8),
               "v": torch.randn(*kv_shape, generator=g).to(fp8)}
    tensors.update({name: torch.rand(B, 1, generator=g) + 0.5 for name in ("q_descale", "k_descale", "v_descale")})
    return tensors


def _fp8_case(g):
    tensors = _fp8_tensors(g, (2, 2, 9, D), (2, 1, 12, D), 2)
    expandable = {"q": (0, 1, 2), "k": (0, 2), "v": (0, 2), "q_descale": (0, 1), "k_descale": (0, 1),
                  "v_descale": (0, 1)}

    def call(t):
        return flash_attention(t["q"], t["k"], t["v"], q_descale=t["q_descale"], k_descale=t["k_descale"],
                               v_descale=t["v_descale"], causal=True, return_lse=True, block=SMALL)
    return tensors, expandable, (), call


def _varlen_fp8_case(g):
    tensors = _fp8_tensors(g, (9, 2, D), (12, 1, D), 2)
    tensors.update({"cu_seqlens_q": torch.tensor([0, 4, 9], dtype=torch.int32),
                    "cu_seqlens_k": torch.tensor([0, 5, 12], dtype=torch.int32)})
    expandable = {"q": (0, 1, 2), "k": (0, 2), "v": (0, 2), "q_descale": (0, 1), "k_descale": (0, 1),
                  "v_descale": (0, 1)}

    def call(t):
        return flash_attention_varlen(t["q"], t["k"], t["v"], t["cu_seqlens_q"], t["cu_seqlens_k"], causal=True,
                                      q_descale=t["q_descale"], k_descale=t["k_descale"], v_descale=t["v_descale"],
                                      return_lse=True, block=SMALL)
    return tensors, expandable, (), call


def _kvcache_fp8_case(g):
    """An FP8 paged cache (issue 30): q, the pages in e4m3 with (B, Hkv) descales, split in two."""
    q, k, v, lens = decode_problem(seed=int(torch.randint(0, 99, (), generator=g)))
    kp, vp, table = paged(k, v)
    fp8 = torch.float8_e4m3fn
    tensors = {"q": q.to(fp8), "k_cache": kp.to(fp8), "v_cache": vp.to(fp8), "cache_seqlens": lens,
               "block_table": table,
               **{name: torch.rand(q.shape[0], kp.shape[2], generator=g) + 0.5
                  for name in ("q_descale", "k_descale", "v_descale")}}
    expandable = {"q": (0, 1, 2), "k_cache": (1, 3), "v_cache": (1, 3), "cache_seqlens": (0,), "block_table": (0,),
                  "q_descale": (0, 1), "k_descale": (0, 1), "v_descale": (0, 1)}

    def call(t):
        return flash_attention_with_kvcache(t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"],
                                            block_table=t["block_table"], q_descale=t["q_descale"],
                                            k_descale=t["k_descale"], v_descale=t["v_descale"], causal=True,
                                            num_splits=2, return_lse=True)
    return tensors, expandable, (), call


#: a key "entry[variant]" is one more case of the entry point "entry" (the coverage test unions them)
CASES = {"flash_attention": _dense_case, "flash_attention_varlen": _varlen_case,
         "flash_attention_varlen[paged]": _varlen_paged_case,
         "flash_attention[fp8]": _fp8_case, "flash_attention_varlen[fp8]": _varlen_fp8_case,
         "flash_attention_with_kvcache": _kvcache_case, "flash_attention_with_kvcache[append]": _kvcache_append_case,
         "flash_attention_with_kvcache[fp8]": _kvcache_fp8_case,
         "merge_state": _merge_state_case,
         "merge_states": _merge_states_case, "ring_attention": _ring_case, "softmax": _softmax_case}


def test_the_layout_property_covers_every_tensor_argument():
    from generator.runtime import contract

    g = torch.Generator().manual_seed(0)
    for entry in {key.split("[")[0] for key in CASES}:
        tensors = set().union(*(case(g)[0] for key, case in CASES.items() if key.split("[")[0] == entry))
        declared = {a.name for a in contract.ENTRY_POINTS[entry] if a.strides != contract.NONE}
        if entry == "flash_attention":  # mask_args' tensors
            declared = declared - {"mask_args"} | {"doc_q", "doc_k"}
        assert set(tensors) == declared, entry


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    import torch.distributed as dist

    store = tmp_path_factory.mktemp("ring") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _run(call, base, layouts, differentiable, contiguous: bool):
    leaves = {n: to_device(t.clone().requires_grad_(n in differentiable)) for n, t in base.items()}
    views = {n: as_layout(t, layouts[n], fill_of(t)) for n, t in leaves.items()}
    if contiguous:
        views = {n: t.contiguous() for n, t in views.items()}
    outs = call(views)
    if differentiable:
        g = torch.Generator().manual_seed(1)
        sum(((o.float() * torch.randn(o.shape, generator=g).to(o.device)).nan_to_num(posinf=0, neginf=0).sum()
             for o in outs)).backward()
    return to_cpu([o.detach() for o in outs]), to_cpu([leaves[n].grad for n in differentiable])


@pytest.mark.parametrize("entry", list(CASES))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_layout_of_any_tensor_argument_is_bitwise_its_contiguous_copy(entry, data, one_rank_group):
    base, expandable, differentiable, call = CASES[entry](torch.Generator().manual_seed(data.draw(st.integers(0, 9))))
    layouts = {n: data.draw(layout(t.dim(), expandable.get(n, ())), label=n) for n, t in base.items()}
    got, got_grads = _run(call, base, layouts, differentiable, contiguous=False)
    want, want_grads = _run(call, base, layouts, differentiable, contiguous=True)
    for name, a, b in zip(range(len(got)), got, want):
        assert torch.equal(a, b), (entry, "output", name, layouts)
    for name, a, b in zip(differentiable, got_grads, want_grads):
        assert torch.equal(a, b), (entry, "grad", name, layouts)
