"""Shared test setup: import this repo's packages, a Hypothesis profile, the proved claims once."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="session")
def proved():
    """The results of one ``prove_all()`` run by claim id, shared by the claim tests."""
    from spec.claims import prove_all

    return {r.id: r for r in prove_all()}


@pytest.fixture(autouse=True)
def _fresh_plans():
    """Every test starts without host-path plans (``generator.runtime.plans``): a test that lowers a
    limit of ``spec.assumptions`` sees the checks run, not a plan an earlier test recorded."""
    from generator.runtime import plans

    plans.clear()
