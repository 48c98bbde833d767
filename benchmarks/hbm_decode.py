"""HBM model of KV-cache decoding: the ideal bytes and what the generated kernels move.

**Ideal** (what any decode kernel must move): K and V of the ``cache_seqlens[b]`` valid keys
once per KV head, the new tokens' q read once and out written once. MLA's absorbed layout
(``v_in_k``: ``v_cache = k_cache[..., :D_v]``, issue 27) holds V inside K: ideally each latent row
crosses HBM once.

**Modelled** (``flash_attention_with_kvcache`` with ``S`` splits, the generated decode and
merge kernels): each split program reads its KV head's query rows (all ``Hq / Hkv`` heads x
``N_q`` tokens: q is read ``S`` times) and the K/V tiles of its split once (masked lanes past
``cache_seqlens[b]`` move nothing; claim ``paged_kv_reads``: every valid key exactly once);
a paged cache adds one int32 of ``block_table`` per page. When a KV head has more query rows
than one program holds (``Hq / Hkv x N_q > MAX_BLOCK_M``: a prefill chunk), each tile of
``MAX_BLOCK_M`` rows is its own program and reads the split's K/V and pages again, as each query
tile of the dense forward reads all its keys (the decode kernel skips no causal tile). With
``S > 1`` every split writes a fp32 partial ``(o, lse)`` per query row and the merge kernel reads
them all back once and writes out (in q's dtype) and lse; with ``S = 1`` the split writes out and
lse directly. ``S`` is ``default_num_splits`` unless given. In the absorbed layout the kernel loads
the K tile (``D`` columns, split as ``D_v`` + the tail) and uses its first ``D_v`` columns as the V
tile (``V_IS_K``): each latent row is requested once per program; 128 heads are two programs of 64
rows (row tiles, adjacent on the grid's axis 0), so twice, and once from HBM if L2 serves the second
tile's reads (``model_bytes(tiles_share_l2=True)``: an assumption, not measured).

**Append** (``k=``, ``v=``, ``rotary_cos=``: the append kernel before the attention): ``k``,
``v`` read and written into the cache, ``q`` read and its rotated copy written (the attention
reads the copy in place of q), and the table rows of each new key's and query token's heads.

    python -m benchmarks.hbm_decode             # the table at 4k ... 128k keys
    python -m benchmarks.hbm_decode --serving   # the serving page's rows (docs/serving.md)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.common import markdown_table, text_table
from generator.runtime.decode import DECODE_BLOCK, default_num_splits

MAX_BLOCK_M = DECODE_BLOCK[0]  # most query rows per decode program (the decode kernel's B_r)

FP32 = 4
INDEX_BYTES = 4  # block_table entries are int32


@dataclass(frozen=True)
class DecodeShape:
    batch: int = 1
    n_q: int = 1
    heads_q: int = 32
    heads_kv: int = 8
    head_dim: int = 128
    elem: int = 2  # fp16 / bf16
    page_size: int | None = None  # None: a contiguous cache
    head_dim_v: int | None = None  # v's head dim D_v (None: head_dim; MLA: its own)
    v_in_k: bool = False  # the absorbed MLA layout: v_cache = k_cache[..., :D_v], one tensor in HBM

    @property
    def dv(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v


def ideal_bytes(shape: DecodeShape, keys: int) -> int:
    """K and V of ``keys`` valid keys once per KV head (V inside K: K alone), plus q read and out written once."""
    s = shape
    kv = keys * s.heads_kv * (s.head_dim + (0 if s.v_in_k else s.dv)) * s.elem
    q_out = s.n_q * s.heads_q * (s.head_dim + s.dv) * s.elem
    return s.batch * (kv + q_out)


def row_tiles(shape: DecodeShape) -> int:
    """Programs per (KV head, split): the KV head's ``Hq / Hkv x N_q`` query rows in tiles of at most
    ``MAX_BLOCK_M`` rows (``block_m`` of the generated decode module); 1 for a decode step."""
    rows = shape.n_q * shape.heads_q // shape.heads_kv
    return -(-rows // min(rows, MAX_BLOCK_M))


def model_bytes(shape: DecodeShape, keys: int, splits: int, tiles_share_l2: bool = False) -> dict[str, int]:
    """Bytes the kernels request per tensor, for every sequence holding ``keys`` valid keys.

    ``tiles_share_l2``: what crosses HBM if L2 serves every re-read of a (split, KV head)'s K/V rows and
    pages by its further row tiles (an assumption, not a measurement): the row tiles are adjacent programs
    (the grid's axis 0, ``spec.launch.decode_launch``) that start together and stream the same rows at the
    same pace, so the second tile's reads can hit the lines the first brought into L2. Then K/V and the
    block table cross HBM once per (split, KV head), as the ideal's; the default counts every request."""
    s = shape
    rows = s.n_q * s.heads_q  # query rows of one sequence (all KV heads)
    # each row tile's program requests the split's K/V (and pages) again
    tiles = 1 if tiles_share_l2 else row_tiles(s)
    out = {
        "q": splits * rows * s.head_dim * s.elem,  # each split program reads its KV head's rows
        # a K tile and a V tile per key tile; V_IS_K (v in k): the K tile serves as V, no V load
        "kv": tiles * keys * s.heads_kv * (s.head_dim + (0 if s.v_in_k else s.dv)) * s.elem,
        "block_table": tiles * (-(-keys // s.page_size) * INDEX_BYTES * s.heads_kv) if s.page_size else 0,
        "out": rows * s.dv * s.elem + rows * FP32,  # out and lse
        "partials": 2 * splits * rows * (s.dv + 1) * FP32 if splits > 1 else 0,  # written + read back
    }
    return {k: s.batch * v for k, v in out.items()}


def default_splits(shape: DecodeShape, keys: int, num_sms: int) -> int:
    rows = shape.n_q * shape.heads_q // shape.heads_kv  # query rows of one KV head
    per_program = min(rows, MAX_BLOCK_M)
    programs = shape.batch * shape.heads_kv * -(-rows // per_program)
    return default_num_splits(programs, keys, num_sms, per_program)


def table(shape: DecodeShape, lengths=(4096, 16384, 65536, 131072), num_sms: int = 132) -> list[dict]:
    """One row per cache length: splits, ideal and modelled MB, and their ratio."""
    rows = []
    for keys in lengths:
        splits = default_splits(shape, keys, num_sms)
        model = sum(model_bytes(shape, keys, splits).values())
        ideal = ideal_bytes(shape, keys)
        rows.append({"keys": keys, "splits": splits, "ideal MB": round(ideal / 1e6, 3),
                     "model MB": round(model / 1e6, 3), "model / ideal": round(model / ideal, 4)})
    return rows


def append_bytes(shape: DecodeShape, n_new: int, rotary_dim: int) -> dict[str, int]:
    """Bytes the append kernel moves for ``n_new`` new keys per sequence rotated over ``rotary_dim``
    lanes: k and v read and written into the cache, q read and its rotated copy written, and each
    rotated row's cos and sin entries (``rotary_dim / 2`` each: ``rotary_dim`` elements a row)."""
    s = shape
    return {k: s.batch * v for k, v in {
        "kv_append": 2 * n_new * s.heads_kv * (s.head_dim + s.dv) * s.elem,
        "q_rotation": 2 * s.n_q * s.heads_q * s.head_dim * s.elem,
        "tables": (n_new * s.heads_kv + s.n_q * s.heads_q) * rotary_dim * s.elem,
    }.items()}


#: the serving page's steps: Llama-3-8B's heads (32 on 8 KV heads, D = rotary_dim = 128), fp16,
#: 4096 keys cached before the step; (label, shape, new tokens per sequence)
SERVING_STEPS = (
    ("decode, B = 8, contiguous", DecodeShape(batch=8), 1),
    ("decode, B = 8, pages of 256", DecodeShape(batch=8, page_size=256), 1),
    ("chunked prefill, B = 1, chunk 512, pages of 256", DecodeShape(batch=1, n_q=512, page_size=256), 512),
)
SERVING_CACHED = 4096
SERVING_ROTARY_DIM = 128


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.3f}"


def serving_rows(num_sms: int = 132) -> list[list]:
    """One row per step of ``SERVING_STEPS``: the attention over the cached and appended keys (its
    row tiles and splits, ideal and modelled MiB, and the K/V part of the model), then the append's
    MiB and its share of the step."""
    rows = []
    for label, shape, n_new in SERVING_STEPS:
        keys = SERVING_CACHED + n_new
        splits = default_splits(shape, keys, num_sms)
        attention = model_bytes(shape, keys, splits)
        append = append_bytes(shape, n_new, SERVING_ROTARY_DIM)
        total = sum(attention.values())
        rows.append([label, keys, row_tiles(shape), splits, _mib(ideal_bytes(shape, keys)), _mib(total),
                     _mib(attention["kv"]), _mib(append["kv_append"]), _mib(append["q_rotation"]),
                     _mib(append["tables"]), f"{100 * sum(append.values()) / total:.2f} %"])
    return rows


SERVING_HEADER = ["step", "keys attended", "row tiles", "splits S", "attention ideal MiB", "attention modelled MiB",
                  "of which K/V MiB", "append k, v MiB", "q rotation MiB", "cos/sin MiB", "append / attention"]


def serving_table(num_sms: int = 132) -> str:
    """docs/serving.md's HBM table (tests/test_hbm_decode.py checks the page holds it)."""
    return markdown_table(SERVING_HEADER, serving_rows(num_sms))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hbm_decode", description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--num-sms", type=int, default=132, help="SMs of the GPU the heuristic fills (H100: 132)")
    p.add_argument("--serving", action="store_true", help="the serving page's rows (append, chunked prefill)")
    args = p.parse_args(argv)
    if args.serving:
        print(serving_table(args.num_sms))
        return 0
    shape = DecodeShape(batch=args.batch, page_size=args.page_size)
    rows = table(shape, num_sms=args.num_sms)
    print(text_table(list(rows[0]), [list(r.values()) for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
