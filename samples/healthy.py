"""No planted bottleneck: data is ready in memory and cheap to batch, the model is
large enough that compute fills each step, nothing forces a host-device sync.

Expected: no finding at warning or above.

    python samples/healthy.py [--out DIR] [--steps N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # first: finds torch-diagnose in a source checkout
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class InMemoryFeatures(Dataset):
    """Pre-computed feature vectors and labels held in memory (e.g. cached embeddings)."""

    def __init__(self, n: int = 4096, dim: int = 256) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, dim), dtype=np.float32)
        self.y = rng.integers(0, 10, size=n)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.x[i], int(self.y[i])  # a row view: nothing to compute


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(
        nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(InMemoryFeatures(), batch_size=64, shuffle=True, num_workers=0)
    return _common.train(model, opt, loader, device, steps=steps, out_dir=out_dir, quiet=quiet,
                         **kw)


if __name__ == "__main__":
    _common.cli(main, __doc__)
