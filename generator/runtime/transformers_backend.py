"""flashproof as a Hugging Face transformers attention backend (``attn_implementation="proof_attention"``).

    import generated
    generated.register_transformers()          # returns the name, "proof_attention"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="proof_attention")

The name has no "flash" in it on purpose: transformers takes any ``attn_implementation``
containing "flash" for a FlashAttention request (``transformers.utils.generic.
is_flash_attention_requested`` is ``"flash" in name``) and tries to load FlashAttention's
kernels for it, so ``"flashproof"`` itself fails at ``from_config``.

``register_transformers`` registers two things under one name, both needed:

* the attention function (``transformers.AttentionInterface``): every attention layer calls it
  with ``(module, query, key, value, attention_mask, **kwargs)``, q ``(B, Hq, N_q, D)`` and k, v
  ``(B, Hkv, N_k, D)`` (after transformers' cache appended the new keys), and takes back the
  output as ``(B, N_q, Hq, D)``;
* the mask builder (``transformers.AttentionMaskInterface``): without one, transformers builds no
  mask at all for an unknown backend and padding would be silently attended. flashproof takes
  SDPA's (``flashproof_mask``): a bool ``(B, 1, N_q, N_k)`` mask (True = attend), or ``None``
  where no key is padded and the mask is causal (plus a sliding window, which SDPA cannot take
  as an argument but flashproof can: ``window=``).

What crosses HBM: with ``attention_mask=None`` (no padding) the kernels take causality and the
window as structure (``causal=True, window=(sliding_window - 1, 0)``), no mask bytes, and skip the
tiles they exclude; with a mask tensor the kernels read it as flashproof's dense ``mask=`` (one
bool per (b, i, j), broadcast over heads). Left padding is a key *prefix* per row, which
``key_lengths`` (a per-row key *count*) cannot express, so padded batches take the dense path.

Nothing here computes attention: every call goes to ``generator.runtime.api.flash_attention``
(GQA, softcap, sinks, masks, scale and the input checks are its own).
"""

from __future__ import annotations

import functools

import torch

from generator.runtime import api
from generator.runtime.dispatch import DEFAULT_PACKAGE

#: the ``attn_implementation`` name (no "flash" in it: see the module docstring)
NAME = "proof_attention"


def _dense_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """transformers' mask as flashproof's bool ``mask=`` (True = attend). A bool mask is taken as
    it is; an additive float mask (the ``eager`` form, or a 4D mask a user built) only where every
    entry is 0 (attend) or at most half the dtype's lowest value (masked): any other value is a
    bias, which a bool mask cannot carry."""
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if not attention_mask.is_floating_point():
        raise TypeError(f"flashproof attention got an attention_mask of dtype {attention_mask.dtype}; "
                        "pass a bool mask (True = attend) or an additive float mask of 0 / -inf")
    masked = attention_mask <= torch.finfo(attention_mask.dtype).min / 2
    if not torch.compiler.is_compiling() and not bool(((attention_mask == 0) | masked).all()):
        raise ValueError("flashproof attention got an additive float attention_mask with values other than 0 "
                         "and -inf (a position bias): flashproof takes masks, not biases; pass a bool mask, "
                         "or use attn_implementation='eager' / 'sdpa' for a model with additive biases")
    return ~masked


def _flash_attention(package: str):
    """``flash_attention`` on the kernels of ``package`` (``generated``'s, looked up at each call,
    or an ``--out`` package's)."""
    return api.flash_attention if package == DEFAULT_PACKAGE else _package_attention(package)


@functools.lru_cache(maxsize=None)
def _package_attention(package: str):
    return api.for_package(api.flash_attention, package)


def flashproof_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                 value: torch.Tensor, attention_mask: torch.Tensor | None,
                                 dropout: float = 0.0, scaling: float | None = None,
                                 sliding_window: int | None = None, softcap: float | None = None,
                                 is_causal: bool | None = None, s_aux: torch.Tensor | None = None,
                                 flashproof_package: str = DEFAULT_PACKAGE, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract (``sdpa_attention_forward``'s arguments) on
    ``flash_attention`` (the kernels of ``flashproof_package``, which ``register_transformers``
    binds). Returns ``(out (B, N_q, Hq, D), None)``: no attention weights (flashproof never forms
    the N_q x N_k probabilities). ``dropout`` (the model's ``attention_dropout`` in training mode, 0
    in eval) is FlashAttention 2's attention dropout, ``flash_attention``'s ``dropout_p``."""
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError("flashproof attention does not take a position_bias (an additive bias per score); "
                                  "use attn_implementation='eager' / 'sdpa' for this model")
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"flashproof attention got an attention_mask of type {type(attention_mask).__name__} "
                        "(a flex_attention BlockMask?); it takes a bool tensor (True = attend): load the model with "
                        f"attn_implementation={NAME!r} after generated.register_transformers(), so transformers "
                        "builds the mask in the form flashproof reads")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    n_q = query.shape[2]  # value may have its own head dim (MLA, DeepSeek-V2/V3): passed as it is
    sinks = None if s_aux is None else s_aux.float()  # gpt-oss: one learnable logit per head, float32
    flash_attention = _flash_attention(flashproof_package)

    if attention_mask is None:
        # No tensor: ``flashproof_mask`` skipped it because no key is padded (SDPA's rule,
        # ``_ignore_causal_mask_sdpa``). Either N_k == N_q (prefill without cache), N_q == 1 (one
        # decode step: the query is the last position and the cache's keys are the positions just
        # before it, also for a sliding-window cache), or prefill into an empty static cache (keys
        # past N_q are unwritten slots, top-left causal excludes them). Top-left alignment is right
        # for the first and the last, bottom-right for the single query; the window (transformers'
        # ``sliding_window_overlay``: query i sees key j iff i - j < sliding_window) with the same.
        alignment = "bottom_right" if n_q == 1 else "top_left"
        window = (sliding_window - 1, 0) if (causal and sliding_window) else None
        out = flash_attention(query, key, value, causal=causal, alignment=alignment, window=window,
                              scale=scaling, softcap=softcap, sinks=sinks, dropout_p=dropout)
    else:
        # The mask already holds causality, the sliding window and every row's padding (transformers'
        # ``sliding_window_overlay``: key j seen from query i iff i - j < sliding_window).
        mask = _dense_mask(attention_mask)
        out = flash_attention(query, key, value, mask=mask, scale=scaling, softcap=softcap, sinks=sinks,
                              dropout_p=dropout)
    return out.transpose(1, 2).contiguous(), None


def flashproof_mask(*args, local_size: int | None = None, config=None, **kwargs):
    """SDPA's mask builder (``transformers.masking_utils.sdpa_mask``: bool, True = attend, or None
    when no tensor is needed), except for a sliding-window layer without padding: SDPA must build
    that mask once the window bites (``local_size`` is the window), flashproof takes the window as
    ``window=`` from the layer's ``sliding_window`` and needs no tensor. Only a causal mask's
    ``local_size`` that is the config's ``sliding_window`` is dropped: never a chunk size (Llama 4's
    chunked attention keeps its dense mask), never a bidirectional window (``|i - j| <= w``, kept
    dense: the causal-skip flag is off for those)."""
    from transformers.masking_utils import sdpa_mask
    causal_skip = kwargs.get("allow_is_causal_skip", True) and not kwargs.get("allow_is_bidirectional_skip", False)
    if (causal_skip and local_size is not None and local_size == getattr(config, "sliding_window", None)
            and getattr(config, "attention_chunk_size", None) is None):
        local_size = None
    return sdpa_mask(*args, local_size=local_size, config=config, **kwargs)


def register_transformers(name: str = NAME, *, package: str = DEFAULT_PACKAGE) -> str:
    """Register flashproof's kernels with transformers under ``name`` (default ``"proof_attention"``):
    the attention function (``AttentionInterface``) and its mask builder (``flashproof_mask``, with
    ``AttentionMaskInterface``), so that ``from_pretrained(..., attn_implementation=name)`` /
    ``from_config(cfg, attn_implementation=name)`` and ``model.set_attn_implementation(name)``
    run them in prefill and in ``generate``. Idempotent; returns ``name``. ``package``: whose
    kernels run (the index of an ``--out`` package binds its own, like ``api.for_package``).
    Needs transformers >= 4.55 (``pip install "flashproof[hf]"``)."""
    if "flash" in name:
        raise ValueError(f"register_transformers(name={name!r}): transformers treats every attn_implementation "
                         "containing 'flash' as a FlashAttention request and tries to load FlashAttention's own "
                         f"kernels for it; pick a name without 'flash', such as the default {NAME!r}")
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: F401
    except ImportError as e:
        raise ImportError(f"register_transformers needs transformers >= 4.55 with AttentionInterface and "
                          f"AttentionMaskInterface ({e}); install it with pip install 'flashproof[hf]'") from e
    forward = flashproof_attention_forward
    if package != DEFAULT_PACKAGE:
        forward = functools.wraps(forward)(functools.partial(forward, flashproof_package=package))
    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, flashproof_mask)
    return name


def for_package(package: str):
    """``register_transformers`` registering the kernels of ``package`` (what the index of a
    package emitted with ``python -m generator --out DIR`` exports)."""
    if package == DEFAULT_PACKAGE:
        return register_transformers

    @functools.wraps(register_transformers)
    def register(name: str = NAME) -> str:
        return register_transformers(name, package=package)
    return register
