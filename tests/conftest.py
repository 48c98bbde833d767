"""Shared test setup: import this repo's packages, a Hypothesis profile, the proved claims once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the repo's `spec`/`generator`, never PyPI's namesakes
    sys.path.insert(0, str(ROOT))

# Examples are bounded by the tests' own strategies; deadlines are meaningless on 2 shared
# cores and in the Triton interpreter.
settings.register_profile("flashproof", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("flashproof")


@pytest.fixture(scope="session")
def proved():
    """``(results by id, seconds)`` of one ``prove_all()`` run, shared by the claim tests."""
    from spec.claims import prove_all

    start = time.perf_counter()
    results = prove_all()
    return {r.id: r for r in results}, time.perf_counter() - start
