"""Capture overhead: the same training loop with and without the background samplers.

Arms run interleaved in short blocks (A B C, C B A, ...) for many rounds so drift and
other load on the machine hit every arm alike; each block times ``--steps`` steps and
keeps their median. The overhead is the paired per-round difference to the plain arm,
as a percentage of the plain step (median over rounds, with the interquartile range).
Two costs are also timed apart, free of that noise: one sampler tick (CPU time of the
sampler thread per tick, and what it comes to at each rate), and the step hooks
(DataLoader ``__next__`` wrapper + optimizer post-hook, per step).

    python benchmarks/capture_overhead.py [--rounds 30] [--steps 10] [--hz 10 50]

Goal: under 1% of step time at the default rate.
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from diagnose.capture.samplers import (  # noqa: E402
    DEFAULT_HZ,
    HostSampler,
    NvmlSampler,
    Sampler,
    SamplerThread,
)
from diagnose.session import Session  # noqa: E402


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


def hook_cost_us(
    loader: DataLoader, model: nn.Module, opt: torch.optim.Optimizer, n: int = 20000
) -> float:
    """Cost of the session's two per-step hooks, in microseconds per step."""
    s = Session(model, loader, sample_hz=0)
    s._entered = True
    s._param_ids = frozenset(id(p) for p in model.parameters())
    s._profiler = None  # time the hooks' own bookkeeping, not torch.profiler's step
    it = iter(loader)
    t0 = time.perf_counter()
    for _ in range(n):
        s._on_next(it)
        s._on_optimizer_step(opt, (), {})
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per arm per round")
    ap.add_argument("--hz", type=float, nargs="+", default=[DEFAULT_HZ, 50.0])
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, opt, loader = workload(device)
    it = forever(loader)
    timed_steps(model, opt, it, 10, device)  # warm up allocator, caches, thread pools

    arms = ["plain"] + [f"samplers {hz:g} Hz" for hz in args.hz]
    medians: dict[str, list[float]] = {a: [] for a in arms}
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = arms if r % 2 == 0 else arms[::-1]  # alternate who goes first
            for arm in order:
                if arm == "plain":
                    t = timed_steps(model, opt, it, args.steps, device)
                else:
                    hz = float(arm.split()[1])
                    st = SamplerThread(samplers(device), Path(tmp) / f"r{r}-{hz:g}", hz)
                    (Path(tmp) / f"r{r}-{hz:g}").mkdir()
                    with st:
                        t = timed_steps(model, opt, it, args.steps, device)
                    assert not st.errors, st.errors
                    rows += st.rows
                medians[arm].append(statistics.median(t))

    assert rows > 0, "the samplers never ticked"
    base = medians["plain"]
    step_ms = statistics.median(base) * 1e3
    print(
        f"device: {device}, torch {torch.__version__}, CPUs {len(os.sched_getaffinity(0))}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
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
    print(f"\n{'timed apart':<18}{'cost':>14}{'share':>30}")
    tick = tick_cost_us(device)
    for hz in args.hz:
        print(
            f"{f'sampler {hz:g} Hz':<18}{f'{tick:.0f} us/tick':>14}"
            f"{tick * hz / 1e6 * 100:>29.3f}%  of one core's time"
        )
    us = hook_cost_us(loader, model, opt)
    print(
        f"{'step hooks':<18}{f'{us:.2f} us/step':>14}{us / (step_ms * 1e3) * 100:>29.3f}%  "
        f"of a {step_ms:.1f} ms step"
    )


if __name__ == "__main__":
    main()
