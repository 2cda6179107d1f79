"""CIFAR-style image classification from a uint8 tensor held in memory, augmented per
sample with torch ops (reflect-padded random crop, flip, a per-channel brightness/offset
jitter in a Python loop, cutout, normalisation) using Python's ``random``, in 3 DataLoader
workers; a BatchNorm CNN, SGD with momentum, batch 64.

Written during a session by a helper trying the README as a new user (its own training
script, not one of the project's), then made a corpus job unchanged but for the job dict.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import forever, pick_device, run

N, SIZE, CLASSES = 4096, 32, 10


class SynthImages(Dataset):
    """Random uint8 images and labels; each sample augmented with torch ops."""

    def __init__(self, n: int = N, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = (torch.rand(n, 3, SIZE, SIZE, generator=g) * 255).to(torch.uint8)
        self.y = torch.randint(0, CLASSES, (n,), generator=g)
        self.mean = torch.tensor([0.49, 0.48, 0.45]).view(3, 1, 1)
        self.std = torch.tensor([0.25, 0.24, 0.26]).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.x[i].float() / 255.0
        img = nn.functional.pad(img, (4, 4, 4, 4), mode="reflect")
        dx, dy = random.randint(0, 8), random.randint(0, 8)
        img = img[:, dy:dy + SIZE, dx:dx + SIZE]
        if random.random() < 0.5:
            img = img.flip(2)
        for c in range(3):  # colour jitter, per channel, in Python
            img[c] = (img[c] * random.uniform(0.8, 1.2) + random.uniform(-0.1, 0.1)).clamp(0, 1)
        cx, cy = random.randint(0, SIZE - 1), random.randint(0, SIZE - 1)
        img[:, max(0, cy - 4):cy + 4, max(0, cx - 4):cx + 4] = 0
        return (img - self.mean) / self.std, self.y[i]


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    random.seed(0)
    model = make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(SynthImages(), batch_size=64, shuffle=True, num_workers=3,
                        pin_memory=dev.type == "cuda")
    loss_fn = nn.functional.cross_entropy

    def train_step(batch: Any) -> torch.Tensor:
        x, y = (t.to(dev) for t in batch)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False,
            "covers": ("augment", "in-memory", "workers", "workers>cpus", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
