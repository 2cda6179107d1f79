"""samples/slow_loader.py's job on the CPU."""

from __future__ import annotations

from typing import Any

import torch
from _samples import sample
from torch import nn
from torch.utils.data import DataLoader


def make_job() -> dict[str, Any]:
    s = sample("slow_loader")
    torch.manual_seed(0)
    model = s.make_model()
    return {"model": model,
            "loader": DataLoader(s.AugmentedImages(), batch_size=32, shuffle=True),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
            "loss_fn": nn.functional.cross_entropy}
