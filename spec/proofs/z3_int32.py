"""Printed Triton integer lines as z3 bit-vector terms: what the kernel computes, in int32.

``Int32Line(text, env)`` parses one printed line (``name = expr``) with Python's ``ast`` and
builds the z3 ``BitVec(32)`` value the kernel computes, operation by operation in the printed
order, collecting for each operation the condition under which int32 gives the
mathematical result:

* ``a + b``, ``a - b``, ``a * b``, ``-a``: no signed overflow or underflow;
* ``a % b``: ``b != 0`` (C remainder);
* ``a // b`` (Triton truncates toward zero, C semantics): ``b != 0`` and ``a >= 0`` (only then
  is truncation the floor the SymPy proofs reason with);
* ``tl.cdiv(a, b)`` is ``(a + b - 1) // b`` (triton.language.standard): the same conditions on
  its two additions and its division;
* ``tl.minimum``, ``tl.maximum``, ``tl.where``, comparisons, ``&``: exact.

``x[:, None]`` / ``x[None, :]`` broadcast a vector: each of its entries is the scalar ``x``
ranges over. Unknown syntax raises ``ValueError``: a new construct never passes unchecked.
"""

from __future__ import annotations

import ast

import z3

from spec.proofs.tools import z3_check  # the claims' one z3 query

BITS = 32


def bv(value: int, bits: int | None = BITS) -> z3.ExprRef:
    """An int32 constant (``bits=None``: a mathematical integer)."""
    return z3.IntVal(value) if bits is None else z3.BitVecVal(value, bits)


class Int32Line:
    """One printed assignment, evaluated in int32 with its no-overflow conditions."""

    def __init__(self, text: str, env: dict[str, z3.ExprRef], bits: int | None = BITS):
        code = text.split("  #", 1)[0].strip()
        tree = ast.parse(code, mode="exec").body
        if len(tree) != 1 or not isinstance(tree[0], ast.Assign) or len(tree[0].targets) != 1:
            raise ValueError(f"not one assignment: {code!r}")
        self.code = code
        self.target = tree[0].targets[0].id
        self.env = env
        self.bits = bits  # None: evaluate over the mathematical integers (no conditions)
        self.conditions: list[tuple[str, z3.BoolRef]] = []  # (operation, holds in int32)
        self.value = self._eval(tree[0].value)

    def _cond(self, node, cond):
        if self.bits is None:
            return
        self.conditions.append((ast.unparse(node), cond))

    def _eval(self, node):
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise ValueError(f"{self.code!r}: no int32 value for {node.id!r}")
            return self.env[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return z3.BoolVal(node.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return bv(node.value, self.bits)
        if isinstance(node, ast.Subscript):  # a broadcast vector x[:, None]: its entries
            return self._eval(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            a = self._eval(node.operand)
            if self.bits is not None:
                self._cond(node, a != bv(-(2 ** (self.bits - 1)), self.bits))
            return -a
        if isinstance(node, ast.BinOp):
            a, b = self._eval(node.left), self._eval(node.right)
            return self._binop(node, a, b)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self._eval(node.left), self._eval(node.comparators[0])
            op = {ast.LtE: lambda: a <= b, ast.Lt: lambda: a < b, ast.GtE: lambda: a >= b,
                  ast.Gt: lambda: a > b, ast.Eq: lambda: a == b}.get(type(node.ops[0]))
            if op is None:
                raise ValueError(f"{self.code!r}: comparison {ast.unparse(node)!r}")
            return op()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "tl":
            args = [self._eval(a) for a in node.args]
            name = node.func.attr
            if name == "minimum":
                return z3.If(args[0] < args[1], args[0], args[1])
            if name == "maximum":
                return z3.If(args[0] > args[1], args[0], args[1])
            if name == "where":
                return z3.If(args[0], args[1], args[2])
            if name == "cdiv":  # triton.language.standard.cdiv: (x + div - 1) // div
                x, d = args
                s = self._add(node, x, d)
                s1 = self._sub(node, s, bv(1, self.bits))
                return self._div(node, s1, d)
        raise ValueError(f"{self.code!r}: no int32 rule for {ast.unparse(node)!r}")

    def _binop(self, node, a, b):
        if isinstance(node.op, ast.Add):
            return self._add(node, a, b)
        if isinstance(node.op, ast.Sub):
            return self._sub(node, a, b)
        if isinstance(node.op, ast.Mult):
            if self.bits is None:
                return a * b
            self._cond(node, z3.And(z3.BVMulNoOverflow(a, b, True), z3.BVMulNoUnderflow(a, b)))
            return a * b
        if isinstance(node.op, ast.FloorDiv):
            return self._div(node, a, b)
        if isinstance(node.op, ast.Mod):  # Triton's % on ints: C remainder (sign of the dividend)
            if self.bits is None:
                return a % b
            self._cond(node, b != bv(0, self.bits))
            return z3.SRem(a, b)
        if isinstance(node.op, ast.BitAnd):
            return z3.And(a, b)
        raise ValueError(f"{self.code!r}: no int32 rule for {ast.unparse(node)!r}")

    def _add(self, node, a, b):
        if self.bits is None:
            return a + b
        self._cond(node, z3.And(z3.BVAddNoOverflow(a, b, True), z3.BVAddNoUnderflow(a, b)))
        return a + b

    def _sub(self, node, a, b):
        if self.bits is None:
            return a - b
        self._cond(node, z3.And(z3.BVSubNoOverflow(a, b), z3.BVSubNoUnderflow(a, b, True)))
        return a - b

    def _div(self, node, a, b):
        if self.bits is None:
            return a / b  # used on non-negative operands only (then z3's integer / is the floor)
        self._cond(node, z3.And(b != bv(0), a >= bv(0), z3.BVSDivNoOverflow(a, b)))
        return a / b  # z3's bit-vector `/` is signed division truncating toward zero, like Triton's


def counterexample(facts, goal):
    """None when ``facts`` imply ``goal`` (``spec.proofs.tools.z3_check``), else the model as a
    dict of the named values (or the string "unknown" when z3 gives up)."""
    verdict, model = z3_check(facts, goal)
    if verdict == z3.unsat:
        return None
    if verdict == z3.unknown:
        return "unknown"
    return {str(d): (model[d].as_signed_long() if z3.is_bv_value(model[d]) else model[d])
            for d in model.decls()}


# ----------------------------------------------------------------------------------
# The integer width of each operation of a printed address line (issue 24: int32 products of strides).
# ----------------------------------------------------------------------------------
def _int64_cast(node):
    """The operand of ``x.to(tl.int64)`` or ``tl.cast(x, tl.int64)``, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr == "to" and len(node.args) == 1 and ast.unparse(node.args[0]) == "tl.int64":
        return node.func.value
    if (ast.unparse(node.func) == "tl.cast" and len(node.args) == 2 and ast.unparse(node.args[1]) == "tl.int64"
            and not node.keywords):
        return node.args[0]
    return None


def narrow_stride_arithmetic(text: str, widths: dict[str, int]) -> tuple[str, int, list[str]]:
    """The width Triton gives each operation of one printed line (``name = expr``), and the operations on a
    stride that it computes in int32: ``(target, width of the value, [those operations' source])``.

    Triton's integer typing, as the kernels meet it: a name has the width ``widths`` gives it (the program's
    batch and head, a loaded page, …: 64; otherwise 32: lanes ``tl.arange``, program ids, scalar arguments and
    every stride, which Triton passes as int32 whenever its value fits — only then can a product wrap); an int
    literal is int32; ``x.to(tl.int64)`` and ``tl.cast(x, tl.int64)`` are int64; an operation of two integers has the wider width (the
    narrower operand is sign-extended first, so an int32 operand of an int64 operation is its exact value);
    ``x[:, None]`` keeps ``x``'s width; ``tl.where``/``tl.minimum``/``tl.maximum`` the widest of their
    operands. A ``*``, ``+`` or ``-`` computed in int32 with a ``stride_*`` name below it is listed: such an
    operation is exact only where a claim bounds its value by 2^31 (or the line widens a factor to int64)."""
    code = text.split("  #", 1)[0].strip()
    tree = ast.parse(code, mode="exec").body
    if len(tree) != 1 or not isinstance(tree[0], ast.Assign) or len(tree[0].targets) != 1:
        raise ValueError(f"not one assignment: {code!r}")
    narrow: list[str] = []

    def strided(node) -> bool:
        return any(isinstance(x, ast.Name) and x.id.startswith("stride_") for x in ast.walk(node))

    def width(node) -> int:
        if isinstance(node, ast.Name):
            return widths.get(node.id, 32)
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int)):
            return 32
        if isinstance(node, ast.Subscript):
            return width(node.value)
        if isinstance(node, ast.UnaryOp):
            return width(node.operand)
        if _int64_cast(node) is not None:
            width(_int64_cast(node))
            return 64
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "tl":
            ws = [width(a) for a in node.args]
            if node.func.attr in ("where", "minimum", "maximum"):
                return max(ws[1:] if node.func.attr == "where" else ws)
            if node.func.attr == "program_id":
                return 32
        if isinstance(node, ast.BinOp):
            w = max(width(node.left), width(node.right))
            if w == 32 and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)) and strided(node):
                narrow.append(ast.unparse(node))
            return w
        if isinstance(node, ast.Compare):
            for x in (node.left, *node.comparators):
                width(x)
            return 1
        raise ValueError(f"{code!r}: no width rule for {ast.unparse(node)!r}")

    return tree[0].targets[0].id, width(tree[0].value), narrow
