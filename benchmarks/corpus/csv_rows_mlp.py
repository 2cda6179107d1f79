"""Tabular regression from a CSV file: the lines are read once into a list, and each
sample is parsed in ``__getitem__`` (split on commas, ``float`` each field, standardised
with column statistics computed at start-up) into a float tensor, in 2 DataLoader
workers; an MLP with dropout, MSE loss, Adam.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

ROWS, COLS = 12_000, 32


def _make_csv(root: Path) -> None:
    """``train.csv``: a header, then ROWS rows of COLS features and a target."""
    rng = random.Random(5)
    w = [rng.gauss(0, 1) for _ in range(COLS)]
    lines = [",".join([f"f{j}" for j in range(COLS)] + ["target"])]
    for _ in range(ROWS):
        x = [rng.gauss(0, 1) * (1 + j % 4) + j for j in range(COLS)]
        y = sum(a * b for a, b in zip(w, x, strict=True)) / COLS + rng.gauss(0, 0.1)
        lines.append(",".join(f"{v:.5g}" for v in [*x, y]))
    (root / "train.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


class CsvRows(Dataset):
    def __init__(self, path: Path) -> None:
        with open(path, encoding="utf-8") as f:
            self.header = f.readline().strip().split(",")
            self.lines = [line for line in f if line.strip()]
        first = [[float(v) for v in line.split(",")] for line in self.lines[:2000]]
        cols = list(zip(*first, strict=True))
        self.mean = [sum(c) / len(c) for c in cols]
        self.std = [max(1e-6, (sum((v - m) ** 2 for v in c) / len(c)) ** 0.5)
                    for c, m in zip(cols, self.mean, strict=True)]

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        fields = self.lines[i].rstrip("\n").split(",")
        vals = [(float(v) - m) / s for v, m, s in zip(fields, self.mean, self.std, strict=True)]
        return torch.tensor(vals[:-1]), torch.tensor(vals[-1:])


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = CsvRows(cache_dir("csv_rows", _make_csv) / "train.csv")
    loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=2,
                        pin_memory=dev.type == "cuda")
    model = nn.Sequential(nn.Linear(COLS, 512), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev), batch[1].to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("parse", "workers", "mlp")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
