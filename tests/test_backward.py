"""The generated backward (dQ, dK, dV) against float64 autograd of the spec reference.

Runs under ``TRITON_INTERPRET=1`` on CPU. ``flash_attention`` from ``generated`` is
differentiated through the custom op's registered autograd; the reference is
``spec.reference.attention`` in float64 on the same (rounded) inputs, differentiated by
``torch.autograd``. Tolerances are relative to the largest magnitude of each gradient:

* fp32 ``1e-4``: fp32 arithmetic, ``input_precision="ieee"`` dots;
* fp16 ``5e-3``: P and dS are rounded to fp16 before the dots (11-bit mantissa).

Also: bitwise determinism (no atomics), zero gradients and no NaN on rows with no key, the
gradient of ``lse``, torch.compile tracing, the dense block map read by dQ tiles shorter than
``B_r``, the transposed tile classifier's proof hook, and
mutants (a wrong ``dS`` printed into the template) that the gradient check must catch.
Shapes stay at N <= 130: the interpreter costs O(N_q N_k) per head.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from attention_cases import BLOCKS, cases, examples, mask_arguments, random_inputs, replace_term, to_cpu, to_device
from attention_cases import VARIANTS as FORWARD_VARIANTS
from generated import flash_attention
from generator import manifest, render
from generator.checking import GRAD_TOLERANCES_EMPIRICAL
from generator.runtime import api, dispatch, launch
from generator.variants import BlockConfig
from spec import masks as M
from spec import notation as n
from spec import terms as T
from spec.reference import attention as reference

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")

TOLERANCES = {d: GRAD_TOLERANCES_EMPIRICAL[d] for d in (torch.float32, torch.float16)}  # empirical: no bound
HEAD_DIMS = (16, 40, 59, 64, 80, 111)  # a cheaper subset: the backward costs ~3x the forward


def kernel_grads(q, k, v, do, block, **kw):
    """dQ, dK, dV of the kernels on the test device (``attention_cases.DEVICE``), back on CPU."""
    q, k, v = (to_device(t).detach().clone().requires_grad_() for t in (q, k, v))
    out = flash_attention(q, k, v, block=block, **to_device(kw))
    out.backward(to_device(do))
    return to_cpu((q.grad, k.grad, v.grad))


def reference_grads(q, k, v, do, **kw):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, _ = reference(q, k, v, **kw)
    out.backward(do.double())
    return q.grad, k.grad, v.grad


def grad_failures(got, want, dtype) -> list[str]:
    """Human-readable failures: NaN anywhere, or an error above the tolerance.

    The scale of each gradient is its max magnitude, floored at 1% of the largest of the
    three: with one key per row the softmax is constant and dQ, dK are exactly 0, so they
    are compared on the scale of dV (the kernel's rounding there is ~1e-6).
    """
    failures = []
    floor = 1e-2 * max((w.abs().max().item() for w in want if w.numel()), default=0.0)  # varlen: may be empty
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype == dtype and g.shape == w.shape
        if not torch.isfinite(g).all():
            failures.append(f"{name}: not finite")
            continue
        if not w.numel():
            continue
        err = (g.double() - w).abs().max().item() / max(w.abs().max().item(), floor, 1e-30)
        if not err <= TOLERANCES[dtype]:
            failures.append(f"{name}: max error {err:.3g} x max|grad| > {TOLERANCES[dtype]:g}")
    return failures


def case_failures(block=(64, 64), *, dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=70, Nk=90, D=32, seed=0,
                  causal=False, alignment="top_left", window=None, key_lengths=None, mask=None, scale=None):
    gen, q, k, v, do = random_inputs(dtype=dtype, B=B, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, D=D, seed=seed, grad=True)
    key_lengths, mask = mask_arguments(gen, B, Hq, Nq, Nk, key_lengths, mask)
    kw = dict(causal=causal, alignment=alignment, window=window, key_lengths=key_lengths, mask=mask, scale=scale)
    return grad_failures(kernel_grads(q, k, v, do, block, **kw), reference_grads(q, k, v, do, **kw), dtype)


# ----------------------------------------------------------------------------------
# Fixed grid: every mask variant (default block) and every block (one variant each).
# ----------------------------------------------------------------------------------
#: the forward's grid, smaller where the backward's cost grows, plus fp16 with every kind at once
VARIANTS = {
    **{name: case for name, case in FORWARD_VARIANTS.items() if name not in ("window_zero", "dense_keys_only", "gqa_3")},
    "window": dict(window=(17, 5), Nq=100, Nk=100),
    "gqa_3": dict(Hq=6, Hkv=2, causal=True, Nq=40, Nk=70),
    "fp16_all_kinds": dict(dtype=torch.float16, B=2, Hq=4, Hkv=2, causal=True, window=(40, 3), key_lengths=[70, 9],
                           mask="random", D=40),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_mask_variants(variant):
    assert case_failures((64, 64), **VARIANTS[variant]) == []


#: test_every_block's case: D = 40 runs the BLOCK_D 64 settings
EVERY_BLOCK = dict(Hq=4, Hkv=2, Nq=130, Nk=100, D=40, causal=True, alignment="bottom_right", window=(60, 20))


def block_settings(block, arch) -> tuple:
    """The launch settings a case of ``EVERY_BLOCK`` runs at ``block`` on ``arch``: the forward's and the
    backward's (tiles, num_warps, num_stages: all a launch takes from the arch)."""
    d = EVERY_BLOCK["D"]  # as the runtime asks: the forward by head dim, the backward by its padded width
    return (api.module_for("fwd", block).launch_settings(arch, d),
            api.module_for("bwd", block).launch_settings(arch, launch.block_d(d)))


def arch_groups() -> list[tuple[tuple[int, int], tuple[int, ...]]]:
    """``(block, archs)``: per block, the archs of ``launch.SETTINGS_ARCHS`` grouped by the settings the case
    runs there. Archs with the same settings run the same launches (on the 16x32 block sm_80 and sm_90
    share one set), so the interpreter runs the group once."""
    groups = []
    for block in BLOCKS:
        by_settings = {}
        for arch in launch.SETTINGS_ARCHS:
            by_settings.setdefault(repr(block_settings(block, arch)), []).append(arch)
        groups += [(block, tuple(archs)) for archs in by_settings.values()]
    return groups


@pytest.mark.parametrize("block, archs", arch_groups(),
                         ids=[f"{b[0]}x{b[1]}-" + "+".join(f"sm_{a}" for a in archs) for b, archs in arch_groups()])
def test_every_block(block, archs, monkeypatch):
    """Several tiles in both directions: the dK/dV and dQ loops cross partial and full tiles, with
    the tiles of each architecture's launch settings (the interpreter runs either; once per distinct
    set of settings: ``arch_groups``)."""
    assert all(block_settings(block, a) == block_settings(block, archs[0]) for a in archs)
    monkeypatch.setattr(launch, "settings_arch", lambda device: archs[0])
    assert case_failures(block, **EVERY_BLOCK) == []


def test_every_arch_of_every_block_is_run():
    """``arch_groups`` covers each (block, arch) once, and groups only archs whose settings agree."""
    pairs = [(block, arch) for block, archs in arch_groups() for arch in archs]
    assert sorted(pairs) == sorted((block, arch) for block in BLOCKS for arch in launch.SETTINGS_ARCHS)


@pytest.mark.parametrize("arch", launch.SETTINGS_ARCHS, ids=lambda a: f"sm_{a}")
def test_head_dims_above_128_take_their_own_tiles(arch, monkeypatch):
    """Above head dim 128 (BLOCK_D 256) the backward runs its own tiles (generator.variants.
    default_bwd_settings: dK/dV 16 keys x 32 rows, dQ 32 x 32) after the forward of
    ``block="auto"`` (64x64 on the pointer path): a ragged head dim, several tiles each way,
    causal bottom-right with a window, GQA, fp16, against float64 autograd."""
    monkeypatch.setattr(launch, "settings_arch", lambda device: arch)
    module = api.module_for("bwd", api.auto_block(torch.device("cpu"), 200))
    assert module.launch_settings(arch, 256)["dkdv"][0] == {"BLOCK_N": 16, "BLOCK_M": 32}
    assert case_failures("auto", dtype=torch.float16, Hq=4, Hkv=2, Nq=100, Nk=75, D=200, causal=True,
                         alignment="bottom_right", window=(50, 10)) == []


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
def test_backward_tiles_lie_inside_the_block_map_tiles(block):
    """Every row tile (dK/dV step, dQ program) and key tile (dK/dV program, dQ step) of every
    (arch, head dim) entry divides the dense block map's tile ``MAP_BLOCK`` (the kernels read a
    tile's state by ``start // MAP_BLOCK``), is tl.dot-sized, and the manifest records the
    settings the file was emitted with."""
    module = api.module_for("bwd", block)
    recorded = manifest.load(manifest.DEFAULT_OUT)["configs"][f"br{block[0]}_bc{block[1]}"]["launch"]["bwd"]
    map_m, map_n = module.MAP_BLOCK
    for arch, per_dim in module.SETTINGS.items():
        for dim, entry in per_dim.items():
            assert recorded[f"sm_{arch}"][str(dim)] == entry
            for rows, keys in ((entry["dkdv"]["block_m"], entry["dkdv"]["block_n"]),
                               (entry["dq"]["block_m"], entry["dq"]["block_n"])):
                assert 16 <= rows and map_m % rows == 0 and 16 <= keys and map_n % keys == 0, (arch, dim, entry)


def test_dense_mask_with_dq_tiles_smaller_than_the_block_map_tiles(monkeypatch):
    """sm_80 at head dim 128: the dQ programs own 64 rows of a 128-row block-map tile
    (``MAP_BLOCK``) and read its map row by ``start_m // MAP_BLOCK_M``. N_Q = 150 is ragged: 3 dQ
    programs over 2 map rows. Rows < 128 attend every key, the others none: map rows [full] and
    [empty], so a program reading the map row of its own index (rows 64..127 reading [empty])
    would skip tiles it must compute, and fail the check."""
    monkeypatch.setattr(launch, "settings_arch", lambda device: 80)
    module = api.module_for("bwd", (64, 64))
    dq_rows = module.launch_settings(80, 128)["dq"][0]["BLOCK_M"]
    assert dq_rows < module.MAP_BLOCK[0], "the sm_80 dQ tile no longer splits a map tile: pick another case"
    i, j = torch.arange(150)[:, None], torch.arange(100)[None, :]
    mask = (i < module.MAP_BLOCK[0]) & (j >= 0)
    states = api.block_map(mask, 150, 100, *module.MAP_BLOCK)
    assert states.tolist() == [[[[api.FULL], [api.EMPTY]]]]
    assert case_failures((64, 64), Nq=150, Nk=100, D=80, mask=mask) == []


# ----------------------------------------------------------------------------------
# Hypothesis over the forward issue's grid (shapes capped for the interpreter).
# ----------------------------------------------------------------------------------
@settings(max_examples=examples(ci=10, explore=50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_n=130, max_window=60, dtypes=tuple(TOLERANCES), head_dims=HEAD_DIMS,
             dense_masks=("random", "empty_rows", "per_head")))
def test_random_cases(block_case):
    block, case = block_case
    assert case_failures(block, **case) == []


# ----------------------------------------------------------------------------------
# Determinism, rows with no key, the lse gradient, torch.compile.
# ----------------------------------------------------------------------------------
def test_backward_is_bitwise_deterministic():
    """No atomics: two backward passes give the same bits (GQA group sums included)."""
    _, q, k, v, do = random_inputs(grad=True, dtype=torch.float32, B=1, Hq=4, Hkv=1, Nq=100, Nk=120, D=40, seed=7)
    first = kernel_grads(q, k, v, do, (16, 32), causal=True)
    second = kernel_grads(q, k, v, do, (16, 32), causal=True)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_rows_with_no_key_get_zero_gradients():
    """Every row without a key: dq exactly 0 there, dk, dv exactly 0 where no row sees the key, no NaN."""
    _, q, k, v, do = random_inputs(grad=True, dtype=torch.float32, B=2, Hq=2, Hkv=1, Nq=40, Nk=40, D=16, seed=1)
    for kw in (dict(key_lengths=torch.tensor([0, 0])), dict(mask=torch.zeros((40, 40), dtype=torch.bool))):
        for grad in kernel_grads(q, k, v, do, (64, 64), **kw):
            assert torch.equal(grad, torch.zeros_like(grad))
    # bottom-right causal with N_q > N_k: the first N_q - N_k rows see nothing
    _, q, k, v, do = random_inputs(grad=True, dtype=torch.float32, B=1, Hq=1, Hkv=1, Nq=90, Nk=20, D=16, seed=2)
    dq, dk, dv = kernel_grads(q, k, v, do, (16, 32), causal=True, alignment="bottom_right")
    assert torch.equal(dq[:, :, :70], torch.zeros_like(dq[:, :, :70]))
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))


@pytest.mark.parametrize("lse_loss", ["weighted", "sum"])
def test_lse_gradient(lse_loss):
    """return_lse=True and a loss on lse: the preprocess kernel's delta = rowsum(dO∘O) − dlse.

    ``sum``: autograd hands the backward an expanded dlse (all strides 0), read by its strides."""
    _, q, k, v, do = random_inputs(grad=True, dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=50, Nk=70, D=32, seed=4)
    weights = torch.randn((1, 2, 50), generator=torch.Generator().manual_seed(5))
    lse_term = {"weighted": lambda lse: (lse * weights.to(lse)).sum(), "sum": lambda lse: lse.sum()}[lse_loss]
    kw = dict(causal=True, alignment="bottom_right")  # N_k > N_q: every row sees a key

    qk, kk, vk = (to_device(t).clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(qk, kk, vk, return_lse=True, **kw)
    ((out * to_device(do)).sum() + lse_term(lse)).backward()
    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    out_r, lse_r = reference(qr, kr, vr, **kw)
    ((out_r * do.double()).sum() + lse_term(lse_r)).backward()
    assert grad_failures(to_cpu((qk.grad, kk.grad, vk.grad)), (qr.grad, kr.grad, vr.grad), torch.float32) == []


def test_torch_compile_traces_forward_and_backward():
    """fullgraph=True: the forward op and the backward op both enter the graph through their fakes."""
    _, q, k, v, do = to_device(random_inputs(grad=True, dtype=torch.float32, B=1, Hq=2, Hkv=1, Nq=20, Nk=30, D=16,
                                             seed=6))

    def loss(q, k, v):  # the op itself: what flash_attention dispatches to after its input checks
        out, _ = torch.ops.flashproof.flash_attention(q, k, v, None, None, True, "top_left", None, None, 64, 64)
        return (out * do).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    compiled(qc, kc, vc).backward()
    want = kernel_grads(q, k, v, do, (64, 64), causal=True)
    for got, ref in zip(to_cpu((qc.grad, kc.grad, vc.grad)), want):
        assert torch.equal(got, ref)


# ----------------------------------------------------------------------------------
# The transposed classifier (dK/dV loop): proof hook, mutant, and agreement with the mask.
# ----------------------------------------------------------------------------------
def test_row_bounds_proof_hook_decides_every_case():
    cases = M.row_bounds_cases()
    assert cases and all(residual == 0 for _, residual in cases), cases


def test_row_bounds_proof_hook_catches_an_unsound_bound():
    def off_by_one(kind):  # skips one row too many below the key tile
        rb = M.row_bounds(kind)
        return dataclasses.replace(rb, q_start=None if rb.q_start is None else rb.q_start + 1)

    assert any(residual != 0 for _, residual in M.row_bounds_cases(off_by_one))


def test_classify_rows_matches_the_dense_mask():
    """Skipped query tiles hold no attended pair of the key tile; full ones hold only attended pairs."""
    br, bc = 16, 32
    for nq, nk, kinds, params in (
        (70, 90, ("causal",), {}), (90, 40, ("causal",), {"shift": -50}),
        (80, 80, ("window",), {"window_left": 9, "window_right": 20}),
        (60, 100, ("lengths",), {"key_len": 41}),
        (70, 70, ("causal", "window", "lengths"), {"window_left": 30, "window_right": 3, "key_len": 50}),
    ):
        params = {"shift": 0, "window_left": 0, "window_right": 0, "key_len": nk, **params}
        dense = torch.from_numpy(M.dense_mask(kinds, nq, nk, **params))
        for c0, r0 in itertools.product(range(0, nk, bc), range(0, nq, br)):
            got = M.classify_rows(kinds, c0, r0, br, bc, N_Q=nq, N_K=nk, **params)
            tile = dense[r0:r0 + br, c0:c0 + bc]
            if got == "skip":
                assert not tile.any(), (kinds, c0, r0)
            if got == "full":
                assert tile.all() and r0 + br <= nq, (kinds, c0, r0)


# ----------------------------------------------------------------------------------
# Mutants: a wrong backward term printed into the template is caught by the same check.
# ----------------------------------------------------------------------------------
MUTANTS = {  # the dQ loop prints the row-major BACKWARD_TILE, the dK/dV loop the key-major *_T groups
    "ds_plus_delta": ("BACKWARD_TILE", "ds", n.p * (n.dp + T.col(n.delta))),
    "no_lse_guard": ("BACKWARD_TILE", "lse2_safe", n.lse2),
    "dsT_plus_delta": ("BACKWARD_TILE_T", "dsT", n.pT * (n.dpT + T.row(n.delta))),
    "dv_from_dsT": ("BACKWARD_DKDV_T", "dv", n.dv + T.dot(n.dsT, n.do)),
    "dk_from_pT": ("BACKWARD_DKDV_T", "dk", n.dk + T.dot(n.pT, n.q)),
    "dq_unscaled": ("BACKWARD_SCALE", "dq", n.dq),
}


def _mutant_module(monkeypatch, tmp_path, mutant):
    group, name, expr = MUTANTS[mutant]
    monkeypatch.setattr(T, group, replace_term(getattr(T, group), name, expr))
    variant = next(v for v in BlockConfig(64, 64).variants() if v.kind.name == "bwd")
    path = tmp_path / f"mutant_bwd_{mutant}.py"
    path.write_text(render.render_variant(variant))
    return manifest.import_file(path, f"mutant_bwd_{mutant}")


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_mutated_backward_is_caught(monkeypatch, tmp_path, mutant):
    mod = _mutant_module(monkeypatch, tmp_path, mutant)
    real = dispatch.module_for
    monkeypatch.setattr(dispatch, "module_for", lambda kind, block, package="generated", device=None:
                        mod if kind == "bwd" else real(kind, block, package, device))
    # rows with no key (batch 0) and several tiles (batch 1)
    case = dict(B=2, Nq=50, Nk=100, causal=True, alignment="bottom_right", key_lengths=[0, 90])
    assert case_failures((64, 64), **case), f"mutant {mutant} passed the gradient check"
    monkeypatch.undo()
    assert case_failures((64, 64), **case) == []
