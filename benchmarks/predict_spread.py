"""How far one job's predictions move from one capture to the next.

    python benchmarks/predict_spread.py                        # every job, 5 captures each
    python benchmarks/predict_spread.py too_many_workers --captures 8

A prediction is made from one capture: a few seconds of the job's steps and the session's
timings after them. On a shared host those move with the moment (the pace drifts over
seconds; busy workers come in spells), and so does the prediction. The spread here is the
part of a prediction's error that no model of the step can remove: the same job, captured
again and again, predicted again and again. Nothing is timed beside the captures.

For each job (``make_job()`` in benchmarks/jobs/<name>.py): ``--captures`` diagnoses of
its plain loop one after another, each one's unprofiled step, the steps its clock timed
after the window, what one thread cost the model's ops, and its predicted speedup for 1
and 2 workers beside one thread (the split the jobs' findings advise). Then per job and
config: the mean and standard deviation of the predicted speedups, and the standard
deviation as a share of the mean.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "jobs"))  # a job imports its siblings as `python job.py` would

from _run import job_names, make, print_header  # noqa: E402
from predict_vs_measured import _diagnose  # noqa: E402

CONFIGS = ({"num_workers": 1, "intra_op_threads": 1}, {"num_workers": 2, "intra_op_threads": 1})


def _capture(name: str) -> dict[str, Any]:
    """One diagnosis of job ``name``: its facts and its predictions for :data:`CONFIGS`."""
    import diagnose
    from diagnose.fixes import FIXES
    from diagnose.runfolder import load_context

    job = make(name)
    with tempfile.TemporaryDirectory() as tmp:
        report = _diagnose(job, tmp)
        run_dir = report.get("run_dir") or str(next(Path(tmp).glob("*/context.json")).parent)
        clock = (load_context(run_dir) or {})["capture"]["step_clock"]
        result = diagnose.analyze(run_dir)
        predictor = getattr(result, "analysis", result).predictor
        if isinstance(predictor, str):
            return {"why": predictor}
        preds = []
        for c in CONFIGS:
            p = predictor.predict_change(FIXES["threads"].transform, c)
            preds.append(None if isinstance(p, str) else p.speedup)
        facts = predictor.facts
        return {"base": predictor.base_ms, "after": clock["phase"].count("after"),
                "r1": facts.threads_one_thread_ratio, "preds": preds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", help="job names in benchmarks/jobs (default: all)")
    ap.add_argument("--captures", type=int, default=5)
    args = ap.parse_args()
    if args.captures < 2:
        print("predict_spread.py: --captures must be 2 or more", file=sys.stderr)
        return 2
    print_header("one job's predictions, capture after capture", "predict_spread.py")
    print(f"{'job':<17} {'capture':>7} {'step ms':>8} {'clocked':>8} {'1 thread':>9} "
          f"{'1w1t':>7} {'2w1t':>7}")
    summary = []
    for name in job_names(args.jobs):
        got: list[list[float]] = [[] for _ in CONFIGS]
        for i in range(1, args.captures + 1):
            c = _capture(name)
            if "why" in c:
                print(f"{name:<17} {i:>7}  no prediction: {c['why']}")
                continue
            r1 = f"{c['r1']:.2f}x" if isinstance(c["r1"], float) else "-"
            cells = []
            for k, p in enumerate(c["preds"]):
                cells.append(f"{p:6.2f}x" if p is not None else f"{'-':>7}")
                if p is not None:
                    got[k].append(p)
            print(f"{name:<17} {i:>7} {c['base']:8.2f} {c['after']:>8} {r1:>9} "
                  + " ".join(cells), flush=True)
        for cfg, v in zip(("1w1t", "2w1t"), got, strict=True):
            if len(v) >= 2:
                mean, sd = statistics.fmean(v), statistics.stdev(v)
                summary.append(f"{name:<17} {cfg}  predicted {min(v):.2f}-{max(v):.2f}x, "
                               f"mean {mean:.2f}x, sd {sd:.3f} ({sd / mean:.1%} of the mean)")
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
