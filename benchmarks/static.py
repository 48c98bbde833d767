"""Static GPU cost of every generated kernel, compiled ahead of time without a GPU.

``triton.compile`` takes a ``GPUTarget`` and runs the whole pipeline (TTIR -> TTGIR -> PTX
-> ptxas -> cubin) on the CPU, so a machine with no GPU can still tell what a kernel will
cost on one. Each kernel is compiled with the specialisation a launch on contiguous tensors gets
(``launch_specialisation``), and the report gives:

* **registers per thread** and the **stack frame**, from ``cuobjdump --dump-resource-usage``
  on the cubin (the same numbers the driver reports as ``n_regs`` once a kernel is loaded);
* **spill bytes**: the local-memory stores/loads (``STL``/``LDL``) in the SASS of that
  cubin, which is what ptxas's "N bytes spill stores" line counts;
* **shared memory**: the dynamic size Triton requests at launch (``metadata.shared``) plus
  the cubin's static shared memory, against the per-block limit of the architecture;
* **tensor cores**: every ``tt.dot`` must lower to an ``nvidia_mma`` layout in TTGIR
  (version 2: ``mma.sync``/``HMMA``; version 3: ``wgmma``/``HGMMA``), confirmed in PTX and SASS.
  A dot that falls back to FMA keeps a ``blocked`` layout and is reported;
* **the steady-state loop** (``steady_loop``): located in the SASS by its backward branch, the
  shortest innermost loop that issues tensor-core instructions (the full-tile stage); its
  warp-instructions per tile element (``loop instructions x num_warps / (rows x keys)`` of one
  step) and its **MMA issued/needed** (the multiply-adds its HMMA/HGMMA instructions issue
  over all warps, per multiply-add the step's products need over the true head dims D and D_v:
  above 1 when warps recompute the same product or a tile pads a head dim, 192 to 256 say);
* **TMA**: the bulk tensor copies in PTX (``cp.async.bulk.tensor``) and SASS (``UTMALDG``
  loads, ``UTMASTG`` stores). ``--tma on|both`` also compiles the TMA variant of the
  modules whose ``aot_compile_args`` take ``tma=`` (sm_90 only: TMA is Hopper hardware), and
  such a row is ok only if its SASS really loads by TMA.

Kernels are found generically: every module in ``generated/`` that defines
``aot_compile_args(dtype, head_dim, **mask_flags)`` (the forward and the backward). That
function returns one kernel as ``dict(fn, signature, constexprs, num_warps, num_stages)``, or
several as a ``{name: dict}``.

Compilation runs in worker subprocesses with ``TRITON_INTERPRET`` unset (the interpreter
replaces ``@triton.jit`` functions, which then cannot be compiled), one per core, and each
result is cached under ``.artifacts/static-cache`` keyed by the kernel file, the Triton
version and the variant.

    python -m benchmarks.static                                   # table on stdout
    python -m benchmarks.static --json static.json --markdown docs/performance/static.md
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import (
    ARTIFACTS, DOCS_PERF, ROOT, kernel_modules, markdown_table, text_table, write_text,
)

#: compute capability -> name; sm_90 compiles as sm_90a (Triton's choice: wgmma needs the "a")
ARCHS = {80: "sm_80", 90: "sm_90"}
#: largest shared memory one block may opt in to (CUDA C Programming Guide, "Technical
#: Specifications per Compute Capability"): A100 163 KB, H100 227 KB.
SHARED_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128)
#: mask variants compiled by default: the unmasked kernel and the causal one (whose diagonal
#: tiles carry the predicate and so the most registers)
MASKS = {"none": {}, "causal": {"causal": True},
         # the packed-batch (flash_attention_varlen) kernels: the same templates with IS_VARLEN
         "varlen causal": {"causal": True, "varlen": True}}
#: the score modifications (issue 15), each alone and all three, unmasked: their rows show what
#: each costs, and the "none" row is the kernel with every modification compiled out
SCORE_MODS = {"softcap": {"softcap": True}, "alibi": {"alibi": True}, "sinks": {"sinks": True},
              "softcap+alibi+sinks": {"softcap": True, "alibi": True, "sinks": True}}
MASKS.update(SCORE_MODS)
#: MLA (issue 27): v's head dim D_v beside q/k's D (the job's head dim); DeepSeek-V2/V3 train at
#: (192, 128), a smaller MLA at (128, 64), and decode absorbed at (576, 512) (``mla_jobs``)
MLA_TRAIN = ((192, 128), (128, 64))
MLA_DECODE = (576, 512)
MLA = {f"{causal}D_v={dv}": {"head_dim_v": dv, **({"causal": True} if causal else {})}
       for dv in sorted({dv for _, dv in (*MLA_TRAIN, MLA_DECODE)}) for causal in ("", "causal, ")}
#: decode at MLA_DECODE with a v cache of its own (not k_cache[..., :D_v]): the kernel loads a V tile too
MLA[f"D_v={MLA_DECODE[1]}, separate v"] = {"head_dim_v": MLA_DECODE[1], "v_is_k": False}
MASKS.update(MLA)
#: the constexprs of the score modifications: a row whose job ``deletes`` them is compiled from the
#: module's source with every ``if HAS_...:`` block of them deleted (``delete_constexpr_branches``)
SCORE_MOD_CONSTEXPRS = ("HAS_SOFTCAP", "HAS_ALIBI", "HAS_SINKS")
#: the last commit before the score modifications (issue 15) reached the generated kernels (main at
#: the merge of #15): its forward and backward are the kernels the modifications were added to
PRE_SCORE_MOD_COMMIT = "13600a64c49c0421c1da3c44086ca0e8076b9c6a"
#: bump when the analysis changes, to invalidate cached rows
ANALYSIS_VERSION = 9
#: TMA exists from sm_90 on (on sm_80 Triton lowers descriptors back to pointer loads)
TMA_ARCHS = (90,)
#: the compiled rows, by ``Job.cache_key`` (``FLASHPROOF_STATIC_CACHE`` moves it, e.g. to time a cold run)
CACHE = Path(os.environ.get("FLASHPROOF_STATIC_CACHE") or ARTIFACTS / "static-cache")
@dataclass(frozen=True)
class Job:
    """One compilation: a generated module at one (arch, dtype, head dim, mask)."""

    module: str
    arch: int
    dtype: str
    head_dim: int
    mask: str
    num_warps: int | None = None  # None: the module's own (generated) choice
    num_stages: int | None = None
    tma: bool = False  # the module's TMA variant (aot_compile_args(..., tma=True))
    #: constexprs whose ``if NAME:`` blocks are deleted from the module's source before compiling
    #: (``delete_constexpr_branches``): the kernel as if those lines had never been written
    deletes: tuple[str, ...] = ()
    #: compile the module's source as of this git commit instead of the working tree's
    commit: str = ""

    def cache_key(self, triton_version: str) -> str:
        """What the compiled row depends on: the module's code without its comments (the provenance
        line's spec hash and the claim names beside printed lines change with a claim's text, not
        the kernel: ``ast.unparse`` drops them), what ``triton.compile`` receives for its kernels
        (``compile_inputs``), the job, Triton's version and the analysis."""
        h = hashlib.sha256(ast.unparse(ast.parse(module_source(self.module, self.commit))).encode())
        h.update(compile_inputs(self).encode())
        h.update(json.dumps([asdict(self), triton_version, ANALYSIS_VERSION]).encode())
        return h.hexdigest()[:24]


def make_jobs(modules, archs=tuple(ARCHS), dtypes=DTYPES, head_dims=HEAD_DIMS, masks=("none", "causal"),
              warps=(None,), stages=(None,), tma=(False,)):
    """Every combination; ``warps``/``stages`` other than ``None`` override the generated
    launch options (to find settings that do not spill). ``tma=(False, True)`` adds the TMA
    variants, on the architectures that have TMA only (``TMA_ARCHS``); pass only modules
    that have one (``supports_tma``)."""
    return [Job(m, a, d, h, k, w, s, t) for m in modules for a in archs for d in dtypes
            for h in head_dims for k in masks for w in warps for s in stages for t in tma
            if not t or a in TMA_ARCHS]


def block_name(block: tuple[int, int]) -> str:
    """``(128, 64)`` -> ``"br128_bc64"``: how a block config ends its module names."""
    return f"br{block[0]}_bc{block[1]}"


def of_block(modules, block: str, kind: str) -> list[str]:
    """The ``modules`` of block config ``block`` (``"br128_bc64"``) and kernel kind ``kind``
    (``"attention_fwd"``, ``"attention_bwd"``, ``"attention_decode"``, ``"merge_state"``)."""
    return [m for m in modules if m.endswith(block) and f".{kind}" in m]


def default_block(arch: int, head_dim: int, tma: bool = False) -> str:
    """``"br128_bc64"``: the block config ``flash_attention(block="auto")`` runs on ``arch`` at
    ``head_dim``, on the TMA path when ``tma`` (sm_90), else on the pointer path
    (``generator.runtime.api.AUTO_BLOCKS``, keyed by ``launch.memory_path_arch``)."""
    from generator.runtime import api, launch

    arch = launch.memory_path_arch(arch, tma)
    return block_name(launch.pick_settings(api.AUTO_BLOCKS, arch, launch.block_d(head_dim)))


def backward_block(arch: int, head_dim: int) -> str:
    """The block config whose backward runs after ``flash_attention``'s default forward on ``arch``
    (the forward's block: on sm_90 the TMA path's)."""
    return default_block(arch, head_dim, tma=arch in TMA_ARCHS)


def generated_blocks() -> list[str]:
    """``["16×32", "64×64", ...]``: the block configs generated/ holds (forward modules), in size order."""
    blocks = {tuple(int(x) for x in re.findall(r"br(\d+)_bc(\d+)$", m)[0])
              for m in kernel_modules() if ".attention_fwd_br" in m}
    return [f"{br}×{bc}" for br, bc in sorted(blocks)]


def runtime_blocks() -> dict[str, str]:
    """The block configs whose decode and merge kernels the runtime launches, whatever the head
    dim (``generator.runtime.decode.DECODE_BLOCK``, ``generator.runtime.merge.MERGE_BLOCK``)."""
    from generator.runtime.decode import DECODE_BLOCK
    from generator.runtime.merge import MERGE_BLOCK

    return {"decode": block_name(DECODE_BLOCK), "merge": block_name(MERGE_BLOCK)}


def page_jobs(archs=tuple(ARCHS), dtypes=DTYPES, head_dims=HEAD_DIMS) -> list[Job]:
    """The jobs of the default page (``python -m benchmarks.static --markdown``):

    * every generated block config's forward (pointer kernel, and on sm_90 its TMA variant) and
      backward, unmasked and causal;
    * at the blocks the defaults run only, to keep the compile work bounded: for each arch and head
      dim and each memory path, the forward of that path's default block (``default_block``) and
      the backward that follows the default forward (``backward_block``): the packed-batch kernels
      (``varlen causal``, pointer path), each score modification alone and all three
      (``SCORE_MODS``), and the mask_mod kernels (``generated/attention_{fwd,bwd}_maskmod_<name>_*``,
      no other mask); the KV-cache decode kernel (contiguous and paged, unmasked and causal) and
      the merge kernels of the split-KV combine at the blocks the runtime launches
      (``runtime_blocks``);
    * the ``none`` kernels with every score modification's ``if`` blocks deleted from the source
      (``deletes``), and as they were before the modifications existed (``PRE_SCORE_MOD_COMMIT``,
      where git has it), to show that a modification off costs nothing.
    """
    modules = kernel_modules()
    dense = [m for m in modules if ".attention_fwd" in m or ".attention_bwd" in m]
    jobs = make_jobs(dense, archs, dtypes, head_dims)
    jobs += make_jobs([m for m in dense if supports_tma(m)], archs, dtypes, head_dims, tma=(True,))
    mask_mods = [m for m in kernel_modules(mask_mods=True) if "_maskmod_" in m]
    served = runtime_blocks()
    for arch in archs:
        for head_dim in head_dims:
            at = dict(archs=(arch,), dtypes=dtypes, head_dims=(head_dim,))
            jobs += make_jobs(of_block(modules, served["decode"], "attention_decode"), masks=("none", "causal"), **at)
            jobs += make_jobs(of_block(modules, served["merge"], "merge_state"), masks=("none",), **at)
            bwd_block = backward_block(arch, head_dim)
            bwd = of_block(dense, bwd_block, "attention_bwd")
            for tma in (False, True):
                if tma and arch not in TMA_ARCHS:
                    continue
                block = default_block(arch, head_dim, tma)
                fwd = of_block(dense, block, "attention_fwd")
                if not tma:  # varlen has no TMA path
                    jobs += make_jobs(fwd + bwd, masks=("varlen causal",), **at)
                kernels = fwd if tma else fwd + bwd
                jobs += make_jobs(kernels, masks=tuple(SCORE_MODS), tma=(tma,), **at)
                jobs += [Job(m, arch, d, head_dim, "none", tma=tma, deletes=SCORE_MOD_CONSTEXPRS)
                         for m in kernels for d in dtypes]
                jobs += [Job(m, arch, d, head_dim, "none", tma=tma, commit=PRE_SCORE_MOD_COMMIT)
                         for m in kernels for d in dtypes if has_source(m, PRE_SCORE_MOD_COMMIT)]
                jobs += make_jobs(of_block(mask_mods, block, "attention_fwd")
                                  + ([] if tma else of_block(mask_mods, bwd_block, "attention_bwd")),
                                  masks=("none",), tma=(tma,), **at)
    if tuple(head_dims) == HEAD_DIMS:  # the whole page: the defaults above head dim 128, on fp32, MLA and FP8 too
        jobs += wide_jobs(archs) + fp32_jobs(archs) + mla_jobs(archs) + fp8_jobs(archs) + score_mod_jobs(archs, dtypes)
    return list(dict.fromkeys(jobs))  # the same default block at both head dims: once


#: the example score_mods (issue 28) the page compiles: their kernels are not in generated/ (a user's score_mod
#: is emitted with ``--score-mod``), so ``score_mod_package`` emits them into a package of their own under
#: ``.artifacts`` at the blocks the defaults run (``default_block``, ``backward_block``)
SCORE_MOD_EXAMPLES = ("rel_bias", "temperature", "tanh_cap", "batch_scale")
SCORE_MOD_PACKAGE = "static_score_mods"
SCORE_MOD_ROOT = ARTIFACTS / "static-score-mods"


def score_mod_package(blocks) -> None:
    """Emit the examples' kernels at ``blocks`` (``"br128_bc64"``, ...) into ``SCORE_MOD_ROOT /
    SCORE_MOD_PACKAGE`` with ``python -m generator --score-mod`` (each block one run: the proofs run
    first), unless ``--check`` finds the package there current and holding those blocks."""
    out = SCORE_MOD_ROOT / SCORE_MOD_PACKAGE
    have = {block_name(tuple(c["block"])) for c in json.loads((out / "MANIFEST.json").read_text())
            .get("configs", {}).values()} if (out / "MANIFEST.json").exists() else set()
    cli = [sys.executable, "-m", "generator"]
    if have and subprocess.run([*cli, "--check", "--out", str(out)], cwd=ROOT, capture_output=True).returncode:
        subprocess.run(["rm", "-rf", str(out)], check=True)
        have = set()
    refs = [f"spec.score_mods:{name}" for name in SCORE_MOD_EXAMPLES]
    for block in sorted(set(blocks) - have):
        br, bc = re.findall(r"br(\d+)_bc(\d+)", block)[0]
        subprocess.run([*cli, "--br", br, "--bc", bc, "--score-mod", *refs, "--out", str(out)], cwd=ROOT, check=True,
                       capture_output=True)


def score_mod_jobs(archs=tuple(ARCHS), dtypes=DTYPES, head_dims=HEAD_DIMS) -> list[Job]:
    """The example score_mods' kernels alone (no mask_mod) at the defaults: per arch and head dim the
    forward of each memory path's default block and the backward after the default forward, unmasked and
    causal (``run_jobs`` has ``score_mod_package`` emit them before it compiles them)."""
    wanted = []
    for arch in archs:
        for head_dim in head_dims:
            for tma in ((False, True) if arch in TMA_ARCHS else (False,)):
                wanted.append((arch, head_dim, tma, default_block(arch, head_dim, tma), "attention_fwd"))
            wanted.append((arch, head_dim, False, backward_block(arch, head_dim), "attention_bwd"))
    jobs = []
    for arch, head_dim, tma, block, kind in wanted:
        modules = [f"{SCORE_MOD_PACKAGE}.{kind}_scoremod_{name}_{block}" for name in SCORE_MOD_EXAMPLES]
        jobs += make_jobs(modules, (arch,), dtypes, (head_dim,), ("none", "causal"), tma=(tma,))
    return jobs


#: the padded head dim the page and the tests compile "above head dim 128" at (BLOCK_D 256)
WIDE_HEAD_DIM = 256


def wide_jobs(archs=tuple(ARCHS)) -> list[Job]:
    """The kernels the defaults run above head dim 128 (compiled at ``WIDE_HEAD_DIM``), fp16, per
    arch: the forward of each memory path's default block (on sm_90 the TMA one and the pointer
    fallback's), the backward's three of the default forward's block, decode and the combine of the
    runtime's blocks; unmasked, causal, every score modification at once, and varlen (pointer path)
    where the kernel has it; and the document mask_mod's forward and backward (two id reads per tile
    corner: the mask_mod kernels' worst case)."""
    served, modules, jobs = runtime_blocks(), kernel_modules(), []
    document = [m for m in kernel_modules(mask_mods=True) if "_maskmod_document_" in m]
    at = dict(dtypes=("fp16",), head_dims=(WIDE_HEAD_DIM,))
    for arch in archs:
        for tma in ((False, True) if arch in TMA_ARCHS else (False,)):
            block = default_block(arch, WIDE_HEAD_DIM, tma)
            masks = ("none", "causal", "softcap+alibi+sinks") + (() if tma else ("varlen causal",))
            jobs += make_jobs(of_block(modules, block, "attention_fwd"), archs=(arch,), masks=masks, tma=(tma,), **at)
            jobs += make_jobs(of_block(document, block, "attention_fwd"), archs=(arch,), masks=("none",), tma=(tma,),
                              **at)
        bwd_block = backward_block(arch, WIDE_HEAD_DIM)
        jobs += make_jobs(of_block(modules, bwd_block, "attention_bwd"), archs=(arch,),
                          masks=("none", "causal", "varlen causal", "softcap+alibi+sinks"), **at)
        jobs += make_jobs(of_block(document, bwd_block, "attention_bwd"), archs=(arch,), masks=("none",), **at)
        decode = (of_block(modules, served["decode"], "attention_decode")
                  + of_block(modules, served["merge"], "merge_state"))
        jobs += make_jobs(decode, archs=(arch,), masks=("none", "softcap+alibi+sinks"), **at)
    return jobs


def mla_jobs(archs=tuple(ARCHS), dtypes=("bf16",)) -> list[Job]:
    """MLA's head-dim pairs (issue 27) at the defaults each arch runs them with (the block of the wider
    of D and D_v): the forward (on sm_90 the TMA path and the pointer fallback) and the backward's three
    at each ``MLA_TRAIN`` pair, unmasked and causal (192 split as 128 + 64 in both: claim head_dim_split);
    the decode kernel of the runtime's block (contiguous and paged) at ``MLA_DECODE``, unmasked, causal and
    with a v cache of its own. bf16, DeepSeek's dtype."""
    modules, served, jobs = kernel_modules(), runtime_blocks(), []
    for arch in archs:
        for d, dv in MLA_TRAIN:
            at = dict(archs=(arch,), dtypes=dtypes, head_dims=(d,), masks=(f"D_v={dv}", f"causal, D_v={dv}"))
            wide = max(d, dv)
            for tma in ((False, True) if arch in TMA_ARCHS else (False,)):
                jobs += make_jobs(of_block(modules, default_block(arch, wide, tma), "attention_fwd"), tma=(tma,), **at)
            jobs += make_jobs(of_block(modules, backward_block(arch, wide), "attention_bwd"), **at)
        d, dv = MLA_DECODE
        jobs += make_jobs(of_block(modules, served["decode"], "attention_decode"), archs=(arch,), dtypes=dtypes,
                          head_dims=(d,), masks=(f"D_v={dv}", f"causal, D_v={dv}", f"D_v={dv}, separate v"))
    return jobs


def fp32_jobs(archs=tuple(ARCHS)) -> list[Job]:
    """The kernels the defaults run on float32 inputs on a GPU (``api.FP32_BLOCK``; decode at the
    runtime's block), at head dims 64, 128 and ``WIDE_HEAD_DIM``: the forward (pointer, and TMA on
    sm_90), the backward's three and decode, unmasked, causal and (pointer path) varlen. Their dots
    are IEEE fp32 on the CUDA cores: what must hold is that each fits shared memory (a launch
    that does not fails), not the tensor-core columns."""
    from generator.runtime import api

    block, modules = block_name(api.FP32_BLOCK), kernel_modules()
    fwd, bwd = of_block(modules, block, "attention_fwd"), of_block(modules, block, "attention_bwd")
    decode = of_block(modules, runtime_blocks()["decode"], "attention_decode")
    at = dict(archs=archs, dtypes=("fp32",), head_dims=(*HEAD_DIMS, WIDE_HEAD_DIM))
    return (make_jobs(fwd + bwd, masks=("none", "causal", "varlen causal"), **at)
            + make_jobs(fwd, masks=("none", "causal"), tma=(True,), **at) + make_jobs(decode, masks=("none",), **at))


#: the FP8 forward (issue 30): its formats (aot_compile_args' dtype names) and the archs with fp8 tensor
#: cores among ARCHS (sm_89 has them too; Ampere does not)
FP8_DTYPES = ("e4m3", "e5m2")
FP8_ARCHS = (90,)


def fp8_jobs(archs=tuple(ARCHS), head_dims=HEAD_DIMS) -> list[Job]:
    """The FP8 forward (``HAS_DESCALE``, both products on fp8 tiles: wgmma e4m3/e5m2, ``QGMMA`` in SASS, each
    instruction's partial promoted to fp32: ``max_num_imprecise_acc``) at the pointer path's default block,
    unmasked, causal and packed (varlen), on the archs with fp8 tensor cores (``FP8_ARCHS``); it takes the
    pointer path (no TMA). And the decode kernel on an FP8 q and cache (its 16-row products: below wgmma's
    64 rows, mma.sync on the fp8 tiles upcast to fp16, ``HMMA``)."""
    modules = kernel_modules()
    jobs = []
    decode = of_block(modules, runtime_blocks()["decode"], "attention_decode")
    for arch in (a for a in archs if a in FP8_ARCHS):
        for head_dim in head_dims:
            fwd = of_block(modules, default_block(arch, head_dim, False), "attention_fwd")
            jobs += make_jobs(fwd, archs=(arch,), dtypes=FP8_DTYPES, head_dims=(head_dim,),
                              masks=("none", "causal", "varlen causal"))
        jobs += make_jobs(decode, archs=(arch,), dtypes=FP8_DTYPES[:1], head_dims=(128,), masks=("none",))
    return jobs


def supports_tma(module: str) -> bool:
    """Whether a generated module's ``aot_compile_args`` has the ``tma`` variant."""
    import importlib
    import inspect

    return "tma" in inspect.signature(importlib.import_module(module).aot_compile_args).parameters


# ----------------------------------------------------------------------------------------
# Compilation and analysis (runs inside a worker process, Triton not interpreting)
# ----------------------------------------------------------------------------------------
def kernel_specs(module, dtype: str, head_dim: int, flags: dict, arch: int | None = None) -> list[tuple[str, dict]]:
    """``[(kernel name, compile args)]`` from a module's ``aot_compile_args`` (``flags``: the
    mask flags, and ``tma=True`` for a TMA variant), with the launch settings of ``arch`` for a
    module whose settings depend on it (its ``aot_compile_args`` takes ``arch=``)."""
    import inspect

    if arch is not None and "arch" in inspect.signature(module.aot_compile_args).parameters:
        flags = {**flags, "arch": arch}
    got = module.aot_compile_args(dtype, head_dim, **flags)
    # a module with one kernel returns its args, one with several ``{kernel name: args}``
    return [(got["fn"].__name__, got)] if "fn" in got else list(got.items())


#: the runtime integers of a typical launch, by parameter name, for the binder rule below: MHA
#: (GROUP = 1), head counts and sequence lengths multiples of 16 (the benchmark shapes), no
#: alignment shift and no window (its placeholders are 0). Integers not named here stay plain i32.
TYPICAL_INTS = {"GROUP": 1, "H": 16, "H_KV": 16, "N_Q": 4096, "N_K": 4096, "shift": 0,
                "window_left": 0, "window_right": 0}


def launch_specialisation(spec: dict) -> tuple[dict, dict, dict]:
    """``(signature, constexprs, attrs)`` of a typical launch, as Triton's JIT would compile it.

    At launch, ``@triton.jit``'s binder specialises on the argument values: an integer equal
    to 1 becomes the constant 1, and pointers and integers divisible by 16 are marked
    ``tt.divisibility=16``. Compiling without that (plain ``aot_compile_args``) is not what runs:
    a kernel that does not know its innermost stride is 1 cannot vectorise its loads, so Triton
    does not software-pipeline them (no ``cp.async``/TMA) and the registers, shared memory and
    spills all differ. A module may return the launch's ``attrs`` itself; otherwise this
    models a launch on contiguous tensors: every pointer is 16-byte aligned (PyTorch
    allocations are), and in each run of ``stride_<tensor>*`` parameters (declared outer to
    inner, as in the Triton tutorial) the last is the unit stride and the others are
    multiples of 16 (head dim 64 or 128); the other integers take the binder's rule at their
    ``TYPICAL_INTS`` value (GROUP = 1 a constant, N_Q, N_K, H, shift, window divisible by 16),
    or at the value the module's ``typical_ints`` gives it.
    """
    signature, constexprs = dict(spec["signature"]), dict(spec["constexprs"])
    if "attrs" in spec:
        return signature, constexprs, dict(spec["attrs"])
    names = spec["fn"].arg_names
    attrs = {}
    # a module may name its own launch's integers (``typical_ints``: decode's GQA group, the merge
    # kernels' row strides); those take the binder's rule at that value, not the stride-run model
    own = spec.get("typical_ints", {})
    typical = {**TYPICAL_INTS, **own}
    strides = [(i, name) for i, name in enumerate(names)
               if name.startswith("stride_") and signature.get(name) == "i32" and name not in own]
    for pos, (i, name) in enumerate(strides):
        following = strides[pos + 1] if pos + 1 < len(strides) else None
        innermost = (following is None or following[0] != i + 1
                     or following[1][:-1].rstrip("_") != name[:-1].rstrip("_"))
        if innermost:
            signature[name], constexprs[name] = "constexpr", 1
        else:
            attrs[(i,)] = [["tt.divisibility", 16]]
    for i, name in enumerate(names):
        if signature.get(name, "").startswith("*"):
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif signature.get(name) == "i32" and name in typical:
            if typical[name] == 1:
                signature[name], constexprs[name] = "constexpr", 1
            elif typical[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def _tool(name: str) -> str:
    """Path of a CUDA binary shipped in the Triton wheel (cuobjdump, nvdisasm)."""
    import triton

    try:
        return getattr(triton.knobs.nvidia, name).path
    except AttributeError:  # older layouts: the wheel's bin directory
        return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


_RESOURCE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
_LOCAL_ACCESS = re.compile(r"\b(STL|LDL)((?:\.[A-Z0-9]+)*)\s")
#: tensor-core instructions: HMMA (mma.sync), HGMMA (fp16/bf16 wgmma), QGMMA (fp8 wgmma, issue 30)
_SASS_TC = re.compile(r"\b(HMMA|HGMMA|QGMMA)\.")
#: one SASS instruction: its address comment, then the opcode (cuobjdump -sass)
_SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+[@!A-Z]", re.MULTILINE)
_SASS_TMA = re.compile(r"\b(UTMALDG|UTMASTG)\b")
_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def cubin_dumps(cubin: bytes) -> tuple[str, str]:
    """``cuobjdump --dump-resource-usage`` and ``cuobjdump -sass`` of a cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return tuple(subprocess.run([_tool("cuobjdump"), flag, str(path)], check=True, capture_output=True,
                                    text=True).stdout for flag in ("--dump-resource-usage", "-sass"))


def resource_usage(cubin: bytes, dumps: tuple[str, str] | None = None) -> dict:
    """Registers, stack, static shared and local bytes from the cubin, and its SASS counts
    (``dumps``: its ``cubin_dumps`` when already made)."""
    usage, sass = dumps or cubin_dumps(cubin)
    m = _RESOURCE.search(usage)
    if m is None:
        raise RuntimeError(f"cannot parse cuobjdump --dump-resource-usage output:\n{usage}")
    regs, stack, static_shared, local = map(int, m.groups())
    spill = {"STL": 0, "LDL": 0}
    for op, mods in _LOCAL_ACCESS.findall(sass):
        width = 4
        for mod in mods.split(".")[1:]:
            width = _WIDTH.get(mod, width)
        spill[op] += width
    tc = _SASS_TC.findall(sass)
    return dict(regs=regs, stack_bytes=stack, static_shared=static_shared, local_bytes=local,
                spill_store_bytes=spill["STL"], spill_load_bytes=spill["LDL"],
                sass_hmma=tc.count("HMMA"), sass_hgmma=tc.count("HGMMA"), sass_qgmma=tc.count("QGMMA"),
                sass_instructions=len(_SASS_INSTRUCTION.findall(sass)))


def tma_instructions(sass: str) -> dict:
    """TMA bulk tensor loads (``UTMALDG``) and stores (``UTMASTG``) in the SASS."""
    tma = _SASS_TMA.findall(sass)
    return dict(sass_tma_load=tma.count("UTMALDG"), sass_tma_store=tma.count("UTMASTG"))


_SASS_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", re.M)
_SASS_BRANCH = re.compile(r"\bBRA(?:\.[A-Z.]+)?\s+(0x[0-9a-f]+)")
_SASS_MMA_SHAPE = re.compile(r"\b([HQ]GMMA)\.(\d+)x(\d+)x(\d+)|\b(HMMA)\.(16816|1688|884)\b")
_HMMA_SHAPES = {"16816": (16, 8, 16), "1688": (16, 8, 8), "884": (8, 8, 4)}


def sass_loops(sass: str) -> list[list[str]]:
    """The innermost loops of a kernel's SASS, each as its list of instructions.

    A loop is a backward branch (``BRA`` to a lower address; a branch to itself is the trap
    after the last ``EXIT``) together with the instructions from its target to it. Innermost:
    no other such loop lies inside it. A range holding an ``EXIT`` is not a loop body (it is
    a retry stub placed after the kernel's end that jumps back into it)."""
    instrs = [(int(a, 16), text) for a, text in _SASS_INSTR.findall(sass)]
    loops = []
    for addr, text in instrs:
        m = _SASS_BRANCH.search(text)
        if m and int(m.group(1), 16) < addr:
            loops.append((int(m.group(1), 16), addr))
    bodies = []
    for lo, hi in loops:
        if any((a, b) != (lo, hi) and lo <= a and b <= hi for a, b in loops):
            continue
        body = [text for a, text in instrs if lo <= a <= hi]
        if not any(re.search(r"\bEXIT\b", t) for t in body):
            bodies.append(body)
    return bodies


def mma_macs(instructions: list[str], num_warps: int) -> int:
    """Multiply-adds the tensor-core instructions issue, over all warps of the program: an
    ``HGMMA.MxNxK`` is one warpgroup's (4 warps') M x N x K, an ``HMMA.16816`` one warp's
    16 x 8 x 16."""
    total = 0
    for t in instructions:
        m = _SASS_MMA_SHAPE.search(t)
        if m and m.group(1):
            total += int(m.group(2)) * int(m.group(3)) * int(m.group(4)) * (num_warps // 4)
        elif m:
            a, b, c = _HMMA_SHAPES[m.group(6)]
            total += a * b * c * num_warps
    return total


def steady_loop(sass: str, num_warps: int, loop: dict | None) -> dict:
    """The cost of the steady-state loop, located in SASS by its backward branch: of the
    innermost loops that issue tensor-core instructions, the shortest (the full-tile stage: the
    masked stages carry the element predicate, so they are longer).

    * ``loop_instructions``: its SASS instructions (one warp's stream);
    * ``instr_per_element``: warp-instructions per tile element, ``loop_instructions x num_warps
      / (rows x keys)`` of one step (``loop``, the module's ``aot_args(loop=...)``);
    * ``mma_issued_per_needed``: the multiply-adds its tensor-core instructions issue over
      all warps (``mma_macs``) per multiply-add the step's products need (``loop["macs"]``, over
      the true head dims: ``launch.aot_args``): 1.0 when no warp recomputes another's product and
      no tile pads a head dim, above 1 when warps replicate one or padding columns are multiplied.
    """
    if loop is None:
        return {}
    candidates = [body for body in sass_loops(sass) if any(_SASS_MMA_SHAPE.search(t) for t in body)]
    if not candidates:
        return dict(loop_instructions=None, instr_per_element=None, mma_issued_per_needed=None)
    body = min(candidates, key=len)
    return dict(loop_instructions=len(body), instr_per_element=len(body) * num_warps / (loop["rows"] * loop["keys"]),
                mma_issued_per_needed=mma_macs(body, num_warps) / loop["macs"])


def sass_digest(sass: str) -> str:
    """A hash of the SASS instruction stream (every instruction's text, in order, without its
    address): two kernels with the same digest compiled to the same machine code."""
    return hashlib.sha256("\n".join(text for _, text in _SASS_INSTR.findall(sass)).encode()).hexdigest()[:16]


def delete_constexpr_branches(source: str, names) -> str:
    """``source`` (a module) with every ``if NAME:`` statement on one of the constexprs ``names`` in
    its ``@triton.jit`` functions replaced by its ``else`` branch (by nothing when it has none):
    the kernel as if those lines had never been written. Comments are lost (``ast.unparse``)."""
    import ast

    names = set(names)

    class Delete(ast.NodeTransformer):
        def visit_If(self, node):
            self.generic_visit(node)
            if isinstance(node.test, ast.Name) and node.test.id in names:
                return node.orelse or None
            return node

        def generic_visit(self, node):
            super().generic_visit(node)
            if isinstance(getattr(node, "body", None), list) and not node.body:  # a block left empty
                node.body = [ast.Pass()]
            return node

    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            Delete().visit(node)
    return ast.unparse(ast.fix_missing_locations(tree))


def module_source(name: str, commit: str = "") -> str:
    """The source of the generated module ``name``: the working tree's (the example score_mods' package's
    under ``SCORE_MOD_ROOT``), or as of git ``commit``."""
    path = name.replace(".", "/") + ".py"
    if not commit:
        return ((SCORE_MOD_ROOT if name.startswith(SCORE_MOD_PACKAGE + ".") else ROOT) / path).read_text()
    return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def has_source(name: str, commit: str) -> bool:
    """Whether git can give ``name``'s source as of ``commit`` (a shallow clone may lack it)."""
    path = name.replace(".", "/") + ".py"
    return subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=ROOT, capture_output=True).returncode == 0


@contextlib.contextmanager
def job_module(job: Job):
    """``with job_module(job) as module``: the module ``job`` compiles, the generated one, or its variant
    (``_module_variant``) imported from a file in a temporary directory that is removed, and the variant
    dropped from ``sys.modules``, when the block ends (the driver builds one per cache key, each worker one
    per compile)."""
    import importlib

    if job.module.startswith(SCORE_MOD_PACKAGE + ".") and str(SCORE_MOD_ROOT) not in sys.path:
        sys.path.insert(0, str(SCORE_MOD_ROOT))
    if not (job.deletes or job.commit):
        yield importlib.import_module(job.module)
        return
    with tempfile.TemporaryDirectory(prefix="flashproof-variant-") as tmp:
        module = _module_variant(job, Path(tmp))
        try:
            yield module
        finally:
            sys.modules.pop(module.__name__, None)


def compile_inputs(job: Job) -> str:
    """Everything ``triton.compile`` receives for ``job``'s kernels besides their source (the module's
    own text, in the key beside this: the generated modules import no project code but the host-side
    launch modules, tests/test_static.py checks it), as text: per kernel the launch's specialisation
    (signature, constexprs, attrs) and its options. Computed by running the module's
    ``aot_compile_args`` as the worker does, so the launch code it reads (``generator.runtime.launch``,
    ``spec.launch``, ...) enters the key through what it returns: an edit there that changes no
    compile changes no key. The same text with or without ``TRITON_INTERPRET`` (the suite's mode)."""
    try:
        with job_module(job) as module:
            specs = kernel_specs(module, job.dtype, job.head_dim,
                                 {**MASKS[job.mask], **({"tma": True} if job.tma else {})}, job.arch)
            inputs = [(name, launch_specialisation(spec), {k: v for k, v in spec.items() if k != "fn"},
                       job.num_warps or spec["num_warps"], job.num_stages or spec["num_stages"])
                      for name, spec in specs]
    except Exception as exc:  # noqa: BLE001 - the worker reports it as a row (never cached)
        return f"aot_compile_args: {type(exc).__name__}: {exc}"
    return repr(inputs)


def _module_variant(job: Job, tmp: Path):
    """The generated module of ``job`` compiled from its source as of ``job.commit`` and/or with
    ``job.deletes``' branches deleted (``delete_constexpr_branches``), imported from a file under
    ``tmp`` (Triton reads a kernel's source from its file)."""
    import importlib.util

    source = module_source(job.module, job.commit)
    if job.deletes:
        source = delete_constexpr_branches(source, job.deletes)
    name = f"{job.module}_{job.commit[:7] or 'deleted'}"
    path = tmp / (name.rsplit(".", 1)[1] + ".py")
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_DOT_LINE = re.compile(r"=\s*(tt\.dot|ttng\.warp_group_dot)\s.*->\s*tensor<[^>]*?,\s*(#[\w.]+)")
_MMA_ALIAS = re.compile(r"^(#[\w.]+)\s*=\s*#ttg\.nvidia_mma<\{versionMajor\s*=\s*(\d+)", re.M)


def dot_lowering(ttir: str, ttgir: str) -> dict:
    """How many dots the kernel has, how many landed on a tensor-core (nvidia_mma) layout, and
    how many of those are wgmma (version 3): a kernel may mix both (``mma_version`` is the max)."""
    mma_versions = dict(_MMA_ALIAS.findall(ttgir))
    dots = _DOT_LINE.findall(ttgir)
    on_mma = [mma_versions[enc] for _, enc in dots if enc in mma_versions]
    return dict(dots_ttir=len(re.findall(r"=\s*tt\.dot\s", ttir)), dots=len(dots),
                dots_on_tensor_cores=len(on_mma), dots_wgmma=on_mma.count("3"),
                mma_version=max((int(v) for v in on_mma), default=0))


def analyse(compiled, arch: int, loop: dict | None = None) -> dict:
    """Everything the report shows about one compiled kernel (``loop``: its main loop's step,
    ``steady_loop``)."""
    md = compiled.metadata
    asm = compiled.asm
    row = dict(num_warps=md.num_warps, num_stages=md.num_stages, dynamic_shared=md.shared)
    dumps = cubin_dumps(asm["cubin"])
    row.update(resource_usage(asm["cubin"], dumps))
    row.update(tma_instructions(dumps[1]))
    row.update(steady_loop(dumps[1], md.num_warps, loop))
    row["sass_digest"] = sass_digest(dumps[1])
    row.update(dot_lowering(asm["ttir"], asm["ttgir"]))
    row["ptx_mma_sync"] = len(re.findall(r"\bmma\.sync\.", asm["ptx"]))
    row["ptx_wgmma"] = len(re.findall(r"\bwgmma\.mma_async\.", asm["ptx"]))
    row["ptx_tma"] = len(re.findall(r"\bcp\.async\.bulk\.tensor\.", asm["ptx"]))
    row["shared_bytes"] = row["dynamic_shared"] + row["static_shared"]
    row["shared_limit"] = SHARED_LIMIT[arch]
    return row


def verdict(row: dict) -> dict:
    """The three properties the default configs must have. A kernel without any ``tt.dot`` in
    its TTIR (the backward's preprocess: a row sum) has no matmul to put on tensor cores, so
    that criterion holds vacuously; dots in TTIR that the TTGIR parse does not find fail it."""
    no_dot = row["dots_ttir"] == 0 and row["dots"] == 0
    got = dict(
        no_spill=row["spill_store_bytes"] == 0 and row["spill_load_bytes"] == 0,
        fits_shared=row["shared_bytes"] <= row["shared_limit"],
        tensor_cores=no_dot or (row["dots"] > 0 and row["dots_on_tensor_cores"] == row["dots"]
                                and row["sass_hmma"] + row["sass_hgmma"] + row.get("sass_qgmma", 0) > 0),
    )
    if row.get("tma"):  # a TMA variant must really load by TMA (not lowered back to pointers)
        got["tma_loads"] = row["sass_tma_load"] > 0 and row["ptx_tma"] > 0
    return got


def compile_job(job: Job) -> list[dict]:
    """Compile one job (all kernels of the module); errors become rows, not crashes."""
    try:
        with job_module(job) as module:
            return _compile_module(job, module)
    except Exception as exc:  # noqa: BLE001 - reported per row
        return [dict(asdict(job), kernel="?", error=f"aot_compile_args: {type(exc).__name__}: {exc}")]


def _compile_module(job: Job, module) -> list[dict]:
    """``compile_job`` on the module ``job_module`` gave."""
    import triton
    from triton.backends.compiler import GPUTarget

    base = asdict(job)
    specs = kernel_specs(module, job.dtype, job.head_dim, {**MASKS[job.mask], **({"tma": True} if job.tma else {})},
                         job.arch)
    rows = []
    for name, spec in specs:
        row = dict(base, kernel=name)
        try:
            signature, constexprs, attrs = launch_specialisation(spec)
            src = triton.compiler.ASTSource(spec["fn"], signature, constexprs, attrs)
            options = dict(num_warps=job.num_warps or spec["num_warps"],
                           num_stages=job.num_stages or spec["num_stages"])
            compiled = triton.compile(src, target=GPUTarget("cuda", job.arch, 32), options=options)
            row.update(analyse(compiled, job.arch, spec.get("loop")))
            row.update(verdict(row))
        except Exception as exc:  # noqa: BLE001 - a kernel that does not compile is a finding
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        rows.append(row)
    return rows


#: the worker's line before each job's rows (JSON, one line): what the driver reads from its stdout
ROWS_MARK = "@@ROWS@@ "


def _worker() -> None:
    """``--worker``: read jobs (JSON) on stdin; after each compile, one line on stdout: ``ROWS_MARK``,
    the job's index and its rows (JSON), flushed, so the driver caches every job as it finishes."""
    jobs = [Job(**j) for j in json.load(sys.stdin)]
    for i, job in enumerate(jobs):
        rows = compile_job(job)
        sys.stdout.write("\n" + ROWS_MARK + json.dumps([i, rows]) + "\n")
        sys.stdout.flush()


# ----------------------------------------------------------------------------------------
# Driver: cache, fan out to worker processes
# ----------------------------------------------------------------------------------------
def triton_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("triton")


#: the page's job lists beyond the block configs' own rows (``page_jobs``): ``--family`` compiles them alone
EXTRA_JOBS = {"wide": wide_jobs, "fp32": fp32_jobs, "mla": mla_jobs, "fp8": fp8_jobs, "score_mod": score_mod_jobs}


def run_jobs(jobs: list[Job], workers: int | None = None, use_cache: bool = True) -> list[dict]:
    """Rows for every job, compiling the uncached ones in ``workers`` subprocesses."""
    version = triton_version()
    blocks = {j.module.rsplit("_", 2)[-2] + "_" + j.module.rsplit("_", 1)[-1] for j in jobs
              if j.module.startswith(SCORE_MOD_PACKAGE + ".")}
    if blocks:  # the example score_mods' kernels: emitted (or found current) before their sources are read
        score_mod_package(blocks)
    results: dict[Job, list[dict]] = {}
    todo = []
    # every cache path computed here, on this thread: cache_key parses the module's source, and CPython 3.11's
    # ast.parse is not thread-safe (two collect threads parsing at once raised "AST constructor recursion depth
    # mismatch" in a suite run, losing a worker's rows)
    paths = {job: CACHE / f"{job.cache_key(version)}.json" for job in jobs}
    for job in jobs:
        path = paths[job]
        if use_cache and path.exists():
            results[job] = json.loads(path.read_text())
        else:
            todo.append(job)
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    # TRITON_INTERPRET would turn @triton.jit into interpreted functions that cannot compile
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 1 = its default
    chunks = [todo[i::workers] for i in range(workers)] if todo else []
    procs = [
        (chunk, subprocess.Popen([sys.executable, "-m", "benchmarks.static", "--worker"], cwd=ROOT,
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True))
        for chunk in chunks
    ]
    errors: dict[int, str] = {}

    def collect(n: int, chunk: list[Job], proc: subprocess.Popen) -> None:
        """One worker's rows as they come: each job cached at once (a long run killed midway keeps
        what it compiled); its stderr drained on a thread of its own so neither pipe fills."""
        stderr = []
        drain = threading.Thread(target=lambda: stderr.append(proc.stderr.read()))
        drain.start()
        proc.stdin.write(json.dumps([asdict(j) for j in chunk]))
        proc.stdin.close()
        for line in proc.stdout:
            if not line.startswith(ROWS_MARK):
                continue
            i, rows = json.loads(line[len(ROWS_MARK):])
            results[chunk[i]] = rows
            if not any("error" in r for r in rows):
                write_text(paths[chunk[i]], json.dumps(rows))
        drain.join()
        if proc.wait() != 0 or not all(job in results for job in chunk):
            errors[n] = f"static-analysis worker failed (exit {proc.returncode}):\n{''.join(stderr)[-4000:]}"

    threads = [threading.Thread(target=collect, args=(n, chunk, proc)) for n, (chunk, proc) in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("\n".join(errors.values()))
    return [row for job in jobs for row in results[job]]


# ----------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------
HEADER = ["module", "kernel", "arch", "dtype", "D", "mask", "warps", "stages", "regs", "SASS instr",
          "spill st/ld B", "shared KB (limit)", "dots on TC", "TC instr (SASS)", "TMA ld/st (SASS)",
          "loop instr/elem", "MMA issued/needed", "ok"]


def _mix(counts: dict, empty: str) -> str:
    """``{"wgmma": 4, "mma v2": 8}`` -> ``"4 wgmma + 8 mma v2"``: a kernel may mix both kinds."""
    return " + ".join(f"{n} {name}" for name, n in counts.items() if n) or empty


def _mask_label(row: dict) -> str:
    """The mask column: the mask or score modification, the mask_mod of a mask_mod module, ``+tma``
    for a TMA variant, and how a comparison row's source differs."""
    label = row["mask"]
    if "_maskmod_" in row["module"]:
        label = "mask_mod " + row["module"].split("_maskmod_")[1].rsplit("_br", 1)[0]
    label += " +tma" if row.get("tma") else ""
    if row.get("deletes"):
        label += ", HAS_* ifs deleted"
    if row.get("commit"):
        label += f" @{row['commit'][:7]}"
    return label


def _cells(row: dict) -> list:
    ident = [row["module"].removeprefix("generated."), row["kernel"], ARCHS[row["arch"]],
             row["dtype"], row["head_dim"], _mask_label(row)]
    if "error" in row:
        return ident + ["-"] * 11 + ["ERROR: " + row["error"]]
    tc = _mix({"HGMMA": row["sass_hgmma"], "QGMMA": row.get("sass_qgmma", 0), "HMMA": row["sass_hmma"]}, "0 HMMA")
    ok = "yes" if all(verdict(row).values()) else "NO: " + ", ".join(
        k for k, v in verdict(row).items() if not v)
    mma = _mix({"wgmma": row["dots_wgmma"], "mma v2": row["dots_on_tensor_cores"] - row["dots_wgmma"]}, "none")
    return ident + [row["num_warps"], row["num_stages"], row["regs"], row.get("sass_instructions", "-"),
                    f"{row['spill_store_bytes']}/{row['spill_load_bytes']}",
                    f"{row['shared_bytes'] / 1024:.1f} ({row['shared_limit'] // 1024})",
                    f"{row['dots_on_tensor_cores']}/{row['dots']}: {mma}", tc,
                    f"{row['sass_tma_load']}/{row['sass_tma_store']}", *_loop_cells(row), ok]


def _loop_cells(row: dict) -> list[str]:
    """The steady-state loop's warp-instructions per element and MMA issued/needed (``steady_loop``);
    ``n/a`` for a kernel without a loop that issues tensor-core instructions (the backward's
    preprocess, the merge kernels)."""
    if row.get("instr_per_element") is None:
        return ["n/a", "n/a"]
    return [f"{row['instr_per_element']:.3f} ({row['loop_instructions']})", f"{row['mma_issued_per_needed']:.2f}"]


#: the page's sections: (title, which rows, what they are)
FAMILIES = (
    ("Every block config: forward and backward, unmasked and causal",
     lambda r: r["mask"] in ("none", "causal") and "_maskmod_" not in r["module"]
     and (".attention_fwd" in r["module"] or ".attention_bwd" in r["module"]),
     "The forward (pointer kernel, and on sm_90 its TMA variant `+tma`, the default there) and the "
     "backward's three kernels of every generated block config."),
    ("Packed sequences (varlen)", lambda r: "varlen" in r["mask"],
     "The same kernels with `IS_VARLEN`, as `flash_attention_varlen` launches them on a packed batch "
     "([packed sequences](../packed.md)): the pointer path (varlen has no TMA path), causal."),
    ("KV-cache decode and the split-KV combine", lambda r: ".attention_decode" in r["module"] or ".merge_state" in r["module"],
     "`_decode_fwd` (contiguous and paged cache, `flash_attention_with_kvcache`), compiled for 16 query rows per "
     "program (a GQA group of 4 x 4 tokens: `AOT_ROWS`, with GROUP = 4 and N_Q = 4 left to the binder) and its "
     "64-key step; `_merge_states` (the combine of the S split partials) and `_merge_state` (two states), which "
     "have no tensor-core loop: their loop columns read n/a."),
    ("Score modifications", lambda r: r["mask"] in SCORE_MODS,
     "Each modification alone and all three (issue 15), unmasked, at the default block: the `none` rows of the "
     "first table are the same kernels with every modification compiled out."),
    ("User score_mods", lambda r: r["module"].startswith(SCORE_MOD_PACKAGE + "."),
     "The example score_mods of `spec.score_mods` (a relative-bias table, a per-head temperature, a tanh cap, a "
     "per-batch gain: [write your own score modification](../score_mod.md)), emitted with `--score-mod` into a "
     "package of their own, alone, unmasked and causal, at the defaults' blocks: the forward of each memory path "
     "and the backward's three kernels (the dQ kernel, which reduces the captured tensors' gradients, on its "
     "`SCORE_GRAD_DQ` tile)."),
    ("mask_mod kernels", lambda r: "_maskmod_" in r["module"],
     "The forward (and its `+tma` variant on sm_90) and backward generated for each mask_mod "
     "(`generated/attention_{fwd,bwd}_maskmod_<name>_*.py`) at the default block, with no other mask."),
)


def off_cost_rows(rows: list[dict]) -> list[dict]:
    """For every kernel compiled with the score modifications off (mask ``none``) beside the same
    kernel with their ``if`` blocks deleted (``deletes``): both SASS instruction counts, whether the
    SASS is identical (``sass_digest``), the count of the kernel before the modifications existed
    (``PRE_SCORE_MOD_COMMIT``; ``None`` where not compiled) and the count with each modification on."""
    def key(r):
        return (r["module"], r["kernel"], r["arch"], r["dtype"], r["head_dim"], bool(r.get("tma")))

    ok = [r for r in rows if "error" not in r]
    deleted = {key(r): r for r in ok if r.get("deletes")}
    before = {key(r): r for r in ok if r.get("commit")}
    on = {(key(r), r["mask"]): r["sass_instructions"] for r in ok if r["mask"] in SCORE_MODS}
    out = []
    for r in ok:
        if r["mask"] != "none" or r.get("deletes") or r.get("commit") or key(r) not in deleted:
            continue
        d, b = deleted[key(r)], before.get(key(r))
        out.append(dict(module=r["module"], kernel=r["kernel"], arch=r["arch"], dtype=r["dtype"],
                        head_dim=r["head_dim"], tma=bool(r.get("tma")), off=r["sass_instructions"],
                        deleted=d["sass_instructions"], same_sass=r["sass_digest"] == d["sass_digest"],
                        before=b["sass_instructions"] if b else None,
                        on={m: on.get((key(r), m)) for m in SCORE_MODS}))
    return out


OFF_HEADER = ["kernel", "arch", "dtype", "D", "path", "off", "HAS_* ifs deleted", "same SASS",
              "before (13600a6)", *SCORE_MODS]


def _off_cells(c: dict) -> list:
    before = "-" if c["before"] is None else f"{c['before']}" + (
        " (=)" if c["before"] == c["off"] else f" (off: {c['off'] - c['before']:+d})")
    return [c["kernel"], ARCHS[c["arch"]], c["dtype"], c["head_dim"], "TMA" if c["tma"] else "pointer", c["off"],
            c["deleted"], "yes" if c["same_sass"] else "**NO**", before,
            *("-" if c["on"][m] is None else f"{c['on'][m]} (+{c['on'][m] - c['off']})" for m in SCORE_MODS)]


#: the rows above head dim 128, in a section of their own (the families above are at 64 and 128)
WIDE_FAMILY = ("Above head dim 128: the defaults",
               lambda r: r["head_dim"] > 128 and r["dtype"] != "fp32",
               "The kernels the defaults run at head dims 129-256 (BLOCK_D 256; `wide_jobs`), which take "
               "their own launch settings and, on the pointer path, their own block (64×64; "
               "`generator.variants`), fp16: the 128×64 forward's 3 stages and the 128-row dQ tile do not "
               "fit shared memory there.")


#: the float32 rows, in a section of their own
FP32_FAMILY = ("float32 inputs on a GPU",
               lambda r: r["dtype"] == "fp32",
               "The kernels the defaults run on float32 inputs (`fp32_jobs`: `api.FP32_BLOCK`, 16×32; decode at "
               "its runtime block), head dims 64, 128 and 256. Their dots are IEEE fp32 on the CUDA cores "
               "(`launch.dot_constants`), so the tensor-core columns do not apply: the `ok` that matters here is "
               "`fits_shared` (a launch that does not fit fails). fp32 is the exact path, not the fast one.")


#: the FP8 rows (issue 30), in a section of their own
FP8_FAMILY = ("FP8 forward (e4m3 / e5m2)",
              lambda r: r["dtype"] in FP8_DTYPES,
              "The FP8 forward (`fp8_jobs`: `flash_attention(q, k, v, q_descale=..., ...)` with float8 inputs, "
              "[FP8](../fp8.md)) at the pointer path's default block on sm_90: both products are fp8 wgmma "
              "(`wgmma.mma_async...e4m3.e4m3` / `e5m2`, `QGMMA` in SASS), the descales folded out of the loop "
              "(claim `fp8_descale`), out stored in bf16.")


def _sections(rows: list[dict]) -> str:
    """One table per family: FAMILIES over the fp16/bf16 rows at head dims 64 and 128, then
    WIDE_FAMILY (fp16/bf16 above 128), FP32_FAMILY (every float32 row) and FP8_FAMILY (every FP8 row)."""
    shown = [r for r in rows if not r.get("deletes") and not r.get("commit")]
    usual = [r for r in shown if r["head_dim"] <= 128 and r["dtype"] not in ("fp32", *FP8_DTYPES)]
    parts = []
    for (title, member, text), pool in [*((family, usual) for family in FAMILIES),
                                        (WIDE_FAMILY, shown), (FP32_FAMILY, shown), (FP8_FAMILY, shown)]:
        chosen = [r for r in pool if member(r)]
        if chosen:
            parts.append(f"### {title}\n\n{text}\n\n{markdown_table(HEADER, [_cells(r) for r in chosen])}")
    return "\n\n".join(parts)


def _off_section(rows: list[dict]) -> str:
    cost = off_cost_rows(rows)
    if not cost:
        return ""
    same = sum(c["same_sass"] for c in cost)
    compared = [c for c in cost if c["before"] is not None]
    equal = sum(c["before"] == c["off"] for c in compared)
    return f"""## A score modification off costs nothing

Each score modification (softcap, ALiBi, sinks) is a `tl.constexpr` (`HAS_SOFTCAP`, `HAS_ALIBI`,
`HAS_SINKS`) guarding its lines in the templates (`if HAS_SOFTCAP:` ...). What is compared, per
kernel of the default block (SASS instructions of the whole kernel, `cuobjdump -sass`):

- **off**: the generated kernel with every modification off (the `none` row above);
- **HAS_* ifs deleted**: the same module compiled from its source with every `if HAS_SOFTCAP:`,
  `if HAS_ALIBI:`, `if HAS_SINKS:` block deleted (`delete_constexpr_branches`): the kernel as if
  the modifications' lines had never been written (their unused parameters stay). **same SASS**:
  the two instruction streams are identical, instruction for instruction (`sass_digest`), so no
  line of a modification survives when it is off: nothing leaks out of its constexpr guard;
- **before (13600a6)**: the kernel as generated before the modifications existed (commit
  `{PRE_SCORE_MOD_COMMIT[:7]}`, `PRE_SCORE_MOD_COMMIT`, compiled from `git show`; `(=)` when its
  count is the same, else how many more the kernel with the modifications off has; its parameter
  list is shorter, so its SASS differs in constant-bank offsets even where the counts agree) — a
  figure for this page, not a test: later changes to the templates move it;
- **softcap ... softcap+alibi+sinks**: the count with the modification on, and what it adds.

{same} of {len(cost)} kernels compile to the same SASS with the modifications off as with their lines
deleted; {equal} of {len(compared)} have the instruction count of the kernel before the
modifications existed. `tests/test_static.py` asserts the first (sm_90, fp16, head dim 128).

{markdown_table(OFF_HEADER, [_off_cells(c) for c in cost])}
"""


#: the one reviewed exception to "no kernel spills": the 128x128 forward on the pointer path at head
#: dim 128 (sm_80, and sm_90's fallback compiled with sm_80's settings), which spills at every
#: setting tried (generator.variants.FWD_SM80). No default launch takes it (``api.AUTO_BLOCKS`` gives
#: the pointer path 128x64); it exists for the sm_90 TMA path, where it is the head-dim-128
#: default. Held to the bytes it spills: (module name, kernel, head dim, TMA) -> at most this many
#: bytes of spill stores (unmasked and causal, fp16 and bf16).
POINTER_SPILLS = {("attention_fwd_br128_bc128", "_attn_fwd", 128, False): 128}


def pointer_spill_bound(row: dict) -> int | None:
    """The ``POINTER_SPILLS`` bound of ``row``'s kernel (None: it must not spill)."""
    return POINTER_SPILLS.get((row["module"].rsplit(".", 1)[-1], row["kernel"], row["head_dim"], bool(row.get("tma"))))


#: spills a default launch still has, measured, as (store, load) bytes no run may exceed, by (module,
#: kernel, arch, dtype, head dim, mask, TMA): the sm_90 fp16 head-dim-128 128x128 TMA forward with all
#: three score modifications at once sits at 255 registers since softcap's rational tanh (issue 23,
#: row 8: tl.where keeps both branches live); 8 warps at 2 or 3 stages spill the same (``--module
#: attention_fwd_br128_bc128 --arch 90 --dtype fp16 --head-dim 128 --mask softcap+alibi+sinks --tma on
#: --num-warps 8 --num-stages 2 3``). An open cost, listed on docs/verification.md; each modification
#: alone is spill-free.
MOD_SPILLS = {("attention_fwd_br128_bc128", "_attn_fwd", 90, "fp16", 128, "softcap+alibi+sinks", True): (4, 12)}


def mod_spill_bound(row: dict) -> tuple[int, int] | None:
    """The ``MOD_SPILLS`` (store, load) bytes of ``row``'s kernel (None: it must not spill)."""
    return MOD_SPILLS.get((row["module"].rsplit(".", 1)[-1], row["kernel"], row["arch"], row["dtype"], row["head_dim"],
                           row["mask"], bool(row.get("tma"))))


def reviewed_spill(row: dict) -> bool:
    """Whether ``row`` is a ``POINTER_SPILLS`` or ``MOD_SPILLS`` kernel spilling within its bound."""
    bound, mod = pointer_spill_bound(row), mod_spill_bound(row)
    within = (bound is not None and row["spill_store_bytes"] <= bound) or (
        mod is not None and row["spill_store_bytes"] <= mod[0] and row["spill_load_bytes"] <= mod[1])
    return within and verdict(row)["fits_shared"] and verdict(row)["tensor_cores"]


#: Triton tutorial 06 (fused attention), compiled by issue 18's side-by-side AOT study (triton
#: 3.9.0, ptxas 12.9, fp16; bf16 identical): warp-instructions per tile element of its steady-state
#: loop at its sm_90 defaults, by (kernel, head dim). The targets of flashproof's sm_90 defaults.
TUTORIAL_SM90 = {("_attn_fwd", 64): 0.256, ("_attn_fwd", 128): 0.305,
                 ("_attn_bwd_dkdv", 64): 0.329, ("_attn_bwd_dkdv", 128): 0.726,
                 ("_attn_bwd_dq", 64): 0.270, ("_attn_bwd_dq", 128): 0.517}


def default_rows_sm90(rows: list[dict]) -> list[dict]:
    """The unmasked sm_90 rows of the kernels ``flash_attention``'s defaults run there: the TMA
    forward of ``default_block(90, D, tma=True)`` and the dK/dV and dQ kernels of
    ``backward_block(90, D)``, each dtype and head dim, in the order of ``TUTORIAL_SM90``."""
    def runs(r):
        if r["arch"] != 90 or r["mask"] != "none" or r.get("deletes") or r.get("commit") or "error" in r \
                or (r["kernel"], r["head_dim"]) not in TUTORIAL_SM90:
            return False
        if r["kernel"] == "_attn_fwd":
            return bool(r.get("tma")) and ".attention_fwd_br" in r["module"] \
                and r["module"].endswith(default_block(90, r["head_dim"], True))
        return r["kernel"] in ("_attn_bwd_dkdv", "_attn_bwd_dq") and ".attention_bwd_br" in r["module"] \
            and r["module"].endswith(backward_block(90, r["head_dim"]))
    order = list(TUTORIAL_SM90)
    return sorted((r for r in rows if runs(r)), key=lambda r: (order.index((r["kernel"], r["head_dim"])), r["dtype"]))


def _targets_section(rows: list[dict]) -> str:
    chosen = default_rows_sm90(rows)
    if not chosen:
        return ""
    cells = []
    for r in chosen:
        target = TUTORIAL_SM90[(r["kernel"], r["head_dim"])]
        met = (r["instr_per_element"] <= target + 5e-4 and r["mma_issued_per_needed"] <= 1.05
               and verdict(r)["no_spill"])
        cells.append([r["kernel"], r["dtype"], r["head_dim"], "_".join(r["module"].rsplit("_", 2)[-2:]), r["num_warps"], r["num_stages"], r["regs"],
                      f"{r['spill_store_bytes']}/{r['spill_load_bytes']}", f"{r['instr_per_element']:.3f}",
                      f"{target:.3f}", f"{r['mma_issued_per_needed']:.2f}", "yes" if met else "**no**"])
    header = ["kernel", "dtype", "D", "block", "warps", "stages", "regs", "spill st/ld B", "loop instr/elem",
              "tutorial 06", "MMA issued/needed", "met"]
    return f"""## The sm_90 defaults against Triton tutorial 06

The kernels `flash_attention` runs by default on sm_90 (`block="auto"`, `tma="auto"`: the TMA
forward of `AUTO_BLOCKS`' block for the head dim, the backward of the same block), unmasked,
beside the tutorial's figure (`TUTORIAL_SM90`). **met**: loop instr/elem at most the tutorial's,
MMA issued/needed at most 1.05, no spill — what `tests/test_static.py` asserts.
{sum(c[-1] == "yes" for c in cells)} of {len(cells)} met.

{markdown_table(header, cells)}
"""


def _verdict_line(rows: list[dict]) -> str:
    fp32 = [r for r in rows if r["dtype"] == "fp32"]
    fits = sum("error" not in r and verdict(r)["fits_shared"] for r in fp32)
    fp32_line = (f" Of the {len(fp32)} float32 rows, {fits} fit shared memory (their ok column reports the "
                 "CUDA-core dots and the spills of IEEE fp32 tiles: expected there).") if fp32 else ""
    return _tensor_core_verdict([r for r in rows if r["dtype"] != "fp32"]) + fp32_line


def _tensor_core_verdict(rows: list[dict]) -> str:
    bad = [r for r in rows if "error" in r or not all(verdict(r).values())]
    if not bad:
        return "All rows are ok."
    unreviewed = [r for r in bad if not reviewed_spill(r)]
    parts = [f"**{len(unreviewed)} row(s) are not ok** (see the last column)."] if unreviewed else []
    if len(bad) > len(unreviewed):
        parts.append(f"{len(bad) - len(unreviewed)} row(s) are the reviewed exception `POINTER_SPILLS` "
                     "(`benchmarks/static.py`): the 128×128 forward on the pointer path at head dim 128, "
                     "which no default launch takes.")
    if not unreviewed:
        parts.append("Every other row is ok.")
    return " ".join(parts)


def kernels_compiled() -> str:
    """Which kernels the page describes: the git tree of ``generated/`` at the commit compiled (flagged
    when the kernels or the code that launches them has uncommitted edits), so a page left behind by a
    kernel change shows it."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", "generated", "generator", "spec")
    return (f"Kernels: `generated/` tree `{git('rev-parse', 'HEAD:generated')[:12]}` at commit "
            f"`{git('rev-parse', 'HEAD')[:12]}`{' (with uncommitted changes)' if dirty else ''}.")


def markdown_page(rows: list[dict], command: str) -> str:
    import platform

    bad = [r for r in rows if "error" in r or not all(verdict(r).values())]
    return f"""# Static cost of the generated kernels

<!-- generated by `{command}`; do not edit by hand -->

Every generated kernel compiled **ahead of time, without a GPU**: `triton.compile` with a
`GPUTarget("cuda", 80 | 90, 32)` runs Triton's whole pipeline (TTIR → TTGIR → PTX → ptxas →
cubin) on the CPU. Triton {triton_version()}, Python {platform.python_version()}. {kernels_compiled()}
No kernel was run: these are the compiler's numbers, not measurements.

Each kernel is compiled as Triton's JIT binder specialises a real launch on contiguous tensors
at the benchmark shapes: pointers 16-byte aligned, the innermost stride of every tensor the
constant 1, the other strides multiples of 16, GROUP = 1 (MHA) a constant, N_Q, N_K, H, shift
and window divisible by 16 (`launch_specialisation` in `benchmarks/static.py`). Each
architecture's rows use that architecture's launch settings (`SETTINGS` of each module). Without that
specialisation Triton cannot vectorise the K/V loads, does not pipeline them, and every
number below would describe a kernel that never runs.

How each column is obtained (see `benchmarks/static.py`):

- **regs**: registers per thread, from `cuobjdump --dump-resource-usage` on the cubin.
- **spill st/ld B**: bytes of local-memory stores/loads (`STL`/`LDL`) in the cubin's SASS,
  the quantity ptxas reports as "bytes spill stores/loads". Any spill is a defect.
- **shared KB (limit)**: Triton's launch-time dynamic shared memory plus the cubin's static
  shared memory, beside the per-block opt-in limit (sm_80: 163 KB, sm_90: 227 KB).
- **dots on TC**: how many `tt.dot`s of the kernel lowered to a tensor-core layout, and how
  many of each kind (`nvidia_mma` v2 = `mma.sync`, v3 = `wgmma`; a kernel may mix them);
  **TC instr** counts the `HGMMA`/`HMMA` instructions in SASS.
- **loop instr/elem**: warp-instructions per tile element of the steady-state (full-tile)
  loop, located in the SASS by its backward branch (the shortest innermost loop with tensor-core
  instructions; its instruction count in parentheses): `instructions x num_warps / (rows x
  keys)` of one loop step (forward: B_r x B_c; dK/dV: its key tile x row step; dQ: its row tile x
  key step; decode: its query rows x 64 keys). Lower is better. **MMA issued/needed**: the
  multiply-adds its `HGMMA` (per warpgroup) and `HMMA` (per warp) instructions issue over all
  warps, per multiply-add the step's products need (2 in the forward and in decode, 4 in dK/dV,
  3 in dQ, each rows x keys x head dim, the true D or D_v, not its padded width): 1.00 when no warp
  recomputes another's product and no tile pads a head dim (192 padded to 256 issues 4/3 of its
  products; the forward and the backward split it as 128 + 64: [MLA](../mla.md)). `n/a`
  for a kernel with no tensor-core loop (the backward's preprocess, the merge kernels).
- **TMA ld/st**: the `UTMALDG` / `UTMASTG` instructions (TMA bulk tensor loads / stores) in
  SASS. Rows whose mask reads `+tma` are the forward's TMA variant (the default on sm_90)
  ([Hopper: TMA](hopper.md)), compiled for sm_90 only; the pointer kernels have none.
  Rows whose mask reads `varlen causal` are the same kernels with `IS_VARLEN`, as
  `flash_attention_varlen` launches them on a packed batch ([packed sequences](../packed.md)).
- **ok**: no spill, fits shared memory, every dot on tensor cores (holds trivially for a
  kernel without a dot, the backward's preprocess), and for a `+tma` row TMA loads in SASS.
  The test `tests/test_static.py` asserts this for every kernel of every generated config,
  unmasked and causal, with one reviewed exception (`POINTER_SPILLS`: the 128×128 forward on the
  pointer path at head dim 128, which spills at every setting tried and which no default
  launch takes; 128×128 is generated for the sm_90 TMA path), and that on sm_90 every
  dot is wgmma where the kernel's products have 64 rows or more; `tests/test_tma.py` asserts
  it for the TMA forward of the default 64×64 config.

The targets (issue 18): Triton tutorial 06 (fused attention) at its sm_90 defaults, measured
the same way by an independent side-by-side AOT compile (triton 3.9.0, ptxas 12.9, fp16; bf16
identical), in warp-instructions per tile element: forward 0.256 (hd 64, 128×64 w4s2, TMA) /
0.305 (hd 128); dK/dV 0.329 (hd 64, 128 keys × 32 rows, w4s5) / 0.726 (hd 128); dQ 0.270 / 0.517.
`tests/test_static.py` holds the defaults (`block="auto"`, `tma="auto"`) to them on sm_90, and
every default kernel to no spill and MMA issued/needed <= 1.05.

Regenerate with `{command}`.

{_targets_section(rows)}

## What is compiled

Both architectures (sm_80, sm_90), fp16 and bf16, head dims 64 and 128. Every generated block
config ({", ".join(generated_blocks())}) for the forward and the backward, unmasked and causal. The newer
families only at the blocks the defaults run (`block="auto"`: `generator.runtime.api.AUTO_BLOCKS`,
per memory path and head dim: 128×64 on the pointer path, on sm_90's TMA path 128×64 at head dim 64
and 128×128 above; the backward of the default forward's block), each kernel at the launch
settings its runtime uses there (`SETTINGS`; the softcap's and varlen's dK/dV kernel on one stage on
sm_90 above head dim 64): packed sequences (varlen, causal), each score modification and all
three (unmasked), and the four mask_mod kernels; KV-cache decode (contiguous and paged, unmasked
and causal) and the split-KV combine at the block the runtime launches them from
({runtime_blocks()["decode"]}, `DECODE_BLOCK`). Above head dim 128, at D = {WIDE_HEAD_DIM}, every
kernel the defaults run (`wide_jobs`), and the defaults on float32 inputs (`fp32_jobs`). {len(rows)} kernels in all (`page_jobs` in `benchmarks/static.py`).

## The kernels

{_sections(rows)}

{_verdict_line(rows)}
A row that is not ok is a finding for that config's `--num-warps` / `--num-stages` (or the
defaults in `generator/variants.py`, whose docstrings say why each was chosen), explored with
`python -m benchmarks.static --module <name> --num-warps 4 8 --num-stages 2 3`.

{_off_section(rows)}"""


def main(argv=None) -> int:
    if argv is None and sys.argv[1:] == ["--worker"]:
        _worker()
        return 0
    ap = argparse.ArgumentParser(prog="python -m benchmarks.static", description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", help="substring of the generated module names to keep "
                    "(repeatable; default: all modules with aot_compile_args)")
    ap.add_argument("--arch", type=int, nargs="+", default=list(ARCHS), choices=list(ARCHS))
    ap.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--head-dim", type=int, nargs="+", default=list(HEAD_DIMS))
    ap.add_argument("--mask", nargs="+", default=None, choices=list(MASKS),
                    help="mask variants and score modifications to compile (default with --module, --num-warps "
                         "or --num-stages: none causal; with none of them: the page's families, page_jobs); the "
                         f"score modifications' rows: --module br128_bc64 --mask none {' '.join(SCORE_MODS)}")
    ap.add_argument("--num-warps", type=int, nargs="+", default=[None],
                    help="override the generated num_warps (explore settings that do not spill)")
    ap.add_argument("--num-stages", type=int, nargs="+", default=[None],
                    help="override the generated num_stages")
    ap.add_argument("--tma", choices=("off", "on", "both"), default="both",
                    help="the TMA variants (sm_90, modules that have one): beside the pointer "
                         "kernels (both, default), only them (on), or none (off)")
    ap.add_argument("--workers", type=int, default=None, help="compile processes (default: cores)")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--json", type=Path, help="write all rows as JSON here")
    ap.add_argument("--markdown", type=Path, nargs="?", const=DOCS_PERF / "static.md",
                    help="write the docs page (default path: docs/performance/static.md)")
    ap.add_argument("--score-mods", action="store_true",
                    help="only the example score_mods' rows (score_mod_jobs; --module filters them too), e.g. to "
                         "measure a change to their kernels without compiling the page")
    ap.add_argument("--family", nargs="+", choices=list(EXTRA_JOBS),
                    help="only these families of the page's jobs (the page's own selection of each, at the "
                         "defaults; --arch filters them), e.g. to check new rows before the whole page")
    args = ap.parse_args(argv)

    if args.family:
        return _report(args, [j for f in args.family for j in EXTRA_JOBS[f](tuple(args.arch))
                              if args.tma == "both" or j.tma == (args.tma == "on")])
    if args.score_mods:
        jobs = [j for j in score_mod_jobs(tuple(args.arch), tuple(args.dtype), tuple(args.head_dim))
                if (args.tma == "both" or j.tma == (args.tma == "on"))
                and (not args.module or any(s in j.module for s in args.module))]
        return _report(args, jobs)
    if args.mask is None and not args.module and args.num_warps == [None] and args.num_stages == [None]:
        jobs = [j for j in page_jobs(tuple(args.arch), tuple(args.dtype), tuple(args.head_dim))
                if args.tma == "both" or j.tma == (args.tma == "on")]
        return _report(args, jobs)
    args.mask = args.mask or ["none", "causal"]
    # the mask_mod modules only when a --module names them ("maskmod", "maskmod_document", ...)
    wants_mask_mods = any("maskmod" in s for s in args.module or ())
    modules = [m for m in kernel_modules(mask_mods=wants_mask_mods) if not args.module or any(s in m for s in args.module)]
    if not modules:
        ap.error(f"no generated module matches {args.module}")
    jobs = []
    if args.tma in ("off", "both"):
        jobs += make_jobs(modules, args.arch, args.dtype, args.head_dim, args.mask, args.num_warps, args.num_stages)
    if args.tma in ("on", "both"):
        jobs += make_jobs([m for m in modules if supports_tma(m)], args.arch, args.dtype, args.head_dim,
                          [m for m in args.mask if not MASKS[m].get("varlen")],  # varlen has no TMA path
                          args.num_warps, args.num_stages, tma=(True,))
    if not jobs:
        ap.error(f"nothing to compile: no TMA variant for arch {args.arch} among {modules}")
    return _report(args, jobs)


def _report(args, jobs: list[Job]) -> int:
    """Compile ``jobs``, print their table, write the JSON and the page if asked."""
    rows = run_jobs(jobs, args.workers, use_cache=not args.no_cache)
    print(text_table(HEADER, [_cells(r) for r in rows]))
    if args.json:
        write_text(args.json, json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        write_text(args.markdown, markdown_page(rows, "python -m benchmarks.static --markdown"))
    failed = [r for r in rows if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
