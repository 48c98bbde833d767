"""Proofs about the score modifications (issue 15): softcap, ALiBi and attention sinks.

The kernels print ``terms.SOFTCAP_SCALARS``, ``terms.SOFTCAP``, ``terms.ALIBI_SCALAR``,
``terms.ALIBI`` between ``QK`` and the mask, ``terms.SINK_FOLD`` once in the epilogue of the
unsplit forward, ``terms.SOFTCAP_DS`` (``_T``) after dS and ``terms.SINK_GRAD`` in the
backward's preprocess. These proofs run those very Term objects (``proof_tools.run_terms``)
on symbolic rows and compare them with the definitions of ``spec.recurrences``
(``softcap_score``, ``alibi_bias``, ``sink_state``, ``combine_with_sink``) and with
``sp.diff`` of the loss. Every ``prove_<id>`` takes the terms under test as arguments, so
``tests/test_score_mods.py`` feeds mutants (softcap dropped, ALiBi sign or alignment wrong,
sink per tile or per split, gradients without their factor) and watches them FAIL.
"""

from __future__ import annotations

import sympy as sp
import z3
from sympy.codegen.cfunctions import exp2

from spec import masks
from spec import notation as n
from spec import recurrences as R
from spec import error_bound, terms

from spec.proofs.tools import ZERO, equal_cases, natural_exp, finite_state, interpret, nonnegative, result, run_terms, scalar, z3_verdict
from spec.proofs.kernel import forward_env, kernel_tile, masked_scores
from spec.proofs.ring import to_z3
from spec.proofs.softmax import fold_merge
from spec.registry import claim

s = n.sm_scale  # natural-log scores are s·x before any modification
c = n.softcap
QK_SCALE = terms.QK_SCALE.expr

#: the ALiBi positions of a row's keys: query row i, keys j_1.. (integers), the alignment shift
I = sp.Symbol("i", integer=True)
SHIFT = sp.Symbol("shift", integer=True)


def _keys(count: int, name: str = "x"):
    return list(sp.symbols(f"{name}_1:{count + 1}", real=True))


def _key_positions(count: int):
    return list(sp.symbols(f"j_1:{count + 1}", integer=True))


def softcap_branch(softcap_terms, which: int = -1):
    """``softcap_terms`` with the cap's ``t`` taken on one branch of its select (``-1``: the exp2 form,
    exact; ``0``: the rational form, Lambert's convergent, claim softcap_accuracy); a ``t`` with no
    select is kept as it is."""
    out = []
    for term in softcap_terms:
        if term.symbol == n.t and isinstance(term.expr, sp.Piecewise):
            term = terms.Term(term.symbol, term.expr.args[which].expr, term.claim, term.note)
        out.append(term)
    return tuple(out)


def modified_scores(xs, js, softcap_terms=terms.SOFTCAP, alibi_terms=terms.ALIBI, softcap_scalars=terms.SOFTCAP_SCALARS,
                    alibi_scalar=terms.ALIBI_SCALAR, use_softcap=True, use_alibi=True, branch=-1,
                    score_log2=terms.SCORE_LOG2, score_log2_scalar=terms.SCORE_LOG2_SCALAR):
    """The kernel's ``qk`` (log2 units) of raw scores ``xs`` at key positions ``js`` after the
    score-mod lines the template prints (softcap, or ALiBi alone's SCORE_LOG2, then ALiBi), and the
    kernel's ``t`` of each key; the cap's ``t`` on its select's branch ``branch`` (``-1``: the exp2
    form, tanh exactly)."""
    softcap_terms = softcap_branch(softcap_terms, branch)
    env = {n.sm_scale: s, n.softcap: c, n.slope: n.slope, n.i: I, n.shift: SHIFT}
    env.update(run_terms(softcap_scalars if use_softcap else (score_log2_scalar,), env))
    env.update(run_terms((alibi_scalar,), env))
    out, ts = [], []
    for x, j in zip(xs, js):
        into_log2 = tuple(softcap_terms) if use_softcap else tuple(score_log2) if use_alibi else ()
        lines = into_log2 + (tuple(alibi_terms) if use_alibi else ())
        got = run_terms(lines, {**env, n.qk: x, n.j: j})
        out.append(got.get(n.qk, x))
        ts.append(got.get(n.t))
    return out, ts


def definition(x, j, use_softcap=True, use_alibi=True):
    """The natural-log score of the issue: cap after scaling, then the bias."""
    y = R.softcap_score(s * x, c) if use_softcap else s * x
    return y + (R.alibi_bias(n.slope, I, j, SHIFT) if use_alibi else 0)


def _tanh_as_exp(expr):
    return expr.rewrite(sp.exp)


# ----------------------------------------------------------------------------------
@claim("score_mod_invariant",
       "the printed softcap and ALiBi lines give the modified score in log2 units, and the tile lines run with the "
       "printed qk_scale = 1 after them (MOD_TILE_SCALE), so qk·qk_scale = (c·tanh(scale·x/c) − slope·|i + shift − j|)·log2 e "
       "with no quotient by the scale (each alone and both; the cap's t on its exp2 branch, tanh exactly: its rational branch, |y| < 1, is "
       "tanh within SOFTCAP_REL, claim softcap_accuracy), and the tile update on those modified, then masked, scores is the ⊕-fold "
       "of single-key states with the modified logits: the online-softmax invariant and ⊕ hold for any "
       "per-entry transformed logit (a masked key stays out, whatever its modified value)",
       r"\mathrm{qk}\cdot\mathrm{qk}_{\mathrm{scale}}\ln 2 = c\tanh(s x/c) - \mathrm{slope}\,|i+\mathrm{shift}-j|,"
       r"\quad \mathrm{tile}(\sigma; f(x)) = \sigma\oplus\bigoplus_j (f(x_j), 1, v_j)",
       scope="fixed sizes: a row of 2 keys (each masked or not), per-entry f symbolic; reals, exact")
def prove_score_mod_invariant(softcap_terms=terms.SOFTCAP, alibi_terms=terms.ALIBI,
                              softcap_scalars=terms.SOFTCAP_SCALARS, alibi_scalar=terms.ALIBI_SCALAR,
                              forward_tile=terms.FORWARD_TILE, mask_term=masks.MASK_TERM, mod_before_mask=True,
                              score_log2=terms.SCORE_LOG2, score_log2_scalar=terms.SCORE_LOG2_SCALAR,
                              mod_tile_scale=terms.MOD_TILE_SCALE):
    x, = _keys(1)
    j, = _key_positions(1)
    kw = dict(softcap_terms=softcap_terms, alibi_terms=alibi_terms, softcap_scalars=softcap_scalars,
              alibi_scalar=alibi_scalar, score_log2=score_log2, score_log2_scalar=score_log2_scalar)
    tile_scale = mod_tile_scale.expr
    pairs = []
    for label, cap, bias in (("softcap", True, False), ("alibi", False, True), ("softcap then alibi", True, True)):
        got = modified_scores([x], [j], use_softcap=cap, use_alibi=bias, **kw)[0][0]
        pairs.append((f"{label}: qk·qk_scale·ln2 = definition (qk_scale = the printed MOD_TILE_SCALE)",
                      got * tile_scale * n.LN2, _tanh_as_exp(definition(x, j, cap, bias))))
    # the tile update on the modified scores (the mask after the modification, as printed):
    # any per-entry logit f(x_j) enters the state exactly as a raw logit would
    xs, js, vs = _keys(2), _key_positions(2), _keys(2, "v")
    f = sp.Function("f", real=True)  # an arbitrary per-entry transformation, in log2 units
    generic = [f(xx) for xx in xs]
    printed = modified_scores(xs, js, **kw)[0]
    tile_cases = [("any f", generic, state, masked) for state in (finite_state(""), R.E)
                  for masked in ((), (1,), (0, 1))]
    tile_cases += [("softcap and alibi", printed, finite_state(""), (1,)), ("softcap and alibi", printed, R.E, (0,))]
    for name, mod, state, masked in tile_cases:
        state_label = "m = -oo" if state == R.E else "finite state"
        if mod_before_mask:
            scores = masked_scores(mod, masked, mask_term)
        else:  # the mutant order: mask the raw scores, then modify (-oo capped to -c)
            raw = masked_scores(xs, masked, mask_term)
            scores = modified_scores(raw, js, **kw)[0] if name != "any f" else [f(r) for r in raw]
        keys = [R.key_state(mod[k] * tile_scale * n.LN2, vs[k]) for k in range(2) if k not in masked]
        pairs.append((f"{name}, {state_label}, masked keys {list(masked)}",
                      kernel_tile(state, scores, vs, forward_tile, mod_tile_scale), R.fold([state] + keys)))
    return result("score_mod_invariant", equal_cases(pairs),
                  "exact identities (tanh as exp), a 2-key tile with masked keys, finite and -oo state")


@claim("score_mod_bounds",
       "safety of the modified scores: the printed t lies in [−1, 1] on both branches of its select (the "
       "rational one |t| <= |y| < 1), so |c·t| ≤ c; the ALiBi bias "
       "−slope·|i + shift − j| ≤ 0 for slope ≥ 0; every exponent of the tile update on biased scores "
       "and of the sink fold is ≤ 0",
       r"-1\le t\le 1,\ |c\,t|\le c,\ -\mathrm{slope}\,|i+\mathrm{shift}-j|\le 0,\ "
       r"\text{every exponent}\le 0",
       scope="symbolic scores, slopes and positions; reals, exact (not rounded)")
def prove_score_mod_bounds(softcap_terms=terms.SOFTCAP, softcap_scalars=terms.SOFTCAP_SCALARS,
                           alibi_terms=terms.ALIBI, alibi_scalar=terms.ALIBI_SCALAR,
                           forward_tile=terms.FORWARD_TILE, sink_fold=terms.SINK_FOLD,
                           mod_tile_scale=terms.MOD_TILE_SCALE):
    x, = _keys(1)
    j, = _key_positions(1)
    (capped,), (t,) = modified_scores([x], [j], softcap_terms, alibi_terms, softcap_scalars, alibi_scalar,
                                      use_alibi=False)
    tile_scale = mod_tile_scale.expr
    natural = capped * tile_scale * n.LN2  # the capped natural-log score c·t
    (biased,), _ = modified_scores([x], [j], softcap_terms, alibi_terms, softcap_scalars, alibi_scalar,
                                   use_softcap=False)
    cases = [
        ("t <= 1", nonnegative(1 - t)), ("t >= -1", nonnegative(1 + t)),
        ("c·t <= c", nonnegative(c - natural)), ("c·t >= -c", nonnegative(c + natural)),
        ("bias <= 0: biased score <= scale·x", nonnegative(s * x - biased * tile_scale * n.LN2)),
    ]
    cases += _rational_bounds(softcap_terms)
    cases += _biased_exponents(forward_tile, alibi_terms, alibi_scalar, mod_tile_scale) + _sink_exponents(sink_fold)
    return result("score_mod_bounds", cases, "signs decided by SymPy on slack variables; the rational branch by z3")


def _rational_bounds(softcap_terms):
    """The rational branch of t (taken where its condition holds): ``|t| <= |y| < 1`` (z3, reals), with
    ``y2`` the printed ``y·y``."""
    own = {term.symbol: term.expr for term in softcap_terms}
    t_expr = own.get(n.t)
    if not isinstance(t_expr, sp.Piecewise):
        return [("t has a rational branch", sp.Symbol("no select"))]
    (rational, cond), y = t_expr.args[0], z3.Real("y")
    env = {n.y: y}
    t, where = to_z3(rational.xreplace({n.y2: own.get(n.y2, n.y2)}), env), to_z3(cond, env)
    ab = z3.If(y >= 0, y, -y)
    return [("rational branch: where it is taken, −1 <= −|y| <= t <= |y| <= 1",
             z3_verdict([where], z3.And(t <= ab, -t <= ab, t <= 1, t >= -1)))]


def _biased_exponents(forward_tile, alibi_terms, alibi_scalar, mod_tile_scale):
    """Every exp2 argument of the tile update is <= 0 when the scores carry the bias: the scores
    entering the bias (log2 units) are chosen so that the *biased* ones realise each case of who
    holds the max (targets in raw-score units: log2 score = target·scale·log2 e)."""
    a = finite_state("")
    t0, t1, t2 = sp.symbols("t_0:3", nonnegative=True)
    js = _key_positions(2)
    coef = run_terms((alibi_scalar,), {})[n.alibi_coef]
    raw = lambda k, target: target * QK_SCALE + coef * sp.Abs(I + SHIFT - js[k])  # its biased value: target·s·log2 e
    y1, y2 = _keys(2, "y")  # the biased scores, raw-score units
    scenarios = {
        "old max holds the max": (a, [(a.m - t1) / s, (a.m - t2) / s]),
        "biased x_1 holds the max": (a._replace(m=s * y1 - t0), [y1, y1 - t2 / s]),
        "biased x_2 holds the max": (a._replace(m=s * y2 - t0), [y2 - t1 / s, y2]),
    }
    chained = terms.chain(forward_tile)
    arguments = [(sym.name, e.args[0]) for sym in (n.p, n.alpha) for e in chained[sym].atoms(exp2)]
    cases = []
    for label, (state, targets) in scenarios.items():
        scores = [run_terms(alibi_terms, {n.qk: raw(k, y), n.alibi_coef: coef, n.i: I, n.j: js[k],
                                          n.shift: SHIFT})[n.qk] for k, y in enumerate(targets)]
        env = forward_env(state, scores, _keys(2, "v"), mod_tile_scale)
        for name, arg in arguments:
            for k, value in enumerate(sp.Matrix([interpret(arg, env)])):
                cases.append((f"{label}: exponent of {name}[{k}] <= 0", nonnegative(-value)))
    return cases


def _sink_exponents(sink_fold):
    """The sink fold's exponents (alpha and e^{sink - m}) are <= 0, whoever holds the max."""
    z, tt = sp.Symbol("z", real=True), sp.Symbol("t_s", nonnegative=True)
    chained = terms.chain(sink_fold)
    arguments = [(sym.name, e.args[0]) for sym in (n.alpha, n.l_i) for e in chained[sym].atoms(exp2)]
    cases = []
    for label, (m, sink) in {"row max holds the max": (z * n.LOG2E, z - tt), "sink holds the max": (z * n.LOG2E - tt, z),
                             "row with no key (m = -oo)": (n.NEG_INF, z),
                             "row with no key, sink = -oo": (n.NEG_INF, n.NEG_INF)}.items():
        for name, arg in arguments:
            value = interpret(arg, {n.m_i: m, n.sink: sink, n.sink2: interpret(chained[n.sink2], {n.sink: sink}),
                                    n.m_ij: interpret(chained[n.m_ij], {n.m_i: m, n.sink: sink})})
            cases.append((f"{label}: exponent of {name} <= 0", nonnegative(-value)))
    return cases


# ----------------------------------------------------------------------------------
def _definition_with_sink(logits_and_values, sink):
    """``out = Σ e^{s_j} v_j / (e^{sink} + Σ e^{s_j})`` and ``lse = log(e^{sink} + Σ e^{s_j})``."""
    den = sp.exp(sink) + sp.Add(*[sp.exp(y) for y, _ in logits_and_values])
    num = sp.Add(*[sp.exp(y) * vv for y, vv in logits_and_values])
    return num / den, sp.log(den)


def _definition_without_sink(logits_and_values):
    den = sp.Add(*[sp.exp(y) for y, _ in logits_and_values])
    return sp.Add(*[sp.exp(y) * vv for y, vv in logits_and_values]) / den, sp.log(den)


def unsplit_kernel(tiles, forward_tile=terms.FORWARD_TILE, sink_fold=terms.SINK_FOLD,
                   epilogue=terms.FORWARD_EPILOGUE, sink=n.sink):
    """``(out, lse)`` of the unsplit forward: ``forward_tile`` per key tile (``tiles``: lists
    of (raw score or -oo, value)), then ``sink_fold`` and ``epilogue`` once, as the template
    prints them; ``sink`` the sink's value (a symbol, or -oo)."""
    state = R.E
    for tile in tiles:
        state = kernel_tile(state, [x for x, _ in tile], [vv for _, vv in tile], forward_tile)
    env = {n.m_i: state.m * n.LOG2E, n.l_i: state.d, n.acc: sp.Matrix([[state.o]]), n.sink: sink}
    fin = run_terms(tuple(sink_fold) + tuple(epilogue), env)
    return scalar(fin[n.acc]), fin[n.lse]


@claim("sink_once",
       "the sink is folded in exactly once per row: the unsplit kernel (tile updates, then SINK_FOLD "
       "once in the epilogue) gives out = Σ e^{s_j} v_j / (e^{sink} + Σ e^{s_j}), lse = log(e^{sink} + "
       "Σ e^{s_j}) for 1, 2 and 3 key tiles, and out 0, lse = sink for a row with no key (out 0, lse = -inf, "
       "no NaN, for sink = -inf there; a sink of -inf drops out of a row with keys); split-KV's "
       "combine merges the state (sink, 1, 0) by ⊕ exactly once, and gives the same for 1, 2 and 3 "
       "splits, each with keys or empty (the printed combine of split-KV decoding, for every number "
       "of splits: claim sink_once_combine); exact arithmetic",
       r"\mathrm{out}_i=\frac{\sum_j e^{s_{ij}}v_j}{e^{\mathrm{sink}}+\sum_j e^{s_{ij}}},\ "
       r"\mathrm{lse}_i=\log\big(e^{\mathrm{sink}}+\textstyle\sum_j e^{s_{ij}}\big),\ "
       r"\Big(\bigoplus_k \sigma_k\Big)\oplus(\mathrm{sink},1,0)",
       scope="fixed sizes: 1–3 key tiles of 1–3 keys, 1–3 splits (some empty); sink symbolic or -oo; reals, exact")
def prove_sink_once(forward_tile=terms.FORWARD_TILE, sink_fold=terms.SINK_FOLD,
                    epilogue=terms.FORWARD_EPILOGUE, combine=R.combine_with_sink):
    xs, vs = _keys(3), _keys(3, "v")
    key = lambda k: (xs[k], vs[k])
    masked = (n.NEG_INF, vs[2])  # a key the mask hides: its score is -oo
    rows = {
        "1 tile of 2 keys": ([[key(0), key(1)]], [0, 1]),
        "2 tiles (1 + 2 keys)": ([[key(0)], [key(1), key(2)]], [0, 1, 2]),
        "2 tiles, the first fully masked": ([[masked], [key(0), key(1)]], [0, 1]),
        "3 tiles of 1 key": ([[key(0)], [key(1)], [key(2)]], [0, 1, 2]),
    }
    pairs = []
    for label, (tiles, attended) in rows.items():
        want = _definition_with_sink([(s * xs[k], vs[k]) for k in attended], n.sink)
        pairs.append((f"unsplit kernel, {label}", unsplit_kernel(tiles, forward_tile, sink_fold, epilogue), want))
    pairs.append(("unsplit kernel, row with no key: out 0, lse = sink",
                  unsplit_kernel([[masked, masked]], forward_tile, sink_fold, epilogue), (0, n.sink)))
    # sink = -oo: the row has no entry at all; out 0, lse = -oo (no NaN), as N_k = 0 and the combine give
    pairs.append(("unsplit kernel, row with no key and sink = -oo: out 0, lse = -oo",
                  unsplit_kernel([[masked, masked]], forward_tile, sink_fold, epilogue, sink=n.NEG_INF),
                  (0, n.NEG_INF)))
    pairs.append(("unsplit kernel, 2 keys and sink = -oo: the sink drops out",
                  unsplit_kernel([[key(0), key(1)]], forward_tile, sink_fold, epilogue, sink=n.NEG_INF),
                  _definition_without_sink([(s * xs[k], vs[k]) for k in (0, 1)])))
    # split-KV: each split's state, combined with the sink exactly once
    split_states = [finite_state(f"k{k}") for k in range(3)]
    for count in (1, 2, 3):
        for empty in range(count + 1):  # the first `empty` splits saw no key
            splits = [R.E] * empty + split_states[empty:count]
            alpha = [R.alpha_map(st) for st in split_states[empty:count]]
            den = sp.exp(n.sink) + sp.Add(*[ad for ad, _ in alpha])
            want = (sp.Add(*[ao for _, ao in alpha]) / den, sp.log(den))
            pairs.append((f"split-KV ⊕, {count} split(s), {empty} empty", R.normalise(combine(splits, n.sink)), want))
    return result("sink_once", equal_cases(pairs),
                  "unsplit: 1-3 key tiles and an empty row, sink finite or -oo; split-KV ⊕: 1-3 splits, some empty")


# ----------------------------------------------------------------------------------
@claim("softcap_grad",
       "through the cap, the kernel's gradient of a raw score is dS·(1 − t²)·scale = ∂L/∂x_j for "
       "s_j = c·tanh(scale·x_j/c) − slope·|i + shift − j| (t on the exp2 branch of its select, tanh exactly; on the "
       "rational branch 1 − t² is within 3·SOFTCAP_REL of 1 − tanh²: claim softcap_accuracy) (ALiBi alone: dS·scale, the bias has no "
       "gradient): the printed factor (1 − t²)·scale equals ∂s/∂x exactly (tanh as exp), and for any "
       "per-entry logit s_j = S(x_j) the kernel's dS = P ∘ (dP − delta) from the saved lse times S'(x_j) "
       "is ∂L/∂x_j of L = <dO, O> + dlse·lse, by sp.diff on a row of 2 keys; the dK/dV kernel's key-major "
       "factor (1 − tT²) on dSᵀ is the same factor entrywise",
       r"\frac{\partial L}{\partial x_j} = dS_j\,\frac{\partial s_j}{\partial x_j},\quad "
       r"\frac{\partial s_j}{\partial x_j} = \mathrm{scale}\,(1-t_j^2),\ t_j=\tanh(\mathrm{scale}\,x_j/c)",
       scope="fixed sizes: a row of 2 keys; reals, exact (tanh written with exp)")
def prove_softcap_grad(softcap_ds=terms.SOFTCAP_DS, softcap_terms=terms.SOFTCAP, alibi_terms=terms.ALIBI,
                       backward_tile=terms.BACKWARD_TILE, backward_preprocess=terms.BACKWARD_PREPROCESS,
                       softcap_ds_t=terms.SOFTCAP_DS_T):
    x, = _keys(1)
    j, = _key_positions(1)
    pairs = []
    for label, cap, bias in (("softcap", True, False), ("alibi", False, True), ("softcap and alibi", True, True)):
        (qk,), (t,) = modified_scores([x], [j], softcap_terms=softcap_terms, alibi_terms=alibi_terms,
                                      use_softcap=cap, use_alibi=bias)
        factor = run_terms(softcap_ds, {n.ds: 1, n.t: t})[n.ds] if cap else sp.Integer(1)
        # BACKWARD_SCALE's one multiply by the scale, after the loop; against the definition's
        # derivative and against that of the score the printed forward lines compute
        pairs.append((f"{label}: printed factor·scale = ∂s/∂x", _tanh_as_exp(factor * s),
                      _tanh_as_exp(sp.diff(definition(x, j, cap, bias), x))))
        pairs.append((f"{label}: printed factor·scale = ∂(printed qk·qk_scale·ln 2)/∂x", factor * s,
                      sp.diff(qk * terms.MOD_TILE_SCALE.expr * n.LN2, x)))
        if cap:  # the dK/dV kernel's key-major copy (dSᵀ, tT) applies the same factor to each entry
            factor_t = run_terms(softcap_ds_t, {n.dsT: 1, n.tT: t})[n.dsT]
            pairs.append((f"{label}: key-major factor (SOFTCAP_DS_T) = row-major factor", factor_t, factor))
    # the chain rule through any per-entry logit S(x_j), with the kernel's own dS
    keys, dim = 2, 1
    xs = _keys(keys)
    S = sp.Function("S", real=True)
    V = sp.Matrix(keys, dim, lambda a, b: sp.Symbol(f"v_{a + 1}{b + 1}", real=True))
    dO = sp.Matrix(1, dim, lambda _, b: sp.Symbol(f"dO_{b + 1}", real=True))
    g = sp.Symbol("g", real=True)
    logits = [S(xx) for xx in xs]
    O = sp.Matrix([R.softmax(logits)]) * V
    lse = sp.log(sp.Add(*[sp.exp(y) for y in logits]))
    loss = (dO * O.T)[0, 0] + g * lse
    env = {n.qk: sp.Matrix([[y / s for y in logits]]), n.qk_scale: QK_SCALE, n.lse: lse, n.v: V, n.vT: V.T,
           n.do: dO, n.o: O}
    delta = run_terms(backward_preprocess, {**env, n.dlse: g})[n.delta]
    ds = run_terms(backward_tile, {**env, n.delta: delta})[n.ds]
    pairs.append(("kernel dS·S'(x_j) = ∂L/∂x_j (any per-entry S)",
                  tuple(d * sp.diff(y, xx) for d, y, xx in zip(ds, logits, xs)),
                  tuple(sp.diff(loss, xx) for xx in xs)))
    return result("softcap_grad", equal_cases(pairs),
                  "∂s/∂x of the printed factor (1 variable); chain rule on 2 keys, head dim 1, by sp.diff")


@claim("sink_grad",
       "with a sink, the kernel's dS = P ∘ (dP − delta) is still ∂L/∂s_j, and its dsink = −e^{sink − lse}·delta "
       "is ∂L/∂sink for L = <dO, O> + dlse·lse (delta = rowsum(dO ∘ O) − dlse); summed over the rows of a "
       "head it is the head's gradient −Σ_i e^{sink − lse_i}·Δ_i; on a row of lse = -inf (sink = -inf, no key) "
       "the printed guard gives dsink = dlse, the limit of the finite sink's (no NaN)",
       r"\frac{\partial L}{\partial\,\mathrm{sink}} = -\sum_i e^{\mathrm{sink}-\mathrm{lse}_i}\,"
       r"(\Delta_i - d\mathrm{lse}_i)",
       scope="fixed sizes: one row of the backward tile; reals, exact")
def prove_sink_grad(sink_grad=terms.SINK_GRAD, backward_tile=terms.BACKWARD_TILE,
                    backward_preprocess=terms.BACKWARD_PREPROCESS):
    keys, dim = 2, 2
    y = _keys(keys, "y")  # the (natural-log) scores of the row, free
    V = sp.Matrix(keys, dim, lambda a, b: sp.Symbol(f"v_{a + 1}{b + 1}", real=True))
    dO = sp.Matrix(1, dim, lambda _, b: sp.Symbol(f"dO_{b + 1}", real=True))
    g = sp.Symbol("g", real=True)
    den = sp.exp(n.sink) + sp.Add(*[sp.exp(yy) for yy in y])
    O = sp.Matrix([[sp.exp(yy) / den for yy in y]]) * V
    lse = sp.log(den)
    loss = (dO * O.T)[0, 0] + g * lse
    env = {n.qk: sp.Matrix([[yy / s for yy in y]]), n.qk_scale: QK_SCALE, n.lse: lse, n.v: V, n.vT: V.T,
           n.do: dO, n.o: O, n.sink: n.sink}
    delta = run_terms(backward_preprocess, {**env, n.dlse: g})[n.delta]
    ds = run_terms(backward_tile, {**env, n.delta: delta})[n.ds]
    dsink = run_terms(sink_grad, {**env, n.delta: delta})[n.dsink]
    # a row with no key: O = 0, lse = sink, so L = g·sink
    empty = run_terms(sink_grad, {n.sink: n.sink, n.lse: n.sink,
                                  n.delta: run_terms(backward_preprocess, {n.do: dO, n.o: sp.zeros(1, dim),
                                                                           n.dlse: g})[n.delta]})[n.dsink]
    # sink = -oo on a row with no key: lse = -oo (out 0); the limit of the finite case, dsink = dlse,
    # where e^{sink - lse} would be NaN
    empty_neg_inf = run_terms(sink_grad, {n.sink: n.NEG_INF, n.lse: n.NEG_INF,
                                          n.delta: run_terms(backward_preprocess, {n.do: dO, n.o: sp.zeros(1, dim),
                                                                                   n.dlse: g})[n.delta]})[n.dsink]
    pairs = [
        ("dS = ∂L/∂s_j with a sink", tuple(ds), tuple(sp.diff(loss, yy) for yy in y)),
        ("dsink = ∂L/∂sink", dsink, sp.diff(loss, n.sink)),
        ("row with no key: dsink = dlse", empty, g),
        ("row with no key, sink = -oo (lse = -oo): dsink = dlse, the finite case's limit, no NaN", empty_neg_inf, g),
    ]
    return result("sink_grad", equal_cases(pairs), "2 keys, head dim 2, a row with no key (sink finite or -oo), "
                  "by sp.diff")


# ----------------------------------------------------------------------------------
# The cap's accuracy (issue 23 row 8): t = tanh(y) by exp2 alone, 1 − 2/(2^{2y log2 e} + 1), has an
# absolute error ~u, so c·t erred by ~c·u for a large cap (5.5e-5 at c = 1e3, 0.98 at 1e30). Below
# |y| = 1 the kernels print Lambert's convergent instead: relatively accurate, so the capped score's
# error is relative to |c·t| <= s·|x| for every cap (spec.error_bound.softcap_score_factor).
# ----------------------------------------------------------------------------------
def lambert_convergent(y, last: int):
    """``y/(1 + y²/(3 + y²/(5 + ... + y²/last)))``: Lambert's continued fraction for tanh, cut at ``last``."""
    out = sp.Integer(last)
    for d in range(last - 2, 0, -2):
        out = d + y**2 / out
    return y / out


def _gamma_index(e):
    """The γ-index of a positive expression in ``y2`` (rounded once, as ``y·y``), integers and ``y``
    (exact: the argument), evaluated as printed: a sum of ``n`` nonnegative operands rounds ``n − 1``
    times on top of its largest index, a product adds its operands' indices and ``n − 1`` roundings.
    None: not such an expression (the analysis does not apply)."""
    if e.is_Integer and e > 0:
        return 0
    if e == n.y:
        return 0
    if e == n.y2:
        return 1
    if isinstance(e, (sp.Add, sp.Mul)):
        below = [_gamma_index(a) for a in e.args]
        if any(b is None for b in below):
            return None
        if isinstance(e, sp.Add) and any(a == n.y for a in e.args):
            return None  # y is signed: a sum with it is no sum of nonnegative terms
        return (max(below) if isinstance(e, sp.Add) else sum(below)) + len(e.args) - 1
    return None


@claim("softcap_accuracy",
       "the printed t = tanh(y) of the cap (y = fl(x·fl(scale/c))) is within SOFTCAP_REL·|tanh y| for every "
       "real y, in the standard model (every fp32 operation within u, exp2 within U_FUNC = 4u, round-to-nearest "
       "odd, FMA contraction allowed: it only drops roundings; no overflow, which saturates t at ±1): for "
       "|y| < 1 it is Lambert's convergent C_4 = y(945 + 105y² + y⁴)/(945 + 420y² + 15y⁴) (rebuilt from the "
       "continued fraction, exact), |C_4 − tanh y| <= |C_5 − C_4| <= SOFTCAP_CF·min(C_4, C_5) on 0 < y < 1 "
       "(hypothesis: the convergents of a continued fraction with positive elements bracket its value), its "
       "Horner evaluation with positive coefficients rounds numerator and denominator within γ_6 each "
       "(indices counted in the printed branch), so t within (1 + ε)(1 + γ_6)(1 + u)/(1 − γ_6) − 1; for "
       "|y| >= 1 the exp2 form 1 − 2/(2^{2y log2 e} + 1) is tanh exactly and, rounded, within 16u of tanh "
       "at z's argument y(1 + θ), |θ| <= γ_2 (hypothesis: tanh odd, increasing, tanh(x)/x decreasing and "
       "tanh concave on x > 0, so a relative θ in the argument is at most θ in tanh); and the backward's "
       "1 − t² is within 3·SOFTCAP_REL of 1 − tanh² y on the rational branch",
       r"|\hat t - \tanh y| \le \rho_t|\tanh y|,\ \hat t = \begin{cases} \frac{y(945+105y^2+y^4)}{945+420y^2+15y^4}"
       r" & |y|<1\\ 1-\frac{2}{2^{2y\log_2 e}+1} & |y|\ge 1\end{cases}",
       scope="every real y; reals (z3 nonlinear arithmetic on the stated rational bounds, u = 2^-24, U_FUNC = 4u); "
             "the tanh facts and the continued fraction's bracketing are hypotheses; the rounding of y itself "
             "is the error bound's (softcap_score_factor)")
def prove_softcap_accuracy(softcap_terms=terms.SOFTCAP, softcap_scalars=terms.SOFTCAP_SCALARS,
                           num_roundings=error_bound.SOFTCAP_NUM_ROUNDINGS,
                           den_roundings=error_bound.SOFTCAP_DEN_ROUNDINGS,
                           cf=error_bound.SOFTCAP_CF, exp2_branch=error_bound.SOFTCAP_EXP2):
    own = {term.symbol: term.expr for term in softcap_terms}
    cases = []
    # (1) the printed form: y = x·(scale/c), y2 = y·y, t a select of two branches on |y| < 1
    scalars = run_terms(softcap_scalars, {})
    y_value = run_terms(softcap_terms[:1], {n.qk: n.qk, **scalars}).get(n.y)
    cases.append(("y = scale·x / c (the printed y and softcap_in)",
                  sp.simplify(y_value - s * n.qk / c) if y_value is not None else sp.Symbol("no y")))
    cases.append(("y2 = y·y", ZERO if own.get(n.y2) == n.y * n.y else sp.Tuple(own.get(n.y2))))
    t_expr = own.get(n.t)
    split = sp.Abs(n.y) < terms.SOFTCAP_SPLIT
    if not (isinstance(t_expr, sp.Piecewise) and len(t_expr.args) == 2 and t_expr.args[0].cond == split
            and terms.SOFTCAP_SPLIT == 1):
        return result("softcap_accuracy", cases + [("t = select(|y| < 1, rational, exp2)", sp.Tuple(t_expr))], "")
    rational, exp2_form = t_expr.args[0].expr, t_expr.args[1].expr
    y = sp.Symbol("y", positive=True)
    # (2) the rational branch is Lambert's convergent C_4 (a changed coefficient fails here)
    c4, c5 = lambert_convergent(y, 9), lambert_convergent(y, 11)
    cases.append(("rational branch = Lambert's convergent C_4 (cut after 9)",
                  sp.cancel(rational.xreplace({n.y2: n.y**2}).xreplace({n.y: y}) - c4)))
    # (3) the exp2 branch is tanh exactly, in the analysed form (2y exact, one fp32 log2 e, exp2, 3 roundings)
    cases.append(("exp2 branch has the analysed form 1 − 2/(exp2(2y·log2 e) + 1)",
                  ZERO if exp2_form == 1 - 2 / (terms.exp2(n.y * 2 * n.LOG2E) + 1) else sp.Tuple(exp2_form)))
    cases.append(("exp2 branch = tanh(y) exactly", sp.simplify(natural_exp(exp2_form.xreplace({n.y: y})) - sp.tanh(y).rewrite(sp.exp))))
    # (4) truncation: tanh lies between C_4 and C_5 (hypothesis), |C_5 − C_4| <= ε·min(C_4, C_5) on (0, 1)
    eps = sp.nsimplify(cf)
    yz = z3.Real("y")
    z4, z5 = to_z3(sp.cancel(c4).xreplace({y: n.y}), {n.y: yz}), to_z3(sp.cancel(c5).xreplace({y: n.y}), {n.y: yz})
    ez = z3.RealVal(str(eps))
    cases.append((f"0 < y < 1 => |C_5 − C_4| <= {eps}·min(C_4, C_5)",
                  z3_verdict([yz > 0, yz < 1], z3.And(z5 - z4 <= ez * z4, z4 - z5 <= ez * z4,
                                                       z5 - z4 <= ez * z5, z4 - z5 <= ez * z5))))
    # (5) the rounding count of the printed rational branch: numerator and denominator
    num, den = sp.fraction(rational)
    for label, part, stated in (("numerator", num, num_roundings), ("denominator", den, den_roundings)):
        count = _gamma_index(part)
        cases.append((f"{label} {part}: positive terms, γ-index <= {stated}",
                      ZERO if count is not None and count <= stated else sp.Symbol(f"gamma index {count}")))
    u, i, j = z3.Reals("u i j")
    g = lambda m: error_bound.gamma_of(m, u)  # noqa: E731
    ti, tj, a, b, ta, tb = z3.Reals("theta_i theta_j a b theta_a theta_b")
    cases.append(("product: |θ_i| <= γ_i, |θ_j| <= γ_j => |(1+θ_i)(1+θ_j) − 1| <= γ_(i+j)",
                  z3_verdict([u > 0, i >= 0, j >= 0, (i + j) * u < 1, ti <= g(i), -ti <= g(i), tj <= g(j), -tj <= g(j)],
                             z3.And((1 + ti) * (1 + tj) - 1 <= g(i + j), 1 - (1 + ti) * (1 + tj) <= g(i + j)))))
    cases.append(("sum of nonnegatives: |θ_a|, |θ_b| <= γ_i => |a(1+θ_a) + b(1+θ_b) − (a+b)| <= γ_i·(a+b)",
                  z3_verdict([u > 0, i >= 0, i * u < 1, a >= 0, b >= 0, ta <= g(i), -ta <= g(i), tb <= g(i), -tb <= g(i)],
                             z3.And(a * ta + b * tb <= g(i) * (a + b), -(a * ta + b * tb) <= g(i) * (a + b)))))
    # (6) the rational branch, composed: C_4 = T(1+η), numerator and denominator within γ, the division
    U = sp.Rational(1, 2**24)
    uz = z3.RealVal(str(U))
    gq = lambda m: z3.RealVal(str(error_bound.gamma_of(m, U)))  # noqa: E731
    rho_rat = sp.nsimplify((1 + eps) * (1 + error_bound.gamma_of(num_roundings, U)) * (1 + U)
                           / (1 - error_bound.gamma_of(den_roundings, U)) - 1)
    T, eta, tn, td, d = z3.Reals("T eta theta_N theta_D delta")
    th = T * (1 + eta) * (1 + tn) * (1 + d) / (1 + td)
    rz = z3.RealVal(str(rho_rat))
    cases.append(("rational branch: C_4 = T(1+η), |η| <= ε, numerator γ_N, denominator γ_D, the division u => "
                  "|t − T| <= ((1+ε)(1+γ_N)(1+u)/(1−γ_D) − 1)·T",
                  z3_verdict([T > 0, eta <= ez, -eta <= ez, tn <= gq(num_roundings), -tn <= gq(num_roundings),
                              td <= gq(den_roundings), -td <= gq(den_roundings), d <= uz, -d <= uz],
                             z3.And(th - T <= rz * T, T - th <= rz * T))))
    # (7) the exp2 branch: |y'| >= 1 − γ_2 (y' = y(1+θ), z's exact argument), so U' = e^{2y'} >= K or <= 1/K
    g2 = error_bound.gamma_of(2, U)
    K = sp.Rational(738, 100)
    cases.append(("e^{2(1 − γ_2)} >= K = 7.38", ZERO if sp.exp(2 * (1 - g2)) > K else sp.exp(2 * (1 - g2)) - K))
    Up, de, d1, d2, d3 = z3.Reals("U delta_e delta_1 delta_2 delta_3")
    Kz, e2 = z3.RealVal(str(K)), z3.RealVal(str(sp.nsimplify(exp2_branch)))
    wh = 2 * (1 + d2) / ((Up * (1 + de) + 1) * (1 + d1))
    th = (1 - wh) * (1 + d3)
    Tp = (Up - 1) / (Up + 1)
    ab = lambda x: z3.If(x >= 0, x, -x)  # noqa: E731
    cases.append(("exp2 branch: U' >= K or U' <= 1/K, exp2 within 4u, 3 roundings => |t − T'| <= 16u·|T'|, "
                  "T' = (U'−1)/(U'+1) = tanh(y')",
                  z3_verdict([Up > 0, z3.Or(Up >= Kz, Up * Kz <= 1), de <= 4 * uz, -de <= 4 * uz]
                             + [z3.And(x <= uz, x >= -uz) for x in (d1, d2, d3)],
                             ab(th - Tp) <= e2 * ab(Tp))))
    T2, tt = z3.Reals("T2 t")
    g2z, rho_e = z3.RealVal(str(g2)), z3.RealVal(str(sp.nsimplify((1 + g2) * (1 + sp.nsimplify(exp2_branch)) - 1)))
    cases.append(("exp2 branch, composed: |T' − T| <= γ_2|T| (argument), |t − T'| <= 16u|T'| => "
                  "|t − T| <= ((1+γ_2)(1+16u) − 1)|T|",
                  z3_verdict([ab(T2 - T) <= g2z * ab(T), ab(tt - T2) <= e2 * ab(T2)], ab(tt - T) <= rho_e * ab(T))))
    # (8) SOFTCAP_REL is the larger of the two, as spec.error_bound computes it
    want = max(float(rho_rat), float((1 + g2) * (1 + sp.nsimplify(exp2_branch)) - 1))
    cases.append(("SOFTCAP_REL >= both branches' bounds", ZERO if error_bound.SOFTCAP_REL >= want * (1 - 1e-12)
                  else sp.Float(error_bound.SOFTCAP_REL - want)))
    # (9) the backward's factor on the rational branch: |T| <= tanh 1 < 0.7616
    rho = z3.RealVal(str(sp.nsimplify(error_bound.SOFTCAP_REL)))
    cases.append(("tanh(1) < 0.7616", ZERO if sp.tanh(1) < sp.Rational(7616, 10000) else sp.tanh(1)))
    cases.append(("rational branch: |t − T| <= ρ|T|, |T| < 0.7616 => |(1 − t²) − (1 − T²)| <= 3ρ·(1 − T²)",
                  z3_verdict([ab(tt - T) <= rho * ab(T), ab(T) < z3.RealVal("0.7616")],
                             ab(tt * tt - T * T) <= 3 * rho * (1 - T * T))))
    return result("softcap_accuracy", cases, "exact identities by SymPy; bounds by z3 on the reals")
