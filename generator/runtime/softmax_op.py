"""``flashproof::softmax``: seed 000's online softmax kernels as a differentiable custom op.

The forward runs a generated softmax module on contiguous rows. The backward is the softmax
Jacobian-vector product ``dx = y ∘ (g − rowsum(g ∘ y))`` — the identity of claim
``backward_ds`` (``dS = P ∘ (dP − Δ)`` with ``Δ = rowsum(dP ∘ P)``) for one row of
probabilities ``y`` and an upstream gradient ``g`` — done in PyTorch, no kernel.
"""

from __future__ import annotations

import torch

from generator.runtime import dispatch


@torch.library.custom_op("flashproof::softmax", mutates_args=())
def softmax_op(rows: torch.Tensor, block_m: int, block_n: int,
               package: str = dispatch.DEFAULT_PACKAGE) -> torch.Tensor:
    module = dispatch.module_for("softmax", (block_m, block_n), package, rows.device)
    return module.softmax_rows(rows.contiguous())  # the kernel reads rows with unit stride


@softmax_op.register_fake
def _(rows, block_m, block_n, package=dispatch.DEFAULT_PACKAGE):
    return torch.empty(rows.shape, dtype=rows.dtype, device=rows.device)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    # dx = y ∘ (g − Δ), Δ = rowsum(g ∘ y): claim backward_ds on one row (accumulated in fp32)
    y32, g32 = y.float(), grad.float()
    delta = (g32 * y32).sum(-1, keepdim=True)
    return (y32 * (g32 - delta)).to(y.dtype), None, None, None


torch.library.register_autograd("flashproof::softmax", _backward, setup_context=_setup_context)
