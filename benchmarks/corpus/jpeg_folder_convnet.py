"""Image classification from a folder of JPEG files, one sub-folder per class (the
``ImageFolder`` layout): each sample is opened and decoded with PIL, then augmented with
torchvision-style transforms (random crop with padding, horizontal flip, to tensor,
normalise) in 4 DataLoader workers, feeding a small conv net trained with SGD + momentum.

The transforms are torchvision's where it imports, else the same four inline (a CPU
torchvision wheel matching the installed torch may not exist): the flip and ``Compose``
from ``_torchvision.py``, the padded random crop, to-tensor and normalise written here on
PIL, numpy and torch.
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
from ._torchvision import Compose, RandomHorizontalFlip

CLASSES, PER_CLASS, SIZE, CROP = 10, 150, 48, 40
MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


def _make_images(root: Path) -> None:
    """PER_CLASS JPEGs a class: a class-coloured gradient with blobs and noise."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE] / SIZE
    for c in range(CLASSES):
        folder = root / f"class_{c:02d}"
        folder.mkdir()
        base = rng.uniform(40, 215, size=3)
        for i in range(PER_CLASS):
            img = base + 60 * np.stack([xx, yy, xx * yy], -1) * ((c % 3) - 1)
            cy, cx = rng.uniform(0, SIZE, 2)
            img += 50 * np.exp(-((yy * SIZE - cy) ** 2 + (xx * SIZE - cx) ** 2) / 60)[..., None]
            img += rng.normal(0, 12, img.shape)
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
                folder / f"img_{i:04d}.jpg", quality=90)


class _RandomCrop:
    def __init__(self, size: int, padding: int) -> None:
        self.size, self.padding = size, padding

    def __call__(self, img: Image.Image) -> Image.Image:
        p = self.padding
        padded = Image.new(img.mode, (img.width + 2 * p, img.height + 2 * p))
        padded.paste(img, (p, p))
        x = int(torch.randint(0, padded.width - self.size + 1, ()))
        y = int(torch.randint(0, padded.height - self.size + 1, ()))
        return padded.crop((x, y, x + self.size, y + self.size))


def _to_tensor(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255


class _Normalize:
    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return (t - self.mean) / self.std


def train_transform() -> Any:
    try:
        from torchvision import transforms as T

        return T.Compose([T.RandomCrop(CROP, padding=4), T.RandomHorizontalFlip(),
                          T.ToTensor(), T.Normalize(MEAN, STD)])
    except Exception:  # not installed, or built for another torch
        return Compose([_RandomCrop(CROP, 4), RandomHorizontalFlip(), _to_tensor,
                        _Normalize(MEAN, STD)])


class JpegFolder(Dataset):
    def __init__(self, root: Path, transform: Any) -> None:
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.samples = [(p, k) for k, c in enumerate(self.classes)
                        for p in sorted((root / c).glob("*.jpg"))]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[i]
        with Image.open(path) as f:
            img = f.convert("RGB")
        return self.transform(img), label


class ConvNet(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()

        def block(i: int, o: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                                 nn.ReLU(inplace=True), nn.MaxPool2d(2))

        self.features = nn.Sequential(block(3, 16), block(16, 32), block(32, 64))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    root = cache_dir("jpeg_folder", _make_images)
    cuda = dev.type == "cuda"
    loader = DataLoader(JpegFolder(root, train_transform()), batch_size=64, shuffle=True,
                        num_workers=4, pin_memory=cuda, drop_last=True)
    model = ConvNet().to(dev)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch
        x, y = x.to(dev, non_blocking=cuda), y.to(dev, non_blocking=cuda)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False,
            "covers": ("image-decode", "augment", "workers", "workers>cpus", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
