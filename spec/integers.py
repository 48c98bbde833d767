"""Integer helpers the launch functions combine sizes with, written once for numbers and SymPy sizes.

The lowest spec module (it imports only SymPy): ``spec.launch`` (the launches' grids and tile widths)
and ``spec.paged`` (decode's batch-invariant splits) both use it, so neither keeps a ceiling of its own.
"""

from __future__ import annotations

import sympy as sp


def cdiv(a, b):
    """``ceil(a / b)`` for ``b > 0``: numbers (as ``triton.cdiv``) or SymPy integers."""
    if isinstance(a, sp.Basic) or isinstance(b, sp.Basic):
        return sp.ceiling(sp.sympify(a) / b)
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``), as ``triton.next_power_of_2``."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def contiguous_strides(shape) -> tuple:
    """Row-major strides of ``shape`` (what ``torch.empty`` and ``.contiguous()`` give): ints for int sizes (what
    ``torch.empty_strided`` takes), SymPy expressions for SymPy sizes."""
    out, acc = [], 1
    for size in reversed(tuple(shape)):
        out.append(acc)
        acc = acc * size
    return tuple(reversed(out))
