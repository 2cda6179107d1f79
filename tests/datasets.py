"""Small real map-style datasets for the capture tests (torch's TensorDataset, seeded)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import TensorDataset


class Pairs(TensorDataset):
    """``n`` seeded random ``dim``-vectors with labels in ``range(classes)``, held in memory;
    ``delay_s`` of sleep per sample stands for loading work."""

    def __init__(self, n: int = 256, dim: int = 16, classes: int = 3, delay_s: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        super().__init__(torch.randn(n, dim, generator=g), torch.randint(0, classes, (n,), generator=g))
        self.delay_s = delay_s

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().__getitem__(i)
