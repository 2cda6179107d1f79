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


class DeviceBatches(Dataset):
    """Whole batches already on the GPU (a data set small enough to preload): the loader
    hands out a slice, nothing is copied or collated per step."""

    def __init__(self, device: torch.device, batches: int = 16, batch: int = 4096,
                 dim: int = 8192) -> None:
        g = torch.Generator(device=device).manual_seed(0)
        self.x = torch.randn(batches, batch, dim, device=device, generator=g,
                             dtype=torch.bfloat16)
        self.y = torch.randint(0, 10, (batches, batch), device=device, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def _cuda_job(device: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    """On a GPU the same idea needs a GPU's worth of work: bf16 GEMMs big enough to keep a
    tensor-core GPU busy (~5 TFLOP a step: several ms on an H100), data already on the
    device, a fused optimizer."""
    dim = 8192
    model = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU(),
                          nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 10))
    model = model.to(device=device, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return model, opt, DataLoader(DeviceBatches(device, dim=dim), batch_size=None, shuffle=True)


def make_job(device: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    """The model (on ``device``), its optimizer and the loader this sample trains."""
    torch.manual_seed(0)
    if device.type == "cuda":
        return _cuda_job(device)
    model = nn.Sequential(
        nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(InMemoryFeatures(), batch_size=64, shuffle=True, num_workers=0)
    return model, opt, loader


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return _common.train(*make_job(device), device, steps=steps, out_dir=out_dir, quiet=quiet,
                         **kw)


if __name__ == "__main__":
    _common.cli(main, __doc__)
