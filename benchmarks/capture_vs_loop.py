"""Does a capture's step time agree with the job's own loop, timed just before and after it?

For a workload, in one process, ``--rounds`` times: the loop alone (6 blocks of 10 steps,
one synchronize a block, as predict_vs_measured times a job), a diagnosis (its unprofiled
median and mean step, and the clock's steps and collate column), the loop again. Where a
capture's figure falls outside the loops around it, the clock is suspect; where the loops
themselves move as much, the host's pace is. With --gpu, benchmarks/autofix_gpu.py's
workloads on the GPU; else a job of benchmarks/jobs.

    python benchmarks/capture_vs_loop.py [--gpu] [--rounds 3] JOB
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import predict_vs_measured as pvm  # noqa: E402
from _run import make, print_header  # noqa: E402


def _smi() -> str:
    """The GPU's clocks, power and temperature now (nvidia-smi), or '' without one."""
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _loop(job: dict, blocks: int = 6, steps: int = 10) -> list[float]:
    return pvm._time(job, [pvm._arm(job, {})], blocks, steps)[0]


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.1f}" for x in xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    build = pvm._gpu_job if args.gpu else make
    print_header("a capture's step time against the loop around it", "capture_vs_loop.py")
    for r in range(args.rounds):
        job = build(args.job)
        gpu = _smi()
        print(f"round {r}{f' (GPU: {gpu})' if gpu else ''}")
        print(f"  loop before (ms a step, blocks of 10): {_fmt(_loop(job))}")
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            rep = pvm._diagnose(job, tmp)
            took = time.perf_counter() - t0
            clock = json.loads(Path(glob.glob(f"{tmp}/*/context.json")[0]).read_text())[
                "capture"]["step_clock"]
        m = rep.get("metrics", {})
        print(f"  capture ({took:.1f} s): unprofiled median "
              f"{m.get('step_time_unprofiled_median_ms')} ms, mean "
              f"{m.get('step_time_unprofiled_mean_ms')} ms over "
              f"{m.get('step_time_unprofiled_steps')} steps")
        for col in ("ms", "collate_ms"):
            vals = [x for x in clock.get(col) or [] if isinstance(x, (int, float))]
            if vals:
                print(f"  clock {col:>10}: {_fmt(vals)}")
        print(f"  loop after:  {_fmt(_loop(job))}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
