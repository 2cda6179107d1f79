"""MNIST digit classification with an LSTM reading each image row by row, as in PyTorch's
example: the 60,000 28x28 grey images are held in memory as one uint8 tensor, each sample
made a PIL image and turned into a normalised float tensor (ToTensor + Normalize) in
``__getitem__``; batch 64, shuffled, on a GPU 1 DataLoader worker with pinned memory; the
LSTM's last output through BatchNorm, dropout and two linear layers, NLL loss, Adadelta
(lr 0.1) with StepLR (gamma 0.7) each epoch.

Adapted from pytorch/examples, mnist_rnn/main.py, at commit
77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).
Changed:
- torchvision's ``datasets.MNIST`` (downloaded) is replaced by ``_mnist_like.MNISTLike``:
  synthetic handwriting-like digits written once as MNIST's raw IDX files and read whole
  into memory, indexed per sample the same way (``Image.fromarray`` then the transform);
- ``transforms.Compose/ToTensor/Normalize`` are inline equivalents (``_mnist_like``);
- ``--accel`` / ``torch.accelerator`` become ``dev.type == "cuda"`` (the loader's
  ``num_workers=1, pin_memory=True`` apply there only, as in the script);
- argparse defaults are constants; the seed is set by ``torch.manual_seed(1)`` as there;
- the test loop, logging and model saving are left out; the epoch loop is the endless
  ``batches()`` iterator, which steps the StepLR scheduler at each epoch's end.
- ``super(Net, self)`` written ``super()`` (the project's lint).
- ``model.train()`` is called in each step (the script calls it once an epoch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

from ._common import pick_device, run
from ._mnist_like import Compose, MNISTLike, Normalize, to_tensor

BATCH_SIZE, LR, GAMMA, SEED = 64, 0.1, 0.7, 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        # Shape of input is (batch_size,1, 28, 28)
        # converting shape of input to (batch_size, 28, 28)
        # as required by RNN when batch_first is set True
        input = input.reshape(-1, 28, 28)
        output, hidden = self.rnn(input)

        # RNN output shape is (seq_len, batch, input_size)
        # Get last output of RNN
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        output = F.log_softmax(output, dim=1)
        return output


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    use_accel = dev.type == "cuda"
    torch.manual_seed(SEED)

    kwargs: dict[str, Any] = {"num_workers": 1, "pin_memory": True} if use_accel else {}
    train_loader = torch.utils.data.DataLoader(
        MNISTLike(transform=Compose([
            to_tensor,
            Normalize((0.1307,), (0.3081,)),
        ])),
        batch_size=BATCH_SIZE, shuffle=True, **kwargs)

    model = Net().to(dev)
    optimizer = optim.Adadelta(model.parameters(), lr=LR)
    scheduler = StepLR(optimizer, step_size=1, gamma=GAMMA)

    def train_step(batch: Any) -> torch.Tensor:
        data, target = batch
        model.train()
        data, target = data.to(dev), target.to(dev)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def batches() -> Iterator[Any]:
        while True:  # one epoch a pass, the scheduler stepped after each
            yield from train_loader
            scheduler.step()

    covers = ("in-memory", "rnn", *(("workers",) if use_accel else ()))
    return {"model": model, "loader": train_loader, "optimizer": optimizer,
            "loss_fn": F.nll_loss, "train_step": train_step, "batches": batches,
            "device": dev, "marks_steps": False, "covers": covers}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
