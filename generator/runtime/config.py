"""The launch configuration of every entry point: which generated block serves a call.

One home for the choice (issue 25): ``block="auto"`` of the dense forward, backward, varlen and
ring paths (``AUTO_BLOCKS`` per memory path and head dim, ``FP32_BLOCK`` for float32 on a GPU),
the block whose decode and merge kernels serve ``flash_attention_with_kvcache`` and
``merge_state(s)`` in a package (``DECODE_BLOCK`` / ``MERGE_BLOCK`` where the package has them,
else the package's own), and, through ``generator.runtime.launch``, the memory path
(``tma_by_default``, ``takes_tma_path``) and the warps/stages of a launch (``pick_settings`` over
the generated ``SETTINGS`` tables, keyed by ``memory_path_arch``). What depends only on the
package is cached; nothing here reads a tensor's values.
"""

from __future__ import annotations

import functools
import importlib

import torch

from generator.runtime import launch

#: the package ``python -m generator`` writes by default; an ``--out`` package names itself
DEFAULT_PACKAGE = "generated"

#: the block of ``python -m generator`` without ``--br/--bc``, and the explicit default of
#: ``softmax``, ``ring_attention`` and ``flash_attention_varlen``
DEFAULT_BLOCK = (64, 64)

#: ``block="auto"``: the block per memory path and largest padded head dim, chosen from the static
#: report (``python -m benchmarks.static``: spill-free, fewest loop instructions per tile element,
#: at least 128 rows so that each K/V tile read serves 128 query rows) and the H100 record
#: (docs/performance/gpu.md: 128x64 the fastest block at most shapes). Keyed like the launch
#: settings (``launch.memory_path_arch``): 90 is the sm_90 TMA path, 80 the pointer path on any GPU
#: (sm_80's memory path, sm_90's fallback for a layout TMA cannot read).
#:
#: * sm_90 TMA: 128x64 at head dim 64 (0.256 warp-instructions per tile element, tutorial 06's
#:   shape), 128x128 up to 128 (0.251 against 128x64's 0.350: generator.variants.FWD_SM90), 128x64
#:   above (128x128 does not fit shared memory at BLOCK_D 256).
#: * pointer path: 128x64 up to head dim 128 (sm_80 0.356 / 0.521 against 64x64's 0.370 / 0.715;
#:   128x128 spills there at head dim 128: generator.variants.FWD_SM80), 64x64 above (128x64
#:   spills and overflows sm_80's shared memory at BLOCK_D 256).
#:
#: ``launch.pick_settings`` reads it. Every block listed is generated (tests/test_static.py
#: compiles them).
AUTO_BLOCKS = {80: {128: (128, 64), 256: (64, 64)}, 90: {64: (128, 64), 128: (128, 128), 256: (128, 64)}}

#: ``block="auto"`` for float32 inputs on a GPU. Their dots run in IEEE fp32 on the CUDA cores
#: (``launch.dot_constants``: tf32 would break the fp32 tolerance), which holds both operands of
#: every product in registers and doubles every tile's bytes: at AUTO_BLOCKS' blocks they spill
#: kilobytes and from head dim 128 overflow shared memory (the launch fails). 16x32 fits shared
#: memory at every head dim on sm_80 and sm_90 (``tests/test_static.py``). FlashAttention and
#: SDPA's flash backend take no fp32 at all; here fp32 is the exact path, not the fast one.
FP32_BLOCK = (16, 32)

#: the block whose decode kernel serves ``flash_attention_with_kvcache`` (B_c keys per tile, at
#: most B_r query rows per program) and whose merge kernel serves ``merge_state(s)``, in a package
#: that has it; a package emitted without it (``--out`` with other blocks) uses its own (``block_for``)
DECODE_BLOCK = DEFAULT_BLOCK
MERGE_BLOCK = DEFAULT_BLOCK

#: the preferred block of a kernel kind that has no per-call choice
PREFERRED = {"decode": DECODE_BLOCK, "merge": MERGE_BLOCK}


def auto_block(device: torch.device, head_dim: int, tma: bool = False,
               dtype: torch.dtype = torch.float16) -> tuple[int, int]:
    """The block ``block="auto"`` runs on ``device`` at ``head_dim`` (``AUTO_BLOCKS``), on the TMA
    path when ``tma`` (``launch.takes_tma_path``), else on the pointer path; ``FP32_BLOCK`` for
    float32 inputs on a GPU."""
    if dtype == torch.float32 and device.type == "cuda":
        return FP32_BLOCK
    arch = launch.memory_path_arch(launch.settings_arch(device), tma)
    return launch.pick_settings(AUTO_BLOCKS, arch, launch.block_d(head_dim))


def dense_auto_block(q, k, v, tma: bool) -> tuple[int, int]:
    """``auto_block`` for a dense launch on ``q, k, v`` asked for ``tma``: on the path it will take
    (``launch.takes_tma_path``: a layout TMA cannot read falls back) and for q's dtype."""
    head_dim = max(q.shape[-1], v.shape[-1])  # the wider of q/k's D and v's D_v picks the tiles
    on_tma = launch.takes_tma_path(tma, {"q": q, "k": k, "v": v}, launch.block_d(head_dim))
    return auto_block(q.device, head_dim, on_tma, q.dtype)


def memory_path(tma, device: torch.device) -> bool:
    """Whether a forward asks for TMA: ``tma="auto"`` means ``launch.tma_by_default(device)``."""
    return launch.tma_by_default(device) if tma == "auto" else tma


@functools.lru_cache(maxsize=None)
def block_for(kind: str, package: str = DEFAULT_PACKAGE) -> tuple[int, int]:
    """The block whose ``kind`` kernel (``"decode"``, ``"merge"``) serves a call in ``package``:
    ``PREFERRED[kind]`` where the package has it, else the smallest of the package's blocks with a
    ``kind`` kernel (an ``--out`` package emitted for other blocks runs its own kernels). Cached
    per package (an emitted package's index does not change while it is imported)."""
    kernels = importlib.import_module(package).KERNELS
    preferred = PREFERRED[kind]
    if kind in kernels.get(preferred, {}):
        return preferred
    for block in sorted(kernels):
        if kind in kernels[block]:
            return block
    raise ValueError(f"{package} has no generated {kind} kernel (blocks: {sorted(kernels)}); emit one with "
                     f"`python -m generator --br {preferred[0]} --bc {preferred[1]} --out ...`")
