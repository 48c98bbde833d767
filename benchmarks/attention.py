"""GPU benchmark: flashproof against torch SDPA (flash backend) and FlexAttention.

For every shape (``N`` = 512 ... 16k, head dim 64 / 128, causal or not, bf16; batch x heads
chosen so that batch·N = 16k tokens and heads·D = 2048, FlashAttention-2's benchmark setup)
and every mode (forward, backward, forward+backward) it measures TFLOP/s with
``triton.testing.do_bench``, counting ``4·B·H·N²·D`` FLOPs for the forward (halved when
causal) and 2.5x that for the backward, for

* **flashproof**: ``generated.flash_attention`` with the fastest generated block config for
  the shape (tuned once on the forward, cached in ``.artifacts/attention_blocks.json``);
* **flashproof (TMA)**: the same call and block with ``tma=True`` (the opt-in Hopper TMA
  forward; the backward is the same kernel, so its ``bwd`` row is n/a). ``TMA vs ptr`` is
  its ratio to flashproof: the figure that decides whether ``tma`` should become the default;
* **sdpa-flash**: ``F.scaled_dot_product_attention`` with the flash backend pinned by
  ``torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)``;
* **flex**: ``torch.compile(flex_attention)`` with a causal ``BlockMask`` when causal.

Every peer is measured in the same run, and the table prints flashproof's ratio to each.
A provider that cannot run a mode (flashproof before its backward kernels are generated)
is reported as ``n/a (why)``, never timed with a substitute.

Without CUDA it runs a tiny interpreted smoke case (``TRITON_INTERPRET=1``, small N) through
the same code path and says that no timing is meaningful there.

    python -m benchmarks.attention                       # full sweep on a GPU
    python -m benchmarks.attention --n 4096 --head-dim 128 --causal
    TRITON_INTERPRET=1 python -m benchmarks.attention --smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.common import (
    ARTIFACTS, ASSETS_PERF, DOCS_PERF, REGENERATE, markdown_table, text_table, versions, write_text,
)
from generator.runtime.api import DEFAULT_BLOCK
from generator.runtime.launch import DTYPE_NAMES, interpreting

TMA = "flashproof (TMA)"
PROVIDERS = ("flashproof", TMA, "sdpa-flash", "flex")
#: the forwards the smoke run checks against SDPA's
AGREEMENT = ("flashproof", TMA, "flex")
MODES = ("fwd", "bwd", "fwd+bwd")
#: backward = 2.5x the forward's FLOPs (two matmuls recomputed/forward, five in backward, /2)
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOKENS = 16384  # batch * N
MODEL_DIM = 2048  # heads * D
BLOCK_CACHE = ARTIFACTS / "attention_blocks.json"
NO_TIMING = "no GPU: interpreted smoke run, timing not meaningful"


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    n: int
    d: int
    causal: bool
    dtype: str = "bf16"

    def flops(self, mode: str) -> float:
        f = 4.0 * self.batch * self.heads * self.n * self.n * self.d
        return f * (0.5 if self.causal else 1.0) * FLOP_FACTOR[mode]

    @property
    def key(self) -> str:
        return f"{self.batch}x{self.heads}x{self.n}x{self.d}{'-causal' if self.causal else ''}-{self.dtype}"


def sweep(seq_lens=SEQ_LENS, head_dims=HEAD_DIMS, causal=(False, True)) -> list[Shape]:
    return [Shape(max(1, TOKENS // n), MODEL_DIM // d, n, d, c)
            for d in head_dims for c in causal for n in seq_lens]


SMOKE_SHAPES = [Shape(1, 2, 80, 32, False), Shape(1, 2, 80, 32, True)]


# ----------------------------------------------------------------------------------------
# Providers: each returns attention(q, k, v) for one shape, inputs (batch, heads, N, D)
# ----------------------------------------------------------------------------------------
def flashproof_op(shape: Shape, block, tma=False):
    from generated import flash_attention

    return lambda q, k, v: flash_attention(q, k, v, causal=shape.causal, block=tuple(block), tma=tma)


def sdpa_flash_op(shape: Shape):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def op(q, k, v):
        # pinned: an unavailable flash backend raises instead of silently using another one
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)

    return op


_FLEX = {}


def flex_op(shape: Shape, device: str, compiled: bool):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if compiled and "fn" not in _FLEX:
        dynamo = torch._dynamo.config
        # one compilation per shape: past dynamo's recompile limit flex_attention would
        # silently run eagerly (unfused, S materialised) and be timed as if compiled
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, name):
                setattr(dynamo, name, 256)
        if hasattr(dynamo, "fail_on_recompile_limit_hit"):
            dynamo.fail_on_recompile_limit_hit = True
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    fn = _FLEX["fn"] if compiled else flex_attention
    block_mask = None
    if shape.causal:
        block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None,
                                       shape.n, shape.n, device=device)
    return lambda q, k, v: fn(q, k, v, block_mask=block_mask)


def inputs(shape: Shape, device: str, requires_grad: bool):
    dtype = DTYPE_NAMES[shape.dtype]
    gen = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(shape.batch, shape.heads, shape.n, shape.d, device=device, dtype=dtype,
                        generator=gen).requires_grad_(requires_grad) for _ in range(3)]


def runner(op, shape: Shape, mode: str, device: str):
    """A zero-argument callable running ``mode`` once; raises now if the provider cannot.

    The callable is run once here (a probe and a warm-up), so a missing backward fails
    inside the caller's ``try`` and never inside the timer.
    """
    q, k, v = inputs(shape, device, requires_grad=mode != "fwd")
    if mode == "fwd":
        def fn():
            with torch.no_grad():
                return op(q, k, v)
    else:
        out = op(q, k, v)
        if out.grad_fn is None:
            raise NotImplementedError("its output has no autograd graph")
        do = torch.randn_like(out)
        if mode == "bwd":
            def fn():
                out.backward(do, retain_graph=True)
        else:
            def fn():
                op(q, k, v).backward(do)
    fn()
    return fn


# ----------------------------------------------------------------------------------------
# Timers
# ----------------------------------------------------------------------------------------
def gpu_ms(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def smoke_ms(fn) -> None:
    """Run once, so the code path is exercised; an interpreted run has no time worth keeping."""
    fn()
    return None


# ----------------------------------------------------------------------------------------
# Block tuning (flashproof): fastest generated block config per shape, cached
# ----------------------------------------------------------------------------------------
def generated_blocks() -> list[tuple[int, int]]:
    import generated

    return sorted(generated.KERNELS)


def best_block(shape: Shape, device: str, timer, cache_path: Path | None, retune=False):
    """The generated block with the fastest forward for ``shape`` (cached per device)."""
    key = f"{device_name(device)}|triton {versions()['triton']}|{shape.key}"
    cache = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    if key in cache and not retune and tuple(cache[key]) in generated_blocks():
        return tuple(cache[key])
    times = {}
    for block in generated_blocks():
        try:
            times[block] = timer(runner(flashproof_op(shape, block), shape, "fwd", device))
        except Exception as exc:  # noqa: BLE001 - a block that cannot run this shape is skipped
            print(f"  block {block} skipped for {shape.key}: {type(exc).__name__}: {exc}", file=sys.stderr)
    if not times:
        raise RuntimeError(f"no generated block runs {shape.key}; run {REGENERATE}")
    if None in times.values():  # smoke run: nothing was timed, take the default block
        block = DEFAULT_BLOCK if DEFAULT_BLOCK in times else next(iter(times))
    else:
        block = min(times, key=times.get)
    if cache_path is not None:
        cache[key] = list(block)
        write_text(cache_path, json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return block


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"


# ----------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------
def measure(shapes, modes=MODES, providers=PROVIDERS, device="cuda", timer=gpu_ms,
            cache_path: Path | None = BLOCK_CACHE, retune=False, compile_flex=True) -> list[dict]:
    """One row per (shape, mode): TFLOP/s per provider, or ``n/a (why)``."""
    rows = []
    for shape in shapes:
        block = best_block(shape, device, timer, cache_path, retune) if "flashproof" in providers else None
        ops = {
            "flashproof": lambda: flashproof_op(shape, block),
            TMA: lambda: flashproof_op(shape, block, tma=True),
            "sdpa-flash": lambda: sdpa_flash_op(shape),
            "flex": lambda: flex_op(shape, device, compile_flex),
        }
        for mode in modes:
            row = dict(asdict(shape), mode=mode, block=block, ms={}, tflops={}, na={})
            for name in providers:
                if name == TMA and mode == "bwd":
                    row["na"][name] = "n/a (forward-only: the backward is flashproof's)"
                    continue
                try:
                    fn = runner(ops[name](), shape, mode, device)
                except Exception as exc:  # noqa: BLE001 - reported, never replaced by another kernel
                    row["na"][name] = _why(name, mode, block, exc)
                    continue
                ms = timer(fn)
                row["ms"][name] = ms
                row["tflops"][name] = None if ms is None else shape.flops(mode) / (ms * 1e-3) / 1e12
            rows.append(row)
    return rows


def backward_generated(block) -> bool:
    """Whether the generator emitted backward kernels for ``block`` (``KERNELS[block]`` kinds)."""
    import generated

    return any(kind.startswith("bwd") for kind in generated.KERNELS.get(tuple(block), {}))


def _why(provider: str, mode: str, block, exc: Exception) -> str:
    first_line = (str(exc).strip().splitlines() or [""])[0][:60]
    if provider == "flashproof" and mode != "fwd":
        if not backward_generated(block):
            return "n/a (backward not generated)"
        return f"n/a (backward failed: {type(exc).__name__}: {first_line})"
    return f"n/a ({type(exc).__name__}: {first_line})"


HEADER = ["N", "D", "causal", "B x H", "mode", "block", *PROVIDERS, "vs sdpa", "vs flex", "TMA vs ptr"]


def _cell(row, name, meaningful):
    if name in row["na"]:
        return row["na"][name]
    if name not in row["tflops"]:
        return "-"
    return f"{row['tflops'][name]:.1f}" if meaningful else "ran"


def _ratio(row, peer, meaningful, mine="flashproof"):
    t = row["tflops"]
    if not meaningful or mine not in t or peer not in t:
        return "-"
    return f"{t[mine] / t[peer]:.2f}x"


def table_cells(rows, meaningful=True):
    return [[r["n"], r["d"], "yes" if r["causal"] else "no", f"{r['batch']}x{r['heads']}", r["mode"],
             "x".join(map(str, r["block"])) if r["block"] else "-",
             *(_cell(r, p, meaningful) for p in PROVIDERS),
             _ratio(r, "sdpa-flash", meaningful), _ratio(r, "flex", meaningful),
             _ratio(r, "flashproof", meaningful, mine=TMA)] for r in rows]


def plot(rows, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["d"], r["causal"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (d, causal) in zip(axes[0], panels):
        for pi, name in enumerate(PROVIDERS):
            for mode, style in (("fwd", "-"), ("bwd", ":"), ("fwd+bwd", "--")):
                pts = [(r["n"], r["tflops"][name]) for r in rows
                       if (r["d"], r["causal"], r["mode"]) == (d, causal, mode) and r["tflops"].get(name) is not None]
                if pts:
                    ax.plot(*zip(*pts), style, color=f"C{pi}", marker="o", label=f"{name} {mode}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"D={d}, {'causal' if causal else 'non-causal'}, bf16")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown_page(rows, meaningful: bool, device: str, plot_name: str | None) -> str:
    v = versions()
    if meaningful:
        results = (f"## Results\n\nMeasured on **{device_name(device)}**, torch {v['torch']}, "
                   f"triton {v['triton']}, bf16, `triton.testing.do_bench` (median ms).\n\n"
                   + markdown_table(HEADER, table_cells(rows)) + "\n")
        if plot_name:
            results += f"\n![TFLOP/s against sequence length](../assets/perf/{plot_name})\n"
    else:
        results = ("## Results\n\n**No GPU figures are recorded yet.** The sessions that built this "
                   "benchmark had no GPU; only the interpreted smoke run has been executed, and it "
                   "times nothing. Run the command above on an H100-class GPU with `--markdown` to "
                   "replace this section with measured figures.\n\n"
                   f"What the smoke run on {device_name(device)} (torch {v['torch']}, triton "
                   f"{v['triton']}) reports: which provider ran each mode (`ran`) and why the "
                   "others could not.\n\n" + markdown_table(HEADER, table_cells(rows, meaningful=False))
                   + "\n")
    return f"""# GPU benchmark

<!-- generated by `python -m benchmarks.attention --markdown`; do not edit by hand -->

`python -m benchmarks.attention` measures forward, backward and forward+backward TFLOP/s of
flashproof's generated kernels beside torch SDPA with the flash backend pinned and
FlexAttention, all in the same run.

## What it measures

- Shapes: `N` = 512 … 16384, head dim 64 and 128, causal and not, bf16; batch = 16384 / N
  and heads = 2048 / D (FlashAttention-2's benchmark setup), inputs `(batch, heads, N, D)`.
- FLOPs: `4 · B · H · N² · D` for the forward, halved when causal; the backward counts 2.5×
  the forward, forward+backward 3.5×. TFLOP/s = FLOPs / median time of
  `triton.testing.do_bench`.
- **flashproof**: `generated.flash_attention` with the fastest generated block config for the
  shape, tuned on the forward and cached in `.artifacts/attention_blocks.json` (per GPU and
  Triton version; `--retune` re-tunes).
- **flashproof (TMA)**: the same call and block with `tma=True`, the opt-in forward that moves
  Q, K, V and O by Hopper's TMA ([Hopper: TMA](hopper.md)). Its backward is flashproof's, so
  its `bwd` row is n/a; on a GPU without TMA it is n/a with the reason. **TMA vs ptr** is its
  ratio to flashproof: the measurement that decides whether `tma` becomes the default.
- **sdpa-flash**: `F.scaled_dot_product_attention` inside
  `torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)`, so a missing flash backend
  is an error rather than a silent fallback.
- **flex**: `torch.compile(flex_attention)`, with a causal `BlockMask` when causal.
- A provider that cannot run a mode is printed as `n/a (why)`: flashproof's backward reads
  `n/a (backward not generated)` for a block emitted without backward kernels. Nothing is
  substituted.
- The table gives flashproof's ratio to each peer. The goals (issue 7): forward ≥ 1.2× SDPA
  flash and ≥ 1.0× FlexAttention for N ≥ 2k; backward ≥ 1.0× SDPA.

## How to run it on a GPU

```bash
.venv/bin/python -m benchmarks.attention --markdown          # full sweep, writes this page + plot
.venv/bin/python -m benchmarks.attention --n 4096 --head-dim 128 --causal   # one shape
.venv/bin/python -m benchmarks.attention --json results.json --plot tflops.png
```

A full sweep is 24 shapes × 3 modes × 4 providers plus one compilation of FlexAttention per
shape; expect several minutes. On a machine without CUDA the same code path runs a tiny
interpreted case instead (`TRITON_INTERPRET=1 … --smoke`; `tests/test_benchmark_smoke.py`),
which checks that every provider runs and agrees, and prints that no timing is meaningful.

{results}"""


def _check_agreement(shapes, device, compile_flex) -> list[str]:
    """Smoke only: every provider's forward agrees with SDPA (catches a broken code path)."""
    lines = []
    for shape in shapes:
        q, k, v = inputs(shape, device, requires_grad=False)
        ref = sdpa_flash_op(shape)(q, k, v).float()
        ops = {"flashproof": flashproof_op(shape, generated_blocks()[0]),
               TMA: flashproof_op(shape, generated_blocks()[0], tma=True),
               "flex": flex_op(shape, device, compile_flex)}
        for name in AGREEMENT:
            op = ops[name]
            err = (op(q, k, v).float() - ref).abs().max().item()
            ok = err < 2e-2  # bf16: 8 mantissa bits; outputs are O(1)
            lines.append(f"{shape.key} {name} vs sdpa-flash: max |diff| = {err:.2e} "
                         f"({'ok' if ok else 'MISMATCH'})")
            if not ok:
                raise AssertionError(lines[-1])
    return lines


def smoke_run(ap: argparse.ArgumentParser, asked: bool) -> bool:
    """Whether this run is the interpreted smoke case (``--smoke``, or no CUDA device); an
    argparse error naming the fix when the Triton interpreter is off."""
    smoke = asked or not torch.cuda.is_available()
    if smoke and not interpreting():
        ap.error(f"no CUDA device: the smoke run needs the Triton interpreter; "
                 f"run TRITON_INTERPRET=1 {ap.prog} --smoke")
    return smoke


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.attention", description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny interpreted case (default without CUDA)")
    ap.add_argument("--n", type=int, nargs="+", default=list(SEQ_LENS))
    ap.add_argument("--head-dim", type=int, nargs="+", default=list(HEAD_DIMS))
    ap.add_argument("--causal", dest="causal", action="store_const", const=(True,), default=(False, True))
    ap.add_argument("--non-causal", dest="causal", action="store_const", const=(False,))
    ap.add_argument("--mode", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--retune", action="store_true", help="ignore the cached best block configs")
    ap.add_argument("--block-cache", type=Path, default=BLOCK_CACHE)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="plot path (default with --markdown: docs/assets/perf/)")
    ap.add_argument("--markdown", type=Path, nargs="?", const=DOCS_PERF / "benchmark.md")
    args = ap.parse_args(argv)

    smoke = smoke_run(ap, args.smoke)
    if smoke:
        print(f"NOTE: {NO_TIMING}. The numbers below only show that each path ran.")
        device, timer, shapes, compile_flex = "cpu", smoke_ms, SMOKE_SHAPES, False
        # eager FlexAttention on CPU warns that it is unfused: known, and nothing is timed here
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        for line in _check_agreement(shapes, device, compile_flex):
            print(line)
    else:
        device, timer, compile_flex = "cuda", gpu_ms, True
        shapes = sweep(args.n, args.head_dim, args.causal)
    v = versions()
    print(f"device: {device_name(device)}; torch {v['torch']}; triton {v['triton']}")
    rows = measure(shapes, args.mode, device=device, timer=timer,
                   cache_path=None if smoke else args.block_cache, retune=args.retune,
                   compile_flex=compile_flex)
    print(text_table(HEADER, table_cells(rows, meaningful=not smoke)))
    if smoke:
        print(f"NOTE: {NO_TIMING}: TFLOP/s columns say 'ran' where the provider ran.")
    if args.json:
        write_text(args.json, json.dumps(dict(device=device_name(device), versions=v, smoke=smoke,
                                               rows=rows), indent=1) + "\n")
    plot_path = args.plot
    if plot_path is None and args.markdown and not smoke:
        plot_path = ASSETS_PERF / f"benchmark_{device_name(device).replace(' ', '_')}.png"
    if plot_path:
        print(f"plot: {plot(rows, plot_path)}")
    if args.markdown:
        name = plot_path.name if plot_path and not smoke else None
        write_text(args.markdown, markdown_page(rows, not smoke, device, name))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
