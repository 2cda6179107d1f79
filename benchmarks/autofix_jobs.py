"""Autofix on the project's own training jobs, several runs each: does it keep what truly
helps, never leave a job slower, and do its kept changes measure what the model predicted?

    python benchmarks/autofix_jobs.py                      # every job (runs: see RUNS)
    python benchmarks/autofix_jobs.py too_many_workers --runs 3

Each run is ``diagnose(model, loader, optimizer=..., loss_fn=...).autofix()`` on a fresh
``make_job()``, as the README shows it (default budget; the fixes the diagnosis names,
tried in predicted order). One row per tried decision: the prediction it
carried, the measured speedup with its 95% interval, kept or not, and for a kept change
whether the measurement is within 15% of the prediction. Then per run the before/after of
everything kept (its own interleaved measurement) against the model's predicted tuned step.
Machine, date and load are in the header.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(JOBS))  # a job imports its siblings as `python job.py` would

from _bench import DECISION_HEAD, DecisionTally, before_after  # noqa: E402
from _run import job_names, make, print_header  # noqa: E402

#: runs per job when --runs is not given: three where the goal is "kept in 3 runs of 3"
#: (fewer workers than a job with more workers than CPUs), one elsewhere
RUNS = {"too_many_workers": 3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", help="job names in benchmarks/jobs (default: all)")
    ap.add_argument("--samples", action="store_true",
                    help="the demo and the CPU samples (benchmarks/sample_jobs) instead")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs per job (default: RUNS, else 1)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep each run's folder (baseline capture, autofix.json) under DIR")
    args = ap.parse_args()
    names = job_names(args.jobs, args.samples)
    from diagnose import diagnose

    print_header("autofix on the project's own jobs: predicted beside measured", "autofix_jobs.py")
    print(DECISION_HEAD)
    print("-" * len(DECISION_HEAD))
    tally = DecisionTally()
    summary: list[str] = []
    for name in names:
        for run in range(1, (args.runs or RUNS.get(name, 1)) + 1):
            job = make(name)
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(args.keep) / f"{name}-{run}" if args.keep else Path(tmp)
                r = diagnose(job["model"], job["loader"], optimizer=job["optimizer"],
                             loss_fn=job["loss_fn"]).autofix(out_dir=out)
            for line in tally.rows(name, run, r):
                print(line)
            summary.append(f"{name:<17} {run:>3}  kept: "
                           f"{r.original.describe_change(r.best) or 'nothing'}; "
                           f"{before_after(r)}")
            summary += [f"{'':<22}{n}" for n in r.notes
                        if n.startswith("the CPUs' capacity, timed again")]
    print()
    for line in summary:
        print(line)
    print()
    for line in tally.totals():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
