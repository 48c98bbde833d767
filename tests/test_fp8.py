"""The FP8 forward (issue 30): FlashAttention 3's e4m3 / e5m2 inputs with float32 descales per
(batch, KV head), against the float64 reference on the dequantised tensors, with the proven bound as
the tolerance.

* The claims (``spec.proofs.fp8``: ``fp8_descale``, ``fp8_error_bound``) fail on their mutants in
  tests/test_mutants.py.
* Triton's interpreter executes an fp8 ``tl.dot`` (checked here), so these tests run the FP8 kernel
  itself — both products on the fp8 tiles, P·p_scale cast to fp8 — not an upcast stand-in. Its fp32 ->
  fp8 conversion has a carry bug (126.75 -> 64); the FP8 launch rounds those casts to nearest through
  torch under the interpreter (checked here too), as a GPU's ``cvt.rn`` does.
* Inputs at several scales, with outliers, quantised per (batch, KV head) as FlashAttention 3's
  callers do (descale = amax / the format's max); each case's error is reported next to its bound
  (``pytest -s``).
"""

from __future__ import annotations

import math

import pytest
import torch
import triton.language as tl

from generated import flash_attention
from benchmarks.fp8_errors import FORMATS, inputs, measure
from generator.checking import attention_errors, case_tolerances
from generator.runtime import launch
from spec.error_bound import FP8

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

BLOCK = (16, 32)
#: input regimes (benchmarks.fp8_errors): standard normal, small, large, and a few large outliers per tensor
SCALES = ("unit", "small", "large", "outliers")
#: the interpreter's sizes: GQA 2:1, ragged N_q / N_k, head dim 32
SIZES = dict(B=1, Hq=2, Hkv=1, Nq=24, Nk=40, D=32)


def fp8_case(fmt, regime, *, causal=False, q_dtype=None):
    """One case of ``benchmarks.fp8_errors.measure`` at the tests' sizes: ``(out, out error / max|v|, lse
    error, out bound, lse bound)`` against the reference on the dequantised inputs."""
    m = measure(fmt, regime, causal=causal, q_dtype=q_dtype, block=BLOCK, **SIZES)
    return m["out"], m["out_err"], m["lse_err"], m["out_bound"], m["lse_bound"]


def test_the_interpreter_executes_an_fp8_dot():
    """The kernels' fp8 products run as such under TRITON_INTERPRET=1: the dot dtype is the fp8 one
    (no upcast path), and an e4m3 product of exactly representable values is exact in fp32."""
    assert launch.dot_constants(torch.float8_e4m3fn)["DOT_DTYPE"] == tl.float8e4nv
    assert launch.dot_constants(torch.float8_e5m2)["DOT_DTYPE"] == tl.float8e5
    q = torch.full((1, 1, 16, 16), 0.5).to(torch.float8_e4m3fn)
    k = torch.full((1, 1, 16, 16), 0.25).to(torch.float8_e4m3fn)
    out, lse = flash_attention(q, k, k, return_lse=True, block=BLOCK, scale=1.0)
    # every score is 16·0.5·0.25 = 2, so every weight is 1/16 and lse = 2 + log 16
    assert torch.allclose(lse, torch.full_like(lse, 2 + math.log(16)), atol=1e-5)
    assert torch.equal(out.float(), torch.full((1, 1, 16, 16), 0.25))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("regime", SCALES)
def test_fp8_forward_within_the_proven_bound(fmt, regime):
    causal = regime in ("unit", "outliers")
    out, out_err, lse_err, tol, lse_tol = fp8_case(fmt, regime, causal=causal)
    print(f"\n{fmt} {regime}{' causal' if causal else ''}: out error {out_err:.3g} x max|v| (bound {tol:.3g}), "
          f"lse error {lse_err:.3g} (bound {lse_tol:.3g})")
    assert out.dtype == torch.bfloat16
    assert out_err <= tol and lse_err <= lse_tol
    assert out_err > 0  # P is rounded to fp8: a kernel that silently ran in fp32 would be exact to ~1e-3


@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float16])
def test_mixed_query_on_an_fp8_kv_cache(q_dtype):
    out, out_err, lse_err, tol, lse_tol = fp8_case("e4m3", "unit", q_dtype=q_dtype)
    print(f"\nmixed {q_dtype} q, e4m3 K/V: out error {out_err:.3g} x max|v| (bound {tol:.3g})")
    assert out.dtype == q_dtype and out_err <= tol and lse_err <= lse_tol


def test_descales_fold_exactly():
    """Descales that are powers of two change nothing but the scale: q_descale = 2, k_descale = 1/2,
    v_descale = 4 gives exactly 4× the result with all descales 1 (every fold exact in fp32)."""
    q, k, v = inputs("unit", **SIZES)
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    ones = torch.ones(1, 1)
    base, base_lse = flash_attention(q8, k8, v8, q_descale=ones, k_descale=ones, v_descale=ones, return_lse=True,
                                     block=BLOCK, out_dtype=torch.float32)
    out, lse = flash_attention(q8, k8, v8, q_descale=2 * ones, k_descale=ones / 2, v_descale=4 * ones,
                               return_lse=True, block=BLOCK, out_dtype=torch.float32)
    assert torch.equal(out, 4 * base) and torch.equal(lse, base_lse)
    # and a k_descale of 2 doubles the scores: the same as scale·2
    doubled = flash_attention(q8, k8, v8, k_descale=2 * ones, block=BLOCK, out_dtype=torch.float32,
                              scale=32 ** -0.5)
    scaled = flash_attention(q8, k8, v8, block=BLOCK, out_dtype=torch.float32, scale=2 * 32 ** -0.5,
                             k_descale=ones)
    assert torch.equal(doubled, scaled)


def test_the_kernel_reads_descales_at_their_own_strides():
    """The kernel takes a stride pair per descale (spec.launch.descale_strides, claim forward_addresses): three
    (B, Hkv) descales in three layouts (contiguous, a transposed view, every other column of a wider tensor),
    passed to the generated forward directly (the API copies them to unit stride first), give exactly the
    result of the same values contiguous. The old kernel read k and v's descales with q's strides."""
    from generator.runtime import api

    q, k, v = inputs("unit", B=2, Hq=2, Hkv=2, Nq=8, Nk=16, D=32)
    q8, k8, v8 = (t.to(torch.float8_e4m3fn).transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    values = torch.tensor([[0.5, 2.0], [4.0, 0.25]])
    strided = (values, (values.t().contiguous()).t(), torch.stack((values, 3 * values), -1).flatten(1)[:, ::2])
    assert [d.stride() for d in strided] == [(2, 1), (1, 2), (4, 2)] and all(torch.equal(d, values) for d in strided)
    module = api.module_for("fwd", BLOCK)
    kw = dict(sm_scale=32 ** -0.5, out_dtype=torch.float32)
    out, lse = module.forward(q8, k8, v8, descales=strided, **kw)
    want, want_lse = module.forward(q8, k8, v8, descales=tuple(d.contiguous() for d in strided), **kw)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_out_dtype(out_dtype):
    q, k, v = inputs("unit", **SIZES)
    q8, k8, v8 = (t.to(torch.float8_e5m2) for t in (q, k, v))
    out = flash_attention(q8, k8, v8, k_descale=torch.ones(1, 1), block=BLOCK, out_dtype=out_dtype)
    assert out.dtype == out_dtype and out.shape == q.shape


def test_no_key_gives_zeros():
    q8 = torch.randn(1, 2, 4, 32).to(torch.float8_e4m3fn)
    k8 = torch.randn(1, 1, 0, 32).to(torch.float8_e4m3fn)
    out, lse = flash_attention(q8, k8, k8, return_lse=True, block=BLOCK)
    assert out.dtype == torch.bfloat16 and not out.any() and torch.isneginf(lse).all()
    # key_lengths 0 on one batch entry: zeros, lse -inf, no NaN
    k8 = torch.randn(2, 1, 8, 32).to(torch.float8_e4m3fn)
    out, lse = flash_attention(torch.randn(2, 2, 4, 32).to(torch.float8_e4m3fn), k8, k8, return_lse=True,
                               key_lengths=torch.tensor([0, 8]), block=BLOCK)
    assert not out[0].any() and torch.isneginf(lse[0]).all() and torch.isfinite(lse[1]).all()


def _fp8(*shape):
    return torch.randn(*shape).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("call, match", [
    (lambda: flash_attention(_fp8(1, 2, 4, 32).requires_grad_(), _fp8(1, 1, 4, 32), _fp8(1, 1, 4, 32)),
     "FP8 forward is inference only and has no backward"),
    (lambda: flash_attention(torch.randn(1, 2, 4, 32, requires_grad=True).bfloat16(), _fp8(1, 1, 4, 32),
                             _fp8(1, 1, 4, 32)), "FP8 forward is inference only and has no backward"),
    (lambda: flash_attention(_fp8(1, 2, 4, 32), _fp8(1, 1, 4, 32), _fp8(1, 1, 4, 32), k_descale=-torch.ones(1, 1)),
     r"finite and > 0.*fp8_descales"),
    (lambda: flash_attention(_fp8(1, 2, 4, 32), _fp8(1, 1, 4, 32), _fp8(1, 1, 4, 32), v_descale=torch.ones(1, 2)),
     r"\(batch, kv_heads\) = \(1, 1\)"),
    (lambda: flash_attention(torch.randn(1, 2, 4, 32), _fp8(1, 1, 4, 32), _fp8(1, 1, 4, 32)),
     "float16/bfloat16"),
    (lambda: flash_attention(_fp8(1, 2, 4, 32), _fp8(1, 1, 4, 32), torch.randn(1, 1, 4, 32)), "one FP8 dtype"),
    (lambda: flash_attention(_fp8(1, 2, 4, 32), _fp8(1, 1, 4, 32), _fp8(1, 1, 4, 32), softcap=30.0),
     "softcap is not supported with FP8 inputs"),
    (lambda: flash_attention(_fp8(1, 2, 4, 32), _fp8(1, 1, 4, 32), _fp8(1, 1, 4, 32), scale=-1.0),
     "scale must be > 0 with FP8"),
    (lambda: flash_attention(torch.randn(1, 2, 4, 32), torch.randn(1, 1, 4, 32), torch.randn(1, 1, 4, 32),
                             out_dtype=torch.float16), "out_dtype is the FP8 forward's"),
    (lambda: flash_attention(torch.randn(1, 2, 4, 32), torch.randn(1, 1, 4, 32), torch.randn(1, 1, 4, 32),
                             k_descale=torch.ones(1, 1)), "k_descale is given but k has dtype torch.float32"),
])
def test_fp8_input_errors_name_the_fix(call, match):
    from generator.runtime import contract

    # the descales' values: the opt-in value checks (contract.checking_values, FLASHPROOF_CHECK_VALUES=1)
    with pytest.raises((TypeError, ValueError, RuntimeError, NotImplementedError), match=match), \
            contract.checking_values():
        call()


@pytest.mark.parametrize("entry", ["flash_attention", "flash_attention_varlen"])
def test_fp8_key_blocks_below_the_mma_k_are_refused(entry):
    """Every fp8 tl.dot passes max_num_imprecise_acc = FP8_MAX_IMPRECISE_ACC (32), which Triton refuses for a
    dot of fewer products: a block with B_c < 32 is refused by the contract, naming the blocks that work
    (before: the dispatcher asked to emit the block, whose kernel Triton then refuses to compile)."""
    import generated
    from spec.error_bound import FP8_MAX_IMPRECISE_ACC

    q, k = (_fp8(1, 2, 4, 32), _fp8(1, 1, 4, 32)) if entry == "flash_attention" else (_fp8(4, 2, 32), _fp8(4, 1, 32))
    varlen = {} if entry == "flash_attention" else dict(cu_seqlens_q=torch.tensor([0, 4], dtype=torch.int32),
                                                         cu_seqlens_k=torch.tensor([0, 4], dtype=torch.int32))
    small = FP8_MAX_IMPRECISE_ACC // 2
    with pytest.raises(ValueError, match=rf"block=\(32, {small}\): with FP8 inputs B_c .* ≥ "
                                         rf"{FP8_MAX_IMPRECISE_ACC}.*B_c in 32, 64, 128, 256"):
        getattr(generated, entry)(q, k, k, block=(32, small), **varlen)


def test_fp8_lines_are_printed_into_the_forward():
    """The four FP8 terms reach the generated forward kernel, each citing claim fp8_descale."""
    from pathlib import Path

    from generator import render

    src = (Path(__file__).parents[1] / "generated" / "attention_fwd_br16_bc32.py").read_text()
    for line in render.fp8_context()["fp8"].values():
        assert line in src and "(claim: fp8_descale)" in line


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_fp8_varlen_within_the_proven_bound(fmt):
    """A packed batch of three segments (one with no key), each with its own descales (B = segments)."""
    from generated import flash_attention_varlen
    from spec.reference import varlen_attention

    dtype = FORMATS[fmt]
    g = torch.Generator().manual_seed(3)
    cu_q, cu_k = torch.tensor([0, 9, 20, 24], dtype=torch.int32), torch.tensor([0, 17, 17, 40], dtype=torch.int32)
    q, k, v = (torch.randn(n, h, 32, generator=g) for n, h in ((24, 2), (40, 1), (40, 1)))
    v[30] *= 20  # an outlier key
    # per segment and KV head: descale = amax / max, as FlashAttention 3's (B, Hkv)
    fmax = FP8[fmt].max

    def quant(x, cu):
        pad = torch.zeros(1, *x.shape[1:])  # a segment with no row: descale 1e-12 / max (never read)
        d = torch.stack([torch.cat([x[a:b].abs(), pad]).amax(dim=(0, 2)).clamp_min(1e-12)
                         for a, b in zip(cu[:-1], cu[1:])]) / fmax
        rows = torch.repeat_interleave(torch.arange(len(cu) - 1), (cu[1:] - cu[:-1]).long())
        per_row = d.repeat_interleave(x.shape[1] // d.shape[1], dim=1)[rows][:, :, None]
        x8 = (x / per_row).to(dtype)
        return x8, d.float(), x8.double() * per_row.double()

    # q's descale is per (segment, KV head): one for both query heads of the group
    q8, qd, qq = quant(q.reshape(24, 1, 64), cu_q)
    q8, qq = q8.reshape(24, 2, 32), qq.reshape(24, 2, 32)
    k8, kd, kk = quant(k, cu_k)
    v8, vd, vv = quant(v, cu_k)
    out, lse = flash_attention_varlen(q8, k8, v8, cu_q, cu_k, q_descale=qd, k_descale=kd, v_descale=vd, causal=True,
                                      return_lse=True, block=BLOCK)
    ref_out, ref_lse = varlen_attention(qq, kk, vv, cu_q, cu_k, causal=True)
    tol, lse_tol = case_tolerances(qq.transpose(0, 1)[None], kk.transpose(0, 1)[None], vv, block_n=BLOCK[1],
                                   ref_lse=ref_lse, dtype=fmt, descaled=True)
    out_err, lse_err = attention_errors(out, lse, ref_out, ref_lse, vv)
    print(f"\nvarlen {fmt}: out error {out_err:.3g} x max|v| (bound {tol:.3g}), lse error {lse_err:.3g}")
    assert out.dtype == torch.bfloat16 and out_err <= tol and lse_err <= lse_tol


def test_the_interpreter_fp8_cast_is_rounded_to_nearest():
    """Triton's interpreter converts fp32 to fp8 without carrying a rounded-up mantissa into the
    exponent (126.75 -> 64 instead of 128); the FP8 launch routes those casts through torch's
    round-to-nearest (``launch.round_fp8_to_nearest_in_interpreter``), the GPU's ``cvt.rn``. When a
    Triton release fixes the bug, the first assertion fails: then drop the patch."""
    import numpy as np
    from triton.runtime import interpreter

    launch.round_fp8_to_nearest_in_interpreter()
    x = np.array([126.75, 0.3, 255.9, 1e-4], dtype=np.float32)
    for tl_dtype, dtype in ((tl.float8e4nv, torch.float8_e4m3fn), (tl.float8e5, torch.float8_e5m2)):
        rtne = interpreter._ir.ROUNDING_MODE.RTNE  # the mode of the kernels' casts (``.to`` defaults to it)
        buggy = interpreter._convert_float.original(x, tl.float32, tl_dtype, rtne)
        assert torch.from_numpy(buggy).view(dtype).float()[0] == 64  # the interpreter's carry bug, still there
        fixed = torch.from_numpy(interpreter._convert_float(x, tl.float32, tl_dtype, rtne)).view(dtype)
        assert torch.equal(fixed.float(), torch.from_numpy(x).to(dtype).float())


def test_torch_compile_runs_the_fp8_forward():
    """Under torch.compile the FP8 launch runs eagerly (a graph break), bitwise the eager result."""
    q, k, v = inputs("unit", **SIZES)
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    kd = torch.full((1, 1), 0.5)
    compiled = torch.compile(lambda q, k, v, kd: flash_attention(q, k, v, k_descale=kd, causal=True, block=BLOCK))
    assert torch.equal(compiled(q8, k8, v8, kd), flash_attention(q8, k8, v8, k_descale=kd, causal=True, block=BLOCK))


# ----------------------------------------------------------------------------------
# An FP8 KV cache on the decode path (flash_attention_with_kvcache)
# ----------------------------------------------------------------------------------
def _quantise_cache(x, dtype, Hkv=None):
    """``(x8, descale (B, Hkv), dequantised float64 (B, H, N, D))`` of a ``(B, N, H, D)`` cache or query
    (``quantise``'s, per (batch, KV head); ``Hkv`` default H)."""
    from benchmarks.fp8_errors import quantise

    x8, descale, deq = quantise(x.transpose(1, 2), dtype, Hkv or x.shape[2])
    return x8.transpose(1, 2).contiguous(), descale, deq


def _paged(cache, page=16):
    """A contiguous ``(B, N, H, D)`` cache as pages ``(B·N/page, page, H, D)`` in a shuffled order, and the
    block table that gathers them back (``N`` a multiple of ``page``)."""
    B, N = cache.shape[:2]
    pages = cache.reshape(B * N // page, page, *cache.shape[2:])
    order = torch.randperm(pages.shape[0], generator=torch.Generator().manual_seed(7))
    table = torch.empty_like(order)
    table[order] = torch.arange(order.numel())
    return pages[order].contiguous(), table.reshape(B, N // page).to(torch.int32)


@pytest.mark.parametrize("q_fmt, fmt, layout, splits", [
    ("fp8", "e4m3", "contiguous", 1), ("fp8", "e4m3", "paged", 3), ("fp8", "e5m2", "contiguous", 3),
    (torch.bfloat16, "e4m3", "paged", 1), (torch.float16, "e5m2", "contiguous", 3)])
def test_fp8_kv_cache_decode_within_the_proven_bound(q_fmt, fmt, layout, splits):
    """An FP8 cache (contiguous or paged through block_table, split or not; q in the cache's format with
    q_descale, or fp16/bf16 on the cache upcast exactly) against the float64 reference on the dequantised
    tensors, per batch entry at its own length, within ``forward_bound`` (claim fp8_error_bound)."""
    from generated import flash_attention_with_kvcache
    from spec.reference import attention as reference

    dtype = FORMATS[fmt]
    g = torch.Generator().manual_seed(3)
    B, Nq, Hq, Hkv, D, N = 2, 3, 4, 2, 32, 48
    q = torch.randn(B, Nq, Hq, D, generator=g)
    k8, kd, kk = _quantise_cache(torch.randn(B, N, Hkv, D, generator=g), dtype)
    v8, vd, vv = _quantise_cache(torch.randn(B, N, Hkv, D, generator=g), dtype)
    if q_fmt == "fp8":
        q8, qd, qq = _quantise_cache(q, dtype, Hkv)  # q's descale per (batch, KV head) of its group
        q_name = fmt
    else:
        q8, qd = q.to(q_fmt), None
        qq = q8.double().transpose(1, 2)
        q_name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[q_fmt]
    lens = torch.tensor([N, 21], dtype=torch.int32)
    table = None
    if layout == "paged":
        (k8, table), (v8, _) = _paged(k8), _paged(v8)
    out, lse = flash_attention_with_kvcache(q8, k8, v8, lens, block_table=table, q_descale=qd, k_descale=kd,
                                            v_descale=vd, causal=True, num_splits=splits, return_lse=True)
    assert out.dtype == (torch.bfloat16 if q_fmt == "fp8" else q_fmt) and lse.dtype == torch.float32
    for b in range(B):
        n = int(lens[b])
        ro, rl = reference(qq[b:b + 1], kk[b:b + 1, :, :n], vv[b:b + 1, :, :n], causal=True, alignment="bottom_right")
        tol, lse_tol = case_tolerances(qq[b:b + 1], kk[b:b + 1, :, :n], vv[b:b + 1, :, :n], ref_lse=rl, dtype=q_name,
                                       descaled=True)
        out_err, lse_err = attention_errors(out[b:b + 1].transpose(1, 2), lse[b:b + 1], ro, rl, vv[b:b + 1, :, :n])
        print(f"FP8 cache {q_fmt}/{fmt} {layout} splits={splits} b={b}: out {out_err:.2e} <= {tol:.2e}, "
              f"lse {lse_err:.1e} <= {lse_tol:.1e}")
        assert out_err <= tol and lse_err <= lse_tol, (b, out_err, tol, lse_err, lse_tol)


def test_fp8_kv_cache_decode_with_a_batch_index_reads_the_descales_of_b():
    """cache_batch_idx on an FP8 cache: batch ``b`` attends cache row ``cache_batch_idx[b]`` with the descales of
    ``b`` (``(B, Hkv)``, FlashAttention 3's). Regression (audit of round three): the kernel's ``_fp8_descales``
    called with the cache row ``off_bc`` instead of ``off_b`` proves every claim (the helper's offsets are
    ``decode_addresses``', its call's arguments no claim reads) and read descales past ``(B, Hkv)``: NaN."""
    from generated import flash_attention_with_kvcache
    from spec.reference import attention as reference

    dtype, g = FORMATS["e4m3"], torch.Generator().manual_seed(11)
    B, Nq, Hq, Hkv, D, N = 2, 2, 4, 2, 32, 32
    q8, qd, qq = _quantise_cache(torch.randn(B, Nq, Hq, D, generator=g), dtype, Hkv)
    # three cache rows, batch b on row idx[b]; each batch entry's own descales (quantised for its row)
    rows = [_quantise_cache(torch.randn(1, N, Hkv, D, generator=g) * s, dtype) for s in (1.0, 4.0, 0.25)]
    idx = torch.tensor([2, 0], dtype=torch.int32)
    kc = torch.cat([r[0] for r in rows])
    kd = torch.cat([rows[i][1] for i in idx.tolist()])
    kk = torch.cat([rows[i][2] for i in idx.tolist()])
    vc, vd, vv = kc, kd, kk  # v = k: the descales' batch is what matters
    lens = torch.tensor([N, 19], dtype=torch.int32)
    out, lse = flash_attention_with_kvcache(q8, kc, vc, lens, cache_batch_idx=idx, q_descale=qd, k_descale=kd,
                                            v_descale=vd, causal=True, return_lse=True)
    for b in range(B):
        n = int(lens[b])
        ro, rl = reference(qq[b:b + 1], kk[b:b + 1, :, :n], vv[b:b + 1, :, :n], causal=True, alignment="bottom_right")
        tol, lse_tol = case_tolerances(qq[b:b + 1], kk[b:b + 1, :, :n], vv[b:b + 1, :, :n], ref_lse=rl, dtype="e4m3",
                                       descaled=True)
        out_err, lse_err = attention_errors(out[b:b + 1].transpose(1, 2), lse[b:b + 1], ro, rl, vv[b:b + 1, :, :n])
        assert out_err <= tol and lse_err <= lse_tol, (b, out_err, tol, lse_err, lse_tol)


def test_fp8_kv_cache_append_copies_the_quantised_rows():
    """New k, v in the cache's FP8 format are copied in as they are (FlashAttention 3's rule): the call with
    the append gives what the same cache written by hand gives, and the cache holds the rows bit for bit."""
    from generated import flash_attention_with_kvcache

    f8, g = torch.float8_e4m3fn, torch.Generator().manual_seed(5)
    B, Hkv, D, N = 2, 1, 32, 40
    q = torch.randn(B, 2, 2, D, generator=g).to(torch.bfloat16)
    kc, vc = (torch.randn(B, N, Hkv, D, generator=g).to(f8) for _ in range(2))
    k, v = (torch.randn(B, 2, Hkv, D, generator=g).to(f8) for _ in range(2))
    kd, vd = torch.rand(B, Hkv, generator=g) + 0.5, torch.rand(B, Hkv, generator=g) + 0.5
    lens = torch.tensor([30, 11], dtype=torch.int32)
    by_hand_k, by_hand_v = kc.clone(), vc.clone()
    for b in range(B):
        n = int(lens[b])
        by_hand_k[b, n:n + 2], by_hand_v[b, n:n + 2] = k[b], v[b]
    got = flash_attention_with_kvcache(q, kc, vc, lens, k=k, v=v, k_descale=kd, v_descale=vd, causal=True,
                                       return_lse=True)
    assert torch.equal(kc.view(torch.uint8), by_hand_k.view(torch.uint8))
    assert torch.equal(vc.view(torch.uint8), by_hand_v.view(torch.uint8))
    want = flash_attention_with_kvcache(q, by_hand_k, by_hand_v, lens + 2, k_descale=kd, v_descale=vd, causal=True,
                                        return_lse=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("change, match", [
    (lambda c: {"k": c["k"].to(torch.bfloat16), "v": c["v"].to(torch.bfloat16)}, r"k has dtype .*quantise them"),
    (lambda c: {"rotary_cos": torch.ones(40, 8), "rotary_sin": torch.zeros(40, 8)},
     r"rotary_cos is not supported with FP8"),
    (lambda c: {"softcap": 5.0}, r"softcap is not supported with FP8"),
    (lambda c: {"k_cache": c["k_cache"].to(torch.bfloat16), "k": None, "v": None}, r"k_cache has dtype .*FP8"),
    (lambda c: {"k_descale": torch.ones(2, 3)}, r"k_descale must have shape \(batch, kv_heads\)"),
])
def test_fp8_kv_cache_errors_name_the_fix(change, match):
    from generated import flash_attention_with_kvcache

    f8 = torch.float8_e4m3fn
    call = dict(q=torch.randn(2, 1, 2, 32).to(torch.bfloat16), k_cache=torch.randn(2, 40, 1, 32).to(f8),
                v_cache=torch.randn(2, 40, 1, 32).to(f8), cache_seqlens=torch.tensor([8, 3], dtype=torch.int32),
                k=torch.randn(2, 2, 1, 32).to(f8), v=torch.randn(2, 2, 1, 32).to(f8),
                k_descale=torch.ones(2, 1), v_descale=torch.ones(2, 1))
    with pytest.raises((TypeError, ValueError), match=match):
        flash_attention_with_kvcache(**{**call, **change(call)})


def test_fp8_lines_are_printed_into_the_decode_kernel():
    """The four FP8 terms reach the generated decode kernel too (its tile is the forward's), each citing claim
    fp8_descale."""
    from pathlib import Path

    from generator import render

    src = (Path(__file__).parents[1] / "generated" / "attention_decode_br16_bc32.py").read_text()
    for line in render.fp8_context()["fp8"].values():
        assert line in src and "(claim: fp8_descale)" in line
