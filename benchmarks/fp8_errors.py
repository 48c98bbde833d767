"""The FP8 forward's measured error against the float64 reference, next to its proven bound.

For each format (e4m3, e5m2) and input regime (standard normal; small, x1e-2; large, q/k x8 and
v x100; outliers: a few entries x30 in each tensor), q, k, v are quantised per (batch, KV head) as
FlashAttention 3's callers do (descale = amax / the format's max) and run through
``flash_attention(..., q_descale=, k_descale=, v_descale=)``; the error of ``out`` relative to
``max|v|`` (dequantised) and of ``lse`` is measured against ``spec.reference.attention`` on the
dequantised tensors, beside ``spec.error_bound.forward_bound`` of that case (claim
``fp8_error_bound``). The mixed rows run a bf16 / fp16 query on the e4m3 K/V (upcast exactly).
Runs on CPU (``TRITON_INTERPRET=1``) or a GPU. On an sm_90 GPU the rows with fp8 products are held to
the bound of the fp8 MMA (``forward_bound(..., fp8_mma=True)``, claim ``fp8_mma_bound``: its hardware
hypothesis); the fp32-accumulation bound (claim ``fp8_error_bound``, the interpreter's) is shown beside it.

    TRITON_INTERPRET=1 python -m benchmarks.fp8_errors          # a markdown table on stdout
    python -m benchmarks.fp8_errors --device cuda               # the same on a GPU, and a verdict line
"""

from __future__ import annotations

import argparse
import math

import torch

from benchmarks.common import markdown_table
from generator.checking import attention_errors, case_tolerances
from generator.runtime import launch
from spec.error_bound import FP8
from spec.reference import attention as reference

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
REGIMES = ("unit", "small", "large", "outliers")


def inputs(regime, B=1, Hq=4, Hkv=2, Nq=128, Nk=128, D=64, seed=0):
    """float32 ``q, k, v`` of one regime (``REGIMES``)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, h, n, D, generator=g) for h, n in ((Hq, Nq), (Hkv, Nk), (Hkv, Nk)))
    if regime == "small":
        q, k, v = q * 1e-2, k * 1e-2, v * 1e-2
    elif regime == "large":
        q, k, v = q * 8, k * 8, v * 100
    elif regime == "outliers":
        for t in (q, k, v):
            flat = t.view(-1)
            flat[torch.randint(0, flat.numel(), (8,), generator=g)] *= 30
    return q, k, v


def quantise(x, dtype, Hkv):
    """``(x8, descale (B, Hkv), dequantised float64)``: descale = amax / max per (batch, KV head)."""
    B, H = x.shape[:2]
    descale = (x.abs().reshape(B, Hkv, -1).amax(-1).clamp_min(1e-12) / FP8[launch.FP8_FORMATS[dtype]].max).float()
    per_head = descale.repeat_interleave(H // Hkv, dim=1)[:, :, None, None]
    x8 = (x / per_head).to(dtype)
    return x8, descale, x8.double() * per_head.double()


def fp8_mma(device, q_dtype=None) -> bool:
    """Whether the products run on sm_90's fp8 MMA: an FP8 q (both operands fp8) on a Hopper GPU."""
    return (q_dtype is None and torch.device(device).type == "cuda"
            and torch.cuda.get_device_capability(device)[0] == 9)


def measure(fmt, regime, *, causal=True, q_dtype=None, block=(64, 64), device="cpu", **shape):
    from generated import flash_attention

    dtype = FORMATS[fmt]
    q, k, v = inputs(regime, **shape)
    Hkv = k.shape[1]
    k8, kd, kk = quantise(k, dtype, Hkv)
    v8, vd, vv = quantise(v, dtype, Hkv)
    if q_dtype is None:
        q8, qd, qq = quantise(q, dtype, Hkv)
    else:
        q8, qd = q.to(q_dtype), None
        qq = q8.double()
    to = (lambda t: None if t is None else t.to(device))  # noqa: E731
    out, lse = flash_attention(to(q8), to(k8), to(v8), q_descale=to(qd), k_descale=to(kd), v_descale=to(vd),
                               causal=causal, return_lse=True, block=block)
    ref_out, ref_lse = reference(qq, kk, vv, causal=causal)
    name = fmt if q_dtype is None else {torch.bfloat16: "bf16", torch.float16: "fp16"}[q_dtype]
    mma = fp8_mma(device, q_dtype)
    tol, lse_tol = case_tolerances(qq, kk, vv, block_n=block[1], ref_lse=ref_lse, dtype=name, descaled=True,
                                   fp8_mma=mma)
    _, lse_fp32 = case_tolerances(qq, kk, vv, block_n=block[1], ref_lse=ref_lse, dtype=name, descaled=True)
    out_err, lse_err = attention_errors(out.cpu(), lse.cpu(), ref_out, ref_lse, vv)
    return dict(out_err=out_err, out_bound=tol, lse_err=lse_err, lse_bound=lse_tol, lse_fp32=lse_fp32, out=out,
                model="fp8 MMA" if mma else "fp32")


def _row(label, regime, m):
    return [label, regime, f"{m['out_err']:.2e}", f"{m['out_bound']:.2e}", f"{m['lse_err']:.1e}",
            f"{m['lse_bound']:.1e}", f"{m['lse_fp32']:.1e}", m["model"],
            "yes" if m["out_err"] <= m["out_bound"] and m["lse_err"] <= m["lse_bound"] else "**no**"]


def rows(device="cpu", mixed=True):
    """The table's rows: each format at each regime, then (``mixed``) a bf16 / fp16 q on the e4m3 K/V."""
    out = []
    for fmt in FORMATS:
        for regime in REGIMES:
            out.append(_row(fmt, regime, measure(fmt, regime, device=device)))
    for q_dtype, label in ((torch.bfloat16, "bf16 q, e4m3 K/V"), (torch.float16, "fp16 q, e4m3 K/V"))[:2 * mixed]:
        out.append(_row(label, "unit", measure("e4m3", "unit", q_dtype=q_dtype, device=device)))
    return out


HEADER = ["inputs", "regime", "out error / max abs v", "bound", "lse error", "lse bound",
          "lse bound (fp32 acc.)", "accumulation", "within"]


def decode_measure(fmt, q_dtype=None, *, paged=True, splits=3, device="cpu", B=2, Nq=1, Hq=8, Hkv=2, N=256, D=128,
                   seed=0):
    """An FP8 KV cache on the decode path (``flash_attention_with_kvcache``): the cache quantised per (batch,
    KV head), q in its format (``q_dtype`` None) or fp16/bf16, paged (pages of 16 in a shuffled order) or
    contiguous, ``splits`` splits, lengths ``N`` and ``N/3``; each batch entry's error against the reference
    on the dequantised cache at its length, beside ``forward_bound`` (fp32 accumulation: the decode's
    products have 16 rows, below wgmma's 64, so sm_90 runs them as mma.sync on fp16: ``HMMA``). The largest
    error and the smallest bound over the entries."""
    from generated import flash_attention_with_kvcache

    dtype = FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Nq, Hq, D, generator=g)
    (k8, kd, kk), (v8, vd, vv) = (quantise(torch.randn(B, Hkv, N, D, generator=g), dtype, Hkv) for _ in range(2))
    k8, v8 = k8.transpose(1, 2).contiguous(), v8.transpose(1, 2).contiguous()  # (B, N, Hkv, D)
    if q_dtype is None:
        q8, qd, qq = quantise(q.transpose(1, 2), dtype, Hkv)
        q8 = q8.transpose(1, 2).contiguous()
    else:
        q8, qd, qq = q.to(q_dtype), None, q.to(q_dtype).double().transpose(1, 2)
    table = None
    if paged:
        order = torch.randperm(B * N // 16, generator=g)
        table = torch.empty_like(order)
        table[order] = torch.arange(order.numel())
        k8, v8 = (c.reshape(B * N // 16, 16, Hkv, D)[order].contiguous() for c in (k8, v8))
        table = table.reshape(B, N // 16).to(torch.int32)
    lens = torch.tensor([N, N // 3][:B] + [N] * max(0, B - 2), dtype=torch.int32)
    to = (lambda t: None if t is None else t.to(device))  # noqa: E731
    out, lse = flash_attention_with_kvcache(to(q8), to(k8), to(v8), to(lens), block_table=to(table),
                                            q_descale=to(qd), k_descale=to(kd), v_descale=to(vd), causal=True,
                                            num_splits=splits, return_lse=True)
    out, lse = out.cpu().transpose(1, 2), lse.cpu()
    name = fmt if q_dtype is None else {torch.bfloat16: "bf16", torch.float16: "fp16"}[q_dtype]
    worst = dict(out_err=0.0, out_bound=math.inf, lse_err=0.0, lse_bound=math.inf)
    for b in range(B):
        n, sl = int(lens[b]), slice(b, b + 1)
        ro, rl = reference(qq[sl], kk[sl, :, :n], vv[sl, :, :n], causal=True, alignment="bottom_right")
        tol, lse_tol = case_tolerances(qq[sl], kk[sl, :, :n], vv[sl, :, :n], ref_lse=rl, dtype=name, descaled=True)
        out_err, lse_err = attention_errors(out[sl], lse[sl], ro, rl, vv[sl, :, :n])
        worst = dict(out_err=max(worst["out_err"], out_err), out_bound=min(worst["out_bound"], tol),
                     lse_err=max(worst["lse_err"], lse_err), lse_bound=min(worst["lse_bound"], lse_tol))
    return worst


def decode_rows(device="cpu", **shape):
    out = []
    for fmt, q_dtype, label in (("e4m3", None, "e4m3 q, e4m3 cache"), ("e5m2", None, "e5m2 q, e5m2 cache"),
                                ("e4m3", torch.bfloat16, "bf16 q, e4m3 cache")):
        m = decode_measure(fmt, q_dtype, device=device, **shape)
        out.append([label, f"{m['out_err']:.2e}", f"{m['out_bound']:.2e}", f"{m['lse_err']:.1e}",
                    f"{m['lse_bound']:.1e}",
                    "yes" if m["out_err"] <= m["out_bound"] and m["lse_err"] <= m["lse_bound"] else "**no**"])
    return out


DECODE_HEADER = ["decode (paged, 3 splits)", "out error / max abs v", "bound", "lse error", "lse bound", "within"]

#: the FP8 forward's extra HBM bytes per program: its three fp32 descales
DESCALE_BYTES = 3 * 4


def hbm_rows(n=(4096, 16384), d=128, block=(128, 64)):
    """The HBM model (``benchmarks.hbm.flash_forward``) of one (batch, head) at the default block: bf16
    q, k, v; FP8 q, k, v (1 byte each, out in bf16, three fp32 descales per program); a bf16 q on an FP8
    K/V (the mixed path: out in bf16)."""
    from benchmarks.hbm import flash_forward

    out = []
    for length in n:
        for kinds, label in (((), "none"), (("causal",), "causal")):
            bf16 = flash_forward(length, d, *block, kinds, dtype_bytes=2)
            tiles_q = -(-length // block[0])
            fp8 = bf16.k // 2 + bf16.v // 2 + bf16.q // 2 + bf16.o + bf16.lse + tiles_q * DESCALE_BYTES
            mixed = bf16.k // 2 + bf16.v // 2 + bf16.q + bf16.o + bf16.lse + tiles_q * DESCALE_BYTES
            out.append([length, label, f"{bf16.total / 1e6:.1f}", f"{fp8 / 1e6:.1f}", f"{fp8 / bf16.total:.3f}",
                        f"{mixed / 1e6:.1f}", f"{mixed / bf16.total:.3f}"])
    return out


HBM_HEADER = ["N", "mask", "bf16 MB", "FP8 MB", "FP8 / bf16", "bf16 q + FP8 K/V MB", "mixed / bf16"]


def decode_hbm_rows(lengths=(4096, 16384, 131072), batch=(1, 8), num_sms=132):
    """The decode HBM model (``benchmarks.hbm_decode.model_bytes``: a decode step, Hq = 32, Hkv = 8, D = 128,
    the default splits on ``num_sms`` SMs) with a bf16 cache, an FP8 cache under a bf16 q (K and V one byte
    per element) and under an FP8 q (q too): out stays bf16, and every split program reads its (batch, KV
    head)'s three fp32 descales."""
    from benchmarks.hbm_decode import DecodeShape, default_splits, model_bytes, row_tiles

    out = []
    for b in batch:
        for keys in lengths:
            bf16 = DecodeShape(batch=b)
            splits = default_splits(bf16, keys, num_sms)
            base = model_bytes(bf16, keys, splits)
            kv8 = model_bytes(DecodeShape(batch=b, elem=1), keys, splits)
            descales = b * bf16.heads_kv * splits * row_tiles(bf16) * DESCALE_BYTES
            mixed = sum(base.values()) - base["kv"] + kv8["kv"] + descales
            fp8 = mixed - base["q"] + kv8["q"]
            total = sum(base.values())
            out.append([b, keys, splits, f"{total / 1e6:.2f}", f"{mixed / 1e6:.2f}", f"{mixed / total:.3f}",
                        f"{fp8 / 1e6:.2f}", f"{fp8 / total:.3f}"])
    return out


DECODE_HBM_HEADER = ["B", "keys", "splits", "bf16 cache MB", "FP8 cache, bf16 q MB", "/ bf16",
                     "FP8 cache, FP8 q MB", "/ bf16"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fp8_errors", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--fp8-only", action="store_true", help="the rows with fp8 products only (no mixed rows, no "
                   "HBM tables): the GPU check of claim fp8_mma_bound")
    args = p.parse_args(argv)
    table = rows(args.device, mixed=not args.fp8_only)
    print(markdown_table(HEADER, table))
    if args.device != "cpu":
        name = torch.cuda.get_device_name(args.device)
        print(f"\n{name}: {sum(r[-1] == 'yes' for r in table)}/{len(table)} rows within their bound")
    if args.fp8_only:
        try:  # an FP8 KV cache on the decode path, after the forward's verdict (a failure here leaves it printed)
            print()
            decode = decode_rows(args.device)
            print(markdown_table(DECODE_HEADER, decode))
            print(f"\ndecode: {sum(r[-1] == 'yes' for r in decode)}/{len(decode)} rows within their bound")
        except Exception as exc:  # noqa: BLE001  (reported, not hidden: the command's output is the record)
            print(f"decode: {type(exc).__name__}: {exc}")
        return 0
    print()
    print(markdown_table(HBM_HEADER, hbm_rows()))
    print()
    print(markdown_table(DECODE_HBM_HEADER, decode_hbm_rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
