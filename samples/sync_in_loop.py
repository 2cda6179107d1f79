"""Planted bottleneck: a host-device sync every step. The loop logs ``loss.item()``
and the running accuracy every step; on a GPU each ``.item()`` makes the host wait
until all queued kernels have finished, so the host cannot run ahead and queue the
next step. On CPU the calls are there (``aten::item`` each step) but cost little.

Expected finding (GPU): ``sync``; advice: log every N steps, keep metrics on device.

    python samples/sync_in_loop.py [--out DIR] [--steps N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # first: finds torch-diagnose in a source checkout
import torch
from torch import nn
from torch.utils.data import DataLoader

from diagnose import diagnose


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(_common.in_memory(4096, 128), batch_size=64, shuffle=True)
    loss_fn = nn.CrossEntropyLoss()
    history: list[float] = []

    with diagnose(model, loader, steps=steps, out_dir=out_dir, print_report=not quiet, **kw) as d:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss = loss_fn(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append(loss.item())  # sync: waits for the whole step to finish
            acc = (out.argmax(1) == y).float().mean().item()  # and again
            if not quiet and len(history) % 4 == 0:
                print(f"step {len(history)}: loss {history[-1]:.3f} acc {acc:.2f}")
            if d.done:
                break
    return d.report


if __name__ == "__main__":
    _common.cli(main, __doc__)
