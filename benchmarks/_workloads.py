"""Training workloads the GPU benchmarks share (torch needed; _bench.py stays torch-free)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Augmented(Dataset):
    """Per-sample CPU work: ``rounds`` small tensor ops on each sample (an input pipeline)."""

    def __init__(self, n: int, dim: int, rounds: int = 20) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.rounds = rounds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        for _ in range(self.rounds):
            x = torch.tanh(x * 1.01 + 0.01)
        return x, self.y[i]
