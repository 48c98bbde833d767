"""``score_mod``: user-defined score modifications as SymPy expressions, their gradients derived.

A *score_mod* is an expression ``f(s, b, h, i, j, shift, *params)`` of the scaled score ``s``
(natural-log units, ``s = scale·q·k`` after the built-in softcap and ALiBi), the batch entry
``b``, the query head ``h``, the query row ``i``, the key ``j``, the alignment ``shift`` and named
parameters. Users write it with the ``score_mod`` decorator on a function of SymPy symbols::

    @score_mod
    def rel_bias(s, h, i, j, shift, table, max_dist):
        return s + table[h, sp.Min(sp.Max(j - i - shift + max_dist, 0), 2 * max_dist)]

The new score replaces ``s`` before the masks (a masked entry stays masked). Parameters:

* **integer scalars**: a parameter used inside a table index (``max_dist``): a Python ``int``;
* **float scalars**: any other scalar parameter: a Python ``int`` or ``float`` (no gradient);
* **tensors**: a parameter read as ``t[e_1, ..., e_k]``: a float tensor of ``k`` dims, each
  index ``e_a`` an integer expression of ``(b, h, i, j, shift)`` and the integer scalars. Per-head
  ``t[h]`` and per-batch ``t[b]`` are tensors like any other. Gradients flow to ``t.grad``.

The class (checked when the decorator runs; anything else is refused with ``NotInClass`` and the
reason, never accepted silently):

* ``f`` is differentiable in ``s`` and in every tensor entry it reads: where ``s`` or a float
  value occurs, only ``+``, ``·``, integer powers up to 8 and ``sqrt``, ``exp``, ``log``, ``tanh``,
  ``sin``, ``cos`` and ``sqrt`` (``Abs``, ``Max``, ``Min``, ``floor``, ``sign``, ``Piecewise`` of
  a float value are refused); integer position terms (``|i + shift − j|``, clamps) may use
  ``Abs``, ``Max``, ``Min`` and ``//``;
* no ``±inf`` or NaN constant (a mask is a ``mask_mod``'s job);
* every table index stays inside its table (``index_bounds``, by z3, for all integer
  ``i``, ``j``, ``shift``, all ``0 <= h < H``, ``0 <= b < B`` and all integer scalars): a bare
  ``h`` (``b``) reads an axis of at least ``H`` (``B``) entries, a constant ``c >= 0`` one of more than
  ``c`` (``t[0]``: a learnable scalar); any other index must be clamped,
  ``Min(Max(x, 0), U)`` with ``U`` an expression of the integer scalars, and the axis must hold
  more than ``U`` entries (checked per call on the host, O(1)).

The backward is derived, never written: ``∂f/∂s`` and ``∂f/∂t[e]`` of every read come from
``sp.diff`` (``ScoreMod.grad_terms``), and claim ``score_mod_derived`` (spec.proofs.score_mod_user)
proves the printed backward terms are the derivatives of the printed forward term.

Kernel form (``ScoreMod.kernel_form``): parameters live in two vectors, ``SF`` (fp32: the float
scalars, then every tensor flattened row-major) and ``SI`` (int32: the integer scalars, then every
tensor's dims); a read ``t[e_1, e_2]`` is ``SF[offset_t + e_1·d_2 + e_2]``. The gradient of ``SF``
is reduced per program of the dQ kernel into its own row of a ``(programs, len(SF))`` buffer (no
atomics) and summed over the programs on the host in a fixed order: bitwise repeatable. The decorator
checks by z3 that every ``SF``/``SI`` load of the kernel form lies inside the vectors ``pack`` writes
(``entry_counterexample``; ``LayoutError``, a bug in this layout, otherwise).
"""

from __future__ import annotations

import inspect
import operator
from dataclasses import dataclass, field

import sympy as sp

from spec import notation as n
from spec.mask_mod import decorate, floor_div, given_args, resolve_ref
from spec.terms import Term

#: the claim that proves the printed backward terms the derivatives of the printed forward term
CLAIM = "score_mod_derived"

# ----------------------------------------------------------------------------------
# Symbols
# ----------------------------------------------------------------------------------
S = sp.Symbol("s", real=True)  #: the scaled score, natural-log units
B_IDX = sp.Symbol("b", integer=True, nonnegative=True)  #: batch entry
H_IDX = sp.Symbol("h", integer=True, nonnegative=True)  #: query head
#: reserved argument names of a score_mod function, and the symbols they receive
INDEX_ARGS = {"s": S, "b": B_IDX, "h": H_IDX, "i": n.i, "j": n.j, "shift": n.shift}
#: the call's sizes the bare ``h``, ``b`` reads are bounded by (host-checked against the tensor)
HEADS = sp.Symbol("H", integer=True, positive=True)
BATCH = sp.Symbol("B", integer=True, positive=True)

#: kernel names: the scaled score of a tile, and the parameter vectors
us = sp.Symbol("us", real=True)
SF = sp.IndexedBase("SF", real=True)
SI = sp.IndexedBase("SI", integer=True)
#: the names the kernels give b and h
KERNEL_NAMES = {"b": "off_b", "h": "off_h"}


class NotInClass(ValueError):
    """A score_mod outside the class: the message names the reason."""


class Param(sp.Symbol):
    """A named parameter of a score_mod; ``p[x]`` or ``p[x, y]`` reads it as a tensor."""

    def __new__(cls, name):
        return super().__new__(cls, name, real=True)

    def __getitem__(self, index):
        return sp.IndexedBase(self.name, real=True)[index]

    def __iter__(self):
        raise TypeError(f"score_mod parameter {self.name} is not iterable")


class onehot_sum(sp.Function):
    """``onehot_sum(g, idx, e)``: for each entry ``e_c`` of a chunk of parameter indices, the sum of
    ``g`` over the tile's elements whose ``idx`` is ``e_c`` (the gradient a tile adds to parameter
    ``e_c``; printed as a masked double ``tl.sum``, claim score_mod_derived reads its meaning)."""


#: the scatter of one read's gradient into the program's row of the gradient buffer
sgpart, sgacc, offs_e = sp.symbols("sgpart sgacc offs_e", real=True)


def scatter_terms(g, idx) -> tuple[Term, ...]:
    """The chunk update of the program's gradient row (``sgacc``, loaded from it): add the tile's
    contributions to the entries ``offs_e`` of this chunk."""
    return (
        Term(sgpart, onehot_sum(g, idx, offs_e), CLAIM, "Σ of g over the tile's elements reading each entry"),
        Term(sgacc, sgacc + sgpart, CLAIM, "this program's running gradient of those entries (no atomics)"),
    )


SCATTER = scatter_terms(sp.Symbol("sgrad", real=True), sp.Symbol("offs_sp", integer=True))


def backward_steps(grads, ds_term: Term) -> tuple[Term, ...]:
    """A kernel's score_mod backward in its order (``ScoreMod.backward_terms``): each read's gradient tile and
    entry ``(sgrad_k, offs_sp_k)`` of ``grads``, from ``ds = ∂L/∂f``, then ``ds_term`` (``ds·∂f/∂s``)."""
    return (*(t for pair in grads for t in pair), ds_term)


def scatter_points(steps) -> list[tuple[int, Term, Term]]:
    """Where the printed body of ``steps`` scatters a gradient: ``(position, sgrad term, offs_sp term)`` for
    each entry term (an ``offs_sp_k``), right after it, with the gradient term just before it. The generator
    prints the ``_score_param_scatter`` call there; claim score_mod_derived reads the gradient's value at that
    point of the sequence."""
    return [(k, steps[k - 1], t) for k, t in enumerate(steps) if t.symbol.name.startswith("offs_sp") and k > 0]

# ----------------------------------------------------------------------------------
# The class
# ----------------------------------------------------------------------------------
_SMOOTH = (sp.exp, sp.log, sp.tanh, sp.sin, sp.cos)
_INTEGER_NODES = (sp.Add, sp.Mul, sp.Max, sp.Min, sp.Abs, floor_div)


def _reads(expr) -> list[sp.Indexed]:
    return sorted(expr.atoms(sp.Indexed), key=str)


def _value_symbols(e) -> set[str]:
    """Names of the symbols ``e`` uses outside its table indices."""
    if isinstance(e, sp.Indexed):
        return set()
    if isinstance(e, sp.Symbol):
        return {e.name}
    return set().union(*[_value_symbols(a) for a in e.args]) if e.args else set()


def _is_value(e, floats: set) -> bool:
    """Whether ``e`` involves a float value: ``s``, a float scalar or a tensor read."""
    return S in e.free_symbols or bool(e.free_symbols & floats) or e.has(sp.Indexed)


def _check_differentiable(e, floats: set, name: str):
    """Refuse a non-differentiable node over a float value (see the module docstring)."""
    if not _is_value(e, floats) or isinstance(e, (sp.Symbol, sp.Indexed)):
        return
    if isinstance(e, (sp.Add, sp.Mul)) or isinstance(e, _SMOOTH):
        pass
    elif isinstance(e, sp.Pow):
        if not (e.exp.is_Integer and abs(e.exp) <= 8 or e.exp in (sp.Rational(1, 2), -sp.Rational(1, 2))):
            raise NotInClass(f"score_mod {name}: {e}: the powers of a float value the kernels print are integers "
                             "up to 8 in size and ±1/2 (sqrt); write others with exp and log")
    else:
        raise NotInClass(f"score_mod {name}: {e} is not differentiable in s and its float parameters "
                         f"({type(e).__name__} of a float value); only +, ·, numeric powers, exp, log, tanh, sin, "
                         "cos and sqrt may touch the score and the float parameters")
    for a in e.args:
        _check_differentiable(a, floats, name)


def _integer_index(e, ints: set, name: str):
    """Refuse a table index that is not an integer expression of the positions and integer scalars."""
    allowed = {B_IDX, H_IDX, n.i, n.j, n.shift} | ints
    if e.free_symbols - allowed or e.has(sp.Indexed) or S in e.free_symbols:
        raise NotInClass(f"score_mod {name}: table index {e} must be an integer expression of b, h, i, j, shift "
                         "and integer parameters (no score, float parameter or nested read)")
    for x in sp.preorder_traversal(e):
        if isinstance(x, sp.Number) and not x.is_Integer:
            raise NotInClass(f"score_mod {name}: table index {e} has the non-integer constant {x} (use //)")
        if not isinstance(x, (sp.Symbol, sp.Number) + _INTEGER_NODES) and not (isinstance(x, sp.Pow)
                                                                                and x.exp.is_Integer and x.exp >= 0):
            raise NotInClass(f"score_mod {name}: table index {e} uses {type(x).__name__}; integer indices take "
                             "+, ·, Max, Min, Abs and //")


def upper_bound(index) -> sp.Expr | None:
    """The largest value the index may take, read off its clamp: ``H − 1`` for a bare ``h``,
    ``B − 1`` for a bare ``b``, ``c`` for a constant ``c`` (a learnable scalar ``t[0]``), ``U`` for
    ``Min(..., U)`` (inside a ``Max(·, lo)`` too) with ``U`` free of the positions; None when there
    is no such clamp."""
    positions = {B_IDX, H_IDX, n.i, n.j, n.shift}
    if isinstance(index, sp.Integer):
        return index if index >= 0 else None
    if index == H_IDX:
        return HEADS - 1
    if index == B_IDX:
        return BATCH - 1
    e = index
    if isinstance(e, sp.Max):
        inner = [a for a in e.args if isinstance(a, sp.Min)]
        e = inner[0] if len(inner) == 1 else e
    if isinstance(e, sp.Min):
        caps = [a for a in e.args if not (a.free_symbols & positions)]
        if len(caps) == 1:
            return caps[0]
    return None


def index_counterexample(index, bound, ints):
    """None when ``0 <= index <= bound`` for every integer value of the positions and integer
    scalars with ``0 <= h < H``, ``0 <= b < B`` and ``bound >= 0`` (z3); else a model (dict)."""
    import z3

    from spec.mask_mod import _Z3
    from spec.proofs.z3_int32 import counterexample

    tr = _Z3()
    no_abs = lambda e: e.replace(lambda x: isinstance(x, sp.Abs), lambda x: sp.Max(x.args[0], -x.args[0]))  # noqa: E731
    zi, zb = tr.int(no_abs(sp.sympify(index))), tr.int(no_abs(sp.sympify(bound)))
    h, b, heads, batch = (tr.sym(x.name) for x in (H_IDX, B_IDX, HEADS, BATCH))
    facts = [h >= 0, h < heads, b >= 0, b < batch, zb >= 0]
    return counterexample(facts, z3.And(zi >= 0, zi <= zb))


@dataclass(frozen=True)
class Read:
    """One tensor read ``t[e_1, ..., e_k]`` of the expression."""

    tensor: str
    indices: tuple
    bounds: tuple  # per axis: the largest index (``upper_bound``)
    #: per axis: the bound as a Python function of (H, B, *integer scalars), so that torch.compile traces
    #: the host's check (no SymPy at call time)
    bound_values: tuple = field(default=(), repr=False, compare=False)


@dataclass(frozen=True, eq=False)
class ScoreMod:
    """A score modification of the class, analysed: see the module docstring."""

    name: str
    module: str
    params: tuple[str, ...]  # in the function's argument order
    expr: sp.Expr
    ints: tuple[str, ...]  # integer scalars (used in indices)
    floats: tuple[str, ...]  # float scalars
    tensors: dict = field(repr=False)  # tensor name -> number of dims
    reads: tuple = field(repr=False)  # Read per distinct tensor read, in a fixed order
    doc: str = ""

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.name}"

    # --- the derivatives ---------------------------------------------------------------
    def _as_symbols(self):
        """``expr`` with each distinct read replaced by a dummy ``r_k``, and those dummies."""
        dummies = [sp.Dummy(f"r{k}", real=True) for k in range(len(self.reads))]
        back = {}
        for d, rd in zip(dummies, self.reads):
            back[sp.IndexedBase(rd.tensor, real=True)[rd.indices]] = d
        return self.expr.xreplace(back), dummies

    def derivative_s(self) -> sp.Expr:
        """``∂f/∂s`` (sp.diff)."""
        return sp.diff(self.expr, S)

    def derivatives_reads(self) -> tuple[sp.Expr, ...]:
        """``∂f/∂t[e]`` of each read (sp.diff, the reads as independent variables)."""
        f, dummies = self._as_symbols()
        back = {d: sp.IndexedBase(rd.tensor, real=True)[rd.indices] for d, rd in zip(dummies, self.reads)}
        return tuple(sp.diff(f, d).xreplace(back) for d in dummies)

    # --- kernel form -------------------------------------------------------------------
    def _slots(self):
        """``{float scalar: SF slot}``, ``{int scalar: SI slot}``, ``{tensor: (SF offset, dims as SI reads)}``."""
        fslot = {p: k for k, p in enumerate(self.floats)}
        islot = {p: k for k, p in enumerate(self.ints)}
        tens, off, at = {}, sp.Integer(len(self.floats)), len(self.ints)
        for t in (p for p in self.params if p in self.tensors):
            dims = tuple(SI[at + a] for a in range(self.tensors[t]))
            at += self.tensors[t]
            tens[t] = (off, dims)
            off = off + sp.Mul(*dims)
        return fslot, islot, tens

    def flat_index(self, read: Read) -> sp.Expr:
        """The ``SF`` index of a read, in the kernel's terms."""
        _, islot, tens = self._slots()
        off, dims = tens[read.tensor]
        flat = sp.Integer(0)
        for a, e in enumerate(read.indices):
            flat = flat * dims[a] + e if a else e
        return self._ints(off + flat, islot)

    def _ints(self, e, islot):
        return sp.sympify(e).xreplace({Param(p): SI[k] for p, k in islot.items()})

    def widths(self) -> tuple[sp.Expr, int]:
        """``(len(SF), len(SI))`` in the kernel's terms (the dims as ``SI`` reads): the float scalars then each
        tensor's entries (``_slots``' offsets), and the integer scalars then each tensor's dims — what ``pack``
        writes (``SI`` at least one entry). ``entry_counterexample`` checks every read lies inside."""
        _, _, tens = self._slots()
        n_dims = sum(len(dims) for _, dims in tens.values())
        return sp.Integer(len(self.floats)) + sp.Add(*[sp.Mul(*dims) for _, dims in tens.values()]), \
            max(1, len(self.ints) + n_dims)

    def kernel_form(self, expr) -> sp.Expr:
        """``expr`` with parameters read from ``SF`` / ``SI`` and ``s`` as the kernel's ``us``."""
        fslot, islot, _ = self._slots()
        reads = {sp.IndexedBase(rd.tensor, real=True)[rd.indices]: SF[self.flat_index(rd)] for rd in self.reads}
        e = sp.sympify(expr).xreplace(reads)
        e = e.xreplace({Param(p): SF[k] for p, k in fslot.items()})
        return self._ints(e, islot).xreplace({S: us})

    def forward_terms(self) -> tuple[Term, ...]:
        """The tile's modification: the scaled score ``us``, then ``qk`` in raw-score units
        (``qk·qk_scale = f·log2 e``, as the built-ins keep it: claim score_mod_invariant's form)."""
        return (
            Term(us, n.qk * n.qk_scale * n.LN2, CLAIM, "s = scale·x: the scaled score of the tile"),
            Term(n.qk, self.kernel_form(self.expr) * n.LOG2E / n.qk_scale, CLAIM,
                 f"f = {self.expr}, back in raw-score units (qk·qk_scale = f·log2 e)"),
        )

    def ds_term(self, ds=n.ds) -> Term:
        """dS through f: ``ds·∂f/∂s`` (sp.diff)."""
        return Term(ds, ds * self.kernel_form(self.derivative_s()), CLAIM, f"dS·∂f/∂s, ∂f/∂s = {self.derivative_s()}")

    def grad_terms(self) -> tuple[tuple[Term, Term], ...]:
        """Per read: its gradient tile ``sgrad_k = ds·∂f/∂t[e]`` and its ``SF`` index ``offs_sp_k``."""
        out = []
        for k, (rd, d) in enumerate(zip(self.reads, self.derivatives_reads())):
            g, ix = sp.Symbol(f"sgrad_{k}", real=True), sp.Symbol(f"offs_sp_{k}", integer=True)
            out.append((Term(g, n.ds * self.kernel_form(d), CLAIM, f"dS·∂f/∂{rd.tensor}[...], = {d}"),
                        Term(ix, self.flat_index(rd), CLAIM, f"the entry of {rd.tensor} this read takes, in SF")))
        return tuple(out)

    def backward_terms(self, scatter: bool = True) -> tuple[Term, ...]:
        """The backward's score_mod steps on a tile, in the order a kernel runs them (printed as the body of
        ``_user_score_bwd`` / ``_user_score_ds``; claim score_mod_derived runs the sequence). It starts from
        ``ds = ∂L/∂f`` (the softmax Jacobian's dS) and leaves ``ds = ∂L/∂s``. With ``scatter`` (the dQ kernel:
        its program owns a row of the gradient buffer and visits every key tile of its rows once) each read's
        gradient tile ``sgrad_k = ds·∂f/∂t[e]`` and its entry ``offs_sp_k`` come first, from ``∂L/∂f``, each
        scattered after its entry; then ``ds·∂f/∂s``. Without (the dK/dV kernel: no gradient row, a second
        scatter would count every element twice) only ``ds·∂f/∂s``."""
        return backward_steps(self.grad_terms() if scatter else (), self.ds_term())

    # --- the error bound (claim score_mod_error_bound) -----------------------------------
    def outside_bound(self) -> str | None:
        """None when the printed forward line is in the bounded class (``spec.error_bound``'s
        ``score_mod_exponent``); else why its tolerance is empirical. The class: ``f`` is built of
        ``+``, ``·`` and divisions by a float value (the score, a parameter, a constant, an integer
        position term), affine in ``s`` with its absolute tree affine in ``|s|`` (``abs_parts``): then a
        computed ``f`` errs by at most ``γ_k`` times the absolute tree (``k = roundings()``) plus ``|∂f/∂s|``
        times the score's error. A function (``tanh``, ``exp``, ...) or a power needs an accuracy and
        a Lipschitz bound of its own that no claim states: outside."""
        f = self.kernel_form(self.expr)
        if monomial_roundings(f) is None:
            return (f"score_mod {self.name}: {self.expr} uses a function or a power of a float value; the bound "
                    "counts roundings of +, · and / only (a function's own accuracy and its derivative's range are "
                    "not stated by any claim)")
        if self.abs_parts() is None:
            return f"score_mod {self.name}: {self.expr} is not affine in s (the bound's Lipschitz factor is |∂f/∂s|)"
        return None

    def roundings(self) -> int | None:
        """``k``: the roundings every monomial of the printed ``f`` carries (``monomial_roundings`` of the
        kernel form; None outside the bounded class). Claim ``score_mod_error_bound`` checks it on a model
        of the printed term with one relative error per operation."""
        return monomial_roundings(self.kernel_form(self.expr))

    def abs_parts(self) -> tuple[sp.Expr, sp.Expr] | None:
        """``(α, κ)``: ``f``'s absolute tree (every leaf and constant by its absolute value, no
        cancellation) is ``α·|s| + κ``, expressions of the positions and parameters (``|∂f/∂s| <= α``);
        None when it is not affine in ``|s|`` or outside the counted operations."""
        sigma = sp.Symbol("sigma", positive=True)
        tree = _abs_tree(self.expr, sigma)
        if tree is None:
            return None
        tree = sp.expand(tree)
        if sp.degree(tree, sigma) > 1:
            return None
        alpha = tree.coeff(sigma, 1)
        return alpha, sp.expand(tree - alpha * sigma)

    def magnitudes(self, score_args: dict, batch: int, heads: int, n_q: int, n_k: int, shift: int):
        """``(α, κ)`` of the bound for a case: the largest ``α``, ``κ`` of ``abs_parts`` over every
        ``(b, h, i, j)`` (masked entries too: an upper bound), from the float64 values of the parameters.
        O(B·H·N_q·N_k): the tests' bound, never a call's."""
        import torch

        parts = self.abs_parts()
        if parts is None:
            raise ValueError(self.outside_bound())
        s = torch.zeros(batch, heads, n_q, n_k, dtype=torch.float64)
        double = {p: (v.detach().double() if torch.is_tensor(v) else v) for p, v in score_args.items()}
        probe = ScoreMod(self.name, self.module, self.params, sp.Integer(0), self.ints, self.floats, self.tensors,
                         self.reads)
        return tuple(float((probe._with(e).apply_torch(s, shift, double)).max()) for e in parts)

    def _with(self, expr) -> "ScoreMod":
        return ScoreMod(self.name, self.module, self.params, sp.sympify(expr), self.ints, self.floats, self.tensors,
                        self.reads)

    # --- run-time parameters -----------------------------------------------------------
    def pack(self, score_args, batch: int, heads: int, device=None):
        """``(SF, SI)``: the fp32 vector of float values (differentiable in the tensors: autograd
        carries ``SF``'s gradient back to each tensor) and the int32 vector of integer scalars and
        tensor dims, from ``score_args = {name: int | float | tensor}``. Every problem raises
        ``ValueError`` / ``TypeError`` naming the parameter and the fix."""
        import torch

        given = given_args(score_args, self.params, f"score_mod {self.name}", "score_args")
        ints = {}
        for p in self.ints:
            v = given[p]
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"score_args[{p!r}] is used in a table index: it must be a Python int, "
                                f"got {type(v).__name__}")
            ints[p] = v
        floats = []
        for p in self.floats:
            v = given[p]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"score_args[{p!r}] must be a Python int or float (a learnable value: pass a "
                                f"tensor and read it as {p}[h] or {p}[b]), got {type(v).__name__}")
            floats.append(float(v))
        sizes = (heads, batch, *ints.values())  # the arguments of bound_value
        parts = [torch.tensor(floats, dtype=torch.float32, device=device)]
        dims = []
        for t in (p for p in self.params if p in self.tensors):
            v = given[t]
            if not isinstance(v, torch.Tensor) or not v.dtype.is_floating_point:
                raise TypeError(f"score_args[{t!r}] is read as a table: it must be a float tensor, got "
                                f"{getattr(v, 'dtype', type(v).__name__)}")
            if v.dim() != self.tensors[t]:
                raise ValueError(f"score_args[{t!r}] is read with {self.tensors[t]} indices: it must have "
                                 f"{self.tensors[t]} dims, got shape {tuple(v.shape)}")
            for rd in (r for r in self.reads if r.tensor == t):
                for a, (bound, value_of) in enumerate(zip(rd.bounds, rd.bound_values)):
                    top = int(value_of(*sizes))
                    if top < 0:
                        raise ValueError(f"score_mod {self.name}: the clamp of {t}'s axis {a} ends at {bound} = "
                                         f"{top} < 0 with these score_args; pass parameters that make it >= 0")
                    if v.shape[a] <= top:
                        raise ValueError(f"score_args[{t!r}] has {v.shape[a]} entries on axis {a}, but score_mod "
                                         f"{self.name} reads up to index {bound} = {top} there: give it at least "
                                         f"{top + 1}")
            dims += list(v.shape)
            parts.append(v.to(device=device, dtype=torch.float32).reshape(-1))
        sf = torch.cat(parts)
        si = torch.tensor([*ints.values(), *dims] or [0], dtype=torch.int32, device=device)
        if sf.numel() == 0:
            sf = torch.zeros(1, dtype=torch.float32, device=device)
        return sf, si

    # --- the reference (float64, torch) --------------------------------------------------
    def apply_torch(self, s, shift: int, score_args: dict, batch: int | None = None):
        """``f`` on a ``(B, H, N_q, N_k)`` tensor of scaled scores ``s`` (any float dtype, autograd
        through ``s`` and the tensors); the reference's hook (``spec.reference.attention``).
        ``batch``: the batch entry ``b`` of a one-entry ``s`` (a packed batch's segment), else
        ``0..B-1``."""
        import torch

        B, H, Nq, Nk = s.shape
        dev = s.device
        b = torch.arange(B, device=dev) if batch is None else torch.full((B,), batch, device=dev)
        env = {S: s, B_IDX: b.view(B, 1, 1, 1),
               H_IDX: torch.arange(H, device=dev).view(1, H, 1, 1),
               n.i: torch.arange(Nq, device=dev).view(1, 1, Nq, 1),
               n.j: torch.arange(Nk, device=dev).view(1, 1, 1, Nk), n.shift: shift}
        env.update({Param(p): score_args[p] for p in self.ints + self.floats})
        tensors = {t: score_args[t].to(s.dtype) for t in self.tensors}
        return _evaluate(self.expr, env, tensors) + 0 * s


def _is_integer_term(e) -> bool:
    """An integer-valued term of integer symbols (positions, integer parameters, SI reads): the kernels
    convert it to fp32 once (exact below 2^24)."""
    return bool(e.free_symbols) and e.is_integer is True and not e.has(SF) and S not in e.free_symbols \
        and us not in e.free_symbols


def monomial_roundings(e) -> int | None:
    """The roundings each monomial of the printed ``e`` carries (a term of ``+``, ``·`` and ``/`` by a
    float value), in any association order: a float value (``us``, an ``SF`` read, a symbol) 0; an
    integer constant 0 (exact: below 2^24); another constant 1 (rounded to fp32 once); an integer term
    of integer symbols 1 (its conversion); ``1/v`` of a float value, as a factor: the division, counted
    as its product's operation; a sum of n terms ``max + (n − 1)``; a product of n factors (−1 apart: an
    exact negation) the sum of theirs ``+ (n − 1)``. None: a function or another power."""
    if isinstance(e, sp.Integer):
        return 0
    if e.is_number:
        return 1
    if isinstance(e, (sp.Symbol, sp.Indexed)):
        return 0
    if _is_integer_term(e):
        return 1
    if isinstance(e, sp.Add):
        below = [monomial_roundings(a) for a in e.args]
        return None if None in below else max(below) + len(e.args) - 1
    if isinstance(e, sp.Mul):
        factors = [a for a in e.args if a != -1]
        below = [monomial_roundings(a.base) if _is_reciprocal(a) else monomial_roundings(a) for a in factors]
        return None if None in below else sum(below) + len(factors) - 1
    if _is_reciprocal(e):  # 1/v alone: one division
        below = monomial_roundings(e.base)
        return None if below is None else below + 1
    return None


def _is_reciprocal(e) -> bool:
    """``1/v`` with ``v`` a float value (a symbol or a read): printed as a division."""
    return isinstance(e, sp.Pow) and e.exp == -1 and isinstance(e.base, (sp.Symbol, sp.Indexed))


def _abs_tree(e, sigma):
    """``e`` with ``s`` as ``σ = |s|``, every other leaf and constant by its absolute value, and its
    sums of absolute values (no cancellation); None outside ``monomial_roundings``' operations."""
    if e == S:
        return sigma
    if e.is_number:
        return abs(e)
    if isinstance(e, (sp.Symbol, sp.Indexed)) or (e.is_integer is True and S not in e.free_symbols):
        return sp.Abs(e)
    if isinstance(e, (sp.Add, sp.Mul)):
        parts = [_abs_tree(a, sigma) for a in e.args]
        return None if None in parts else (sp.Add if isinstance(e, sp.Add) else sp.Mul)(*parts)
    if _is_reciprocal(e):
        return 1 / sp.Abs(e.base)
    return None


def _bound_function(bound, ints: tuple):
    """``bound`` as a Python function of ``(H, B, *ints)`` (Min/Max as min/max, // as //)."""
    return sp.lambdify((HEADS, BATCH, *[Param(p) for p in ints]), bound, modules=[{"floor_div": operator.floordiv},
                                                                                  "math"])


def _evaluate(e, env, tensors):
    """A SymPy expression of the class on torch tensors (broadcasting), integers exactly."""
    import torch

    ev = lambda x: _evaluate(x, env, tensors)  # noqa: E731
    if e in env:
        return env[e]
    if isinstance(e, sp.Integer):
        return int(e)
    if e.is_number:
        return float(e)
    if isinstance(e, sp.Add):
        out = 0
        for a in e.args:
            out = out + ev(a)
        return out
    if isinstance(e, sp.Mul):
        out = 1
        for a in e.args:
            out = out * ev(a)
        return out
    if isinstance(e, sp.Pow):
        base, ex = ev(e.base), ev(e.exp)
        if isinstance(base, torch.Tensor) and not base.dtype.is_floating_point and isinstance(ex, int) and ex < 0:
            base = base.double()
        return base ** ex
    if isinstance(e, (sp.Max, sp.Min)):
        args = [torch.as_tensor(ev(a)) for a in e.args]
        out = args[0]
        for a in args[1:]:
            out = torch.maximum(out, a) if isinstance(e, sp.Max) else torch.minimum(out, a)
        return out
    if isinstance(e, sp.Abs):
        return abs(ev(e.args[0]))
    if isinstance(e, floor_div):
        return torch.div(torch.as_tensor(ev(e.args[0])), ev(e.args[1]), rounding_mode="floor")
    fns = {sp.exp: torch.exp, sp.log: torch.log, sp.tanh: torch.tanh, sp.sin: torch.sin, sp.cos: torch.cos}
    if type(e) in fns:
        return fns[type(e)](torch.as_tensor(ev(e.args[0])))
    if isinstance(e, sp.Indexed):
        idx = tuple(torch.as_tensor(ev(x)).long() for x in e.indices)
        return tensors[str(e.base)][torch.broadcast_tensors(*idx) if len(idx) > 1 else idx]
    raise NotInClass(f"no torch meaning for {type(e).__name__}: {e}")


class LayoutError(AssertionError):
    """A score_mod's kernel form reads ``SF`` or ``SI`` outside the vectors ``pack`` writes: a bug in
    ``spec.score_mods``' layout (``ScoreMod._slots``, ``flat_index``), not in the user's score_mod."""


def entry_counterexample(sm: ScoreMod, terms=None):
    """None when every ``SF[e]`` and ``SI[e]`` load of the kernel terms (default: the forward, dS and gradient
    terms) reads inside ``ScoreMod.widths``: a tensor read's entry ``flat_index`` lies in ``[0, len(SF))``
    whenever each of its indices ``e_a`` lies in ``[0, d_a)`` (``d_a`` the tensor's axis as ``SI`` holds it:
    ``analyse`` proves ``0 <= e_a <= U_a`` by z3, ``pack`` checks ``U_a < d_a`` per call), for all dims ``>= 1``
    (z3, nonlinear: the flat index's products); a scalar's entry is a number below the width. Else a
    counterexample (dict), "unknown", or the entry no read accounts for (str)."""
    import z3

    from spec.mask_mod import _Z3
    from spec.proofs.z3_int32 import counterexample

    terms = (*sm.forward_terms(), sm.ds_term(), *(t for pair in sm.grad_terms() for t in pair)) \
        if terms is None else terms
    _, _, tens = sm._slots()
    sf_width, si_width = sm.widths()
    tr = _Z3()
    facts = [tr.int(d) >= 1 for _, dims in tens.values() for d in dims]
    goals = []
    reads = {}  # each read's entry in the kernel's terms -> the same entry at abstract in-range indices
    for k, rd in enumerate(sm.reads):
        xs = tuple(sp.Symbol(f"x_{k}_{a}", integer=True) for a in range(len(rd.indices)))
        facts += [z3.And(0 <= tr.int(x), tr.int(x) < tr.int(d)) for x, d in zip(xs, tens[rd.tensor][1])]
        reads[sm.flat_index(rd)] = sm.flat_index(Read(rd.tensor, xs, rd.bounds))
    for t in terms:
        for x in sp.preorder_traversal(sp.sympify(t.expr)):
            if not isinstance(x, sp.Indexed) or x.base not in (SF, SI):
                continue
            (e,) = x.indices
            if x.base == SI or e.is_Integer:
                goals.append(z3.And(0 <= tr.int(e), tr.int(e) < tr.int(sp.sympify(si_width if x.base == SI
                                                                                    else sf_width))))
            elif e in reads:
                goals.append(z3.And(0 <= tr.int(reads[e]), tr.int(reads[e]) < tr.int(sf_width)))
            else:
                return f"{x} in {t.name}: an SF entry that is no read's flat_index"
    return counterexample(facts, z3.And(*goals) if goals else z3.BoolVal(True))


def check_entries(sm: ScoreMod) -> None:
    """Raise ``LayoutError`` unless every ``SF``/``SI`` load of ``sm``'s kernel terms reads inside the vectors."""
    counter = entry_counterexample(sm)
    if counter is not None:
        raise LayoutError(f"score_mod {sm.name}: a parameter load of its kernel terms reads outside SF (length "
                          f"{sm.widths()[0]}) or SI ({sm.widths()[1]}) at {counter} (z3): a bug in "
                          "spec.score_mods' layout, not in the score_mod")


def analyse(expr, name: str = "score_mod", params=(), module: str = "__main__", doc: str = "") -> ScoreMod:
    """Check ``expr`` is in the class and build its ``ScoreMod`` (``NotInClass`` with the reason if not)."""
    expr = sp.sympify(expr)
    if not isinstance(expr, sp.Expr):
        raise NotInClass(f"score_mod {name} returned {expr!r}, not an expression of the score (a predicate "
                         "belongs to a mask_mod)")
    if expr.has(sp.oo, -sp.oo, sp.zoo, sp.nan):
        raise NotInClass(f"score_mod {name} = {expr} holds an infinite or NaN constant: masks (a score of -inf) "
                         "belong to mask_mod (spec.mask_mod), not to a score_mod")
    if isinstance(expr, sp.Piecewise) or expr.has(sp.Piecewise):
        raise NotInClass(f"score_mod {name}: Piecewise is not differentiable in s; a condition belongs to mask_mod")
    reads = _reads(expr)
    unknown = sorted(str(x.base) for x in reads if str(x.base) not in params)
    if unknown:
        raise NotInClass(f"score_mod {name} reads undeclared tensor(s) {unknown}: make them arguments")
    tensors = {}
    for x in reads:
        t = str(x.base)
        if tensors.setdefault(t, len(x.indices)) != len(x.indices):
            raise NotInClass(f"score_mod {name}: {t} is read with {tensors[t]} and with {len(x.indices)} indices")
    in_index = {str(s) for x in reads for e in x.indices for s in e.free_symbols}
    ints = tuple(p for p in params if p in in_index and p not in tensors)
    both = sorted(p for p in ints if p in _value_symbols(expr))
    if both:
        raise NotInClass(f"score_mod {name}: {both} are used in a table index and as a value; pass the value as a "
                         "second parameter")
    undeclared = sorted(str(s) for s in expr.free_symbols if s not in INDEX_ARGS.values() and str(s) not in params
                        and not isinstance(s, (sp.Indexed, sp.IndexedBase)))
    if undeclared:
        raise NotInClass(f"score_mod {name} uses undeclared symbol(s) {undeclared}: make them arguments")
    floats = tuple(p for p in params if p not in ints and p not in tensors)
    float_syms = {Param(p) for p in floats}
    _check_differentiable(expr, float_syms, name)
    int_syms = {Param(p) for p in ints}
    out_reads = []
    for x in reads:
        bounds = []
        for a, e in enumerate(x.indices):
            _integer_index(e, int_syms, name)
            bound = upper_bound(e)
            if bound is None:
                raise NotInClass(f"score_mod {name}: index {e} of {x.base} (axis {a}) can leave the table: it is "
                                 "neither a bare h or b nor clamped; write Min(Max(index, 0), U) with U an "
                                 "expression of integer parameters (the table then needs U + 1 entries there)")
            cex = index_counterexample(e, bound, int_syms)
            if cex is not None:
                raise NotInClass(f"score_mod {name}: index {e} of {x.base} (axis {a}) can leave [0, {bound}] "
                                 f"(z3: {cex}); clamp it with Min(Max(index, 0), U)")
            bounds.append(bound)
        out_reads.append(Read(str(x.base), tuple(x.indices), tuple(bounds),
                              tuple(_bound_function(sp.sympify(b), ints) for b in bounds)))
    sm = ScoreMod(name, module, tuple(params), expr, ints, floats, tensors, tuple(out_reads), doc)
    for d in (sm.derivative_s(), *sm.derivatives_reads()):
        if d.has(sp.Derivative, sp.Subs, sp.DiracDelta, sp.Heaviside, sp.sign):
            raise NotInClass(f"score_mod {name}: its derivative {d} is not a closed form of the class")
    check_entries(sm)  # every SF/SI load inside the vectors pack writes, by z3
    return sm


#: every score_mod defined so far, by name (the runtime finds a kernel's score_mod by it)
REGISTRY: dict[str, ScoreMod] = {}


def score_mod(fn) -> ScoreMod:
    """Decorator: a function of SymPy symbols (``s``, optionally ``b``, ``h``, ``i``, ``j``,
    ``shift``, then named parameters) returning an expression of the class becomes a ``ScoreMod``.

    Emit its kernels with ``python -m generator --br 64 --bc 64 --score-mod module:name``, then
    ``flash_attention(q, k, v, score_mod=fn, score_args={...})``.
    """
    if "s" not in inspect.signature(fn).parameters:
        raise NotInClass(f"score_mod {fn.__name__} must take the score s as an argument")
    return decorate(fn, INDEX_ARGS, Param, analyse, REGISTRY)


def index_key(score_mod: str, mask_mod: str | None = None) -> str:
    """A generated package's ``SCORE_MODS`` key of the files with score_mod ``score_mod`` compiled in,
    alone or with the mask_mod named ``mask_mod`` (``rel_bias``, ``rel_bias+prefix_lm``)."""
    return score_mod if mask_mod is None else f"{score_mod}+{mask_mod}"


def resolve(ref: str) -> ScoreMod:
    """``"module:name"`` -> the ScoreMod defined there."""
    return resolve_ref(ref, ScoreMod, "score-mod", "spec.score_mods:rel_bias", "spec.score_mods")


# ----------------------------------------------------------------------------------
# Examples (the tests' and the docs'), and the built-ins written as score_mods
# ----------------------------------------------------------------------------------
@score_mod
def rel_bias(s, h, i, j, shift, table, max_dist):
    """A learned relative-position bias (T5 style), one row per head, clamped at ``±max_dist``."""
    return s + table[h, sp.Min(sp.Max(j - i - shift + max_dist, 0), 2 * max_dist)]


@score_mod
def temperature(s, h, inv_t):
    """A learned per-head temperature."""
    return s * inv_t[h]


@score_mod
def tanh_cap(s, cap):
    """A tanh cap (Gemma 2's softcap) written as a score_mod."""
    return cap * sp.tanh(s / cap)


@score_mod
def batch_scale(s, b, gain):
    """A learned multiplicative scalar per batch entry."""
    return s * gain[b]


@score_mod
def alibi(s, h, i, j, shift, slopes):
    """ALiBi written as a score_mod: ``s − slope_h·|i + shift − j|`` (the built-in's semantics)."""
    return s - slopes[h] * sp.Abs(i + shift - j)


EXAMPLES = (rel_bias, temperature, tanh_cap, batch_scale, alibi)
