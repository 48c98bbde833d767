"""``python -m spec``: one line per claim, a total, exit status, ``--json``, ``--help``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec import __main__ as cli
from spec import claims

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spec", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # a hang guard, not a speed check


def session_report(proved) -> tuple[int, str]:
    """``python -m spec``'s exit status and output, the CLI run in this process on the session's proofs
    (``proved``: the results of the run's one ``python -m spec --json``, conftest's ``spec_report``)."""
    import contextlib
    import dataclasses
    import io

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        for cid, c in claims.REGISTRY.items():
            mp.setitem(claims.REGISTRY, cid, dataclasses.replace(c, prove=lambda r=proved[cid]: r))
        code = cli.main([])
    return code, out.getvalue()


def check_plain_report(stdout: str, ids: list[str]) -> float:
    """``python -m spec``'s plain report of the claims ``ids``, all proved: a line per claim, its scope line, the
    total. Returns the wall time the total states."""
    lines = stdout.strip().splitlines()
    assert len(lines) == 2 * len(ids) + 1
    for line, scope, cid in zip(lines[0::2], lines[1::2], ids):
        c = claims.REGISTRY[cid]
        assert line == f"PROVED {cid}: {c.statement}"
        assert scope.startswith(f"    scope: {c.scope}") and scope.endswith(" s"), scope
        assert c.scope, f"{cid} states no scope"
    assert lines[-1].startswith(f"{len(ids)}/{len(ids)} claims proved, 0 failed")
    return float(lines[-1].rsplit("(", 1)[1].split(" s)")[0])


def test_plain_report_proves_every_claim(proved):
    """The plain report of every claim, printed by the CLI on the results of the session's one
    ``python -m spec --json`` (``proved``)."""
    code, stdout = session_report(proved)
    assert code == 0, stdout
    check_plain_report(stdout, list(claims.REGISTRY))


def test_plain_report_end_to_end():
    """``python -m spec --only ...`` in a process of its own proves the claims it names and prints the plain
    report (every claim's end-to-end run is the session's ``spec_report``, in JSON)."""
    ids = ["merge_associative", "exp2_rewrite"]
    done = run_cli(*[arg for cid in ids for arg in ("--only", cid)])
    assert done.returncode == 0, done.stdout + done.stderr
    # the total states its wall time (no bound here: speed is not a test's business, and the time
    # depends on how many other processes share the cores)
    seconds = check_plain_report(done.stdout, ids)
    assert seconds > 0, done.stdout


def test_every_claim_names_known_assumptions():
    from spec.assumptions import ASSUMPTIONS

    for c in claims.REGISTRY.values():
        assert set(c.assumptions) <= set(ASSUMPTIONS), (c.id, c.assumptions)


def test_hardware_hypotheses_are_named_and_listed():
    """A claim's hardware hypotheses (spec.assumptions.HYPOTHESES) exist, are named in its scope text, and each
    hypothesis some claim uses is listed, with its documentation, on docs/verification.md's "What remains outside
    the proofs"; the scope line of ``python -m spec`` names them."""
    from spec.assumptions import HYPOTHESES

    page = (ROOT / "docs" / "verification.md").read_text()
    outside = page.split("## What remains outside the proofs", 1)[1].split("\n## ", 1)[0]
    used = set()
    for c in claims.REGISTRY.values():
        assert set(c.hypotheses) <= set(HYPOTHESES), (c.id, c.hypotheses)
        for name in c.hypotheses:
            assert name in c.scope, (c.id, name)
            assert name in cli.scope_line(c, 0.0), (c.id, name)
        used |= set(c.hypotheses)
    assert used == set(HYPOTHESES), set(HYPOTHESES) - used  # no hypothesis without a claim
    assert [h for h in HYPOTHESES if f"`{h}`" not in outside] == []
    assert {"tma_out_of_bounds"} <= set(claims.REGISTRY["tma_addresses"].hypotheses)
    assert "cuTensorMapEncodeTiled" in outside and "must be used to fill out-of-bound elements" in outside


def test_json_report(spec_report):
    """The session's ``python -m spec --json`` (conftest's ``spec_report``: every claim proved end to end in a
    process of its own, once per run): exit status 0, every claim in the registry's order, PROVED, its fields."""
    assert spec_report.returncode == 0, spec_report.stdout[-2000:] + spec_report.stderr[-4000:]
    report = json.loads(spec_report.stdout)
    assert [r["id"] for r in report] == list(claims.REGISTRY)
    for r in report:
        assert set(r) >= {"id", "status", "statement", "detail", "residuals", "scope", "assumptions", "hypotheses",
                          "seconds"}
        assert r["status"] == "PROVED"
        assert r["residuals"] and all(c["residual"] == "0" for c in r["residuals"])


def test_help():
    done = run_cli("--help")
    assert done.returncode == 0 and "--json" in done.stdout


def test_a_failing_claim_exits_1_and_says_why(monkeypatch, capsys):
    def failing():
        return claims.Result("merge_commutative", False, "case 'a,b[1]' leaves residual x")

    monkeypatch.setitem(claims.REGISTRY, "merge_commutative",
                        claims.Claim("merge_commutative", "a ⊕ b = b ⊕ a", "", failing))
    assert cli.main(["--only", "merge_commutative", "--only", "lse_merge"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "FAILED merge_commutative: case 'a,b[1]' leaves residual x"
    assert out[1].startswith("    scope: ")
    assert out[2].startswith("PROVED lse_merge: ")
    assert out[4].startswith("1/2 claims proved, 1 failed")


def test_json_of_a_failing_claim(monkeypatch, capsys):
    import sympy as sp

    def failing():
        return claims.Result("merge_commutative", False, "nope", (("case", sp.Symbol("x") - 1),))

    monkeypatch.setitem(claims.REGISTRY, "merge_commutative",
                        claims.Claim("merge_commutative", "a ⊕ b = b ⊕ a", "", failing))
    assert cli.main(["--json", "--only", "merge_commutative"]) == 1
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["status"] == "FAILED" and entry["residuals"] == [{"case": "case", "residual": "x - 1"}]
