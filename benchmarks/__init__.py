"""Performance tooling for flashproof: what the generated kernels cost, statically and on a GPU.

* ``python -m benchmarks.static``    - compile every generated kernel ahead of time for sm_80 and
  sm_90 (no GPU needed) and report registers, spills, shared memory and tensor-core use;
* ``python -m benchmarks.hbm``       - the HBM-traffic model of the tiled forward kernel beside
  standard attention (FlashAttention's Theorem 2), with plots for the docs;
* ``python -m benchmarks.attention`` - forward / backward TFLOP/s against torch SDPA (flash
  backend) and FlexAttention on a GPU; an interpreted smoke run on a machine without one.
* ``python -m benchmarks.gpu_report`` - on a GPU: the kernel tests on CUDA and the benchmark,
  recorded in ``docs/performance/gpu.md`` (exits 2 without CUDA).

Nothing here is imported by the kernels or the spec: the arrows point from ``spec`` and
``generated`` into ``benchmarks``.
"""
