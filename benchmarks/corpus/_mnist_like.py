"""MNIST-like data made offline, for the corpus' jobs adapted from scripts that download
MNIST with torchvision (pytorch/examples' mnist, mnist_rnn, vae).

The images are handwriting-like digits: each class a few pen strokes, drawn per sample with
a random slant, scale, shift, per-point wobble and pen width at twice the size, then reduced
to 28x28 grey levels (white on black, the digit in the middle 20x20 box as in MNIST). They
are written once, as MNIST's own raw files are (IDX format, ``train-images-idx3-ubyte`` and
``train-labels-idx1-ubyte``), and read back whole into a uint8 tensor held in memory, as
torchvision's ``datasets.MNIST`` does; :class:`MNISTLike` then indexes it per sample the
same way (``Image.fromarray`` then the transform). ``Compose``, ``Normalize`` and
``to_tensor`` (a ``ToTensor()``) are torchvision's, from ``_torchvision.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import Dataset

from ._common import cache_dir
from ._torchvision import Compose, Normalize, ToTensor  # noqa: F401 (the mnist jobs import them here)

TRAIN = 60_000  # MNIST's training set size

#: each digit's pen strokes (polylines), in a unit box (x right, y down)
_ring = [(0.5 + 0.32 * math.sin(a / 12 * 2 * math.pi), 0.5 - 0.45 * math.cos(a / 12 * 2 * math.pi))
         for a in range(13)]
_top = [(0.5 + 0.22 * math.sin(a / 10 * 2 * math.pi), 0.28 - 0.2 * math.cos(a / 10 * 2 * math.pi))
        for a in range(11)]
_low = [(0.5 + 0.28 * math.sin(a / 10 * 2 * math.pi), 0.72 - 0.23 * math.cos(a / 10 * 2 * math.pi))
        for a in range(11)]
STROKES: list[list[list[tuple[float, float]]]] = [
    [_ring],
    [[(0.35, 0.2), (0.52, 0.05), (0.5, 0.95)]],
    [[(0.2, 0.25), (0.35, 0.08), (0.65, 0.08), (0.8, 0.25), (0.75, 0.45), (0.2, 0.95),
      (0.85, 0.95)]],
    [[(0.2, 0.1), (0.7, 0.08), (0.8, 0.25), (0.7, 0.45), (0.4, 0.5)],
     [(0.7, 0.5), (0.82, 0.72), (0.7, 0.92), (0.2, 0.92)]],
    [[(0.65, 0.95), (0.65, 0.05), (0.15, 0.65), (0.85, 0.65)]],
    [[(0.8, 0.08), (0.25, 0.08), (0.2, 0.45), (0.6, 0.4), (0.8, 0.6), (0.7, 0.88),
      (0.2, 0.92)]],
    [[(0.75, 0.08), (0.35, 0.3), (0.2, 0.65), (0.35, 0.92), (0.65, 0.92), (0.8, 0.7),
      (0.6, 0.5), (0.3, 0.55)]],
    [[(0.15, 0.08), (0.85, 0.08), (0.4, 0.95)]],
    [_top, _low],
    [[(0.75, 0.4), (0.5, 0.5), (0.25, 0.35), (0.35, 0.1), (0.65, 0.08), (0.78, 0.3),
      (0.7, 0.95)]],
]


def draw_digit(label: int, rng: np.random.Generator) -> np.ndarray:
    """One 28x28 uint8 image of digit ``label``, drawn with random pen and pose."""
    big = 56
    img = Image.new("L", (big, big), 0)
    pen = ImageDraw.Draw(img)
    angle = rng.uniform(-0.3, 0.3)
    shear = rng.uniform(-0.3, 0.3)
    sx, sy = rng.uniform(0.75, 1.05), rng.uniform(0.85, 1.05)
    tx, ty = rng.uniform(-3, 3), rng.uniform(-3, 3)
    ca, sa = math.cos(angle), math.sin(angle)
    width = int(rng.integers(3, 7))
    for stroke in STROKES[label]:
        pts = []
        for x, y in stroke:
            x, y = x - 0.5 + rng.normal(0, 0.03), y - 0.5 + rng.normal(0, 0.03)
            x, y = (x + shear * y) * sx, y * sy
            x, y = ca * x - sa * y, sa * x + ca * y
            pts.append((big / 2 + 40 * x + tx, big / 2 + 40 * y + ty))
        pen.line(pts, fill=255, width=width, joint="curve")
    return np.asarray(img.resize((28, 28), Image.Resampling.BILINEAR, reducing_gap=2.0))


def _write_idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) as an IDX file, MNIST's raw format: magic, dimensions, data."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, np.uint8).tobytes())


def read_idx(path: Path) -> torch.Tensor:
    """An IDX file (uint8 data) as a tensor, as torchvision's ``read_image_file`` reads it."""
    data = path.read_bytes()
    assert data[:3] == b"\x00\x00\x08", path
    nd = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    flat = torch.frombuffer(bytearray(data[4 + 4 * nd:]), dtype=torch.uint8)
    return flat.view(*shape)


def _make(root: Path) -> None:
    rng = np.random.default_rng(2024)
    labels = rng.integers(0, 10, TRAIN).astype(np.uint8)
    images = np.stack([draw_digit(int(k), rng) for k in labels])
    _write_idx(root / "train-images-idx3-ubyte", images)
    _write_idx(root / "train-labels-idx1-ubyte", labels)


class MNISTLike(Dataset):
    """torchvision's ``datasets.MNIST(train=True)`` on the data above: the whole uint8
    tensor in memory, each sample made a PIL image and passed through ``transform``."""

    def __init__(self, transform: Callable[[Any], Any] | None = None) -> None:
        root = cache_dir("mnist_like", _make)
        self.transform = transform
        self.data = read_idx(root / "train-images-idx3-ubyte")
        self.targets = read_idx(root / "train-labels-idx1-ubyte").long()

    def __getitem__(self, index: int) -> tuple[Any, int]:
        img, target = self.data[index], int(self.targets[index])
        # doing this so that it is consistent with all other datasets
        # to return a PIL Image
        img = Image.fromarray(img.numpy(), mode="L")
        if self.transform is not None:
            img = self.transform(img)
        return img, target

    def __len__(self) -> int:
        return len(self.data)


#: torchvision's ``transforms.ToTensor()``, as the jobs call it (``_torchvision``)
to_tensor = ToTensor()
