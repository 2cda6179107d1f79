"""samples/healthy.py's CPU job: in-memory rows, a dense MLP."""

from __future__ import annotations

from typing import Any

import torch
from _samples import sample
from torch import nn
from torch.utils.data import DataLoader


def make_job() -> dict[str, Any]:
    s = sample("healthy")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10))
    return {"model": model,
            "loader": DataLoader(s.InMemoryFeatures(), batch_size=64, shuffle=True),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3),
            "loss_fn": nn.functional.cross_entropy}
