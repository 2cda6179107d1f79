"""Small real map-style datasets for the capture tests (torch's TensorDataset, seeded), and
the plain training loop they run."""

from __future__ import annotations

import time
from typing import Any

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


def train(model: Any, opt: Any, loader: Any, d: Any = None, limit: int | None = None) -> int:
    """The user's plain loop: nothing in it knows about diagnose, except an optional early
    stop at ``d.done`` (``d``: the session) or after ``limit`` steps. Returns the steps run."""
    n = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += 1
        if (limit is not None and n >= limit) or (d is not None and d.done):
            break
    return n
