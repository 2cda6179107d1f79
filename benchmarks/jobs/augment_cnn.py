"""A small CNN on 32x32 images with per-sample augmentation in the training process
(random crop with padding, flip, colour jitter, noise, blur, cutout): a dozen small tensor
ops per sample."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __init__(self, n: int = 20_000) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = self.images[i].float().div_(255)
        x = nn.functional.pad(x, (4, 4, 4, 4), mode="reflect")
        dx, dy = torch.randint(0, 9, (2,), generator=g).tolist()
        x = x[:, dy:dy + 32, dx:dx + 32]
        if torch.rand(1, generator=g).item() < 0.5:
            x = x.flip(-1)
        x = x * (0.8 + 0.4 * torch.rand(3, 1, 1, generator=g))
        x = x + 0.02 * torch.randn(x.shape, generator=g)
        for _ in range(3):  # a light blur, a few passes
            x = nn.functional.avg_pool2d(nn.functional.pad(x[None], (1, 1, 1, 1),
                                                           mode="reflect"), 3, 1)[0]
        cy, cx = torch.randint(0, 24, (2,), generator=g).tolist()
        x[:, cy:cy + 8, cx:cx + 8] = 0.5  # cutout
        x = (x - 0.5) / 0.25
        return x.contiguous(), self.labels[i]


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 10))


def make_job(num_workers: int = 0) -> dict[str, Any]:
    torch.manual_seed(0)
    m = model()
    return {"model": m,
            "loader": DataLoader(Augmented(), batch_size=64, shuffle=True,
                                 num_workers=num_workers),
            "optimizer": torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9),
            "loss_fn": nn.functional.cross_entropy}
