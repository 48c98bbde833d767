"""Per-call mask-structure work: flashproof's mask_mod vs FlexAttention's ``create_block_mask``.

FlexAttention evaluates a mask_mod on every (query, key) pair to build its ``BlockMask``
(O(N²) work per call, kept as O((N/B)²) block indices). flashproof derives the tile classifier
symbolically once, when the kernel is generated (claim mask_mod_sound); per call it only packs
the mask's parameters into one int32 row per batch entry (``MaskMod.pack``: O(N) for
per-position ids, with their sortedness check; O(1) for scalars), and each kernel tile reads
O(1) of them. This script times both on CPU, for the four built-ins, and reports the bytes of
the structure each builds and the ratio::

    python -m benchmarks.mask_mod                 # N = 1k ... 8k
    python -m benchmarks.mask_mod --max-n 32768   # up to 32k (create_block_mask: minutes, GBs)
    python -m benchmarks.mask_mod --write         # also write docs/performance/mask_mod.md
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from benchmarks.common import DOCS_PERF, write_text

from spec.masks import chunked, document, prefix_lm, sink_window

BLOCK = 128  # FlexAttention's default block size


def cases(n: int, batch: int):
    """``(mask_mod, mask_args, flex mask_mod)`` for each built-in at length ``n`` (shift 0)."""
    docs = torch.div(torch.arange(n), max(n // 8, 1), rounding_mode="floor").expand(batch, n).contiguous()
    prefix = torch.full((batch,), n // 4)
    return [
        (prefix_lm, {"prefix": prefix}, lambda b, h, qi, ki: (ki < prefix[b]) | (ki <= qi)),
        (chunked, {"chunk": 1024}, lambda b, h, qi, ki: qi // 1024 == ki // 1024),
        (sink_window, {"sinks": 4, "left": 1024},
         lambda b, h, qi, ki: (ki < 4) | ((qi - 1024 <= ki) & (ki <= qi))),
        (document, {"doc_q": docs, "doc_k": docs}, lambda b, h, qi, ki: docs[b, qi] == docs[b, ki]),
    ]


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def block_mask_bytes(bm) -> int:
    return sum(t.numel() * t.element_size() for t in (bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                                                      bm.full_kv_indices, bm.q_num_blocks, bm.q_indices,
                                                      bm.full_q_num_blocks, bm.full_q_indices) if t is not None)


def measure(n: int, batch: int = 1, repeat: int = 3) -> list[dict]:
    from torch.nn.attention.flex_attention import create_block_mask

    rows = []
    for mm, args, flex_fn in cases(n, batch):
        t_fp, packed = _best(lambda: mm.pack(args, batch, n, n), repeat)
        t_flex, bm = _best(lambda: create_block_mask(flex_fn, batch, None, n, n, device="cpu", BLOCK_SIZE=BLOCK),
                           1 if n > 8192 else repeat)
        rows.append({"mask": mm.name, "N": n, "flashproof_s": t_fp, "flashproof_bytes": packed.numel() * 4,
                     "flex_s": t_flex, "flex_bytes": block_mask_bytes(bm), "flex_evaluations": batch * n * n,
                     "time_ratio": t_flex / t_fp})
    return rows


def table(rows: list[dict]) -> str:
    out = ["| mask | N | flashproof per call | bytes | create_block_mask | bytes | mask evaluations | time ratio |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['mask']}` | {r['N']} | {r['flashproof_s'] * 1e6:.0f} µs | {r['flashproof_bytes']} | "
                   f"{r['flex_s'] * 1e3:.1f} ms | {r['flex_bytes']} | {r['flex_evaluations']:.2e} | "
                   f"{r['time_ratio']:.0f}x |")
    return "\n".join(out)


def markdown_page(rows: list[dict], command: str) -> str:
    return f"""# mask_mod: per-call mask structure

Written by `{command}` ({platform.machine()} CPU, {torch.get_num_threads()} threads, torch
{torch.__version__}; best of 3 runs, one above N = 8192). flashproof's column is everything a call
does for the mask before the kernels run: `MaskMod.pack` turns `mask_args` into one int32 row per
batch entry (with the sortedness check of document ids). The tile classifier itself was derived
once, symbolically, when the kernel was generated, and costs O(1) per tile inside the kernel
(claim `mask_mod_sound`). FlexAttention's `create_block_mask` (CPU, block {BLOCK}) evaluates the
mask on every (query, key) pair. Bytes: the structure each keeps (flashproof's parameter row;
the BlockMask's block counts and indices). The ratio is create_block_mask's time over flashproof's.
Not in flashproof's column: inside the kernel each program classifies every key tile of its loop
range (the range the other masks leave) with O(1) scalar work, skipping the empty ones without
loading K or V, so a call pays O((N/B_r)(N/B_c)) such evaluations spread over the programs, where
FlexAttention's kernel walks the stored indices of the non-empty blocks only.

{table(rows)}
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-n", type=int, default=8192, help="largest N (powers of two from 1024; default 8192)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--write", action="store_true", help="write docs/performance/mask_mod.md")
    args = p.parse_args(argv)
    rows, n = [], 1024
    while n <= args.max_n:
        rows += measure(n, args.batch)
        n *= 2
    print(table(rows))
    if args.write:
        command = "python -m benchmarks.mask_mod --write" + (f" --max-n {args.max_n}" if args.max_n != 8192 else "")
        print(write_text(DOCS_PERF / "mask_mod.md", markdown_page(rows, command)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
