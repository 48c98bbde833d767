"""The GPU benchmark's code path, run as its tiny interpreted smoke case (no timing meaning).

``python -m benchmarks.attention`` on a machine without CUDA runs small shapes through the
same ``measure`` code as the GPU sweep: every provider is built, every mode is attempted, a
provider that cannot run a mode is reported as ``n/a (why)``, and the forward outputs of
flashproof and FlexAttention are checked against SDPA's.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import attention

pytestmark = pytest.mark.skipif(not attention.interpreting(),
                                reason="the smoke run uses the Triton interpreter: set TRITON_INTERPRET=1")


def test_flop_count():
    """4·B·H·N²·D forward, halved when causal; backward 2.5x; forward+backward 3.5x."""
    s = attention.Shape(2, 3, 128, 64, causal=False)
    assert s.flops("fwd") == 4 * 2 * 3 * 128 * 128 * 64
    assert attention.Shape(2, 3, 128, 64, causal=True).flops("fwd") == s.flops("fwd") / 2
    assert s.flops("bwd") == 2.5 * s.flops("fwd")
    assert s.flops("fwd+bwd") == 3.5 * s.flops("fwd")


def test_sweep_is_the_issue_grid():
    shapes = attention.sweep()
    assert {s.n for s in shapes} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {(s.d, s.causal) for s in shapes} == {(64, False), (64, True), (128, False), (128, True)}
    assert all(s.batch * s.n == attention.TOKENS and s.heads * s.d == attention.MODEL_DIM for s in shapes)


def test_smoke_run(tmp_path, capsys):
    out_json, page = tmp_path / "smoke.json", tmp_path / "benchmark.md"
    assert attention.main(["--smoke", "--json", str(out_json), "--markdown", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "timing not meaningful" in printed
    assert "MISMATCH" not in printed
    assert printed.count("vs sdpa-flash") == len(attention.AGREEMENT) * len(attention.SMOKE_SHAPES)
    assert all(f"{name} vs sdpa-flash" in printed for name in attention.AGREEMENT)

    result = json.loads(out_json.read_text())
    assert result["smoke"] is True
    rows = result["rows"]
    assert {(r["n"], r["causal"], r["mode"]) for r in rows} == {
        (s.n, s.causal, m) for s in attention.SMOKE_SHAPES for m in attention.MODES}
    for r in rows:
        # the forward of every provider runs on CPU; SDPA's backward too
        if r["mode"] == "fwd":
            assert set(r["ms"]) == set(attention.PROVIDERS), r
        else:
            assert "sdpa-flash" in r["ms"], r
            # flashproof's backward either ran, or is honestly n/a because it is not generated
            if "flashproof" in r["na"]:
                assert not attention.backward_generated(r["block"]), r["na"]["flashproof"]
                assert r["na"]["flashproof"] == "n/a (backward not generated)"
            else:
                assert "flashproof" in r["ms"]
            # the TMA variant changes only the forward: timed in fwd+bwd, n/a (with why) in bwd
            if r["mode"] == "bwd":
                assert r["na"][attention.TMA].startswith("n/a (forward-only"), r
            elif "flashproof" in r["ms"]:
                assert attention.TMA in r["ms"], r
        assert not set(r["ms"]) & set(r["na"])
    assert "No GPU figures are recorded yet" in page.read_text()


def test_packed_documents_smoke_run(capsys):
    """varlen, a dense bool mask and padding run on the same packed documents and agree."""
    from benchmarks import packed

    assert packed.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    assert "layouts agree" in printed and all(name in printed for name in packed.LAYOUTS)
