"""The small kit every proof uses: reduce to a canonical zero, decide a sign, run kernel terms.

Rules the claims follow (see ``spec.claims``):

* an equality is PROVED only when ``reduce_zero(lhs - rhs)`` returns the integer 0;
* an inequality is PROVED only when SymPy's assumptions *decide* its sign
  (``expr.is_nonnegative is True``): the case conditions are encoded as slack variables
  with assumptions (``x >= y`` becomes ``x = y + t``, ``t >= 0``), never as samples;
* anything undecided is a FAILED case, carrying the expression that did not reduce.

``interpret`` gives the kernel's uninterpreted row operations (``spec.terms``) their meaning
on a symbolic block, so the claims are about the very terms the generator prints.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from itertools import product
from typing import Iterable, Mapping

import sympy as sp
from sympy.codegen.cfunctions import exp2, log2

from spec import terms
from spec.recurrences import E, State
from spec.registry import Result

ZERO = sp.Integer(0)


# ----------------------------------------------------------------------------------
# Canonical zero
# ----------------------------------------------------------------------------------
#: the residuals this process has reduced to the canonical zero, by ``_residual_key`` (the deciding function's
#: name and the residual's exact text): a residual is a pure function of its text, so the same text is 0 again
#: without SymPy's rewriting (seconds per case). Only zeros are kept: a residual that is not 0 is always
#: recomputed. A claim re-run with one term mutated (tests/test_citations.py, tests/test_mutants.py) re-decides
#: only the cases that term changes; a changed term changes the text. The z3 queries' twin: ``_PROVED_QUERIES``.
_PROVED_RESIDUALS: set[str] = set()


def _residual_key(decider: str, expr: sp.Basic) -> str:
    """``decider``'s case ``expr`` as text: its ``srepr`` (every symbol's name and assumptions, every number
    exact), a digest of it: two cases share a key only when their texts are equal."""
    return hashlib.sha256(f"{decider}\n{sp.srepr(expr)}".encode()).hexdigest()


def keeps_zeros(decide_residual):
    """``decide_residual(expr) -> residual`` that keeps the texts it reduced to the canonical zero
    (``_PROVED_RESIDUALS``) and answers them with 0 again at once."""

    @functools.wraps(decide_residual)
    def decided(expr):
        expr = sp.sympify(expr)
        key = _residual_key(decide_residual.__qualname__, expr)
        if key in _PROVED_RESIDUALS:
            return ZERO
        residual = decide_residual(expr)
        if residual is ZERO:
            _PROVED_RESIDUALS.add(key)
        return residual

    return decided


def natural_exp(expr: sp.Basic) -> sp.Basic:
    """Rewrite the kernels' ``exp2``/``log2`` as ``exp``/``log`` (definitions, not lemmas)."""
    return expr.replace(exp2, lambda a: sp.exp(a * sp.log(2))).replace(
        log2, lambda a: sp.log(a) / sp.log(2))


def _push_positive_factor(e: sp.Mul) -> sp.Basic:
    """``c·max(a, b) = max(c·a, c·b)`` for ``c > 0`` (max is monotone); same for min.

    A negative ``c`` is split as ``-|c|``: ``-|c|·max(a, b) = -max(|c|·a, |c|·b)``.
    """
    extrema = [f for f in e.args if isinstance(f, (sp.Max, sp.Min))]
    if len(extrema) != 1:
        return e
    c = sp.Mul(*[f for f in e.args if f is not extrema[0]])
    sign = 1
    if c.is_negative is True:
        sign, c = -1, -c
    if c.is_positive is not True:
        return e
    return sign * extrema[0].func(*[sp.expand(c * a) for a in extrema[0].args])


def push_factors(expr: sp.Basic) -> sp.Basic:
    """Move positive constant factors inside ``Max``/``Min`` so both sides meet in one form."""
    return sp.expand(expr, power_exp=False, log=False).replace(
        lambda e: e.is_Mul and any(isinstance(f, (sp.Max, sp.Min)) for f in e.args),
        _push_positive_factor)


@keeps_zeros
def reduce_zero(expr: sp.Basic) -> sp.Basic:
    """Try to reduce ``expr`` to 0: exp2 -> exp, factors into Max, split exps, simplify. One that is
    visibly not 0 at a point of its domain (``nonzero_at_a_point``) is returned as that value at once.

    Returns the residual (the integer 0 on success). ``nan`` never reduces: it is returned
    as is, so a NaN on one side is a failed case, not a silent pass. Infinite maxima are
    not handled here: the claims enumerate them as cases (finite symbol or ``E``), so the
    ``Max`` left in an expression always has finite arguments.
    """
    expr = sp.sympify(expr)
    if expr.has(sp.nan):
        return sp.nan
    if expr == 0:
        return ZERO
    nonzero = nonzero_at_a_point(expr)
    if nonzero is not None:  # no rewriting can reach 0: fail now (a wrong term's simplify takes seconds)
        return nonzero
    expr = sp.expand(push_factors(natural_exp(expr)), power_exp=True)
    if expr == 0:
        return ZERO
    return sp.simplify(expr)


@keeps_zeros
def nonnegative(expr: sp.Basic) -> sp.Basic:
    """0 when SymPy's assumptions decide ``expr >= 0`` (``+oo`` included); else ``expr``.

    Tries ``expr`` as written, then in natural exp with factors moved into ``Max`` (so
    ``Max`` can compare its arguments), then its ``together``/``factor`` form (a sum of
    nonnegative terms over a positive denominator is decided where the expanded form is not).
    """
    expr = sp.sympify(expr)
    if expr.is_extended_nonnegative is True:  # extended: an exponent of -oo is <= 0
        return ZERO
    pushed = push_factors(natural_exp(expr))
    for form in (pushed, lambda: sp.factor(sp.together(sp.expand(pushed, power_exp=True)))):
        form = form() if callable(form) else form
        if form.is_extended_nonnegative is True:
            return ZERO
    return expr


# ----------------------------------------------------------------------------------
# z3: the claims' one solver set-up
# ----------------------------------------------------------------------------------
#: z3's deterministic resource limit per query (``rlimit``: z3 counts its own steps, so a verdict never depends
#: on the machine's load or speed; a wall-clock timeout made a case that proves in 0.1 s return ``unknown``
#: on a loaded machine). Measured with z3-solver 5.4.1 (re-measure on an upgrade), the "rlimit count" each
#: query spends in ``z3_check``: the largest query of ``python -m spec`` (4 runs of 520 queries, and
#: ``prove_launch_grid`` alone under 20 hash seeds) takes 5,704,559, ``launch_grid``'s CUDA-limits case (0.1 M
#: to 5.7 M with PYTHONHASHSEED: SymPy's term order reaches z3); the next, int32_index_arithmetic's, 1,286,736
#: on every run. The mutant tests' (``tests/test_mutants.py -k "decode or paged or ring or int32"``, 1,463
#: queries) largest proved query: 572,063. The limit is 26× the largest; a goal too hard for it fails after
#: about a minute on a loaded machine.
Z3_RLIMIT = 150_000_000
#: a wall-clock backstop only, far above any query of the spec (the slowest takes a few seconds on a loaded
#: machine): z3 checks the resource limit between its steps, and one long step (a huge term's simplification,
#: a bignum) is not cut by it; so a pathological goal still ends. A verdict within the limit never meets it.
Z3_BACKSTOP_MS = 600_000


def z3_solver(ctx=None):
    """A z3 solver (in ``ctx``, z3's main context if None) with the claims' limits: ``Z3_RLIMIT``
    (deterministic) and the wall-clock backstop."""
    import z3

    solver = z3.Solver(ctx=ctx)
    solver.set("rlimit", Z3_RLIMIT)
    solver.set("timeout", Z3_BACKSTOP_MS)
    return solver


def z3_check(hypotheses, statement):
    """z3's answer to ``hypotheses => statement`` for all values of its variables: ``(z3.unsat, None)`` when it
    holds (``hypotheses ∧ ¬statement`` is unsat), ``(z3.sat, model)`` with a counterexample, ``(z3.unknown,
    reason)`` when z3 gives up (the resource limit named when it was reached). The claims' one z3 query.

    Each query runs in a z3 context of its own, so its search (and the resources it spends) does not depend on
    which terms the process built before (z3's search order follows its term table): a case takes the same
    path in ``python -m spec`` as in a test that runs its claim alone. Measured: in the main context the mutant
    tests' queries spent 62.8 M in all (the largest 16.6 M), in contexts of their own 21.9 M (the largest 0.6 M).
    """
    import z3

    hypotheses = list(hypotheses)
    key = _query_key(hypotheses, statement)
    if key in _PROVED_QUERIES:
        return z3.unsat, None
    ctx = z3.Context()
    solver = z3_solver(ctx)
    solver.add(*[h.translate(ctx) for h in hypotheses], z3.Not(statement.translate(ctx)))
    before = _rlimit_count(solver)
    verdict = solver.check()
    if verdict == z3.unsat:
        _PROVED_QUERIES.add(key)
        return verdict, None
    if verdict == z3.sat:
        return verdict, solver.model()
    reason, spent = solver.reason_unknown(), _rlimit_count(solver) - before
    if spent >= Z3_RLIMIT > 0:
        reason = f"{reason}: resource limit reached ({spent} >= Z3_RLIMIT = {Z3_RLIMIT})"
    return verdict, reason


#: the queries this process has proved (``z3_check`` answered unsat), by ``_query_key``: a query is a pure function
#: of its text (deterministic resource limit, a context of its own), so the same text is proved again without z3.
#: Only proofs are kept: a counterexample or an unknown is always recomputed. A claim re-run with one term mutated
#: (tests/test_citations.py) re-proves only the queries that term changes; a changed term changes the text.
_PROVED_QUERIES: set[str] = set()


def _query_key(hypotheses, statement) -> str:
    """The exact query ``hypotheses ∧ ¬statement`` as SMT-LIB text: every constant's declaration (name and sort)
    and every assertion, in order, and the resource limit it runs under (a digest of it: two queries share a key
    only when their texts are equal)."""
    import z3

    text = z3.Solver(ctx=statement.ctx)
    text.add(*hypotheses, z3.Not(statement))
    return hashlib.sha256(f"rlimit {Z3_RLIMIT}\n{text.sexpr()}".encode()).hexdigest()


def _rlimit_count(solver) -> int:
    """The resources z3 has spent in ``solver``'s context so far (its statistic "rlimit count")."""
    stats = solver.statistics()
    return int(stats.get_key_value("rlimit count")) if "rlimit count" in stats.keys() else 0


def z3_verdict(facts, goal) -> sp.Basic:
    """``ZERO`` when z3 proves ``facts => goal``, else a symbol naming its answer: the counterexample (z3's
    model) or why it gave up. A case's residual."""
    import z3

    verdict, why = z3_check(facts, goal)
    if verdict == z3.unsat:
        return ZERO
    return sp.Symbol(f"counterexample: {why}" if verdict == z3.sat else f"z3 {verdict}: {why}")


def decide(name: str, hypotheses, statement) -> tuple[str, sp.Basic]:
    """The case ``(name, residual)`` of ``hypotheses => statement`` (z3, for all values): ``(name, 0)`` when
    proved, else ``z3_verdict``'s counterexample or reason."""
    return name, z3_verdict(hypotheses, statement)


def result(claim_id: str, cases: Iterable[tuple[str, sp.Basic]], how: str) -> Result:
    """A Result: PROVED iff every case's residual is the integer 0."""
    cases = tuple((name, sp.sympify(r)) for name, r in cases)
    bad = [(name, r) for name, r in cases if r != 0]
    if not bad:
        return Result(claim_id, True, f"{how} ({len(cases)} cases)", cases)
    name, r = bad[0]
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    return Result(claim_id, False, f"case '{name}' leaves residual {sp.sstr(r)}{more}", cases)


def equal_cases(pairs: Iterable[tuple[str, sp.Basic, sp.Basic]], residual=None) -> list[tuple[str, sp.Basic]]:
    """``(name, lhs, rhs)`` -> ``(name, residual(lhs, rhs))``; tuples compared piecewise.
    ``residual``: ``difference`` (``reduce_zero(lhs - rhs)``) unless a proof passes its own.
    Within ``first_failure()``, the cases end at the first one whose residual is not 0."""
    residual = residual or difference
    out = []
    for name, lhs, rhs in pairs:
        if isinstance(lhs, (tuple, list)):
            parts = [(f"{name}[{k}]", a, b) for k, (a, b) in enumerate(zip(lhs, rhs, strict=True))]
        else:
            parts = [(name, lhs, rhs)]
        for label, a, b in parts:
            out.append((label, residual(a, b)))
            if _stop_at_first_failure and out[-1][1] != 0:
                return out
    return out


#: set within ``first_failure()``
_stop_at_first_failure = False


@contextlib.contextmanager
def first_failure():
    """Within it, ``equal_cases`` stops at a claim's first failing case: for a test that needs a claim to FAIL
    on a mutated term, and not its other cases (tests/test_mutants.py, tests/test_citations.py). The verdict is
    the same (a claim is PROVED only when every case is 0: the failing case is among the cases ``result``
    sees); the cases after it are neither decided nor reported. ``python -m spec`` and the docs never set it:
    they decide and report every case."""
    global _stop_at_first_failure
    before, _stop_at_first_failure = _stop_at_first_failure, True
    try:
        yield
    finally:
        _stop_at_first_failure = before


def difference(lhs: sp.Basic, rhs: sp.Basic) -> sp.Basic:
    """The residual of ``lhs = rhs``: 0 for a structural identity (also ``-oo = -oo``, where
    the difference would be NaN), else ``reduce_zero(lhs - rhs)``."""
    lhs, rhs = sp.sympify(lhs), sp.sympify(rhs)
    if lhs == rhs and not lhs.has(sp.nan):
        return ZERO
    if lhs.is_infinite or rhs.is_infinite:  # ±oo equals only itself (structurally, above)
        return sp.Tuple(lhs, rhs)
    return reduce_zero(lhs - rhs)


def _sample_point(symbols) -> dict:
    """One point satisfying every symbol's assumptions: distinct primes for integers, distinct small
    rationals (1/997, 1/1009, ...) for the others, negated for a negative or nonpositive symbol."""
    primes, reals = iter(sp.primerange(3, 10**4)), iter(sp.primerange(997, 10**5))
    point = {}
    for s in sorted(symbols, key=sp.default_sort_key):
        value = sp.Integer(next(primes)) if s.is_integer else sp.Rational(1, next(reals))
        point[s] = -value if (s.is_negative or s.is_nonpositive) else value
    return point


def nonzero_at_a_point(residual: sp.Basic) -> sp.Symbol | None:
    """A symbol naming ``residual``'s value at a point of its domain when that value is visibly not 0, else
    None (0 there, or no real value, or a point that is not in the domain: the caller decides as before).

    The point (``_sample_point``) gives each symbol a value satisfying every one of its assumptions (checked
    here, fact by fact: a point outside the domain decides nothing); the value is computed at 50 digits and
    again at 80, and counts only where both are away from 0 and agree. A residual that is not 0 at one point
    of the domain is not identically 0 there, so no value-preserving rewriting (expand, simplify) reduces it
    to the canonical zero: the case fails either way, and this says so without the rewriting (a wrong term's
    ``sp.simplify`` takes seconds). It never makes a case pass."""
    if not isinstance(residual, sp.Expr) or residual.has(sp.Derivative, sp.Integral, sp.Subs):
        return None  # a derivative (integral) is taken in a symbol the point would replace
    symbols = residual.free_symbols
    if not all(isinstance(s, sp.Symbol) for s in symbols):
        return None
    point = _sample_point(symbols)
    if any(getattr(point[s], f"is_{fact}") != holds for s in symbols for fact, holds in s.assumptions0.items()):
        return None
    try:
        at_point = residual.xreplace(point)
        value, check = at_point.evalf(50), at_point.evalf(80)
    except (ValueError, TypeError, ArithmeticError):  # no value there (a term SymPy cannot evaluate)
        return None
    if not (value.is_Float and check.is_Float) or abs(value) <= sp.Float("1e-30"):
        return None
    if abs(value - check) > sp.Float("1e-20") * abs(check):
        return None
    at = ", ".join(f"{s}={v}" for s, v in point.items())
    return sp.Symbol(f"nonzero: got − want = {sp.Float(value, 6)} at {at}")


@keeps_zeros
def expanded_residual(residual: sp.Basic) -> sp.Basic:
    """``sp.expand(residual)`` as a case's residual (0 exactly when the expanded form is 0), without
    expanding a residual that is visibly nonzero: one that is not structurally 0 is first evaluated
    at a point satisfying its symbols' assumptions (50 digits); expand is an identity on that
    domain, so a value away from 0 there means the expanded form is not 0 either, and the case
    fails with that value (a wrong composition's expand takes minutes). A point where it is 0, or
    no real value, leaves the decision to ``sp.expand``."""
    residual = sp.sympify(residual)
    if residual == 0:
        return ZERO
    nonzero = nonzero_at_a_point(residual)
    return nonzero if nonzero is not None else sp.expand(residual)


# ----------------------------------------------------------------------------------
# Interpreting kernel terms on a symbolic block
# ----------------------------------------------------------------------------------
def _elementwise(build, values):
    """Apply ``build(*scalars)`` entrywise when some value is a Matrix.

    Shapes broadcast as in Triton (and NumPy): scalars everywhere, a ``R x 1`` column (``col``)
    across the columns of an ``R x C`` tile, a ``1 x C`` row (``row``) down its rows. Any other
    mismatch is a ``ValueError`` naming the shapes: a term that broadcasts a vector along the
    wrong axis of a non-square tile cannot be formed at all.
    """
    shapes = {v.shape for v in values if isinstance(v, sp.MatrixBase)}
    if not shapes:
        return build(*values)
    rows, cols = max(r for r, _ in shapes), max(c for _, c in shapes)
    if any(r not in (1, rows) or c not in (1, cols) for r, c in shapes):
        raise ValueError(f"tile shapes do not broadcast: {sorted(shapes)}")

    def entry(v, r, c):
        if not isinstance(v, sp.MatrixBase):
            return v
        return v[r if v.rows > 1 else 0, c if v.cols > 1 else 0]

    return sp.Matrix(rows, cols, lambda r, c: build(*[entry(v, r, c) for v in values]))


def _vector(x, as_column: bool):
    """A vector (either orientation) as a column (``col``) or a row (``row``); a scalar (the
    single row of a one-row proof) stays a scalar."""
    if not isinstance(x, sp.MatrixBase):
        return x
    if 1 not in x.shape:
        raise ValueError(f"col/row broadcast a vector, got a {x.shape} tile")
    return x.reshape(len(x), 1) if as_column else x.reshape(1, len(x))


def _per_row(reduce, tile):
    """A row reduction: the scalar of a one-row tile, else a column of one value per row."""
    if tile.rows == 1:
        return reduce(*tile)
    return sp.Matrix(tile.rows, 1, lambda r, _: reduce(*tile[r, :]))


def interpret(expr: sp.Basic, env: Mapping[sp.Symbol, object]):
    """Evaluate a kernel expression with tiles as SymPy matrices.

    One query row is a ``1 x B_c`` row of logits (``qk``) or a ``1 x D`` row (``acc``, ``o``,
    ``do``); values are ``B_c x D``. Several query rows are an ``R x B_c`` tile, their per-row
    values (``lse``, ``delta``) a vector (an ``R x 1`` or ``1 x R`` matrix). The row operations
    mean: ``rowmax``/``rowsum`` -> ``Max``/sum of each row's entries (a scalar for one row),
    ``dot`` -> matrix product, ``trans`` -> transpose, ``col`` -> the vector as a column
    (broadcast across columns), ``row`` -> as a row (broadcast down rows); a scalar stays a
    scalar. Everything else is entrywise, with that broadcasting.
    """
    if isinstance(expr, sp.Symbol):
        return env.get(expr, expr)
    if not expr.args:
        return expr
    if isinstance(expr, sp.Piecewise):
        tiles = {s: env[s] for s in expr.free_symbols if isinstance(env.get(s), sp.MatrixBase)}
        if tiles and not expr.has(*terms.ROW_OPS):
            # an entrywise guard over a tile (lse2_safe of several rows): decide it entry by
            # entry, since SymPy has no matrix of booleans for its conditions
            return _elementwise(lambda *entries: interpret(expr, {**env, **dict(zip(tiles, entries))}),
                                list(tiles.values()))
        pairs = [(interpret(e, env), interpret(c, env)) for e, c in expr.args]
        flat = [x for pair in pairs for x in pair]
        return _elementwise(lambda *xs: sp.Piecewise(*zip(xs[::2], xs[1::2])), flat)
    args = [interpret(a, env) for a in expr.args]
    f = expr.func
    if f is terms.rowmax:
        return _per_row(sp.Max, args[0])
    if f is terms.rowsum:
        return _per_row(sp.Add, args[0])
    if f is terms.dot:
        return args[0] * args[1]  # sympy raises ShapeError (a ValueError) on mismatched tiles
    if f is terms.trans:
        return args[0].T
    if f is terms.col:
        return _vector(args[0], as_column=True)
    if f is terms.row:
        return _vector(args[0], as_column=False)
    return _elementwise(f, args)


def run_terms(term_seq, env: Mapping[sp.Symbol, object]) -> dict[sp.Symbol, object]:
    """The value of every name assigned by ``term_seq`` (``terms.chain``), interpreted."""
    return {sym: interpret(e, env) for sym, e in terms.chain(term_seq).items()}


def scalar(x):
    """The single entry of a 1 x 1 tile (or the scalar itself)."""
    if isinstance(x, sp.MatrixBase):
        if x.shape != (1, 1):
            raise ValueError(f"expected a 1 x 1 tile, got {x.shape}")
        return x[0, 0]
    return x


# ----------------------------------------------------------------------------------
# Symbols for the cases
# ----------------------------------------------------------------------------------
def finite_state(name: str) -> State:
    """A state of at least one key: real max, positive denominator, real output."""
    return State(sp.Symbol(f"m_{name}", real=True), sp.Symbol(f"d_{name}", positive=True),
                 sp.Symbol(f"o_{name}", real=True))


def state_cases(names: str):
    """Every assignment of 'finite' or the identity E to the named states: [(label, states)]."""
    out = []
    for kinds in product((False, True), repeat=len(names)):
        states = [E if is_e else finite_state(nm) for nm, is_e in zip(names, kinds)]
        label = ",".join("E" if is_e else nm for nm, is_e in zip(names, kinds))
        out.append((label, states))
    return out
