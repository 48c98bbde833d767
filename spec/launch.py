"""Launch arguments: one function per kernel, what the runtime passes and the claims quantify over.

A kernel's offsets (``spec.addresses``) are only right for the strides, sizes and grid the launch
passes. So those arguments are computed here, once, by plain Python that runs unchanged on torch
tensors (``generator.runtime`` and the generated launchers call it) and on ``spec.addresses.Strided``
symbolic tensors (claims ``decode_addresses``, ``varlen_addresses``, ``window_clamp``): what the
claims prove about these functions' output is what the runtime passes, with no second copy.

Integers are combined with ``cdiv`` (``triton.cdiv`` on numbers, ``ceiling`` on SymPy sizes; its home is
``spec.integers``, which ``spec.paged`` imports too).
"""

from __future__ import annotations

from typing import NamedTuple

import sympy as sp

from spec import masks, rewrites
from spec.error_bound import FP8_MMA_K
from spec.integers import cdiv, contiguous_strides, next_power_of_2  # cdiv: also spec.launch.cdiv, what the runtime calls


# ----------------------------------------------------------------------------------
# The window rewrite at each call site (claim window_clamp): N_q and N_k read off the tensors.
# ----------------------------------------------------------------------------------
def dense_window(window, q, k):
    """``flash_attention``: q ``(B, Hq, N_q, D)``, k ``(B, Hkv, N_k, D)``."""
    return rewrites.window_clamp(window, q.shape[2], k.shape[2])


def dense_shift(alignment, q, k):
    """``flash_attention``'s alignment shift (both directions' launches: ``mask_arguments``): ``ALIGNMENT_SHIFT``
    at ``N_q = q.shape[2]``, ``N_k = k.shape[2]`` of q ``(B, Hq, N_q, D)``, k ``(B, Hkv, N_k, D)`` (claim
    window_clamp evaluates it on symbolic tensors: 0 top-left, ``N_k - N_q`` bottom-right, the reference's)."""
    return masks.alignment_shift(alignment, q.shape[2], k.shape[2])


def window_arguments(window) -> dict:
    """The window sides as every attention launch passes them, by the kernels' parameter names: a window
    ``(left, right)`` keeps the keys ``-left <= j - (i + shift) <= right`` (claim window_clamp reads the printed
    window kind at these arguments); None: zeros, never read (``HAS_WINDOW`` off). The launchers pass
    ``**window_arguments(...)`` (hygiene rule 5 refuses a side passed by hand)."""
    left, right = window if window is not None else (0, 0)
    return {"window_left": left, "window_right": right}


def key_length_bounds(k) -> tuple:
    """``(lo, hi)`` that every launch clamps ``key_lengths`` to (``generator.runtime.dispatch.lengths_argument``:
    ``key_lengths.clamp(lo, hi)``, on the device, so it holds under torch.compile too): ``[0, N_k]`` of k ``(B, Hkv,
    N_k, D)``, so a valid length passes unchanged and the kernel's ``key_len`` admits exactly the keys ``j < L``
    the reference reads (claim forward_addresses evaluates it on symbolic k)."""
    return 0, k.shape[2]


def varlen_window(window, q, k):
    """``flash_attention_varlen``: q ``(total_q, Hq, D)``, k ``(total_k, Hkv, D)``; a segment has at most
    the totals' rows, so the totals' bound is wide enough for every segment."""
    return rewrites.window_clamp(window, q.shape[0], k.shape[0])


def decode_capacity(k_cache, block_table):
    """The keys a sequence of ``flash_attention_with_kvcache`` may hold: a contiguous cache ``(B_cache, N_cache,
    Hkv, D)`` its ``N_cache``; a paged cache ``(num_pages, PAGE_SIZE, Hkv, D)`` with ``block_table`` ``(B,
    max_pages)`` ``PAGE_SIZE·max_pages`` (the runtime's window clamp, split plan and the contract's key-count
    rules read it; claim window_clamp evaluates it on symbolic caches of both kinds)."""
    return k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)


def decode_window(window, q, k_cache, block_table):
    """``flash_attention_with_kvcache``: q ``(B, N_q, Hq, D)``, at most ``decode_capacity`` keys per sequence."""
    return rewrites.window_clamp(window, q.shape[1], decode_capacity(k_cache, block_table))


# ----------------------------------------------------------------------------------
# The head dims every attention launch passes, read off the tensors as passed.
# ----------------------------------------------------------------------------------
def head_dims(k, v, main=None) -> dict:
    """The head-dim constexprs of a launch: q and k's head dim ``D = k.shape[-1]`` held as a main part
    ``HEAD_DIM = main`` (None: ``D``, unsplit) and a tail ``HEAD_DIM_TAIL = D - main`` (claim head_dim_split: the
    two products are the whole inner product; the runtime picks ``main`` to save padding,
    ``head_dim_split``, decode at ``D_v``), and v's (so out's) head dim
    ``HEAD_DIM_V = v.shape[-1]`` (MLA: ``D_v != D``). The address claims take their lanes' bounds from this output
    (``d < HEAD_DIM``, ``dt < HEAD_DIM + HEAD_DIM_TAIL``, ``dv < HEAD_DIM_V``) and prove they cover the tensors'
    columns and stay inside them."""
    D = k.shape[-1]
    main = D if main is None else main
    return {"HEAD_DIM": main, "HEAD_DIM_TAIL": D - main, "HEAD_DIM_V": v.shape[-1]}


#: the narrowest tile width: ``tl.dot``'s K (and a tile's N) is at least 16
MIN_TILE_WIDTH = 16


def block_d(head_dim: int, fp8: bool = False) -> int:
    """The tile width of a head dim: padded to a power of two (``tl.arange`` needs one) >= 16 (``tl.dot``), >= 32
    for fp8 products (``fp8``: an fp8 dot's K is at least the ``max_num_imprecise_acc`` = 32 it is printed with,
    ``spec.error_bound.FP8_MMA_K``); loads and stores are masked on the head dim, so the padding reads and
    writes nothing."""
    return max(FP8_MMA_K if fp8 else MIN_TILE_WIDTH, next_power_of_2(head_dim))


def head_dim_split(head_dim: int) -> tuple[int, int]:
    """``(HEAD_DIM, HEAD_DIM_TAIL)`` of the training kernels' q/k tiles: a head dim that ``block_d`` would pad by
    more than its last power-of-two part's padding is held as a main part, the largest power of two below it,
    and a tail of the rest, each padded on its own (claim head_dim_split: the two products are the whole inner
    product). 192 = 128 + 64 issues Q·Kᵀ over 192 columns, not 256; 48 = 32 + 16. ``HEAD_DIM_TAIL`` 0 (no split,
    compiled out) where it saves nothing: a power of two, 200 (128 + 72 pads to 256 too), 24 (16 + 8 pads to 32
    too)."""
    main = next_power_of_2(head_dim) // 2
    if main < MIN_TILE_WIDTH or block_d(main) + block_d(head_dim - main) >= block_d(head_dim):
        return head_dim, 0
    return main, head_dim - main


class TileWidths(NamedTuple):
    """A training launch's head dims and tile widths (``tile_widths``), in the constexprs' names."""
    HEAD_DIM: int
    HEAD_DIM_TAIL: int
    HEAD_DIM_V: int
    BLOCK_D: int
    BLOCK_DT: int
    BLOCK_DV: int


def tile_widths(head_dim: int, head_dim_v: int, fp8: bool = False) -> TileWidths:
    """The head dims and tile widths of a training launch (the forward, dense or packed, and the backward): q/k's
    ``head_dim`` split as ``head_dim_split`` (``HEAD_DIM``, ``HEAD_DIM_TAIL``), v's ``HEAD_DIM_V``, and the tiles'
    widths ``BLOCK_D``, ``BLOCK_DT``, ``BLOCK_DV`` (``block_d`` of each; ``fp8``: q/k's products on fp8 operands).
    The runtime launches with these; claims forward_addresses, backward_kernel_addresses and tma_addresses read
    them for every head dim the contract accepts: each width a power of two >= 16 and at least its head dim, a
    tail only when ``HEAD_DIM = BLOCK_D`` (so the lanes ``arange(BLOCK_*)`` reach every column the masks let
    through, and a TMA box of the main part ends where the tail begins)."""
    main, tail = head_dim_split(head_dim)
    return TileWidths(main, tail, head_dim_v, block_d(main, fp8), block_d(tail, fp8), block_d(head_dim_v))


def decode_tile_widths(head_dims: dict, fp8: bool = False) -> dict:
    """The decode's tile widths for the head dims ``decode_launch`` passes (its constexprs ``HEAD_DIM``,
    ``HEAD_DIM_TAIL``, ``HEAD_DIM_V``): ``BLOCK_D``, ``BLOCK_DT`` (q/k's, ``fp8``: products on fp8 operands; a tail
    of 0 still gets a width, compiled out) and ``BLOCK_DV``, each ``block_d``. The decode launcher and its AOT
    compile launch with these; claim decode_addresses evaluates it at every head dim the contract accepts
    (``decode_head_dim_max``) and proves each width a power of two >= 16 and at least its head dim."""
    return {"BLOCK_D": block_d(head_dims["HEAD_DIM"], fp8),
            "BLOCK_DT": block_d(max(head_dims["HEAD_DIM_TAIL"], 1), fp8),
            "BLOCK_DV": block_d(head_dims["HEAD_DIM_V"])}


def _min(a, b):
    """``min`` of numbers, ``Min`` of SymPy sizes."""
    return sp.Min(a, b) if isinstance(a, sp.Basic) or isinstance(b, sp.Basic) else min(a, b)


def decode_v_shares_k_layout(k_cache, v_cache) -> bool:
    """Whether a ``v_cache`` of this layout may be ``k_cache``'s first ``D_v`` columns: k's strides and ``D_v <= D``
    (a property of the call signature: the plan builds the ``V_IS_K`` variant only then)."""
    return tuple(v_cache.stride()) == tuple(k_cache.stride()) and bool(v_cache.shape[-1] <= k_cache.shape[-1])


def decode_v_is_k(k_cache, v_cache) -> bool:
    """``V_IS_K`` of a decode launch: ``v_cache`` IS ``k_cache[..., :D_v]`` (MLA's absorbed layout): k's layout
    (``decode_v_shares_k_layout``) at k's first element (``data_ptr``: the storage offset included), so the kernel
    uses its K tile as the V tile (claim decode_addresses: only then is every V address the K address).
    Decided per call (an address), from the tensors as passed."""
    return bool(v_cache.data_ptr() == k_cache.data_ptr()) and decode_v_shares_k_layout(k_cache, v_cache)


# ----------------------------------------------------------------------------------
# Decode: _decode_fwd's grid and integer arguments; the merge's row views.
# ----------------------------------------------------------------------------------
#: CUDA's limit on a launch grid's axes 1 and 2 (gridDim.y, gridDim.z): the per-head kernels put the heads on
#: axis 1 and the batch on axis 2, decode its KV heads and batch (``spec.addresses.GRID_GROUPS``), so a call
#: with more cannot launch (the contract refuses it: ``generator.runtime.contract``, claim launch_grid)
GRID_AXIS_MAX = 65535
#: CUDA's limit on a grid's axis 0 (gridDim.x): the tiles (decode: row tiles x splits)
GRID_AXIS0_MAX = 2**31 - 1


def decode_launch(q, k_cache, v_cache, out, lse, cache_seqlens, block_table, block_m, sinks=None,
                  cache_leftpad=None, cache_batch_idx=None, split_keys=0, descales=None, alibi_slopes=None):
    """``(grid, ints, constexprs)`` of one ``_decode_fwd`` launch: ``ints`` the kernel's integer
    parameters by name (every stride as the tensor has it, the sizes), ``grid`` = (row tiles x splits,
    Hkv, B) with the row tiles fastest (``spec.addresses.GRID_DECODE``; ``ints["ROW_TILES"]`` the row tiles per
    split), ``constexprs`` the page size, rows per program and the head dims (``head_dims``, q/k's split at
    ``D_v`` when ``D > D_v``: MLA's rope tail).

    q ``(B, N_q, Hq, D)``; the cache ``(B, N_cache, Hkv, D)`` or, with ``block_table`` ``(B,
    max_pages)``, ``(num_pages, PAGE_SIZE, Hkv, D)``; ``out`` ``(S, B, N_q, Hq, D)``, ``lse`` ``(S, B,
    N_q, Hq)`` (S splits: ``out``'s first dim); ``cache_seqlens`` ``(B,)``; ``sinks``
    ``(Hq,)`` or None (then stride 0: never read); ``cache_leftpad``, ``cache_batch_idx`` ``(B,)`` or
    None (then stride 0 and ``HAS_LEFTPAD`` / ``HAS_BATCH_IDX`` off: never read); ``split_keys > 0``:
    fixed-size splits (``BATCH_INVARIANT``); ``descales`` an FP8 cache's ``(q_descale, k_descale, v_descale)``,
    each ``(B, Hkv)``, or None (``descale_strides``); ``alibi_slopes`` ``(Hq,)`` or ``(B, Hq)`` at any strides
    (``slope_strides``), or None (then stride 0: never read)."""
    B, N_Q, HQ, _ = q.shape
    H_KV = k_cache.shape[2]
    group = HQ // H_KV
    num_splits = out.shape[0]
    paged = block_table is not None
    table = block_table if paged else cache_seqlens[None]  # a placeholder when not paged: never read
    ints = dict(zip(("stride_qb", "stride_qn", "stride_qh", "stride_qd"), q.stride()))
    ints.update(zip(("stride_kb", "stride_kn", "stride_kh", "stride_kd"), k_cache.stride()))
    ints.update(zip(("stride_vb", "stride_vn", "stride_vh", "stride_vd"), v_cache.stride()))
    ints.update(zip(("stride_os", "stride_ob", "stride_on", "stride_oh", "stride_od"), out.stride()))
    ints.update(zip(("stride_ls", "stride_lb", "stride_ln", "stride_lh"), lse.stride()))
    ints.update(stride_bt_b=table.stride(0), stride_bt_p=table.stride(1), stride_cs=cache_seqlens.stride(0),
                stride_sink=sinks.stride(0) if sinks is not None else 0,
                stride_lp=cache_leftpad.stride(0) if cache_leftpad is not None else 0,
                stride_bi=cache_batch_idx.stride(0) if cache_batch_idx is not None else 0,
                H_KV=H_KV, GROUP=group, N_Q=N_Q, num_splits=num_splits, split_keys=split_keys,
                ROW_TILES=cdiv(group * N_Q, block_m))
    ints.update(descale_strides(descales))
    ints.update(zip(("stride_sb", "stride_sh"), slope_strides(alibi_slopes) if alibi_slopes is not None else (0, 0)))
    # row tiles first (CUDA launches axis 0 fastest): the tiles of one (split, KV head) run side by side and
    # read the same K/V rows, so the second can find them in L2 (MLA's 128 heads: two tiles of 64 rows); then
    # the splits, the KV heads (axis 1), the batch (axis 2): the order (row tile, split, b·Hkv + kvh) had
    grid = (ints["ROW_TILES"] * num_splits, H_KV, B)
    constexprs = dict(BLOCK_M=block_m, PAGED=paged, PAGE_SIZE=k_cache.shape[1] if paged else 1,
                      HAS_LEFTPAD=cache_leftpad is not None, HAS_BATCH_IDX=cache_batch_idx is not None,
                      BATCH_INVARIANT=split_keys > 0,
                      **head_dims(k_cache, v_cache, _min(q.shape[3], v_cache.shape[3])))
    return grid, ints, constexprs


def decode_partial_rows(o_part, lse_part):
    """The splits' partials ``(S, B, N_q, Hq[, D])`` as merge rows: ``(S, R, D)``, ``(S, R)``, row
    ``r = (b·N_q + t)·Hq + h`` (the fold merges row r over the splits)."""
    S, D = o_part.shape[0], o_part.shape[-1]
    return o_part.view(S, -1, D), lse_part.view(S, -1)


def decode_unsplit_outputs(out, lse):
    """The op's ``out`` ``(B, N_q, Hq, D_v)`` and ``lse`` ``(B, Hq, N_q)`` as one unsplit launch writes them in
    place: ``decode_launch``'s ``(S=1, B, N_q, Hq[, D_v])`` views, ``lse`` transposed (claim decode_addresses:
    the view's element ``[0, b, t, h]`` is ``lse[b, h, t]``)."""
    return out[None], lse.transpose(1, 2)[None]


def decode_merged_out(out):
    """The output ``(B, N_q, Hq, D)`` (contiguous) as the merge's ``(R, D)`` rows."""
    return out.view(-1, out.shape[-1])


def decode_merged_lse(merged_lse, B, N_q, Hq):
    """The merged rows' lse ``(R,)`` as the op's ``lse`` layout ``(B, Hq, N_q)``."""
    return merged_lse.view(B, N_q, Hq).transpose(1, 2)


# ----------------------------------------------------------------------------------
# Varlen: the forward's grid and the tensors its segment block reads.
# ----------------------------------------------------------------------------------
def varlen_cu_seqlens(cu_seqlens_q, cu_seqlens_k):
    """The offset vectors as the kernels read them: contiguous (element b at offset b)."""
    return cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()


def packed_strides(t):
    """``(batch, head, row, dim)`` strides of a packed ``(total, H, D)`` tensor, as the attention
    kernels take them: batch stride 0, since an ``IS_VARLEN`` program offsets its pointers by its
    segment's first row (``cu_seqlens[b]``) instead."""
    return 0, t.stride(1), t.stride(0), t.stride(2)


def head_grid(tiles, heads, batch):
    """A per-head kernel's grid ``(tiles, heads, batch)``: the tiles on axis 0 (launched fastest: a head's tiles
    side by side), the head on axis 1, the batch entry on axis 2 (spec.addresses.GRID_HEAD / GRID_KV_HEAD read
    them back; claim launch_grid)."""
    return tiles, heads, batch


def varlen_grid(max_seqlen, block, cu_seqlens, heads):
    """``(cdiv(max_seqlen, block), heads, B)``: one program per tile of ``block`` rows (queries for the
    forward and dQ, keys for dK/dV), per head and per segment; ``B = len(cu_seqlens) - 1``."""
    return head_grid(cdiv(max_seqlen, block), heads, cu_seqlens.shape[0] - 1)


# ----------------------------------------------------------------------------------
# The dense forward (_attn_fwd), dense or packed: every stride and size it takes, and its grid.
# ----------------------------------------------------------------------------------
def attention_strides(t):
    """``(batch, head, row, dim)`` strides of an attention operand: a ``(B, H, N, D)`` tensor's own, a
    packed ``(total, H, D)`` one's by ``packed_strides``."""
    return tuple(t.stride()) if t.dim() == 4 else packed_strides(t)


def lse_strides(lse):
    """``(batch, head, row)`` strides of an lse: ``(B, H, N)`` as it is, a packed ``(H, total)`` with batch
    stride 0 (the varlen block moves the pointer to the segment's first row)."""
    return tuple(lse.stride()) if lse.dim() == 3 else (0, lse.stride(0), lse.stride(1))


def slope_strides(slopes):
    """``(batch, head)`` strides of ALiBi slopes ``(Hq,)`` (batch stride 0) or ``(B, Hq)``."""
    return (0, slopes.stride(0)) if slopes.dim() == 1 else tuple(slopes.stride())


#: the forward's stride parameters, per tensor, in its signature's order
FORWARD_STRIDE_NAMES = {
    "q": ("stride_qb", "stride_qh", "stride_qm", "stride_qd"), "k": ("stride_kb", "stride_kh", "stride_kn", "stride_kd"),
    "v": ("stride_vb", "stride_vh", "stride_vn", "stride_vd"), "out": ("stride_ob", "stride_oh", "stride_om", "stride_od"),
    "lse": ("stride_lb", "stride_lh", "stride_lm"), "mask": ("stride_mb", "stride_mh", "stride_mm", "stride_mn"),
    "block_map": ("stride_map_b", "stride_map_h", "stride_map_m", "stride_map_n"), "slopes": ("stride_sb", "stride_sh"),
    "key_lengths": ("stride_kl",), "sinks": ("stride_sink",)}


def philox_words(philox):
    """Dropout's ``(seed, counter offset)`` int64 pair as the kernels read it: contiguous (word w at offset w)."""
    return philox.contiguous()


def dropout_mask_shape(q, k) -> tuple:
    """The keep mask the host allocates for ``return_dropout_mask`` (``_dropout_keep`` writes it, claim
    dropout_mask_same reads this shape): ``(B, Hq, N_q, N_k)`` for q ``(B, Hq, N_q, D)``, k ``(B, Hkv, N_k, D)``
    — the query heads, one draw per (b, query head, row, key); a packed batch (q ``(total_q, Hq, D)``, k
    ``(total_k, Hkv, D)``) one entry ``(1, Hq, total_q, total_k)``, its global rows and keys."""
    if q.dim() == 3:
        return (1, q.shape[1], q.shape[0], k.shape[0])
    return (q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def dropout_mask_launch(keep, block_m):
    """``(grid, ints)`` of ``_dropout_keep`` writing ``keep`` ``(B, H, N_Q, N_K)`` (a packed batch: ``(1, H,
    total_q, total_k)``): its strides, sizes and grid ``(cdiv(N_Q, block_m), H, B)``."""
    B, H, N_Q, N_K = keep.shape
    ints = dict(zip(("stride_keep_b", "stride_keep_h", "stride_keep_m", "stride_keep_n"), keep.stride()))
    ints.update(H=H, N_Q=N_Q, N_K=N_K)
    return head_grid(cdiv(N_Q, block_m), H, B), ints


#: FP8's descales (float32 ``(B, Hkv)``, one stride pair each) in the forward's and the decode's signatures
DESCALE_STRIDE_NAMES = {"q_descale": ("stride_qdesc_b", "stride_qdesc_h"),
                        "k_descale": ("stride_kdesc_b", "stride_kdesc_h"),
                        "v_descale": ("stride_vdesc_b", "stride_vdesc_h")}


def descale_strides(descales) -> dict:
    """The strides of FP8's ``(q_descale, k_descale, v_descale)``, each ``(B, Hkv)`` as passed (any strides),
    by the kernels' parameter names (``forward_launch``, ``decode_launch``); ``None`` (no FP8: ``HAS_DESCALE``
    off, never read): zeros."""
    if descales is None:
        return {name: 0 for pair in DESCALE_STRIDE_NAMES.values() for name in pair}
    ints = {}
    for names, t in zip(DESCALE_STRIDE_NAMES.values(), descales):
        ints.update(zip(names, t.stride()))
    return ints


def mask_mod_strides(mask_mod_args) -> dict:
    """A mask_mod's packed int32 parameters ``(B, P)``: the row stride both directions' kernels take
    (``stride_mmb``; none without a mask_mod)."""
    return {} if mask_mod_args is None else {"stride_mmb": mask_mod_args.stride(0)}


def row_mask_strides(key_lengths, mask, block_map, slopes, mask_mod_args) -> dict:
    """The strides of what masks and biases a row, as both directions' kernels take them (the forward's
    names): the dense mask's, its block map's, the ALiBi slopes' (``slope_strides``), ``key_lengths``' and
    the mask_mod parameters' (``mask_mod_strides``)."""
    ints = dict(zip(FORWARD_STRIDE_NAMES["mask"], mask.stride()))
    ints.update(zip(FORWARD_STRIDE_NAMES["block_map"], block_map.stride()))
    ints.update(zip(FORWARD_STRIDE_NAMES["slopes"], slope_strides(slopes)))
    ints["stride_kl"] = key_lengths.stride(0)
    ints.update(mask_mod_strides(mask_mod_args))
    return ints


def block_map_tiles(module) -> tuple:
    """The tiles ``(rows, keys)`` a generated ``module``'s kernels read the dense mask's block map at, by its
    constants' names: the backward's ``MAP_BLOCK`` (a multiple of both its loops' tiles:
    ``generator.variants.bwd_map_block``), else the forward's ``(BLOCK_M, BLOCK_N)``. Map entry ``(r, c)``
    classifies the rows ``[r·rows, (r+1)·rows)`` and keys ``[c·keys, (c+1)·keys)`` (``block_map_shape``); the
    runtime builds the map at these tiles, and claims forward_addresses and backward_kernel_addresses evaluate
    this function on the kernels' symbolic tiles: the map tile a kernel's tile indexes is that tile (forward) or
    holds it (backward)."""
    return tuple(getattr(module, "MAP_BLOCK", (module.BLOCK_M, module.BLOCK_N)))


def block_map_shape(n_q, n_k, tiles) -> tuple:
    """The block map's tile counts ``(cdiv(n_q, rows), cdiv(n_k, keys))`` at ``tiles`` (``block_map_tiles``) of
    a mask over ``n_q`` rows and ``n_k`` keys: the last row and key tiles may be partial (their padding is no
    element: ``spec.masks.map_state`` classifies the valid ones)."""
    rows, keys = tiles
    return cdiv(n_q, rows), cdiv(n_k, keys)


def forward_outputs(q, v) -> dict:
    """The dense forward's fresh outputs, ``{name: (shape, strides)}``: ``out`` ``(B, Hq, N_Q, D_v)`` (v's head dim,
    not q's D) and ``lse`` ``(B, Hq, N_Q)``, both contiguous, of q ``(B, Hq, N_Q, D)``, v ``(B, Hkv, N_K, D_v)``.
    ``forward_plan`` reads ``forward_launch``'s strides off meta tensors made so and ``launch_forward`` allocates
    the real ones (``torch.empty_strided``): one layout (claim forward_addresses: every element the kernel's
    stores admit lies inside them)."""
    shapes = {"out": (*q.shape[:3], v.shape[3]), "lse": tuple(q.shape[:3])}
    return {name: (shape, contiguous_strides(shape)) for name, shape in shapes.items()}


def forward_launch(q, k, v, out, lse, key_lengths, mask, block_map, slopes, sinks, block_m, mask_mod_args=None,
                   cu_seqlens_q=None, max_seqlen_q=None, descales=None, head_dim=None):
    """``(grid, ints)`` of one ``_attn_fwd`` launch: ``ints`` its integer parameters by name (every
    stride as the tensor has it, the heads, ``GROUP``, ``N_Q``, ``N_K``) and its head dims (``head_dims``:
    ``head_dim`` the main part of q/k's split, None unsplit; ``HEAD_DIM_V`` v's).

    Dense: q ``(B, Hq, N_Q, D)``, k/v ``(B, Hkv, N_K, D)``, out like q, lse ``(B, Hq, N_Q)``, grid
    ``(cdiv(N_Q, block_m), Hq, B)``. Packed (``cu_seqlens_q`` given): q ``(total_q, Hq, D)``, k/v
    ``(total_k, Hkv, D)``, lse ``(Hq, total_q)``, batch strides 0, ``N_Q``/``N_K`` the totals and
    ``varlen_grid``'s grid. ``key_lengths`` ``(B,)``, ``mask`` ``(B, Hq, N_Q, N_K)`` and ``block_map``
    ``(B, Hq, cdiv(N_Q, BLOCK_M), cdiv(N_K, BLOCK_N))`` (broadcast: stride 0), ``slopes`` ``(Hq,)`` or
    ``(B, Hq)``, ``sinks`` ``(Hq,)``, ``mask_mod_args`` ``(B, P)``: the tensors as passed (a one-element
    placeholder where a flag compiles the read out); ``descales`` FP8's ``(q_descale, k_descale, v_descale)``,
    each ``(B, Hkv)`` (B the segments when packed), or None (``descale_strides``)."""
    packed = cu_seqlens_q is not None
    ints = {}
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        ints.update(zip(FORWARD_STRIDE_NAMES[name], attention_strides(t)))
    ints.update(zip(FORWARD_STRIDE_NAMES["lse"], lse_strides(lse)))
    ints.update(row_mask_strides(key_lengths, mask, block_map, slopes, mask_mod_args), stride_sink=sinks.stride(0))
    ints.update(descale_strides(descales))
    H, H_KV = q.shape[1], k.shape[1]
    n_q, n_k = (q.shape[0], k.shape[0]) if packed else (q.shape[2], k.shape[2])
    ints.update(H=H, GROUP=H // H_KV, N_Q=n_q, N_K=n_k, **head_dims(k, v, head_dim))
    grid = varlen_grid(max_seqlen_q, block_m, cu_seqlens_q, H) if packed else head_grid(cdiv(n_q, block_m), H,
                                                                                        q.shape[0])
    return grid, ints


def forward_tma_operands(q, k, v, out, block_m, block_n, block_d, block_dv, block_dt=0):
    """The forward's TMA operands, in its signature's order (Q, K, V, Out, QTail, KTail): ``{name: (tensor,
    rows, width)}`` of its boxes, each tensor ``(B, H, N, ·)``: q and out ``BLOCK_M`` rows, k and v ``BLOCK_N``;
    q and k ``BLOCK_D`` wide, v and out ``BLOCK_DV``, a split head dim's tails (``block_dt > 0``: claim
    head_dim_split) ``BLOCK_DT`` wide, read from column ``HEAD_DIM`` on (claim tma_addresses)."""
    ops = {"q": (q, block_m, block_d), "k": (k, block_n, block_d), "v": (v, block_n, block_dv),
           "out": (out, block_m, block_dv)}
    if block_dt:
        ops.update(q_tail=(q, block_m, block_dt), k_tail=(k, block_n, block_dt))
    return ops


#: what a TMA load gives outside the tensor (Triton's TensorDescriptor ``padding``: oobFill NONE, zeros): the
#: padding the pointer path's masked loads read (``other=0``); hardware hypothesis tma_out_of_bounds
TMA_PADDING = "zero"


def tma_descriptor(t, rows, width):
    """``(shape, strides, block, padding)`` of the TMA descriptor of ``t`` ``(B, H, N, D)``: its own shape and
    strides (TMA clips per dimension: a box never reaches another (b, h)), a ``[1, 1, rows, width]`` box, and
    zero fill (``TMA_PADDING``) — ``TensorDescriptor(t, *tma_descriptor(t, rows, width))``."""
    return list(t.shape), list(t.stride()), [1, 1, rows, width], TMA_PADDING


# ----------------------------------------------------------------------------------
# Softmax and the merge kernels: every stride of their row-major tensors, and their grids.
# ----------------------------------------------------------------------------------
def softmax_launch(x, y, block_m, block_n):
    """``(grid, ints, one_pass)`` of softmax on x, y ``(R, N)`` in row tiles of ``block_m`` rows and column tiles of
    ``block_n``: ``one_pass`` picks the kernel, ``_softmax_one_pass`` (x read once) when the row fits one column
    tile, ``N <= block_n`` (its lanes ``arange(BLOCK_N)`` are the only columns it reads), else ``_softmax_two_pass``
    (its loops step through every tile). A bool on numbers, a SymPy relation on symbolic sizes: claim
    rows_addresses proves that the kernel it picks reads every column ``c < N`` of a row exactly once."""
    R, N = x.shape
    ints = dict(zip(("stride_xr", "stride_xc"), x.stride()))
    ints.update(zip(("stride_yr", "stride_yc"), y.stride()))
    ints.update(R=R, N=N)
    return (cdiv(R, block_m),), ints, N <= block_n


def merge_block_d(head_dim: int) -> int:
    """``BLOCK_D`` of ``_merge_state`` / ``_merge_states``: the head dim padded to a power of two (``tl.arange`` needs
    one; loads and stores are masked on ``d < D``, so the padding reads and writes nothing). Both merge launchers
    and their AOT compile pass it; claim rows_addresses checks it at every head dim the contract accepts
    (``merge_head_dim_max``): at least ``D``, so the lanes ``arange(BLOCK_D)`` reach every column."""
    return next_power_of_2(head_dim)


def merge_state_launch(o_a, lse_a, o_b, lse_b, o, lse, block_m):
    """``(grid, ints)`` of ``_merge_state``: o_a, o_b, o ``(R, D)``, lse_a, lse_b, lse ``(R,)``."""
    R, D = o_a.shape
    ints = dict(zip(("stride_oa", "stride_oad"), o_a.stride()))
    ints.update(zip(("stride_ob", "stride_obd"), o_b.stride()))
    ints.update(zip(("stride_o", "stride_od"), o.stride()))
    ints.update(stride_la=lse_a.stride(0), stride_lb=lse_b.stride(0), stride_l=lse.stride(0), R=R, D=D)
    return (cdiv(R, block_m),), ints


def merge_states_launch(o_s, lse_s, o, lse, sinks, block_m):
    """``(grid, ints)`` of ``_merge_states``: o_s ``(S, R, D)``, lse_s ``(S, R)``, o ``(R, D)``, lse
    ``(R,)``, sinks ``(H,)`` (row r's sink is ``sinks[r % H]``) or None (H = 1, never read)."""
    S, R, D = o_s.shape
    ints = dict(zip(("stride_os", "stride_or", "stride_osd"), o_s.stride()))
    ints.update(zip(("stride_ls", "stride_lr"), lse_s.stride()))
    ints.update(zip(("stride_o", "stride_od"), o.stride()))
    ints.update(stride_l=lse.stride(0), stride_sink=sinks.stride(0) if sinks is not None else 0,
                H=sinks.shape[0] if sinks is not None else 1, S=S, R=R, D=D)
    return (cdiv(R, block_m),), ints


# ----------------------------------------------------------------------------------
# The KV-cache append (_append_rows): every stride and size, and the grid.
# ----------------------------------------------------------------------------------
def append_launch(x, dst, cache_seqlens, table, batch_idx, cos, sin, block_t):
    """``(grid, ints)`` of ``_append_rows``: x ``(B, N_new, H, D)``, dst the cache ``(B_cache, N_cache, H, D)``,
    a paged cache ``(num_pages, PAGE_SIZE, H, D)`` or a tensor like x; ``cache_seqlens`` ``(B,)``; ``table``
    the block table ``(B, max_pages)``, ``batch_idx`` ``cache_batch_idx`` ``(B,)`` (placeholders where a flag
    compiles the read out: their strides are passed, never used), ``cos``/``sin`` the rotary tables
    ``(seqlen_ro, rotary_dim / 2)`` or None (no rotary: strides 0): ``SEQLEN_RO`` their rows
    (spec.addresses.APPEND_ROW_OK) and the constexpr ``ROTARY_HALF`` their columns (1 without); ``N_NEW`` and the
    constexpr ``HEAD_DIM`` x's tokens and columns (the lanes' masks t_ok, d_ok: spec.addresses.APPEND_T_OK,
    APPEND_D_OK). Grid
    ``(cdiv(N_new, block_t), H, B)`` (spec.addresses.GRID_APPEND)."""
    B, N_NEW, H, _ = x.shape
    ints = dict(zip(("stride_xb", "stride_xn", "stride_xh", "stride_xd"), x.stride()))
    ints.update(zip(("stride_db", "stride_dn", "stride_dh", "stride_dd"), dst.stride()))
    ints.update(stride_bt_b=table.stride(0), stride_bt_p=table.stride(-1), stride_cs=cache_seqlens.stride(0),
                stride_bi=batch_idx.stride(0), N_NEW=N_NEW, HEAD_DIM=x.shape[3])
    if cos is None:
        ints.update(stride_cos_n=0, stride_cos_d=0, stride_sin_n=0, stride_sin_d=0, SEQLEN_RO=0, ROTARY_HALF=1)
    else:
        ints.update(stride_cos_n=cos.stride(0), stride_cos_d=cos.stride(-1), stride_sin_n=sin.stride(0),
                    stride_sin_d=sin.stride(-1), SEQLEN_RO=cos.shape[0], ROTARY_HALF=cos.shape[1])
    return head_grid(cdiv(N_NEW, block_t), H, B), ints


# ----------------------------------------------------------------------------------
# The backward's preprocess (_attn_bwd_preprocess): its own row tensors, every stride, the grid.
# ----------------------------------------------------------------------------------
def backward_row_tensors(lse, sinks: bool):
    """The backward's per-row fp32 tensors in ``lse``'s shape, contiguous (``new_empty``): Δ, lse2 and,
    with sinks, each row's part of dL/dsink (else None). The preprocess writes them with Δ's strides."""
    return lse.new_empty(lse.shape), lse.new_empty(lse.shape), lse.new_empty(lse.shape) if sinks else None


def preprocess_launch(out, do, grad_lse, lse, delta, sinks, block_m):
    """``(grid, ints)`` of ``_attn_bwd_preprocess``: out, do ``(B, Hq, N_Q, D)`` or packed ``(total_q, Hq,
    D)``; grad_lse, lse and delta ``(B, Hq, N_Q)`` or packed ``(Hq, total_q)`` (Δ, lse2, dsink share Δ's
    layout: ``backward_row_tensors``); ``sinks`` ``(Hq,)`` (a placeholder when off). A packed batch runs as
    one batch: grid ``(cdiv(total_q, block_m), Hq, 1)``, else ``(cdiv(N_Q, block_m), Hq, B)``. ``HEAD_DIM``: the
    width Δ = rowsum(dO ∘ O) runs over, out's head dim (v's D_v)."""
    packed = out.dim() == 3
    ints = dict(zip(("stride_ob", "stride_oh", "stride_om", "stride_od"), attention_strides(out)))
    ints.update(zip(("stride_dob", "stride_doh", "stride_dom", "stride_dod"), attention_strides(do)))
    ints.update(zip(("stride_lb", "stride_lh", "stride_lm"), lse_strides(grad_lse)))
    ints.update(zip(("stride_slb", "stride_slh", "stride_slm"), lse_strides(lse)))
    ints.update(zip(("stride_rb", "stride_rh", "stride_rm"), lse_strides(delta)))
    H = out.shape[1]
    N_Q = out.shape[0] if packed else out.shape[2]
    ints.update(stride_sink=sinks.stride(0), H=H, N_Q=N_Q, HEAD_DIM=out.shape[-1])
    return head_grid(cdiv(N_Q, block_m), H, 1 if packed else out.shape[0]), ints


# ----------------------------------------------------------------------------------
# The backward's dK/dV and dQ kernels (_attn_bwd_dkdv, _attn_bwd_dq), dense or packed: every stride and
# size they take, and their grids.
# ----------------------------------------------------------------------------------
#: the backward kernels' stride parameters, per tensor, in their signatures' order (``rows``: Δ and lse2,
#: one layout: ``backward_row_tensors``)
BACKWARD_STRIDE_NAMES = {
    "q": FORWARD_STRIDE_NAMES["q"], "k": FORWARD_STRIDE_NAMES["k"], "v": FORWARD_STRIDE_NAMES["v"],
    "do": ("stride_dob", "stride_doh", "stride_dom", "stride_dod"),
    "dq": ("stride_dqb", "stride_dqh", "stride_dqm", "stride_dqd"),
    "dk": ("stride_dkb", "stride_dkh", "stride_dkn", "stride_dkd"),
    "dv": ("stride_dvb", "stride_dvh", "stride_dvn", "stride_dvd"),
    "rows": ("stride_rb", "stride_rh", "stride_rm")}


def _backward_ints(q, k, v, do, delta, key_lengths, mask, block_map, slopes, mask_mod_args, head_dim=None):
    """The integers both backward kernels take: q, k, v, grad_out and Δ/lse2 strides (``attention_strides``,
    ``lse_strides``), the dense mask's, the block map's, the slopes' and key_lengths' strides, ``GROUP``,
    ``N_Q``, ``N_K`` (a packed batch: the totals), and the head dims (``head_dims``, ``head_dim`` the main part of
    q/k's split: None unsplit)."""
    ints = {}
    for name, t in (("q", q), ("k", k), ("v", v), ("do", do)):
        ints.update(zip(BACKWARD_STRIDE_NAMES[name], attention_strides(t)))
    ints.update(zip(BACKWARD_STRIDE_NAMES["rows"], lse_strides(delta)))
    ints.update(row_mask_strides(key_lengths, mask, block_map, slopes, mask_mod_args))
    packed = q.dim() == 3
    n_q, n_k = (q.shape[0], k.shape[0]) if packed else (q.shape[2], k.shape[2])
    ints.update(GROUP=q.shape[1] // k.shape[1], N_Q=n_q, N_K=n_k, **head_dims(k, v, head_dim))
    return ints


def dkdv_launch(q, k, v, do, dk, dv, delta, key_lengths, mask, block_map, slopes, block_n, mask_mod_args=None,
                cu_seqlens_q=None, *, max_seqlen_q=None, max_seqlen_k=None, head_dim=None):
    """``(grid, ints)`` of one ``_attn_bwd_dkdv`` launch: every stride as the tensor has it, ``H_KV``,
    ``GROUP``, ``N_Q``, ``N_K``. Dense: q, do ``(B, Hq, N_Q, D / D_v)``, k, dk ``(B, Hkv, N_K, D)``, v, dv ``(B,
    Hkv, N_K, D_v)``, delta ``(B, Hq, N_Q)`` (lse2 shares its layout), grid ``(cdiv(N_K, block_n), Hkv, B)``.
    Packed (``cu_seqlens_q`` given): ``(total, H, D)`` tensors, delta ``(Hq, total_q)``, batch strides 0 and
    ``varlen_grid``'s grid over the keys (``max_seqlen_k``: the launcher passes both hints by name, the same
    ``max_seqlen_q=, max_seqlen_k=`` as ``dq_launch``'s, and each picks its own: claim varlen_addresses). ``key_lengths`` ``(B,)``, ``mask`` ``(B, Hq, N_Q,
    N_K)``, ``block_map`` ``(B, Hq, cdiv(N_Q, MAP_BLOCK_M), cdiv(N_K, MAP_BLOCK_N))``, ``slopes`` ``(Hq,)`` or
    ``(B, Hq)``, ``mask_mod_args`` ``(B, P)``: as passed (one-element placeholders where a flag compiles the
    read out)."""
    ints = _backward_ints(q, k, v, do, delta, key_lengths, mask, block_map, slopes, mask_mod_args, head_dim)
    ints.update(zip(BACKWARD_STRIDE_NAMES["dk"], attention_strides(dk)))
    ints.update(zip(BACKWARD_STRIDE_NAMES["dv"], attention_strides(dv)))
    H_KV = k.shape[1]
    ints["H_KV"] = H_KV
    if cu_seqlens_q is not None:
        return varlen_grid(max_seqlen_k, block_n, cu_seqlens_q, H_KV), ints
    return head_grid(cdiv(ints["N_K"], block_n), H_KV, q.shape[0]), ints


def dq_launch(q, k, v, do, dq, delta, key_lengths, mask, block_map, slopes, block_m, mask_mod_args=None,
              cu_seqlens_q=None, *, max_seqlen_q=None, max_seqlen_k=None, head_dim=None):
    """``(grid, ints)`` of one ``_attn_bwd_dq`` launch: as ``dkdv_launch`` with dq ``(B, Hq, N_Q, D)`` (packed
    ``(total_q, Hq, D)``) for dk, dv, ``H`` for ``H_KV``; grid ``(cdiv(N_Q, block_m), Hq, B)``, packed
    ``varlen_grid``'s over the queries (``max_seqlen_q``; ``max_seqlen_k`` taken, not read)."""
    ints = _backward_ints(q, k, v, do, delta, key_lengths, mask, block_map, slopes, mask_mod_args, head_dim)
    ints.update(zip(BACKWARD_STRIDE_NAMES["dq"], attention_strides(dq)))
    H = q.shape[1]
    ints["H"] = H
    if cu_seqlens_q is not None:
        return varlen_grid(max_seqlen_q, block_m, cu_seqlens_q, H), ints
    return head_grid(cdiv(ints["N_Q"], block_m), H, q.shape[0]), ints


def score_grad_launch(score_f, grid):
    """``(score_grad, ints)`` of a dQ launch of ``grid`` with a user score_mod: its parameter-gradient buffer,
    one fp32 row of ``len(SF)`` entries per program (``grid[0]·grid[1]·grid[2]`` rows, zeros, contiguous:
    program ``(pid_m, h, b)`` owns row ``(b·grid[1] + h)·grid[0] + pid_m``, so no atomics, and the rows are summed in a fixed
    order: bitwise repeatable), and its row stride (claim backward_kernel_addresses). ``score_f``: the packed
    float parameters ``SF`` (fp32, 1-D)."""
    score_grad = score_f.new_zeros((grid[0] * grid[1] * grid[2], score_f.numel()))
    return score_grad, {"stride_sgp": score_grad.stride(0)}
