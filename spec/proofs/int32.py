"""The kernels' index and tile arithmetic in int32, proved with z3 (``spec.proofs.z3_int32``).

``mask_tiles_sound`` proves the classifier and the tile loops over the mathematical integers.
The kernel computes them in int32: scalar arguments (``N_Q``, ``N_K``, ``shift``, the window),
``tl.program_id(0) * BLOCK_M`` and ``key_len`` are int32, and so is every expression built from
them. This claim takes the *printed* lines (``spec.printer`` output of the very terms the
templates receive), evaluates them in 32-bit two's complement operation by operation, and asks
z3 for inputs inside the accepted ranges (``spec.assumptions``) where some operation overflows
or a truncating ``//`` meets a negative operand. None exists (unsat): every value equals its
mathematical one, so the ℤ proofs hold for the machine. Widen a range and z3 answers with a
counterexample (``window_right = 2**31 - 1`` overflows ``BLOCK_M + shift + start_m + window_right``).

Also proved here, in int32: the launch grid covers every query row exactly once, a loop
``range(lo, hi, B)`` over multiples of ``B`` covers ``[lo, hi)`` by whole tiles, and clamping a
window side to ``N_Q + N_K`` (assumption ``window_bounded``) attends the same keys (over ℤ).
"""

from __future__ import annotations

import sympy as sp
import z3

from spec import assumptions as A
from spec import masks
from spec.printer import print_term  # the printer the generator uses: the claims read what it prints
from spec.registry import claim
from spec.proofs.tools import ZERO, nonnegative, result, z3_solver
from spec.proofs.z3_int32 import BITS, Int32Line, bv, counterexample

NAMES = ("N_Q", "N_K", "shift", "window_left", "window_right", "key_len", "start_m", "start_n",
         "BLOCK_M", "BLOCK_N", "i", "j")


def _print(term, rename=None) -> str:
    return print_term(term, rename, comment=False)


SEQ_LEN_MAX = A.limit("seq_len_int32")  # N_q + N_k <= 2**29
BLOCKS = A.limit("block_sizes")  # the tile edges a kernel is compiled with (constexprs)
BLOCK_MAX = max(BLOCKS)


def machine(seq_len_max=SEQ_LEN_MAX, window_max=None, block_max=BLOCK_MAX):
    """int32 variables and the facts the accepted ranges give them (``spec.assumptions``):
    ``N_Q + N_K <= seq_len_max``, each window side ``<= N_Q + N_K`` (the runtime clamps it there;
    ``window_max``: a fixed bound instead, to show what happens without the clamp), ..."""
    v = {name: z3.BitVec(name, 32) for name in NAMES}
    within = lambda x, lo, hi: z3.And(x >= bv(lo), x <= hi)  # noqa: E731  (signed, both ends inclusive)
    total = v["N_Q"] + v["N_K"]
    side = total if window_max is None else bv(window_max)
    facts = [
        within(v["N_Q"], 1, bv(seq_len_max)), within(v["N_K"], 1, bv(seq_len_max)),
        total <= bv(seq_len_max),  # seq_len_int32
        within(v["window_left"], 0, side), within(v["window_right"], 0, side),  # window_nonneg, window_bounded
        within(v["BLOCK_M"], 1, bv(block_max)), within(v["BLOCK_N"], 1, bv(block_max)),  # block_sizes
        within(v["key_len"], 0, v["N_K"]),  # key_lengths_range
        z3.Or(v["shift"] == 0, v["shift"] == v["N_K"] - v["N_Q"]),  # alignment_shift
        # a query tile's first row, a key tile's first key (the programs of the grid)
        within(v["start_m"], 0, v["N_Q"] - 1), within(v["start_n"], 0, v["N_K"] - 1),
        # an element of a tile, padding rows/keys of the last tile included
        within(v["i"], 0, v["N_Q"] + v["BLOCK_M"] - 1), within(v["j"], 0, v["N_K"] + v["BLOCK_N"] - 1),
    ]
    return v, facts


def _overflow(facts, conditions):
    """0 when ``facts`` imply every ``(operation, condition)``; else the first operation z3 can
    break, with its counterexample."""
    model = counterexample(facts, z3.And(*[c for _, c in conditions]) if conditions else z3.BoolVal(True))
    if model is None:
        return ZERO
    if model == "unknown":
        return sp.Symbol("z3: unknown")
    s = z3_solver()  # the model's values fixed: which operation overflows there
    s.add(*facts, *[z3.BitVec(k, 32) == bv(val) for k, val in model.items() if isinstance(val, int)])
    broken = next((op for op, c in conditions if s.check(z3.Not(c)) == z3.sat), "?")
    shown = {k: val for k, val in model.items() if k in NAMES or k in RANGE_NAMES}
    return sp.Symbol(f"int32 overflow in `{broken}` at {shown}")


#: the running ranges of both classifiers (start, end, full start, full end), as printed
RANGE_NAMES = ("kv_start", "kv_end", "full_start", "full_end", "q_start", "q_end", "q_full_start", "q_full_end")
#: invariant bound of every running range (starts in [0, HALF], ends in [-HALF, total]):
#: each narrowing line keeps it, so it holds for every set of kinds, in any order
HALF = 2**30


def _classifier_cases(tag, init, narrowing, loop, ranges, total, v, facts):
    """Induction over the printed classifier lines, for every set of enabled kinds at once:

    * base: the init lines satisfy the invariant ``starts in [0, 2**30]``, ``ends in [-2**30, total]``;
    * step: from any ranges satisfying it, each kind's narrowing line computes without overflow
      and keeps it;
    * the tile-loop lines, from any ranges satisfying it, compute without overflow and divide
      only non-negative operands.
    """
    starts, ends = ranges[0::2], ranges[1::2]
    fresh = {name: z3.BitVec(name, 32) for name in ranges}

    def invariant(env):
        return z3.And(*[z3.And(env[x] >= 0, env[x] <= bv(HALF)) for x in starts],
                      *[z3.And(env[x] >= -bv(HALF), env[x] <= total) for x in ends])

    def run(lines, env):
        env, conditions = dict(env), []
        for text in lines:
            line = Int32Line(text, env)
            env[line.target] = line.value
            conditions += [(f"{line.code}: {op}", c) for op, c in line.conditions]
        return env, conditions

    env, conditions = run(init, v)
    cases = [(f"{tag}: init lines keep int32 and the range invariant",
              _overflow(facts, conditions + [("invariant", invariant(env))]))]
    assumed = facts + [invariant(fresh)]
    for text in narrowing:
        env, conditions = run([text], {**v, **fresh})
        cases.append((f"{tag}: `{text.split('  #')[0]}` keeps int32 and the range invariant",
                      _overflow(assumed, conditions + [("the range invariant", invariant(env))])))
    # the rounding to whole tiles divides by the tile edge, a compile-time constant: one case per
    # edge the generator emits (z3 then divides by a constant, not by a 32-bit unknown)
    block = "BLOCK_N" if "kv_start" in ranges else "BLOCK_M"
    for edge in BLOCKS:
        _, conditions = run(loop, {**v, **fresh, block: bv(edge)})
        cases.append((f"{tag}: tile-loop lines, {block} = {edge} (// and cdiv operands >= 0, no overflow)",
                      _overflow(assumed, conditions)))
    return cases


def _grid_and_loop_cases(seq_len_max):
    """The launch grid covers each query row once; ``range(lo, hi, B)`` covers ``[lo, hi)``.

    Over ℤ (z3 linear integer arithmetic) for each tile edge B of assumption ``block_sizes`` (a
    constexpr of the kernel), with the int32 fit of the values involved as a goal.
    """
    cases = []
    fits = lambda *xs: z3.And(*[z3.And(x >= -2**31, x <= 2**31 - 1) for x in xs])  # noqa: E731
    N, i, pid, lo, hi, key = z3.Ints("N i pid lo hi key")
    size = [N >= 1, N <= seq_len_max]
    for B in BLOCKS:
        grid = (N + B - 1) / B  # triton.cdiv(N, B) programs (host Python, exact)
        row = [i >= 0, i < N]
        owner = i / B
        in_grid = [pid >= 0, pid < grid]
        cases.append((f"grid B={B}: row i in [0, N) lies in the tile of program i // B, inside the grid",
                      _holds(size + row, z3.And(owner >= 0, owner < grid, owner * B <= i, i < owner * B + B))))
        cases.append((f"grid B={B}: program pid holds row i only if pid = i // B; pid·B + B fits int32",
                      _holds(size + row + in_grid,
                             z3.And(z3.Implies(z3.And(pid * B <= i, i < pid * B + B), pid == owner),
                                    fits(pid * B + B)))))
        loop = size + [lo >= 0, lo <= hi, hi <= ((N + B - 1) / B) * B, lo % B == 0, hi % B == 0]
        start = lo + ((key - lo) / B) * B  # the iteration whose tile holds key
        cases.append((f"loop B={B}: each key in [lo, hi) lies in exactly one iteration [start_n, start_n + B); "
                      f"start_n + B fits int32",
                      _holds(loop + [key >= lo, key < hi],
                             z3.And(start <= key, key < start + B, start < hi, (start - lo) % B == 0,
                                    fits(start + B)))))
    return cases


def _offset_case(tensors: str, width: str, index_limit=None):
    """The in-head element offset ``row * stride_n + col * stride_d`` (int32 in the kernels: ``offs_*``
    and the strides are int32; the batch and head offsets are int64) of every lane a load or store
    does not mask off (``row < N``, ``col < width``), under assumption ``index_int32`` for those
    ``tensors`` at their own head dim ``width`` (q/k's D, or v's D_v: the kernels mask each tile on
    its own head dim): each product and the sum stay within int32 (over the integers: then the int32
    result is the exact one).

    The one nonlinear step, ``|row·s| <= (N - 1)·|s|`` for ``0 <= row <= N - 1``, is decided by SymPy on
    a slack variable; z3 then needs only linear arithmetic over the products and bounds as unknowns."""
    r, t, s_abs = sp.symbols("row t s_abs", nonnegative=True)  # row = (N - 1) - t
    mono = nonnegative(sp.expand((r + t) * s_abs - r * s_abs))  # (N-1)|s| - row|s| = t|s| >= 0
    p1, p2, b1, b2 = z3.Ints("row_stride_n col_stride_d bound_n bound_d")  # the products and their bounds
    accepted = A.limit("index_int32") if index_limit is None else index_limit  # what the runtime lets through
    int32_max = 2 ** (BITS - 1) - 1  # the machine's: what must hold
    fits = lambda x: z3.And(x >= -int32_max - 1, x <= int32_max)  # noqa: E731
    facts = [b1 >= 0, b2 >= 0, b1 + b2 <= accepted,  # (N-1)|s_n| + (width-1)|s_d| <= the accepted bound
             p1 <= b1, -p1 <= b1, p2 <= b2, -p2 <= b2]  # the monotonicity lemma, for each product
    return (f"pointer offsets of {tensors}: row·stride_n + col·stride_d of an unmasked lane (col < {width}) "
            "fits int32 (index_int32)",
            mono if mono != 0 else _holds(facts, z3.And(fits(p1), fits(p2), fits(p1 + p2))))


def _holds(facts, goal):
    model = counterexample(facts, goal)
    if model is None:
        return ZERO
    return sp.Symbol(f"counterexample {model}")


def _window_clamp_case():
    """Over ℤ: a window side w and min(w, N_Q + N_K) attend the same (i, j) (either alignment)."""
    Nq, Nk, i, j, shift, wl, wr = z3.Ints("N_Q N_K i j shift wl wr")
    cap = Nq + Nk
    clamp = lambda w: z3.If(w < cap, w, cap)  # noqa: E731
    attend = lambda left, right: z3.And(i + shift - left <= j, j <= i + shift + right)  # noqa: E731
    facts = [Nq >= 1, Nk >= 1, i >= 0, i < Nq, j >= 0, j < Nk, wl >= 0, wr >= 0, z3.Or(shift == 0, shift == Nk - Nq)]
    return ("window clamp: min(w, N_Q + N_K) attends the same keys as w (over Z)",
            _holds(facts, attend(wl, wr) == attend(clamp(wl), clamp(wr))))


@claim("int32_index_arithmetic",
       "every index and tile expression the kernels compute (classifier ranges, their narrowing per "
       "mask kind, the rounding to whole tiles with truncating // and cdiv, the element predicates) "
       "equals its mathematical value in int32 — no overflow, no negative operand of // — for all "
       "inputs in the accepted ranges; the grid covers each query row once, each stage loop covers "
       "its range by whole tiles; clamping a window side to N_Q + N_K keeps the mask; the in-head "
       "pointer offset of every unmasked lane fits int32, for both head dims (q, k, dq, dk and decode's k cache at "
       "q/k's D; v, out, dO, dv and decode's v cache at v's D_v, which may differ: MLA; the dense mask's i·stride_mm + j·stride_mn at keys j < N_K, "
       "the forward's and the backward's _attn_bwd_mask tile)",
       r"\forall x\in\mathrm{Assumptions}:\ \mathrm{int32}(e)(x) = e(x)\ \text{for every printed index expression } e",
       terms=(),
       scope="symbolic sizes and positions; int32 bit-vectors (z3), exact; window clamp over Z",
       assumptions=("seq_len_int32", "window_nonneg", "window_bounded", "block_sizes", "key_len_range",
                    "alignment_shift", "index_int32"))
def prove_int32_index_arithmetic(seq_len_max=SEQ_LEN_MAX, window_max=None, block_max=BLOCK_MAX,
                                 tile_loop=masks.TILE_LOOP, row_tile_loop=masks.ROW_TILE_LOOP, index_limit=None):
    v, facts = machine(seq_len_max, window_max, block_max)
    kinds = list(masks.MASK_KINDS)
    cases = _classifier_cases("forward/dQ key tiles", [_print(t) for t in masks.BOUNDS_INIT],
                              [_print(t) for k in kinds for t in masks.bounds_terms(k)],
                              [_print(t) for t in tile_loop], RANGE_NAMES[:4], v["N_K"], v, facts)
    cases += _classifier_cases("dK/dV query tiles", [_print(t) for t in masks.ROW_BOUNDS_INIT],
                               [_print(t) for k in kinds for t in masks.row_bounds_terms(k)],
                               [_print(t) for t in row_tile_loop], RANGE_NAMES[4:], v["N_Q"], v, facts)
    keep = [_print(masks.KEEP_INIT)] + [_print(masks.keep_term(k)) for k in kinds]
    line_env, conditions = dict(v), []
    for text in keep:  # keep is a bool: its init, then & each kind's predicate
        line = Int32Line(text, line_env)
        line_env[line.target] = line.value
        conditions += [(f"{line.code}: {op}", c) for op, c in line.conditions]
    cases.append(("element predicates of a partial tile (every kind)", _overflow(facts, conditions)))
    cases += _grid_and_loop_cases(seq_len_max)
    cases.append(_window_clamp_case())
    cases.append(_offset_case("q, k, dq, dk, decode's k cache (a key's or a page slot's row)", "D", index_limit))
    cases.append(_offset_case("v, out, dO, dv, decode's v cache", "D_v", index_limit))
    # the dense mask (forward and backward: _attn_bwd_mask's tile i·stride_mm + j·stride_mn): rows i < N_Q, keys j < N_K
    cases.append(_offset_case("the mask", "N_K", index_limit))
    return result("int32_index_arithmetic", cases, "z3 over 32-bit two's complement")
