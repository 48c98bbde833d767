"""HBM-traffic model of the generated forward kernel, beside standard attention.

The generated forward kernel runs FlashAttention-2's loop order: one program per query
tile of ``B_r`` rows, looping over key tiles of ``B_c`` keys. Its traffic to HBM is fixed
by the tiling alone:

* the **Q** tile is read once (``rows x D``);
* each **key tile the classifier does not skip** has its **K** and **V** tiles read once
  per query tile that visits it (``keys x D`` each); a skipped tile reads nothing;
* **O** is written once (``rows x D``) and the row's **lse** once (fp32).

Rows and keys past the end of the sequence are masked loads and move nothing. Because
every mask kind is an interval of keys whose ends are monotone in the row
(``spec.masks``), the tiles a query tile visits are contiguous: from the tile holding
``kv_start`` to the tile holding ``kv_end - 1``, where ``kv_start``/``kv_end`` are the
classifier's terms (``spec.masks.tile_bounds``) at the tile's corner rows. This module
evaluates those terms in closed form (vectorised over query tiles), so N = 16k costs
nothing; ``tests/test_hbm.py`` checks it against the instrumented count of the float64
reference's tiled loop (``spec.reference.online_attention(..., stats=...)``), which calls
``spec.masks.classify_tile`` tile by tile.

**Standard attention** (FlashAttention's Algorithm 0) materialises ``S = QK^T`` and
``P = softmax(S)`` in HBM: read Q, K; write S; read S; write P; read P, V; write O:
``(2 N_Q + 2 N_K) D + 4 N_Q N_K`` elements. The model counts bytes *requested* from the
memory system: on a real GPU part of the repeated K/V reads hit in L2, so measured DRAM
traffic of the tiled kernel is lower still; the model is FlashAttention's Theorem 2
(``Θ(N² d² / M)`` with ``B_r ∝ M / d``) made exact for our tiling, not a measurement.

    python -m benchmarks.hbm            # table, plots into docs/assets/perf/, docs page
"""

from __future__ import annotations

import argparse
from dataclasses import astuple, dataclass
from functools import lru_cache

import numpy as np
import sympy as sp
import torch

from benchmarks.common import ASSETS_PERF, DOCS_PERF, markdown_table, text_table, write_text
from spec import masks
from spec import notation as n

LSE_BYTES = 4  # the kernel stores lse in fp32


@dataclass(frozen=True)
class Traffic:
    """Bytes moved between HBM and the chip, per tensor (one batch element, one head)."""

    q: int = 0
    k: int = 0
    v: int = 0
    s: int = 0  # standard attention only: S written + read
    p: int = 0  # standard attention only: P written + read
    o: int = 0
    lse: int = 0
    mask: int = 0  # a dense bool mask: its block-map bytes and the bits of its partial tiles;
    # a packed (varlen) batch: the cu_seqlens offsets its programs read
    tiles: int = 0  # (query tile, key tile) pairs computed: 4·B_r·B_c·D FLOPs each on the tensor cores

    @property
    def read(self) -> int:
        return self.q + self.k + self.v + self.mask + self.s // 2 + self.p // 2

    @property
    def written(self) -> int:
        return self.o + self.lse + self.s // 2 + self.p // 2

    @property
    def total(self) -> int:
        return self.read + self.written

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(*(a + b for a, b in zip(astuple(self), astuple(other))))


def mask_params(n_q: int, n_k: int, alignment: str = "top_left", window=None, key_len=None) -> dict:
    """The numbers ``spec.masks.classify_tile`` takes, from the public API's arguments."""
    params = {"N_Q": n_q, "N_K": n_k, "shift": masks.alignment_shift(alignment, n_q, n_k)}
    if window is not None:
        params["window_left"], params["window_right"] = window
    if key_len is not None:
        params["key_len"] = key_len
    return params


_SYMBOL_OF = {"N_Q": n.Nq, "N_K": n.Nk, "shift": n.shift, "window_left": n.window_left,
              "window_right": n.window_right, "key_len": n.key_len}


@lru_cache(maxsize=None)
def _bound_fn(kind: str, field: str):
    """``tile_bounds(kind).<field>`` as a numpy function of (start_m, B_r, params...)."""
    expr = getattr(masks.tile_bounds(kind), field)
    if expr is None:
        return None
    args = [n.start_m, n.B_r] + list(_SYMBOL_OF.values())
    return sp.lambdify(args, expr, modules="numpy")


def _visited_tiles(n_q: int, br: int, bc: int, kinds=(), **params) -> tuple[np.ndarray, np.ndarray]:
    """Key-tile indices ``[first, last)`` each query tile visits (two vectors, one entry per
    query tile): from the tile holding ``kv_start`` to the one holding ``kv_end - 1``."""
    n_k = params["N_K"]
    start_m = np.arange(0, n_q, br, dtype=np.int64)
    env = [params.get(name, 0) for name in _SYMBOL_OF]
    kv_start = np.zeros_like(start_m)
    kv_end = np.full_like(start_m, n_k)
    for kind in kinds:
        lo, hi = _bound_fn(kind, "kv_start"), _bound_fn(kind, "kv_end")
        if lo is not None:
            kv_start = np.maximum(kv_start, lo(start_m, br, *env))
        if hi is not None:
            kv_end = np.minimum(kv_end, hi(start_m, br, *env))
    first = np.maximum(kv_start, 0) // bc
    last = np.minimum(-(-kv_end // bc), -(-n_k // bc))
    return first, np.where(kv_end > kv_start, np.maximum(last, first), first)


def visited_keys(n_q: int, br: int, bc: int, kinds=(), **params) -> np.ndarray:
    """Keys of K (and of V) one query tile loads, for every query tile (a vector); keys at or
    past ``N_K`` in the last tile are masked loads."""
    first, last = _visited_tiles(n_q, br, bc, kinds, **params)
    return np.minimum(last * bc, params["N_K"]) - np.minimum(first * bc, params["N_K"])


def _dense_traffic(first, last, mask: np.ndarray, br: int, bc: int) -> tuple[int, int, int, int]:
    """(keys of K/V loaded, block-map bytes, mask bytes, tiles computed) with a dense mask, read off the
    runtime's own block map (``generator.runtime.api.block_map``): every visited tile reads its
    map byte; an empty tile loads nothing more; a partial one also reads its mask elements, one
    byte each (torch.bool)."""
    from generator.runtime.api import EMPTY, PARTIAL, block_map

    n_q, n_k = mask.shape
    states = block_map(torch.tensor(mask, dtype=torch.bool), n_q, n_k, br, bc)[0, 0].numpy()
    keys = map_bytes = mask_bytes = tiles = 0
    for qi, (lo, hi) in enumerate(zip(first, last)):
        state = states[qi, lo:hi]
        widths = np.minimum(bc, n_k - np.arange(lo, hi) * bc)
        rows = min(br, n_q - qi * br)
        map_bytes += hi - lo
        keys += int(widths[state != EMPTY].sum())
        mask_bytes += rows * int(widths[state == PARTIAL].sum())
        tiles += int((state != EMPTY).sum())
    return keys, map_bytes, mask_bytes, tiles


def flash_forward(n_q: int, d: int, br: int, bc: int, kinds=(), *, dtype_bytes: int = 2,
                  n_k: int | None = None, mask=None, **mask_args) -> Traffic:
    """HBM bytes of the generated forward kernel (FA2 order) for one (batch, head).

    ``mask``: the dense boolean mask of this (batch, head), ``(N_Q, N_K)``, or None.
    """
    n_k = n_q if n_k is None else n_k
    params = mask_params(n_q, n_k, **mask_args)
    first, last = _visited_tiles(n_q, br, bc, tuple(kinds), **params)
    if mask is None:
        keys, map_bytes, mask_bytes = int(visited_keys(n_q, br, bc, tuple(kinds), **params).sum()), 0, 0
        tiles = int((last - first).sum())
    else:
        keys, map_bytes, mask_bytes, tiles = _dense_traffic(first, last, np.asarray(mask), br, bc)
    return Traffic(q=n_q * d * dtype_bytes, k=keys * d * dtype_bytes, v=keys * d * dtype_bytes,
                   o=n_q * d * dtype_bytes, lse=n_q * LSE_BYTES, mask=mask_bytes + map_bytes, tiles=tiles)


#: what a varlen program reads besides its tiles: cu_seqlens_q[b], [b+1] and the keys' pair, int32
VARLEN_OFFSET_BYTES = 4 * 4


def varlen_forward(lengths_q, lengths_k, d: int, br: int, bc: int, kinds=(), *, dtype_bytes: int = 2,
                   window=None) -> Traffic:
    """HBM bytes of the packed-batch forward (``forward_varlen``) for one head: each segment is the
    dense kernel on its slice with bottom-right alignment (``spec.varlen``), so its traffic is
    ``flash_forward`` at the segment's lengths; plus the four int32 offsets every program reads
    (``cdiv(max_seqlen_q, B_r)`` programs per segment: those past a shorter segment's end read
    nothing else, their loops are empty)."""
    total = Traffic(mask=len(lengths_q) * -(-max(lengths_q, default=0) // br) * VARLEN_OFFSET_BYTES)
    for n_q, n_k in zip(lengths_q, lengths_k):
        if n_q:
            total += flash_forward(n_q, d, br, bc, kinds, dtype_bytes=dtype_bytes, n_k=n_k, alignment="bottom_right",
                                   window=window)
    return total


def standard(n_q: int, d: int, *, dtype_bytes: int = 2, n_k: int | None = None) -> Traffic:
    """HBM bytes of standard attention (Algorithm 0): S and P materialised, each written and read."""
    n_k = n_q if n_k is None else n_k
    return Traffic(q=n_q * d * dtype_bytes, k=n_k * d * dtype_bytes, v=n_k * d * dtype_bytes,
                   s=2 * n_q * n_k * dtype_bytes, p=2 * n_q * n_k * dtype_bytes,
                   o=n_q * d * dtype_bytes)


# ----------------------------------------------------------------------------------------
# Plots and the docs page
# ----------------------------------------------------------------------------------------
SEQ_LENS = [512, 1024, 2048, 4096, 8192, 16384]
BLOCK_ROWS = [16, 32, 64, 128, 256]
MB = 2**20


def _plots(d_values=(64, 128), br=64, bc=64) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "flashproof"  # stable ids: regenerating is a no-op diff
    import matplotlib.pyplot as plt

    ASSETS_PERF.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))

    ax = axes[0]
    for d, style in zip(d_values, ("-", "--")):
        ax.plot(SEQ_LENS, [standard(N, d).total / MB for N in SEQ_LENS], "k" + style, marker="o",
                label=f"standard, D={d}")
        ax.plot(SEQ_LENS, [flash_forward(N, d, br, bc).total / MB for N in SEQ_LENS], "C0" + style,
                marker="s", label=f"flashproof, D={d}")
        ax.plot(SEQ_LENS, [flash_forward(N, d, br, bc, ("causal",)).total / MB for N in SEQ_LENS],
                "C1" + style, marker="^", label=f"flashproof causal, D={d}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("HBM traffic per (batch, head) [MiB]")
    ax.set_title(f"forward, fp16/bf16, B_r=B_c={br}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)

    ax = axes[1]
    N, d = 4096, 64
    ax.axhline(standard(N, d).total / MB, color="k", label="standard")
    ax.plot(BLOCK_ROWS, [flash_forward(N, d, b, bc).total / MB for b in BLOCK_ROWS], "C0-", marker="s",
            label=f"flashproof, B_c={bc}")
    for bcc, c in ((32, "C2"), (64, "C1"), (128, "C3")):
        ax.plot(BLOCK_ROWS, [flash_forward(N, d, b, bcc, ("causal",)).total / MB for b in BLOCK_ROWS],
                c + "--", marker="^", label=f"flashproof causal, B_c={bcc}")
    # Theorem 2's leading term 2 N^2 d / B_r (K and V re-read once per query tile)
    ax.plot(BLOCK_ROWS, [2 * N * N * d * 2 / b / MB for b in BLOCK_ROWS], "C7:",
            label="2·N²·d/B_r (Theorem 2 trend)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("query tile rows B_r (SRAM per tile ∝ B_r·d)")
    ax.set_title(f"forward, N={N}, D={d}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)

    fig.tight_layout()
    names = []
    for ext in ("png", "svg"):
        path = ASSETS_PERF / f"hbm_traffic.{ext}"
        fig.savefig(path, dpi=110, metadata={"Date": None} if ext == "svg" else None)
        names.append(path.name)
    plt.close(fig)
    return names


TABLE_HEADER = ["N", "D", "standard MiB", "flashproof MiB", "causal MiB", "std / flash", "std / causal"]


def table_rows(br=64, bc=64):
    rows = []
    for d in (64, 128):
        for N in (1024, 4096, 16384):
            std, fa, fc = standard(N, d).total, flash_forward(N, d, br, bc).total, \
                flash_forward(N, d, br, bc, ("causal",)).total
            rows.append([N, d, f"{std / MB:.1f}", f"{fa / MB:.1f}", f"{fc / MB:.1f}",
                         f"{std / fa:.2f}x", f"{std / fc:.2f}x"])
    return rows


DENSE_HEADER = ["mask", "K/V MiB", "mask MiB", "total MiB", "vs no mask"]


def document_mask(n: int, docs: int) -> np.ndarray:
    """A block-diagonal mask of ``docs`` equal documents (packed sequences), causal inside."""
    doc = np.arange(n) * docs // n
    idx = np.arange(n)
    return (doc[:, None] == doc[None, :]) & (idx[:, None] >= idx[None, :])


def dense_rows(n=4096, d=64, br=64, bc=64):
    """Packed documents through the dense-mask path, beside the unmasked kernel."""
    plain = flash_forward(n, d, br, bc).total
    rows = []
    for docs in (1, 4, 16, 64):
        t = flash_forward(n, d, br, bc, mask=document_mask(n, docs))
        rows.append([f"{docs} causal document(s)", f"{(t.k + t.v) / MB:.1f}", f"{t.mask / MB:.2f}",
                     f"{t.total / MB:.1f}", f"{t.total / plain:.2f}x"])
    return rows


#: packed documents of uneven lengths (4096 tokens): a training batch packed end to end
DOCUMENTS = (1500, 900, 700, 500, 300, 96, 80, 20)
PACKED_HEADER = ["layout", "HBM MiB", "K/V MiB", "index/mask KiB", "tile pairs", "GFLOP (tensor cores)",
                 "FLOPs skipped"]


def packed_traffic(lengths=DOCUMENTS, d=64, br=64, bc=64) -> dict[str, Traffic]:
    """One head of causal self-attention over documents ``lengths``, three ways:

    * ``varlen``: ``flash_attention_varlen`` on the packed batch (``varlen_forward``);
    * ``dense bool mask``: ``flash_attention`` over all ``N = sum(lengths)`` tokens with the
      block-diagonal causal mask (``spec.varlen.packed_mask``, the block map skips empty tiles);
    * ``padding``: ``flash_attention`` on a ``(B, max_len)`` padded batch, causal with
      ``key_lengths``: every padded query row is loaded and computed;

    beside ``no mask`` (the unmasked kernel over all N tokens, the FLOPs baseline)."""
    from spec.varlen import packed_mask

    cu = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    n, longest = cu[-1], max(lengths)
    padding = Traffic()
    for length in lengths:
        padding += flash_forward(longest, d, br, bc, ("causal", "lengths"), key_len=length)
    return {
        "no mask": flash_forward(n, d, br, bc),
        "varlen": varlen_forward(lengths, lengths, d, br, bc, ("causal",)),
        "dense bool mask": flash_forward(n, d, br, bc, mask=packed_mask(cu, cu, n, n, causal=True)),
        "padding": padding,
    }


def packed_rows(lengths=DOCUMENTS, d=64, br=64, bc=64):
    traffic = packed_traffic(lengths, d, br, bc)
    baseline = traffic["no mask"].tiles
    return [[name, f"{t.total / MB:.2f}", f"{(t.k + t.v) / MB:.2f}", f"{t.mask / 1024:.1f}", t.tiles,
             f"{4 * br * bc * d * t.tiles / 1e9:.2f}", f"{1 - t.tiles / baseline:.0%}"]
            for name, t in traffic.items()]


DECODE_HEADER = ["KV cache", "keys", "splits S", "ideal MiB", "modelled MiB", "q MiB", "K/V MiB", "block table KiB",
                 "out + lse KiB", "partials MiB", "modelled / ideal"]
#: the decode shapes of the page: one new token of a GQA model (32 query heads on 8 KV heads, head
#: dim 128, fp16), a contiguous and a paged cache, one sequence and a batch of 8
DECODE_SHAPES = {"contiguous, B = 1": dict(), "paged (16), B = 1": dict(page_size=16),
                 "contiguous, B = 8": dict(batch=8)}
DECODE_KEYS = (4096, 32768, 131072)
#: MLA's decode shapes (issue 27): DeepSeek-V3's absorbed layout, 128 query heads on one latent head of
#: D = 576 (512 latent + 64 rope), v_cache = k_cache[..., :512], bf16, paged (64); and the same latent
#: with a separate 512-wide v cache (the layout the ideal of two tensors describes)
MLA_DECODE_SHAPES = {"absorbed (v in k), paged (64), B = 1": dict(page_size=64, heads_q=128, heads_kv=1, head_dim=576,
                                                                   head_dim_v=512, v_in_k=True),
                     "separate v cache, paged (64), B = 1": dict(page_size=64, heads_q=128, heads_kv=1, head_dim=576,
                                                                 head_dim_v=512)}


def decode_rows(num_sms: int = 132, shapes: dict | None = None):
    """``flash_attention_with_kvcache`` (the split-KV decode kernel and the merge of its partials)
    against the ideal bytes (``benchmarks.hbm_decode``), with the default number of splits for a
    GPU of ``num_sms`` SMs (H100: 132). ``shapes``: ``DECODE_SHAPES`` (default) or ``MLA_DECODE_SHAPES``."""
    from benchmarks.hbm_decode import DecodeShape, default_splits, ideal_bytes, model_bytes

    rows = []
    for label, kwargs in (DECODE_SHAPES if shapes is None else shapes).items():
        shape = DecodeShape(**kwargs)
        for keys in DECODE_KEYS:
            splits = default_splits(shape, keys, num_sms)
            model, ideal = model_bytes(shape, keys, splits), ideal_bytes(shape, keys)
            total = sum(model.values())
            rows.append([label, keys, splits, f"{ideal / MB:.2f}", f"{total / MB:.2f}", f"{model['q'] / MB:.3f}",
                         f"{model['kv'] / MB:.2f}", f"{model['block_table'] / 1024:.1f}", f"{model['out'] / 1024:.1f}",
                         f"{model['partials'] / MB:.3f}", f"{total / ideal:.4f}"])
    return rows


#: the MLA rows add what crosses HBM if the row tiles' re-reads hit L2 (benchmarks.hbm_decode.model_bytes)
MLA_DECODE_HEADER = DECODE_HEADER + ["row tiles", "K/V MiB, tiles share L2", "modelled / ideal, tiles share L2"]


def mla_decode_rows(num_sms: int = 132):
    """``decode_rows`` of ``MLA_DECODE_SHAPES``, each with its row tiles (programs per split and KV head:
    128 heads, 64 rows a program) and the model's K/V and total over the ideal when L2 serves the further
    row tiles' re-reads (``model_bytes(tiles_share_l2=True)``: an assumption, not measured)."""
    from benchmarks.hbm_decode import DecodeShape, default_splits, ideal_bytes, model_bytes, row_tiles

    rows = decode_rows(num_sms, MLA_DECODE_SHAPES)
    shapes = [DecodeShape(**kwargs) for kwargs in MLA_DECODE_SHAPES.values() for _ in DECODE_KEYS]
    for row, shape in zip(rows, shapes):
        keys = row[1]
        shared = model_bytes(shape, keys, default_splits(shape, keys, num_sms), tiles_share_l2=True)
        row += [row_tiles(shape), f"{shared['kv'] / MB:.2f}", f"{sum(shared.values()) / ideal_bytes(shape, keys):.4f}"]
    return rows


def markdown_page(plot: str, table=None, dense=None, packed=None, decode=None) -> str:
    """The docs page; ``table`` / ``dense`` / ``packed`` / ``decode``: rows already computed by
    ``table_rows`` / ``dense_rows`` / ``packed_rows`` / ``decode_rows`` (computed here when not given)."""
    table = table_rows() if table is None else table
    dense = dense_rows() if dense is None else dense
    packed = packed_rows() if packed is None else packed
    decode = decode_rows() if decode is None else decode
    return f"""# HBM-traffic model

<!-- generated by `python -m benchmarks.hbm`; do not edit by hand -->

How many bytes the generated forward kernel moves between HBM and the chip, counted from
the tiling alone (`benchmarks/hbm.py`), beside standard attention, which materialises the
`N × N` matrices `S` and `P` in HBM. This is FlashAttention's Theorem 2 made exact for
flashproof's tiling; it is a model, not a measurement.

## The model

The forward kernel runs FlashAttention-2's loop order: one program per query tile of
`B_r` rows, looping over key tiles of `B_c` keys. Per (batch, head):

| tensor | bytes | why |
|---|---|---|
| Q | `N_Q · D · b` | each query tile is loaded once and stays on chip |
| K, V | `Σ_tiles keys_visited · D · b` each | re-read by every query tile that visits them |
| O | `N_Q · D · b` | written once, after the single deferred normalisation |
| lse | `N_Q · 4` | fp32, written once (the backward pass reads it) |

`b` is the element size (2 for fp16/bf16). A query tile visits the key tiles from the one
holding `kv_start` to the one holding `kv_end − 1`, where `kv_start`, `kv_end` are the
classifier's terms (`spec.masks.tile_bounds`) at the tile's corner rows; tiles the
classifier skips read nothing, and keys past `N_K` are masked loads. Without a mask every
query tile reads all of K and V, so the K/V traffic is `2 · N_K · D · b · ⌈N_Q / B_r⌉`:
with `B_r ∝ M / d` for on-chip memory `M`, that is Theorem 2's `Θ(N² d² / M)`. A causal
mask skips the tiles above the diagonal and roughly halves it.

Standard attention (the paper's Algorithm 0): read Q, K; write `S`; read `S`; write `P`;
read `P`, V; write O, i.e. `(2 N_Q + 2 N_K) D b + 4 N_Q N_K b`: `Θ(N d + N²)`.

The test `tests/test_hbm.py` checks the closed form, byte for byte, against the traffic
the float64 reference counts as it runs its tiled loop
(`spec.reference.online_attention(..., order="fa2", stats=...)`, which asks
`spec.masks.classify_tile` about each tile), for several masks, alignments, per-batch key
lengths and sequence lengths that are not multiples of the block.

What the model leaves out: L2 hits (query tiles of one head run at the same time, so
many K/V re-reads are served by L2 and real DRAM traffic is lower), and the extra passes
of an eager PyTorch implementation (scaling and masking `S` are further `N²` round trips),
which make standard attention worse than Algorithm 0. The structured mask kinds (causal,
window, key lengths) cost no traffic: they are arithmetic on indices. A dense boolean mask
costs one block-map byte per visited tile and its own bytes (one per element, `torch.bool`)
in the tiles it makes partial; tiles it empties load no K or V (see the table below). The
block map itself is built once per mask (one pass over its `N_Q · N_K` bytes) and cached.

## Plots

![HBM traffic of flashproof's forward kernel and of standard attention](../assets/perf/{plot})

Left: traffic against sequence length. Both grow as `N²` for long sequences, but the
tiled kernel's constant is `2 d / B_r` (K and V re-read once per query tile) against
standard attention's `4` (S and P written and read), so the gap is set by the tile size
and doubles again with a causal mask. Right: traffic against the query tile height `B_r`
at `N = 4096, D = 64`: it falls as `1 / B_r`, the trend of FlashAttention's Figure 2
(more on-chip memory per tile, fewer HBM accesses); `B_c` changes only how finely the
causal diagonal is cut.

## Numbers (B_r = B_c = 64, fp16/bf16, one batch element and head)

{markdown_table(TABLE_HEADER, table)}

### A dense mask: packed documents (N = 4096, D = 64, B_r = B_c = 64)

Documents of equal length, causal inside, passed as a dense boolean `mask` (as
FlexAttention's document masking would be): the block map skips the tiles between
documents, so K/V traffic falls with the number of documents, and only the tiles cut by a
document boundary or the diagonal read their mask bytes.

{markdown_table(DENSE_HEADER, dense)}

### Packed documents three ways: varlen, a dense mask, padding (D = 64, B_r = B_c = 64)

Eight causal documents of {", ".join(map(str, DOCUMENTS))} tokens ({sum(DOCUMENTS)} in all), one head:
`flash_attention_varlen` on the packed batch (each segment is the dense kernel on its slice,
plus 16 bytes of `cu_seqlens` per program); `flash_attention` over all tokens with the
block-diagonal causal mask (`spec.varlen.packed_mask`: tiles that straddle two documents are
loaded and partially masked); and a padded `(8, {max(DOCUMENTS)})` batch with `key_lengths`
(every padded query row is loaded and computed). "FLOPs skipped" counts (query tile, key tile)
pairs against the unmasked kernel over all tokens, at `4 · B_r · B_c · D` tensor-core FLOPs per
pair. See [packed sequences](../packed.md).

{markdown_table(PACKED_HEADER, packed)}

### Decode: a KV cache, split-KV and the combine (`benchmarks/hbm_decode.py`)

`flash_attention_with_kvcache` for one new token per sequence, 32 query heads on 8 KV heads,
head dim 128, fp16. **Ideal**: what any decode kernel must move: K and V of the valid keys once
per KV head, q read once and out written once. **Modelled**: what the generated kernels request
with `S` splits (`default_num_splits` for an H100's 132 SMs): every split program reads its KV
head's query rows (q is read `S` times) and its slice of K and V once (claim `paged_kv_reads`:
every valid key exactly once, masked lanes past `cache_seqlens` move nothing); a paged cache adds
one int32 of `block_table` per page per KV head; with `S > 1` each split writes a fp32 partial
`(o, lse)` per query row, which the merge kernel (`_merge_states`, the combine) reads back once
before writing out and lse. The K/V term is the ideal one exactly, so the overhead is the q
re-reads, the partials and the block table.

{markdown_table(DECODE_HEADER, decode)}

MLA's absorbed decode (DeepSeek-V3: 128 query heads on one latent head, D = 576, D_v = 512, bf16,
paged 64; [MLA](../mla.md)). With `v_cache = k_cache[..., :512]` V lies inside K, so the ideal moves
each latent row once, and so does each decode program: it loads the K tile (512 + 64 columns, the head
dim split at D_v) and uses its first 512 columns as the V tile (`V_IS_K`, claim `decode_addresses`).
But the 128 query heads are two programs of `B_r = 64` rows (the grid's row tiles), each reading its
split's latent rows, so the kernels *request* each latent row twice ("modelled": 1.94-2.07x the ideal).
One program of 128 rows would request it once, but does not fit: its fp32 output tile alone, 128 x 512,
is 256 KB, an SM's whole register file. What crosses HBM depends
on L2: the two row tiles of a split are adjacent programs (the grid's axis 0, `spec.launch.decode_launch`),
launched together and streaming the same latent rows at the same pace, so the second tile's reads can hit
the lines the first brought in. If L2 serves all of them, HBM moves each latent row once ("tiles share
L2": 1.00-1.07x the ideal, the rest the split heuristic's: 128 query rows write and re-read fp32
partials of 512 columns per split). Which of the two an H100 achieves is **not measured** here (an
`ncu` DRAM-bytes count or a 128-head vs 64-head timing would tell). Beside it, the same shapes with a
separate v cache, whose ideal reads both:

{markdown_table(MLA_DECODE_HEADER, mla_decode_rows())}

For D = 128 and `B_r = 64` the tiled kernel's K/V traffic (`2 · N² · 128 / 64 · b`)
matches standard attention's `S`/`P` traffic: without causal skipping the saving then comes
from L2 reuse and from not running the extra passes, and a taller query tile
(`B_r = 128`) halves it. This is why the block configuration matters for head dim 128.

Regenerate the plots and this page with `python -m benchmarks.hbm`.
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.hbm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-docs", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    table, dense, packed, decode = table_rows(), dense_rows(), packed_rows(), decode_rows()
    print(text_table(TABLE_HEADER, table))
    print(text_table(DENSE_HEADER, dense))
    print(text_table(PACKED_HEADER, packed))
    print(text_table(DECODE_HEADER, decode))
    if not args.no_docs:
        png, _svg = _plots()
        path = write_text(DOCS_PERF / "hbm.md", markdown_page(png, table, dense, packed, decode))
        print(f"wrote {path} and docs/assets/perf/hbm_traffic.{{png,svg}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
