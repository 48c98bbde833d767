"""Static GPU cost of the generated kernels (benchmarks/static.py), no GPU needed.

Every kernel of every generated block config (16x32, 64x64, 128x64: the forward and the
backward's preprocess, dK/dV and dQ kernels) must, for head dims 64 and 128, fp16 and bf16, on
sm_80 and sm_90, unmasked and causal: spill nothing (no exception), fit the architecture's shared
memory, and run every ``tl.dot`` on tensor cores — on Hopper as wgmma wherever the kernel's
products have 64 rows or more (the dK/dV kernel's key-major ones have B_c, the dQ kernel's its
BLOCK_M_DQ rows). Compiles are cached under .artifacts/static-cache. The parsers
that decide this are tested on small texts first, each with the input that must make it fail.
"""

from __future__ import annotations

import importlib

import pytest

from benchmarks import static
from benchmarks.common import kernel_modules

DEFAULT_BLOCK = "br64_bc64"
#: every kernel the default block must compile: the forward, the backward's three
DEFAULT_KERNELS = {"_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq"}
FIX = ("find a setting with `python -m benchmarks.static --module {module} --arch {arch} "
       "--head-dim {head_dim} --num-warps 4 8 --num-stages 2 3 4`, then set the defaults in "
       "generator/variants.py (default_num_warps / default_num_stages, default_bwd_* for the "
       "backward) and regenerate")


# ---- the parsers, on texts whose answer is known ------------------------------------------
SASS = """
        /*21e0*/                   STL [R1], R10 ;
        /*21f0*/                   STL.64 [R1+0x8], R12 ;
        /*2200*/                   STL.128 [R1+0x10], R16 ;
        /*8e00*/                   LDL.LU R250, [R1] ;
        /*8e10*/                   LDL.LU.64 R2, [R1+0x8] ;
        /*9000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*9010*/                   HGMMA.64x64x16.F32.BF16 gdesc[UR4], RZ, !UPT ;
"""


def test_spill_bytes_from_sass(monkeypatch):
    import subprocess

    outputs = {"--dump-resource-usage": " Function k:\n  REG:255 STACK:8 SHARED:1024 LOCAL:0 CONSTANT[0]:424",
               "-sass": SASS}

    def fake_run(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 0, stdout=outputs[cmd[1]], stderr="")

    monkeypatch.setattr(static.subprocess, "run", fake_run)
    monkeypatch.setattr(static, "_tool", lambda name: name)
    got = static.resource_usage(b"not a real cubin")
    assert got == dict(regs=255, stack_bytes=8, static_shared=1024, local_bytes=0,
                       spill_store_bytes=4 + 8 + 16, spill_load_bytes=4 + 8, sass_hmma=1, sass_hgmma=1)


TTGIR = """
#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [2, 2], order = [1, 0]}>
#mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], instrShape = [16, 64, 16]}>
    %qk = ttng.warp_group_dot %q, %k, %cst {inputPrecision = 0 : i32} : !ttg.memdesc<64x64xbf16, #shared, #smem> * !ttg.memdesc<64x64xbf16, #shared1, #smem> -> tensor<64x64xf32, #mma> loc(#loc1)
    %w = ttng.warp_group_dot_wait %qk {pendings = 0 : i32} : tensor<64x64xf32, #mma> loc(#loc1)
    %acc = tt.dot %p, %v, %acc0, inputPrecision = tf32 : tensor<64x64xbf16, #ttg.dot_op<{opIdx = 0, parent = #blocked}>> * tensor<64x64xbf16, #ttg.dot_op<{opIdx = 1, parent = #blocked}>> -> tensor<64x64xf32, #blocked> loc(#loc2)
"""
TTIR = "%qk = tt.dot %q, %k, %c : x\n%acc = tt.dot %p, %v, %a : y\n"


def test_dot_on_fma_is_caught():
    """A dot left on a blocked (FMA) layout is not on tensor cores; the wgmma one is."""
    got = static.dot_lowering(TTIR, TTGIR)
    assert got == dict(dots_ttir=2, dots=2, dots_on_tensor_cores=1, dots_wgmma=1, mma_version=3)
    row = dict(spill_store_bytes=0, spill_load_bytes=0, shared_bytes=1, shared_limit=2,
               sass_hmma=0, sass_hgmma=4, **got)
    assert static.verdict(row) == dict(no_spill=True, fits_shared=True, tensor_cores=False)


MIXED_TTGIR = """
#mma = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [4, 1], instrShape = [16, 8]}>
#mma1 = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], instrShape = [16, 64, 16]}>
    %qk = ttng.warp_group_dot %q, %k, %cst {inputPrecision = 0 : i32} : !ttg.memdesc<64x64xf16, #shared, #smem> * !ttg.memdesc<64x64xf16, #shared1, #smem> -> tensor<64x64xf32, #mma1> loc(#loc1)
    %dp = tt.dot %do, %v, %acc0, inputPrecision = tf32 : tensor<16x64xf16, #ttg.dot_op<{opIdx = 0, parent = #mma}>> * tensor<64x64xf16, #ttg.dot_op<{opIdx = 1, parent = #mma}>> -> tensor<16x64xf32, #mma> loc(#loc2)
"""


def test_a_kernel_mixing_wgmma_and_mma_sync_is_reported_as_such():
    """mma_version is the max over the dots; dots_wgmma and the table cells show the mix (the old
    16-row dK/dV kernel had 4 HGMMA beside 16 HMMA and read as all wgmma)."""
    got = static.dot_lowering(TTIR, MIXED_TTGIR)
    assert got == dict(dots_ttir=2, dots=2, dots_on_tensor_cores=2, dots_wgmma=1, mma_version=3)
    row = dict(module="generated.attention_bwd_br64_bc64", kernel="_attn_bwd_dkdv", arch=90, dtype="fp16",
               head_dim=64, mask="none", num_warps=8, num_stages=2, regs=128, spill_store_bytes=0,
               spill_load_bytes=0, shared_bytes=1024, shared_limit=static.SHARED_LIMIT[90], sass_hmma=16,
               sass_hgmma=4, sass_tma_load=0, sass_tma_store=0, **got)
    cells = static._cells(row)
    assert cells[-4:-2] == ["2/2: 1 wgmma + 1 mma v2", "4 HGMMA + 16 HMMA"]


def test_verdict_catches_spill_and_shared_overflow():
    row = dict(spill_store_bytes=4, spill_load_bytes=0, shared_bytes=static.SHARED_LIMIT[80] + 1,
               shared_limit=static.SHARED_LIMIT[80], dots_ttir=2, dots=2, dots_on_tensor_cores=2, sass_hmma=8,
               sass_hgmma=0)
    assert static.verdict(row) == dict(no_spill=False, fits_shared=False, tensor_cores=True)


def test_tensor_cores_vacuous_only_without_any_dot():
    """A kernel with no matmul (the backward's preprocess) passes the tensor-core criterion;
    one whose TTIR has dots that the TTGIR parse did not find, or whose dots left no
    HMMA/HGMMA in SASS, does not."""
    clean = dict(spill_store_bytes=0, spill_load_bytes=0, shared_bytes=1, shared_limit=2)
    no_dot = dict(clean, dots_ttir=0, dots=0, dots_on_tensor_cores=0, sass_hmma=0, sass_hgmma=0)
    assert static.verdict(no_dot)["tensor_cores"]
    assert static.dot_lowering("%x = arith.addf %a, %b : f32\n", "#blocked = #ttg.blocked<{}>\n")["dots"] == 0
    assert not static.verdict(dict(no_dot, dots_ttir=1))["tensor_cores"]  # a dot the TTGIR parse missed
    assert not static.verdict(dict(no_dot, dots_ttir=1, dots=1, dots_on_tensor_cores=1))["tensor_cores"]  # no HMMA


# ---- every generated config, compiled for real ---------------------------------------------
def wgmma_rows(row) -> int:
    """The M of the kernel's products: B_c for the key-major dK/dV kernel, the dQ kernel's tile
    height BLOCK_M_DQ (at most 64, a divisor of B_r), B_r for the forward. Hopper's wgmma needs
    M = 64 per warpgroup, so below 64 rows a dot can only be mma.sync."""
    module = importlib.import_module(row["module"])
    if row["kernel"] == "_attn_bwd_dkdv":
        return module.BLOCK_N
    if row["kernel"] == "_attn_bwd_dq":
        return module.BLOCK_M_DQ
    return module.BLOCK_M


@pytest.fixture(scope="module")
def rows():
    modules = kernel_modules()
    assert any(DEFAULT_BLOCK in m for m in modules), (
        f"no generated module for the default block {DEFAULT_BLOCK}; run python -m generator")
    # the unmasked variant (every call without a mask) and the causal one, whose diagonal tiles
    # carry the element predicate and so the most registers; compiled once, then cached
    jobs = static.make_jobs(modules, archs=(80, 90), dtypes=("fp16", "bf16"), head_dims=(64, 128),
                            masks=("none", "causal"))
    return static.run_jobs(jobs)


@pytest.fixture(scope="module")
def default_rows(rows):
    return [r for r in rows if DEFAULT_BLOCK in r["module"]]


def _name(r):
    return f"{r['module']}:{r['kernel']} sm_{r['arch']} {r['dtype']} D={r['head_dim']} mask={r['mask']}"


def test_default_configs_compile(rows, default_rows):
    errors = [f"{_name(r)}: {r['error']}" for r in rows if "error" in r]
    assert not errors, "\n".join(errors)
    covered = {(r["kernel"], r["arch"], r["dtype"], r["head_dim"], r["mask"]) for r in default_rows}
    assert covered == {(k, a, d, h, m) for k in DEFAULT_KERNELS for a in (80, 90) for d in ("fp16", "bf16")
                       for h in (64, 128) for m in ("none", "causal")}


def test_configs_do_not_spill(rows):
    """No kernel of any generated config spills (the 128x64 dQ kernel included: its programs run
    64 rows, generator.variants.default_bwd_dq_sub_m)."""
    bad = [f"{_name(r)}: {r['spill_store_bytes']} B spill stores, {r['spill_load_bytes']} B spill loads "
           f"(num_warps={r['num_warps']}, num_stages={r['num_stages']}, {r['regs']} regs); " + FIX.format(**r)
           for r in rows if "error" not in r and not static.verdict(r)["no_spill"]]
    assert not bad, "\n".join(bad)


def test_configs_fit_shared_memory(rows):
    bad = [f"{_name(r)}: {r['shared_bytes']} B shared > {r['shared_limit']} B; lower num_stages. "
           + FIX.format(**r) for r in rows if "error" not in r and not static.verdict(r)["fits_shared"]]
    assert not bad, "\n".join(bad)


def test_configs_use_tensor_cores(rows):
    bad = [f"{_name(r)}: {r['dots_on_tensor_cores']}/{r['dots']} dots on tensor cores, "
           f"{r['sass_hmma']} HMMA / {r['sass_hgmma']} HGMMA in SASS" for r in rows
           if "error" not in r and not static.verdict(r)["tensor_cores"]]
    assert not bad, "\n".join(bad)
    assert any(r["dots"] for r in rows), "no kernel with a dot was compiled"


def test_hopper_dots_are_wgmma_where_the_tile_allows(rows):
    """Ampere has only mma.sync. On Hopper every dot of a kernel whose products have M >= 64 rows
    must be wgmma, with no HMMA left in its SASS: the dK/dV kernel's key-major products have the
    key tile's B_c rows (64 in the default and 128x64 configs), the dQ kernel's BLOCK_M_DQ (64 in
    both), the forward's B_r (wgmma_rows)."""
    bad = []
    for r in rows:
        if "error" in r or not r["dots"]:
            continue
        if r["arch"] == 80:
            ok = r["dots_wgmma"] == 0 and r["mma_version"] == 2
        elif wgmma_rows(r) >= 64:
            ok = r["dots_wgmma"] == r["dots"] and r["sass_hgmma"] > 0 and r["sass_hmma"] == 0
        else:
            ok = r["mma_version"] == 2
        if not ok:
            bad.append(f"{_name(r)}: {r['dots_wgmma']}/{r['dots']} dots wgmma, {r['sass_hgmma']} HGMMA / "
                       f"{r['sass_hmma']} HMMA in SASS")
    assert not bad, "\n".join(bad)
    dkdv = [r for r in rows if r["kernel"] == "_attn_bwd_dkdv" and r["arch"] == 90 and DEFAULT_BLOCK in r["module"]]
    assert dkdv and all(r["dots_wgmma"] == r["dots"] > 0 for r in dkdv), "the default dK/dV kernel is not all wgmma"


def test_launch_specialisation_models_a_contiguous_launch():
    """Innermost strides become the constant 1, outer strides and pointers divisible by 16,
    other ints untouched: what Triton's JIT does for contiguous tensors. Without it the
    loads are not vectorised and nothing is pipelined."""

    class Fn:
        arg_names = ["Q", "K", "stride_qb", "stride_qm", "stride_qd", "stride_kn", "stride_kd", "N",
                     "BLOCK"]

    sig = {"Q": "*bf16", "K": "*bf16", "stride_qb": "i32", "stride_qm": "i32", "stride_qd": "i32",
           "stride_kn": "i32", "stride_kd": "i32", "N": "i32", "BLOCK": "constexpr"}
    signature, constexprs, attrs = static.launch_specialisation(
        dict(fn=Fn, signature=sig, constexprs={"BLOCK": 64}))
    assert constexprs == {"BLOCK": 64, "stride_qd": 1, "stride_kd": 1}
    assert signature["stride_qd"] == signature["stride_kd"] == "constexpr"
    assert signature["N"] == "i32" and signature["stride_qm"] == "i32"
    divisible = {Fn.arg_names[i] for (i,), a in attrs.items() if a == [["tt.divisibility", 16]]}
    assert divisible == {"Q", "K", "stride_qb", "stride_qm", "stride_kn"}
    # a module that knows its launch better passes its own attrs through untouched
    own = {(0,): [["tt.divisibility", 16]]}
    assert static.launch_specialisation(dict(fn=Fn, signature=sig, constexprs={}, attrs=own))[2] == own
