"""Launch helpers shared by every generated module (hand-written, imported by generated code).

Generated files stay thin: the numeric policy of a launch (which dtype ``tl.dot`` sees, its
``input_precision``, the padded head dimension) and the ahead-of-time signature builder live
here once instead of being repeated in each emitted kernel file.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import torch
import triton
import triton.language as tl

from spec import launch as spec_launch
from spec.assumptions import limit

#: torch dtype -> (Triton dtype, its name in a Triton signature)
TL_DTYPES = {
    torch.float16: (tl.float16, "fp16"),
    torch.bfloat16: (tl.bfloat16, "bf16"),
    torch.float32: (tl.float32, "fp32"),
}
DTYPE_NAMES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
               "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
#: FP8 (issue 30): torch dtype -> its format in spec.error_bound.FP8; the forward's products run on it
FP8_FORMATS = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
FP8_DTYPE_NAMES = {name: dtype for dtype, name in FP8_FORMATS.items()}
TL_DTYPES.update({torch.float8_e4m3fn: (tl.float8e4nv, "fp8e4nv"), torch.float8_e5m2: (tl.float8e5, "fp8e5")})

MAX_HEAD_DIM = limit("head_dim_max")


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def compiled_for_gpu(module) -> bool:
    """True when ``module``'s kernels were defined with the interpreter off: ``triton.jit`` picks
    the interpreter when a kernel is defined (the generated module's import), so a
    ``TRITON_INTERPRET=1`` set after that import does not reach them."""
    from triton.runtime.interpreter import InterpretedFunction

    kernels = [f for f in vars(module).values() if isinstance(f, (triton.runtime.JITFunction, InterpretedFunction))]
    return any(not isinstance(f, InterpretedFunction) for f in kernels)


def dot_constants(dtype: torch.dtype, interpret: bool | None = None) -> dict:
    """``DOT_DTYPE`` and ``INPUT_PRECISION`` for operands of ``dtype``.

    * fp32 inputs use ``"ieee"``: GPUs otherwise round fp32 operands to tf32 (10-bit
      mantissa), far outside the fp32 tolerance of the tests.
    * bf16 under the interpreter is upcast to fp32 before ``tl.dot``: the interpreter's
      numpy matmul reads bf16 as raw uint16 and returns garbage.
    """
    interpret = interpreting() if interpret is None else interpret
    tl_dtype = TL_DTYPES[dtype][0]
    if interpret and dtype == torch.bfloat16:
        tl_dtype = tl.float32
    return {"DOT_DTYPE": tl_dtype, "INPUT_PRECISION": "ieee" if dtype == torch.float32 else "tf32"}


def block_d(head_dim: int, dot_dtype: torch.dtype | None = None) -> int:
    """The head dimension padded to a power of two >= 16, >= 32 for fp8 products (``dot_dtype`` FP8):
    ``spec.launch.block_d``, the one home of the tile widths (claims forward_addresses,
    backward_kernel_addresses and tma_addresses read it through ``spec.launch.tile_widths``)."""
    return spec_launch.block_d(head_dim, dot_dtype in FP8_FORMATS)


#: ``(HEAD_DIM, HEAD_DIM_TAIL)`` of a training launch's q/k head dim: ``spec.launch.head_dim_split``
head_dim_split = spec_launch.head_dim_split


def by_position(kernel, first: int, arguments: dict) -> tuple[tuple, dict]:
    """``arguments`` (parameters of ``kernel`` from its ``first``-th on, by name, and launch options such
    as ``num_warps``) as ``(values of the parameters first, first + 1, ... in the kernel's order, the
    rest by name)``: what a launch plan keeps, since a tuple unpacked per call costs a fraction of a
    dict of ~50 keywords."""
    values = []
    for name in kernel.arg_names[first:]:
        if name not in arguments:
            break
        values.append(arguments[name])
    named = set(kernel.arg_names[first:first + len(values)])
    early = [name for name in kernel.arg_names[:first] if name in arguments]
    if early:  # the call passes those by position: by name too would be "multiple values"
        raise ValueError(f"{kernel.arg_names[:first]} are the call's positional arguments, not a plan's: {early}")
    return tuple(values), {name: value for name, value in arguments.items() if name not in named}


def aot_args(fn, pointers: dict[str, str], floats: tuple[str, ...], constexprs: dict,
             num_warps: int, num_stages: int, descriptors: dict[str, str] | None = None,
             loop: tuple[int, int, int] | None = None) -> dict:
    """Arguments for ``triton.compile(ASTSource(fn, signature, constexprs), target=..., options=...)``.

    ``pointers`` maps pointer parameters to their element type (``"fp16"``, ``"i1"``...);
    ``descriptors`` maps tensor-descriptor parameters to their full type (``tma_signature``);
    ``floats`` are fp32 scalars; every other runtime parameter is an ``i32``.
    ``loop = (rows, keys, products)``: one step of the kernel's main loop covers a ``rows x keys``
    tile of scores with ``products`` matmuls of ``rows x keys x BLOCK_D`` multiply-adds each
    (what ``benchmarks.static`` divides the loop's SASS by); ``(rows, keys, products, over_v)``:
    ``over_v`` of those products run over v's head dim ``BLOCK_DV`` instead (P V, dO Vᵀ, Pᵀ dO).
    ``loop["macs"]`` counts the multiply-adds the products NEED: over the true head dims D
    (``HEAD_DIM`` plus a split head dim's ``HEAD_DIM_TAIL``: claim head_dim_split) and D_v, not their
    padded widths, so MMA issued/needed shows what padding costs (192 padded to 256 issues 4/3).
    """
    descriptors = descriptors or {}
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in descriptors:
            signature[name] = descriptors[name]
        elif name in pointers:
            signature[name] = "*" + pointers[name]
        elif name in floats:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    args = {"fn": fn, "signature": signature, "constexprs": dict(constexprs),
            "num_warps": num_warps, "num_stages": num_stages}
    if loop is not None:
        rows, keys, products, over_v = (*loop, 0) if len(loop) == 3 else loop
        # the true widths: q/k's D (a split head dim's main part and tail), v's D_v
        width = constexprs.get("HEAD_DIM", constexprs["BLOCK_D"]) + constexprs.get("HEAD_DIM_TAIL", 0)
        width_v = constexprs.get("HEAD_DIM_V", constexprs.get("BLOCK_DV", width))
        args["loop"] = {"rows": rows, "keys": keys, "macs": rows * keys * ((products - over_v) * width + over_v * width_v)}
    return args


#: the architectures the generated launch settings are chosen for (``benchmarks.static`` compiles
#: both): Ampere (sm_80, mma.sync, cp.async) and Hopper (sm_90, wgmma, TMA)
SETTINGS_ARCHS = (80, 90)


def settings_arch(device: torch.device) -> int:
    """Which architecture's launch settings a launch on ``device`` takes: 90 from Hopper on, 80
    below and for CPU tensors under the interpreter (which runs either; the tests pick one)."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0):
        return 90
    return 80


def memory_path_arch(arch: int, use_tma: bool) -> int:
    """Whose forward launch settings a launch takes: its architecture's on the TMA path, sm_80's
    on the pointer path, which is sm_80's memory path and sm_90's fallback (a layout TMA cannot
    read): its tiles live in registers longer (row offsets across the loop), so settings tuned
    for TMA may spill there."""
    return arch if use_tma else SETTINGS_ARCHS[0]


def pick_settings(table: dict, arch: int, head_dim) -> dict:
    """The entry of a generated ``{arch: {largest padded head dim: settings}}`` table for ``arch``
    (the largest listed one not above it) and ``head_dim`` (the first bucket that holds it). A table
    keyed by ``(q/k width, v width)`` pairs (the forward's: ``fwd_settings_key``) takes a pair: the
    first bucket, in sorted order, that holds both widths."""
    archs = sorted(table)
    chosen = archs[0]
    for a in archs:  # plain loops: torch.compile traces this inside flash_attention
        if a <= arch:
            chosen = a
    dims = sorted(table[chosen])
    for d in dims:
        if (d >= head_dim) if isinstance(d, int) else (d[0] >= head_dim[0] and d[1] >= head_dim[1]):
            return table[chosen][d]
    return table[chosen][dims[-1]]


def fwd_settings_key(head_dim: int, head_dim_v: int, *, narrow_v: bool = True) -> tuple[int, int]:
    """The forward's launch-settings bucket of q/k's head dim and v's (MLA: D_v != D): the widths the
    kernel holds a row at, q/k's as ``head_dim_split`` pads it (192 = 128 + 64: 192; 256: 256) and
    v's padded, ``block_d(D_v)``. A row's registers are its Q tile's (D wide) and its fp32
    accumulator's (D_v wide), so a narrower V can run a setting the square head dim spills at
    (generator.variants.FWD_SM80 says where). ``narrow_v=False`` (a kernel whose own registers leave
    no room for that: dropout's, FP8's) gives the square bucket of the wider width."""
    w = spec_launch.tile_widths(head_dim, head_dim_v)
    widths = w.BLOCK_D + (w.BLOCK_DT if w.HEAD_DIM_TAIL else 0), w.BLOCK_DV
    return widths if narrow_v else (max(widths), max(widths))


def mask_constexprs(causal: bool, window: bool, lengths: bool, dense: bool) -> dict:
    """The attention kernels' mask flags (constexprs: a kind not in use compiles out)."""
    return {"IS_CAUSAL": bool(causal), "HAS_WINDOW": bool(window), "HAS_LENGTHS": bool(lengths),
            "HAS_MASK": bool(dense)}


def mask_launch(module: str, masks: list[str], command: str, device: torch.device, *, causal, window,
                key_lengths, mask, block_map) -> tuple[dict, tuple]:
    """``(constexprs, runtime arguments)`` of a generated attention module's launch for its mask
    arguments. The runtime arguments are ``(windows, key_lengths, mask, block_map)`` (``windows``: the
    kernels' ``window_left``, ``window_right`` by name, ``spec.launch.window_arguments``: claim window_clamp),
    with one-element placeholders for the kinds not in use (never read: their
    flags compile the reads out). ``ValueError`` naming the command to run when a kind is asked
    for that ``module`` was generated without (``masks``, its ``--mask`` list)."""
    wanted = {"causal": causal, "window": window is not None, "lengths": key_lengths is not None,
              "dense": mask is not None}
    missing = [kind for kind, on in wanted.items() if on and kind not in masks]
    if missing:
        raise ValueError(
            f"{module} was generated without mask kind(s) {missing}; regenerate with "
            f"`{command}` plus `--mask` listing them (or without --mask for all)")
    windows = spec_launch.window_arguments(window)

    def given_or_placeholder(t, shape, dtype):
        return t if t is not None else torch.empty(shape, dtype=dtype, device=device)

    lens_arg = given_or_placeholder(key_lengths, (1,), torch.int32)
    mask_arg = given_or_placeholder(mask, (1, 1, 1, 1), torch.bool)
    map_arg = given_or_placeholder(block_map, (1, 1, 1, 1), torch.int8)
    return mask_constexprs(*wanted.values()), (windows, lens_arg, mask_arg, map_arg)


#: the packed-batch kernels' offset vectors (``IS_VARLEN``), in an ahead-of-time signature
VARLEN_POINTERS = {"CuSeqlensQ": "i32", "CuSeqlensK": "i32"}


#: ``(batch, head, row, dim)`` strides of a packed ``(total, H, D)`` tensor (batch stride 0): the one
#: home is ``spec.launch.packed_strides``, whose output claim ``varlen_addresses`` quantifies over
packed_strides = spec_launch.packed_strides


# ----------------------------------------------------------------------------------
# Score modifications (issue 15): softcap, ALiBi slopes, attention sinks.
# ----------------------------------------------------------------------------------
#: the score-modification tensors of an attention kernel's signature and their element type
SCORE_MOD_POINTERS = {"Slopes": "fp32", "Sinks": "fp32"}


def score_mod_constexprs(softcap: bool, alibi: bool, sinks: bool) -> dict:
    """The score-modification flags (constexprs: a modification not in use compiles out)."""
    return {"HAS_SOFTCAP": bool(softcap), "HAS_ALIBI": bool(alibi), "HAS_SINKS": bool(sinks)}


def score_mod_launch(device: torch.device, *, softcap, alibi_slopes, sinks) -> tuple[dict, tuple]:
    """``(constexprs, runtime arguments)`` of an attention kernel's launch for its score
    modifications (checked inputs: ``generator.runtime.api``). The runtime arguments are
    ``(softcap, slopes, (slope batch stride, slope head stride), sinks)``: the cap as a float
    (0.0, never read, when off), ALiBi slopes ``(Hq,)`` (batch stride 0) or ``(B, Hq)``, and
    one-element placeholders for the tensors not in use (their flags compile the reads out). Any
    scale: the kernels form no quotient by it (issue 23, row 9; claim score_mod_invariant)."""
    placeholder = torch.empty((1,), dtype=torch.float32, device=device)
    slopes = alibi_slopes if alibi_slopes is not None else placeholder
    slope_strides = spec_launch.slope_strides(slopes)  # the one home: spec.launch (claim forward_addresses)
    flags = score_mod_constexprs(softcap is not None, alibi_slopes is not None, sinks is not None)
    return flags, (0.0 if softcap is None else float(softcap), slopes, slope_strides,
                   sinks if sinks is not None else placeholder)


# ----------------------------------------------------------------------------------
# Attention dropout (issue 29)
# ----------------------------------------------------------------------------------
#: dropout's tensor in an attention kernel's signature: int64 (2,), the Philox seed and counter offset
DROPOUT_POINTERS = {"Philox": "i64"}


def dropout_constexprs(dropout: bool) -> dict:
    """The dropout flag (a constexpr: off compiles every dropout line out)."""
    return {"HAS_DROPOUT": bool(dropout)}


def dropout_launch(device: torch.device, *, dropout_p, philox) -> tuple[dict, tuple]:
    """``(constexprs, (philox, dropout_p))`` of an attention kernel's launch: dropout is on when
    ``philox`` (int64 ``(2,)``: seed, counter offset, drawn by ``checks.draw_philox``) is given
    and ``dropout_p > 0``; off, a placeholder the kernels never read and ``p = 0.0``."""
    on = philox is not None and float(dropout_p) > 0
    # the pair as the kernels read it (spec.launch.philox_words: claim forward_addresses)
    arg = spec_launch.philox_words(philox) if on else torch.zeros((2,), dtype=torch.int64, device=device)
    return dropout_constexprs(on), (arg, float(dropout_p) if on else 0.0)


# ----------------------------------------------------------------------------------
# FP8 forward (issue 30): FlashAttention 3's descales
# ----------------------------------------------------------------------------------
#: the descales in an attention kernel's signature: float32 (B, Hkv), a stride pair each
DESCALE_POINTERS = {"QDescale": "fp32", "KDescale": "fp32", "VDescale": "fp32"}


def descale_constexprs(descaled: bool) -> dict:
    """The FP8 flag (a constexpr: off compiles the descale lines out, the kernel is the dense one)."""
    return {"HAS_DESCALE": bool(descaled)}


def p_scale(dtype: torch.dtype) -> float:
    """The power of two P is scaled by before its cast in P V (``spec.error_bound.FP8``, claim
    ``fp8_descale``): the format's for FP8 products, 1 on the mixed path (P cast to fp16/bf16)."""
    from spec.error_bound import FP8

    return FP8[FP8_FORMATS[dtype]].p_scale if dtype in FP8_FORMATS else 1.0


#: Triton's interpreter: its fp32 -> fp8 conversion (``interpreter._convert_float``) rounds the
#: mantissa up without carrying into the exponent (126.75 -> 64, not 128, in e5m2 and e4m3: 44 and 23 of
#: 1024 uniform values in [0, 256) wrong), where a GPU's ``cvt.rn.satfinite`` rounds to nearest
_INTERPRETER_FP8 = {tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}


def round_fp8_to_nearest_in_interpreter() -> None:
    """Under ``TRITON_INTERPRET=1``, route the interpreter's fp32/fp16 -> fp8 casts through torch's
    round-to-nearest conversion (the GPU's ``cvt.rn``), so that the FP8 forward's cast of ``P·p_scale``
    (claim ``fp8_error_bound``'s model) is what the CPU runs; idempotent, and only those casts change.
    ``tests/test_fp8.py`` checks that the unpatched conversion still has the carry bug."""
    from triton.runtime import interpreter

    original = interpreter._convert_float
    if getattr(original, "rounds_fp8_to_nearest", False):
        return

    def convert(input, input_dtype, output_dtype, rounding_mode):
        if output_dtype in _INTERPRETER_FP8 and input_dtype in (tl.float32, tl.float16):
            x = torch.from_numpy(input.view(np.float32 if input_dtype == tl.float32 else np.float16).copy())
            return x.to(_INTERPRETER_FP8[output_dtype]).view(torch.uint8).numpy().reshape(input.shape)
        return original(input, input_dtype, output_dtype, rounding_mode)

    convert.rounds_fp8_to_nearest = True
    convert.original = original
    interpreter._convert_float = convert


def descale_launch(device: torch.device, dot_dtype: torch.dtype, descales) -> tuple[dict, tuple]:
    """``(constexprs, (q_descale, k_descale, v_descale, p_scale))`` of an attention kernel's launch:
    ``descales`` the checked float32 ``(B, Hkv)`` triple, or None (off: ``(1, 1)`` placeholders the kernel
    never reads). Their strides are ``spec.launch.descale_strides``' (``forward_launch``: claim
    forward_addresses)."""
    if descales is None:
        placeholder = torch.ones((1, 1), dtype=torch.float32, device=device)
        return descale_constexprs(False), (placeholder, placeholder, placeholder, 1.0)
    if interpreting() and dot_dtype in FP8_FORMATS:
        round_fp8_to_nearest_in_interpreter()
    qd, kd, vd = descales
    return descale_constexprs(True), (qd, kd, vd, p_scale(dot_dtype))


def tl_dtype_of(dtype: str) -> tuple[torch.dtype, str]:
    """``"fp16"``/``"bf16"``/``"fp32"`` (or torch names), ``"e4m3"``/``"e5m2"`` (FP8) -> (torch dtype, signature name)."""
    if dtype not in DTYPE_NAMES and dtype not in FP8_DTYPE_NAMES:
        raise ValueError(f"dtype must be one of fp16, bf16, fp32 (or e4m3, e5m2: FP8) (got {dtype!r})")
    torch_dtype = DTYPE_NAMES.get(dtype) or FP8_DTYPE_NAMES[dtype]
    return torch_dtype, TL_DTYPES[torch_dtype][1]


# ----------------------------------------------------------------------------------
# Hopper TMA (opt-in): host-side tensor descriptors, and the rules for when they are legal.
# ----------------------------------------------------------------------------------
#: TMA, the tensor memory accelerator, exists from compute capability 9.0 (Hopper) on
TMA_MIN_CAPABILITY = (9, 0)
#: cuTensorMapEncodeTiled: each box dimension (the block shape) is at most 256 elements
TMA_MAX_BOX = 256


class TmaFallbackWarning(UserWarning):
    """``tma=True`` was asked for but the tensors of this call cannot take TMA descriptors:
    the launch took the pointer path instead (the same results, without TMA). The message
    names the tensor and the rule. To make it an error:
    ``warnings.simplefilter("error", TmaFallbackWarning)``."""


def _tensor_descriptor_class():
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # triton without host-side tensor descriptors
        return None
    return TensorDescriptor


def tma_unsupported(device: torch.device) -> str | None:
    """Why no call on ``device`` can use TMA (None when it can), with the fix.

    This is a property of the machine, not of one call, so asking for TMA here is an error
    (``tma_operands`` raises it), never a silent fallback. The interpreter (CPU tensors under
    ``TRITON_INTERPRET=1``) emulates descriptors, which is how the TMA path is tested without a GPU.
    """
    if _tensor_descriptor_class() is None:
        return (f"tma=True needs triton.tools.tensor_descriptor, which triton {triton.__version__} lacks; "
                "upgrade triton (flashproof needs >= 3.6) or pass tma=False")
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < TMA_MIN_CAPABILITY:
            return (f"tma=True needs a GPU with TMA (compute capability >= 9.0, Hopper or newer), but "
                    f"{torch.cuda.get_device_name(device)} is sm_{capability[0]}{capability[1]}; pass tma=False")
    elif device.type != "cpu" or not interpreting():
        return f"tma=True needs a CUDA device (or CPU tensors under TRITON_INTERPRET=1), got {device}"
    return None


def tma_by_default(device: torch.device) -> bool:
    """What ``tma="auto"`` means on ``device``: TMA wherever the machine has it (a CUDA GPU of
    compute capability 9.0 or more, a triton with tensor descriptors), the pointer path
    elsewhere (sm_80, CPU tensors under the interpreter). Layouts TMA cannot read still fall back
    per call, with a ``TmaFallbackWarning`` (``tma_operands``)."""
    return device.type == "cuda" and tma_unsupported(device) is None


def tma_layout_problem(name: str, t: torch.Tensor, rows: int, block_d: int, *, check_address: bool = True) -> str | None:
    """Why ``t`` (``(B, H, N, D)``) cannot take a TMA descriptor with block ``[1, 1, rows, block_d]``
    (None when it can). The rules of ``cuTensorMapEncodeTiled`` as Triton's ``TensorDescriptor``
    uses it: the innermost dimension contiguous, every other stride a multiple of 16 bytes (and
    below 2^40 bytes), the base address 16-byte aligned, each box dimension <= 256 elements
    with an innermost extent of >= 16 bytes, sizes that fit Triton's int32 descriptor shape.
    A zero stride (a broadcast made with ``expand``) is refused too: it is not a layout the
    TMA unit is documented for, and no GPU has checked it here. ``check_address=False`` skips the
    base-address rule (a traced tensor under ``torch.compile`` has no address yet).
    """
    elem = t.element_size()
    if t.stride(-1) != 1:
        return (f"{name} has stride {t.stride(-1)} in its last (head) dimension; TMA needs it contiguous "
                f"(stride 1): pass {name}.contiguous()")
    for dim in range(t.dim() - 1):
        size, stride = t.shape[dim], t.stride(dim)
        if size > 1 and stride == 0:
            return f"{name} is broadcast (stride 0) along dimension {dim}; pass a materialised tensor"
        if (stride * elem) % 16 or stride * elem >= 2**40:
            return (f"{name}'s stride along dimension {dim} is {stride * elem} bytes; TMA needs every stride but "
                    f"the last to be a multiple of 16 bytes (below 2^40): for a contiguous tensor, a head dim "
                    f"that is a multiple of {16 // math.gcd(16, elem)} elements")
    if check_address and t.data_ptr() % 16:
        return (f"{name} starts at an address that is not 16-byte aligned (a view at an odd offset); "
                f"pass {name}.clone()")
    if any(size >= 2**31 for size in t.shape):
        return f"{name} has a dimension of 2^31 elements or more, beyond a TMA descriptor's int32 shape"
    if max(rows, block_d) > TMA_MAX_BOX or block_d * elem < 16:
        return (f"{name}'s TMA block [1, 1, {rows}, {block_d}] breaks the box rules (each dimension "
                f"<= {TMA_MAX_BOX}, the last >= 16 bytes); use a smaller block config")
    return None


def tma_operands(wanted: bool, operands: dict[str, tuple], block_d: int) -> tuple[list, bool]:
    """``(arguments, USE_TMA)`` for the kernel's tensor parameters ``operands`` (``name: (tensor,
    rows of its block)``, each ``(B, H, N, D)``, or ``(tensor, rows, width)`` for an operand whose
    block is ``width`` wide instead of ``block_d``: v and out at a value head dim D_v != D).

    * ``wanted`` False: the tensors themselves and ``USE_TMA=False`` (the pointer path).
    * the machine cannot do TMA (``tma_unsupported``): ``ValueError`` naming the problem and the fix.
    * some tensor's layout cannot take a descriptor (``tma_layout_problem``): the tensors and
      ``USE_TMA=False``, with a ``TmaFallbackWarning`` that says which tensor and why.
    * otherwise one ``TensorDescriptor`` per tensor over its real shape and strides with block
      ``[1, 1, rows, block_d]`` (``spec.launch.tma_descriptor``: claim tma_addresses): TMA zero-fills reads
      outside the tensor and clips writes.
    """
    blocks = {name: (op[0], op[1], op[2] if len(op) > 2 else block_d) for name, op in operands.items()}
    tensors = [t for t, _, _ in blocks.values()]
    if not wanted:
        return tensors, False
    problem = tma_unsupported(tensors[0].device)
    if problem:
        raise ValueError(problem)
    for name, (t, rows, width) in blocks.items():
        problem = tma_layout_problem(name, t, rows, width)
        if problem:
            warnings.warn(f"tma=True: the pointer path ran instead, because {problem}", TmaFallbackWarning,
                          stacklevel=3)
            return tensors, False
    TensorDescriptor = _tensor_descriptor_class()
    return [TensorDescriptor(t, *spec_launch.tma_descriptor(t, rows, width)) for t, rows, width in blocks.values()], True


def takes_tma_path(wanted: bool, tensors: dict[str, torch.Tensor], block_d: int) -> bool:
    """Whether a forward launch with ``tma=wanted`` on ``tensors`` (``name: (B, H, N, D) tensor``)
    will take the TMA path (``tma_operands`` decides it at launch, with its error and warning;
    this only predicts it, silently, so that ``block="auto"`` can pick the block of that path).
    Checked at 128 rows, the largest block ``api.AUTO_BLOCKS`` lists. Under ``torch.compile``
    the base addresses are not known while tracing and are taken as 16-byte aligned: a misaligned
    one still falls back at launch, with the warning."""
    if not wanted or tma_unsupported(next(iter(tensors.values())).device) is not None:
        return False
    check_address = not torch.compiler.is_compiling()
    return all(tma_layout_problem(name, t, 128, block_d, check_address=check_address) is None
               for name, t in tensors.items())


def tma_signature(dtype_name: str, rows: int, block_d: int) -> str:
    """A descriptor parameter's type in a Triton signature, as the JIT spells it for a
    ``TensorDescriptor`` argument (``triton.runtime.jit.mangle_type``): ``tensordesc<fp16[1, 1, 64, 64]>``."""
    return f"tensordesc<{dtype_name}[1, 1, {rows}, {block_d}]>"
