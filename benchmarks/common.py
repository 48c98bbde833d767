"""Helpers the three benchmark tools share: where things live, the generated kernels, tables."""

from __future__ import annotations

import importlib
import json
import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "generated"
DOCS_PERF = ROOT / "docs" / "performance"
ASSETS_PERF = ROOT / "docs" / "assets" / "perf"
#: scratch space for caches (ignored by git: see .gitignore)
ARTIFACTS = ROOT / ".artifacts"

REGENERATE = "python -m generator --br 64 --bc 64"


def manifest() -> dict:
    """``generated/MANIFEST.json``; a clear error when nothing has been generated yet."""
    path = GENERATED / "MANIFEST.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: no kernels are generated; run {REGENERATE}")
    return json.loads(path.read_text())


def kernel_modules(mask_mods: bool = False) -> list[str]:
    """Dotted names of the generated modules that expose ``aot_compile_args`` (fwd, bwd, ...).

    Discovery is generic: every file MANIFEST.json lists, in every block config, that
    defines ``aot_compile_args``. Kernels the generator adds later (the backward kernels)
    are picked up without touching this package. The mask_mod variants (the same kernels with
    a mask_mod's O(1) classifier and predicate compiled in) only with ``mask_mods=True``.
    """
    names = set()
    for config in manifest().get("configs", {}).values():
        for filename in config.get("files", {}):
            path = GENERATED / filename
            text = path.read_text() if path.suffix == ".py" and path.exists() else ""
            if "def aot_compile_args" in text and (mask_mods or "\nMASK_MOD = " not in text):
                names.add(f"generated.{path.stem}")
    if not names:
        raise RuntimeError(f"no generated module defines aot_compile_args; run {REGENERATE}")
    return sorted(names)


def versions() -> dict[str, str]:
    """Versions worth printing beside every measurement."""
    out = {"python": platform.python_version()}
    for mod in ("torch", "triton"):
        try:
            out[mod] = importlib.import_module(mod).__version__
        except ImportError:  # pragma: no cover - both are installed with [kernels]
            out[mod] = "not installed"
    return out


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub/mkdocs pipe table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(header: list[str], rows: list[list]) -> str:
    """A fixed-width table for stdout."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in cells[1:]]
    return "\n".join(out)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, then one
    ``os.replace`` (a killed benchmark leaves the previous page or cache entry, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
