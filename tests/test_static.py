"""Static GPU cost of the generated kernels (benchmarks/static.py), no GPU needed.

Every kernel of every generated block config (16x32, 64x64, 128x64: the forward and the
backward's preprocess, dK/dV and dQ kernels) must, for head dims 64 and 128, fp16 and bf16, on
sm_80 and sm_90, unmasked and causal: spill nothing (no exception), fit the architecture's shared
memory, and run every ``tl.dot`` on tensor cores — on Hopper as wgmma wherever the kernel's
products have 64 rows or more (the dK/dV kernel's key-major ones have its key tile's rows, the
dQ kernel's its row tile's). The kernels the defaults run (``block="auto"``, ``tma="auto"``) must
also issue no redundant MMA work in their steady-state loop, and on sm_90 cost no more
warp-instructions per tile element than Triton tutorial 06. Compiles are cached under
.artifacts/static-cache. The parsers that decide this are tested on small texts first, each with
the input that must make it fail.
"""

from __future__ import annotations

import importlib

import pytest

from benchmarks import static
from benchmarks.common import kernel_modules
from generator.runtime import api, launch

DEFAULT_BLOCK = "br64_bc64"
#: every kernel the default block must compile: the forward, the backward's three, KV-cache decode
#: (contiguous and paged), the merge of partial results (two, and the split-KV fold)
DEFAULT_KERNELS = {"_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq",
                   "_decode_fwd", "_decode_fwd[paged16]", "_merge_state", "_merge_states"}
#: kernels with no tensor-core loop (no MMA to count): the backward's preprocess and the merges
NO_DOT = {"_attn_bwd_preprocess", "_merge_state", "_merge_states"}
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
                       spill_store_bytes=4 + 8 + 16, spill_load_bytes=4 + 8, sass_hmma=1, sass_hgmma=1,
                       sass_instructions=7)


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
    assert cells[-6:-4] == ["2/2: 1 wgmma + 1 mma v2", "4 HGMMA + 16 HMMA"]


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
    """The M of the kernel's products: the key tile for the key-major dK/dV kernel, the dQ
    kernel's row tile (both from the backward's launch settings of the row's arch and head dim),
    B_r for the forward. Hopper's wgmma needs M = 64 per warpgroup, so below 64 rows a dot can
    only be mma.sync."""
    module = importlib.import_module(row["module"])
    if row["kernel"] in ("_attn_bwd_dkdv", "_attn_bwd_dq"):
        settings = module.launch_settings(row["arch"], launch.block_d(row["head_dim"]))
        blocks = settings["dkdv" if row["kernel"] == "_attn_bwd_dkdv" else "dq"][0]
        return blocks["BLOCK_N"] if row["kernel"] == "_attn_bwd_dkdv" else blocks["BLOCK_M"]
    if row["kernel"].startswith("_decode_fwd"):  # the query rows of one KV head (GQA group x N_q)
        return module.block_m(module.AOT_ROWS)
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
    """No kernel of any generated config spills, at each architecture's own launch settings
    (generator.variants.default_fwd_settings / default_bwd_settings), but ``static.POINTER_SPILLS``, each
    held to its bound and still real (an exception that no longer spills must leave the list)."""
    bad = [f"{_name(r)}: {r['spill_store_bytes']} B spill stores, {r['spill_load_bytes']} B spill loads "
           f"(num_warps={r['num_warps']}, num_stages={r['num_stages']}, {r['regs']} regs); " + FIX.format(**r)
           for r in rows if "error" not in r and not static.verdict(r)["no_spill"] and not static.reviewed_spill(r)]
    assert not bad, "\n".join(bad)
    excepted = [r for r in rows if "error" not in r and static.pointer_spill_bound(r) is not None]
    assert excepted and all(not static.verdict(r)["no_spill"] for r in excepted), [
        (_name(r), r["spill_store_bytes"]) for r in excepted if static.verdict(r)["no_spill"]]


def test_no_default_launch_takes_a_pointer_spill():
    """The ``static.POINTER_SPILLS`` block is never what ``block="auto"`` runs on the pointer path, on any arch
    or head dim, and is the sm_90 TMA path's head-dim-128 default (why it is generated at all)."""
    for (suffix, _, head_dim, tma) in static.POINTER_SPILLS:
        assert not tma
        for arch in launch.SETTINGS_ARCHS:
            assert not suffix.endswith(static.default_block(arch, head_dim, tma=False)), (suffix, arch)
        assert suffix.endswith(static.default_block(90, head_dim, tma=True)), suffix


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
    must be wgmma, with no HMMA left in its SASS: the dK/dV kernel's key-major products have its
    key tile's rows (128 from the 64x64 config up), the dQ kernel's its row tile (128 on sm_90),
    the forward's B_r (wgmma_rows)."""
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


def test_launch_specialisation_follows_the_binder_at_typical_values():
    """Triton's binder makes an int equal to 1 the constant 1 and marks ints divisible by 16:
    GROUP = 1 (MHA) becomes a constant, N_Q / N_K / H / shift / window are divisible by 16."""

    class Fn:
        arg_names = ["Q", "GROUP", "N_Q", "shift", "other"]

    sig = {"Q": "*fp16", "GROUP": "i32", "N_Q": "i32", "shift": "i32", "other": "i32"}
    signature, constexprs, attrs = static.launch_specialisation(dict(fn=Fn, signature=sig, constexprs={}))
    assert constexprs == {"GROUP": 1} and signature["GROUP"] == "constexpr"
    divisible = {Fn.arg_names[i] for (i,), a in attrs.items() if a == [["tt.divisibility", 16]]}
    assert divisible == {"Q", "N_Q", "shift"}  # "other" is not a known launch integer: left alone
    # a module's own typical_ints win over the stride-run model: the merge kernels' row strides
    # stride_oa, stride_ob would read as one tensor's run ending in a unit stride

    class Merge:
        arg_names = ["O_A", "R", "stride_oa", "stride_ob", "GROUP"]

    sig = {"O_A": "*fp16", "R": "i32", "stride_oa": "i32", "stride_ob": "i32", "GROUP": "i32"}
    assert static.launch_specialisation(dict(fn=Merge, signature=sig, constexprs={}))[1] == {"stride_ob": 1, "GROUP": 1}
    signature, constexprs, attrs = static.launch_specialisation(dict(
        fn=Merge, signature=sig, constexprs={}, typical_ints={"R": 64, "stride_oa": 128, "stride_ob": 128, "GROUP": 4}))
    assert constexprs == {} and signature["stride_ob"] == signature["GROUP"] == "i32"
    assert {Merge.arg_names[i] for (i,), a in attrs.items()} == {"O_A", "R", "stride_oa", "stride_ob"}


# ---- the steady-state loop: located in SASS by its backward branch ---------------------------
LOOPS_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x64x16.F32 R24, gdesc[UR12], RZ, !UPT ;
        /*0020*/                   FFMA R2, R3, R4, R5 ;
        /*0030*/                   HGMMA.64x64x16.F32 R24, gdesc[UR12], R24 ;
        /*0040*/              @!P2 BRA 0x10 ;
        /*0050*/                   HGMMA.64x64x16.F32 R24, gdesc[UR12], R24 ;
        /*0060*/                   FSETP.GT.AND P0, PT, R2, R3, PT ;
        /*0070*/                   FSEL R2, R2, R3, P0 ;
        /*0080*/                   HGMMA.64x64x16.F32 R24, gdesc[UR12], R24 ;
        /*0090*/              @!P2 BRA 0x50 ;
        /*00a0*/                   FADD R2, R2, R3 ;
        /*00b0*/              @!P1 BRA 0xa0 ;
        /*00c0*/                   EXIT ;
        /*00d0*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*00e0*/                   BRA 0x60 ;
        /*00f0*/                   BRA 0xf0;
"""


def test_sass_loops_are_the_innermost_backward_branches():
    """Three backward branches form loops (0x10-0x40, 0x50-0x90, 0xa0-0xb0); the jump from a
    stub after EXIT back into the second loop (0x60-0xe0) holds an EXIT and is not a loop body,
    and the trap BRA to itself is none either."""
    loops = static.sass_loops(LOOPS_SASS)
    assert [len(body) for body in loops] == [4, 5, 2]


def test_steady_loop_is_the_shortest_loop_with_tensor_core_instructions():
    """The full-tile loop is the shortest loop issuing MMA (the loop without one, 0xa0-0xb0, is
    not a candidate): 4 instructions on 4 warps over a 64x64 step, 2 HGMMA 64x64x16 against one
    64x64x16 product... so MMA issued/needed 2.0; a kernel without a main loop has no columns."""
    got = static.steady_loop(LOOPS_SASS, 4, {"rows": 64, "keys": 64, "macs": 64 * 64 * 16})
    assert got == dict(loop_instructions=4, instr_per_element=4 * 4 / (64 * 64), mma_issued_per_needed=2.0)
    assert static.steady_loop(LOOPS_SASS, 4, None) == {}
    # HMMA.16816 is one warp's 16x8x16; HGMMA one warpgroup's (4 warps') MxNxK
    assert static.mma_macs(["HMMA.16816.F32.BF16 R4, R8, R12, R4"], 8) == 16 * 8 * 16 * 8
    assert static.mma_macs(["HGMMA.64x128x16.F32 R24, gdesc[UR4], R24"], 8) == 64 * 128 * 16 * 2


@pytest.fixture(scope="module")
def auto_rows():
    """The kernels ``flash_attention``'s defaults run (``block="auto"``, ``tma="auto"``) per arch
    and head dim, fp16 and bf16, unmasked and causal: on sm_90 the TMA forward of its default block
    and the pointer forward of the fallback's (a layout TMA cannot read), on sm_80 the pointer
    forward, and the backward of the default forward's block."""
    jobs = []
    for arch in launch.SETTINGS_ARCHS:
        for head_dim in (64, 128):
            paths = (False, True) if arch in static.TMA_ARCHS else (False,)
            for tma in paths:
                block = static.default_block(arch, head_dim, tma)
                fwd = static.of_block(kernel_modules(), block, "attention_fwd")
                assert fwd, f"AUTO_BLOCKS lists {block}, which is not generated: python -m generator --br .. --bc .."
                jobs += static.make_jobs(fwd, archs=(arch,), head_dims=(head_dim,), tma=(tma,))
            bwd_block = static.backward_block(arch, head_dim)
            jobs += static.make_jobs(static.of_block(kernel_modules(), bwd_block, "attention_bwd"),
                                     archs=(arch,), head_dims=(head_dim,))
    # varlen has no TMA path (flash_attention_varlen launches the pointer path): no TMA varlen row is a default
    jobs = [j for j in jobs if not (j.tma and "varlen" in j.mask)]
    return static.run_jobs(jobs)


def test_defaults_are_spill_free_without_redundant_mma(auto_rows):
    """Every default kernel: compiles, no spill, and its steady-state loop (found in SASS) issues
    at most 1.05 MMA work per product it needs (no warpgroup recomputing another's tile)."""
    bad = []
    for r in auto_rows:
        if "error" in r:
            bad.append(f"{_name(r)}: {r['error']}")
        elif not static.verdict(r)["no_spill"]:
            bad.append(f"{_name(r)}: spills {r['spill_store_bytes']}/{r['spill_load_bytes']} B")
        elif r["kernel"] != "_attn_bwd_preprocess" and not (r.get("mma_issued_per_needed") or 99) <= 1.05:
            bad.append(f"{_name(r)}: MMA issued/needed {r.get('mma_issued_per_needed')}")
    assert not bad, "\n".join(bad)


def test_sm90_defaults_reach_the_tutorials_cost_per_element(auto_rows):
    """At the sm_90 defaults the steady-state loops cost no more warp-instructions per tile element
    than Triton tutorial 06's (``static.TUTORIAL_SM90``), fp16 and bf16, head dims 64 and 128: the
    TMA forward (128x64 at head dim 64, 128x128 above; 128x64 reached only 0.350 at head dim 128),
    and the backward's dK/dV and dQ kernels. The same rows make the static page's targets table."""
    chosen = static.default_rows_sm90(auto_rows)
    assert {(r["kernel"], r["head_dim"], r["dtype"]) for r in chosen} == {
        (*key, dtype) for key in static.TUTORIAL_SM90 for dtype in ("fp16", "bf16")}
    bad = [f"{_name(r)}: {r['instr_per_element']:.3f} > {static.TUTORIAL_SM90[(r['kernel'], r['head_dim'])]}"
           for r in chosen if not r["instr_per_element"] <= static.TUTORIAL_SM90[(r["kernel"], r["head_dim"])] + 5e-4]
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def wide_rows():
    return static.run_jobs(static.wide_jobs())


def test_head_dims_above_128_fit_at_the_defaults(wide_rows):
    """Above head dim 128 every default kernel compiles, fits the architecture's shared memory (the
    128x64 forward's 3 stages and the 128-row dQ tile did not: a GPU launch failed with Triton's
    OutOfResources), does not spill, runs its dots on tensor cores, and issues no redundant MMA, but
    sm_90's pointer fallback forward (64x64 on two warpgroups: 1.5, generator.variants.FWD_SM80)."""
    errors = [f"{_name(r)}: {r['error']}" for r in wide_rows if "error" in r]
    assert not errors, "\n".join(errors)
    bad = [f"{_name(r)}: {static.verdict(r)}, {r['regs']} regs, {r['shared_bytes']} B shared, MMA issued/needed "
           f"{r.get('mma_issued_per_needed')}" for r in wide_rows if not all(static.verdict(r).values())
           or (r["kernel"] not in NO_DOT and not (r["kernel"] == "_attn_fwd" and r["arch"] == 90 and not r.get("tma"))
               and not (r.get("mma_issued_per_needed") or 99) <= 1.05)]
    assert not bad, "\n".join(bad)
    kernels = {(r["kernel"], r["arch"]) for r in wide_rows}
    assert {("_attn_fwd", a) for a in launch.SETTINGS_ARCHS} | {("_attn_bwd_dkdv", 90), ("_decode_fwd", 80)} <= kernels


def test_fp32_defaults_fit_shared_memory():
    """On float32 inputs on a GPU the defaults (``api.FP32_BLOCK`` for the forward and backward,
    decode at its runtime block with its fp32 stage rule) fit shared memory at head dims 64, 128 and
    256 on sm_80 and sm_90, pointer and TMA paths: a launch that does not fit fails. (Their dots are
    IEEE fp32 on the CUDA cores: spills are a speed matter there, reported on the static page.)
    The 128x64 block fp32 once ran did not fit from head dim 128 (224 KB on sm_80)."""
    rows = static.run_jobs(static.fp32_jobs())
    errors = [f"{_name(r)}: {r['error']}" for r in rows if "error" in r]
    assert not errors, "\n".join(errors)
    bad = [f"{_name(r)}: {r['shared_bytes']} B shared > {r['shared_limit']} B" for r in rows
           if not static.verdict(r)["fits_shared"]]
    assert not bad, "\n".join(bad)
    assert {r["head_dim"] for r in rows} == {64, 128, 256} and any(r.get("tma") for r in rows)
    assert {r["kernel"] for r in rows} >= {"_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq", "_decode_fwd"}
    # the old default really did not fit: the check can fail
    old = static.run_jobs([static.Job("generated.attention_fwd_br128_bc64", 80, "fp32", 128, "none")])
    assert not static.verdict(old[0])["fits_shared"]


def test_varlen_kernels_compile_clean():
    """The packed-batch kernels (IS_VARLEN, as flash_attention_varlen launches them) of the default
    block: forward and the three backward kernels, sm_80 and sm_90, head dims 64 and 128, causal:
    no spill, within shared memory, every dot on tensor cores (wgmma on sm_90, as the dense ones)."""
    # the kernels with an IS_VARLEN path: the dense forward and backward (not decode, merge, softmax)
    modules = [m for m in kernel_modules() if DEFAULT_BLOCK in m and (".attention_fwd" in m or ".attention_bwd" in m)
               and "maskmod" not in m]
    rows = static.run_jobs(static.make_jobs(modules, archs=(80, 90), dtypes=("fp16",), head_dims=(64, 128),
                                            masks=("varlen causal",)))
    errors = [f"{_name(r)}: {r.get('error')}" for r in rows if "error" in r or not all(static.verdict(r).values())]
    assert not errors, "\n".join(errors)
    assert {r["kernel"] for r in rows} == {"_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq"}
    assert all(r["dots_wgmma"] == r["dots"] for r in rows if r["arch"] == 90)


# ---- the score modifications (issue 15), at the defaults ------------------------------------
#: which kernels each modification prints lines into (generator/templates/*: the sink has no line
#: in the backward's loops, the softcap and ALiBi none in its preprocess; KV-cache decode prints
#: all three, the sink in its unsplit epilogue, and the split combine _merge_states the sink)
DECODE_KERNELS = {"_decode_fwd", "_decode_fwd[paged16]"}
SCORE_MOD_KERNELS = {"softcap": {"_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq", *DECODE_KERNELS},
                     "alibi": {"_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq", *DECODE_KERNELS},
                     "sinks": {"_attn_fwd", "_attn_bwd_preprocess", *DECODE_KERNELS, "_merge_states"}}



@pytest.fixture(scope="module")
def score_mod_rows():
    """The kernels ``flash_attention``'s and ``flash_attention_with_kvcache``'s defaults run at head
    dims 64 and 128, fp16, per arch (the TMA forward on sm_90): the forward, the backward's three,
    decode (contiguous and paged) and the split-KV combine — off ("none"), with each modification,
    and with all three (mask_mod kernels are not score-mod kernels' defaults: not here)."""
    jobs = []
    served = static.runtime_blocks()
    for arch in launch.SETTINGS_ARCHS:
        for head_dim in (64, 128):
            tma = arch in static.TMA_ARCHS
            fwd_block, bwd_block = static.default_block(arch, head_dim, tma), static.backward_block(arch, head_dim)
            every = kernel_modules()  # no mask_mod module: those are not the score-mod kernels' defaults
            modules = (static.of_block(every, fwd_block, "attention_fwd")
                       + static.of_block(every, bwd_block, "attention_bwd")
                       + static.of_block(every, served["decode"], "attention_decode")
                       + static.of_block(every, served["merge"], "merge_state"))
            for module in modules:
                jobs += static.make_jobs([module], archs=(arch,), dtypes=("fp16",), head_dims=(head_dim,),
                                         masks=("none", *static.SCORE_MODS), tma=(tma and ".attention_fwd" in module,))
    return static.run_jobs(jobs)


def test_each_score_mod_is_spill_free_at_the_defaults(score_mod_rows):
    """Every default kernel with one score modification or all three compiles, fits shared memory,
    runs its dots on tensor cores, does not spill (the softcap's sm_90 dK/dV kernel runs one stage
    above head dim 64 for that: launch_settings(softcap=True)), and its steady-state loop issues at
    most 1.05 MMA work per product it needs."""
    errors = [f"{_name(r)}: {r['error']}" for r in score_mod_rows if "error" in r]
    assert not errors, "\n".join(errors)
    bad = [f"{_name(r)}: {static.verdict(r)}, {r['regs']} regs, MMA issued/needed {r.get('mma_issued_per_needed')}"
           for r in score_mod_rows if not all(static.verdict(r).values())
           or (r["kernel"] not in NO_DOT and not (r.get("mma_issued_per_needed") or 99) <= 1.05)]
    assert not bad, "\n".join(bad)
    assert {r["mask"] for r in score_mod_rows} == {"none", *static.SCORE_MODS}



def test_a_score_mod_costs_nothing_where_it_prints_nothing(score_mod_rows):
    """A modification's constexpr compiles its lines out: a kernel it prints nothing into has the
    SASS instruction count of the kernel with every modification off, and one it prints into has
    more (so the count sees the lines)."""
    off = {(r["kernel"], r["arch"], r["head_dim"]): r["sass_instructions"] for r in score_mod_rows
           if r["mask"] == "none"}
    everything = set().union(*SCORE_MOD_KERNELS.values(), {"_attn_bwd_preprocess", "_merge_state"})
    assert len(off) == len(launch.SETTINGS_ARCHS) * 2 * len(everything), sorted(off)
    for r in score_mod_rows:
        if r["mask"] not in SCORE_MOD_KERNELS:
            continue
        base = off[(r["kernel"], r["arch"], r["head_dim"])]
        if r["kernel"] in SCORE_MOD_KERNELS[r["mask"]]:
            assert r["sass_instructions"] > base, _name(r)
        else:
            assert r["sass_instructions"] == base, (_name(r), r["sass_instructions"], base)


def test_score_mods_off_compile_to_the_kernel_without_their_lines(score_mod_rows):
    """With every modification off, each default kernel (sm_90, fp16, head dim 128: the TMA forward
    and the backward's three) compiles to the same SASS, instruction for instruction, as its module
    with every ``if HAS_SOFTCAP / HAS_ALIBI / HAS_SINKS:`` block deleted from the source: no line of a
    modification survives its constexpr (what the static page's off-cost table shows for all)."""
    modules = (static.of_block(kernel_modules(), static.default_block(90, 128, True), "attention_fwd")
               + static.of_block(kernel_modules(), static.backward_block(90, 128), "attention_bwd"))
    jobs = [static.Job(m, 90, "fp16", 128, "none", tma=".attention_fwd" in m, deletes=static.SCORE_MOD_CONSTEXPRS)
            for m in modules]
    rows = score_mod_rows + static.run_jobs(jobs)
    cost = [c for c in static.off_cost_rows(rows) if c["arch"] == 90 and c["head_dim"] == 128]
    assert {c["kernel"] for c in cost} == {"_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq"}
    bad = [f"{c['kernel']}: {c['off']} instructions off, {c['deleted']} with the HAS_* blocks deleted"
           for c in cost if not c["same_sass"] or c["off"] != c["deleted"]]
    assert not bad, "\n".join(bad)
    # the deletion removed something: with the modifications on, the kernels they print into differ
    assert all(c["on"]["softcap+alibi+sinks"] > c["off"] for c in cost)


def test_deleting_constexpr_branches():
    """``delete_constexpr_branches`` drops ``if FLAG:`` blocks (keeping their ``else``) in
    ``@triton.jit`` functions only, leaves other conditions and a ``pass`` where a block empties."""
    source = """
import triton


@triton.jit
def k(x, HAS_A: tl.constexpr, OTHER: tl.constexpr):
    y = x
    if HAS_A:
        y = y * 2
    if OTHER:
        y = y + 1
    for i in range(3):
        if HAS_A:
            y = y - 1
    if HAS_A:
        z = 1
    else:
        z = 2
    return y + z


def host(HAS_A):
    if HAS_A:
        return 1
"""
    out = static.delete_constexpr_branches(source, ("HAS_A",))
    body = out.split("def host")[0]
    assert "y * 2" not in body and "y - 1" not in body and "z = 1" not in body
    assert "z = 2" in body and "if OTHER:" in body and "pass" in body
    assert "if HAS_A:\n        return 1" in out  # host code untouched
    assert static.delete_constexpr_branches(source, ()) == static.delete_constexpr_branches(source, ("NOPE",))


def test_the_page_covers_every_kernel_family():
    """``python -m benchmarks.static --markdown`` (``page_jobs``) compiles, on both archs, every
    family: varlen (pointer path only), decode (both kernels) and the combine, each score
    modification (the forward also by TMA on sm_90), the mask_mod kernels, and the off-cost pairs."""
    jobs = static.page_jobs()
    served = static.runtime_blocks()
    for arch in (80, 90):
        at = [j for j in jobs if j.arch == arch]
        assert any(j.mask == "varlen causal" for j in at) and not any(j.tma and "varlen" in j.mask for j in at)
        assert any(".attention_decode" in j.module and j.module.endswith(served["decode"]) for j in at)
        assert any(".merge_state" in j.module and j.module.endswith(served["merge"]) for j in at)
        assert {j.mask for j in at if ".attention_bwd" in j.module} >= set(static.SCORE_MODS)
        assert {j.module.split("_maskmod_")[1].rsplit("_br", 1)[0] for j in at if "_maskmod_" in j.module} == {
            "chunked", "document", "prefix_lm", "sink_window"}
        assert any(j.deletes for j in at)

        def runs_by_default(j):
            if j.dtype == "fp32":  # float32 on a GPU: one block for the forward and the backward
                return j.module.endswith(static.block_name(api.FP32_BLOCK))
            if ".attention_bwd" in j.module:
                return j.module.endswith(static.backward_block(arch, j.head_dim))
            return j.module.endswith(static.default_block(arch, j.head_dim, j.tma))
        assert all(runs_by_default(j) for j in at if ".attention_" in j.module and ".attention_decode" not in j.module
                   and (j.mask not in ("none", "causal") or "_maskmod_" in j.module or j.deletes))
    assert any(j.tma and j.mask == "softcap" for j in jobs)
    assert any(j.tma and j.module.endswith("br128_bc128") for j in jobs if j.mask == "softcap")
    assert any(j.dtype == "fp32" for j in jobs) and len(jobs) == len(set(jobs))


def test_decode_has_loop_columns_and_merge_has_none(rows):
    """The decode kernel's steady-state loop (16 query rows x 64 keys, two products) is found in its
    SASS and issues no redundant MMA; the merge kernels have no tensor-core loop (n/a on the page)."""
    decode = [r for r in rows if r["kernel"].startswith("_decode_fwd") and "error" not in r]
    merge = [r for r in rows if r["kernel"].startswith("_merge_state") and "error" not in r]
    assert decode and merge
    assert all(r["instr_per_element"] and r["mma_issued_per_needed"] <= 1.05 for r in decode), [
        (_name(r), r.get("mma_issued_per_needed")) for r in decode]
    assert all(r.get("instr_per_element") is None for r in merge)
    assert static._loop_cells(merge[0]) == ["n/a", "n/a"]


def test_the_cache_key_covers_what_a_compile_reads():
    """A cached row is keyed by the module's code (less its comments), ``KEY_SOURCES`` and
    the job: sound only while the kernel modules import nothing else of the project (a module that
    imported, say, generator.runtime.api would compile differently without changing its key)."""
    import ast

    from benchmarks.common import ROOT

    project = ("generator", "spec", "benchmarks")
    for name in kernel_modules():
        tree = ast.parse((ROOT / (name.replace(".", "/") + ".py")).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {f"{node.module}.{a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     for a in node.names}
        ours = {m for m in imported if m.split(".")[0] in project and m != "generator.runtime"}
        assert ours <= {"generator.runtime.launch"}, (name, ours)
    launch_imports = {node.module for node in ast.walk(ast.parse((ROOT / "generator/runtime/launch.py").read_text()))
                      if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] in project}
    assert launch_imports <= {"spec.assumptions"}, launch_imports
    job = static.Job(kernel_modules()[0], 90, "fp16", 64, "none")
    # the job enters the key
    assert job.cache_key("3.6.0") != static.Job(job.module, 80, "fp16", 64, "none").cache_key("3.6.0")
