"""Every claim of the spec is PROVED — by reduction to a canonical zero or a decided sign."""

from __future__ import annotations

import pytest
import sympy as sp

from spec import printed, terms
from spec.claims import CLAIM_IDS, REGISTRY, Result


def test_registry_holds_the_fixed_ids_in_order():
    assert tuple(REGISTRY)[:len(CLAIM_IDS)] == CLAIM_IDS
    assert len(CLAIM_IDS) == 13
    # claims added since (varlen, ring, decode, mask_mod, ...) register after the fixed ids
    assert "mask_mod_sound" in REGISTRY and "mask_mod_sound" not in CLAIM_IDS


@pytest.mark.parametrize("claim_id", list(REGISTRY))  # the fixed ids, then backward_grads, backward_key_major
def test_claim_is_proved(proved, claim_id):
    results = proved
    r = results[claim_id]
    assert r.proved, f"{claim_id}: {r.detail}"
    assert r.status == "PROVED"
    assert r.cases, "a proof must record its cases"
    # PROVED means every residual is the integer 0, structurally
    assert all(res == 0 and isinstance(res, sp.Integer) for _, res in r.cases), r.cases


def test_key_major_claim_licenses_the_dkdv_kernel_terms():
    """Every term the dK/dV loop prints from the key-major groups cites backward_key_major, which
    is registered (after the fixed ids) and lists them."""
    c = REGISTRY["backward_key_major"]
    printed_names = {t.name for t in (*terms.BACKWARD_TILE_T, *terms.BACKWARD_DKDV_T)}
    assert {t.claim for t in (*terms.BACKWARD_TILE_T, *terms.BACKWARD_DKDV_T)} == {"backward_key_major"}
    assert set(c.terms) == printed_names == {"qkT", "pT", "dpT", "dsT", "dk", "dv"}


def test_claims_carry_statements_and_latex():
    for c in REGISTRY.values():
        assert c.statement and c.latex, c.id
        assert callable(c.prove)


def test_terms_licensed_by_a_claim_exist():
    names = {t.name for _label, t in printed.all_terms()}  # every printed term (spec.printed)
    names |= {"kv_start", "kv_end", "full_start", "full_end"}  # spec.masks.tile_bounds fields
    for c in REGISTRY.values():
        assert set(c.terms) <= names, (c.id, c.terms)
    # the forward tile update is licensed by claims of this registry
    assert {t.claim for t in terms.FORWARD_TILE} <= set(REGISTRY)


def test_a_failed_result_reports_its_residual():
    from spec.proofs.tools import result

    r = result("merge_commutative", [("ok", sp.Integer(0)), ("bad", sp.Symbol("x"))], "how")
    assert isinstance(r, Result) and not r.proved and r.status == "FAILED"
    assert "bad" in r.detail and "x" in r.detail


def test_nan_never_counts_as_zero():
    from spec.proofs.tools import difference, reduce_zero

    assert reduce_zero(sp.nan) != 0
    assert difference(sp.nan, sp.nan) != 0
    assert difference(-sp.oo, -sp.oo) == 0
    assert difference(-sp.oo, sp.oo) != 0


def test_expanded_residual_is_zero_exactly_when_the_expansion_is():
    """The composition cases' residual: 0 for an identity that needs the expansion (a sample point where it
    vanishes leaves the decision to sp.expand), nonzero (with its value) for one that is not, also where the
    difference vanishes at a few points only; a symbol's assumptions are kept (u > 0: sqrt(u**2) = u)."""
    from spec.proofs.tools import expanded_residual

    x, n = sp.Symbol("x"), sp.Symbol("n", integer=True, positive=True)
    u = sp.Symbol("u", positive=True)
    assert expanded_residual((x + 1) ** 2 - (x**2 + 2 * x + 1)) == 0
    assert expanded_residual(sp.exp(x) * (n + x) - sp.exp(x) * x - n * sp.exp(x)) == 0
    assert expanded_residual(sp.sqrt(u**2) - u) == 0
    assert expanded_residual(sp.sqrt(u**2) + u) != 0
    wrong = expanded_residual(sp.Max(1, sp.ceiling(n / 2)) - n)  # 0 at n = 1, 2 only
    assert wrong != 0 and "nonzero" in str(wrong)
    assert expanded_residual(sp.Integer(0)) == 0


def test_reduce_zero_fails_a_residual_nonzero_at_a_point_and_still_proves_identities():
    """reduce_zero's early failure (nonzero_at_a_point) decides only a residual that is not 0 at a point of its
    domain: identities that need the rewriting still reduce to 0 (exp2 -> exp, Max with a positive factor,
    sqrt(u**2) = u for u > 0), a point outside a symbol's assumptions (k even) or with no real value decides
    nothing, and a wrong identity fails with its value."""
    from sympy.codegen.cfunctions import exp2

    from spec.proofs.tools import nonzero_at_a_point, reduce_zero

    x, u = sp.Symbol("x", real=True), sp.Symbol("u", positive=True)
    k, f = sp.Symbol("k", integer=True, even=True), sp.Function("f")
    assert reduce_zero(exp2(x) * exp2(-x) - 1) == 0
    assert reduce_zero(2 * sp.Max(x, 1) - sp.Max(2 * x, 2)) == 0
    assert reduce_zero(sp.sqrt(u**2) - u) == 0
    assert nonzero_at_a_point(exp2(x) - 2**x) is None  # 0 at the point: undecided here
    assert nonzero_at_a_point(k) is None  # the point k = 3 is not even: outside the domain
    assert nonzero_at_a_point(f(x) - x) is None  # no value at the point
    assert nonzero_at_a_point(sp.true) is None
    wrong = reduce_zero(sp.Max(x, 2 * x) - x)  # 0 for x <= 0 only
    assert wrong != 0 and "nonzero" in str(wrong)


def test_undecided_sign_is_not_proved():
    from spec.proofs.tools import nonnegative

    x = sp.Symbol("x", real=True)
    assert nonnegative(x) != 0  # could be negative: not decided
    assert nonnegative(x**2) == 0
    assert nonnegative(-sp.oo) != 0 and nonnegative(sp.oo) == 0


def test_report_order_does_not_depend_on_which_proof_module_was_imported_first():
    """The newer claims report in spec.claims' module order: a test that imports a proof module
    before spec.claims (as test_mutants does) must not reorder the registry (python -m spec's JSON
    is compared to it)."""
    import subprocess
    import sys

    code = "{}from spec.claims import REGISTRY; print(list(REGISTRY))"
    plain, early = (subprocess.run([sys.executable, "-c", code.format(pre)], capture_output=True, text=True,
                                   check=True).stdout for pre in ("", "import spec.proofs.sink_combine, spec.proofs.mask_mod; "))
    assert plain == early


def test_a_proved_z3_query_is_reused_only_for_the_same_query(monkeypatch):
    """z3_check keeps the queries it proved (a claim re-run with one term mutated re-proves only what the term
    changed): the same text is proved again without z3; a query differing in one term, one constant's sort or the
    resource limit is solved afresh, before and after the proved one; a counterexample is never kept."""
    import z3

    from spec.proofs import tools

    monkeypatch.setattr(tools, "_PROVED_QUERIES", set())
    x, y = z3.Int("x"), z3.Int("y")
    wrong = ([x > 2, y == x], y > 3)  # the "mutated" term: y > 3 does not follow
    assert tools.z3_check(*wrong)[0] == z3.sat  # before the right query ran
    assert tools.z3_check([x > 2, y == x], y > 1) == (z3.unsat, None)
    assert len(tools._PROVED_QUERIES) == 1  # the counterexample was not kept
    solved = []
    monkeypatch.setattr(tools, "z3_solver", lambda ctx=None: solved.append(1) or z3.Solver(ctx=ctx))
    assert tools.z3_check([x > 2, y == x], y > 1) == (z3.unsat, None) and solved == []  # reused
    assert tools.z3_check(*wrong)[0] == z3.sat and solved == [1]  # after it: solved afresh, still refuted
    assert tools.z3_check([x > 2], x >= 3) == (z3.unsat, None)  # over the integers
    r = z3.Real("x")
    assert tools.z3_check([r > 2], r >= 3)[0] == z3.sat  # the same assertions' text over the reals: x = 5/2
    monkeypatch.setattr(tools, "Z3_RLIMIT", 100)
    assert tools._query_key([x > 2, y == x], y > 1) not in tools._PROVED_QUERIES  # another limit: another query


def test_a_proved_residual_is_reused_only_for_the_same_text(monkeypatch):
    """reduce_zero, nonnegative and expanded_residual keep the residuals they reduced to 0 (a claim re-run with one
    term mutated re-decides only what the term changed): the same text is 0 again without SymPy's rewriting; a
    residual differing in a symbol's assumptions is decided afresh; each keeps its own; a residual that is not 0
    is never kept."""
    from spec.proofs import tools

    monkeypatch.setattr(tools, "_PROVED_RESIDUALS", set())
    x = sp.Symbol("x", real=True)
    identity = sp.sin(x) ** 2 + sp.cos(x) ** 2 - 1  # 0 only after sp.simplify
    wrong = sp.sin(x) ** 2 + sp.cos(x) ** 2 - 2  # the "mutated" term
    assert tools.reduce_zero(wrong) != 0  # before the right one ran
    assert tools.reduce_zero(identity) is tools.ZERO
    assert len(tools._PROVED_RESIDUALS) == 1  # the failed residual was not kept
    simplified = []
    simplify = sp.simplify
    monkeypatch.setattr(sp, "simplify", lambda e, **kw: simplified.append(e) or simplify(e, **kw))
    assert tools.reduce_zero(identity) is tools.ZERO and simplified == []  # reused
    assert tools.reduce_zero(wrong) != 0  # after it: decided afresh, still not 0
    y = sp.Symbol("x")  # the same name, no assumptions: another text
    assert tools.reduce_zero(sp.sin(y) ** 2 + sp.cos(y) ** 2 - 1) is tools.ZERO and len(simplified) == 1
    assert tools.nonnegative(x ** 2) is tools.ZERO and len(tools._PROVED_RESIDUALS) == 3  # its own entry


def test_z3_cases_stop_at_a_resource_limit_not_a_clock(monkeypatch):
    """A z3 case's verdict does not depend on the machine's load: every query of the spec runs in
    spec.proofs.tools.z3_check under z3's deterministic resource limit (Z3_RLIMIT; the wall-clock timeout is
    a backstop of minutes), so a goal too hard for the limit is 'unknown', naming the limit, after the very
    same work on every run; and no other module sets up a z3 solver or a timeout of its own."""
    import pathlib
    import re

    import z3

    from spec.proofs import tools

    a, b, c = z3.Ints("a b c")
    fermat = ([a > 0, b > 0, c > 0], a * a * a + b * b * b != c * c * c)  # true, beyond z3's nonlinear search
    monkeypatch.setattr(tools, "Z3_RLIMIT", 200_000)
    first, again = tools.z3_check(*fermat), tools.z3_check(*fermat)
    assert first[0] == z3.unknown and "resource limit reached" in first[1] and "Z3_RLIMIT = 200000" in first[1], first
    assert again == first  # the same count spent: z3 counts its own steps, not seconds
    assert tools.Z3_BACKSTOP_MS >= 600_000
    x = z3.Int("x")
    assert tools.z3_check([x > 2], x > 1) == (z3.unsat, None)
    assert tools.decide("case", [x > 0], x > 1)[1] == sp.Symbol("counterexample: [x = 1]")
    spec_dir = pathlib.Path(tools.__file__).parents[1]
    own = re.compile(r"z3\.(Solver|SolverFor|SimpleSolver|Optimize)\(|[\"']timeout[\"']|[\"']rlimit[\"']")
    offenders = [str(p.relative_to(spec_dir)) for p in spec_dir.rglob("*.py")
                 if p.name != "tools.py" and own.search(p.read_text())]
    assert offenders == [], f"{offenders}: make z3 solvers with spec.proofs.tools.z3_solver / z3_check"
