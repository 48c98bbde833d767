"""``merge_state`` / ``merge_states``: merge normalised partial attention results by their LSEs.

One op per file (Liger-Kernel style): input checks, the launcher of the generated kernel
(``generated/merge_state_br*.py``, printed from ``spec.terms.MERGE_STATE``) and its autograd.
Both are PyTorch custom ops with fake implementations, so ``torch.compile`` traces through them.

``merge_state``'s backward is the vector-Jacobian product (``torch.func.vjp``) of ``merge_state_torch``: the same spec terms printed
as PyTorch into the generated file, so the gradient has no hand-typed copy of the arithmetic.
"""

from __future__ import annotations

import torch

from generator.runtime import api, config, contract
from generator.runtime.config import MERGE_BLOCK  # noqa: F401  (the block whose merge kernels serve these ops)


def _module(package: str = config.DEFAULT_PACKAGE, device=None):
    return api.module_for("merge", config.block_for("merge", package), package, device)


def _rows(o: torch.Tensor, lse: torch.Tensor):
    """``o`` as ``(R, D)`` rows with unit stride along D, ``lse`` as contiguous ``(R,)``."""
    return o.reshape(-1, o.shape[-1]).contiguous(), lse.reshape(-1).contiguous()


# ----------------------------------------------------------------------------------
# merge_state: two partials
# ----------------------------------------------------------------------------------
@torch.library.custom_op("flashproof::merge_state", mutates_args=())
def merge_state_op(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor,
                   package: str = config.DEFAULT_PACKAGE) -> tuple[torch.Tensor, torch.Tensor]:
    (oa, la), (ob, lb) = _rows(o_a, lse_a), _rows(o_b.to(o_a.dtype), lse_b)
    o, lse = _module(package, o_a.device).merge_state_rows(oa, la, ob, lb)
    return o.reshape(o_a.shape), lse.reshape(lse_a.shape)


@merge_state_op.register_fake
def _(o_a, lse_a, o_b, lse_b, package=config.DEFAULT_PACKAGE):
    return torch.empty_like(o_a, memory_format=torch.contiguous_format), torch.empty_like(lse_a)


@torch.library.custom_op("flashproof::merge_state_backward", mutates_args=())
def merge_state_backward_op(grad_o: torch.Tensor, grad_lse: torch.Tensor, o_a: torch.Tensor, lse_a: torch.Tensor,
                            o_b: torch.Tensor, lse_b: torch.Tensor, package: str = config.DEFAULT_PACKAGE,
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    D = o_a.shape[-1]
    inputs = (o_a.reshape(-1, D).float(), lse_a.reshape(-1), o_b.reshape(-1, D).float(), lse_b.reshape(-1))
    # the vector-Jacobian product of the printed PyTorch terms (torch.func: no autograd graph)
    _, vjp = torch.func.vjp(_module(package).merge_state_torch, *inputs)
    grads = vjp((grad_o.reshape(-1, D).float(), grad_lse.reshape(-1)))
    return (grads[0].reshape(o_a.shape).to(o_a.dtype), grads[1].reshape(lse_a.shape),
            grads[2].reshape(o_b.shape).to(o_b.dtype), grads[3].reshape(lse_b.shape))


@merge_state_backward_op.register_fake
def _(grad_o, grad_lse, o_a, lse_a, o_b, lse_b, package=config.DEFAULT_PACKAGE):
    return torch.empty_like(o_a), torch.empty_like(lse_a), torch.empty_like(o_b), torch.empty_like(lse_b)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:4])
    ctx.package = inputs[4]


def _backward(ctx, grad_o, grad_lse):
    o_a, lse_a, o_b, lse_b = ctx.saved_tensors
    grad_o = torch.zeros_like(o_a) if grad_o is None else grad_o
    grad_lse = torch.zeros_like(lse_a) if grad_lse is None else grad_lse
    return *merge_state_backward_op(grad_o, grad_lse.float(), o_a, lse_a, o_b, lse_b, ctx.package), None


torch.library.register_autograd("flashproof::merge_state", _backward, setup_context=_setup_context)


def merge_state(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor):
    """Merge two normalised partial attention results over disjoint sets of keys.

    ``o_a``, ``o_b``: ``(..., D)`` outputs, each normalised over its own keys (fp16, bf16 or
    fp32, one shape); ``lse_a``, ``lse_b``: float32 ``(...)`` log-sum-exps of the scaled scores,
    **natural log**, ``-inf`` for a part with no key (whose ``o`` is 0). Returns ``(o, lse)``:
    the attention output over the union of the keys (in ``o_a``'s dtype, computed in fp32) and
    its lse. ``(0, -inf)`` is the identity; two empty parts give ``o = 0``, ``lse = -inf``, no NaN.

    The arithmetic is ``spec.terms.MERGE_STATE`` (claim ``lse_merge``: equal to the state merge
    ⊕), printed into the generated kernel. FlashInfer's ``merge_state`` has this name and
    meaning; FlashAttention's ``flash_attn_combine`` is the same operation over many splits
    (``merge_states``). FlashInfer's kernels keep the lse in **base 2**: convert with
    ``lse = lse_base2 * math.log(2)`` before calling (and ``lse / math.log(2)`` back).

    Differentiable in all four inputs: the backward is autograd of the same terms printed as
    PyTorch (``merge_state_torch`` in the generated file).
    """
    return _merge_state(config.DEFAULT_PACKAGE, o_a, lse_a, o_b, lse_b)


def _merge_state(package, o_a, lse_a, o_b, lse_b):
    contract.enforce("merge_state", dict(o_a=o_a, lse_a=lse_a, o_b=o_b, lse_b=lse_b))  # the declared contract
    if lse_a.numel() == 0:  # no row: empty results
        return torch.empty_like(o_a), torch.empty_like(lse_a)
    if o_a.shape[-1] == 0:  # rows of head dim 0: only the lse, by the printed PyTorch terms (no kernel launch)
        rows = lse_a.numel()
        _, lse = _module(package).merge_state_torch(o_a.reshape(rows, 0).float(), lse_a.reshape(rows),
                                                   o_b.reshape(rows, 0).float(), lse_b.reshape(rows))
        return torch.empty_like(o_a), lse.reshape(lse_a.shape)
    return merge_state_op(o_a, lse_a, o_b, lse_b, package)


api.IMPLEMENTATIONS["merge_state"] = _merge_state


# ----------------------------------------------------------------------------------
# merge_states: S partials along dim 0 (the split-KV combine)
# ----------------------------------------------------------------------------------
@torch.library.custom_op("flashproof::merge_states", mutates_args=())
def merge_states_op(o: torch.Tensor, lse: torch.Tensor,
                    package: str = config.DEFAULT_PACKAGE) -> tuple[torch.Tensor, torch.Tensor]:
    S, D = o.shape[0], o.shape[-1]
    o_s = o.reshape(S, -1, D)
    if o_s.stride(-1) != 1:
        o_s = o_s.contiguous()
    out, out_lse = _module(package, o.device).merge_states_rows(o_s, lse.reshape(S, -1).contiguous())
    return out.reshape(o.shape[1:]), out_lse.reshape(lse.shape[1:])


@merge_states_op.register_fake
def _(o, lse, package=config.DEFAULT_PACKAGE):
    return o.new_empty(o.shape[1:]), lse.new_empty(lse.shape[1:])


def merge_states(o: torch.Tensor, lse: torch.Tensor):
    """Merge ``S`` normalised partial results along dim 0: ``o`` ``(S, ..., D)``, ``lse`` float32
    ``(S, ...)`` natural log. Returns ``(o, lse)`` of shapes ``(..., D)`` and ``(...)``.

    The generated kernel folds ``spec.terms.MERGE_STATE`` over the splits from the identity
    ``(0, -inf)``, reading each split once (claim ``lse_merge``: any number of splits, in any
    order, gives the result over all their keys). ``S = 0`` gives the identity. Same dtypes and
    base-2 note as ``merge_state``. With gradients required it is a fold of ``merge_state``.
    """
    return _merge_states(config.DEFAULT_PACKAGE, o, lse)


def _merge_states(package, o, lse):
    contract.enforce("merge_states", dict(o=o, lse=lse))  # the declared contract
    if o.shape[0] == 0:  # no split: the identity
        return o.new_zeros(o.shape[1:]), lse.new_full(lse.shape[1:], float("-inf"))
    if o.requires_grad or lse.requires_grad or o.shape[-1] == 0:  # a fold of merge_state (head dim 0: lse only)
        acc_o, acc_lse = o[0], lse[0]
        for s in range(1, o.shape[0]):
            acc_o, acc_lse = _merge_state(package, acc_o, acc_lse, o[s], lse[s])
        return acc_o, acc_lse
    if lse[0].numel() == 0:
        return o.new_empty(o.shape[1:]), lse.new_empty(lse.shape[1:])
    return merge_states_op(o, lse, package)


api.IMPLEMENTATIONS["merge_states"] = _merge_states
