"""The decode bandwidth benchmark's code path, run as its tiny interpreted smoke case."""

from __future__ import annotations

import json

import pytest

from benchmarks import decode

pytestmark = pytest.mark.skipif(not decode.interpreting(),
                                reason="the smoke run uses the Triton interpreter: set TRITON_INTERPRET=1")


def test_decode_smoke_run(tmp_path, capsys):
    out = tmp_path / "decode.json"
    assert decode.main(["--smoke", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert decode.NO_TIMING in printed and "MISMATCH" not in printed
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == len(decode.SMOKE)
    for r in rows:
        assert set(r["ms"]) == set(decode.PROVIDERS), r["na"]  # every provider ran on CPU
        assert r["ideal_bytes"] > 0


def test_bandwidth_is_ideal_bytes_over_time():
    rows = decode.measure(decode.SMOKE, "cpu", timer=lambda fn: 2.0, compile_flex=False, peak_gbs=100.0)
    r = rows[0]
    assert r["gbs"]["flashproof"] == pytest.approx(r["ideal_bytes"] / 2e-3 / 1e9)
    assert r["peak_pct"]["flashproof"] == pytest.approx(r["gbs"]["flashproof"])


def test_gpu_report_page_shows_the_decode_case():
    from benchmarks import gpu_report

    rows = decode.measure(decode.SMOKE, "cpu", timer=lambda fn: 1.0, compile_flex=False, peak_gbs=50.0)
    env = dict(gpu="X", capability="sm_90", torch="t", cuda="c", triton="tr", python="p", commit="h", date="d")
    md = gpu_report.page(env, {}, {"decode": {"rows": rows}})
    assert "### Decode bandwidth" in md and "% of the HBM peak" in md
    assert f"{rows[0]['gbs']['flashproof']:.0f} (" in md
