"""Shared test setup: import this repo's packages, a Hypothesis profile, the proved claims once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
import spec.claims  # noqa: E402,F401  (the proofs' z3 terms first, in `python -m spec`'s order: the ring claims' z3 queries are sensitive to what the process built before)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the repo's `spec`/`generator`, never PyPI's namesakes
    sys.path.insert(0, str(ROOT))

# Hypothesis profiles. Examples are bounded by the tests' own strategies; deadlines are
# meaningless on 2 shared cores and in the Triton interpreter.
# - "ci" (the default): derandomized, no example database: every run, on every fresh clone,
#   draws the same examples, so CI is deterministic (a failure reproduces by re-running).
# - "explore": fresh random examples on every run, remembered in .hypothesis/ when one fails:
#   `pytest --hypothesis-profile=explore` (or FLASHPROOF_HYPOTHESIS=explore), see the README.
# A test's own @settings(max_examples=...) keeps its count under either profile.
_COMMON = dict(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("explore", derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("FLASHPROOF_HYPOTHESIS", "ci"))


def pytest_configure(config):
    """FLASHPROOF_TEST_DEVICE=cuda where no GPU can run the kernels stops the run with the reason,
    rather than letting the kernel tests silently run on the CPU."""
    if "FLASHPROOF_TEST_DEVICE" in os.environ:
        from attention_cases import device_problem  # imports the kernels: only when asked for

        problem = device_problem()
        if problem:
            raise pytest.UsageError(problem)


# ---------------------------------------------------------------------------------
# pytest-xdist (``-n auto``, CI's two workers): tests sharing a costly fixture run on one worker
# ---------------------------------------------------------------------------------
#: node-id prefix -> group. ``--dist loadgroup`` (pyproject.toml) hands each group to one worker
#: whole, so its fixture is built once per run instead of once per worker; every other test is
#: handed out one by one. The groups go out first (the scheduler orders work by size), so the two
#: workers finish together. (Groups are listed here, not as ``xdist_group`` marks: with pytest 9.2
#: pytest-xdist 3.8 drops the marks' groups silently, pytest-dev/pytest-xdist#1386.)
XDIST_GROUPS = {
    "tests/test_static.py::": "static",  # ``suite``: the static compiles through ptxas
    "tests/test_docs.py::": "proved",  # ``site``: the mkdocs build; one test uses ``proved``
    "tests/test_user_score_mods.py::": "proved",  # ``package``, emitted with ``proved``
    "tests/test_claims.py::test_claim_is_proved[": "proved",
    "tests/test_merge.py::test_lse_merge_is_proved_on_the_printed_terms": "proved",
    "tests/test_ring.py::test_ring_claims_proved": "proved",
    "tests/test_mask_mod.py::test_generator_emits_a_user_mask_mod": "proved",
    "tests/test_spec_cli.py::test_json_report": "proved",
    "tests/test_spec_cli.py::test_plain_report_proves_every_claim": "proved",
    "tests/test_generator_cli.py::test_regeneration_is_byte_identical": "proved",
    "tests/test_contract.py::test_row14_every_entry_point_of_an_emitted_package_runs_its_own_kernels": "proved",
    "tests/test_ring.py::": "ring",  # ``_run(P)``: one gloo spawn per world size per run (lru_cache), not per worker
    "tests/test_install.py::": "install",  # ``src``: a copy of the checkout to build from
    "tests/test_tma.py::test_tma_forward_compiles_for_sm90": "tma_rows",  # two static compiles
    "tests/test_tma.py::test_tma_forward_is_ok_statically": "tma_rows",
    "tests/test_reliability.py::test_row8_row9_inductor_fullgraph_forward_and_backward": "compiled_run",
    "tests/test_reliability.py::test_compiled_graph_has_no_host_check_and_matches_eager": "compiled_run",
}


def xdist_group(nodeid: str) -> str | None:
    """The group of ``XDIST_GROUPS`` a test belongs to, None for a test handed out alone."""
    return next((group for prefix, group in XDIST_GROUPS.items() if nodeid.startswith(prefix)), None)


try:
    from xdist.scheduler import LoadGroupScheduling
except ImportError:  # without pytest-xdist the suite runs in one process: nothing to schedule
    pass
else:
    class _GroupScheduling(LoadGroupScheduling):
        """``--dist loadgroup`` with the groups of ``XDIST_GROUPS`` (and of any ``xdist_group``
        mark, should pytest-xdist keep them)."""

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or super()._split_scope(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        return _GroupScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


@pytest.fixture(scope="session")
def spec_report() -> subprocess.CompletedProcess:
    """``python -m spec --json`` run once per test run, end to end in a process of its own: the suite's one
    proof of every claim. ``proved`` reads its results, tests/test_spec_cli.py its report and exit status.
    Every test using it is in the group ``proved`` of ``XDIST_GROUPS`` (tests/test_xdist_groups.py checks)."""
    return subprocess.run([sys.executable, "-m", "spec", "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200)  # a hang guard, not a speed check


@pytest.fixture(scope="session")
def proved(spec_report):
    """The results of the session's ``python -m spec --json`` (``spec_report``) by claim id, as
    ``spec.claims.Result``: status, detail and each case's residual (the integer 0 where the report says "0",
    else a symbol named by the report's text), shared by the claim tests. Every test using it is in the group
    ``proved`` of ``XDIST_GROUPS`` (tests/test_xdist_groups.py checks): under ``-n`` the proofs run once per
    run, not once per worker."""
    import json

    import sympy as sp

    from spec.claims import Result

    try:
        report = json.loads(spec_report.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"python -m spec --json printed no JSON (exit status {spec_report.returncode}):\n"
                    f"{spec_report.stdout[-2000:]}{spec_report.stderr[-4000:]}")

    def residual(text: str) -> sp.Basic:
        return sp.Integer(0) if text == "0" else sp.Symbol(text)

    return {r["id"]: Result(r["id"], r["status"] == "PROVED", r["detail"],
                            tuple((c["case"], residual(c["residual"])) for c in r["residuals"]))
            for r in report}


@pytest.fixture(autouse=True)
def _fresh_plans():
    """Every test starts without host-path plans (``generator.runtime.plans``): a test that lowers a
    limit of ``spec.assumptions`` sees the checks run, not a plan an earlier test recorded."""
    from generator.runtime import plans

    plans.clear()
