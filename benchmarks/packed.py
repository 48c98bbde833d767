"""Packed documents three ways: ``flash_attention_varlen``, a dense bool mask, padding.

Causal self-attention over documents of uneven lengths (a training batch packed end to end),
computed by flashproof three ways on the same tokens:

* **varlen**: ``flash_attention_varlen`` on the packed ``(N, H, D)`` tensors with ``cu_seqlens``;
* **dense bool mask**: ``flash_attention`` over all ``N`` tokens as one sequence with the
  block-diagonal causal mask (``spec.varlen.packed_mask``), as FlexAttention's document masking;
* **padding**: the documents copied into a ``(B, H, max_len, D)`` padded batch, ``causal`` with
  ``key_lengths``, and the real rows gathered back (the copies are part of its cost).

Each row has the HBM model's bytes and (query tile, key tile) pairs for one head
(``benchmarks.hbm.packed_traffic``, at the block of the run: 64x64 on a GPU), and, on a GPU, the median time of the
forward and of forward+backward (``triton.testing.do_bench``). Without CUDA it runs a tiny
interpreted case through the same code and checks that the three layouts agree on every token;
no time is meaningful there.

    python -m benchmarks.packed                          # on a GPU
    python -m benchmarks.packed --forward-only --host    # the forwards, and where each one's host time goes
    TRITON_INTERPRET=1 python -m benchmarks.packed --smoke
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks import hbm
from benchmarks.attention import NO_TIMING, device_name, gpu_ms, smoke_ms, smoke_run
from benchmarks.common import text_table, versions, write_text
from generator.runtime.launch import DTYPE_NAMES

LAYOUTS = ("varlen", "dense bool mask", "padding")
HEADS, HEAD_DIM = 16, 64
SMOKE_DOCUMENTS = (37, 5, 20)
SMOKE_BLOCK = (16, 32)


def packed_inputs(lengths, heads, d, dtype, device, requires_grad):
    gen = torch.Generator(device=device).manual_seed(0)
    n = sum(lengths)
    return [torch.randn(n, heads, d, device=device, dtype=dtype, generator=gen).requires_grad_(requires_grad)
            for _ in range(3)]


def layouts(lengths, device, block):
    """``{layout: attention(q, k, v)}`` on packed ``(N, H, D)`` tensors, each returning ``(N, H, D)``."""
    from generated import flash_attention, flash_attention_varlen
    from spec.varlen import packed_mask

    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    n, longest = int(cu[-1]), max(lengths)
    mask = torch.from_numpy(packed_mask(cu.cpu(), cu.cpu(), n, n, causal=True)).to(device)
    key_lengths = torch.tensor(lengths, dtype=torch.int32, device=device)
    # padded position of every packed token: (document, row inside it)
    doc = torch.repeat_interleave(torch.arange(len(lengths), device=device), key_lengths)
    row = torch.arange(n, device=device) - cu[:-1].long()[doc]

    def varlen(q, k, v):
        return flash_attention_varlen(q, k, v, cu, cu, longest, longest, causal=True, block=block)

    def dense(q, k, v):
        return flash_attention(*(t.transpose(0, 1)[None] for t in (q, k, v)), mask=mask, block=block)[0].transpose(0, 1)

    def padding(q, k, v):
        padded = []
        for t in (q, k, v):
            p = t.new_zeros((len(lengths), longest, *t.shape[1:]))
            p = p.index_put((doc, row), t)
            padded.append(p.transpose(1, 2))
        out = flash_attention(*padded, causal=True, key_lengths=key_lengths, block=block)
        return out.transpose(1, 2)[doc, row]

    return {"varlen": varlen, "dense bool mask": dense, "padding": padding}


def run(fn, q, k, v, mode):
    if mode == "fwd":
        def step():
            with torch.no_grad():
                return fn(q, k, v)
    else:
        do = torch.randn_like(q)

        def step():
            fn(q, k, v).backward(do)
    step()
    return step


HEADER = ["layout", "HBM MiB / head", "tile pairs / head", "FLOPs skipped", "fwd ms", "fwd+bwd ms"]


def measure(lengths, heads, d, dtype, device, timer, block, modes=("fwd", "fwd+bwd")) -> list[list]:
    model = hbm.packed_traffic(lengths, d, *block)
    baseline = model["no mask"].tiles
    ops = layouts(lengths, device, block)
    rows = []
    for name in LAYOUTS:
        times = []
        for mode in ("fwd", "fwd+bwd"):
            if mode not in modes:
                times.append("-")
                continue
            q, k, v = packed_inputs(lengths, heads, d, dtype, device, requires_grad=mode != "fwd")
            ms = timer(run(ops[name], q, k, v, mode))
            times.append("ran" if ms is None else f"{ms:.3f}")
        t = model[name]
        rows.append([name, f"{t.total / hbm.MB:.2f}", t.tiles, f"{1 - t.tiles / baseline:.0%}", *times])
    return rows


def host_costs(lengths, heads, d, dtype, device, block, calls: int = 50, top: int = 12) -> str:
    """Where each layout's forward spends the host's time (``--host``): µs per call with the kernel
    launches stubbed (Python, the torch ops it issues and any device->host sync: what a host-bound
    ``do_bench`` measures) and with them, the syncs of one call, and a cProfile (own time) of the
    varlen and dense-mask forwards with their launches."""
    import cProfile
    import io
    import pstats
    import time

    from benchmarks.host import HostSyncGuard, stubbed_launches

    ops = layouts(lengths, device, block)
    q, k, v = packed_inputs(lengths, heads, d, dtype, device, requires_grad=False)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def per_call(fn):
        for _ in range(3):
            fn(q, k, v)
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(q, k, v)
        sync()
        return (time.perf_counter() - t0) / calls * 1e6

    rows, profiles = [], []
    with torch.no_grad():
        for name in LAYOUTS:
            launched_us = per_call(ops[name])
            with stubbed_launches():
                stubbed_us = per_call(ops[name])
                with HostSyncGuard(dispatch=False) as guard:
                    ops[name](q, k, v)
            rows.append([name, f"{stubbed_us:.0f}", f"{launched_us:.0f}", len(guard.syncs),
                         "; ".join(sorted({f"{x.what} at {x.where}" for x in guard.syncs})) or "-"])
        for name in ("varlen", "dense bool mask"):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(calls):
                ops[name](q, k, v)
            sync()
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
            profiles.append(f"cProfile, {name} forward, {calls} calls (own time):\n" + out.getvalue())
    table = text_table(["layout (forward)", "host µs/call, launches stubbed", "µs/call, launched", "syncs/call",
                        "syncs"], rows)
    return table + "\n\n" + "\n".join(profiles)


def check_agreement(lengths, heads, d, dtype, device, block) -> float:
    """The three layouts' forwards on the same tokens: max |difference| to varlen (smoke check)."""
    q, k, v = packed_inputs(lengths, heads, d, dtype, device, requires_grad=False)
    outs = {name: op(q, k, v).float() for name, op in layouts(lengths, device, block).items()}
    err = max((outs[name] - outs["varlen"]).abs().max().item() for name in LAYOUTS)
    if not err < 1e-4:
        raise AssertionError(f"packed layouts disagree: max |diff| = {err:.2e}")
    return err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.packed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny interpreted case (default without CUDA)")
    ap.add_argument("--documents", type=int, nargs="+", default=list(hbm.DOCUMENTS))
    ap.add_argument("--dtype", default="bf16", choices=["fp16", "bf16", "fp32"])
    ap.add_argument("--json", type=Path, help="write the table (header, rows, what was run) here")
    ap.add_argument("--forward-only", action="store_true", help="time the forwards only (no backward to compile)")
    ap.add_argument("--host", action="store_true", help="also where each forward's host time goes (µs per call "
                    "with launches stubbed and not, syncs, a cProfile of the varlen and dense-mask forwards)")
    args = ap.parse_args(argv)
    smoke = smoke_run(ap, args.smoke)
    if smoke:
        print(f"NOTE: {NO_TIMING}.")
        device, timer, lengths, heads, d, dtype = "cpu", smoke_ms, SMOKE_DOCUMENTS, 2, 16, torch.float32
        block = SMOKE_BLOCK
        print(f"layouts agree: max |diff| = {check_agreement(lengths, heads, d, dtype, device, block):.2e}")
    else:
        device, timer, lengths, heads, d, block = "cuda", gpu_ms, tuple(args.documents), HEADS, HEAD_DIM, (64, 64)
        dtype = DTYPE_NAMES[args.dtype]
    v = versions()
    print(f"device: {device_name(device)}; torch {v['torch']}; triton {v['triton']}; documents {list(lengths)}, "
          f"{heads} heads, D = {d}, causal, block {block}")
    modes = ("fwd",) if args.forward_only else ("fwd", "fwd+bwd")
    rows = measure(lengths, heads, d, dtype, device, timer, block, modes)
    print(text_table(HEADER, rows))
    if args.host:
        print("\n" + host_costs(lengths, heads, d, dtype, device, block))
    if args.json:
        setup = (f"documents {list(lengths)} ({sum(lengths)} tokens), {heads} heads, D = {d}, "
                 f"{str(dtype).removeprefix('torch.')}, causal, block {block[0]}x{block[1]}")
        write_text(args.json, json.dumps(dict(device=device_name(device), smoke=smoke, setup=setup, header=HEADER,
                                              rows=rows), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
