"""The transformers backend (generator.runtime.transformers_backend) against transformers' own
eager attention: tiny random Llama, Gemma 2 and gpt-oss models built from configs (no download),
float32, a left-padded batch. Logits at the real tokens agree within float32 tolerance, and
greedy ``generate`` (prefill, then decode steps through transformers' DynamicCache or
StaticCache) gives the same tokens; so do training gradients and a ``torch.compile``d model.
Every argument the backend honours is shown to matter: dropping it from the call breaks the
comparison (``test_each_argument_matters``), so the tolerance is not vacuous. The weights are
drawn with std 0.3 (``initializer_range``; transformers' 0.02 leaves attention's contribution to
the logits below float32 resolution, and any attention would pass).
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import generated  # noqa: E402
from generator.runtime import transformers_backend  # noqa: E402

NAME = generated.register_transformers()

#: float32 logits of O(10) after two layers: the kernels' fp32 error (≈1e-6 per attention output)
#: grows through the MLPs, norms and the LM head; measured max 1.1e-5 (see docs/transformers.md)
ATOL = 1e-4
#: prompt length and the left padding of the batch's second row (N <= 16 under the interpreter)
N, PAD = 10, 4


#: every model: 2 layers, hidden 64, 4 query heads over 2 K/V heads (GQA) of dim 16, vocabulary 100;
#: std 0.3 weights (module docstring); no end-of-sequence token, so generate runs every step
TINY = dict(vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, initializer_range=0.3, pad_token_id=0,
            eos_token_id=None)


def _llama():
    return transformers.LlamaConfig(**TINY)


def _gemma2():
    # softcap 2.0 and query_pre_attn_scalar 8 (scale 8^-1/2, not 1/sqrt(head_dim)) so that both bite;
    # a window of 4 on the first layer (layer 0 sliding, layer 1 full)
    return transformers.Gemma2Config(**TINY, sliding_window=4, attn_logit_softcapping=2.0, query_pre_attn_scalar=8,
                                     final_logit_softcapping=None, layer_types=["sliding_attention", "full_attention"])


def _gpt_oss():
    if not hasattr(transformers, "GptOssConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no gpt-oss (GptOssConfig, added in 4.55)")
    # learnable sinks on every layer; a window of 4 on the first; 2 experts, 1 per token
    return transformers.GptOssConfig(**TINY, num_local_experts=2, num_experts_per_tok=1, sliding_window=4,
                                     layer_types=["sliding_attention", "full_attention"])


CONFIGS = {"llama": _llama, "gemma2": _gemma2, "gpt_oss": _gpt_oss}


def _models(which):
    """(eager model, flashproof model) with the same random weights, in eval mode."""
    cfg = CONFIGS[which]()
    torch.manual_seed(0)
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=NAME).eval()
    ours.load_state_dict(eager.state_dict())
    assert eager.config._attn_implementation == "eager" and ours.config._attn_implementation == NAME
    assert eager.dtype == ours.dtype == torch.float32
    return eager, ours


def _batch():
    """Two prompts of N tokens, the second left-padded by PAD (token 0, mask 0)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 100, (2, N), generator=g)
    mask = torch.ones(2, N, dtype=torch.long)
    ids[1, :PAD], mask[1, :PAD] = 0, 0
    return ids, mask


def _logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_logits_match_eager_on_left_padded_batch(which):
    eager, ours = _models(which)
    ids, mask = _batch()
    want, got = _logits(eager, ids, mask), _logits(ours, ids, mask)
    # padded query rows see no key: flashproof gives 0 there (eager a uniform average), never NaN
    assert torch.isfinite(got).all()
    real = mask.bool()
    err = (got - want)[real].abs().max().item()
    assert err <= ATOL, f"{which}: max |logit diff| {err:.3g} > {ATOL}"
    # the padding matters: the padded row's logits differ from the same tokens attending the pads
    unmasked = _logits(eager, ids, torch.ones_like(mask))
    assert (unmasked - want)[1, PAD:].abs().max() > 100 * ATOL


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_greedy_generate_matches_eager(which):
    eager, ours = _models(which)
    ids, mask = _batch()
    kwargs = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    want = eager.generate(ids, **kwargs)
    got = ours.generate(ids, **kwargs)
    assert got.shape == (2, N + 4)  # no end-of-sequence token (eos_token_id=None): every step ran
    assert torch.equal(got, want), f"{which}: {got[:, N:].tolist()} != eager {want[:, N:].tolist()}"


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_greedy_generate_with_static_cache_matches_eager(padded):
    """transformers' StaticCache (Gemma 2: a full layer and a sliding one): keys past the written
    positions are unwritten slots. The prefill of an unpadded batch gets no mask (top-left causal
    excludes those slots, the sliding layer adds its window), the decode steps get a
    (B, 1, 1, N_k) mask."""
    eager, ours = _models("gemma2")
    ids, mask = _batch()
    if not padded:
        mask = torch.ones_like(mask)
    kwargs = dict(attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0,
                  cache_implementation="static")
    want = eager.generate(ids, **kwargs)
    got = ours.generate(ids, **kwargs)
    assert got.shape == (2, N + 3) and torch.equal(got, want)


def test_training_gradients_match_eager():
    """Training mode (attention_dropout 0): the loss's gradients through flashproof's backward,
    the learnable sinks (s_aux) included, match eager's on the left-padded batch (measured max
    difference 2e-6 against gradients up to 0.65)."""
    eager, ours = _models("gpt_oss")
    ids, mask = _batch()
    labels = ids.masked_fill(mask == 0, -100)
    for model in (eager.train(), ours.train()):
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    attention = [(name, a.grad, b.grad) for (name, a), b in zip(eager.named_parameters(), ours.parameters())
                 if ".self_attn." in name]
    assert any(name.endswith("sinks") for name, _, _ in attention)
    for name, want, got in attention:
        assert got is not None and (got - want).abs().max() <= 1e-5, name
    assert max(want.abs().max() for name, want, _ in attention if name.endswith("sinks")) > 1e-2


def test_torch_compile_traces_the_backend():
    """torch.compile of the whole model (Dynamo through the attention function, the mask builder
    and flashproof's custom op; aot_eager keeps it quick) gives eager's logits on the padded batch."""
    eager, ours = _models("llama")
    ids, mask = _batch()
    compiled = torch.compile(ours, backend="aot_eager")
    with torch.no_grad():
        got = compiled(input_ids=ids, attention_mask=mask).logits
    assert (got - _logits(eager, ids, mask))[mask.bool()].abs().max() <= ATOL


def _spy(monkeypatch):
    """The keyword arguments of every flash_attention call the backend makes."""
    seen = []
    attention = transformers_backend.api.flash_attention

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return attention(*args, **kwargs)
    monkeypatch.setattr(transformers_backend.api, "flash_attention", spy)
    return seen


@pytest.mark.parametrize("which", ["gemma2", "llama"])
def test_unpadded_batch_takes_the_structured_path(which, monkeypatch):
    """Without padding no mask tensor is built, also for Gemma 2's sliding layer whose window of 4
    bites on the 10-token prompt (SDPA would need a dense mask there): the backend passes
    causal=True and window=(3, 0), no mask bytes, in prefill and in every decode step; logits and
    greedy tokens agree with eager."""
    eager, ours = _models(which)
    seen = _spy(monkeypatch)
    ids = _batch()[0][:1]
    err = (_logits(ours, ids, None) - _logits(eager, ids, None)).abs().max().item()
    assert err <= ATOL, f"{which}: max |logit diff| {err:.3g} > {ATOL}"
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    got = ours.generate(ids, **kwargs)
    assert got.shape == (1, N + 4) and torch.equal(got, eager.generate(ids, **kwargs))
    assert seen and all(kw["causal"] is True and "mask" not in kw for kw in seen)
    windows = {kw["window"] for kw in seen}
    assert windows == ({None, (3, 0)} if which == "gemma2" else {None})
    assert {kw["alignment"] for kw in seen} == {"top_left", "bottom_right"}  # prefill, decode steps


#: (model, the keyword the backend reads that the model passes, whether the batch is padded)
HONOURED = [("gemma2", "softcap", True), ("gemma2", "scaling", True), ("gemma2", "sliding_window", False),
            ("gpt_oss", "s_aux", True), ("llama", "attention_mask", True)]


@pytest.mark.parametrize("which, keyword, padded", HONOURED)
def test_each_argument_matters(which, keyword, padded, monkeypatch):
    """Dropping one honoured argument from every call breaks the agreement with eager: the
    comparisons above are sensitive to each of them."""
    eager, ours = _models(which)
    forward = transformers_backend.flashproof_attention_forward

    def dropping(module, query, key, value, attention_mask, **kwargs):
        if keyword == "attention_mask":
            attention_mask = None
        kwargs.pop(keyword, None)
        return forward(module, query, key, value, attention_mask, **kwargs)
    transformers.AttentionInterface.register(NAME, dropping)
    try:
        ids, mask = _batch() if padded else (_batch()[0], torch.ones(2, N, dtype=torch.long))
        err = (_logits(ours, ids, mask) - _logits(eager, ids, mask))[mask.bool()].abs().max().item()
    finally:
        generated.register_transformers()
    assert err > 100 * ATOL, f"dropping {keyword} left {which}'s logits within {err:.3g} of eager"


def _qkv(n_q=3, n_k=5):
    g = torch.Generator().manual_seed(2)
    return (torch.randn(2, 4, n_q, 16, generator=g), torch.randn(2, 2, n_k, 16, generator=g),
            torch.randn(2, 2, n_k, 16, generator=g))


class _Module(torch.nn.Module):
    is_causal = True


def test_row_with_no_key_is_zero():
    q, k, v = _qkv()
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[1, :, 0] = False
    for sinks in (None, torch.zeros(4)):
        out, weights = transformers_backend.flashproof_attention_forward(_Module(), q, k, v, mask, s_aux=sinks)
        assert weights is None and out.shape == (2, 3, 4, 16)
        assert torch.isfinite(out).all() and torch.equal(out[1, 0], torch.zeros(4, 16))
        assert out[0, 0].abs().max() > 0


def test_value_head_dim_of_its_own_is_passed_unpadded(monkeypatch):
    """DeepSeek-style MLA layers give v its own head dim: the backend hands v to the kernels as it is
    (no padding to q's head dim) and the result is the float64 reference's."""
    q, k, _ = _qkv()
    v = torch.randn(2, 2, 5, 8, generator=torch.Generator().manual_seed(5))
    mask = torch.rand(2, 1, 3, 5, generator=torch.Generator().manual_seed(6)) > 0.3
    mask[..., 0] = True
    seen = []
    real = transformers_backend._flash_attention

    def spy(package):
        fn = real(package)
        return lambda q_, k_, v_, **kw: (seen.append(tuple(v_.shape)), fn(q_, k_, v_, **kw))[1]

    monkeypatch.setattr(transformers_backend, "_flash_attention", spy)
    out, _ = transformers_backend.flashproof_attention_forward(_Module(), q, k, v, mask)
    assert seen == [(2, 2, 5, 8)] and out.shape == (2, 3, 4, 8)
    kr, vr = (t.double().repeat_interleave(2, dim=1) for t in (k, v))
    s = (q.double() @ kr.transpose(-1, -2)) * 16 ** -0.5
    want = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ vr
    torch.testing.assert_close(out.double(), want.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_additive_float_mask_of_0_and_min_is_taken():
    q, k, v = _qkv()
    keep = torch.rand(2, 1, 3, 5, generator=torch.Generator().manual_seed(3)) > 0.3
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    want, _ = transformers_backend.flashproof_attention_forward(_Module(), q, k, v, keep)
    got, _ = transformers_backend.flashproof_attention_forward(_Module(), q, k, v, additive)
    assert torch.equal(got, want)


def test_what_it_cannot_honour_raises():
    q, k, v = _qkv()
    forward = transformers_backend.flashproof_attention_forward
    with pytest.raises(ValueError, match="position bias"):
        forward(_Module(), q, k, v, torch.randn(2, 1, 3, 5))
    with pytest.raises(NotImplementedError, match="position_bias"):
        forward(_Module(), q, k, v, None, position_bias=torch.zeros(1, 4, 3, 5))
    with pytest.raises(TypeError, match="BlockMask"):
        forward(_Module(), q, k, v, object())
    with pytest.raises(TypeError, match="bool mask"):
        forward(_Module(), q, k, v, torch.ones(2, 1, 3, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="without 'flash'"):
        generated.register_transformers("flashproof")


def test_dropout_is_flash_attentions_dropout_p():
    """transformers' ``dropout`` (attention_dropout in training mode) is flash_attention's
    ``dropout_p``: the same seed gives the same output as a direct call, and a model in training
    mode with attention_dropout > 0 trains (finite gradients) and drops different weights per step."""
    q, k, v = _qkv()
    forward = transformers_backend.flashproof_attention_forward
    torch.manual_seed(5)
    got, _ = forward(_Module(), q, k, v, None, dropout=0.3)
    torch.manual_seed(5)
    want = generated.flash_attention(q, k, v, causal=True, dropout_p=0.3).transpose(1, 2)
    assert torch.equal(got, want)
    assert not torch.equal(got, forward(_Module(), q, k, v, None)[0])
    cfg = _llama()
    cfg.attention_dropout = 0.1
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=NAME).train()
    ids = _batch()[0]
    first = model(input_ids=ids, labels=ids)
    first.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert not torch.equal(first.logits, model(input_ids=ids).logits)  # another mask per call
    model.eval()  # dropout 0: deterministic
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_an_out_package_registers_its_own_kernels():
    """The index of a package emitted with ``--out`` exports ``for_package(__name__)``: its
    backend dispatches to that package's kernels, never to ``generated``'s."""
    register = transformers_backend.for_package("no_such_flashproof_package")
    name = register("proof_attention_other")
    forward = transformers.AttentionInterface._global_mapping[name]
    q, k, v = _qkv()
    with pytest.raises(ModuleNotFoundError, match="no_such_flashproof_package"):
        forward(_Module(), q, k, v, None)
    assert transformers_backend.for_package("generated") is transformers_backend.register_transformers
    assert generated.register_transformers is transformers_backend.register_transformers
