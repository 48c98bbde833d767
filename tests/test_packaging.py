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
