"""CUDA-graph capture of a decode step: ``flash_attention_with_kvcache`` captured in ``torch.cuda.graph``,
replayed, and compared bit for bit with an eager call on the same inputs (issue 25, point 3).

    python -m benchmarks.cuda_graph_check        # on a CUDA GPU (compiled kernels); exits 2 without one

For a contiguous and a paged cache, one split and the heuristic's (several splits and the merge on a
GPU with many SMs): the step is warmed up on a side stream (the kernels compile, the call's plans are
recorded), captured once, then its inputs are changed **in place** as a server's decode loop does
(new queries, each sequence one key longer; then a length past the capacity and a page id past the
pool, which the call clamps on the device) and the graph replayed: each replay must equal, bit for
bit, an eager call on the inputs it saw. A host sync on the call path would fail the capture itself
("operation not permitted when stream is capturing"). Exit status 0: every replay equal; 1: a
difference or a failed capture (the case and the error are printed); 2: no CUDA, or
``TRITON_INTERPRET=1`` (interpreted kernels cannot be captured). A few seconds after the kernels
compile (about a minute on a fresh machine).
"""

from __future__ import annotations

import sys
import traceback

import torch

B, HQ, HKV, D, CAPACITY, PAGE = 4, 8, 2, 128, 1024, 64


def _inputs(paged: bool):
    """A decode step's tensors on the GPU: q ``(B, 1, Hq, D)``, the caches, ``cache_seqlens`` and the block
    table (paged: a shuffled pool of pages with three spare ones)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *shape: torch.randn(shape, generator=g, device="cuda", dtype=torch.float16)  # noqa: E731
    q = rand(B, 1, HQ, D)
    if paged:
        per_seq = CAPACITY // PAGE
        k_cache, v_cache = rand(B * per_seq + 3, PAGE, HKV, D), rand(B * per_seq + 3, PAGE, HKV, D)
        table = torch.randperm(B * per_seq + 3, generator=g, device="cuda")[:B * per_seq]
        table = table.view(B, per_seq).to(torch.int32)
    else:
        k_cache, v_cache, table = rand(B, CAPACITY, HKV, D), rand(B, CAPACITY, HKV, D), None
    lengths = torch.tensor([CAPACITY - 1, 700, 65, 1], dtype=torch.int32, device="cuda")
    return q, k_cache, v_cache, lengths, table


def check(paged: bool, num_splits: int) -> list[str]:
    """The problems of one case (empty: every replay equals its eager call bit for bit)."""
    from generated import flash_attention_with_kvcache

    q, k_cache, v_cache, lengths, table = _inputs(paged)

    def step():
        return flash_attention_with_kvcache(q, k_cache, v_cache, lengths, block_table=table, causal=True,
                                            num_splits=num_splits, return_lse=True)

    side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_lse = step()

    edits = [("as captured", lambda: None),
             ("new q, each length + 1", lambda: (q.copy_(torch.randn_like(q)), lengths.add_(1).clamp_(max=CAPACITY))),
             ("a length past the capacity" + (", a page id past the pool" if paged else ""),
              lambda: (lengths.fill_(CAPACITY + 5), table is not None and table[0, 0].fill_(10**6)))]
    problems = []
    for what, edit in edits:
        edit()
        graph.replay()
        torch.cuda.synchronize()
        out, lse = step()  # eager, same inputs
        torch.cuda.synchronize()
        for name, replayed, eager in (("out", static_out, out), ("lse", static_lse, lse)):
            if not torch.equal(replayed, eager):
                diff = (replayed.float() - eager.float()).abs().nan_to_num(float("inf")).max().item()
                problems.append(f"{what}: replayed {name} differs from the eager call (max |diff| {diff:g})")
        if not (out.isfinite().all() and static_out.isfinite().all()):
            problems.append(f"{what}: a non-finite output")
    return problems


def main(argv=None) -> int:
    from generator.runtime.launch import interpreting

    if not torch.cuda.is_available() or interpreting():
        why = "TRITON_INTERPRET=1 is set (interpreted kernels cannot be captured)" if torch.cuda.is_available() \
            else "no CUDA device"
        print(f"cuda_graph_check needs a CUDA GPU and compiled kernels: {why}; run it on a GPU machine without "
              "TRITON_INTERPRET", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; B={B}, Hq={HQ}, Hkv={HKV}, D={D}, "
          f"capacity {CAPACITY} keys, fp16")
    failed = False
    for paged in (False, True):
        for num_splits in (1, 0):
            case = f"{'paged (page 64)' if paged else 'contiguous'} cache, num_splits={num_splits}"
            try:
                problems = check(paged, num_splits)
            except Exception:  # noqa: BLE001 - a failed capture is this check's finding: report it, go on
                problems = ["capture or replay failed:\n" + traceback.format_exc()]
            failed |= bool(problems)
            print(f"{case}: " + ("replays bitwise equal to eager (3 replays)" if not problems else "FAILED"))
            for p in problems:
                print("    " + p)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
