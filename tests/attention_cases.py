"""Shared test cases for the generated attention kernels (forward and backward).

One home for what both kernel test files draw from: the head dims, the dense-mask shapes,
random inputs, the fixed grid of mask variants and the Hypothesis strategy over shapes,
masks, dtypes and blocks. Each test file picks its own sizes (the backward is ~3x the
interpreter cost of the forward) and tolerances.

It is also the one place that knows where the kernels run (``FLASHPROOF_TEST_DEVICE``, read by
every kernel test file through ``on_device`` / ``to_device`` / ``to_cpu``).
"""

from __future__ import annotations

import os

import torch
from hypothesis import settings
from hypothesis import strategies as st

import generated
from generator.checking import attention_failures
from generator.runtime import api
from generator.runtime.launch import interpreting
from spec import masks as M
from spec import terms as T
from spec.reference import attention as reference

def examples(ci: int, explore: int | None = None) -> int:
    """``max_examples`` of a slow property test (kernels in the interpreter): ``ci`` under the
    deterministic default profile (tests/conftest.py), ``explore`` (default 5 x ``ci``) under
    ``--hypothesis-profile=explore``, where fresh examples are the point."""
    return (explore or 5 * ci) if getattr(settings, "_current_profile", "ci") == "explore" else ci


# ----------------------------------------------------------------------------------
# Where the kernels run.
# ----------------------------------------------------------------------------------
#: ``cpu`` (default, CI): Triton's interpreter under TRITON_INTERPRET=1; ``cuda``: compiled
#: kernels on the GPU. Inputs are always drawn on CPU with the same seeds and the float64
#: reference always runs on CPU, so both devices check the very same cases.
DEVICES = ("cpu", "cuda")
DEVICE = os.environ.get("FLASHPROOF_TEST_DEVICE", "cpu")


def device_problem(device: str = DEVICE) -> str | None:
    """Why the kernel tests cannot run on ``device`` (None when they can); conftest.py stops
    the run with this message instead of letting the tests fall back to the CPU."""
    if device not in DEVICES:
        return f"FLASHPROOF_TEST_DEVICE={device!r} is not one of {DEVICES}; unset it to run on CPU"
    if device == "cpu" and not interpreting():
        return "FLASHPROOF_TEST_DEVICE=cpu runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1"
    if device == "cuda" and not torch.cuda.is_available():
        return (f"FLASHPROOF_TEST_DEVICE=cuda, but torch {torch.__version__} sees no CUDA device; run on a "
                "machine with a GPU, or unset FLASHPROOF_TEST_DEVICE to run on CPU under TRITON_INTERPRET=1")
    if device == "cuda" and interpreting():
        return ("FLASHPROOF_TEST_DEVICE=cuda with TRITON_INTERPRET set: the kernels would be interpreted, not "
                "compiled; unset TRITON_INTERPRET")
    return None


def _map_tensors(x, f):
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, (tuple, list)):
        return type(x)(_map_tensors(item, f) for item in x)
    if isinstance(x, dict):
        return {key: _map_tensors(value, f) for key, value in x.items()}
    return x


def to_device(x):
    """Every tensor in ``x`` (a tensor, or tuples / lists / dicts of them) moved to ``DEVICE``;
    on CPU the very same tensors (no copy, so caches keyed on a tensor still hit)."""
    return _map_tensors(x, lambda t: t.to(DEVICE))


def to_cpu(x):
    """Every tensor in ``x`` back on CPU, where the float64 reference lives."""
    return _map_tensors(x, lambda t: t.cpu())


def on_device(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with the tensor arguments on ``DEVICE``; tensor results on CPU."""
    return to_cpu(fn(*to_device(args), **to_device(kwargs)))


BLOCKS = sorted(generated.KERNELS)
HEAD_DIMS = (16, 32, 40, 59, 64, 80, 96, 111, 128)
DENSE_MASKS = ("random", "empty_rows", "keys_only", "per_head")


def make_mask(kind, B, Hq, Nq, Nk, gen):
    """Dense bool masks of several broadcast shapes; ``empty_rows`` hides every key of some rows."""
    if kind == "random":
        return torch.rand((B, 1, Nq, Nk), generator=gen) > 0.4
    if kind == "empty_rows":  # every third row sees no key
        mask = torch.rand((Nq, Nk), generator=gen) > 0.5
        mask[::3] = False
        return mask
    if kind == "keys_only":  # (N_k,): a padding pattern shared by every row
        return torch.rand((Nk,), generator=gen) > 0.3
    if kind == "per_head":  # long runs of True and False: empty, partial and full tiles in the block map
        cols = torch.arange(Nk)
        return torch.stack([(cols // 40 + h) % 2 == 0 for h in range(Hq)])[None, :, None, :].expand(B, Hq, Nq, Nk)
    raise ValueError(kind)


def random_inputs(*, dtype, B, Hq, Hkv, Nq, Nk, D, seed, grad=False):
    """``gen, q, k, v`` (and ``do`` with ``grad=True``), standard normal in ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(B, Hq, Nq, D), (B, Hkv, Nk, D), (B, Hkv, Nk, D)] + ([(B, Hq, Nq, D)] if grad else [])
    return (gen, *(torch.randn(s, generator=gen).to(dtype) for s in shapes))


def mask_arguments(gen, B, Hq, Nq, Nk, key_lengths=None, mask=None):
    """Turn a case's ``key_lengths`` list and ``mask`` kind name into tensors."""
    if isinstance(mask, str):
        mask = make_mask(mask, B, Hq, Nq, Nk, gen)
    if key_lengths is not None:
        key_lengths = torch.tensor(key_lengths, dtype=torch.int32)
    return key_lengths, mask


def forward_module(block=(64, 64)):
    """The checked-in generated forward of ``block``."""
    return api.module_for("fwd", block)


def forward_failures(module, *, dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=70, Nk=90, D=32, seed=0,
                     causal=False, alignment="top_left", window=None, key_lengths=None, mask=None, scale=None,
                     tma=False, layout=None) -> list[str]:
    """Run ``module`` (a generated forward) and the reference on one case; list the failures.
    ``tma``: the forward's opt-in TMA path; ``layout(q, k, v)`` may return strided views of the
    same values for the kernel (the reference reads the originals)."""
    gen, q, k, v = random_inputs(dtype=dtype, B=B, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, D=D, seed=seed)
    key_lengths, mask = mask_arguments(gen, B, Hq, Nq, Nk, key_lengths, mask)
    kw = dict(causal=causal, alignment=alignment, window=window, key_lengths=key_lengths, mask=mask, scale=scale)
    args = layout(q, k, v) if layout else (q, k, v)
    out, lse = on_device(api.attention_forward, module, *args, tma=tma, **kw)
    ref_out, ref_lse = reference(q, k, v, **kw)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (B, Hq, Nq)
    return attention_failures(out, lse, ref_out, ref_lse, v, q=q, k=k, scale=scale, block_n=module.BLOCK_N)


def replace_term(terms, name, expr):
    """``terms`` with the term assigning ``name`` given ``expr`` instead: a mutant."""
    return tuple(T.Term(t.symbol, expr, t.claim, t.note) if t.name == name else t for t in terms)


#: every mask variant, alignment and GQA shape once (defaults: B=1, Hq=2, Hkv=1, Nq=70, Nk=90, D=32)
VARIANTS = {
    "none": {},
    "causal": dict(causal=True),
    "causal_bottom_right_nq_gt_nk": dict(causal=True, alignment="bottom_right", Nq=97, Nk=45),
    "causal_bottom_right_nq_lt_nk": dict(causal=True, alignment="bottom_right", Nq=45, Nk=97),
    "window": dict(window=(17, 5)),
    "window_zero": dict(window=(0, 0)),
    "window_causal_bottom_right": dict(window=(9, 30), causal=True, alignment="bottom_right", Nq=80, Nk=50),
    "lengths_with_empty_batch": dict(B=2, key_lengths=[0, 61]),
    "lengths_full_and_one": dict(B=2, key_lengths=[90, 1]),
    "dense_random": dict(mask="random"),
    "dense_empty_rows": dict(mask="empty_rows", causal=True),
    "dense_keys_only": dict(mask="keys_only", B=2),
    "dense_per_head": dict(mask="per_head", Hq=2, Nk=130),
    "all_kinds": dict(B=2, causal=True, window=(30, 2), key_lengths=[50, 7], mask="random"),
    "gqa_3": dict(Hq=6, Hkv=2, causal=True),
    "scale_odd_dim": dict(scale=0.05, D=59),
}


@st.composite
def cases(draw, *, max_n, max_window, dtypes, head_dims=HEAD_DIMS, dense_masks=DENSE_MASKS):
    """``(block, case)``: random shapes (not multiples of the blocks), GQA ratios, every mask
    kind (also several at once, fully masked rows, both alignments), dtypes and blocks."""
    B = draw(st.integers(1, 2))
    Hkv = draw(st.integers(1, 2))
    Nk = draw(st.integers(1, max_n))
    case = dict(
        dtype=draw(st.sampled_from(dtypes)), B=B, Hkv=Hkv, Hq=Hkv * draw(st.sampled_from((1, 2, 3))),
        Nq=draw(st.integers(1, max_n)), Nk=Nk, D=draw(st.sampled_from(head_dims)), seed=draw(st.integers(0, 99)),
        causal=draw(st.booleans()), alignment=draw(st.sampled_from(M.ALIGNMENTS)),
        window=draw(st.none() | st.tuples(st.integers(0, max_window), st.integers(0, max_window))),
        key_lengths=draw(st.none() | st.lists(st.integers(0, Nk), min_size=B, max_size=B)),
        mask=draw(st.sampled_from((None, None) + tuple(dense_masks))),
    )
    return draw(st.sampled_from(BLOCKS)), case
