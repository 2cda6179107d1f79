"""Click-through-style tabular model on tensors held in memory: a Dataset over a dense
float matrix, a matrix of categorical ids and a target, indexed one sample at a time in
``__getitem__`` (a tuple of three tensors) and stacked by the default collate into
batches of 1024, in the main process (num_workers=0); per-field embeddings concatenated
with the dense features into an MLP, BCE-with-logits, Adam.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

ROWS, DENSE, FIELDS, CARD, BATCH = 200_000, 13, 8, 1000, 1024


def _make(root: Path) -> None:
    g = torch.Generator().manual_seed(21)
    dense = torch.randn(ROWS, DENSE, generator=g)
    cats = torch.randint(0, CARD, (ROWS, FIELDS), generator=g)
    w = torch.randn(DENSE, generator=g)
    logit = dense @ w * 0.5 + (cats[:, 0] % 7 == 0).float() - 0.5
    y = (torch.rand(ROWS, generator=g) < torch.sigmoid(logit)).float()
    torch.save({"dense": dense, "cats": cats, "y": y}, root / "table.pt")


class Table(Dataset):
    def __init__(self, root: Path) -> None:
        t = torch.load(root / "table.pt")
        self.dense, self.cats, self.y = t["dense"], t["cats"], t["y"]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.dense[i], self.cats[i], self.y[i]


class EmbMlp(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(CARD, d) for _ in range(FIELDS))
        self.mlp = nn.Sequential(nn.Linear(DENSE + FIELDS * d, 256), nn.ReLU(),
                                 nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, dense: torch.Tensor, cats: torch.Tensor) -> torch.Tensor:
        e = [emb(cats[:, k]) for k, emb in enumerate(self.embs)]
        return self.mlp(torch.cat([dense, *e], 1)).squeeze(1)


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = Table(cache_dir("tabular_embeddings", _make))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=0, drop_last=True)
    model = EmbMlp().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()

    def step_fn(m: nn.Module, batch: Any) -> torch.Tensor:
        return bce(m(batch[0], batch[1]), batch[2])

    def train_step(batch: Any) -> torch.Tensor:
        batch = [t.to(dev) for t in batch]
        opt.zero_grad()
        loss = step_fn(model, batch)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step, "batches": lambda: forever(loader),
            "device": dev, "marks_steps": False, "covers": ("in-memory", "mlp")}


def main(steps: int = 8) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
