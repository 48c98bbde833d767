"""The executable reference: float64 attention, straight from the definitions.

* ``attention``        - safe softmax over the whole row (seed 003, 3-pass form), one matmul.
* ``online_attention`` - the same, tile by tile with the recurrences of ``spec.recurrences``
  (written out in torch: the guarded ``⊕`` of ``recurrences.merge``) in either loop order (FA2: query tiles outer; FA1: key tiles outer), skipping the tiles
  the classifier of ``spec.masks`` calls skip and masking only the partial ones.
* ``varlen_attention`` - a packed batch of variable-length segments (FlashAttention's
  ``cu_seqlens``): ``attention`` on each segment's slices, bottom-right aligned (``spec.varlen``).
* ``rotary``, ``kvcache_attention`` - FlashAttention's ``flash_attn_with_kvcache``: append new
  keys and values (rotated by ``spec.rotary``'s rotation) into a contiguous or paged cache, then
  ``attention`` over each row's keys ``[cache_leftpad[b], cache_seqlens[b] + N_new)``.

The first two take ``q (B, Hq, Nq, D)``, ``k (B, Hkv, Nk, D)``, ``v (B, Hkv, Nk, Dv)`` as torch tensors
or numpy arrays, compute in float64 and return ``(out, lse)`` of the same kind:
``out (B, Hq, Nq, Dv)``, ``lse (B, Hq, Nq)`` (natural log). Query head ``h`` reads key/value
head ``h // (Hq // Hkv)`` (GQA). Every mask predicate comes from ``spec.masks``. A row with no
attended key gives output 0 and ``lse = -inf`` — never NaN, not even in its gradient.

Torch inputs keep their autograd graph (the backward tests differentiate through
``attention`` in float64).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from spec import masks, rotary as rotary_spec, varlen

#: what a masked score becomes. It must be -inf, not a large negative number: with a
#: finite value a fully masked row would average its values instead of giving 0
#: (claims merge_identity and block_update; tests/test_mutants.py feeds -1e4).
MASKED_LOGIT = float("-inf")


# ----------------------------------------------------------------------------------
# Input checking
# ----------------------------------------------------------------------------------
@dataclass
class _Problem:
    q: torch.Tensor  # (B, Hq, Nq, D) float64
    k: torch.Tensor  # (B, Hq, Nk, D) float64, GQA heads already repeated
    v: torch.Tensor  # (B, Hq, Nk, Dv) float64
    scale: float
    attend: torch.Tensor | None  # bool, broadcastable to (B, Hq, Nq, Nk); None: all keys
    kinds: tuple[str, ...]  # structured mask kinds in force
    params: list[dict]  # per batch: numbers for the kinds' symbols (masks._PARAM_SYMBOLS names)
    user_mask: torch.Tensor | None  # the user's boolean mask alone, broadcast to 4-d
    numpy_out: bool
    itemsize: int  # element size of the inputs (for the traffic counts)


def _as_tensor(x, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    raise TypeError(f"{name} must be a torch.Tensor or a numpy.ndarray, got {type(x).__name__}")


def _check_qkv(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(
                f"{name} must have rank 4 (B, H, N, D), got rank {x.ndim} with shape "
                f"{tuple(x.shape)}; add the missing axes, e.g. {name}[None, None] for a single head")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating tensor, got {x.dtype}; convert it, "
                            f"e.g. {name}.double()")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}; "
                        f"cast them to one, e.g. k.to(q.dtype)")
    (B, Hq, _, D), (Bk, Hkv, _, Dk) = q.shape, k.shape
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in (B, Hkv, Nk); "
                         f"pass one value row per key")
    if Bk != B:
        raise ValueError(f"batch sizes differ: q has B={B}, k and v have B={Bk}; pass the same batch")
    if Dk != D:
        raise ValueError(f"head dims differ: q has D={D}, k has D={Dk}; q·k needs equal head dims")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"Hq={Hq} query heads is not a multiple of Hkv={Hkv} key/value heads; "
                         f"GQA maps query head h to key/value head h // (Hq // Hkv), so choose "
                         f"Hkv dividing Hq")


def _check_window(window):
    if window is None:
        return None
    ok = (isinstance(window, (tuple, list)) and len(window) == 2
          and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in window))
    if not ok:
        raise TypeError(f"window must be a pair of ints (left, right), got {window!r}")
    left, right = int(window[0]), int(window[1])
    if left < 0 or right < 0:
        raise ValueError(f"window sizes must be >= 0, got window=({left}, {right}); a key j is "
                         f"visible when -left <= j - i' <= right, so use e.g. (left, 0) for "
                         f"'left keys back, none ahead'")
    return left, right


def _check_key_lengths(key_lengths, B: int, Nk: int):
    if key_lengths is None:
        return None
    lengths = np.asarray(key_lengths.detach().cpu() if isinstance(key_lengths, torch.Tensor)
                         else key_lengths)
    if lengths.shape != (B,):
        raise ValueError(f"key_lengths must have shape (B,) = ({B},), got {lengths.shape}; "
                         f"give one valid-key count per batch entry")
    if not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"key_lengths must be integers, got dtype {lengths.dtype}")
    if lengths.min(initial=0) < 0 or lengths.max(initial=0) > Nk:
        raise ValueError(f"key_lengths must lie in [0, Nk={Nk}], got {lengths.tolist()}")
    return [int(x) for x in lengths]


def _check_mask(mask, shape):
    if mask is None:
        return None
    mask = _as_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean with True = attend (the torch SDPA convention), "
                        f"got {mask.dtype}; for an additive float mask use mask == 0")
    try:
        ok = mask.ndim <= 4 and torch.broadcast_shapes(mask.shape, shape) == shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} is not broadcastable to "
                         f"(B, Hq, Nq, Nk) = {tuple(shape)}; give size 1 or the full size per axis")
    return mask.expand(shape)


@lru_cache(maxsize=256)
def _structured(kinds: tuple[str, ...], nq: int, nk: int, params: tuple) -> np.ndarray:
    """``masks.dense_mask``, cached: the predicate is lambdified per call."""
    return masks.dense_mask(kinds, nq, nk, **dict(params))


def _prepare(q, k, v, causal, alignment, window, key_lengths, mask, scale, mask_mod=None, mask_args=None) -> _Problem:
    numpy_out = isinstance(q, np.ndarray)
    q, k, v = _as_tensor(q, "q"), _as_tensor(k, "k"), _as_tensor(v, "v")
    _check_qkv(q, k, v)
    B, Hq, Nq, D = q.shape
    Nk = k.shape[2]
    shift = masks.alignment_shift(alignment, Nq, Nk)  # raises on a bad alignment
    window = _check_window(window)
    lengths = _check_key_lengths(key_lengths, B, Nk)
    user_mask = _check_mask(mask, (B, Hq, Nq, Nk))
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite number (or None for 1/sqrt(D)), got {scale!r}")

    kinds = tuple(kind for kind, on in (("causal", causal), ("window", window is not None),
                                        ("lengths", lengths is not None)) if on)
    params = []
    for b in range(B):
        p = {"N_Q": Nq, "N_K": Nk, "shift": shift}
        if window is not None:
            p.update(window_left=window[0], window_right=window[1])
        if lengths is not None:
            p["key_len"] = lengths[b]
        params.append(p)

    attend = user_mask
    if mask_mod is not None:  # the user's predicate on every (i, j), AND-ed like any other mask
        packed = mask_mod.pack(mask_args, B, Nq, Nk)
        predicate = torch.from_numpy(mask_mod.dense_batch(packed, Nq, Nk, shift))[:, None]
        attend = predicate if attend is None else attend & predicate
    if kinds:
        structured = torch.from_numpy(np.stack([
            _structured(kinds, Nq, Nk, tuple((key, val) for key, val in p.items()
                                             if key not in ("N_Q", "N_K")))
            for p in params]))[:, None]  # (B, 1, Nq, Nk)
        attend = structured if attend is None else attend & structured

    group = Hq // k.shape[1]
    return _Problem(
        q=q.to(torch.float64),
        k=k.to(torch.float64).repeat_interleave(group, dim=1),
        v=v.to(torch.float64).repeat_interleave(group, dim=1),
        scale=float(scale), attend=attend, kinds=kinds, params=params, user_mask=user_mask,
        numpy_out=numpy_out, itemsize=q.element_size())


def _finish(prob: _Problem, out: torch.Tensor, lse: torch.Tensor):
    if prob.numpy_out:
        return out.detach().numpy(), lse.detach().numpy()
    return out, lse


# ----------------------------------------------------------------------------------
# The guarded epilogue shared by both forms (terms.FORWARD_EPILOGUE in natural exp)
# ----------------------------------------------------------------------------------
def _guard(m: torch.Tensor) -> torch.Tensor:
    """``m_safe``: shift by 0 where the max is -inf (no key yet), so -inf - (-inf) never occurs."""
    return torch.where(m == -math.inf, torch.zeros_like(m), m)


def _normalise(m, d, o):
    """Output ``o / d`` and ``lse = m + log d``; a row with no key (d = 0) gives 0 and -inf.

    ``d_safe`` (the kernels' ``l_safe``) keeps 0/0 and log 0 out of the graph, so even the
    gradient of a fully masked row is 0, not NaN.
    """
    empty = d == 0
    d_safe = torch.where(empty, torch.ones_like(d), d)
    lse = torch.where(empty, torch.full_like(m, -math.inf), m + torch.log(d_safe))
    return o / d_safe, lse.squeeze(-1)


# ----------------------------------------------------------------------------------
# Direct form
# ----------------------------------------------------------------------------------
def attention(q, k, v, *, causal=False, alignment="top_left", window=None, key_lengths=None,
              mask=None, scale=None, softcap=None, alibi_slopes=None, sinks=None, mask_mod=None, mask_args=None,
              dropout_mask=None, dropout_p=0.0, score_mod=None, score_args=None):
    """Attention from the safe-softmax definition, in float64. Returns ``(out, lse)``.

    ``causal``: query ``i`` sees key ``j <= i + shift`` with ``shift = 0`` for
    ``alignment="top_left"`` and ``Nk - Nq`` for ``"bottom_right"``. ``window=(left, right)``:
    keys with ``-left <= j - (i + shift) <= right`` (intersected with causal when both are
    given). ``key_lengths`` (B,): keys ``j >= key_lengths[b]`` are padding. ``mask``: bool,
    broadcastable to (B, Hq, Nq, Nk), True = attend. ``scale``: default ``1/sqrt(D)``.

    Score modifications (FlashAttention / FA4 semantics, ``_modified_scores``): ``softcap``
    (> 0): ``s = softcap·tanh(scale·q·k / softcap)``, after scaling and before masking;
    ``alibi_slopes`` ``(Hq,)`` or ``(B, Hq)``: ``s −= slope·|i + shift − j|``; ``sinks``
    ``(Hq,)``: one extra natural-log logit per row with value 0, ``out_i = Σ_j e^{s_ij} v_j /
    (e^{sink} + Σ_j e^{s_ij})``, ``lse_i = log(e^{sink} + Σ_j e^{s_ij})`` (a row with no key:
    out 0, lse = sink). Torch ``sinks`` keep their autograd graph.
    ``mask_mod`` (``spec.masks.mask_mod``) with ``mask_args``: its predicate, evaluated on every entry.
    ``score_mod`` (``spec.score_mods.score_mod``) with ``score_args``: ``s ← f(s, b, h, i, j, shift, ...)``
    on every entry after softcap and ALiBi, before the masks (torch tensors in ``score_args`` keep their
    autograd graph: the reference's gradients of captured tensors).
    ``dropout_mask`` (bool, broadcastable to (B, Hq, Nq, Nk), True = kept) with ``dropout_p``
    (FlashAttention 2's dropout): after normalisation ``P ← dropout_mask ∘ P / (1 − p)``, so
    ``out = (Z ∘ P/(1 − p)) V``; ``lse`` is the undropped one.
    """
    prob = _prepare(q, k, v, causal, alignment, window, key_lengths, mask, scale, mask_mod, mask_args)
    s = _modified_scores(prob, prob.scale * prob.q @ prob.k.transpose(-1, -2), alignment, softcap, alibi_slopes)
    if score_mod is not None:
        s = score_mod.apply_torch(s, masks.alignment_shift(alignment, s.shape[2], s.shape[3]), dict(score_args or {}))
    if prob.attend is not None:
        s = s.masked_fill(~prob.attend, MASKED_LOGIT)
    m = s.amax(-1, keepdim=True)  # pass 1: the row max (-inf for a row with no key)
    if sinks is not None:
        sink = _check_sinks(sinks, prob.q.shape[1])[None, :, None, None]
        m = torch.maximum(m, sink)  # the sink is one more key of every row (-inf: a row with no entry)
    p = torch.exp(s - _guard(m))  # pass 2: e^{x_j - m}, every exponent <= 0
    d = p.sum(-1, keepdim=True)
    if sinks is not None:
        d = d + torch.exp(sink - _guard(m))  # the sink's e^{sink - m}, value 0
    # pass 3: the map (d = 0: out 0, lse -inf); dropout scales the weights of P V only (the
    # denominator, so lse, is undropped)
    out, lse = _normalise(m, d, _dropped(p, dropout_mask, dropout_p) @ prob.v)
    if sinks is not None:  # d = 0 only for sink = -inf on a row with no key: lse = sink there, as for every
        lse = torch.where(d.squeeze(-1) == 0, sink.squeeze(-1).expand_as(lse), lse)  # sink (its gradient: 1)
    return _finish(prob, out, lse)


def _dropped(p: torch.Tensor, dropout_mask, dropout_p: float) -> torch.Tensor:
    """``Z ∘ p / (1 − dropout_p)`` (FlashAttention 2's dropout) for a bool keep mask ``Z``; ``p``
    itself without one. Normalising the dropped numerator by the undropped denominator is
    dropping the normalised P: ``(Z ∘ e^{s}/(1 − p)) / Σ e^{s} = Z ∘ P/(1 − p)``."""
    if dropout_mask is None:
        return p
    if not 0 <= dropout_p < 1:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
    keep = _as_tensor(dropout_mask, "dropout_mask").to(torch.bool).expand(p.shape)
    return torch.where(keep, p / (1 - dropout_p), torch.zeros_like(p))


def _modified_scores(prob: _Problem, s: torch.Tensor, alignment, softcap, alibi_slopes) -> torch.Tensor:
    """The scaled scores ``s = scale·q·k`` with the softcap, then the ALiBi bias, applied."""
    if softcap is not None:
        if not isinstance(softcap, numbers.Real) or isinstance(softcap, bool) or not 0 < softcap < math.inf:
            raise ValueError(f"softcap must be a finite number > 0 (or None), got {softcap!r}")
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        B, Hq, Nq, Nk = s.shape
        slopes = _as_tensor(alibi_slopes, "alibi_slopes").to(torch.float64)
        if tuple(slopes.shape) not in ((Hq,), (B, Hq)):
            raise ValueError(f"alibi_slopes must have shape (Hq,) = ({Hq},) or (B, Hq) = ({B}, {Hq}), "
                             f"got {tuple(slopes.shape)}")
        shift = masks.alignment_shift(alignment, Nq, Nk)
        distance = (torch.arange(Nq)[:, None] + shift - torch.arange(Nk)[None, :]).abs().to(torch.float64)
        s = s - slopes.expand(B, Hq)[:, :, None, None] * distance
    return s


def _check_sinks(sinks, Hq: int) -> torch.Tensor:
    sinks = _as_tensor(sinks, "sinks")
    if tuple(sinks.shape) != (Hq,):
        raise ValueError(f"sinks must have shape (Hq,) = ({Hq},), one logit per query head, got {tuple(sinks.shape)}")
    return sinks.to(torch.float64)


# ----------------------------------------------------------------------------------
# Tiled form
# ----------------------------------------------------------------------------------
def _tile_update(m, d, o, s, v):
    """Merge one key tile into the running state (FA2 form, natural exp): ``s ⊕ tile``.

    ``m_new = max(m, rowmax s)``; ``alpha = e^{m - m_new}`` rescales the old ``d`` and ``o``;
    ``p = e^{s - m_new}``; ``d += rowsum p``; ``o += p v`` (claims block_update and
    online_softmax_invariant; the guard is merge_identity's).
    """
    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
    m_safe = _guard(m_new)
    alpha = torch.exp(m - m_safe)
    p = torch.exp(s - m_safe)
    return m_new, d * alpha + p.sum(-1, keepdim=True), o * alpha + p @ v


class _Tiles:
    """Which key tiles a query tile visits, and the scores of a visited tile."""

    def __init__(self, prob: _Problem, br: int, bc: int, stats: dict | None):
        self.prob, self.br, self.bc, self.stats = prob, br, bc, stats
        self._structured: dict[tuple[int, int, int], str] = {}
        if stats is not None:
            for key in ("tiles", "skip", "full", "partial", "kv_bytes", "q_bytes", "o_bytes", "map_bytes",
                        "mask_bytes"):
                stats.setdefault(key, 0)

    def classify(self, b: int, h: int, r0: int, c0: int) -> str:
        """``masks.classify_tile`` for the structured kinds, then the user's mask block."""
        prob, br, bc = self.prob, self.br, self.bc
        cls = "full"
        if prob.kinds:
            # the structured kinds depend on the batch entry's numbers only, not on b or the head
            key = (tuple(prob.params[b].items()), r0, c0)
            if key not in self._structured:
                self._structured[key] = masks.classify_tile(prob.kinds, r0, c0, br, bc, **prob.params[b])
            cls = self._structured[key]
        if cls != "skip" and prob.user_mask is not None:
            # the kernel reads one block-map byte per tile the structured kinds leave it, and
            # the mask's bytes (torch.bool: one per element) only where its block is partial
            block = prob.user_mask[b, h, r0:r0 + br, c0:c0 + bc]
            self._add("map_bytes", 1)
            if not bool(block.any()):
                cls = "skip"
            elif not bool(block.all()):
                cls = "partial"
                self._add("mask_bytes", block.numel())
        if self.stats is not None:
            self.stats["tiles"] += 1
            self.stats[cls] += 1
            if cls != "skip":
                n_keys = min(bc, prob.k.shape[2] - c0)
                width = prob.k.shape[-1] + prob.v.shape[-1]
                self.stats["kv_bytes"] += n_keys * width * prob.itemsize
        return cls

    def scores(self, b: int, h: int, r0: int, c0: int, cls: str) -> torch.Tensor:
        prob = self.prob
        s = prob.scale * prob.q[b, h, r0:r0 + self.br] @ prob.k[b, h, c0:c0 + self.bc].T
        if cls == "partial":  # only partial tiles pay for the predicate
            s = s.masked_fill(~prob.attend[b, min(h, prob.attend.shape[1] - 1),
                                           r0:r0 + self.br, c0:c0 + self.bc], MASKED_LOGIT)
        return s

    def count(self, key: str, rows: int, width: int):
        self._add(key, rows * width * self.prob.itemsize)

    def _add(self, key: str, nbytes: int):
        if self.stats is not None:
            self.stats[key] += nbytes


def online_attention(q, k, v, *, causal=False, alignment="top_left", window=None,
                     key_lengths=None, mask=None, scale=None, br: int = 16, bc: int = 16,
                     order: str = "fa2", stats: dict | None = None):
    """``attention`` computed tile by tile with the online-softmax recurrences.

    ``br``/``bc``: query/key tile sizes (``B_r``, ``B_c``; need not divide the lengths).
    ``order="fa2"``: query tiles outer, un-normalised ``õ`` divided once at the end;
    ``order="fa1"``: key tiles outer, the normalised ``o'``, ``m``, ``d'`` of every query tile
    kept in "HBM" between visits. ``stats``: a dict to receive the traffic counts, summed
    over (batch, head): ``tiles``, ``skip``, ``full``, ``partial`` (visits of a (query tile,
    key tile) pair, by class) and, at the inputs' element size, ``kv_bytes`` (K and V tiles
    read), ``q_bytes`` (Q tiles read; FA1 also reads back its o', m, d' state per visit) and
    ``o_bytes`` (O and the row statistics written; FA1 writes them per visit); with a
    boolean ``mask``, ``map_bytes`` (one block-map byte per tile the structured kinds do not
    skip) and ``mask_bytes`` (the mask's elements, one byte each, of the tiles it makes
    partial), as the generated kernel reads them.
    """
    for name, size in (("br", br), ("bc", bc)):
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise ValueError(f"{name} must be a positive int (a tile size), got {size!r}")
    if order not in ("fa2", "fa1"):
        raise ValueError(f"order must be 'fa2' (query tiles outer) or 'fa1' (key tiles outer), "
                         f"got {order!r}")
    prob = _prepare(q, k, v, causal, alignment, window, key_lengths, mask, scale)
    tiles = _Tiles(prob, int(br), int(bc), stats)
    run = _fa2 if order == "fa2" else _fa1
    B, H = prob.q.shape[:2]
    pairs = [run(prob, tiles, b, h) for b in range(B) for h in range(H)]
    out = torch.stack([o for o, _ in pairs]).reshape(B, H, *pairs[0][0].shape)
    lse = torch.stack([lse for _, lse in pairs]).reshape(B, H, -1)
    return _finish(prob, out, lse)


def _fa2(prob: _Problem, tiles: _Tiles, b: int, h: int):
    """FA2 loop order: for each query tile, sweep the key tiles; one division at the end."""
    Nq, Nk, Dv = prob.q.shape[2], prob.k.shape[2], prob.v.shape[-1]
    outs, lses = [], []
    for r0 in range(0, Nq, tiles.br):
        rows = min(tiles.br, Nq - r0)
        tiles.count("q_bytes", rows, prob.q.shape[-1])
        m = torch.full((rows, 1), -math.inf, dtype=torch.float64)  # the state E
        d = torch.zeros((rows, 1), dtype=torch.float64)
        o = torch.zeros((rows, Dv), dtype=torch.float64)
        for c0 in range(0, Nk, tiles.bc):
            cls = tiles.classify(b, h, r0, c0)
            if cls == "skip":  # no attended entry (mask_tiles_sound): K, V never loaded
                continue
            m, d, o = _tile_update(m, d, o, tiles.scores(b, h, r0, c0, cls), prob.v[b, h, c0:c0 + tiles.bc])
        out, lse = _normalise(m, d, o)  # fa2_deferred_normalisation
        tiles.count("o_bytes", rows, Dv + 1)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def _fa1(prob: _Problem, tiles: _Tiles, b: int, h: int):
    """FA1 loop order: for each key tile, visit every query tile and update its normalised
    ``o'`` with ``o'_new = (o' d' e^{m - m_new} + P V) / d'_new`` (seed 003, FA1 tiling)."""
    Nq, Nk, D, Dv = prob.q.shape[2], prob.k.shape[2], prob.q.shape[-1], prob.v.shape[-1]
    m = torch.full((Nq, 1), -math.inf, dtype=torch.float64)  # per-row state, kept in "HBM"
    d = torch.zeros((Nq, 1), dtype=torch.float64)
    o = torch.zeros((Nq, Dv), dtype=torch.float64)  # normalised o'
    for c0 in range(0, Nk, tiles.bc):
        for r0 in range(0, Nq, tiles.br):
            cls = tiles.classify(b, h, r0, c0)
            if cls == "skip":
                continue
            rows = slice(r0, r0 + tiles.br)
            n_rows = min(tiles.br, Nq - r0)
            tiles.count("q_bytes", n_rows, D + Dv + 2)  # Q, o', m, d' read back per visit
            s = tiles.scores(b, h, r0, c0, cls)
            m_new, d_new, o_tilde = _tile_update(m[rows], d[rows], o[rows] * d[rows], s,
                                                 prob.v[b, h, c0:c0 + tiles.bc])
            o_new, _ = _normalise(m_new, d_new, o_tilde)  # normalise at every step (FA1)
            m, d, o = _store(m, rows, m_new), _store(d, rows, d_new), _store(o, rows, o_new)
            tiles.count("o_bytes", n_rows, Dv + 2)
    _, lse = _normalise(m, d, o * d)
    return o, lse


def _store(dst: torch.Tensor, rows: slice, value: torch.Tensor) -> torch.Tensor:
    """Write a tile back without in-place ops (keeps autograd usable)."""
    return torch.cat([dst[:rows.start], value, dst[rows.stop:]])


# ----------------------------------------------------------------------------------
# Packed variable-length batches (FlashAttention's cu_seqlens layout)
# ----------------------------------------------------------------------------------
class _AtBatch:
    """A score_mod seen from one batch entry (a packed batch's segment, a KV cache's row) run as a
    problem of its own: its ``b`` is that entry."""

    def __init__(self, score_mod, batch: int):
        self.score_mod, self.batch = score_mod, batch

    def apply_torch(self, s, shift, score_args):
        return self.score_mod.apply_torch(s, shift, score_args, batch=self.batch)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, window=None, scale=None,
                     dropout_mask=None, dropout_p=0.0, score_mod=None, score_args=None):
    """``attention`` on each segment of a packed batch, in float64. Returns ``(out, lse)``.

    ``q (total_q, Hq, D)``, ``k (total_k, Hkv, D)``, ``v (total_k, Hkv, Dv)`` (torch tensors);
    ``cu_seqlens_q/k`` the ``B + 1`` offsets of ``spec.varlen.segments``. Segment ``b`` is the
    dense problem on its slices with ``alignment = spec.varlen.ALIGNMENT`` (bottom-right: the
    same mask predicates, with ``shift = n_k - n_q`` of the segment). Returns ``out
    (total_q, Hq, Dv)`` and ``lse (Hq, total_q)`` (natural log); a segment without keys gives
    output 0 and ``lse = -inf``, one without queries nothing. Rows of other segments are never
    read, so whatever they hold (NaN included) cannot reach a segment's output or gradient.
    ``dropout_mask`` (bool ``(Hq, total_q, total_k)``, global rows and keys) with ``dropout_p``:
    ``attention``'s dropout, each segment taking its own block of the mask. ``score_mod`` with ``score_args``:
    ``attention``'s, on each segment with ``b`` the segment's index (``i``, ``j``, ``shift`` its own).
    """
    q, k, v = _as_tensor(q, "q"), _as_tensor(k, "k"), _as_tensor(v, "v")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 3:
            raise ValueError(f"{name} must have rank 3 (total, H, D) in a packed batch, got shape "
                             f"{tuple(x.shape)}")
    segments = varlen.segments(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0])
    outs, lses = [], []
    for segment, (q0, q1, k0, k1) in enumerate(segments):
        nq, hq, dv = q1 - q0, q.shape[1], v.shape[-1]
        if nq == 0:
            continue
        if k1 == k0:  # no key: the empty sum of the definition (the dense form needs N_k >= 1)
            outs.append(torch.zeros((nq, hq, dv), dtype=torch.float64))
            lses.append(torch.full((hq, nq), -math.inf, dtype=torch.float64))
            continue
        seg = [x[a:b].transpose(0, 1)[None] for x, (a, b) in ((q, (q0, q1)), (k, (k0, k1)), (v, (k0, k1)))]
        keep = None if dropout_mask is None else _as_tensor(dropout_mask, "dropout_mask")[None, :, q0:q1, k0:k1]
        out, lse = attention(*seg, causal=causal, alignment=varlen.ALIGNMENT, window=window, scale=scale,
                             dropout_mask=keep, dropout_p=dropout_p, score_args=score_args,
                             score_mod=None if score_mod is None else _AtBatch(score_mod, segment))
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0])
    if not outs:
        return (q.new_zeros((0, q.shape[1], v.shape[-1]), dtype=torch.float64),
                torch.zeros((q.shape[1], 0), dtype=torch.float64))
    return torch.cat(outs), torch.cat(lses, dim=1)


# ----------------------------------------------------------------------------------
# KV cache: append, rotary, left padding, batch index (FlashAttention's flash_attn_with_kvcache)
# ----------------------------------------------------------------------------------
def rotary(x, cos, sin, positions, interleaved: bool = True) -> torch.Tensor:
    """Rotary embedding in float64: ``x`` ``(B, T, H, D)``, ``cos``/``sin`` ``(seqlen_ro, rotary_dim / 2)``,
    ``positions`` ``(B, T)`` integer table rows. Pair ``f`` (``spec.rotary.pair_lanes``: GPT-J
    lanes ``(2f, 2f + 1)``, GPT-NeoX ``(f, f + rotary_dim / 2)``) is rotated by ``spec.rotary.rotation``
    with ``cos[pos, f]``, ``sin[pos, f]``; lanes past ``rotary_dim`` are kept, and a row ``pos >= seqlen_ro``
    rotates by 0 (cos 1, sin 0: FlashAttention's ``apply_rotary_emb``)."""
    x = _as_tensor(x, "x").to(torch.float64)
    cos, sin = _as_tensor(cos, "cos").to(torch.float64), _as_tensor(sin, "sin").to(torch.float64)
    positions = torch.as_tensor(positions, dtype=torch.long)
    half = cos.shape[1]
    out = x.clone()
    inside = (positions < cos.shape[0])[:, :, None, None]
    safe = positions.clamp(max=cos.shape[0] - 1)
    c = torch.where(inside, cos[safe][:, :, None, :], 1.0)  # (B, T, 1, half)
    s = torch.where(inside, sin[safe][:, :, None, :], 0.0)
    lanes = [rotary_spec.pair_lanes(f, half, interleaved) for f in range(half)]
    a = torch.tensor([p[0] for p in lanes], dtype=torch.long)
    b = torch.tensor([p[1] for p in lanes], dtype=torch.long)
    out[..., a], out[..., b] = rotary_spec.rotation(x[..., a], x[..., b], c, s)
    return out


def kvcache_attention(q, k_cache, v_cache, cache_seqlens, *, k=None, v=None, rotary_cos=None, rotary_sin=None,
                      rotary_interleaved=True, cache_leftpad=None, cache_batch_idx=None, block_table=None,
                      causal=False, window=None, scale=None, softcap=None, alibi_slopes=None, sinks=None,
                      score_mod=None, score_args=None):
    """FlashAttention's ``flash_attn_with_kvcache`` in float64. Returns ``(out, lse, k_cache, v_cache)``:
    ``out`` ``(B, N_q, Hq, D)``, ``lse`` ``(B, Hq, N_q)``, and new float64 copies of the caches with
    the appended rows (the inputs are not modified). ``v_cache`` may have its own head dim ``D_v`` (MLA);
    then ``out`` is ``(B, N_q, Hq, D_v)``.

    ``q`` ``(B, N_q, Hq, D)``; the cache ``(B_cache, N_cache, Hkv, D)`` or, with ``block_table``
    ``(B, pages)``, paged ``(num_pages, page_size, Hkv, D)``; ``cache_seqlens`` ``(B,)``. ``k``, ``v``
    ``(B, N_new, Hkv, D)`` are written at keys ``cache_seqlens[b] + t`` of row ``cache_batch_idx[b]``
    (or ``b``), ``k`` rotated at table row ``cache_seqlens[b] + t`` when ``rotary_cos`` is given;
    ``q`` is rotated at ``cache_seqlens[b] + t`` when ``causal`` or ``window``, else at
    ``cache_seqlens[b]``. Row ``b`` then attends its keys ``[cache_leftpad[b], cache_seqlens[b] +
    N_new)`` with causal / window / ALiBi bottom-right aligned (query ``i`` at key index
    ``cache_seqlens[b] + N_new − N_q + i``). ``score_mod`` with ``score_args``: ``attention``'s, with
    ``b`` the batch entry, ``i`` the new token, ``j`` the cache key and the bottom-right shift."""
    q = _as_tensor(q, "q")
    B, Nq, Hq, D = q.shape
    kc, vc = _as_tensor(k_cache, "k_cache").to(torch.float64).clone(), _as_tensor(v_cache, "v_cache").to(torch.float64).clone()
    lens = [int(x) for x in torch.as_tensor(cache_seqlens)]
    pad = [0] * B if cache_leftpad is None else [int(x) for x in torch.as_tensor(cache_leftpad)]
    rows = list(range(B)) if cache_batch_idx is None else [int(x) for x in torch.as_tensor(cache_batch_idx)]
    n_new = 0 if k is None else k.shape[1]
    q64 = q.to(torch.float64)
    if rotary_cos is not None:
        pos_q = torch.tensor([[rotary_spec.kvcache_rotary_row(lens[b], t, query=True, causal=causal, window=window)
                               for t in range(Nq)] for b in range(B)])
        q64 = rotary(q64, rotary_cos, rotary_sin, pos_q, rotary_interleaved)

    def where(b, j):
        """(cache tensor index, row within it) of key j of batch b."""
        if block_table is None:
            return rows[b], j
        page_size = kc.shape[1]
        return int(block_table[b, j // page_size]), j % page_size

    if k is not None:
        k64, v64 = _as_tensor(k, "k").to(torch.float64), _as_tensor(v, "v").to(torch.float64)
        if rotary_cos is not None:
            pos_k = torch.tensor([[rotary_spec.kvcache_rotary_row(lens[b], t, query=False) for t in range(n_new)]
                                  for b in range(B)])
            k64 = rotary(k64, rotary_cos, rotary_sin, pos_k, rotary_interleaved)
        for b in range(B):
            for t in range(n_new):
                c, r = where(b, lens[b] + t)
                kc[c, r], vc[c, r] = k64[b, t], v64[b, t]
    outs, lses = [], []
    for b in range(B):
        L = lens[b] + n_new
        kk = torch.stack([kc[where(b, j)] for j in range(L)]) if L else kc.new_zeros((0,) + kc.shape[2:])
        vv = torch.stack([vc[where(b, j)] for j in range(L)]) if L else vc.new_zeros((0,) + vc.shape[2:])
        keys = torch.arange(L) >= pad[b]
        if not bool(keys.any()) or Nq == 0:
            outs.append(torch.zeros(Nq, Hq, vc.shape[-1], dtype=torch.float64))  # v's head dim D_v
            lse_b = torch.full((Hq, Nq), -math.inf, dtype=torch.float64)
            if sinks is not None:
                lse_b = lse_b.clone().copy_(torch.as_tensor(sinks, dtype=torch.float64)[:, None].expand(Hq, Nq))
            lses.append(lse_b)
            continue
        kk, vv = torch.nan_to_num(kk) * keys[:, None, None], torch.nan_to_num(vv) * keys[:, None, None]
        slopes = None
        if alibi_slopes is not None:
            slopes = torch.as_tensor(alibi_slopes)
            slopes = slopes[b:b + 1] if slopes.dim() == 2 else slopes
        o, lse = attention(q64[b:b + 1].transpose(1, 2), kk[None].transpose(1, 2), vv[None].transpose(1, 2),
                           causal=causal, alignment="bottom_right", window=window, mask=keys[None, None, None, :],
                           scale=scale, softcap=softcap, alibi_slopes=slopes, sinks=sinks, score_args=score_args,
                           score_mod=None if score_mod is None else _AtBatch(score_mod, b))
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses), kc, vc
