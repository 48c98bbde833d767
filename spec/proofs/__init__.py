"""The proofs of the spec's claims, one module per subject; importing a module registers its
claims in ``spec.registry.REGISTRY`` (``spec.claims`` imports them all, in report order).

* ``softmax``      recurrences and the state algebra (⊕, its identity, homomorphism, lse merge)
* ``kernel``       the kernel terms of ``spec.terms`` on symbolic blocks
* ``symbolic``     the tile update, every tiling and the backward at symbolic B_c and head dim
* ``backward``     the backward's gradient accumulation and key-major tile
* ``epilogue``     the forward epilogue (out, lse)
* ``masks``        the tile classifier; ``mask_mod`` the mask_mod class
* ``varlen``       packed segments; ``paged`` decode's KV reads; ``ring`` ring attention
* ``rewrites``     the host rewrites (scale sign, window clamp)
* ``structure``    initial state, GQA head map, loop stages
* ``int32``        index arithmetic in int32 (z3); ``float`` fp32 rounding, FMA, the error bound
* ``score_mods``   softcap, ALiBi, sinks; ``sink_combine`` the sink through split-KV's combine
* ``tools``        the proof helpers (canonical zero, decided signs, case runners)
* ``z3_int32``     kernel lines read as int32 bit-vectors

Each ``prove_<id>`` function takes the operator or terms under test as optional arguments, so
``tests/test_mutants.py`` can feed mutants and watch the claim fail.
"""
