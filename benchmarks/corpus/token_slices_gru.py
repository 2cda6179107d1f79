"""A word-level language model with no DataLoader: the token ids are one long tensor,
cut into ``BATCH`` columns, and each step takes the next ``BPTT`` rows as input and the
rows one further on as target (truncated backpropagation, the hidden state carried over
and detached). A two-layer GRU; the update is written by hand (clip the gradient norm,
``p -= lr * grad``, clear the gradients) instead of a ``torch.optim`` optimizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ._common import pick_device, run

VOCAB, TOKENS, BATCH, BPTT = 2000, 400_000, 20, 35


def make_tokens() -> torch.Tensor:
    """A token stream: Zipf-distributed words, each followed by one of its 4 successors half
    of the time (so there is something to learn)."""
    g = torch.Generator().manual_seed(3)
    zipf = 1.0 / torch.arange(1, VOCAB + 1, dtype=torch.float64)
    words = torch.multinomial(zipf, TOKENS, replacement=True, generator=g)
    nexts = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
    follow = nexts[words[:-1], torch.randint(0, 4, (TOKENS - 1,), generator=g)]
    keep = torch.rand(TOKENS - 1, generator=g) < 0.5
    words[1:] = torch.where(keep, follow, words[1:])
    return words


def batchify(data: torch.Tensor, bsz: int, device: Any) -> torch.Tensor:
    cols = data.numel() // bsz
    return data[: cols * bsz].view(bsz, cols).t().contiguous().to(device)


class GRULM(nn.Module):
    def __init__(self, vocab: int = VOCAB, emb: int = 100, hidden: int = 200) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(emb, hidden, num_layers=2, dropout=0.2)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        y, h = self.rnn(self.drop(self.embed(x)), h)
        return self.out(self.drop(y)), h


def make_job(device: Any = None, lr: float = 5.0) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = batchify(make_tokens(), BATCH, dev)
    model = GRULM().to(dev)
    state: dict[str, Any] = {"h": None}

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            for i in range(0, data.shape[0] - 1 - BPTT, BPTT):
                yield data[i:i + BPTT], data[i + 1:i + 1 + BPTT]
            state["h"] = None  # a new epoch starts from a zero state

    def train_step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        model.train()
        h = None if state["h"] is None else state["h"].detach()
        out, state["h"] = model(x, h)
        loss = nn.functional.cross_entropy(out.view(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
        model.zero_grad(set_to_none=True)
        return loss.detach()

    return {"model": model, "loader": None, "optimizer": None, "loss_fn": None,
            "train_step": train_step, "batches": batches, "device": dev,
            "marks_steps": False,
            "covers": ("in-memory", "no-loader", "hand-update", "rnn")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
