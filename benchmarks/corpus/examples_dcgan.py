"""PyTorch's DCGAN example run with ``--dataset fake``: torchvision's ``FakeData`` makes
each 3x64x64 sample on the fly (seeded by its index: ``torch.randn``, turned into a PIL
image, then ``ToTensor``) in 2 DataLoader workers, batch 64, shuffled; each step trains
the discriminator on the real batch and on a generated one, then the generator through
the discriminator (BCE loss), each of the two conv nets with its own Adam.

Adapted from pytorch/examples, dcgan/main.py, at commit
77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).

Changed:
- torchvision's ``FakeData`` (size 1000, 10 classes) and its ``ToPILImage`` are written
  here with torch, numpy and PIL, doing what torchvision does (no torchvision here), and
  ``ToTensor`` comes from ``_torchvision.py``; with ``--dataset fake`` the script's only
  transform is ``ToTensor`` (the Resize/CenterCrop/Normalize chain is for the image-folder
  datasets);
- argparse becomes constants (the script's defaults: batch 64, image 64, nz 100, 2
  workers, lr 2e-4, beta1 0.5, 1 GPU, seed fixed at 0 instead of a random one), except
  ``ngf``/``ndf``, the generator's and discriminator's widths, scaled from 64 to 16: one
  step took 3.7-5 s at 64 and over 250 ms at 32 on a 2-CPU machine (about 100 ms at 16);
- the device is ``pick_device`` (CUDA where there is one) instead of ``--accel``; the
  script's ``cudnn.benchmark = True`` is set only on CUDA;
- the loop body is ``train_step`` (returning errG); its progress print, the sample images
  written every 100 iterations (with their extra ``netG(fixed_noise)``) and the
  per-epoch checkpoints are left out; the ``.item()`` calls it makes are kept;
- ``make_job`` gives ``model`` = netD (the model run three times a step) and ``models`` =
  [netG, netD]; ``optimizer`` is optimizerG (stepped last).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data
from PIL import Image

from ._common import forever, pick_device, run
from ._torchvision import ToTensor

WORKERS, BATCH_SIZE, IMAGE_SIZE = 2, 64, 64
LR, BETA1, NGPU, SEED = 0.0002, 0.5, 1, 0
nz, ngf, ndf, nc = 100, 16, 16, 3


# --- torchvision's FakeData and ToPILImage, inline ------------------------------------

def to_pil_image(pic: torch.Tensor) -> Image.Image:
    """``transforms.ToPILImage()`` on a float CHW tensor of 3 channels."""
    if pic.is_floating_point():
        pic = pic.mul(255).byte()
    npimg = np.transpose(pic.cpu().numpy(), (1, 2, 0))
    return Image.fromarray(npimg, mode="RGB")


class FakeData(torch.utils.data.Dataset):
    """A fake dataset that returns randomly generated images as PIL images."""

    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10,
                 transform=None, target_transform=None, random_offset=0):
        self.size = size
        self.num_classes = num_classes
        self.image_size = image_size
        self.transform = transform
        self.target_transform = target_transform
        self.random_offset = random_offset

    def __getitem__(self, index):
        # create random image that is consistent with the index id
        if index >= len(self):
            raise IndexError(f"{self.__class__.__name__} index out of range")
        rng_state = torch.get_rng_state()
        torch.manual_seed(index + self.random_offset)
        img = torch.randn(*self.image_size)
        target = torch.randint(0, self.num_classes, size=(1,), dtype=torch.long)[0]
        torch.set_rng_state(rng_state)

        # convert to PIL Image
        img = to_pil_image(img)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)

        return img, target.item()

    def __len__(self):
        return self.size


# --- dcgan/main.py's models ------------------------------------------------------------

# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(     nz, ngf * 8, 4, 1, 0, bias=False),  # noqa: E201
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2,     ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(    ngf,      nc, 4, 2, 1, bias=False),  # noqa: E201
            nn.Tanh()
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):

        if (input.is_cuda or input.is_xpu) and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        if (input.is_cuda or input.is_xpu) and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)

        return output.view(-1, 1).squeeze(1)


def make_job(device: Any = None) -> dict[str, Any]:
    device = pick_device(device)
    torch.manual_seed(SEED)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    dataset = FakeData(image_size=(3, IMAGE_SIZE, IMAGE_SIZE), transform=ToTensor())
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE,
                                             shuffle=True, num_workers=int(WORKERS))

    netG = Generator(NGPU).to(device)
    netG.apply(weights_init)
    netD = Discriminator(NGPU).to(device)
    netD.apply(weights_init)

    criterion = nn.BCELoss()
    real_label = 1
    fake_label = 0

    # setup optimizer
    optimizerD = optim.Adam(netD.parameters(), lr=LR, betas=(BETA1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=LR, betas=(BETA1, 0.999))

    def train_step(data: Any) -> torch.Tensor:
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        real_cpu = data[0].to(device)
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label,
                           dtype=real_cpu.dtype, device=device)

        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()  # noqa: F841

        # train with fake
        noise = torch.randn(batch_size, nz, 1, 1, device=device)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()  # noqa: F841
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()  # noqa: F841
        optimizerG.step()

        errD.item(), errG.item()  # the script prints both each step
        return errG.detach()

    return {"model": netD, "models": [netG, netD], "loader": dataloader,
            "optimizer": optimizerG, "loss_fn": None, "train_step": train_step,
            "batches": lambda: forever(dataloader), "device": device, "marks_steps": False,
            "covers": ("two-models", "workers", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
