"""samples/small_kernels.py's job on the CPU."""

from __future__ import annotations

from typing import Any

import torch
from _samples import sample
from torch import nn
from torch.utils.data import DataLoader


def make_job() -> dict[str, Any]:
    s = sample("small_kernels")
    torch.manual_seed(0)
    model = nn.Sequential(*[s.TinyBlock(32) for _ in range(24)], nn.Linear(32, 4))
    data = sample("_common").in_memory(1024, 32, classes=4)
    return {"model": model, "loader": DataLoader(data, batch_size=8, shuffle=True),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.01),
            "loss_fn": nn.functional.cross_entropy}
