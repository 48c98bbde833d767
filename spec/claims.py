"""The claims the kernels rely on, each with a proof that can fail.

A claim is PROVED only when SymPy reduces the difference of its two sides to a canonical
zero (``residual == 0`` structurally) or the two sides are structurally identical — never
by sampling numbers and never by ``.equals``. Anything else is FAILED, with the residual.

Interface (read by ``python -m spec``, the generator, the docs and the tests):

* ``REGISTRY``: ``{claim_id: Claim}`` in report order.
* ``Claim.prove()`` -> ``Result``.
* ``prove_all()`` -> ``list[Result]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy as sp


@dataclass(frozen=True)
class Result:
    """Outcome of one proof: PROVED iff every case's residual is a canonical zero."""

    id: str
    proved: bool
    detail: str = ""  # why it failed, or how it was proved (one line)
    cases: tuple[tuple[str, sp.Basic], ...] = ()  # (case name, residual) pairs

    @property
    def status(self) -> str:
        return "PROVED" if self.proved else "FAILED"


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str  # one line of text
    latex: str  # the statement in LaTeX, for the docs
    prove: Callable[[], Result] = field(compare=False)
    terms: tuple[str, ...] = ()  # kernel term names (spec.terms) this claim licenses


REGISTRY: dict[str, Claim] = {}


def claim(id: str, statement: str, latex: str, terms: tuple[str, ...] = ()):
    """Decorator: register ``fn() -> Result`` as the proof of claim ``id``."""

    def register(fn: Callable[[], Result]) -> Callable[[], Result]:
        REGISTRY[id] = Claim(id, statement, latex, fn, terms)
        return fn

    return register


def prove_all() -> list[Result]:
    return [c.prove() for c in REGISTRY.values()]
