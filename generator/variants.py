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


#: every kind a block config emits, in emission order (the backward adds entries here)
KINDS: dict[str, KernelKind] = {
    "fwd": KernelKind("fwd", "attention_fwd.py.jinja", "attention_fwd", True, True),
    "softmax": KernelKind("softmax", "softmax.py.jinja", "softmax", False),
    "bwd": KernelKind("bwd", "attention_bwd.py.jinja", "attention_bwd", True, True),
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


# The backward's launch settings, per kernel. Each choice below is the one that keeps every
# kernel of the three emitted configs (16x32, 64x64, 128x64) spill-free on sm_80 and sm_90 at head
# dims 64 and 128, fp16/bf16, unmasked and causal, with every dot on tensor cores, as compiled by
# `python -m benchmarks.static` (Triton 3.9); tests/test_static.py asserts it, with no exception.


def default_bwd_num_warps(block_m: int, block_n: int) -> int:
    """Warps of the dK/dV kernel (and the preprocess): 8 for a key tile of 64 or more keys, else 4.

    Its key-major products all have M = B_c rows. On sm_90 the two warpgroups of 8 warps split
    the head dim of the wgmma accumulators dK, dV, halving their registers: at 4 warps the head-
    dim-128 kernel spills (44 B causal, 1 stage; 220 B with 2). On sm_80 a chain of dots (Pᵀ
    feeds dV) puts every warp along M, so warps beyond B_c / 16 only replicate the mma tiles, but
    the Q, dO loads and the mask tiles still spread over 8 warps: 4 warps spill at head dim 128.
    A 32-key tile (16x32) has no wgmma (M = 32 < 64) and fits in 4 warps."""
    return 8 if block_n >= 64 else 4


def default_bwd_num_stages(block_m: int, block_n: int) -> int:
    """Pipeline depth of the dK/dV kernel's streamed Q and dO tiles: 2, so the next step's tiles
    arrive by async copy while this one computes (1 stage leaves the load latency exposed on
    every step). A third stage holds one more Q, dO pair live and reaches 255 registers at head
    dim 128, causal (64x64, both archs): no margin."""
    return 2


def default_bwd_sub_m(block_m: int, block_n: int) -> int:
    """Query rows per step of the dK/dV kernel's loop (a divisor of B_r, at least 16, tl.dot's
    minimum): 16. In the key-major tile the step is the N side of Sᵀ = K Qᵀ and dPᵀ = V dOᵀ and
    the K side of dV += Pᵀ dO, dK += dSᵀ Q, so it does not decide whether they are wgmma (M = B_c
    does). Tutorial 06 steps 32 rows over 128 keys; here 32 rows spill at head dim 128 with 8
    warps and 2 stages (sm_90: 28 B unmasked, 92 B causal; sm_80: 8 B causal), 64 rows spill
    everywhere but unmasked sm_90 head dim 64."""
    return 16


def default_bwd_dq_sub_m(block_m: int, block_n: int) -> int:
    """Query rows per program of the dQ kernel (a divisor of B_r): B_r, at most 64.

    A dQ program holds its rows' Q and dO tiles and the fp32 dQ accumulator on chip for the
    whole key loop, so its registers grow with the row count times the head dim. With 128 rows
    (the 128x64 config) at head dim 128 the causal kernel needs more than sm_80 has: 255
    registers and 8/8 B of spill with every setting tried (4, 8, 16 warps; 1 to 5 stages; 16
    warps cap a thread at 128 registers). 64 rows is the 64x64 config's dQ tile, spill-free on
    sm_80 and sm_90 at head dims 64 and 128, and still M = 64 for a Hopper wgmma. The cost: each
    program streams K and V for 64 rows instead of 128, so a 128x64 dQ pass reads K, V twice as
    often from HBM/L2. The dense block map stays per B_r tile (the kernel reads it by
    ``start_m // B_r``); the mask classifier is the same proven terms at this tile height (claim
    mask_tiles_sound holds for every block size)."""
    return min(block_m, 64)


def default_bwd_dq_num_warps(block_m: int, block_n: int) -> int:
    """Warps of the dQ kernel, the forward's loop order: 8 from a 64x64 tile up (at 4 warps the
    64x64 head-dim-128 kernel spills on sm_90: 40 B with 2 stages), 4 below (16x32: M = 16, one
    mma row tile). The 128x64 config's dQ programs run 64 rows (default_bwd_dq_sub_m): the
    64x64 config's dQ tile, with the same 8 warps."""
    return 8 if block_m * block_n >= 64 * 64 else 4


def default_bwd_dq_num_stages(block_m: int, block_n: int) -> int:
    """Pipeline depth of the dQ kernel's streamed K, V tiles: 3, as the forward's for B_c <= 64
    (the dQ loop streams K, V exactly as the forward does). At a 64-row dQ tile and head dim 128
    the three stages take 104 KB of shared memory on sm_80, 129 KB on sm_90."""
    return 3


#: the backward kernels with launch settings of their own: default (warps, stages) per block;
#: the preprocess (a row sum) runs with the dK/dV kernel's
BWD_LAUNCH = {"dkdv": (default_bwd_num_warps, default_bwd_num_stages),
              "dq": (default_bwd_dq_num_warps, default_bwd_dq_num_stages)}


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

    def bwd_launch(self, kernel: str) -> dict[str, int]:
        """``num_warps``, ``num_stages`` of a backward kernel (``BWD_LAUNCH``): ``--num-warps`` /
        ``--num-stages`` when given, else the kernel's defaults for this block."""
        warps, stages = BWD_LAUNCH[kernel]
        return {"num_warps": self._given_or(self.num_warps, warps),
                "num_stages": self._given_or(self.num_stages, stages)}

    @property
    def bwd_sub_m(self) -> int:
        """Query rows per step of the dK/dV kernel (default_bwd_sub_m)."""
        return default_bwd_sub_m(self.block_m, self.block_n)

    @property
    def bwd_dq_sub_m(self) -> int:
        """Query rows per program of the dQ kernel (default_bwd_dq_sub_m)."""
        return default_bwd_dq_sub_m(self.block_m, self.block_n)

    @property
    def key(self) -> str:
        """Manifest key: one config per block size."""
        return f"br{self.block_m}_bc{self.block_n}"

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
        return cmd

    def variants(self) -> list["Variant"]:
        plain = [Variant(kind, self) for kind in KINDS.values()]
        return plain + [Variant(kind, self, ref) for ref in self.all_mask_mods()
                        for kind in KINDS.values() if kind.takes_mask_mod]

    def to_json(self) -> dict:
        """The manifest entry: the CLI options as given (``None``: default) and, under
        ``launch``, the settings each kernel file was emitted with after the defaults applied."""
        return {"block": [self.block_m, self.block_n], "num_warps": self.num_warps,
                "num_stages": self.num_stages, "masks": list(self.masks), "mask_mods": list(self.mask_mods),
                "launch": {"fwd": {"num_warps": self.warps, "num_stages": self.stages},
                           "bwd": {"dkdv": {**self.bwd_launch("dkdv"), "block_m": self.bwd_sub_m},
                                   "dq": {**self.bwd_launch("dq"), "block_m": self.bwd_dq_sub_m}}}}

    @classmethod
    def from_json(cls, d: dict) -> "BlockConfig":
        return cls(d["block"][0], d["block"][1], d["num_warps"], d["num_stages"], tuple(d["masks"]),
                   tuple(d.get("mask_mods", ())))


@dataclass(frozen=True)
class Variant:
    """One emitted kernel file: a kernel kind under a block config."""

    kind: KernelKind
    config: BlockConfig = field(default_factory=BlockConfig)
    mask_mod: str | None = None  # ``module:name`` of the mask_mod compiled in, if any

    @property
    def module_name(self) -> str:
        c = self.config
        masks = "".join(f"_{m}" for m in c.masks) if self.kind.uses_masks and c.masks != MASKS else ""
        mm = f"_maskmod_{self.mask_mod.partition(':')[2]}" if self.mask_mod else ""
        return f"{self.kind.prefix}{masks}{mm}_br{c.block_m}_bc{c.block_n}"

    @property
    def filename(self) -> str:
        return self.module_name + ".py"
