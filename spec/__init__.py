"""flashproof's specification of attention: SymPy recurrences, proved claims, float64 reference.

* ``spec.notation``   - the seeds' symbols (``m_i``, ``l_i`` = ``d'_i``, ``acc``, ``B_r``, ``B_c``)
* ``spec.recurrences``- safe/online softmax, FA1/FA2 steps, the state ``(m, d, o)`` and ``⊕``
* ``spec.terms``      - the expressions the kernels evaluate, named as in the kernels
* ``spec.masks``      - mask predicates and the tile classifier
* ``spec.varlen``, ``spec.paged``, ``spec.ring`` - packed segments, paged KV reads, ring plans
* ``spec.rewrites``   - the host rewrites (scale sign, window clamp); ``spec.assumptions`` the accepted inputs
* ``spec.claims``     - the claim registry in report order (``python -m spec`` runs it)
* ``spec.proofs``     - the proofs, one module per subject
* ``spec.printer``    - terms as Triton source text (the one module that knows Triton's spelling; no triton import)
* ``spec.reference``  - float64 ``attention`` and tiled ``online_attention``

Nothing in this package imports ``generator`` or ``triton``.
"""
