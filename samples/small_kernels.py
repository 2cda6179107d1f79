"""Planted bottleneck: launch overhead. A deep stack of tiny layers on a small batch
issues hundreds of very short kernels per step; on a GPU the device idles between
them while the host launches the next one (launch-bound). On CPU the same loop runs
(per-op overhead dominates there too) but the GPU-side symptom cannot show.

Expected finding (GPU): ``launch``, fixes ``torch.compile`` / larger batch.

    python samples/small_kernels.py [--out DIR] [--steps N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # first: finds torch-diagnose in a source checkout
import torch
from torch import nn
from torch.utils.data import DataLoader


class TinyBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.norm(self.fc(x)))


def make_job(device: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    """The model (on ``device``), its optimizer and the loader this sample trains."""
    torch.manual_seed(0)
    model = nn.Sequential(*[TinyBlock(32) for _ in range(24)], nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(_common.in_memory(1024, 32, classes=4), batch_size=8, shuffle=True)
    return model, opt, loader


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return _common.train(*make_job(device), device, steps=steps, out_dir=out_dir, quiet=quiet,
                         **kw)


if __name__ == "__main__":
    _common.cli(main, __doc__)
