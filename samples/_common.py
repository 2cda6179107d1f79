"""What every sample shares: finding torch-diagnose in a source checkout, and the CLI.

Importing this module first lets ``from diagnose import diagnose`` work when the
samples run from a checkout where the package is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if importlib.util.find_spec("diagnose") is None:  # a source checkout, not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cli(main: Callable[..., Any], doc: str | None) -> None:
    """``python samples/<name>.py [--out DIR] [--steps N]``."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="folder for the run folder (default diagnose-runs/)")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps")
    args = ap.parse_args()
    main(args.out, steps=args.steps)


def train(model: Any, opt: Any, loader: Any, device: Any, *, steps: int, out_dir: Any,
          quiet: bool, expect: tuple[type[BaseException], ...] = (), **kw: Any) -> Any:
    """The plain training loop each sample profiles, as a user writes it, inside
    ``with diagnose(model, loader):``. Every sample plants its bottleneck in what it hands
    in (the model, the loader, the device), not in this loop: the loop moves each batch with
    a plain ``.to(device)`` (a blocking copy from pageable memory) and syncs nowhere.
    ``expect``: the error a sample plants (out of memory): printed, and the report still
    comes back. Returns the report."""
    from torch import nn

    from diagnose import diagnose

    loss_fn = nn.CrossEntropyLoss()
    d = diagnose(model, loader, steps=steps, out_dir=out_dir, print_report=not quiet, **kw)
    try:
        with d:
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = loss_fn(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if d.done:
                    break
    except expect as e:
        if not quiet:
            print(f"the training loop failed as planted: {str(e).splitlines()[0][:160]}")
    return d.report


def in_memory(n: int, *shape: int, classes: int = 10) -> Any:
    """``n`` seeded random inputs of ``shape`` and labels in ``range(classes)``, held in
    memory (torch's TensorDataset): a loader over it does no work per sample."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, *shape, generator=g),
                         torch.randint(0, classes, (n,), generator=g))
