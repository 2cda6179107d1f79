"""How long a job's compute takes after each kind of fetch, and what the session's timing of
it reads (the batched-fetch prediction's ``input_batched_fetch_work_ratio``).

The job's own loop runs in one process, blocks of steps whose batches are fetched a sample
at a time (the loader as the job has it) in turn with blocks fetched with one
``dataset[indices]`` call (the batched fetch). Each step's compute (forward, loss,
backward, optimizer) is timed; the first blocks and each block's first steps are left out.
The same is done in fresh processes with the environment or the gap before the compute
changed, to show where the difference comes from:

- ``as is``: the job as it runs;
- ``OMP_WAIT_POLICY=ACTIVE``: torch's OpenMP threads spin between parallel regions
  instead of blocking;
- ``one thread``: ``torch.set_num_threads(1)``: no pool to wake;
- ``20 ms asleep``: the batched blocks sleep 20 ms before their compute (the load's length,
  without its work).

Beside each, the session's own timing after such a loop (:func:`time_work_after_fetches`:
the model's forward and backward right after each kind of fetch, in turn).

    python benchmarks/work_after_fetch.py [--runs 2] [--blocks 16] [JOB]

JOB: a module of benchmarks/jobs whose loader reads a TensorDataset (default tensor_rows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "jobs"))

from _run import make, print_header  # noqa: E402

#: (name, extra environment, torch threads (None: as is), sleep before batched compute)
VARIANTS: list[tuple[str, dict[str, str], int | None, float]] = [
    ("as is", {}, None, 0.0),
    ("OMP_WAIT_POLICY=ACTIVE", {"OMP_WAIT_POLICY": "ACTIVE"}, None, 0.0),
    ("one thread", {}, 1, 0.0),
    ("20 ms asleep", {}, None, 0.02),
]
BLOCK = 25  # steps a block; its first SKIP are left out
SKIP = 5


def one_run(job_name: str, threads: int | None, asleep: float, blocks: int) -> dict[str, Any]:
    """The loop in blocks of each fetch in turn, then the session's timing (this process)."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    from diagnose.capture.probes import time_work_after_fetches

    if threads is not None:
        torch.set_num_threads(threads)
    job = make(job_name)
    model, opt, loss_fn, loader = job["model"], job["optimizer"], job["loss_fn"], job["loader"]
    ds = loader.dataset
    loaders = {"per_sample": loader,
               "batched": DataLoader(ds, batch_size=None, sampler=BatchSampler(
                   RandomSampler(ds), batch_size=loader.batch_size, drop_last=False))}
    its = {k: iter(v) for k, v in loaders.items()}
    compute: dict[str, list[float]] = {k: [] for k in loaders}
    first = None
    for b in range(blocks):
        kind = "per_sample" if b % 2 == 0 else "batched"
        for s in range(BLOCK):
            try:
                x, y = next(its[kind])
            except StopIteration:
                its[kind] = iter(loaders[kind])
                x, y = next(its[kind])
            if first is None:
                first = x
            if kind == "batched" and asleep:
                time.sleep(asleep)
            t0 = time.perf_counter()
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if b >= 2 and s >= SKIP:
                compute[kind].append((time.perf_counter() - t0) * 1e3)
    probe = time_work_after_fetches(model, ((first,), {}), loader)
    return {"per_sample": statistics.median(compute["per_sample"]),
            "batched": statistics.median(compute["batched"]),
            "probe": None if probe is None else probe["ratio"],
            "probe_rounds": None if probe is None else probe["rounds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", nargs="?", default="tensor_rows")
    ap.add_argument("--runs", type=int, default=2, help="fresh processes per variant")
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--variants", default=",".join(v[0] for v in VARIANTS),
                    help="which, by name, comma-separated")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        threads, asleep = json.loads(a.child)
        print(json.dumps(one_run(a.job, threads, asleep, a.blocks)))
        return
    print_header("a job's compute after each kind of fetch, in turn in one loop",
                 "work_after_fetch.py")
    print(f"job: {a.job}; {a.blocks} blocks of {BLOCK} steps in turn, the first {SKIP} of "
          "each and the first two blocks left out; medians")
    print()
    head = (f"{'variant':24s} {'run':>3s} {'after per-sample ms':>20s} "
            f"{'after batched ms':>17s} {'loop ratio':>11s} {'session ratio':>14s}")
    print(head)
    print("-" * len(head))
    for name, env, threads, asleep in VARIANTS:
        if name not in a.variants.split(","):
            continue
        for r in range(a.runs):
            out = subprocess.run(
                [sys.executable, __file__, a.job, "--blocks", str(a.blocks),
                 "--child", json.dumps([threads, asleep])],
                env={**os.environ, **env}, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            probe = ("-" if got["probe"] is None
                     else f"{got['probe']:.3f} ({got['probe_rounds']})")
            print(f"{name:24s} {r + 1:3d} {got['per_sample']:20.2f} {got['batched']:17.2f} "
                  f"{got['per_sample'] / got['batched']:11.3f} {probe:>14s}", flush=True)


if __name__ == "__main__":
    main()
