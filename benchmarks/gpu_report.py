"""On a CUDA machine: run the kernel tests on the GPU and the benchmark, and record both in the docs.

CI runs the kernel tests on CPU under Triton's interpreter. Issues 4 and 6 also ask for the
same tests to pass on CUDA, and issue 7 for the benchmark's figures, recorded in the repo.
This is that one command:

1. ``FLASHPROOF_TEST_DEVICE=cuda python -m pytest`` over ``TEST_FILES`` (the same cases, drawn
   on CPU with the same seeds and moved to the GPU; the float64 reference stays on CPU),
   without ``TRITON_INTERPRET``, so the kernels are compiled for the GPU;
2. ``python -m benchmarks.attention --json ...`` (the full sweep unless ``--bench-args`` narrows it):
   flashproof's pointer forward and its opt-in TMA forward (``tma=True``) side by side, with
   their ratio (``TMA vs ptr``), which is what decides whether TMA becomes the default;
3. ``python -m benchmarks.packed --json ...``: packed documents three ways (varlen, a dense bool
   mask, padding), timed, beside the HBM model's bytes and FLOPs skipped;
4. ``docs/performance/gpu.md``: GPU model, torch / triton / CUDA versions, the pytest summary
   and the benchmark table; and ``docs/performance/benchmark.md`` + its plot (issue 7's page).

Each step's result is kept in ``.artifacts/gpu_report/`` and the pages are written from all
that is kept, so the steps can run in separate commands (``--only tests``, ``--only bench``)
when one command may not run long enough for both; benchmark rows of several runs merge by
shape and mode. ``benchmarks.static`` is not run: it needs no GPU and ``static.md`` holds it.

    python -m benchmarks.gpu_report                        # tests + full benchmark sweep
    python -m benchmarks.gpu_report --only tests
    python -m benchmarks.gpu_report --only bench --bench-args="--head-dim 64"
    python -m benchmarks.gpu_report --only packed

Without CUDA it exits 2 and says so: nothing here means anything on a CPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys

from benchmarks.common import ARTIFACTS, ASSETS_PERF, DOCS_PERF, ROOT, markdown_table, versions, write_text
from generator.runtime.launch import interpreting

TEST_FILES = ("tests/test_forward.py", "tests/test_backward.py", "tests/test_api.py", "tests/test_softmax.py",
              "tests/test_tma.py", "tests/test_varlen.py", "tests/test_mla.py", "tests/test_score_mods.py",
              "tests/test_dropout.py")
STATE = ARTIFACTS / "gpu_report"
PAGE = DOCS_PERF / "gpu.md"
NO_CUDA = ("no CUDA device: python -m benchmarks.gpu_report runs the kernel tests and the benchmark on a GPU "
           "and records them; on this machine run the tests on CPU instead "
           "(TRITON_INTERPRET=1 python -m pytest) or run this on a machine with a GPU")
#: pytest's final line, e.g. "150 passed, 2 warnings in 81.20s (0:01:21)"
SUMMARY = re.compile(r"\d+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.* in [\d.]+s")


def _torch():
    import torch

    return torch


def cuda_problem() -> str | None:
    """Why this machine cannot make the report (None when it can)."""
    if not _torch().cuda.is_available():
        return NO_CUDA
    if interpreting():
        return "TRITON_INTERPRET is set: the kernels would be interpreted, not compiled; unset it"
    return None


def environment() -> dict:
    torch = _torch()
    major, minor = torch.cuda.get_device_capability()
    # a device machine gets a copy of the working tree without .git: the caller says the commit
    commit = os.environ.get("GPU_REPORT_COMMIT")
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    return dict(gpu=torch.cuda.get_device_name(), capability=f"sm_{major}{minor}", cuda=torch.version.cuda,
                commit=commit, date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                **versions())


def _workers(requested: int | None) -> list[str]:
    """``-n N`` for pytest-xdist when it is installed: compiling the kernels is CPU-bound."""
    try:
        import xdist  # noqa: F401
    except ImportError:
        return []
    n = requested if requested is not None else min(8, os.cpu_count() or 1)
    return ["-n", str(n)] if n > 1 else []


# ----------------------------------------------------------------------------------------
# The steps
# ----------------------------------------------------------------------------------------
#: ``--limit``: seconds a step may run (None: no limit). A lent GPU comes with minutes, not hours.
LIMIT: dict = {"s": None}


def _run(cmd: list[str], env=None, stdout=None) -> tuple[int, bool]:
    """Run ``cmd`` in its own process group; past ``LIMIT`` the whole group (pytest's workers, the
    compilers) is killed. Returns (exit status, whether the limit stopped it)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None,
                            text=True, start_new_session=True)
    try:
        return proc.wait(timeout=LIMIT["s"]), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"stopped at the {LIMIT['s']} s limit: {shlex.join(cmd[1:])}", flush=True)
        return 124, True


_WORDS = r"PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
#: one test's result as pytest prints it: ``-v``'s ``tests/x.py::t[a] PASSED [ 12%]`` (``SKIPPED (why)``),
#: xdist's ``[gw3] [ 12%] FAILED tests/x.py::t[a]`` and the short summary's (``-rfE``)
#: ``FAILED tests/x.py::t[a] - AssertionError: ...``
RESULT = re.compile(rf"^(?:\[gw\d+\]\s+\[\s*\d+%\]\s+)?"  # xdist's worker and progress
                    rf"(?:(?P<word>{_WORDS})\s+(?P<id>\S.*?::.+?)(?:\s+-\s+(?P<why>.*?))?"  # word first
                    rf"|(?P<id_v>\S.*?::.+?)\s+(?P<word_v>{_WORDS})(?:\s+\((?P<why_v>.*)\))?"  # -v: id first
                    rf"(?:\s+\[\s*\d+%\])?)\s*$")


def parse_results(log: str) -> dict[str, tuple[str, str]]:
    """Every test id pytest printed a result for, in order: ``{id: (word, why)}`` (``why``: the short
    summary's reason, ``""`` where only the progress line was printed); a test printed twice (its ``-v``
    line, then its ``-rfE`` summary line) keeps its last word and the reason it was given."""
    results: dict[str, tuple[str, str]] = {}
    for line in log.splitlines():
        m = RESULT.match(line.strip())
        if m:
            test = m.group("id") or m.group("id_v")
            why = m.group("why") or m.group("why_v") or results.get(test, ("", ""))[1]
            results[test] = (m.group("word") or m.group("word_v"), why)
    return results


def failures_of(results: dict[str, tuple[str, str]]) -> list[str]:
    """``FAILED <id>`` / ``ERROR <id>``, with `` - <reason>`` where the short summary gave one."""
    return [f"{word} {test}" + (f" - {why}" if why else "") for test, (word, why) in results.items()
            if word in ("FAILED", "ERROR")]


def _partial_summary(results: dict[str, tuple[str, str]]) -> str:
    """What a run stopped at its time limit had done: its tests' results counted."""
    counts: dict = {}
    for word, _ in results.values():
        counts[word] = counts.get(word, 0) + 1
    done = ", ".join(f"{n} {word.lower()}" for word, n in sorted(counts.items())) or "no test finished"
    return f"stopped at the {LIMIT['s']} s time limit: {done} before it"


def run_tests(workers: int | None, extra: list[str]) -> dict:
    """The kernel test files on the GPU; the pytest summary, failures and exit status."""
    env = {**os.environ, "FLASHPROOF_TEST_DEVICE": "cuda"}
    env.pop("TRITON_INTERPRET", None)
    verbosity = "-v" if LIMIT["s"] else "-q"  # -v: a run stopped at its limit still says which tests ran
    cmd = [sys.executable, "-m", "pytest", verbosity, "-rfE", "-p", "no:cacheprovider", *_workers(workers),
           *TEST_FILES, *extra]
    print("$ FLASHPROOF_TEST_DEVICE=cuda " + shlex.join(cmd[1:]), flush=True)
    # pytest writes straight into the log file, so a run stopped by a time limit leaves what it printed
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "pytest.log", "w") as log_file:
        returncode, stopped = _run(cmd, env=env, stdout=log_file)
    log = (STATE / "pytest.log").read_text()
    print(log[-4000:])
    results = parse_results(log)  # the one parse: the failures and a stopped run's counts
    if stopped:
        summary = _partial_summary(results)
    else:
        summaries = [line.strip("= ") for line in log.splitlines() if SUMMARY.search(line)]
        summary = summaries[-1] if summaries else f"no pytest summary (exit {returncode}); see the log"
    failures = failures_of(results)
    return dict(command="FLASHPROOF_TEST_DEVICE=cuda python " + shlex.join(cmd[1:]), returncode=returncode,
                summary=summary, failures=failures[:40])


def run_bench(extra: list[str]) -> dict:
    """``benchmarks.attention`` on the GPU; its rows merged with those kept from earlier runs."""
    out = STATE / "attention_part.json"
    cmd = [sys.executable, "-m", "benchmarks.attention", "--json", str(out.relative_to(ROOT)), *extra]
    command = shlex.join(cmd[2:])  # what follows `python -m`, as the page prints it
    print("$ python -m " + command, flush=True)
    returncode, _ = _run(cmd)
    if returncode != 0 or not out.exists():
        return dict(command=command, returncode=returncode or 1, rows=_kept("bench").get("rows", []),
                    decode=_kept("bench").get("decode", {}))
    part = json.loads(out.read_text())
    key = lambda r: (r["n"], r["d"], r["causal"], r["dtype"], r["mode"])  # noqa: E731
    rows = {key(r): r for r in _kept("bench").get("rows", [])}
    rows.update({key(r): r for r in part["rows"]})
    return dict(command=command, returncode=0, rows=sorted(rows.values(), key=key), decode=run_decode_bench())


def run_decode_bench() -> dict:
    """``benchmarks.decode``: KV-cache decode bandwidth, % of HBM peak, beside SDPA and FlexAttention."""
    out = STATE / "decode_part.json"
    cmd = [sys.executable, "-m", "benchmarks.decode", "--json", str(out.relative_to(ROOT))]
    command = shlex.join(cmd[2:])
    print("$ python -m " + command, flush=True)
    returncode, _ = _run(cmd)
    if returncode != 0 or not out.exists():
        return dict(command=command, returncode=returncode or 1,
                    rows=_kept("bench").get("decode", {}).get("rows", []))
    return dict(command=command, returncode=0, rows=json.loads(out.read_text())["rows"])


def run_packed() -> dict:
    """``benchmarks.packed`` on the GPU: its table, or the exit status when it failed."""
    out = STATE / "packed_part.json"
    cmd = [sys.executable, "-m", "benchmarks.packed", "--json", str(out.relative_to(ROOT))]
    print("$ python -m " + shlex.join(cmd[2:]), flush=True)
    returncode, _ = _run(cmd)
    if returncode != 0 or not out.exists():
        return dict(_kept("packed"), returncode=returncode or 1)
    return dict(json.loads(out.read_text()), returncode=0)


def _kept(step: str) -> dict:
    path = STATE / f"{step}.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ----------------------------------------------------------------------------------------
# The pages
# ----------------------------------------------------------------------------------------
def page(env: dict, tests: dict, bench: dict, packed: dict | None = None) -> str:
    from benchmarks import attention
    from generator.checking import TOLERANCES

    forward_tol = ", ".join(f"{str(d).removeprefix('torch.')} {t:g}" for d, t in TOLERANCES.items())
    if tests:
        status = "passed" if tests["returncode"] == 0 else f"**FAILED** (pytest exit {tests['returncode']})"
        failures = "".join(f"- `{line}`\n" for line in tests["failures"])
        tests_md = (f"```bash\n{tests['command']}\n```\n\nResult: **{tests['summary']}** — {status}.\n\n"
                    + (f"Failures:\n\n{failures}\n" if failures else ""))
    else:
        tests_md = "Not run yet: `python -m benchmarks.gpu_report --only tests`.\n"
    if bench.get("rows"):
        bench_md = (f"`python -m {bench['command']}` (exit {bench['returncode']}); bf16, TFLOP/s, "
                    "`triton.testing.do_bench` median. `TMA vs ptr` is the opt-in TMA forward against "
                    "the pointer one ([Hopper: TMA](hopper.md)). What the columns mean: "
                    "[GPU benchmark](benchmark.md).\n\n"
                    + markdown_table(attention.HEADER, attention.table_cells(bench["rows"])) + "\n")
    else:
        bench_md = "Not run yet: `python -m benchmarks.gpu_report --only bench`.\n"
    if packed and packed.get("rows"):
        packed_md = (f"`python -m benchmarks.packed` (exit {packed['returncode']}): {packed['setup']}; median ms of "
                     "`triton.testing.do_bench`, HBM bytes and tile pairs from the model "
                     "([packed sequences](../packed.md)).\n\n"
                     + markdown_table(packed["header"], packed["rows"]) + "\n")
    else:
        packed_md = "Not run yet: `python -m benchmarks.gpu_report --only packed`.\n"
    decode_rows = bench.get("decode", {}).get("rows")
    if decode_rows:
        from benchmarks import decode
        bench_md += ("\n### Decode bandwidth\n\n`python -m benchmarks.decode`: one new token (bf16), ideal bytes "
                     "(K and V once per KV head, q, out) over the median time, as GB/s and % of the HBM peak.\n\n"
                     + markdown_table(decode.HEADER, decode.table_cells(decode_rows)) + "\n")
    return f"""# GPU record

<!-- generated by `python -m benchmarks.gpu_report`; do not edit by hand -->

CI runs every kernel test on CPU under Triton's interpreter. This page records the same
tests run on a GPU, where Triton compiles the kernels, and the benchmark beside torch SDPA
and FlexAttention, both made by `python -m benchmarks.gpu_report`.

| | |
|---|---|
| GPU | {env['gpu']} ({env['capability']}) |
| torch | {env['torch']} (CUDA {env['cuda']}) |
| triton | {env['triton']} |
| python | {env['python']} |
| commit | {env['commit']} |
| recorded | {env['date']} |

## Kernel tests on CUDA

The cases are the CPU run's: inputs are drawn on CPU with the same seeds and moved to the GPU,
the float64 reference runs on CPU, and the kernels' outputs are compared there. Tolerances are
the CPU run's too (forward, relative to `max|v|`: {forward_tol}; backward: see
`tests/test_backward.py`). bf16 is not upcast on the GPU (that is an interpreter workaround),
and fp32 dots use `input_precision="ieee"`, never tf32, so the fp32 tolerances apply unchanged.

{tests_md}
## Benchmark

{bench_md}
## Packed documents: varlen, a dense mask, padding

{packed_md}"""


def write_pages(env: dict, tests: dict, bench: dict, plot: bool, packed: dict | None = None) -> None:
    from benchmarks import attention

    print(f"wrote {write_text(PAGE, page(env, tests, bench, packed))}")
    if bench.get("rows"):
        name = None
        if plot:
            path = ASSETS_PERF / f"benchmark_{env['gpu'].replace(' ', '_')}.png"
            name = attention.plot(bench["rows"], path).name
        print(f"wrote {write_text(DOCS_PERF / 'benchmark.md', attention.markdown_page(bench['rows'], True, 'cuda', name))}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("tests", "bench", "packed"),
                    help="run one step; the pages keep the others' last results")
    ap.add_argument("--workers", type=int, help="pytest-xdist workers (default: min(8, cores); 1 = none)")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. '-x -k forward'")
    ap.add_argument("--bench-args", default="", help="arguments for benchmarks.attention, e.g. '--n 4096'")
    ap.add_argument("--no-plot", action="store_true", help="skip the benchmark plot (no matplotlib)")
    ap.add_argument("--limit", type=float, help="seconds each command may run (the tests, each benchmark); "
                    "a command past it is killed with its workers and the page says so")
    args = ap.parse_args(argv)
    LIMIT["s"] = args.limit

    problem = cuda_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    env = environment()
    print(f"GPU: {env['gpu']} ({env['capability']}); torch {env['torch']}; triton {env['triton']}", flush=True)
    tests, bench, packed = _kept("tests"), _kept("bench"), _kept("packed")
    if args.only in (None, "tests"):
        tests = run_tests(args.workers, shlex.split(args.pytest_args))
        write_text(STATE / "tests.json", json.dumps(tests, indent=1) + "\n")
    if args.only in (None, "bench"):
        bench = run_bench(shlex.split(args.bench_args))
        write_text(STATE / "bench.json", json.dumps(bench, indent=1) + "\n")
    if args.only in (None, "packed"):
        packed = run_packed()
        write_text(STATE / "packed.json", json.dumps(packed, indent=1) + "\n")
    write_pages(env, tests, bench, plot=not args.no_plot, packed=packed)
    ok = all(step.get("returncode", 0) == 0 for step in (tests, bench, packed))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
