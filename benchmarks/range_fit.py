"""The width of the predictions' ranges, read off the corpus' tune half as the code predicts
it now: the model's own error on a change (``EFFECT_FLOOR`` and ``EFFECT_ERROR`` in
diagnose/stepmodel/calibration.py), and its error on the ratio of two changes of one job
(whether a capture can order two fixes: benchmarks/NOTES.md).

    python benchmarks/corpus_rejudge.py --newest benchmarks/results/corpus_grid.txt \\
        benchmarks/captures/cpu_tune > tune.txt
    python benchmarks/range_fit.py tune.txt

The input is corpus_rejudge.py's output (of a results file holding several runs, the
newest): each tune row's prediction made again by this code from its kept capture, the
model's ends and the inputs' noise its range was made of, and the speedup that change
measured (validate rows are skipped: they check the width, they do not set it). A range is
widened on each side, in log, by the model's error ``floor + share x |ln p|``, then by
the inputs' noise as a factor, as the Predictor does.
For each kind of change (``cpu``: it moves CPU work between torch's
threads and processes; ``other``), the pair (floor, share) on a lattice that holds the
measured speedup in at least ``--cover`` of the kind's rows with the least median
half-width is printed, with the coverage and half-width it gives. A kind with fewer than
``--least`` rows is not fitted (the calibration keeps its values, and says where they came
from).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "jobs"))

from _run import print_header  # noqa: E402
from corpus_rejudge import newest_run  # noqa: E402

from diagnose.stepmodel.calibration import EFFECT_ERROR, EFFECT_FLOOR  # noqa: E402
from diagnose.stepmodel.prediction import widened as widen  # noqa: E402

#: the fields whose change moves CPU work: the transforms' ``moves_cpu``, and the workers'
#: start-up a persistent_workers saving takes off (CPU work beside the training where the
#: workers share the CPUs with torch's threads, as on every corpus job)
CPU_FIELDS = ("num_workers", "intra_op_threads", "persistent_workers")
#: a corpus_rejudge.py row: half, job, finding, fix, change, was, now [range], measured
ROW = re.compile(r"^(?P<half>tune|validate)\s+(?P<job>\S+)\s+(?P<rule>[A-Z]{2}\d{3}|-)\s+"
                 r"(?P<fix>\S+)\s+(?P<change>\S.*?)\s+\d+\.\d+x\s+(?P<p>\d+\.\d+)x "
                 r"\[\d+\.\d+, \d+\.\d+\]\s+(?P<m>\d+\.\d+)x \[.*model "
                 r"\[(?P<mlo>\d+\.\d+), (?P<mhi>\d+\.\d+)\] noise (?P<noise>\d+\.\d+)")
FLOORS = [k / 100 for k in range(31)]
SHARES = [k / 20 for k in range(21)]


def rows(paths: list[Path]) -> list[dict[str, object]]:
    """The tune rows of corpus_rejudge outputs (of a results file holding several runs, the
    newest), each with the model's ends and the inputs' noise its range was made of."""
    out: list[dict[str, object]] = []
    for path in paths:
        for line in newest_run(path.read_text()).splitlines():
            got = ROW.match(line)
            if not got or got["half"] != "tune":
                continue
            kind = "cpu" if any(f + "=" in got["change"] for f in CPU_FIELDS) else "other"
            out.append({"job": got["job"], "fix": got["fix"], "change": got["change"],
                        "kind": kind, "p": float(got["p"]), "lo": float(got["mlo"]),
                        "hi": float(got["mhi"]), "noise": float(got["noise"]),
                        "m": float(got["m"])})
    return out


def widened(row: dict[str, object], floor: float, share: float) -> tuple[float, float]:
    """The row's range with the model's error (floor, share) and the inputs' noise put on
    the model's ends, as the Predictor makes it."""
    p, lo, hi, noise = (float(row[k]) for k in ("p", "lo", "hi", "noise"))  # type: ignore[arg-type]
    # the ends are speedups (base / step): as steps over the base, the fast end is the low
    short, long_ = widen(1 / hi, 1 / lo, floor + share * abs(math.log(p)), noise)
    return 1 / long_, 1 / short


def judged(got: list[dict[str, object]], floor: float, share: float) -> tuple[int, float]:
    """(rows whose measured speedup lies inside, the median half-width over the point)."""
    inside, halves = 0, []
    for r in got:
        lo, hi = widened(r, floor, share)
        inside += lo <= float(r["m"]) <= hi  # type: ignore[arg-type]
        halves.append((hi - lo) / 2 / float(r["p"]))  # type: ignore[arg-type]
    return inside, statistics.median(halves)


def fit(got: list[dict[str, object]], cover: float) -> tuple[float, float, int, float]:
    """The (floor, share) of the lattice holding ``cover`` of ``got`` with the least median
    half-width (ties: the smaller floor, then share); with its coverage and half-width.
    Rows needed: split conformal's rank, ``ceil((n + 1) x cover)`` of n: a width that holds
    exactly ``cover`` of the rows it was fitted on holds less of rows it was not (on 45
    rows at 0.9: 42, not 41)."""
    need = min(math.ceil(cover * (len(got) + 1)), len(got))
    best: tuple[float, float, float, int] | None = None
    for floor in FLOORS:
        for share in SHARES:
            inside, half = judged(got, floor, share)
            if inside >= need and (best is None or (half, floor, share) < best[:3]):
                best = (half, floor, share, inside)
    if best is None:  # nothing on the lattice holds them: its widest corner
        inside, half = judged(got, FLOORS[-1], SHARES[-1])
        return FLOORS[-1], SHARES[-1], inside, half
    return best[1], best[2], best[3], best[0]


def pair_errors(got: list[dict[str, object]]) -> tuple[list[float], int, int]:
    """The model's error on the ratio of two changes' predictions from one capture: for each
    pair of rows of one job, |ln(measured ratio) - ln(predicted ratio)|, sorted (what
    its median is how far apart two fixes must be predicted to be ordered); with, of
    the pairs whose points lie further apart than that median, how many the model ordered
    right (the faster predicted measured at least 2% faster, or within 2%) and how many
    there are."""
    by_job: dict[str, list[tuple[float, float]]] = {}
    for r in got:
        by_job.setdefault(str(r["job"]), []).append((float(r["p"]), float(r["m"])))  # type: ignore[arg-type]
    errs, gaps = [], []
    for rows_ in by_job.values():
        for i, (pa, ma) in enumerate(rows_):
            for pb, mb in rows_[i + 1:]:
                errs.append(abs(math.log(ma / mb) - math.log(pa / pb)))
                hi, lo = ((pa, ma), (pb, mb)) if pa >= pb else ((pb, mb), (pa, ma))
                gaps.append((math.log(hi[0] / lo[0]), hi[1] >= lo[1] * 0.98))
    errs.sort()
    if not errs:
        return errs, 0, 0
    med = statistics.median(errs)
    apart = [right for gap, right in gaps if gap > med]
    return errs, sum(apart), len(apart)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", type=Path, help="corpus_rejudge.py outputs")
    ap.add_argument("--cover", type=float, default=0.9, help="share of rows a range must hold")
    ap.add_argument("--least", type=int, default=10, help="fewest rows a kind is fitted on")
    args = ap.parse_args()
    used = {k: (EFFECT_FLOOR[k], EFFECT_ERROR[k]) for k in EFFECT_ERROR}
    for t in args.tables:
        if not t.is_file():
            print(f"range_fit: {t}: no such file", file=sys.stderr)
            return 2
    got = rows(args.tables)
    if not got:
        print("range_fit: no tune rows in the tables (corpus_rejudge.py outputs)",
              file=sys.stderr)
        return 2
    print_header("the ranges' widening from the tune side's rows, as the code predicts now",
                 "range_fit.py")
    print(f"# tables: {', '.join(str(t) for t in args.tables)}; widening in force: "
          + ", ".join(f"{k}={f}+{e}" for k, (f, e) in used.items()))
    print(f"{'job':<40} {'fix':<16} {'kind':<6} {'p':>6} {'m':>6}  the model's ends")
    for r in got:
        print(f"{r['job']!s:<40} {r['fix']!s:<16} {r['kind']!s:<6} {r['p']:>6.2f} "
              f"{r['m']:>6.2f}  [{r['lo']:.2f}, {r['hi']:.2f}] noise {r['noise']:.3f}")
    print()
    errs, right, apart = pair_errors(got)
    if errs:
        print(f"pairs of changes of one job: {len(errs)}; the error of their predicted ratio "
              f"(|ln|): median {statistics.median(errs):.3f}, 90th percentile "
              f"{errs[int(0.9 * len(errs)) - 1]:.3f}; pairs predicted further apart than the "
              f"median: ordered right in {right} of {apart}")
    for kind in ("cpu", "other"):
        mine = [r for r in got if r["kind"] == kind]
        now_in, now_half = judged(mine, *used[kind]) if mine else (0, 0.0)
        if len(mine) < args.least:
            print(f"{kind}: {len(mine)} rows, fewer than {args.least}: not fitted"
                  + (f" (the widening in force holds {now_in} of them)" if mine else ""))
            continue
        floor, share, inside, half = fit(mine, args.cover)
        print(f"{kind}: {len(mine)} rows; floor {floor:.2f} + share {share:.2f} of |ln p| "
              f"holds {inside} of {len(mine)}, median half-width {half:.0%} (the widening "
              f"in force: {now_in} of {len(mine)}, {now_half:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
