"""The corpus' predictions made again, by the code as it is now, from kept captures, beside
the speedups those captures' changes measured: a change of the model judged without timing
anything again (the measurement does not depend on the model, the prediction does).

    python benchmarks/corpus_rejudge.py benchmarks/results/corpus_predict_gpu_h200.txt \\
        benchmarks/captures/h200

The first argument is a corpus_predict.py output (its rows: job, finding, fix, change,
measured speedup and its interval; ``## tune half`` / ``## validate half`` say the half;
rows without a change, or without a measurement, are left out; a job's rows from several
runs of the script are each kept). The second is a folder of kept captures,
``<job>/<run folder>`` (``corpus_predict.py --keep``). Each capture is analysed once (its
trace, its context with the session's probes, its host samples); for each row exactly that
change is predicted through the same fix's transform (where the code cannot tell now, it
says why). Tallies per half: within 15% of the
measured speedup, measured inside the range, median |error|, the ranges' median
half-width over the point. Each row ends with what its
range is made of (the model's ends as speedups, the inputs' noise): range_fit.py's input.
``--run CODE`` keeps the rows of the one run made at CODE: a change of the model judged on
each kept run's captures against that run's own measurements (a job's measured speedup
moves from day to day with the host; every saved run's rows would judge today's capture
against other days' hosts).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

ROW = re.compile(r"^(?P<job>\S+)\s+(?P<rule>[A-Z]{2}\d{3}|-)\s+(?P<fix>\S+)\s+(?P<change>\S.*?)\s+"
                 r"(?P<pred>\d+\.\d+)x(?: \[[^\]]*\])?\s+(?P<meas>\d+\.\d+)x "
                 r"\[(?P<lo>\d+\.\d+), (?P<hi>\d+\.\d+)\]")


@dataclass
class Row:
    half: str
    job: str
    rule: str
    fix: str
    change: dict[str, Any]
    was: float  # the prediction the run printed
    measured: float
    ci: tuple[float, float]


def _value(v: str) -> Any:
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def parse_rows(text: str) -> list[Row]:
    """The measured rows of a corpus_predict.py output, each with its half."""
    out, half = [], "?"
    for line in text.splitlines():
        if line.startswith("## ") and " half" in line:
            half = line.split()[1]
            continue
        m = ROW.match(line)
        if not m or "=" not in m["change"]:
            continue
        change = dict(kv.split("=", 1) for kv in m["change"].split(", "))
        out.append(Row(half, m["job"], m["rule"], m["fix"],
                       {k.strip(): _value(v.strip()) for k, v in change.items()},
                       float(m["pred"]), float(m["meas"]), (float(m["lo"]), float(m["hi"]))))
    return out


def newest_run(text: str) -> str:
    """The first run of a results file (newest first): its lines up to the second one that
    starts with ``# code at``."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("# code at")]
    return "\n".join(lines[:heads[1]] if len(heads) > 1 else lines)


def run_at(text: str, code: str) -> str:
    """The run of a results file whose ``# code at`` line names ``code`` (its lines up to
    the next run's): the captures that run kept, judged against its own measurements (a
    job's measured speedup moves from day to day with the host; a capture is judged against
    the measurement taken beside it). Empty where no run names it."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("# code at")]
    for a, b in zip(heads, [*heads[1:], len(lines)], strict=True):
        if lines[a].split()[3:4] == [code]:
            return "\n".join(lines[a:b])
    return ""


def capture_of(root: Path, job: str) -> Path | None:
    """The newest run folder kept for ``job`` (a trace and its context)."""
    runs = sorted(p.parent for p in (root / job).glob("*/context.json"))
    return runs[-1] if runs else None


def analysed(folder: Path) -> tuple[Any, dict[str, Any]]:
    """The step model's predictor for the capture in ``folder`` (its trace, its context
    with the session's probes, its host samples), as the code makes it now (or why there is
    none), and the report's JSON."""
    from diagnose.api import analyze_runs

    report = analyze_runs(folder).runs[0]
    return report.predictor or "no predictor", report.to_json()


def predict(made: tuple[Any, dict[str, Any]], rule: str, fix: str, change: dict[str, Any]
            ) -> dict[str, Any] | str:
    """Exactly ``change``, through fix ``fix``'s transform (a fix predicted otherwise, e.g.
    a saving per step: the report's own prediction of it, where its change is this one):
    speedup and the speedups at the ends of its range; or why there is no prediction."""
    from diagnose.fixes import FIXES

    predictor, report = made
    if isinstance(predictor, str):
        return predictor
    unit = FIXES.get(fix)
    if unit is not None and unit.transform is not None:
        p = predictor.predict_change(unit.transform, change)
        if isinstance(p, str):
            return p
        sp, base, rng, parts = p.speedup, p.base_ms, p.range, p.range_parts
        assumed = list(p.assumed)
    else:
        js = next((x.get("predicted") for f in report["findings"] if f["rule"] == rule
                   for x in f.get("fixes") or [] if x["id"] == fix), None)
        if not js or js.get("change") != change:
            return f"{fix}: not predicted for this change now"
        sp, base, rng = js["speedup"], js["step_ms"] * js["speedup"], js.get("range") or [0, 0]
        parts = js.get("range_parts")
        assumed = list(js.get("assumed") or [])
    lo, hi = rng
    ends = (base / hi, base / lo) if lo > 0 and hi > 0 else (sp, sp)
    out = {"speedup": sp, "lo": ends[0], "hi": ends[1], "assumed": assumed}
    if parts and parts.get("low_ms", 0) > 0:
        # the model's own ends as speedups, and the inputs' noise: range_fit.py's input
        out.update(model_lo=base / parts["high_ms"], model_hi=base / parts["low_ms"],
                   noise=parts["noise"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a corpus_predict.py output")
    ap.add_argument("captures", type=Path, help="kept captures: <job>/<run folder>")
    ap.add_argument("--newest", action="store_true",
                    help="only the newest run's rows (results files hold runs newest first, "
                         "each from '# code at'; the kept captures are the newest run's)")
    ap.add_argument("--run", metavar="CODE",
                    help="only the rows of the run made at CODE (its '# code at CODE' line): "
                         "the run that kept these captures")
    args = ap.parse_args()
    for p in (args.results, args.captures):
        if not p.exists():
            print(f"corpus_rejudge: {p}: no such file or folder", file=sys.stderr)
            return 2
    text = args.results.read_text()
    if args.newest:
        text = newest_run(text)
    if args.run:
        text = run_at(text, args.run)
        if not text:
            print(f"corpus_rejudge: {args.results}: no run made at {args.run}", file=sys.stderr)
            return 2
    rows = parse_rows(text)
    if not rows:
        print(f"corpus_rejudge: {args.results}: no measured rows", file=sys.stderr)
        return 2
    import warnings

    warnings.filterwarnings("ignore")
    made: dict[str, Any] = {}
    head = (f"{'half':<9}{'job':<40}{'finding':<8} {'fix':<19}{'change':<38}{'was':>7}"
            f"{'now [range]':>24}{'measured [95% CI]':>22}{'error':>7}  inside")
    print(f"# predictions made again from kept captures ({args.captures}), beside "
          f"{args.results.name}'s measurements")
    print(head)
    print("-" * len(head))
    by_half: dict[str, list[tuple[float, bool]]] = {}
    widths: dict[str, list[float]] = {}  # each range's half-width over its point
    for r in rows:
        if r.job not in made:
            folder = capture_of(args.captures, r.job)
            made[r.job] = analysed(folder) if folder is not None else ("no capture kept", {})
        ch = ", ".join(f"{k}={v}" for k, v in r.change.items())
        meas = f"{r.measured:.2f}x [{r.ci[0]:.2f}, {r.ci[1]:.2f}]"
        line = f"{r.half:<9}{r.job:<40}{r.rule:<8} {r.fix:<19}{ch:<38}{r.was:6.2f}x"
        p = predict(made[r.job], r.rule, r.fix, r.change)
        if isinstance(p, str):
            print(f"{line}  {p[:60]}")
            continue
        inside = p["lo"] <= r.measured <= p["hi"]
        err = r.measured / p["speedup"]
        by_half.setdefault(r.half, []).append((err, inside))
        widths.setdefault(r.half, []).append((p["hi"] - p["lo"]) / 2 / p["speedup"])
        now = f"{p['speedup']:.2f}x [{p['lo']:.2f}, {p['hi']:.2f}]"
        parts = (f"  model [{p['model_lo']:.3f}, {p['model_hi']:.3f}] noise {p['noise']:.3f}"
                 if "noise" in p else "") + (" assumed" if p["assumed"] else "")
        print(f"{line}{now:>24}{meas:>22}{err:7.2f}  {'yes' if inside else 'no ':<3}{parts}")
    print()
    for half, got in sorted(by_half.items()):
        n = len(got)
        within = sum(0.85 <= e <= 1.15 for e, _ in got)
        inside = sum(i for _, i in got)
        med = statistics.median(abs(e - 1) for e, _ in got)
        print(f"{half}: {within} of {n} within 15%, {inside} of {n} inside the range, "
              f"median |error| {med:.0%}, median half-width "
              f"{statistics.median(widths[half]):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
