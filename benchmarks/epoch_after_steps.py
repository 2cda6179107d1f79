"""The steps just after an epoch's start, with the workers restarted and kept alive: what
persistent_workers' prediction counts beyond the step that held the start.

    python benchmarks/epoch_after_steps.py JOB [JOB ...] [--captures 2]

Each corpus job is diagnosed (its own loop, corpus_predict's ``diagnose_job``) as it is and
with ``persistent_workers=True``, ``--captures`` times each, in turn. From each capture's
step clock (every step, profiled ones too: this reads positions, not the job's pace), by
the step's position after an epoch's start (every ``len(loader)`` steps, the loop starting
at step 0): the step that held the start and the next ``--after`` steps, each less the
median of all steps, median over the epochs. Restarting workers, the steps after the start
run slower where the new processes start up and the training process pays copy-on-write
faults after the fork; kept alive, they should not. The session's own
``dataloader_epoch_after_ms`` of the restarting capture is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus_predict as cp  # noqa: E402
from _corpus import make  # noqa: E402
from _run import print_header  # noqa: E402


def _forever(loader):
    while True:
        yield from loader


def capture(name: str, persistent: bool) -> tuple[int, list[float], float | None]:
    """(batches an epoch, the clock's step times, dataloader_epoch_after_ms) of one capture."""
    job = make(name)
    if persistent:
        arm = cp.make_arm(job, {"persistent_workers": True})
        job["loader"] = arm.loader
        job["batches"] = lambda: _forever(arm.loader)
    with tempfile.TemporaryDirectory() as out:
        report = cp.diagnose_job(job, out)
        ctx = json.loads(next(Path(out).glob("*/context.json")).read_text())
    after = report.get("metrics", {}).get("dataloader_epoch_after_ms")
    ms = [float(x) for x in ctx["capture"]["step_clock"]["ms"]]
    return len(job["loader"]), ms, after


def by_position(n: int, ms: list[float], after: int) -> list[float | None]:
    """Each position 0..after after an epoch's start: its steps less the median step,
    median over the epochs (the run's first start, step 0, left out)."""
    mid = statistics.median(ms)
    out: list[float | None] = []
    for j in range(after + 1):
        got = [ms[i + j] - mid for i in range(n, len(ms) - j, n)]
        out.append(round(statistics.median(got), 1) if got else None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="+")
    ap.add_argument("--captures", type=int, default=2)
    ap.add_argument("--after", type=int, default=3, help="steps after the start to show")
    args = ap.parse_args()
    print_header("the steps after an epoch's start, workers restarted and kept alive",
                 "epoch_after_steps.py")
    cols = " ".join(f"{'+' + str(j):>7}" for j in range(1, args.after + 1))
    print(f"{'job':<28}{'workers':<12}{'epoch':>6}{'median':>8}{'start':>8} {cols}"
          f"{'after_ms':>10}")
    for name in args.jobs:
        for _ in range(args.captures):
            for persistent in (False, True):
                n, ms, after = capture(name, persistent)
                pos = by_position(n, ms, args.after)
                text = " ".join(f"{'-' if v is None else v:>7}" for v in pos[1:])
                start = "-" if pos[0] is None else f"{pos[0]:.1f}"
                told = "-" if after is None else f"{after:.1f}"
                print(f"{name:<28}{'kept alive' if persistent else 'restarted':<12}{n:>6}"
                      f"{statistics.median(ms):>8.1f}{start:>8} {text}{told:>10}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
