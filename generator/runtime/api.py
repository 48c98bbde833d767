"""The public PyTorch entry points: input checks, then dispatch to a generated package.

``flash_attention`` has the semantics of ``spec.reference.attention`` (same argument names
and meaning). Every bad input raises an error that names the problem and the fix; the
checks and normalisations live in ``generator.runtime.checks`` and read their limits from
``spec.assumptions``. The kernels themselves assume checked inputs.

Non-contiguous inputs are accepted as they are: the kernels index q, k, v (and the mask)
through their strides, so no copy is made. Outputs are freshly allocated and contiguous.

Import order, no cycles: ``checks`` <- ``dispatch`` <- ``custom_op`` <- ``autograd`` <- ``api``.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple, Optional

import torch

from generator.runtime import checks
from generator.runtime.autograd import DirectForward, flash_attention_backward_op  # noqa: F401  (registers the backward)
from generator.runtime.checks import DEFAULT_BLOCK, DTYPES  # noqa: F401  (public aliases)
from generator.runtime.custom_op import flash_attention_op
from generator.runtime.dispatch import DEFAULT_PACKAGE, EMPTY, FULL, PARTIAL, block_map, mask_arguments  # noqa: F401
from generator.runtime.dispatch import attention_forward, module_for  # noqa: F401
from generator.runtime import config, contract, dispatch, launch, plans
from generator.runtime.softmax_op import softmax_op
from spec import launch as spec_launch

# the launch configuration lives in one module (generator.runtime.config); its names stay importable here
from generator.runtime.config import AUTO_BLOCKS, FP32_BLOCK, auto_block, dense_auto_block  # noqa: E402,F401


def _named_keywords(fn):
    """Reject keywords ``fn`` does not take with a TypeError, naming the flashproof spelling of
    SDPA / FlashAttention ones (``is_causal`` -> ``causal=True``)."""
    names = set(inspect.signature(fn).parameters)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        foreign = {name: kwargs.pop(name) for name in list(kwargs) if name not in names}
        if foreign:
            checks.reject_foreign_keywords(foreign, fn.__name__)
        return fn(*args, **kwargs)
    return call


def _autocast(device_type: str, *tensors):
    """The tensors in autocast's lower-precision dtype where autocast is on for their device
    (as SDPA is cast: float32 inputs become float16 on CUDA, bfloat16 on CPU by default)."""
    if device_type not in ("cpu", "cuda") or not torch.is_autocast_enabled(device_type):  # others: refused later
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in tensors)


def _unsupported_autograd_modes(where: str, *tensors) -> None:
    """Forward-mode AD and torch.func's grad transforms raise here (as SDPA raises for forward AD)
    instead of silently dropping tangents: the op has a reverse-mode backward only."""
    if torch.compiler.is_compiling():
        return
    if torch.autograd.forward_ad._current_level >= 0 and any(
            torch.autograd.forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise NotImplementedError(f"{where} does not support forward-mode AD (jvp, make_dual): it has a "
                                  "reverse-mode backward only; use torch.autograd.grad / .backward()")
    interpreter = torch._C._functorch.peek_interpreter_stack()
    if interpreter is not None and interpreter.key() in (torch._C._functorch.TransformType.Grad,
                                                         torch._C._functorch.TransformType.Jvp):
        raise NotImplementedError(
            f"{where} does not support torch.func.grad / jacrev / jvp: a torch.library custom op's "
            "autograd cannot run inside functorch's grad transforms; use torch.autograd.grad (vmap works)")


def _with_dropout_mask(result, keep):
    """``result`` (``out`` or ``(out, lse)``) with the keep mask appended."""
    return (*result, keep) if isinstance(result, tuple) else (result, keep)


def fp8_descales(entry: str, a: dict, B: int, Hkv: int, device) -> tuple:
    """The three descales of a checked FP8 call (``a``: ``contract.enforce``'s values) as the kernel reads
    them: None is 1 (FlashAttention 3's default), each at unit stride (the declared ``COPIED`` policy: the
    kernel takes one stride pair for the three)."""
    return tuple(contract.unit_stride(entry, name, torch.ones((B, Hkv), dtype=torch.float32, device=device)
                                      if a[name] is None else a[name]) for name in checks.FP8_NAMES)


def fp8_out_dtype(q, out_dtype):
    """The FP8 forward's output dtype: ``out_dtype``, else bf16 for an FP8 q (FlashAttention 3's), q's dtype on
    the mixed path (an fp16/bf16 q on FP8 k, v)."""
    return out_dtype or (torch.bfloat16 if q.dtype in launch.FP8_FORMATS else q.dtype)


def _attention_fp8(package, q, k, v, a):
    """The FP8 forward (issue 30) of a call the declared contract has checked (``a``: ``contract.enforce``'s
    values; its FP8 rules refuse a gradient, the score modifications, a mask_mod, a score_mod, dropout and
    a scale <= 0): q, k, v quantised with FlashAttention 3's float32 ``(B, Hkv)`` descales (claim
    ``fp8_descale``: the result is attention on q·q_descale, k·k_descale, v·v_descale), out in
    ``fp8_out_dtype``, the pointer path, no backward."""
    B, Hq, Nq, D = q.shape
    out_dtype = fp8_out_dtype(q, a["out_dtype"])
    if q.numel() == 0 or k.shape[2] == 0:  # nothing to attend: zeros, lse -inf (as the dense path)
        out = torch.zeros((B, Hq, Nq, v.shape[3]), dtype=out_dtype, device=q.device)
        lse = torch.full((B, Hq, Nq), float("-inf"), dtype=torch.float32, device=q.device)
        return (out, lse) if a["return_lse"] else out
    descales = fp8_descales("flash_attention", a, B, k.shape[1], q.device)
    window = checks.normalise_window(a["window"], spec_launch.dense_window, q, k)
    scale = D ** -0.5 if a["scale"] is None else a["scale"]
    block = dense_auto_block(q, k, v, False) if a["block"] == "auto" else a["block"]
    module = dispatch.module_for("fwd", block, package, q.device)
    out, lse = _fp8_launch(module, q, k, v, causal=a["causal"], alignment=a["alignment"], window=window,
                           key_lengths=a["key_lengths"], mask=a["mask"], scale=scale, descales=descales,
                           out_dtype=out_dtype)
    return (out, lse) if a["return_lse"] else out


#: the FP8 launch runs eagerly under torch.compile (a graph break: it is not a custom op, so dynamo
#: must not trace into Triton's launcher)
_fp8_launch = torch.compiler.disable(dispatch.attention_forward)


class _Checked(NamedTuple):
    """What ``flash_attention``'s checks derive from a call's metadata and options (no values)."""
    window: Optional[list]
    scale: Optional[float]
    block: tuple
    tma: bool
    softcap: Optional[float]


#: per call signature (``_signature``): the ``_Checked`` of a call that passed every check, and the planned
#: launch (``dispatch.planned_forward``) once an eager call has run the op's body directly (``generator.runtime.plans``)
_PLANS = plans.PlanCache()


def _signature(package, q, k, v, causal, alignment, window, key_lengths, scale, return_lse, block, tma, softcap,
               alibi_slopes, sinks, mask=None):
    """The key of a call without a mask_mod or dropout, outside autocast, forward-mode AD and functorch
    transforms (their effects are per call), or None: not cached (the full path). A dense ``mask``
    enters by its metadata (its checks read no value; its block map is the op's, per content)."""
    if plans.per_call_context():
        return None
    try:
        if torch.is_autocast_enabled(q.device.type):
            return None
        # a TMA launch's block depends on the addresses' 16-byte alignment (launch.takes_tma_path)
        aligned = q.data_ptr() % 16 == 0 and k.data_ptr() % 16 == 0 and v.data_ptr() % 16 == 0
        options = plans.options_key(causal, alignment, window, scale, return_lse, block, tma, softcap)
        return (package, plans.tensor_key(q), plans.tensor_key(k), plans.tensor_key(v), plans.tensor_key(key_lengths),
                plans.tensor_key(alibi_slopes), plans.tensor_key(sinks), aligned, torch.is_grad_enabled(),
                launch.interpreting(), options, plans.tensor_key(mask)) if options is not None else None
    except (TypeError, AttributeError, RuntimeError):  # an argument that is no tensor, an option that is no key
        return None


def _attention(package, q, k, v, causal, alignment, window, key_lengths, mask, scale, return_lse, block, tma,
               softcap=None, alibi_slopes=None, sinks=None,
               mask_mod=None, mask_args=None, dropout_p=0.0, return_dropout_mask=False, score_mod=None,
               score_args=None, q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    # the checks of shapes, dtypes, strides, devices and options: once per call signature (plans); the FP8
    # forward (FP8 k, v or descales given) is not planned
    fp8 = checks.fp8_mode(k, (q_descale, k_descale, v_descale))
    key = None
    if mask_mod is None and mask_args is None and type(dropout_p) is float and dropout_p == 0.0 \
            and return_dropout_mask is False and score_mod is None and score_args is None and not fp8 \
            and out_dtype is None:
        key = _signature(package, q, k, v, causal, alignment, window, key_lengths, scale, return_lse, block, tma,
                         softcap, alibi_slopes, sinks, mask)
    entry = _PLANS.get(key) if key is not None else None
    packed = philox = score_f = score_i = None
    if entry is None or entry[2]:
        arguments = {"q": q, "k": k, "v": v, "causal": causal, "alignment": alignment, "window": window,
                     "key_lengths": key_lengths, "mask": mask, "scale": scale, "return_lse": return_lse, "block": block,
                     "tma": tma, "softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks, "mask_mod": mask_mod,
                     "mask_args": mask_args, "score_mod": score_mod, "score_args": score_args, "dropout_p": dropout_p,
                     "return_dropout_mask": return_dropout_mask, "q_descale": q_descale, "k_descale": k_descale,
                     "v_descale": v_descale, "out_dtype": out_dtype}
    if entry is not None:
        if entry[2]:  # the declared value rules, every call (values can change in place): clamped on the device
            key_lengths = contract.keep_values("flash_attention", arguments, entry[2])["key_lengths"]
    else:
        for name, t in (("q", q), ("k", k), ("v", v)):
            checks.check_tensor(t, name)
        _unsupported_autograd_modes("flash_attention", q, k, v)
        if not fp8:  # FP8 products run on the dtypes given
            q, k, v = _autocast(q.device.type, q, k, v)
        # every input check: the declared contract (generator.runtime.contract), none here
        # (the value rules too: key_lengths clamped into [0, N_k] on the device, no host sync by default)
        a = contract.enforce("flash_attention", {**arguments, "q": q, "k": k, "v": v})
        if fp8:
            return _attention_fp8(package, q, k, v, a)
        scale, block, softcap, dropout_p = a["scale"], a["block"], a["softcap"], a["dropout_p"]
        key_lengths = a["key_lengths"]
        # each window side clamped to N_q + N_k (claim window_clamp: the same keys, int32 bounds)
        window = checks.normalise_window(a["window"], spec_launch.dense_window, q, k)
        packed = a.get("packed_mask_args")  # mask_args packed by the mask_mod rule
        score_f, score_i = a.get("packed_score_args", (None, None))  # packed by the score_mod rule
        B, Hq, Nq, _ = q.shape
        if q.numel() == 0 or k.shape[2] == 0:
            # nothing to attend (B, N_q or N_k is 0): rows with no key are zeros with lse -inf, like key_lengths 0
            # (lse = sink with sinks); the `0 *` keeps the result attached to q, k, v so backward gives (empty or
            # zero) gradients
            attached = (q.sum() + k.sum() + v.sum()) * 0
            out = q.new_zeros((B, Hq, Nq, v.shape[3])) + attached  # v's head dim D_v
            lse = torch.full((B, Hq, Nq), float("-inf"), dtype=torch.float32, device=q.device)
            if sinks is not None:
                lse = sinks[None, :, None].expand(B, Hq, Nq) + attached.float()
            result = (out, lse) if return_lse else out
            if return_dropout_mask:  # no element to drop
                keep = torch.ones(spec_launch.dropout_mask_shape(q, k), dtype=torch.bool, device=q.device)
                return _with_dropout_mask(result, keep)
            return result
        tma = config.memory_path(tma, q.device)
        if block == "auto":
            block = dense_auto_block(q, k, v, tma)
        # the plan: what the checks derived, the launch plan (once run directly), the value rules that apply,
        # whether the tensors may skip the custom op and whether a gradient is recorded (types,
        # requires_grad and the grad mode: all in the key)
        entry = _PLANS.record(key, [_Checked(window, scale, block, tma, softcap), None,
                                    contract.value_rules("flash_attention", a),
                                    plans.plain(q, k, v, key_lengths, alibi_slopes, sinks, autograd=True),
                                    torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                                    for t in (q, k, v, sinks))])
    window, scale, block, tma, softcap = entry[0]
    q, scale = checks.normalise_scale(q, scale)  # s <= 0: the proven rewrite to s' > 0 (scale_sign_rewrite)
    sinks = contract.unit_stride("flash_attention", "sinks", sinks)  # the declared stride policy
    # dropout: this call's Philox seed and offset, from torch's generator for q's device
    if dropout_p > 0:
        philox = checks.draw_philox(q.device)
    if key is not None and mask is None and entry[3] and plans.dispatcher_idle():
        # eager, nothing for the dispatcher to do: the op's body itself, with the launch plan of this
        # signature (a gradient to record: the op's own autograd functions, autograd.DirectForward)
        if entry[1] is None:
            entry[1] = dispatch.planned_forward(
                dispatch.module_for("fwd", block, package, q.device), q, k, v, causal=causal, alignment=alignment,
                window=window, key_lengths=key_lengths, scale=scale, tma=tma, softcap=softcap,
                alibi_slopes=alibi_slopes, sinks=sinks)
        if entry[4]:
            out, lse = DirectForward.apply(q, k, v, None, key_lengths, causal, alignment, window, scale, block[0],
                                           block[1], tma, package, softcap, alibi_slopes, sinks, None, None,
                                           dropout_p, philox, None, None, None, entry[1])
        else:
            out, lse = entry[1](q, k, v, key_lengths, alibi_slopes, sinks)
    else:
        out, lse = flash_attention_op(q, k, v, mask, key_lengths, causal, alignment, window, scale, block[0], block[1],
                                      tma, package, softcap, alibi_slopes, sinks,
                                      None if mask_mod is None else mask_mod.name, packed, dropout_p, philox,
                                      None if score_mod is None else score_mod.name, score_f, score_i)
    result = (out, lse) if return_lse else out
    if return_dropout_mask:
        # the keep mask (B, Hq, N_q, N_k): spec.launch's shape, the one claim dropout_mask_same reads
        keep = dispatch.dropout_mask(block, package, philox, dropout_p, spec_launch.dropout_mask_shape(q, k))
        return _with_dropout_mask(result, keep.to(q.device))
    return result


@_named_keywords
def flash_attention(q, k, v, *, causal=False, alignment="top_left", window=None, key_lengths=None, mask=None,
                    scale=None, return_lse=False, block="auto", tma="auto", softcap=None, alibi_slopes=None,
                    sinks=None, mask_mod=None, mask_args=None, dropout_p=0.0, return_dropout_mask=False,
                    score_mod=None, score_args=None, q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    """Softmax attention through the generated FlashAttention-2 kernels.

    Semantics of ``spec.reference.attention``: ``q (B, Hq, N_q, D)``, ``k (B, Hkv, N_k, D)``,
    ``v (B, Hkv, N_k, D_v)`` with ``Hq % Hkv == 0`` (GQA/MQA, no K/V copies) and ``D_v`` v's own head dim
    (DeepSeek's MLA trains at ``D = 192, D_v = 128``: out is ``(B, Hq, N_q, D_v)``, dv has ``D_v``); ``causal`` with ``alignment`` top_left
    (query i sees keys j <= i) or bottom_right (j <= i + N_k - N_q); ``window=(left, right)``:
    keys with -left <= j - (i + shift) <= right; ``key_lengths`` (B,) ints: keys j >= length
    are padding; ``mask`` bool broadcastable to (B, Hq, N_q, N_k), True = attend; ``scale``
    defaults to 1/sqrt(D). All masks intersect.

    Returns ``out`` (q's dtype, zeros on rows with no key), or ``(out, lse)`` with
    ``return_lse=True`` (lse float32 (B, Hq, N_q), natural log, -inf on rows with no key).
    ``block=(B_r, B_c)`` picks the generated kernels (see ``generated.KERNELS``); ``"auto"`` (the
    default) the block ``AUTO_BLOCKS`` lists for the memory path and the head dim (128x64; on the
    sm_90 TMA path 128x128 for head dims 65-128; on the pointer path 64x64 above 128); explicit
    blocks are honoured on either path (above head dim 128 a large one may not fit shared memory,
    which Triton reports as OutOfResources). float32 inputs on a GPU run 16x32 (``FP32_BLOCK``:
    exact IEEE dots on the CUDA cores, slow; cast to fp16/bf16 for speed).
    Inputs: fp16, bf16 or fp32 (one dtype), D and D_v in 1..256, any strides (no copies are made),
    CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``. Any finite ``scale`` (a scale
    <= 0 is rewritten to a positive one, claim ``scale_sign_rewrite``); keys at index >=
    ``key_lengths[b]`` are never read (NaN or inf there cannot leak); empty ``B``/``N`` give
    empty results. The accepted range is the README's input-contract table (``spec.assumptions``).

    ``tma``: whether the forward moves Q, K, V and O by Hopper's TMA. ``"auto"`` (the default)
    is ``True`` on a GPU with TMA (sm_90+, measured 1.00-1.14x the pointer path on an H100, see
    docs/performance/gpu.md) and ``False`` elsewhere (sm_80, CPU under the interpreter).
    ``tma=True`` raises ``ValueError`` on a machine without TMA (a GPU older than sm_90, a
    triton without tensor descriptors); with ``True`` or ``"auto"``, inputs whose layout TMA
    cannot read (strides not multiples of 16 bytes, a misaligned view) run the pointer path
    with a ``TmaFallbackWarning`` naming the tensor and the rule. The backward is unchanged.

    Score modifications (FlashAttention / FA4 names and semantics, all combinable with each
    other, every mask, GQA and the backward): ``softcap`` (float > 0): the score is
    ``softcap·tanh(scale·q·k / softcap)``, after scaling, before masking. ``alibi_slopes``
    (float32 ``(Hq,)`` or ``(B, Hq)``): bias ``−slope·|i + shift − j|`` (shift = N_k − N_q for
    ``alignment="bottom_right"``, FlashAttention's bias; 0 for top_left); no gradient.
    ``sinks`` (float32 ``(Hq,)``, learnable: gets a gradient when it requires one): one extra
    natural-log logit per head and row, not scaled, with value 0 (gpt-oss): ``lse_i =
    log(e^{sink} + Σ_j e^{s_ij})``; a row with no key gives out 0 and lse = sink.

    ``mask_mod`` (``spec.masks.prefix_lm``, ``chunked``, ``sink_window``, ``document`` or your own
    ``@mask_mod``) with its parameters ``mask_args`` (``{name: int | (B,) | (B, N) tensor}``) is
    AND-ed with every other mask; its tiles are classified at their corners (claim mask_mod_sound).

    ``score_mod`` (your own ``@score_mod`` of ``spec.score_mods``, its kernels emitted with
    ``python -m generator --score-mod module:name``) with its parameters ``score_args``
    (``{name: int | float | float tensor}``) rewrites the scaled score ``s`` to ``f(s, b, h, i, j,
    shift, ...)`` after softcap and ALiBi, before the masks; its backward is derived by ``sp.diff``
    (claim ``score_mod_derived``) and the tensors it reads get gradients (no atomics). With a
    ``mask_mod`` in the same call: the kernels of the pair (``--score-mod`` emits each score_mod with
    every mask_mod of its config, the built-ins and ``--mask-mod``'s).

    ``dropout_p`` (FlashAttention 2's attention dropout, ``0 <= p < 1``): after the softmax each
    weight ``P_ij`` is kept with probability ``1 − p`` and scaled by ``1/(1 − p)``; ``lse`` is the
    undropped one. The randomness is a Philox seed and offset drawn from torch's default
    generator for q's device (``torch.manual_seed`` reproduces a call; two calls draw different
    masks); the forward and the backward evaluate one printed keep term of (seed, offset, b, h, i, j)
    (claim ``dropout_mask_same``). Pass ``dropout_p=0.0`` at evaluation (it is the default: the
    kernels then compile the dropout out). ``return_dropout_mask=True`` (small problems) appends
    the bool keep mask ``(B, Hq, N_q, N_k)`` the kernels used to the result.

    FP8 (FlashAttention 3's forward, docs/fp8.md): ``q, k, v`` in ``torch.float8_e4m3fn`` (or
    ``float8_e5m2``) with ``q_descale, k_descale, v_descale`` float32 ``(B, Hkv)`` (each None: 1) compute
    attention on ``q·q_descale, k·k_descale, v·v_descale`` with both products on the fp8 tiles (claim
    ``fp8_descale``), ``out`` in ``out_dtype`` (default bf16), lse float32, within the proven bound
    ``spec.error_bound.forward_bound("e4m3", ...)``; an fp16/bf16 ``q`` on FP8 ``k, v`` upcasts K and V
    exactly (out in q's dtype). No backward (as FlashAttention 3): inputs that require grad are refused;
    causal, window, key_lengths and mask combine with it (and D_v ≠ D); the score modifications, a
    mask_mod, a score_mod and dropout do not yet. Every FP8 limit is a declared rule of the contract
    (``generator.runtime.contract``: the README's input-contract table).
    """
    # by position, in _attention's order (keywords passed on cost more than the rest of a cached call's Python)
    return _attention(DEFAULT_PACKAGE, q, k, v, causal, alignment, window, key_lengths, mask, scale, return_lse, block,
                      tma, softcap, alibi_slopes, sinks, mask_mod, mask_args, dropout_p, return_dropout_mask, score_mod,
                      score_args, q_descale, k_descale, v_descale, out_dtype)


def _softmax(package, x, dim, *, block):
    a = contract.enforce("softmax", dict(x=x, dim=dim, block=block))  # the declared contract
    dim, block = a["dim"], a["block"]
    _unsupported_autograd_modes("softmax", x)
    moved = x.movedim(dim, -1)  # IndexError names a bad dim
    if moved.numel() == 0:
        return x.clone()  # an empty dim (or batch): empty result, like torch.softmax
    rows = moved.reshape(-1, moved.shape[-1])
    return softmax_op(rows, block[0], block[1], package).reshape(moved.shape).movedim(-1, dim)


@_named_keywords
def softmax(x: torch.Tensor, dim: int = -1, *, block=DEFAULT_BLOCK) -> torch.Tensor:
    """Softmax along ``dim`` with seed 000's online kernels (1-pass when the row fits one block
    of ``B_c`` columns, else 2-pass). fp16/bf16/fp32; the result has x's dtype and shape.
    Differentiable (the backward is ``y ∘ (g − rowsum(g ∘ y))``). An empty dim gives an empty
    result; a row of only ``-inf`` gives zeros (``torch.softmax`` gives NaN there)."""
    return _softmax(DEFAULT_PACKAGE, x, dim, block=block)


#: public name -> ``impl(package, *args, **kwargs)`` with the public signature: the entry point run
#: on the kernels of ``package``. Each entry point's module registers its own (varlen, decode,
#: merge, ring import this module, never the reverse).
IMPLEMENTATIONS = {"flash_attention": _attention, "softmax": _softmax}


def for_package(public, package: str):
    """``public`` (any entry point of ``IMPLEMENTATIONS``) dispatching to the kernels of ``package``:
    the index of a package emitted with ``python -m generator --out DIR`` exports these, so every
    entry point runs its own kernels, never ``generated``'s."""
    if package == DEFAULT_PACKAGE:
        return public
    impl = IMPLEMENTATIONS[public.__name__]
    signature = inspect.signature(public)

    @functools.wraps(public)
    def call(*args, **kwargs):
        foreign = {name: kwargs.pop(name) for name in list(kwargs) if name not in signature.parameters}
        if foreign:
            checks.reject_foreign_keywords(foreign, public.__name__)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return impl(package, *bound.args, **bound.kwargs)
    return call
