"""The watch's change detector on this machine: false alarms on a steady run, and over a
million simulated steps whose noise is resampled from real timed steps; detection delay
for a sustained 20% change in that noise.

1. A steady CPU job (``--job``: ``small`` ~1 ms steps, ``medium`` ~10 ms) runs ``--steps``
   steps under ``watch`` with its defaults (baseline window included); its alarms and
   spikes are counted, and its step times (the timeline's) kept.
2. Those steps' log times less their median are the noise. ``--sim-steps`` steps are drawn
   from it i.i.d. (the noise's shape: heavy tail, preempted steps), and in blocks of
   ``--block`` consecutive steps (also its short-range order: the machine's own pace
   changes, which are real changes of the job's pace) and fed to the step-time detector
   with the watch's parameters; the changes it calls are judged as the watch judges them
   (:class:`~diagnose.watching.signals.Reference`: a change is an alarm only when it
   leaves the pace slower than the reference by ``min_change``; faster ones are shifts);
   changes and alarms per 10,000 steps. The tests' synthetic noise
   (Student-t, AR(1), rare slow steps) is run beside them for reference.
3. ``--trials`` series of that noise get a 20% step change at a random step in 300-600:
   the delay to the first alarm after it (p50, p90, p99, share over 50 steps).
4. The relearning after the baseline window (the watch forgets its baseline once, when that
   window's rest ends, and learns it again from the next ``relearn`` values): ``--trials``
   series of 800 values rest at value 200 (:meth:`Detector.relearn`); the steady ones'
   false alarms from then on (a run with any, of all runs; beside them the same series
   fed with no rest, the control), and a 20% or 50% slowdown
   that begins within the relearning, in its first or second half, the share called and
   the delay.

    python benchmarks/watch_false_alarms.py [--steps 3000] [--sim-steps 1000000]
        [--job small] [--load steps.npy] [--save steps.npy] [--no-relearn]

Goal (issue 50): <= 1 false alarm per 10,000 steady steps; a 20% change within 50 steps.

Results: benchmarks/results/watch_false_alarms.txt (the 2-CPU dev machine, shared with other
engineers' jobs, load 5-7 during the run). The steady run: 1 alarm in 2,999 steps (1.84 ->
15.9 ms for the last steps, its host line "waiting for CPUs other processes held"), 5
shifts; its noise (p90 +2.2 in log) gives 0.07 / 1.66 / 0.00 false alarms per 10,000 steps
(i.i.d. / blocks / synthetic). The step times of an earlier steady run at load ~1 give 0.00
/ 0.47 / 0.00 and a 20% slowdown found in 15 / 15 / 53 steps (p50 / p90 / p99, i.i.d.).
Before shifts and the reference (every change an alarm) those were 0.00 / 18.6 / 0.00.
Section 4 on a busy afternoon's steps at two paces (2026-12-07): 20.0% of steady series
alarmed after the relearning until a change there had to clear the median's
distribution-free interval, 6.7% since (0% with no rest).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from diagnose.watching.detector import Detector  # noqa: E402
from diagnose.watching.signals import PARAMS, WORSE, Reference  # noqa: E402

WARM = 20  # the first steps (one-time costs) are not noise


def steady_run(steps: int, job: str) -> tuple[np.ndarray, dict[str, Any]]:
    """Run the job under watch; its step times (ms) and its record."""
    import torch

    from diagnose import watch
    from diagnose.watching import read_timeline

    torch.manual_seed(0)
    torch.set_num_threads(1)
    width = 256 if job == "small" else 1024
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32 if job == "small" else 128,
                                         shuffle=True)
    with tempfile.TemporaryDirectory(prefix="watch-fa-") as out:
        with watch(model, loader, out_dir=out, print_summary=False, progress_s=None) as w:
            done = 0
            while done < steps:
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    done += 1
                    if done >= steps:
                        break
        tl = read_timeline(w.run_dir)
        assert tl is not None
        ms = tl["steps"]["ms"].copy()
        rec = w.to_json()
    # the steps the detectors rested in (the profiled windows, their analyses on another
    # thread) are not tested by the watch, so they are not the noise it sees
    for first, stop in rec["rests"]:
        ms[first:stop] = np.nan
    return ms, rec


def series(kind: str, noise: np.ndarray, n: int, block: int, rng: np.random.Generator
           ) -> np.ndarray:
    if kind == "iid":
        return rng.choice(noise, n)
    if kind == "block":
        starts = rng.integers(0, len(noise) - block, n // block + 1)
        return np.concatenate([noise[s:s + block] for s in starts])[:n]
    from tests.watching.noise import steady

    return steady(n, seed=int(rng.integers(2**31))) - math.log(40.0)


def judged() -> tuple[Detector, Reference]:
    p = PARAMS["step_time"]
    return Detector(p), Reference(WORSE["step_time"], p.min_change, n=p.min_len)


def false_alarms(x: np.ndarray) -> tuple[int, int]:
    """(changes the detector called, alarms among them)."""
    d, ref = judged()
    changes = alarms = 0
    for i, v in enumerate(x.tolist()):
        c = d.update(v, i)
        if c is not None:
            changes += 1
            alarms += ref.judge(c.before, c.after, c.index, c.sigma)
        elif ref.waiting is not None and d.mu is not None:
            alarms += ref.settled(d.mu, i, d.mu_span)
    return changes, alarms


def delays(kind: str, noise: np.ndarray, trials: int, block: int,
           rng: np.random.Generator) -> np.ndarray:
    out = []
    for _ in range(trials):
        x = series(kind, noise, 900, block, rng)
        at = int(rng.integers(300, 600))
        x[at:] += math.log(1.2)
        got = relearnt(x, at=None, change_at=at)
        out.append(got - at if got is not None else 10**6)
    return np.array(out)


#: the relearning's series (section 4): values, and the value whose rest ends (relearn)
RELEARN_N, RELEARN_AT = 800, 200


def relearnt(x: np.ndarray, at: int | None = RELEARN_AT, change_at: int | None = None
             ) -> int | None:
    """Feed ``x``, forgetting the baseline at value ``at`` (the baseline window's rest
    ends; None: never, the control); the index of the first alarm at ``RELEARN_AT`` or
    after, where ``change_at`` is None, else of the first at ``change_at`` or after; None
    where none."""
    d, ref = judged()
    first = RELEARN_AT if change_at is None else change_at
    for i, v in enumerate(x.tolist()):
        if i == at:
            d.relearn(i)
        c = d.update(v, i)
        if c is not None:
            alarm = ref.judge(c.before, c.after, c.index, c.sigma)
        else:
            alarm = (ref.waiting is not None and d.mu is not None
                     and ref.settled(d.mu, i, d.mu_span))
        if alarm and i >= first:
            return i
    return None


def relearn_table(noise: np.ndarray, trials: int, block: int, rng: np.random.Generator,
                  kinds: list[tuple[str, str]]) -> None:
    """Section 4 (the module doc), printed."""
    p = PARAMS["step_time"]
    halves = (("first half", RELEARN_AT, RELEARN_AT + p.relearn // 2),
              ("second half", RELEARN_AT + p.relearn // 2, RELEARN_AT + p.relearn - p.min_len))
    print(f"\nthe relearning after the baseline window ({trials} series of {RELEARN_N} values "
          f"each, the rest ending at value {RELEARN_AT}, {p.relearn} values relearnt)")
    print(f"{'noise':<28} {'steady: runs alarmed':>21} {'(no rest)':>10} "
          + " ".join(f"{f'{pct}% in its {h}':>24}" for pct in (20, 50) for h, _, _ in halves))
    for kind, label in kinds:
        xs = [series(kind, noise, RELEARN_N, block, rng) for _ in range(trials)]
        steady = sum(relearnt(x) is not None for x in xs)
        control = sum(relearnt(x, at=None) is not None for x in xs)
        cells = []
        for pct in (20, 50):
            for _, lo, hi in halves:
                got = []
                for _ in range(trials):
                    x = series(kind, noise, RELEARN_N, block, rng)
                    at = int(rng.integers(lo, hi))
                    x[at:] += math.log(1 + pct / 100)
                    i = relearnt(x, change_at=at)
                    got.append(None if i is None else i - at)
                found = [g for g in got if g is not None]
                med = f"{np.median(found):.0f}" if found else "-"
                cells.append(f"{len(found) / trials:>6.0%} called, p50 {med:>4}")
        print(f"{label:<28} {f'{steady / trials:.1%} ({steady})':>21} "
              f"{f'{control / trials:.1%}':>10} "
              + " ".join(f"{c:>24}" for c in cells), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="steps of the real steady run")
    ap.add_argument("--job", choices=("small", "medium"), default="small")
    ap.add_argument("--sim-steps", type=int, default=1_000_000)
    ap.add_argument("--block", type=int, default=50)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--load", type=Path, help="step times (ms, .npy) instead of a real run")
    ap.add_argument("--save", type=Path, help="keep the real run's step times (.npy)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-relearn", action="store_true",
                    help="skip the relearning's series (section 4)")
    args = ap.parse_args()
    from _bench import cpu_model, git_revision

    print(f"benchmarks/{Path(__file__).name}\nmachine: {cpu_model()}, {os.cpu_count()} CPUs, "
          f"shared (load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at start); code at "
          f"git {git_revision()}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    rng = np.random.default_rng(args.seed)
    if args.load is not None:
        ms = np.load(args.load)
        print(f"step times from {args.load}: {len(ms):,} steps")
    else:
        t0 = time.perf_counter()
        ms, rec = steady_run(args.steps, args.job)
        st = rec["step_time_ms"]
        print(f"steady run ({args.job} job): {rec['steps']:,} steps in "
              f"{time.perf_counter() - t0:.1f} s, step median {st['median']:.3g} ms "
              f"(p10-p90 {st['p10']:.3g}-{st['p90']:.3g}); {len(rec['alarms'])} alarms, "
              f"{rec['spikes']['count']} spikes, {rec['shifts']['count']} shifts, "
              f"{len(rec['captures'])} captures")
        for a in rec["alarms"] + rec["shifts"]["recent"]:
            print(f"  {a['kind']} at step {a['step']:,} (from ~{a['start']}): {a['signal']} "
                  f"{a['before']:.4g} -> {a['after']:.4g} {a['unit']}"
                  + (f"\n    {a['host_line']}" if a.get("host_line") else ""))
        if args.save is not None:
            np.save(args.save, ms)
    logs = np.log(ms[WARM:][np.isfinite(ms[WARM:]) & (ms[WARM:] > 0)])
    noise = logs - np.median(logs)
    q = np.percentile(noise, (10, 50, 90, 99))
    print(f"noise (log step time less its median): p10 {q[0]:+.3f}, p90 {q[2]:+.3f}, "
          f"p99 {q[3]:+.3f} ({len(noise):,} steps)\n")
    kinds = [("iid", "real, resampled i.i.d."), ("block", f"real, blocks of {args.block}"),
             ("synthetic", "synthetic (tests' noise)")]
    print(f"{'noise':<28} {'steps':>10} {'changes':>8} {'false alarms':>13} {'per 10k':>8}")
    for kind, label in kinds:
        t0 = time.perf_counter()
        c, n = false_alarms(series(kind, noise, args.sim_steps, args.block, rng))
        print(f"{label:<28} {args.sim_steps:>10,} {c:>8,} {n:>13,} "
              f"{n / args.sim_steps * 1e4:>8.2f}"
              f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"\ndelay for a sustained 20% change ({args.trials} trials each)")
    print(f"{'noise':<28} {'p50':>5} {'p90':>5} {'p99':>5} {'> 50 steps':>11} {'missed':>7}")
    for kind, label in kinds:
        d = delays(kind, noise, args.trials, args.block, rng)
        found = d[d < 10**6]
        p = np.percentile(found, (50, 90, 99)) if len(found) else [math.nan] * 3
        print(f"{label:<28} {p[0]:>5.0f} {p[1]:>5.0f} {p[2]:>5.0f} "
              f"{(d > 50).mean():>10.1%} {(d >= 10**6).mean():>6.1%}", flush=True)
    if not args.no_relearn:
        relearn_table(noise, args.trials, args.block, rng, kinds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
