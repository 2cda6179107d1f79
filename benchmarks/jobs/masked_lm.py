"""A small masked language model on token rows held in memory: each sample's spans are
masked in torch ops in ``__getitem__`` (a few dozen small ops, about 0.2 ms a sample), and a
2-layer transformer encoder trains on the batch. The step is the model's compute: the
loading is ~6% of it, and workers sit idle most of the step. Neither workers nor a split of
the CPUs makes it faster on 2 CPUs; one thread for torch makes it much slower."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB, SEQ, MASK_ID = 2000, 96, 4


class Spans(Dataset):
    def __init__(self, n: int = 8192) -> None:
        g = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(5, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.tokens[i].clone()
        g = torch.Generator().manual_seed(i)
        y = torch.full_like(x, -100)  # -100: not predicted
        for _ in range(6):  # six spans: 80% masked, 10% a random token, 10% kept
            s = int(torch.randint(0, SEQ - 8, (1,), generator=g))
            w = int(torch.randint(2, 8, (1,), generator=g))
            y[s:s + w] = x[s:s + w]
            r = torch.rand(w, generator=g)
            x[s:s + w] = torch.where(r < 0.8, torch.full((w,), MASK_ID), torch.where(
                r < 0.9, torch.randint(5, VOCAB, (w,), generator=g), x[s:s + w]))
        return x, y


class MaskedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 128)
        layer = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(128, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.enc(self.emb(x)))


def token_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def make_job(num_workers: int = 0) -> dict[str, Any]:
    torch.manual_seed(0)
    m = MaskedLM()
    return {"model": m,
            "loader": DataLoader(Spans(), batch_size=32, shuffle=True, num_workers=num_workers),
            "optimizer": torch.optim.AdamW(m.parameters(), lr=1e-3),
            "loss_fn": token_loss}
