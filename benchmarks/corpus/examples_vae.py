"""A variational autoencoder on MNIST as in PyTorch's example: the 60,000 28x28 grey images
are held in memory as one uint8 tensor, each sample made a PIL image and turned into a float
tensor in [0, 1] (ToTensor only) in ``__getitem__``; batch 128, shuffled, on a GPU 1
DataLoader worker with pinned memory; a fully connected encoder/decoder (784-400-20),
reparameterised sampling, binary cross-entropy plus KL divergence summed, Adam (lr 1e-3).

Adapted from pytorch/examples, vae/main.py, at commit
77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).
Changed:
- torchvision's ``datasets.MNIST`` (downloaded) is replaced by ``_mnist_like.MNISTLike``:
  synthetic handwriting-like digits written once as MNIST's raw IDX files and read whole
  into memory, indexed per sample the same way (``Image.fromarray`` then the transform);
- ``transforms.ToTensor`` is an inline equivalent (``_mnist_like.to_tensor``);
- ``torch.accelerator`` / ``--no-accel`` become ``dev.type == "cuda"`` (the loader's
  ``num_workers=1, pin_memory=True`` apply there only, as in the script);
- the module-level script is moved into ``make_job`` (argparse defaults are constants; the
  seed is set by ``torch.manual_seed(1)`` as there); the test loop, logging and the saved
  sample images are left out (the running ``train_loss += loss.item()`` stays: a host
  sync a step on a GPU);
- ``model.train()`` is called in each step (the script calls it once an epoch).
- ``super(VAE, self)`` written ``super()`` (the project's lint).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

from ._common import forever, pick_device, run
from ._mnist_like import MNISTLike, to_tensor

BATCH_SIZE, SEED = 128, 1


class VAE(nn.Module):
    def __init__(self):
        super().__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


def step_fn(model: nn.Module, batch: Any) -> torch.Tensor:
    """One forward and the loss, for a batch already on the model's device."""
    data, _ = batch
    recon_batch, mu, logvar = model(data)
    return loss_function(recon_batch, data, mu, logvar)


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    use_accel = dev.type == "cuda"
    torch.manual_seed(SEED)

    kwargs: dict[str, Any] = {"num_workers": 1, "pin_memory": True} if use_accel else {}
    train_loader = torch.utils.data.DataLoader(
        MNISTLike(transform=to_tensor),
        batch_size=BATCH_SIZE, shuffle=True, **kwargs)

    model = VAE().to(dev)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    state = {"train_loss": 0.0}

    def train_step(batch: Any) -> torch.Tensor:
        data, _ = batch
        model.train()
        data = data.to(dev)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        state["train_loss"] += loss.item()
        optimizer.step()
        return loss.detach()

    covers = ("in-memory", "mlp", *(("workers",) if use_accel else ()))
    return {"model": model, "loader": train_loader, "optimizer": optimizer, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step,
            "batches": lambda: forever(train_loader), "device": dev, "marks_steps": False,
            "covers": covers}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
