"""Autofix on corpus jobs (default: the validate half): does it keep only changes that
measure inside their printed ranges, and is a job never left slower?

    python benchmarks/corpus_autofix.py                       # validate jobs autofix can run
    python benchmarks/corpus_autofix.py JOB [JOB ...] --budget 120

Autofix runs where a job has a DataLoader, a torch.optim optimizer and a step autofix can
drive (``loss_fn`` or ``step_fn``): ``diagnose(model, loader, optimizer=..., loss_fn=...)``
around the job's own loop, then ``d.autofix(budget_s=...)`` on that diagnosis, as the
README shows it. One row per decision (benchmarks/_bench.py's columns); for a kept change,
whether its measured speedup lies inside the range the diagnosis printed for that change
(where the diagnosis predicted that exact change); then the before/after of everything
kept, measured together.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus_predict as cp  # noqa: E402
from _bench import DECISION_HEAD, DecisionTally, before_after  # noqa: E402
from _run import print_header  # noqa: E402


def drivable(job: dict[str, Any]) -> bool:
    """Whether autofix can run the job's step itself."""
    return (job.get("loader") is not None and job.get("optimizer") is not None
            and (job.get("loss_fn") is not None or job.get("step_fn") is not None))


def printed_ranges(report: Any) -> dict[tuple[str, str], tuple[float, float]]:
    """(fix, change as "k=v, ...") -> the speedups at the ends of its printed range."""
    out = {}
    for f in report.findings:
        for fix, p in (f.predictions or {}).items():
            rng = getattr(p, "range", None)
            if rng and rng[0] > 0 and rng[1] > 0:
                change = ", ".join(f"{k}={v}" for k, v in p.change.items())
                out[(fix, change)] = (p.base_ms / rng[1], p.base_ms / rng[0])
    return out


def as_set(change: str) -> str:
    """A decision's change ("num_workers 0 → 2, ...") as a prediction's ("num_workers=2")."""
    return ", ".join(f"{k}={b}" for k, _a, b in re.findall(r"(\w+) (\S+) → ([^,]+)", change))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", help="corpus job names (default: the half's)")
    ap.add_argument("--half", choices=("tune", "validate"), default="validate")
    ap.add_argument("--budget", type=float, default=120.0, help="autofix's budget (s)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    corpus = cp.load_corpus()
    names = args.jobs or corpus.split()[args.half]
    from diagnose import diagnose

    print_header("autofix on corpus jobs: kept changes against their printed ranges",
                 "corpus_autofix.py")
    print(DECISION_HEAD + "  in range")
    print("-" * (len(DECISION_HEAD) + 10))
    tally, inside, kept, summary = DecisionTally(), 0, 0, []
    for name in names:
        job = cp.make(name)
        if not drivable(job):
            summary.append(f"{name:<40} not run: autofix needs a DataLoader, an optimizer and "
                           "loss_fn or step_fn")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            d = diagnose(job["model"], job["loader"], optimizer=job["optimizer"],
                         loss_fn=job.get("loss_fn"), step_fn=job.get("step_fn"),
                         out_dir=tmp, print_report=False)
            batches = job["batches"]()
            with d:
                for batch in batches:
                    job["train_step"](batch)
                    if d.done:
                        break
            getattr(batches, "close", lambda: None)()
            ranges = printed_ranges(d.report)
            r = d.autofix(out_dir=Path(tmp) / "autofix", budget_s=args.budget)
        rows = tally.rows(name[:17], 1, r)
        for line, dec in zip(rows, [x for x in r.decisions if x.speedup is not None
                                    or x.predicted_speedup is not None], strict=False):
            mark = ""
            if dec.status == "kept" and dec.speedup is not None:
                rng = ranges.get((dec.fix, as_set(dec.change)))
                kept += 1
                if rng is not None:
                    ok = rng[0] <= dec.speedup.ratio <= rng[1]
                    inside += ok
                    mark = f"  {'yes' if ok else 'no'} [{rng[0]:.2f}, {rng[1]:.2f}]"
                else:
                    mark = "  - (not the change the diagnosis printed)"
            print(line + mark)
        summary.append(f"{name:<40} kept: {r.original.describe_change(r.best) or 'nothing'}; "
                       f"{before_after(r)}")
        summary += [f"{'':<40} {d.fix} skipped: {d.reason}" for d in r.decisions
                    if d.status == "skipped" and "budget" in d.reason]
    print()
    print("\n".join(summary))
    print()
    for line in tally.totals():
        print(line)
    print(f"{inside} of {kept} kept changes measured inside the range the diagnosis printed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
