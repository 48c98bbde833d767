"""Template hygiene (``generator.hygiene``): every generated kernel file is clean, and hand edits
that put arithmetic or structure into a kernel without a spec term are caught by the check.

The check walks every ``.py`` file of ``generated/`` holding a ``@triton.jit`` function, so a
kernel file added later (a new template, a new variant) is covered without touching this test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from generator import hygiene
from generator.render import ENV, render_variant
from generator.variants import BlockConfig

GENERATED = Path(__file__).resolve().parent.parent / "generated"
KERNEL_FILES = sorted(p.name for p in GENERATED.glob("*.py") if "@triton.jit" in p.read_text())


def test_every_kernel_file_is_found():
    kinds = {name.split("_br")[0] for name in KERNEL_FILES}
    assert {"attention_fwd", "attention_bwd", "softmax"} <= kinds, KERNEL_FILES


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_generated_kernel_is_clean(name):
    """``check_generated``'s check of this one file (``check_file``), not of every file per case."""
    assert hygiene.check_file(GENERATED / name) == []


def problems(source: str) -> list[str]:
    printed, assigned, stages = hygiene.printed_lines()
    return hygiene.check_source(source, set(printed), set(assigned), set(stages))


def variant(kind: str):
    return next(v for v in BlockConfig(64, 64).variants() if v.kind.name == kind)


def edited(kind: str, old: str, new: str, count: int = 1) -> str:
    """The generated file of ``kind`` at 64x64 with a hand edit (``old`` must occur)."""
    source = render_variant(variant(kind))
    assert old in source, old
    return source.replace(old, new, count)


def test_template_edit_acc_times_constant_is_caught():
    """The issue's first template mutant: `acc = acc*1.000004` added to the forward template."""
    v = variant("fwd")
    template = ENV.loader.get_source(ENV, v.kind.template)[0]
    anchor = "    # SRAM -> HBM: the O tile"
    assert anchor in template
    source = render_variant(v, template.replace(anchor, "    acc = acc*1.000004\n" + anchor, 1))
    found = problems(source)
    assert any("acc*1.000004" in p and "assigns ['acc']" in p for p in found), found


def test_float_arithmetic_outside_a_term_is_caught():
    found = problems(edited("fwd", "q = q.to(DOT_DTYPE)", "q = (q * 2.0).to(DOT_DTYPE)"))
    assert any("float arithmetic" in p for p in found), found


def test_stage_one_unmasked_is_caught():
    """Stage 1 (partial tiles before the full ones) flipped to MASKED=False."""
    old = "offs_m, offs_d, offs_dv,\n        kv_lo, full_lo,\n        N_Q, N_K, shift, window_left, window_right, key_len, " \
          "softcap_in, softcap_out, alibi_coef,\n        drop_seed, drop_base, drop_nk, dropout_p, drop_scale, p_scale,\n" \
          "        HEAD_DIM, HEAD_DIM_V, BLOCK_N, True,"
    found = problems(edited("fwd", old, old.replace("True,", "False,")))
    assert any("('kv_lo', 'full_lo', False)" in p for p in found), found


def test_dkdv_stage_unmasked_is_caught():
    found = problems(edited("bwd", "MAP_BLOCK_M,\n            True,", "MAP_BLOCK_M,\n            False,"))
    assert any("stage call" in p for p in found), found


def test_gqa_head_map_mod_is_caught():
    found = problems(edited("fwd", "off_kvh = (off_h // GROUP)", "off_kvh = off_h % GROUP  #"))
    assert any("assigns ['off_kvh']" in p for p in found), found


def test_epilogue_edit_is_caught():
    found = problems(edited("fwd", "acc = acc/l_safe[:, None]", "acc = acc/(2*l_safe[:, None])"))
    assert any("assigns ['acc']" in p for p in found), found


def test_initial_state_edit_is_caught():
    found = problems(edited("fwd", 'm_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
                            "m_i = tl.zeros([BLOCK_M], dtype=tl.float32)  #"))
    assert any("assigns ['m_i']" in p for p in found), found


def test_allow_list_is_short():
    """The reviewed allow-list stays small: a regex of index names and a handful of calls."""
    assert len(hygiene.ALLOWED_CALLS) <= 10 and len(hygiene.LOADS) <= 3
    # 40 before the varlen / decode / merge kernels were merged; their index names (listed in the
    # module docstring) brought it to 46
    # mask_mod (#16) added its integer tile class mm_state: 47; the printed address terms (#24): 55;
    # serving's (#26) cache_leftpad / cache_batch_idx offsets, printed address terms lp_off, bi_off: 57
    # the dense forward's addresses (#24) made the address names two patterns (*_off, *_base) and pid_m: 50
    assert hygiene.INDEX_NAME.pattern.count("|") <= 57
    assert len(hygiene.EXCEPTIONS) <= 12  # each one reported as a gap in docs/verification.md


def test_padding_select_of_a_term_name_is_caught():
    """The padding-select allowance is for loaded tiles only: zeroing acc that way is arithmetic."""
    found = problems(edited("fwd", "    # epilogue: the one division of FA2",
                            "    acc = tl.where(offs_m[:, None] < N_Q, acc, 0.0)\n    # epilogue: the one division of FA2"))
    assert any("assigns ['acc']" in p for p in found), found


def test_readme_states_the_number_of_reviewed_exceptions():
    """The README's sentence on hygiene names how many lines are excepted: it must follow the list."""
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert f"a reviewed list of {len(hygiene.EXCEPTIONS)} structural lines" in readme


# ---------------------------------------------------------------- issue 24: pointer arithmetic (rule 4)
@pytest.mark.parametrize("kind, old, new, sign", [
    # (a) the block table addressed by hand (here with its row width as the row stride)
    ("decode", "page = tl.load(BlockTable + bt_off,", "page = tl.load(BlockTable + off_b * PAGE_SIZE + page_idx,",
     "BlockTable + off_b * PAGE_SIZE + page_idx"),
    ("decode", "tl.store(Lse + lse_off,", "tl.store(Lse + lse_off + 1,", "Lse + lse_off + 1"),
    ("decode", "tl.load(Sinks + sink_off,", "tl.load(Sinks + head,", "Sinks + head"),  # an index is no offset
    ("decode", "k = tl.load(K + k_off,", "k = tl.load(K + k_off + stride_kn,", "K + k_off + stride_kn"),
    # (d) the keys offset by the query segment's start, typed into the template
    ("fwd", "K = K + seq_start_k*stride_kn", "K = K + seq_start_q*stride_kn", "K = K + seq_start_q*stride_kn"),
    # (e) cu_seqlens' end read one entry early, typed into the template
    ("fwd", "seq_end_q = tl.load(CuSeqlensQ + (off_b + 1))", "seq_end_q = tl.load(CuSeqlensQ + off_b)",
     "CuSeqlensQ + off_b"),
    ("bwd", "DV = DV + seq_start_k*stride_dvn", "DV += seq_start_k * stride_dkn", "DV += seq_start_k"),
    # the dense forward (claim forward_addresses): the old hand-written lines, typed back in
    ("fwd", "key_len = tl.load(KeyLens + kl_off)", "key_len = tl.load(KeyLens + off_b)", "KeyLens + off_b"),
    ("fwd", "tl.store(Lse + lse_off,", "tl.store(Lse + off_bh * N_Q + offs_m,", "Lse + off_bh * N_Q + offs_m"),
    ("fwd", "k = tl.load(K + k_off,", "k = tl.load(K + k_off + stride_kn,", "K + k_off + stride_kn"),
    # a pointer the function only hands on (Mask reaches a load in _attn_fwd_tile): moved by hand in _attn_fwd
    ("fwd", "mask_base = off_b*stride_mb", "Mask = Mask + off_b*stride_mb", "Mask + off_b * stride_mb"),
    ("fwd", "tile_state = tl.load(BlockMap + map_off)", "tile_state = tl.load(BlockMap + map_base + start_n)",
     "BlockMap + map_base + start_n"),
    ("fwd", "sink = tl.load(Sinks + fsink_off)", "sink = tl.load(Sinks + off_h)", "Sinks + off_h"),
    ("fwd", "slope = tl.load(Slopes + slope_off)", "slope = tl.load(Slopes + off_b * stride_sb + off_h)",
     "Slopes + off_b * stride_sb + off_h"),
    ("fwd", "tl.store(Keep + keep_off,", "tl.store(Keep + keep_off + N_K,", "Keep + keep_off + N_K"),
    # the KV-cache append (claim append_addresses): the audit's block-table row stride, typed back in
    ("decode", "page = tl.load(BlockTable + abt_off,", "page = tl.load(BlockTable + off_b * stride_bt_b + page_idx,",
     "BlockTable + off_b * stride_bt_b + page_idx"),
    # the backward preprocess (claim backward_addresses): its old contiguous rows
    ("bwd", "lse = tl.load(Lse + slse_off,", "lse = tl.load(Lse + off_bh * N_Q + offs_m,", "Lse + off_bh * N_Q + offs_m"),
    # the backward's dK/dV and dQ kernels (claim backward_kernel_addresses): their old hand-written lines
    ("bwd", "tl.store(DK + dk_off,", "tl.store(DK + off_b * stride_dkb + offs_n[:, None] * stride_dkn,",
     "DK + off_b * stride_dkb"),
    ("bwd", "tl.store(DQ + dq_off,", "tl.store(DQ + dq_off + stride_dqm,", "DQ + dq_off + stride_dqm"),
    ("bwd", "delta = tl.load(Delta + drow_off)", "delta = tl.load(Delta + lse_row0 + offs_m)", "Delta + lse_row0"),
    ("bwd", "q = tl.load(Q + q_rows_off,", "q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :],",
     "Q + offs_m[:, None] * stride_qm"),
    ("bwd", "vT = tl.load(V + bvt_off,", "vT = tl.load(V + bv_base + offs_n[None, :] * stride_vn,",
     "V + bv_base + offs_n[None, :] * stride_vn"),
    ("bwd", "mask_tile = tl.load(Mask + bmask_off,", "mask_tile = tl.load(Mask + bmask_base + i * stride_mm + j,",
     "Mask + bmask_base + i * stride_mm + j"),
    ("bwd", "tile_state = tl.load(BlockMap + mapr_off)", "tile_state = tl.load(BlockMap + mapr_base + start_n)",
     "BlockMap + mapr_base + start_n"),
    ("bwd", "key_len = tl.load(KeyLens + bkl_off)", "key_len = tl.load(KeyLens + off_b)", "KeyLens + off_b"),
    # a pointer _attn_bwd_dkdv only hands on (Q reaches a load in _attn_bwd_rows), moved there by hand
    ("bwd", "        bq_base = off_b*stride_qb", "        Q_head = Q + off_b*stride_qb\n        bq_base = off_b*stride_qb",
     "Q + off_b * stride_qb"),
    # softmax and the merges (claim rows_addresses): the old unit-stride lines
    ("softmax", "x = tl.load(X + x_off,", "x = tl.load(X + offs_m[:, None] * stride_xr + offs_n[None, :],",
     "X + offs_m[:, None] * stride_xr + offs_n[None, :]"),
    ("merge", "lse_a = tl.load(LSE_A + la_off,", "lse_a = tl.load(LSE_A + offs_m,", "LSE_A + offs_m"),
    ("merge", "sink = tl.load(Sinks + msink_off,", "sink = tl.load(Sinks + offs_m % H,", "Sinks + offs_m % H"),
    # FP8's descales (claim forward_addresses): the old one-stride-pair line, typed back in
    ("fwd", "k_descale = tl.load(KDescale + kdesc_off)",
     "k_descale = tl.load(KDescale + off_b * stride_qdesc_b + off_kvh * stride_qdesc_h)", "KDescale + off_b"),
])
def test_unprinted_pointer_arithmetic_is_caught(kind, old, new, sign):
    """Rule 4 in every kernel function; a printed pointer move (``Q = Q + seq_start_q*stride_qm``) edited by hand
    is caught too (rule 4, or rule 2: its pointer is a name only a printed term may assign)."""
    found = problems(edited(kind, old, new))
    assert any(sign in p and ("printed address term" in p or "only a printed spec term" in p) for p in found), found


def test_a_pointer_built_by_hand_and_handed_to_a_helper_is_caught():
    """A local pointer built from a parameter the function never loads through (``Mask_head = Mask + ...``)
    and handed to a helper at a pointer's place escapes the load and arithmetic checks; rule 4 refuses
    it unless a printed line assigns it."""
    source = edited("bwd", "stride_dom, stride_dod, stride_rm, Mask, bmask_base,",
                    "stride_dom, stride_dod, stride_rm, Mask_head, bmask_base,", count=3)
    source = source.replace("        bmask_base = off_b*stride_mb + off_h*stride_mh",
                            "        Mask_head = Mask + off_b * stride_mb\n        bmask_base = off_b*stride_mb + off_h*stride_mh",
                            1)
    found = problems(source)
    assert any("`Mask_head` handed to _attn_bwd_dkdv_stage as the pointer Mask" in p for p in found), found


def test_hand_written_tma_coordinates_are_caught():
    """Rule 4 on the TMA path (claim tma_addresses): coordinates typed into a descriptor's load or store, or
    handed to _tma_tile / _tma_store, instead of a printed box."""
    found = problems(edited("fwd", "k = _tma_tile(K, k_box)",
                            "k = _tma_tile(K, [off_b.to(tl.int32), off_h.to(tl.int32), start_n.to(tl.int32), 0])"))
    assert any("handed to _tma_tile as the TMA box box is not a printed box" in p for p in found), found
    found = problems(edited("fwd", "    tile = desc.load(box)", "    tile = desc.load([0, 0, 0, 0])"))
    assert any("_tma_tile" in p and "TMA coordinates `[0, 0, 0, 0]` of a load are not a printed box" in p
               for p in found), found


def test_a_stride_passed_by_hand_at_launch_is_caught():
    """Rule 5: the forward launcher passing the mask_mod row stride by hand again (as it did before issue 24)."""
    found = problems(edited("fwd", "**constants[use_tma][1], QTail=q_tail_arg",
                            "**constants[use_tma][1], stride_mmb=k.stride(0), QTail=q_tail_arg"))
    assert any("`stride_mmb=k.stride(0)` passes a stride by hand" in p for p in found), found


def test_a_window_side_passed_by_hand_at_launch_is_caught():
    """Rule 5 (audit of issue 24's additions): the decode launcher's window sides typed by hand, swapped (out 1.43
    off for window (7, 2)), instead of spec.launch.window_arguments, which claim window_clamp reads."""
    found = problems(edited("decode", "**windows, p_scale=p_scale,",
                            "window_left=window[1], window_right=window[0], p_scale=p_scale,"))
    assert any("`window_left=window[1]` passes a window side by hand" in p for p in found), found


def test_score_grad_row_by_hand_is_caught():
    """A user score_mod's gradient row (claim backward_kernel_addresses) typed back into the dQ kernel as the old
    Grad_row pointer, and the scatter's entries addressed by hand."""
    v = next(v for v in BlockConfig(64, 64, score_mods=("spec.score_mods:rel_bias",)).variants()
             if v.kind.name == "bwd" and v.score_mod and not v.mask_mod)
    source = render_variant(v)
    old = "sgacc = tl.load(ScoreGrad + sg_off,"
    assert old in source
    found = problems(source.replace(old, "sgacc = tl.load(ScoreGrad + sg_base + offs_e,"))
    assert any("ScoreGrad + sg_base + offs_e" in p and "printed address term" in p for p in found), found
    # (the split head dim's offs_dt, HEAD_DIM_TAIL follow: claim head_dim_split)
    row = "        off_b, off_h, SF, SI, ScoreGrad, sg_base, SCORE_CHUNK, offs_dt, HEAD_DIM_TAIL)"
    assert source.count(row) == 3  # the dQ kernel's three stage calls
    old_row = source.replace(row, "        off_b, off_h, SF, SI, Grad_row, 0, SCORE_CHUNK, offs_dt, HEAD_DIM_TAIL)").replace(
        "    sg_base = stride_sgp*", "    Grad_row = ScoreGrad + stride_sgp * pid_m\n    sg_base = stride_sgp*", 1)
    found = problems(old_row)
    assert any("`Grad_row` handed to _attn_bwd_dq_stage as the pointer ScoreGrad" in p for p in found), found
    clean = problems(source)
    assert not any("ScoreGrad" in p for p in clean), clean


def test_a_second_random_draw_is_caught():
    """Dropout's keep decision is the one printed term (claim dropout_mask_same): a draw added by
    hand, even with index-only arguments, is reported, whether in the forward or the dQ loop."""
    found = problems(edited("fwd", "    # epilogue: the one division of FA2",
                            "    r = tl.rand(0, offs_m)\n    # epilogue: the one division of FA2"))
    assert any("random draw `tl.rand(0, offs_m)`" in p for p in found), found
    found = problems(edited("bwd", "            if HAS_DROPOUT:\n                keep_drop",
                            "            if HAS_DROPOUT:\n                keep_drop = tl.randint(drop_seed, offs_n) > 0\n"
                            "                keep_drop"))
    assert any("random draw `tl.randint(drop_seed, offs_n)`" in p for p in found), found


# ---------------------------------------------------------------- audit of round three: coordinates (rule 6)
@pytest.mark.parametrize("kind, old, new, sign", [
    # FP8's descales read at the query head (under GQA: another KV head's, or past (B, Hkv): NaN)
    ("fwd", "= _fp8_descales(QDescale, KDescale, VDescale, off_b, off_kvh,",
     "= _fp8_descales(QDescale, KDescale, VDescale, off_b, off_h,", "`off_h` handed to _fp8_descales as its coordinate off_kvh"),
    # an FP8 cache's descales read at the cache row (cache_batch_idx) instead of the batch entry
    ("decode", "= _fp8_descales(QDescale, KDescale, VDescale, off_b, off_kvh,",
     "= _fp8_descales(QDescale, KDescale, VDescale, off_bc, off_kvh,", "`off_bc` handed to _fp8_descales as its coordinate off_b"),
    # ALiBi's slope of the KV head instead of the query head
    ("fwd", "= _score_mod_scalars(sm_scale, softcap, Slopes, off_b, off_h,",
     "= _score_mod_scalars(sm_scale, softcap, Slopes, off_b, off_kvh,", "`off_kvh` handed to _score_mod_scalars as its coordinate off_h"),
])
def test_a_coordinate_handed_to_a_helper_under_another_name_is_caught(kind, old, new, sign):
    """Rule 6: every claim proves a helper's offsets at its parameters off_b / off_h / off_kvh; a call handing it
    another coordinate proved every claim (the audit of round three measured NaN for the first two)."""
    assert not [p for p in problems(edited(kind, old, old)) if "coordinate" in p]
    found = problems(edited(kind, old, new))
    assert any(sign in p for p in found), found


def test_coordinate_gaps_are_listed_on_the_verification_page():
    page = (Path(__file__).resolve().parents[1] / "docs" / "verification.md").read_text()
    missing = [gap for gap in hygiene.COORDINATE_GAPS if f"`{gap[1]}`" not in page or f"`{gap[2]}`" not in page]
    assert missing == [], missing


# ---------------------------------------------------------------- issue 24: masked lanes (rule 7)
@pytest.mark.parametrize("kind, function, old, new, sign", [
    # _decode_fwd (its masks printed: claims decode_addresses, paged_kv_reads): a load mask compared by hand again
    # (the decode kernel's old q mask, with <= for <)
    ("decode", "_decode_fwd", "q = tl.load(Q + q_off, mask=row_ok[:, None] & d_ok[None, :],",
     "q = tl.load(Q + q_off, mask=row_ok[:, None] & (offs_d[None, :] <= HEAD_DIM),", "compares by hand"),
    # a store mask reading a name no printed mask term assigns
    ("decode", "_decode_fwd", "tl.store(Lse + lse_off, lse, mask=row_ok)", "tl.store(Lse + lse_off, lse, mask=rows)",
     "reads ['rows']"),
    # a printed mask rebound by hand (one row past the program's)
    ("decode", "_decode_fwd", "    row_ok = offs_m < GROUP*N_Q",
     "    row_ok = offs_m < GROUP*N_Q + 1\n    row_ok = offs_m < GROUP*N_Q", "assigns the printed mask ['row_ok'] by hand"),
    # the dense forward (claim forward_addresses; any of its functions): the forward tile's old key mask, typed back
    # in (rule 7 refuses the comparison; rule 2 no longer sees it)
    ("fwd", "", "            k_mask = k_mask & key_ok[:, None]\n",
     "            k_mask = k_mask & (offs_n[:, None] < N_K)\n", "`k_mask` of a load reads ['k_mask']"),
    ("fwd", "", "q = tl.load(Q + q_off, mask=row_ok[:, None] & d_ok[None, :],",
     "q = tl.load(Q + q_off, mask=(offs_m[:, None] < N_Q) & d_ok[None, :],", "compares by hand"),
    # the TMA path's padding select back on its hand comparison (keys past key_len; the printed key_ok also bounds
    # N_K): the allowance takes printed mask terms only (claims forward_addresses, tma_addresses)
    ("fwd", "", "            k = tl.where(key_ok[:, None], k, 0.0)\n",
     "            k = tl.where(offs_n[:, None] < key_len, k, 0.0)\n",
     "the padding select `k = tl.where(offs_n[:, None] < key_len, k, 0.0)` keeps the lanes `offs_n[:, None] < key_len`, "
     "not printed mask terms"),
    # _attn_bwd_mask's dense tile read on its old hand comparison (claim backward_kernel_addresses reads ij_ok)
    ("bwd", "_attn_bwd_mask", "mask=ij_ok, other=0)", "mask=(i < N_Q) & (j <= N_K), other=0)", "compares by hand"),
    ("bwd", "_attn_bwd_mask", "ij_ok = (i < N_Q) & (j < N_K)  #", "ij_ok = (i <= N_Q) & (j < N_K)  #",
     "assigns the printed mask ['ij_ok'] by hand"),
    # the KV append _append_rows (claim append_addresses): its old token mask, typed back in with <= (a printed mask
    # rebound by hand)
    ("decode", "_append_rows", "    t_ok = offs_t < N_NEW", "    t_ok = offs_t <= N_NEW\n    t_ok = offs_t < N_NEW",
     "assigns the printed mask ['t_ok'] by hand"),
    # the partner's mask comparing the rotary lanes by hand (a derived local holding a comparison)
    ("decode", "_append_rows", "ro_mask = t_ok[:, None] & ro_ok[None, :]",
     "ro_mask = t_ok[:, None] & (offs_d[None, :] <= 2*ROTARY_HALF)", "reads ['ro_mask']"),
])
def test_a_hand_written_mask_is_caught(kind, function, old, new, sign):
    """Rule 7 (every load and store mask a printed mask term) in the kernel functions of each family: the edit is
    reported in ``function`` (any function of the file where empty) with ``sign``."""
    found = problems(edited(kind, old, new))
    assert any(function in p and sign in p for p in found), found


# ---------------------------------------------------------------- issue 24: the lanes (rule 8)
@pytest.mark.parametrize("kind, old, new", [
    # the split head dim's tail one column early (its first lane re-reads the main part's last column)
    ("decode", "offs_dt = HEAD_DIM + tl.arange(0, BLOCK_DT)", "offs_dt = HEAD_DIM - 1 + tl.arange(0, BLOCK_DT)"),
    # a row tile the width of a key tile
    ("fwd", "offs_m = start_m + tl.arange(0, BLOCK_M)", "offs_m = start_m + tl.arange(0, BLOCK_N)"),
    # the dK/dV key tile from the wrong program id
    ("bwd", "offs_n = start_n + tl.arange(0, BLOCK_N)", "offs_n = start_n + BLOCK_N + tl.arange(0, BLOCK_N)"),
    # the append's token tile, and softmax's rows
    ("decode", "offs_t = BLOCK_T * tl.program_id(0) + tl.arange(0, BLOCK_T)",
     "offs_t = BLOCK_T * tl.program_id(1) + tl.arange(0, BLOCK_T)"),
    ("softmax", "offs_m = BLOCK_M * tl.program_id(0) + tl.arange(0, BLOCK_M)",
     "offs_m = BLOCK_M * tl.program_id(0) + tl.arange(0, BLOCK_M) + 1"),
])
def test_a_hand_written_lane_is_caught(kind, old, new):
    """Rule 8: a lane line typed by hand (its printed comment dropped: a different line) is refused, the printed
    lane terms (spec.addresses.*_LANES) being the only lines a tl.arange may appear in."""
    source = render_variant(variant(kind))
    line = next(x for x in source.splitlines() if x.strip().startswith(old))
    found = problems(source.replace(line, line[:len(line) - len(line.lstrip())] + new, 1))
    assert any("is not a printed lane term" in p for p in found), found


def test_a_new_lane_by_hand_is_caught():
    """Rule 8 on a lane under a new name (rule 2 does not know it): `tl.arange` outside a printed line."""
    found = problems(edited("merge", "    o_acc = tl.full(", "    offs_x = tl.arange(0, BLOCK_M)\n    o_acc = tl.full("))
    assert any("_merge_states" in p and "tl.arange(0, BLOCK_M)" in p and "printed lane term" in p
               for p in found), found


# ---------------------------------------------------------------- issue 24: the tile loops (rule 9)
@pytest.mark.parametrize("kind, old, new", [
    # the forward stage's key loop two tiles a step (every other key tile skipped)
    ("fwd", "for start_n in range(lo, hi, BLOCK_N):", "for start_n in range(lo, hi, 2 * BLOCK_N):"),
    # decode's split keys one short of its end
    ("decode", "for start_n in range(split_lo, split_hi, BLOCK_N):", "for start_n in range(split_lo, split_hi - 1, BLOCK_N):"),
    # the dK/dV row loop from the stage's second tile
    ("bwd", "for start_m in range(lo, hi, BLOCK_M):", "for start_m in range(lo + BLOCK_M, hi, BLOCK_M):"),
    # softmax's column pass with the row tile's width
    ("softmax", "for start_n in range(0, N, BLOCK_N):", "for start_n in range(0, N, BLOCK_M):"),
    # the index loops: dK/dV's query heads from the second, the merge's splits one short
    ("bwd", "for g in range(0, GROUP):", "for g in range(1, GROUP):"),
    ("merge", "for s in range(S):", "for s in range(S - 1):"),
])
def test_a_hand_edited_loop_header_is_caught(kind, old, new):
    """Rule 9: a tile loop's header edited by hand (its printed comment dropped: a different line) is refused, the
    printed loop terms (spec.addresses.*_LOOPS) being the only loop headers a kernel may have."""
    source = render_variant(variant(kind))
    line = next(x for x in source.splitlines() if x.strip().startswith(old))
    found = problems(source.replace(line, line[:len(line) - len(line.lstrip())] + new, 1))
    assert any("is not a printed loop term" in p and new in p for p in found), found



# --- the tile classes are printed from the spec (issue 24) -----------------------------------------------------
#: codes no kernel uses, patched into spec.masks (the block map's, claim mask_tiles_sound) and spec.mask_mod (the
#: corner classifier's, claim mask_mod_sound) for a render: a kernel that still holds 0/1/2 typed them by hand
SHIFTED_CODES = {(masks, name): code for masks, names, base in
                 (("spec.masks", ("MAP_EMPTY", "MAP_PARTIAL", "MAP_FULL"), 5),
                  ("spec.mask_mod", ("EMPTY", "PARTIAL", "FULL"), 15))
                 for code, name in enumerate(names, base)}
TILE_STATES = {"tile_state", "mm_state"}


def hand_typed_codes(source: str) -> list[str]:
    """The statements of ``source``'s jit functions that compare ``tile_state`` / ``mm_state`` with, or assign
    them, an integer that is not one of ``SHIFTED_CODES`` (the source rendered with those codes patched in)."""
    import ast

    codes = set(SHIFTED_CODES.values())
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not (isinstance(fn, ast.FunctionDef) and hygiene._is_jit(fn)):
            continue
        for node in ast.walk(fn):
            part = node.test if isinstance(node, (ast.If, ast.While)) else node
            if not isinstance(node, (ast.If, ast.While, ast.Assign, ast.Expr, ast.Return)):
                continue
            if not TILE_STATES & hygiene._names(part):
                continue
            ints = {c.value for c in ast.walk(part) if isinstance(c, ast.Constant) and type(c.value) is int}
            if ints - codes:
                found.append(f"{fn.name}:{node.lineno}: {ast.unparse(part)}")
    return found


def tile_state_variants():
    """The forward and backward kernels of a config with the dense mask and a mask_mod (every tile_state site)."""
    return [v for v in BlockConfig(64, 64).variants()
            if v.kind.name in ("fwd", "bwd") and v.mask_mod in (None, "spec.mask_mod:document")]


def test_tile_classes_follow_the_spec(monkeypatch):
    """Shifted codes in the spec change every tile_state / mm_state test of the kernels (none typed by hand)."""
    for (module, name), code in SHIFTED_CODES.items():
        monkeypatch.setattr(f"{module}.{name}", code)
    for v in tile_state_variants():
        source = render_variant(v)
        assert f"tile_state == {SHIFTED_CODES['spec.masks', 'MAP_PARTIAL']}:" in source, v.filename
        assert hand_typed_codes(source) == [], v.filename


@pytest.mark.parametrize("kind, old, new", [
    ("fwd", "if tile_state == {{ map_codes.PARTIAL }}:", "if tile_state == 1:"),
    ("bwd", "tile_state = {{ map_codes.FULL }}", "tile_state = 2"),
    ("bwd", "if mm_state == {{ mm_codes.PARTIAL }}:", "if mm_state == 1:"),
])
def test_a_hand_typed_tile_class_is_caught(monkeypatch, kind, old, new):
    """The mutant: a template that types a tile class by hand keeps it when the spec's code moves."""
    for (module, name), code in SHIFTED_CODES.items():
        monkeypatch.setattr(f"{module}.{name}", code)
    v = next(v for v in tile_state_variants() if v.kind.name == kind and v.mask_mod is not None)
    template = ENV.loader.get_source(ENV, v.kind.template)[0]
    assert old in template, old
    found = hand_typed_codes(render_variant(v, template.replace(old, new, 1)))
    assert any(new.rstrip(":").removeprefix("if ") in p for p in found), found
