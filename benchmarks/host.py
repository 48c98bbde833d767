"""Host cost of one call: microseconds per call of each public entry point with its kernel launches
stubbed out (the Python work around the kernels: checks, dispatch, custom op, allocations), and
how many device->host syncs each call makes.

    python -m benchmarks.host                      # the table, default sizes (decode: B=8, a 4k cache)
    python -m benchmarks.host --tiny               # tiny tensors, few calls (the smoke test's run)
    python -m benchmarks.host --profile decode     # cProfile of one case: where the microseconds go

Each figure is the median over rounds of the µs per call in this process's CPU time (the one to
read on a shared machine, where other processes stretch wall time) and in wall time.
CPU tensors (``TRITON_INTERPRET=1`` is set before the kernels are imported): the host work is
the same Python as on a GPU, but for CUDA's own calls (the device's properties, stream lookups),
which a GPU run adds. A launch is stubbed by replacing ``kernel[grid]`` (Triton's
``KernelInterface.__getitem__``, which both a compiled and an interpreted kernel use) by a
function that counts the launch and does nothing, so each case also reports its launches: a case
that launched nothing would be measuring a shortcut. Syncs are counted by ``HostSyncGuard``
(``aten._local_scalar_dense``, size-dependent ops, copies to the host, ``.tolist()``,
``.item()``, ``.cpu()``, ``.numpy()``): each one stalls the host until the GPU is done and
cannot be captured in a CUDA graph.

FlashAttention's Python wrapper is measured the same way where ``flash_attn`` is installed (its
CUDA extension replaced by a stub returning empty outputs); without it, that column says so.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import math
import os
import pstats
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable

os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU tensors: before any generated module is imported

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from benchmarks.common import text_table, versions  # noqa: E402


# ----------------------------------------------------------------------------------------
# Launches stubbed, syncs counted
# ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def stubbed_launches():
    """Within: every ``kernel[grid](...)`` launch is counted and skipped. Yields the list of the
    launched kernels' names."""
    from triton.runtime.jit import KernelInterface

    launched: list[str] = []

    def getitem(kernel, grid):
        name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "fn", None), "__name__", "kernel")
        return lambda *args, **kwargs: launched.append(name)

    original = KernelInterface.__getitem__
    KernelInterface.__getitem__ = getitem
    try:
        yield launched
    finally:
        KernelInterface.__getitem__ = original


aten = torch.ops.aten
#: ops whose result the host must wait for: a scalar read back, or an output size that depends on
#: the values (``nonzero`` and its kin)
SYNC_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
            aten._unique2.default, aten.unique_dim.default, aten.unique_consecutive.default,
            aten.repeat_interleave.Tensor, aten.nonzero_static.default}
#: indexing ops that, given a boolean mask, run ``nonzero`` on it first (``t[mask]``, ``t[mask] = x``)
BOOL_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
#: tensor methods that read values on the host, or size an output by them: patched while a guard
#: is on, so they are seen wherever they run (a dispatch mode does not see the ops inside a custom
#: op's Python body, nor a CPU tensor's ``.tolist()``)
SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero",
                "unique", "masked_select", "__getitem__", "__setitem__")
#: torch functions of the same kind
SYNC_FUNCTIONS = ("nonzero", "unique", "masked_select", "unique_consecutive")


def _boolean_key(key) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, torch.Tensor) and k.dtype in (torch.bool, torch.uint8) for k in keys)


@dataclass
class Sync:
    what: str
    where: str  # the innermost frame of flashproof's code that asked for it


class HostSyncGuard(TorchDispatchMode):
    """Records every device->host sync made inside it, with the flashproof frame that made it: the
    ``SYNC_METHODS`` and ``SYNC_FUNCTIONS`` (``t[mask]`` and ``t[mask] = x`` with a boolean mask),
    and, as a dispatch mode, the ``SYNC_OPS``, boolean indexing and copies to the CPU of a tensor on
    another device. With ``fail=True`` raises ``AssertionError`` at the first one not made inside a
    function named in ``allowed`` (the syncs that are there by design).

    ``dispatch=False``: the patched methods and functions only, no dispatch mode. An active dispatch
    mode sends an eager call through its custom op (``generator.runtime.plans.direct``), so that is
    how the path a plain eager call takes, which runs the op's body itself, is watched."""

    def __init__(self, fail: bool = False, allowed: tuple[str, ...] = (), dispatch: bool = True):
        super().__init__()
        self.fail, self.allowed, self.syncs, self.dispatch = fail, allowed, [], dispatch
        self._patched: list[tuple[object, str, object]] = []
        self._depth = 0  # inside a patched call: its aten ops are the same sync, not another

    def _record(self, what: str):
        frames = [f for f in traceback.extract_stack()[:-2]
                  if f"{os.sep}generator{os.sep}" in f.filename or f"{os.sep}generated{os.sep}" in f.filename
                  or f"{os.sep}spec{os.sep}" in f.filename]
        where = f"{frames[-1].filename.rsplit(os.sep, 2)[-2]}/{frames[-1].filename.rsplit(os.sep, 1)[-1]}:" \
                f"{frames[-1].lineno} {frames[-1].name}" if frames else "outside flashproof"
        by_design = any(f.name in self.allowed for f in frames)
        self.syncs.append(Sync(what, where))
        if self.fail and not by_design:
            raise AssertionError(f"host sync on the call path: {what} at {where} (a CUDA graph cannot capture it)")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._depth:
            pass
        elif func in SYNC_OPS:
            self._record(str(func))
        elif func in BOOL_INDEX_OPS and _boolean_key(tuple(args[1])):
            self._record(f"{func} with a boolean mask")  # nonzero on the mask: a size the host must read
        elif func in (aten._to_copy.default, aten.copy_.default):
            src = args[1] if func is aten.copy_.default else args[0]
            dst = args[0].device if func is aten.copy_.default else kwargs.get("device") or src.device
            if isinstance(src, torch.Tensor) and src.device.type != "cpu" and torch.device(dst).type == "cpu":
                self._record(f"{func} to the host")
        return func(*args, **kwargs)

    def _patch(self, owner, name: str, label: str):
        original, own = getattr(owner, name), name in vars(owner)

        def guarded(*args, **kwargs):
            indexing = name in ("__getitem__", "__setitem__")
            if not torch.compiler.is_compiling() and (not indexing or _boolean_key(args[1])):
                self._record(label + (" with a boolean mask" if indexing else ""))
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
        self._patched.append((owner, name, original if own else None))
        setattr(owner, name, guarded)

    def __enter__(self):
        for name in SYNC_METHODS:
            self._patch(torch.Tensor, name, f"Tensor.{name}()")
        for name in SYNC_FUNCTIONS:
            self._patch(torch, name, f"torch.{name}()")
        return super().__enter__() if self.dispatch else self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._patched):
            if original is None:  # inherited (torch.Tensor from TensorBase): drop the override
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._patched.clear()
        return super().__exit__(*exc) if self.dispatch else None


# ----------------------------------------------------------------------------------------
# The cases: each builds its tensors once and returns the call to time
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    batch: int = 8
    heads_q: int = 32
    heads_kv: int = 8
    head_dim: int = 128
    cache: int = 4096       # decode: keys in the cache per sequence
    seq: int = 1024         # dense: N_q = N_k; varlen: each of the `batch` segments
    dtype: torch.dtype = torch.float16


TINY = Sizes(batch=2, heads_q=4, heads_kv=2, head_dim=16, cache=64, seq=32)


def _decode(s: Sizes, num_splits: int) -> Callable:
    from generated import flash_attention_with_kvcache

    q = torch.randn(s.batch, 1, s.heads_q, s.head_dim, dtype=s.dtype)
    k_cache = torch.empty(s.batch, s.cache, s.heads_kv, s.head_dim, dtype=s.dtype)
    v_cache = torch.empty_like(k_cache)
    lengths = torch.full((s.batch,), s.cache - 1, dtype=torch.int32)
    return lambda: flash_attention_with_kvcache(q, k_cache, v_cache, lengths, causal=True, num_splits=num_splits)


def _dense(s: Sizes) -> Callable:
    from generated import flash_attention

    q = torch.randn(s.batch // 4 or 1, s.heads_q, s.seq, s.head_dim, dtype=s.dtype)
    k = torch.empty(q.shape[0], s.heads_kv, s.seq, s.head_dim, dtype=s.dtype)
    v = torch.empty_like(k)
    return lambda: flash_attention(q, k, v, causal=True)


def document_mask(n: int, documents: int = 4) -> torch.Tensor:
    """A bool ``(n, n)`` causal mask over ``documents`` packed documents of equal length (block-diagonal,
    lower triangular: ``benchmarks.packed``'s dense bool mask layout)."""
    doc = torch.arange(n) * documents // max(n, 1)
    return (doc[:, None] == doc[None, :]) & torch.ones((n, n), dtype=torch.bool).tril()


def _dense_mask(s: Sizes) -> Callable:
    """A dense bool mask (packed documents), through the custom op: the checks planned per signature, the
    block map built from the mask's content every call (device work, O(N^2) on these CPU tensors: N is
    at most 128 here, so the row stays the host path's cost)."""
    from generated import flash_attention

    n = min(s.seq, 128)
    q = torch.randn(1, s.heads_q, n, s.head_dim, dtype=s.dtype)
    k = torch.empty(1, s.heads_kv, n, s.head_dim, dtype=s.dtype)
    v = torch.empty_like(k)
    mask = document_mask(n)
    return lambda: flash_attention(q, k, v, mask=mask)


def _dense_grad(s: Sizes) -> Callable:
    """The training forward: q, k, v require grad, so the call records the op's autograd
    (``autograd.DirectForward`` in eager mode, past the custom op's dispatch)."""
    from generated import flash_attention

    q = torch.randn(s.batch // 4 or 1, s.heads_q, s.seq, s.head_dim, dtype=s.dtype, requires_grad=True)
    k = torch.empty(q.shape[0], s.heads_kv, s.seq, s.head_dim, dtype=s.dtype, requires_grad=True)
    v = torch.empty_like(k, requires_grad=True)
    return lambda: flash_attention(q, k, v, causal=True)


def _compiled(build: Callable) -> Callable:
    """The case ``build`` makes, under ``torch.compile(backend="eager", fullgraph=True)``: the host
    cost a compiled graph pays per call (dynamo's guards, the device clamps that replace the value
    checks, the custom op's dispatch and its body's planned launch) without inductor's codegen."""
    def case(s: Sizes) -> Callable:
        call = build(s)
        compiled = torch.compile(lambda: call(), backend="eager", fullgraph=True)
        return compiled
    return case


def _varlen(s: Sizes) -> Callable:
    from generated import flash_attention_varlen

    total = s.batch * s.seq
    q = torch.randn(total, s.heads_q, s.head_dim, dtype=s.dtype)
    k = torch.empty(total, s.heads_kv, s.head_dim, dtype=s.dtype)
    v = torch.empty_like(k)
    cu = torch.arange(0, total + 1, s.seq, dtype=torch.int32)
    return lambda: flash_attention_varlen(q, k, v, cu, cu, s.seq, s.seq, causal=True)


def _merge(s: Sizes) -> Callable:
    from generated import merge_state

    o_a = torch.randn(s.batch, s.heads_q, s.head_dim, dtype=s.dtype)
    lse_a = torch.randn(s.batch, s.heads_q)
    o_b, lse_b = torch.randn_like(o_a), torch.randn_like(lse_a)
    return lambda: merge_state(o_a, lse_a, o_b, lse_b)


def _bare_custom_op(s: Sizes) -> Callable:
    """The floor: a ``torch.library.custom_op`` that allocates its output and returns it."""
    op = _bare_op()
    q = torch.randn(s.batch, 1, s.heads_q, s.head_dim, dtype=s.dtype)
    return lambda: op(q)


_BARE = None


def _bare_op():
    global _BARE
    if _BARE is None:
        @torch.library.custom_op("flashproof_bench::bare", mutates_args=())
        def bare(q: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(q)
        _BARE = bare
    return _BARE


CASES: dict[str, tuple[str, Callable[[Sizes], Callable]]] = {
    "decode": ("flash_attention_with_kvcache, num_splits=1", lambda s: _decode(s, 1)),
    "decode-splits": ("flash_attention_with_kvcache, num_splits=4", lambda s: _decode(s, 4)),
    "decode-auto": ("flash_attention_with_kvcache, num_splits=0 (heuristic)", lambda s: _decode(s, 0)),
    "dense": ("flash_attention forward, causal", _dense),
    "dense-grad": ("flash_attention forward, causal, inputs requiring grad (the op's autograd)", _dense_grad),
    "decode-compiled": ("the decode case under torch.compile(backend='eager', fullgraph=True)",
                        _compiled(lambda s: _decode(s, 1))),
    "dense-compiled": ("the dense case under torch.compile(backend='eager', fullgraph=True)", _compiled(_dense)),
    "dense-mask": ("flash_attention forward, a dense bool mask (4 causal documents, N <= 128)", _dense_mask),
    "varlen": ("flash_attention_varlen forward, causal", _varlen),
    "merge": ("merge_state", _merge),
    "custom-op": ("a bare torch.library.custom_op (the floor)", _bare_custom_op),
}


# ----------------------------------------------------------------------------------------
# FlashAttention's wrapper, its extension stubbed
# ----------------------------------------------------------------------------------------
class _FlashStub:
    """Stands in for ``flash_attn_2_cuda``: each entry returns empty outputs of the right shapes."""

    def fwd(self, q, k, v, out, *args, **kwargs):
        out = torch.empty_like(q) if out is None else out
        return out, q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32), None, None

    def varlen_fwd(self, q, k, v, out, cu_seqlens_q, *args, **kwargs):
        out = torch.empty_like(q) if out is None else out
        return out, q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32), None, None

    def fwd_kvcache(self, q, k_cache, v_cache, *args, **kwargs):
        return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


def flash_attn_cases(s: Sizes) -> dict[str, Callable] | str:
    """FlashAttention's calls for the same cases, or why they cannot be measured here."""
    try:
        import flash_attn.flash_attn_interface as fa
    except Exception as exc:  # noqa: BLE001 - not installed, or its CUDA extension cannot load
        return f"flash_attn not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"
    name = "flash_attn_gpu" if hasattr(fa, "flash_attn_gpu") else "flash_attn_cuda"
    if not hasattr(fa, name):
        return f"flash_attn {getattr(__import__('flash_attn'), '__version__', '?')}: no {name} to stub"
    setattr(fa, name, _FlashStub())
    q = torch.randn(s.batch, 1, s.heads_q, s.head_dim, dtype=s.dtype)
    k_cache = torch.empty(s.batch, s.cache, s.heads_kv, s.head_dim, dtype=s.dtype)
    lengths = torch.full((s.batch,), s.cache - 1, dtype=torch.int32)
    qd = torch.randn(s.batch // 4 or 1, s.seq, s.heads_q, s.head_dim, dtype=s.dtype)
    kd = torch.empty(qd.shape[0], s.seq, s.heads_kv, s.head_dim, dtype=s.dtype)
    qg, kg = qd.clone().requires_grad_(), kd.clone().requires_grad_()
    total = s.batch * s.seq
    qv, kv = torch.randn(total, s.heads_q, s.head_dim, dtype=s.dtype), torch.empty(total, s.heads_kv, s.head_dim, dtype=s.dtype)
    cu = torch.arange(0, total + 1, s.seq, dtype=torch.int32)
    return {
        "decode": lambda: fa.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=lengths, causal=True, num_splits=1),
        "decode-splits": lambda: fa.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=lengths, causal=True,
                                                            num_splits=4),
        "decode-auto": lambda: fa.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=lengths, causal=True),
        "dense": lambda: fa.flash_attn_func(qd, kd, kd, causal=True),
        "dense-grad": lambda: fa.flash_attn_func(qg, kg, kg, causal=True),
        "varlen": lambda: fa.flash_attn_varlen_func(qv, kv, kv, cu, cu, s.seq, s.seq, causal=True),
    }


# ----------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------
def time_call(call: Callable, number: int, repeat: int) -> tuple[float, float]:
    """``(cpu, wall)``: the median over ``repeat`` rounds of the µs per call over ``number`` calls
    (after a warm-up), in this process's CPU time and in wall time. The CPU time is the figure to
    read on a shared machine: other processes' load stretches wall time, not it."""
    for _ in range(max(3, number // 10)):
        call()
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(number):
            call()
        cpu.append((time.process_time() - c0) / number * 1e6)
        wall.append((time.perf_counter() - w0) / number * 1e6)
    return statistics.median(cpu), statistics.median(wall)


def measure(sizes: Sizes = Sizes(), number: int = 200, repeat: int = 7, cases=tuple(CASES)) -> list[dict]:
    """One row per case: µs per call, launches and host syncs per call, FlashAttention's µs."""
    flash = flash_attn_cases(sizes)
    rows = []
    with stubbed_launches() as launched:
        for name in cases:
            what, build = CASES[name]
            call = build(sizes)
            call()  # first call: imports, module lookups
            launched.clear()
            with HostSyncGuard(dispatch=False) as guard:  # the path timed (a dispatch mode would divert it)
                call()
            row = dict(case=name, what=what, launches=list(launched), syncs=[f"{s.what} at {s.where}" for s in guard.syncs])
            row["us"], row["wall_us"] = time_call(call, number, repeat)
            if isinstance(flash, dict) and name in flash:
                flash[name]()
                row["flash_attn_us"], row["flash_attn_wall_us"] = time_call(flash[name], number, repeat)
            rows.append(row)
    return rows


def profile(name: str, sizes: Sizes = Sizes(), calls: int = 2000, top: int = 25) -> str:
    """cProfile of ``calls`` calls of one case, by own time: where the host cost goes."""
    what, build = CASES[name]
    with stubbed_launches():
        call = build(sizes)
        for _ in range(20):
            call()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            call()
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return f"{what}: {calls} calls\n" + out.getvalue()


def report(rows: list[dict], flash_note: str | None) -> str:
    header = ["case", "CPU µs/call", "wall µs/call", "FlashAttention CPU µs/call", "ratio (ours / FlashAttention)",
              "launches", "host syncs", "what"]
    cells = [[r["case"], f"{r['us']:.1f}", f"{r['wall_us']:.1f}", f"{r['flash_attn_us']:.1f}" if "flash_attn_us" in r else "-",
              f"{r['us'] / r['flash_attn_us']:.2f}" if r.get("flash_attn_us") else "-",
              len(r["launches"]), len(r["syncs"]), r["what"]] for r in rows]
    lines = [text_table(header, cells), ""]
    for r in rows:
        for s in r["syncs"]:
            lines.append(f"sync in {r['case']}: {s}")
    if flash_note:
        lines.append(f"FlashAttention: {flash_note}")
    v = versions()
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    lines.append(f"torch {v['torch']}, triton {v['triton']}, python {v['python']}, {os.cpu_count()} CPUs{load}, "
                 f"torch threads {torch.get_num_threads()}; launches stubbed, CPU tensors")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.host", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny tensors and few calls (a smoke run)")
    ap.add_argument("--case", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--number", type=int, default=None, help="calls per timing round (default 200; --tiny 5)")
    ap.add_argument("--repeat", type=int, default=None, help="timing rounds, median taken (default 7; --tiny 1)")
    ap.add_argument("--profile", choices=list(CASES), help="print a cProfile of this case instead")
    args = ap.parse_args(argv)
    sizes = TINY if args.tiny else Sizes()
    if args.profile:
        print(profile(args.profile, sizes, calls=50 if args.tiny else 2000))
        return 0
    rows = measure(sizes, args.number or (5 if args.tiny else 200), args.repeat or (1 if args.tiny else 7),
                   tuple(args.case))
    flash = flash_attn_cases(sizes)
    print(f"host cost per call, {sizes}")
    print(report(rows, flash if isinstance(flash, str) else None))
    return 0 if all(r["launches"] for r in rows if r["case"] != "custom-op") and all(
        math.isfinite(r["us"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
