"""Planted bottleneck: the input pipeline. Every sample is "decoded" and augmented in
Python/numpy inside ``__getitem__`` and the DataLoader has ``num_workers=0``, so the
training process spends most of each step preparing data while the model waits.

Expected finding: ``input`` (warning or above), fix ``num_workers``.

    python samples/slow_loader.py [--out DIR] [--steps N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # first: finds torch-diagnose in a source checkout
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class AugmentedImages(Dataset):
    """Synthetic 32x32 RGB images with per-sample CPU work, like JPEG decode + augment."""

    def __init__(self, n: int = 2048, blur_passes: int = 64) -> None:
        self.n = n
        self.blur_passes = blur_passes
        self.mean = np.array([0.49, 0.48, 0.45], dtype=np.float32)
        self.std = np.array([0.25, 0.24, 0.26], dtype=np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)
        raw = rng.integers(0, 256, size=(40, 40, 3), dtype=np.uint8)  # the "decoded" image
        y0, x0 = rng.integers(0, 8, size=2)
        img = raw[y0 : y0 + 32, x0 : x0 + 32].astype(np.float32) / 255.0  # random crop
        if rng.random() < 0.5:
            img = img[:, ::-1]  # horizontal flip
        for _ in range(self.blur_passes):  # smoothing, one small numpy pass at a time
            img = 0.5 * img + 0.25 * (np.roll(img, 1, axis=0) + np.roll(img, -1, axis=1))
        img = (img - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), i % 10


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def make_job(device: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    """The model (on ``device``), its optimizer and the loader this sample trains."""
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(AugmentedImages(), batch_size=32, shuffle=True, num_workers=0)
    return model, opt, loader


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return _common.train(*make_job(device), device, steps=steps, out_dir=out_dir, quiet=quiet,
                         **kw)


if __name__ == "__main__":
    _common.cli(main, __doc__)
