"""What one thread costs a job's compute: the loop's own steps on one thread (as a session
runs them) against the thread timing after the loop, each against a long timing in blocks.

For each corpus job with an in-process loader, each repeat in a fresh process: the job's
own loop (``train_step`` on its batches) warms up, then runs 60 steps in which every 5th
is on one intra-op thread (the session's ``one_thread`` steps: 4 on torch's threads, then
one); their ratio is read by the product's own
:func:`diagnose.metrics.context.loop_threads.loop_threads` (each one-thread step's compute
beside its neighbours'). Then the timing after the loop
(:func:`diagnose.capture.probes.time_threads`, the first batch's forward and backward
alone) and, as the reference, 6 blocks of 20 steps on each thread count, alternating: the
ratio of the blocks' medians ("blocks"; its spread: the least and most block pair).

    python benchmarks/threads_in_loop.py [JOB ...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "jobs"))
sys.path.insert(0, str(HERE))

JOBS = ["examples_vae", "examples_mnist_rnn", "wordpiece_reviews_classifier",
        "tabular_embeddings_bigbatch", "tensor_dataset_mlp", "regex_tokens_transformer"]
WARM, LOOP, EVERY, BLOCKS, BLOCK = 15, 60, 5, 6, 20


def one(name: str) -> dict[str, Any]:
    """One repeat of ``name`` in this process (module doc)."""
    import corpus
    import torch

    from diagnose.capture.probes.compute import ForwardTimer, time_threads
    from diagnose.metrics.context.loop_threads import loop_threads

    job = corpus.make(name)
    model, step_fn, batches = job["model"], job["train_step"], job["batches"]()
    n = torch.get_num_threads()
    timer = ForwardTimer(model, lambda s: None)

    def step(t: int) -> tuple[float, float]:
        torch.set_num_threads(t)
        t0 = time.perf_counter()
        b = next(batches)
        t1 = time.perf_counter()
        step_fn(b)
        return (time.perf_counter() - t0) * 1e3, (t1 - t0) * 1e3

    try:
        for _ in range(WARM):
            step(n)
        clock: dict[str, list[Any]] = {"phase": [], "ms": [], "dataloader_ms": []}
        for i in range(LOOP):
            one_thread = i % EVERY == EVERY - 1
            ms, wait = step(1 if one_thread else n)
            clock["phase"].append("one_thread" if one_thread else "after")
            clock["ms"].append(ms)
            clock["dataloader_ms"].append(wait)
        torch.set_num_threads(n)
        looped = loop_threads(clock) or {}
        works = timer.works()
        probe = time_threads(model, timer.inputs, works[1:])
        blocks: dict[int, list[float]] = {n: [], 1: []}
        for _ in range(BLOCKS):
            for t in (n, 1):
                for _ in range(3):
                    step(t)
                blocks[t].append(statistics.median(a - w for a, w in (step(t) for _ in range(BLOCK))))
    finally:
        torch.set_num_threads(n)
    pairs = [a / b for a, b in zip(blocks[1], blocks[n], strict=True)]
    return {"job": name,
            "probe": probe["work_1thread_ms"] / probe["work_ms"] if probe else None,
            "loop": looped.get("ratio"), "loop_noise": looped.get("noise"),
            "blocks": statistics.median(blocks[1]) / statistics.median(blocks[n]),
            "blocks_lo": min(pairs), "blocks_hi": max(pairs),
            "compute_ms": statistics.median(blocks[n])}


def _err(x: float | None, ref: float) -> float | None:
    return None if x is None else abs(math.log(x / ref))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", default=JOBS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return 0
    from _run import print_header

    print_header("one thread's cost: the loop's own steps against the timing after the loop",
                 "threads_in_loop.py")
    print(f"{'job':<30} {'rep':>3} {'compute ms':>10} {'blocks':>7} {'[least, most]':>15} "
          f"{'after loop':>10} {'in loop':>8}")
    rows = []
    for r in range(args.repeats):  # the jobs in turn, each repeat after all the others
        for name in args.jobs:
            out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True,
                                 text=True, check=False)
            if out.returncode != 0:
                print(f"{name:<30} {r + 1:>3} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            g = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(g)
            probe = f"{g['probe']:.3f}" if g["probe"] else "-"
            loop = f"{g['loop']:.3f}" if g["loop"] else "-"
            print(f"{name:<30} {r + 1:>3} {g['compute_ms']:>10.2f} {g['blocks']:>7.3f} "
                  f"[{g['blocks_lo']:.2f}, {g['blocks_hi']:.2f}]   {probe:>10} {loop:>8}",
                  flush=True)
    print()
    for kind, label in (("probe", "after the loop"), ("loop", "in the loop")):
        errs = [e for g in rows if (e := _err(g[kind], g["blocks"])) is not None]
        within = sum(e <= math.log(1.10) for e in errs)
        spreads = []
        for name in args.jobs:
            got = [g[kind] for g in rows if g["job"] == name and g[kind]]
            if len(got) >= 2:
                spreads.append(max(got) / min(got) - 1)
        print(f"{label:<15}: against the blocks, median error {statistics.median(errs):.1%}, "
              f"within 10% in {within} of {len(errs)}; spread over the repeats of a job "
              f"(most / least - 1): median {statistics.median(spreads):.1%}, most "
              f"{max(spreads):.1%}" if errs and spreads else f"{label}: nothing timed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
