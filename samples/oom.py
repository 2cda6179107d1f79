"""Planted failure: a batch that does not fit. Sequences are padded to the longest
one in the batch and a self-attention layer builds a (length x length) score matrix
per sequence; one very long sequence in the data makes its batch need hundreds of
GiB, and the allocation fails (CUDA: ``torch.OutOfMemoryError``; CPU: the default
allocator's "can't allocate memory"). The error propagates out of ``with diagnose``
unchanged; the run folder and report are still written.

Expected finding: ``memory`` (out of memory), with the requested size.

    python samples/oom.py [--out DIR] [--steps N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # first: finds torch-diagnose in a source checkout
import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

HUGE = 1 << 17  # tokens: 8 x 131072^2 fp32 attention scores = 512 GiB


class Sequences(Dataset):
    """Token sequences of 32-96 tokens, except one of ``HUGE`` tokens at ``long_index``."""

    def __init__(self, n: int = 256, long_index: int = 40) -> None:
        self.n, self.long_index = n, long_index

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        length = HUGE if i == self.long_index else 32 + (i * 7) % 64
        return torch.randint(1, 1000, (length,), generator=g), i % 2


def collate(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = pad_sequence([t for t, _ in batch], batch_first=True)  # pad to the longest
    return tokens, torch.tensor([label for _, label in batch])


class Classifier(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(1000, dim)
        self.qk = nn.Linear(dim, 2 * dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens)
        q, k = self.qk(h).chunk(2, dim=-1)
        scores = q @ k.transpose(1, 2) / h.shape[-1] ** 0.5  # (batch, length, length)
        h = scores.softmax(-1) @ h
        return self.head(h.mean(1))


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Classifier().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(Sequences(), batch_size=8, collate_fn=collate)  # batch 5 holds the long one
    return _common.train(model, opt, loader, device, steps=steps, out_dir=out_dir, quiet=quiet,
                         expect=(torch.OutOfMemoryError, RuntimeError), **kw)


if __name__ == "__main__":
    _common.cli(main, __doc__)
