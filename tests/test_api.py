"""``generated.flash_attention``: the public signature, input errors, custom op, torch.compile.

Kernel calls run on ``attention_cases.DEVICE`` (FLASHPROOF_TEST_DEVICE), like the kernel tests."""

from __future__ import annotations

import inspect

import pytest
import torch

import generated
from attention_cases import on_device, to_device
from generated import flash_attention
from generator.runtime import contract
from generator import manifest, render
from generator.checking import attention_failures
from generator.variants import BlockConfig
from generator.runtime import api
from spec.reference import attention as reference

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")


def qkv(B=1, Hq=2, Hkv=1, Nq=20, Nk=30, D=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn((B, Hq, Nq, D), generator=gen).to(dtype),
            torch.randn((B, Hkv, Nk, D), generator=gen).to(dtype),
            torch.randn((B, Hkv, Nk, D), generator=gen).to(dtype))


def test_signature_is_exactly_the_documented_one():
    assert str(inspect.signature(flash_attention)) == (
        "(q, k, v, *, causal=False, alignment='top_left', window=None, key_lengths=None, mask=None, "
        "scale=None, return_lse=False, block='auto', tma='auto', softcap=None, alibi_slopes=None, sinks=None, "
        "mask_mod=None, mask_args=None, dropout_p=0.0, return_dropout_mask=False, score_mod=None, score_args=None, "
        "q_descale=None, k_descale=None, v_descale=None, out_dtype=None)")


@pytest.mark.parametrize("block", sorted(generated.KERNELS), ids=str)
def test_matches_reference_through_public_api(block):
    q, k, v = qkv(B=2, Hq=4, Hkv=2, Nq=45, Nk=70, D=40)
    lengths = torch.tensor([33, 70])
    out, lse = on_device(flash_attention, q, k, v, causal=True, alignment="bottom_right", key_lengths=lengths,
                         return_lse=True, block=block)
    ref_out, ref_lse = reference(q, k, v, causal=True, alignment="bottom_right", key_lengths=lengths)
    assert attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k) == []
    assert torch.equal(on_device(flash_attention, q, k, v, causal=True, alignment="bottom_right",
                                 key_lengths=lengths, block=block), out)


q0, k0, v0 = qkv()
BAD_INPUTS = [
    (dict(q=q0[0]), ValueError, "q must have rank 4"),
    (dict(v=v0[:, :, :10]), ValueError, "v must have k's shape \\(1, 1, 30\\) in every dim but the last"),
    (dict(v=torch.zeros(*v0.shape[:3], 257)), ValueError,
     "head_dim 257 outside 1..256 is not supported \\(v:"),  # D_v != D: MLA
    (dict(k=k0[..., :8], v=v0[..., :8]), ValueError, "must agree in batch"),
    (dict(q=qkv(Hq=3, Hkv=2)[0], k=qkv(Hkv=2)[1], v=qkv(Hkv=2)[2]), ValueError, "multiple of key/value heads"),
    (dict(k=k0.half()), TypeError, "must share one dtype"),
    (dict(q=q0.double(), k=k0.double(), v=v0.double()), TypeError, "supported: float16, bfloat16, float32"),
    (dict(q=torch.zeros(1, 1, 4, 300), k=torch.zeros(1, 1, 4, 300), v=torch.zeros(1, 1, 4, 300)), ValueError,
     "head_dim 300 outside 1..256"),
    (dict(q=torch.zeros(1, 1, 4, 0), k=torch.zeros(1, 1, 4, 0), v=torch.zeros(1, 1, 4, 0)), ValueError,
     "head_dim 0 outside 1..256"),
    (dict(alignment="bottom-right"), ValueError, "alignment must be one of"),
    (dict(window=(-1, 3)), ValueError, "non-negative ints"),
    (dict(window=5), ValueError, "pair \\(left, right\\)"),
    (dict(mask=torch.ones(20, 31, dtype=torch.bool)), ValueError, "not broadcastable"),
    (dict(mask=torch.ones(2, 1, 20, 30, dtype=torch.bool)), ValueError, "not broadcastable"),
    (dict(mask=torch.ones(20, 30)), TypeError, "mask must be a bool tensor"),
    (dict(key_lengths=torch.tensor([3, 4])), ValueError, "key_lengths must have shape \\(batch,\\)"),
    (dict(key_lengths=torch.tensor([3.0])), TypeError, "int32 or int64"),
    (dict(key_lengths=torch.tensor([31])), ValueError, "must lie in \\[0, N_k=30\\]"),
    (dict(block=(32, 128)), ValueError, "python -m generator --br 32 --bc 128"),
    (dict(causal=1), TypeError, "causal must be True or False"),
    (dict(scale=float("nan")), ValueError, "scale must be a finite number"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_INPUTS, ids=[m for _, _, m in BAD_INPUTS])
def test_bad_inputs_name_the_problem(kwargs, error, message):
    args = to_device({"q": q0, "k": k0, "v": v0, **kwargs})
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(error, match=message), contract.checking_values():  # key_lengths: the opt-in value check
        flash_attention(q, k, v, **args)


def test_cpu_without_interpreter_is_refused(monkeypatch):  # CPU tensors on purpose, on every test device
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        flash_attention(q0, k0, v0)


def test_mask_kind_not_compiled_in_names_the_command(tmp_path):
    config = BlockConfig(64, 64, masks=("causal",))
    (tmp_path / "fwd.py").write_text(render.render_variant(config.variants()[0]))
    causal_only = manifest.import_file(tmp_path / "fwd.py")
    kw = dict(alignment="top_left", key_lengths=None, mask=None, scale=None)
    out, lse = on_device(api.attention_forward, causal_only, q0, k0, v0, causal=True, window=None, **kw)
    assert attention_failures(out, lse, *reference(q0, k0, v0, causal=True), v0, q=q0, k=k0) == []
    with pytest.raises(ValueError, match="python -m generator --br 64 --bc 64 --mask causal"):
        on_device(api.attention_forward, causal_only, q0, k0, v0, causal=True, window=(3, 3), **kw)


def test_custom_op_fake_and_compile():
    op = torch.ops.flashproof.flash_attention.default
    q, k, v = to_device((q0, k0, v0))
    args = (q, k, v, None, None, True, "top_left", None, None, 64, 64)
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))

    def f(q, k, v):
        return flash_attention(q, k, v, causal=True) * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v), f(q, k, v))


def test_softmax_entry_point():
    x = torch.randn(3, 5, 7)
    torch.testing.assert_close(on_device(generated.softmax, x, dim=1), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="supported: float16"):
        generated.softmax(to_device(x.double()))  # on the test device: the device is checked first
