"""User score modifications (spec.score_mods): the printed backward is the derivative of the printed forward.

``derivative_cases(sm)`` reads a score_mod's *printed* terms (``forward_terms``, ``ds_term``,
``grad_terms``: what the kernels print) and checks, by ``sp.diff`` of the forward chain, that

* the natural-log logit of the printed forward lines is ``f`` of ``s = scale·x`` (parameters read
  from ``SF``/``SI`` as the kernels read them);
* the printed dS factor times the scale is ``∂logit/∂x`` (the kernels apply the scale once after
  the loop, ``BACKWARD_SCALE``), so ``dS·factor`` is ``∂L/∂s`` through ``f``;
* each printed ``sgrad_k / dS`` is ``∂logit/∂SF[offs_sp_k]`` with the read at ``offs_sp_k`` a
  read of the printed forward line (each forward read has exactly one gradient term);
* the scatter (``spec.score_mods.SCATTER``) run over the chunks the kernel visits, from
  ``(lo // C)·C`` to ``hi`` by ``C``, gives every entry the sum of the tile's gradients that read it.

The generator runs ``derivative_cases`` for every score_mod it emits (a user's too) and refuses to
print one whose cases do not all reduce to 0; claim ``score_mod_derived`` runs it for the examples.
Claim ``score_mod_builtins`` proves softcap and ALiBi written as score_mods equal to the built-ins.
"""

from __future__ import annotations

import sympy as sp

from spec import notation as n
from spec import score_mods as SM
from spec import terms
from spec.proofs.score_mods import _tanh_as_exp
from spec.proofs.tools import equal_cases, result, run_terms
from spec.registry import claim

x = sp.Symbol("x", real=True)  # a raw score q·k


def _logit(forward):
    """The natural-log logit of the printed forward lines on a raw score ``x``, and the scale's symbol."""
    env = run_terms((terms.QK_SCALE, *forward), {n.qk: x})
    return env[n.qk] * env[n.qk_scale] * n.LN2


def _sf_reads(expr):
    return sorted((a for a in expr.atoms(sp.Indexed) if a.base == SM.SF), key=str)


def derivative_cases(sm, forward=None, ds_term=None, grads=None):
    """``(name, residual)`` cases (see the module docstring); the printed terms by default."""
    forward = sm.forward_terms() if forward is None else forward
    ds_term = sm.ds_term() if ds_term is None else ds_term
    grads = sm.grad_terms() if grads is None else grads
    logit = _logit(forward)
    scaled = {SM.us: x * n.sm_scale}  # us = qk·qk_scale·ln 2 = scale·x
    cases = equal_cases([("printed forward logit = f(scale·x)", logit,
                          sm.kernel_form(sm.expr).xreplace(scaled))])
    factor = (ds_term.expr / n.ds).xreplace(scaled)
    cases += equal_cases([("printed dS factor·scale = ∂logit/∂x", factor * n.sm_scale, sp.diff(logit, x))])
    reads = _sf_reads(logit)
    dummies = {r: sp.Dummy(f"read{k}", real=True) for k, r in enumerate(reads)}
    as_vars = logit.xreplace(dummies)
    seen = []
    for g, ix in grads:
        read = SM.SF[ix.expr]
        if read not in dummies:
            cases.append((f"{g.name}: SF[{ix.expr}] is a read of the printed forward line", sp.Tuple(read)))
            continue
        seen.append(read)
        cases += equal_cases([(f"{g.name} = dS·∂logit/∂SF[{ix.name}]", (g.expr / n.ds).xreplace(scaled),
                               sp.diff(as_vars, dummies[read]).xreplace({v: k for k, v in dummies.items()}))])
    tensor_reads = {SM.SF[sm.flat_index(rd)] for rd in sm.reads}  # float scalars are Python numbers: no gradient
    missing = [r for r in reads if r in tensor_reads and r not in seen and sp.diff(as_vars, dummies[r]) != 0]
    cases.append(("every tensor read of the forward line has its gradient term", sp.Integer(len(missing))))
    return cases


def onehot_value(g, idx, e):
    """``onehot_sum``'s meaning: ``Σ g_mn`` over the elements with ``idx_mn == e``."""
    return sp.Add(*[gg for gg, ii in zip(g, idx) if ii == e])


def scatter_cases(scatter=SM.SCATTER, chunk=2):
    """The scatter's chunk loop over two tiles of 4 elements, reading entries (1, 2, 2, 5) then
    (2, 3, 5, 5): each entry gets the sum of the gradients of the elements that read it, over both
    tiles (the gradient of Σ g_mn·t[idx_mn])."""
    tiles = (((1, 2, 2, 5), sp.symbols("g0:4", real=True)), ((2, 3, 5, 5), sp.symbols("h0:4", real=True)))
    t = {e: sp.Symbol(f"t{e}", real=True) for e in range(7)}
    want = sp.Add(*[gg * t[ii] for idx, g in tiles for gg, ii in zip(g, idx)])
    acc = {e: sp.Integer(0) for e in t}
    for idx, g in tiles:
        lo, hi = min(idx), max(idx)
        for start in range((lo // chunk) * chunk, hi + 1, chunk):
            for e in range(start, min(start + chunk, hi + 1)):
                part = scatter[0].expr.replace(lambda a: isinstance(a, SM.onehot_sum),
                                               lambda a: onehot_value(g, idx, e))
                acc[e] = run_terms(scatter[1:], {SM.sgacc: acc[e], SM.sgpart: part})[SM.sgacc]
    return equal_cases([(f"entry {e} = ∂(Σ g·t[idx])/∂t[{e}]", acc[e], sp.diff(want, t[e])) for e in t])


@claim("score_mod_derived",
       "for each example score_mod of spec.score_mods (relative-bias table, per-head temperature, tanh cap, "
       "per-batch gain, ALiBi): the printed forward lines give the natural-log logit f(scale·x) with the "
       "parameters read from SF/SI; the printed dS factor times the scale is ∂logit/∂x; each printed sgrad_k "
       "is dS·∂logit/∂SF[offs_sp_k] at a read of the printed forward line, one per read (the derivatives by "
       "sp.diff); and the printed scatter, run over the chunks from (lo // C)·C to hi, gives every parameter "
       "entry the sum of the gradients of the elements that read it. The generator checks the same cases "
       "for every score_mod it emits (spec.proofs.score_mod_user.derivative_cases); exact arithmetic",
       r"\frac{\partial L}{\partial s_{ij}} = dS_{ij}\,f'(s_{ij}),\quad "
       r"\frac{\partial L}{\partial t_e} = \sum_{ij:\,\mathrm{idx}_{ij}=e} dS_{ij}\,\frac{\partial f}{\partial t_e}",
       terms=("sgpart", "sgacc"),
       scope="symbolic in the score, the scale, the positions and the parameters; the scatter on two tiles of 4 "
             "elements, chunk 2; reals, exact")
def prove_score_mod_derived(examples=SM.EXAMPLES, scatter=SM.SCATTER):
    cases = []
    for sm in examples:
        cases += [(f"{sm.name}: {name}", r) for name, r in derivative_cases(sm)]
    cases += [(f"scatter: {name}", r) for name, r in scatter_cases(scatter)]
    return result("score_mod_derived", cases, "sp.diff of the printed forward chain against the printed backward")


def _builtin_logit(lines, scalars, env):
    """The natural-log logit of the built-in lines on a raw score ``x``: they leave the score in log2
    units, and the tile then runs with ``qk_scale = 1`` (MOD_TILE_SCALE)."""
    out = run_terms((terms.MOD_TILE_SCALE, *scalars, *lines), {n.qk: x, **env})
    return out[n.qk] * out[n.qk_scale] * n.LN2


@claim("score_mod_builtins",
       "softcap and ALiBi written as score_mods (spec.score_mods.tanh_cap with cap = c, alibi with slopes[h] = "
       "slope) print forward lines whose logit equals the built-in SOFTCAP / ALIBI lines' (tanh written with "
       "exp; for softcap the built-in's exp2 branch, |s/c| >= 1: below it the built-in prints Lambert's rational "
       "C_4, within 18u of tanh by claim softcap_accuracy, not equal), and their derived dS factors equal the "
       "built-ins' (SOFTCAP_DS: 1 − t²; ALiBi: 1); exact arithmetic",
       r"c\tanh(s/c)\ \text{and}\ s-\mathrm{slope}_h|i+\mathrm{shift}-j|\ \text{as score\_mods} = \text{the built-ins}",
       terms=(), scope="symbolic score, scale, cap, slope and positions; reals, exact; softcap on the built-in's "
                       "exp2 branch (the rational branch is softcap_accuracy's)")
def prove_score_mod_builtins(tanh_cap=SM.tanh_cap, alibi=SM.alibi):
    c, slope = n.softcap, n.slope
    cap_sf = {SM.SF[0]: c}
    cap_logit = _logit(tanh_cap.forward_terms()).xreplace(cap_sf)
    builtin_cap = _builtin_logit(terms.SOFTCAP, terms.SOFTCAP_SCALARS, {})
    cap_t = run_terms((terms.QK_SCALE, *terms.SOFTCAP_SCALARS, *terms.SOFTCAP), {n.qk: x})[n.t]
    cap_factor = (tanh_cap.ds_term().expr / n.ds).xreplace({SM.us: x * n.sm_scale, **cap_sf})
    builtin_factor = run_terms(terms.SOFTCAP_DS, {n.ds: 1, n.t: cap_t})[n.ds]
    al_sf = {a: slope for a in _sf_reads(_logit(alibi.forward_terms()))}
    al_logit = _logit(alibi.forward_terms()).xreplace(al_sf)
    builtin_al = _builtin_logit((*terms.SCORE_LOG2, *terms.ALIBI), (terms.SCORE_LOG2_SCALAR, terms.ALIBI_SCALAR),
                                {n.i: n.i, n.j: n.j, n.shift: n.shift})
    al_factor = (alibi.ds_term().expr / n.ds)
    # the built-in's exp2 branch (|s/c| >= 1; the branch below is Lambert's C_4: claim softcap_accuracy)
    builtin_cap, builtin_factor = (e.replace(sp.Piecewise, lambda *branches: branches[-1][0])
                                   for e in (builtin_cap, builtin_factor))
    pairs = [
        ("tanh_cap's logit = SOFTCAP's", _tanh_as_exp(cap_logit), _tanh_as_exp(builtin_cap)),
        ("tanh_cap's dS factor = SOFTCAP_DS's 1 − t²", _tanh_as_exp(cap_factor), _tanh_as_exp(builtin_factor)),
        ("alibi's logit = ALIBI's", al_logit, builtin_al),
        ("alibi's dS factor = 1 (the built-in's dS is unchanged)", al_factor, sp.Integer(1)),
    ]
    return result("score_mod_builtins", equal_cases(pairs), "both chains run on a symbolic raw score")
