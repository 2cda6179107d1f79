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

from _run import job_names, make, print_header  # noqa: E402

#: runs per job when --runs is not given: three where the goal is "kept in 3 runs of 3"
#: (fewer workers than a job with more workers than CPUs), one elsewhere
RUNS = {"too_many_workers": 3}


def _fmt(x: float | None, spec: str = ".2f", unit: str = "x") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


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
    head = (f"{'job':<17} {'run':>3} {'fix':<15} {'change':<34} {'predicted':>9} "
            f"{'measured [95% CI]':>22}  {'decision':<9} meas/pred")
    print(head)
    print("-" * len(head))
    kept_rows = kept_within = tried = tried_pred = 0
    summary: list[str] = []
    for name in names:
        for run in range(1, (args.runs or RUNS.get(name, 1)) + 1):
            job = make(name)
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(args.keep) / f"{name}-{run}" if args.keep else Path(tmp)
                r = diagnose(job["model"], job["loader"], optimizer=job["optimizer"],
                             loss_fn=job["loss_fn"]).autofix(out_dir=out)
            for d in r.decisions:
                if d.speedup is None and d.predicted_speedup is None:
                    continue
                s = d.speedup
                if s is not None and d.fix != "confirmation":  # a fix's trial ran
                    tried += 1
                    tried_pred += d.predicted_speedup is not None
                meas = "-" if s is None else f"{s.ratio:.2f}x [{s.lo:.2f}, {s.hi:.2f}]"
                err = ""
                if d.status == "kept" and s is not None and d.predicted_speedup:
                    e = s.ratio / d.predicted_speedup
                    kept_rows += 1
                    kept_within += 0.85 <= e <= 1.15
                    err = f"{e:.2f} {'within 15%' if 0.85 <= e <= 1.15 else 'OFF'}"
                print(f"{name:<17} {run:>3} {d.fix:<15} {d.change[:34]:<34} "
                      f"{_fmt(d.predicted_speedup):>9} {meas:>22}  {d.status:<9} {err}")
            f = r.final
            iv = None if f is None else f.interval
            before_after = ("nothing kept" if f is None else
                            f"{f.base_ms:.2f} -> {f.cand_ms:.2f} ms measured "
                            f"({iv.ratio:.2f}x [{iv.lo:.2f}, {iv.hi:.2f}])"
                            if iv is not None and f.base_ms and f.cand_ms else "no measurement")
            pred = (f", predicted {r.predicted_tuned_ms:.2f} ms"
                    if r.predicted_tuned_ms is not None else "")
            slower = iv is not None and iv.hi < 1.0
            summary.append(f"{name:<17} {run:>3}  kept: "
                           f"{r.original.describe_change(r.best) or 'nothing'}; "
                           f"{before_after}{pred}{'  LEFT SLOWER' if slower else ''}")
    print()
    for line in summary:
        print(line)
    print()
    print(f"{tried_pred} of {tried} tried decisions carried a prediction")
    print(f"{kept_within} of {kept_rows} kept changes measured within 15% of their prediction")
    return 0


if __name__ == "__main__":
    sys.exit(main())
