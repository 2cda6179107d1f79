"""The built-in demo: the classic MNIST tutorial loop, slowed down the classic way.

A feed-forward net 784-128-64-10 trains on 60,000 synthetic 28x28 digits with
the augmentation MNIST tutorials add (a random affine transform and an elastic
distortion, then normalisation), computed per sample on the CPU inside
``__getitem__`` -- and the DataLoader is the tutorial's
``DataLoader(ds, batch_size=64, shuffle=True)``: ``num_workers=0``, so every
sample is prepared in the training process while the model waits.

``torch-diagnose demo`` runs it: baseline -> diagnosis -> autofix -> before/after.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .values import usable_cpus

SAMPLES = 60_000
BATCH = 64


class SyntheticDigits(Dataset):
    """60k 28x28 uint8 "digits" (a blurred stroke template per class plus noise), held in
    memory like torchvision's MNIST, with a per-sample CPU transform in ``__getitem__``."""

    def __init__(self, n: int = SAMPLES, seed: int = 0, augment: bool = True) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        strokes = (torch.rand(10, 1, 7, 7, generator=g) > 0.6).float()
        templates = F.interpolate(strokes, size=28, mode="bilinear", align_corners=False)[:, 0]
        noise = torch.randint(0, 56, (n, 28, 28), generator=g, dtype=torch.uint8)
        self.images = (templates * 200).to(torch.uint8)[self.labels] + noise
        self.augment = augment
        self.seed = seed
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, 28), torch.linspace(-1, 1, 28),
                                indexing="ij")
        self.base = torch.stack([xs, ys, torch.ones_like(xs)], -1).view(784, 3)
        k = torch.arange(-6, 7, dtype=torch.float32)
        k = torch.exp(-(k**2) / (2 * 3.0**2))
        self.kx = (k / k.sum()).view(1, 1, 1, -1)  # separable Gaussian, sigma = 3 px
        self.ky = self.kx.view(1, 1, -1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        x = self.images[i].float().div_(255.0).view(1, 1, 28, 28)
        if self.augment:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
            r = torch.rand(4, generator=g).tolist()
            # RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1))
            ang, s = math.radians(30) * (r[0] - 0.5), 0.9 + 0.2 * r[1]
            c, sn = math.cos(ang) / s, math.sin(ang) / s
            theta = torch.tensor([[c, sn], [-sn, c], [0.2 * (r[2] - 0.5), 0.2 * (r[3] - 0.5)]])
            grid = (self.base @ theta).view(1, 28, 28, 2)
            # ElasticTransform (as torchvision does it): per-pixel uniform noise, Gaussian-blurred
            d = torch.rand(2, 1, 28, 28, generator=g) * 2 - 1
            d = F.conv2d(F.pad(d, (6, 6, 0, 0), mode="reflect"), self.kx)
            d = F.conv2d(F.pad(d, (0, 0, 6, 6), mode="reflect"), self.ky)
            grid = grid + 0.5 * d.permute(1, 2, 3, 0)
            x = F.grid_sample(x, grid, mode="bilinear", align_corners=False)
        x = (x - 0.1307) / 0.3081  # Normalize((0.1307,), (0.3081,))
        return x.view(784), int(self.labels[i])


@dataclass
class DemoWorkload:
    model: Any
    loader: Any
    optimizer: Any
    loss_fn: Any
    dataset: SyntheticDigits
    build_s: float


def build(samples: int = SAMPLES, batch_size: int = BATCH, seed: int = 0) -> DemoWorkload:
    """The tutorial's objects: model, DataLoader (num_workers=0), SGD, cross-entropy."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    ds = SyntheticDigits(samples, seed)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True)
    return DemoWorkload(model, loader, opt, nn.CrossEntropyLoss(), ds,
                        time.perf_counter() - t0)


def machine_line() -> str:
    cpus = usable_cpus()
    try:
        load = " load {:.2f} {:.2f} {:.2f},".format(*os.getloadavg())
    except OSError:
        load = ""
    dev = (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
    return (f"{platform.node()}: {platform.processor() or platform.machine()}, {cpus} CPUs usable,"
            f"{load} {dev}, torch {torch.__version__}, Python {platform.python_version()}")


__all__ = ["BATCH", "SAMPLES", "DemoWorkload", "SyntheticDigits", "build", "machine_line"]
