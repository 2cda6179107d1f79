"""Every worker and thread split the model predicts, checked against the plain loop:
not only a finding's first fix (benchmarks/predict_vs_measured.py) but each config
autofix may try on the way (it predicts every rung of a ladder from these).

    python benchmarks/predict_configs.py                          # every job, once
    python benchmarks/predict_configs.py tokenizing --repeat 4 --save /tmp/pc
    python benchmarks/predict_configs.py --offline /tmp/pc        # today's model, same timings

For each job (``make_job()`` in benchmarks/jobs/<name>.py): a diagnosis of its plain loop
(``with diagnose(...)``, as predict_vs_measured does), then the loop timed without the
profiler in interleaved blocks, as it is and with each config of the grid: 0 to CPUs
workers, on torch's threads and on one thread (made as autofix makes them). Each
config's prediction comes from the diagnosis' own step model (the ``threads``
transform where the threads change, ``num_workers`` where only the workers do).

``--save DIR`` keeps each diagnosis' run folder and the timings (``DIR/timed.jsonl``);
``--offline DIR`` predicts those again with the model as it is now, without timing
anything: a change to the model is judged on the same captures and the same timings,
so capture-to-capture noise does not hide it. Prints one row per job and config, and
per config the share within 15% and the mean timed / predicted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "jobs"))  # a job imports its siblings as `python job.py` would

from _run import job_names, make, print_header  # noqa: E402
from predict_vs_measured import _arm, _diagnose, _ratio_ci, _time  # noqa: E402


def _grid(cpus: int, threads: int) -> list[dict[str, int]]:
    """Workers 0..cpus on torch's threads and on one thread, the run as it is left out."""
    out = []
    for t in sorted({1, threads}):
        for k in range(cpus + 1):
            out.append({"num_workers": k} if t == threads else
                       {"num_workers": k, "intra_op_threads": t})
    return out


def _key(change: dict[str, int]) -> str:
    t = change.get("intra_op_threads")
    return f"{change['num_workers']}w" + (f"{t}t" if t else "")


def _predict(run_dir: str, change: dict[str, int]) -> float | str:
    """The speedup the diagnosis' step model gives ``change``, or why it cannot tell."""
    import diagnose
    from diagnose.fixes import FIXES

    result = diagnose.analyze(run_dir)
    predictor = getattr(result, "analysis", result).predictor
    if isinstance(predictor, str):
        return predictor
    transform = FIXES["threads" if "intra_op_threads" in change else "num_workers"].transform
    p = predictor.predict_change(transform, change)
    return p if isinstance(p, str) else p.speedup


def _row(job: str, key: str, pred: float | str, meas: float, lo: float, hi: float,
         errs: dict[str, list[float]]) -> str:
    if isinstance(pred, str):
        return f"{job:<17} {key:<6} {'-':>9} {meas:8.2f}x [{lo:.2f}, {hi:.2f}]  {pred[:60]}"
    err = meas / pred
    errs.setdefault(key, []).append(err)
    return (f"{job:<17} {key:<6} {pred:8.2f}x {meas:8.2f}x [{lo:.2f}, {hi:.2f}] {err:9.2f}  "
            f"{'within 15%' if 0.85 <= err <= 1.15 else 'OFF'}")


def _measure(name: str, rounds: int, steps: int, save: Path | None) -> dict[str, Any]:
    """Diagnose job ``name``, then time it as it is and with every config of the grid."""
    import torch

    from diagnose.values import usable_cpus

    job = make(name)
    with tempfile.TemporaryDirectory() as tmp:
        out = tempfile.mkdtemp(dir=save) if save else tmp
        report = _diagnose(job, out)
        run_dir = report.get("run_dir") or str(next(Path(out).glob("*/context.json")).parent)
        now = {"num_workers": job["loader"].num_workers}
        grid = [c for c in _grid(usable_cpus(), torch.get_num_threads())
                if c != now]
        preds = {_key(c): _predict(run_dir, c) for c in grid}
    job = make(name)
    arms = [_arm(job, {})] + [_arm(job, c) for c in grid]
    times = _time(job, arms, rounds, steps)
    meas = {}
    for c, t in zip(grid, times[1:], strict=True):
        meas[_key(c)] = list(_ratio_ci(times[0], t))
    return {"dir": run_dir if save else None, "job": name, "changes": grid,
            "meas": meas, "preds": preds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", help="job names in benchmarks/jobs (default: all)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1, help="diagnoses (and timings) a job")
    ap.add_argument("--save", type=Path, metavar="DIR",
                    help="keep the diagnoses and timings under DIR (for --offline)")
    ap.add_argument("--offline", type=Path, metavar="DIR",
                    help="predict the saved diagnoses again; time nothing")
    args = ap.parse_args()
    print_header("every worker and thread split: predicted beside timed", "predict_configs.py")
    head = (f"{'job':<17} {'config':<6} {'predicted':>9} {'measured [95% CI]':>22} "
            f"{'meas/pred':>9}  verdict")
    print(head)
    print("-" * len(head))
    errs: dict[str, list[float]] = {}
    if args.offline:
        for line in (args.offline / "timed.jsonl").read_text().splitlines():
            rec = json.loads(line)
            for c in rec["changes"]:
                key = _key(c)
                print(_row(rec["job"], key, _predict(rec["dir"], c), *rec["meas"][key], errs))
    else:
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
        for _ in range(args.repeat):
            for name in job_names(args.jobs, False):
                rec = _measure(name, args.rounds, args.steps, args.save)
                for c in rec["changes"]:
                    key = _key(c)
                    print(_row(name, key, rec["preds"][key], *rec["meas"][key], errs),
                          flush=True)
                if args.save:
                    with open(args.save / "timed.jsonl", "a") as fh:
                        fh.write(json.dumps({k: v for k, v in rec.items() if k != "preds"})
                                 + "\n")
    print()
    for key, es in sorted(errs.items()):
        ok = sum(0.85 <= e <= 1.15 for e in es)
        print(f"{key:<6} {ok} of {len(es)} within 15%; timed / predicted: mean "
              f"{statistics.fmean(es):.2f}, worst {max(es, key=lambda e: abs(math.log(e))):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
