"""The input contract of every public entry point, declared once.

Each argument of ``flash_attention``, ``flash_attention_varlen``, ``flash_attention_with_kvcache``,
``merge_state``, ``merge_states``, ``ring_attention`` and ``softmax`` is one ``Arg``: its dtype,
its shape and the relations to the others, its stride policy, its value range and how that range
is kept (a device-side clamp, since a call that syncs on data cannot be captured in a CUDA graph;
the named error as an opt-in check) and the proven rewrite that normalises it. The limits are read from
``spec.assumptions`` (the inputs the claims are proved for), never typed here; the assumptions
an argument answers to are listed by name (``Arg.assumptions``), and the error that enforces
each one cites it in brackets.

What reads this declaration:

* the enforcement: every argument carries its ``rules`` (``checks.Rule``: the building blocks live
  in ``generator.runtime.checks``), and ``enforce(entry, arguments)`` runs them in three stages
  (what each argument is; its relations to the others, devices included; the values of its
  elements). Every entry point calls ``enforce`` first and goes on with the values it returns;
  none keeps a check of its own. The value rules never sync by default: each value is clamped
  into its range on the device (``keep_values``, the rule's ``clamp``), so a call is CUDA-graph
  capturable and no read leaves the tensors it indexes; their named errors are an opt-in
  (``checking_values()`` or ``FLASHPROOF_CHECK_VALUES=1``: one host sync per call, eager only).
  The device rule of each
  tensor argument is derived here, not declared by hand: on the leading tensor's device;
* the stride policy: ``unit_stride(entry, name, t)`` gives a small tensor the layout its kernel
  reads (``COPIED`` arguments are copied to unit stride, a few bytes; ``ANY`` ones are passed as
  they are, the kernel indexes them through their strides), so no entry point decides it itself;
* the README's "Input contract" section: ``markdown()``, kept in step by
  ``tests/test_contract.py`` (``python -m generator.runtime.contract --write`` rewrites it);
* the tests: every public signature has exactly the arguments declared here, every named
  assumption exists, every rule refuses the input its ``bad`` derives (naming the argument), and
  the layout property draws a strided view of every tensor argument.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from spec import launch as spec_launch
from spec import paged as spec_paged
from spec.assumptions import ASSUMPTIONS, limit

from generator.runtime import checks as R
from generator.runtime import launch
from generator.runtime.checks import IN_OP, KIND, PEERS, RELATION, VALUES

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
    values: str  # the accepted range (clamped on the device / the opt-in check)
    assumptions: tuple[str, ...] = ()  # the spec.assumptions it answers to
    rewrite: str = ""  # the normalisation (a proven rewrite names its claim)
    rules: tuple = ()  # the checks.Rule's that enforce it (enforce() runs them)

    @property
    def optional(self) -> bool:
        """``None`` is accepted (and then no rule runs)."""
        return self.dtype.startswith("None")

    @property
    def tensor(self) -> bool:
        return self.strides != NONE


def _dtypes() -> str:
    return "/".join({"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[d] for d in limit("dtypes"))


def _seq_lens(what: str) -> str:
    return f"{what} ≤ {R.power_text(limit('seq_len_int32'))}"


def _pow2s(name: str) -> str:
    sizes = limit(name)
    return f"{sizes[0]}..{sizes[-1]}"


_SUPPORTED = f"supported: {', '.join(limit('dtypes'))} (convert with .to())"


# ----------------------------------------------------------------------------------
# Rules shared by several entry points
# ----------------------------------------------------------------------------------
def _scale_rules():
    return (R.call("a finite real", lambda n, v, c: R.check_scale(v), KIND, convert=lambda v, c: R.check_scale(v),
                   bad=lambda c, n: {n: float("nan")}),
            R.call("not a bool", lambda n, v, c: R.check_scale(v), KIND, bad=lambda c, n: {n: True}))


def _window_rules():
    return (R.call("a pair of ints ≥ 0", lambda n, v, c: R.check_window(v), KIND,
                   convert=lambda v, c: R.check_window(v), bad=lambda c, n: {n: (-1, 3)}),)


def _block_rules(auto: bool):
    return (R.call("a pair of ints" + (' or "auto"' if auto else ""), lambda n, v, c: R.check_block(v, auto=auto), KIND,
                   convert=lambda v, c: R.check_block(v, auto=auto), bad=lambda c, n: {n: 64}),)


def _softcap_rules():
    return (R.call("finite, > 0", lambda n, v, c: R.check_softcap(v), KIND, convert=lambda v, c: R.check_softcap(v),
                   bad=lambda c, n: {n: -1.0}),)


def _score_tensor_rules(shapes, *, no_grad_entry: str = ""):
    """``alibi_slopes`` / ``sinks``: float32 of one of ``shapes(ctx)`` (a tuple of shapes), ``(B, Hq)``
    read from the call by ``shapes``."""
    def shape(n, v, c):
        options, (B, Hq) = shapes(c)
        R.check_shape_in(n, v, options, B, Hq)
    rules = (R.call("float32 tensor", lambda n, v, c: R.check_float32(n, v), KIND,
                    bad=lambda c, n: {n: c[n].double()}),
             R.call("the declared shape", shape, bad=lambda c, n: {n: c[n].new_ones(c[n].numel() + 1)}))
    if no_grad_entry:
        rules += (R.no_grad(no_grad_entry, _INFERENCE_FIX),)
    return rules


SCALE = Arg("scale", "a finite real (numpy scalars too; not bool) or None", "—", NONE,
            "finite; None gives 1/sqrt(D)", ("scale_finite", "scale_positive"),
            "s ≤ 0 → s' = |s|, q' = sign(s)·q (s = 0: q' = 0, s' = 1), claim `scale_sign_rewrite`", _scale_rules())
WINDOW = Arg("window", "None or a pair of ints (numpy ints too)", "(left, right)", NONE,
             "left, right ≥ 0: keys with −left ≤ j − (i + shift) ≤ right",
             ("window_nonneg", "window_bounded"),
             "each side clamped to N_q + N_k (claim `window_clamp`: the same keys)", _window_rules())
CAUSAL = Arg("causal", "bool", "—", NONE, "True or False (not 1)", rules=(R.is_bool(),))
RETURN_LSE = Arg("return_lse", "bool", "—", NONE, "True or False (not 1)", rules=(R.is_bool(),))
SOFTCAP = Arg("softcap", "None or a finite real > 0", "—", NONE,
              "0 < softcap < inf; any scale (no quotient by the scale is formed)", rules=_softcap_rules())


def _alibi(shapes, values: str = "any finite slopes; no gradient; any scale (no quotient by the scale is formed)",
           shape: str = "(Hq,) or (B, Hq)") -> Arg:
    return Arg("alibi_slopes", "None or a float32 tensor", shape, ANY, values, rules=_score_tensor_rules(shapes))


def _sinks(shapes, values: str = "any finite logits; differentiable where the entry point is",
           no_grad_entry: str = "") -> Arg:
    return Arg("sinks", "None or a float32 tensor", "(Hq,)", COPIED, values,
               rules=_score_tensor_rules(shapes, no_grad_entry=no_grad_entry))


def _dropout(box) -> tuple[Arg, Arg]:
    """``dropout_p`` and ``return_dropout_mask``; ``box(ctx)`` the number of (b, h, i, j) elements."""
    p = Arg("dropout_p", "a real (numpy scalars too; not bool)", "—", NONE,
            "0 ≤ p < 1 (p = 1 drops every weight); default 0.0: compiled out, bitwise no dropout; seed and "
            "offset drawn from torch's generator for the device", ("dropout_p_range", "dropout_counter"),
            rules=(R.call("0 ≤ p < 1", lambda n, v, c: R.check_dropout(v, False, 0), KIND,
                          convert=lambda v, c: R.check_dropout(v, False, 0), bad=lambda c, n: {n: 1.0}),
                   R.call(f"counter within int64; a returned mask ≤ {R.power_text(R.DROPOUT_MASK_MAX)} elements",
                          lambda n, v, c: R.check_dropout(v, c["return_dropout_mask"], box(c)), RELATION,
                          bad=lambda c, n: {n: 0.5, **_lower("dropout_counter", 1)})))
    mask = Arg("return_dropout_mask", "bool", "—", NONE,
               "True or False (not 1); True appends the bool keep mask the kernels drew (at most "
               f"{R.power_text(R.DROPOUT_MASK_MAX)} elements: small problems)", rules=(R.is_bool(),))
    return p, mask


def _block(default: str, auto: bool) -> Arg:
    return Arg("block", "a pair of ints (numpy ints too)" + (' or "auto"' if auto else ""),
               "(B_r, B_c)", NONE, f"a generated block ({_pow2s('block_sizes')}, powers of two; the error names the "
               f"command that emits a missing one); default {default}", ("block_sizes",), rules=_block_rules(auto))


def _lead_tensor(kind_rules=()) -> tuple:
    return (R.is_tensor(), R.supported_device(), *kind_rules)


# ----------------------------------------------------------------------------------
# The FP8 forward (issue 30) of flash_attention and flash_attention_varlen: FP8 k, v (q FP8 or
# fp16/bf16) with FlashAttention 3's float32 (B, Hkv) descales, out in out_dtype; no backward, and
# not combined (yet) with the score modifications, a mask_mod, dropout or a paged cache
# ----------------------------------------------------------------------------------
_FP8_TEXT = "; or FP8: k, v float8_e4m3fn/e5m2, q in that dtype or fp16/bf16 (no backward)"
_FP8_NO_GRAD = ("run the FP8 forward under torch.no_grad() (or .detach() the inputs) and train in bf16/fp16 "
                "(FlashAttention 3's FP8 has no backward either)")


def _fp8(c) -> bool:
    """The call runs the FP8 forward: k in an FP8 format (``checks.check_dtypes`` then holds v to it)."""
    return isinstance(c["k"], torch.Tensor) and c["k"].dtype in launch.FP8_FORMATS


def _fp8_no_grad():
    return replace(R.no_grad("the FP8 forward", _FP8_NO_GRAD), when=_fp8, text="FP8: no gradient (no backward)")


def _not_fp8(bad, on=lambda v: True) -> R.Rule:
    """A feature the FP8 forward does not combine with: refused on FP8 inputs (``on(value)``: the call uses
    it). ``bad(ctx)``: a value that turns it on (the contract test adds it to an FP8 call)."""
    return R.call("not with FP8 inputs", lambda n, v, c: R.check_not_fp8(n, v, on(v)), when=_fp8,
                  bad=lambda c, n: {n: bad(c)} if _fp8(c) else {})


def _fp8_positive_scale(what: str, when) -> R.Rule:
    """``scale > 0`` with FP8 (``when``): the host's sign rewrite would negate an FP8 q."""
    return R.call(f"> 0 with {what}", lambda n, v, c: None if v is None or v > 0 else R._raise(
        ValueError, f"{n} must be > 0 with {what}, got {v}; fold the sign into q before quantising"),
        when=when, bad=lambda c, n: {n: -0.5} if when(c) else {})


def _fp8_args(sizes, kv: str = "k", no_grad=_fp8_no_grad) -> tuple[Arg, ...]:
    """``q_descale``, ``k_descale``, ``v_descale`` and ``out_dtype``; ``sizes(ctx)`` the descales' ``(B, Hkv)``;
    ``kv``: the argument holding K (``k``; ``k_cache`` for the KV-cache decode), ``no_grad()``: its rule."""
    def descale(name):
        return Arg(name, "None or a float32 tensor", "(B, Hkv) (varlen: B the segments)", COPIED,
                   f"finite and > 0 (opt-in check); None: 1; with FP8 {kv} only", ("fp8_descales",),
                   rules=(R.is_tensor(),
                          R.dtype_in((torch.float32,), "it must be float32 (batch, kv_heads), FlashAttention 3's; "
                                     "convert with .float()"),
                          R.call(f"with FP8 {kv}", lambda n, v, c: R.check_fp8_descale_kv(n, c[kv]),
                                 bad=lambda c, n: {n: torch.ones(sizes(c), device=c["q"].device)}),
                          R.call("(B, Hkv)", lambda n, v, c: R.check_fp8_descale_shape(n, v, *sizes(c)),
                                 bad=lambda c, n: {n: torch.cat([c[n], c[n]], 1)}),
                          R.values("finite and > 0", lambda v, c: R.fp8_descale_flags(v),
                                   lambda n, v, c: R.fp8_descale_error(n, v),
                                   bad=lambda c, n: {n: c[n].clone().fill_(0)},
                                   kept="no clamp can: without the check a descale ≤ 0 or not finite scales its "
                                   "tensor as given (every read stays in bounds; claim fp8_descale assumes > 0)"),
                          no_grad()))
    return (*(descale(name) for name in R.FP8_NAMES),
            Arg("out_dtype", "None or torch.bfloat16 / float16 / float32", "—", NONE,
                "FP8 inputs only; None: bf16 (q's dtype with an fp16/bf16 q)", ("fp8_descales",),
                rules=(R.call("bf16, fp16 or fp32", lambda n, v, c: R.check_fp8_out_dtype(n, v), KIND,
                              bad=lambda c, n: {n: torch.float64}),
                       R.call("with FP8 inputs", lambda n, v, c: R.check_fp8_only(n, c[kv]),
                              bad=lambda c, n: {n: torch.bfloat16}))))


def _with_fp8_limits(args: tuple[Arg, ...]) -> tuple[Arg, ...]:
    """An entry point's arguments with the FP8 forward's limits declared on the arguments they limit: a
    positive scale (no sign rewrite of FP8 q) and no softcap, ALiBi, sinks, mask_mod, score_mod, dropout
    or paged cache."""
    q_heads = lambda c: c["q"].shape[1]  # noqa: E731  (Hq: dim 1 of (B, Hq, N, D) and of (total, Hq, D))
    limits = {
        "scale": _fp8_positive_scale("FP8 inputs", _fp8),
        "softcap": _not_fp8(lambda c: 5.0),
        "alibi_slopes": _not_fp8(lambda c: torch.rand(q_heads(c), device=c["q"].device)),
        "sinks": _not_fp8(lambda c: torch.zeros(q_heads(c), device=c["q"].device)),
        "dropout_p": _not_fp8(lambda c: 0.25, on=lambda v: v != 0),
        "return_dropout_mask": _not_fp8(lambda c: True, on=lambda v: v),
        "block_table": replace(_not_fp8(lambda c: None), bad=_fp8_paged),
        "block": R.call("B_c ≥ FP8_MAX_IMPRECISE_ACC with FP8 inputs", _fp8_key_block, when=_fp8,
                        bad=lambda c, n: {n: (64, 16)} if _fp8(c) else {}),
    }
    out = []
    for a in args:
        if a.name == "mask_mod":
            a = replace(a, rules=a.rules + (replace(_not_fp8(lambda c: None), bad=_fp8_mask_mod),))
        elif a.name == "score_mod":
            a = replace(a, rules=a.rules + (replace(_not_fp8(lambda c: None), bad=_fp8_score_mod),))
        elif a.name in limits:
            a = replace(a, rules=a.rules + (limits[a.name],))
        if a.name in ("q", "k", "v"):
            a = replace(a, dtype=a.dtype + _FP8_TEXT if a.name == "q" else a.dtype,
                        assumptions=a.assumptions + ("fp8_descales",), rules=a.rules + (_fp8_no_grad(),))
        out.append(a)
    return tuple(out)


def _fp8_key_block(n, v, c):
    """FP8: every printed ``tl.dot`` passes ``max_num_imprecise_acc = FP8_MAX_IMPRECISE_ACC``, which Triton
    refuses for a dot of fewer than that many products (K = B_c in P V): B_c ≥ FP8_MMA_K."""
    from spec.error_bound import FP8_MAX_IMPRECISE_ACC

    if v != "auto" and v[1] < FP8_MAX_IMPRECISE_ACC:
        works = ", ".join(str(b) for b in limit("block_sizes") if b >= FP8_MAX_IMPRECISE_ACC)
        raise ValueError(f"{n}={tuple(v)}: with FP8 inputs B_c (block[1]) must be ≥ {FP8_MAX_IMPRECISE_ACC}: every "
                         f"fp8 tl.dot passes max_num_imprecise_acc={FP8_MAX_IMPRECISE_ACC} (spec.error_bound."
                         f"FP8_MAX_IMPRECISE_ACC, one fp8 MMA instruction's K), which Triton refuses for a dot of "
                         f"fewer products; pass a block with B_c in {works}, e.g. ({v[0]}, 64)")


def _fp8_mask_mod(c, n):
    from spec.masks import prefix_lm

    return {n: prefix_lm, "mask_args": {"prefix": 3}} if _fp8(c) else {}


def _fp8_score_mod(c, n):
    from spec.score_mods import tanh_cap

    return {n: tanh_cap, "score_args": {"cap": 5.0}} if _fp8(c) else {}


def _fp8_paged(c, n):
    """A paged call with its caches in FP8 (the paged varlen path takes no FP8 yet)."""
    fp8 = next(iter(launch.FP8_FORMATS))
    if c[n] is None:
        return {}
    return {**{t: c[t].to(fp8) for t in ("q", "k", "v")}, "softcap": None, "alibi_slopes": None, "sinks": None}


# ----------------------------------------------------------------------------------
# flash_attention and ring_attention: q, k, v (B, H, N, D)
# ----------------------------------------------------------------------------------
def _dense_qkv(q_shape: str, kv_shape: str, v_shape: str, strides: str = ANY, fp8: bool = False) -> tuple[Arg, ...]:
    """q, k ``(B, H, N, D)``, v ``(B, H, N, D_v)`` (MLA: D_v ≠ D): one rule per constraint (``checks.check_qkv`` runs the same checks in
    the same order, for callers outside an entry point). ``fp8``: the FP8 forward's dtypes accepted too
    (``checks.check_dtypes``; ``_with_fp8_limits`` adds the rest)."""
    qkv = ("dtypes", "head_dim_max", "gqa_divides", "seq_len_int32", "index_int32")
    rank4 = R.call("rank 4", lambda n, v, c: R.check_rank4(n, v), KIND, bad=lambda c, n: {n: c[n][0]})
    one_dtype = R.call("q's dtype" + (" (FP8: k, v one FP8 format, q it or fp16/bf16)" if fp8 else ""),
                       lambda n, v, c: R.check_dtypes(c["q"], c["k"], c["v"], fp8), bad=lambda c, n: {n: c[n].double()})
    both = lambda f: (lambda c, n: {"k": f(c["k"]), "v": f(c["v"])})  # noqa: E731  (k and v changed alike)
    return (Arg("q", _dtypes() + ", one dtype for q, k, v", q_shape + f", D in 1..{limit('head_dim_max')}", ANY,
                "any (keys past a length are never read)", qkv + ("grid_axes",),
                rules=(R.is_tensor(), R.supported_device(), rank4,
                       R.call("a supported dtype" + (" or FP8" if fp8 else ""),
                              lambda n, v, c: R.check_supported_dtype(n, v, fp8), KIND,
                              bad=lambda c, n: {n: c[n].double()}),
                       R.call(f"D in 1..{limit('head_dim_max')}", lambda n, v, c: R.check_head_dim(v.shape[3]), bad=lambda c, n: {n: c[n][..., :0], **both(
                               lambda t: t[..., :0])(c, n)}),
                       R.call("B, Hq ≤ grid_axes (CUDA's grid axes 2 and 1)", lambda n, v, c: R.check_grid_axes(
                           n, v.shape[0], v.shape[1]), bad=lambda c, n: _lower("grid_axes", 0)),
                       R.call(_seq_lens("N_q + N_k"), lambda n, v, c: R.check_seq_lens(v.shape[2], c["k"].shape[2]),
                              bad=lambda c, n: _lower("seq_len_int32", 1)),
                       R.call("in-slice offsets of q, k, v, mask, out fit int32", lambda n, v, c: R.check_index_width(
                           q=v, k=c["k"], v=c["v"], mask=c.get("mask"), out=(*v.shape[:3], c["v"].shape[3])),
                           bad=lambda c, n: _lower("index_int32", 0)))),
            Arg("k", "q's", kv_shape + ", Hq % Hkv = 0 (GQA)", strides, "any", qkv,
                rules=(R.is_tensor(), rank4, one_dtype,
                       R.call("q's batch and head_dim", lambda n, v, c: R.check_qk_agree(c["q"], v),
                              bad=both(lambda t: t[..., :1])),
                       R.call("Hkv ≥ 1", lambda n, v, c: R.check_some_heads(c["q"], v), bad=both(lambda t: t[:, :0])),
                       R.call("Hq % Hkv = 0", lambda n, v, c: R.check_gqa(c["q"].shape[1], v.shape[1]),
                              bad=both(lambda t: torch.cat([t] * 3, 1))))),
            Arg("v", "q's", v_shape + f", D_v in 1..{limit('head_dim_max')}: k's but its own head dim (MLA: "
                "D_v ≠ D; out and dv have D_v)", strides, "any", qkv,
                rules=(R.is_tensor(), rank4, one_dtype,
                       R.call("k's shape but its head dim", lambda n, v, c: R.check_v_like_k(c["k"], v, "k", n),
                              bad=lambda c, n: {n: c[n][:, :, :-1]}),
                       R.call(f"D_v in 1..{limit('head_dim_max')}", lambda n, v, c: R.check_head_dim(v.shape[3], "v"),
                              bad=lambda c, n: {n: c[n][..., :0]}))))


def _merge_o(lead: int = 0) -> tuple:
    """``merge_state``'s ``o_a`` / ``merge_states``' ``o``: a supported dtype, rank, head dim."""
    o = R.call("a supported dtype, (S, ..., D), D ≤ merge_head_dim_max" if lead else
               "a supported dtype, (..., D), D ≤ merge_head_dim_max", lambda n, v, c: R.check_merge_o(n, v, lead), KIND,
               bad=lambda c, n: {n: c[n].double()})
    big = R.call("D ≤ merge_head_dim_max", lambda n, v, c: R.check_merge_o(n, v, lead), KIND,
                 bad=lambda c, n: _lower("merge_head_dim_max", 1))
    return (o, big)


def _merge_lse(o_name: str) -> tuple:
    return (R.is_tensor(),
            R.call("float32 (natural log)", lambda n, v, c: R.check_merge_lse(n, v, o_name, c[o_name]), KIND,
                   bad=lambda c, n: {n: c[n].double()}),
            R.call(f"{o_name}'s shape without D", lambda n, v, c: R.check_merge_lse(n, v, o_name, c[o_name]),
                   bad=lambda c, n: {n: c[n][..., :1]}))


def _ring_qkv(args):
    """``ring_attention``'s q, k, v: the dense ones, k's shard as long as q's, and each shard's shape and
    dtype alike on every rank (``_RING_PEERS``)."""
    q, k, v = args
    k = replace(k, rules=k.rules + (R.call("q's shard length", _ring_shards,
                                           bad=lambda c, n: {n: c[n][:, :, :-1], "v": c["v"][:, :, :-1]}),))
    return tuple(replace(a, rules=a.rules + (_RING_PEERS[a.name],)) for a in (q, k, v))


# ----------------------------------------------------------------------------------
# ring_attention: what every rank of the group must pass alike (``checks.agree``, the PEERS stage:
# ``enforce`` gathers these facts from every rank in one all_gather and every rank raises the same
# error). A rank's shards are cut from the same full tensors (``ring_shard``), so their shapes and dtype
# agree; the options decide each step's plan (causal, layout) and the logits (scale) on every rank, and
# the generated kernels (block). ``return_lse`` is each rank's own: it changes no rank's work.
# ----------------------------------------------------------------------------------
#: the dtypes a fact may name, by index
_FACT_DTYPES = (*R.DTYPES, *launch.FP8_FORMATS)


def _shard_fact(v, c) -> tuple[int, ...]:
    return (*v.shape, _FACT_DTYPES.index(v.dtype) if v.dtype in _FACT_DTYPES else -1)


def _show_shard(f) -> str:
    dtype = _FACT_DTYPES[f[4]] if 0 <= f[4] < len(_FACT_DTYPES) else "another dtype"
    return f"a {str(dtype).replace('torch.', '')} shard of shape {tuple(f[:4])}"


def _scale_fact(v, c) -> tuple[int]:
    """The scale the kernels get (None: 1/sqrt(D)), as the bits of its float64."""
    return (struct.unpack("<q", struct.pack("<d", R.sm_scale_of(v, c["q"].shape[-1])))[0],)


def _show_scale(f) -> str:
    return f"scale {struct.unpack('<d', struct.pack('<q', f[0]))[0]!r}"


def _show_layout(f) -> str:
    from generator.runtime.ring import LAYOUTS

    return f"layout={LAYOUTS[f[0]]!r}"


def _layout_fact(v, c) -> tuple[int]:
    from generator.runtime.ring import LAYOUTS

    return (LAYOUTS.index(v),)


_SHARDS_FIX = "cut every rank's shards from the same full tensors with ring_shard(x, P, rank, layout=layout)"
_RING_PEERS = {
    "q": R.agree("shape (B, Hq, N/P, D) and dtype", _shard_fact, 5, _show_shard, _SHARDS_FIX,
                 bad=lambda c, n: {t: c[t][:, :, :c[t].shape[2] // 2] for t in ("q", "k", "v")}),
    "k": R.agree("shape (B, Hkv, N/P, D) and dtype", _shard_fact, 5, _show_shard, _SHARDS_FIX,
                 bad=lambda c, n: {t: torch.cat([c[t], c[t]], 1) for t in ("k", "v")}),
    "v": R.agree("shape (B, Hkv, N/P, D_v) and dtype", _shard_fact, 5, _show_shard, _SHARDS_FIX,
                 bad=lambda c, n: {n: c[n][..., :c[n].shape[-1] // 2]}),
    "causal": R.agree("the causal flag", lambda v, c: (int(v),), 1, lambda f: f"causal={bool(f[0])}",
                      "pass the same causal on every rank", bad=lambda c, n: {n: not c[n]}),
    "scale": R.agree("the softmax scale (None: 1/sqrt(D))", _scale_fact, 1, _show_scale,
                     "pass the same scale on every rank",
                     bad=lambda c, n: {n: 2 * R.sm_scale_of(c[n], c["q"].shape[-1])}),
    "layout": R.agree("the layout", _layout_fact, 1, _show_layout, "pass the same layout on every rank",
                      bad=lambda c, n: {n: "zigzag" if c[n] == "contiguous" else "contiguous"}),
    "block": R.agree('the block (B_r, B_c) or "auto"', lambda v, c: (0, 0) if v == "auto" else tuple(v), 2,
                     lambda f: "block=" + ('"auto"' if f == (0, 0) else str(tuple(f))),
                     "pass the same block on every rank",
                     bad=lambda c, n: {n: (16, 32) if c[n] != (16, 32) else (32, 32)}),
}


def _lower(assumption: str, value) -> dict:
    """A rule's refused input that is too large to build: the limit lowered instead (the contract test
    sets ``spec.assumptions`` to it for the call)."""
    return {"__limits__": {assumption: value}}


def _patched(owner, attribute: str, value) -> dict:
    """A rule's refused input that is the process's state, not an argument (torch.distributed not
    initialised): the contract test sets ``owner.attribute`` to ``value`` for the call."""
    return {"__patch__": ((owner, attribute, value),)}


def _dense_sizes(c):
    B, Hq = c["q"].shape[:2]
    return B, Hq


def _alignment_check(n, v, c):
    from spec.masks import ALIGNMENTS

    if v not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {v!r}")


def _tma_check(n, v, c):
    if not isinstance(v, bool) and not (isinstance(v, str) and v == "auto"):
        raise TypeError(f"tma must be \"auto\", True or False, got {v!r}")


def _key_lengths_flags(v, c):
    lo, hi = spec_launch.key_length_bounds(c["k"])  # the launch's clamp bounds (claim forward_addresses)
    return ((v < lo) | (v > hi)).any()


def _key_lengths_clamp(v, c):
    from generator.runtime.dispatch import lengths_argument  # the launch's own clamp (dispatch imports checks)

    return lengths_argument(v, c["k"])


def _mask_mod_check(n, v, c):
    """The mask_mod's type, and its ``mask_args`` packed for the kernels (``MaskMod.pack`` checks every
    parameter: shapes, integer dtypes, the int32 range); the packed tensor is left in ``ctx``."""
    c["packed_mask_args"] = R.check_mask_mod(v, c["mask_args"], c["q"], c["k"])


def _example_score_mod():
    """A valid score_mod (a rule's refused input pairs it with another argument)."""
    from spec.score_mods import tanh_cap

    return tanh_cap


def _score_mod(sizes, extra=(), values: str = "") -> tuple[Arg, Arg]:
    """``score_mod`` and ``score_args``; ``sizes(ctx)``: the ``(B, Hq)`` a bare ``b``, ``h`` read is
    bounded by; ``extra``: further rules of the entry point; ``values``: the end of its values column. The score_mod rule packs ``score_args``
    for the kernels (``ScoreMod.pack`` names every problem) and leaves the pair in ``ctx`` as
    ``packed_score_args``."""
    def pack(n, v, c):
        c["packed_score_args"] = R.check_score_mod(v, c["score_args"], *sizes(c), c["q"].device)

    return (
        Arg("score_mod", "None or a spec.score_mods.score_mod", "—", NONE, "an expression of the class, its "
            "backward derived (claim `score_mod_derived`), with its kernels generated" + values,
            rules=(R.call("a spec.score_mods.score_mod; its score_args packed (the call reads them as "
                          "packed_score_args)", pack, bad=lambda c, n: {n: (lambda *a: 0)}), *extra)),
        Arg("score_args", "None or {name: int | float | float tensor}", "a tensor: as many dims as its reads, "
            "each axis longer than its clamp", NONE, "ints where a table index uses them; tensors "
            "differentiable (gradients reduced without atomics)", (),
            "packed into fresh fp32 / int32 vectors (tensors flattened, contiguous)",
            rules=(R.call("with score_mod", lambda n, v, c: R.check_score_mod(None, v, *sizes(c), c["q"].device),
                          when=lambda c: c["score_mod"] is None, bad=lambda c, n: {n: {"a": 1.0}}),)),
    )


def _mask_args_check(n, v, c):
    if c["mask_mod"] is None:
        raise ValueError("mask_args given without mask_mod; pass mask_mod=prefix_lm (or another "
                         "spec.masks.mask_mod) with them")


# ----------------------------------------------------------------------------------
# flash_attention_varlen: packed (total, H, D), or paged caches with block_table
# ----------------------------------------------------------------------------------
def _paged(c) -> bool:
    return c["block_table"] is not None


def _packed(c) -> bool:
    return c["block_table"] is None


def _varlen_sizes(c):
    return c["cu_seqlens_q"].numel() - 1, c["q"].shape[1]


def _paged_cache_capacity(c) -> int:
    return c["block_table"].shape[1] * c["k"].shape[1]


def _used_pages(table, lengths, capacity: int, page_size: int):
    """The entries of ``table`` that sequence ``b`` reads: pages ``p < ceil(lengths[b] / page_size)``."""
    pages_used = (lengths.clamp(0, capacity) + page_size - 1) // page_size
    return torch.arange(table.shape[1], device=table.device)[None, :] < pages_used[:, None]


def _page_flags(table, lengths, capacity, num_pages, page_size):
    return (_used_pages(table, lengths, capacity, page_size) & ((table < 0) | (table >= num_pages))).any()


def _page_error(name, table, lengths, capacity, num_pages, page_size) -> str:
    bad = _used_pages(table, lengths, capacity, page_size) & ((table < 0) | (table >= num_pages))
    b, p = (int(i) for i in bad.nonzero()[0])
    return (f"{name}[{b}, {p}] = {int(table[b, p])} is a page that sequence {b} reads (it holds keys "
            f"{p * page_size}..), outside [0, num_pages={num_pages}) [page_ids_range]; the unused tail of a row "
            "may hold anything (e.g. -1)")


def _segment_lengths(cu):
    return cu[1:] - cu[:-1]


_INFERENCE_FIX = ("call it under torch.no_grad() / torch.inference_mode() or detach the tensors; for training use "
                  "flash_attention (differentiable)")
def _page_size_check(n, v, c):
    if v.shape[1] not in limit("page_sizes"):
        sizes = limit("page_sizes")
        raise ValueError(f"page_size ({n} dim 1) must be a power of two from {sizes[0]} to {sizes[-1]}, got "
                         f"{v.shape[1]} [page_sizes]")


def _segments(c):
    """``spec.varlen.segments`` of the call's offsets (what the op runs; it reads them on the host)."""
    from spec import varlen as spec_varlen

    cu_k = c["cu_seqlens_k"].cpu()
    return spec_varlen.segments(c["cu_seqlens_q"].cpu(), cu_k, c["q"].shape[0],
                                c["k"].shape[0] if _packed(c) else int(cu_k[-1]))


def _offsets_in_op():
    return R.in_op("from 0, non-decreasing, ending at the packed total (read on the host, also under torch.compile)",
                   lambda n, v, c: _segments(c), bad=lambda c, n: {n: c[n].flip(0)})


def _hint_in_op(side: int, when=None):
    def check(n, v, c):
        R.check_hint(n, v, max(seg[2 * side + 1] - seg[2 * side] for seg in _segments(c)))
    return R.in_op("≥ the longest segment", check, bad=lambda c, n: {n: 1}, when=when)


#: flash_attention_varlen's packed (total, H, D) tensors
_rank3 = R.call("rank 3", lambda n, v, c: R.check_rank3_packed(n, v), KIND, bad=lambda c, n: {n: c[n][None]})
_varlen_one_dtype = R.call("q's dtype (FP8: k, v one FP8 format, q it or fp16/bf16)",
                           lambda n, v, c: R.check_dtypes(c["q"], c["k"], c["v"], True),
                           bad=lambda c, n: {n: c[n].double()})


def _paged_varlen_rules(name: str) -> tuple:
    """``k`` / ``v`` of ``flash_attention_varlen`` with ``block_table``: paged caches."""
    rules = (replace(R.rank(4, "(num_pages, page_size, Hkv, D): a paged cache, with block_table"), text="paged: rank 4",
                     when=_paged),
             replace(R.no_grad("flash_attention_varlen with block_table (paged K/V)", _INFERENCE_FIX), when=_paged))
    if name == "k":
        def gqa(n, v, c):
            Hq, D = c["q"].shape[1:]
            if v.shape[3] != D:
                raise ValueError(f"k {tuple(v.shape)} must have q's head_dim {D} (dim 3)")
            if v.shape[2] < 1:
                raise ValueError(f"k {tuple(v.shape)} needs at least one KV head (dim 2)")
            R.check_gqa(Hq, v.shape[2], "k's KV heads", "q and k")
        rules += (R.call("paged: Hq % Hkv = 0, q's D", gqa, when=_paged, bad=lambda c, n: {n: c[n][..., :1]}),
                  R.call("paged: page_size " + _pow2s("page_sizes"), _page_size_check, when=_paged,
                         bad=lambda c, n: {n: c[n][:, :12], "v": c["v"][:, :12]}),
                  R.call("in-slice offsets fit int32", lambda n, v, c: R.check_index_width(
                      k=v.transpose(1, 2), v=c["v"].transpose(1, 2)), when=_paged,
                         bad=lambda c, n: _lower("index_int32", 0)))
    return rules


#: how a value rule of the paged varlen path holds without its check: that path runs
#: ``flash_attention_with_kvcache``'s kernel through its entry point, whose rules clamp
_KEPT_BY_KVCACHE = "clamped by flash_attention_with_kvcache, which the paged path calls"


def _block_table_rules(batch, capacity, lengths, num_pages, page_size, when=None, clamp: bool = True) -> tuple:
    """``block_table``: int32 ``(B, max_pages)``; the pages a sequence reads in range (an opt-in check;
    by default each page id is clamped into ``[0, num_pages)`` on the device, or by the kvcache
    path the call runs: ``clamp=False``)."""
    return (R.is_tensor(),
            R.dtype_in((torch.int32,), "it must be int32 (batch, max_pages); convert with .to(torch.int32)",
                       kind=ValueError),
            R.rank(2, "(batch, max_pages)"),
            R.shape_is(lambda c: (batch(c), c["block_table"].shape[1]), "(batch, max_pages)",
                       bad=lambda c, n: {n: c[n][:-1] if c[n].shape[0] > 1 else torch.cat([c[n], c[n]])}),
            R.values("the pages a sequence reads in [0, num_pages)",
                     lambda v, c: _page_flags(v, lengths(c), capacity(c), num_pages(c), page_size(c)),
                     lambda n, v, c: _page_error(n, v, lengths(c), capacity(c), num_pages(c), page_size(c)),
                     when=when, bad=lambda c, n: {n: c[n].clone().fill_(num_pages(c))},
                     clamp=(lambda v, c: v.clamp(0, num_pages(c) - 1)) if clamp else None,
                     kept="" if clamp else _KEPT_BY_KVCACHE + " (every page id clamped into [0, num_pages))"))


# ----------------------------------------------------------------------------------
# flash_attention_with_kvcache
# ----------------------------------------------------------------------------------
def _kv_paged(c) -> bool:
    return c["block_table"] is not None


def _kv_capacity(c) -> int:
    return spec_launch.decode_capacity(c["k_cache"], c["block_table"])


def _n_new(c) -> int:
    return 0 if c["k"] is None else c["k"].shape[1]


def _kv_sizes(c):
    return c["q"].shape[0], c["q"].shape[2]


def _kv_q_dims(n, v, c):
    B, Nq, Hq, D = v.shape
    if min(B, Nq, Hq) < 1:
        raise ValueError(f"every dimension of q must be >= 1, got q {tuple(v.shape)}")
    R.check_head_dim(D, "q and the cache", limit("decode_head_dim_max")[0], "decode_head_dim_max")


def _kv_cache_dims(n, v, c):
    B, _, Hq, D = c["q"].shape
    if v.shape[3] != D:
        raise ValueError(f"q {tuple(c['q'].shape)} and {n} {tuple(v.shape)} must agree in head_dim (dim 3)")
    if v.shape[2] < 1:
        raise ValueError(f"{n} {tuple(v.shape)} needs at least one KV head (dim 2)")
    R.check_gqa(Hq, v.shape[2], "the cache's KV heads", f"q and {n}")


def _kv_cache_rows(n, v, c):
    B = c["q"].shape[0]
    if v.shape[0] != B:
        raise ValueError(f"a contiguous cache must have q's batch ({B}) in dim 0, got {n} {tuple(v.shape)}; "
                         "a paged cache (num_pages, page_size, Hkv, D) needs block_table, a larger cache "
                         "cache_batch_idx")


def _kv_index_width(n, v, c):
    q = c["q"]
    Hq, Nq, Dv = q.shape[2], q.shape[1], c["v_cache"].shape[3]  # out has v's head dim
    # int32 offsets inside one (batch, head) slice: q's tokens, the cache's keys (or a page's slots), the output
    R.check_index_width(q=q.transpose(1, 2), k_cache=c["k_cache"].transpose(1, 2), v_cache=c["v_cache"].transpose(1, 2),
                        out=((Hq, Nq, Dv), (Dv, Hq * Dv, 1)))


def _cache_seqlens_kind(n, v, c):
    if isinstance(v, torch.Tensor):
        if v.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"cache_seqlens must be an int or an int32/int64 tensor of shape (batch,), got "
                             f"{v.dtype}; convert with .to(torch.int32)")
    else:
        R._as_int(v, "cache_seqlens")


def _cache_seqlens_tensor(v, c):
    """An int: every sequence's length, as a (B,) int32 tensor on q's device."""
    _cache_seqlens_kind("cache_seqlens", v, c)
    if isinstance(v, torch.Tensor):
        return v
    return torch.full((c["q"].shape[0],), R._as_int(v, "cache_seqlens"), dtype=torch.int32, device=c["q"].device)


def _cache_len_error(n, v, c) -> str:
    cap, new = _kv_capacity(c), _n_new(c)
    limit_text = f"{cap}] (the cache's capacity in keys)" if not new else f"{cap} − N_new = {cap - new}] (the " \
        f"capacity less the {new} appended keys)"
    fix = ""
    if _kv_paged(c):  # the capacity is the block table's: name it, and the fix (FlashAttention names it too)
        fix = (f"; the capacity is block_table's {c['block_table'].shape[1]} pages x page_size "
               f"{c['k_cache'].shape[1]}: give block_table more pages")
    return f"cache_seqlens must lie in [0, {limit_text}, got {v.tolist()}{fix} [cache_len_range]"


def _cache_room(n, v, c):
    cap, new = _kv_capacity(c), _n_new(c)
    if new > cap:
        raise ValueError(f"cache_seqlens must lie in [0, capacity − N_new], but k appends {new} keys to a cache of "
                         f"capacity {cap} (no length fits) [cache_len_range]; pass a larger cache or fewer new keys")


def _rotary_dims(n, v, c):
    D, cap = c["q"].shape[3], _kv_capacity(c)
    if not 1 <= 2 * v.shape[1] <= D:
        raise ValueError(f"rotary_dim = 2 x {n}.shape[1] = {2 * v.shape[1]} must lie in [2, head_dim = {D}]")
    if v.shape[0] < cap:
        raise ValueError(f"{n} has {v.shape[0]} rows; it must cover the cache's {cap} positions (FlashAttention: "
                         "seqlen_ro >= seqlen_k)")


def _distinct_flags(v, c):
    s = v.sort().values
    return (s[1:] == s[:-1]).any()


def _kv_no_grad():
    return R.no_grad("flash_attention_with_kvcache", _INFERENCE_FIX)


def _batch_invariant_splits(n, v, c):
    from generator.runtime.decode import BATCH_INVARIANT_SPLIT_KEYS  # decode imports this module

    if c["batch_invariant"] is True and v != 0:
        raise ValueError(f"batch_invariant=True fixes the split size ({BATCH_INVARIANT_SPLIT_KEYS} keys): leave "
                         f"num_splits at 0, got {v}")


def _decode_grid_splits(n, v, c):
    """The decode grid's axis 0 (row tiles x splits: ``spec.launch.decode_launch``) fits CUDA's 2^31 - 1 for the
    most splits the call can take: ``num_splits`` (0: the heuristic's, at most ``num_splits_max``), or with
    ``batch_invariant`` one split per ``BATCH_INVARIANT_SPLIT_KEYS`` keys of the cache [grid_axes]."""
    from generator.runtime.decode import BATCH_INVARIANT_SPLIT_KEYS  # decode imports this module

    if c["batch_invariant"] is True:
        splits = spec_paged.batch_invariant_num_splits(_kv_capacity(c), BATCH_INVARIANT_SPLIT_KEYS)  # as the launch
    else:
        splits = v or limit("num_splits_max")
    q, k = c["q"], c["k_cache"]
    R.check_decode_rows(n, q.shape[2] // k.shape[2] * q.shape[1], splits)


def _cache_rows_rules(meaning: str) -> tuple:
    """``cache_leftpad`` / ``cache_batch_idx``: an int32 (or int64) ``(B,)`` tensor, contiguous cache only."""
    return (R.is_tensor(), R.dtype_in((torch.int32, torch.int64), f"it must be int32 (batch,): {meaning}",
                                      kind=ValueError),
            R.excludes("block_table", "works on a contiguous cache only, not with a paged cache (block_table), as in "
                       "FlashAttention", bad=lambda c, n: {n: torch.zeros(c["q"].shape[0], dtype=torch.int32,
                                                                         device=c["q"].device)}),
            R.shape_is(lambda c: (c["q"].shape[0],), "(batch,)"))


def _kv_fp8(c) -> bool:
    """An FP8 KV cache (issue 30): k_cache in an FP8 format (the dtype rule holds v_cache to it)."""
    return isinstance(c["k_cache"], torch.Tensor) and c["k_cache"].dtype in launch.FP8_FORMATS


def _kv_not_fp8(bad, on=lambda v: True) -> R.Rule:
    """A feature the FP8 cache does not combine with (yet): refused there, as ``_not_fp8`` on the dense path."""
    return R.call("not with an FP8 cache", lambda n, v, c: R.check_not_fp8(n, v, on(v)), when=_kv_fp8,
                  bad=lambda c, n: {n: bad(c)} if _kv_fp8(c) else {})


def _kv_cache_dtype(n, v, c):
    """One dtype for q and the cache, or an FP8 cache (k_cache, v_cache one FP8 format) with q in that format or
    fp16/bf16 [fp8_descales]."""
    try:
        R.check_dtypes(c["q"], c["k_cache"], c["v_cache"], True)
    except TypeError as e:
        raise TypeError(f"{n} has dtype {v.dtype} with q {c['q'].dtype} (q, k, v below: q, k_cache, v_cache): {e}") \
            from None


def _kv_fp8_rotary(c, n):
    """A call with an FP8 cache that appends, with rotary tables added (refused)."""
    if not _kv_fp8(c) or c["k"] is None:
        return {}
    angle = torch.rand(_kv_capacity(c), c["q"].shape[3] // 4, device=c["q"].device)
    return {"rotary_cos": angle.cos(), "rotary_sin": angle.sin()}


def _kv_fp8_score_mod(c, n):
    from spec.score_mods import tanh_cap

    return {n: tanh_cap, "score_args": {"cap": 5.0}} if _kv_fp8(c) else {}


def _kv_append_dtype(n, v, c):
    if v.dtype != c["k_cache"].dtype:
        raise TypeError(f"{n} has dtype {v.dtype} but the cache is {c['k_cache'].dtype}: the new keys and values are "
                        "copied into an FP8 cache as they are (FlashAttention 3's rule), so quantise them with the "
                        f"cache's descales first: ({n} / {n}_descale[:, None, :, None]).to({c['k_cache'].dtype}) "
                        "[fp8_descales]")


def _kv_with_fp8_limits(args: tuple[Arg, ...]) -> tuple[Arg, ...]:
    """The KV-cache decode's arguments with an FP8 cache's limits (issue 30) on the arguments they limit: new
    k, v already in the cache's FP8 format, no rotary (it would rotate quantised keys), a positive scale, and no
    softcap, ALiBi, sinks or score_mod (as the dense FP8 forward)."""
    q_heads = lambda c: c["q"].shape[2]  # noqa: E731  (Hq: dim 2 of (B, N_q, Hq, D))
    limits = {
        "k": R.call("an FP8 cache: k in its dtype", _kv_append_dtype, KIND, when=_kv_fp8,
                    bad=lambda c, n: {n: c[n].to(torch.bfloat16), "v": c["v"].to(torch.bfloat16)}
                    if _kv_fp8(c) and c[n] is not None else {}),
        "v": R.call("an FP8 cache: v in its dtype", _kv_append_dtype, KIND, when=_kv_fp8,
                    bad=lambda c, n: {n: c[n].to(torch.bfloat16)} if _kv_fp8(c) and c[n] is not None else {}),
        "rotary_cos": replace(_kv_not_fp8(lambda c: None), bad=_kv_fp8_rotary),
        "scale": _fp8_positive_scale("an FP8 cache", _kv_fp8),
        "softcap": _kv_not_fp8(lambda c: 5.0),
        "alibi_slopes": _kv_not_fp8(lambda c: torch.rand(q_heads(c), device=c["q"].device)),
        "sinks": _kv_not_fp8(lambda c: torch.zeros(q_heads(c), device=c["q"].device)),
    }
    out = []
    for a in args:
        if a.name == "score_mod":
            a = replace(a, rules=a.rules + (replace(_kv_not_fp8(lambda c: None), bad=_kv_fp8_score_mod),))
        elif a.name in limits:
            rule = limits[a.name]
            # the FP8 rule of k / v before their own "k_cache's dtype" (which would name no fix)
            a = replace(a, rules=(rule, *a.rules) if a.name in ("k", "v") else a.rules + (rule,))
        out.append(a)
    return tuple(out)


def _kvcache() -> tuple[Arg, ...]:
    return _kv_with_fp8_limits(_kvcache_args()) + _fp8_args(lambda c: (c["q"].shape[0], c["k_cache"].shape[2]),
                                                            "k_cache", _kv_no_grad)


def _kvcache_args() -> tuple[Arg, ...]:
    kv_dtype = R.call("q's dtype (FP8 cache: k_cache, v_cache one FP8 format, q it or fp16/bf16)", _kv_cache_dtype,
                      bad=lambda c, n: {n: c[n].double()})
    return (
        Arg("q", _dtypes() + ", one dtype for q and the cache" + "; or an FP8 cache: k_cache, v_cache float8_e4m3fn/"
            "e5m2, q in that dtype or fp16/bf16", f"(B, N_q, Hq, D), D in 1..{limit('decode_head_dim_max')[0]}",
            ANY, "any", ("dtypes", "decode_head_dim_max", "gqa_divides", "index_int32", "fp8_descales", "grid_axes"),
            rules=(R.is_tensor(), R.supported_device(), R.rank(4, "(batch, N_q, Hq, D): FlashAttention's layout"),
                   R.call("a supported dtype or FP8", lambda n, v, c: R.check_supported_dtype(n, v, True), KIND,
                          bad=lambda c, n: {n: c[n].double()}), _kv_no_grad(),
                   R.call("B, N_q, Hq ≥ 1; D in 1..max", _kv_q_dims, bad=lambda c, n: {n: c[n][:, :0]}),
                   R.call("B, Hq ≤ grid_axes (CUDA's grid axes 2 and 1)", lambda n, v, c: R.check_grid_axes(
                       n, v.shape[0], v.shape[2]), bad=lambda c, n: _lower("grid_axes", 0)),
                   R.call("in-slice offsets of q, the cache and out fit int32", _kv_index_width,
                          bad=lambda c, n: _lower("index_int32", 0)))),
        Arg("k_cache", "q's", "(B, N_cache, Hkv, D), or paged (num_pages, page_size, Hkv, D)", ANY,
            "any (slots past cache_seqlens[b] are never read)", ("gqa_divides", "page_sizes", "index_int32"),
            rules=(R.is_tensor(), R.rank(4, "(batch, N_cache, Hkv, D), or paged (num_pages, page_size, Hkv, D)"),
                   kv_dtype, _kv_no_grad(),
                   R.call("q's D; Hq % Hkv = 0", _kv_cache_dims, bad=lambda c, n: {n: c[n][..., :1],
                                                                                   "v_cache": c["v_cache"][..., :1]}),
                   R.call("contiguous: q's batch", _kv_cache_rows,
                          when=lambda c: not _kv_paged(c) and c["cache_batch_idx"] is None,
                          bad=lambda c, n: {n: torch.cat([c[n], c[n]]), "v_cache": torch.cat([c["v_cache"]] * 2)}),
                   R.call("paged: page_size " + _pow2s("page_sizes"), _page_size_check, when=_kv_paged,
                          bad=lambda c, n: {n: c[n][:, :12], "v_cache": c["v_cache"][:, :12]}),
                   )),
        Arg("v_cache", "q's", f"k_cache's with its own head dim D_v in 1..{limit('decode_head_dim_max')[1]} "
            "(MLA's absorbed decode: D = 576, D_v = 512); out has D_v", ANY,
            "any; a view of k_cache's storage (k_cache[..., :D_v]) is read as it is, no copy",
            ("decode_head_dim_max", "index_int32"),
            rules=(R.is_tensor(), kv_dtype, _kv_no_grad(),
                   R.call("k_cache's shape but its head dim", lambda n, v, c: R.check_v_like_k(c["k_cache"], v, "k_cache", n),
                          bad=lambda c, n: {n: c[n][:, :-1]}),
                   R.call(f"D_v in 1..{limit('decode_head_dim_max')[1]}", lambda n, v, c: R.check_head_dim(
                       v.shape[3], "v_cache", limit("decode_head_dim_max")[1], "decode_head_dim_max"),
                          bad=lambda c, n: {n: c[n][..., :0]}))),
        Arg("cache_seqlens", "an int (numpy ints too) or an int32/int64 tensor", "(B,)", COPIED,
            "0 ≤ cache_seqlens[b] ≤ capacity (N_cache, or max_pages·page_size), less N_new with k: clamped "
            "into it on the device (the opt-in check raises instead)", ("cache_len_range",),
            "copied to a fresh int32 tensor",
            rules=(R.call("an int or an int32/int64 tensor", _cache_seqlens_kind, KIND, convert=_cache_seqlens_tensor,
                          bad=lambda c, n: {n: c[n].float()}),
                   R.shape_is(lambda c: (c["q"].shape[0],), "(batch,)"),
                   R.call("N_new ≤ capacity", _cache_room, when=lambda c: c["k"] is not None,
                          bad=lambda c, n: {"k": c["k"].new_zeros((c["k"].shape[0], _kv_capacity(c) + 1,
                                                                   *c["k"].shape[2:])),
                                            "v": c["v"].new_zeros((c["v"].shape[0], _kv_capacity(c) + 1,
                                                                   *c["v"].shape[2:]))}),
                   R.values("0 ≤ cache_seqlens[b] ≤ capacity − N_new",
                            lambda v, c: ((v < 0) | (v > _kv_capacity(c) - _n_new(c))).any(), _cache_len_error,
                            bad=lambda c, n: {n: c[n].clone().fill_(_kv_capacity(c) + 1)},
                            clamp=lambda v, c: v.clamp(0, _kv_capacity(c) - _n_new(c))))),
        Arg("k", "None or the cache's dtype", "(B, N_new, Hkv, D)", ANY,
            "written in place at keys cache_seqlens[b] + t (rotated with rotary_cos), then attended",
            rules=(R.is_tensor(), R.pair("v", "the new keys and values to append"), R.rank(4, "(batch, N_new, Hkv, D)"),
                   R.same_dtype("k_cache"), _kv_no_grad(),
                   R.shape_is(lambda c: (c["q"].shape[0], c["k"].shape[1], *c["k_cache"].shape[2:]),
                              "(batch, N_new, Hkv, D)", bad=lambda c, n: {n: c[n][..., :1], "v": c["v"][..., :1]}))),
        Arg("v", "None or the cache's dtype", "k's with v_cache's head dim D_v", ANY, "written in place beside k (bit for bit)",
            rules=(R.is_tensor(), R.pair("k", "the new keys and values to append"), R.same_dtype("v_cache"),
                   _kv_no_grad(), R.shape_is(lambda c: (*c["k"].shape[:3], c["v_cache"].shape[3]),
                                             "k's with v_cache's head dim D_v"))),
        Arg("rotary_cos", "None or a float tensor", "(seqlen_ro ≥ capacity, rotary_dim / 2), rotary_dim ≤ D",
            ANY, "with k and v only; rows cache_seqlens[b] + t (claim `rotary_rotation`)",
            rules=(R.is_tensor(), R.pair("rotary_sin", "the rotary tables"),
                   R.requires("k", "rotary_cos/rotary_sin rotate the new keys: pass k and v too (FlashAttention's "
                              "rule; rotate q yourself when nothing is appended)", bad=lambda c, n: {"k": None, "v": None}),
                   R.rank(2, "(seqlen_ro, rotary_dim / 2)"), R.dtype_in(R.DTYPES, _SUPPORTED), _kv_no_grad(),
                   R.call("rotary_dim ≤ D; seqlen_ro ≥ capacity", _rotary_dims,
                          bad=lambda c, n: {n: c[n][:1], "rotary_sin": c["rotary_sin"][:1]}))),
        Arg("rotary_sin", "None or rotary_cos's", "rotary_cos's", ANY, "as rotary_cos",
            rules=(R.is_tensor(), R.pair("rotary_cos", "the rotary tables"), R.dtype_in(R.DTYPES, _SUPPORTED),
                   _kv_no_grad(), R.shape_is(lambda c: c["rotary_cos"].shape, "rotary_cos's"))),
        Arg("rotary_interleaved", "bool", "—", NONE, "True: GPT-J pairs (2f, 2f+1); False: GPT-NeoX halves",
            rules=(R.is_bool(),)),
        Arg("cache_leftpad", "None or an int32/int64 tensor", "(B,)", COPIED,
            "0 ≤ cache_leftpad[b] ≤ cache_seqlens[b]: clamped into it on the device (opt-in check); "
            "contiguous cache only",
            rewrite="copied to a fresh int32 tensor",
            rules=(*_cache_rows_rules("row b's keys start there"),
                   R.values("0 ≤ cache_leftpad[b] ≤ cache_seqlens[b]",
                            lambda v, c: ((v < 0) | (v > c["cache_seqlens"])).any(),
                            lambda n, v, c: f"cache_leftpad must lie in [0, cache_seqlens[b]], got {v.tolist()} with "
                            f"cache_seqlens {c['cache_seqlens'].tolist()}",
                            bad=lambda c, n: {n: c["cache_seqlens"] + 1},
                            clamp=lambda v, c: torch.minimum(v.clamp(min=0), c["cache_seqlens"]).to(v.dtype)))),
        Arg("cache_batch_idx", "None or an int32/int64 tensor", "(B,)", COPIED,
            "rows in [0, k_cache.shape[0]): clamped into it on the device; distinct with k (opt-in check); "
            "contiguous cache only",
            rewrite="copied to a fresh int32 tensor",
            rules=(*_cache_rows_rules("batch b reads that cache row"),
                   R.values("rows in [0, k_cache.shape[0])",
                            lambda v, c: ((v < 0) | (v >= c["k_cache"].shape[0])).any(),
                            lambda n, v, c: f"cache_batch_idx must index the cache's {c['k_cache'].shape[0]} rows, "
                            f"got {v.tolist()}", bad=lambda c, n: {n: c[n].clone().fill_(c["k_cache"].shape[0])},
                            clamp=lambda v, c: v.clamp(0, c["k_cache"].shape[0] - 1)),
                   R.values("distinct rows (with k: two entries would append into one row)", _distinct_flags,
                            lambda n, v, c: f"cache_batch_idx {v.tolist()} repeats a row: two batch entries would "
                            "append into one cache row", when=lambda c: c["k"] is not None,
                            bad=lambda c, n: {n: c[n].clone().fill_(0)},
                            kept="no clamp can: without the check, two entries naming one row both append into it "
                            "(in either order; every write and read stays inside the cache)"))),
        Arg("block_table", "None or an int32 tensor", "(B, max_pages)", COPIED,
            "the pages a sequence reads in [0, num_pages) (the unused tail: anything): every id clamped into "
            "it on the device (opt-in check)", ("page_ids_range",),
            rules=_block_table_rules(lambda c: c["q"].shape[0], _kv_capacity,
                                     lambda c: c["cache_seqlens"] + _n_new(c), lambda c: c["k_cache"].shape[0],
                                     lambda c: c["k_cache"].shape[1])),
        CAUSAL,
        Arg("window", WINDOW.dtype, WINDOW.shape, NONE, WINDOW.values, WINDOW.assumptions,
            "each side clamped to N_q + capacity (claim `window_clamp`: the same keys)", _window_rules()),
        SCALE,
        Arg("num_splits", "an int (numpy ints too; not bool)", "—", NONE,
            f"0..{limit('num_splits_max')}; 0 picks enough splits to fill the GPU", ("num_splits_max", "grid_axes"),
            rules=(R.call("an int in 0..num_splits_max", lambda n, v, c: R.check_num_splits(v), KIND,
                          convert=lambda v, c: R.check_num_splits(v), bad=lambda c, n: {n: -1}),
                   R.call("not a bool", lambda n, v, c: R.check_num_splits(v), KIND, bad=lambda c, n: {n: True}),
                   R.call("0 with batch_invariant", _batch_invariant_splits,
                          bad=lambda c, n: {n: 3, "batch_invariant": True}),
                   R.call("the decode grid's axis 0, ceil(GROUP·N_q / 16) x splits ≤ 2^31 − 1 (CUDA's limit; "
                          "batch_invariant: one split per BATCH_INVARIANT_SPLIT_KEYS keys)", _decode_grid_splits,
                          bad=lambda c, n: {n: 2, "batch_invariant": False,
                                            **_patched(spec_launch, "GRID_AXIS0_MAX", 1)}))),
        RETURN_LSE, SOFTCAP,
        _alibi(lambda c: (((c["q"].shape[2],), _kv_sizes(c)), _kv_sizes(c))),
        _sinks(lambda c: (((c["q"].shape[2],),), _kv_sizes(c)), "any finite logits (inference only: no gradient)",
               no_grad_entry="flash_attention_with_kvcache"),
        Arg("batch_invariant", "bool", "—", NONE, "True: fixed 512-key splits, num_splits 0 "
            "(claim `batch_invariant_splits`)", rules=(R.is_bool(),)),
        *_score_mod(lambda c: (c["q"].shape[0], c["q"].shape[2]),
                    values="; b the batch entry, i the new token, shift = cache_seqlens[b] − N_q (inference only)"),
    )


def entry_points() -> dict[str, tuple[Arg, ...]]:
    """The declaration, with the limits as ``spec.assumptions`` holds them now."""
    dense_alibi_shapes = lambda c: (((c["q"].shape[1],), _dense_sizes(c)), _dense_sizes(c))  # noqa: E731
    varlen_alibi_shapes = lambda c: (((c["q"].shape[1],), _varlen_sizes(c)), _varlen_sizes(c))  # noqa: E731
    return {
        "flash_attention": _with_fp8_limits(_dense_qkv("(B, Hq, N_q, D)", "(B, Hkv, N_k, D)", "(B, Hkv, N_k, D_v)",
                                                       fp8=True) + (
            CAUSAL,
            Arg("alignment", "str", "—", NONE, '"top_left" (shift 0) or "bottom_right" (shift N_k − N_q)',
                ("alignment_shift",), rules=(R.call("one of ALIGNMENTS", _alignment_check, KIND,
                                                    bad=lambda c, n: {n: "bottom-right"}),)),
            WINDOW,
            Arg("key_lengths", "None or an int32/int64 tensor", "(B,)", COPIED,
                "0 ≤ key_lengths[b] ≤ N_k: clamped into it on the device (opt-in check)",
                ("key_len_range",), "copied to a fresh int32 tensor",
                rules=(R.is_tensor(), R.dtype_in((torch.int32, torch.int64), "key_lengths must be an int32 or int64 "
                                                 "tensor"),
                       R.call("(B,)", lambda n, v, c: None if tuple(v.shape) == (c["q"].shape[0],) else R._raise(
                           ValueError, f"key_lengths must have shape (batch,) = ({c['q'].shape[0]},), got "
                           f"{tuple(v.shape)}"), bad=lambda c, n: {n: c[n][:1]}),
                       R.values("0 ≤ key_lengths[b] ≤ N_k", _key_lengths_flags,
                                lambda n, v, c: f"key_lengths must lie in [0, N_k={c['k'].shape[2]}], got "
                                f"{v.tolist()} [key_len_range]", bad=lambda c, n: {n: c[n] + c["k"].shape[2] + 1},
                                clamp=_key_lengths_clamp))),
            Arg("mask", "None or a bool tensor", "broadcastable to (B, Hq, N_q, N_k)", ANY,
                "True = attend; edits in place are seen by the next call (nothing cached)", ("index_int32",),
                rules=(R.is_tensor(),
                       R.call("bool, broadcastable to (B, Hq, N_q, N_k)", lambda n, v, c: R.check_mask(
                           v, (*c["q"].shape[:3], c["k"].shape[2])), bad=lambda c, n: {n: c[n].float()}))),
            SCALE, RETURN_LSE, _block('"auto"', True),
            Arg("tma", 'bool or "auto"', "—", NONE,
                '"auto": TMA where the GPU has it; a layout TMA cannot read falls '
                "back with a TmaFallbackWarning", rules=(R.call('True, False or "auto"', _tma_check, KIND,
                                                                bad=lambda c, n: {n: "yes"}),)),
            SOFTCAP, _alibi(dense_alibi_shapes), _sinks(lambda c: (((c["q"].shape[1],),), _dense_sizes(c))),
            Arg("mask_mod", "None or a spec.masks.mask_mod", "—", NONE, "a predicate of the class (claim "
                "`mask_mod_sound`) with its kernels generated",
                rules=(R.call("a spec.masks.mask_mod; its mask_args packed (the call reads them as "
                              "packed_mask_args)", _mask_mod_check, bad=lambda c, n: {n: (lambda *a: True)}),)),
            Arg("mask_args", "None or {name: int | integer tensor}", "int, (B,), or (B, N_q) / (B, N_k) per parameter",
                COPIED, f"|v| ≤ {limit('mask_args_int32')}: eager check; under torch.compile clamped on the device",
                ("mask_args_int32",), "packed into one fresh int32 (B, L) tensor",
                rules=(R.call("with mask_mod", _mask_args_check, when=lambda c: c["mask_mod"] is None,
                              bad=lambda c, n: {n: {"prefix": 1}}),)),
            *_dropout(lambda c: c["q"].shape[0] * c["q"].shape[1] * c["q"].shape[2] * c["k"].shape[2]),
            *_score_mod(lambda c: c["q"].shape[:2], values=" (with mask_mod: the pair's, `--score-mod` emits them)"),
            *_fp8_args(lambda c: (c["q"].shape[0], c["k"].shape[1])),
        )),
        "flash_attention_varlen": _with_fp8_limits((
            Arg("q", _dtypes() + ", one dtype for q, k, v", f"(total_q, Hq, D), D in 1..{limit('head_dim_max')}", ANY,
                "any", ("dtypes", "head_dim_max", "gqa_divides", "seq_len_int32", "index_int32"),
                rules=(R.is_tensor(), R.supported_device(), _rank3,
                       R.call("a supported dtype or FP8", lambda n, v, c: R.check_supported_dtype(n, v, True), KIND,
                              bad=lambda c, n: {n: c[n].double()}),
                       R.call("Hq ≥ 1", lambda n, v, c: None if v.shape[1] else R._raise(
                           ValueError, f"q {tuple(v.shape)} needs at least one head (dim 1)"),
                           bad=lambda c, n: {n: c[n][:, :0]}),
                       R.call(f"D in 1..{limit('head_dim_max')}", lambda n, v, c: R.check_head_dim(v.shape[2]),
                              bad=lambda c, n: {n: c[n][..., :0], "k": c["k"][..., :0], "v": c["v"][..., :0]}),
                       replace(R.no_grad("flash_attention_varlen with block_table (paged K/V)", _INFERENCE_FIX),
                               when=_paged),
                       R.call(_seq_lens("total_q + total_k"), lambda n, v, c: R.check_seq_lens(
                           v.shape[0], c["k"].shape[0]), when=_packed, bad=lambda c, n: _lower("seq_len_int32", 1)))),
            Arg("k", "q's", "(total_k, Hkv, D), Hq % Hkv = 0 (GQA); with block_table a paged cache (num_pages, "
                "page_size, Hkv, D)", ANY, "any", ("dtypes", "gqa_divides", "page_sizes", "index_int32"),
                rules=(R.is_tensor(), replace(_rank3, when=_packed), _varlen_one_dtype,
                       R.call("packed: q's head_dim", lambda n, v, c: R.check_packed_qk_agree(c["q"], v), when=_packed,
                              bad=lambda c, n: {n: c[n][..., :1], "v": c["v"][..., :1]}),
                       R.call("packed: Hkv ≥ 1", lambda n, v, c: R.check_some_heads(c["q"], v), when=_packed,
                              bad=lambda c, n: {n: c[n][:, :0], "v": c["v"][:, :0]}),
                       R.call("packed: Hq % Hkv = 0", lambda n, v, c: R.check_gqa(c["q"].shape[1], v.shape[1]),
                              when=_packed, bad=lambda c, n: {n: torch.cat([c[n]] * 3, 1),
                                                              "v": torch.cat([c["v"]] * 3, 1)}),
                       *_paged_varlen_rules("k"))),
            Arg("v", "q's", f"k's with its own head dim D_v in 1..{limit('head_dim_max')} (MLA); out has D_v", ANY,
                "any; with block_table a view of k's storage (k[..., :D_v]) is read as it is", ("index_int32",),
                rules=(R.is_tensor(), replace(_rank3, when=_packed), _varlen_one_dtype,
                       R.call("k's shape but its head dim", lambda n, v, c: R.check_v_like_k(c["k"], v, "k", n),
                              bad=lambda c, n: {n: c[n][:-1]}),
                       R.call(f"D_v in 1..{limit('head_dim_max')}", lambda n, v, c: R.check_head_dim(v.shape[-1], "v"),
                              bad=lambda c, n: {n: c[n][..., :0]}),
                       *_paged_varlen_rules("v"))),
            Arg("cu_seqlens_q", "int32 tensor", "(B + 1,), B ≥ 1", COPIED,
                "from 0, non-decreasing, ending at total_q (read on the host, one sync, also under torch.compile); "
                "each segment's rows within int32 offsets", ("index_int32", "grid_axes"),
                rules=(R.call("int32 (B + 1,), B ≥ 1", lambda n, v, c: R.check_cu_seqlens(n, v), KIND,
                              bad=lambda c, n: {n: c[n].long()}), _offsets_in_op(),
                       R.call("B, Hq ≤ grid_axes (CUDA's grid axes 2 and 1)", lambda n, v, c: R.check_grid_axes(
                           n, v.shape[0] - 1, c["q"].shape[1]), bad=lambda c, n: _lower("grid_axes", 0)))),
            Arg("cu_seqlens_k", "int32 tensor", "cu_seqlens_q's", COPIED,
                "as cu_seqlens_q, ending at total_k; with block_table each sequence's key count ≤ its pages' "
                "capacity (opt-in check; else clamped to it by the paged path)", ("index_int32", "cache_len_range"),
                rules=(R.call("int32 (B + 1,), B ≥ 1", lambda n, v, c: R.check_cu_seqlens(n, v), KIND,
                              bad=lambda c, n: {n: c[n].long()}), _offsets_in_op(),
                       R.call("cu_seqlens_q's length", lambda n, v, c: None if v.numel() == c[
                           "cu_seqlens_q"].numel() else R._raise(ValueError, f"cu_seqlens_q has "
                           f"{c['cu_seqlens_q'].numel()} entries and cu_seqlens_k {v.numel()}; both must hold B + 1 "
                           "(one query segment per key segment)"), bad=lambda c, n: {n: torch.cat([c[n], c[n][-1:]])}),
                       R.values("paged: each sequence's keys ≤ max_pages·page_size",
                                lambda v, c: (_segment_lengths(v) > _paged_cache_capacity(c)).any(),
                                lambda n, v, c: f"cu_seqlens_k gives a sequence {int(_segment_lengths(v).max())} keys, "
                                f"more than its pages hold (max_pages·page_size = {_paged_cache_capacity(c)}) "
                                "[cache_len_range]; pass a wider block_table", when=_paged,
                                bad=lambda c, n: {n: c[n] * 0 + torch.arange(c[n].numel(), dtype=c[n].dtype) * (
                                    _paged_cache_capacity(c) + 1)},
                                kept=_KEPT_BY_KVCACHE
                                + " (each sequence's key count clamped to its pages' capacity)"))),
            Arg("max_seqlen_q", "None or an int ≥ 0", "—", NONE,
                "None (computed) or ≥ the longest query segment",
                rules=(R.call("None or an int ≥ 0", lambda n, v, c: R.check_max_seqlen(n, v), KIND,
                              convert=lambda v, c: R.check_max_seqlen("max_seqlen_q", v), bad=lambda c, n: {n: -1}),
                       _hint_in_op(0))),
            Arg("max_seqlen_k", "None or an int ≥ 0", "—", NONE, "None (computed) or ≥ the longest key segment",
                rules=(R.call("None or an int ≥ 0", lambda n, v, c: R.check_max_seqlen(n, v), KIND,
                              convert=lambda v, c: R.check_max_seqlen("max_seqlen_k", v), bad=lambda c, n: {n: 2.5}),
                       _hint_in_op(1, when=_packed))),
            CAUSAL, WINDOW, SCALE, RETURN_LSE, _block('(64, 64); "auto" allowed', True), SOFTCAP,
            _alibi(varlen_alibi_shapes, shape="(Hq,) or (B, Hq), B the segments"),
            _sinks(lambda c: (((c["q"].shape[1],),), _varlen_sizes(c))),
            *_dropout(lambda c: c["q"].shape[1] * c["q"].shape[0] * c["k"].shape[0]),
            Arg("batch_invariant", "bool", "—", NONE, "True or False (the packed kernels are batch invariant)",
                rules=(R.is_bool(),)),
            Arg("block_table", "None or an int32 tensor", "(B, max_pages)", COPIED,
                f"k, v then paged caches (num_pages, page_size {_pow2s('page_sizes')}, Hkv, D), cu_seqlens_k their "
                "key counts; "
                "forward only, no dropout; the pages a sequence reads in [0, num_pages) (opt-in check; else clamped "
                "into it by the paged path)",
                ("page_sizes", "page_ids_range"),
                rules=(*_block_table_rules(lambda c: c["cu_seqlens_q"].numel() - 1, _paged_cache_capacity,
                                           lambda c: _segment_lengths(c["cu_seqlens_k"]),
                                           lambda c: c["k"].shape[0], lambda c: c["k"].shape[1], clamp=False),
                       R.call("forward only: no dropout", lambda n, v, c: None if c["dropout_p"] == 0 and not c[
                           "return_dropout_mask"] else R._raise(ValueError, "block_table (paged K/V) is forward "
                           "inference only: pass dropout_p=0.0 and return_dropout_mask=False, or use contiguous k, v "
                           "for dropout"), bad=lambda c, n: {"dropout_p": 0.5}))),
            *_score_mod(lambda c: (c["cu_seqlens_q"].numel() - 1, c["q"].shape[1]), extra=(
                R.call("not with block_table (the paged form runs the decode kernel)", lambda n, v, c: R._raise(
                    ValueError, "score_mod with block_table (paged K/V) has no generated kernel: pass contiguous "
                    "packed k, v"), when=_paged, bad=lambda c, n: {n: _example_score_mod(), "score_args": {"cap": 2.0}}),),
                values="; per segment (b the segment; i, j, shift its own); not with block_table"),
            *_fp8_args(lambda c: (c["cu_seqlens_q"].numel() - 1, c["k"].shape[1])),
        )),
        "flash_attention_with_kvcache": _kvcache(),
        "merge_state": (
            Arg("o_a", _dtypes(), f"(..., D), D ≤ {limit('merge_head_dim_max')} (0 allowed: lse only)", ROWS,
                "normalised partial outputs", ("dtypes", "merge_head_dim_max"), rules=_lead_tensor(_merge_o())),
            Arg("lse_a", "float32", "o_a's without D", COPIED, "natural log; −inf for a part with no key",
                rules=_merge_lse("o_a")),
            Arg("o_b", "o_a's", "o_a's", ROWS, "as o_a",
                rules=(R.is_tensor(), R.call("o_a's shape and dtype", lambda n, v, c: None if (
                    v.shape == c["o_a"].shape and v.dtype == c["o_a"].dtype) else R._raise(
                    ValueError, f"o_a and o_b must share shape and dtype, got {tuple(c['o_a'].shape)} {c['o_a'].dtype} "
                    f"and {tuple(v.shape)} {v.dtype}"), KIND, bad=lambda c, n: {n: c[n][..., :1]}))),
            Arg("lse_b", "float32", "lse_a's", COPIED, "as lse_a", rules=_merge_lse("o_b")),
        ),
        "merge_states": (
            Arg("o", _dtypes(), f"(S, ..., D), D ≤ {limit('merge_head_dim_max')} (0 allowed: lse only); S = 0: the "
                "identity", ROWS, "S normalised partial outputs", ("dtypes", "merge_head_dim_max"),
                rules=_lead_tensor(_merge_o(lead=1))),
            Arg("lse", "float32", "o's without D", COPIED, "natural log; −inf for a part with no key",
                rules=_merge_lse("o")),
        ),
        "ring_attention": _ring_qkv(_dense_qkv("(B, Hq, N/P, D): this rank's shard", "(B, Hkv, N/P, D), q's N/P",
                                               "(B, Hkv, N/P, D_v)", COPIED + "; sent around the ring")) + (
            Arg("group", "a torch.distributed process group, or None: the world", "—", NONE,
                "its ranks pass alike: the shapes and dtype of q, k, v, causal, scale, layout, block (one all_gather "
                "of every rule marked 'alike on every rank'; a rank whose own rules refuse its call tells the others, "
                "so every rank raises)",
                rules=(R.call("torch.distributed initialised", _ring_initialised, KIND,
                              bad=lambda c, n: _patched(_dist(), "is_initialized", lambda: False)),
                       R.call("a process group", _ring_group, KIND, bad=lambda c, n: {n: "world"}),
                       R.call("this process a member", _ring_member, KIND,
                              bad=lambda c, n: {n: _dist().GroupMember.NON_GROUP_MEMBER}))),
            *(replace(a, rules=a.rules + (_RING_PEERS[a.name],)) for a in (CAUSAL, SCALE)),
            Arg("layout", "str", "—", NONE, '"zigzag" (N divisible by 2P) or "contiguous" (by P)',
                rules=(R.call("one of LAYOUTS", lambda n, v, c: _ring_layout(v), KIND, bad=lambda c, n: {n: "ring"}),
                       R.in_op("zigzag: N divisible by 2P (an even shard length)", _ring_chunks,
                               bad=lambda c, n: {n: "zigzag", **{t: c[t][:, :, :-1] for t in ("q", "k", "v")}}),
                       _RING_PEERS["layout"])),
            RETURN_LSE,
            (lambda a: replace(a, rules=a.rules + (_RING_PEERS["block"],)))(_block('(64, 64); "auto" allowed', True)),
        ),
        "softmax": (
            Arg("x", _dtypes(), "any, rank ≥ 1", ROWS, "any; a row of only −inf gives zeros", ("dtypes",),
                rules=_lead_tensor((R.call("a supported dtype", lambda n, v, c: R.check_supported_dtype(n, v), KIND,
                                           bad=lambda c, n: {n: c[n].double()}),
                                    R.call("rank ≥ 1", lambda n, v, c: R.check_not_scalar(n, v), KIND,
                                           bad=lambda c, n: {n: c[n][0, 0, 0]})))),
            Arg("dim", "an int (numpy ints too)", "−x.dim() ≤ dim < x.dim()", NONE, "an empty dim gives an empty "
                "result", rules=(R.call("an int", lambda n, v, c: R._as_int(v, "dim"), KIND,
                                        convert=lambda v, c: R._as_int(v, "dim"), bad=lambda c, n: {n: 1.0}),)),
            _block("(64, 64)", False),
        ),
    }


def _dist():
    import torch.distributed as dist

    return dist


def _ring_initialised(n, v, c):
    dist = _dist()
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"ring_attention needs torch.distributed for its {n} (None: the world): call "
                           "torch.distributed.init_process_group (backend 'nccl' on GPUs, 'gloo' on CPU) on every rank "
                           "first")


def _non_member(v) -> bool:
    """What ``torch.distributed.new_group`` returns on a process outside the group (an int sentinel)."""
    non_member = _dist().GroupMember.NON_GROUP_MEMBER
    return v is non_member or (type(v) is type(non_member) and v == non_member)


def _ring_group(n, v, c):
    if v is not None and not _non_member(v) and not (hasattr(v, "rank") or hasattr(v, "size")):
        raise TypeError(f"{n} must be a torch.distributed process group or None, got {type(v).__name__}")


def _ring_member(n, v, c):
    dist = _dist()
    if _non_member(v) or (v is not None and dist.get_rank(v) < 0):
        raise ValueError(f"{n}: this process (global rank {dist.get_rank()}) is not a member of {n} "
                         "(torch.distributed.new_group returns GroupMember.NON_GROUP_MEMBER on the other processes): "
                         "call ring_attention on the group's ranks only")


def _ring_layout(layout):
    from generator.runtime.ring import _check_layout

    _check_layout(layout)


def _ring_chunks(n, v, c):
    """The layout's equal chunks of the whole sequence (P shards): what ``ring_attention`` checks once its
    process group is known."""
    import torch.distributed as dist

    from generator.runtime.ring import _chunk_size

    P = dist.get_world_size(c["group"])
    _chunk_size(c["q"].shape[2] * P, P, v, "the sequence (P x the shard length)")


def _ring_shards(n, v, c):
    if c["q"].shape[2] != v.shape[2]:
        raise ValueError(f"ring_attention needs q and k shards of one length (each rank holds the same positions "
                         f"of q, k and v), got q {tuple(c['q'].shape)} and k {tuple(v.shape)}")


def _with_devices(entries: dict) -> dict:
    """Each entry point's arguments with the device rule derived for every tensor argument past
    the first: on the leading tensor's device (the first has ``supported_device``). A mapping of
    tensors (``mask_args``) is moved to that device by its packing (``MaskMod.pack``)."""
    out = {}
    for entry, args in entries.items():
        lead = args[0].name
        out[entry] = tuple(a if not a.tensor or a.name == lead or "{" in a.dtype
                           else replace(a, rules=a.rules + (R.same_device(lead),)) for a in args)
    return out


#: the declaration at import (``entry_points()`` re-reads the limits)
ENTRY_POINTS = _with_devices(entry_points())

#: per entry point, ``(argument, optional, rule)`` in the order ``enforce`` runs them: by stage, then
#: in the order of the signature
_ORDER = {entry: tuple(sorted(((a.name, a.optional, r) for a in args for r in a.rules), key=lambda x: x[2].stage))
          for entry, args in ENTRY_POINTS.items()}


#: per entry point, its ``PEERS`` rules ``(argument, rule)`` in the order of the signature (``_agree``)
_PEER_RULES = {entry: tuple((name, r) for name, _, r in order if r.stage == PEERS) for entry, order in _ORDER.items()}

#: per entry point, its value rules only (what a cached call runs)
_VALUE_RULES = {entry: tuple(x for x in order if x[2].stage == VALUES) for entry, order in _ORDER.items()}

#: the opt-in of the value checks: ``[on]`` (``FLASHPROOF_CHECK_VALUES=1`` at import, or ``checking_values``)
_CHECKING = [os.environ.get("FLASHPROOF_CHECK_VALUES", "0").strip().lower() not in ("", "0", "false", "no")]


def values_checked() -> bool:
    """Whether eager calls check the value rules (named errors, one host sync per call)."""
    return _CHECKING[0]


@contextlib.contextmanager
def checking_values(on: bool = True):
    """Within: eager calls check their value rules (``cache_seqlens``, the page ids, ``key_lengths``,
    ...) and raise the named error before a kernel runs, at the cost of one device->host sync per
    call (not CUDA-graph capturable). Without it (the default) each value is clamped into its range
    on the device and no value is read on the host. ``FLASHPROOF_CHECK_VALUES=1`` turns it on for the
    process."""
    before, _CHECKING[0] = _CHECKING[0], on
    try:
        yield
    finally:
        _CHECKING[0] = before


def value_rules(entry: str, arguments: dict) -> tuple:
    """``(name, rule)`` of the value rules of ``entry`` that apply to this call: which optional tensors
    are given and the rules' ``when`` (metadata only, so a plan may keep the answer per signature)."""
    return tuple((name, rule) for name, optional, rule in _VALUE_RULES[entry]
                 if not (arguments[name] is None and optional) and (rule.when is None or rule.when(arguments)))


def keep_values(entry: str, arguments: dict, rules: tuple | None = None) -> dict:
    """The value rules of this call (``rules``, else ``value_rules``) on ``arguments`` (as the entry point
    goes on with them: tensors converted), every call since values can change in place: checked when
    ``values_checked()`` (eager only: the named error, one host sync), then each value replaced by its
    rule's ``clamp`` (device operations, no sync: what the call goes on with). Returns ``arguments``."""
    if rules is None:
        rules = value_rules(entry, arguments)
    if _CHECKING[0] and rules and not torch.compiler.is_compiling():
        check_values(rules, arguments)
    for name, rule in rules:
        if rule.clamp is not None:
            arguments[name] = rule.clamp(arguments[name], arguments)
    return arguments


def enforce(entry: str, arguments: dict, values: bool = True) -> dict:
    """Every declared rule of ``entry`` on ``arguments`` (name -> value, the whole signature):
    the first broken one raises its error (naming the argument, the problem and the fix). Returns
    the arguments as the call goes on with them (the rules' conversions: ``scale`` a float,
    ``window`` a pair of ints, ``cache_seqlens`` an int tensor, ...). Value rules (``VALUES``) run
    as ``keep_values`` runs them (``values=False``: not at all, the caller does). An entry point with
    ``PEERS`` rules (``ring_attention``) then compares them across its process group (``_agree``)."""
    if not _PEER_RULES[entry]:
        return _enforce_here(entry, arguments, values)
    try:
        ctx = _enforce_here(entry, arguments, values)
    except Exception as error:
        with contextlib.suppress(Exception):  # whatever the exchange meets, this rank's own error stands
            _agree(entry, arguments, None, getattr(error, "_contract_rule", len(_ORDER[entry])), error)
        raise
    _agree(entry, arguments, ctx, -1, None)
    return ctx


def _enforce_here(entry: str, arguments: dict, values: bool) -> dict:
    """``enforce`` on this process alone (every stage up to ``IN_OP``); an error carries the index of the
    rule that raised it in ``_ORDER[entry]`` (``_contract_rule``: what ``_agree`` tells the peers)."""
    ctx = dict(arguments)
    pending = []
    for index, (name, optional, rule) in enumerate(_ORDER[entry]):
        if rule.stage >= IN_OP:
            break  # the op checks these itself (IN_OP); PEERS: across the ranks, by _agree
        value = ctx[name]
        if value is None and optional:
            continue
        if rule.when is not None and not rule.when(ctx):
            continue
        if rule.stage == VALUES:
            pending.append((name, rule))
            continue
        try:
            if rule.convert is None:
                rule.check(name, value, ctx)
            else:  # checks and converts in one call
                ctx[name] = rule.convert(value, ctx)
        except Exception as error:
            error._contract_rule = index
            raise
    if values and pending:
        keep_values(entry, ctx, tuple(pending))
    return ctx


#: the argument that names the process group of an entry point with ``PEERS`` rules (None: the world)
GROUP = "group"


def _exchange_device(group, lead) -> torch.device:
    """Where the facts travel: a CUDA tensor for NCCL (q's device, else the current one), the CPU for any
    other backend (gloo, and the CPU side of a mixed "cpu:gloo,cuda:nccl" group)."""
    if _backend(group) != "nccl":
        return torch.device("cpu")
    if isinstance(lead, torch.Tensor) and lead.is_cuda:
        return lead.device
    return torch.device("cuda", torch.cuda.current_device())


def _backend(group) -> str:
    import torch.distributed as dist

    return str(dist.get_backend(group))


def _agree(entry: str, arguments: dict, ctx: dict | None, failed: int, error: BaseException | None) -> None:
    """The ``PEERS`` rules of ``entry`` across the ranks of ``arguments[GROUP]``: each rank sends, in one
    all_gather of ``1 + Σ width`` int64s, the index of the local rule that refused its call (``failed``;
    -1: none) and every ``PEERS`` fact of its call (``ctx``). Every rank receives the same rows, so every
    rank raises the same error: a refused rank its own (``error``, re-raised by ``enforce``), the others a
    ValueError naming that rank and its argument; else the first ``PEERS`` rule whose facts differ
    (``checks.agree``'s error, naming the first rank that differs from rank 0). No rank waits for a
    peer that gave up: that is what made a mismatch a hang. Without an exchange (torch.distributed not
    initialised, a group refused or that this process is not in, one rank) it returns at once."""
    import torch.distributed as dist

    rules = _PEER_RULES[entry]
    group = arguments[GROUP]
    order = _ORDER[entry]
    if 0 <= failed < len(order) and order[failed][0] == GROUP:
        return  # no group to exchange over: this rank raises alone
    if not (dist.is_available() and dist.is_initialized()):
        return  # the op's own error (torch.distributed must be initialised) follows on every rank
    if dist.get_rank(group) < 0 or dist.get_world_size(group) <= 1:
        return
    width = sum(rule.width for _, rule in rules)
    if error is None:
        facts = [x for name, rule in rules for x in _fact(rule, name, ctx)]
    else:
        facts = [0] * width
    lead = arguments[ENTRY_POINTS[entry][0].name]
    mine = torch.tensor([failed, *facts], dtype=torch.int64, device=_exchange_device(group, lead))
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    try:
        dist.all_gather(every, mine, group=group)
    except RuntimeError as e:
        raise RuntimeError(f"{entry}: rank {dist.get_rank(group)} could not compare its arguments with the other "
                           f"ranks of its process group (a peer raised before the comparison, died or is slower than "
                           f"the group's timeout). Cause: {e}") from e
    rows = [t.tolist() for t in every]
    refused = [(r, row[0]) for r, row in enumerate(rows) if row[0] >= 0]
    if refused:
        if error is not None:
            error.add_note(f"{entry}: the other ranks of the process group raise ValueError naming this rank")
            return  # enforce re-raises this rank's own error
        r, index = refused[0]
        what = (f"its argument {order[index][0]} ({order[index][2].text})" if index < len(order)
                else "its arguments")
        raise ValueError(f"{entry}: rank {r} of {len(rows)} refused {what}; see that rank's error for the problem "
                         f"and fix it there (every rank raises, none runs)")
    start = 1
    for name, rule in rules:
        rule.check(name, [tuple(row[start:start + rule.width]) for row in rows], ctx)
        start += rule.width


def _fact(rule, name: str, ctx: dict) -> tuple[int, ...]:
    fact = tuple(int(x) for x in rule.fact(ctx[name], ctx))
    if len(fact) != rule.width:
        raise AssertionError(f"PEERS rule {rule.text!r} of {name}: fact {fact} is not {rule.width} ints wide")
    return fact


def check_values(pending, ctx) -> None:
    """The value rules of one call: their flags computed on the device and read back together, the
    call's one host sync (the opt-in of ``keep_values``)."""
    if len(pending) == 1:  # one rule: its flag read back alone (no stack)
        name, rule = pending[0]
        if rule.flags(ctx[name], ctx).item():
            rule.check(name, ctx[name], ctx)
        return
    flags = torch.stack([rule.flags(ctx[name], ctx) for name, rule in pending]).tolist()
    for (name, rule), broken in zip(pending, flags):
        if broken:
            rule.check(name, ctx[name], ctx)


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


def _kept(rule) -> str:
    """How a value rule holds: its opt-in check, else its clamp or what ``kept`` says."""
    kept = "clamped into it on the device" if rule.clamp else rule.kept
    return f" (checked with FLASHPROOF_CHECK_VALUES=1; else {kept})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """One table per entry point: argument, dtype, shape, strides, accepted values and their
    enforcement, the normalisation, and the assumptions (``spec/assumptions.py``) it answers to."""
    out = []
    stages = {KIND: "", RELATION: "", VALUES: "", IN_OP: "", PEERS: ""}
    for entry, args in _with_devices(entry_points()).items():
        out += [f"**`{entry}`**", "", "| argument | dtype | shape | strides | values | normalised | assumptions | "
                "rules enforced |", "|---|---|---|---|---|---|---|---|"]
        for a in args:
            named = ", ".join(f"`{n}`" for n in a.assumptions) or "—"
            rules = "; ".join(r.text + (_kept(r) if r.stage == VALUES else stages[r.stage]) for r in a.rules)
            out.append(f"| `{a.name}` | {_cell(a.dtype)} | {_cell(a.shape)} | {_cell(a.strides)} | "
                       f"{_cell(a.values)} | {_cell(a.rewrite) or '—'} | {named} | {_cell(rules)} |")
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
