"""What gets generated: one frozen, self-validating dataclass per emitted kernel file.

A *block config* (``BlockConfig``: ``B_r``, ``B_c``, warps, stages, mask kinds) is what one
``python -m generator`` invocation emits; it expands into one ``Variant`` per kernel kind
(``KINDS``: the forward attention kernel and seed 000's softmax; the backward issue adds its
kinds here). File names carry the spec parameters, FlashInfer style:
``attention_fwd_br64_bc64.py``, ``attention_fwd_causal_window_br64_bc64.py`` when only some
mask kinds are compiled in, ``softmax_br64_bc64.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: block sizes the templates support (tl.arange needs powers of two; 16 is tl.dot's minimum)
ALLOWED_BLOCKS = (16, 32, 64, 128, 256)
ALLOWED_WARPS = (1, 2, 4, 8, 16)
ALLOWED_STAGES = (1, 2, 3, 4, 5)

#: mask kinds a forward kernel can compile in: the structured kinds of spec.masks + dense
MASKS = ("causal", "window", "lengths", "dense")


@dataclass(frozen=True)
class KernelKind:
    """One kind of emitted kernel file."""

    name: str  # "fwd", "softmax"
    template: str  # templates/<template>
    prefix: str  # file name prefix
    uses_masks: bool  # file name carries the mask kinds when not all of them
    takes_mask_mod: bool = False  # emitted once more per mask_mod of the config (attention kernels)
    takes_score_mod: bool = False  # emitted once more per user score_mod of the config


#: every kind a block config emits, in emission order (the backward adds entries here)
KINDS: dict[str, KernelKind] = {
    "fwd": KernelKind("fwd", "attention_fwd.py.jinja", "attention_fwd", True, True, True),
    # softmax ignores masks, but its file is named by the config's mask set too: two configs of one
    # block (keyed by block and mask set) must never write the same file
    "softmax": KernelKind("softmax", "softmax.py.jinja", "softmax", True),
    "bwd": KernelKind("bwd", "attention_bwd.py.jinja", "attention_bwd", True, True, True),
    "merge": KernelKind("merge", "merge_state.py.jinja", "merge_state", True),
    "decode": KernelKind("decode", "attention_decode.py.jinja", "attention_decode", True, False, True),
}


def _check(name: str, value: int, allowed) -> None:
    if value not in allowed:
        allowed_s = ", ".join(map(str, allowed))
        raise ValueError(f"{name} must be one of {allowed_s} (got {value})")


def default_num_warps(block_m: int, block_n: int) -> int:
    """4 warps up to a 64x64 tile (the tutorial's choice), 8 above."""
    return 4 if block_m * block_n <= 64 * 64 else 8


def default_num_stages(block_m: int, block_n: int) -> int:
    """Software-pipeline depth of the K/V loads: 3 for small key tiles, 2 for large ones
    (each stage holds a B_c x D tile of K and V in shared memory)."""
    return 3 if block_n <= 64 else 2


def default_fwd_settings(block_m: int, block_n: int) -> dict:
    """``{arch: {(padded q/k width, padded v width): {"num_warps", "num_stages"}}}`` of the forward.

    sm_80: FWD_SM80 where it lists the block, else default_num_warps / default_num_stages, the
    tutorial's pointer-path choices; the pointer path takes them on every GPU
    (``launch.memory_path_arch``: on sm_90 it is the fallback). sm_90: FWD_SM90 where it lists the
    block, chosen from the static report's loop columns on the TMA path (the sm_90 default); else
    the sm_80 choice.

    One rule keys every forward launch (dense, varlen, mask_mod, GQA alike): the padded widths of
    both head dims, ``launch.fwd_settings_key(D, D_v)``, and the first bucket in sorted order that
    holds both (``launch.pick_settings``). A row's registers are its Q tile's (D wide, 2-byte) and its
    fp32 accumulator's (D_v wide), so an MLA pair with a narrower V (DeepSeek's (192, 128)) can run a
    setting the square head dim spills at. The tables below list a square head dim by its padded
    width ``d`` (the bucket ``(d, d)``) and an MLA bucket by its pair."""
    base = {"num_warps": default_num_warps(block_m, block_n), "num_stages": default_num_stages(block_m, block_n)}
    sm80 = FWD_SM80.get((block_m, block_n), {256: base})
    sm90 = FWD_SM90.get((block_m, block_n), sm80)
    return {80: _by_widths(sm80), 90: _by_widths(sm90)}


def _by_widths(per_dim: dict) -> dict:
    """``per_dim`` keyed by ``(q/k width, v width)`` pairs, sorted: a square head dim's ``d`` is ``(d, d)``."""
    return dict(sorted((((d if isinstance(d, tuple) else (d, d)), e) for d, e in per_dim.items()), key=lambda de: de[0]))


#: sm_90 forward settings per block and padded head dim d (the bucket (d, d): default_fwd_settings). Static
#: report, TMA path, fp16 unmasked, warp-instructions per tile element of the full-tile loop:
#:
#: * 128x64 at head dim 64 on 4 warps (one warpgroup on 128 rows, tutorial 06's shape): 0.256 at
#:   189 regs (8 warps: 0.305); with the softcap compiled in, 8 warps (the forward template's
#:   ``launch_settings(softcap=True)``: 4 warps spill 4/12 B there). At head dim 128 4 warps spill (80-108 B), 8 warps 0.350: each
#:   step rescales the 128 x 128 accumulator for only 128 x 64 scores (D / B_c = 2 multiplies per
#:   score), and 8 warps pay the per-step bookkeeping on half the elements each.
#: * 128x128 at head dim 128 on 8 warps (one m64 row slab per warpgroup, 128 keys per step, FA3's
#:   forward tile): **0.251** at 190 regs, 3 stages (2 stages: 0.250, 195 regs); every score
#:   modification alone and all three spill-free (alibi 255 regs, no spill). 4 warps spill
#:   (448-488 B). At head dim 64: 8 warps 0.229 (164 regs), 4 warps 0.213 (246 regs).
#: * 64x128 would reach 0.250 too (4 warps, 251 regs), but each program reads every K/V tile for
#:   64 rows only: half the reuse of a 128-row tile, twice the L2 -> shared traffic per FLOP,
#:   which is what bounds an H100 forward (about 180 FLOP per L2 byte needed; 64 rows at head dim
#:   128 give 64). Not emitted.
#:
#: ``api.AUTO_BLOCKS`` runs 128x64 at head dim 64, 128x128 at 65-128 and 128x64 above on the sm_90
#: TMA path.
#:
#: Head dims above 128 (BLOCK_D 256): 128x64 on 8 warps, 2 stages, 0.451 at 244 regs, 193 KB of
#: shared memory (3 stages need 264 KB, over sm_90's 227 KB: the launch would fail).
FWD_SM90: dict = {
    (128, 64): {64: {"num_warps": 4, "num_stages": 3}, 128: {"num_warps": 8, "num_stages": 3},
                256: {"num_warps": 8, "num_stages": 2}},
    (128, 128): {256: {"num_warps": 8, "num_stages": 3}},
}

#: sm_80 (and pointer-path) forward settings where the tutorial's default_num_warps /
#: default_num_stages do not fit. 128x128 on the pointer path, static report (sm_80 | sm_90
#: compile of the same settings): head dim 64 on 8 warps, 3 stages: no spill, 0.308 | 0.235
#: (2 stages spill 24 B on sm_80). At head dim 128 it spills at every setting tried (8 warps,
#: 3 stages: 96 | 56 B; 2 stages 184 | 72 B; 4 warps 37 KB | 820 B): the row offsets of the
#: pointer path stay live across the loop beside a 128 x 128 accumulator. That path is never a
#: default (``api.AUTO_BLOCKS`` gives it 128x64); ``benchmarks.static.POINTER_SPILLS`` holds it to
#: the bytes it spills (tests/test_static.py), and an explicit ``block=(128, 128)`` there is
#: correct, only slower.
#:
#: Head dims above 128 (BLOCK_D 256) on the pointer path: 128x64 spills on sm_80 at every setting
#: (4 warps: 40 KB; 8 warps 1-2 stages: 224-416 B) and its 3 stages need 213 KB of sm_80's
#: 163 KB, so the pointer path's default there is 64x64 (``api.AUTO_BLOCKS``) on 8 warps, 2 stages:
#: no spill, unmasked or causal, on sm_80 (1.40 warp-instructions per element, 104 KB) nor on
#: sm_90's fallback (1.05; MMA issued/needed 1.5 there: 64 rows on two warpgroups); the packed
#: (varlen) kernel runs one stage there (the template's ``launch_settings``: 2 stages spill 28 B on
#: sm_90). One stage spills 4 B unmasked on sm_90, 4 warps 12-252 B, and 3 stages need 172 KB of
#: sm_80's 163.
#:
#: MLA pairs (issue 27) up to q/k width 192 (split 128 + 64: ``launch.fwd_settings_key``) with a V of
#: at most 128, DeepSeek's training (192, 128), on the 64x64 pointer path: **4 warps, 2 stages**. Static
#: report, bf16, warp-instructions per tile element of the loop, sm_80 | sm_90's fallback (`python -m
#: benchmarks.static --module attention_fwd_br64_bc64 --mask "D_v=128" "causal, D_v=128" --arch 80 90
#: --head-dim 192 --dtype bf16 --num-warps 4 8 --num-stages 2 --tma off`): 8 warps (the (256, 256)
#: bucket's, which ran it before) 1.135 at 172 regs | 0.766 with MMA issued/needed 1.60 (64 rows on two
#: warpgroups); 4 warps **0.786** at 255 regs, no spill | **0.447** at 203 regs, no spill, MMA 1.00;
#: the same unmasked or causal, fp16 or bf16, with every score modification (softcap, ALiBi, sinks: 255 |
#: 205 regs, no spill; 8 warps 2.045 | 2.645), on sm_90's TMA path at this block (0.395, 216 regs) and
#: in the packed (varlen) kernel on its one stage (causal: 0.778 at 255 regs | 0.419 at 250; 8 warps
#: 1.127 | 0.734 with MMA 1.60). (192, 64) takes it too: 0.493 | 0.384, 172 | 176 regs.
#: Not the square (192, 192), where 4 warps spill (sm_80 80 B, sm_90 8 B; varlen causal on sm_80 184 B),
#: nor (256, 128) (4 warps: 0.857 | 0.467 at 234 | 212 regs, no spill, but the packed kernel on sm_80
#: spills 4 B), nor a mask_mod forward (mask_mod_fwd_settings: the document mask_mod spills 368 B on
#: sm_80 at 4 warps, 24 B at 8), nor the kernels with dropout or FP8 compiled in (their launch takes the
#: square bucket: ``launch.fwd_settings_key(narrow_v=False)``): at 4 warps dropout spills 328 B on sm_80
#: (causal 360 B) and 4 B on sm_90, e4m3 412 B on sm_90; at 8 warps neither spills (dropout 248 | 254
#: regs, e4m3 194 regs).
FWD_SM80: dict = {
    (128, 128): {256: {"num_warps": 8, "num_stages": 3}},
    (64, 64): {128: {"num_warps": 4, "num_stages": 3}, (192, 128): {"num_warps": 4, "num_stages": 2},
               256: {"num_warps": 8, "num_stages": 2}},
}


def mask_mod_fwd_settings(block_m: int, block_n: int) -> dict:
    """The forward's settings with a mask_mod compiled in: default_fwd_settings, except that on
    sm_90 a 4-warp entry of a 128-row block (one warpgroup on 128 rows) takes 8 warps. The per-tile corner classifier and the element predicate
    read the mask's parameters (document ids: two per-position reads per corner) and keep them
    live beside the 4-warp TMA forward's 189 registers: at 128x64, head dim 64, the document
    mask_mod's TMA forward spilled 36/24 B on 4 warps and is spill-free on 8 (128 registers,
    0.497 warp-instructions per element; `python -m benchmarks.static --module maskmod_document
    --num-warps 8`). One rule for every mask_mod, user-defined ones included. Nor does a mask_mod
    forward take an MLA bucket (a pair with a V narrower than q/k: FWD_SM80's (192, 128)): at
    (192, 128) the document mask_mod's pointer forward spills 368 B on sm_80 on its 4 warps, so it
    runs the square bucket that holds it ((256, 256): 8 warps)."""
    table = {arch: {dims: e for dims, e in per_dims.items() if dims[0] == dims[1]}
             for arch, per_dims in default_fwd_settings(block_m, block_n).items()}
    if block_m >= 128:
        table[90] = {dim: {**e, "num_warps": max(e["num_warps"], 8)} for dim, e in table[90].items()}
    return table


# The backward's launch settings, per (architecture, head dim) and kernel. Each choice below keeps
# every kernel of the emitted configs spill-free on sm_80 and sm_90 at head dims 64 and 128,
# fp16/bf16, unmasked and causal, with every dot on tensor cores, as compiled by
# `python -m benchmarks.static` (Triton 3.9), whose loop columns (warp-instructions per tile
# element, MMA issued/needed) decided between the spill-free candidates; tests/test_static.py
# asserts it, with no exception.


def default_bwd_settings(block_m: int, block_n: int) -> dict:
    """``{arch: {largest padded head dim: {"dkdv": {...}, "dq": {...}}}}`` of the backward.

    dK/dV (``block_n`` keys per program, ``block_m`` query rows per step): its key-major products
    all have M = ``block_n`` rows, so 128 keys on 8 warps give each Hopper warpgroup one m64 key
    slab of its own (64 keys on 8 warps made both warpgroups recompute the full Sᵀ and dPᵀ:
    MMA issued/needed 1.5 on sm_90, 2.0-2.5 on sm_80; now 1.00 on both). The key tile is the
    backward's own, independent of B_c, as Triton tutorial 06's (128 keys). The row step is the
    N side of Sᵀ, dPᵀ and the K side of dV, dK: the longest step that stays spill-free, since the
    per-step bookkeeping (loads, pointer updates, the loop branch) is paid per step. Static
    report, fp16 unmasked, warp-instructions per tile element of the full-tile loop:

    * sm_90 head dim 64: 16 rows 0.672, 32 rows 0.434, **64 rows 0.324** (214 regs; causal 251
      regs, 0.329); 4 warps spill at 32 rows. Head dim 128: 16 rows 0.852, **32 rows 0.547**
      (246 regs; causal 254), 64 rows spill (116 B).
    * sm_80 head dim 64: **32 rows 0.453** (184 regs), 64 rows 0.420 at 255 regs (no margin).
      Head dim 128: **16 rows 0.770** (255 regs, no spill), 32 rows spill (48 B).

    dQ (``block_m`` rows per program, the forward's loop over ``block_n``-key tiles: 64 keys, the
    backward's own like the dK/dV key tile, so a 128x128 forward block does not change it): 128 rows on 8 warps,
    one m64 row slab per warpgroup (64 rows on 8 warps replicated the qk and dp products, 1.67x),
    where it fits. sm_90: 128 rows, 3 stages, 0.269 (hd64, 136 regs) / 0.327 (hd128, 246 regs);
    4 warps on 128 rows spill. sm_80: 128 rows, 2 stages at head dim 64 (0.328, 186 regs); at
    head dim 128 128 rows spill (32 B), so 64 rows, 3 stages (0.654, 167 regs).

    Head dims above 128 (BLOCK_D 256), both archs: the dK/dV accumulators alone (2 x keys x 256
    fp32) leave no room for 64 or 128 keys, and the dQ tile of 128 rows needs 320 KB of shared
    memory (sm_90: 227 KB; the launch would fail). dK/dV on **16 keys x 32 rows, 4 warps, 2 stages**:
    no spill, MMA issued/needed 1.00 (2.273 / 2.453 warp-instructions per element on sm_80 / sm_90,
    206 / 175 regs); 64 keys spill (80 B-3 KB) or, on 8 warps, recompute (1.5-2.5); 32 keys on 4
    warps spill at 32 rows and recompute (1.5) at 16. dQ on **32 rows x 32 keys, 4 warps, 2 stages**:
    no spill unmasked, causal or packed (varlen), 1.00 (1.28-1.35 per element, 162-184 regs); 64
    rows x 32 keys cost less (1.043 / 0.750) but spill 8 / 28 B in the packed kernel, as 64 x 16
    does on sm_80 (and recomputes there: 1.67).

    The 16x32 test config keeps its small tiles (32 keys, 16 rows, 4 warps: no wgmma below M = 64)."""
    if block_n < 64:
        small = {"dkdv": {"block_n": block_n, "block_m": 16, "num_warps": 4, "num_stages": 2},
                 "dq": {"block_m": block_m, "block_n": block_n, "num_warps": 4, "num_stages": 3}}
        return {80: {256: small}, 90: {256: small}}

    def entry(dkdv_rows, dq_rows, dq_stages):
        return {"dkdv": {"block_n": 128, "block_m": dkdv_rows, "num_warps": 8, "num_stages": 2},
                "dq": {"block_m": dq_rows, "block_n": 64, "num_warps": 8, "num_stages": dq_stages}}

    wide = {"dkdv": {"block_n": 16, "block_m": 32, "num_warps": 4, "num_stages": 2},
            "dq": {"block_m": 32, "block_n": 32, "num_warps": 4, "num_stages": 2}}
    return {80: {64: entry(32, 128, 2), 128: entry(16, 64, 3), 256: wide},
            90: {64: entry(64, 128, 3), 128: entry(32, 128, 3), 256: wide}}


def bwd_map_block(settings: dict, block_n: int) -> tuple[int, int]:
    """The tiles of the dense block map the backward reads: a multiple of every row tile (dK/dV
    step, dQ program) and every key tile (dK/dV program, dQ step) of ``settings``, so that each tile
    of either loop lies inside one map tile (all powers of two: their maxima)."""
    entries = [e for per_dim in settings.values() for e in per_dim.values()]
    rows = max(max(e["dkdv"]["block_m"], e["dq"]["block_m"]) for e in entries)
    keys = max(max(e["dkdv"]["block_n"], e["dq"]["block_n"]) for e in entries)
    return rows, keys


def default_decode_settings(block_m: int, block_n: int) -> dict:
    """``{arch: {largest padded head dim: {"num_warps", "num_stages"}}}`` of KV-cache decode: the
    block's default_num_warps / default_num_stages, except on sm_90 at head dim 64, where 3 stages
    spill 4 B with ALiBi in the contiguous-cache kernel of the 64x64 block (the one
    ``flash_attention_with_kvcache`` launches: ``runtime.decode.DECODE_BLOCK``; 80 registers) and 2
    stages do not (1.109 warp-instructions per element against 1.098; `python -m benchmarks.static
    --module attention_decode_br64_bc64 --arch 90 --head-dim 64 --mask alibi --num-stages 2 3 4`).

    Above head dim 256 (MLA's absorbed decode, D = 576 split as 512 + 64, D_v = 512, the K tile serving
    as V: issue 27) 4 warps on 2 stages: at the 64x64 block, bf16, contiguous and paged, unmasked and
    causal, neither spill on sm_80 nor on sm_90 (92-93 KB of shared memory, 167-226 registers) and
    their loops are the cheapest of 4 or 8 warps on 1 or 2 stages (3.49 warp-instructions per element
    on sm_80, 3.62 on sm_90; 4 warps on 1 stage spill 4-20 B on sm_80; `python -m benchmarks.static
    --module attention_decode_br64_bc64 --arch 80 90 --dtype bf16 --head-dim 576 --mask D_v=512
    "causal, D_v=512" --num-warps 4 8 --num-stages 1 2`). A separate v cache at that width loads a
    V tile too: the launch takes 8 warps then (the decode module's ``launch_settings``)."""
    base = {"num_warps": default_num_warps(block_m, block_n), "num_stages": default_num_stages(block_m, block_n)}
    wide = {"num_warps": 4, "num_stages": 2}
    return {80: {256: base, 1024: wide},
            90: {64: {**base, "num_stages": min(base["num_stages"], 2)}, 256: base, 1024: wide}}


def builtin_mask_mods() -> tuple[str, ...]:
    """``module:name`` of spec.mask_mod's built-ins, emitted for every block config."""
    from spec.mask_mod import BUILTINS  # here, not at import: `python -m generator --help` stays instant

    return tuple(m.ref for m in BUILTINS)


@dataclass(frozen=True)
class BlockConfig:
    """The parameters of one ``python -m generator`` invocation; validates itself."""

    block_m: int = 64
    block_n: int = 64
    num_warps: int | None = None  # None: default_num_warps
    num_stages: int | None = None  # None: default_num_stages
    masks: tuple[str, ...] = MASKS
    #: user mask_mods (``module:name``, ``--mask-mod``) emitted beside the built-ins of spec.mask_mod
    mask_mods: tuple[str, ...] = ()
    #: user score_mods (``module:name``, ``--score-mod``): forward and backward kernels for each, alone
    #: and with each mask_mod of the config
    score_mods: tuple[str, ...] = ()

    def __post_init__(self):
        _check("--br (B_r, block_m)", self.block_m, ALLOWED_BLOCKS)
        _check("--bc (B_c, block_n)", self.block_n, ALLOWED_BLOCKS)
        if self.num_warps is not None:
            _check("--num-warps", self.num_warps, ALLOWED_WARPS)
        if self.num_stages is not None:
            _check("--num-stages", self.num_stages, ALLOWED_STAGES)
        unknown = [m for m in self.masks if m not in MASKS]
        if unknown or not self.masks:
            raise ValueError(f"--mask takes one or more of {', '.join(MASKS)} (got {list(self.masks)})")
        # canonical order, no repeats: the same config always names the same files
        object.__setattr__(self, "masks", tuple(m for m in MASKS if m in self.masks))
        bad = [ref for ref in self.mask_mods if ref.count(":") != 1 or not all(ref.split(":"))]
        if bad:
            raise ValueError(f"--mask-mod takes module:name (e.g. mymasks:prefix_2d), got {bad}")
        builtin = set(builtin_mask_mods())
        object.__setattr__(self, "mask_mods", tuple(sorted({r for r in self.mask_mods if r not in builtin})))
        names = [ref.partition(":")[2] for ref in self.all_mask_mods()]
        clash = sorted({x for x in names if names.count(x) > 1})
        if clash:
            raise ValueError(f"--mask-mod: more than one mask_mod named {clash} (their files would collide); "
                             "rename one")
        bad = [ref for ref in self.score_mods if ref.count(":") != 1 or not all(ref.split(":"))]
        if bad:
            raise ValueError(f"--score-mod takes module:name (e.g. mymods:rel_bias), got {bad}")
        object.__setattr__(self, "score_mods", tuple(sorted(set(self.score_mods))))
        names = [ref.partition(":")[2] for ref in self.score_mods]
        clash = sorted({x for x in names if names.count(x) > 1})
        if clash:
            raise ValueError(f"--score-mod: more than one score_mod named {clash} (their files would collide); "
                             "rename one")

    def all_mask_mods(self) -> tuple[str, ...]:
        """The built-ins of spec.mask_mod, then the user's (``--mask-mod``)."""
        return builtin_mask_mods() + self.mask_mods

    def _given_or(self, given: int | None, default) -> int:
        """``--num-warps`` / ``--num-stages`` when given (forward and backward alike), else the
        default for this block."""
        return given if given is not None else default(self.block_m, self.block_n)

    @property
    def warps(self) -> int:
        return self._given_or(self.num_warps, default_num_warps)

    @property
    def stages(self) -> int:
        return self._given_or(self.num_stages, default_num_stages)

    @property
    def fwd_settings(self) -> dict:
        """The forward's launch settings (default_fwd_settings), ``--num-warps`` / ``--num-stages``
        applied to every entry when given."""
        return self._with_given(default_fwd_settings(self.block_m, self.block_n))

    @property
    def fwd_settings_mask_mod(self) -> dict:
        """The launch settings of the forward with a mask_mod compiled in (mask_mod_fwd_settings),
        ``--num-warps`` / ``--num-stages`` applied as for the plain forward."""
        return self._with_given(mask_mod_fwd_settings(self.block_m, self.block_n))

    @property
    def _given(self) -> dict:
        """``--num-warps`` / ``--num-stages`` as given (the entries that override every default)."""
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages)) if v is not None}

    def _with_given(self, table: dict) -> dict:
        """``table`` (``{arch: {head dim: settings}}``) with ``_given`` applied to every entry."""
        return {arch: {dim: {**e, **self._given} for dim, e in per_dim.items()} for arch, per_dim in table.items()}

    @property
    def decode_settings(self) -> dict:
        """KV-cache decode's launch settings (default_decode_settings), ``--num-warps`` /
        ``--num-stages`` applied to every entry when given."""
        return self._with_given(default_decode_settings(self.block_m, self.block_n))

    @property
    def bwd_settings(self) -> dict:
        """The backward's launch settings (default_bwd_settings), with ``--num-warps`` /
        ``--num-stages`` applied to every kernel when given."""
        return {arch: {dim: {kernel: {**e, **self._given} for kernel, e in entry.items()}
                       for dim, entry in per_dim.items()}
                for arch, per_dim in default_bwd_settings(self.block_m, self.block_n).items()}

    @property
    def bwd_map_block(self) -> tuple[int, int]:
        """The dense block map's tiles the backward reads (bwd_map_block)."""
        return bwd_map_block(self.bwd_settings, self.block_n)

    @property
    def key(self) -> str:
        """Manifest key: one config per block size and mask set (the mask kinds appear when not all)."""
        masks = "".join(f"_{m}" for m in self.masks) if self.masks != MASKS else ""
        return f"br{self.block_m}_bc{self.block_n}{masks}"

    @property
    def command(self) -> str:
        """The command that emits this config (stamped into every file it emits)."""
        cmd = f"python -m generator --br {self.block_m} --bc {self.block_n}"
        if self.masks != MASKS:
            cmd += " --mask " + " ".join(self.masks)
        if self.num_warps is not None:
            cmd += f" --num-warps {self.num_warps}"
        if self.num_stages is not None:
            cmd += f" --num-stages {self.num_stages}"
        if self.mask_mods:
            cmd += " --mask-mod " + " ".join(self.mask_mods)
        if self.score_mods:
            cmd += " --score-mod " + " ".join(self.score_mods)
        return cmd

    def variants(self) -> list["Variant"]:
        """Every file of the config: the plain kernels, each mask_mod's forward and backward, and each
        score_mod's forward, backward and decode kernels alone and its forward and backward with each
        mask_mod of the config (so a score_mod combines with any of them in one call)."""
        plain = [Variant(kind, self) for kind in KINDS.values()]
        modded = [kind for kind in KINDS.values() if kind.takes_mask_mod]
        return plain + [Variant(kind, self, ref) for ref in self.all_mask_mods() for kind in modded] + \
            [Variant(kind, self, mm, ref) for ref in self.score_mods for mm in (None, *self.all_mask_mods())
             for kind in KINDS.values() if kind.takes_score_mod and (mm is None or kind.takes_mask_mod)]

    def to_json(self) -> dict:
        """The manifest entry: the CLI options as given (``None``: default) and, under
        ``launch``, the settings each kernel file was emitted with after the defaults applied."""
        return {"block": [self.block_m, self.block_n], "num_warps": self.num_warps,
                "num_stages": self.num_stages, "masks": list(self.masks), "mask_mods": list(self.mask_mods),
                **({"score_mods": list(self.score_mods)} if self.score_mods else {}),
                "launch": {kind: {f"sm_{arch}": {str(dim): entry for dim, entry in per_dim.items()}
                                  for arch, per_dim in table.items()}
                           for kind, table in (("fwd", self.fwd_settings), ("bwd", self.bwd_settings),
                                               ("decode", self.decode_settings))}}

    @classmethod
    def from_json(cls, d: dict) -> "BlockConfig":
        return cls(d["block"][0], d["block"][1], d["num_warps"], d["num_stages"], tuple(d["masks"]),
                   tuple(d.get("mask_mods", ())), tuple(d.get("score_mods", ())))


@dataclass(frozen=True)
class Variant:
    """One emitted kernel file: a kernel kind under a block config."""

    kind: KernelKind
    config: BlockConfig = field(default_factory=BlockConfig)
    mask_mod: str | None = None  # ``module:name`` of the mask_mod compiled in, if any
    score_mod: str | None = None  # ``module:name`` of the user score_mod compiled in, if any

    @property
    def module_name(self) -> str:
        c = self.config
        masks = "".join(f"_{m}" for m in c.masks) if self.kind.uses_masks and c.masks != MASKS else ""
        mm = f"_maskmod_{self.mask_mod.partition(':')[2]}" if self.mask_mod else ""
        mm += f"_scoremod_{self.score_mod.partition(':')[2]}" if self.score_mod else ""
        return f"{self.kind.prefix}{masks}{mm}_br{c.block_m}_bc{c.block_n}"

    @property
    def filename(self) -> str:
        return self.module_name + ".py"
