"""Autofix on a GPU: what each planted bottleneck's finding predicts, and what autofix measures.

Three workloads, each with one planted bottleneck, run ``diagnose(...).autofix()``:

- ``pageable``: large batches from pageable memory, blocking ``.to(device)`` (TR001 ->
  pin_memory + non_blocking)
- ``fp32``: a GEMM-heavy MLP in fp32 on a tensor-core GPU (PR001 -> AMP)
- ``input``: per-sample CPU work in the training process (IN001 -> num_workers)

For each: the findings (severity, estimated gain), autofix's decisions, and a last line
with the finding's predicted saving next to the measured before/after.

    python benchmarks/autofix_gpu.py [--workload pageable|fp32|input|all] [--budget 90]
"""

from __future__ import annotations

import argparse
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
from _workloads import Augmented  # noqa: E402


def build(name: str, dev: torch.device) -> tuple[nn.Module, Any, DataLoader]:
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


def run(name: str, dev: torch.device, budget: float) -> None:
    model, opt, loader = build(name, dev)
    print(f"\n## {name}")
    with tempfile.TemporaryDirectory() as tmp:
        d = diagnose(model, loader, optimizer=opt, loss_fn=nn.functional.cross_entropy,
                     out_dir=tmp, print_report=False)
        r = d.autofix(budget_s=budget, max_trials=8, out_dir=tmp)
    diag = r.diagnosis
    if diag is not None:
        st = diag.step_time()
        print(f"baseline step {st['median_ms']} ms ({st['measured']}); profiled "
              f"{st['profiled_median_ms']} ms")
        for f in diag.findings:
            print(f"  {f.severity:8} {f.rule} {f.category:10} gain<={f.estimated_gain} "
                  f"fixes={','.join(f.fixes)}  {f.message[:110]}")
    print(r.render_text(width=150))
    if r.final is not None and r.final.interval is not None:
        iv = r.final.interval
        saved = 1 - 1 / iv.ratio
        named = sorted({r.named.get(k, "?") for k in r.kept})
        est = max((f.estimated_gain or 0 for f in (diag.findings if diag else ())
                   if f.rule in named), default=None)
        print(f"predicted vs measured ({name}): findings {','.join(named)} estimated <= "
              f"{est if est is None else f'{est:.0%}'} of the step; measured {saved:.0%} saved "
              f"({iv.ratio:.2f}x [{iv.lo:.2f}, {iv.hi:.2f}])")
    else:
        print(f"predicted vs measured ({name}): nothing kept")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("pageable", "fp32", "input", "all"), default="all")
    ap.add_argument("--budget", type=float, default=90.0)
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"# autofix on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'CPU'}, "
          f"torch {torch.__version__}")
    for name in (("pageable", "fp32", "input") if args.workload == "all" else (args.workload,)):
        run(name, dev, args.budget)


if __name__ == "__main__":
    main()
