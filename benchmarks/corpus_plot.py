"""The corpus' calibration plot: each timed first fix's predicted speedup against the
measured one, with its printed range and the measurement's 95% interval, tune and validate
apart, from corpus_predict's tables (or corpus_rejudge's: the GPU rows predicted again).

    python benchmarks/corpus_predict.py > benchmarks/results/corpus_predict.txt
    python benchmarks/corpus_plot.py benchmarks/results/corpus_predict.txt \\
        -o benchmarks/results/corpus_calibration.svg

A point on the diagonal is a prediction that came true; the grey band is within 15%. A
horizontal bar is the printed range (it should cross the diagonal), a vertical one the
measured interval.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROW = re.compile(r"^(?P<job>\S+)\s+(?P<rule>[A-Z]{2}\d{3})\s+(?P<fix>\S+)\s+.*?"
                 r"(?P<p>\d+\.\d+)x \[(?P<lo>\d+\.\d+), (?P<hi>\d+\.\d+)\]\s+"
                 r"(?P<m>\d+\.\d+)x \[(?P<mlo>-?\d+\.\d+), (?P<mhi>\d+\.\d+)\]")
HALF = re.compile(r"^## (tune|validate) half")
#: a row of corpus_rejudge.py's table: its half first, the prediction made again
REJUDGED = re.compile(r"^(?P<half>tune|validate)\s+(?P<job>\S+)\s+(?P<rule>[A-Z]{2}\d{3})\s+"
                      r"(?P<fix>\S+)\s+.*?\d+\.\d+x\s+"
                      r"(?P<p>\d+\.\d+)x \[(?P<lo>\d+\.\d+), (?P<hi>\d+\.\d+)\]\s+"
                      r"(?P<m>\d+\.\d+)x \[(?P<mlo>-?\d+\.\d+), (?P<mhi>\d+\.\d+)\]")


@dataclass
class Row:
    half: str
    job: str
    fix: str
    p: float  # predicted speedup
    lo: float  # its printed range
    hi: float
    m: float  # measured speedup
    mlo: float  # its 95% interval
    mhi: float


def rows(paths: list[Path]) -> list[Row]:
    """The timed rows of corpus_predict tables (or corpus_rejudge's), each with its half."""
    out: list[Row] = []
    for path in paths:
        half = "?"
        for line in path.read_text().splitlines():
            if "counted once)" in line:  # a change another finding's row timed: once
                continue
            h = HALF.match(line)
            if h:
                half = h[1]
            got = REJUDGED.match(line)
            if got:
                half = got["half"]
            else:
                got = ROW.match(line)
            if got:
                out.append(Row(half, got["job"], got["fix"],
                               *(float(got[k]) for k in ("p", "lo", "hi", "m", "mlo", "mhi"))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True, help="the plot (.svg or .png)")
    ap.add_argument("--title", default="first fixes on the corpus: predicted vs measured")
    args = ap.parse_args()
    for t in args.tables:
        if not t.is_file():
            print(f"corpus_plot: no such file: {t}", file=sys.stderr)
            return 2
    got = rows(args.tables)
    if not got:
        print("corpus_plot: no timed rows in the tables", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    top = max(max(r.hi, r.mhi, r.p, r.m) for r in got) * 1.1
    bottom = min(min(r.lo, max(r.mlo, 0.05), r.m) for r in got) * 0.9
    xs = [bottom, top]
    ax.plot(xs, xs, color="black", lw=0.8)
    ax.fill_between(xs, [x / 1.15 for x in xs], [x * 1.15 for x in xs], color="0.9")
    for half, colour in (("tune", "tab:blue"), ("validate", "tab:orange"), ("?", "tab:gray")):
        mine = [r for r in got if r.half == half]
        if not mine:
            continue
        ax.errorbar([r.p for r in mine], [r.m for r in mine],
                    xerr=[[r.p - r.lo for r in mine], [r.hi - r.p for r in mine]],
                    yerr=[[max(r.m - r.mlo, 0) for r in mine], [max(r.mhi - r.m, 0) for r in mine]],
                    fmt="o", color=colour, ecolor=colour, elinewidth=0.8, capsize=2,
                    alpha=0.8, label=f"{half} ({len(mine)} rows)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(bottom, top)
    ax.set_ylim(bottom, top)
    ax.set_xlabel("predicted speedup (bar: printed range)")
    ax.set_ylabel("measured speedup (bar: 95% interval)")
    ax.set_title(args.title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output} ({len(got)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
