"""The input contract of every public entry point, declared once.

Each argument of ``flash_attention``, ``flash_attention_varlen``, ``flash_attention_with_kvcache``,
``merge_state``, ``merge_states``, ``ring_attention`` and ``softmax`` is one ``Arg``: its dtype,
its shape and the relations to the others, its stride policy, its value range and how that range
is kept (an eager check; under ``torch.compile`` a device-side clamp, since a traced graph cannot
sync on data) and the proven rewrite that normalises it. The limits are read from
``spec.assumptions`` (the inputs the claims are proved for), never typed here; the assumptions
an argument answers to are listed by name (``Arg.assumptions``), and the error that enforces
each one cites it in brackets.

What reads this declaration:

* the stride policy: ``unit_stride(entry, name, t)`` gives a small tensor the layout its kernel
  reads (``COPIED`` arguments are copied to unit stride, a few bytes; ``ANY`` ones are passed as
  they are, the kernel indexes them through their strides), so no entry point decides it itself;
* the README's "Input contract" section: ``markdown()``, kept in step by
  ``tests/test_contract.py`` (``python -m generator.runtime.contract --write`` rewrites it);
* the tests: every public signature has exactly the arguments declared here, every named
  assumption exists, and the layout property draws a strided view of every tensor argument.

The checks themselves live in one module, ``generator.runtime.checks``: each entry point calls
its functions, none keeps a check of its own.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from spec.assumptions import ASSUMPTIONS, limit

#: the kernel reads the tensor through its strides (permuted, sliced, expanded views: no copy)
ANY = "any (read through the strides, no copy)"
#: a small tensor the kernel reads at unit stride: a view is copied (``unit_stride``)
COPIED = "any (copied to unit stride when it is not: a few bytes)"
#: rows the kernel reads with unit stride along the last dim: copied when they are not
ROWS = "any (rows copied to unit stride when they are not)"
#: not a tensor
NONE = "—"


@dataclass(frozen=True)
class Arg:
    name: str
    dtype: str  # what it may be (a tensor's dtypes, or a Python type)
    shape: str  # its shape and the relations to the other arguments
    strides: str  # ANY, COPIED, ROWS or NONE
    values: str  # the accepted range (eager check / under torch.compile)
    assumptions: tuple[str, ...] = ()  # the spec.assumptions it answers to
    rewrite: str = ""  # the normalisation (a proven rewrite names its claim)


def _dtypes() -> str:
    return "/".join({"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[d] for d in limit("dtypes"))


def _pow2s(name: str) -> str:
    sizes = limit(name)
    return f"{sizes[0]}..{sizes[-1]}"


# ----------------------------------------------------------------------------------
# Arguments shared by several entry points (declared once, used by each)
# ----------------------------------------------------------------------------------
SCALE = Arg("scale", "a finite real (numpy scalars too; not bool) or None", "—", NONE,
            "finite; None gives 1/sqrt(D)", ("scale_finite", "scale_positive"),
            "s ≤ 0 → s' = |s|, q' = sign(s)·q (s = 0: q' = 0, s' = 1), claim `scale_sign_rewrite`")
WINDOW = Arg("window", "None or a pair of ints (numpy ints too)", "(left, right)", NONE,
             "left, right ≥ 0: keys with −left ≤ j − (i + shift) ≤ right",
             ("window_nonneg", "window_bounded"),
             "each side clamped to N_q + N_k (claim `window_clamp`: the same keys)")
CAUSAL = Arg("causal", "bool", "—", NONE, "True or False (not 1)")
RETURN_LSE = Arg("return_lse", "bool", "—", NONE, "True or False (not 1)")
SOFTCAP = Arg("softcap", "None or a finite real > 0", "—", NONE,
              "0 < softcap < inf; refused with 0 < |scale| < 2^-64 (c/scale overflows fp32)", ("score_mod_scale",))
ALIBI = Arg("alibi_slopes", "None or a float32 tensor", "(Hq,) or (B, Hq)", ANY,
            "any finite slopes; no gradient; refused with 0 < |scale| < 2^-64 (slope/scale overflows fp32)",
            ("score_mod_scale",))
SINKS = Arg("sinks", "None or a float32 tensor", "(Hq,)", COPIED, "any finite logits; differentiable where the "
            "entry point is")

#: attention dropout (issue 29): FlashAttention 2's, the keep mask one printed Philox term
DROPOUT_P = Arg("dropout_p", "a real (numpy scalars too; not bool)", "—", NONE,
                "0 ≤ p < 1 (p = 1 drops every weight); default 0.0: compiled out, bitwise no dropout; seed and "
                "offset drawn from torch's generator for the device", ("dropout_p_range", "dropout_counter"))
RETURN_DROPOUT_MASK = Arg("return_dropout_mask", "bool", "—", NONE,
                          "True or False (not 1); True appends the bool keep mask the kernels drew (at most 2^28 "
                          "elements: small problems)")


#: the FP8 forward (issue 30): FlashAttention 3's descales and the output dtype
FP8_ARGS = tuple(Arg(name, "None or a float32 tensor", "(B, Hkv) (varlen: B the segments)", COPIED,
                     "finite and > 0: eager check (one sync); None: 1; with FP8 k, v only", ("fp8_descales",))
                 for name in ("q_descale", "k_descale", "v_descale")) + (
    Arg("out_dtype", "None or torch.bfloat16 / float16 / float32", "—", NONE,
        "FP8 inputs only; None: bf16 (q's dtype with an fp16/bf16 q)"),)


def _block(default: str) -> Arg:
    return Arg("block", "a pair of ints (numpy ints too)" + (' or "auto"' if "auto" in default else ""),
               "(B_r, B_c)", NONE, f"a generated block ({_pow2s('block_sizes')}, powers of two; the error names the "
               f"command that emits a missing one); default {default}", ("block_sizes",))


def _dense_qkv(q_shape: str, kv_shape: str, strides: str = ANY, fp8: bool = False) -> tuple[Arg, ...]:
    qkv = ("dtypes", "head_dim_max", "gqa_divides", "seq_len_int32", "index_int32") + (("fp8_descales",) if fp8 else ())
    fp8_rule = "; or FP8: k, v float8_e4m3fn/e5m2, q in that dtype or fp16/bf16 (no backward)" if fp8 else ""
    return (Arg("q", _dtypes() + ", one dtype for q, k, v" + fp8_rule, q_shape + f", D in 1..{limit('head_dim_max')}",
                ANY, "any (keys past a length are never read)", qkv),
            Arg("k", "q's", kv_shape + ", Hq % Hkv = 0 (GQA)", strides, "any", qkv),
            Arg("v", "q's", "k's", strides, "any", qkv))


def entry_points() -> dict[str, tuple[Arg, ...]]:
    """The declaration, with the limits as ``spec.assumptions`` holds them now."""
    return {
        "flash_attention": _dense_qkv("(B, Hq, N_q, D)", "(B, Hkv, N_k, D)", fp8=True) + (
            CAUSAL,
            Arg("alignment", "str", "—", NONE, '"top_left" (shift 0) or "bottom_right" (shift N_k − N_q)',
                ("alignment_shift",)),
            WINDOW,
            Arg("key_lengths", "None or an int32/int64 tensor", "(B,)", COPIED,
                "0 ≤ key_lengths[b] ≤ N_k: eager check; under torch.compile clamped on the device",
                ("key_len_range",),
                "copied to a fresh int32 tensor"),
            Arg("mask", "None or a bool tensor", "broadcastable to (B, Hq, N_q, N_k)", ANY,
                "True = attend; edits in place are seen by the next call (nothing cached)", ("index_int32",)),
            SCALE, RETURN_LSE, _block('"auto"'),
            Arg("tma", 'bool or "auto"', "—", NONE,
                '"auto": TMA where the GPU has it; a layout TMA cannot read falls '
                "back with a TmaFallbackWarning"),
            SOFTCAP, ALIBI, SINKS,
            Arg("mask_mod", "None or a spec.masks.mask_mod", "—", NONE, "a predicate of the class (claim "
                "`mask_mod_sound`) with its kernels generated"),
            Arg("mask_args", "None or {name: int | integer tensor}", "int, (B,), or (B, N_q) / (B, N_k) per parameter",
                COPIED, f"|v| ≤ {limit('mask_args_int32')}: eager check; under torch.compile clamped on the device",
                ("mask_args_int32",), "packed into one fresh int32 (B, L) tensor"),
            DROPOUT_P, RETURN_DROPOUT_MASK, *FP8_ARGS,
        ),
        "flash_attention_varlen": _dense_qkv("(total_q, Hq, D)", "(total_k, Hkv, D)", fp8=True) + (
            Arg("cu_seqlens_q", "int32 tensor", "(B + 1,), B ≥ 1", COPIED,
                "from 0, non-decreasing, ending at total_q (read on the host, one sync, also under torch.compile); "
                "each segment's rows within int32 offsets", ("index_int32",)),
            Arg("cu_seqlens_k", "int32 tensor", "cu_seqlens_q's", COPIED, "as cu_seqlens_q, ending at total_k",
                ("index_int32",)),
            Arg("max_seqlen_q", "None or an int ≥ 0", "—", NONE,
                "None (computed) or ≥ the longest query segment"),
            Arg("max_seqlen_k", "None or an int ≥ 0", "—", NONE, "None (computed) or ≥ the longest key segment"),
            CAUSAL, WINDOW, SCALE, RETURN_LSE, _block('(64, 64); "auto" allowed'), SOFTCAP,
            Arg("alibi_slopes", "None or a float32 tensor", "(Hq,) or (B, Hq), B the segments", ANY, ALIBI.values,
                ALIBI.assumptions),
            SINKS, DROPOUT_P, RETURN_DROPOUT_MASK,
            Arg("batch_invariant", "bool", "—", NONE, "True or False (the packed kernels are batch invariant)"),
            Arg("block_table", "None or an int32 tensor", "(B, max_pages)", COPIED,
                "k, v then paged caches (num_pages, page_size 16..512, Hkv, D), cu_seqlens_k their key counts; "
                "forward only, no dropout", ("page_sizes", "page_ids_range")),
            *FP8_ARGS,
        ),
        "flash_attention_with_kvcache": (
            Arg("q", _dtypes() + ", one dtype for q and the cache", f"(B, N_q, Hq, D), D in 1..{limit('head_dim_max')}",
                ANY, "any", ("dtypes", "head_dim_max", "gqa_divides", "index_int32")),
            Arg("k_cache", "q's", "(B, N_cache, Hkv, D), or paged (num_pages, page_size, Hkv, D)", ANY,
                "any (slots past cache_seqlens[b] are never read)", ("gqa_divides", "page_sizes", "index_int32")),
            Arg("v_cache", "q's", "k_cache's", ANY, "any", ("index_int32",)),
            Arg("cache_seqlens", "an int (numpy ints too) or an int32/int64 tensor", "(B,)", COPIED,
                "0 ≤ cache_seqlens[b] ≤ capacity (N_cache, or max_pages·page_size), less N_new with k: eager "
                "check; under torch.compile clamped on the device", ("cache_len_range",),
                "copied to a fresh int32 tensor"),
            Arg("k", "None or the cache's dtype", "(B, N_new, Hkv, D)", ANY,
                "written in place at keys cache_seqlens[b] + t (rotated with rotary_cos), then attended"),
            Arg("v", "None or the cache's dtype", "k's", ANY, "written in place beside k (bit for bit)"),
            Arg("rotary_cos", "None or a float tensor", "(seqlen_ro ≥ capacity, rotary_dim / 2), rotary_dim ≤ D",
                ANY, "with k and v only; rows cache_seqlens[b] + t (claim `rotary_rotation`)"),
            Arg("rotary_sin", "rotary_cos's", "rotary_cos's", ANY, "as rotary_cos"),
            Arg("rotary_interleaved", "bool", "—", NONE, "True: GPT-J pairs (2f, 2f+1); False: GPT-NeoX halves"),
            Arg("cache_leftpad", "None or an int32/int64 tensor", "(B,)", COPIED,
                "0 ≤ cache_leftpad[b] ≤ cache_seqlens[b]: eager check; contiguous cache only",
                rewrite="copied to a fresh int32 tensor"),
            Arg("cache_batch_idx", "None or an int32/int64 tensor", "(B,)", COPIED,
                "distinct rows in [0, k_cache.shape[0]): eager check; contiguous cache only",
                rewrite="copied to a fresh int32 tensor"),
            Arg("block_table", "None or an int32 tensor", "(B, max_pages)", COPIED,
                "the pages a sequence reads in [0, num_pages) (the unused tail: anything): eager check; under "
                "torch.compile clamped on the device", ("page_ids_range",)),
            CAUSAL, Arg("window", WINDOW.dtype, WINDOW.shape, NONE, WINDOW.values, WINDOW.assumptions,
                        "each side clamped to N_q + capacity (claim `window_clamp`: the same keys)"),
            SCALE,
            Arg("num_splits", "an int (numpy ints too; not bool)", "—", NONE,
                f"0..{limit('num_splits_max')}; 0 picks enough splits to fill the GPU", ("num_splits_max",)),
            RETURN_LSE, SOFTCAP, ALIBI,
            Arg("sinks", SINKS.dtype, SINKS.shape, COPIED, "any finite logits (inference only: no gradient)"),
            Arg("batch_invariant", "bool", "—", NONE, "True: fixed 512-key splits, num_splits 0 "
                "(claim `batch_invariant_splits`)"),
        ),
        "merge_state": (
            Arg("o_a", _dtypes(), f"(..., D), D ≤ {limit('merge_head_dim_max')} (0 allowed: lse only)", ROWS,
                "normalised partial outputs", ("dtypes", "merge_head_dim_max")),
            Arg("lse_a", "float32", "o_a's without D", COPIED, "natural log; −inf for a part with no key"),
            Arg("o_b", "o_a's", "o_a's", ROWS, "as o_a"),
            Arg("lse_b", "float32", "lse_a's", COPIED, "as lse_a"),
        ),
        "merge_states": (
            Arg("o", _dtypes(), f"(S, ..., D), D ≤ {limit('merge_head_dim_max')} (0 allowed: lse only); S = 0: the "
                "identity", ROWS, "S normalised partial outputs", ("dtypes", "merge_head_dim_max")),
            Arg("lse", "float32", "o's without D", COPIED, "natural log; −inf for a part with no key"),
        ),
        "ring_attention": _dense_qkv("(B, Hq, N/P, D): this rank's shard", "(B, Hkv, N/P, D)",
                                     COPIED + "; sent around the ring") + (
            Arg("group", "None or a torch.distributed process group", "—", NONE,
                "every rank passes the same shapes and options (checked by one all_gather)"),
            CAUSAL, SCALE,
            Arg("layout", "str", "—", NONE, '"zigzag" (N divisible by 2P) or "contiguous" (by P)'),
            RETURN_LSE, _block('(64, 64); "auto" allowed'),
        ),
        "softmax": (
            Arg("x", _dtypes(), "any, rank ≥ 1", ROWS, "any; a row of only −inf gives zeros", ("dtypes",)),
            Arg("dim", "an int (numpy ints too)", "−x.dim() ≤ dim < x.dim()", NONE, "an empty dim gives an empty "
                "result"),
            _block("(64, 64)"),
        ),
    }


#: the declaration at import (``entry_points()`` re-reads the limits)
ENTRY_POINTS = entry_points()


def arg(entry: str, name: str) -> Arg:
    return next(a for a in ENTRY_POINTS[entry] if a.name == name)


def unit_stride(entry: str, name: str, t):
    """``t`` (argument ``name`` of ``entry``) in the layout its kernel reads, by the declared stride
    policy: a ``COPIED`` argument with unit stride (a copy of a strided view: a few bytes, once per call),
    any other as it is. ``None`` stays ``None``."""
    if t is None or (entry, name) not in _COPIED:
        return t
    return t.contiguous()


#: ``(entry point, argument)`` of every ``COPIED`` argument (a set lookup per call: the host path stays cheap)
_COPIED = frozenset((entry, a.name) for entry, args in ENTRY_POINTS.items() for a in args
                    if a.strides.startswith(COPIED))


# ----------------------------------------------------------------------------------
# The README's "Input contract" section
# ----------------------------------------------------------------------------------
BEGIN, END = "<!-- contract: generated by python -m generator.runtime.contract --write -->", "<!-- contract: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """One table per entry point: argument, dtype, shape, strides, accepted values and their
    enforcement, the normalisation, and the assumptions (``spec/assumptions.py``) it answers to."""
    out = []
    for entry, args in entry_points().items():
        out += [f"**`{entry}`**", "", "| argument | dtype | shape | strides | values | normalised | assumptions |",
                "|---|---|---|---|---|---|---|"]
        for a in args:
            named = ", ".join(f"`{n}`" for n in a.assumptions) or "—"
            out.append(f"| `{a.name}` | {_cell(a.dtype)} | {_cell(a.shape)} | {_cell(a.strides)} | "
                       f"{_cell(a.values)} | {_cell(a.rewrite) or '—'} | {named} |")
        out.append("")
    out += ["| assumption | statement | enforcement |", "|---|---|---|"]
    out += [f"| `{a.name}` | {_cell(a.statement)} | {_cell(a.enforcement)} |" for a in ASSUMPTIONS.values()]
    return "\n".join(out)


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_section(text: str) -> str | None:
    """The generated part of the README's "Input contract" section (None without the markers)."""
    found = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return None if found is None else found.group(1).rstrip("\n")


def write_readme(path: Path = README) -> None:
    text = path.read_text()
    if readme_section(text) is None:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} section")
    block = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    path.write_text(block.sub(lambda _: f"{BEGIN}\n{markdown()}\n{END}", text))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_readme()
    else:
        print(markdown())
