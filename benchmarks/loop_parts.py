"""Where a job's step goes for each split of workers and torch's threads, timed in the loop.

For each ``workers,threads`` split the job's own loop runs (no profiler, no diagnosis):
each step's wait for its batch (``next()``: the fetch in process, or receiving it from a
worker) and its compute (forward, backward, optimizer), and, inside the loader (in the
worker where there are workers), the batch's own making: its items and the collate. Beside
them, what the session times after a loop: a worker's batch (``time_worker_batches``) and
the forward and backward on torch's threads and on one (``time_threads``). The step
model's inputs can then be set against what the loop does with them: how much one thread
costs the loop's compute, how much busy workers slow the main thread's compute and the
workers' own batches.

    python benchmarks/loop_parts.py [--splits 0,2 0,1 2,1 1,1] [--steps 160] [JOB]
    python benchmarks/loop_parts.py --corpus wordpiece_reviews_classifier --splits 0,2 2,2

JOB: a module of benchmarks/jobs (default augment_cnn) with ``make_job()`` returning the
model, loader, optimizer and loss; with ``--corpus``, a corpus job (benchmarks/corpus), its
own ``train_step`` on each batch. The workers' CPUs: their processes' CPU time over the
timed steps' wall time (what the host samples read as the workers' use).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.utils.data import DataLoader, Dataset

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "jobs"))

from _run import make, print_header  # noqa: E402

from diagnose.capture.probes import time_threads, time_worker_batches  # noqa: E402


class _Timed(Dataset):
    """The job's dataset and collate, one batch per item: each item is a batch and the
    time making it took where it was made (in a worker, or in process)."""

    def __init__(self, ds: Any, collate: Any) -> None:
        self.ds, self.collate = ds, collate

    def __len__(self) -> int:
        return len(self.ds)

    def __getitems__(self, idx: list[int]) -> list[Any]:
        t0 = time.perf_counter()
        out = self.collate([self.ds[i] for i in idx])
        return [(out, time.perf_counter() - t0)]


def _first(items: list[Any]) -> Any:
    return items[0]


def _children_cpu_s(me: Any) -> float:
    """The CPU time (s) of this process's children, its DataLoader's workers: those alive
    and those gone (an epoch's end stops them; the kernel keeps the time of the reaped)."""
    gone = resource.getrusage(resource.RUSAGE_CHILDREN)
    return gone.ru_utime + gone.ru_stime + sum(sum(c.cpu_times()[:2]) for c in me.children())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job", nargs="?", default="augment_cnn")
    ap.add_argument("--splits", nargs="*", default=["0,2", "0,1", "2,1", "1,1", "2,2"],
                    help="workers,threads pairs")
    ap.add_argument("--steps", type=int, default=160)
    ap.add_argument("--corpus", action="store_true", help="JOB is a corpus job")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    print_header("where the step goes, timed in the loop", "loop_parts.py")
    if args.corpus:
        sys.path.insert(0, str(HERE))
        import corpus

        job = corpus.make(args.job)
        step_fn = job["train_step"]
    else:
        job = make(args.job)
    loader, model, opt, loss_fn = job["loader"], job["model"], job["optimizer"], job["loss_fn"]
    if not args.corpus:
        def step_fn(batch: Any) -> None:
            x, y = batch
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
    me = psutil.Process()
    cpus = len(os.sched_getaffinity(0))
    threads_now = torch.get_num_threads()
    made = time_worker_batches(loader, cpus)
    first = next(iter(DataLoader(loader.dataset, batch_size=loader.batch_size,
                                 collate_fn=loader.collate_fn)))
    fwd = (time_threads(model, ((first[0],), {})) if threads_now > 1 and not args.corpus
           else None)
    print(f"\n{args.job}, timed as a session times them (here before the loops): a "
          f"worker's batch {made[0]:.2f} ms" if made else
          f"\n{args.job}: a worker's batch not timed", end="")
    if fwd:
        print(f"; forward and backward {fwd['work_ms']:.2f} ms on {threads_now} threads, "
              f"{fwd['work_1thread_ms']:.2f} on one ({fwd['work_1thread_ms'] / fwd['work_ms']:.2f}x)")
    else:
        print()
    print(f"{'workers':>7} {'threads':>7} {'step':>7} {'wait':>7} {'compute':>8} "
          f"{'batch made':>10} {'made/timed':>10} {'workers CPUs':>12}")
    warm = 20
    try:
        for split in args.splits:
            k, t = (int(x) for x in split.split(","))
            torch.set_num_threads(t)
            dl = DataLoader(_Timed(loader.dataset, loader.collate_fn),
                            batch_size=loader.batch_size, shuffle=True, num_workers=k,
                            collate_fn=_first)
            it = iter(dl)
            steps, waits, comp, inside = [], [], [], []
            cpu0 = wall0 = 0.0
            for s in range(warm + args.steps):
                if s == warm:
                    cpu0, wall0 = _children_cpu_s(me), time.perf_counter()
                t0 = time.perf_counter()
                try:
                    batch, took = next(it)
                except StopIteration:
                    it = iter(dl)
                    batch, took = next(it)
                t1 = time.perf_counter()
                step_fn(batch)
                t2 = time.perf_counter()
                if s >= warm:
                    steps.append(t2 - t0)
                    waits.append(t1 - t0)
                    comp.append(t2 - t1)
                    inside.append(took)
            workers_cpus = (_children_cpu_s(me) - cpu0) / (time.perf_counter() - wall0)
            del it
            mean = statistics.mean
            batch = mean(inside) * 1e3
            ratio = f"{batch / made[0]:>10.2f}" if made else f"{'-':>10}"
            print(f"{k:>7} {t:>7} {mean(steps) * 1e3:>7.2f} {mean(waits) * 1e3:>7.2f} "
                  f"{mean(comp) * 1e3:>8.2f} {batch:>10.2f} {ratio} {workers_cpus:>12.2f}")
    finally:
        torch.set_num_threads(threads_now)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
