"""``generated/MANIFEST.json``: what was emitted, by which command, from which spec.

The manifest is the list of block configs on disk. For each: the command, the spec hash,
and the sha256 of every file it emitted. Emitting a config replaces only that config's
entry (and files); the index ``__init__.py`` is re-rendered from all of them.

``check`` re-renders every entry in memory and compares, without writing anything:

* ``edited``  - the file on disk no longer has the hash the manifest recorded (hand edit);
* ``stale``   - the file is as emitted, but re-rendering today gives other bytes (the spec
  hash changed, or the templates / printer changed);
* ``missing`` - a file the config emits is not on disk;
* ``stray``   - a file in the directory that no config emits (left over, or added by hand);
* ``corrupt`` - ``MANIFEST.json`` itself cannot be read.

Files are compared byte for byte (a CRLF line ending is a change). User errors (an ``--out``
that is a file or unwritable, a corrupt manifest) raise ``ManifestError`` with a message;
the CLI prints it and exits 2, without a traceback.
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


class ManifestError(Exception):
    """A user error about the output directory or its manifest (the CLI exits 2 with the message)."""


def load(out: Path) -> dict:
    path = out / MANIFEST
    if out.exists() and not out.is_dir():
        raise ManifestError(f"{out} is a file, not a directory: pass --out a directory")
    above = out  # a directory that does not exist yet must be creatable: no file on its path
    while not above.exists() and above != above.parent:
        above = above.parent
    if above.exists() and not above.is_dir():
        raise ManifestError(f"cannot create {out}: {above} is a file, not a directory: pass --out a directory")
    if not path.exists():
        return {"configs": {}, "index": {}}
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
        for entry in manifest["configs"].values():
            BlockConfig.from_json(entry)
            entry["files"].items()
        return manifest
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ManifestError(f"{path} is corrupt ({type(e).__name__}: {e}); delete it and the generated files, "
                            "then re-emit every config with its `python -m generator ...` command") from None


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def configs_of(manifest: dict) -> list[BlockConfig]:
    return [BlockConfig.from_json(entry) for entry in manifest["configs"].values()]


def _write_atomically(out: Path, files: dict[str, str], remove: set[str]) -> None:
    """All or nothing: stage every new file in a temp dir inside ``out`` (same file system), then
    swap them in with one ``os.replace`` each, manifest last, keeping the previous files aside;
    if any step fails the previous files are put back, so ``out`` holds the old set or the new one."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out, prefix=".generator-") as tmp:
            staged, saved = Path(tmp) / "new", Path(tmp) / "old"
            staged.mkdir()
            saved.mkdir()
            for name, text in files.items():
                (staged / name).write_bytes(text.encode())
            done = []  # (name, whether an old file was saved)
            try:
                for name in sorted(set(files) | remove, key=lambda f: f == MANIFEST):  # manifest last
                    had_old = (out / name).exists()
                    if had_old:
                        os.replace(out / name, saved / name)
                    done.append((name, had_old))
                    if name in files:
                        os.replace(staged / name, out / name)
            except BaseException:
                for name, had_old in reversed(done):  # roll back: the previous set, intact
                    (out / name).unlink(missing_ok=True)
                    if had_old:
                        os.replace(saved / name, out / name)
                raise
    except OSError as e:
        raise ManifestError(f"cannot write to {out}: {e.strerror or e} ({e.filename or out})") from None


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
    text = path.read_bytes().decode("utf-8", errors="replace")  # bytes as they are: CRLF is a change
    if recorded is not None and sha256(text) != recorded:
        return Problem(name, "edited", f"its hash differs from MANIFEST.json (edited by hand?); run `{command}`")
    if text != expected:
        why = "the spec changed" if recorded_spec != spec_hash() else "the templates or the printer changed"
        return Problem(name, "stale", f"{why} since it was generated; run `{command}`")
    return None


def check(out: Path = DEFAULT_OUT) -> list[Problem]:
    """Every problem found in ``out`` (empty: all files match what the generator emits today)."""
    try:
        manifest = load(out)
    except ManifestError as e:
        return [Problem(MANIFEST, "corrupt", str(e))]
    if not manifest["configs"]:
        return [Problem(MANIFEST, "missing", "no generated configs; run `python -m generator`")]
    problems = []
    expected = {MANIFEST, INDEX}
    for entry in manifest["configs"].values():
        config = BlockConfig.from_json(entry)
        for name, text in render_config(config).items():
            expected.add(name)
            problems.append(_compare(out, name, text, entry["files"].get(name), entry["spec_hash"],
                                     config.command))
    index = manifest.get("index", {})
    problems.append(_compare(out, INDEX, render_index(configs_of(manifest)), index.get("sha256"),
                             index.get("spec_hash"), "python -m generator --br 64 --bc 64"))
    for path in sorted(out.iterdir()):
        if path.name not in expected and path.name != "__pycache__" and not path.name.startswith("."):
            problems.append(Problem(path.name, "stray", "no config in MANIFEST.json emits it; delete it "
                                    "(or emit the config that should own it)"))
    return [p for p in problems if p is not None]


def import_file(path: Path, name: str | None = None):
    """Import a generated module from any directory (``--out``), e.g. to test or benchmark it."""
    name = name or f"generated_{Path(path).stem}_{sha256(str(path))[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit looks kernels' modules up by name
    spec.loader.exec_module(module)
    return module
