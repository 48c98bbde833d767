"""``mask_mod``: user-defined masks as SymPy predicates, and their tile classifier.

A *mask_mod* is a predicate ``attend(i, j)`` over the query row ``i``, the key ``j``, the
alignment ``shift`` (the aligned row is ``i + shift``), ``N_Q``, ``N_K`` and named integer
parameters: scalars (an int or one per batch entry, ``(B,)``) and per-position index
tensors (``(B, N_Q)`` read at a row, ``(B, N_K)`` read at a key, non-decreasing). Users
write it with the ``mask_mod`` decorator on a function of SymPy symbols::

    @mask_mod
    def prefix_lm(i, j, shift, prefix):
        return (j < prefix) | (j <= i + shift)

The class (checked when the decorator runs; anything else is refused with ``NotInClass``
naming the offending atom, never accepted silently):

* the predicate is a Boolean tree (``&``, ``|``, ``~``) of *atoms*: integer comparisons
  ``a <= b``, ``a < b``, ``a >= b``, ``a > b``, ``a == b``, ``a != b``;
* each atom is rewritten as ``e >= 0`` (``a < b`` as ``b - a - 1 >= 0``; ``a == b`` as
  ``a - b >= 0 & b - a >= 0``) with ``e`` an integer expression *monotone in i and in j
  separately*, by the direction rules ``DIRECTION_RULES``: sums, constant (or positive
  parameter) multiples, ``floor(x / c)`` for a positive ``c``, ``max``/``min`` of like
  directions, and reads ``t[x]`` of a non-decreasing per-position tensor at a monotone
  index. ``chunk * ((i + shift) // chunk)`` and the document-id equality
  ``doc_q[i] == doc_k[j]`` are in the class; ``i * j`` or ``(i - j) ** 2`` are not.

The tile classifier (claim ``mask_mod_sound``, spec.proofs.mask_mod): on a tile of rows
``[start_m, start_m + B_r)`` and keys ``[start_n, start_n + B_c)``, an atom monotone in
both indices takes its minimum and its maximum at corners of the tile, picked by its
directions (``corner``). Three-valued per atom: *true on the whole tile* when the minimum
is ``>= 0``, *false on the whole tile* when the maximum is ``< 0``, else mixed
(``ATOM_RULE``); a Boolean tree combines the pair ``(all, none)`` by Kleene's rules
(``KLEENE``). A tile is skipped when ``none``, run without the predicate when ``all``,
partial otherwise: O(1) work per tile, no N² evaluation. For the document-id atom the
corners are the per-tile min and max of the sorted ids (one read each, O(N/B_c) per call).

Kernel form (``MaskMod.kernel_terms``): parameters live in one int32 row per batch entry,
``MM_row`` (scalars first, then each tensor); a tensor read clamps its index into the
tensor (padding rows and keys of a ragged last tile read an end value; the clamp is
monotone, so the class and the proof are unchanged), and ``floor(a / c)`` is printed as an
exact floor division (``floor_div``). Both kernels' classifiers (a query tile's key tiles,
and the dK/dV kernel's key tile's query tiles) are the same corner terms: a tile is a tile.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from spec import notation as n
from spec.terms import Term

#: the claim that proves the classifier sound for the whole class (spec.proofs.mask_mod)
CLAIM = "mask_mod_sound"

# ----------------------------------------------------------------------------------
# The tile's corners: its extreme rows and keys
# ----------------------------------------------------------------------------------
FIRST_ROW = n.start_m
LAST_ROW = n.start_m + n.B_r - 1
FIRST_KEY = n.start_n
LAST_KEY = n.start_n + n.B_c - 1
ROWS = (FIRST_ROW, LAST_ROW)
KEYS = (FIRST_KEY, LAST_KEY)

#: reserved argument names of a mask_mod function, and the symbols they receive
INDEX_ARGS = {"i": n.i, "j": n.j, "shift": n.shift, "N_Q": n.Nq, "N_K": n.Nk}


class NotInClass(ValueError):
    """A mask_mod predicate outside the class: the message names the offending atom."""


class floor_div(sp.Function):
    """``floor(a / c)`` for integers ``a`` and ``c >= 1``, as the kernels compute it (exactly,
    whatever the sign of ``a``; printed by ``spec.printer``, the printed form proved in claim
    ``mask_mod_sound``). The analysis writes every ``floor`` of a predicate as one, *before* it
    expands an atom: ``floor((i + shift) / c)`` expanded is ``floor(i/c + shift/c)``, a sum of
    fractions whose floating-point value (``-0.4 + 1.4 = 0.9999999999999999``) floors wrong."""

    is_integer = True


def exact_floors(expr):
    """``expr`` with every ``floor(x)`` written ``floor_div(a, c)``, ``x = a / c`` over one
    denominator (``sp.together``): integer floor division, exact in the kernels and in the
    numeric model alike."""

    def one(f):
        num, den = sp.fraction(sp.together(f.args[0]))
        return floor_div(num, den)

    return sp.sympify(expr).replace(lambda x: isinstance(x, sp.floor), one)


# ----------------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------------
class Param(sp.Symbol):
    """A named integer parameter of a mask_mod; ``p[x]`` reads it as a per-position tensor."""

    def __new__(cls, name):
        return super().__new__(cls, name, integer=True)

    def __getitem__(self, index):
        return sp.IndexedBase(self.name, integer=True)[index]

    def __iter__(self):  # not a sequence: without this, Python iterates p[0], p[1], ... forever
        raise TypeError(f"mask_mod parameter {self.name} is not iterable")


# ----------------------------------------------------------------------------------
# Directions: +1 non-decreasing, -1 non-increasing, 0 constant (per index i, j)
# ----------------------------------------------------------------------------------
def _same(dirs):
    """The common direction of ``dirs`` ignoring constants (0 if all constant); None if mixed."""
    moving = {d for d in dirs if d != 0}
    if len(moving) > 1:
        return None
    return moving.pop() if moving else 0


def _sign_of_constant(c, positive_params) -> int | None:
    """+1 / -1 for a constant factor (numbers, or positive parameters: ``positive_params``
    collects them as run-time conditions); None when undecided."""
    if c.is_number:
        return 1 if c > 0 else (-1 if c < 0 else 0)
    sign = 1
    for f in sp.Mul.make_args(c):
        base, e = f.as_base_exp()
        if f.is_number:
            sign *= 1 if f > 0 else -1
        elif isinstance(base, Param) and e.is_integer:
            positive_params.add(base.name)
        elif base == n.Nq or base == n.Nk:
            continue
        else:
            return None
    return sign


def rule_add(child_dirs):
    """``a + b``: the common direction of the summands."""
    return _same(child_dirs)


def rule_scale(sign, child_dir):
    """``c * x`` with a constant ``c`` of sign ``sign``: ``x``'s direction times the sign."""
    return sign * child_dir


def rule_floor(child_dir):
    """``floor(x / c)`` with ``c >= 1``: ``x``'s direction (floor is non-decreasing)."""
    return child_dir


def rule_extremum(child_dirs):
    """``max(a, b)``, ``min(a, b)``: the common direction."""
    return _same(child_dirs)


def rule_read(index_dir):
    """``t[x]`` for a non-decreasing tensor ``t``: ``x``'s direction."""
    return index_dir


#: the rules the analysis applies, by node; claim mask_mod_sound proves each (a test feeds mutants)
DIRECTION_RULES = {"add": rule_add, "scale": rule_scale, "floor": rule_floor, "extremum": rule_extremum,
                   "read": rule_read}


@dataclass
class _Analysis:
    """What the analysis of one predicate collects besides the directions."""

    positive: set = field(default_factory=set)  # parameters that must be >= 1 at run time
    tensors: dict = field(default_factory=dict)  # tensor name -> "i" (per query) or "j" (per key)


def direction(expr, var, an: _Analysis, rules=DIRECTION_RULES) -> int | None:
    """The direction of ``expr`` in ``var`` (n.i or n.j), or None when no rule applies."""
    if var not in expr.free_symbols and not expr.has(sp.Indexed):
        return 0
    if expr == var:
        return 1
    if isinstance(expr, (sp.Symbol, sp.Number)):
        return 0
    if isinstance(expr, sp.Add):
        dirs = [direction(a, var, an, rules) for a in expr.args]
        return None if None in dirs else rules["add"](dirs)
    if isinstance(expr, sp.Mul):
        const = [a for a in expr.args if var not in a.free_symbols and not a.has(sp.Indexed)]
        moving = [a for a in expr.args if a not in const]
        if len(moving) != 1:
            return None
        sign = _sign_of_constant(sp.Mul(*const), an.positive)
        d = direction(moving[0], var, an, rules)
        return None if sign is None or d is None else rules["scale"](sign, d)
    if isinstance(expr, floor_div):
        num, den = expr.args
        if var in den.free_symbols or den.has(sp.Indexed) or _sign_of_constant(den, an.positive) != 1:
            return None
        d = direction(num, var, an, rules)
        return None if d is None else rules["floor"](d)
    if isinstance(expr, (sp.Max, sp.Min)):
        dirs = [direction(a, var, an, rules) for a in expr.args]
        return None if None in dirs else rules["extremum"](dirs)
    if isinstance(expr, sp.Indexed):
        (index,) = expr.indices
        axis = ("i" if n.i in index.free_symbols else "j" if n.j in index.free_symbols else None)
        if axis is None or (n.i in index.free_symbols and n.j in index.free_symbols) or index.has(sp.Indexed):
            return None
        name = str(expr.base)
        if an.tensors.setdefault(name, axis) != axis:
            return None  # one tensor read both at rows and at keys: which length is it?
        d = direction(index, var, an, rules)
        return None if d is None else rules["read"](d)
    return None


# ----------------------------------------------------------------------------------
# Normal form: a tree of atoms e >= 0
# ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Atom:
    """``e >= 0`` with ``e`` monotone: ``di``, ``dj`` its directions in i and j."""

    e: sp.Expr
    di: int
    dj: int
    source: str  # the user's atom it comes from (for messages and docs)


def _relation(rel) -> list[sp.Expr]:
    """The ``e >= 0`` conjuncts of one integer comparison."""
    a, b = rel.lhs, rel.rhs
    if isinstance(rel, sp.GreaterThan):
        return [a - b]
    if isinstance(rel, sp.StrictGreaterThan):
        return [a - b - 1]
    if isinstance(rel, sp.LessThan):
        return [b - a]
    if isinstance(rel, sp.StrictLessThan):
        return [b - a - 1]
    if isinstance(rel, sp.Equality):
        return [a - b, b - a]
    raise NotInClass(f"atom {rel} is not a comparison <=, <, >=, >, ==, != of integers")


def _integer_valued(e) -> bool:
    """Built from integer symbols and numbers by +, *, integer floor division (``floor_div``
    of integer-valued operands), max, min and tensor reads (a ``floor`` of anything else, a
    rational or float coefficient: not integer-exact)."""
    if isinstance(e, floor_div):
        return all(_integer_valued(a) for a in e.args)
    if isinstance(e, sp.Indexed):
        return True
    if isinstance(e, (sp.Symbol, sp.Number)):
        return e.is_integer is True
    if isinstance(e, (sp.Add, sp.Mul, sp.Max, sp.Min)):
        return all(_integer_valued(a) for a in e.args)
    if isinstance(e, sp.Pow):
        return _integer_valued(e.base) and e.exp.is_Integer and e.exp >= 0
    return False


def normal_form(pred, an: _Analysis, rules=DIRECTION_RULES):
    """``pred`` as a tree ``("and"|"or", [...])``, ``("not", x)``, ``("const", bool)``, ``Atom``;
    raises ``NotInClass`` naming the first atom outside the class."""
    if pred is sp.true or pred is sp.false:
        return ("const", bool(pred))
    if isinstance(pred, sp.And):
        return ("and", [normal_form(a, an, rules) for a in pred.args])
    if isinstance(pred, sp.Or):
        return ("or", [normal_form(a, an, rules) for a in pred.args])
    if isinstance(pred, sp.Not):
        return ("not", normal_form(pred.args[0], an, rules))
    if isinstance(pred, sp.Unequality):
        return ("not", normal_form(sp.Eq(pred.lhs, pred.rhs, evaluate=False), an, rules))
    if not isinstance(pred, sp.core.relational.Relational):
        raise NotInClass(f"{pred} is not a Boolean combination (&, |, ~) of integer comparisons")
    atoms = []
    for e in _relation(pred):
        e = sp.expand(exact_floors(e))  # floors first: expanding floor((i + shift)/c) splits the fraction
        if not _integer_valued(e):
            raise NotInClass(f"atom {pred}: {e} is not integer-valued (use // for division)")
        di, dj = direction(e, n.i, an, rules), direction(e, n.j, an, rules)
        if di is None or dj is None:
            which = " and ".join(v for v, d in (("i", di), ("j", dj)) if d is None)
            raise NotInClass(
                f"atom {pred} is outside the mask_mod class: {e} is not monotone in {which} by the rules "
                f"(sums, positive multiples, // by a positive parameter, max/min, reads of sorted tensors); "
                f"rewrite it as a Boolean combination of monotone comparisons")
        atoms.append(Atom(e, di, dj, str(pred)))
    return atoms[0] if len(atoms) == 1 else ("and", atoms)


# ----------------------------------------------------------------------------------
# The analyser checked: the normal form is the predicate (z3), and integer-exact
# ----------------------------------------------------------------------------------
class AnalyserError(AssertionError):
    """The analyser's normal form differs from the predicate: a bug in ``spec.mask_mod``, not in
    the user's mask_mod (raised at decoration, before any kernel prints it)."""


class _Z3:
    """SymPy integer expressions and predicates as z3 terms, written from their definitions and
    independent of ``_relation``, ``exact_floors`` and ``sp.expand``: a comparison ``a > b`` is
    z3's ``>`` of ``a`` and ``b``; ``floor(x)`` of a rational ``x = a / c`` is z3's ``ToInt`` of
    the real quotient; ``floor_div(a, c)`` is z3's integer division (the floor for ``c >= 1``);
    ``max``/``min`` are ``If``; a tensor read ``t[x]`` applies an uninterpreted function ``t``.
    A floor by a parameter, ``floor((i + shift) / c)``, is one fresh integer per quotient
    ``sp.cancel(x)`` (the same on both sides: an abstraction, so "equivalent" stays sound)."""

    def __init__(self):
        import z3

        self.z3 = z3
        self.leaves: dict = {}
        self.functions: dict = {}

    def sym(self, name):
        return self.z3.Int(name)

    def leaf(self, key):
        if key not in self.leaves:
            self.leaves[key] = self.z3.Int(f"floor_{len(self.leaves)}")
        return self.leaves[key]

    def floor(self, x):
        """``floor(x)`` of a rational ``x``: z3's ``ToInt`` of the real quotient when its
        denominator is a number, else a leaf per quotient ``sp.cancel(x)``."""
        z3 = self.z3
        num, den = sp.fraction(sp.together(x))
        if den.is_number:
            return z3.ToInt(z3.ToReal(self.int(num)) / z3.RealVal(str(den)))
        return self.leaf(sp.cancel(x))

    def int(self, e):
        z3 = self.z3
        if isinstance(e, sp.Integer):
            return z3.IntVal(int(e))
        if isinstance(e, sp.Symbol):
            return self.sym(e.name)
        if isinstance(e, sp.Add):
            return z3.Sum([self.int(a) for a in e.args])
        if isinstance(e, sp.Mul):
            coeff, rest = e.as_coeff_Mul()
            if not coeff.is_Integer:
                raise NotInClass(f"{e} has the non-integer coefficient {coeff}")
            out = z3.IntVal(int(coeff))
            for f in sp.Mul.make_args(rest):
                out = out * self.int(f)
            return out
        if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp >= 0:
            out = z3.IntVal(1)
            for _ in range(int(e.exp)):
                out = out * self.int(e.base)
            return out
        if isinstance(e, sp.floor):
            return self.floor(e.args[0])
        if isinstance(e, floor_div):
            num, den = e.args
            if den.is_Integer and den >= 1:
                return self.int(num) / z3.IntVal(int(den))  # z3's div: the floor for a positive divisor
            return self.leaf(sp.cancel(num / den))
        if isinstance(e, (sp.Max, sp.Min)):
            args = [self.int(a) for a in e.args]
            out = args[0]
            for a in args[1:]:
                out = z3.If(a > out, a, out) if isinstance(e, sp.Max) else z3.If(a < out, a, out)
            return out
        if isinstance(e, sp.Indexed):
            name = str(e.base)
            if name not in self.functions:
                self.functions[name] = z3.Function(name, z3.IntSort(), z3.IntSort())
            (index,) = e.indices
            return self.functions[name](self.int(index))
        raise NotInClass(f"{e}: no integer meaning for {type(e).__name__}")

    def predicate(self, p):
        z3 = self.z3
        if p is sp.true or p is sp.false:
            return z3.BoolVal(bool(p))
        if isinstance(p, sp.And):
            return z3.And([self.predicate(a) for a in p.args])
        if isinstance(p, sp.Or):
            return z3.Or([self.predicate(a) for a in p.args])
        if isinstance(p, sp.Not):
            return z3.Not(self.predicate(p.args[0]))
        a, b = self.int(p.lhs), self.int(p.rhs)
        ops = {sp.GreaterThan: lambda: a >= b, sp.StrictGreaterThan: lambda: a > b, sp.LessThan: lambda: a <= b,
               sp.StrictLessThan: lambda: a < b, sp.Equality: lambda: a == b, sp.Unequality: lambda: a != b}
        return ops[type(p)]()

    def tree(self, t):
        z3 = self.z3
        if isinstance(t, Atom):
            return self.int(t.e) >= 0
        op, arg = t
        if op == "const":
            return z3.BoolVal(arg)
        if op == "not":
            return z3.Not(self.tree(arg))
        return (z3.And if op == "and" else z3.Or)([self.tree(a) for a in arg])


def normal_form_counterexample(predicate, tree):
    """None when the atom tree ``tree`` holds exactly where ``predicate`` does, for all integer
    values of every symbol, parameter and tensor entry (z3: unsat of their difference); else a
    counterexample (dict), or ``"unknown"`` when z3 gives up. The decision procedure that checks
    the analyser (``normal_form``: relations, negations, floors, expansion) at decoration."""
    from spec.proofs.z3_int32 import counterexample  # the proofs' one z3 query (its limits: spec.proofs.tools)

    tr = _Z3()
    return counterexample([], tr.predicate(predicate) == tr.tree(tree))


def integer_exact(expr) -> str | None:
    """None when ``expr`` (a classifier or predicate in kernel form) is integer arithmetic the
    kernels compute exactly: integers, symbols, tensor reads, +, integer multiples and products,
    ``floor_div`` by a positive number or parameter, max/min, comparisons and Boolean
    connectives; else the first offending node (a float ``floor``, a fraction, a float)."""
    for node in sp.preorder_traversal(sp.sympify(expr)):
        if isinstance(node, (sp.floor, sp.ceiling, sp.Float)) or (isinstance(node, sp.Rational)
                                                                  and not node.is_Integer):
            return f"{node} ({type(node).__name__}) in {expr}"
        if isinstance(node, sp.Pow) and not (node.exp.is_Integer and node.exp >= 0):
            return f"{node} (a power that is not a natural number) in {expr}"
        if isinstance(node, floor_div):
            den = node.args[1]
            if den.is_number and not (den.is_Integer and den >= 1):
                return f"{node} (a divisor that is not a positive integer) in {expr}"
    return None


def check_analysis(predicate, tree, name: str = "mask_mod") -> None:
    """Raise ``AnalyserError`` unless ``tree`` is ``predicate`` (z3) and every atom is integer-exact."""
    for atom in _atoms(tree):
        bad = integer_exact(atom.e)
        if bad is not None:
            raise AnalyserError(f"mask_mod {name}: the atom {atom.e} of {atom.source} is not integer-exact: {bad}")
    counter = normal_form_counterexample(predicate, tree)
    if counter is not None:
        raise AnalyserError(f"mask_mod {name}: the analyser's atom tree {tree} differs from the predicate "
                            f"{predicate} at {counter} (z3): a bug in spec.mask_mod's normal form, not in the "
                            f"predicate")


def row_entries(expr) -> list[sp.Expr]:
    """The entries ``e`` of every load ``MM_row[e]`` in a kernel-form expression (``MaskMod.kernel_form``)."""
    return [x.indices[0] for x in sp.preorder_traversal(sp.sympify(expr))
            if isinstance(x, sp.Indexed) and x.base == MM_ROW]


def row_entry_counterexample(exprs, width):
    """None when every entry ``e`` of ``MM_row[e]`` that the kernel-form ``exprs`` read lies in
    ``[0, width)`` for all ``N_Q, N_K >= 1`` and all integer values of every other symbol (rows, keys,
    ``shift``; tile starts ``>= 0`` and block sizes ``>= 1``, their declared signs) and of every
    parameter entry (z3, ``_Z3``'s reading: a tensor
    index read through ``MM_row`` is an uninterpreted function, a floor by a parameter a fresh integer);
    else a counterexample (dict), or ``"unknown"``. The decision procedure the decorator runs on each
    mask_mod's kernel terms: the parameter loads stay inside the row ``pack`` writes."""
    from spec.proofs.z3_int32 import counterexample  # the proofs' one z3 query (its limits: spec.proofs.tools)

    tr = _Z3()
    entries = [e for x in exprs for e in row_entries(x)]
    # the symbols' declared signs (spec.notation: tile starts >= 0, block sizes and N_Q, N_K >= 1), which
    # SymPy already used when it simplified the clamps
    signs = [tr.int(x) >= (1 if x.is_positive else 0) for x in set().union(*[e.free_symbols for e in entries],
                                                                            {n.Nq, n.Nk})
             if x.is_integer and x.is_nonnegative]
    w = tr.int(sp.sympify(width))
    inside = [tr.z3.And(0 <= tr.int(e), tr.int(e) < w) for e in entries]
    return counterexample(signs, tr.z3.And(*inside) if inside else tr.z3.BoolVal(True))


def check_row_entries(mm: "MaskMod") -> None:
    """Raise ``AnalyserError`` unless every parameter load of ``mm``'s kernel terms reads inside its row."""
    exprs = [t.expr for t in mm.kernel_terms() + (mm.keep_term(),)]
    width = mm.row_layout()[1]
    counter = row_entry_counterexample(exprs, width)
    if counter is not None:
        raise AnalyserError(f"mask_mod {mm.name}: a parameter load of its kernel terms reads outside the row of "
                            f"{width} entries at {counter} (z3): a bug in spec.mask_mod's kernel form, "
                            f"not in the predicate")


def _atoms(tree):
    if isinstance(tree, Atom):
        yield tree
        return
    op, arg = tree
    if op == "not":
        yield from _atoms(arg)
    elif op in ("and", "or"):
        for a in arg:
            yield from _atoms(a)


# ----------------------------------------------------------------------------------
# The three-valued corner classifier
# ----------------------------------------------------------------------------------
def corner(d: int, want: str, ends) -> sp.Expr:
    """The end of ``ends`` (first, last) where an atom of direction ``d`` is smallest
    (``want="min"``) or largest (``"max"``): non-decreasing -> min at the first index."""
    first, last = ends
    low_first = d >= 0
    return first if (want == "min") == low_first else last


def atom_rule(e_min, e_max):
    """``(all, none)`` of one atom ``e >= 0`` from its extremes on the tile."""
    return sp.Ge(e_min, 0), sp.Lt(e_max, 0)


def _and(states):
    return sp.And(*[a for a, _ in states]), sp.Or(*[x for _, x in states])


def _or(states):
    return sp.Or(*[a for a, _ in states]), sp.And(*[x for _, x in states])


def _not(state):
    a, x = state
    return x, a


#: Kleene's strong three-valued logic on (all, none) pairs: all = true on the whole tile,
#: none = false on the whole tile (both False: mixed)
KLEENE = {"and": _and, "or": _or, "not": _not}


def classify_tree(tree, extreme, kleene=KLEENE, rule=atom_rule):
    """``(all, none)`` of a normal-form tree; ``extreme(atom, "min"|"max")`` gives an atom's
    value at its min / max corner."""
    if isinstance(tree, Atom):
        return rule(extreme(tree, "min"), extreme(tree, "max"))
    op, arg = tree
    if op == "const":
        return (sp.true, sp.false) if arg else (sp.false, sp.true)
    if op == "not":
        return kleene["not"](classify_tree(arg, extreme, kleene, rule))
    return kleene[op]([classify_tree(a, extreme, kleene, rule) for a in arg])


def corner_value(atom: Atom, want: str, rows=ROWS, keys=KEYS, corner=corner) -> sp.Expr:
    """The atom's ``e`` at its min / max corner of the tile."""
    return atom.e.xreplace({n.i: corner(atom.di, want, rows), n.j: corner(atom.dj, want, keys)})


# ----------------------------------------------------------------------------------
# MaskMod
# ----------------------------------------------------------------------------------
EMPTY, PARTIAL, FULL = 0, 1, 2

mm_all, mm_none, mm_state, keep_mm = sp.symbols("mm_all mm_none mm_state keep_mm")
#: the one int32 row of parameters of this batch entry (kernel pointer)
MM_ROW = sp.IndexedBase("MM_row", integer=True)


@dataclass(frozen=True, eq=False)
class MaskMod:
    """A predicate of the class, analysed: see the module docstring."""

    name: str
    module: str  # where it is defined (the generator imports ``module:name``)
    params: tuple[str, ...]  # in the function's argument order
    predicate: sp.Basic
    tree: object = field(repr=False)
    tensors: dict = field(repr=False)  # tensor param -> "i" / "j"
    positive: frozenset = field(repr=False)  # params that must be >= 1
    doc: str = ""

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.name}"

    @property
    def scalars(self) -> tuple[str, ...]:
        return tuple(p for p in self.params if p not in self.tensors)

    # --- kernel form ---------------------------------------------------------------
    def row_layout(self, nq=n.Nq, nk=n.Nk) -> tuple[dict, sp.Expr | int]:
        """``(offsets, width)`` of ``MM_row`` for ``nq`` rows and ``nk`` keys (symbols: ``N_Q``, ``N_K``;
        or ints): each parameter's first entry (scalars first, one entry each, then each tensor's
        ``nq`` or ``nk`` entries) and the row's width — the layout ``pack`` writes (ints: plain Python,
        traceable by torch.compile) and ``kernel_form`` reads (the decorator checks, and claim
        ``mask_mod_sound`` proves for the built-ins and probes, that every entry a kernel term reads
        lies in ``[0, width)``: ``row_entry_counterexample``)."""
        offsets, at = {}, 0
        for p in self.scalars:
            offsets[p] = at
            at += 1
        for p in self.params:
            if p in self.tensors:
                offsets[p] = at
                at = at + (nq if self.tensors[p] == "i" else nk)
        return offsets, at

    def _slots(self) -> dict:
        """Offset of each parameter in ``MM_row`` (``row_layout``)."""
        return self.row_layout()[0]

    def kernel_form(self, expr):
        """``expr`` with parameters read from ``MM_row`` (tensor indices clamped into the
        tensor) and ``floor(a / c)`` as ``floor_div(a, c)``: what the kernels evaluate."""
        slots = self._slots()

        def read(ix):
            name, (index,) = str(ix.base), ix.indices
            length = n.Nq if self.tensors[name] == "i" else n.Nk
            return MM_ROW[slots[name] + sp.Min(sp.Max(index, 0), length - 1)]

        expr = exact_floors(expr).replace(lambda x: isinstance(x, sp.Indexed), read)
        return expr.xreplace({Param(p): MM_ROW[slots[p]] for p in self.scalars})

    def classifier(self, rows=ROWS, keys=KEYS, corner=corner, kleene=KLEENE, rule=atom_rule):
        """``(all, none)`` for the tile, in the user's symbols (proofs, docs, numbers)."""
        return classify_tree(self.tree, lambda a, w: corner_value(a, w, rows, keys, corner), kleene, rule)

    def kernel_terms(self) -> tuple[Term, ...]:
        """The per-tile classifier as kernel terms: ``mm_all``, ``mm_none``, ``mm_state``."""
        every, none = self.classifier()
        return (
            Term(mm_all, self.kernel_form(every), CLAIM, "the predicate holds on the whole tile"),
            Term(mm_none, self.kernel_form(none), CLAIM, "the predicate fails on the whole tile"),
            Term(mm_state, sp.Piecewise((EMPTY, mm_none), (FULL, mm_all), (PARTIAL, True)), CLAIM,
                 "0 skip, 2 full (no predicate), 1 partial"),
        )

    def keep_term(self) -> Term:
        """The element predicate of a partial tile."""
        return Term(keep_mm, self.kernel_form(self.predicate), CLAIM, f"mask_mod {self.name}")

    # --- run-time parameters -----------------------------------------------------------
    def pack(self, mask_args, batch: int, nq: int, nk: int, device=None):
        """The int32 ``(batch, L)`` tensor of parameters the kernels read as ``MM_row`` (the layout
        of ``kernel_form``), from ``mask_args`` = ``{name: int | (B,) tensor | (B, N) tensor}``.
        Every problem raises ``ValueError`` / ``TypeError`` naming the parameter and the fix. The
        checks of the values (ids sorted, positive divisors, int32 range) read the tensors on the
        host: under ``torch.compile`` they are skipped (a graph cannot sync); call once eagerly
        to run them."""
        import torch

        from spec.assumptions import limit

        values_checked = not torch.compiler.is_compiling()
        given = given_args(mask_args, self.params, f"mask_mod {self.name}", "mask_args")
        cols = []
        for p in self.params:
            v = given[p]
            if isinstance(v, bool) or not isinstance(v, (int, torch.Tensor)):
                raise TypeError(f"mask_args[{p!r}] must be an int or an integer tensor, got {type(v).__name__}")
            if isinstance(v, int):
                v = torch.tensor(v)
            if v.dtype.is_floating_point or v.dtype == torch.bool or v.is_complex():
                raise TypeError(f"mask_args[{p!r}] must hold integers, got {v.dtype}")
            v = v.to(device) if device is not None else v
            if p in self.tensors:
                length = nq if self.tensors[p] == "i" else nk
                which = "N_q (read at query rows)" if self.tensors[p] == "i" else "N_k (read at keys)"
                if v.dim() == 1:
                    v = v.expand(batch, -1)
                if tuple(v.shape) != (batch, length):
                    raise ValueError(f"mask_args[{p!r}] must have shape (batch, {which}) = ({batch}, {length}), "
                                     f"got {tuple(v.shape)}")
                if values_checked and length > 1 and bool((v[:, 1:] < v[:, :-1]).any()):
                    raise ValueError(f"mask_args[{p!r}] must be non-decreasing along the sequence (sorted "
                                     f"per-position ids, e.g. packed documents in order): the tile classifier "
                                     f"reads its per-tile min and max at the tile's ends")
            else:
                if v.dim() == 0:
                    v = v.expand(batch)
                if tuple(v.shape) != (batch,):
                    raise ValueError(f"mask_args[{p!r}] must be an int or have shape (batch,) = ({batch},), "
                                     f"got {tuple(v.shape)}")
                if values_checked and p in self.positive and bool((v < 1).any()):
                    raise ValueError(f"mask_args[{p!r}] must be >= 1 (mask_mod {self.name} divides or scales "
                                     f"by it), got {v.tolist()}")
                v = v[:, None]
            bound = limit("mask_args_int32")  # |v| <= 2^30: the printed differences fit int32
            if values_checked and v.numel() and (int(v.min()) < -bound or int(v.max()) > bound):
                raise ValueError(f"mask_args[{p!r}] must lie in [-{bound}, {bound}] (the kernels subtract "
                                 f"parameters and positions in int32), got values in [{int(v.min())}, "
                                 f"{int(v.max())}] [mask_args_int32]; renumber document ids from 0")
            if not values_checked:  # a traced graph cannot sync: clamp on the device instead
                v = v.clamp(-bound, bound)
            cols.append((p, v.to(torch.int32)))
        if not cols:
            return torch.zeros((batch, 1), dtype=torch.int32, device=device)
        # each parameter at its offset of row_layout (what kernel_form reads); a fresh contiguous row per
        # batch entry, so MM_row + e (MM_row: the row b the address claims prove) is entry e
        offsets, width = self.row_layout(nq, nk)
        row = torch.empty((batch, width), dtype=torch.int32, device=cols[0][1].device)
        for p, v in cols:
            row[:, offsets[p]:offsets[p] + v.shape[1]] = v
        return row

    def values(self, packed, b: int, nq: int, nk: int) -> dict:
        """Batch entry ``b``'s parameters back from ``pack``'s tensor: ``{name: int or 1-d array}``."""
        row = packed[b].cpu().numpy()
        out = {}
        for p, at in self.row_layout(nq, nk)[0].items():
            if p in self.tensors:
                out[p] = row[at:at + (nq if self.tensors[p] == "i" else nk)]
            else:
                out[p] = int(row[at])
        return out

    def dense_batch(self, packed, nq: int, nk: int, shift: int) -> np.ndarray:
        """Boolean ``(B, nq, nk)``: the predicate of every batch entry of ``pack``'s tensor."""
        return np.stack([self.dense(nq, nk, shift, self.values(packed, b, nq, nk)) for b in range(packed.shape[0])])

    # --- numbers -----------------------------------------------------------------------
    def _numeric(self, expr, args: tuple):
        bases = [sp.IndexedBase(t, integer=True) for t in self.tensors]
        plain = {Param(p): sp.Symbol(p, integer=True) for p in self.scalars}  # no __getitem__ for lambdify
        syms = [n.i, n.j, n.shift, n.Nq, n.Nk, n.start_m, n.start_n, n.B_r, n.B_c] + list(plain.values()) + bases
        f = _lambdify(tuple(syms), exact_floors(expr).xreplace(plain))  # integer division stays integer
        return f(*args)

    def dense(self, nq: int, nk: int, shift: int, values: dict) -> np.ndarray:
        """Boolean ``(nq, nk)`` of the predicate for one batch entry's ``values``
        (``{param: int or 1-d array}``), True = attend."""
        ii, jj = np.meshgrid(np.arange(nq), np.arange(nk), indexing="ij")
        grid = lambda x: np.full((nq, nk), int(x))  # noqa: E731  (scalars as arrays: And/Or broadcast)
        args = (ii, jj, grid(shift), grid(nq), grid(nk), 0, 0, 1, 1, *[grid(values[p]) for p in self.scalars],
                *[np.asarray(values[t]) for t in self.tensors])
        out = self._numeric(self.predicate, args)
        return np.broadcast_to(np.asarray(out, dtype=bool), (nq, nk)).copy()

    def classify(self, start_m_: int, start_n_: int, br: int, bc: int, nq: int, nk: int, shift: int,
                 values: dict, **variants) -> str:
        """'skip' / 'full' / 'partial' of one tile from the corner classifier, with tensor reads
        clamped as in the kernels. ``variants``: ``classifier``'s mutant hooks (tests)."""
        every, none = self.classifier(**variants)
        args = (0, 0, shift, nq, nk, start_m_, start_n_, br, bc, *[int(values[p]) for p in self.scalars],
                *[_clamped(np.asarray(values[t])) for t in self.tensors])
        a, x = (bool(self._numeric(sp.sympify(c), args)) for c in (every, none))
        return "skip" if x else ("full" if a else "partial")


class _clamped(np.ndarray):
    """A 1-d array read with its index clamped into range (the kernels' tensor reads)."""

    def __new__(cls, a):
        return np.asarray(a).view(cls)

    def __getitem__(self, k):
        return np.asarray(self)[min(max(int(k), 0), len(self) - 1)]


@functools.lru_cache(maxsize=None)
def _lambdify(syms, expr):
    if expr.has(sp.floor):
        raise ValueError(f"{expr}: a float floor in the numeric model (write it floor_div: exact_floors)")
    return sp.lambdify(syms, expr, modules=[{"floor_div": np.floor_divide}, "numpy"])


def analyse(predicate, name: str = "mask_mod", params=(), module: str = "__main__", doc: str = "") -> MaskMod:
    """Check ``predicate`` is in the class and build its ``MaskMod`` (``NotInClass`` if not)."""
    predicate = sp.sympify(predicate)
    if not isinstance(predicate, sp.logic.boolalg.Boolean):
        raise NotInClass(f"mask_mod {name} returned {predicate!r}, not a predicate (a comparison or a "
                         "Boolean combination of comparisons)")
    an = _Analysis()
    tree = normal_form(predicate, an)
    check_analysis(predicate, tree, name)  # the analyser's output against the predicate, by z3
    unknown = sorted(str(s) for s in predicate.free_symbols
                     if s not in INDEX_ARGS.values() and str(s) not in params and not isinstance(s, sp.Indexed))
    if unknown:
        raise NotInClass(f"mask_mod {name} uses undeclared symbol(s) {unknown}: make them arguments")
    mm = MaskMod(name, module, tuple(params), predicate, tree, dict(an.tensors), frozenset(an.positive), doc)
    check_row_entries(mm)  # every parameter load of its kernel terms inside the row pack writes, by z3
    return mm


#: every mask_mod defined so far, by name (the runtime finds a kernel's mask_mod by it)
REGISTRY: dict[str, "MaskMod"] = {}


def mask_mod(fn):
    """Decorator: a function of SymPy symbols (``i``, ``j``, optionally ``shift``, ``N_Q``, ``N_K``,
    then named integer parameters) returning a predicate of the class becomes a ``MaskMod``.

    Emit its kernels with ``python -m generator --br 64 --bc 64 --mask-mod module:name``, then
    ``flash_attention(q, k, v, mask_mod=fn, mask_args={...})``.
    """
    return decorate(fn, INDEX_ARGS, Param, analyse, REGISTRY)


def given_args(args, params, who: str, keyword: str) -> dict:
    """``args`` as a dict holding exactly ``params``; ValueError naming the missing or unknown ones."""
    given = dict(args or {})
    missing = [p for p in params if p not in given]
    extra = [p for p in given if p not in params]
    if missing or extra:
        raise ValueError(f"{who} takes {keyword} {list(params)}; "
                         + (f"missing {missing}" if missing else f"unknown {extra}"))
    return given


def decorate(fn, index_args: dict, param, analyse_fn, registry: dict):
    """The decorators' common part (``mask_mod``, ``spec.score_mods.score_mod``): call ``fn`` on the
    index symbols and a ``param`` symbol per other argument, analyse the result, register it by name."""
    args = list(inspect.signature(fn).parameters)
    params = [a for a in args if a not in index_args]
    symbols = {a: index_args[a] if a in index_args else param(a) for a in args}
    mod = analyse_fn(fn(**symbols), fn.__name__, params, fn.__module__, inspect.getdoc(fn) or "")
    registry[mod.name] = mod
    return mod


def resolve_ref(ref: str, cls, option: str, example: str, home: str):
    """``"module:name"`` -> the ``cls`` object defined there; ValueError naming ``option``'s form."""
    module, _, name = ref.partition(":")
    if not module or not name:
        raise ValueError(f"--{option} takes module:name (e.g. {example}), got {ref!r}")
    obj = getattr(importlib.import_module(module), name, None)
    if not isinstance(obj, cls):
        what = option.replace("-", "_")
        raise ValueError(f"{ref} is not a {what} (define it with the @{what} decorator of {home})")
    return obj


def resolve(ref: str) -> MaskMod:
    """``"module:name"`` -> the MaskMod defined there."""
    return resolve_ref(ref, MaskMod, "mask-mod", "spec.masks:prefix_lm", "spec.masks")


# ----------------------------------------------------------------------------------
# Built-ins (i' = i + shift)
# ----------------------------------------------------------------------------------
@mask_mod
def prefix_lm(i, j, shift, prefix):
    """Prefix-LM: every query sees the prefix ``j < prefix`` (bidirectional), causal after it."""
    return (j < prefix) | (j <= i + shift)


@mask_mod
def chunked(i, j, shift, chunk):
    """Chunked local attention (Llama 4): a query sees its own chunk only; combine with causal=True."""
    return sp.Eq((i + shift) // chunk, j // chunk)


@mask_mod
def sink_window(i, j, shift, sinks, left):
    """StreamingLLM: the first ``sinks`` keys plus a causal window of ``left`` keys back."""
    return (j < sinks) | ((i + shift - left <= j) & (j <= i + shift))


@mask_mod
def document(i, j, doc_q, doc_k):
    """Packed documents: a query sees the keys of its own document (ids non-decreasing);
    combine with causal=True for causal packing."""
    return sp.Eq(doc_q[i], doc_k[j])


BUILTINS = (prefix_lm, chunked, sink_window, document)
