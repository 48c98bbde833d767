"""The host path (benchmarks/host.py): the benchmark runs, and the call path makes no host sync.

A device->host sync (``.item()``, ``.tolist()``, ``.cpu()``, ``bool(tensor)``, an op whose output
size depends on values) stalls the CPU until the GPU has drained, and cannot be captured in a CUDA
graph. ``HostSyncGuard`` fails on each such call (kernel launches stubbed, CPU tensors):

* under ``torch.compile(fullgraph=True)`` the decode path (one split and four) and the dense forward
  (with ``key_lengths``) make none at all: what a captured graph replays;
* in eager mode the declared value rules sync **by design**, once per call
  (``generator.runtime.contract.check_values``): the ranges of ``cache_seqlens`` and the used page
  ids (``flash_attention_with_kvcache``) and of ``key_lengths`` (``flash_attention``), which raise
  the named error before a kernel reads past the cache or the keys. The test allows that function
  and nothing else;
  without a value tensor to check (dense, no ``key_lengths``) the eager path makes none.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import host
from generator.runtime import launch

pytestmark = pytest.mark.skipif(not launch.interpreting(), reason="CPU tensors need TRITON_INTERPRET=1")

#: the eager value checks that sync by design (module docstring)
BY_DESIGN = ("check_values",)


def test_the_host_benchmark_runs_at_tiny_sizes(capsys):
    assert host.main(["--tiny", "--number", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for case in host.CASES:
        assert case in out
    assert "FlashAttention" in out or "flash_attn" in out
    rows = host.measure(host.TINY, number=2, repeat=1, cases=("decode", "decode-splits", "decode-compiled", "dense",
                                                              "dense-grad", "dense-compiled", "varlen", "merge"))
    by_case = {r["case"]: r for r in rows}
    # each case reached its kernels: a case that launched nothing would time a shortcut
    for case in ("decode", "decode-compiled"):
        assert by_case[case]["launches"] == ["_decode_fwd"]
    for case in ("dense-grad", "dense-compiled"):
        assert by_case[case]["launches"] == ["_attn_fwd"]
    assert by_case["decode-splits"]["launches"] == ["_decode_fwd", "_merge_states"]
    assert by_case["dense"]["launches"] == ["_attn_fwd"] and by_case["varlen"]["launches"] == ["_attn_fwd"]
    assert by_case["merge"]["launches"] == ["_merge_state"]
    assert all(0 < r["us"] < 1e6 for r in rows)


def test_the_guard_catches_each_kind_of_sync():
    """The guard is not vacuous: each kind of sync it names fails inside it."""
    t = torch.arange(4)
    for sync in (lambda: t.sum().item(), lambda: t.tolist(), lambda: bool((t > 2).any()), lambda: t.cpu(),
                 lambda: t.numpy(), lambda: torch.nonzero(t), lambda: t[t > 1], lambda: torch.unique(t)):
        with pytest.raises(AssertionError, match="host sync"):
            with host.HostSyncGuard(fail=True):
                sync()
    with host.HostSyncGuard(fail=True) as guard:  # device-side work is not a sync
        (t * 2).clamp(0, 3).to(torch.int32).contiguous()
    assert guard.syncs == []


def _decode_inputs(splits_over=64):
    q = torch.randn(2, 1, 4, 16)
    k_cache = torch.randn(2, splits_over, 2, 16)
    lengths = torch.tensor([splits_over - 3, splits_over], dtype=torch.int32)
    return q, k_cache, k_cache.clone(), lengths


def _dense_inputs():
    q = torch.randn(2, 4, 32, 16)
    k = torch.randn(2, 2, 40, 16)
    return q, k, k.clone(), torch.tensor([40, 17], dtype=torch.int32)


def _compiled_under_guard(fn):
    """``fn`` under ``torch.compile(fullgraph=True)`` with a backend that runs the captured graph
    inside a failing ``HostSyncGuard`` (entered around the graph only: a dispatch mode active at
    the call itself would send dynamo back to eager). Returns the compiled function and the list
    of guards, one per graph run after the first (the compile)."""
    guards = []

    def backend(gm, example_inputs):
        def run(*args):
            if not calls:
                calls.append(1)
                return gm(*args)
            guards.append(host.HostSyncGuard(fail=True))
            with guards[-1]:
                return gm(*args)
        return run

    calls = []
    return torch.compile(fn, backend=backend, fullgraph=True), guards


@pytest.mark.parametrize("num_splits", [1, 4])
def test_decode_call_path_has_no_host_sync_under_compile(num_splits):
    from generated import flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs()
    step, guards = _compiled_under_guard(
        lambda q, k, v, n: flash_attention_with_kvcache(q, k, v, n, causal=True, num_splits=num_splits))
    with host.stubbed_launches() as launched:
        step(q, k_cache, v_cache, lengths)  # compiles: the trace itself has no data-dependent call (fullgraph)
        launched.clear()
        step(q, k_cache, v_cache, lengths)
    assert len(guards) == 1 and guards[0].syncs == []
    assert launched == (["_decode_fwd"] if num_splits == 1 else ["_decode_fwd", "_merge_states"])


def test_dense_call_path_has_no_host_sync_under_compile():
    from generated import flash_attention

    q, k, v, key_lengths = _dense_inputs()
    fwd, guards = _compiled_under_guard(lambda q, k, v, n: flash_attention(q, k, v, causal=True, key_lengths=n))
    with host.stubbed_launches() as launched:
        fwd(q, k, v, key_lengths)
        launched.clear()
        fwd(q, k, v, key_lengths)
    assert len(guards) == 1 and guards[0].syncs == [] and launched == ["_attn_fwd"]


def test_eager_call_paths_sync_only_in_their_value_checks():
    from generated import flash_attention, flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs()
    qd, k, v, key_lengths = _dense_inputs()
    with host.stubbed_launches() as launched:
        with host.HostSyncGuard(fail=True, allowed=BY_DESIGN) as guard:
            flash_attention_with_kvcache(q, k_cache, v_cache, lengths, causal=True, num_splits=4)
        assert guard.syncs and all(s.where.endswith(" check_values") for s in guard.syncs), guard.syncs
        with host.HostSyncGuard(fail=True, allowed=BY_DESIGN) as guard:
            flash_attention(qd, k, v, causal=True, key_lengths=key_lengths)
        assert guard.syncs and all(s.where.endswith(" check_values") for s in guard.syncs), guard.syncs
        with host.HostSyncGuard(fail=True) as guard:  # no value tensor to check: no sync at all
            flash_attention(qd, k, v, causal=True)
    assert guard.syncs == [] and launched == ["_decode_fwd", "_merge_states", "_attn_fwd", "_attn_fwd"]


# ----------------------------------------------------------------------------------------
# The eager shortcut and the plans (generator.runtime.plans)
# ----------------------------------------------------------------------------------------
def _refuse(*args, **kwargs):
    raise AssertionError("the custom op was called: the eager call should run its body directly")


def test_eager_direct_path_skips_the_op_and_syncs_only_in_its_value_checks(monkeypatch):
    """A plain eager call runs the op's body itself (the custom op is not called) and, watched by the
    guard's patches alone (a dispatch mode would send it through the op), syncs only in the value
    checks: on the call that records the plan and on the one that uses it."""
    from generated import flash_attention, flash_attention_with_kvcache
    from generator.runtime import api, decode

    monkeypatch.setattr(decode, "kvcache_op", _refuse)
    monkeypatch.setattr(api, "flash_attention_op", _refuse)
    q, k_cache, v_cache, lengths = _decode_inputs()
    qd, k, v, key_lengths = _dense_inputs()
    with host.stubbed_launches() as launched:
        for _ in range(2):  # the first call records the plans, the second uses them
            with host.HostSyncGuard(fail=True, allowed=BY_DESIGN, dispatch=False) as guard:
                flash_attention_with_kvcache(q, k_cache, v_cache, lengths, causal=True, num_splits=4)
            assert guard.syncs and all(s.where.endswith(" check_values") for s in guard.syncs), guard.syncs
            with host.HostSyncGuard(fail=True, allowed=BY_DESIGN, dispatch=False) as guard:
                flash_attention(qd, k, v, causal=True, key_lengths=key_lengths)
            assert guard.syncs and all(s.where.endswith(" check_values") for s in guard.syncs), guard.syncs
            with host.HostSyncGuard(fail=True, dispatch=False) as guard:
                flash_attention(qd, k, v, causal=True)
            assert guard.syncs == []
    assert launched == ["_decode_fwd", "_merge_states", "_attn_fwd", "_attn_fwd"] * 2


class _Passthrough(torch.utils._python_dispatch.TorchDispatchMode):
    """A dispatch mode that changes nothing: under it a call goes through its custom op."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_direct_path_is_bitwise_the_custom_op(num_splits):
    """The plan's launch (eager, direct) and the op's (planned per call) give the same bits, for a
    contiguous q and a strided view of the same shape (each signature its own plan)."""
    from generated import flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs()
    alibi, sinks = torch.rand(4), torch.randn(4)
    q_view = torch.randn(2, 4, 1, 16).transpose(1, 2)  # (2, 1, 4, 16) at other strides
    for qq in (q, q_view, q):
        kwargs = dict(causal=True, num_splits=num_splits, return_lse=True, softcap=30.0, alibi_slopes=alibi,
                      sinks=sinks, window=(20, 0))
        direct = flash_attention_with_kvcache(qq, k_cache, v_cache, lengths, **kwargs)
        with _Passthrough():
            via_op = flash_attention_with_kvcache(qq, k_cache, v_cache, lengths, **kwargs)
        for a, b in zip(direct, via_op):
            assert torch.equal(a, b)


def test_dense_direct_path_is_bitwise_the_custom_op():
    from generated import flash_attention

    qd, k, v, key_lengths = _dense_inputs()
    q_view = torch.randn(2, 32, 4, 16).transpose(1, 2)  # (2, 4, 32, 16) at other strides
    for qq in (qd, q_view, qd):
        kwargs = dict(causal=True, key_lengths=key_lengths, return_lse=True, softcap=20.0,
                      alibi_slopes=torch.rand(4), sinks=torch.randn(4), scale=-0.3)
        direct = flash_attention(qq, k, v, **kwargs)
        with _Passthrough():
            via_op = flash_attention(qq, k, v, **kwargs)
        for a, b in zip(direct, via_op):
            assert torch.equal(a, b)


def test_dense_direct_training_path_is_bitwise_the_custom_op():
    """With q, k, v and the sinks requiring grad, the eager path records the op's autograd itself
    (``autograd.DirectForward``): the same outputs and gradients, bit for bit, as the custom op's."""
    from generated import flash_attention

    qd, k, v, key_lengths = _dense_inputs()
    sinks = torch.randn(4)
    results = []
    for mode in (None, _Passthrough):
        leaves = [t.clone().requires_grad_() for t in (qd, k, v, sinks)]
        with mode() if mode else torch.enable_grad():
            out, lse = flash_attention(*leaves[:3], causal=True, key_lengths=key_lengths, sinks=leaves[3],
                                       return_lse=True)
            (out.sum() + lse.sum()).backward()
        results.append([out, lse] + [t.grad for t in leaves])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_a_planned_signature_still_checks_values_every_call():
    """Values are not part of a plan: an edit in place after a planned call is caught by the next."""
    from generated import flash_attention, flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs()
    qd, k, v, key_lengths = _dense_inputs()
    with host.stubbed_launches():
        for _ in range(2):
            flash_attention_with_kvcache(q, k_cache, v_cache, lengths)
            flash_attention(qd, k, v, key_lengths=key_lengths)
        lengths[1] = k_cache.shape[1] + 1
        with pytest.raises(ValueError, match="cache_len_range"):
            flash_attention_with_kvcache(q, k_cache, v_cache, lengths)
        key_lengths[0] = -1
        with pytest.raises(ValueError, match="key_len_range"):
            flash_attention(qd, k, v, key_lengths=key_lengths)


def test_a_planned_signature_still_rejects_options_of_the_wrong_type():
    """A key holds each option's type: after a planned call, ``1`` for ``True``, ``True`` for an
    int, a bool in a window still raise as on a first call."""
    from generated import flash_attention, flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs()
    qd, k, v, _ = _dense_inputs()
    with host.stubbed_launches():
        for _ in range(2):
            flash_attention_with_kvcache(q, k_cache, v_cache, lengths, causal=True, num_splits=1, window=(1, 0))
            flash_attention(qd, k, v, causal=True, scale=1.0, window=(1, 0), block=(64, 64))
        for bad in (dict(causal=1), dict(num_splits=True), dict(window=(1, False)), dict(scale=True)):
            with pytest.raises((TypeError, ValueError)):
                flash_attention_with_kvcache(q, k_cache, v_cache, lengths, **{**dict(causal=True, num_splits=1,
                                                                                     window=(1, 0)), **bad})
        for bad in (dict(causal=1), dict(scale=True), dict(window=(1, False)), dict(block=(64, True))):
            with pytest.raises((TypeError, ValueError)):
                flash_attention(qd, k, v, **{**dict(causal=True, scale=1.0, window=(1, 0), block=(64, 64)), **bad})


def test_plans_are_bounded_and_hold_no_call_tensor():
    """A plan keeps numbers, flags and placeholders, never a call's tensor (it would stay alive);
    the caches empty themselves past ``MAX_PLANS``."""
    import gc
    import weakref

    from generated import flash_attention_with_kvcache
    from generator.runtime import decode, plans

    q, k_cache, v_cache, lengths = _decode_inputs()
    alibi = torch.rand(4)
    with host.stubbed_launches():
        flash_attention_with_kvcache(q, k_cache, v_cache, lengths, alibi_slopes=alibi)
    refs = [weakref.ref(t) for t in (q, k_cache, v_cache, lengths, alibi)]
    del q, k_cache, v_cache, lengths, alibi
    gc.collect()
    assert all(r() is None for r in refs) and len(decode._PLANS) == 1
    cache = plans.PlanCache()
    for i in range(plans.MAX_PLANS + 5):
        cache.record(i, i)
    assert len(cache) <= plans.MAX_PLANS
