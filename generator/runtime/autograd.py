"""Autograd of ``flashproof::flash_attention``: gradients in q, k, v from the generated backward.

The forward op saves ``q, k, v, out, lse`` (and the non-differentiable ``mask`` and
``key_lengths``); the backward is itself a custom op, ``flashproof::flash_attention_backward``,
with a fake implementation that returns the real one's strides (contiguous), so
``torch.compile(fullgraph=True)`` traces the backward graph too without running a kernel.
No atomics anywhere: the gradients are bitwise deterministic.

The gradient of the returned ``lse`` (``return_lse=True``) is supported at no extra kernel
cost: ``∂lse_i/∂s_ij = P_ij``, so it enters ``dS = P ∘ (dP − Δ)`` as ``Δ − dlse``. The
backward's preprocess kernel prints that as the spec term ``delta = rowsum(dO ∘ O) − dlse``
(claims ``backward_delta``, ``backward_ds``); autograd's ``grad_lse = None`` (lse unused)
compiles the load out.

Not supported, with an error at the first call that needs it: double backward (the backward
is not itself differentiable: ``create_graph=True`` raises) and forward-mode AD (``jvp``).
"""

from __future__ import annotations

from typing import Optional

import torch

from generator.runtime import dispatch
from generator.runtime.custom_op import flash_attention_op  # noqa: F401  (the op this file registers on)


def _contiguous_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


@torch.library.custom_op("flashproof::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor,
                                k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                                mask: Optional[torch.Tensor], key_lengths: Optional[torch.Tensor], causal: bool,
                                alignment: str, window: Optional[list[int]], scale: Optional[float],
                                block_m: int, block_n: int, package: str = dispatch.DEFAULT_PACKAGE,
                                softcap: Optional[float] = None, alibi_slopes: Optional[torch.Tensor] = None,
                                sinks: Optional[torch.Tensor] = None,
                                mask_mod: Optional[str] = None, mask_args: Optional[torch.Tensor] = None,
                                dropout_p: float = 0.0, philox: Optional[torch.Tensor] = None,
                                score_mod: Optional[str] = None, score_f: Optional[torch.Tensor] = None,
                                score_i: Optional[torch.Tensor] = None,
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv, dsinks, dscore_f)``; ``dsinks`` is ``(Hq,)`` fp32, empty ``(0,)`` without sinks;
    ``dscore_f`` the gradient of a user score_mod's packed float parameters (``score_f``'s shape), empty
    ``(0,)`` without one."""
    module = dispatch.module_of("bwd", (block_m, block_n), package, q.device, mask_mod, score_mod)
    grads = dispatch.attention_backward(
        module, grad_out, grad_lse, q, k, v, out, lse.contiguous(), causal=causal, alignment=alignment,
        window=None if window is None else tuple(window), key_lengths=key_lengths, mask=mask, scale=scale,
        softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, mask_args=mask_args, dropout_p=dropout_p,
        philox=philox, score_f=score_f, score_i=score_i)
    dq, dk, dv, dsink_rows = grads[:4]
    dscore_f = grads[4] if score_mod is not None else q.new_empty((0,), dtype=torch.float32)
    # dL/dsink of a head: the sum over its batch entries and rows of the kernel's per-row parts
    dsinks = dsink_rows.sum((0, 2)) if dsink_rows is not None else q.new_empty((0,), dtype=torch.float32)
    return dq, dk, dv, dsinks, dscore_f


@flash_attention_backward_op.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, mask, key_lengths, causal, alignment, window, scale, block_m, block_n,
      package=dispatch.DEFAULT_PACKAGE, softcap=None, alibi_slopes=None, sinks=None, mask_mod=None, mask_args=None,
      dropout_p=0.0, philox=None, score_mod=None, score_f=None, score_i=None):
    # the generated backward allocates dq, dk, dv contiguous (torch.empty(shape)): so does the fake
    dsinks = q.new_empty((0,) if sinks is None else (q.shape[1],), dtype=torch.float32)
    dscore_f = q.new_empty((0,) if score_mod is None else tuple(score_f.shape), dtype=torch.float32)
    return _contiguous_like(q), _contiguous_like(k), _contiguous_like(v), dsinks, dscore_f


def setup_context(ctx, inputs, output):
    # tma only chooses how the forward moves its tiles: the backward does not need it
    (q, k, v, mask, key_lengths, causal, alignment, window, scale, block_m, block_n, _tma, package, softcap,
     alibi_slopes, sinks, mask_mod, mask_args, dropout_p, philox, score_mod, score_f, score_i) = inputs
    out, lse = output
    # the dropout's seed and offset are saved: the backward regenerates the forward's mask from them
    ctx.save_for_backward(q, k, v, out, lse, mask, key_lengths, alibi_slopes, sinks, mask_args, philox, score_f,
                          score_i)
    ctx.score_mod = score_mod
    ctx.options = (causal, alignment, window, scale, block_m, block_n, package, softcap)
    ctx.mask_mod = mask_mod
    ctx.dropout_p = dropout_p


def backward(ctx, grad_out, grad_lse):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        raise RuntimeError("flash_attention does not support double backward (create_graph=True, "
                           "torch.autograd.grad of a gradient): its backward kernels are not differentiable")
    q, k, v, out, lse, mask, key_lengths, alibi_slopes, sinks, mask_args, philox, score_f, score_i = ctx.saved_tensors
    dq, dk, dv, dsinks, dscore_f = flash_attention_backward_op(
        grad_out, grad_lse, q, k, v, out, lse, mask, key_lengths, *ctx.options, alibi_slopes, sinks, ctx.mask_mod,
        mask_args, ctx.dropout_p, philox, ctx.score_mod, score_f, score_i)
    # gradients for (q, k, v) and the sinks; mask, key_lengths, the options (tma, package),
    # softcap, alibi_slopes, mask_mod, mask_args and the dropout's p and seed are not differentiable; a user
    # score_mod's packed float parameters get dscore_f (autograd carries it back to each tensor packed)
    return (dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None, None,
            dsinks if sinks is not None else None, None, None, None, None, None,
            dscore_f if ctx.score_mod is not None else None, None)


torch.library.register_autograd("flashproof::flash_attention", backward, setup_context=setup_context)


class DirectForward(torch.autograd.Function):
    """``flashproof::flash_attention``'s autograd (``setup_context`` and ``backward`` above, the same
    functions) around an eager forward that runs the op's body itself (``generator.runtime.plans.direct``):
    what a training call records without the custom op's dispatch, whose autograd wrapper walks the
    op's 23-argument schema on every call (~0.3 ms here, ``torch._library.utils.fill_defaults``).
    ``apply(*the op's 23 inputs, run)``: ``run(q, k, v, key_lengths, alibi_slopes, sinks)`` gives
    ``(out, lse)``. The backward is the op's: the custom op ``flash_attention_backward``."""

    @staticmethod
    def forward(ctx, *args):
        *inputs, run = args
        q, k, v, _, key_lengths = inputs[:5]
        output = run(q, k, v, key_lengths, inputs[14], inputs[15])
        setup_context(ctx, tuple(inputs), output)
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        return (*backward(ctx, grad_out, grad_lse), None)
