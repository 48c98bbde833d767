"""flashproof's generator: prints Triton kernels from the proven terms of ``spec``.

``python -m generator --help`` for the CLI; ``spec.printer`` (SymPy -> Triton),
``generator.variants`` (what is emitted, file names), ``generator.render`` (templates),
``generator.manifest`` (MANIFEST.json, atomic writes, ``--check``), ``generator.runtime``
(the hand-written PyTorch layer the generated modules are called through).
"""
