"""PyTorch's super-resolution example (ESPCN sub-pixel convolution, upscale factor 3) on
BSDS300's 200 training JPEGs: each sample is opened with PIL, converted to YCbCr and its
Y channel kept, then centre-cropped and resized down (the input) and centre-cropped (the
target) with torchvision-style transforms, in 4 DataLoader workers, batch 64, shuffled;
a 4-layer conv net ending in ``PixelShuffle``, MSE loss, Adam.

Adapted from pytorch/examples, super_resolution/main.py (with model.py, data.py and
dataset.py), at commit 77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).

Changed:
- the BSDS300 download becomes 200 synthetic JPEGs of BSDS300's sizes (481x321 or
  321x481: shapes on gradients, blurred, with noise) made offline at first use into the
  cache folder's BSDS300/images/train (the test images, read only by the left-out test,
  are not made);
- torchvision's ``CenterCrop`` and ``Resize`` (bilinear) are written here with PIL, doing
  what torchvision does on a PIL image (no torchvision here); its ``Compose`` and
  ``ToTensor`` come from ``_torchvision.py``;
- the crop is scaled from 256 (255 for factor 3: an 85x85 input) to 42 (a 14x14 input):
  on a 2-CPU machine shared with other work one step's compute took about 7 s at 255 and
  260-430 ms at 48; at 42 it takes about 100 ms on one thread;
- argparse becomes constants: ``--upscale_factor`` (required) is 3, as in the README's
  example; the rest are the script's defaults (batch 64, lr 0.01, 4 loader threads, seed
  123);
- the device is ``pick_device`` (CUDA where there is one) instead of ``--accel``;
- the loop body is ``train_step``; its ``loss.item()`` calls are kept, its progress print,
  the test pass and the checkpoints are left out.
"""

from __future__ import annotations

from os import listdir
from os.path import join
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim
import torch.utils.data as data
from PIL import Image, ImageDraw, ImageFilter
from torch.utils.data import DataLoader

from ._common import cache_dir, forever, pick_device, run
from ._torchvision import Compose, ToTensor

UPSCALE_FACTOR, BATCH_SIZE, LR, THREADS, SEED = 3, 64, 0.01, 4, 123
#: the crop before ``calculate_valid_crop_size`` (256 in the script)
CROP = 42
TRAIN_IMAGES = 200


def _make_bsds300(root: Path) -> None:
    """BSDS300/images/train: TRAIN_IMAGES JPEGs, 481x321 or 321x481."""
    rng = np.random.default_rng(300)
    folder = root / "BSDS300" / "images" / "train"
    folder.mkdir(parents=True)
    for i in range(TRAIN_IMAGES):
        w, h = (481, 321) if rng.random() < 0.7 else (321, 481)
        yy, xx = np.mgrid[0:h, 0:w] / max(w, h)
        base = rng.uniform(30, 220, 3)
        slope = rng.uniform(-120, 120, (2, 3))
        img = Image.fromarray(np.clip(base + xx[..., None] * slope[0] + yy[..., None] * slope[1],
                                      0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(8, 20))):
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            x1, y1 = x0 + int(rng.integers(10, w // 2)), y0 + int(rng.integers(10, h // 2))
            fill = tuple(int(v) for v in rng.integers(0, 256, 3))
            if rng.random() < 0.5:
                draw.ellipse((x0, y0, x1, y1), fill=fill)
            else:
                draw.rectangle((x0, y0, x1, y1), fill=fill)
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.0))))
        arr = np.asarray(img, dtype=np.float32) + rng.normal(0, 6, (h, w, 3))
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(
            folder / f"{100000 + i * 37}.jpg", quality=90)


# --- torchvision's CenterCrop and Resize, inline (PIL images) --------------------------

class CenterCrop:
    def __init__(self, size):
        self.size = (size, size)

    def __call__(self, img):
        image_width, image_height = img.size
        crop_height, crop_width = self.size
        crop_top = int(round((image_height - crop_height) / 2.0))
        crop_left = int(round((image_width - crop_width) / 2.0))
        return img.crop((crop_left, crop_top, crop_left + crop_width, crop_top + crop_height))


class Resize:
    """``Resize(size)`` with an int: the shorter side to ``size``, bilinear."""

    def __init__(self, size):
        self.size = size

    def __call__(self, img):
        w, h = img.size
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = self.size, int(self.size * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        if (w, h) == (new_w, new_h):
            return img
        return img.resize((new_w, new_h), Image.BILINEAR)


# --- dataset.py ------------------------------------------------------------------------

def is_image_file(filename):
    return any(filename.endswith(extension) for extension in [".png", ".jpg", ".jpeg"])


def load_img(filepath):
    img = Image.open(filepath).convert('YCbCr')
    y, _, _ = img.split()
    return y


class DatasetFromFolder(data.Dataset):
    def __init__(self, image_dir, input_transform=None, target_transform=None):
        super().__init__()
        self.image_filenames = [join(image_dir, x) for x in listdir(image_dir)
                                if is_image_file(x)]

        self.input_transform = input_transform
        self.target_transform = target_transform

    def __getitem__(self, index):
        input = load_img(self.image_filenames[index])
        target = input.copy()
        if self.input_transform:
            input = self.input_transform(input)
        if self.target_transform:
            target = self.target_transform(target)

        return input, target

    def __len__(self):
        return len(self.image_filenames)


# --- data.py ---------------------------------------------------------------------------

def download_bsd300():
    return str(cache_dir("examples_super_resolution", _make_bsds300) / "BSDS300" / "images")


def calculate_valid_crop_size(crop_size, upscale_factor):
    return crop_size - (crop_size % upscale_factor)


def input_transform(crop_size, upscale_factor):
    return Compose([
        CenterCrop(crop_size),
        Resize(crop_size // upscale_factor),
        ToTensor(),
    ])


def target_transform(crop_size):
    return Compose([
        CenterCrop(crop_size),
        ToTensor(),
    ])


def get_training_set(upscale_factor):
    root_dir = download_bsd300()
    train_dir = join(root_dir, "train")
    crop_size = calculate_valid_crop_size(CROP, upscale_factor)

    return DatasetFromFolder(train_dir,
                             input_transform=input_transform(crop_size, upscale_factor),
                             target_transform=target_transform(crop_size))


# --- model.py --------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self, upscale_factor):
        super().__init__()

        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)


# --- main.py ---------------------------------------------------------------------------

def make_job(device: Any = None) -> dict[str, Any]:
    device = pick_device(device)
    torch.manual_seed(SEED)
    train_set = get_training_set(UPSCALE_FACTOR)
    training_data_loader = DataLoader(dataset=train_set, num_workers=THREADS,
                                      batch_size=BATCH_SIZE, shuffle=True)
    model = Net(upscale_factor=UPSCALE_FACTOR).to(device)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=LR)
    state = {"epoch_loss": 0.0}

    def train_step(batch: Any) -> torch.Tensor:
        input, target = batch[0].to(device), batch[1].to(device)

        optimizer.zero_grad()
        loss = criterion(model(input), target)
        state["epoch_loss"] += loss.item()
        loss.backward()
        optimizer.step()

        loss.item()  # the script prints it each step
        return loss.detach()

    return {"model": model, "loader": training_data_loader, "optimizer": optimizer,
            "loss_fn": criterion, "train_step": train_step,
            "batches": lambda: forever(training_data_loader), "device": device,
            "marks_steps": False,
            "covers": ("image-decode", "workers", "workers>cpus", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
