"""Print the spec's SymPy kernel terms as Triton source text.

It lives in ``spec`` because both layers need it: the generator prints every kernel line with
it, and the claims about printed lines (``spec.proofs.int32``, ``spec.proofs.structure``) read
exactly what it prints. It produces text only and imports no Triton.

``TritonPrinter`` is a SymPy ``PythonCodePrinter`` that knows the handful of nodes the
kernel terms use (``spec.terms``, ``spec.masks``) and nothing else: every node it does not
know raises ``UnsupportedNode`` instead of falling back to SymPy's generic output, so a new
construct in the spec can never reach a kernel as silently wrong Python.

==========================  ===============================================
SymPy node                  Triton
==========================  ===============================================
``Symbol``                  its kernel name (through ``rename``)
``Max`` / ``Min``           nested ``tl.maximum`` / ``tl.minimum``
``Piecewise``               nested ``tl.where``
``-oo`` / ``oo``            ``float("-inf")`` / ``float("inf")``
``exp2``/``log2``/``exp``/``log``  ``tl.exp2`` / ``tl.log2`` / ``tl.exp`` / ``tl.log``
``Abs`` / ``x**2``          ``tl.abs(x)`` / ``x * x`` (``x**n``, ``|n| <= 8``: multiplies; ``x**±1/2``: ``tl.sqrt``)
``tanh``/``sin``/``cos``    ``1 - 2 / (tl.exp(2 * x) + 1)`` / ``tl.sin`` / ``tl.cos`` (score_mods)
constants (``1/log 2``)     a float literal (``1.4426950408889634``)
``Eq``/``Le``/``Lt``        ``==`` / ``<=`` / ``<``
``And`` / ``Or``            ``&`` / ``|`` of parenthesised operands
``floor(a/b)``              ``a // b``  (operands are non-negative in kernels)
``Mod(a, b)``               ``a % b``  (index terms: non-negative operands)
``ceiling(a/b)``            ``tl.cdiv(a, b)``
``rowmax``/``rowsum``       ``tl.max(x, 1)`` / ``tl.sum(x, 1)``
``dot(a, b)``               ``tl.dot(a, b, input_precision=INPUT_PRECISION, max_num_imprecise_acc=32 if DOT_DTYPE.is_fp8() else None)``
                            (``spec.error_bound.FP8_MAX_IMPRECISE_ACC``: fp8 products on sm_90
                            promote every MMA instruction's partial sum to the fp32 accumulator;
                            other dtypes ignore it)
``trans`` / ``col``         ``tl.trans(x)`` / ``x[:, None]``
``row``                     ``x[None, :]`` (a per-column vector of a key-major tile)
``Indexed`` ``p[x]``        ``tl.load(p + x)`` (a mask_mod parameter read)
``floor_div(a, c)``         ``tl.where(a < 0, -1 - (-1 - a) // c, a // c)``: the floor
                            for ``c >= 1`` whichever way ``//`` rounds (spec.mask_mod)
``onehot_sum(g, idx, e)``   ``tl.sum(tl.sum(tl.where(idx[:, :, None] == e[None, None, :], g[:, :, None],
                            0.0), 0), 0)``: a score_mod's gradient scatter (spec.score_mods)
``int32(x)`` / ``box(c..)``  ``x.to(tl.int32)`` / ``[c_0, c_1, ...]``: a TMA box's int32 coordinates
                            (spec.addresses, claim tma_addresses)
``arange(n)``               ``tl.arange(0, n)``: a tile's lanes (spec.addresses.*_LANES, the address claims)
``tile_range(a, b, c)``     ``range(a, b, c)`` (``range(b)``, ``range(a, b)`` as written), a term ``x = tile_range(..)``
                            printed as the loop header ``for x in range(a, b, c):`` (spec.addresses.*_LOOPS, the claims)
``program_id(a)``/``int64(x)``  ``tl.program_id(a)`` / ``x.to(tl.int64)`` (``tl.cast(x, tl.int64)`` but of a program id): a program's place in the launch
                            grid (spec.addresses.GRID_GROUPS, claim launch_grid)
``philox_uniform(s, o)``    ``tl.rand(s, o)``: Triton's Philox uniform in [0, 1) (dropout's
                            keep decision, spec.terms.DROPOUT_KEEP; the only draw a kernel makes)
==========================  ===============================================

``dot`` casts an operand to the tile dtype ``DOT_DTYPE`` unless it is one of ``typed``
(tiles loaded from memory, already in that dtype): in practice only the fp32 tiles ``p``, ``pT``,
``ds``, ``dsT`` are cast, exactly like the tutorial's ``p.to(v.dtype)``.
"""

from __future__ import annotations

import sympy as sp
from sympy.codegen.cfunctions import exp2, log2
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.pycode import PythonCodePrinter

from spec import terms as T
from spec.error_bound import FP8_MAX_IMPRECISE_ACC
from spec.mask_mod import floor_div
from spec.score_mods import onehot_sum


def fp8_imprecise_arg(k: int) -> str:
    """The printed dots' ``max_num_imprecise_acc`` argument for a promotion after ``k`` products: ``k`` for
    fp8 operands (``DOT_DTYPE``, a constexpr: resolved at compile time), Triton's default (None: no
    promotion, exact for fp16/bf16/fp32) otherwise. Claim fp8_mma_bound reads the printed lines for it."""
    return f"max_num_imprecise_acc={k} if DOT_DTYPE.is_fp8() else None"


#: the argument every printed dot passes: promotion after FP8_MAX_IMPRECISE_ACC products
FP8_IMPRECISE_ARG = fp8_imprecise_arg(FP8_MAX_IMPRECISE_ACC)


class UnsupportedNode(TypeError):
    """A SymPy node the Triton printer has no rule for."""


def _call(template: str):
    """The rule for a node of one argument printed as a Triton call (``{}``: the argument)."""
    return lambda printer, expr: template.format(printer._print(expr.args[0]))


def _broadcast(index: str):
    """The rule for a vector broadcast along one axis of a tile: the vector, then ``index``."""
    return lambda printer, expr: printer.parenthesize(expr.args[0], PRECEDENCE["Atom"], strict=True) + index


class TritonPrinter(PythonCodePrinter):
    """Prints spec expressions as Triton; ``rename`` maps symbol names to kernel code."""

    printmethod = "_tritoncode"
    where = "tl.where"  # the select a Piecewise prints as

    def __init__(self, rename: dict[str, str] | None = None, typed=("q", "k", "v", "vT", "do"),
                 dot_dtype: str = "DOT_DTYPE", input_precision: str = "INPUT_PRECISION"):
        super().__init__({"fully_qualified_modules": False, "strict": True})
        self.rename = dict(rename or {})
        self.typed = frozenset(typed)
        self.dot_dtype = dot_dtype
        self.input_precision = input_precision

    # --- anything without a rule -------------------------------------------------
    def emptyPrinter(self, expr):
        raise UnsupportedNode(f"no Triton rule for {type(expr).__name__}: {expr!r}")

    def _print_Basic(self, expr):
        raise UnsupportedNode(f"no Triton rule for {type(expr).__name__}: {expr!r}")

    _print_Function = _print_Basic
    _print_Expr = _print_Basic

    def _print(self, expr, **kwargs):
        if not isinstance(expr, sp.Basic):
            raise UnsupportedNode(f"not a SymPy expression: {expr!r}")
        # A closed-form constant other than an integer (1/log 2, log 2) becomes a float
        # literal: Triton has no symbolic log(2), and the kernel wants it folded anyway.
        if isinstance(expr, sp.Integer):  # Zero, One, NegativeOne included
            return str(int(expr))
        if isinstance(expr, sp.Expr) and expr.is_number and expr.is_finite and not isinstance(expr, sp.Float):
            return repr(float(sp.N(expr, 20)))
        # Only this class's own rules: PythonCodePrinter's (math.sin, abs, ...) are not Triton.
        for cls in type(expr).__mro__:
            method = "_print_" + cls.__name__
            if hasattr(self, method):
                if not any(method in k.__dict__ for k in type(self).__mro__ if issubclass(k, TritonPrinter)):
                    raise UnsupportedNode(f"no Triton rule for {type(expr).__name__}: {expr}")
                break
        return super()._print(expr, **kwargs)

    # --- atoms -------------------------------------------------------------------
    def _print_Symbol(self, expr):
        return self.rename.get(expr.name, expr.name)

    _print_Dummy = _print_Symbol

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_NegativeInfinity(self, expr):
        return 'float("-inf")'

    def _print_Infinity(self, expr):
        return 'float("inf")'

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"

    # --- arithmetic --------------------------------------------------------------
    _print_Add = PythonCodePrinter._print_Add  # a + b - c, as Python and Triton write it

    def _print_Mul(self, expr):
        consts = [a for a in expr.args if a.is_number and not a.is_Rational]
        if consts:
            # keep the folded constant visible as one literal factor: x * 1.4426950408889634
            rest = sp.Mul(*[a for a in expr.args if a not in consts], evaluate=False)
            lit = self._print(sp.Mul(*consts))
            if rest == 1:
                return lit
            return f"{self.parenthesize(rest, PRECEDENCE['Mul'], strict=False)} * {lit}"
        return super()._print_Mul(expr)

    def _print_Pow(self, expr, rational=False):
        base, e = expr.args
        if e == -1:
            return f"1 / {self.parenthesize(base, PRECEDENCE['Mul'], strict=True)}"
        if e == 2:  # a square (softcap's 1 − t²): one multiply, as written
            b = self.parenthesize(base, PRECEDENCE['Mul'], strict=True)
            return f"{b} * {b}"
        if e.is_Integer and 3 <= e <= 8:  # a score_mod's small power: repeated multiplies
            b = self.parenthesize(base, PRECEDENCE['Mul'], strict=True)
            return " * ".join([b] * int(e))
        if e.is_Integer and -8 <= e <= -2:
            return f"1 / ({self._print(sp.Pow(base, -e, evaluate=False))})"
        if e == sp.Rational(1, 2):
            return f"tl.sqrt({self._print(base)})"
        if e == -sp.Rational(1, 2):
            return f"1 / tl.sqrt({self._print(base)})"
        raise UnsupportedNode(f"no Triton rule for the power {expr}")

    def _print_Max(self, expr):
        return self._nested("tl.maximum", expr.args)

    def _print_Min(self, expr):
        return self._nested("tl.minimum", expr.args)

    def _nested(self, fn, args):
        args = [self._print(a) for a in args]
        out = args[0]
        for a in args[1:]:
            out = f"{fn}({out}, {a})"
        return out

    def _print_Piecewise(self, expr):
        *pieces, (last_value, last_cond) = expr.args
        if last_cond != sp.true:
            raise UnsupportedNode(f"Piecewise without a final True branch: {expr}")
        out = self._print(last_value)
        for value, cond in reversed(pieces):
            out = f"{self.where}({self._print(cond)}, {self._print(value)}, {out})"
        return out

    _print_Abs = _call("tl.abs({})")
    _print_exp2 = _call("tl.exp2({})")
    _print_log2 = _call("tl.log2({})")
    _print_exp = _call("tl.exp({})")
    _print_log = _call("tl.log({})")
    _print_sin = _call("tl.sin({})")
    _print_cos = _call("tl.cos({})")

    def _print_tanh(self, expr):
        # tanh(x) = 1 − 2/(e^{2x} + 1): no NaN for any x (e^{+inf} gives 1, e^{-inf} gives −1), the
        # built-in softcap's form; Triton has no tanh of its own on every backend
        x = self.parenthesize(expr.args[0], PRECEDENCE["Mul"], strict=True)
        return f"(1 - 2 / (tl.exp(2 * {x}) + 1))"

    def _print_floor(self, expr):
        num, den = sp.fraction(sp.together(expr.args[0]))
        return f"({self.parenthesize(num, PRECEDENCE['Mul'], strict=True)} // "\
               f"{self.parenthesize(den, PRECEDENCE['Mul'], strict=True)})"

    def _print_ceiling(self, expr):
        num, den = sp.fraction(sp.together(expr.args[0]))
        return f"tl.cdiv({self._print(num)}, {self._print(den)})"

    def _print_Mod(self, expr):
        a, c = (self.parenthesize(x, PRECEDENCE["Mul"], strict=True) for x in expr.args)
        return f"{a} % {c}"  # index terms only: non-negative operands, where % agrees everywhere

    def _print_Indexed(self, expr):
        (index,) = expr.indices
        return f"tl.load({self._print(expr.base.label)} + {self.parenthesize(index, PRECEDENCE['Add'])})"

    def _print_onehot_sum(self, expr):
        g, idx, e = (self._print(x) for x in expr.args)
        # per entry e_c of the chunk: the sum over the tile of g where idx == e_c (a (rows, keys, chunk)
        # select, reduced over rows and keys)
        return f"tl.sum(tl.sum(tl.where({idx}[:, :, None] == {e}[None, None, :], {g}[:, :, None], 0.0), 0), 0)"

    def _print_int32(self, expr):
        return f"{self.parenthesize(expr.args[0], PRECEDENCE['Atom'], strict=True)}.to(tl.int32)"

    def _print_int64(self, expr):
        x = expr.args[0]
        if isinstance(x, T.program_id):  # a tensor: tl.program_id(a).to(tl.int64)
            return f"{self._print(x)}.to(tl.int64)"
        # a lane or a loop index, which Triton's interpreter holds as a Python int in a `range` loop: tl.cast
        # takes either (compiled, the same conversion as .to)
        return f"tl.cast({self._print(x)}, tl.int64)"

    def _print_program_id(self, expr):
        return f"tl.program_id({int(expr.args[0])})"

    def _print_arange(self, expr):
        return f"tl.arange(0, {self._print(expr.args[0])})"

    def _print_tile_range(self, expr):
        return f"range({', '.join(self._print(a) for a in expr.args)})"

    def _print_box(self, expr):
        return "[" + ", ".join(self._print(c) for c in expr.args) + "]"

    def _print_philox_uniform(self, expr):
        seed, offset = (self._print(x) for x in expr.args)
        return f"tl.rand({seed}, {offset})"

    def _print_floor_div(self, expr):
        a, c = (self.parenthesize(x, PRECEDENCE["Mul"], strict=True) for x in expr.args)
        # floor(a/c) = -1 - floor((-1 - a)/c) for a < 0: each // gets a non-negative operand, where
        # truncating and flooring // agree, and no step overflows int32, in either branch (-1 - x
        # maps int32 onto itself); claim mask_mod_sound reads this text back in int32, both roundings
        return f"tl.where({a} < 0, -1 - (-1 - {a}) // {c}, {a} // {c})"

    # --- predicates --------------------------------------------------------------
    def _relation(self, expr, op):
        return f"{self._print(expr.lhs)} {op} {self._print(expr.rhs)}"

    def _print_Equality(self, expr):
        return self._relation(expr, "==")

    def _print_Unequality(self, expr):
        return self._relation(expr, "!=")

    def _print_LessThan(self, expr):
        return self._relation(expr, "<=")

    def _print_StrictLessThan(self, expr):
        return self._relation(expr, "<")

    def _print_GreaterThan(self, expr):
        return self._relation(expr, ">=")

    def _print_StrictGreaterThan(self, expr):
        return self._relation(expr, ">")

    def _print_And(self, expr):
        return " & ".join(self._bool_operand(a) for a in expr.args)

    def _print_Or(self, expr):
        return " | ".join(self._bool_operand(a) for a in expr.args)

    def _bool_operand(self, a):
        s = self._print(a)
        return s if isinstance(a, sp.Symbol) else f"({s})"

    # --- row operations (spec.terms) ---------------------------------------------
    _print_rowmax = _call("tl.max({}, 1)")
    _print_rowsum = _call("tl.sum({}, 1)")
    _print_trans = _call("tl.trans({})")

    _print_col = _broadcast("[:, None]")
    _print_row = _broadcast("[None, :]")

    def _print_dot(self, expr):
        a, b = (self._dot_operand(x) for x in expr.args)
        # fp8 x fp8 on sm_90: each wgmma's partial sum (32 products) is added to the fp32 accumulator in fp32
        # (Triton's max_num_imprecise_acc; its default 2^30 keeps the whole sum in the MMA's narrow
        # accumulator): the hypothesis of spec.error_bound.fp8_dot_factor (claim fp8_mma_bound)
        # Only fp8 dots pass it: on fp16/bf16 an explicit value splits the wgmma accumulation too (measured: the
        # sm_90 dK/dV at D = 128 went from 0.547 to 0.828 loop instructions per element and spilled)
        return (f"tl.dot({a}, {b}, input_precision={self.input_precision}, "
                f"{FP8_IMPRECISE_ARG})")

    def _dot_operand(self, x):
        inner = x.args[0] if isinstance(x, T.trans) else x
        s = self._print(x)
        if isinstance(inner, sp.Symbol) and inner.name in self.typed:
            return s
        return f"{self.parenthesize(x, PRECEDENCE['Atom'], strict=True)}.to({self.dot_dtype})"


class TorchPrinter(TritonPrinter):
    """The same terms as PyTorch tensor code, for a runtime that differentiates them with
    autograd (``generator.runtime.merge``): ``torch.maximum``, ``torch.where``, ``torch.exp2``,
    ``torch.log2``; a per-row vector broadcast with ``col`` is ``x[:, None]`` as in Triton. Only
    elementwise terms: the tile operations (``rowmax``, ``rowsum``, ``dot``, ``trans``) raise."""

    printmethod = "_torchcode"
    where = "torch.where"

    def _print_Max(self, expr):
        return self._nested("torch.maximum", expr.args)

    def _print_Min(self, expr):
        return self._nested("torch.minimum", expr.args)

    _print_exp2 = _call("torch.exp2({})")
    _print_log2 = _call("torch.log2({})")
    _print_exp = _call("torch.exp({})")
    _print_log = _call("torch.log({})")
    _print_rowmax = _print_rowsum = _print_dot = _print_trans = TritonPrinter._print_Basic
    _print_philox_uniform = TritonPrinter._print_Basic  # a draw is a kernel's, never the runtime's
    _print_int32 = _print_box = TritonPrinter._print_Basic  # TMA coordinates are a kernel's
    _print_int64 = _print_program_id = TritonPrinter._print_Basic  # a program's place in the grid is a kernel's
    _print_arange = TritonPrinter._print_Basic  # a tile's lanes are a kernel's
    _print_tile_range = TritonPrinter._print_Basic  # so is a tile loop


# exp2/log2 are sympy.codegen Functions: make sure the dispatcher finds them by name.
assert exp2.__name__ == "exp2" and log2.__name__ == "log2" and floor_div.__name__ == "floor_div"


def print_expr(expr, rename: dict[str, str] | None = None, **kw) -> str:
    """One expression as Triton code."""
    return TritonPrinter(rename, **kw).doprint(expr)


def print_term(term: T.Term, rename: dict[str, str] | None = None, comment: bool = True,
               printer_class=None, **kw) -> str:
    """``name = expr  # note (claim: id)`` for one kernel term (``printer_class``: TritonPrinter); a tile loop
    (``expr`` a ``tile_range``) as its header ``for name in range(start, stop, step):  # note (claim: id)``."""
    printer = (printer_class or TritonPrinter)(rename, **kw)
    if isinstance(term.expr, T.tile_range):
        line = f"for {printer._print(term.symbol)} in {printer.doprint(term.expr)}:"
    else:
        line = f"{printer._print(term.symbol)} = {printer.doprint(term.expr)}"
    if comment:
        note = f"{term.note} " if term.note else ""
        line += f"  # {note}(claim: {term.claim})"
    return line


def print_init(term: T.Term, shape: str, comment: bool = True) -> str:
    """An initial-state term (``spec.structure``) as an fp32 tile of ``shape`` filled with its value:
    ``m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # note (claim: id)``."""
    printer = TritonPrinter()
    line = f"{printer._print(term.symbol)} = tl.full({shape}, {printer.doprint(term.expr)}, dtype=tl.float32)"
    if comment:
        note = f"{term.note} " if term.note else ""
        line += f"  # {note}(claim: {term.claim})"
    return line


__all__ = ["TorchPrinter", "TritonPrinter", "UnsupportedNode", "print_expr", "print_init", "print_term", "precedence"]
