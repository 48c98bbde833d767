"""The GPU switch of the kernel tests (FLASHPROOF_TEST_DEVICE) and ``benchmarks.gpu_report``.

Both must refuse clearly where they cannot do what they say: the tests never fall back to the
CPU when asked for CUDA, and the report never writes a page without a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attention_cases
from benchmarks import gpu_report

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_device_switch_names_the_problem(no_cuda, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert attention_cases.device_problem("cpu") is None
    assert "sees no CUDA device" in attention_cases.device_problem("cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "set TRITON_INTERPRET=1" in attention_cases.device_problem("cpu")
    assert "unset FLASHPROOF_TEST_DEVICE" in attention_cases.device_problem("cuda")
    assert "is not one of ('cpu', 'cuda')" in attention_cases.device_problem("gpu")


def test_bad_test_device_stops_the_run():
    """conftest turns the problem into a usage error (exit 4) before any test runs."""
    env = {**os.environ, "FLASHPROOF_TEST_DEVICE": "gpu"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                           "tests/test_softmax.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "FLASHPROOF_TEST_DEVICE='gpu' is not one of" in proc.stderr


def test_on_device_is_the_identity_on_cpu():
    """The default device changes nothing: the same tensor objects reach the kernels."""
    if attention_cases.DEVICE != "cpu":
        pytest.skip("checks the CPU default")
    x = torch.ones(3)
    assert attention_cases.to_device({"a": (x, 1)})["a"][0] is x
    assert attention_cases.on_device(lambda t, *, s: t * s, x, s=2).tolist() == [2.0, 2.0, 2.0]


def test_report_without_cuda_exits_2_and_writes_nothing(no_cuda, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_report, "PAGE", tmp_path / "gpu.md")
    monkeypatch.setattr(gpu_report, "STATE", tmp_path / "state")
    assert gpu_report.main([]) == 2
    assert "error: no CUDA device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_report_page_holds_the_summary_and_the_table():
    env = dict(gpu="NVIDIA H100 80GB HBM3", capability="sm_90", cuda="13.0", commit="abc1234",
               date="2026-01-01 00:00 UTC", python="3.12.3", torch="2.11.0", triton="3.6.0")
    summary = "150 passed, 2 warnings in 81.20s (0:01:21)"
    assert gpu_report.SUMMARY.search(summary) and not gpu_report.SUMMARY.search("collected 150 items")
    tests = dict(command="FLASHPROOF_TEST_DEVICE=cuda python -m pytest ...", returncode=1, summary=summary,
                 failures=["FAILED tests/test_forward.py::test_x - assert 1 == 0"])
    row = dict(batch=4, heads=16, n=4096, d=128, causal=True, dtype="bf16", mode="fwd", block=[128, 64],
               ms={"flashproof": 1.0, "flashproof (TMA)": 0.8, "sdpa-flash": 1.2, "flex": 1.1}, na={},
               tflops={"flashproof": 500.0, "flashproof (TMA)": 600.0, "sdpa-flash": 400.0, "flex": 450.0})
    text = gpu_report.page(env, tests, dict(command="benchmarks.attention --json x", returncode=0, rows=[row]))
    assert "NVIDIA H100 80GB HBM3 (sm_90)" in text and "triton | 3.6.0" in text
    assert f"**{summary}** — **FAILED** (pytest exit 1)" in text and "test_forward.py::test_x" in text
    # both forwards and their ratio: what a GPU session needs to decide the tma default
    assert "| 4096 | 128 | yes | 4x16 | fwd | 128x64 | 500.0 | 600.0 | 400.0 | 450.0 | 1.25x | 1.11x | 1.20x |" in text
    assert "Not run yet" in gpu_report.page(env, {}, {})
    packed = dict(returncode=0, setup="documents [1500, 900] (2400 tokens)", header=["layout", "fwd ms"],
                  rows=[["varlen", "0.125"], ["padding", "0.250"]])
    text = gpu_report.page(env, {}, {}, packed)
    assert "documents [1500, 900] (2400 tokens)" in text and "| varlen | 0.125 |" in text
    assert "--only packed" in gpu_report.page(env, {}, {})


def test_readme_gpu_command_runs_the_report_test_files():
    """The README's "On a GPU" command and the report run the same kernel test files."""
    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("FLASHPROOF_TEST_DEVICE=cuda python -m pytest"))
    assert tuple(line.split("pytest", 1)[1].split()) == gpu_report.TEST_FILES
    assert all((ROOT / f).is_file() for f in gpu_report.TEST_FILES)


def test_report_failures_come_from_one_parse_of_the_log():
    """The failures and a stopped run's counts come from one parse of pytest's result lines
    (``gpu_report.parse_results``): a run stopped at its time limit lists each failed test's id
    without xdist's ``[gw1] [ 82%]`` prefix; a finished run's short summary adds the reason."""
    stopped = ("[gw3] [ 12%] PASSED tests/test_forward.py::test_a[fp16-64]\n"
               "[gw1] [ 82%] FAILED tests/test_api.py::test_b[varlen causal]\n"
               "tests/test_softmax.py::test_c SKIPPED (no TMA)                          [ 90%]\n"
               "[gw0] [ 96%] ERROR tests/test_tma.py::test_e\n")
    results = gpu_report.parse_results(stopped)
    assert gpu_report.failures_of(results) == ["FAILED tests/test_api.py::test_b[varlen causal]",
                                               "ERROR tests/test_tma.py::test_e"]
    assert results["tests/test_softmax.py::test_c"][0] == "SKIPPED"
    finished = stopped + ("=========================== short test summary info ============================\n"
                          "FAILED tests/test_api.py::test_b[varlen causal] - AssertionError: assert 1 == 0\n"
                          "===== 1 failed, 1 passed, 1 skipped, 1 error in 3.21s =====\n")
    assert gpu_report.failures_of(gpu_report.parse_results(finished))[0] == \
        "FAILED tests/test_api.py::test_b[varlen causal] - AssertionError: assert 1 == 0"
    assert gpu_report.parse_results("collected 4 items\n....\n") == {}
