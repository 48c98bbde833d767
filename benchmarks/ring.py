"""Communication model of ring attention: when does the K/V transfer hide behind the kernel?

At every step of the ring (``generator/runtime/ring.py``) a rank sends its current K/V shard
to the next rank while it runs the generated kernel on it. Per rank and step, for a shard of
``n = N/P`` positions, ``Hq`` query and ``Hkv`` key/value heads of dim ``D``, ``b`` bytes per
element (per batch entry):

* **forward** moves ``K`` and ``V``: ``2 · n · Hkv · D · b`` bytes, and computes
  ``4 · f · n² · Hq · D`` FLOPs (``Q Kᵀ`` and ``P V``), where ``f`` is the fraction of the
  ``n × n`` block the step's plan runs (``spec.ring.plan_step``: 1 without a mask; under a
  causal mask ½ on every step of the zigzag layout, 1, ½ or 0 on the contiguous one);
* **backward** moves ``K``, ``V`` and the fp32 partial sums of ``dK``, ``dV``:
  ``2 · n · Hkv · D · (b + 4)`` bytes, and computes ``10 · f · n² · Hq · D`` FLOPs (five
  products: ``S`` recomputed, ``dP``, ``dV``, ``dK``, ``dQ``).

With a link of ``BW`` bytes/s per direction and a kernel sustaining ``F`` FLOP/s, the transfer
is hidden when ``T_compute ≥ T_comm``:

    forward:   n ≥ (Hkv / Hq) · b · F / (2 · f · BW)
    backward:  n ≥ (Hkv / Hq) · (b + 4) · F / (5 · f · BW)

``D`` cancels: both sides grow linearly in it. GQA lowers the threshold by ``Hq / Hkv`` (fewer
bytes, same FLOPs); a causal mask raises it by ``1/f`` = 2. A ring step lasts as long as its
slowest rank, so the contiguous layout's causal steps cost a full block (some rank always has a
full pair) where zigzag's cost half: ``ring_time`` sums ``max over ranks of max(T_compute,
T_comm)`` over the steps.

``F`` and the link bandwidths are assumptions (no multi-GPU machine has been lent to this
project): the defaults are stated in ``LINKS`` and ``FLOPS``. ``--measure`` (under
``torchrun --nproc-per-node P``, NCCL, P >= 2 GPUs) times one K/V exchange and one kernel
call per step and prints them beside the model.

    python -m benchmarks.ring            # table, plot into docs/assets/perf/, docs page
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from spec import ring as spec_ring

from benchmarks.common import ASSETS_PERF, DOCS_PERF, markdown_table, text_table, write_text

#: link bandwidth per direction and rank, bytes/s (nominal figures, not measurements)
LINKS = {
    "NVLink 4 (H100 SXM)": 450e9,
    "PCIe 5 x16": 64e9,
    "InfiniBand NDR 400 Gb/s": 50e9,
}
#: sustained attention-kernel throughput assumed for the model (bf16, H100-class), FLOP/s
FLOPS = 350e12
FP32 = 4


@dataclass(frozen=True)
class Shape:
    """Per batch entry: query / key-value heads, head dim, element size of q, k, v."""

    hq: int = 32
    hkv: int = 32
    d: int = 128
    b: int = 2


def step_fraction(layout: str, world_size: int, rank: int, src: int, causal: bool) -> float:
    """The fraction of the n x n block a step runs, from the runtime's own plan (a diagonal
    chunk pair counts as half: the kernel skips the tiles above its diagonal)."""
    plan = spec_ring.plan_step(layout, world_size, rank, src, causal, 1)
    slots = spec_ring.LAYOUTS[layout].slots
    if plan.kind == "causal":
        return (slots * (slots - 1) / 2 + slots / 2) / slots**2  # below-diagonal pairs + half the diagonal ones
    return (plan.rows[1] - plan.rows[0]) * (plan.cols[1] - plan.cols[0]) / slots**2


def step_bytes(n: int, s: Shape, backward: bool = False) -> float:
    """Bytes a rank sends (and receives) per step: K, V (and fp32 dK, dV partial sums)."""
    return 2 * n * s.hkv * s.d * (s.b + (FP32 if backward else 0))


def step_flops(n: int, s: Shape, fraction: float = 1.0, backward: bool = False) -> float:
    return (10 if backward else 4) * fraction * n * n * s.hq * s.d


def overlap_threshold(s: Shape, bandwidth: float, fraction: float = 1.0, backward: bool = False,
                      flops: float = FLOPS) -> float:
    """The shard length n above which T_compute >= T_comm (the transfer is hidden)."""
    per_elem = (s.b + FP32) if backward else s.b
    return (s.hkv / s.hq) * per_elem * flops / ((5 if backward else 2) * fraction * bandwidth)


def ring_time(N: int, world_size: int, layout: str, causal: bool, s: Shape, bandwidth: float,
              backward: bool = False, flops: float = FLOPS) -> float:
    """Seconds of one ring pass: each step lasts max over ranks of max(T_compute, T_comm)."""
    n = N // world_size
    total = 0.0
    for step in range(world_size):
        comm = step_bytes(n, s, backward) / bandwidth if world_size > 1 else 0.0
        compute = max(step_flops(n, s, step_fraction(layout, world_size, r, (r - step) % world_size, causal),
                                 backward) / flops for r in range(world_size))
        total += max(compute, comm)
    return total


# ----------------------------------------------------------------------------------
# Tables, plot, docs page.
# ----------------------------------------------------------------------------------
SHAPES = {"MHA 32/32, D=128": Shape(32, 32, 128), "GQA 32/8, D=128": Shape(32, 8, 128)}
THRESHOLD_HEADER = ["shape", "link", "fwd, no mask", "fwd, causal zigzag", "bwd, no mask", "bwd, causal zigzag"]


def threshold_rows():
    rows = []
    for name, s in SHAPES.items():
        for link, bw in LINKS.items():
            rows.append([name, link] + [f"{overlap_threshold(s, bw, f, bwd):,.0f}"
                                        for bwd in (False, True) for f in (1.0, 0.5)])
    return rows


BALANCE_HEADER = ["P", "N", "contiguous causal fwd [ms]", "zigzag causal fwd [ms]", "no mask fwd [ms]"]


def balance_rows(s=Shape(), link="NVLink 4 (H100 SXM)"):
    rows = []
    for P in (2, 4, 8):
        N = 16384 * P
        times = [ring_time(N, P, lay, causal, s, LINKS[link]) * 1e3
                 for lay, causal in (("contiguous", True), ("zigzag", True), ("zigzag", False))]
        rows.append([P, N] + [f"{t:.2f}" for t in times])
    return rows


N_PER_RANK = [2**k for k in range(7, 16)]


def _log_axes(ax, xlabel, ylabel, title, y_base, legend="best"):
    for set_scale, base in ((ax.set_xscale, 2), (ax.set_yscale, y_base)):
        set_scale("log", base=base)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc=legend)


def _plots() -> str:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "flashproof"
    import matplotlib.pyplot as plt

    ASSETS_PERF.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    s = Shape()
    ax = axes[0]
    ax.plot(N_PER_RANK, [step_flops(n, s) / FLOPS * 1e3 for n in N_PER_RANK], "k-", marker="o",
            label="compute, no mask")
    ax.plot(N_PER_RANK, [step_flops(n, s, 0.5) / FLOPS * 1e3 for n in N_PER_RANK], "k--", marker="o",
            label="compute, causal zigzag")
    for (link, bw), c in zip(LINKS.items(), ("C0", "C1", "C2")):
        ax.plot(N_PER_RANK, [step_bytes(n, s) / bw * 1e3 for n in N_PER_RANK], c + "-", label=f"K/V over {link}")
    _log_axes(ax, "shard length n = N / P", "time per step and batch entry [ms]",
              f"forward step, Hq=Hkv={s.hq}, D={s.d}, bf16, F={FLOPS / 1e12:.0f} TFLOP/s", y_base=10)

    ax = axes[1]
    bws = [2**k * 1e9 for k in range(3, 11)]
    for (name, shape), c in zip(SHAPES.items(), ("C0", "C3")):
        for bwd, style in ((False, "-"), (True, "--")):
            ax.plot([b / 1e9 for b in bws], [overlap_threshold(shape, b, 0.5, bwd) for b in bws], c + style,
                    marker="s", label=f"{name}, causal zigzag, {'backward' if bwd else 'forward'}")
    for link, bw in LINKS.items():
        ax.axvline(bw / 1e9, color="0.6", lw=0.8)
        ax.text(bw / 1e9, 2**7.2, link, rotation=90, fontsize=7, va="bottom", ha="right")
    _log_axes(ax, "link bandwidth per direction [GB/s]", "smallest n = N/P that hides the transfer",
              "overlap condition T_compute >= T_comm (D cancels)", y_base=2, legend="upper right")
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(ASSETS_PERF / f"ring_overlap.{ext}", dpi=110, metadata={"Date": None} if ext == "svg" else None)
    plt.close(fig)
    return "ring_overlap.png"


def markdown_page(png: str, thresholds, balance) -> str:
    return f"""# Ring attention: communication model

<!-- generated by `python -m benchmarks.ring`; do not edit by hand -->

When does the ring's K/V transfer hide behind the kernel? This is a model (`benchmarks/ring.py`):
the kernel throughput `F = {FLOPS / 1e12:.0f} TFLOP/s` and the link bandwidths are assumptions,
not measurements; no machine with several GPUs has been lent to this project
(`python -m benchmarks.ring --measure` under `torchrun` measures the same quantities with NCCL).

Per rank and step, for a shard of `n = N/P` positions and per batch entry:

| pass | bytes sent (and received) | FLOPs |
|---|---|---|
| forward | `2 · n · Hkv · D · b` (K, V) | `4 · f · n² · Hq · D` |
| backward | `2 · n · Hkv · D · (b + 4)` (K, V, fp32 dK, dV) | `10 · f · n² · Hq · D` |

`f` is the fraction of the `n × n` block the step's plan runs (`spec.ring.plan_step`): 1
without a mask, ½ on every causal step of the zigzag layout. The transfer is hidden when
`T_compute ≥ T_comm`, i.e. `n ≥ (Hkv/Hq) · b · F / (2 f BW)` (forward) and
`n ≥ (Hkv/Hq) · (b+4) · F / (5 f BW)` (backward): **D cancels**, GQA divides the threshold
by `Hq/Hkv`, a causal mask doubles it.

![step times and overlap thresholds](../assets/perf/{png})

## Smallest shard length that hides the transfer (bf16)

{markdown_table(THRESHOLD_HEADER, thresholds)}

## Why zigzag: the slowest rank sets each step

A ring step lasts as long as its slowest rank. Under a causal mask the contiguous layout
always has a rank with a full block pair (the last ranks), so every step costs a full block;
zigzag gives every rank half a block per step. One forward pass, MHA 32/32, D = 128, bf16,
`n = 16384`, NVLink 4:

{markdown_table(BALANCE_HEADER, balance)}

Regenerate the plot and this page with `python -m benchmarks.ring`.
"""


def measure(n: int, s: Shape, iters: int = 10):  # pragma: no cover - needs several GPUs
    """Time one K/V exchange and one forward kernel call per step with NCCL (under torchrun)."""
    import os

    import torch
    import torch.distributed as dist

    from generated import flash_attention
    from generator.runtime.ring import _Ring

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    ring = _Ring(None)
    q = torch.randn(1, s.hq, n, s.d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, s.hkv, n, s.d, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters / 1e3

    comm = timed(lambda: ring.wait(ring.post((k, v), "K/V", 0)[0], "K/V", 0))
    compute = timed(lambda: flash_attention(q, k, v))
    if rank == 0:
        bw = step_bytes(n, s) / comm
        print(f"n={n}: K/V exchange {comm * 1e3:.3f} ms ({bw / 1e9:.1f} GB/s), kernel {compute * 1e3:.3f} ms "
              f"({step_flops(n, s) / compute / 1e12:.1f} TFLOP/s); model threshold at that bandwidth and "
              f"throughput: n >= {overlap_threshold(s, bw, flops=step_flops(n, s) / compute):,.0f}")
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ring", description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-docs", action="store_true", help="print the tables only")
    ap.add_argument("--measure", type=int, metavar="N_PER_RANK",
                    help="under torchrun with NCCL on P >= 2 GPUs: time one step's exchange and kernel")
    args = ap.parse_args(argv)
    if args.measure:
        measure(args.measure, Shape())
        return 0
    thresholds, balance = threshold_rows(), balance_rows()
    print(text_table(THRESHOLD_HEADER, thresholds))
    print(text_table(BALANCE_HEADER, balance))
    if not args.no_docs:
        png = _plots()
        path = write_text(DOCS_PERF / "ring.md", markdown_page(png, thresholds, balance))
        print(f"wrote {path} and docs/assets/perf/ring_overlap.{{png,svg}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
