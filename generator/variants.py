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


#: every kind a block config emits, in emission order (the backward adds entries here)
KINDS: dict[str, KernelKind] = {
    "fwd": KernelKind("fwd", "attention_fwd.py.jinja", "attention_fwd", True),
    "softmax": KernelKind("softmax", "softmax.py.jinja", "softmax", False),
    "bwd": KernelKind("bwd", "attention_bwd.py.jinja", "attention_bwd", True),
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


def default_bwd_num_warps(block_m: int, block_n: int) -> int:
    """The backward kernels keep more tiles live than the forward (dK and dV accumulators, K and
    V, P and dS of a tile): 8 warps spread them over twice the registers. At 4 warps the 64x64
    dK/dV kernel spills (docs/performance/static.md)."""
    return 8


def default_bwd_num_stages(block_m: int, block_n: int) -> int:
    """No software pipelining of the backward's streamed tiles: every extra stage holds another
    Q, dO (or K, V) tile in flight, and with them the dK/dV kernel spills at head dim 128."""
    return 1


def default_bwd_sub_m(block_m: int, block_n: int) -> int:
    """Query rows per step of the dK/dV kernel's loop (a divisor of B_r): a quarter of a query
    tile, so the Q, dO, P and dS tiles it holds are a quarter as large (at 64x64, half a tile
    still spills on sm_80 at head dim 64); never below 16 (tl.dot's minimum)."""
    return max(16, block_m // 4)


@dataclass(frozen=True)
class BlockConfig:
    """The parameters of one ``python -m generator`` invocation; validates itself."""

    block_m: int = 64
    block_n: int = 64
    num_warps: int | None = None  # None: default_num_warps
    num_stages: int | None = None  # None: default_num_stages
    masks: tuple[str, ...] = MASKS

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
    def bwd_warps(self) -> int:
        return self._given_or(self.num_warps, default_bwd_num_warps)

    @property
    def bwd_stages(self) -> int:
        return self._given_or(self.num_stages, default_bwd_num_stages)

    @property
    def bwd_sub_m(self) -> int:
        return default_bwd_sub_m(self.block_m, self.block_n)

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
        return cmd

    def variants(self) -> list["Variant"]:
        return [Variant(kind, self) for kind in KINDS.values()]

    def to_json(self) -> dict:
        """The manifest entry: the CLI options as given (``None``: default) and, under
        ``launch``, the settings each kernel file was emitted with after the defaults applied."""
        return {"block": [self.block_m, self.block_n], "num_warps": self.num_warps,
                "num_stages": self.num_stages, "masks": list(self.masks),
                "launch": {"fwd": {"num_warps": self.warps, "num_stages": self.stages},
                           "bwd": {"num_warps": self.bwd_warps, "num_stages": self.bwd_stages,
                                   "block_m_dkdv": self.bwd_sub_m}}}

    @classmethod
    def from_json(cls, d: dict) -> "BlockConfig":
        return cls(d["block"][0], d["block"][1], d["num_warps"], d["num_stages"], tuple(d["masks"]))


@dataclass(frozen=True)
class Variant:
    """One emitted kernel file: a kernel kind under a block config."""

    kind: KernelKind
    config: BlockConfig = field(default_factory=BlockConfig)

    @property
    def module_name(self) -> str:
        c = self.config
        masks = "".join(f"_{m}" for m in c.masks) if self.kind.uses_masks and c.masks != MASKS else ""
        return f"{self.kind.prefix}{masks}_br{c.block_m}_bc{c.block_n}"

    @property
    def filename(self) -> str:
        return self.module_name + ".py"
