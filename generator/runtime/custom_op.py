"""``flashproof::flash_attention`` as a PyTorch custom op (opaque to torch.compile).

The op takes checked inputs (``generator.runtime.api.flash_attention`` checks them) and
returns ``(out, lse)``. Its fake implementation gives torch.compile the output shapes
without running a kernel, so ``torch.compile(fullgraph=True)`` traces through it.

Autograd: the backward (issue 6) registers here with
``torch.library.register_autograd("flashproof::flash_attention", backward, setup_context=...)``;
``lse`` is already returned for it to save.
"""

from __future__ import annotations

from typing import Optional

import torch

from generator.runtime import api


@torch.library.custom_op("flashproof::flash_attention", mutates_args=())
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                       key_lengths: Optional[torch.Tensor], causal: bool, alignment: str,
                       window: Optional[list[int]], scale: Optional[float], block_m: int,
                       block_n: int, tma: bool = False, mask_mod: Optional[str] = None,
                       mask_args: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    module = api.module_for("fwd", (block_m, block_n), mask_mod)
    return api.attention_forward(module, q, k, v, causal=causal, alignment=alignment,
                                 window=None if window is None else tuple(window), key_lengths=key_lengths,
                                 mask=mask, scale=scale, tma=tma, mask_args=mask_args)


@flash_attention_op.register_fake
def _(q, k, v, mask, key_lengths, causal, alignment, window, scale, block_m, block_n, tma=False, mask_mod=None,
      mask_args=None):
    B, Hq, Nq, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((B, Hq, Nq), dtype=torch.float32)


# the backward (generated dQ, dK, dV kernels) registers itself on this op
from generator.runtime import autograd  # noqa: E402,F401
