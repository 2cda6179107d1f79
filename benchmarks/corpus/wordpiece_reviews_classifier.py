"""Review sentiment classification: sentences are read from a text file into a list, and
each sample is tokenised in ``__getitem__`` by BERT-style text cleaning (NFD, accents stripped, per character), a regex pre-tokeniser plus a
greedy longest-match WordPiece over a vocab dict, truncated/padded to 128 ids, in the main
process (num_workers=0); a text CNN (embeddings, 3 parallel conv1d, max over time), AdamW.
"""
from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

N_SENT, MAXLEN, BATCH = 8000, 128, 64
SYLL = ["ka", "ro", "mi", "te", "su", "na", "lo", "vi", "pe", "da", "zu", "ni", "go", "ha",
        "ble", "tion", "ing", "er", "ly", "ful", "ness", "un", "re", "pre"]


def _make(root: Path) -> None:
    rng = random.Random(11)
    words = ["".join(rng.choice(SYLL) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    good = set(rng.sample(words, 300))
    lines = []
    for _ in range(N_SENT):
        ws = [rng.choice(words) for _ in range(rng.randint(60, 160))]
        label = int(sum(w in good for w in ws) > 1)
        punct = rng.choice([".", "!", "?", "...", ","])
        lines.append(f"{label}\t{' '.join(ws).capitalize()}{punct} It's {rng.randint(1, 99)}/100!")
    (root / "reviews.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = ["[PAD]", "[UNK]", "[CLS]"] + sorted(set(SYLL)) + ["##" + s for s in SYLL]
    vocab += [str(i) for i in range(10)] + ["##" + str(i) for i in range(10)] + list(".,!?/'")
    vocab += sorted({w for w in words if len(w) <= 6})
    vocab = list(dict.fromkeys(vocab))
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")


class WordPiece:
    PRE = re.compile(r"\w+|[^\w\s]")

    def __init__(self, vocab_file: Path) -> None:
        self.vocab = {w: i for i, w in enumerate(vocab_file.read_text().split("\n")) if w}

    def word(self, w: str) -> list[int]:
        out, start = [], 0
        while start < len(w):
            end = len(w)
            cur = None
            while start < end:
                sub = w[start:end] if start == 0 else "##" + w[start:end]
                if sub in self.vocab:
                    cur = self.vocab[sub]
                    break
                end -= 1
            if cur is None:
                return [self.vocab["[UNK]"]]
            out.append(cur)
            start = end
        return out

    @staticmethod
    def clean(text: str) -> str:
        """BERT's BasicTokenizer steps: NFD, accents stripped, control chars dropped."""
        text = unicodedata.normalize("NFD", text.lower())
        return "".join(c for c in text if unicodedata.category(c) not in ("Mn", "Cc"))

    def __call__(self, text: str) -> list[int]:
        ids = [self.vocab["[CLS]"]]
        for w in self.PRE.findall(self.clean(text)):
            ids.extend(self.word(w))
        return ids


class Reviews(Dataset):
    def __init__(self, root: Path) -> None:
        self.rows = [ln.split("\t", 1) for ln in (root / "reviews.tsv").read_text().splitlines()]
        self.tok = WordPiece(root / "vocab.txt")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        label, text = self.rows[i]
        ids = self.tok(text)[:MAXLEN]
        ids = ids + [0] * (MAXLEN - len(ids))
        return torch.tensor(ids, dtype=torch.long), torch.tensor(int(label))


class TextCNN(nn.Module):
    """Kim-style text CNN: embeddings, parallel 1-D convolutions, max over time."""

    def __init__(self, vocab: int, d: int = 48, ch: int = 48) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(d, ch, k, padding=k // 2) for k in (3, 4, 5))
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(3 * ch, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x).transpose(1, 2)
        h = torch.cat([torch.relu(c(h)).amax(-1) for c in self.convs], 1)
        return self.head(self.drop(h))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = Reviews(cache_dir("wordpiece_reviews", _make))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=0, drop_last=True)
    model = TextCNN(len(data.tok.vocab)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev), batch[1].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("tokenise", "conv")}


def main(steps: int = 8) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
