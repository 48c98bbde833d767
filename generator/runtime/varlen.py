"""``flash_attention_varlen``: packed variable-length batches, FlashAttention's ``cu_seqlens`` layout.

One file for the op (Liger-Kernel style): the call of the declared contract, the custom ops
``flashproof::flash_attention_varlen`` and ``..._backward`` (with fake implementations, so
``torch.compile`` traces through them) and their autograd. The kernels are the dense ones of
``generated/attention_{fwd,bwd}_*.py`` with ``IS_VARLEN=True`` (``forward_varlen``,
``backward_varlen``): a program per (tile, segment x head), the segment's lengths and
bottom-right shift printed from ``spec.varlen.SEGMENT`` (claim ``varlen_segments_sound``).

Checks in two places: the Python entry point enforces the declared contract
(``generator.runtime.contract``: types, ranks, dtypes, devices, shapes; with ``block_table``, the
page ids and key counts' values in eager mode); the op checks the offsets' *values*
(``spec.varlen.segments``: from 0, non-decreasing, ending at the totals; the max_seqlen hints
against the real lengths), one host read of the two small offset vectors, so the check also
runs inside a compiled graph.

Score modifiers (softcap, ALiBi, sinks: issue 15) reach varlen the way they reach the dense
path: a keyword of ``flash_attention_varlen`` and an argument of both ops, passed on to
``forward_varlen`` / ``backward_varlen`` by ``_kernel_options``, whose kernels are the dense ones
(``IS_VARLEN`` only changes the block that maps a program to its segment: ALiBi's shift is the
segment's own ``n_k - n_q``, its ``(B, Hq)`` slopes index the segment), so the printed score
terms apply per segment unchanged.
"""

from __future__ import annotations

from typing import Optional

import torch

from spec import launch as spec_launch
from spec import varlen as spec_varlen

from generator.runtime import api, checks, contract, dispatch, plans

#: what an omitted max_seqlen hint is passed to the op as: computed from the offsets
COMPUTE = checks.COMPUTE
#: the packed tensors indexed by key rows (the rest by query rows)
KEY_SIDE = ("k", "v", "dk", "dv")


def resolve_max_seqlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **rows) -> dict:
    """The offsets checked by value (``spec.varlen.segments``) and the grids' hints by name,
    ``{"max_seqlen_q": ..., "max_seqlen_k": ...}`` (the launchers take them by keyword and
    ``spec.launch.dkdv_launch`` / ``dq_launch`` each pick their own: claim varlen_addresses): each
    computed where the hint is ``COMPUTE``, else the hint, which may not be below a real segment
    (a smaller grid would silently drop that segment's last rows). Each packed tensor's longest
    segment is checked for int32 offsets (``index_int32``: the kernels offset a segment's first
    row in int64, its rows and head dim in int32): ``q, k`` and the further packed tensors
    ``rows`` (``name=tensor``: v, out, grad_out), query-side unless named in ``KEY_SIDE``.

    The offsets are read on every call (so an edit in place is checked, even one that torch's version
    counter does not see: ``tests/test_reliability.py``'s row 5 for masks), both vectors in one read
    back to the host: one device->host sync per call."""
    if cu_seqlens_q.shape == cu_seqlens_k.shape:  # B + 1 each: one read of both
        both = torch.cat((cu_seqlens_q, cu_seqlens_k)).tolist()
        cu_q, cu_k = both[:len(both) // 2], both[len(both) // 2:]
    else:  # their lengths differ: spec.varlen.segments names the problem
        cu_q, cu_k = cu_seqlens_q.cpu(), cu_seqlens_k.cpu()
    segs = spec_varlen.segments(cu_q, cu_k, q.shape[0], k.shape[0])
    longest = (max(q1 - q0 for q0, q1, _, _ in segs), max(k1 - k0 for _, _, k0, k1 in segs))
    for name, t in {"q": q, "k": k, **rows}.items():
        n = longest[1] if name in KEY_SIDE else longest[0]
        checks.check_index_width(**{name: ((n, t.shape[2]), (t.stride(0), t.stride(2)))})
    return {name: checks.check_hint(name, hint, n) for name, hint, n in (("max_seqlen_q", max_seqlen_q, longest[0]),
                                                                           ("max_seqlen_k", max_seqlen_k, longest[1]))}


def _kernel_options(q, causal, window, scale, softcap, alibi_slopes, sinks, dropout_p=0.0, philox=None, score_f=None,
                    score_i=None) -> dict:
    """The keywords ``forward_varlen`` and ``backward_varlen`` both take, from the ops' arguments."""
    return {"sm_scale": checks.sm_scale_of(scale, q.shape[-1]), "causal": causal,
            "window": None if window is None else tuple(window), "softcap": softcap,
            "alibi_slopes": alibi_slopes, "sinks": sinks, **dispatch.dropout_arguments(dropout_p, philox),
            **dispatch.score_mod_arguments(score_f, score_i)}


# ----------------------------------------------------------------------------------
# The custom ops and their autograd
# ----------------------------------------------------------------------------------
@torch.library.custom_op("flashproof::flash_attention_varlen", mutates_args=())
def flash_attention_varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                              cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                              window: Optional[list[int]], scale: Optional[float], block_m: int,
                              block_n: int, softcap: Optional[float] = None,
                              alibi_slopes: Optional[torch.Tensor] = None,
                              sinks: Optional[torch.Tensor] = None,
                              package: str = api.DEFAULT_PACKAGE, dropout_p: float = 0.0,
                              philox: Optional[torch.Tensor] = None, score_mod: Optional[str] = None,
                              score_f: Optional[torch.Tensor] = None,
                              score_i: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, scale, block_m,
                    block_n, softcap, alibi_slopes, sinks, package, dropout_p, philox, score_mod, score_f, score_i)


def _forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, scale, block_m, block_n,
             softcap=None, alibi_slopes=None, sinks=None, package=api.DEFAULT_PACKAGE, dropout_p=0.0, philox=None,
             score_mod=None, score_f=None, score_i=None):
    """The forward op's body: the offsets' values checked (``resolve_max_seqlen``), the packed kernel launched.
    ``_varlen`` runs it directly where nothing needs the dispatcher (``plans.direct``)."""
    module = dispatch.module_of("fwd", (block_m, block_n), package, q.device, None, score_mod)
    hints = resolve_max_seqlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, v=v,
                               out=torch.empty((*q.shape[:2], v.shape[2]), device="meta"))  # out: fresh, contiguous
    return module.forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, hints["max_seqlen_q"],
                                 **_kernel_options(q, causal, window, scale, softcap, alibi_slopes, sinks, dropout_p,
                                                   philox, score_f, score_i))


@flash_attention_varlen_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, scale, block_m, block_n,
      softcap=None, alibi_slopes=None, sinks=None, package=api.DEFAULT_PACKAGE, dropout_p=0.0, philox=None,
      score_mod=None, score_f=None, score_i=None):
    return (q.new_empty((*q.shape[:2], v.shape[2])),  # (total_q, Hq, D_v), contiguous
            q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32))


@torch.library.custom_op("flashproof::flash_attention_varlen_backward", mutates_args=())
def flash_attention_varlen_backward_op(
        grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
        v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool, window: Optional[list[int]],
        scale: Optional[float], block_m: int, block_n: int, softcap: Optional[float] = None,
        alibi_slopes: Optional[torch.Tensor] = None, sinks: Optional[torch.Tensor] = None,
        package: str = api.DEFAULT_PACKAGE, dropout_p: float = 0.0, philox: Optional[torch.Tensor] = None,
        score_mod: Optional[str] = None, score_f: Optional[torch.Tensor] = None, score_i: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv, dsinks, dscore_f)``; ``dsinks`` is ``(Hq,)`` fp32, empty ``(0,)`` without sinks;
    ``dscore_f`` the gradient of a user score_mod's packed float parameters (``score_f``'s shape), empty
    ``(0,)`` without one."""
    module = dispatch.module_of("bwd", (block_m, block_n), package, q.device, None, score_mod)
    hints = resolve_max_seqlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, v=v, out=out,
                               grad_out=grad_out)
    # the hints by name (keyword-only: dkdv_launch sizes the dK/dV grid by max_seqlen_k, dq_launch the dQ grid by
    # max_seqlen_q: claim varlen_addresses)
    dq, dk, dv, dsink_rows, *dscore_f = module.backward_varlen(
        grad_out, q, k, v, out, lse.contiguous(), cu_seqlens_q, cu_seqlens_k, **hints, grad_lse=grad_lse,
        **_kernel_options(q, causal, window, scale, softcap, alibi_slopes, sinks, dropout_p, philox, score_f, score_i))
    # dL/dsink of a head: the sum over its packed rows (all segments) of the kernel's per-row parts
    dsinks = dsink_rows.sum(1) if dsink_rows is not None else q.new_empty((0,), dtype=torch.float32)
    return dq, dk, dv, dsinks, dscore_f[0] if score_mod is not None else q.new_empty((0,), dtype=torch.float32)


@flash_attention_varlen_backward_op.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
      window, scale, block_m, block_n, softcap=None, alibi_slopes=None, sinks=None, package=api.DEFAULT_PACKAGE,
      dropout_p=0.0, philox=None, score_mod=None, score_f=None, score_i=None):
    dsinks = q.new_empty((0,) if sinks is None else (q.shape[1],), dtype=torch.float32)
    dscore_f = q.new_empty((0,) if score_mod is None else tuple(score_f.shape), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks, dscore_f


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, *options = inputs
    out, lse = output
    *options, alibi_slopes, sinks, package, dropout_p, philox, score_mod, score_f, score_i = options
    # the dropout's seed and offset are saved: the backward regenerates the forward's mask from them
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, philox, score_f,
                          score_i)
    ctx.options = options  # max_seqlen_q, max_seqlen_k, causal, window, scale, block_m, block_n, softcap
    ctx.package = package
    ctx.dropout_p = dropout_p
    ctx.score_mod = score_mod


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, philox, score_f, score_i = ctx.saved_tensors
    dq, dk, dv, dsinks, dscore_f = flash_attention_varlen_backward_op(
        grad_out, grad_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.options, alibi_slopes, sinks,
        ctx.package, ctx.dropout_p, philox, ctx.score_mod, score_f, score_i)
    # gradients for (q, k, v), the sinks and a score_mod's packed float parameters (autograd carries them
    # back to each tensor packed); the offsets, the options, alibi_slopes, the package, the dropout's p
    # and seed, the score_mod's name and integer parameters are not differentiable
    return (dq, dk, dv, *([None] * (3 + len(ctx.options))), dsinks if sinks is not None else None, None, None, None,
            None, dscore_f if ctx.score_mod is not None else None, None)


torch.library.register_autograd("flashproof::flash_attention_varlen", _backward, setup_context=_setup_context)


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *,
                           causal=False, window=None, scale=None, return_lse=False, block=api.DEFAULT_BLOCK,
                           softcap=None, alibi_slopes=None, sinks=None, dropout_p=0.0, return_dropout_mask=False,
                           batch_invariant=False, block_table=None, score_mod=None, score_args=None, q_descale=None,
                           k_descale=None, v_descale=None, out_dtype=None):
    """Attention over a packed batch of variable-length sequences (FlashAttention's
    ``flash_attn_varlen_func`` layout and conventions), through the generated kernels.

    ``q (total_q, Hq, D)``, ``k, v (total_k, Hkv, D)`` with ``Hq % Hkv == 0`` (GQA, no copies);
    ``cu_seqlens_q/k`` int32 ``(B + 1,)``, non-decreasing, from 0 to ``total_q`` / ``total_k``:
    segment ``b`` is the query rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` against the keys
    ``cu_seqlens_k[b]:cu_seqlens_k[b+1]``, and keys never cross segments. ``causal`` and
    ``window=(left, right)`` are bottom-right aligned per segment: query ``i`` of a segment with
    ``n_q`` queries and ``n_k`` keys sees key ``j`` when ``j <= i + n_k - n_q`` (window:
    ``-left <= j - (i + n_k - n_q) <= right``). ``max_seqlen_q/k`` size the grid (computed from
    the offsets when None; a value below a real segment's length is an error). ``scale``
    defaults to 1/sqrt(D). Semantics: ``spec.reference.varlen_attention``.

    Returns ``out`` (q's dtype), or ``(out, lse)`` with ``return_lse=True`` (``lse`` float32
    ``(Hq, total_q)``, natural log). Segments may be empty; a query row with no key gives output
    0, lse -inf and zero gradients. Differentiable in q, k, v; deterministic (no atomics).
    ``block``: a generated ``(B_r, B_c)``, or ``"auto"`` (``flash_attention``'s choice per GPU and
    head dim); the varlen kernels move their tiles by pointers (no TMA path). ``softcap``,
    ``alibi_slopes`` (float32 ``(Hq,)`` or ``(B, Hq)``, B the segments; the bias is bottom-right
    per segment) and ``sinks`` (float32 ``(Hq,)``, differentiable): as ``flash_attention``'s.
    ``dropout_p``: as ``flash_attention``'s (FlashAttention 2's dropout); its keep mask is a function
    of (head, global row, global key), and ``return_dropout_mask=True`` appends it as a bool
    ``(Hq, total_q, total_k)`` tensor (only the entries of a segment's own keys are used).

    ``block_table`` int32 ``(B, max_pages)`` (FlashAttention 2's paged form, forward only): ``k``, ``v``
    are paged caches ``(num_pages, page_size, Hkv, D)`` (``page_size`` a power of two from 16 to 512)
    and ``cu_seqlens_k`` counts each sequence's keys, which live in its pages ``block_table[b]``; run
    by the KV-cache decode kernel (``generator.runtime.varlen_paged``, claim ``paged_kv_reads``).

    ``score_mod`` with ``score_args``: as ``flash_attention``'s (your own ``@score_mod``, its kernels
    emitted with ``python -m generator --score-mod module:name``), per segment: ``b`` is the segment,
    ``i``, ``j`` its own query row and key, ``shift`` its ``n_k − n_q``; a bare ``b`` reads an axis of
    at least B (segments) entries. Differentiable in the tensors it reads (no atomics). Not with
    ``block_table``.

    ``batch_invariant``: accepted for symmetry with ``flash_attention_with_kvcache``; the packed
    kernels are always batch invariant: no split, each program reduces over its own segment's keys
    from the segment's first key (claim ``varlen_segments_sound``: a segment is the dense problem on
    its slice), so a sequence's rows are bitwise the same alone and packed with any others.

    FP8 (``flash_attention``'s, FlashAttention 3's ``flash_attn_varlen_func``): ``q, k, v`` in
    ``float8_e4m3fn`` / ``float8_e5m2`` (or an fp16/bf16 ``q``) with float32 ``(B, Hkv)`` descales, B the
    segments; out in ``out_dtype`` (bf16 by default), forward only (docs/fp8.md).
    """
    return _varlen(api.DEFAULT_PACKAGE, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   causal=causal, window=window, scale=scale, return_lse=return_lse, block=block, softcap=softcap,
                   alibi_slopes=alibi_slopes, sinks=sinks, dropout_p=dropout_p, return_dropout_mask=return_dropout_mask,
                   batch_invariant=batch_invariant, block_table=block_table, score_mod=score_mod,
                   score_args=score_args, q_descale=q_descale,
                   k_descale=k_descale, v_descale=v_descale, out_dtype=out_dtype)


def _varlen_fp8(package, q, k, v, cu_seqlens_q, cu_seqlens_k, a):
    """The FP8 forward on a packed batch (issue 30) of a call the declared contract has checked (``a``:
    ``contract.enforce``'s values): ``api._attention_fp8``'s, the packed kernel."""
    max_q, max_k = (COMPUTE if a[n] is None else a[n] for n in ("max_seqlen_q", "max_seqlen_k"))
    block = a["block"]
    if block == "auto":
        block = api.auto_block(q.device, max(q.shape[-1], v.shape[-1]), tma=False, dtype=q.dtype)
    window = checks.normalise_window(a["window"], spec_launch.varlen_window, q, k)
    # the declared stride policy: the kernels read the offsets and the descales at unit stride
    cu_seqlens_q, cu_seqlens_k = (contract.unit_stride("flash_attention_varlen", name, t) for name, t in
                                  (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)))
    descales = api.fp8_descales("flash_attention_varlen", a, cu_seqlens_q.numel() - 1, k.shape[1], q.device)
    module = api.module_for("fwd", (int(block[0]), int(block[1])), package, q.device)
    # the offsets' values and the hints (the op's IN_OP rules, with the same functions)
    hints = resolve_max_seqlen(q, k, cu_seqlens_q, cu_seqlens_k, max_q, max_k, v=v,
                               out=torch.empty((*q.shape[:2], v.shape[2]), device="meta"))
    launch = torch.compiler.disable(module.forward_varlen)  # eager under torch.compile (api._fp8_launch)
    out, lse = launch(q, k, v, cu_seqlens_q, cu_seqlens_k, hints["max_seqlen_q"],
                      **_kernel_options(q, a["causal"], window, a["scale"], None, None, None),
                      descales=descales, out_dtype=api.fp8_out_dtype(q, a["out_dtype"]))
    return (out, lse) if a["return_lse"] else out


#: per call signature (``_signature``): the options the contract's checks derived (window, scale, block,
#: softcap, the max_seqlen hints) of a call that passed every check (``generator.runtime.plans``)
_PLANS = plans.PlanCache()


def _signature(package, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, scale,
               return_lse, block, softcap, alibi_slopes, sinks):
    """The key of a plain packed call (no dropout, score_mod, FP8 or block_table: the caller says), outside
    a torch.compile trace, forward-mode AD and functorch transforms, or None (the full path). The offsets
    enter by their metadata: their values are the op's, read on every call (``resolve_max_seqlen``)."""
    if plans.per_call_context():
        return None
    try:
        options = plans.options_key(max_seqlen_q, max_seqlen_k, causal, window, scale, return_lse, block, softcap)
        tensors = tuple(map(plans.tensor_key, (q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks)))
        return None if options is None else (package, tensors, torch.is_grad_enabled(), options)
    except (TypeError, AttributeError, RuntimeError):  # an argument that is no tensor, an option that is no key
        return None


def _varlen(package, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *,
            causal=False, window=None, scale=None, return_lse=False, block=api.DEFAULT_BLOCK,
            softcap=None, alibi_slopes=None, sinks=None, dropout_p=0.0, return_dropout_mask=False,
            batch_invariant=False, block_table=None, score_mod=None, score_args=None, q_descale=None, k_descale=None,
            v_descale=None, out_dtype=None):
    # the checks of types, shapes, dtypes, strides, devices and options: once per call signature (plans)
    key = None
    if type(dropout_p) is float and dropout_p == 0.0 and return_dropout_mask is False \
            and type(batch_invariant) is bool and block_table is None and score_mod is None and score_args is None and out_dtype is None \
            and q_descale is None and k_descale is None and v_descale is None:
        key = _signature(package, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window,
                         scale, return_lse, block, softcap, alibi_slopes, sinks)
    entry = _PLANS.get(key) if key is not None else None
    if entry is None:
        # every input check: the declared contract (generator.runtime.contract), none here
        a = contract.enforce("flash_attention_varlen", dict(
            q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, causal=causal, window=window, scale=scale, return_lse=return_lse, block=block,
            softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, dropout_p=dropout_p,
            return_dropout_mask=return_dropout_mask, batch_invariant=batch_invariant, block_table=block_table,
            score_mod=score_mod, score_args=score_args, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
            out_dtype=out_dtype))
        if checks.fp8_mode(k, (q_descale, k_descale, v_descale)):  # FP8 k, v (the contract refused the rest)
            return _varlen_fp8(package, q, k, v, cu_seqlens_q, cu_seqlens_k, a)
        if block_table is not None:  # k, v are paged caches (FlashAttention 2's form): the decode kernel's gather
            from generator.runtime.varlen_paged import flash_attention_varlen_paged

            return flash_attention_varlen_paged(package, a)
        window, scale, block, softcap, dropout_p = a["window"], a["scale"], a["block"], a["softcap"], a["dropout_p"]
        max_q, max_k = (COMPUTE if a[n] is None else a[n] for n in ("max_seqlen_q", "max_seqlen_k"))
        if block == "auto":
            # the packed kernels: pointers
            block = api.auto_block(q.device, max(q.shape[-1], v.shape[-1]), tma=False, dtype=q.dtype)
        # window sides clamp to total_q + total_k, at least every segment's n_q + n_k (window_clamp)
        window = checks.normalise_window(window, spec_launch.varlen_window, q, k)
        score_f, score_i = a.get("packed_score_args", (None, None))  # packed by the score_mod rule
        # a value rule to run every call (none applies to a plain call): not planned
        entry = _PLANS.record(None if contract.value_rules("flash_attention_varlen", a) else key,
                              (window, scale, (int(block[0]), int(block[1])), softcap, max_q, max_k))
    else:
        score_f = score_i = None
    window, scale, block, softcap, max_q, max_k = entry
    # the proven host rewrite of flash_attention: a scale <= 0 becomes a positive one (scale_sign_rewrite)
    q, scale = checks.normalise_scale(q, scale)
    # the declared stride policy: the kernels read the offsets and the sinks at unit stride
    cu_seqlens_q, cu_seqlens_k, sinks = (contract.unit_stride("flash_attention_varlen", name, t) for name, t in
                                         (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                                          ("sinks", sinks)))
    # dropout's box is (1, Hq, total_q, total_k): the packed rows and keys, global (spec.launch's shape, the one
    # claim dropout_mask_same reads)
    box = spec_launch.dropout_mask_shape(q, k)
    philox = checks.draw_philox(q.device) if dropout_p > 0 else None
    # eager, nothing for the dispatcher to do (no trace, mode or transform, plain tensors, no gradient to
    # record): the op's body itself, without the custom op's dispatch
    op = _forward if key is not None and plans.direct(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks) \
        else flash_attention_varlen_op
    out, lse = op(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, window, scale, int(block[0]),
                  int(block[1]), softcap, alibi_slopes, sinks, package, dropout_p, philox,
                  None if score_mod is None else score_mod.name, score_f, score_i)
    result = (out, lse) if return_lse else out
    if return_dropout_mask:
        keep = dispatch.dropout_mask((int(block[0]), int(block[1])), package, philox, dropout_p, box)
        return (*result, keep[0].to(q.device)) if return_lse else (result, keep[0].to(q.device))
    return result


api.IMPLEMENTATIONS["flash_attention_varlen"] = _varlen
