"""Launch helpers shared by every generated module (hand-written, imported by generated code).

Generated files stay thin: the numeric policy of a launch (which dtype ``tl.dot`` sees, its
``input_precision``, the padded head dimension) and the ahead-of-time signature builder live
here once instead of being repeated in each emitted kernel file.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

#: torch dtype -> (Triton dtype, its name in a Triton signature)
TL_DTYPES = {
    torch.float16: (tl.float16, "fp16"),
    torch.bfloat16: (tl.bfloat16, "bf16"),
    torch.float32: (tl.float32, "fp32"),
}
DTYPE_NAMES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
               "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

MAX_HEAD_DIM = 256


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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


def block_d(head_dim: int) -> int:
    """The head dimension padded to a power of two >= 16 (tl.arange / tl.dot shapes);
    loads and stores are masked on ``d < HEAD_DIM``, so the padding reads and writes nothing."""
    return max(16, triton.next_power_of_2(head_dim))


def aot_args(fn, pointers: dict[str, str], floats: tuple[str, ...], constexprs: dict,
             num_warps: int, num_stages: int) -> dict:
    """Arguments for ``triton.compile(ASTSource(fn, signature, constexprs), target=..., options=...)``.

    ``pointers`` maps pointer parameters to their element type (``"fp16"``, ``"i1"``...);
    ``floats`` are fp32 scalars; every other runtime parameter is an ``i32``.
    """
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = "*" + pointers[name]
        elif name in floats:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    return {"fn": fn, "signature": signature, "constexprs": dict(constexprs),
            "num_warps": num_warps, "num_stages": num_stages}


def tl_dtype_of(dtype: str) -> tuple[torch.dtype, str]:
    """``"fp16"``/``"bf16"``/``"fp32"`` (or torch names) -> (torch dtype, signature name)."""
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of fp16, bf16, fp32 (got {dtype!r})")
    torch_dtype = DTYPE_NAMES[dtype]
    return torch_dtype, TL_DTYPES[torch_dtype][1]
