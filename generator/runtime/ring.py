"""Ring attention (context parallelism) over ``torch.distributed``: forward and backward.

Each rank of a process group holds one *shard* of the sequence — its query rows and its
keys/values, in SDPA layout — and the K/V shards travel once around the ring by
point-to-point sends (``torch.distributed.batch_isend_irecv``)::

    step s: rank r holds the K/V shard of rank (r - s) mod P
            post: send it to rank r+1, receive the next one from rank r-1   (in flight ...)
            run the generated forward kernel: local queries x this K/V shard -> (o_s, lse_s)
            merge (o, lse) <- (o, lse) ⊕ (o_s, lse_s)                        (... overlapped)
            wait for the next shard

The merge is ``merge_state``'s generated kernel (printed from ``spec.terms.MERGE_STATE``; claim
``lse_merge``: the LSE merge of two normalised partial results is the state merge ⊕). ⊕ is
associative and commutative with identity E = (o 0, lse −inf), so the order in which shards
arrive cannot change the result (claim ``ring_merge_order``), and
a step whose block pairs are all empty contributes E and is skipped. Which block pairs a step
runs comes from the kernels' own causal tile classifier applied with one chunk per tile
(``spec.ring``, claim ``ring_causal_blocks``): every step is one kernel call.

Backward (FlashAttention-2's recomputation, per step): with the *global* ``out`` and ``lse``,
the generated backward op on (local queries, K/V shard) gives exactly this pair's share of the
gradients — P recomputed as ``exp(s − lse)``, Δ = rowsum(dO ∘ O) — so dQ accumulates on its
rank while dK, dV (fp32) ride the ring behind their K/V shard and arrive at their owner after
P steps. Every sum has an order fixed by P: the gradients are bitwise deterministic for a
fixed world size.

Layouts (``spec.ring.LAYOUTS``): ``contiguous`` gives rank r the r-th of P equal slices;
``zigzag`` cuts the sequence into 2P chunks and gives rank r chunks r and 2P−1−r, so every
rank has the same causal work. ``ring_shard`` / ``ring_unshard`` cut and reassemble a full
tensor.

Failures: a rank whose kernel raises mid-ring keeps the transfer schedule (it skips its
remaining kernels, still sends and receives), and after the last step one tiny all_gather
tells every rank who failed: that rank raises its own error, every other rank
``RingAttentionError`` naming it — no waiting on a timeout. A rank that dies or hangs is
caught by the bounded waits: every wait ends within the process group's ``timeout``
(``init_process_group(..., timeout=...)`` or ``new_group(timeout=...)``), a dead peer's
connections close at once, and the others raise ``RingAttentionError`` naming the step, the
neighbours and the cause.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from spec import ring as spec_ring

from generator.runtime import api, checks, config, contract
from generator.runtime.autograd import flash_attention_backward_op
from generator.runtime.custom_op import flash_attention_op
from generator.runtime.merge import merge_state_op

LAYOUTS = tuple(spec_ring.LAYOUTS)


class RingAttentionError(RuntimeError):
    """A peer of the ring failed (raised, died or timed out) while this rank waited for it."""


# ----------------------------------------------------------------------------------
# Sharding helpers.
# ----------------------------------------------------------------------------------
def _check_layout(layout):
    if layout not in spec_ring.LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return spec_ring.LAYOUTS[layout]


def _chunk_size(length: int, world_size: int, layout: str, what: str) -> int:
    slots = _check_layout(layout).slots
    if length % (world_size * slots):
        need = "2P" if slots == 2 else "P"
        raise ValueError(
            f"layout={layout!r} cuts the sequence into {world_size * slots} equal chunks, but {what} has "
            f"N = {length} positions, not divisible by {need} = {world_size * slots} (P = {world_size}); "
            "pad the sequence (and mask the padding) or use another world size"
            + (" or layout='contiguous'" if slots == 2 else ""))
    return length // (world_size * slots)


def ring_shard(x: torch.Tensor, world_size: int, rank: int, *, layout: str = "zigzag", dim: int = 2) -> torch.Tensor:
    """Rank ``rank``'s shard of a full tensor ``x`` cut along ``dim`` (the sequence axis of
    SDPA's ``(B, H, N, D)`` layout by default): ``contiguous`` -> slice ``rank`` of
    ``world_size``; ``zigzag`` -> chunks ``rank`` and ``2·world_size − 1 − rank`` of
    ``2·world_size``, concatenated. A view where the layout allows (contiguous), else a copy.

        q_local = ring_shard(q, P, rank)            # what each rank passes to ring_attention
        out = ring_unshard([out_0, ..., out_P-1])   # the full result, in sequence order
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size={world_size}), got {rank}")
    size = _chunk_size(x.shape[dim], world_size, layout, "the tensor")
    parts = [x.narrow(dim, g * size, size) for g in spec_ring.chunks_of(layout, world_size, rank)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def ring_unshard(shards, *, layout: str = "zigzag", dim: int = 2) -> torch.Tensor:
    """The full tensor from every rank's shard (``shards[r]`` from rank ``r``, e.g. gathered
    with ``torch.distributed.all_gather``): the inverse of ``ring_shard``."""
    world_size = len(shards)
    slots = _check_layout(layout).slots
    lengths = {s.shape[dim] for s in shards}
    if len(lengths) != 1:
        raise ValueError(f"shards must have one length along dim {dim}, got {[s.shape[dim] for s in shards]}")
    size = _chunk_size(lengths.pop() * world_size, world_size, layout, "the gathered shards")
    chunks = {}
    for r, shard in enumerate(shards):
        for t, g in enumerate(spec_ring.chunks_of(layout, world_size, r)):
            chunks[g] = shard.narrow(dim, t * size, size)
    return torch.cat([chunks[g] for g in range(world_size * slots)], dim)


# ----------------------------------------------------------------------------------
# The ring: neighbours in the group, point-to-point exchange, bounded waits.
# ----------------------------------------------------------------------------------
class _Ring:
    """This rank's place in the group's ring and the transport (``batch_isend_irecv``)."""

    def __init__(self, group):
        # torch.distributed initialised and this process in `group`: the declared contract's rules of group
        self.group = group if group is not None else dist.group.WORLD
        self.size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        # the peers of spec.ring (claim ring_schedule: each send meets a receive, and the shard held at
        # step s is spec.ring.source_rank's)
        self.next = dist.get_global_rank(self.group, spec_ring.next_rank(self.rank, self.size))
        self.prev = dist.get_global_rank(self.group, spec_ring.previous_rank(self.rank, self.size))

    def post(self, tensors, what: str, step: int):
        """Send ``tensors`` to the next rank and receive their like from the previous one;
        returns ``(requests, received)`` at once (the transfer runs while the caller computes)."""
        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in received]
        with self.transport_errors(f"could not post {what}", step):
            return dist.batch_isend_irecv(ops), received

    def wait(self, requests, what: str, step: int):
        with self.transport_errors(f"waited in vain for {what}", step):
            for request in requests:
                request.wait()

    @contextlib.contextmanager
    def transport_errors(self, doing: str, step: int):
        """A transport error as a RingAttentionError naming this rank, the step and its neighbours."""
        try:
            yield
        except RuntimeError as e:
            raise RingAttentionError(
                f"ring_attention: rank {self.rank} of {self.size} {doing} at step {step} (from rank "
                f"{(self.rank - 1) % self.size}, to rank {(self.rank + 1) % self.size}): a peer raised, died or is "
                f"slower than the process group's timeout. Cause: {e}") from e


# ----------------------------------------------------------------------------------
# One step: the block pairs of (local queries, one K/V shard), one kernel call.
# ----------------------------------------------------------------------------------
class _Step:
    """The kernel call of one step: query slots ``rows`` against key slots ``cols`` of the
    K/V shard, causal or not (``spec.ring.plan_step``)."""

    def __init__(self, opts, ring: _Ring, step: int, size: int):
        # the held shard's rank and the step's plan (claims ring_schedule, ring_causal_blocks)
        self.src, self.plan = spec_ring.step_of(opts["layout"], ring.size, ring.rank, step, opts["causal"], size)
        # the positions of the local q and of the held K/V shard the call reads (claim ring_causal_blocks)
        (r0, r1), (c0, c1) = spec_ring.step_slices(self.plan, size)
        self.rows, self.cols = slice(r0, r1), slice(c0, c1)
        self.causal = self.plan.causal

    @property
    def empty(self) -> bool:
        return self.plan.kind == "empty"


def _attend(step: _Step, q, k, v, opts):
    """``(o_s, lse_s)`` of one non-empty step: the generated forward kernel with its lse."""
    bm, bn = opts["block"]
    return flash_attention_op(q[:, :, step.rows], k[:, :, step.cols], v[:, :, step.cols], None, None, step.causal,
                              spec_ring.CALL_ALIGNMENT, None, opts["scale"], bm, bn, opts["tma"], opts["package"])


def _attend_backward(step: _Step, grad_out, grad_lse, q, k, v, out, lse, opts):
    """This step's share of (dQ rows, dK cols, dV cols): the generated backward op with the
    global out and lse (its fourth and fifth outputs, dsinks and a score_mod's dscore_f, are empty: a ring
    step has neither)."""
    bm, bn = opts["block"]
    r, c = step.rows, step.cols
    dq, dk, dv, *_ = flash_attention_backward_op(grad_out[:, :, r], None if grad_lse is None else grad_lse[:, :, r],
                                       q[:, :, r], k[:, :, c], v[:, :, c], out[:, :, r], lse[:, :, r], None, None,
                                       step.causal, spec_ring.CALL_ALIGNMENT, None, opts["scale"], bm, bn,
                                       opts["package"])
    return dq, dk, dv


class _Pass:
    """One pass around the ring (forward or backward) that never breaks the transfer schedule.

    A kernel that raises on this rank does not stop the ring: the rank records the error, skips
    its remaining kernels and keeps sending and receiving, so no peer waits for a message that
    never comes. After the last step every rank learns who failed (``agree``: one tiny
    all_gather) and raises — the failing rank its own error, the others ``RingAttentionError``
    naming it. A rank that dies or hangs is caught by the bounded waits instead.
    """

    def __init__(self, ring: _Ring, name: str):
        self.ring, self.name = ring, name
        self.error, self.step = None, -1

    def run(self, step: int, fn):
        if self.error is None:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - re-raised by agree() after the ring completes
                self.error, self.step = e, step

    def post(self, tensors, what: str, step: int):
        try:
            return self.ring.post(tensors, what, step)
        except RingAttentionError:
            self._raise_own()
            raise

    def wait(self, requests, what: str, step: int):
        try:
            self.ring.wait(requests, what, step)
        except RingAttentionError:
            self._raise_own()
            raise

    def _raise_own(self):
        if self.error is not None:
            self.error.add_note(f"ring_attention {self.name}: rank {self.ring.rank} of {self.ring.size} raised this "
                                f"at step {self.step}; its peers raise RingAttentionError")
            raise self.error

    def agree(self, device):
        if self.ring.size > 1:
            mine = torch.tensor([self.step], dtype=torch.int64, device=device)
            every = [torch.empty_like(mine) for _ in range(self.ring.size)]
            try:
                with self.ring.transport_errors("could not learn every rank's status", self.ring.size):
                    dist.all_gather(every, mine, group=self.ring.group)
            except RingAttentionError:
                self._raise_own()
                raise
            failed = [(r, int(t)) for r, t in enumerate(every) if int(t) >= 0]
        else:
            failed = []
        self._raise_own()
        if failed:
            raise RingAttentionError(
                f"ring_attention {self.name}: " + ", ".join(f"rank {r} raised at step {st}" for r, st in failed)
                + f" of {self.ring.size} (see that rank's error for the cause); the result on rank {self.ring.rank} "
                "is void")


def _ring_forward(q, k, v, opts, ring: _Ring):
    size = _chunk_size(q.shape[2] * ring.size, ring.size, opts["layout"], "the sequence")
    B, Hq, n, Dv = *q.shape[:3], v.shape[3]  # the output has v's head dim D_v (MLA: D_v != D)
    o = torch.zeros((B, Hq, n, Dv), dtype=torch.float32, device=q.device)  # E: o = 0, lse = -inf
    lse = torch.full((B, Hq, n), float("-inf"), dtype=torch.float32, device=q.device)
    kv = (k.contiguous(), v.contiguous())
    ring_pass = _Pass(ring, "forward")
    for s in range(ring.size):
        if s + 1 < ring.size:  # the next shard travels while this one is used
            requests, incoming = ring_pass.post(kv, "the K/V shard", s)
        step = _Step(opts, ring, s, size)

        def attend_and_merge():
            if step.empty:  # an empty step is E: nothing to run, nothing to merge
                return
            o_s, lse_s = _attend(step, q, *kv, opts)
            r = step.rows
            # (o, lse) <- (o, lse) ⊕ (o_s, lse_s): the generated merge_state kernel (spec.terms.MERGE_STATE,
            # claim lse_merge), in fp32 so P steps of rounding to bf16/fp16 do not pile up
            o[:, :, r], lse[:, :, r] = merge_state_op(o[:, :, r], lse[:, :, r], o_s.float(), lse_s, opts["package"])

        ring_pass.run(s, attend_and_merge)
        if s + 1 < ring.size:
            ring_pass.wait(requests, "the K/V shard", s)
            kv = tuple(incoming)
    ring_pass.agree(q.device)
    return o.to(q.dtype), lse


def _ring_backward(grad_out, grad_lse, q, k, v, out, lse, opts, ring: _Ring):
    size = _chunk_size(q.shape[2] * ring.size, ring.size, opts["layout"], "the sequence")
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = (k.contiguous(), v.contiguous())
    dkv = None  # (dK, dV) of the shard held now, fp32, travelling with it
    ring_pass = _Pass(ring, "backward")
    for s in range(ring.size):
        if s + 1 < ring.size:
            kv_requests, kv_incoming = ring_pass.post(kv, "the K/V shard", s)
        step = _Step(opts, ring, s, size)
        share = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in kv]

        def attend_backward():
            if step.empty:
                return
            dq_s, dk_s, dv_s = _attend_backward(step, grad_out, grad_lse, q, *kv, out, lse, opts)
            dq[:, :, step.rows] += dq_s
            share[0][:, :, step.cols] += dk_s
            share[1][:, :, step.cols] += dv_s

        ring_pass.run(s, attend_backward)
        if dkv is not None:  # the partial sums of this shard's owner's earlier neighbours
            ring_pass.wait(dkv_requests, "dK/dV", s)
            share = [a + b for a, b in zip(dkv_incoming, share)]
        dkv = share
        if s + 1 < ring.size:
            ring_pass.wait(kv_requests, "the K/V shard", s)
            kv = tuple(kv_incoming)
        if ring.size > 1:  # pass the sums on; after the last step they reach the shard's owner
            dkv_requests, dkv_incoming = ring_pass.post(dkv, "dK/dV", s)
    if ring.size > 1:
        ring_pass.wait(dkv_requests, "dK/dV of this rank's shard", ring.size)
        dkv = dkv_incoming
    ring_pass.agree(q.device)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, opts, ring):
        out, lse = _ring_forward(q, k, v, opts, ring)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts, ctx.ring = opts, ring
        ctx.set_materialize_grads(False)  # an unused lse gives grad_lse None: the kernel skips its load
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        if grad_out is None:  # only lse reached the loss
            grad_out = torch.zeros_like(out)
        dq, dk, dv = _ring_backward(grad_out, grad_lse, q, k, v, out, lse, ctx.opts, ctx.ring)
        return dq, dk, dv, None, None


def ring_attention(q, k, v, *, group=None, causal=False, scale=None, layout="zigzag", return_lse=False,
                   block=checks.DEFAULT_BLOCK):
    """Attention over a sequence sharded across the ranks of ``group`` (context parallelism).

    Each rank passes its shard, SDPA layout: ``q (B, Hq, N/P, D)``, ``k, v (B, Hkv, N/P, D)``
    (``Hq % Hkv == 0``: GQA without K/V copies), cut from the full tensors by
    ``ring_shard(x, P, rank, layout=layout)``; every rank gets its shard of the result, which
    ``ring_unshard(gathered, layout=layout)`` reassembles. ``group``: a ``torch.distributed``
    process group (default: the world); P = its size, 1 allowed (then this equals
    ``flash_attention``). ``layout``: ``"zigzag"`` (default; N must be divisible by 2P;
    balanced causal work) or ``"contiguous"``. ``causal``: top-left over the *global*
    positions. ``scale`` defaults to 1/sqrt(D); ``block`` picks the generated kernels (``"auto"``:
    ``flash_attention``'s choice per GPU); each step's forward uses TMA where ``flash_attention``
    would (``tma="auto"``).

    Returns ``out`` (q's dtype), or ``(out, lse)`` with ``return_lse=True`` (float32
    ``(B, Hq, N/P)``, natural log). Differentiable in q, k, v (and through lse): gradients
    equal the single-device ones to rounding and are deterministic for a fixed P.
    """
    return _ring(config.DEFAULT_PACKAGE, q, k, v, group=group, causal=causal, scale=scale, layout=layout,
                 return_lse=return_lse, block=block)


def _ring(package, q, k, v, *, group=None, causal=False, scale=None, layout="zigzag", return_lse=False,
          block=checks.DEFAULT_BLOCK):
    # every input check: the declared contract (generator.runtime.contract), none here; its PEERS rules
    # (shapes, dtype, causal, scale, layout, block alike on every rank) are compared across the group there
    a = contract.enforce("ring_attention", dict(q=q, k=k, v=v, group=group, causal=causal, scale=scale, layout=layout,
                                                return_lse=return_lse, block=block))
    scale, block = a["scale"], a["block"]
    ring = _Ring(group)
    tma = config.memory_path("auto", q.device)  # as flash_attention's tma="auto"
    if block == "auto":
        block = config.dense_auto_block(q, k, v, tma)
    _chunk_size(q.shape[2] * ring.size, ring.size, layout, "the sequence (P x the shard length)")
    q, scale = checks.normalise_scale(q, scale)  # s <= 0: the proven rewrite to s' > 0, as flash_attention
    opts = {"causal": causal, "layout": layout, "scale": scale, "block": block,
            "tma": tma, "package": package}
    out, lse = _RingAttention.apply(q, k, v, opts, ring)
    return (out, lse) if return_lse else out


api.IMPLEMENTATIONS["ring_attention"] = _ring
