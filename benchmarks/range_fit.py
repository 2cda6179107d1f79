"""The width of the predictions' ranges, read off the corpus' tune half: the share of a
change's predicted effect the model gets wrong (``EFFECT_ERROR`` in
diagnose/stepmodel/calibration.py).

    python benchmarks/corpus_predict.py --half tune > tune.txt
    python benchmarks/range_fit.py tune.txt benchmarks/results/predict_vs_measured.txt

Each timed row of corpus_predict's table gives the predicted speedup p, its printed range
and the measured speedup m. The printed range holds the capture's own noise and the
widening in force when the table was made (``--used``, default: the calibration's values);
that widening is taken back out, and for each row the least share E of |ln p| that, added
on both sides, puts m inside the range is found. predict_vs_measured's rows (the jobs the
model was built on: tune-side by definition) print no range: the point alone stands for
it, which asks more of E. A kind's EFFECT_ERROR is the 90th
percentile of its rows' E (changes of workers or threads: ``cpu``; the rest: ``other``),
so the ranges hold 9 of 10 tune rows; the table then says what coverage and half-width that
share gives. Run it on tune rows only: the validate half checks it (corpus_predict's
``inside`` column), it does not set it.
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

from diagnose.stepmodel.calibration import EFFECT_ERROR  # noqa: E402

#: the fields whose change moves CPU work (the transforms' ``moves_cpu``)
CPU_FIELDS = ("num_workers", "intra_op_threads")
ROW = re.compile(r"^(?P<job>\S+)\s+(?P<rule>[A-Z]{2}\d{3})\s+(?P<fix>\S+)\s+(?P<change>.*?)\s+"
                 r"(?P<p>\d+\.\d+)x \[(?P<lo>\d+\.\d+), (?P<hi>\d+\.\d+)\]\s+"
                 r"(?P<m>\d+\.\d+)x \[")


HALF = re.compile(r"^## (tune|validate) half")
#: a predict_vs_measured row: job, finding, fix, change, predicted, measured [CI]
PVM = re.compile(r"^(?P<job>\S+)\s+(?P<rule>[A-Z]{2}\d{3})\s+(?P<fix>\S+)\s+(?P<change>.*?)\s"
                 r"(?P<p>\d+\.\d+)x\s+(?P<m>\d+\.\d+)x \[[^\]]+\]\s+\d+\.\d+\s+(within 15%|OFF)")


def rows(paths: list[Path]) -> list[dict[str, object]]:
    """The timed rows of the tune halves of corpus_predict tables (a validate half's rows
    are skipped: they check the width, they do not set it)."""
    out: list[dict[str, object]] = []
    for path in paths:
        half = "tune"
        for line in path.read_text().splitlines():
            h = HALF.match(line)
            half = h[1] if h else half
            got = ROW.match(line)
            if got and half == "tune":
                kind = "cpu" if any(f + "=" in got["change"] for f in CPU_FIELDS) else "other"
                out.append({"job": got["job"], "fix": got["fix"], "kind": kind,
                            **{k: float(got[k]) for k in ("p", "lo", "hi", "m")}})
                continue
            got = PVM.match(line)
            if got:
                kind = ("cpu" if any(f in got["change"] for f in CPU_FIELDS)
                        or got["fix"] in ("threads", "num_workers") else "other")
                p = float(got["p"])
                out.append({"job": got["job"], "fix": got["fix"], "kind": kind, "p": p,
                            "lo": p, "hi": p, "m": float(got["m"]), "bare": True})
    return out


def needed(row: dict[str, object], used: dict[str, float]) -> float:
    """The least share of |ln p| that puts the measured speedup inside the row's range."""
    p, lo, hi, m = (float(row[k]) for k in ("p", "lo", "hi", "m"))  # type: ignore[arg-type]
    eff = abs(math.log(p))
    w = 0.0 if row.get("bare") else used[str(row["kind"])] * eff
    lo0, hi0 = lo * math.exp(w), hi * math.exp(-w)  # the widening in force taken out
    lo0, hi0 = min(lo0, p), max(hi0, p)
    miss = max(math.log(lo0 / m), math.log(m / hi0), 0.0)
    if miss == 0.0:
        return 0.0
    return miss / eff if eff > 1e-6 else math.inf


def quantile(xs: list[float], q: float) -> float:
    """The smallest value at or above a share ``q`` of ``xs``."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", type=Path, help="corpus_predict outputs (tune half)")
    ap.add_argument("--used", default=",".join(f"{k}={v}" for k, v in EFFECT_ERROR.items()),
                    help="EFFECT_ERROR in force when the tables were made (kind=share,...)")
    ap.add_argument("--cover", type=float, default=0.9, help="share of rows a range must hold")
    args = ap.parse_args()
    try:
        used = {k: float(v) for k, v in (x.split("=") for x in args.used.split(","))}
    except ValueError:
        ap.error(f"--used: expected kind=share,... (got {args.used!r})")
    got = rows(args.tables)
    if not got:
        print("range_fit: no timed rows in the tables", file=sys.stderr)
        return 2
    print_header("EFFECT_ERROR from the tune side's rows", "range_fit.py")
    print(f"# tables: {', '.join(str(t) for t in args.tables)}; widening in force: {args.used}")
    print(f"{'job':<40} {'fix':<16} {'kind':<6} {'p':>6} {'m':>6} {'needed E':>9}")
    for r in got[:40]:
        print(f"{r['job']!s:<40} {r['fix']!s:<16} {r['kind']!s:<6} {r['p']:>6.2f} "
              f"{r['m']:>6.2f} {needed(r, used):>9.2f}")
    if len(got) > 40:
        print(f"... and {len(got) - 40} rows more")
    print()
    for kind in ("cpu", "other"):
        mine = [r for r in got if r["kind"] == kind]
        if not mine:
            print(f"{kind}: no rows")
            continue
        e = quantile([needed(r, used) for r in mine], args.cover)
        half = [math.exp(e * abs(math.log(float(r["p"])))) - 1  # type: ignore[arg-type]
                for r in mine]
        print(f"{kind}: {len(mine)} rows; EFFECT_ERROR = {e:.2f} holds "
              f"{sum(needed(r, used) <= e for r in mine)} of {len(mine)}; the widening's "
              f"median half-width {100 * statistics.median(half):.0f}% (the capture's noise "
              f"comes on top)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
