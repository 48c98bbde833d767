"""User score modifications (spec.score_mods): the printed backward is the derivative of the printed forward.

``derivative_cases(sm)`` reads a score_mod's *printed* terms (``forward_terms``, ``ds_term``,
``grad_terms``: what the kernels print) and checks, by ``sp.diff`` of the forward chain, that

* the natural-log logit of the printed forward lines is ``f`` of ``s = scale·x`` (parameters read
  from ``SF``/``SI`` as the kernels read them);
* the printed dS factor times the scale is ``∂logit/∂x`` (the kernels apply the scale once after
  the loop, ``BACKWARD_SCALE``), so ``dS·factor`` is ``∂L/∂s`` through ``f``;
* each kernel's backward steps in their printed order (``ScoreMod.backward_terms``: the bodies of the dQ
  kernel's ``_user_score_bwd`` and the dK/dV kernel's ``_user_score_ds``), run from ``dS = ∂L/∂f``: every
  gradient the dQ kernel scatters is taken before ``ds·∂f/∂s`` and equals ``∂L/∂f·∂logit/∂SF[offs_sp_k]``
  with the read at ``offs_sp_k`` a read of the printed forward line (each forward read scattered exactly
  once; the dK/dV kernel scatters none), and ``ds`` after the steps is ``∂L/∂s`` (the chain rule; the
  audit's edit taking the gradients after the ∂f/∂s factor fails it);
* the scatter (``spec.score_mods.SCATTER``) run over the chunks the kernel visits, from
  ``(lo // C)·C`` to ``hi`` by ``C``, gives every entry the sum of the tile's gradients that read it.

The generator runs ``derivative_cases`` for every score_mod it emits (a user's too) and refuses to
print one whose cases do not all reduce to 0; claim ``score_mod_derived`` runs it for the examples.
Claim ``score_mod_builtins`` proves softcap and ALiBi written as score_mods equal to the built-ins.

Claim ``score_mod_error_bound`` covers the printed modification in the forward error bound: for a
score_mod of the bounded class (``ScoreMod.outside_bound`` is None: ``+``, ``·``, ``/`` by a float
value, affine in ``s``) it checks ``ScoreMod.roundings()`` on a model of the printed ``f`` with one
``(1 + δ)`` per operation (``rounded_model``), counts the scaled score's and the way back's roundings
in the printed lines, and proves ``spec.error_bound.score_mod_exponent`` and ``forward_bound``'s
composition with it; the generator runs the counting cases (``bound_cases``) for every score_mod it
emits. Outside the class (a function of the score: ``tanh_cap``) the tolerance is empirical.
"""

from __future__ import annotations

import sympy as sp

from spec import error_bound
from spec import notation as n
from spec import score_mods as SM
from spec import terms
from spec.proofs.score_mods import _tanh_as_exp
from spec.proofs.tools import ZERO, equal_cases, result, run_terms
from spec.registry import claim

x = sp.Symbol("x", real=True)  # a raw score q·k


def _logit(forward):
    """The natural-log logit of the printed forward lines on a raw score ``x``, and the scale's symbol."""
    env = run_terms((terms.QK_SCALE, *forward), {n.qk: x})
    return env[n.qk] * env[n.qk_scale] * n.LN2


def _sf_reads(expr):
    return sorted((a for a in expr.atoms(sp.Indexed) if a.base == SM.SF), key=str)


#: the kernels whose score_mod backward is a printed step sequence, and whether they scatter the gradients
#: (the dQ kernel's program owns a row of the gradient buffer; the dK/dV kernel has none)
BACKWARD_KERNELS = (("dQ kernel (_user_score_bwd)", True), ("dK/dV kernel (_user_score_ds)", False))


def derivative_cases(sm, forward=None, ds_term=None, grads=None, backward=None):
    """``(name, residual)`` cases (see the module docstring); the printed terms by default. ``backward``: the
    kernels' step sequences ``{kernel: steps}`` (default ``sm.backward_terms``, what the kernels print, or
    ``spec.score_mods.backward_steps`` of the ``grads`` and ``ds_term`` given)."""
    if backward is None and ds_term is None and grads is None:  # what the kernels print
        backward = {kernel: sm.backward_terms(scatter) for kernel, scatter in BACKWARD_KERNELS}
    forward = sm.forward_terms() if forward is None else forward
    ds_term = sm.ds_term() if ds_term is None else ds_term
    grads = sm.grad_terms() if grads is None else grads
    if backward is None:  # the sequences of the given terms
        backward = {kernel: SM.backward_steps(grads if scatter else (), ds_term)
                    for kernel, scatter in BACKWARD_KERNELS}
    logit = _logit(forward)
    scaled = {SM.us: x * n.sm_scale}  # us = qk·qk_scale·ln 2 = scale·x
    cases = equal_cases([("printed forward logit = f(scale·x)", logit,
                          sm.kernel_form(sm.expr).xreplace(scaled))])
    factor = (ds_term.expr / n.ds).xreplace(scaled)
    cases += equal_cases([("printed dS factor·scale = ∂logit/∂x", factor * n.sm_scale, sp.diff(logit, x))])
    reads = _sf_reads(logit)
    dummies = {r: sp.Dummy(f"read{k}", real=True) for k, r in enumerate(reads)}
    as_vars = logit.xreplace(dummies)
    tensor_reads = {SM.SF[sm.flat_index(rd)] for rd in sm.reads}  # float scalars are Python numbers: no gradient
    needed = [r for r in reads if r in tensor_reads and sp.diff(as_vars, dummies[r]) != 0]
    # the backward's steps in their printed order, from dS = ∂L/∂f (G, the softmax Jacobian's output): the chain
    # rule ∂L/∂t = G·∂f/∂t (each scatter reads G, not G·∂f/∂s) and ∂L/∂s = G·∂f/∂s (ds after the steps)
    G = sp.Symbol("dL_df", real=True)
    for (kernel, scatter) in BACKWARD_KERNELS:
        steps = tuple(backward[kernel])
        out = terms.chain(steps)  # each name's value at the end, in the values at the start
        cases += equal_cases([(f"{kernel}: ds after the steps = ∂L/∂s = ∂L/∂f·∂f/∂s",
                               out.get(n.ds, n.ds).xreplace({n.ds: G, **scaled}) * n.sm_scale,
                               G * sp.diff(logit, x))])
        points = SM.scatter_points(steps)
        ds_at = [k for k, t in enumerate(steps) if t.symbol == n.ds]
        late = [g.name for k, g, _ in points if ds_at and k > ds_at[0]]
        cases.append((f"{kernel}: every gradient is scattered before ds·∂f/∂s (it reads ∂L/∂f)",
                      ZERO if not late else sp.Symbol("after ds: " + ", ".join(late))))
        if not scatter:
            cases.append((f"{kernel}: no gradient scattered (the dQ kernel scatters every element once)",
                          sp.Integer(len(points))))
            continue
        seen = []
        back = {v: r for r, v in dummies.items()}
        for k, g, ix in points:
            at = terms.chain(steps[:k + 1])  # the values when the scatter runs
            read = SM.SF[ix.expr]
            if read not in dummies:
                cases.append((f"{kernel}: {g.name}: SF[{ix.expr}] is a read of the printed forward line",
                              sp.Tuple(read)))
                continue
            seen.append(read)
            cases += equal_cases([(f"{kernel}: scattered {g.name} = ∂L/∂SF[{ix.name}] = ∂L/∂f·∂logit/∂SF[{ix.name}]",
                                   at[g.symbol].xreplace({n.ds: G, **scaled}),
                                   G * sp.diff(as_vars, dummies[read]).xreplace(back))])
        missing = [r for r in needed if r not in seen]
        cases.append((f"{kernel}: every tensor read of the forward line has its gradient scattered",
                      sp.Integer(len(missing))))
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
       "parameters read from SF/SI; the printed dS factor times the scale is ∂logit/∂x; each kernel's backward "
       "steps in their printed order (ScoreMod.backward_terms: the dQ kernel's _user_score_bwd, the dK/dV "
       "kernel's _user_score_ds), run from dS = ∂L/∂f, scatter every gradient before the ∂f/∂s factor, each "
       "sgrad_k = ∂L/∂f·∂logit/∂SF[offs_sp_k] at a read of the printed forward line, one per read in the dQ "
       "kernel and none in dK/dV, and leave ds = ∂L/∂s (the chain rule; the derivatives by sp.diff); and the printed scatter, run over the chunks from (lo // C)·C to hi, gives every parameter "
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


# ----------------------------------------------------------------------------------
# The error bound of a printed score_mod (spec.error_bound.score_mod_exponent)
# ----------------------------------------------------------------------------------
def rounded_model(e, deltas: list):
    """The printed ``e`` in the standard model: each operation's result times its own ``(1 + δ)``, each
    non-integer constant rounded to fp32 and each integer term of integer symbols converted (one ``δ``),
    sums and products as chains of binary operations in the order of ``e.args``, ``1/v`` a division by the
    exact value ``v``; ``deltas`` collects the δ symbols. None: an operation the model has no rule for."""
    def fresh():
        deltas.append(sp.Symbol(f"delta_{len(deltas)}", real=True))
        return 1 + deltas[-1]

    if isinstance(e, sp.Integer) or isinstance(e, (sp.Symbol, sp.Indexed)):
        return e
    if e.is_number:
        return e * fresh()
    if SM._is_integer_term(e):
        return e * fresh()
    if isinstance(e, sp.Add):
        parts = [rounded_model(a, deltas) for a in e.args]
        if None in parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out = (out + p) * fresh()
        return out
    if isinstance(e, sp.Mul):
        sign = -1 if -1 in e.args else 1
        factors = [a for a in e.args if a != -1]
        parts = [a if SM._is_reciprocal(a) else rounded_model(a, deltas) for a in factors]
        if None in parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out = out * p * fresh()  # a multiply, or the division by v of a factor 1/v
        return sign * out
    if SM._is_reciprocal(e):
        return e * fresh()
    return None


def model_roundings(e):
    """``(most δ factors on one monomial of the model, the model at δ = 0 minus e)``; (None, None) outside."""
    deltas = []
    model = rounded_model(e, deltas)
    if model is None:
        return None, None
    expanded = sp.expand(model)
    degree = sp.Poly(expanded, *deltas).total_degree() if deltas else 0
    return degree, sp.simplify(model.xreplace({d: 0 for d in deltas}) - e)


def _counting_cases(sm, roundings):
    """The printed lines of ``sm`` against their counts: ``f``'s monomials (``roundings``), the scaled
    score ``us`` (``SCORE_MOD_SCALE_ROUNDINGS``, with the printed ``QK_SCALE``) and the way back to log2 units
    (``SCORE_MOD_BACK_ROUNDINGS``: the printed qk line, then the tile's product by ``qk_scale``)."""
    from spec import error_bound as EB

    us_line, back_line = sm.forward_terms()
    cases = []
    f = back_line.expr * n.qk_scale / n.LOG2E  # the printed f, in kernel form
    stated = roundings(sm)
    degree, residual = model_roundings(f)
    cases.append((f"{sm.name}: every monomial of the printed f carries <= {stated} roundings",
                  ZERO if degree is not None and stated is not None and degree <= stated
                  else sp.Symbol(f"{degree} > {stated} roundings")))
    cases.append((f"{sm.name}: the rounding model at δ = 0 is the printed f", residual if residual is not None
                  else sp.Symbol("no model")))
    # us: qk·qk_scale·ln 2 with the printed qk_scale = sm_scale·log2 e (its product and fp32 constant rounded)
    x = sp.Symbol("x", real=True)
    deltas = []
    # modelled apart, then composed (SymPy would cancel log2 e = 1/ln 2 against ln 2 in the product)
    model_us, model_scale = rounded_model(us_line.expr.xreplace({n.qk: x}), deltas), rounded_model(
        terms.QK_SCALE.expr, deltas)
    if model_us is None or model_scale is None:
        cases.append((f"{sm.name}: the printed us and qk_scale have a model", sp.Tuple(us_line.expr)))
        return cases
    us = model_us.xreplace({n.qk_scale: model_scale})
    deg_us = sp.Poly(sp.expand(us), *deltas).total_degree()
    cases.append((f"{sm.name}: us = x·qk_scale·ln 2 rounds <= SCORE_MOD_SCALE_ROUNDINGS = "
                  f"{EB.SCORE_MOD_SCALE_ROUNDINGS} times (the printed QK_SCALE's included)",
                  ZERO if deg_us <= EB.SCORE_MOD_SCALE_ROUNDINGS else sp.Symbol(f"{deg_us} roundings")))
    cases.append((f"{sm.name}: us = sm_scale·x exactly", sp.simplify(us.xreplace({d: 0 for d in deltas})
                                                                     - n.sm_scale * x)))
    # back: fl(fl(F/c)·fl(log2 e)) then the tile's fl(qk'·c): F·log2 e, c = qk_scale^ any positive fp32 value
    F, c = sp.Symbol("F", real=True), sp.Symbol("c", positive=True)
    back = back_line.expr.xreplace({n.qk_scale: c}) / f.xreplace({n.qk_scale: c}) * F
    deltas = []
    model = rounded_model(back, deltas)
    if model is None:
        cases.append((f"{sm.name}: the printed qk line is F·log2 e / qk_scale", sp.Tuple(back_line.expr)))
        return cases
    deltas.append(sp.Symbol(f"delta_{len(deltas)}", real=True))
    tile = model * c * (1 + deltas[-1])  # the tile's qk·qk_scale (FORWARD_TILE), one product
    degree = sp.Poly(sp.expand(tile), *deltas).total_degree()
    cases.append((f"{sm.name}: back in log2 units (/qk_scale, ·log2 e, the tile's ·qk_scale) rounds <= "
                  f"SCORE_MOD_BACK_ROUNDINGS = {EB.SCORE_MOD_BACK_ROUNDINGS} times, qk_scale cancelling",
                  ZERO if degree <= EB.SCORE_MOD_BACK_ROUNDINGS and not tile.has(c) else
                  sp.Symbol(f"{degree} roundings{', qk_scale left' if tile.has(c) else ''}")))
    cases.append((f"{sm.name}: back in log2 units is F·log2 e exactly",
                  sp.simplify(tile.xreplace({d: 0 for d in deltas}) - F * n.LOG2E)))
    return cases


def bound_cases(sm):
    """The counting cases of claim ``score_mod_error_bound`` for ``sm`` (none outside the bounded class:
    its forward tolerance is empirical); the generator runs them for every score_mod it emits."""
    return [] if sm.outside_bound() is not None else _counting_cases(sm, SM.ScoreMod.roundings)


def _lemma_cases(score_mod_exponent, counts):
    """The composition, on z3 reals: ``k`` roundings within ``γ_k``; the affine ``f`` with ``|∂f/∂s| <= α``
    and its absolute tree ``α|s| + κ``; the way back; the total ``score_mod_exponent``."""
    import z3

    from spec.proofs.float import _verdict

    u = z3.Real("u")
    small = [u > 0, u < z3.RealVal("0.01")]
    cases = []
    for k in sorted(counts):
        g = error_bound.gamma_of(k, u)
        cases.append((f"(1 ± u)^{k} in 1 ± γ_{k}: {k} roundings of a monomial",
                      _verdict(small, z3.And((1 + u) ** k - 1 <= g, 1 - (1 - u) ** k <= g))))
    ab = lambda t: z3.If(t >= 0, t, -t)  # noqa: E731
    sA, gD, gs, gk, gb, al, ka, a, c0, sx, ush, eps, th = z3.Reals("sA g_D g_s g_k g_b alpha kappa a c sx us eps th")
    Fs, Bs = sA * ((1 + gD) * (1 + gs) - 1), sA * (1 + gD) * (1 + gs)
    Phi = al * Bs + ka
    Ff, Bf = gk * Phi + al * Fs, (1 + gk) * Phi
    pos = small + [sA >= 0, gD >= 0, gs >= 0, gk >= 0, gb >= 0, al >= 0, ka >= 0]
    # f = a·s + c with |a| <= α, |c|'s absolute tree <= κ; computed f^ = f(us^) + ε, |ε| <= γ_k(α|us^| + κ)
    # (the monomials' roundings, above); in four steps, each small for z3
    v, w, d1, d2, ph = z3.Reals("v w d1 d2 Phi")
    cases += [
        ("affine f: |a| <= α, |c| <= κ, |us^| <= B_s => |a·us^ + c| <= α B_s + κ = Φ",
         _verdict([al >= 0, ka >= 0, w >= 0, ab(a) <= al, ab(c0) <= ka, ab(ush) <= w], ab(a * ush + c0) <= al * w + ka)),
        ("affine f: |a| <= α, |us^ − s| <= F_s => |a·us^ − a·s| <= α F_s (|∂f/∂s| <= α)",
         _verdict([al >= 0, v >= 0, ab(a) <= al, ab(ush - sx) <= v], ab(a * ush - a * sx) <= al * v)),
        ("affine f: |us^| <= B_s, |ε| <= γ_k(α|us^| + κ) => |ε| <= γ_k(α B_s + κ)",
         _verdict([gk >= 0, al >= 0, ka >= 0, w >= 0, ab(ush) <= w, ab(eps) <= gk * (al * ab(ush) + ka)],
                  ab(eps) <= gk * (al * w + ka))),
        ("affine f: f^ = f(us^) + ε: |f^ − f(s)| <= α F_s + γ_k Φ = F_f, |f^| <= (1 + γ_k)Φ = B_f, Φ = α B_s + κ",
         _verdict([gk >= 0, ph >= 0, ab(d1) <= v, ab(d2) <= ph, ab(eps) <= gk * ph],
                  z3.And(ab(d1 + eps) <= v + gk * ph, ab(d2 + eps) <= (1 + gk) * ph))),
    ]
    cases.append(("F_f = γ_k Φ + α F_s and B_f = (1 + γ_k) Φ at Φ = α B_s + κ, F_s, B_s of the score",
                  _verdict(pos, z3.And(Ff == gk * Phi + al * Fs, Bf == (1 + gk) * Phi))))
    F_, B_, fh_, f_ = z3.Reals("F B fh f")
    Ft, Bt = F_ + gb * B_, (1 + gb) * B_
    cases.append(("back: t^ = f^(1 + θ), |θ| <= γ_b, |f^ − f| <= F, |f^| <= B => |t^ − f| <= F + γ_b B, |t^| <= (1 + γ_b) B",
                  _verdict(pos + [ab(th) <= gb, ab(fh_ - f_) <= F_, ab(fh_) <= B_],
                           z3.And(ab(fh_ * (1 + th) - f_) <= Ft, ab(fh_ * (1 + th)) <= Bt))))
    total = Ff + gb * Bf + 2 * u * (1 + gb) * Bf
    cases.append(("F_t + 2u·B_t <= score_mod_exponent(s·A, α, κ, γ_D, γ_s, γ_k, γ_b, u) (then forward_error_bound's "
                  "exponent lemma (i), any F, B, gives E)",
                  _verdict(pos, total <= score_mod_exponent(sA, al, ka, gD, gs, gk, gb, u))))
    return cases


@claim("score_mod_error_bound",
       "for each example score_mod of spec.score_mods in the bounded class (ScoreMod.outside_bound is None: f of "
       "+, · and / by a float value, affine in s, its absolute tree α|s| + κ; relative-bias table, per-head "
       "temperature, per-batch gain, ALiBi), in the standard model (each operation, each non-integer constant "
       "rounded to fp32 and each integer position term converted to fp32 one factor 1 + δ, |δ| <= u; integer "
       "constants, positions and shift below 2^24): every monomial of the printed f carries at most "
       "ScoreMod.roundings() = k roundings (rel_bias 1, temperature 1, batch_scale 1, alibi 3; checked on a model of "
       "the printed term with one δ per operation, any association order), the printed us = x·qk_scale·ln 2 rounds "
       "SCORE_MOD_SCALE_ROUNDINGS = 5 times (with the printed QK_SCALE), the way back to log2 units (/qk_scale, "
       "·log2 e, the tile's ·qk_scale, qk_scale cancelling exactly) SCORE_MOD_BACK_ROUNDINGS = 4 times; so with "
       "|x^ − x| <= γ_D·A every key's modified score is within F_t of f(s·x) with F_t + 2u·B_t <= "
       "score_mod_exponent(s·A, α, κ, γ_D, γ_5, γ_k, γ_4, u), and forward_bound(score_mod=(k, α, κ)) is "
       "forward_error_bound's composition (i)–(iv) with E = that + (T + 1)(−log(1 − U_FUNC)) (checked in SymPy on "
       "symbolic sizes). tanh_cap (a function of the score) is outside: its tolerance is empirical",
       r"|\hat f - f(s x)| \le \gamma_k(\alpha B_s + \kappa) + \alpha F_s,\ "
       r"E = F_t + 2uB_t + (T+1)(-\log(1-U_f))",
       terms=(),
       scope="z3 nonlinear reals for the lemmas, symbolic u, γ's, α, κ, s·A; the counts on SymPy models of the "
             "printed terms; no softcap, ALiBi built-in or FP8 descales with a score_mod (their qk_scale is 1: "
             "refused by forward_bound); FMA contractions round less (covered); forward only (the backward's "
             "tolerances stay empirical)",
       assumptions=("scale_positive",))
def prove_score_mod_error_bound(examples=SM.EXAMPLES, roundings=SM.ScoreMod.roundings, bound=None,
                                score_mod_exponent=None):
    from spec import error_bound as EB
    from spec.proofs.float import _composition_cases

    score_mod_exponent = score_mod_exponent or EB.score_mod_exponent
    cases, counts = [], {EB.SCORE_MOD_SCALE_ROUNDINGS, EB.SCORE_MOD_BACK_ROUNDINGS}
    for sm in examples:
        if sm.outside_bound() is not None:
            continue  # empirical (the docs say so): no case
        cases += _counting_cases(sm, roundings)
        counts.add(roundings(sm))
    cases += _lemma_cases(score_mod_exponent, {k for k in counts if k})
    cases += _composition_cases(bound or EB.forward_bound, score_mod=True)
    return result("score_mod_error_bound", cases, "SymPy models of the printed terms; z3 reals; forward_bound "
                  "checked symbolically")
