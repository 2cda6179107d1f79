"""Text classification with per-sample Python tokenising: each review is lower-cased,
split with a regular expression into words and punctuation and looked up in a vocabulary
dict, giving a dict row; a custom ``collate_fn`` pads each batch to its longest row and
builds the attention mask; a small Transformer encoder (mean-pooled) classifies. No
workers, as in a notebook; AdamW.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

TOKEN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")
MAX_LEN, PAD, UNK = 128, 0, 1
GOOD = ["great", "lovely", "superb", "fun", "moving", "sharp", "warm"]
BAD = ["dull", "awful", "tedious", "flat", "messy", "cold", "weak"]


def _make_reviews(root: Path) -> None:
    """4,000 lines ``label<TAB>text`` of 20-90 words from a made-up vocabulary."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(6000)]
    lines = []
    for _ in range(4000):
        label = rng.randrange(2)
        mood = GOOD if label else BAD
        out = []
        for _ in range(rng.randint(20, 90)):
            w = rng.choice(mood) if rng.random() < 0.05 else rng.choice(words)
            out.append(w.capitalize() if rng.random() < 0.1 else w)
            if rng.random() < 0.12:
                out[-1] += rng.choice(",.;!?")
        lines.append(f"{label}\t{' '.join(out)}")
    (root / "reviews.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class Reviews(Dataset):
    def __init__(self, path: Path) -> None:
        self.rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            label, text = line.split("\t", 1)
            self.rows.append((text, int(label)))
        counts = Counter(t for text, _ in self.rows for t in tokenize(text))
        self.vocab = {"<pad>": PAD, "<unk>": UNK}
        for tok, n in counts.most_common():
            if n >= 2:
                self.vocab[tok] = len(self.vocab)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        text, label = self.rows[i]
        ids = [self.vocab.get(t, UNK) for t in tokenize(text)][:MAX_LEN]
        return {"input_ids": ids, "label": label}


def pad_collate(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    longest = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), longest), PAD, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, :len(r["input_ids"])] = torch.tensor(r["input_ids"])
    return {"input_ids": ids, "attention_mask": ids != PAD,
            "labels": torch.tensor([r["label"] for r in rows])}


class Classifier(nn.Module):
    def __init__(self, vocab: int, dim: int = 64, layers: int = 2, classes: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.zeros(MAX_LEN, dim))
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=4 * dim,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        h = self.encoder(h, src_key_padding_mask=~attention_mask)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1))


def step_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch["input_ids"], batch["attention_mask"]),
                                       batch["labels"])


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = Reviews(cache_dir("reviews", _make_reviews) / "reviews.tsv")
    loader = DataLoader(data, batch_size=32, shuffle=True, collate_fn=pad_collate,
                        pin_memory=dev.type == "cuda")
    model = Classifier(len(data.vocab)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)

    def train_step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = {k: v.to(dev) for k, v in batch.items()}
        loss = step_fn(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step, "batches": lambda: forever(loader),
            "device": dev, "marks_steps": False,
            "covers": ("tokenise", "dict-collate", "transformer")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
