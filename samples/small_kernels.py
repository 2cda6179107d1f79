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
from torch.utils.data import DataLoader, Dataset

from diagnose import diagnose


class SmallVectors(Dataset):
    def __init__(self, n: int = 1024, dim: int = 32) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class TinyBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.norm(self.fc(x)))


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(*[TinyBlock(32) for _ in range(24)], nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SmallVectors(), batch_size=8, shuffle=True)
    loss_fn = nn.CrossEntropyLoss()

    with diagnose(model, loader, steps=steps, out_dir=out_dir, print_report=not quiet, **kw) as d:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if d.done:
                break
    return d.report


if __name__ == "__main__":
    _common.cli(main, __doc__)
