"""torchvision's transforms on PIL images, for the corpus' jobs adapted from scripts that use
them: ``Compose``, ``RandomResizedCrop``, ``RandomHorizontalFlip``, ``ToTensor`` and
``Normalize``, written here with PIL, numpy and torch because no CPU torchvision wheel
matches torch 2.13. The jobs import them as they would ``torchvision.transforms``
(``from ._torchvision import Compose, ...``).

They follow torchvision 0.2x's v1 ``torchvision.transforms`` (0.28 would be torch 2.13's
release), whose behaviour on PIL images is unchanged since 0.8, when the random draws moved
to torch: the draws come from torch's global RNG, in torchvision's order; crops and flips
are PIL's ``crop``/``transpose``; resampling is PIL's ``resize``, bilinear (PIL always
antialiases); ``ToTensor`` gives a contiguous (C, H, W) tensor of torch's default dtype in
[0, 1]. Only what the jobs use is kept: 8-bit PIL images, ``RandomResizedCrop`` always
bilinear, no argument checks (nor ``Normalize``'s std == 0 check), no ``repr``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image


class Compose:
    """``transforms.Compose``: the transforms in turn."""

    def __init__(self, transforms: list[Callable[[Any], Any]]) -> None:
        self.transforms = transforms

    def __call__(self, img: Any) -> Any:
        for t in self.transforms:
            img = t(img)
        return img


class RandomResizedCrop:
    """``transforms.RandomResizedCrop(size, scale, ratio)``: a random crop, resized bilinear."""

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.scale, self.ratio = scale, ratio

    @staticmethod
    def get_params(img: Image.Image, scale: tuple[float, float],
                   ratio: tuple[float, float]) -> tuple[int, int, int, int]:
        width, height = img.size
        area = height * width

        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()

            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))

            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w

        # Fallback to central crop
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w = width
            h = int(round(w / min(ratio)))
        elif in_ratio > max(ratio):
            h = height
            w = int(round(h * max(ratio)))
        else:  # whole image
            w = width
            h = height
        i = (height - h) // 2
        j = (width - w) // 2
        return i, j, h, w

    def __call__(self, img: Image.Image) -> Image.Image:
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        # F.resized_crop on a PIL image: crop, then resize (bilinear; PIL antialiases)
        img = img.crop((j, i, j + w, i + h))
        return img.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)


class RandomHorizontalFlip:
    """``transforms.RandomHorizontalFlip(p)``: flipped left-right if ``torch.rand(1) < p``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: Image.Image) -> Image.Image:
        if torch.rand(1) < self.p:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img


class ToTensor:
    """``transforms.ToTensor()`` on an 8-bit PIL image: (C, H, W), default dtype, in [0, 1]."""

    def __call__(self, pic: Image.Image) -> torch.Tensor:
        img = torch.from_numpy(np.array(pic, np.uint8, copy=True))
        img = img.view(pic.size[1], pic.size[0], len(pic.getbands()))
        # put it from HWC to CHW format
        img = img.permute((2, 0, 1)).contiguous()
        return img.to(dtype=torch.get_default_dtype()).div(255)


class Normalize:
    """``transforms.Normalize(mean, std)`` on a (C, H, W) float tensor, on a copy of it."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean, self.std = mean, std

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
        std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
        return tensor.sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))
