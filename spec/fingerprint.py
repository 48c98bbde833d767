"""The spec's fingerprint: one sha256 that changes whenever anything in ``spec/`` changes.

Every generated file is stamped with its prefix, and ``python -m generator --check`` reports
a generated file as stale when the stamp differs from the current spec.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parent


def spec_hash() -> str:
    """sha256 over the source of every module of the spec package and its ``proofs`` subpackage,
    in path order."""
    h = hashlib.sha256()
    for path in sorted(SPEC_DIR.rglob("*.py")):
        h.update(path.relative_to(SPEC_DIR).as_posix().encode() + b"\0")
        h.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()


def spec_hash_prefix(length: int = 12) -> str:
    return spec_hash()[:length]
