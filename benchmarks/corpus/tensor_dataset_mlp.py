"""Tabular classification from tensors held in memory: a ``TensorDataset`` with a large
batch (1,024) and shuffling, so each batch is 1,024 indexed rows collated one by one; a
three-layer MLP with Adam and a step-decay scheduler stepped per epoch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import forever, pick_device, run

ROWS, FEATURES, CLASSES = 32_768, 64, 10


def make_data() -> TensorDataset:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(ROWS, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ w + 0.5 * torch.randn(ROWS, CLASSES, generator=g)).argmax(1)
    return TensorDataset(x, y)


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    loader = DataLoader(make_data(), batch_size=1024, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, CLASSES)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev), batch[1].to(dev)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "scheduler": sched, "train_step": train_step, "batches": lambda: forever(loader),
            "device": dev, "marks_steps": False, "covers": ("in-memory", "mlp")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
