"""GPU benchmark of KV-cache decoding: achieved HBM bandwidth as % of the GPU's peak.

Decode is memory bound: one new token per sequence reads the whole K/V cache once. For each
shape (batch, Hq / Hkv, D, cache length; bf16, N_q = 1) it times, with
``triton.testing.do_bench``,

* **flashproof**: ``generated.flash_attention_with_kvcache`` (``num_splits=0``: the heuristic),
  contiguous and paged (page_size 16, a scrambled block table);
* **sdpa**: ``F.scaled_dot_product_attention`` on the ``(B, H, N, D)`` views with
  ``enable_gqa=True`` (whatever backend PyTorch picks for one query row);
* **flex**: ``torch.compile(flex_attention)`` with ``enable_gqa=True``,

and reports ``ideal bytes / time`` (``benchmarks.hbm_decode.ideal_bytes``: K and V once per KV
head, q and out) as GB/s and as % of the HBM peak (``PEAK_GBS`` by GPU name, or ``--peak-gbs``).
FlashInfer reports "close to 100 % of bandwidth for long sequences": that is the anchor.

Without CUDA it runs one tiny interpreted shape through the same code path (no timing
meaning) and checks every provider's output against SDPA's.

    python -m benchmarks.decode                       # the sweep on a GPU
    TRITON_INTERPRET=1 python -m benchmarks.decode --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.common import text_table, write_text
from benchmarks.hbm_decode import DecodeShape, ideal_bytes
from generator.runtime.launch import interpreting

PROVIDERS = ("flashproof", "flashproof (paged 16)", "sdpa", "flex")
#: HBM peak in GB/s by a substring of torch.cuda.get_device_name() (vendor datasheets)
PEAK_GBS = {"H200": 4800, "H100": 3350, "A100": 2039}
SEQ_LENS = (4096, 16384, 65536, 131072)
NO_TIMING = "no GPU: interpreted smoke run, timing not meaningful"


@dataclass(frozen=True)
class Case:
    batch: int = 1
    heads_q: int = 32
    heads_kv: int = 8
    head_dim: int = 128
    keys: int = 4096

    def hbm(self) -> DecodeShape:
        return DecodeShape(self.batch, 1, self.heads_q, self.heads_kv, self.head_dim, 2)


def sweep() -> list[Case]:
    return [Case(batch=b, keys=n) for b in (1, 8) for n in SEQ_LENS]


SMOKE = [Case(batch=2, heads_q=4, heads_kv=2, head_dim=16, keys=80)]


def make_inputs(case: Case, device: str, dtype=torch.bfloat16):
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(case.batch, 1, case.heads_q, case.head_dim, device=device, dtype=dtype, generator=g)
    k, v = (torch.randn(case.batch, case.keys, case.heads_kv, case.head_dim, device=device, dtype=dtype,
                        generator=g) for _ in range(2))
    return q, k, v


def paged(k: torch.Tensor, v: torch.Tensor, page_size: int = 16):
    """The same cache as pages in a scrambled order, and its block table."""
    B, N, H, D = k.shape
    pages = math.ceil(N / page_size)
    perm = torch.randperm(B * pages, device=k.device).to(torch.int32)
    table = perm.view(B, pages)

    def scatter(t):
        out = torch.zeros(B * pages, page_size, H, D, device=t.device, dtype=t.dtype)
        padded = torch.nn.functional.pad(t, (0, 0, 0, 0, 0, pages * page_size - N))
        out[perm.long()] = padded.view(B * pages, page_size, H, D)
        return out

    return scatter(k), scatter(v), table


def providers(case: Case, device: str, compile_flex: bool) -> dict:
    """name -> zero-argument callable returning ``(B, 1, Hq, D)``."""
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import flex_attention

    from generated import flash_attention_with_kvcache

    q, k, v = make_inputs(case, device)
    lens = torch.full((case.batch,), case.keys, dtype=torch.int32, device=device)
    kp, vp, table = paged(k, v)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, N, D) views
    flex = torch.compile(flex_attention, dynamic=False) if compile_flex else flex_attention
    return {
        "flashproof": lambda: flash_attention_with_kvcache(q, k, v, lens),
        "flashproof (paged 16)": lambda: flash_attention_with_kvcache(q, kp, vp, lens, block_table=table),
        "sdpa": lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True).transpose(1, 2),
        "flex": lambda: flex(qh, kh, vh, enable_gqa=True).transpose(1, 2),
    }


def measure(cases, device="cuda", timer=None, compile_flex=True, peak_gbs=None) -> list[dict]:
    """One row per case: ms, GB/s and % of peak per provider (or ``n/a (why)``), and the
    largest difference of each provider's output from SDPA's."""
    from benchmarks.attention import gpu_ms

    timer = timer or gpu_ms
    rows = []
    for case in cases:
        ideal = ideal_bytes(case.hbm(), case.keys)
        row = dict(asdict(case), ideal_bytes=ideal, ms={}, gbs={}, peak_pct={}, na={}, max_diff={})
        ops = providers(case, device, compile_flex)
        with torch.no_grad():
            want = ops["sdpa"]().float()
            for name, op in ops.items():
                try:
                    got = op()
                except Exception as exc:  # noqa: BLE001 - reported, never replaced by another kernel
                    row["na"][name] = f"n/a ({type(exc).__name__}: {exc})"
                    continue
                row["max_diff"][name] = float((got.float() - want).abs().max())
                ms = timer(op)
                row["ms"][name] = ms
                if ms is not None:
                    row["gbs"][name] = ideal / (ms * 1e-3) / 1e9
                    if peak_gbs:
                        row["peak_pct"][name] = 100 * row["gbs"][name] / peak_gbs
        rows.append(row)
    return rows


def device_peak(device: str) -> float | None:
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((gbs for key, gbs in PEAK_GBS.items() if key in name), None)


HEADER = ["B", "Hq/Hkv", "D", "keys"] + [f"{p} GB/s (% peak)" for p in PROVIDERS]


def table_cells(rows) -> list[list]:
    out = []
    for r in rows:
        cells = [r["batch"], f"{r['heads_q']}/{r['heads_kv']}", r["head_dim"], r["keys"]]
        for p in PROVIDERS:
            if p in r["na"]:
                cells.append(r["na"][p])
            elif r["gbs"].get(p) is None:
                cells.append("ran (no timing)")
            else:
                pct = r["peak_pct"].get(p)
                cells.append(f"{r['gbs'][p]:.0f}" + (f" ({pct:.0f} %)" if pct is not None else ""))
        out.append(cells)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.decode", description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="the tiny interpreted case (default without CUDA)")
    ap.add_argument("--peak-gbs", type=float, default=None, help="HBM peak in GB/s (default: by GPU name)")
    ap.add_argument("--json", type=Path, help="write the rows as JSON here")
    ap.add_argument("--no-compile-flex", action="store_true")
    args = ap.parse_args(argv)
    smoke = args.smoke or not torch.cuda.is_available()
    if smoke and not interpreting():
        print("no CUDA: run the smoke case with TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    device = "cpu" if smoke else "cuda"
    from benchmarks.attention import smoke_ms

    rows = measure(SMOKE if smoke else sweep(), device, timer=smoke_ms if smoke else None,
                   compile_flex=not (smoke or args.no_compile_flex),
                   peak_gbs=args.peak_gbs or device_peak(device))
    if smoke:
        print(NO_TIMING)
    print(text_table(HEADER, table_cells(rows)))
    for r in rows:
        for name, diff in r["max_diff"].items():
            print(f"{name} vs sdpa: max |diff| = {diff:.2e}" + ("  MISMATCH" if diff > 2e-2 else ""))
    if args.json:
        write_text(args.json, json.dumps({"smoke": smoke, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
