"""A healthy control: a small CNN trained on batches made once, before the loop, as
tensors in memory (64 images of 1x28x28 per batch, 16 batches cycled), no DataLoader, no
per-step Python data work; plain SGD with momentum. Nothing here should be worth fixing.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ._common import forever, pick_device, run

BATCH, NBATCH, CLASSES = 64, 16, 10


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(CLASSES, 1, 28, 28, generator=g)
    ys = [torch.randint(0, CLASSES, (BATCH,), generator=g) for _ in range(NBATCH)]
    xs = [protos[y] + 0.5 * torch.randn(BATCH, 1, 28, 28, generator=g) for y in ys]
    data = [(x.to(dev), y.to(dev)) for x, y in zip(xs, ys, strict=True)]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                          nn.Linear(128, CLASSES)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": None, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(data), "device": dev,
            "marks_steps": False, "covers": ("no-loader", "in-memory", "conv")}


def main(steps: int = 8) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
