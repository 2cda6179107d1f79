"""Images stored one ``.npy`` file per sample on disk, each read and augmented in
``__getitem__`` (``np.load``, a random crop and flip, normalising in numpy), feeding a small
CNN on torch's threads. The loading is about a fifth of the step and the model's ops the
rest: a worker would take a CPU from torch's threads, and one thread makes the model
slower still. On the 2-vCPU development VM a diagnosis predicted workers 0.84x and one
thread 0.59x, and the plain loop timed 0.81x and 0.62x (benchmarks/predict_configs.py):
the finding offers neither, and autofix tries neither.

The files (3,000 of 15.6 KB) are written once, under the system's temporary folder, and
read from the page cache after the first epoch: the cost here is the reads' system calls
and the per-sample numpy work, not the disk."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

ROOT = Path(tempfile.gettempdir()) / "torch-diagnose-npy-files"
N = 3000
SIDE, CROP = 72, 64


def _write_files() -> None:
    if (ROOT / f"{N - 1}.npy").exists():
        return
    ROOT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(N):
        np.save(ROOT / f"{i}.npy", rng.integers(0, 255, (3, SIDE, SIDE), dtype=np.uint8))


class NpyFiles(Dataset):
    def __init__(self) -> None:
        _write_files()
        self.labels = np.random.default_rng(1).integers(0, 10, N)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = np.load(ROOT / f"{i}.npy").astype(np.float32) / 255.0
        top, left = np.random.randint(0, SIDE - CROP + 1, 2)
        x = x[:, top:top + CROP, left:left + CROP]
        if np.random.rand() < 0.5:
            x = x[:, :, ::-1]
        x = (x - 0.5) / 0.25
        return torch.from_numpy(np.ascontiguousarray(x)), int(self.labels[i])


def make_job() -> dict[str, Any]:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(32 * 16 * 16, 10))
    return {"model": m,
            "loader": DataLoader(NpyFiles(), batch_size=64, shuffle=True),
            "optimizer": torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9),
            "loss_fn": nn.functional.cross_entropy}
