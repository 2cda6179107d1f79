"""Sequence classification over variable-length token sequences: a custom batch sampler
groups sequences of similar length (sort within shuffled chunks, then shuffle the
batches), the ``collate_fn`` pads each batch and returns the lengths, and a bidirectional
LSTM reads them as packed sequences (``pack_padded_sequence``). Sequences held in memory
as Python lists; RMSprop.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.data import DataLoader, Dataset, Sampler

from ._common import forever, pick_device, run

SEQS, VOCAB, CLASSES, BATCH = 6000, 5000, 5, 64


class Sequences(Dataset):
    def __init__(self) -> None:
        rng = random.Random(6)
        self.rows = []
        for _ in range(SEQS):
            label = rng.randrange(CLASSES)
            n = int(rng.lognormvariate(3.2, 0.5)) + 5
            ids = [rng.randrange(2, VOCAB) if rng.random() > 0.1 else 2 + label
                   for _ in range(min(n, 120))]
            self.rows.append((ids, label))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.rows[i]


class BucketBatchSampler(Sampler[list[int]]):
    def __init__(self, lengths: list[int], batch_size: int, chunk: int = 50) -> None:
        self.lengths, self.batch_size, self.chunk = lengths, batch_size, chunk

    def __iter__(self) -> Iterator[list[int]]:
        idx = torch.randperm(len(self.lengths)).tolist()
        span = self.batch_size * self.chunk
        batches = []
        for s in range(0, len(idx), span):
            part = sorted(idx[s:s + span], key=self.lengths.__getitem__)
            batches += [part[k:k + self.batch_size] for k in range(0, len(part), self.batch_size)]
        for k in torch.randperm(len(batches)).tolist():
            yield batches[k]

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


def pad_batch(rows: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(ids) for ids, _ in rows])
    x = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
    for k, (ids, _) in enumerate(rows):
        x[k, :len(ids)] = torch.tensor(ids)
    return x, lengths, torch.tensor([label for _, label in rows])


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64, padding_idx=0)
        self.lstm = nn.LSTM(64, 96, batch_first=True, bidirectional=True)
        self.head = nn.Linear(192, CLASSES)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embed(x), lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.head(torch.cat([h[0], h[1]], dim=1))


def step_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    x, lengths, y = batch
    return nn.functional.cross_entropy(model(x, lengths), y)


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = Sequences()
    sampler = BucketBatchSampler([len(ids) for ids, _ in data.rows], BATCH)
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=pad_batch)
    model = LSTMClassifier().to(dev)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)

    def train_step(batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, lengths, y = batch
        loss = step_fn(model, (x.to(dev), lengths, y.to(dev)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step, "batches": lambda: forever(loader),
            "device": dev, "marks_steps": False,
            "covers": ("in-memory", "sampler", "rnn")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
