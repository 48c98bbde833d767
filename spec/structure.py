"""The kernels' structural facts as printed terms: initial state, GQA head map, loop stages.

Besides the arithmetic of ``spec.terms``, a kernel relies on a few facts about its structure;
each is stated here once, printed by the generator into the templates and proved by a claim:

* ``FORWARD_INIT``: the on-chip state starts at ``E = (−∞, 0, 0)``, the identity of ⊕, and the
  gradient accumulators of the backward (``GRAD_INIT``) at 0 (claim ``initial_state``);
* ``GQA_HEAD`` / ``GQA_GROUP_HEAD``: query head ``h`` reads K/V head ``h // GROUP`` (what
  ``repeat_interleave(GROUP, dim=1)`` gives the reference), and the dK/dV program of K/V head
  ``c`` sums exactly the query heads ``c·GROUP + g``, ``0 <= g < GROUP`` (claim ``gqa_head_map``);
* ``KEY_STAGES`` / ``ROW_STAGES``: the three loop stages ``(lo, hi, MASKED)`` of a kernel: they
  partition the visited range, and only the range claim ``mask_tiles_sound`` proves full runs
  without the predicate (claim ``stages_cover``).
"""

from __future__ import annotations

from typing import NamedTuple

import sympy as sp

from spec import masks
from spec import notation as n
from spec.terms import Term

# ---------------------------------------------------------------------------------- state
FORWARD_INIT = (
    Term(n.m_i, n.NEG_INF, "initial_state", "E: the max over no key"),
    Term(n.l_i, sp.Integer(0), "initial_state", "E: the empty sum"),
    Term(n.acc, sp.Integer(0), "initial_state", "E: the empty sum"),
)
GRAD_INIT = (
    Term(n.dk, sp.Integer(0), "initial_state", "dK: an empty sum over query tiles"),
    Term(n.dv, sp.Integer(0), "initial_state", "dV: an empty sum over query tiles"),
    Term(n.dq, sp.Integer(0), "initial_state", "dQ: an empty sum over key tiles"),
    # a split head dim's (claim head_dim_split) gradient tails, columns [HEAD_DIM, D)
    Term(n.dk_tail, sp.Integer(0), "initial_state", "dK's tail columns: an empty sum over query tiles"),
    Term(n.dq_tail, sp.Integer(0), "initial_state", "dQ's tail columns: an empty sum over key tiles"),
)

# ---------------------------------------------------------------------------------- heads
off_h, off_kvh, group, g = sp.symbols("off_h off_kvh GROUP g", integer=True, nonnegative=True)
GQA_HEAD = Term(off_kvh, sp.floor(off_h / group), "gqa_head_map",
                "GQA: the GROUP query heads of one K/V head read the same K/V (no copies)")
GQA_GROUP_HEAD = Term(off_h, off_kvh * group + g, "gqa_head_map",
                      "the g-th query head of this K/V head's group")

#: (the launch grid's split of a program id into (tile, head, batch) is printed: spec.addresses.GRID_GROUPS,
#: claim launch_grid)

# ---------------------------------------------------------------------------------- stages
class Stage(NamedTuple):
    lo: sp.Symbol
    hi: sp.Symbol
    masked: bool


#: the forward / dQ key loop: partial tiles, full tiles (no predicate), partial tiles
KEY_STAGES = (Stage(masks.kv_lo, masks.full_lo, True), Stage(masks.full_lo, masks.full_hi, False),
              Stage(masks.full_hi, masks.kv_hi, True))
#: the dK/dV query loop, the same shape over query tiles
ROW_STAGES = (Stage(masks.q_lo, masks.q_full_lo, True), Stage(masks.q_full_lo, masks.q_full_hi, False),
              Stage(masks.q_full_hi, masks.q_hi, True))
