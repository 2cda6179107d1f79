"""What a finished session leaves in the training process: the objects Python's collector
walks in every full collection from then on, and the job's step after it.

Three arms, each in a fresh Python, interleaved over rounds (A B C, C B A, ...):

- ``plain``: benchmarks/jobs/tensor_rows.py's loop, never diagnosed;
- ``session``: the same job after a real ``with diagnose(...)`` around its loop (the
  report.html it writes is drawn by a child Python, diagnose/report/child_writer.py);
- ``plots``: the session, then ``import diagnose.report.plots``: what the process held when
  the session drew the page's plots itself (before that change).

Each arm then times ``gc.collect()`` (median of 7) and the job's own loop over ``--steps``
steps (its mean step, the full collections its per-sample batches trip included: the
job's real cost). Ratios are to the plain arm of the same round; the table gives their
median over rounds.

    python benchmarks/gc_footprint.py [--rounds 3] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = ("plain", "session", "plots")


def arm(which: str, steps: int) -> dict[str, float]:
    """One arm in this process (a fresh one): its objects, collection and step."""
    import gc
    import time

    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE / "jobs"))
    import torch.nn.functional as F
    from tensor_rows import make_job

    job = make_job()
    model, opt, loader = job["model"], job["optimizer"], job["loader"]

    def batches():  # epoch after epoch
        while True:
            yield from loader

    it = batches()

    def loop(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            x, y = next(it)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        return (time.perf_counter() - t0) / n * 1e3

    if which in ("session", "plots"):
        from diagnose import diagnose

        with tempfile.TemporaryDirectory() as tmp, diagnose(
                model, loader, optimizer=opt, out_dir=tmp, print_report=False) as d:
            while not d.done:
                loop(10)
        if which == "plots":
            import diagnose.report.plots  # noqa: F401
    else:  # as many steps as a session's loop runs, so that every arm starts as warm
        loop(60)
    loop(5)
    gc.collect()
    objects = len(gc.get_objects())
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"objects": objects, "collect_ms": statistics.median(times),
            "step_ms": loop(steps), "matplotlib": "matplotlib" in sys.modules}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm, args.steps)))
        return 0

    sys.path.insert(0, str(HERE / "jobs"))
    from _run import print_header

    print_header("what a finished session leaves in the training process", "gc_footprint.py")
    rows: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
    for r in range(args.rounds):
        for a in (ARMS if r % 2 == 0 else ARMS[::-1]):
            out = subprocess.run([sys.executable, __file__, "--arm", a, "--steps",
                                  str(args.steps)], capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            rows[a].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def ratio(a: str, key: str) -> float:
        return statistics.median(x[key] / p[key] for x, p in zip(rows[a], rows["plain"], strict=True))

    head = (f"{'arm':<9} {'matplotlib':>10} {'objects':>9} {'x plain':>8} "
            f"{'gc.collect ms':>14} {'x plain':>8} {'step ms':>8} {'x plain':>8}")
    print(head)
    print("-" * len(head))
    for a in ARMS:
        med = {k: statistics.median(x[k] for x in rows[a])
               for k in ("objects", "collect_ms", "step_ms")}
        print(f"{a:<9} {str(any(x['matplotlib'] for x in rows[a])):>10} "
              f"{med['objects']:>9.0f} {ratio(a, 'objects'):>7.2f}x "
              f"{med['collect_ms']:>14.1f} {ratio(a, 'collect_ms'):>7.2f}x "
              f"{med['step_ms']:>8.1f} {ratio(a, 'step_ms'):>7.2f}x")
    print(f"\n{args.rounds} rounds, arms interleaved, each in a fresh Python; step: the mean "
          f"of {args.steps} steps of benchmarks/jobs/tensor_rows.py (its full collections "
          "included); x plain: median over rounds of the ratio to that round's plain arm.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
