"""Proof that the mask_mod tile classifier (``spec.mask_mod``) is sound for the whole class.

Made once, for every predicate the decorator admits, not per mask: the classifier of a
predicate is built only from the pieces proved here, so a new mask_mod needs no new proof.

1. **Direction rules** (``mask_mod.DIRECTION_RULES``): each rule the analysis applies to a
   node gives a direction the node really has. A child of direction ``d`` moves by an
   increment ``d·s`` (``s >= 0``); the node's increment must then have the sign the rule
   claims (``0``: no change). Sums and constant multiples by algebra; ``floor(x / c)``
   (``c >= 1``) by its definition ``floor(y) = y - r``, ``0 <= r < 1``: the increment is an
   integer ``> -1`` (or ``< 1``); ``max``/``min`` by their lattice rules (``implies``); a
   read ``t[x]`` of a non-decreasing tensor moves with ``x`` (the run time checks the ids
   are sorted); the kernels' clamp of a tensor index is non-decreasing.
2. **Corner lemma**: for an atom ``e`` monotone in ``i`` (direction ``di``) and in ``j``
   (``dj``), the corners ``mask_mod.corner`` picks satisfy ``e(min corner) <= e(i, j) <=
   e(max corner)`` for every ``(i, j)`` of the tile: by monotonicity in ``i`` then in ``j``,
   each step licensed by the corner lying on the right side of every row ``start_m + a``
   (``0 <= a < B_r``) and key ``start_n + b`` — decided by SymPy with slack variables, for
   every tile position and size and every direction pair. Reading the corners of a sorted
   per-position tensor is reading its per-tile min and max (the document-id atom).
3. **Atom rule** (``mask_mod.atom_rule``): ``all = e_min >= 0`` implies ``e >= 0`` on the tile,
   ``none = e_max < 0`` implies ``e < 0`` (integers), from the corner lemma's bounds.
4. **Kleene's rules** (``mask_mod.KLEENE``): if the children's pairs ``(all, none)`` are sound
   (``all`` => the child holds at the point, ``none`` => it fails), the combined pair is sound
   for ``&``, ``|`` (two and three operands) and ``~``: a propositional validity, decided by
   SymPy's SAT solver over every assignment. By induction on the tree, every Boolean
   combination of sound atoms is sound.

5. **What the kernel prints** (``spec.printer``): ``floor_div(a, c)`` is printed as
   ``tl.where(a < 0, -1 - (-1 - a) // c, a // c)``; that text, read back with ``//``
   truncating (compiled Triton) and with ``//`` flooring, is ``floor(a / c)`` for every int32
   ``a`` and ``1 <= c < 2**31``, with no step of either branch outside int32 (z3). (The form it
   replaced, ``(a // c) * c > a``, overflowed in its product when ``//`` floors.) The
   analysis writes every floor as ``floor_div`` *before* expanding an atom, so the corner
   terms and their numeric model (``MaskMod.classify``) divide integers exactly: for the
   built-ins and the probe predicates (``PROBES``: every relation, ``~``, ``!=``, floors by a
   number and by a parameter, max/min, tensor reads; ``floor((i + shift)/c) >= 1`` among them,
   whose split fraction once floored ``-0.4 + 1.4 = 0.9999999999999999``), every classifier
   and element predicate in kernel form is integer-exact (``mask_mod.integer_exact``) and its
   printed Triton text holds no true division.
6. **The analyser** (``mask_mod.normal_form``: predicate -> atoms ``e >= 0``) is checked, not
   trusted: its tree is equivalent to the predicate for all integers (z3,
   ``mask_mod.normal_form_counterexample``). The decorator runs that check for every
   predicate it admits (``AnalyserError`` otherwise); here it runs on the probes.
7. **The parameter row**: every load ``MM_row[e]`` of the kernel terms reads an entry of
   ``[0, W)``, ``W`` the width of the row ``MaskMod.pack`` writes (``MaskMod.row_layout``, the
   layout ``kernel_form`` reads): z3 over all sizes, tile positions and parameter values
   (``mask_mod.row_entry_counterexample``), run by the decorator for every predicate it admits and
   here on the built-ins and probes (a tensor read's clamp keeps its index inside its own entries).

Hence: ``none`` on a tile => no entry of it is attended (skip is safe); ``all`` => every
entry is attended (running it without the predicate is exact).
"""

from __future__ import annotations

import ast
from itertools import product

import sympy as sp
import z3

from spec import mask_mod as MM
from spec import notation as n
from spec.printer import print_expr
from spec.proofs.tools import ZERO, nonnegative, result
from spec.proofs.masks import implies
from spec.proofs.z3_int32 import counterexample
from spec.registry import claim

DIRS = (-1, 0, 1)


def _sign_case(name, delta, d):
    """``delta`` has the sign of direction ``d`` (0: is zero)."""
    if d == 0:
        return name, ZERO if sp.expand(delta) == 0 else delta
    return name, nonnegative(sp.expand(d * delta))


def _direction_rule_cases(rules):
    s1, s2 = sp.symbols("s_1 s_2", integer=True, nonnegative=True)
    x1, x2 = sp.symbols("x_1 x_2", integer=True)
    c = sp.Symbol("c", positive=True)
    cases = []
    for d1, d2 in product(DIRS, DIRS):
        got = rules["add"]([d1, d2])
        if got is not None:
            cases.append(_sign_case(f"add({d1}, {d2}) -> {got}", d1 * s1 + d2 * s2, got))
        for sign in (1, -1):
            if d2 == 0:
                got = rules["scale"](sign, d1)
                cases.append(_sign_case(f"scale({sign}, {d1}) -> {got}", sign * c * d1 * s1, got))
        got = rules["extremum"]([d1, d2])
        if got is not None:
            for f in (sp.Max, sp.Min):
                delta = f(x1 + d1 * s1, x2 + d2 * s2) - f(x1, x2)
                name = f"{f.__name__.lower()}({d1}, {d2}) -> {got}"
                cases.append((name, implies([], got * delta) if got != 0 else
                              (ZERO if sp.expand(delta) == 0 else delta)))
    for d in DIRS:
        got = rules["floor"](d)
        # floor(y) = y - r, 0 <= r < 1: floor((x + d s)/c) - floor(x/c) = d s/c + r0 - r1, an integer;
        # an integer D with got·D > -1 has got·D >= 0
        if got == 0:
            cases.append((f"floor({d}) -> 0", ZERO if d == 0 else sp.Tuple(d, got)))
        else:
            r, u = sp.Symbol("r", nonnegative=True), sp.Symbol("u", positive=True)
            r0, r1 = (r, 1 - u) if got == 1 else (1 - u, r)
            strict = sp.expand(got * (d * s1 / c + r0 - r1) + 1)
            cases.append((f"floor({d}) -> {got}: integer increment times {got} > -1",
                          ZERO if strict.is_positive is True else strict))
        got = rules["read"](d)
        cases.append((f"read(t non-decreasing, index {d}) -> {got}", ZERO if got == d else sp.Tuple(d, got)))
    length = sp.Symbol("L", integer=True, positive=True)
    clamp = lambda x: sp.Min(sp.Max(x, 0), length - 1)  # noqa: E731  (the kernels' tensor read)
    cases.append(("clamp(x) = min(max(x, 0), L - 1) is non-decreasing", implies([], clamp(x1 + s1) - clamp(x1))))
    return cases


def _corner_cases(corner):
    """Every (di, dj) and min / max: the chosen corner is on the right side of every row and key."""
    a, c_, b, e = sp.symbols("a c b e", integer=True, nonnegative=True)
    tile = {n.B_r: a + 1 + c_, n.B_c: b + 1 + e}  # row start_m + a, key start_n + b inside the tile
    row, key = n.start_m + a, n.start_n + b
    cases = []
    for d, want, ends, point, axis in [(d, w, MM.ROWS, row, "i") for d in DIRS for w in ("min", "max")] + \
                                      [(d, w, MM.KEYS, key, "j") for d in DIRS for w in ("min", "max")]:
        if d == 0:
            continue  # e does not move along this axis: any corner gives its value
        at = MM.corner(d, want, ends) if corner is None else corner(d, want, ends)
        # min corner of a non-decreasing e: at <= point; of a non-increasing one: at >= point
        gap = (point - at) if (d > 0) == (want == "min") else (at - point)
        cases.append((f"corner {want} of an e with direction {d:+d} in {axis}: {at} bounds every {axis} of the tile",
                      nonnegative(sp.expand(gap.xreplace(tile)))))
    return cases


def _linear(rel):
    """``h`` with ``rel <=> h >= 0`` (integers)."""
    a, b = rel.lhs, rel.rhs
    return {sp.GreaterThan: a - b, sp.StrictGreaterThan: a - b - 1, sp.LessThan: b - a,
            sp.StrictLessThan: b - a - 1}[type(rel)]


def _atom_cases(rule):
    e, e_min, e_max = sp.symbols("e e_min e_max", integer=True)
    every, none = rule(e_min, e_max)
    return [
        ("atom: all (from e_min <= e) => e >= 0", implies([e - e_min, _linear(every)], e)),
        ("atom: none (from e <= e_max) => e < 0", implies([e_max - e, _linear(none)], -e - 1)),
    ]


def _kleene_cases(kleene):
    """Soundness of each rule as a propositional validity (SAT: no counterexample)."""
    cases = []
    for op, arity in (("and", 2), ("and", 3), ("or", 2), ("or", 3), ("not", 1)):
        every = sp.symbols(f"all_:{arity}")
        none = sp.symbols(f"none_:{arity}")
        point = sp.symbols(f"p_:{arity}")  # each child's value at one point of the tile
        sound = sp.And(*[sp.Implies(every[k], point[k]) & sp.Implies(none[k], ~point[k]) for k in range(arity)])
        states = list(zip(every, none))
        got_all, got_none = kleene["not"](states[0]) if op == "not" else kleene[op](states)
        value = {"and": sp.And, "or": sp.Or}[op](*point) if op != "not" else ~point[0]
        claim_ = sp.Implies(sound, sp.Implies(got_all, value) & sp.Implies(got_none, ~value))
        counter = sp.satisfiable(~claim_)
        cases.append((f"kleene {op}/{arity}: sound children => sound result",
                      ZERO if counter is False else sp.Tuple(*[sp.Eq(k, v) for k, v in counter.items()])))
    return cases


# ----------------------------------------------------------------------------------
# 5. What the kernel prints: floor_div's text, integer-exact classifiers
# ----------------------------------------------------------------------------------
def _read_printed(text, env, floordiv, values):
    """The integer value of printed Triton ``text`` (``+ - *``, unary ``-``, ``//`` as ``floordiv``,
    comparisons, ``tl.where``) over z3 integers; every intermediate value, of both branches of a
    ``tl.where`` (the kernel computes both), lands in ``values``."""

    def ev(node):
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return z3.IntVal(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            values.append(-ev(node.operand))
            return values[-1]
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.FloorDiv: lambda: floordiv(a, b)}
            if type(node.op) not in ops:
                raise ValueError(f"{text!r}: no integer rule for {ast.unparse(node)!r}")
            values.append(ops[type(node.op)]())
            return values[-1]
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = ev(node.left), ev(node.comparators[0])
            return {ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b, ast.Lt: lambda: a < b,
                    ast.LtE: lambda: a <= b, ast.Eq: lambda: a == b}[type(node.ops[0])]()
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.where" and len(node.args) == 3:
            return z3.If(*[ev(x) for x in node.args])
        raise ValueError(f"{text!r}: no integer rule for {ast.unparse(node)!r}")

    return ev(ast.parse(text, mode="eval").body)


def _printed_floor_div_cases(printed):
    """``printed`` (the Triton text of ``floor_div(a, c)``) is ``floor(a / c)`` in int32, both
    roundings of ``//``, with no step of either branch overflowing."""
    a, c = z3.Ints("a c")
    int32 = lambda x: z3.And(x >= -2**31, x <= 2**31 - 1)  # noqa: E731
    facts = [int32(a), c >= 1, c <= 2**31 - 1]
    floor = a / c  # z3's integer division: the floor for c >= 1
    cases = []
    for name, div in (("truncating // (compiled Triton)", lambda x, y: z3.If(x >= 0, x / y, -((-x) / y))),
                      ("flooring // (the interpreter)", lambda x, y: x / y)):
        values = []
        got = _read_printed(printed, {"a": a, "c": c}, div, values)
        model = counterexample(facts, z3.And(got == floor, *[int32(v) for v in values]))
        cases.append((f"printed floor_div `{printed}` = floor(a/c) for int32 a, 1 <= c < 2**31, {name}; no "
                      f"step of either branch leaves int32", ZERO if model is None else
                      sp.Symbol(f"counterexample {model}")))
    return cases


C_, T_Q, T_K = MM.Param("c"), MM.Param("t_q"), MM.Param("t_k")
#: predicates that exercise every path of the analyser (with the built-ins): each relation, ~, !=,
#: floors by a number and by a parameter, a multiple of a floor, max/min, tensor reads
PROBES = (
    ("floor((i + shift)/c) >= 1", sp.Ge(sp.floor((n.i + n.shift) / C_), 1), ("c",)),
    ("floor((i + shift)/5) > floor(j/5)", sp.Gt(sp.floor((n.i + n.shift) / 5), sp.floor(n.j / 5)), ()),
    ("j >= c*floor((i + shift)/c)", sp.Ge(n.j, C_ * sp.floor((n.i + n.shift) / C_)), ("c",)),
    ("i > j", sp.Gt(n.i, n.j), ()),
    ("j < i - 2 | j >= i + shift", sp.Lt(n.j, n.i - 2) | sp.Ge(n.j, n.i + n.shift), ()),
    ("~(j <= i) & (i != j + 3)", ~sp.Le(n.j, n.i) & sp.Ne(n.i, n.j + 3), ()),
    ("Eq(max(i, j), 3) | min(2i, 3 - j) <= 2", sp.Eq(sp.Max(n.i, n.j), 3) | sp.Le(sp.Min(2 * n.i, 3 - n.j), 2), ()),
    ("t_q[i] != t_k[j]", sp.Ne(T_Q[n.i], T_K[n.j]), ("t_q", "t_k")),
    # a scalar and two tensors in one row, a tensor read at an index holding a parameter (MM_row inside MM_row)
    ("t_k[j + c] >= t_q[i] + c", sp.Ge(T_K[n.j + C_], T_Q[n.i] + C_), ("t_q", "t_k", "c")),
)


def _probe_masks(analyse):
    """The built-ins (re-analysed) and the probes, each as (label, MaskMod or the error)."""
    out = []
    for label, pred, params in [(m.name, m.predicate, m.params) for m in MM.BUILTINS] + list(PROBES):
        try:
            out.append((label, pred, analyse(pred, "probe", params)))
        except (MM.NotInClass, MM.AnalyserError) as e:
            out.append((label, pred, e))
    return out


def _row_cases(masks, kernel_form):
    """Each probe's parameter loads (``kernel_form``: ``MaskMod.kernel_form``) read entries of ``[0, width)``,
    the row ``MaskMod.pack`` writes (``MaskMod.row_layout``), for all sizes and values (z3)."""
    cases = []
    for label, _pred, mm in masks:
        if isinstance(mm, Exception):
            continue  # reported by _printed_cases
        every, none = mm.classifier()
        exprs = [kernel_form(mm, x) for x in (every, none, mm.predicate)]
        width = mm.row_layout()[1]
        counter = MM.row_entry_counterexample(exprs, width)
        reads = sum(len(MM.row_entries(x)) for x in exprs)
        cases.append((f"kernel form of {label}: its {reads} parameter loads read entries of [0, {width}), the row "
                      "pack writes (z3, all N_Q, N_K >= 1)", ZERO if counter is None else sp.Symbol(f"outside at {counter}")))
    return cases


def _printed_cases(masks):
    """Each probe's analysis is its predicate (z3), and its kernel terms are integer-exact."""
    cases = []
    for label, pred, mm in masks:
        if isinstance(mm, Exception):
            cases.append((f"analyse {label}", sp.Symbol(f"{type(mm).__name__}: {mm}")))
            continue
        counter = MM.normal_form_counterexample(pred, mm.tree)
        cases.append((f"analyser: the atom tree of {label} is the predicate (z3, all integers)",
                      ZERO if counter is None else sp.Symbol(f"differs at {counter}")))
        terms = mm.kernel_terms() + (mm.keep_term(),)
        bad = [MM.integer_exact(t.expr) for t in terms]
        bad += [f"true division in {txt}" for txt in (print_expr(t.expr) for t in terms)
                if "/" in txt.replace("//", "")]
        bad = [b for b in bad if b is not None]
        cases.append((f"kernel form of {label}: integer-exact classifier and predicate, printed without /",
                      ZERO if not bad else sp.Symbol(bad[0])))
    return cases


@claim(MM.CLAIM,
       "for every mask_mod predicate of the class (Boolean combinations of integer comparisons, each "
       "monotone in the query index i and in the key index j separately by the direction rules, document "
       "ids included), the three-valued corner classifier with Kleene's rules never skips a tile holding "
       "an attended entry and never runs without the predicate a tile holding a masked one — for all "
       "integer tile positions, block sizes and parameter values; the analyser's atoms are the predicate "
       "(z3, checked at decoration) and the printed classifier divides integers exactly (floor_div); every "
       "parameter load MM_row[e] of the kernel terms (classifier and element predicate, tensor indices clamped) "
       "reads an entry e in [0, W), W the width of the int32 row MaskMod.pack writes (MaskMod.row_layout: one "
       "entry per scalar, N_Q or N_K per tensor), for all N_Q, N_K >= 1, tile positions and sizes and parameter "
       "values (z3, checked at decoration); with MM_row = mask_mod_args[b, 0] (claims forward_addresses, "
       "backward_kernel_addresses: the row stride spec.launch.mask_mod_strides passes) and pack's fresh "
       "contiguous row, the load reads mask_mod_args[b, e], inside the (B, W) tensor",
       r"\mathrm{none}(T)\Rightarrow\forall (i,j)\in T: \neg P(i,j);\quad "
       r"\mathrm{all}(T)\Rightarrow\forall (i,j)\in T: P(i,j)",
       terms=(),
       scope="symbolic: all integer tile positions, block sizes and parameter values; every predicate of the "
             "class (direction rules, corner lemma, atom rule, Kleene's connectives), exact; the printed floor_div "
             "in int32 (z3, either rounding of //); the analyser checked per predicate by z3 at decoration (here: "
             "the built-ins and the probes); the built-ins by membership; the row entries per predicate by z3 over "
             "the integers (tile starts >= 0, block sizes >= 1: their declared signs), at decoration for every "
             "mask_mod, here for the built-ins and the probes")  # its terms (mm_all, mm_none, mm_state) are per mask_mod: docs/mask_mod.md shows the built-ins
def prove_mask_mod_sound(rules=MM.DIRECTION_RULES, corner=None, rule=MM.atom_rule, kleene=MM.KLEENE,
                         printed_floor_div=None, analyse=None, kernel_form=MM.MaskMod.kernel_form):
    cases = _direction_rule_cases(rules) + _corner_cases(corner) + _atom_cases(rule) + _kleene_cases(kleene)
    a, c = sp.symbols("a c", integer=True)
    cases += _printed_floor_div_cases(printed_floor_div or print_expr(MM.floor_div(a, c)))
    masks = _probe_masks(analyse or MM.analyse)
    cases += _printed_cases(masks)
    cases += _row_cases(masks, kernel_form)
    cases += [(f"built-in {m.name} is in the class ({len(m.params)} parameter(s))", ZERO) for m in MM.BUILTINS]
    return result(MM.CLAIM, cases,
                  "direction rules, corner lemma for every direction pair, atom rule, Kleene's and/or/not: "
                  "sound for every predicate of the class")
