"""A small GAN on data held in memory: a ``TensorDataset`` of flattened 16x16 patterns
in a shuffling DataLoader; each step trains the discriminator on a real and a generated
batch, then the generator through the discriminator, each model with its own Adam.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import forever, pick_device, run

ROWS, SIDE, LATENT = 16_384, 16, 64


def make_data() -> TensorDataset:
    """Blurred rings at random centres and radii, scaled to [-1, 1]."""
    g = torch.Generator().manual_seed(4)
    axis = torch.arange(SIDE, dtype=torch.float32)
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    c = torch.rand(ROWS, 2, generator=g) * 8 + 4
    r = torch.rand(ROWS, 1, 1, generator=g) * 3 + 2
    d = ((yy - c[:, :1, None]) ** 2 + (xx - c[:, 1:, None]) ** 2).sqrt()
    img = torch.exp(-((d - r) ** 2) / 1.5) * 2 - 1
    return TensorDataset(img.view(ROWS, SIDE * SIDE))


def generator() -> nn.Module:
    return nn.Sequential(nn.Linear(LATENT, 256), nn.ReLU(), nn.Linear(256, 512),
                         nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, SIDE * SIDE), nn.Tanh())


def discriminator() -> nn.Module:
    return nn.Sequential(nn.Linear(SIDE * SIDE, 512), nn.LeakyReLU(0.2), nn.Linear(512, 256),
                         nn.LeakyReLU(0.2), nn.Linear(256, 1))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    loader = DataLoader(make_data(), batch_size=256, shuffle=True, drop_last=True)
    net_g, net_d = generator().to(dev), discriminator().to(dev)
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()

    def train_step(batch: Any) -> torch.Tensor:
        real = batch[0].to(dev)
        n = real.shape[0]
        ones, zeros = torch.ones(n, 1, device=dev), torch.zeros(n, 1, device=dev)
        fake = net_g(torch.randn(n, LATENT, device=dev))
        opt_d.zero_grad()
        loss_d = bce(net_d(real), ones) + bce(net_d(fake.detach()), zeros)
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(net_d(fake), ones)
        loss_g.backward()
        opt_g.step()
        return loss_g.detach()

    return {"model": net_d, "models": [net_g, net_d], "loader": loader, "optimizer": opt_g,
            "loss_fn": None, "train_step": train_step, "batches": lambda: forever(loader),
            "device": dev, "marks_steps": False,
            "covers": ("in-memory", "two-models", "mlp")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
