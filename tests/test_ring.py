"""Ring attention: the claims and their mutants, the layouts, and real gloo runs for P = 1..4.

The claims' mutants live with every other claim's in tests/test_mutants.py. The multi-process runs (``ring_worker.spawn``) each start P processes once and batch every
check of that world size: forward and backward on both layouts, causal and not, GQA, three
dtypes at P = 2, the error paths, and (P = 3) a rank that raises mid-ring. The parent compares
the unsharded results with ``flash_attention`` on the full tensors and with the float64
reference.
"""

from __future__ import annotations

import functools

import pytest
import torch

import ring_worker as W
from generated import flash_attention, ring_shard, ring_unshard
from spec import masks as M
from spec import ring as RG
from spec.reference import attention as reference

RING_CLAIMS = ("ring_layout_partition", "ring_causal_blocks", "ring_schedule", "ring_merge_order")


# ----------------------------------------------------------------------------------
# Claims (their mutants: tests/test_mutants.py).
# ----------------------------------------------------------------------------------
def test_ring_claims_proved(proved):
    results = proved
    for cid in RING_CLAIMS:
        assert results[cid].proved, results[cid].detail


# ----------------------------------------------------------------------------------
# Layouts, classes, plans (numbers).
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", RG.LAYOUTS)
def test_shard_unshard_round_trip(layout):
    x = torch.arange(2 * 3 * 24 * 2).reshape(2, 3, 24, 2)
    for P in (1, 2, 3, 4):
        shards = [ring_shard(x, P, r, layout=layout) for r in range(P)]
        assert all(s.shape == (2, 3, 24 // P, 2) for s in shards)
        assert torch.equal(ring_unshard(shards, layout=layout), x)
    assert torch.equal(ring_shard(x, 2, 1, layout="zigzag")[:, :, :6], x[:, :, 6:12])  # chunk 1 of 4
    assert torch.equal(ring_shard(x, 2, 1, layout="zigzag")[:, :, 6:], x[:, :, 12:18])  # chunk 2 = 2P-1-1


def test_shard_errors_name_the_problem():
    x = torch.zeros(1, 1, 10, 4)
    with pytest.raises(ValueError, match=r"not divisible by 2P = 8"):
        ring_shard(x, 4, 0, layout="zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        ring_shard(x, 2, 0, layout="striped")
    with pytest.raises(ValueError, match="one length"):
        ring_unshard([x, x[:, :, :4]], layout="contiguous")


def test_pair_classes_agree_with_the_tile_classifier():
    """spec.ring's block-pair classes are spec.masks.classify_tile's (skip/full/partial) at
    block granularity, for every pair of every layout up to P = 6 and chunk sizes 1..3."""
    names = {"skip": RG.EMPTY, "full": RG.FULL, "partial": RG.PARTIAL}
    for layout, lay in RG.LAYOUTS.items():
        for P in range(1, 7):
            total_chunks = P * lay.slots
            for size in (1, 2, 3):
                N = total_chunks * size
                for gq in range(total_chunks):
                    for gk in range(total_chunks):
                        tile = M.classify_tile(("causal",), gq * size, gk * size, size, size, N_Q=N, N_K=N, shift=0)
                        assert RG.classify_pair(gq, gk, size, N) == names[tile], (layout, P, size, gq, gk)


def test_zigzag_plans_balance_causal_work():
    """Every rank of the zigzag layout runs the same number of block pairs under a causal mask:
    the own shard (3 of its 4 pairs) and 2 pairs of every other shard."""
    for P in (2, 3, 4, 8):
        work = []
        for r in range(P):
            plans = [RG.plan_step("zigzag", P, r, src, True, 4) for src in range(P)]
            assert plans[r].kind == "causal" and all(p.kind == "full" for i, p in enumerate(plans) if i != r)
            work.append(sum((p.rows[1] - p.rows[0]) * (p.cols[1] - p.cols[0]) for i, p in enumerate(plans) if i != r))
        assert work == [2 * (P - 1)] * P


# ----------------------------------------------------------------------------------
# Real runs: gloo, P processes, kernels in the interpreter.
# ----------------------------------------------------------------------------------
BLOCK = (16, 32)
#: max error / max |expected| per dtype, against flash_attention and against the float64 reference
TOL_FLASH = {torch.float32: 2e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}
TOL_REF = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _case(layout, causal, dtype="float32", seed=0, **heads):
    return dict(seed=seed, dtype=dtype, layout=layout, causal=causal, block=BLOCK, **heads)


CASES = {
    1: [_case("zigzag", True), _case("contiguous", False)],
    2: [_case(lay, c) for lay in RG.LAYOUTS for c in (True, False)]
       + [_case("zigzag", True, "bfloat16", seed=1), _case("contiguous", True, "float16", seed=2),
          _case("zigzag", False, hq=2, hkv=2, seed=3, lse_grad=False),
          _case("zigzag", True, seed=9, dv=8)],  # MLA: v's head dim 8, q/k's 16 (issue 27)
    3: [_case("zigzag", True, seed=4), _case("contiguous", True, seed=5)],
    4: [_case("zigzag", True, seed=6), _case("contiguous", False, seed=7)],
}
FAULT = {"failing_rank": 1, "timeout": 6, "linger": 20}
#: a ring of world ranks 0 and 2 only: group rank 1 is global rank 2
SUBGROUP = {"members": [0, 2], "case": _case("zigzag", True, seed=8)}


@pytest.fixture(scope="module", autouse=True)
def _fork_server():
    """``_run``'s ranks fork from one server process (ring_worker.PRELOAD); stopped when this file's tests end."""
    yield
    W.stop_server()


@functools.lru_cache(maxsize=None)
def _run(P: int):
    payload = {"cases": CASES[P], "errors": P == 2, "fault": FAULT if P == 3 else None,
               "subgroup": SUBGROUP if P == 3 else None}
    results = W.spawn(P, "ring", payload, timeout=600)
    for r, res in results.items():
        assert not (isinstance(res, tuple) and res[0] == "raised"), f"rank {r}: {res[2]}"
    return results


def _expected(case, exact: bool):
    """(out, lse, dq, dk, dv) of the full problem: flash_attention, or the float64 reference."""
    dtype = getattr(torch, case["dtype"])
    q, k, v, do, dlse = W.full_problem(case["seed"], dtype, case.get("hq", W.HQ), case.get("hkv", W.HKV),
                                       case.get("dv", W.D))
    if exact:
        q, k, v, do = (t.double() for t in (q, k, v, do))
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    if exact:
        out, lse = reference(q, k, v, causal=case["causal"])
    else:
        out, lse = flash_attention(q, k, v, causal=case["causal"], return_lse=True, block=BLOCK)
    loss = (out.to(do.dtype) * do).sum()
    (loss + (lse.to(dlse.dtype) * dlse).sum() if case.get("lse_grad", True) else loss).backward()
    return {"out": out, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _gathered(shards, layout):
    """The full out, lse, dq, dk, dv from every rank's shards (in group-rank order)."""
    got = {key: ring_unshard([s[key] for s in shards], layout=layout) for key in ("out", "dq", "dk", "dv")}
    got["lse"] = ring_unshard([s["lse"][..., None] for s in shards], layout=layout)[..., 0]
    return got


def _failures(got, want, tol):
    bad = []
    for key, w in want.items():
        g = got[key].double()
        err = (g - w.detach().double()).abs().max().item() / max(1.0, w.detach().double().abs().max().item())
        if not err <= tol:  # NaN fails
            bad.append(f"{key}: {err:.3g} > {tol:g}")
    return bad


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_ring_matches_flash_attention_and_reference(P):
    results = _run(P)
    for i, case in enumerate(CASES[P]):
        dtype = getattr(torch, case["dtype"])
        got = _gathered([results[r]["cases"][i] for r in range(P)], case["layout"])
        assert got["out"].dtype == dtype and got["lse"].dtype == torch.float32
        assert all(results[r]["cases"][i]["deterministic"] for r in range(P)), f"{case}: backward not bitwise repeatable"
        flash, exact = _expected(case, exact=False), _expected(case, exact=True)
        if P == 1:  # one rank is flash_attention itself: the same kernel calls, and E ⊕ s = s exactly
            assert all(torch.equal(got[key], flash[key]) for key in flash), case
        assert not _failures(got, flash, TOL_FLASH[dtype]), (case, "vs flash_attention", _failures(got, flash, TOL_FLASH[dtype]))
        assert not _failures(got, exact, TOL_REF[dtype]), (case, "vs float64", _failures(got, exact, TOL_REF[dtype]))


def test_ring_on_a_subgroup():
    """group=new_group([0, 2]) on a world of 3: the ring's neighbours are global ranks 0 and 2."""
    results = _run(3)
    assert "subgroup" not in results[1]
    # rank 1, outside the group (new_group returned GroupMember.NON_GROUP_MEMBER there), passing it anyway:
    # the contract's membership rule of group (before: "must be a torch.distributed process group, got int")
    kind, message = results[1]["non_member"]
    assert kind == "ValueError" and "not a member of group" in message, results[1]["non_member"]
    case = SUBGROUP["case"]
    got = _gathered([results[r]["subgroup"] for r in SUBGROUP["members"]], case["layout"])
    want = _expected(case, exact=False)
    assert not _failures(got, want, TOL_FLASH[torch.float32]), _failures(got, want, TOL_FLASH[torch.float32])


def test_transfers_are_posted_before_the_kernel_runs():
    """Overlap, P = 2: each step posts the next K/V transfer, then runs its kernel, then waits;
    the backward passes a shard's dK/dV on only after adding this rank's share."""
    kv, dkv = "the K/V shard", "dK/dV"
    expected = [("post", kv), ("attend", ""), ("wait", kv), ("attend", ""),  # forward
                ("post", kv), ("attend_backward", ""), ("wait", kv), ("post", dkv),  # backward, step 0
                ("attend_backward", ""), ("wait", dkv), ("post", dkv),  # step 1
                ("wait", "dK/dV of this rank's shard")]
    for r in (0, 1):
        assert _run(2)[r]["order"] == expected


def test_ring_errors_name_the_problem():
    results = _run(2)
    for r in (0, 1):
        errors = results[r]["errors"]
        assert ("q must be alike on every rank" in errors["lengths"] and "rank 1 passes a float32 shard of shape "
                "(1, 2, 16, 16) and rank 0 a float32 shard of shape (1, 2, 8, 16)" in errors["lengths"]), errors
        assert "ring_shard" in errors["lengths"], errors
        assert "not divisible by 2P = 4" in errors["zigzag"] and "layout='contiguous'" in errors["zigzag"], errors


def test_every_rule_the_ranks_must_agree_on_fails_on_every_rank():
    """Issue 23: the cross-rank agreement of ring_attention is declared (``contract``'s ``PEERS`` rules,
    ``checks.agree``) and enforced by ``contract.enforce`` in one all_gather. Each rule broken on rank 1
    alone by its own ``bad`` change (a shape, the dtype, causal, scale, layout, block): every rank raises
    the rule's error, the same message on every rank, naming the argument and the fix; none hangs
    (``_run``'s spawn fails on a hang). A call rank 1's own rules refuse: rank 1 raises its error, rank 0
    a ValueError naming rank 1 and the argument (before, rank 0 waited in the comparison for the timeout)."""
    from generator.runtime import contract

    peers = [results["errors"]["peers"] for results in (_run(2)[0], _run(2)[1])]
    names = [name for name, _ in contract._PEER_RULES["ring_attention"]]
    assert names == ["q", "k", "v", "causal", "scale", "layout", "block"], names
    wanted = {name: f"{name} must be alike on every rank of the process group" for name in names}
    wanted["q dtype"] = "q must be alike on every rank of the process group"
    for case, start in wanted.items():
        kind, message = peers[0][case]
        assert kind == "ValueError" and message.startswith(start), (case, peers[0][case])
        assert peers[1][case] == peers[0][case], (case, peers)  # the same error on every rank
        assert "rank 1 passes" in message and "rank 0" in message and "on every rank" in message, message
    assert "rank 1 passes a float16 shard" in peers[0]["q dtype"][1], peers[0]["q dtype"]
    assert "scale 1.0 and rank 0 scale 0.5" in peers[0]["scale"][1], peers[0]["scale"]
    assert "causal=False and rank 0 causal=True" in peers[0]["causal"][1], peers[0]["causal"]
    own, told = peers[1]["refused on rank 1"], peers[0]["refused on rank 1"]
    assert own[0] == "TypeError" and "float64" in own[1], own
    assert told[0] == "ValueError" and "rank 1 of 2 refused its argument q" in told[1], told


def test_a_rank_failing_mid_ring_makes_every_rank_raise():
    """A rank whose kernel raises: every rank raises at once (no timeout involved); a rank that
    hangs: its peers raise within the group's timeout instead of waiting for it."""
    results = _run(3)
    peers = [r for r in range(3) if r != FAULT["failing_rank"]]
    raised, hung = (results[FAULT["failing_rank"]]["fault"][key] for key in ("raise", "hang"))
    assert raised[:3] == ("raised", "RuntimeError", "injected raise"), raised
    assert hung[:3] == ("raised", "RuntimeError", "injected hang"), hung
    for r in peers:
        status, kind, message, seconds = results[r]["fault"]["raise"]
        assert (status, kind) == ("raised", "RingAttentionError"), results[r]["fault"]
        assert "rank 1 raised at step 1 of 3" in message, message
        assert seconds < 60, seconds  # told by the status exchange, long before the world group's timeout
        status, kind, message, seconds = results[r]["fault"]["hang"]
        assert (status, kind) == ("raised", "RingAttentionError"), results[r]["fault"]
        assert f"rank {r} of 3 waited in vain" in message and "timeout" in message, message
        assert seconds < FAULT["linger"], seconds  # raised while the hanging rank still slept
