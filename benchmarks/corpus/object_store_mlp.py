"""Tabular classification from records held in an object store: each sample is one GET
(a network round trip of a few milliseconds, emulated by a deterministic per-key latency
in ``time.sleep``: the worker waits, it does not compute), then its bytes are decoded with
``numpy.frombuffer`` into a float tensor; 2 DataLoader workers, an MLP, AdamW.

The latency stands in for S3, GCS or an NFS mount seen from a training host; the job has no
network access, so the store is a dict of ``bytes`` in memory.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import forever, pick_device, run

# 96 batches an epoch: corpus_predict times an epoch of at most 100 whole, workers restarting
RECORDS, FEATURES, CLASSES = 3072, 96, 8
#: a GET's latency: LATENCY_S, up to twice that for some keys (a store's spread)
LATENCY_S = 0.002


class ObjectStore(Dataset):
    """Records as bytes under string keys; ``__getitem__`` is one GET and a decode."""

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        centers = rng.normal(0, 1, (CLASSES, FEATURES))
        labels = rng.integers(0, CLASSES, RECORDS)
        x = centers[labels] + rng.normal(0, 1.5, (RECORDS, FEATURES))
        self.store = {f"part-{i:05d}": x[i].astype(np.float32).tobytes() for i in range(RECORDS)}
        self.labels = labels.tolist()
        self.wait = (LATENCY_S * (1 + (np.arange(RECORDS) * 7919 % 100) / 100)).tolist()

    def __len__(self) -> int:
        return RECORDS

    def get(self, key: str, i: int) -> bytes:
        time.sleep(self.wait[i])  # the round trip: nothing on this process's CPU
        return self.store[key]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        raw = self.get(f"part-{i:05d}", i)
        return torch.from_numpy(np.frombuffer(raw, dtype=np.float32).copy()), self.labels[i]


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    loader = DataLoader(ObjectStore(), batch_size=32, shuffle=True, num_workers=2,
                        pin_memory=dev.type == "cuda", drop_last=True)
    model = nn.Sequential(nn.Linear(FEATURES, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                          nn.Linear(512, CLASSES)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev), batch[1].to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("io-wait", "workers", "mlp")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
