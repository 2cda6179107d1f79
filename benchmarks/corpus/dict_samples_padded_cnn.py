"""Sequence tagging-style classification on dict samples, as a Hugging Face-like dataset
gives them: each ``__getitem__`` returns ``{"input_ids", "attention_mask", "label"}`` built
from the stored text (whitespace split, vocab lookup) (with random token masking as augmentation), and a
custom ``collate_fn`` pads the variable-length sequences to the batch's longest and stacks
the dict; 1 DataLoader worker; an embedding + two conv1d layers, masked mean pool,
Adam, gradient clipping.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

N, VOCAB, CLASSES, BATCH = 6000, 5000, 6, 64


def _make(root: Path) -> None:
    rng = random.Random(7)
    rows = []
    for _ in range(N):
        label = rng.randrange(CLASSES)
        n = rng.randint(20, 300)
        ids = [rng.randrange(1, VOCAB) if rng.random() > 0.1 else 1 + label * 50 + rng.randrange(50)
               for _ in range(n)]
        rows.append({"text": " ".join(f"w{t}" for t in ids), "label": label})
    (root / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


class DictSeqs(Dataset):
    def __init__(self, root: Path) -> None:
        with open(root / "train.jsonl") as f:
            self.rows = [json.loads(line) for line in f]
        self.vocab = {f"w{t}": t for t in range(VOCAB)}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        ids = [self.vocab.get(w, 2) for w in row["text"].split()]
        ids = [t if random.random() > 0.15 else 3 for t in ids]  # [MASK]=3
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.ones(len(ids), dtype=torch.long),
                "label": torch.tensor(row["label"])}


def pad_collate(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    mask = torch.zeros(len(samples), longest, dtype=torch.long)
    for k, s in enumerate(samples):
        n = len(s["input_ids"])
        ids[k, :n] = s["input_ids"]
        mask[k, :n] = s["attention_mask"]
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.stack([s["label"] for s in samples])}


class ConvClassifier(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        self.convs = nn.Sequential(nn.Conv1d(d, d, 5, padding=2), nn.ReLU(),
                                   nn.Conv1d(d, d, 5, padding=2), nn.ReLU())
        self.head = nn.Linear(d, CLASSES)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.convs(self.emb(input_ids).transpose(1, 2))
        m = attention_mask.unsqueeze(1).float()
        return self.head((h * m).sum(-1) / m.sum(-1))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    random.seed(0)
    data = DictSeqs(cache_dir("dict_samples_padded", _make))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=1,
                        collate_fn=pad_collate, drop_last=True)
    model = ConvClassifier().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    ce = nn.CrossEntropyLoss()

    def step_fn(m: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return ce(m(batch["input_ids"], batch["attention_mask"]), batch["labels"])

    def train_step(batch: Any) -> torch.Tensor:
        batch = {k: v.to(dev) for k, v in batch.items()}
        opt.zero_grad()
        loss = step_fn(model, batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step, "batches": lambda: forever(loader),
            "device": dev, "marks_steps": False, "covers": ("dict-collate", "workers", "conv")}


def main(steps: int = 8) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
