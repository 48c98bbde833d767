"""The xdist groups of ``conftest.XDIST_GROUPS`` stay true as tests change: every prefix names a test
file and, where it names one, a test function of it; every test that uses the session's ``proved``
(directly, or through a fixture of its file) is in the group ``proved``, so that the proofs run on
one worker only. Read from the files' syntax: no collection, no import of the test modules."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import XDIST_GROUPS, xdist_group

TESTS = Path(__file__).resolve().parent


def functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in ast.parse(path.read_text()).body if isinstance(f, ast.FunctionDef)}


def params(f: ast.FunctionDef) -> set[str]:
    return {a.arg for a in f.args.args}


def test_every_prefix_names_a_test_file_and_function():
    for prefix in XDIST_GROUPS:
        file, _, name = prefix.partition("::")
        path = TESTS.parent / file
        assert path.is_file() and path.parent == TESTS, prefix
        name = name.split("[")[0]
        assert not name or name in functions(path), f"{prefix}: no test {name} in {file}"


#: conftest's session fixtures of the proofs: ``spec_report`` (the run's one ``python -m spec --json``) and
#: ``proved`` (its results)
SESSION_PROOFS = {"proved", "spec_report"}


def test_every_user_of_proved_is_in_its_group():
    users = []
    for path in sorted(TESTS.glob("test_*.py")):
        defs = functions(path)
        via_fixture = {n for n, f in defs.items() if not n.startswith("test_") and params(f) & SESSION_PROOFS}
        for name, f in defs.items():
            if name.startswith("test_") and params(f) & (SESSION_PROOFS | via_fixture):
                users.append(f"tests/{path.name}::{name}")
    assert users, "no test uses proved: the group is stale"
    stray = [u for u in users if xdist_group(u) != "proved" and xdist_group(u + "[") != "proved"]
    assert not stray, f"tests of the session's proved outside the group 'proved' (add them to XDIST_GROUPS): {stray}"
