"""The SymPy -> Triton printer: one rule per node, unsupported nodes raise, terms reach the kernels."""

from __future__ import annotations

import pytest
import sympy as sp
from sympy.codegen.cfunctions import exp2, log2

from generator import render
from spec.printer import UnsupportedNode, print_expr, print_term
from generator.variants import BlockConfig
from spec import masks as M
from spec import notation as n
from spec import terms as T

x, y, z = sp.symbols("x y z", extended_real=True)  # may be -oo, like m_i


@pytest.mark.parametrize("expr, code", [
    (sp.Max(x, y, z), "tl.maximum(tl.maximum(x, y), z)"),
    (sp.Min(x, y), "tl.minimum(x, y)"),
    (sp.Piecewise((0, sp.Eq(x, -sp.oo)), (x, True)), 'tl.where(x == float("-inf"), 0, x)'),
    (sp.Piecewise((1, x < 0), (2, x < 1), (3, True)), "tl.where(x < 0, 1, tl.where(x < 1, 2, 3))"),
    (sp.oo, 'float("inf")'),
    (exp2(x - y), "tl.exp2(x - y)"),
    (log2(x), "tl.log2(x)"),
    (sp.exp(x), "tl.exp(x)"),
    (sp.log(x), "tl.log(x)"),
    (x * n.LOG2E, "x * 1.4426950408889634"),
    (n.LOG2E, "1.4426950408889634"),
    ((x + log2(y)) * n.LN2, "(x + tl.log2(y)) * 0.6931471805599453"),
    (sp.And(sp.Le(x, y), sp.Lt(y, z)), "(x <= y) & (y < z)"),
    (sp.Or(sp.Eq(x, 0), sp.Le(y, 1)), "(x == 0) | (y <= 1)"),
    (x / y, "x/y"),
    (T.rowmax(x), "tl.max(x, 1)"),
    (T.rowsum(x * y), "tl.sum(x*y, 1)"),
    (T.col(x + y), "(x + y)[:, None]"),
    (T.row(x + y), "(x + y)[None, :]"),
    (T.row(n.delta), "delta[None, :]"),
    (T.trans(n.k), "tl.trans(k)"),
    (T.dot(n.p, n.v), "tl.dot(p.to(DOT_DTYPE), v, input_precision=INPUT_PRECISION, max_num_imprecise_acc=32 if DOT_DTYPE.is_fp8() else None)"),
    (T.dot(n.q, T.trans(n.k)), "tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION, max_num_imprecise_acc=32 if DOT_DTYPE.is_fp8() else None)"),
    (sp.floor(n.start_n / n.B_c), "(start_n // BLOCK_N)"),
    (sp.ceiling(n.start_n / n.B_c), "tl.cdiv(start_n, BLOCK_N)"),
    (sp.Abs(n.i - n.j), "tl.abs(i - j)"),  # ALiBi's distance
    (1 - n.t * n.t, "1 - t * t"),  # softcap's 1 − t²: a square is one multiply
])
def test_rules(expr, code):
    assert print_expr(expr) == code


def test_rename_maps_mask_indices():
    code = print_expr(M.MASK_KINDS["causal"].predicate(), render.TILE_NAMES)
    assert code == "offs_n[None, :] <= offs_m[:, None] + shift"


def test_score_mod_rules():
    """The nodes a user score_mod may use (spec.score_mods): small powers as multiplies, sqrt, sin,
    cos, and tanh in the softcap's NaN-free exp form."""
    assert print_expr(x ** 3) == "x * x * x"
    assert print_expr(x ** -2) == "1 / (x * x)"
    assert print_expr(sp.sqrt(x)) == "tl.sqrt(x)"
    assert print_expr(sp.sin(x)) == "tl.sin(x)" and print_expr(sp.cos(x)) == "tl.cos(x)"
    assert print_expr(sp.tanh(x)) == "(1 - 2 / (tl.exp(2 * x) + 1))"


@pytest.mark.parametrize("expr", [sp.asin(x), x ** 9, x ** sp.Rational(1, 3), sp.Function("mystery")(x), sp.sign(x),
                                  sp.Piecewise((x, x > 0)), sp.Matrix([[x]])])
def test_unsupported_nodes_raise(expr):
    with pytest.raises(UnsupportedNode):
        print_expr(expr)


def test_print_term_names_claim_and_note():
    assert print_term(T.FORWARD_TILE[3]) == (
        "alpha = tl.exp2(m_i - m_safe)  # rescale the old state from the old max to the new one "
        "(claim: online_softmax_invariant)")


def test_every_forward_term_is_printed_into_the_kernel():
    """The template's arithmetic is the spec's: each printed term appears verbatim."""
    source = render.render_config(BlockConfig())["attention_fwd_br64_bc64.py"]
    terms = (T.QK_SCALE, T.QK, *T.FORWARD_TILE, *T.FORWARD_EPILOGUE, M.MASK_TERM, *M.BOUNDS_INIT,
             *M.TILE_LOOP)
    for term in terms:
        assert print_term(term) in source, term.name
    for kind in M.MASK_KINDS:
        assert print_term(M.keep_term(kind), render.TILE_NAMES) in source
        for term in M.bounds_terms(kind):
            assert print_term(term) in source


def test_every_backward_term_is_printed_into_the_kernel():
    """The backward's arithmetic is the spec's: the dQ loop prints the row-major tile, the dK/dV
    loop the key-major one (never the row-major BACKWARD_DKDV, which only states dK, dV for the
    proofs); the mask helper prints the predicates in the spec's own names i, j, and each loop
    calls it with i, j broadcast to its layout (render.TILE_NAMES / TILE_NAMES_T)."""
    source = render.render_config(BlockConfig())["attention_bwd_br64_bc64.py"]
    terms = (T.QK, *T.BACKWARD_PREPROCESS, *T.BACKWARD_TILE, *T.BACKWARD_TILE_T, *T.BACKWARD_DKDV_T,
             *T.BACKWARD_DQ, *T.BACKWARD_SCALE, M.MASK_TERM, M.KEEP_INIT, *M.ROW_BOUNDS_INIT, *M.ROW_TILE_LOOP,
             *M.BOUNDS_INIT, *M.TILE_LOOP)
    for term in terms:
        assert print_term(term) in source, term.name
    for kind in M.MASK_KINDS:
        assert print_term(M.keep_term(kind)) in source, kind
    for term in T.BACKWARD_DKDV:
        assert print_term(term) not in source, term.name
    for names, scores in ((render.TILE_NAMES, "qk"), (render.TILE_NAMES_T, "qkT")):
        assert f"{scores} = _attn_bwd_mask({scores}, {names['i']}, {names['j']}," in source
    assert render.TILE_NAMES_T == {"i": "offs_m[None, :]", "j": "offs_n[:, None]"}


def test_mask_subset_emits_only_those_kinds():
    source = render.render_config(BlockConfig(masks=("causal",)))["attention_fwd_causal_br64_bc64.py"]
    assert "if IS_CAUSAL:" in source
    assert "if HAS_WINDOW:" not in source and "HAS_LENGTHS:\n" not in source and "tile_state == 1" not in source


def test_every_printed_claim_is_registered():
    """A kernel comment may only cite a claim that spec.claims can prove."""
    from spec.claims import REGISTRY

    terms = (T.QK_SCALE, T.QK, *T.FORWARD_TILE, *T.FORWARD_EPILOGUE, *T.SOFTMAX_NORMALISE, M.MASK_TERM,
             *M.BOUNDS_INIT, *M.TILE_LOOP, M.KEEP_INIT, *map(M.keep_term, M.MASK_KINDS),
             *M.ROW_BOUNDS_INIT, *M.ROW_TILE_LOOP, *(t for kind in M.MASK_KINDS for t in M.row_bounds_terms(kind)),
             *T.BACKWARD_PREPROCESS, *T.BACKWARD_TILE, *T.BACKWARD_DKDV, *T.BACKWARD_TILE_T, *T.BACKWARD_DKDV_T,
             *T.BACKWARD_DQ, *T.BACKWARD_SCALE)
    assert sorted({t.claim for t in terms} - set(REGISTRY)) == []
