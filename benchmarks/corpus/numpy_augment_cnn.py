"""Image classification from a ``.npy`` array with augmentation written in numpy per
sample (reflect-padded random crop, flip, brightness/contrast jitter, Gaussian noise,
cutout) using numpy's global random state, in 6 DataLoader workers: a worker count copied
from a bigger machine, whatever the CPUs here. A small CNN, Adam.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

N, SIZE, CLASSES = 1536, 32, 10


def _make_arrays(root: Path) -> None:
    """``images.npy`` (N, 32, 32, 3) uint8 and ``labels.npy``: noisy class-tinted stripes."""
    rng = np.random.default_rng(1)
    labels = rng.integers(0, CLASSES, N)
    xx = np.arange(SIZE)[None, :, None]
    images = np.empty((N, SIZE, SIZE, 3), np.uint8)
    for i, c in enumerate(labels):
        stripes = 100 + 80 * np.sin(xx * (0.2 + 0.05 * c) + rng.uniform(0, 6))
        tint = np.array([c * 20 % 255, 128, 255 - c * 20 % 255]) * 0.3
        img = stripes + tint + rng.normal(0, 20, (SIZE, SIZE, 3))
        images[i] = np.clip(img.transpose(1, 0, 2) if c % 2 else img, 0, 255)
    np.save(root / "images.npy", images)
    np.save(root / "labels.npy", labels)


class AugmentedArrays(Dataset):
    def __init__(self, root: Path) -> None:
        self.images = np.load(root / "images.npy")
        self.labels = np.load(root / "labels.npy")

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = self.images[i].astype(np.float32) / 255.0
        img = np.pad(img, ((4, 4), (4, 4), (0, 0)), mode="reflect")
        y, x = np.random.randint(0, 9, size=2)
        img = img[y:y + SIZE, x:x + SIZE]
        if np.random.rand() < 0.5:
            img = img[:, ::-1]
        img = (img - img.mean()) * np.random.uniform(0.8, 1.2) + img.mean()
        img = img + np.random.uniform(-0.1, 0.1)
        img = img + np.random.normal(0, 0.03, img.shape).astype(np.float32)
        cy, cx = np.random.randint(0, SIZE, size=2)
        img[max(0, cy - 4):cy + 4, max(0, cx - 4):cx + 4] = 0.0
        img = (np.clip(img, 0, 1) - 0.5) / 0.25
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), int(self.labels[i])


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 128), nn.ReLU(), nn.Dropout(0.25),
            nn.Linear(128, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    loader = DataLoader(AugmentedArrays(cache_dir("augment_arrays", _make_arrays)),
                        batch_size=64, shuffle=True, num_workers=6,
                        pin_memory=dev.type == "cuda")
    model = SmallCNN().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.functional.cross_entropy

    def train_step(batch: Any) -> torch.Tensor:
        x, y = (t.to(dev) for t in batch)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False,
            "covers": ("augment", "workers", "workers>cpus", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
