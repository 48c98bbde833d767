"""A forward error bound for the kernels' ``out`` and ``lse`` in the standard model of floating point.

Model (Higham, *Accuracy and Stability of Numerical Algorithms*, §2.2): every fp32 operation
gives ``fl(x ∘ y) = (x ∘ y)(1 + δ)``, ``|δ| <= u = 2^-24``; ``exp2`` has relative error at most
``U_FUNC = 4u`` and ``log2`` error at most ``U_FUNC·(1 + |log2 x|)`` (PTX ``ex2.approx``/``lg2.approx``
are within 2 ulp; numpy's within 1);
``γ_n = n u / (1 - n u)``. Inputs are given in their dtype (the reference reads the same values);
the dots accumulate in fp32 (fp16/bf16 products are exact in fp32); ``P`` is rounded to the
input dtype before ``P V`` (unit roundoff ``u_p``: fp16 ``2^-11``, bf16 ``2^-8``, fp32 0 with
``input_precision="ieee"``), and ``out`` to the input dtype (``u_out``) when stored.

For one query row with ``N_k`` keys in tiles of ``B_c`` (``T = ceil(N_k/B_c)`` tiles), head dim
``D``, softmax scale ``s`` and ``A = max_j Σ_d |q_d k_jd|`` (the data), following the softmax / LSE
analysis of Blanchard, Higham & Higham (IMA J. Numer. Anal. 41, 2021) — errors in the shifted
exponents perturb each weight by a relative factor, the shift itself cancels — and the
recursive-summation bound for the ``P V`` accumulation:

* **exponent error** (natural units, every key alike, relative to the final computed max, which
  cancels): the score ``q·k_j`` carries ``γ_D·A``; the scaled score ``x·qk_scale`` (with
  ``qk_scale = fl(s·log2 e)``) ``γ_2`` more; the subtraction of the running max (or one FMA, claim
  ``exponent_rounding``) and each rescale ``alpha``'s exponent ``m_old − m_new`` add ``u`` times
  their magnitudes, which telescope to ``u·(m_T − t^_j) <= 2u·max|t^|``: ``E = s·A·score_factor +
  (T+1)·(−log(1 − U_FUNC))`` (``exponent_error``), the last term from ``exp2`` of ``p`` and the rescales
  (a factor ``1 + δ``, ``|δ| <= U_FUNC``, lies in ``[1 − U_FUNC, 1/(1 − U_FUNC)]``);
* **numerator** ``acc``: ``u_p`` (P cast), ``γ_{B_c}`` (the tile's dot), ``γ_{2T}`` (``acc·alpha + ...``
  per tile): ``ρ_num``; **denominator** ``l_i``: ``γ_{B_c}`` (``tl.sum``) and ``γ_{2T}``: ``ρ_den``;
* **lemma** (claim ``error_bound``): with every computed numerator weight within a factor
  ``[1-a, 1+a]`` of the true one and the computed denominator within ``[1-b, 1+b]`` of the true
  one, ``|out^ - out| <= max|v|·(a + b)/(1 - b)``; then the division and the store add ``u + u_out``.

``lse = (m_i + log2 l_i)·ln 2`` (the printed epilogue, ``l_i > 0``): for any real ``m``,
``lse = m·ln 2 + ln L`` with ``L = Σ_j e^{s x_j − m ln 2}``, so the computed max ``m_T`` cancels
exactly, as in ``out``; with ``λ = −log(1 − b)`` (``b`` the denominator's factor above):

* ``l_i = L(1 + θ)``, ``|θ| <= b``: ``|ln l_i − ln L| <= λ``;
* every computed exponent is ``<= 0`` and the key that set ``m_T`` has exponent 0 (monotone
  rounding), so ``e^{−E} <= L <= N_k e^E`` and ``|ln l_i| <= log N_k + E + λ``;
* ``log2`` within ``U_FUNC·(1 + |log2 x|)`` (a relative error ``U_FUNC``, or an absolute one near
  ``x = 1``), then ``LSE_ROUNDINGS = 3`` roundings (the add of ``m_i``, ``ln 2`` rounded to fp32,
  the multiply): ``|lse^ − lse| <= d + γ_3·(|lse| + d)``, ``d = λ + U_FUNC·(1 + log N_k + E + λ)``
  (``lse_bound``).

Claim ``forward_error_bound`` proves this composition (``score_factor``, ``carried_factor``,
``out_bound``, ``lse_bound``) on symbolic reals, for any ``N_k``, ``B_c``, ``T``, ``D``, and checks
that ``forward_bound`` itself, evaluated in SymPy (``Numbers``) on symbolic sizes, is that
composition (``T = max(1, ceil(N_k / B_c))`` tiles, every term present); its hypotheses
are the inner-product lemma (``|fl(a·b) − a·b| <= γ_n Σ|a_i b_i|``, any order), the ``exp2`` and
``log2`` accuracy ``U_FUNC``, ``ln`` monotone with ``ln(xy) = ln x + ln y``, and no underflow or
overflow. With ALiBi (``forward_bound(alibi=β)``, ``β`` the row's largest ``|slope·(i + shift − j)|``) the
printed bias is computed within ``γ_4·β`` (``ALIBI_ROUNDINGS``: ``log2 e`` and ``slope·log2 e`` rounded, the
distance ``|i + shift − j|`` (positions and ``|shift|`` below ``2^24``: at most one rounding), the product) and
added once: ``E = alibi_exponent(s·A, φ, β, γ_4, u) + (T+1)·(−log(1 − U_FUNC))`` (``alibi_exponent_error``;
same claim). Not proved: any backward bound (the backward's tolerances are empirical: tested, not
derived; ``generator.checking`` and the verification page say so).

The tolerances of ``generator.checking`` are this bound (per case from the data, or at a stated
test regime), and ``tests/test_error_bound.py`` lets Hypothesis search for inputs beyond it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

U = 2.0**-24  #: fp32 unit roundoff (accumulation dtype of every kernel)
U_FUNC = 4 * U  #: relative error of exp2 / log2
#: unit roundoff of the input dtype: P is rounded to it before P·V, out when stored
UNIT_ROUNDOFF = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8}
U_STORE = {"fp32": U, "fp16": 2.0**-11, "bf16": 2.0**-8}


class Fp8Format(NamedTuple):
    """An FP8 format (issue 30) as the bound sees it: round to nearest on a grid of ``mantissa``
    bits from ``2^min_exp`` (normal) with subnormals below, largest finite ``max``."""

    u: float  #: unit roundoff in the normal range, 2^-(mantissa + 1)
    eta: float  #: the largest rounding error below the normal range: half the subnormal spacing
    max: float  #: the largest finite value (e4m3fn: 448, no inf; e5m2: 57344)
    p_scale: float  #: the power of two P (<= 1) is scaled by before its cast: <= max
    mantissa: int  #: stored mantissa bits
    min_exp: int  #: exponent of the smallest normal


#: torch.float8_e4m3fn and torch.float8_e5m2: P·p_scale <= p_scale <= max (no saturation), and the
#: subnormal error of P is eta / p_scale (2^-18 for e4m3, 2^-32 for e5m2)
FP8 = {"e4m3": Fp8Format(2.0**-4, 2.0**-10, 448.0, 2.0**8, 3, -6),
       "e5m2": Fp8Format(2.0**-3, 2.0**-17, 57344.0, 2.0**15, 2, -14)}
#: P is cast to the fp8 format before P V; out is stored in bf16 unless an out dtype is given
UNIT_ROUNDOFF.update({name: f.u for name, f in FP8.items()})
U_STORE.update({name: U_STORE["bf16"] for name in FP8})
#: the absolute error of a weight of P from its cast below fp8's normal range: eta / p_scale
P_ABS = {name: FP8[name].eta / FP8[name].p_scale if name in FP8 else 0.0 for name in UNIT_ROUNDOFF}
#: roundings of the scaled score x·qk_scale: qk_scale = fl(s·fl(log2 e)) — log2 e is an fp32 constant in the
#: compiled kernel, then the product — and x·qk_scale (3; counted from the printed QK_SCALE by claim
#: forward_error_bound: the interpreter's double-precision constant rounds once less); with the
#: descales of FP8, qk_scale = s·q_descale·k_descale·log2 e (spec.terms.FP8_QK_SCALE): its three
#: products, log2 e rounded to fp32 and the product x·qk_scale (5; counted by claim fp8_error_bound)
SCALE_ROUNDINGS = 3
SCALE_ROUNDINGS_DESCALED = 5

# ----------------------------------------------------------------------------------
# sm_90's fp8 MMA (issue 30): a wgmma on fp8 operands accumulates with fewer bits than fp32 (the
# e8m13 accumulator reported for H100; DeepSeek-V3 §3.3.2 measures about 14 bits), so the
# inner-product lemma in fp32 does not describe it. Triton's ``tl.dot(..., max_num_imprecise_acc=M)``
# (the WGMMA lowering, triton 3.x) keeps a partial accumulator of its own and adds it to the fp32
# accumulator with an fp32 add once it has summed M or more products, and after the dot's last
# instruction: at ``M = 32`` after every ``k = 32`` instruction. Its default for fp8 on sm_90 is
# ``2^30``: the whole sum, and FA2's ``acc += P V`` across every key tile, in the narrow accumulator;
# ``M < 32`` is no wgmma at all (AccelerateMatmul falls back from MMAv3 for an fp8 dot that must
# accumulate in fp32: compiled, no QGMMA and 2.2-3x the loop's instructions). The kernels print
# ``M = 32`` (``spec.printer``; fp16/bf16/fp32 dots ignore it; an fp8 dot needs K >= 32:
# ``spec.launch.block_d`` pads an fp8 head dim to 32, every generated B_c is >= 32).
# ----------------------------------------------------------------------------------
#: ``max_num_imprecise_acc`` of every printed dot: promote after each fp8 MMA instruction
FP8_MAX_IMPRECISE_ACC = 32
#: products one sm_90 fp8 wgmma instruction sums (``wgmma.m64nNk32``)
FP8_MMA_K = 32
#: the fraction bits of the modelled accumulator: aligns the products to the largest one's binade and
#: keeps this many bits below its leading bit, truncating (the e8m13 reported for H100's fp8 MMA)
FP8_MMA_BITS = 13
#: the hardware hypothesis (not proved; the GPU measurement checks it): one fp8 MMA instruction
#: from a zero accumulator returns its ``FP8_MMA_K`` exact products' sum within ``FP8_MMA_ERR·Σ|a_i b_i|``.
#: The model above errs by at most ``K·2^-t + 2^-t·(1 + K·2^-t)`` = 2^-8 + 2^-13 + 2^-21 (claim
#: fp8_mma_bound); the hypothesis takes twice that, 2^-7, as a margin on the model.
FP8_MMA_ERR = 2.0**-7


def fp8_mma_model_error(k: int = FP8_MMA_K, bits: int = FP8_MMA_BITS):
    """The modelled accumulator's error bound relative to ``Σ|a_i b_i|``: ``k`` truncations each below
    ``2^-bits`` of the largest product's binade (``<= 2^-bits·max|a_i b_i|``), then the sum truncated to
    ``bits`` fraction bits (relative ``2^-bits``): ``k·τ + τ(1 + k·τ)``, ``τ = 2^-bits``."""
    tau = 2.0**-bits
    return k * tau + tau * (1 + k * tau)


def gamma_of(n, u):
    """``γ_n = n u / (1 - n u)`` for the unit roundoff ``u``: ``n`` roundings in ``1 ± γ_n`` (Higham, Lemma 3.1;
    ``n u < 1`` assumed). The one spelling of γ: numbers here, z3 or SymPy reals in the claims, which prove its
    lemmas on it."""
    return n * u / (1 - n * u)


def gamma(n: float) -> float:
    """``γ_n`` in fp32 (``u = U``; requires ``n u < 1``)."""
    if n * U >= 1:
        raise ValueError(f"gamma_{n}: n·u >= 1, the bound is void")
    return gamma_of(n, U)


class Bound(NamedTuple):
    out: float  #: |out - out_exact| <= out · max|v|
    lse_abs: float  #: |lse - lse_exact| <= lse_abs (natural log), for |lse_exact| <= the lse given
    exponent: float  #: E, the absolute error of every shifted exponent (natural units)


def score_factor(g_d, g_2, u):
    """The exponent error of every key relative to ``s·A``: the score's dot (``γ_D``), its scaling by the
    rounded ``qk_scale`` (``γ_2``), and ``u·(m_T − t^_j) <= 2u·max|t^|`` from the subtraction of the max and
    the rescales' exponents (they telescope). Plain arithmetic: proved on z3 reals (claim
    ``forward_error_bound``)."""
    return (1 + g_d) * (1 + g_2) * (1 + 2 * u) - 1


class Numbers:
    """The arithmetic ``forward_bound`` composes its lemmas in: floats here (``FLOATS``); claim
    ``forward_error_bound`` passes SymPy's, with symbolic sizes and roundoffs, and checks that what
    ``forward_bound`` then returns *is* the composition the claim states (a miscounted tile or a
    dropped term fails ``python -m spec``)."""

    U = U
    U_FUNC = U_FUNC
    FP8_MMA_ERR = None  # set below (the hardware hypothesis of sm_90's fp8 MMA)
    SOFTCAP_REL = None  # set below, once softcap_rel is defined
    unit_roundoff = UNIT_ROUNDOFF
    u_store = U_STORE
    gamma = staticmethod(gamma)
    p_abs = P_ABS
    ceil = staticmethod(math.ceil)
    max = staticmethod(max)
    abs = staticmethod(abs)
    exp = staticmethod(math.exp)
    log = staticmethod(math.log)
    #: past the bound's range (a factor ``b >= 1``, an exponent past a double's) the bound is vacuous: ``inf``
    log1p = staticmethod(lambda x: math.log1p(x) if x > -1 else -math.inf)
    expm1 = staticmethod(lambda x: math.expm1(x) if x < 709 else math.inf)
    #: ``x / (1 − b)`` for the denominator's factor ``b``: the proofs assume ``b < 1`` (their reals divide,
    #: ``spec.proofs.float.Reals``); past it (``b >= 1``, or NaN) nothing is bounded: ``inf``
    over_one_minus = staticmethod(lambda x, b: x / (1 - b) if b < 1 else math.inf)


Numbers.FP8_MMA_ERR = FP8_MMA_ERR
FLOATS = Numbers()


def n_tiles(n_k, block_n, num: Numbers = FLOATS):
    """``T``: the key tiles of a row of ``n_k`` keys in tiles of ``block_n`` (at least one)."""
    return num.max(1, num.ceil(n_k / block_n))


def fp8_dot_factor(n, num: "Numbers" = None):
    """The relative error (to ``Σ|a_i b_i|``) of an ``n``-term dot of fp8 products on sm_90's fp8 MMA with
    every instruction's partial sum promoted (``FP8_MAX_IMPRECISE_ACC = FP8_MMA_K``): each of the ``ceil(n/K)``
    partials within ``FP8_MMA_ERR`` of its products' sum, then at most ``ceil(n/K)`` fp32 adds:
    ``(1 + ε)(1 + γ_{ceil(n/K)}) − 1`` (claim ``fp8_mma_bound``)."""
    num = FLOATS if num is None else num
    return (1 + num.FP8_MMA_ERR) * (1 + num.gamma(num.ceil(n / FP8_MMA_K))) - 1


def exponent_error(head_dim: int, n_tiles: int, scaled_abs: float, num: Numbers = FLOATS, softcap: bool = False,
                   scale_roundings: int = SCALE_ROUNDINGS, fp8_mma: bool = False) -> float:
    """``E``: every exponent's absolute error (natural units), from ``s·A`` (``scaled_abs``), plus the
    relative error of the at most ``T + 1`` exp2 factors of a weight (``p`` and the rescales); with
    ``softcap``, the capped score's factor (``softcap_score_factor``); ``scale_roundings``: those of
    ``x·qk_scale`` (``SCALE_ROUNDINGS_DESCALED`` with FP8's descales, which take no softcap);
    ``fp8_mma``: the score's dot on sm_90's fp8 MMA (``fp8_dot_factor`` for ``γ_D``)."""
    if softcap:
        if scale_roundings != SCALE_ROUNDINGS:
            raise ValueError("exponent_error: the softcap is bounded without FP8's descales only")
        factor = softcap_score_factor(num.gamma(head_dim), num.gamma(2), num.gamma(5), num.SOFTCAP_REL, num.U)
    else:
        dot = fp8_dot_factor(head_dim, num) if fp8_mma else num.gamma(head_dim)
        factor = score_factor(dot, num.gamma(scale_roundings), num.U)
    return scaled_abs * factor - (n_tiles + 1) * num.log1p(-num.U_FUNC)


def weight_factor(rho_w, rho):
    """A weight's relative error bound from its exponent factor (``1 ± rho_w``) and rounding (``1 ± rho``)."""
    return (1 + rho_w) * (1 + rho) - 1


#: roundings the carried ``acc`` and ``l_i`` go through per key tile (``x·alpha``, then ``+``): claim
#: ``forward_error_bound`` counts them in the printed ``FORWARD_TILE`` and fails if there are more
TILE_ROUNDINGS = 2


def carried_factor(tile_local, n_tiles, u_n=None, roundings=TILE_ROUNDINGS):
    """The relative factor bound of a key's weight in ``acc`` (or ``l_i``) after ``n_tiles`` tiles:
    ``(1 + tile_local)(1 + γ_{roundings·T}) − 1`` (``tile_local``: the cast of P and the dot of the
    key's own tile; ``roundings`` per tile: ``TILE_ROUNDINGS``, or ``fp8_tile_roundings`` on sm_90's fp8
    MMA); ``u_n`` is ``γ`` for numbers, given for symbolic reals."""
    g = gamma(roundings * n_tiles) if u_n is None else u_n(roundings * n_tiles)
    return weight_factor(tile_local, g)


def fp8_tile_roundings(block_n, num: "Numbers" = None):
    """The fp32 roundings ``acc`` goes through per key tile on sm_90's fp8 MMA with every instruction
    promoted: ``acc·alpha``, then one add per instruction's partial (``ceil(B_c/K)``) — each key's product
    enters its instruction's partial (``FP8_MMA_ERR``, the tile-local part) and then at most these
    (claim ``fp8_mma_bound``)."""
    num = FLOATS if num is None else num
    return 1 + num.ceil(block_n / FP8_MMA_K)


def out_bound(rho_w, rho_num, rho_den, u_div, u_store, abs_num=0, num: Numbers = FLOATS):
    """``|out^ − out| / max|v|`` from the weight errors: every key's exponent factor within ``1 ± rho_w``,
    numerator factor within ``1 ± rho_num``, denominator factor within ``1 ± rho_den``; then the division
    (``u_div``) and the store (``u_store``). ``abs_num``: an absolute error of the numerator, relative to
    ``max|v|`` and the exact denominator (FP8's subnormal P: ``fp8_abs_num``; 0 otherwise). Plain
    arithmetic in ``num``: floats here, z3 reals in claims ``forward_error_bound`` (``abs_num = 0``) and
    ``fp8_error_bound``, which prove it for ``b < 1`` (``num.over_one_minus``: ``inf`` for floats past it)."""
    a, b = weight_factor(rho_w, rho_num), weight_factor(rho_w, rho_den)
    last = (1 + u_div) * (1 + u_store)
    return num.over_one_minus(a + b + abs_num, b) * last + (last - 1)


def fp8_abs_num(n_k, p_abs, exponent, rho_den, num: Numbers = FLOATS):
    """FP8's cast of ``P·p_scale`` errs by at most ``u·P + p_abs`` (``p_abs = eta / p_scale``, below the
    normal range): over ``N_k`` keys the numerator gains ``N_k·p_abs·max|v|``, times the dot's and the
    carried roundings and the later rescales (``(1 + ρ_den)·e^E``), over the exact denominator
    ``>= e^{−E}`` (claim ``fp8_error_bound``): ``N_k·p_abs·e^{2E}·(1 + ρ_den)``."""
    return n_k * p_abs * num.exp(2 * exponent) * (1 + rho_den)


#: roundings after ``log2`` in the printed ``lse = (m_i + log2(l_i))·ln 2``: the add, ``ln 2`` rounded to
#: fp32, the multiply; claim ``forward_error_bound`` counts them in the printed ``FORWARD_EPILOGUE``
LSE_ROUNDINGS = 3


def lse_bound(exponent, log_den, log_n, lse_abs, u=U, u_func=U_FUNC):
    """``|lse^ − lse|`` (natural log): ``d + γ_3·(|lse| + d)``, ``d = λ + U_FUNC·(1 + log N_k + E + λ)``, from
    the exponent error ``E`` (``exponent``), ``λ = −log(1 − b)`` (``log_den``, the denominator's factor
    ``b``), ``log N_k`` (``log_n``) and ``|lse|`` (``lse_abs``). ``1`` stands for ``ln 2 < 1`` (log2's
    absolute error). Plain arithmetic: floats here, z3 reals in claim ``forward_error_bound``, which
    proves it."""
    g = gamma_of(LSE_ROUNDINGS, u)
    d = log_den + u_func * (1 + log_n + exponent + log_den)
    return d + g * (lse_abs + d)


def forward_bound(dtype: str, n_k: int, block_n: int, head_dim: int, scaled_abs: float, lse: float = 0.0,
                  num: Numbers = FLOATS, softcap: bool = False, *, out_dtype: str | None = None,
                  descaled: bool | None = None, alibi=None, fp8_mma: bool = False, score_mod=None) -> Bound:
    """The bound for one row: ``dtype`` in ``UNIT_ROUNDOFF`` (the dtype of the products' operands and of
    P's cast: ``"e4m3"``/``"e5m2"`` for FP8), ``scaled_abs = s·max_j Σ_d |q_d k_jd|`` on the dequantised
    inputs (``num``: the arithmetic, floats unless claims ``forward_error_bound`` / ``fp8_error_bound``
    check the composition); ``softcap``: the scores capped by the printed softcap (any cap:
    ``|c·tanh(s x/c)| <= s·|x|``, its error relative). ``out_dtype``: the stored output's (default:
    ``dtype``'s ``U_STORE``: bf16 for FP8). ``descaled``: FP8's descales (``spec.terms.FP8_*``; default:
    ``dtype`` is FP8): two more roundings in ``qk_scale`` and one more multiply of ``out``; an FP8 ``dtype``
    adds P's subnormal error. FP8 takes no softcap and no ALiBi (refused: ``ValueError``). ``alibi``: with
    ALiBi on, ``β = max_j |slope·(i + shift − j)|`` over the row's keys (natural units; ``alibi_reach``),
    whose printed bias adds ``alibi_exponent_error``'s terms. ``fp8_mma``: an FP8 ``dtype``'s products on
    sm_90's fp8 MMA (the compiled kernel on a Hopper GPU), each instruction's partial promoted: the score's
    dot ``fp8_dot_factor(D)`` for ``γ_D``, P V's tile ``FP8_MMA_ERR`` for ``γ_{B_c}`` and
    ``fp8_tile_roundings(B_c)`` carried roundings per tile (claim ``fp8_mma_bound``; the hardware
    hypothesis ``FP8_MMA_ERR``); off (the default): the products accumulate in fp32 (the interpreter).
    ``score_mod``: a user score_mod's ``(k, α, κ)`` (``spec.score_mods.ScoreMod.roundings`` and
    ``magnitudes``; its class: ``outside_bound`` is None), whose printed lines add
    ``score_mod_exponent_error``'s terms; not with softcap, ALiBi or FP8 (refused)."""
    descaled = dtype in FP8 if descaled is None else descaled
    if fp8_mma and dtype not in FP8:
        raise ValueError(f"forward_bound: fp8_mma is the products of an FP8 dtype on the fp8 MMA (got {dtype!r}: "
                         "its products run in its own dtype, accumulated in fp32)")
    if softcap and descaled:
        raise ValueError("forward_bound: FP8's descaled forward takes no softcap (nothing is bounded there)")
    if alibi is not None and descaled:
        raise ValueError("forward_bound: FP8's descaled forward takes no ALiBi (nothing is bounded there)")
    if score_mod is not None and (softcap or alibi is not None or descaled):
        raise ValueError("forward_bound: a user score_mod is bounded alone (no softcap, ALiBi or FP8 descales: "
                         "their qk_scale is 1 and nothing is bounded there)")
    tiles = n_tiles(n_k, block_n, num)
    E = (score_mod_exponent_error(head_dim, tiles, scaled_abs, score_mod, num) if score_mod is not None else
         exponent_error(head_dim, tiles, scaled_abs, num, softcap,
                        SCALE_ROUNDINGS_DESCALED if descaled else SCALE_ROUNDINGS, fp8_mma) if alibi is None
         else alibi_exponent_error(head_dim, tiles, scaled_abs, alibi, num, softcap))
    rho_w = num.expm1(E)
    if fp8_mma:  # P V on the fp8 MMA: the key's instruction, then acc·alpha and one add per instruction
        rho_num = carried_factor(weight_factor(num.unit_roundoff[dtype], num.FP8_MMA_ERR), tiles, num.gamma,
                                 fp8_tile_roundings(block_n, num))
    else:
        rho_num = carried_factor(weight_factor(num.unit_roundoff[dtype], num.gamma(block_n)), tiles, num.gamma)
    rho_den = carried_factor(num.gamma(block_n), tiles, num.gamma)
    u_div = weight_factor(num.U, num.U) if descaled else num.U  # acc / l, then · v_scale (FP8_OUT)
    abs_num = fp8_abs_num(n_k, num.p_abs[dtype], E, rho_den, num) if dtype in FP8 else 0
    out = out_bound(rho_w, rho_num, rho_den, u_div, num.u_store[out_dtype or dtype], abs_num, num)
    lse_abs = lse_bound(E, -num.log1p(-weight_factor(rho_w, rho_den)), num.log(num.max(n_k, 1)), num.abs(lse),
                        num.U, num.U_FUNC)
    return Bound(out, lse_abs, E)


# ----------------------------------------------------------------------------------
# The softcap (issue 23 row 8): the printed t = tanh(y) (spec.terms.SOFTCAP) is relatively accurate,
# so the capped score c·t carries an error relative to |c·t| <= s·|x|, like the plain score.
# ----------------------------------------------------------------------------------
#: Lambert's convergent C_4 is within SOFTCAP_CF·C of tanh on |y| < 1 (claim softcap_accuracy)
SOFTCAP_CF = 2 * U
#: the γ-indices of the rational branch's numerator y·(945 + y²(105 + y²)) and denominator
#: 945 + y²(420 + 15y²), Horner with positive terms, y² rounded once (claim softcap_accuracy counts them)
SOFTCAP_NUM_ROUNDINGS = 6
SOFTCAP_DEN_ROUNDINGS = 6
#: the exp2 branch (|y| >= 1): 1 − 2/(2^z + 1) relative to tanh at z's own argument, for exp2 within
#: U_FUNC = 4u (claim softcap_accuracy); its argument z = 2y·fl(log2 e) adds γ_2
SOFTCAP_EXP2 = 16 * U


def softcap_rel(u=U, cf=SOFTCAP_CF, exp2_branch=SOFTCAP_EXP2):
    """``ρ_t``: the printed t within ``tanh(y^)·(1 ± ρ_t)`` (``y^`` the computed argument), the larger of
    the rational branch's ``(1+ε_CF)(1+γ_6)(1+u)/(1−γ_6) − 1`` and the exp2 branch's ``(1+γ_2)(1+16u) − 1``."""
    g_num, g_den = gamma_of(SOFTCAP_NUM_ROUNDINGS, u), gamma_of(SOFTCAP_DEN_ROUNDINGS, u)
    rational = (1 + cf) * (1 + g_num) * (1 + u) / (1 - g_den) - 1
    return max(rational, (1 + gamma_of(2, u)) * (1 + exp2_branch) - 1)


#: the printed t's relative error bound
SOFTCAP_REL = softcap_rel()
Numbers.SOFTCAP_REL = SOFTCAP_REL


def softcap_score_factor(g_d, g_2, g_4, rho_t, u):
    """The capped score's exponent error relative to ``s·A``: the dot (``γ_D``), the argument
    ``y = fl(x·fl(s/c))`` (``γ_2``; tanh is 1-Lipschitz and ``|tanh y| <= |y|``), t's relative error
    ``ρ_t``, then ``fl(log2 e)``, ``fl(c·log2 e)``, ``t·softcap_out`` and the tile's exact product by ``qk_scale = 1``
    (3 roundings; ``γ_5`` an upper count), and
    ``2u·max|t^|`` from the max's subtraction and the rescales, as ``score_factor`` (claim
    ``forward_error_bound``)."""
    return (1 + g_d) * (1 + g_2) * (1 + rho_t) * (1 + g_4) * (1 + 2 * u) - 1


# ----------------------------------------------------------------------------------
# ALiBi (issue 23 deliverable 2): the printed bias (spec.terms.ALIBI_SCALAR, ALIBI) in log2 units,
#     alibi_coef = fl(slope·fl(log2 e)),   t^ = fl(fl(−alibi_coef·d^) + q^),   d^ = |i − j + shift|,
# the kernels passing the positions i, j as fp32 (offs_m.to(tl.float32)) and shift an int32. Scope: i, j and
# |shift| below 2^24, so they are exact in fp32, i − j is exact, and the add of shift rounds at most once:
# d^ = |i + shift − j|·(1 + δ) (exact whenever the distance is below 2^24). The bias b = slope·log2 e·
# |i + shift − j| is then computed within γ_4·|b|, and the add rounds once more: its error is absolute,
# |slope|·|i + shift − j| times a few u, and enters E beside the score's.
# ----------------------------------------------------------------------------------
#: roundings of the printed bias: log2 e rounded to fp32, slope·log2 e, the distance (one rounding counted:
#: the int → fp32 conversion of an integer factor, or here the fp32 add of shift; exact below 2^24), the
#: product; then ONE add to the score (claim forward_error_bound counts them in the printed ALIBI_SCALAR, ALIBI)
ALIBI_ROUNDINGS = 4
#: roundings of the raw score into log2 units with ALiBi and no cap: log2 e rounded to fp32,
#: sm_scale·log2 e (SCORE_LOG2_SCALAR) and the product qk·softcap_out (SCORE_LOG2); the tile's product
#: by qk_scale = 1 is exact (claim forward_error_bound counts them in the printed terms)
SCORE_LOG2_ROUNDINGS = 3


def alibi_exponent(scaled_abs, factor, bias, g_k, u):
    """The modified score's exponent error ``F_t + 2u·B_t`` (as ``score_factor``'s ``F + 2u·B``) from the
    score's (``scaled_abs·factor``, ``factor`` its ``score_factor`` or ``softcap_score_factor``) and the bias's
    (``|b| <= bias``, computed within ``γ_k``): ``t^ = (q^ − b^)(1 + δ)`` gives ``F_t = F_q + γ_k·β + u·(B_q +
    (1 + γ_k)β)``, ``B_t = (1 + u)(B_q + (1 + γ_k)β)``, and with ``F_q + 2u·B_q <= s·A·factor``, ``B_q <= s·A(1 +
    factor)``: ``s·A·((1 + factor)(1 + u(1 + 2u)) − 1) + β·((1 + γ_k)(1 + u)(1 + 2u) − 1)``. Plain arithmetic,
    homogeneous in (``scaled_abs``, ``bias``): log2 or natural units alike (claim ``forward_error_bound``)."""
    return (scaled_abs * ((1 + factor) * (1 + u * (1 + 2 * u)) - 1)
            + bias * ((1 + g_k) * (1 + u) * (1 + 2 * u) - 1))


def alibi_exponent_error(head_dim: int, n_tiles: int, scaled_abs: float, bias: float, num: Numbers = FLOATS,
                         softcap: bool = False) -> float:
    """``E`` with ALiBi on (``bias``: ``β = max_j |slope·(i + shift − j)|``, natural units): the score's
    factor (the cap's, or without it ``score_factor`` with the ``SCORE_LOG2_ROUNDINGS`` of the raw score
    into log2 units), the bias's ``γ_{ALIBI_ROUNDINGS}`` and the add (``alibi_exponent``), and the at most
    ``T + 1`` exp2 factors, as ``exponent_error``."""
    if softcap:
        factor = softcap_score_factor(num.gamma(head_dim), num.gamma(2), num.gamma(5), num.SOFTCAP_REL, num.U)
    else:
        factor = score_factor(num.gamma(head_dim), num.gamma(SCORE_LOG2_ROUNDINGS), num.U)
    return (alibi_exponent(scaled_abs, factor, bias, num.gamma(ALIBI_ROUNDINGS), num.U)
            - (n_tiles + 1) * num.log1p(-num.U_FUNC))


def alibi_reach(slope_abs: float, n_q: int, n_k: int, shift: int) -> float:
    """``β`` for every row of a case: ``max|slope| · max_{0 <= i < N_q, 0 <= j < N_k} |i + shift − j|`` (0 for
    an empty case): an upper bound of every row's ``max_j |slope·(i + shift − j)|`` (masked keys included)."""
    if n_q <= 0 or n_k <= 0:
        return 0.0
    return slope_abs * max(abs(n_q - 1 + shift), abs(shift - (n_k - 1)))


# ----------------------------------------------------------------------------------
# A user score_mod (spec.score_mods, issue 28): the printed lines (ScoreMod.forward_terms)
#     us^ = fl(fl(x^·qk_scale^)·fl(ln 2)),   qk' = fl(fl(f^(us^)/qk_scale^)·fl(log2 e)),   then the tile's qk'·qk_scale^,
# with qk_scale^ = fl(s·fl(log2 e)) (no softcap or ALiBi: with them qk_scale is 1 and nothing is bounded here).
# f^ is the printed f, of +, · and / (ScoreMod.outside_bound), affine in s: every monomial of it carries at most
# k = ScoreMod.roundings() roundings, so |f^ − f(us^)| <= γ_k·(α|us^| + κ), (α, κ) its absolute tree's parts.
# ----------------------------------------------------------------------------------
#: roundings of the scaled score us = x·qk_scale·ln 2 against s·x: log2 e in fp32, s·log2 e, x·qk_scale, ln 2 in
#: fp32, the product (claim score_mod_error_bound counts them in the printed QK_SCALE and us line)
SCORE_MOD_SCALE_ROUNDINGS = 5
#: roundings of f^ back to log2 units in the tile: the division by qk_scale^ (which the tile's product cancels
#: exactly), log2 e in fp32, its product, the tile's qk'·qk_scale^ (claim score_mod_error_bound counts them)
SCORE_MOD_BACK_ROUNDINGS = 4


def score_mod_exponent(scaled_abs, alpha, kappa, g_d, g_s, g_k, g_b, u):
    """A user score_mod's ``F_t + 2u·B_t`` (as ``score_factor``'s ``F + 2u·B``, natural units): the score
    ``|us^ − s x| <= F_s = s·A((1 + γ_D)(1 + γ_s) − 1)``, ``|us^| <= B_s = s·A(1 + γ_D)(1 + γ_s)``; the printed
    ``f``, affine in ``s`` with ``|∂f/∂s| <= α``: ``F_f = γ_k(α B_s + κ) + α F_s``, ``|f^| <= B_f = (1 + γ_k)(α B_s +
    κ)``; back in log2 units within ``γ_b``: ``F_t = F_f + γ_b B_f``, ``B_t = (1 + γ_b) B_f``. Plain arithmetic
    (claim ``score_mod_error_bound``)."""
    f_s = scaled_abs * ((1 + g_d) * (1 + g_s) - 1)
    b_s = scaled_abs * (1 + g_d) * (1 + g_s)
    f_f = g_k * (alpha * b_s + kappa) + alpha * f_s
    b_f = (1 + g_k) * (alpha * b_s + kappa)
    return f_f + g_b * b_f + 2 * u * (1 + g_b) * b_f


def score_mod_exponent_error(head_dim: int, n_tiles: int, scaled_abs: float, score_mod, num: Numbers = FLOATS) -> float:
    """``E`` with a user score_mod (``score_mod = (k, α, κ)``: its ``roundings()`` and the case's
    ``magnitudes``): ``score_mod_exponent`` with ``γ_D``, ``γ_5`` (``SCORE_MOD_SCALE_ROUNDINGS``), ``γ_k``,
    ``γ_4`` (``SCORE_MOD_BACK_ROUNDINGS``), and the at most ``T + 1`` exp2 factors, as ``exponent_error``."""
    k, alpha, kappa = score_mod
    return (score_mod_exponent(scaled_abs, alpha, kappa, num.gamma(head_dim), num.gamma(SCORE_MOD_SCALE_ROUNDINGS),
                               num.gamma(k), num.gamma(SCORE_MOD_BACK_ROUNDINGS), num.U)
            - (n_tiles + 1) * num.log1p(-num.U_FUNC))


#: the regime the fixed tolerances (``generator.checking.TOLERANCES``) are computed at: the tests'
#: standard-normal inputs, N_k <= 4096, D <= 128, any B_c in 16..256, s·A <= 24
REGIME = {"n_k": 4096, "head_dim": 128, "scaled_abs": 24.0, "block_ns": (16, 32, 64, 128, 256)}


def regime_bound(dtype: str) -> Bound:
    """The largest bound over the block sizes of ``REGIME`` (each field's maximum). Its ``lse_abs`` is
    taken at ``|lse| = 1``: the tests measure the lse error relative to ``max(1, |lse|)``, and
    ``lse_bound`` is ``α + β|lse|`` (``α, β >= 0``), so ``lse_bound(|lse|) / max(1, |lse|) <=
    lse_bound(1)`` for every ``|lse|``."""
    bounds = [forward_bound(dtype, REGIME["n_k"], bn, REGIME["head_dim"], REGIME["scaled_abs"], lse=1.0)
              for bn in REGIME["block_ns"]]
    return Bound(*(max(field) for field in zip(*bounds)))
