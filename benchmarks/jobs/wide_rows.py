"""A tabular job whose samples are dicts of 24 feature columns, each its own small tensor,
parsed from a line of text per sample: a batch from a worker is 25 tensors, each handed
over with its own file descriptor (a connection and a handshake each). On the 2-vCPU
development VM a real worker's other threads spent 14-18 ms a batch sending it, beside
24 ms of making it, and workers made the step slower: 0, 1 and 2 workers beside torch's 2
threads 25, 72 and 45 ms a step; 2 workers beside 1 thread 37 ms."""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

COLS = 24


class Rows(Dataset):
    def __init__(self, n: int = 40_000) -> None:
        rng = random.Random(0)
        self.rows = [",".join(f"{rng.random():.5f}" for _ in range(COLS * 8)) for _ in range(n)]
        self.labels = [rng.randrange(5) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[dict[str, torch.Tensor], int]:
        vals = [float(v) for v in self.rows[i].split(",")]
        return ({f"c{j}": torch.tensor(vals[j * 8:(j + 1) * 8]) for j in range(COLS)},
                self.labels[i])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(COLS * 8, 512), nn.ReLU(), nn.Linear(512, 512),
                                  nn.ReLU(), nn.Linear(512, 5))

    def forward(self, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.body(torch.cat([x[f"c{j}"] for j in range(COLS)], dim=1))


def make_job(num_workers: int = 0) -> dict[str, Any]:
    torch.manual_seed(0)
    m = Net()
    return {"model": m,
            "loader": DataLoader(Rows(), batch_size=64, shuffle=True, num_workers=num_workers),
            "optimizer": torch.optim.Adam(m.parameters(), lr=1e-3),
            "loss_fn": nn.functional.cross_entropy}
