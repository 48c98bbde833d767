"""The accepted input range: one list of what the claims assume about their inputs.

Every claim is proved under assumptions (a positive scale, integer ranges, an int32 index
width, ...). Each one is written here once, with how the runtime honours it:

* ``reject``: an input outside it raises an error that names the assumption's limit;
* ``rewrite: <claim>``: an input outside it is first normalised by a rewrite that the named
  claim proves equivalent (``python -m spec`` lists it), so the kernels only see inputs inside;
* ``clamp: ...``: normalised in a way described by the enforcement text itself.

``generator.runtime.checks`` reads the limits from ``ASSUMPTIONS`` (never retypes them) and
``tests/test_reliability.py`` walks the dict, asserting that an input just outside each
assumption is rejected or normalised. Extend it additively: new names, new fields with defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Assumption:
    name: str
    statement: str  # one line: what the claims assume
    enforcement: str  # "reject" or "rewrite: <claim id>" (or "clamp: <how>")
    limit: Any = None  # the value the runtime checks read (a bound, a tuple of names), if any


#: the largest int32: the kernels compute tile bounds and in-head element offsets in int32
INT32_MAX = 2**31 - 1

#: ``return_dropout_mask=True`` writes one byte per (b, h, i, j): at most this many elements (the mask is
#: for small problems: tests, inspection); a usability limit, not an assumption of a claim
#: (``generator.runtime.checks.check_dropout`` refuses a larger mask)
DROPOUT_MASK_MAX = 2**28

ASSUMPTIONS: dict[str, Assumption] = {a.name: a for a in (
    Assumption("dtypes", "q, k, v (and softmax's x) are float16, bfloat16 or float32, one dtype",
               "reject", ("float16", "bfloat16", "float32")),
    Assumption("fp8_descales", "FP8 inputs (issue 30): k, v in one of float8_e4m3fn / float8_e5m2, q in that "
               "format or float16/bfloat16; q_descale, k_descale, v_descale float32 (B, Hkv), finite and > 0 "
               "(claim fp8_descale's positive descales)", "reject: the dtypes and shapes always; the descales' "
               "values with the opt-in value checks (FLASHPROOF_CHECK_VALUES=1: one host sync per eager call)"),
    Assumption("head_dim_max", "1 <= head_dim <= 256 for q/k's head dim D and for v's D_v, which may differ "
               "(MLA), on the training paths (the K/V tiles of a program fit on chip)", "reject", 256),
    Assumption("decode_head_dim_max", "flash_attention_with_kvcache: 1 <= D <= 576 and 1 <= D_v <= 512 (the "
               "absorbed MLA decode: 512 latent + 64 rope columns, v the first 512; the decode kernel holds "
               "a few query rows, not a B_r x D tile)", "reject", (576, 512)),
    Assumption("gqa_divides", "the query heads are a multiple of the key/value heads", "reject"),
    Assumption("scale_finite", "the softmax scale s is a finite real number", "reject"),
    Assumption("scale_positive",
               "the kernels' running max m = max(m, s·rowmax(qk)) is the max of the scaled logits only "
               "for s > 0; s <= 0 is rewritten to s' = |s| > 0 with q' = sign(s)·q (s = 0: q' = 0, s' = 1)",
               "rewrite: scale_sign_rewrite"),
    Assumption("key_len_range", "0 <= key_lengths[b] <= N_k for every batch b",
               "clamp: each length is clamped to [0, N_k] on the device, every call (no host sync: CUDA-graph "
               "capturable); reject with the opt-in value checks (FLASHPROOF_CHECK_VALUES=1: one host sync "
               "per eager call)"),
    Assumption("window_nonneg", "window = (left, right) with left, right >= 0 integers", "reject"),
    Assumption("window_bounded",
               "each window side is <= N_q + N_k (|j - (i + shift)| < N_q + N_k for every query i and key j), "
               "so the int32 tile bounds cannot overflow; a wider side is clamped to N_q + N_k",
               "rewrite: window_clamp"),
    Assumption("seq_len_int32",
               "N_q + N_k <= 2^29: every int32 tile-bound expression (|.| <= 2(N_q + N_k) + 2·B_r) fits in int32",
               "reject", 2**29),
    Assumption("index_int32",
               "inside one (batch, head) slice every element offset of q, k, v, out, mask and grad_out, "
               "(N - 1)·|stride_N| + (D - 1)·|stride_D|, is <= 2^31 - 1 (int32 pointer arithmetic), D that "
               "tensor's own head dim (q/k's D for q, k; v's D_v for v, out, grad_out)",
               "reject", INT32_MAX),
    # --- added by the verification issue (#12): facts the z3 int32 proofs also rely on
    Assumption("block_sizes", "B_r, B_c and the backward's row / key steps are powers of two, 16 <= B <= 256 "
               "(compile-time constants: tl.arange needs powers of two)",
               "reject: generator.variants.BlockConfig accepts only ALLOWED_BLOCKS", (16, 32, 64, 128, 256)),
    # --- attention dropout (issue 29)
    Assumption("dropout_p_range", "the dropout probability p is a real number with 0 <= p < 1 (p = 1 drops "
               "every entry and 1/(1 - p) is infinite)", "reject", 1.0),
    Assumption("dropout_counter",
               "B·Hq·N_q·N_k <= 2^62 (a packed batch: Hq·total_q·total_k), and the call's Philox offset is "
               "drawn below 2^62, so every dropout counter rng_offset + ((b·H + h)·N_q + i)·N_k + j is an "
               "int64 without wrap-around (claim dropout_mask_same)", "reject", 2**62),
    Assumption("alignment_shift", "shift = 0 (top_left) or N_k - N_q (bottom_right)",
               "reject: any other alignment; spec.masks.alignment_shift is the only source of shift"),
    # --- added by the contract issue (#23): the entry points other than flash_attention
    Assumption("cache_len_range", "0 <= cache_seqlens[b] <= the cache's capacity in keys (N_cache, or "
               "max_pages x page_size for a paged cache) for every batch b",
               "clamp: each length is clamped to [0, capacity] on the device, every call (no host sync: "
               "CUDA-graph capturable); reject with the opt-in value checks (FLASHPROOF_CHECK_VALUES=1)"),
    Assumption("page_ids_range", "every page id a sequence reads (block_table[b, p] for p < "
               "ceil(cache_seqlens[b] / page_size)) lies in [0, num_pages); the rest of the row is never read",
               "clamp: each id is clamped to [0, num_pages - 1] on the device, every call (no read outside "
               "the cache, no host sync); reject with the opt-in value checks (FLASHPROOF_CHECK_VALUES=1)"),
    Assumption("page_sizes", "a paged cache's page_size is a power of two from 16 to 512 (a whole number of "
               "key tiles per page)", "reject", (16, 32, 64, 128, 256, 512)),
    Assumption("grid_axes", "B <= 65535 and Hq <= 65535 (a packed batch: its segments for B): CUDA's grid axes 2 "
               "and 1 hold the batch and the heads (spec.launch.GRID_AXIS_MAX, claim launch_grid); "
               "flash_attention_with_kvcache also ceil(GROUP·N_q / 16) x splits <= 2^31 - 1 (its axis 0: row tiles x "
               "splits)", "reject", 65535),
    Assumption("num_splits_max", "0 <= num_splits <= 64 (0: the heuristic)", "reject", 64),
    Assumption("merge_head_dim_max", "merge_state(s)' head dim is at most 1024 (one row of o per program "
               "lane block)", "reject", 1024),
    Assumption("mask_args_int32",
               "every mask_args value v has |v| <= 2^30, so that the printed predicate and tile classifier "
               "(a difference of two parameters, or a parameter minus a position < 2^29 minus a block <= 256) "
               "cannot overflow int32",
               "reject (eager); clamp: under torch.compile each value is clamped to [-2^30, 2^30] on the "
               "device", 2**30),
)}


@dataclass(frozen=True)
class Hypothesis:
    """A property of the hardware a claim takes from its documentation (or a measurement) without proving it:
    what is assumed, where it is stated, and what checks it. A claim names the ones it uses (``@claim(...,
    hypotheses=...)``) and its scope text names them too; docs/verification.md lists each under "What remains
    outside the proofs" (tests/test_spec_cli.py checks both)."""
    name: str
    statement: str  # what the claim assumes, in one line
    source: str  # the documentation it is read from, quoted where the wording matters
    checked_by: str  # what tests it (never a proof)


#: the hardware hypotheses of the claims (not input ranges: nothing for the runtime to check)
HYPOTHESES: dict[str, Hypothesis] = {h.name: h for h in (
    Hypothesis("tma_out_of_bounds",
               "a TMA tiled load (cp.async.bulk.tensor through a descriptor made by cuTensorMapEncodeTiled: Triton's "
               "TensorDescriptor with padding 'zero', oobFill CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) gives 0 for every "
               "element of its box whose index lies outside the descriptor's shape in some dimension, and a TMA store "
               "of a box writes the elements inside the shape only (the others are not written)",
               "CUDA Driver API, Tensor Map Object Management, cuTensorMapEncodeTiled, parameter oobFill: "
               "\"Indicate whether zero or special NaN constant must be used to fill out-of-bound elements\" "
               "(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zero; _NAN_REQUEST_ZERO_FMA: the NaN); PTX ISA, section "
               "Tensors (bounding box and out-of-bound access of cp.async.bulk.tensor): out-of-bound elements of "
               "the box are filled on a load and not written on a store",
               "tests/test_tma.py: on CPU Triton's interpreter, which emulates the descriptors (zero-filled reads, "
               "clipped writes); the hardware only with FLASHPROOF_TEST_DEVICE=cuda on an sm_90 GPU"),
    Hypothesis("fp8_mma_error",
               "one sm_90 fp8 wgmma instruction (FP8_MMA_K = 32 exact products) from a zero accumulator returns their "
               "sum within FP8_MMA_ERR·Σ|a_i b_i| (spec.error_bound: 2^-7, twice the proved error of an accumulator "
               "with 13 fraction bits that truncates)",
               "no NVIDIA document states the fp8 MMA accumulator's precision; the 13-bit (e8m13) accumulator is "
               "the one reported for H100 by measurement (docs/fp8.md)",
               "benchmarks.fp8_errors on an sm_90 GPU (the measured error against forward_bound(..., fp8_mma=True))"),
)}


def limit(name: str):
    """The limit of assumption ``name`` (what the runtime compares against)."""
    return ASSUMPTIONS[name].limit
