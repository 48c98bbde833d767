"""``flashproof::flash_attention`` as a PyTorch custom op (opaque to torch.compile).

The op takes checked inputs (``generator.runtime.api.flash_attention`` checks them, with
``generator.runtime.checks``) and returns ``(out, lse)``. Its fake implementation gives
torch.compile the output shapes *and strides* of the real one (both contiguous, whatever
q's layout) without running a kernel, so ``torch.compile(fullgraph=True)`` traces through it.
``package`` names the generated package whose kernels run (``generated``, or an ``--out`` one);
``mask_mod`` the name of a ``spec.mask_mod`` compiled in, ``mask_args`` its packed parameters;
``dropout_p`` and ``philox`` (int64 ``(2,)``: the Philox seed and counter offset the runtime drew
from torch's generator, a tensor so that a traced graph carries it) the dropout.

Import order, no cycles: ``checks`` <- ``dispatch`` <- ``custom_op`` <- ``autograd`` <- ``api``.
The backward registers itself on this op in ``generator.runtime.autograd``.
"""

from __future__ import annotations

from typing import Optional

import torch

from generator.runtime import dispatch, plans

#: the op's launch per signature of its inputs (``generator.runtime.plans``; the calls through the op:
#: torch.compile's graphs, dispatch modes, tensor subclasses)
_PLANS = plans.PlanCache()


def outputs_like(q: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` as both the kernels and the fake allocate them: contiguous, out in q's dtype
    with v's head dim ``(B, Hq, N_q, D_v)``."""
    B, Hq, Nq, _ = q.shape
    return (torch.empty((B, Hq, Nq, v.shape[-1]), dtype=q.dtype, device=q.device),
            torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device))


@torch.library.custom_op("flashproof::flash_attention", mutates_args=())
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                       key_lengths: Optional[torch.Tensor], causal: bool, alignment: str,
                       window: Optional[list[int]], scale: Optional[float], block_m: int,
                       block_n: int, tma: bool = False,
                       package: str = dispatch.DEFAULT_PACKAGE, softcap: Optional[float] = None,
                       alibi_slopes: Optional[torch.Tensor] = None,
                       sinks: Optional[torch.Tensor] = None, mask_mod: Optional[str] = None,
                       mask_args: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                       philox: Optional[torch.Tensor] = None, score_mod: Optional[str] = None,
                       score_f: Optional[torch.Tensor] = None,
                       score_i: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    if mask_mod is None and philox is None and score_mod is None:  # planned per signature (a mask by its metadata)
        window = None if window is None else tuple(window)
        key = plans.signature((q, k, v, key_lengths, alibi_slopes, sinks, mask),
                              (causal, alignment, window, scale, block_m, block_n, tma, package, softcap))
        run = _PLANS.get(key) if key is not None else None
        if run is None:
            run = _PLANS.record(key, dispatch.planned_forward(
                dispatch.module_for("fwd", (block_m, block_n), package, q.device), q, k, v, causal=causal,
                alignment=alignment, window=window, key_lengths=key_lengths, scale=scale, tma=tma, softcap=softcap,
                alibi_slopes=alibi_slopes, sinks=sinks, mask=mask))
        return run(q, k, v, key_lengths, alibi_slopes, sinks, mask)
    module = dispatch.module_of("fwd", (block_m, block_n), package, q.device, mask_mod, score_mod)
    return dispatch.attention_forward(module, q, k, v, causal=causal, alignment=alignment,
                                      window=None if window is None else tuple(window), key_lengths=key_lengths,
                                      mask=mask, scale=scale, tma=tma, softcap=softcap, alibi_slopes=alibi_slopes,
                                      sinks=sinks, mask_args=mask_args, dropout_p=dropout_p, philox=philox,
                                      score_f=score_f, score_i=score_i)


@flash_attention_op.register_fake
def _(q, k, v, mask, key_lengths, causal, alignment, window, scale, block_m, block_n, tma=False,
      package=dispatch.DEFAULT_PACKAGE, softcap=None, alibi_slopes=None, sinks=None, mask_mod=None, mask_args=None,
      dropout_p=0.0, philox=None, score_mod=None, score_f=None, score_i=None):
    return outputs_like(q, v)
