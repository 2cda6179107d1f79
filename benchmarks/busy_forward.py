"""Whether the forward alone shows what busy processes cost the forward with its backward:
the ratio (work beside busy processes / the same work alone) timed both ways on each
committed corpus job with a CPU model, interleaved.

    python benchmarks/busy_forward.py [--rounds 6] [JOB ...]

The threads probe times the model's work beside ``left + e`` busy processes (``e`` of
1 and 2, ``left`` the CPUs torch's threads leave). The work there may be the forward
alone (a third of the time) where its ratio is the forward-with-backward's. Per job and
``e``: the median ratio of each, over ``--rounds`` rounds (each: forward alone, work
alone, forward beside, work beside), and forward's over work's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "jobs"))

import torch  # noqa: E402
from _run import print_header  # noqa: E402
from corpus import make, names  # noqa: E402

from diagnose.capture.probes.compute import ForwardTimer, model_work  # noqa: E402
from diagnose.capture.probes.contention import run_busy, spinners, stop  # noqa: E402


def inputs_of(job: dict) -> tuple:
    """The model's first forward's inputs, as the job's own step gives them."""
    model = job["model"]
    timer = ForwardTimer(model, lambda s: None)
    try:
        job["train_step"](next(job["batches"]()))
    finally:
        timer.remove()
    return timer.inputs


def ratios(job: dict, rounds: int) -> dict[int, tuple[float, float]]:
    model, cpus = job["model"], len(os.sched_getaffinity(0))
    n = torch.get_num_threads()
    left = max(0, cpus - n)
    procs = spinners(left + 2)
    got: dict[str, list[float]] = {}
    try:
        with model_work(model, inputs_of(job)) as (forward, work):
            forward(), work()
            for _ in range(rounds):
                for e in (1, 2):
                    run_busy(procs, 0)
                    got.setdefault(f"qf{e}", []).append(forward())
                    got.setdefault(f"qw{e}", []).append(work())
                    run_busy(procs, left + e)
                    got.setdefault(f"bf{e}", []).append(forward())
                    got.setdefault(f"bw{e}", []).append(work())
                run_busy(procs, 0)
    finally:
        stop(procs)
    med = {k: statistics.median(v) for k, v in got.items()}
    return {e: (med[f"bf{e}"] / med[f"qf{e}"], med[f"bw{e}"] / med[f"qw{e}"]) for e in (1, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    print_header("forward alone against forward with backward, beside busy processes",
                 "busy_forward.py")
    print(f"{'job':28s} {'e':>2s} {'forward':>8s} {'work':>8s} {'f/w':>6s}")
    for name in a.jobs or names():
        job = make(name)
        if job.get("loader") is None or next(job["model"].parameters()).device.type != "cpu":
            continue
        for e, (f, w) in ratios(job, a.rounds).items():
            print(f"{name:28s} {e:2d} {f:8.3f} {w:8.3f} {f / w:6.3f}", flush=True)


if __name__ == "__main__":
    main()
