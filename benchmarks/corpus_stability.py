"""Whether the same job predicts the same thing: corpus jobs captured several times in a
row, each capture's first fix and its predicted speedup.

    python benchmarks/corpus_stability.py JOB [JOB ...] [--captures 3] [--keep DIR]
    python benchmarks/corpus_stability.py JOB [JOB ...] --rejudge DIR

For each job, ``--captures`` diagnoses of its own loop one after another (corpus_predict's
``diagnose_job``), nothing timed beside them. Per capture: the leading warning/critical
finding, its first fix, the change, the predicted speedup and its range. Per job: whether
every capture named the same first fix (the same change to the user's code: two findings
may lead with one change, as the report shows it, "the same change as IN001's above"),
whether the same finding led it, and the spread of the predicted speedups (max / min - 1),
which the issue wants within 10%; and whether every capture's printed range held every
capture's point (the issue's other way for inputs too noisy for 10%: a range wide enough
for what the next capture says). ``--keep DIR`` keeps each capture's run
folder as ``DIR/<job>/<n>`` (corpus_rejudge.py and an inspection of why a fix flipped read
them). ``--rejudge DIR`` captures nothing: it analyses such kept folders again with the
code as it is now (a change of rules or model judged on the same captures).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus_predict as cp  # noqa: E402
from _run import first_offered, print_header  # noqa: E402


def first_fix(report: dict[str, Any]) -> tuple[str, str, str, float | None, str]:
    """(rule, fix, change, predicted speedup, range) of the leading warning/critical
    finding with a fix the report offers (none predicted slower); dashes where there is none."""
    for f in report["findings"]:
        fix = first_offered(f) if f["severity"] in ("warning", "critical") else None
        if fix is not None:
            pred = fix.get("predicted")
            if not pred:
                return f["rule"], fix["id"], "-", None, "no prediction"
            change = ", ".join(f"{k}={v}" for k, v in pred["change"].items())
            base = pred["step_ms"] * pred["speedup"]
            lo, hi = pred["range"]
            return f["rule"], fix["id"], change, pred["speedup"], f"{base / hi:.2f}-{base / lo:.2f}x"
    return "-", "-", "-", None, "no warning with a fix offered"


def _span(rng: str) -> tuple[float, float] | tuple[None, None] | None:
    """(low, high) speedups of :func:`first_fix`'s range text ("1.02-1.59x"); (None, None)
    where there is no prediction; None where the text is not a range."""
    if not rng.endswith("x"):
        return None, None
    try:
        lo, hi = (float(v) for v in rng[:-1].split("-"))
    except ValueError:
        return None
    return lo, hi


def _analysed(kept: Path) -> dict[str, Any]:
    """The report JSON of a kept capture (its one run folder) as the code now reads it."""
    from diagnose.api import analyze

    (folder,) = [p for p in kept.iterdir() if p.is_dir()]
    return analyze(folder).to_json()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="+", help="corpus job names")
    ap.add_argument("--captures", type=int, default=3)
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep each capture's run folder as DIR/<job>/<n>")
    ap.add_argument("--rejudge", type=Path, metavar="DIR",
                    help="analyse the run folders kept in DIR/<job>/<n> again; capture nothing")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")  # the jobs' own (e.g. "4 workers on 2 CPUs")
    if args.captures < 2:
        print("corpus_stability.py: --captures must be 2 or more", file=sys.stderr)
        return 2
    print_header("one corpus job's first fix, capture after capture", "corpus_stability.py")
    print(f"{'job':<40} {'#':>2} {'finding':<8} {'first fix':<16} {'change':<36} "
          f"{'predicted':>9}  range")
    summary, held, ranged, covers = [], 0, 0, 0
    for name in args.jobs:
        seen: list[tuple[str, str, str, float | None, str]] = []
        n = args.captures if args.rejudge is None else len(
            [p for p in (args.rejudge / name).iterdir() if p.is_dir()])
        for i in range(1, n + 1):
            if args.rejudge is not None:
                got = first_fix(_analysed(args.rejudge / name / str(i)))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    got = first_fix(cp.diagnose_job(cp.make(name), tmp))
                    if args.keep is not None:
                        shutil.copytree(tmp, args.keep / name / str(i), dirs_exist_ok=True)
            seen.append(got)
            rule, fix, change, sp, rng = got
            said = f"{sp:.2f}x" if sp is not None else "-"
            print(f"{name:<40} {i:>2} {rule:<8} {fix:<16} {change:<36} {said:>9}  {rng}",
                  flush=True)
        same = len({s[2] for s in seen}) == 1
        led = len({s[0] for s in seen}) == 1
        sps = [s[3] for s in seen if s[3] is not None]
        spread = (max(sps) / min(sps) - 1) if len(sps) >= 2 else None
        held += same and (spread is None or spread <= 0.10)
        spans = [_span(s[4]) for s in seen]
        covered = (None if spread is None or None in spans else all(
            lo <= sp <= hi for sp in sps for lo, hi in spans if lo is not None))
        ranged += covered is not None
        covers += covered is True
        summary.append(f"{name:<40} same fix: {'yes' if same else 'no'}"
                       f"{'' if led else ' (led by ' + ', '.join(sorted({s[0] for s in seen})) + ')'}"
                       "; "
                       + (f"{min(sps):.2f}-{max(sps):.2f}x, spread {spread:.0%}"
                          f" ({'within' if spread <= 0.10 else 'beyond'} 10%)"
                          if spread is not None else "-")
                       + ("" if covered is None else
                          f"; points in every range: {'yes' if covered else 'no'}"))
    print()
    print("\n".join(summary))
    print(f"stability: {held} of {len(args.jobs)} jobs the same first fix in every capture, "
          "predicted within 10%")
    print(f"ranges: {covers} of {ranged} jobs had every capture's point in every capture's "
          "range")
    return 0


if __name__ == "__main__":
    sys.exit(main())
