"""MNIST digit classification as in PyTorch's own example: the 60,000 28x28 grey images are
held in memory as one uint8 tensor, and each sample is made a PIL image and turned into a
normalised float tensor (ToTensor + Normalize) in ``__getitem__``; batch 64, on a GPU 1
persistent DataLoader worker with pinned memory and shuffling; a two-conv CNN with dropout,
NLL loss on log-softmax, Adadelta (lr 1.0) with StepLR (gamma 0.7) each epoch.

Adapted from pytorch/examples, mnist/main.py, at commit
77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).
Changed:
- torchvision's ``datasets.MNIST`` (downloaded) is replaced by ``_mnist_like.MNISTLike``:
  synthetic handwriting-like digits written once as MNIST's raw IDX files and read whole
  into memory, indexed per sample the same way (``Image.fromarray`` then the transform);
- ``transforms.Compose/ToTensor/Normalize`` are inline equivalents (``_mnist_like``);
- ``torch.accelerator`` / ``--no-accel`` become ``dev.type == "cuda"`` (the loader's
  accelerator kwargs apply there only, as in the script);
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

BATCH_SIZE, LR, GAMMA, SEED = 64, 1.0, 0.7, 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    use_accel = dev.type == "cuda"
    torch.manual_seed(SEED)

    train_kwargs: dict[str, Any] = {"batch_size": BATCH_SIZE}
    if use_accel:
        accel_kwargs = {"num_workers": 1,
                        "persistent_workers": True,
                        "pin_memory": True,
                        "shuffle": True}
        train_kwargs.update(accel_kwargs)

    transform = Compose([
        to_tensor,
        Normalize((0.1307,), (0.3081,)),
    ])
    dataset1 = MNISTLike(transform=transform)
    train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)

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

    covers = ("in-memory", "conv", *(("workers",) if use_accel else ()))
    return {"model": model, "loader": train_loader, "optimizer": optimizer,
            "loss_fn": F.nll_loss, "train_step": train_step, "batches": batches,
            "device": dev, "marks_steps": False, "covers": covers}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
