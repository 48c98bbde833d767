"""flashproof's specification of attention: SymPy recurrences, proved claims, float64 reference.

* ``spec.notation``   - the seeds' symbols (``m_i``, ``l_i`` = ``d'_i``, ``acc``, ``B_r``, ``B_c``)
* ``spec.recurrences``- safe/online softmax, FA1/FA2 steps, the state ``(m, d, o)`` and ``⊕``
* ``spec.terms``      - the expressions the kernels evaluate, named as in the kernels
* ``spec.masks``      - mask predicates and the tile classifier
* ``spec.claims``     - the claims and their proofs (``python -m spec`` runs them)
* ``spec.reference``  - float64 ``attention`` and tiled ``online_attention``

Nothing in this package knows about Triton.
"""
