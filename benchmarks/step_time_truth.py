"""Is the step time the report leads with the one the job has without the profiler?

The same training loop runs, in alternating rounds, (a) plain (no torch-diagnose at all,
timed here with a bare clock: per-step median on the CPU, the mean over the steps between
two device synchronisations on CUDA) and
(b) inside ``with diagnose(...)``. For (b) the table shows what the report prints: the
unprofiled median (the session's own clock, steps outside the window) and the profiled
window's median (the trace), each as a ratio to the plain median of the same round.

    python benchmarks/step_time_truth.py [--rounds 5] [--workload mlp|input|both]

Goal: unprofiled / plain within a few percent; profiled / plain is what the profiler costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from diagnose import diagnose  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workloads import Augmented  # noqa: E402


def workload(name: str, dev: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    torch.manual_seed(0)
    dim = 1024 if dev.type == "cuda" else 256
    model = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, 4 * dim),
                          nn.GELU(), nn.Linear(4 * dim, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n = 64 * 64
    ds = Augmented(n, dim) if name == "input" else TensorDataset(
        torch.randn(n, dim), torch.randint(0, 10, (n,)))
    return model, opt, DataLoader(ds, batch_size=64, shuffle=True)


def _step(model: nn.Module, opt: Any, x: Any, y: Any, dev: torch.device) -> None:
    x, y = x.to(dev), y.to(dev)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def plain(name: str, dev: torch.device, steps: int) -> float:
    """Per-step median on the CPU; on CUDA the mean over ``steps`` with one synchronisation
    at the end (a sync per step would add its own cost; the host runs ahead otherwise)."""
    model, opt, loader = workload(name, dev)
    it = iter(loader)
    for _ in range(3):  # warm-up steps left out, as the session leaves out its first
        x, y = next(it)
        _step(model, opt, x, y, dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            x, y = next(it)
            _step(model, opt, x, y, dev)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / steps
    times: list[float] = []
    for _ in range(steps):
        t0 = time.perf_counter()
        x, y = next(it)
        _step(model, opt, x, y, dev)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def diagnosed(name: str, dev: torch.device) -> dict[str, Any]:
    model, opt, loader = workload(name, dev)
    with tempfile.TemporaryDirectory() as tmp, diagnose(
            model, loader, out_dir=tmp, print_report=False, sample_hz=0) as d:
        for x, y in loader:
            _step(model, opt, x, y, dev)
            if d.done:
                break
    m = d.report.metrics
    return {"unprofiled": m["step_time_unprofiled_median_ms"],
            "profiled": m["step_time_median_ms"], "ratio": m["profiler_overhead_ratio"],
            "dl": m.get("dataloader_wait_unprofiled_share"), "dl_prof": m.get("dataloader_share")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workload", choices=("mlp", "input", "both"), default="both")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    names = ("mlp", "input") if args.workload == "both" else (args.workload,)
    print(f"# step time truth: {dev} "
          f"({torch.cuda.get_device_name() if dev.type == 'cuda' else 'CPU'}), torch "
          f"{torch.__version__}, {args.rounds} rounds")
    print(f"{'workload':9} {'round':>5} {'plain ms':>9} {'unprof ms':>9} {'unprof/plain':>12} "
          f"{'prof ms':>8} {'prof/plain':>10} {'overhead':>8} {'DL unprof':>9} {'DL prof':>8}")
    for name in names:
        rel = []
        for r in range(args.rounds):
            p = plain(name, dev, steps=12)
            d = diagnosed(name, dev)
            rel.append(d["unprofiled"] / p)
            print(f"{name:9} {r:5d} {p:9.2f} {d['unprofiled']:9.2f} {d['unprofiled'] / p:12.3f} "
                  f"{d['profiled']:8.2f} {d['profiled'] / p:10.3f} {d['ratio'] or 0:8.2f} "
                  f"{d['dl'] or 0:9.1%} {d['dl_prof'] or 0:8.1%}")
        print(f"{name:9} median unprofiled/plain {statistics.median(rel):.3f} "
              f"(min {min(rel):.3f}, max {max(rel):.3f})")


if __name__ == "__main__":
    main()
