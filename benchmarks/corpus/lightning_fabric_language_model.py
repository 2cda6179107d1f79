"""Next-word prediction with Lightning Fabric: a WikiText-2-sized text file is read and
tokenised once at start-up (words split on whitespace, ``<eos>`` a line, a dictionary built in
Python) into one long tensor of ids; the dataset slices 35-token blocks (input and the block
shifted by one as target) from it per sample, ``random_split`` into train / val / test, a
DataLoader with batch 20, shuffled, no workers. Lightning's demo encoder-decoder Transformer
(2+2 layers, width 200, log-softmax over the whole vocabulary), NLL loss, plain SGD; Fabric
sets up the model, optimizer and loaders, runs ``fabric.backward`` and clips the gradients
by value.

Adapted from Lightning-AI/pytorch-lightning, examples/fabric/language_model/train.py (with
``Transformer`` and ``WikiText2`` imported from lightning.pytorch.demos, as it does: the
installed lightning 2.6.6's src/lightning/pytorch/demos/transformer.py is identical to the
commit's), at commit 7f0c3436cd3f6ad3753125672024fc415cbcb414 (Apache-2.0; text in
licenses/Lightning-AI_pytorch-lightning.txt).

Changed:
- WikiText2's download of wikitext-2 ``train.txt`` is replaced by English-like text of the
  same size (10.9 M characters, 1.9 M tokens, one paragraph a line, blank lines between)
  from ``english_like_text``, written as ``wikitext-2.txt`` at first use;
  ``WikiText2(data_dir=..., download=False)`` then reads and tokenises it as the demo does;
- its vocabulary is 7,410 words (with ``<eos>``) instead of WikiText-2's 33,278 (the
  Transformer's embedding and its output layer over the vocabulary shrink with it), for a
  5-200 ms CPU step;
- ``L.Fabric()`` (the example is launched with ``fabric run --accelerator=cpu``) becomes
  ``L.Fabric(accelerator="cpu", devices=1)``, or ``"cuda"`` where the job's device is CUDA;
- the epoch loop with its validation and printing is replaced by one step per batch, the
  body of ``train_epoch`` unchanged (``model(input, target)``, ``F.nll_loss``,
  ``fabric.backward``, ``fabric.clip_gradients(clip_val=0.25)``, ``optimizer.step()``,
  ``optimizer.zero_grad()``); the batch arrives on the device through Fabric's loader, and
  ``train_step`` also moves it there (a no-op then; the benchmarks rebuild the torch
  DataLoader for a change and feed its batches to the step as they come);
- ``L.seed_everything(42)`` made quiet (``verbose=False``), and ``torch.manual_seed(42)``
  after it (the same seed again);
- the job's ``loader`` is the torch DataLoader under Fabric's ``_FabricDataLoader`` (the
  benchmarks rebuild it for a change; diagnose times the wrapper's batches on it either
  way), and its model the one Fabric wraps (diagnose finds it and its steps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.demos import Transformer, WikiText2
from torch.utils.data import DataLoader, random_split

from ._common import cache_dir, forever, pick_device, run
from ._text import english_like_text

#: about the size of wikitext-2's train.txt; VOCAB made-up words give 7,409 distinct tokens
#: (with their capitalised and punctuated forms; 7,410 with ``<eos>``), against 33,278
CHARS, VOCAB = 10_900_000, 1500


def _make_text(root: Path) -> None:
    text = english_like_text(CHARS, seed=2, vocab=VOCAB)
    (root / "wikitext-2.txt").write_text(text, encoding="utf-8")


def get_dataloaders(dataset: Any) -> tuple[DataLoader, DataLoader, DataLoader]:
    n = len(dataset)
    generator = torch.Generator().manual_seed(42)
    train_dataset, val_dataset, test_dataset = random_split(
        dataset, [n - 4000, 2000, 2000], generator=generator)
    train_dataloader = DataLoader(train_dataset, batch_size=20, shuffle=True)
    val_dataloader = DataLoader(val_dataset, batch_size=20, shuffle=False)
    test_dataloader = DataLoader(test_dataset, batch_size=20, shuffle=False)
    return train_dataloader, val_dataloader, test_dataloader


def step_fn(model: Any, batch: Any) -> torch.Tensor:
    """One forward and the loss, for a batch already on the model's device."""
    input, target = batch
    output = model(input, target)
    return F.nll_loss(output, target.view(-1))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    L.seed_everything(42, verbose=False)
    torch.manual_seed(42)

    cuda = dev.type == "cuda"
    fabric = L.Fabric(accelerator="cuda" if cuda else "cpu",
                      devices=[dev.index] if cuda and dev.index is not None else 1)

    # Data
    dataset = WikiText2(data_dir=cache_dir("wikitext2_like", _make_text), download=False)
    train_dataloader, val_dataloader, _ = get_dataloaders(dataset)
    torch_loader = train_dataloader

    # Model
    model = Transformer(vocab_size=dataset.vocab_size)

    # Optimizer
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    model, optimizer = fabric.setup(model, optimizer)
    train_dataloader, val_dataloader = fabric.setup_dataloaders(train_dataloader, val_dataloader)
    model.train()

    def train_step(batch: Any) -> torch.Tensor:
        input, target = batch[0].to(fabric.device), batch[1].to(fabric.device)
        output = model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        fabric.backward(loss)
        fabric.clip_gradients(model, optimizer, clip_val=0.25)
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    # the torch DataLoader under Fabric's wrapper (the batches come through the wrapper)
    return {"model": model, "loader": torch_loader, "optimizer": optimizer, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step,
            "batches": lambda: forever(train_dataloader), "device": fabric.device,
            "marks_steps": False, "covers": ("in-memory", "transformer")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
