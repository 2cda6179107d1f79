"""Given changes timed on corpus jobs whatever their diagnosis found, each beside its
prediction: a grid of measured rows, and kept captures, for corpus_rejudge.py to judge a
change of the model on without timing anything again.

    python benchmarks/corpus_grid.py --half tune --keep /tmp/grid \\
        --change num_workers=0 --change num_workers=1,intra_op_threads=1 > grid.txt
    python benchmarks/corpus_rejudge.py grid.txt /tmp/grid

corpus_predict.py times the fixes a diagnosis offers; a finding graded ``info`` on one
capture and ``warning`` on the next leaves its rows out of one run. Here each job is
diagnosed once (kept with ``--keep``), then every ``--change`` that applies to it (a loader
setting needs a DataLoader; a change equal to the job's own settings is skipped) is timed
against the job as it is, all arms in interleaved blocks in one process, as
corpus_predict.py times them. Each row's prediction is the step model's for exactly that
change, through the fix that sets its fields (the rejudge's ``predict``).
The rows' finding column is ``-``: a grid row answers no finding. The table has
corpus_predict.py's columns, so corpus_rejudge.py and corpus_plot.py read it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus_predict as cp  # noqa: E402  (sets up the rest of the path)
import corpus_rejudge as cr  # noqa: E402
import predict_vs_measured as pvm  # noqa: E402
from jobs._run import print_header  # noqa: E402


def parse_change(text: str) -> dict[str, Any]:
    """``k=v,k=v`` as a change (ints, floats and True/False read as such)."""
    out: dict[str, Any] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"{text!r}: expected key=value[,key=value]")
        out[k.strip()] = cr._value(v.strip())
    return out


def fix_for(change: dict[str, Any]) -> str | None:
    """The fix whose unit predicts ``change``: the first that sets exactly its fields
    (``Fix.fields``), else the first that sets them among others."""
    from diagnose.fixes import FIXES

    keys = set(change)
    units = [(set(u.fields), u.id) for u in FIXES.values() if u.fields]
    exact = next((fix for fields, fix in units if keys == fields), None)
    return exact or next((fix for fields, fix in units if keys <= fields), None)


def _applies(job: dict[str, Any], change: dict[str, Any]) -> str | None:
    """Why ``change`` is not timed on ``job``; None where it is."""
    if job["loader"] is None and set(change) & cp.LOADER_FIELDS:
        return "no DataLoader"
    from diagnose.fixes import TrainConfig

    base = TrainConfig.from_objects(job["loader"], job["optimizer"])
    same = all(getattr(base, k, object()) == v for k, v in change.items())
    return "the job's own settings" if same else None


def grid_job(name: str, changes: list[dict[str, Any]], args: argparse.Namespace) -> None:
    label = cp.load_corpora().where[name]
    folder = args.keep / name
    report = cp.diagnose_job(cp.make(name), str(folder))
    (folder / "report.json").write_text(json.dumps(report))
    made = cr.analysed(cr.capture_of(args.keep, name))
    job = cp.make(name)
    todo = []
    for change in changes:
        ch = ", ".join(f"{k}={v}" for k, v in change.items())
        fix = fix_for(change)
        why = _applies(job, change) or (None if fix else "no fix sets these fields")
        if why:
            print(f"{name:<40} {'-':<8} {fix or '-':<14} {ch:<36} not timed: {why}  {label}")
            continue
        try:  # a change the job's loader cannot take (batched_fetch on a custom Dataset)
            arm = cp.make_arm(job, change)
        except Exception as e:  # noqa: BLE001 - the change's failure is a line
            first = (str(e).splitlines() or [""])[0][:100]
            print(f"{name:<40} {'-':<8} {fix:<14} {ch:<36} not timed: {first}  {label}")
            continue
        todo.append((change, ch, fix, cr.predict(made, "-", fix, change), arm))
    if not todo:
        return
    arms = [cp.make_arm(job, {})] + [t[-1] for t in todo]
    times = cp.time_arms(job, arms, args.rounds, args.steps)
    for (_, ch, fix, pred, _), after in zip(todo, times[1:], strict=True):
        sp, lo, hi = pvm._ratio_ci(times[0], after)
        if isinstance(pred, str):
            said, err, inside = "-", "     -", "-"
        else:
            said = f"{pred['speedup']:.2f}x [{pred['lo']:.2f}, {pred['hi']:.2f}]"
            err = f"{sp / pred['speedup']:6.2f}"
            inside = "yes" if pred["lo"] <= sp <= pred["hi"] else "no"
        ms = f"({statistics.fmean(times[0]):.1f} -> {statistics.fmean(after):.1f} ms)"
        print(f"{name:<40} {'-':<8} {fix:<14} {ch:<36} {said:>21} "
              f"{f'{sp:.2f}x [{lo:.2f}, {hi:.2f}]':>21} {err}  {inside}  {ms:<24} {label}")
        if isinstance(pred, str):
            print(f"#   {name} {ch}: no prediction: {pred[:100]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", help="corpus job names (default: every job in the half)")
    ap.add_argument("--half", choices=("tune", "validate", "all"), default="tune")
    ap.add_argument("--change", action="append", required=True, metavar="K=V[,K=V]",
                    help="a change to time on every job it applies to (repeatable)")
    ap.add_argument("--keep", type=Path, required=True, metavar="DIR",
                    help="where each job's capture is kept (DIR/<job>), for the rejudge")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    try:
        changes = [parse_change(c) for c in args.change]
    except ValueError as e:
        ap.error(str(e))
    corpora = cp.load_corpus()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    unknown = set(args.jobs) - set(corpora.names())
    if unknown:
        ap.error(f"not in the corpus: {', '.join(sorted(unknown))}")
    halves = corpora.split(args.jobs or None)
    print_header("given changes timed on corpus jobs, each beside its prediction",
                 "corpus_grid.py")
    print()
    for half in ("tune", "validate"):
        if args.half not in ("all", half) or not halves[half]:
            continue
        print(f"## {half} half ({len(halves[half])} jobs)")
        print(cp.HEAD)
        print("-" * len(cp.HEAD))
        for name in halves[half]:
            try:
                grid_job(name, changes, args)
            except Exception as e:  # noqa: BLE001 - one job's failure is a line
                first = (str(e).splitlines() or [""])[0][:120]
                print(f"{name:<40} failed: {type(e).__name__}: {first}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
