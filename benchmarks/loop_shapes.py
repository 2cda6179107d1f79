"""Is the step time a capture states the loop's own, in every loop shape people write?

For each loop of tests/loops/shapes.py, wrapped as its user would (README's first snippet:
the model, and the loader where there is one; no ``d.step()``), ``--rounds`` times in one
process: the loop alone (``--blocks`` blocks of ``--steps`` steps, each block's mean step;
their median), a capture (the session's unprofiled median step, from its clock), the loop
alone again, on ``--threads`` torch threads. Prints one row per round: the two plain figures, the capture's, its ratio to
the mean of the two plain figures, the profiled steps and how steps were found. The goal is
a ratio within 15% of 1.00 (a figure the machine's other load moves: rerun when it is busy,
and read the plain figures' own spread beside it).

    python benchmarks/loop_shapes.py [--rounds 3] [--shapes lm,gan,gan-list,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from diagnose.metrics.context import unprofiled_step_ms  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.loops.shapes import (  # noqa: E402
    Job,
    make_accum,
    make_contrastive,
    make_gan,
    make_hf,
    make_lm,
    make_reinforce,
    make_sliced,
)

#: shape name -> (the job, what diagnose() is given, in the words of the table)
SHAPES: dict[str, Any] = {
    "lm": (make_lm, lambda j: (j.model,), "diagnose(model)"),
    "gan": (make_gan, lambda j: (j.model, j.loader), "diagnose(netD, loader)"),
    "gan-list": (make_gan, lambda j: (j.per_step["models"], j.loader),
                 "diagnose([netG, netD], loader)"),
    "sliced": (make_sliced, lambda j: (j.model,), "diagnose(model)"),
    "reinforce": (make_reinforce, lambda j: (j.model,), "diagnose(policy)"),
    "contrastive": (make_contrastive, lambda j: (j.model, j.loader), "diagnose(model, loader)"),
    "hf": (make_hf, lambda j: (j.model, j.loader), "diagnose(model, loader)"),
    "accum": (make_accum, lambda j: (j.model, j.loader), "diagnose(model, loader)"),
}


def plain(job: Job, blocks: int, steps: int) -> float:
    """The loop alone: the median over ``blocks`` of a block's mean step (ms), after one
    block of warm-up."""
    job.loop(None, steps)
    means = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        n = job.loop(None, steps)
        means.append((time.perf_counter() - t0) * 1e3 / max(n, 1))
    return statistics.median(means)


def captured(job: Job, args: tuple[Any, ...], out: str) -> tuple[float | None, int, str]:
    """The session's unprofiled median step (ms), its profiled steps and its step mode."""
    with diagnose(*args, out_dir=out, print_report=False, analyze=False, sample_hz=0) as d:
        job.loop(d, 100_000)
    ctx = load_context(d.run_dir) or {}
    ms = unprofiled_step_ms(ctx)
    whole = (ctx.get("capture") or {}).get("whole_steps") or 0
    return (statistics.median(ms) if ms else None), int(whole), str(d.step_mode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--shapes", default="lm,gan-list,gan,sliced,reinforce,contrastive,hf,accum")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's intra-op threads (1: a busy machine's other load moves "
                         "the figures less)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"# loop shapes: capture's unprofiled step vs the loop alone "
          f"(torch {torch.__version__}, {len(os.sched_getaffinity(0))} CPUs, "
          f"{torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f})")
    print(f"{'shape':12} {'wrapped as':32} {'plain ms':>17} {'capture ms':>10} "
          f"{'ratio':>6} {'prof':>4}  mode")
    with tempfile.TemporaryDirectory(prefix="loop-shapes-") as out:
        for name in a.shapes.split(","):
            make, given, words = SHAPES[name]
            for _ in range(a.rounds):
                job = make()
                before = plain(job, a.blocks, a.steps)
                cap, prof, mode = captured(job, given(job), out)
                after = plain(job, a.blocks, a.steps)
                ref = (before + after) / 2
                ratio = f"{cap / ref:6.2f}" if cap is not None else "   n/a"
                cap_s = f"{cap:10.2f}" if cap is not None else f"{'n/a':>10}"
                print(f"{name:12} {words:32} {before:8.2f} {after:8.2f} {cap_s} {ratio} "
                      f"{prof:4d}  {mode}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
