"""The claims the kernels rely on, each with a proof that can fail.

A claim is PROVED only when SymPy reduces the difference of its two sides to a canonical
zero (``residual == 0`` structurally) or the two sides are structurally identical — never
by sampling numbers and never by ``.equals``; an inequality only when SymPy's assumptions
decide its sign, the case conditions encoded as slack variables (``spec.proof_tools``).
Anything else is FAILED, with the residual.

Interface (read by ``python -m spec``, the generator, the docs and the tests):

* ``REGISTRY``: ``{claim_id: Claim}`` in report order.
* ``Claim.prove()`` -> ``Result``.
* ``prove_all()`` -> ``list[Result]``.
* ``CLAIM_IDS``: the fixed ids, in report order (other tools read them).

The registry itself (``Result``, ``Claim``, ``REGISTRY``, ``claim``, ``prove_all``,
``CLAIM_IDS``) lives in ``spec.registry`` and is re-exported here. The proofs live in
``spec.proofs_softmax`` (recurrences and the state algebra),
``spec.proofs_kernel`` (the kernel terms of ``spec.terms`` on symbolic blocks),
``spec.proofs_backward`` (the backward's gradient accumulation and key-major tile at symbolic sizes),
``spec.proofs_masks`` (the tile classifier), ``spec.proofs_mask_mod`` (the mask_mod class),
``spec.proofs_varlen`` (packed segments),
``spec.proofs_ring`` (ring attention), ``spec.proofs_paged`` (decode's KV reads),
``spec.proofs_epilogue`` (the forward epilogue),
``spec.proofs_structure`` (initial state, GQA head map, loop stages), ``spec.proofs_int32``
(index arithmetic in int32, with z3) and ``spec.proofs_float`` (fp32 rounding and FMA, the
error-bound lemmas); and ``spec.proofs_symbolic`` (the
tile update, every tiling and the backward at symbolic B_c and head dim); importing this module
registers them all.
Each ``prove_<id>`` function takes the operator or terms under test as optional
arguments, so the tests can feed mutants and watch the proof fail.
"""

from __future__ import annotations

from spec.registry import CLAIM_IDS, REGISTRY, Claim, Result, claim, prove_all

# Register the proofs, then put the registry in the fixed report order.
from spec import proofs_kernel, proofs_masks, proofs_rewrites, proofs_ring, proofs_softmax, proofs_varlen  # noqa: E402,F401,I001
from spec import proofs_paged  # noqa: E402,F401,I001
# ... then the verification claims (issue 12), reported after the fixed ids in this order
from spec import proofs_backward, proofs_symbolic, proofs_epilogue, proofs_structure, proofs_int32, proofs_float  # noqa: E402,F401,I001
from spec import proofs_score_mods  # noqa: E402,F401,I001
from spec import proofs_mask_mod  # noqa: E402,F401,I001
from spec import proofs_sink_combine  # noqa: E402,F401,I001

__all__ = ["CLAIM_IDS", "REGISTRY", "Claim", "Result", "claim", "prove_all"]

_missing = [cid for cid in CLAIM_IDS if cid not in REGISTRY]
if _missing:
    raise ImportError(f"claims without a proof: {_missing}")
#: the proof modules in report order: the newer claims (not in CLAIM_IDS) report in this module
#: order, then in definition order, whichever module another import (a test's) loaded first
_MODULES = [m.__name__ for m in (proofs_kernel, proofs_masks, proofs_rewrites, proofs_ring, proofs_softmax,
                                 proofs_varlen, proofs_paged, proofs_symbolic, proofs_backward, proofs_epilogue,
                                 proofs_structure, proofs_int32, proofs_float, proofs_score_mods, proofs_mask_mod,
                                 proofs_sink_combine)]
_newer = sorted((c for c in REGISTRY.values() if c.id not in CLAIM_IDS), key=lambda c: _MODULES.index(c.prove.__module__))
_ordered = [REGISTRY[cid] for cid in CLAIM_IDS] + _newer
REGISTRY.clear()  # in place: anyone holding a reference sees the ordered registry
REGISTRY.update((c.id, c) for c in _ordered)
