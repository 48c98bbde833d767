"""The opt-in Hopper TMA forward (``tma=True``): correctness, its fallback and error rules, and
proof from an ahead-of-time sm_90 compile that it really moves tiles by TMA.

1. The TMA forward against the float64 spec reference on every mask kind, ragged N, a padded
   head dim, GQA, fp32/fp16/bf16 and strided (non-contiguous, TMA-legal) inputs. On CPU the
   interpreter emulates the descriptors (zero-filled reads outside the tensor, clipped
   writes); with ``FLASHPROOF_TEST_DEVICE=cuda`` on an sm_90 GPU the same cases run on the
   hardware. Every case asserts that the TMA path was really taken, and two mutants of the
   TMA lines show that the check catches a wrong descriptor index.
2. The rules of ``generator.runtime.launch``: a layout TMA cannot read falls back to the
   pointer path with a ``TmaFallbackWarning`` naming the tensor and the rule; a machine
   without TMA raises ``ValueError`` naming the problem and the fix.
3. ``benchmarks.static``: the default 64x64 TMA forward compiles for sm_90 (hd 64/128,
   fp16/bf16, unmasked and causal) without spills, within shared memory, every dot on wgmma,
   and with TMA loads (``UTMALDG``) and the O store (``UTMASTG``) in its SASS.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from attention_cases import DEVICE, forward_failures, forward_module, on_device, random_inputs, to_device
from benchmarks import static
from generated import flash_attention
from generator import manifest
from generator.checking import attention_failures
from generator.runtime import launch
from generator.runtime.launch import TmaFallbackWarning
from spec.reference import attention as reference

pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
    # a silent fallback would make the correctness cases test the pointer path: fail instead
    pytest.mark.filterwarnings("error::generator.runtime.launch.TmaFallbackWarning"),
]

needs_tma = pytest.mark.skipif(
    DEVICE == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability() < launch.TMA_MIN_CAPABILITY,
    reason="the TMA path needs an sm_90+ GPU (this one would raise, as tested below)")


@pytest.fixture
def tma_taken(monkeypatch):
    """The ``USE_TMA`` of every launch, as ``launch.tma_operands`` decided it."""
    taken = []
    original = launch.tma_operands

    def spy(*args, **kwargs):
        operands, use_tma = original(*args, **kwargs)
        taken.append(use_tma)
        return operands, use_tma

    monkeypatch.setattr(launch, "tma_operands", spy)
    return taken


def heads_inner(q, k, v):
    """``(B, N, H, D)`` storage seen as ``(B, H, N, D)`` (a transpose: non-contiguous), and K and
    V interleaved in one ``(B, N, 2, H, D)`` buffer (V starts ``H·D`` elements in)."""
    kv = torch.stack((k, v), dim=1).permute(0, 3, 1, 2, 4).contiguous()  # (B, N, 2, H, D)
    return q.transpose(1, 2).contiguous().transpose(1, 2), kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)


# ----------------------------------------------------------------------------------
# 1. Correctness of the TMA path (interpreter on CPU; the hardware on an sm_90 GPU).
# ----------------------------------------------------------------------------------
#: defaults: B=1, Hq=2, Hkv=1, Nq=70, Nk=90 (ragged: not multiples of 64), D=32, fp32
CASES = {
    "none": {},
    "causal": dict(causal=True),
    "causal_bottom_right": dict(causal=True, alignment="bottom_right", Nq=45, Nk=97),
    "window": dict(window=(17, 5)),
    "key_lengths": dict(B=2, key_lengths=[0, 61]),
    "dense_mask": dict(mask="random"),
    "dense_per_head": dict(mask="per_head", Nk=130),
    "all_kinds": dict(B=2, causal=True, window=(30, 2), key_lengths=[50, 7], mask="random"),
    "gqa": dict(Hq=6, Hkv=2, causal=True),
    "blocks_exact": dict(Nq=128, Nk=128, causal=True),
    "padded_head_dim_fp32": dict(D=40),  # BLOCK_D 64: columns 40..63 zero-filled by TMA
    "padded_head_dim_fp16": dict(D=40, dtype=torch.float16, causal=True),
    "fp16_hd64": dict(dtype=torch.float16, D=64, window=(20, 20)),
    "bf16_hd128": dict(dtype=torch.bfloat16, D=128, Nq=40, Nk=70),
    "strided_fp32": dict(layout=heads_inner, Hq=2, Hkv=2, causal=True),
    "strided_fp16_gqa": dict(layout=heads_inner, dtype=torch.float16, Hq=4, Hkv=2, D=48),
}


@needs_tma
@pytest.mark.parametrize("case", list(CASES))
def test_tma_forward_matches_reference(case, tma_taken):
    assert forward_failures(forward_module(), tma=True, **CASES[case]) == []
    assert tma_taken == [True], "the launch did not take the TMA path"


@needs_tma
@pytest.mark.parametrize("block", [(16, 32), (128, 64), (128, 128)], ids=lambda b: f"{b[0]}x{b[1]}")
def test_tma_other_blocks(block, tma_taken):
    assert forward_failures(forward_module(block), tma=True, Nq=150, Nk=90, causal=True, key_lengths=[77],
                            mask="random") == []
    assert tma_taken == [True]


@needs_tma
@pytest.mark.parametrize("block, D", [((128, 128), 128), ((128, 64), 200)], ids=("128x128_hd128", "128x64_hd200"))
def test_tma_sm90_defaults_above_head_dim_64(block, D, tma_taken):
    """The sm_90 TMA defaults above head dim 64 (``api.AUTO_BLOCKS``): 128x128 up to 128, 128x64
    above (a [1, 1, 128, 256] box), bf16, ragged lengths over two key tiles, causal bottom-right, GQA."""
    assert forward_failures(forward_module(block), tma=True, dtype=torch.bfloat16, D=D, Hq=4, Hkv=2,
                            Nq=150, Nk=200, causal=True, alignment="bottom_right") == []
    assert tma_taken == [True]


def test_auto_block_follows_the_memory_path(monkeypatch):
    """``block="auto"`` picks by the path the launch will take (``launch.takes_tma_path``): on an sm_90
    GPU with TMA 128x64 at head dim 64, 128x128 at 65-128, 128x64 above; on the pointer path (sm_80,
    tma=False, a layout TMA cannot read) 128x64 up to 128 and 64x64 above, never the block whose
    pointer kernel spills at head dim 128 (``benchmarks.static.POINTER_SPILLS``)."""
    from generator.runtime import api

    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert api.auto_block(cuda, 128, tma=True) == (128, 128) and api.auto_block(cuda, 96, tma=True) == (128, 128)
    assert api.auto_block(cuda, 64, tma=True) == (128, 64) and api.auto_block(cuda, 128, tma=False) == (128, 64)
    # above head dim 128 (BLOCK_D 256) neither 128x128 nor, on the pointer path, 128x64 fits
    assert api.auto_block(cuda, 256, tma=True) == (128, 64) and api.auto_block(cuda, 160, tma=False) == (64, 64)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert api.auto_block(cuda, 128, tma=True) == (128, 64)  # sm_80 has no TMA path: its settings are the pointer's
    # float32 on a GPU: IEEE dots on the CUDA cores, the block that fits shared memory at every head dim
    assert api.auto_block(cuda, 256, tma=True, dtype=torch.float32) == api.FP32_BLOCK == (16, 32)
    assert api.auto_block(torch.device("cpu"), 64, dtype=torch.float32) == (128, 64)  # the interpreter: as sm_80


@pytest.mark.skipif(not launch.interpreting(), reason="CPU tensors take descriptors under the interpreter only")
def test_takes_tma_path_predicts_tma_operands():
    """What ``takes_tma_path`` predicts (silently, for ``block="auto"``) is what ``tma_operands``
    decides at launch."""
    q = _t((1, 2, 70, 128))
    strided = q.transpose(-1, -2).contiguous().transpose(-1, -2)  # head dim not contiguous: no descriptor
    for tensors, want in (({"q": q, "k": q, "v": q}, True), ({"q": q, "k": strided, "v": q}, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the prediction is silent
            assert launch.takes_tma_path(True, tensors, 128) is want
        assert launch.takes_tma_path(False, tensors, 128) is False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TmaFallbackWarning)
            assert launch.tma_operands(True, {n: (t, 128) for n, t in tensors.items()}, 128)[1] is want


def test_strided_layout_is_what_it_claims():
    """The strided case really is non-contiguous, with V at an offset inside K's buffer."""
    _, q, k, v = random_inputs(dtype=torch.float16, B=1, Hq=4, Hkv=2, Nq=5, Nk=6, D=48, seed=0)
    qs, ks, vs = heads_inner(q, k, v)
    assert not (qs.is_contiguous() or ks.is_contiguous() or vs.is_contiguous())
    assert vs.data_ptr() - ks.data_ptr() == 2 * 48 * 2 and ks.stride() == (6 * 2 * 2 * 48, 48, 2 * 2 * 48, 1)
    assert torch.equal(qs, q) and torch.equal(ks, k) and torch.equal(vs, v)
    assert all(launch.tma_layout_problem(n, t, 64, 64) is None for n, t in (("q", qs), ("k", ks), ("v", vs)))


#: wrong TMA lines in the generated forward: (text, replacement, the case that must catch it)
MUTANTS = {
    # the causal diagonal's K/V read through the query head: GQA heads past H_KV read zeros
    "kv_by_query_head": ("off_b, off_kvh, offs_m, offs_d, offs_dv,\n        full_hi, kv_hi",
                         "off_b, off_h, offs_m, offs_d, offs_dv,\n        full_hi, kv_hi", CASES["gqa"]),
    # V's tile read from K's descriptor
    "v_from_k": ("v = _tma_tile(V,", "v = _tma_tile(K,", {}),
}


@needs_tma
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mutated_tma_lines_are_caught(mutant, tmp_path):
    old, new, case = MUTANTS[mutant]
    source = Path(forward_module().__file__).read_text()
    assert source.count(old) == 1, f"the mutant's text {old!r} is not once in the generated forward: update MUTANTS"
    path = tmp_path / f"tma_mutant_{mutant}.py"
    path.write_text(source.replace(old, new))
    assert forward_failures(manifest.import_file(path), tma=True, **case), f"mutant {mutant} passed the TMA check"


# ----------------------------------------------------------------------------------
# 2. When TMA cannot be used: fall back (layout) or raise (machine).
# ----------------------------------------------------------------------------------
def _t(shape, dtype=torch.float16):
    return torch.zeros(shape, dtype=dtype)


LAYOUTS = {
    # name: (tensor, rows, block_d, what the message must say)
    "last_dim_strided": (_t((1, 2, 8, 64)).transpose(2, 3), 64, 64, "stride 64 in its last (head) dimension"),
    "row_not_16_bytes": (_t((1, 2, 8, 36)), 64, 64, "stride along dimension 2 is 72 bytes"),
    "misaligned_view": (_t((1, 2, 8, 72))[..., 1:65], 64, 64, "not 16-byte aligned"),
    "broadcast_heads": (_t((1, 1, 8, 64)).expand(1, 4, 8, 64), 64, 64, "broadcast (stride 0) along dimension 1"),
    "box_too_large": (_t((1, 2, 8, 64)), 512, 64, "each dimension <= 256"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_rules(layout):
    t, rows, block_d, says = LAYOUTS[layout]
    problem = launch.tma_layout_problem("k", t, rows, block_d)
    assert problem is not None and says in problem and problem.startswith("k")


def test_legal_layouts_have_no_problem():
    """The contiguous shapes the tests and benchmarks use (fp16 D=8·n, fp32 D=4·n) all pass."""
    for dtype, d in ((torch.float16, 8), (torch.float16, 40), (torch.bfloat16, 128), (torch.float32, 36)):
        assert launch.tma_layout_problem("q", _t((2, 3, 70, d), dtype), 64, launch.block_d(d)) is None


@needs_tma  # (a GPU without TMA raises before looking at the layout)
def test_fallback_warns_and_stays_correct(tma_taken):
    """fp16 with D=36: rows of 72 bytes, no TMA; the pointer path runs, correct, and says why."""
    with pytest.warns(TmaFallbackWarning, match=r"pointer path ran instead, because q's stride .* 72 bytes"):
        assert forward_failures(forward_module(), tma=True, dtype=torch.float16, D=36, causal=True) == []
    assert tma_taken == [False]


def test_tma_off_is_the_pointer_path(tma_taken):
    """tma=False: no descriptors, no warning (the module's marks make one an error)."""
    _, q, k, v = random_inputs(dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=20, Nk=30, D=16, seed=1)
    out, lse = on_device(flash_attention, q, k, v, return_lse=True, tma=False)
    assert tma_taken == [False]
    assert attention_failures(out, lse, *reference(q, k, v), v, q=q, k=k) == []


def test_machine_without_tensor_descriptors_raises(monkeypatch):
    monkeypatch.setattr(launch, "_tensor_descriptor_class", lambda: None)
    q = to_device(torch.randn(1, 1, 8, 16))
    with pytest.raises(ValueError, match=r"lacks; upgrade triton .* or pass tma=False"):
        flash_attention(q, q, q, tma=True)


def test_gpu_without_tma_raises(monkeypatch):
    """A pre-Hopper GPU cannot do TMA: an error naming the GPU, the need and the fix (no silent
    pointer path, which would make the benchmark's TMA column a lie)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    problem = launch.tma_unsupported(torch.device("cuda"))
    assert "A100-SXM4-80GB is sm_80" in problem and "compute capability >= 9.0" in problem
    assert problem.endswith("pass tma=False")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert launch.tma_unsupported(torch.device("cuda")) is None


def test_tma_must_be_a_bool_or_auto():
    q = to_device(torch.randn(1, 1, 8, 16))
    with pytest.raises(TypeError, match="tma must be \"auto\", True or False"):
        flash_attention(q, q, q, tma="yes")


def test_tma_auto_is_tma_exactly_where_the_machine_has_it(monkeypatch):
    """``tma="auto"`` (the default): TMA on a GPU of compute capability 9.0+, the pointer path on
    sm_80 and on CPU tensors under the interpreter (which would otherwise emulate descriptors)."""
    assert launch.tma_by_default(torch.device("cpu")) is False
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a GPU")
    for capability, want in (((8, 0), False), ((9, 0), True), ((10, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert launch.tma_by_default(torch.device("cuda")) is want, capability
        assert launch.settings_arch(torch.device("cuda")) == (90 if want else 80), capability


@needs_tma
def test_torch_compile_fullgraph_with_tma(tma_taken):
    q, k, v = to_device(random_inputs(dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=40, Nk=50, D=32, seed=2)[1:])

    def f(q, k, v):
        return flash_attention(q, k, v, causal=True, tma=True) * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v), f(q, k, v))
    assert tma_taken and all(tma_taken)


# ----------------------------------------------------------------------------------
# 3. Static: the TMA forward compiled for sm_90 really uses TMA (no GPU needed).
# ----------------------------------------------------------------------------------
def test_signature_spelling_matches_the_jit():
    """``aot_compile_args(tma=True)`` names descriptor parameters as the JIT mangles a
    ``TensorDescriptor`` argument, so the AOT compile is the kernel a launch compiles."""
    from triton.runtime.jit import mangle_type
    from triton.tools.tensor_descriptor import TensorDescriptor

    t = _t((2, 3, 70, 64), torch.bfloat16)
    assert launch.tma_signature("bf16", 64, 64) == mangle_type(TensorDescriptor(t, list(t.shape), list(t.stride()),
                                                                                [1, 1, 64, 64]))
    args = forward_module().aot_compile_args("bf16", 40, tma=True)
    # head dim 40 is split 32 + 8 (launch.head_dim_split): Q and K boxes 32 wide, their tails' 16
    assert {p: args["signature"][p] for p in ("Q", "K", "QTail", "KTail", "Out", "Lse")} == {
        "Q": "tensordesc<bf16[1, 1, 64, 32]>", "K": "tensordesc<bf16[1, 1, 64, 32]>",
        "QTail": "tensordesc<bf16[1, 1, 64, 16]>", "KTail": "tensordesc<bf16[1, 1, 64, 16]>",
        "Out": "tensordesc<bf16[1, 1, 64, 64]>", "Lse": "*fp32"}
    assert args["constexprs"]["USE_TMA"] is True
    assert forward_module().aot_compile_args("bf16", 40)["constexprs"]["USE_TMA"] is False


@pytest.fixture(scope="module")
def tma_rows():
    """The 64x64 TMA forward, two of its variants (each dtype, head dim and mask once: the static
    page, ``python -m benchmarks.static``, has every combination)."""
    module = forward_module().__name__
    assert static.make_jobs([module], archs=(80, 90), tma=(True,)) == static.make_jobs([module], archs=(90,), tma=(True,)), \
        "TMA variants are compiled for sm_90 only"
    jobs = [static.Job(module, 90, "fp16", 128, "causal", tma=True), static.Job(module, 90, "bf16", 64, "none", tma=True)]
    return static.run_jobs(jobs)


def test_tma_forward_compiles_for_sm90(tma_rows):
    errors = [f"{r['dtype']} D={r['head_dim']} {r['mask']}: {r['error']}" for r in tma_rows if "error" in r]
    assert not errors, "\n".join(errors)
    assert len(tma_rows) == 2 and all(r["tma"] and r["arch"] == 90 for r in tma_rows)


def test_tma_forward_is_ok_statically(tma_rows):
    """No spill, fits sm_90's shared memory, every dot on wgmma, TMA loads and the O store in SASS."""
    for r in tma_rows:
        name = f"sm_90 {r['dtype']} D={r['head_dim']} mask={r['mask']}"
        assert static.verdict(r) == dict(no_spill=True, fits_shared=True, tensor_cores=True, tma_loads=True), name
        assert r["mma_version"] == 3 and r["sass_hgmma"] > 0, name
        assert r["sass_tma_load"] >= 3 and r["sass_tma_store"] >= 1 and r["ptx_tma"] >= 4, name  # Q, K, V; O


def test_tma_instructions_from_sass():
    """TMA loads and stores are counted; the flush and prefetch beside them are not."""
    sass = """
        /*05a0*/                   @UP0 UTMALDG.4D [UR40], [UR10] ;   /* 0x000000280a0005b4 */
        /*05b0*/                   UTMACMDFLUSH ;
        /*10f0*/                   @UP2 UTMALDG.4D [UR16], [UR22] ;   /* 0x00000010160025b4 */
        /*1100*/                   UTMAPF.L2.4D [UR8], [UR4] ;
        /*4e00*/                   UTMASTG.4D [UR4], [UR6] ;
"""
    assert static.tma_instructions(sass) == dict(sass_tma_load=2, sass_tma_store=1)
    assert static.tma_instructions(sass.replace("UTMA", "LDG")) == dict(sass_tma_load=0, sass_tma_store=0)


def test_verdict_catches_a_tma_variant_without_tma():
    """A TMA row whose SASS has no UTMALDG (descriptors lowered back to pointers) is not ok."""
    row = dict(tma=True, spill_store_bytes=0, spill_load_bytes=0, shared_bytes=1, shared_limit=2, dots_ttir=2,
               dots=2, dots_on_tensor_cores=2, sass_hmma=0, sass_hgmma=4, sass_tma_load=0, sass_tma_store=0,
               ptx_tma=0)
    assert static.verdict(row)["tma_loads"] is False
    assert static.verdict(dict(row, sass_tma_load=3, ptx_tma=4))["tma_loads"] is True
    assert "tma_loads" not in static.verdict(dict(row, tma=False))
    assert static.make_jobs(["m"], archs=(80,), tma=(True,)) == []

