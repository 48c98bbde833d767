"""Every term the generator prints, in one catalogue: its group, by a label naming where it lives.

The docs' claim pages (``docs/hooks.py``), the claims test (every term a claim names exists) and
the citation test (mutating a printed term fails the claim its line cites) all read this list, so
a group added to a kernel is added here once and all three see it.
"""

from __future__ import annotations

from spec import addresses, masks, paged, rotary, score_mods, structure, terms, varlen


def term_groups() -> dict[str, tuple]:
    """``label -> group`` (a tuple of ``spec.terms.Term``) for every group of printed terms."""
    groups = dict(terms.GROUPS)
    groups.update({"masks.BOUNDS_INIT": masks.BOUNDS_INIT, "masks.ROW_BOUNDS_INIT": masks.ROW_BOUNDS_INIT,
                   "masks.TILE_LOOP": masks.TILE_LOOP, "masks.ROW_TILE_LOOP": masks.ROW_TILE_LOOP,
                   "structure.FORWARD_INIT": structure.FORWARD_INIT, "structure.GRAD_INIT": structure.GRAD_INIT,
                   "varlen.SEGMENT": varlen.SEGMENT})
    groups.update({f"paged.{name}": group for name, group in paged.GROUPS.items()})
    groups.update({f"rotary.{name}": group for name, group in rotary.GROUPS.items()})
    # the printed addresses (issue 24): decode's and the dense forward's offsets, varlen's cu_seqlens loads and pointer moves
    groups.update({f"addresses.{name}": group for name, group in addresses.DECODE_GROUPS.items()})
    groups.update({f"addresses.FORWARD.{name}": group for name, group in addresses.FORWARD_GROUPS.items()})
    groups.update({f"addresses.ROWS.{name}": group for name, group in addresses.ROWS_GROUPS.items()})
    groups.update({f"addresses.APPEND.{name}": group for name, group in addresses.APPEND_GROUPS.items()})
    groups.update({f"addresses.BACKWARD.{name}": group for name, group in addresses.BACKWARD_GROUPS.items()})
    groups.update({f"addresses.BACKWARD_KERNELS.{name}": group
                   for name, group in addresses.BACKWARD_KERNEL_GROUPS.items()})
    groups.update({f"addresses.TMA.{name}": group for name, group in addresses.TMA_BOXES.items()})
    # the lanes those offsets are evaluated on (offs_x = base + arange(width)) and the tile starts they read
    groups.update({f"addresses.LANES.{family}.{name}": group for family, lanes in addresses.LANES.items()
                   for name, group in lanes.items()})
    # the tile loops that produce the lanes' starts (for x in range(start, stop, step):)
    groups.update({f"addresses.LOOPS.{family}.{name}": group for family, loops in addresses.LOOPS.items()
                   for name, group in loops.items()})
    groups["addresses.SEGMENT_LOADS"] = addresses.SEGMENT_LOADS
    groups.update({f"addresses.SEGMENT_POINTERS.{k}": group for k, group in addresses.SEGMENT_POINTERS.items()})
    # a user score_mod's gradient scatter (issue 28); its per-instance lines are checked per score_mod
    # (spec.proofs.score_mod_user.derivative_cases) when the generator prints them
    groups["score_mods.SCATTER"] = score_mods.SCATTER
    return groups


def single_terms() -> dict[str, object]:
    """``label -> term`` for the printed terms that stand alone, outside any group."""
    return {"masks.MASK_TERM": masks.MASK_TERM, "masks.KEEP_INIT": masks.KEEP_INIT,
            "structure.GQA_HEAD": structure.GQA_HEAD, "structure.GQA_GROUP_HEAD": structure.GQA_GROUP_HEAD,
            "varlen.ROWS_PAST_END": varlen.ROWS_PAST_END, "varlen.KEYS_PAST_END": varlen.KEYS_PAST_END}


def all_terms() -> list[tuple[str, object]]:
    """``(label, term)`` for every printed term."""
    return ([(label, t) for label, group in term_groups().items() for t in group]
            + list(single_terms().items()))
