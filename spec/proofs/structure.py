"""Proofs of the kernels' structural facts (``spec.structure``): initial state, GQA map, stages."""

from __future__ import annotations

import sympy as sp
import z3

from spec import recurrences as R
from spec import structure as S
from spec.proofs.tools import ZERO, equal_cases, result, z3_verdict
from spec.printer import print_term  # the generator's own printing of the term
from spec.registry import claim
from spec.proofs.z3_int32 import Int32Line


@claim("initial_state",
       "the printed initial on-chip state (m_i, l_i, acc) is E = (−∞, 0, 0), the identity of ⊕ (claim "
       "merge_identity), so the fold over key tiles starts from no key; the gradient accumulators "
       "dK, dV, dQ (and a split head dim's dK, dQ tail columns) start at 0, the empty sum",
       r"(m_i, l_i, \mathrm{acc})_0 = E = (-\infty, 0, 0),\quad dK_0 = dV_0 = dQ_0 = 0",
       scope="exact; structural identity of the printed values",
       assumptions=())
def prove_initial_state(forward_init=S.FORWARD_INIT, grad_init=S.GRAD_INIT):
    pairs = [("(m_i, l_i, acc) = E", tuple(t.expr for t in forward_init), tuple(R.E)),
             ("(dk, dv, dq, dk_tail, dq_tail) = 0", tuple(t.expr for t in grad_init), (0,) * 5)]
    return result("initial_state", equal_cases(pairs), "the printed initial values against E and 0")


def _head_value(term, env, bits):
    """The value of a printed head-map line: a ``Term`` as the generator prints it, or a line of
    kernel text (a test's hand edit such as ``off_kvh = off_h % GROUP``)."""
    if not isinstance(term, str):
        term = print_term(term, comment=False)
    return Int32Line(term, env, bits).value


@claim("gqa_head_map",
       "GQA: query head h in [0, H_kv·G) reads K/V head off_kvh = h // G, the head "
       "repeat_interleave(G, dim=1) gives the reference (off_kvh·G <= h < off_kvh·G + G, 0 <= off_kvh < H_kv); "
       "the dK/dV program of K/V head c sums exactly the query heads c·G + g, 0 <= g < G (the grid's "
       "(tile, head, batch) split: claim launch_grid)",
       r"\mathrm{kvh}(h)=\lfloor h/G\rfloor:\ G\,\mathrm{kvh}(h)\le h<G\,\mathrm{kvh}(h)+G,\quad "
       r"\{h:\mathrm{kvh}(h)=c\}=\{cG+g: 0\le g<G\}",
       scope="symbolic H_kv, G; mathematical integers (z3, nonlinear), exact; heads are int64 in the kernels",
       assumptions=("gqa_divides",))
def prove_gqa_head_map(gqa_head=S.GQA_HEAD, gqa_group_head=S.GQA_GROUP_HEAD):
    h, c, g, G, Hkv = z3.Ints("off_h off_kvh g GROUP H_kv")
    facts = [G >= 1, Hkv >= 1, G <= 2**16, Hkv <= 2**16]
    kvh = _head_value(gqa_head, {"off_h": h, "GROUP": G}, None)
    member = _head_value(gqa_group_head, {"off_kvh": c, "GROUP": G, "g": g}, None)
    kvh_of_member = _head_value(gqa_head, {"off_h": member, "GROUP": G}, None)
    goals = {
        "head h reads the K/V head repeat_interleave gives it": (
            [h >= 0, h < Hkv * G], z3.And(kvh * G <= h, h < kvh * G + G, kvh >= 0, kvh < Hkv)),
        "the group's heads c·G + g map back to c": (
            [c >= 0, c < Hkv, g >= 0, g < G], z3.And(kvh_of_member == c, member >= 0, member < Hkv * G)),
        "every head h that maps to c is c·G + g for one g in [0, G)": (
            [h >= 0, h < Hkv * G, c == kvh], z3.And(h - c * G >= 0, h - c * G < G)),
    }
    cases = []
    for name, (hyps, goal) in goals.items():
        cases.append((name, z3_verdict([*facts, *hyps], goal)))
    return result("gqa_head_map", cases, "z3 over the integers")


@claim("stages_cover",
       "each kernel's three loop stages (lo, hi, MASKED) run back to back from the first tile to the "
       "last (lo of each = hi of the one before), and the stage without the element predicate "
       "(MASKED=False) is exactly [full_lo, full_hi), the tiles claim mask_tiles_sound proves full "
       "(with lo <= full_lo <= full_hi <= hi, so the stages partition the visited tiles)",
       r"[lo, \mathit{full}_{lo})\cup[\mathit{full}_{lo},\mathit{full}_{hi})\cup[\mathit{full}_{hi}, hi)"
       r"=[lo,hi),\quad \neg\mathrm{MASKED}\Rightarrow[\mathit{full}_{lo},\mathit{full}_{hi})",
       scope="symbolic loop bounds; exact (structure of the printed stage table)",
       assumptions=())
def prove_stages_cover(key_stages=S.KEY_STAGES, row_stages=S.ROW_STAGES):
    from spec import masks

    cases = []
    for tag, stages, (lo, hi, full_lo, full_hi) in (("key loop", key_stages, masks.KEY_LOOP),
                                                    ("query loop", row_stages, masks.ROW_LOOP)):
        ends = [(s.lo, s.hi) for s in stages]
        cases.append((f"{tag}: first stage starts at {lo}", ZERO if ends[0][0] == lo else sp.Tuple(ends[0][0], lo)))
        cases.append((f"{tag}: last stage ends at {hi}", ZERO if ends[-1][1] == hi else sp.Tuple(ends[-1][1], hi)))
        for k in range(len(ends) - 1):
            cases.append((f"{tag}: stage {k + 2} starts where stage {k + 1} ends",
                          ZERO if ends[k][1] == ends[k + 1][0] else sp.Tuple(ends[k][1], ends[k + 1][0])))
        for k, s in enumerate(stages):
            if not s.masked:
                cases.append((f"{tag}: unmasked stage {k + 1} is [full_lo, full_hi)",
                              ZERO if (s.lo, s.hi) == (full_lo, full_hi) else sp.Tuple(s.lo, s.hi)))
    return result("stages_cover", cases, "the stage tables against the proven loop bounds")
