"""An epoch's start and end with k DataLoader workers: timed, beside what the step model says.

A loader whose workers are not persistent forks them at every ``iter()``, and the loop
waits for the first batch; at the epoch's end it shuts them down and joins them. The
step model (``diagnose.stepmodel.epochs.epoch_start_ms``) predicts both from what a session
times after its loop: one worker's start, of it the fork, its shut-down, and a batch.
Here the same session timings (``time_worker_handover``, a batch made in process) are
made on a workload's loader, then real loaders with k workers are timed over whole
epochs: ``iter()`` and the first batch (start), the ``next()`` that ends the epoch (end),
and the whole epoch (loading alone, no training step). ``model`` is the model's start +
end; ``bound`` the one-after-another bound it used where the fork was not timed.

    python benchmarks/epoch_start.py [--workers 2,4,6] [--reps 2] [WORKLOAD ...]

Workloads are benchmarks/autofix_gpu.py's (slow_loader, input, pageable_copy, ...); on a
CPU the model's tensors stay on the CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from autofix_gpu import build  # noqa: E402

from diagnose.capture.probes import time_worker_handover  # noqa: E402
from diagnose.stepmodel.epochs import epoch_start_ms  # noqa: E402
from diagnose.stepmodel.facts import Facts  # noqa: E402


def _epoch(ds, bs: int, k: int) -> tuple[float, float, float]:
    """(start, end, whole epoch) in ms for one epoch of a k-worker loader."""
    dl = DataLoader(ds, batch_size=bs, num_workers=k, shuffle=True)
    t0 = time.perf_counter()
    it = iter(dl)
    next(it)
    t1 = time.perf_counter()
    t2 = t1
    for _ in range(len(dl) - 1):
        next(it)
        t2 = time.perf_counter()
    for _ in it:  # the next() that ends the epoch: the workers are shut down and joined
        pass
    t3 = time.perf_counter()
    return (t1 - t0) * 1e3, (t3 - t2) * 1e3, (t3 - t0) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", default=["slow_loader"])
    ap.add_argument("--workers", default="2,4,6")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cpus = len(os.sched_getaffinity(0))
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU only"
    print(f"# epoch_start on {cpus} CPUs, {name}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for w in args.workloads:
        _, _, loader = build(w, dev)
        ds, bs = loader.dataset, loader.batch_size
        first = next(iter(DataLoader(ds, batch_size=bs)))
        timed = [time_worker_handover(first) for _ in range(3)]
        hand, one, fork, stop = (statistics.median(t[i] for t in timed if t) for i in range(4))
        made = []
        for _ in range(3):
            t0 = time.perf_counter()
            next(iter(DataLoader(ds, batch_size=bs, shuffle=True)))
            made.append((time.perf_counter() - t0) * 1e3)
        batch = statistics.median(made)
        facts = Facts(cpu_count=cpus, input_worker_start_ms=one, input_worker_handover_ms=hand,
                      input_worker_batch_ms=batch, dataloader_epoch_batches=len(loader))
        timed_facts = facts.replace(input_worker_fork_ms=fork, input_worker_stop_ms=stop)
        print(f"\n## {w}: {len(loader)} batches an epoch; one worker's start {one:.1f} ms "
              f"(fork {fork:.1f}, hand-over {hand:.2f}), its end {stop:.1f} ms; a batch "
              f"{batch:.1f} ms")
        print(f"{'workers':>7} {'start':>8} {'end':>7} {'timed':>8} {'model':>8} "
              f"{'model/timed':>11} {'bound':>8} {'epoch':>8}")
        for k in (int(x) for x in args.workers.split(",")):
            runs = [_epoch(ds, bs, k) for _ in range(args.reps)]
            start, end, whole = (statistics.median(r[i] for r in runs) for i in range(3))
            model = (epoch_start_ms(timed_facts, {"num_workers": k}) or 0.0) * len(loader)
            bound = (epoch_start_ms(facts, {"num_workers": k}) or 0.0) * len(loader)
            print(f"{k:>7} {start:>8.1f} {end:>7.1f} {start + end:>8.1f} {model:>8.1f} "
                  f"{model / (start + end):>11.2f} {bound:>8.1f} {whole:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
