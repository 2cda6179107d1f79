"""An MLP on in-memory tensor rows with big batches: the dataset is a TensorDataset, so
the DataLoader indexes it once per sample and collates 4096 rows per batch."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_job() -> dict[str, Any]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(200_000, 64, generator=g),
                         torch.randint(0, 10, (200_000,), generator=g))
    m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    return {"model": m,
            "loader": DataLoader(data, batch_size=4096, shuffle=True),
            "optimizer": torch.optim.SGD(m.parameters(), lr=0.05),
            "loss_fn": nn.functional.cross_entropy}
