"""The claims the kernels rely on, each with a proof that can fail.

A claim is PROVED only when SymPy reduces the difference of its two sides to a canonical
zero (``residual == 0`` structurally) or the two sides are structurally identical — never
by sampling numbers and never by ``.equals``; an inequality only when SymPy's assumptions
decide its sign, the case conditions encoded as slack variables (``spec.proofs.tools``).
Anything else is FAILED, with the residual.

Interface (read by ``python -m spec``, the generator, the docs and the tests):

* ``REGISTRY``: ``{claim_id: Claim}`` in report order.
* ``Claim.prove()`` -> ``Result``.
* ``prove_all()`` -> ``list[Result]``.
* ``CLAIM_IDS``: the fixed ids, in report order (other tools read them).

The registry itself (``Result``, ``Claim``, ``REGISTRY``, ``claim``, ``prove_all``,
``CLAIM_IDS``) lives in ``spec.registry`` and is re-exported here. The proofs live in
``spec.proofs.softmax`` (recurrences and the state algebra),
``spec.proofs.kernel`` (the kernel terms of ``spec.terms`` on symbolic blocks),
``spec.proofs.backward`` (the backward's gradient accumulation and key-major tile at symbolic sizes),
``spec.proofs.masks`` (the tile classifier), ``spec.proofs.mask_mod`` (the mask_mod class),
``spec.proofs.varlen`` (packed segments),
``spec.proofs.ring`` (ring attention), ``spec.proofs.paged`` (decode's KV reads),
``spec.proofs.addresses`` (load and store offsets for the launch's arguments, issue 24),
``spec.proofs.epilogue`` (the forward epilogue), ``spec.proofs.fp8`` (the FP8 forward's descales and bound), ``spec.proofs.dropout`` (attention dropout), ``spec.proofs.rotary`` (the KV-cache append's rotary embedding),
``spec.proofs.structure`` (initial state, GQA head map, loop stages), ``spec.proofs.int32``
(index arithmetic in int32, with z3) and ``spec.proofs.float`` (fp32 rounding and FMA, the
error-bound lemmas); and ``spec.proofs.symbolic`` (the
tile update, every tiling and the backward at symbolic B_c and head dim); importing this module
registers them all.
Each ``prove_<id>`` function takes the operator or terms under test as optional
arguments, so the tests can feed mutants and watch the proof fail.
"""

from __future__ import annotations

from spec.registry import CLAIM_IDS, REGISTRY, Claim, Result, claim, prove_all

# Register the proofs (importing a module of spec.proofs registers its claims), then put the
# registry in the fixed report order.
from spec.proofs import kernel, masks, rewrites, ring, softmax, varlen, paged  # noqa: E402,I001
# ... then the verification claims (issue 12) and later ones, reported after the fixed ids in this order
from spec.proofs import symbolic, backward, epilogue, structure, int32, float as float_, score_mods, mask_mod, sink_combine, dropout, rotary  # noqa: E402,I001
from spec.proofs import addresses  # noqa: E402,I001
from spec.proofs import score_mod_user  # noqa: E402,I001
from spec.proofs import fp8  # noqa: E402,I001

__all__ = ["CLAIM_IDS", "REGISTRY", "Claim", "Result", "claim", "prove_all"]

_missing = [cid for cid in CLAIM_IDS if cid not in REGISTRY]
if _missing:
    raise ImportError(f"claims without a proof: {_missing}")
#: the proof modules in report order: the newer claims (not in CLAIM_IDS) report in this module
#: order, then in definition order, whichever module another import (a test's) loaded first
_MODULES = [m.__name__ for m in (kernel, masks, rewrites, ring, softmax, varlen, paged, symbolic, backward, epilogue,
                                 structure, int32, float_, score_mods, mask_mod, sink_combine, dropout, rotary, addresses,
                                 score_mod_user, fp8)]
_newer = sorted((c for c in REGISTRY.values() if c.id not in CLAIM_IDS), key=lambda c: _MODULES.index(c.prove.__module__))
_ordered = [REGISTRY[cid] for cid in CLAIM_IDS] + _newer
REGISTRY.clear()  # in place: anyone holding a reference sees the ordered registry
REGISTRY.update((c.id, c) for c in _ordered)
