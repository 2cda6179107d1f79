"""Replay accuracy of the step model on every real trace we ship or read.

For each trace: read it, build the step model (diagnose/model: the dependency graph of up to
five steps around the median one) and replay it unmodified. ``error`` = replayed / measured
- 1 over the replayed steps; a trace with no model gives its reason. The model's own time
(build + replay) is printed next to the time to read the trace and compute its metrics.

    python benchmarks/step_model_replay.py [--out benchmarks/results/step_model_replay.txt]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from diagnose.metrics.ranks import compute_rank  # noqa: E402
from diagnose.stepmodel import step_model  # noqa: E402
from diagnose.trace import read_trace  # noqa: E402

SHARED = REPO_ROOT.parent / "shared" / "traces"


def traces() -> list[Path]:
    out = sorted(p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz")))
    for d in ("samples/traces", "tests/data/gpu"):
        out += sorted((REPO_ROOT / d).rglob("*.json.gz"))
    return out


def label(p: Path) -> str:
    for base in (SHARED, REPO_ROOT):
        try:
            return str(p.relative_to(base))
        except ValueError:
            continue
    return p.name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args()
    lines = [f"{'trace':62s} {'steps':>5s} {'measured ms':>11s} {'replayed ms':>11s} "
             f"{'error':>7s} {'model ms':>8s} {'metrics ms':>10s}  no model because"]
    errors = []
    for p in traces():
        t = read_trace(p)
        t0 = time.perf_counter()
        compute_rank(t)
        t1 = time.perf_counter()
        m = step_model(t)
        t2 = time.perf_counter()
        js = m.to_json()
        name = label(p)
        name = name if len(name) <= 62 else name[:28] + "..." + name[-31:]
        if js is None:
            lines.append(f"{name:62s} {'':>5s} {'':>11s} {'':>11s} {'':>7s} {(t2 - t1) * 1e3:8.1f} "
                         f"{(t1 - t0) * 1e3:10.1f}  {m.why}")
            continue
        errors.append(abs(js["error"]))
        lines.append(f"{name:62s} {js['steps']:5d} {js['measured_ms']:11.3f} {js['replayed_ms']:11.3f} "
                     f"{js['error']:+7.2%} {(t2 - t1) * 1e3:8.1f} {(t1 - t0) * 1e3:10.1f}")
    lines.append("")
    if errors:
        lines.append(f"{len(errors)} traces modelled: median |error| {statistics.median(errors):.2%}, "
                     f"max |error| {max(errors):.2%}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
