"""The claim registry: ``Result``, ``Claim``, ``REGISTRY``, ``@claim``, ``prove_all``.

Kept apart from ``spec.claims`` so that a proof module can be imported on its own (a
test feeding mutants imports ``spec.proofs.kernel`` directly) without an import cycle;
``spec.claims`` re-exports everything here and imports every proof module.
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
    #: what the proof covers, in one line: sizes (symbolic or fixed), number domain (Z, reals
    #: or int32/fp32 machine numbers), exact or rounded arithmetic, and the prover
    scope: str = ""
    #: names in spec.assumptions.ASSUMPTIONS the statement relies on (accepted input ranges)
    assumptions: tuple[str, ...] = ()
    #: names in spec.assumptions.HYPOTHESES the proof takes from the hardware's documentation, unproved
    hypotheses: tuple[str, ...] = ()


REGISTRY: dict[str, Claim] = {}

CLAIM_IDS = (
    "online_softmax_invariant",
    "fa2_deferred_normalisation",
    "merge_associative",
    "merge_commutative",
    "merge_identity",
    "merge_homomorphism",
    "block_update",
    "exp2_rewrite",
    "safety_bounds",
    "lse_merge",
    "backward_delta",
    "backward_ds",
    "mask_tiles_sound",
)


def claim(id: str, statement: str, latex: str, terms: tuple[str, ...] | None = None, scope: str = "",
          assumptions: tuple[str, ...] = (), hypotheses: tuple[str, ...] = ()):
    """Decorator: register ``fn() -> Result`` as the proof of claim ``id``.

    ``terms`` defaults to the names of the kernel terms (``spec.terms``) whose ``claim``
    field names this id. Ids beyond ``CLAIM_IDS`` are reported after the fixed ones.
    """

    def register(fn: Callable[[], Result]) -> Callable[[], Result]:
        names = terms if terms is not None else _licensed_terms(id)
        REGISTRY[id] = Claim(id, statement, latex, fn, names, scope, tuple(assumptions), tuple(hypotheses))
        return fn

    return register


def _licensed_terms(claim_id: str) -> tuple[str, ...]:
    from spec import terms as kernel_terms

    names = [t.name for group in kernel_terms.GROUPS.values() for t in group if t.claim == claim_id]
    return tuple(dict.fromkeys(names))


def prove_all() -> list[Result]:
    return [c.prove() for c in REGISTRY.values()]
