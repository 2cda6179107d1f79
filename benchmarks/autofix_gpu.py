"""Autofix on a GPU: what each planted bottleneck's finding predicts, and what autofix measures.

Three workloads, each with one planted bottleneck, run ``diagnose(...).autofix()``:

- ``pageable``: large batches from pageable memory, blocking ``.to(device)`` (TR001 ->
  pin_memory + non_blocking)
- ``fp32``: a GEMM-heavy MLP in fp32 on a tensor-core GPU (PR001 -> AMP)
- ``input``: per-sample CPU work in the training process (IN001 -> num_workers)

For each: the step model's replay error, the findings (severity, the first fix's
predicted speedup), autofix's decisions, and a table of every tried decision's predicted
speedup beside the measured one (with its 95% interval), then the kept changes measured
together beside the model's predicted tuned step.

Also the samples that train in a loop autofix can rebuild (``make_job(device)`` in
samples/slow_loader.py, pageable_copy.py, small_kernels.py, healthy.py; healthy: nothing
may be kept). sync_in_loop.py's sync is in its own loop, which autofix does not run.

    python benchmarks/autofix_gpu.py [--workload pageable|fp32|input|slow_loader|...|all]
                                     [--budget 90]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
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
from _bench import DECISION_HEAD, DecisionTally, before_after  # noqa: E402
from _workloads import Augmented  # noqa: E402

from diagnose.stepmodel.step import step_model_line  # noqa: E402

WORKLOADS = ("pageable", "fp32", "input")
SAMPLES = ("slow_loader", "pageable_copy", "small_kernels", "healthy")


def build(name: str, dev: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    if name in SAMPLES:
        sys.path.insert(0, str(ROOT / "samples"))
        model, opt, loader = importlib.import_module(name).make_job(dev)
        return model, opt, loader
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if name == "pageable":
        ds = TensorDataset(torch.randn(1024, 3, 128, 128, generator=g),
                           torch.randint(0, 10, (1024,), generator=g))
        model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, 10))
        loader = DataLoader(ds, batch_size=128, shuffle=True)
    elif name == "fp32":
        dim = 4096
        ds = TensorDataset(torch.randn(64 * 256, dim, generator=g),
                           torch.randint(0, 10, (64 * 256,), generator=g))
        model = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim), nn.GELU(),
                              nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, 10))
        loader = DataLoader(ds, batch_size=256, shuffle=True, pin_memory=True)
    else:
        ds = Augmented(64 * 128, 512, rounds=40)
        model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 10))
        loader = DataLoader(ds, batch_size=128, shuffle=True)
    model = model.to(dev)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4), loader


def run(name: str, dev: torch.device, budget: float, tally: DecisionTally,
        keep: Path | None = None, trials: int = 8) -> list[str]:
    model, opt, loader = build(name, dev)
    print(f"\n## {name}")
    with tempfile.TemporaryDirectory() as tmp:
        out = keep / name if keep is not None else Path(tmp)
        d = diagnose(model, loader, optimizer=opt, loss_fn=nn.functional.cross_entropy,
                     out_dir=out, print_report=False)
        r = d.autofix(budget_s=budget, max_trials=trials, out_dir=out)
    diag = r.diagnosis
    if diag is not None:
        st = diag.step_time()
        print(f"baseline step {st['median_ms']} ms ({st['measured']}); profiled "
              f"{st['profiled_median_ms']} ms")
        print(f"step model: {step_model_line(diag.step_model, diag.step_model_why)}")
        for f in diag.findings:
            p = next((x.get("predicted") for x in f.to_json().get("fixes") or []
                      if isinstance(x, dict) and x.get("predicted")), None)
            pred = f"predicted {p['speedup']:.2f}x" if p else "no prediction"
            print(f"  {f.severity:8} {f.rule} {f.category:10} {pred:<18} "
                  f"fixes={','.join(f.fixes)}  {f.message[:100]}")
    print(r.render_text(width=150))
    return tally.rows(name, 1, r) + [f"{name:<17}   1  kept: "
                                     f"{r.original.describe_change(r.best) or 'nothing'}; "
                                     f"{before_after(r)}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="all",
                    help=f"all, or a comma-separated list of {', '.join((*WORKLOADS, *SAMPLES))}")
    ap.add_argument("--budget", type=float, default=90.0)
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep each workload's folder (its capture, autofix.json) under DIR")
    ap.add_argument("--trials", type=int, default=8,
                    help="at most this many trials each (0: the diagnosis and its predictions)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"# autofix on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'CPU'}, "
          f"torch {torch.__version__}")
    tally, lines = DecisionTally(), []
    names = (*WORKLOADS, *SAMPLES) if args.workload == "all" else tuple(args.workload.split(","))
    for bad in set(names) - {*WORKLOADS, *SAMPLES}:
        ap.error(f"unknown workload {bad!r}")
    for name in names:
        lines += run(name, dev, args.budget, tally, args.keep, args.trials)
    print("\n## predicted beside measured\n" + DECISION_HEAD + "\n" + "-" * len(DECISION_HEAD))
    print("\n".join(lines + [""] + tally.totals()))


if __name__ == "__main__":
    main()
