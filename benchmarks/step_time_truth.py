"""Is the step time the report leads with the one the job has without the profiler?

The same training loop runs, interleaved in each round: (a) plain (no torch-diagnose at
all, timed here with a bare clock: per-step median on the CPU, the mean over the steps
between two device synchronisations on CUDA), (b) inside ``with diagnose(...)``, and (a)
plain again; the reference is the mean of the two plain medians, so a machine whose pace
drifts during the round does not favour either side. For (b) the table shows what the
report prints: the unprofiled median (the session's own clock: the ``wait`` steps before
the window and the steps after it), its p10-p90 spread and whether the report trusts it,
the share of those steps the training thread waited for a CPU other processes held
("busy"), and the profiled window's median (the trace), each as a ratio to the plain
reference. A
round whose two plain timings differ by more than twice the tolerance (someone else's job
changed the machine's pace) has no reference to compare with: it is shown, marked
unsteady, and run again (``--retries``).

    python benchmarks/step_time_truth.py [--rounds 5] [--workload mlp|input|ahead|both]
        [--tolerance 0.15] [--retries 3]

``ahead`` (CUDA only) is samples/healthy.py's GPU job: bf16 GEMMs that keep the GPU busy
for several ms a step, batches already on the device, nothing that waits for a result, so
the host runs ahead of the GPU and its own steps time only the launches until the launch
queue fills. The session's clock drains the device once at the end of the steps it times
after the window (diagnose.capture.steps) and reports the block's pace.

Goal (on a busy 2-CPU machine, the CPU workloads): unprofiled / plain within 15% in every
round; profiled / plain is what the profiler costs.
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

#: a capture whose training thread waited less than this share of its timed steps for a CPU
#: ran on a quiet machine
QUIET = 0.05


def workload(name: str, dev: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    if name == "ahead":
        sys.path.insert(0, str(ROOT / "samples"))
        from healthy import make_job

        return make_job(dev)
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


def _batches(loader: DataLoader) -> Any:
    """The loader's batches, epoch after epoch (a short loader is passed over again)."""
    while True:
        yield from loader


def plain(name: str, dev: torch.device, steps: int) -> float:
    """Per-step median on the CPU; on CUDA the mean over ``steps`` with one synchronisation
    at the end (a sync per step would add its own cost; the host runs ahead otherwise)."""
    model, opt, loader = workload(name, dev)
    it = _batches(loader)
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
    """One capture with the defaults a user gets (``sample_hz`` included)."""
    model, opt, loader = workload(name, dev)
    with tempfile.TemporaryDirectory() as tmp, diagnose(
            model, loader, out_dir=tmp, print_report=False) as d:
        for x, y in _batches(loader):
            _step(model, opt, x, y, dev)
            if d.done:
                break
    m = d.report.metrics
    return {"unprofiled": m["step_time_unprofiled_median_ms"],
            "profiled": m["step_time_median_ms"], "ratio": m["profiler_overhead_ratio"],
            "p10": m["step_time_unprofiled_p10_ms"], "p90": m["step_time_unprofiled_p90_ms"],
            "n": m["step_time_unprofiled_steps"],
            "reliable": m["step_time_unprofiled_reliable"],
            "busy": m.get("step_cpu_wait_unprofiled_share"),
            "dl": m.get("dataloader_wait_unprofiled_share"), "dl_prof": m.get("dataloader_share")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workload", choices=("mlp", "input", "ahead", "both"), default="both")
    ap.add_argument("--tolerance", type=float, default=0.15,
                    help="a round is within the goal when |unprofiled/plain - 1| <= this")
    ap.add_argument("--retries", type=int, default=3,
                    help="run a round again (at most this often) when the plain timings "
                         "before and after its capture differ by more than 2x the tolerance")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.workload == "ahead" and dev.type != "cuda":
        sys.exit("step_time_truth: --workload ahead needs a CUDA device (a CPU host cannot "
                 "run ahead of itself)")
    names = ("mlp", "input") if args.workload == "both" else (args.workload,)
    print(f"# step time truth: {dev} "
          f"({torch.cuda.get_device_name() if dev.type == 'cuda' else 'CPU'}), torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds, "
          f"plain / diagnose / plain interleaved")
    print(f"{'workload':9} {'round':>5} {'plain ms':>9} {'steady':>6} {'tool ms':>8} "
          f"{'tool/plain':>10} {'steps':>5} {'p10-p90 ms':>13} {'trusted':>7} {'busy':>5} "
          f"{'prof ms':>8} "
          f"{'prof/plain':>10} {'overhead':>8} {'DL unprof':>9} {'DL prof':>8}")
    for name in names:
        rel, quiet, unsteady = [], [], 0
        for r in range(args.rounds):
            for attempt in range(args.retries + 1):
                before = plain(name, dev, steps=20)
                d = diagnosed(name, dev)
                after = plain(name, dev, steps=20)
                p = (before + after) / 2
                # the machine's own pace moved between the two plain timings around the
                # capture: no reference to compare with (run the round again)
                steady = abs(before - after) / p <= 2 * args.tolerance
                ratio = "-" if d["ratio"] is None else f"{d['ratio']:.2f}"
                print(f"{name:9} {r:5d} {p:9.2f} {'yes' if steady else 'no':>6} "
                      f"{d['unprofiled']:8.2f} {d['unprofiled'] / p:10.3f} "
                      f"{d['n']:5d} {d['p10']:6.1f}-{d['p90']:<6.1f} "
                      f"{'yes' if d['reliable'] else 'no':>7} "
                      f"{'-' if d['busy'] is None else format(d['busy'], '.0%'):>5} "
                      f"{d['profiled']:8.2f} "
                      f"{d['profiled'] / p:10.3f} {ratio:>8} "
                      f"{d['dl'] or 0:9.1%} {d['dl_prof'] or 0:8.1%}", flush=True)
                if steady or attempt == args.retries:
                    rel.append(d["unprofiled"] / p)
                    if d["busy"] is not None and d["busy"] < QUIET:
                        quiet.append(d["unprofiled"] / p)
                    break
                unsteady += 1
        ok = sum(abs(x - 1) <= args.tolerance for x in rel)
        print(f"{name:9} tool/plain median {statistics.median(rel):.3f} (min {min(rel):.3f}, "
              f"max {max(rel):.3f}); within {args.tolerance:.0%}: {ok} of {len(rel)} captures "
              f"({unsteady} unsteady round{'s' if unsteady != 1 else ''} run again); quiet "
              f"captures (busy < {QUIET:.0%}): "
              f"{sum(abs(x - 1) <= args.tolerance for x in quiet)} of {len(quiet)} within")


if __name__ == "__main__":
    main()
