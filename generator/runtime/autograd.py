"""Autograd of ``flashproof::flash_attention``: gradients in q, k, v from the generated backward.

The forward op saves ``q, k, v, out, lse`` (and the non-differentiable ``mask`` and
``key_lengths``); the backward is itself a custom op, ``flashproof::flash_attention_backward``,
with a fake implementation, so ``torch.compile(fullgraph=True)`` traces the backward graph
too without running a kernel. No atomics anywhere: the gradients are bitwise deterministic.

The gradient of the returned ``lse`` (``return_lse=True``) is supported at no extra kernel
cost: ``∂lse_i/∂s_ij = P_ij``, so it enters ``dS = P ∘ (dP − Δ)`` as ``Δ − dlse``. The
backward's preprocess kernel prints that as the spec term ``delta = rowsum(dO ∘ O) − dlse``
(claims ``backward_delta``, ``backward_ds``); autograd's ``grad_lse = None`` (lse unused)
compiles the load out.
"""

from __future__ import annotations

from typing import Optional

import torch

from generator.runtime import api


@torch.library.custom_op("flashproof::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor,
                                k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                                mask: Optional[torch.Tensor], key_lengths: Optional[torch.Tensor], causal: bool,
                                alignment: str, window: Optional[list[int]], scale: Optional[float],
                                block_m: int, block_n: int, mask_mod: Optional[str] = None,
                                mask_args: Optional[torch.Tensor] = None
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    module = api.module_for("bwd", (block_m, block_n), mask_mod)
    return module.backward(grad_out, q, k, v, out, lse.contiguous(), grad_lse=grad_lse, causal=causal,
                           window=None if window is None else tuple(window), key_lengths=key_lengths,
                           **api.mask_arguments(module, q, k, alignment=alignment, mask=mask, scale=scale),
                           **api.mask_mod_arguments(mask_args))


@flash_attention_backward_op.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, mask, key_lengths, causal, alignment, window, scale, block_m, block_n,
      mask_mod=None, mask_args=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def setup_context(ctx, inputs, output):
    # tma only chooses how the forward moves its tiles: the backward does not need it
    q, k, v, mask, key_lengths, causal, alignment, window, scale, block_m, block_n, _tma, mask_mod, mask_args = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, key_lengths, mask_args)
    ctx.options = (causal, alignment, window, scale, block_m, block_n, mask_mod)


def backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, mask, key_lengths, mask_args = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward_op(grad_out, grad_lse, q, k, v, out, lse, mask, key_lengths, *ctx.options,
                                             mask_args)
    # gradients for (q, k, v); mask, key_lengths, the options (tma, mask_mod) and mask_args are not differentiable
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


torch.library.register_autograd("flashproof::flash_attention", backward, setup_context=setup_context)
