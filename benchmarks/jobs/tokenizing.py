"""A text classifier whose samples are tokenised in Python per sample (lower-case, split,
strip punctuation, look words up in a vocabulary, pad): pure-Python work that holds the
GIL, feeding an EmbeddingBag model."""

from __future__ import annotations

import random
import string
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORDS = ["".join(random.Random(i).choices(string.ascii_lowercase, k=3 + i % 7))
         for i in range(5000)]
VOCAB = {w: i + 1 for i, w in enumerate(dict.fromkeys(WORDS))}  # 0: padding / unknown
SEQ = 128


class Texts(Dataset):
    def __init__(self, n: int = 20_000) -> None:
        rng = random.Random(0)
        self.texts = [" ".join(rng.choice(WORDS).capitalize() + rng.choice(",.;! ")
                               for _ in range(rng.randint(60, 160))) for _ in range(n)]
        self.labels = [rng.randrange(4) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        words = self.texts[i].lower().translate(str.maketrans("", "", string.punctuation)).split()
        ids = [VOCAB.get(w, 0) for w in words][:SEQ]
        ids += [0] * (SEQ - len(ids))
        return torch.tensor(ids), self.labels[i]


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(len(VOCAB) + 1, 128, mode="mean", padding_idx=0)
        self.head = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512),
                                  nn.ReLU(), nn.Linear(512, 4))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


def make_job(num_workers: int = 0) -> dict[str, Any]:
    torch.manual_seed(0)
    m = Classifier()
    return {"model": m,
            "loader": DataLoader(Texts(), batch_size=128, shuffle=True,
                                 num_workers=num_workers),
            "optimizer": torch.optim.Adam(m.parameters(), lr=1e-3),
            "loss_fn": nn.functional.cross_entropy}
