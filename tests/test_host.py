"""The host path (benchmarks/host.py): the benchmark runs, and the call path makes no host sync.

A device->host sync (``.item()``, ``.tolist()``, ``.cpu()``, ``bool(tensor)``, an op whose output
size depends on values) stalls the CPU until the GPU has drained, and cannot be captured in a CUDA
graph. ``HostSyncGuard`` fails on each such call (kernel launches stubbed, CPU tensors):

* in eager mode (the plain call, which runs the op's body directly, and the call through the custom
  op) and under ``torch.compile(fullgraph=True)``, the decode path (contiguous and paged caches, one
  split and four) and the dense forward (with ``key_lengths``) make none at all: the declared value
  rules (``cache_seqlens``, the used page ids, ``key_lengths``) clamp each value into its range on
  the device (``generator.runtime.contract.keep_values``) instead of reading it back;
* only with the opt-in value checks (``contract.checking_values()``, ``FLASHPROOF_CHECK_VALUES=1``)
  do they sync, once per call, in ``contract.check_values`` and nowhere else.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import host
from generator.runtime import launch

pytestmark = pytest.mark.skipif(not launch.interpreting(), reason="CPU tensors need TRITON_INTERPRET=1")

#: the opt-in value checks, the one place a call may sync when they are on (module docstring)
BY_DESIGN = ("check_values",)


def test_the_host_benchmark_runs_at_tiny_sizes(capsys):
    assert host.main(["--tiny", "--number", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for case in host.CASES:
        assert case in out
    assert "FlashAttention" in out or "flash_attn" in out
    rows = host.measure(host.TINY, number=2, repeat=1, cases=("decode", "decode-splits", "decode-compiled", "dense",
                                                              "dense-grad", "dense-compiled", "dense-mask", "varlen",
                                                              "merge"))
    by_case = {r["case"]: r for r in rows}
    # each case reached its kernels: a case that launched nothing would time a shortcut
    for case in ("decode", "decode-compiled"):
        assert by_case[case]["launches"] == ["_decode_fwd"]
    for case in ("dense-grad", "dense-compiled"):
        assert by_case[case]["launches"] == ["_attn_fwd"]
    assert by_case["decode-splits"]["launches"] == ["_decode_fwd", "_merge_states"]
    assert by_case["dense"]["launches"] == ["_attn_fwd"] and by_case["varlen"]["launches"] == ["_attn_fwd"]
    assert by_case["dense-mask"]["launches"] == ["_attn_fwd"]
    # the packed call reads its offsets back in one sync per call; the dense mask's call reads nothing
    assert len(by_case["varlen"]["syncs"]) == 1 and by_case["dense-mask"]["syncs"] == []
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


def _paged_inputs():
    """A paged cache of 5 pages of 16 slots, 3 pages per sequence (capacity 48)."""
    q = torch.randn(2, 1, 4, 16)
    k_cache = torch.randn(5, 16, 2, 16)
    table = torch.tensor([[4, 0, 2], [1, 3, 0]], dtype=torch.int32)
    return q, k_cache, k_cache.clone(), torch.tensor([40, 17], dtype=torch.int32), table


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


def _eager_calls():
    """The eager calls whose path must not sync: decode over a contiguous and a paged cache, one split
    and four, and the dense forward with and without ``key_lengths``: ``(call, the kernels it launches,
    whether it has a value tensor to check)``."""
    from generated import flash_attention, flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs()
    qp, kp, vp, lengths_p, table = _paged_inputs()
    qd, k, v, key_lengths = _dense_inputs()
    calls = []
    for splits in (1, 4):
        merge = [] if splits == 1 else ["_merge_states"]
        calls.append((lambda s=splits: flash_attention_with_kvcache(q, k_cache, v_cache, lengths, causal=True,
                                                                    num_splits=s), ["_decode_fwd", *merge], True))
        calls.append((lambda s=splits: flash_attention_with_kvcache(qp, kp, vp, lengths_p, block_table=table,
                                                                    causal=True, num_splits=s),
                      ["_decode_fwd", *merge], True))
    calls.append((lambda: flash_attention(qd, k, v, causal=True, key_lengths=key_lengths), ["_attn_fwd"], True))
    calls.append((lambda: flash_attention(qd, k, v, causal=True), ["_attn_fwd"], False))
    return calls


@pytest.mark.parametrize("through_op", [False, True], ids=["direct", "custom-op"])
def test_eager_call_paths_make_no_host_sync(through_op, monkeypatch):
    """No ``.item()``, ``.tolist()``, ``.cpu()``, ``bool(tensor)``, ``nonzero``, boolean indexing or copy
    to the host on the eager path, on the call that records a signature's plan and on the calls that
    use it. ``through_op``: under a dispatch mode (the guard's own), so the call goes through the
    custom op; else the guard's patches alone watch the plain call, which runs the op's body directly
    (the op is replaced by a function that fails, so the test knows which path it watched).
    On the code before issue 25's point 3 this failed: the value rules read their flags back
    (``contract.check_values``) on every eager decode call and dense call with ``key_lengths``."""
    from generator.runtime import api, decode

    if not through_op:
        monkeypatch.setattr(decode, "kvcache_op", _refuse)
        monkeypatch.setattr(api, "flash_attention_op", _refuse)
    for call, kernels, _ in _eager_calls():
        for _ in range(3):  # the first call records the plans, the next ones use them
            with host.stubbed_launches() as launched:
                with host.HostSyncGuard(fail=True, dispatch=through_op) as guard:
                    call()
            assert guard.syncs == [] and launched == kernels, (guard.syncs, launched)


def _varlen_inputs():
    """Two segments, 3 and 4 queries on 3 and 4 keys (offsets [0, 3, 7]), Hq 4 / Hkv 2, D = 16."""
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    return torch.randn(7, 4, 16), torch.randn(7, 2, 16), torch.randn(7, 2, 16), cu


def test_varlen_call_checks_its_metadata_once_and_reads_its_offsets_in_one_sync(monkeypatch):
    """A plain packed call checks its arguments' metadata once per signature (the contract's rules are not
    run again: ``varlen._PLANS``), runs the forward op's body directly (no custom-op dispatch: the op is
    replaced by a function that fails) and reads both offset vectors back in one sync, on every call, so
    an edit in place, even through ``.numpy()`` (no version bump), raises the named error next call. On
    the code before (main at 6bf29f8) every call ran the whole contract, went through the custom op and
    read each vector back on its own (two syncs)."""
    from generated import flash_attention_varlen
    from generator.runtime import contract, varlen

    q, k, v, cu = _varlen_inputs()
    enforced = []
    enforce = contract.enforce
    monkeypatch.setattr(contract, "enforce", lambda entry, *a, **kw: enforced.append(entry) or enforce(entry, *a, **kw))
    monkeypatch.setattr(varlen, "flash_attention_varlen_op", _refuse)
    with host.stubbed_launches() as launched:
        for _ in range(3):
            with host.HostSyncGuard(dispatch=False) as guard:
                flash_attention_varlen(q, k, v, cu, cu, 4, 4, causal=True)
            assert [s.what for s in guard.syncs] == ["Tensor.tolist()"], guard.syncs
        assert enforced == ["flash_attention_varlen"] and launched == ["_attn_fwd"] * 3
        cu.numpy()[1] = 9  # in place, behind torch's version counter: no longer non-decreasing
        with pytest.raises(ValueError, match="non-decreasing"):
            flash_attention_varlen(q, k, v, cu, cu, 4, 4, causal=True)
        cu.numpy()[1] = 2  # valid offsets, but a segment of 5 rows above the hint 4
        with pytest.raises(ValueError, match="smaller than the longest segment"):
            flash_attention_varlen(q, k, v, cu, cu, 4, 4, causal=True)


def test_dense_mask_call_checks_its_metadata_once(monkeypatch):
    """A dense bool mask call checks its arguments' metadata once per signature (``api._PLANS``, the mask
    by its metadata) and plans its launch once (``custom_op._PLANS``), and builds its block map from the
    mask's content on every call (reliability row 5: no map cached). On the code before (main at 6bf29f8)
    every mask call ran the whole contract and planned its launch again."""
    from generated import flash_attention
    from generator.runtime import contract, dispatch

    enforced, built = [], []
    enforce, block_map = contract.enforce, dispatch.block_map
    monkeypatch.setattr(contract, "enforce", lambda entry, *a, **kw: enforced.append(entry) or enforce(entry, *a, **kw))
    monkeypatch.setattr(dispatch, "block_map", lambda *a: built.append(1) or block_map(*a))
    q, k, v, _ = _dense_inputs()
    mask = torch.ones((32, 40), dtype=torch.bool).tril()
    with host.stubbed_launches() as launched, host.HostSyncGuard(fail=True, dispatch=False):
        for _ in range(3):
            flash_attention(q, k, v, mask=mask, block=(16, 32))
    # the map: once for the plan (its shape and strides), then once per call
    assert enforced == ["flash_attention"] and len(built) == 1 + 3 and launched == ["_attn_fwd"] * 3


def test_opt_in_value_checks_sync_only_in_check_values():
    """With ``contract.checking_values()`` the value rules are read back: once per call, in
    ``check_values`` (allowed) and nowhere else; the calls without a value tensor still make none."""
    from generator.runtime import contract

    with contract.checking_values():
        for call, kernels, checked in _eager_calls():
            for _ in range(2):
                with host.stubbed_launches() as launched:
                    with host.HostSyncGuard(fail=True, allowed=BY_DESIGN, dispatch=False) as guard:
                        call()
                assert launched == kernels
                assert len(guard.syncs) == checked and all(s.where.endswith(" check_values") for s in guard.syncs), \
                    guard.syncs


# ----------------------------------------------------------------------------------------
# The eager shortcut and the plans (generator.runtime.plans)
# ----------------------------------------------------------------------------------------
def _refuse(*args, **kwargs):
    raise AssertionError("the custom op was called: the eager call should run its body directly")


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
    """Values are not part of a plan: with the opt-in checks, an edit in place after a planned call
    is caught by the next."""
    from generated import flash_attention, flash_attention_with_kvcache
    from generator.runtime import contract

    q, k_cache, v_cache, lengths = _decode_inputs()
    qd, k, v, key_lengths = _dense_inputs()
    with host.stubbed_launches(), contract.checking_values():
        for _ in range(2):
            flash_attention_with_kvcache(q, k_cache, v_cache, lengths)
            flash_attention(qd, k, v, key_lengths=key_lengths)
        lengths[1] = k_cache.shape[1] + 1
        with pytest.raises(ValueError, match="cache_len_range"):
            flash_attention_with_kvcache(q, k_cache, v_cache, lengths)
        key_lengths[0] = -1
        with pytest.raises(ValueError, match="key_len_range"):
            flash_attention(qd, k, v, key_lengths=key_lengths)


def test_a_planned_signature_clamps_values_edited_in_place():
    """By default (no opt-in check) an out-of-range value edited in place after a planned call is
    clamped into its range by the next call, on the device: that call gives the result of the call with
    the clamped value (the cache's capacity, the last page, N_k), bit for bit; the kernels run here."""
    from generated import flash_attention, flash_attention_with_kvcache

    q, k_cache, v_cache, lengths = _decode_inputs(splits_over=32)
    qp, kp, vp, lengths_p, table = _paged_inputs()
    qd, k, v, key_lengths = _dense_inputs()
    flash_attention_with_kvcache(q, k_cache, v_cache, lengths)  # the plans recorded
    flash_attention_with_kvcache(qp, kp, vp, lengths_p, block_table=table)
    flash_attention(qd, k, v, key_lengths=key_lengths)
    lengths[1], lengths_p[0], key_lengths[0] = 99, 1000, -5
    table[0, 1] = 77  # a page id past num_pages = 5, in the pages sequence 0 reads
    got = (flash_attention_with_kvcache(q, k_cache, v_cache, lengths),
           flash_attention_with_kvcache(qp, kp, vp, lengths_p, block_table=table),
           flash_attention(qd, k, v, key_lengths=key_lengths))
    want = (flash_attention_with_kvcache(q, k_cache, v_cache, torch.tensor([29, 32], dtype=torch.int32)),
            flash_attention_with_kvcache(qp, kp, vp, torch.tensor([48, 17], dtype=torch.int32),
                                         block_table=torch.tensor([[4, 4, 2], [1, 3, 0]], dtype=torch.int32)),
            flash_attention(qd, k, v, key_lengths=torch.tensor([0, 17], dtype=torch.int32)))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


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


def test_cuda_graph_check_exits_2_without_compiled_kernels(capsys):
    """``python -m benchmarks.cuda_graph_check`` (the capture and bitwise replay of a decode step, run on
    a GPU) refuses cleanly here: no CUDA, or the interpreter (this file runs under TRITON_INTERPRET=1)."""
    from benchmarks import cuda_graph_check

    assert cuda_graph_check.main([]) == 2
    assert "needs a CUDA GPU and compiled kernels" in capsys.readouterr().err


def test_the_environment_variable_turns_the_value_checks_on():
    """``FLASHPROOF_CHECK_VALUES=1`` (read at import) gives the named errors of the value rules (by
    default the same call clamps and returns: ``test_a_planned_signature_clamps_values_edited_in_place``)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import torch\nfrom generated import flash_attention_with_kvcache as f\n"
            "q, kc = torch.zeros(1, 1, 2, 16), torch.zeros(1, 32, 1, 16)\n"
            "try:\n    f(q, kc, kc, torch.tensor([40], dtype=torch.int32))\n    print('returned')\n"
            "except ValueError as e:\n    print(e)\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "FLASHPROOF_CHECK_VALUES": "1", "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert "cache_len_range" in out.stdout, (out.stdout, out.stderr[-2000:])
