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
from sympy.codegen.cfunctions import exp2

from spec import masks
from spec import notation as n
from spec import recurrences as R
from spec import terms
from spec.proofs.tools import equal_cases, finite_state, interpret, nonnegative, result, run_terms, scalar
from spec.proofs.kernel import forward_env, kernel_tile, masked_scores
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


def modified_scores(xs, js, softcap_terms=terms.SOFTCAP, alibi_terms=terms.ALIBI, softcap_scalars=terms.SOFTCAP_SCALARS,
                    alibi_scalar=terms.ALIBI_SCALAR, use_softcap=True, use_alibi=True):
    """The kernel's ``qk`` of raw scores ``xs`` at key positions ``js`` after the score-mod
    lines the template prints (softcap, then ALiBi), and the kernel's ``t`` of each key."""
    env = {n.sm_scale: s, n.softcap: c, n.slope: n.slope, n.i: I, n.shift: SHIFT}
    env.update(run_terms(softcap_scalars, env))
    env.update(run_terms((alibi_scalar,), env))
    out, ts = [], []
    for x, j in zip(xs, js):
        lines = (tuple(softcap_terms) if use_softcap else ()) + (tuple(alibi_terms) if use_alibi else ())
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
       "the printed softcap and ALiBi lines give qk·qk_scale = (c·tanh(scale·x/c) − slope·|i + shift − j|)·log2 e "
       "(each alone and both), and the tile update on those modified, then masked, scores is the ⊕-fold "
       "of single-key states with the modified logits: the online-softmax invariant and ⊕ hold for any "
       "per-entry transformed logit (a masked key stays out, whatever its modified value)",
       r"\mathrm{qk}\cdot\mathrm{qk}_{\mathrm{scale}}\ln 2 = c\tanh(s x/c) - \mathrm{slope}\,|i+\mathrm{shift}-j|,"
       r"\quad \mathrm{tile}(\sigma; f(x)) = \sigma\oplus\bigoplus_j (f(x_j), 1, v_j)",
       scope="fixed sizes: a row of 2 keys (each masked or not), per-entry f symbolic; reals, exact")
def prove_score_mod_invariant(softcap_terms=terms.SOFTCAP, alibi_terms=terms.ALIBI,
                              softcap_scalars=terms.SOFTCAP_SCALARS, alibi_scalar=terms.ALIBI_SCALAR,
                              forward_tile=terms.FORWARD_TILE, mask_term=masks.MASK_TERM, mod_before_mask=True):
    x, = _keys(1)
    j, = _key_positions(1)
    kw = dict(softcap_terms=softcap_terms, alibi_terms=alibi_terms, softcap_scalars=softcap_scalars,
              alibi_scalar=alibi_scalar)
    pairs = []
    for label, cap, bias in (("softcap", True, False), ("alibi", False, True), ("softcap then alibi", True, True)):
        got = modified_scores([x], [j], use_softcap=cap, use_alibi=bias, **kw)[0][0]
        pairs.append((f"{label}: qk·qk_scale·ln2 = definition", got * QK_SCALE * n.LN2,
                      _tanh_as_exp(definition(x, j, cap, bias))))
    # the tile update on the modified scores (the mask after the modification, as printed):
    # any per-entry logit f(x_j) enters the state exactly as a raw logit would
    xs, js, vs = _keys(2), _key_positions(2), _keys(2, "v")
    f = sp.Function("f", real=True)  # an arbitrary per-entry transformation, in raw-score units
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
        keys = [R.key_state(s * mod[k], vs[k]) for k in range(2) if k not in masked]
        pairs.append((f"{name}, {state_label}, masked keys {list(masked)}",
                      kernel_tile(state, scores, vs, forward_tile), R.fold([state] + keys)))
    return result("score_mod_invariant", equal_cases(pairs),
                  "exact identities (tanh as exp), a 2-key tile with masked keys, finite and -oo state")


@claim("score_mod_bounds",
       "safety of the modified scores: the printed t lies in [−1, 1], so |c·t| ≤ c; the ALiBi bias "
       "−slope·|i + shift − j| ≤ 0 for slope ≥ 0; every exponent of the tile update on biased scores "
       "and of the sink fold is ≤ 0",
       r"-1\le t\le 1,\ |c\,t|\le c,\ -\mathrm{slope}\,|i+\mathrm{shift}-j|\le 0,\ "
       r"\text{every exponent}\le 0",
       scope="symbolic scores, slopes and positions; reals, exact (not rounded)")
def prove_score_mod_bounds(softcap_terms=terms.SOFTCAP, softcap_scalars=terms.SOFTCAP_SCALARS,
                           alibi_terms=terms.ALIBI, alibi_scalar=terms.ALIBI_SCALAR,
                           forward_tile=terms.FORWARD_TILE, sink_fold=terms.SINK_FOLD):
    x, = _keys(1)
    j, = _key_positions(1)
    (capped,), (t,) = modified_scores([x], [j], softcap_terms, alibi_terms, softcap_scalars, alibi_scalar,
                                      use_alibi=False)
    natural = capped * QK_SCALE * n.LN2  # the capped natural-log score c·t
    (biased,), _ = modified_scores([x], [j], softcap_terms, alibi_terms, softcap_scalars, alibi_scalar,
                                   use_softcap=False)
    cases = [
        ("t <= 1", nonnegative(1 - t)), ("t >= -1", nonnegative(1 + t)),
        ("c·t <= c", nonnegative(c - natural)), ("c·t >= -c", nonnegative(c + natural)),
        ("bias <= 0: biased score <= scale·x", nonnegative(s * x - biased * QK_SCALE * n.LN2)),
    ]
    cases += _biased_exponents(forward_tile, alibi_terms, alibi_scalar) + _sink_exponents(sink_fold)
    return result("score_mod_bounds", cases, "signs decided by SymPy on slack variables")


def _biased_exponents(forward_tile, alibi_terms, alibi_scalar):
    """Every exp2 argument of the tile update is <= 0 when the scores carry the bias: the raw
    scores are chosen so that the *biased* ones realise each case of who holds the max."""
    a = finite_state("")
    t0, t1, t2 = sp.symbols("t_0:3", nonnegative=True)
    js = _key_positions(2)
    coef = run_terms((alibi_scalar,), {})[n.alibi_coef]
    raw = lambda k, target: target + coef * sp.Abs(I + SHIFT - js[k])  # raw score whose biased value is target
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
        env = forward_env(state, scores, _keys(2, "v"))
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
       "s_j = c·tanh(scale·x_j/c) − slope·|i + shift − j| (ALiBi alone: dS·scale, the bias has no "
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
                      sp.diff(qk * QK_SCALE * n.LN2, x)))
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
