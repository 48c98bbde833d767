"""The imported ``spec`` and ``generator`` are this repository's, not PyPI's namesakes."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repo root, from this file's path


def _location(module) -> Path:
    paths = [Path(module.__file__)] if getattr(module, "__file__", None) else \
        [Path(p) for p in module.__path__]
    return paths[0].resolve()


def test_spec_and_generator_come_from_this_repo():
    import generator
    import spec

    for module, name in ((spec, "spec"), (generator, "generator")):
        where = _location(module)
        assert where.is_relative_to(ROOT / name), f"{name} imported from {where}, not {ROOT / name}"
        assert "site-packages" not in where.parts and "dist-packages" not in where.parts
        assert sys.modules[name] is module


def test_spec_submodules_come_from_this_repo():
    from spec import claims, masks, recurrences, reference, terms

    for module in (claims, masks, recurrences, reference, terms):
        assert _location(module).parent == ROOT / "spec"


def test_pyproject_names_the_distribution_flashproof():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "flashproof"
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert {"spec", "generator"} <= set(packages)


def _imported_top_levels(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, at module level or inside functions."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_spec_imports_nothing_above_it():
    """The layers run one way, spec -> generator -> generated: no file of ``spec/`` (the proofs
    included) imports ``generator``, ``generated``, ``benchmarks`` or ``triton``."""
    upward = {"generator", "generated", "benchmarks", "triton"}
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_top_levels(p) & upward)
                 for p in sorted((ROOT / "spec").rglob("*.py")) if _imported_top_levels(p) & upward}
    assert not offenders, f"spec/ imports upward: {offenders}"


def test_every_package_directory_is_packaged():
    """Every directory of spec/ and generator/ holding Python modules is a listed package (a
    missing one installs without its modules: ``pip install .`` then fails to import)."""
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for top in ("spec", "generator"):
        for init in (ROOT / top).rglob("__init__.py"):
            name = ".".join(init.parent.relative_to(ROOT).parts)
            assert name in packages, f"{name} is not in pyproject's packages"


def test_hypothesis_draws_fixed_examples_by_default():
    """CI is deterministic: the default profile (``ci``, tests/conftest.py) is derandomized with no
    example database, and no test sets its own ``derandomize``, seed or database, so the profile decides
    for every test: ``--hypothesis-profile=explore`` (or FLASHPROOF_HYPOTHESIS=explore) draws fresh
    examples instead (issue 23: a test's own ``derandomize=True`` kept test_mask_mod's predicates and the
    layout property fixed under the documented explore command too)."""
    import os
    import re

    from hypothesis import settings

    ci, explore = settings.get_profile("ci"), settings.get_profile("explore")
    assert ci.derandomize and ci.database is None and not explore.derandomize
    if os.environ.get("FLASHPROOF_HYPOTHESIS", "ci") == "ci" and settings._current_profile == "ci":
        assert settings.default.derandomize
    opting_out = [p.name for p in (ROOT / "tests").glob("*.py")
                  if re.search(r"derandomize\s*=|@seed\(|database\s*=", p.read_text()) and p.name != "conftest.py"
                  and p.name != "test_packaging.py"]
    assert not opting_out, opting_out
