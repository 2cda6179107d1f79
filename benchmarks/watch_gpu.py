"""The watch on a CUDA GPU: its overhead on GPU steps, joules per step from NVML's energy
counter before and after a change autofix keeps (AMP, bf16), and a capture taken at an
alarm on a GPU trace.

1. Overhead: an MLP trained on the GPU (``--width``, ``--batch``), plain against watched
   (captures off), in interleaved rounds of ``--steps`` steps; throughput over each block
   (the device drained at both ends); the median of the per-round ratios.
2. Energy: the same job watched for ``--energy-s`` seconds in fp32, then with bf16 autocast
   (the AMP fix): J/step and J/sample from windows of the energy counter.
3. Alarm: a watched run that switches from bf16 to fp32 halfway: the step-time alarm, its
   capture's findings and what changed against the baseline window.

    python benchmarks/watch_gpu.py [--rounds 7] [--steps 300] [--energy-s 10] [--json F]

Needs a CUDA device (and NVML for the energy); exits 2 without one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def job(width: int, batch: int) -> tuple[Any, Any, Any, Any]:
    """The model, its optimizer, a loader of batch numbers and the batches (on the GPU:
    the steps are the device's work, not the input pipeline's)."""
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = (torch.randn(8, batch, width, device="cuda"),
            torch.randint(0, 10, (8, batch), device="cuda"))
    loader = torch.utils.data.DataLoader(range(8), batch_size=None, shuffle=True)
    return model, opt, loader, data


class Loop:
    """The training loop, as a user writes it (``amp``: bf16 autocast, switchable)."""

    def __init__(self, model: Any, opt: Any, loader: Any, data: Any) -> None:
        self.model, self.opt, self.loader, self.data = model, opt, loader, data
        self.amp = False

    def run(self, steps: int | None = None, seconds: float | None = None,
            on_step: Any = None) -> float:
        """Steps a second (device drained at both ends)."""
        import torch

        torch.cuda.synchronize()
        t0, done = time.perf_counter(), 0
        while True:
            for i in self.loader:
                x, y = self.data[0][i], self.data[1][i]
                ctx = (torch.autocast("cuda", dtype=torch.bfloat16) if self.amp
                       else contextlib.nullcontext())
                with ctx:
                    loss = torch.nn.functional.cross_entropy(self.model(x), y)
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                done += 1
                if on_step is not None:
                    on_step(done)
                if (steps is not None and done >= steps) or (
                        seconds is not None and time.perf_counter() - t0 >= seconds):
                    torch.cuda.synchronize()
                    return done / (time.perf_counter() - t0)


def overhead(loop: Loop, rounds: int, steps: int, out: str) -> dict[str, Any]:
    from diagnose import watch

    loop.run(steps=50)  # warm-up: cuBLAS, the allocator
    ratios = []
    for r in range(rounds):
        got = {}
        for arm in (("plain", "watched") if r % 2 == 0 else ("watched", "plain")):
            if arm == "plain":
                got[arm] = loop.run(steps=steps)
            else:
                with watch(loop.model, loop.loader, out_dir=out, baseline=False,
                           max_captures=0, print_summary=False, progress_s=None):
                    got[arm] = loop.run(steps=steps)
        ratios.append(got["plain"] / got["watched"])
        print(f"round {r + 1}: plain {got['plain']:.1f} steps/s, watched "
              f"{got['watched']:.1f} steps/s, ratio {ratios[-1]:.4f}", flush=True)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"median_ratio": statistics.median(ratios), "iqr": [q[0], q[2]],
            "ratios": ratios, "step_ms": 1e3 / got["plain"]}


def energy(loop: Loop, seconds: float, out: str) -> dict[str, Any]:
    from diagnose import watch

    res = {}
    for name, amp in (("fp32", False), ("bf16 autocast", True)):
        loop.amp = amp
        loop.run(steps=30)
        with watch(loop.model, loop.loader, out_dir=out, baseline=False, max_captures=0,
                   print_summary=False, progress_s=None, energy_window_s=2.0) as w:
            rate = loop.run(seconds=seconds)
        e = w.to_json()["energy"]
        res[name] = {"steps_per_s": rate, **{k: e[k] for k in ("j_per_step", "j_per_sample",
                                                               "joules", "steps", "windows",
                                                               "why")}}
        print(f"{name}: {rate:.1f} steps/s, {e['j_per_step']} J/step, {e['j_per_sample']} "
              f"J/sample over {e['windows']} windows ({e['why'] or 'measured'})", flush=True)
    loop.amp = False
    return res


def alarm(loop: Loop, seconds: float, out: str) -> dict[str, Any]:
    from diagnose import watch

    loop.amp = True
    loop.run(steps=30)
    box: dict[str, Any] = {}
    with watch(loop.model, loop.loader, out_dir=out, print_summary=True, progress_s=None,
               capture_interval_s=0) as w:
        def switch(done: int) -> None:
            if "at" not in box and w.baseline is not None and w.testing and done > 200:
                loop.amp = False  # the AMP change undone: steps slow down
                box["at"] = w.steps
        loop.run(seconds=seconds, on_step=switch)
    loop.amp = False
    at = box.get("at")
    found = [a for a in w.alarms if at is not None and a.step >= at]
    res: dict[str, Any] = {"switched_at": at, "alarms": [a.line() for a in w.alarms]}
    if found:
        a = found[0]
        res.update(delay=a.step - at, capture=a.capture_dir, why=a.capture_why,
                   findings=[(f.rule, f.severity) for f in (a.capture.findings if a.capture
                                                             else [])],
                   changed=a.changed)
    print(json.dumps(res, indent=1), flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--energy-s", type=float, default=10.0)
    ap.add_argument("--alarm-s", type=float, default=20.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("watch_gpu: no CUDA device", file=sys.stderr)
        return 2
    loop = Loop(*job(args.width, args.batch))
    with tempfile.TemporaryDirectory(prefix="watch-gpu-") as out:
        res = {"device": torch.cuda.get_device_name(),
               "overhead": overhead(loop, args.rounds, args.steps, out),
               "energy": energy(loop, args.energy_s, out),
               "alarm": alarm(loop, args.alarm_s, out)}
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
