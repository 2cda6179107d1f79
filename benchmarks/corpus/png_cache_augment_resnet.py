"""Image classification from a folder of PNG files written once to a cache directory (one
sub-folder per class, ImageFolder-style); each sample is opened and decoded with PIL in
``__getitem__``, then augmented by hand (random resized crop to 64x64, horizontal flip,
colour jitter on the array) and normalised, in 4 DataLoader workers (more than this
2-CPU machine has); a small residual CNN, SGD with momentum and a cosine schedule.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

CLASSES, PER_CLASS, SIZE, CROP, BATCH = 10, 150, 96, 64, 32
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _make(root: Path) -> None:
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    for c in range(CLASSES):
        d = root / f"class_{c:02d}"
        d.mkdir()
        for i in range(PER_CLASS):
            f = rng.uniform(1, 6, size=3)
            ph = rng.uniform(0, 6.28, size=3)
            img = np.stack([np.sin(f[k] * (xx * (c + 1) + yy * (k + 1)) + ph[k])
                            for k in range(3)], -1)
            img = (img + 1) * 110 + rng.normal(0, 20, img.shape)
            Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(d / f"{i:04d}.png")


class PngFolder(Dataset):
    def __init__(self, root: Path) -> None:
        self.items = [(p, int(p.parent.name[-2:])) for p in sorted(root.glob("*/*.png"))]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[i]
        img = Image.open(path).convert("RGB")
        w, h = img.size
        s = random.uniform(0.5, 1.0)
        cw, ch = int(w * s), int(h * s)
        x0, y0 = random.randint(0, w - cw), random.randint(0, h - ch)
        img = img.resize((CROP, CROP), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        a = np.asarray(img, dtype=np.float32) / 255.0
        a = a * random.uniform(0.8, 1.2) + random.uniform(-0.1, 0.1)
        a = (a.clip(0, 1) - MEAN) / STD
        return torch.from_numpy(a.transpose(2, 0, 1).copy()), label


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.skip(x))


def make_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         Block(16, 16, 2), Block(16, 32, 2), Block(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, CLASSES))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    random.seed(0)
    data = PngFolder(cache_dir("png_cache_augment", _make))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=4, drop_last=True)
    model = make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev), batch[1].to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("image-decode", "augment", "workers>cpus", "conv")}


def main(steps: int = 8) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
