"""``generated/MANIFEST.json``: what was emitted, by which command, from which spec.

The manifest is the list of block configs on disk. For each: the command, the spec hash,
and the sha256 of every file it emitted. Emitting a config replaces only that config's
entry (and files); the index ``__init__.py`` is re-rendered from all of them.

``check`` re-renders every entry in memory and compares, without writing anything:

* ``edited``  - the file on disk no longer has the hash the manifest recorded (hand edit);
* ``stale``   - the file is as emitted, but re-rendering today gives other bytes (the spec
  hash changed, or the templates / printer changed);
* ``missing`` - a file the config emits is not on disk.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spec.fingerprint import spec_hash

from generator.render import render_config, render_index
from generator.variants import BlockConfig

MANIFEST = "MANIFEST.json"
INDEX = "__init__.py"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "generated"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load(out: Path) -> dict:
    path = out / MANIFEST
    if not path.exists():
        return {"configs": {}, "index": {}}
    return json.loads(path.read_text())


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def configs_of(manifest: dict) -> list[BlockConfig]:
    return [BlockConfig.from_json(entry) for entry in manifest["configs"].values()]


def _write_atomically(out: Path, files: dict[str, str], remove: set[str]) -> None:
    """Render is done; now put every file in place with one ``os.replace`` each.

    The new contents go to a temp dir inside ``out`` first (same file system, so each
    rename is atomic): a failure part-way leaves every file either old or new, never half.
    """
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".generator-") as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        for name in sorted(files, key=lambda f: f == MANIFEST):  # manifest last
            os.replace(Path(tmp) / name, out / name)
    for name in sorted(remove - set(files)):
        (out / name).unlink(missing_ok=True)


def emit(config: BlockConfig, out: Path = DEFAULT_OUT) -> list[str]:
    """Render ``config`` and the index, update the manifest, write atomically. Returns file names."""
    manifest = load(out)
    files = render_config(config)
    old = manifest["configs"].get(config.key, {}).get("files", {})
    manifest["configs"][config.key] = {
        **config.to_json(), "command": config.command, "spec_hash": spec_hash(),
        "files": {name: sha256(text) for name, text in sorted(files.items())},
    }
    index = render_index(configs_of(manifest))
    manifest["index"] = {"file": INDEX, "spec_hash": spec_hash(), "sha256": sha256(index)}
    files[INDEX] = index
    files[MANIFEST] = dumps(manifest)
    _write_atomically(out, files, set(old))
    return sorted(files)


@dataclass(frozen=True)
class Problem:
    file: str
    status: str  # edited / stale / missing
    why: str

    def __str__(self) -> str:
        return f"{self.status:8s} {self.file}: {self.why}"


def _compare(out: Path, name: str, expected: str, recorded: str | None, recorded_spec: str | None,
             command: str) -> Problem | None:
    path = out / name
    if not path.exists():
        return Problem(name, "missing", f"run `{command}`")
    text = path.read_text()
    if recorded is not None and sha256(text) != recorded:
        return Problem(name, "edited", f"its hash differs from MANIFEST.json (edited by hand?); run `{command}`")
    if text != expected:
        why = "the spec changed" if recorded_spec != spec_hash() else "the templates or the printer changed"
        return Problem(name, "stale", f"{why} since it was generated; run `{command}`")
    return None


def check(out: Path = DEFAULT_OUT) -> list[Problem]:
    """Every problem found in ``out`` (empty: all files match what the generator emits today)."""
    manifest = load(out)
    if not manifest["configs"]:
        return [Problem(MANIFEST, "missing", "no generated configs; run `python -m generator`")]
    problems = []
    for entry in manifest["configs"].values():
        config = BlockConfig.from_json(entry)
        for name, text in render_config(config).items():
            problems.append(_compare(out, name, text, entry["files"].get(name), entry["spec_hash"],
                                     config.command))
    index = manifest.get("index", {})
    problems.append(_compare(out, INDEX, render_index(configs_of(manifest)), index.get("sha256"),
                             index.get("spec_hash"), "python -m generator --br 64 --bc 64"))
    return [p for p in problems if p is not None]


def import_file(path: Path, name: str | None = None):
    """Import a generated module from any directory (``--out``), e.g. to test or benchmark it."""
    name = name or f"generated_{Path(path).stem}_{sha256(str(path))[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit looks kernels' modules up by name
    spec.loader.exec_module(module)
    return module
