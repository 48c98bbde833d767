"""Real multi-process runs of ``ring_attention`` for tests/test_ring.py (gloo on CPU).

``spawn(world_size, job, payload)`` starts ``world_size`` fresh processes (the ``forkserver``
start method: each forked from a server process that imported ``PRELOAD`` once, not from the test
process), joins them into one gloo process group on a free port and runs
``JOBS[job](rank, world_size, payload)`` on each; it returns every rank's result, or each
rank's error as ``("raised", type name, message)``. A hard timeout kills what is still running,
so a hang fails the test instead of stalling the suite. Each spawn batches many checks: a
process start (torch + triton imports) costs seconds on the shared CPUs, which ``PRELOAD`` pays
once per test process instead of once per rank.
"""

from __future__ import annotations

import datetime
import io
import os
import queue as queue_mod
import socket
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

#: what the fork server imports once for every rank it starts (about 3.5 of a rank's 4 CPU-seconds of
#: imports): torch and its distributed package, Triton, and the SymPy/z3 modules of spec that generated
#: imports. Not generated/ nor generator: a rank imports those after setting TRITON_INTERPRET (_bootstrap),
#: which @triton.jit reads when a kernel module is imported (Triton reads its knobs when asked, so
#: importing triton before that is fine).
PRELOAD = ["ring_worker", "torch.distributed", "torch._dynamo", "triton", "spec.mask_mod"]

#: shapes of the full problem: N = 48 is divisible by 2P for every P in 1..4
B, HQ, HKV, N, D = 1, 2, 1, 48, 16


def full_problem(seed: int, dtype=torch.float32, hq=HQ, hkv=HKV, dv=D):
    """The full q, k, v, dO, dlse of one case (same numbers in the parent and every rank); ``dv``:
    v's head dim (MLA: D_v != D, issue 27)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, hq, N, D, generator=g).to(dtype)
    k = torch.randn(B, hkv, N, D, generator=g).to(dtype)
    v = torch.randn(B, hkv, N, dv, generator=g).to(dtype)
    do = torch.randn(B, hq, N, dv, generator=g).to(dtype)
    dlse = torch.randn(B, hq, N, generator=g)
    return q, k, v, do, dlse


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _to_bytes(value) -> bytes:
    """Results travel as bytes: a tensor put on a torch.multiprocessing queue is shared by a file
    descriptor that dies with the rank's process."""
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _bootstrap(rank, world_size, port, pg_timeout, job, payload, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TRITON_INTERPRET="1")
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        results.put((rank, _to_bytes(JOBS[job](rank, world_size, payload))))
    except Exception as e:  # every rank reports; the test decides what was expected
        results.put((rank, _to_bytes(("raised", type(e).__name__, f"{e}\n{traceback.format_exc()}"))))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(world_size: int, job: str, payload, *, timeout: float = 300, pg_timeout: float = 120) -> dict:
    """``{rank: result}`` of ``job`` on ``world_size`` processes; AssertionError on a hang."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts: on this process's first spawn
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_bootstrap, args=(r, world_size, port, pg_timeout, job, payload, results))
             for r in range(world_size)]
    for p in procs:
        p.start()
    out, deadline = {}, time.monotonic() + timeout
    try:
        while len(out) < world_size:
            try:
                rank, value = results.get(timeout=1.0)
            except queue_mod.Empty:
                missing = sorted(set(range(world_size)) - set(out))
                if all(not procs[r].is_alive() for r in missing) and results.empty():
                    raise AssertionError(f"{job}: ranks {missing} exited without a result (exit codes "
                                         f"{[procs[r].exitcode for r in missing]})") from None
                if time.monotonic() > deadline:
                    raise AssertionError(f"{job}: ranks {missing} gave no result within {timeout} s (a hang)") from None
                continue
            out[rank] = torch.load(io.BytesIO(value), weights_only=False)
    finally:
        for p in procs:  # every rank has reported: one still alive after that is killed
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    return out


def stop_server() -> None:
    """Stop the fork server the first ``spawn`` started and wait for it (tests/test_ring.py, when its
    tests are done): no process outlives the tests, and its CPU time and its ranks' count as the test
    process's. (``_stop``: what CPython's own tests call, in multiprocessing.forkserver since 3.8.)"""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()


# ----------------------------------------------------------------------------------
# Jobs (run on every rank).
# ----------------------------------------------------------------------------------
def _run_case(rank, world_size, case, group=None):
    """One case's local shards: out, lse, and the gradients of
    ``(out·dO).sum() + (lse·dlse).sum()``; the backward runs twice (must be bitwise equal).
    ``rank``, ``world_size``: within ``group`` (default: the world)."""
    from generated import ring_attention, ring_shard

    dtype = getattr(torch, case["dtype"])
    q, k, v, do, dlse = full_problem(case["seed"], dtype, case.get("hq", HQ), case.get("hkv", HKV), case.get("dv", D))

    def shard(x):
        return ring_shard(x, world_size, rank, layout=case["layout"]).clone()

    q, k, v, do, dlse = map(shard, (q, k, v, do, dlse))
    grads = []
    for _ in range(2):
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        out, lse = ring_attention(qq, kk, vv, group=group, causal=case["causal"], layout=case["layout"],
                                  return_lse=True, block=tuple(case["block"]))
        loss = (out.float() * do.float()).sum()
        (loss + (lse * dlse).sum() if case.get("lse_grad", True) else loss).backward()
        grads.append((qq.grad, kk.grad, vv.grad))
    deterministic = all(torch.equal(a, b) for a, b in zip(*grads))
    return {"out": out.detach(), "lse": lse.detach(), "dq": grads[0][0], "dk": grads[0][1], "dv": grads[0][2],
            "deterministic": deterministic}


def ring_job(rank, world_size, payload):
    """The payload's ``cases`` (their local shards), a ``subgroup`` case, the ``errors`` checks
    and last the ``fault`` injection, as asked: one process start serves them all."""
    out = {"cases": [_run_case(rank, world_size, case) for case in payload.get("cases", ())]}
    if payload.get("subgroup"):  # the ring on ranks `members` of the world (group ranks differ from global ones)
        members = payload["subgroup"]["members"]
        group = dist.new_group(members)
        if rank in members:
            out["subgroup"] = _run_case(members.index(rank), len(members), payload["subgroup"]["case"], group)
        else:  # new_group gave this process GroupMember.NON_GROUP_MEMBER: refused, naming group
            from generated import ring_attention

            q = torch.randn(1, 2, 8, 16)
            try:
                ring_attention(q, q, q, group=group)
                out["non_member"] = ("finished",)
            except Exception as e:  # the test decides what was expected
                out["non_member"] = (type(e).__name__, str(e))
    if payload.get("errors"):
        out["errors"] = errors_job(rank, world_size, payload)
        out["order"] = order_job(rank, world_size, payload)
    if payload.get("fault"):
        out["fault"] = fault_job(rank, world_size, payload["fault"])
    return out


def errors_job(rank, world_size, payload):
    """The errors a user meets: shards of different lengths on different ranks (every rank must
    raise, none may hang), and an odd shard length under zigzag."""
    from generated import ring_attention

    raised = {}
    n = 8 if rank == 0 else 16
    q = torch.randn(1, 2, n, 16)
    try:
        ring_attention(q, q, q, layout="contiguous")
    except ValueError as e:
        raised["lengths"] = str(e)
    q = torch.randn(1, 2, 9, 16)
    try:
        ring_attention(q, q, q, layout="zigzag")
    except ValueError as e:
        raised["zigzag"] = str(e)
    raised["peers"] = peers_job(rank)
    return raised


def peer_base():
    """A valid call of ring_attention, the same on every rank (``peers_job`` changes it on rank 1)."""
    g = torch.Generator().manual_seed(0)
    return dict(q=torch.randn(1, 2, 8, 16, generator=g), k=torch.randn(1, 1, 8, 16, generator=g),
                v=torch.randn(1, 1, 8, 16, generator=g), group=None, causal=True, scale=0.5, layout="contiguous",
                return_lse=False, block=(16, 32))


def peers_job(rank):
    """Each rule of ring_attention's contract that the ranks must agree on (``checks.PEERS``), broken on
    rank 1 only by the rule's own ``bad`` change; then a dtype that differs, and a call that rank 1's own
    rules refuse. Per case, ``(error type, message)`` (or ``("finished",)``): every rank must raise."""
    from generated import ring_attention
    from generator.runtime import contract

    cases = {name: rule.bad(peer_base(), name) for name, rule in contract._PEER_RULES["ring_attention"]}
    cases["q dtype"] = {t: peer_base()[t].half() for t in ("q", "k", "v")}
    cases["refused on rank 1"] = {t: peer_base()[t].double() for t in ("q", "k", "v")}
    out = {}
    for case, changes in cases.items():
        call = {**peer_base(), **(changes if rank == 1 else {})}
        try:
            ring_attention(**call)
            out[case] = ("finished",)
        except Exception as e:  # every rank reports; the test decides what was expected
            out[case] = (type(e).__name__, str(e))
    return out


def order_job(rank, world_size, payload):
    """The order of transfers and kernels in one forward and backward: ``(event, what)``."""
    from generator.runtime import ring

    log, saved = [], (ring._Ring.post, ring._Ring.wait, ring._attend, ring._attend_backward)

    def logged(name, fn):
        def wrapper(*args, **kwargs):
            what = args[2] if name in ("post", "wait") else ""
            log.append((name, what))
            return fn(*args, **kwargs)
        return wrapper

    ring._Ring.post, ring._Ring.wait = logged("post", saved[0]), logged("wait", saved[1])
    ring._attend, ring._attend_backward = logged("attend", saved[2]), logged("attend_backward", saved[3])
    try:
        q = torch.randn(1, 2, 8, 16, requires_grad=True)
        ring.ring_attention(q, q, q, layout="contiguous", block=(16, 32)).sum().backward()
    finally:
        ring._Ring.post, ring._Ring.wait, ring._attend, ring._attend_backward = saved
    return log


def fault_job(rank, world_size, payload):
    """Two faults on rank ``failing_rank``, each reported as ``(status, error type, message,
    seconds)`` per rank:

    * ``raise``: its kernel raises at step 1 (world group): every rank must raise at once;
    * ``hang``: its kernel hangs ``linger`` s at step 0, then raises (a group with a
      ``timeout`` s timeout): the others must raise within their timeout, not wait for it.

    The short timeout bounds creating that group too (gloo's rendezvous in the store waits at most
    ``timeout`` s for every member): the ranks first meet in a barrier of the world group (its long
    timeout), so one that arrives late (ranks 0 and 2 run the subgroup case before, rank 1 does not:
    seconds apart under load) does not fail the creation with a store timeout.
    """
    from generator.runtime import ring

    attend = ring._attend
    q = torch.randn(1, 2, 8, 16)
    out = {}
    dist.barrier()
    short = dist.new_group(timeout=datetime.timedelta(seconds=payload["timeout"]))
    for fault, group in (("raise", None), ("hang", short)):
        calls = {"n": 0}

        def failing(step, *args, **kwargs):
            if rank == payload["failing_rank"] and calls["n"] == {"raise": 1, "hang": 0}[fault]:
                if fault == "hang":
                    time.sleep(payload["linger"])
                raise RuntimeError(f"injected {fault}")
            calls["n"] += 1
            return attend(step, *args, **kwargs)

        ring._attend = failing
        start = time.monotonic()
        try:
            ring.ring_attention(q, q, q, group=group, causal=False, layout="contiguous", block=(16, 32))
            out[fault] = ("finished",)
        except Exception as e:
            out[fault] = ("raised", type(e).__name__, str(e), time.monotonic() - start)
    ring._attend = attend
    return out


JOBS = {"ring": ring_job}
