"""Capture overhead: the same training loop with and without the background samplers;
and, with ``--jobs``, whole captures of benchmarks/jobs: the profiled step against the
unprofiled one, and each probe's own time against the capture's wall time.

Arms run interleaved in short blocks (A B C, C B A, ...) for many rounds so drift and
other load on the machine hit every arm alike; each block times ``--steps`` steps and
keeps their median. The overhead is the paired per-round difference to the plain arm,
as a percentage of the plain step (median over rounds, with the interquartile range).
Arms: ``plain``; ``samplers N Hz`` (the sampler thread on); ``hooks`` (the session's step
hooks, :class:`~diagnose.session.hooks.Hooks`, on a step clock). Two costs are also timed
apart, free of that noise: one sampler tick (CPU time of the sampler thread per tick, and
what it comes to at each rate), and the step hooks (a tiny loop's step with and without
them: the DataLoader ``__next__`` patch and its fetch/collate wraps, the optimizer pre/post
hooks with the boundary's bookkeeping, the model's hooks, the collector's callbacks).

    python benchmarks/capture_overhead.py [--rounds 30] [--steps 10] [--hz 10 50]
        [--profiled] [--workload augment_cnn]

``--profiled`` adds two arms: ``profiled``, the steps under the session's profiler window
alone (:class:`~diagnose.capture.profiler.WindowProfiler` with its defaults, one warm-up
step untimed), torch.profiler's own cost; and ``capture``, the window as a session runs it
(the profiler driven by the step hooks, the samplers on at the first ``--hz``, each step by
the session's clock), paired with the plain arm like the others; ``capture / profiled`` is
what the capture adds beyond torch.profiler.
``--workload NAME`` times a job of benchmarks/jobs instead of the MLP (``augment_cnn``: a
dozen small tensor ops per sample in the training process, an op-heavy CPU step).

Goals: the samplers under 1% of the step at the default rate; a profiled step, and a
captured one, at most 1.3x a plain one.

``--jobs augment_cnn tensor_rows [--captures 3]``: each job is captured ``--captures``
times with ``diagnose(model, loader)`` (its loop as a user writes it, stopped at
``d.done``); per capture the table gives the capture's wall time (enter to the end of the
exit: probes, analysis, report), the profiler's overhead (the window's median step over
the unprofiled median, both by the session's clock: ``profiler_overhead_ratio``) and
``context["probes_ms"]``: each probe's own time, and all of them as a share of the wall
time ('*' on the ratio: the session judged its unprofiled figure too noisy to trust).
Goals: profiled step <= 1.3x the unprofiled one; all probes under 5% of the wall.

``--kept DIR [DIR ...]`` captures nothing: it reads the run folders that corpus runs kept
(``--keep``; benchmarks/captures holds some), jobs of many shapes, and gives each one's
wall time (``capture.started`` at the ``with`` block's entry to ``capture.ended``, written
after the probes: not the analysis and report), its probes' time and share, then the
median share, how many captures keep the probes under 5%, and each probe's part of all
the probes' time. Nothing is timed: run it beside anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "benchmarks", ROOT / "benchmarks" / "jobs"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from diagnose.capture.boundaries import StepFinder  # noqa: E402
from diagnose.capture.samplers import (  # noqa: E402
    DEFAULT_HZ,
    HostSampler,
    NvmlSampler,
    Sampler,
    SamplerThread,
)
from diagnose.capture.steps import Steps  # noqa: E402
from diagnose.session.hooks import Hooks  # noqa: E402


def workload(device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8192, 256, generator=g), torch.randint(0, 10, (8192,), generator=g))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    return model, opt, loader


def forever(loader: DataLoader) -> Iterator[Any]:
    while True:
        yield from loader


def profiled_steps(model: nn.Module, opt: torch.optim.Optimizer, it: Any, n: int,
                   device: torch.device, run_dir: Path) -> list[float]:
    """``n`` steps recorded by a WindowProfiler as a session sets it up (its lean defaults),
    after one warm-up step; each step's time excludes the profiler's own ``step()`` (the
    trace is written at the last one, between steps)."""
    from diagnose.capture.profiler import WindowProfiler

    prof = WindowProfiler(run_dir, wait=0, warmup=1, active=n)
    prof.start()
    times = []
    try:
        for i in range(n + 1):
            t = timed_steps(model, opt, it, 1, device)[0]
            if i:
                times.append(t)
            prof.step()
    finally:
        prof.stop()
    assert not prof.errors, prof.errors
    return times


def captured_steps(model: nn.Module, opt: torch.optim.Optimizer, it: Any, loader: DataLoader,
                   n: int, device: torch.device, run_dir: Path, hz: float) -> list[float]:
    """``n`` steps of the profiled window as a session records them: the WindowProfiler
    (one wait and one warm-up step) driven by the session's step hooks (Steps + Hooks), with
    the samplers on at ``hz`` (0: none); each step by the session's own clock, which leaves
    the profiler's work at a boundary out. Against ``profiled_steps``: what the capture adds
    to a profiled step beyond torch.profiler itself."""
    from diagnose.capture.profiler import WindowProfiler

    prof = WindowProfiler(run_dir, wait=1, warmup=1, active=n)
    steps = Steps(prof, finder=StepFinder([model]), after=10**9)
    hooks = Hooks(steps, [model], loader, [])
    st = SamplerThread(samplers(device), run_dir, hz) if hz else None
    try:
        if st is not None:
            st.start()
        prof.start()
        steps.start()
        for _ in range(3 * (n + 2)):  # the window, and room for a boundary found late
            timed_steps(model, opt, it, 1, device)
            if prof.finished:
                break
    finally:
        hooks.remove()
        prof.stop()
        if st is not None:
            st.stop()
    assert not prof.errors, prof.errors
    assert st is None or not st.errors, st.errors
    return [r[1] / 1e3 for r in steps.rows if r[0] == "active"]


def timed_steps(
    model: nn.Module, opt: torch.optim.Optimizer, it: Any, n: int, device: torch.device
) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        x, y = next(it)
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def samplers(device: torch.device) -> list[Sampler]:
    out: list[Sampler] = [HostSampler()]
    if device.type == "cuda":
        out.append(NvmlSampler(index=device.index or 0))
    return out


def tick_cost_us(device: torch.device, n: int = 500) -> float:
    """CPU time of one sampler tick (all samplers, plus the JSON line each writes)."""
    with tempfile.TemporaryDirectory() as tmp:
        st = SamplerThread(samplers(device), tmp, hz=1.0)
        ss = [s for s in st.samplers]
        for s in ss:
            s.open()
        st._fh = (Path(tmp) / "x.jsonl").open("w")
        for s in ss:
            s.sample()
        c0 = time.thread_time()
        for _ in range(n):
            for s in ss:
                st._write({"type": "sample", "sampler": s.name, "t": time.time(), **s.sample()})
        cost = (time.thread_time() - c0) / n * 1e6
        st._close_file()
        for s in ss:
            s.close()
    return cost


def _tiny_job() -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    """A step that is almost nothing but its boundaries: one-row batches, a 8x2 linear."""
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), DataLoader(data, batch_size=1)


def _tiny_block(model: nn.Module, opt: torch.optim.Optimizer, it: Any, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        x, y = next(it)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / n


def hook_cost_us(blocks: int = 20, n: int = 300) -> tuple[float, float]:
    """The session's per-step hooks (diagnose.session.hooks.Hooks on a step clock: the
    DataLoader ``__next__`` patch and its fetch/collate wraps, the optimizer pre/post hooks
    with the boundary's bookkeeping, the model's forward hooks and grad probe, the garbage
    collector's callbacks), in microseconds per step: a tiny loop's step with them installed
    minus without, blocks interleaved, medians. Returns (hooks us, tiny step us)."""
    model, opt, loader = _tiny_job()
    it = forever(loader)
    _tiny_block(model, opt, it, n)
    plain, hooked = [], []
    for b in range(blocks):
        for arm in (("plain", "hooks") if b % 2 == 0 else ("hooks", "plain")):
            if arm == "plain":
                plain.append(_tiny_block(model, opt, it, n))
                continue
            steps = Steps(None, finder=StepFinder([model]), after=10**9)
            hooks = Hooks(steps, [model], loader, [])
            steps.start()
            try:
                hooked.append(_tiny_block(model, opt, it, n))
            finally:
                hooks.remove()
    base = statistics.median(plain)
    return (statistics.median(hooked) - base) * 1e6, base * 1e6


def capture_job(name: str, out: str) -> tuple[float, dict[str, Any]]:
    """One capture of benchmarks/jobs/<name>: (wall seconds of the ``with`` block, its
    context.json)."""
    from jobs._run import make

    from diagnose import diagnose
    from diagnose.runfolder import load_context

    job = make(name)
    model, opt, loss_fn, loader = job["model"], job["optimizer"], job["loss_fn"], job["loader"]
    d = diagnose(model, loader, out_dir=out, print_report=False)
    t0 = time.perf_counter()
    with d:
        while not d.done:
            for x, y in loader:
                loss = loss_fn(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if d.done:
                    break
    wall = time.perf_counter() - t0
    ctx = load_context(d.run_dir) or {}
    return wall, ctx


def jobs_table(names: list[str], captures: int) -> None:
    """Per capture: the wall time, the profiler's overhead and the probes' own times."""
    from diagnose.metrics.context import context_metrics

    print(f"device: cpu, torch {torch.__version__}, CPUs {len(os.sched_getaffinity(0))}, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print(f"{'job':<16}{'wall s':>8}{'profiled/unprof (ms)':>22}{'probes ms':>11}{'share':>8}"
          "   largest probes (ms)")
    for name in names:
        for _ in range(captures):
            with tempfile.TemporaryDirectory() as tmp:
                wall, ctx = capture_job(name, tmp)
            ms = ctx.get("probes_ms") or {}
            total = sum(ms.values())
            m = context_metrics(ctx)
            prof, free = m.get("step_time_profiled_clock_median_ms"), m.get(
                "step_time_unprofiled_median_ms")
            top = ", ".join(f"{k} {v:.0f}" for k, v in sorted(ms.items(), key=lambda kv: -kv[1]))
            rtext = "-"
            if isinstance(prof, float) and isinstance(free, float) and free > 0:
                # '*': the session found its unprofiled figure too noisy to trust
                trusted = m.get("profiler_overhead_ratio") is not None
                rtext = f"{prof / free:.2f}x{'' if trusted else '*'} ({free:.0f} ms)"
            print(f"{name:<16}{wall:>8.2f}{rtext:>22}{total:>11.0f}"
                  f"{total / 1e3 / wall * 100:>7.1f}%   {top}")


#: the goal: all the probes under this share of the capture's wall time
PROBES_GOAL = 0.05


def kept_capture(ctx_path: Path) -> tuple[float, float, dict[str, float], float | None] | None:
    """(wall s, probes s, {probe: ms}, the profiled step over the unprofiled one by the
    session's clock or None) of one kept run folder's context.json; None where it lacks
    the capture's times or the probes' (an older capture, a job with no probe run)."""
    import json

    from diagnose.metrics.context import context_metrics

    try:
        ctx: dict[str, Any] = json.loads(ctx_path.read_text())
    except (OSError, ValueError):
        return None
    cap = ctx.get("capture") or {}
    probes = ctx.get("probes_ms") or {}
    start, end = cap.get("started"), cap.get("ended")
    if not isinstance(start, int | float) or not isinstance(end, int | float) or not probes:
        return None
    wall = float(end) - float(start)
    took = {k: float(v) for k, v in probes.items() if isinstance(v, int | float)}
    if wall <= 0 or not took:
        return None
    m = context_metrics(ctx)
    prof, free = m.get("step_time_profiled_clock_median_ms"), m.get(
        "step_time_unprofiled_median_ms")
    ratio = prof / free if isinstance(prof, float) and isinstance(free, float) and free > 0 \
        else None
    return wall, sum(took.values()) / 1e3, took, ratio


def kept_table(dirs: list[Path]) -> None:
    """Per kept capture under ``dirs``: its wall time, its probes' time and share, the
    largest probes; then the median share, the captures under the goal, each probe's part."""
    rows = []
    for d in dirs:
        for ctx in sorted(d.rglob("context.json")):
            got = kept_capture(ctx)
            if got is not None:
                rows.append((str(ctx.parent.relative_to(d)), *got))
    if not rows:
        bad_input("no run folder with the probes' times under " + ", ".join(map(str, dirs)))
    print(f"{'capture':<52} {'wall s':>6} {'prof/unprof':>11} {'probes s':>8} {'share':>6}  "
          "largest probes (ms)")
    for name, wall, probes, took, ratio in sorted(rows, key=lambda r: r[2] / r[1]):
        top = sorted(took.items(), key=lambda kv: -kv[1])[:3]
        said = "-" if ratio is None else f"{ratio:.2f}x"
        print(f"{name[:52]:<52} {wall:6.1f} {said:>11} {probes:8.2f} {probes / wall:6.1%}  "
              + ", ".join(f"{k} {v:.0f}" for k, v in top))
    shares = [p / w for _, w, p, _, _ in rows]
    ratios = [r for *_, r in rows if r is not None]
    under = sum(s <= PROBES_GOAL for s in shares)
    total: dict[str, float] = {}
    for *_, took, _ in rows:
        for k, v in took.items():
            total[k] = total.get(k, 0.0) + v
    whole = sum(total.values())
    print(f"\ncaptures: {len(rows)}, the probes under {PROBES_GOAL:.0%} of the wall in {under} "
          f"of {len(rows)}; the probes' share: median {statistics.median(shares):.1%}, least "
          f"{min(shares):.1%}, most {max(shares):.1%}"
          + (f"; profiled step / unprofiled: median {statistics.median(ratios):.2f}x "
             f"({sum(r <= 1.3 for r in ratios)} of {len(ratios)} at most 1.3x)" if ratios else ""))
    print("each probe's part of all the probes' time: " + ", ".join(
        f"{k} {v / whole:.0%}" for k, v in sorted(total.items(), key=lambda kv: -kv[1])
        if v / whole >= 0.005))


def bad_input(why: str) -> None:
    """One line on stderr and exit status 2."""
    print(f"capture_overhead.py: {why}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", nargs="+", default=None,
                    help="capture these benchmarks/jobs instead (profiler and probe costs)")
    ap.add_argument("--kept", nargs="+", type=Path, default=None, metavar="DIR",
                    help="read the run folders kept under these folders; capture nothing")
    ap.add_argument("--captures", type=int, default=3, help="captures per job (--jobs)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per arm per round")
    ap.add_argument("--hz", type=float, nargs="+", default=[DEFAULT_HZ, 50.0])
    ap.add_argument("--profiled", action="store_true",
                    help="add an arm whose steps run under the profiler window")
    ap.add_argument("--workload", default=None,
                    help="a job of benchmarks/jobs to time instead of the MLP (CPU)")
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.captures < 1 or min(args.hz) <= 0:
        bad_input(f"need --rounds, --steps, --captures >= 1 and --hz > 0 (got --rounds "
                  f"{args.rounds}, --steps {args.steps}, --captures {args.captures}, "
                  f"--hz {' '.join(f'{h:g}' for h in args.hz)})")
    if args.kept:
        missing = [d for d in args.kept if not d.is_dir()]
        if missing:
            bad_input(f"not a folder: {missing[0]}")
        kept_table(args.kept)
        return
    if args.jobs:
        from jobs._run import job_names

        unknown = sorted(set(args.jobs) - set(job_names([])))
        if unknown:
            bad_input(f"no such job: {', '.join(unknown)} "
                      f"(benchmarks/jobs has {', '.join(job_names([]))})")
        jobs_table(args.jobs, args.captures)
        return

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.workload:
        from jobs._run import job_names, make

        if args.workload not in job_names([]):
            bad_input(f"no such job: {args.workload} "
                      f"(benchmarks/jobs has {', '.join(job_names([]))})")
        job = make(args.workload)
        model, opt, loader = job["model"], job["optimizer"], job["loader"]
    else:
        model, opt, loader = workload(device)
    it = forever(loader)
    timed_steps(model, opt, it, 10, device)  # warm up allocator, caches, thread pools

    arms = ["plain"] + [f"samplers {hz:g} Hz" for hz in args.hz] + ["hooks"] + (
        ["profiled", "capture"] if args.profiled else [])
    medians: dict[str, list[float]] = {a: [] for a in arms}
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = arms if r % 2 == 0 else arms[::-1]  # alternate who goes first
            for arm in order:
                if arm == "plain":
                    t = timed_steps(model, opt, it, args.steps, device)
                elif arm == "hooks":  # the session's step hooks on a step clock
                    steps = Steps(None, finder=StepFinder([model]), after=10**9)
                    hooks = Hooks(steps, [model], loader, [])
                    steps.start()
                    try:
                        t = timed_steps(model, opt, it, args.steps, device)
                    finally:
                        hooks.remove()
                elif arm in ("profiled", "capture"):
                    d = Path(tmp) / f"{arm}{r}"
                    d.mkdir()
                    t = (profiled_steps(model, opt, it, args.steps, device, d)
                         if arm == "profiled" else
                         captured_steps(model, opt, it, loader, args.steps, device, d, args.hz[0]))
                else:
                    hz = float(arm.split()[1])
                    st = SamplerThread(samplers(device), Path(tmp) / f"r{r}-{hz:g}", hz)
                    (Path(tmp) / f"r{r}-{hz:g}").mkdir()
                    with st:
                        t = timed_steps(model, opt, it, args.steps, device)
                    assert not st.errors, st.errors
                    rows += st.rows
                medians[arm].append(statistics.median(t))

    if rows == 0:
        bad_input(f"the samplers never ticked: {args.steps} steps of this workload end before "
                  f"a tick at {min(args.hz):g} Hz; give more --steps")
    base = medians["plain"]
    step_ms = statistics.median(base) * 1e3
    print(
        f"device: {device}, torch {torch.__version__}, CPUs {len(os.sched_getaffinity(0))}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"workload: {args.workload or 'MLP 256-1024-1024-10, AdamW, batch 64'}")
    print(f"{args.rounds} rounds x {args.steps} steps per arm, interleaved\n")
    print(f"{'in the loop':<18}{'step ms':>10}{'overhead % (median)':>22}{'IQR':>18}")
    for arm in arms:
        m = statistics.median(medians[arm]) * 1e3
        if arm == "plain":
            print(f"{arm:<18}{m:>10.2f}{'-':>22}{'-':>18}")
            continue
        rel = sorted((b - a) / a * 100 for a, b in zip(base, medians[arm], strict=True))
        q = statistics.quantiles(rel, n=4) if len(rel) > 1 else [rel[0]] * 3
        print(
            f"{arm:<18}{m:>10.2f}{statistics.median(rel):>+22.2f}{f'[{q[0]:+.2f}, {q[2]:+.2f}]':>18}"
        )
    if "profiled" in medians:
        print()
        for over, under, what in (("profiled", "plain", " (goal <= 1.3x)"),
                                  ("capture", "plain", " (goal <= 1.3x)"),
                                  ("capture", "profiled", ": the capture beyond torch.profiler")):
            ratios = sorted(b / a for a, b in zip(medians[under], medians[over], strict=True))
            q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            print(f"{over} step / {under} step: {statistics.median(ratios):.3f}x median of the "
                  f"rounds' paired ratios, IQR [{q[0]:.3f}, {q[2]:.3f}]{what}")
    print(f"\n{'timed apart':<18}{'cost':>14}{'share':>30}")
    tick = tick_cost_us(device)
    for hz in args.hz:
        print(
            f"{f'sampler {hz:g} Hz':<18}{f'{tick:.0f} us/tick':>14}"
            f"{tick * hz / 1e6 * 100:>29.3f}%  of one core's time"
        )
    us, tiny = hook_cost_us()
    print(
        f"{'step hooks':<18}{f'{us:.1f} us/step':>14}{us / (step_ms * 1e3) * 100:>29.3f}%  "
        f"of a {step_ms:.1f} ms step (a {tiny:.0f} us step's, with and without them)"
    )


if __name__ == "__main__":
    main()
