"""Semantic segmentation from PNG files on disk: an image and its mask (class ids drawn
as grey levels) are decoded with PIL per sample, flipped together at random, the mask's
grey levels mapped to class ids through a lookup table, in 2 DataLoader workers; a small
U-Net, Adam, per-pixel cross-entropy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

PAIRS, SIZE, CLASSES = 300, 64, 3
GREYS = (0, 128, 255)  # class k is drawn as grey level GREYS[k]


def _make_pairs(root: Path) -> None:
    """``images/NNNN.png`` and ``masks/NNNN.png``: discs and boxes on a textured ground."""
    rng = np.random.default_rng(7)
    (root / "images").mkdir()
    (root / "masks").mkdir()
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    for i in range(PAIRS):
        mask = np.zeros((SIZE, SIZE), np.uint8)
        cy, cx, r = rng.uniform(10, 54), rng.uniform(10, 54), rng.uniform(5, 14)
        mask[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = 1
        y0, x0 = rng.integers(0, 44, 2)
        mask[y0:y0 + rng.integers(8, 20), x0:x0 + rng.integers(8, 20)] = 2
        colours = np.array([[70, 90, 60], [200, 60, 50], [40, 60, 210]], np.float64)
        img = colours[mask] + rng.normal(0, 25, (SIZE, SIZE, 3))
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(root / "images" / f"{i:04d}.png")
        Image.fromarray(np.array(GREYS, np.uint8)[mask]).save(root / "masks" / f"{i:04d}.png")


class PngPairs(Dataset):
    def __init__(self, root: Path) -> None:
        self.images = sorted((root / "images").glob("*.png"))
        self.masks = sorted((root / "masks").glob("*.png"))
        self.lut = np.zeros(256, np.int64)
        for k, g in enumerate(GREYS):
            self.lut[g] = k

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = np.asarray(Image.open(self.images[i]).convert("RGB"), np.float32) / 255.0
        mask = self.lut[np.asarray(Image.open(self.masks[i]).convert("L"))]
        if np.random.rand() < 0.5:
            img, mask = img[:, ::-1], mask[:, ::-1]
        if np.random.rand() < 0.5:
            img, mask = img[::-1], mask[::-1]
        x = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
        return (x - 0.45) / 0.25, torch.from_numpy(np.ascontiguousarray(mask))


def conv_block(i: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                         nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down1, self.down2, self.mid = conv_block(3, 16), conv_block(16, 32), conv_block(32, 64)
        self.up2, self.dec2 = nn.ConvTranspose2d(64, 32, 2, stride=2), conv_block(64, 32)
        self.up1, self.dec1 = nn.ConvTranspose2d(32, 16, 2, stride=2), conv_block(32, 16)
        self.out = nn.Conv2d(16, CLASSES, 1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.down1(x)
        b = self.down2(self.pool(a))
        m = self.mid(self.pool(b))
        b = self.dec2(torch.cat([self.up2(m), b], 1))
        return self.out(self.dec1(torch.cat([self.up1(b), a], 1)))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    cuda = dev.type == "cuda"
    loader = DataLoader(PngPairs(cache_dir("png_masks", _make_pairs)), batch_size=8,
                        shuffle=True, num_workers=2, pin_memory=cuda, drop_last=True)
    model = UNet().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev, non_blocking=cuda), batch[1].to(dev, non_blocking=cuda)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("image-decode", "augment", "workers", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
