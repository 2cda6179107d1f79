"""Semantic segmentation of KITTI-style street scenes with a LightningModule driven by a plain
PyTorch loop: each sample's image and mask PNG files are opened with PIL and resized, the
mask's KITTI label ids mapped to 19 training classes (void labels to 250) by a Python loop
of numpy masked writes, the image turned into a normalised tensor; a DataLoader with batch
16, shuffled, no workers; a 5-level U-Net, Adam, per-pixel cross-entropy (ignore 250), the
cosine learning-rate schedule stepped once an epoch. The loop takes the module's own
``train_dataloader()``, ``configure_optimizers()`` and ``training_step()``.

Adapted from Lightning-AI/pytorch-lightning, examples/pytorch/domain_templates/
semantic_segmentation.py, at commit 7f0c3436cd3f6ad3753125672024fc415cbcb414 (Apache-2.0;
text in licenses/Lightning-AI_pytorch-lightning.txt).

Changed:
- the KITTI download is a folder of 200 synthetic image/mask PNG pairs (street-like
  regions drawn with KITTI label ids, noise on the image) made at first use, in KITTI's
  ``training/image_2`` and ``training/semantic`` layout; they are decoded as before;
- image size scaled from 1242x376 to 124x38 (the files from 1242x375 to 124x37: one row
  short, so each sample is resampled as on KITTI), and the U-Net's ``features_start`` from
  64 to 8,
  for a 5-200 ms CPU step; batch size 16 and 5 U-Net levels are the script's CLI defaults;
- ``torch.tensor(img)`` / ``torch.tensor(mask)`` on a PIL image raise at this commit (and
  ``ToTensor`` rejects a tensor): ``np.array`` restored, as before commit a611de0c15;
- ``configure_optimizers`` read ``self.learning_rate``, which the module never sets:
  ``self.lr`` (the ``--lr`` argument) is used;
- torchvision's ``ToTensor`` (here on the HWC uint8 array the dataset gives) and
  ``Normalize`` written inline with torch; its ``Compose`` comes from ``_torchvision.py``;
- ``Trainer().fit(model)`` replaced by a plain loop (the corpus' contract): ``loader =
  module.train_dataloader()``, the optimizer and scheduler from ``configure_optimizers()``,
  and a step that takes ``module.training_step(batch, i)["loss"]``, zero-grads, calls
  backward and ``opt.step()``; the scheduler steps at each epoch's end, as the Trainer's
  default (``interval="epoch"``) does; validation and logging dropped;
- argparse dropped (its defaults passed to ``SegModel``); seeded with ``torch.manual_seed``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from PIL import Image, ImageDraw
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, pick_device, run
from ._torchvision import Compose

DEFAULT_VOID_LABELS = (0, 1, 2, 3, 4, 5, 6, 9, 10, 14, 15, 16, 18, 29, 30, -1)
DEFAULT_VALID_LABELS = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33)

#: KITTI's (1242, 376) resize target and (1242, 375) files, scaled by 1/10
IMG_SIZE, FILE_SIZE, PAIRS = (124, 38), (124, 37), 200


def _make_kitti(root: Path) -> None:
    """PAIRS street-like scenes: sky, buildings, vegetation, road, sidewalk, poles, cars and
    void regions, each a KITTI label id in the mask and a noisy colour in the image."""
    rng = np.random.default_rng(11)
    w, h = FILE_SIZE
    img_dir = root / KITTI.IMAGE_PATH
    mask_dir = root / KITTI.MASK_PATH
    img_dir.mkdir(parents=True)
    mask_dir.mkdir(parents=True)
    colours = rng.integers(20, 236, size=(34, 3))
    for i in range(PAIRS):
        mask = Image.new("L", FILE_SIZE, 23)  # sky
        draw = ImageDraw.Draw(mask)
        horizon = int(h * rng.uniform(0.35, 0.55))
        x = 0
        while x < w:  # buildings / vegetation / walls along the horizon
            bw = int(rng.integers(w // 12, w // 4))
            top = int(horizon - rng.uniform(0.1, 0.3) * h)
            draw.rectangle([x, top, x + bw, horizon], fill=int(rng.choice([11, 12, 21, 13])))
            x += bw
        draw.rectangle([0, horizon, w, h], fill=7)  # road
        draw.polygon([(0, horizon + 3), (w // 4, horizon), (0, h)], fill=8)  # sidewalk
        draw.rectangle([0, h - 4, w, h], fill=int(rng.choice([0, 1, 6])))  # void (ego car)
        for _ in range(int(rng.integers(2, 6))):  # cars, people, poles, signs
            cx, cy = int(rng.integers(0, w)), int(rng.integers(horizon - 4, h - 4))
            cw, ch = int(rng.integers(4, 24)), int(rng.integers(3, 12))
            draw.rectangle([cx, cy - ch, cx + cw, cy], fill=int(rng.choice([26, 24, 17, 20, 27])))
        labels = np.asarray(mask)
        img = colours[labels] + rng.normal(0, 10, (h, w, 3))
        img += np.linspace(-20, 20, w)[None, :, None]
        name = f"{i:06d}_10.png"
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(img_dir / name)
        mask.save(mask_dir / name)


class KITTI(Dataset):
    """Class for KITTI Semantic Segmentation Benchmark dataset.

    Dataset link - http://www.cvlibs.net/datasets/kitti/eval_semseg.php?benchmark=semantics2015

    There are 34 classes in the given labels. However, not all of them are useful for training
    (like railings on highways, road dividers, etc.).
    So, these useless classes (the pixel values of these classes) are stored in the `void_labels`.
    The useful classes are stored in the `valid_labels`.

    The `encode_segmap` function sets all pixels with any of the `void_labels` to `ignore_index`
    (250 by default). It also sets all of the valid pixels to the appropriate value between 0 and
    `len(valid_labels)` (since that is the number of valid classes), so it can be used properly by
    the loss function when comparing with the output.

    """

    IMAGE_PATH = os.path.join("training", "image_2")
    MASK_PATH = os.path.join("training", "semantic")

    def __init__(
        self,
        data_path: str,
        split: str,
        img_size: tuple = IMG_SIZE,
        void_labels: tuple = DEFAULT_VOID_LABELS,
        valid_labels: tuple = DEFAULT_VALID_LABELS,
        transform: Any = None,
    ) -> None:
        self.img_size = img_size
        self.void_labels = void_labels
        self.valid_labels = valid_labels
        self.ignore_index = 250
        self.class_map = dict(zip(self.valid_labels, range(len(self.valid_labels)), strict=True))
        self.transform = transform

        self.split = split
        self.data_path = data_path
        self.img_path = os.path.join(self.data_path, self.IMAGE_PATH)
        self.mask_path = os.path.join(self.data_path, self.MASK_PATH)
        self.img_list = self.get_filenames(self.img_path)
        self.mask_list = self.get_filenames(self.mask_path)

        # Split between train and valid set (80/20)
        random_inst = random.Random(12345)  # for repeatability
        n_items = len(self.img_list)
        idxs = random_inst.sample(range(n_items), n_items // 5)
        if self.split == "train":
            idxs = [idx for idx in range(n_items) if idx not in idxs]
        self.img_list = [self.img_list[i] for i in idxs]
        self.mask_list = [self.mask_list[i] for i in idxs]

    def __len__(self) -> int:
        return len(self.img_list)

    def __getitem__(self, idx: int) -> tuple[Any, Any]:
        img = Image.open(self.img_list[idx])
        img = img.resize(self.img_size)
        img = np.array(img)

        mask = Image.open(self.mask_list[idx]).convert("L")
        mask = mask.resize(self.img_size)
        mask = np.array(mask)
        mask = self.encode_segmap(mask)

        if self.transform:
            img = self.transform(img)

        return img, mask

    def encode_segmap(self, mask: np.ndarray) -> np.ndarray:
        """Sets void classes to zero so they won't be considered for training."""
        for voidc in self.void_labels:
            mask[mask == voidc] = self.ignore_index
        for validc in self.valid_labels:
            mask[mask == validc] = self.class_map[validc]
        # remove extra idxs from updated dataset
        mask[mask > 18] = self.ignore_index
        return mask

    def get_filenames(self, path: str) -> list[str]:
        """Returns a list of absolute paths to images inside given `path`"""
        files_list = []
        for filename in os.listdir(path):
            files_list.append(os.path.join(path, filename))
        return files_list


class UNet(nn.Module):
    """Architecture based on U-Net: Convolutional Networks for Biomedical Image Segmentation.

    Link - https://arxiv.org/abs/1505.04597
    """

    def __init__(self, num_classes: int = 19, num_layers: int = 5, features_start: int = 64,
                 bilinear: bool = False) -> None:
        super().__init__()
        self.num_layers = num_layers

        layers: list[nn.Module] = [DoubleConv(3, features_start)]

        feats = features_start
        for _ in range(num_layers - 1):
            layers.append(Down(feats, feats * 2))
            feats *= 2

        for _ in range(num_layers - 1):
            layers.append(Up(feats, feats // 2, bilinear))
            feats //= 2

        layers.append(nn.Conv2d(feats, num_classes, kernel_size=1))

        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xi = [self.layers[0](x)]
        # Down path
        for layer in self.layers[1 : self.num_layers]:
            xi.append(layer(xi[-1]))
        # Up path
        for i, layer in enumerate(self.layers[self.num_layers : -1]):
            xi[-1] = layer(xi[-1], xi[-2 - i])
        return self.layers[-1](xi[-1])


class DoubleConv(nn.Module):
    """Double Convolution and BN and ReLU (3x3 conv -> BN -> ReLU) ** 2."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Down(nn.Module):
    """Combination of MaxPool2d and DoubleConv in series."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.MaxPool2d(kernel_size=2, stride=2), DoubleConv(in_ch, out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Up(nn.Module):
    """Upsampling (by either bilinear interpolation or transpose convolutions) followed by
    concatenation of feature map from contracting path, followed by double 3x3 convolution."""

    def __init__(self, in_ch: int, out_ch: int, bilinear: bool = False) -> None:
        super().__init__()
        self.upsample: nn.Module
        if bilinear:
            self.upsample = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
                nn.Conv2d(in_ch, in_ch // 2, kernel_size=1),
            )
        else:
            self.upsample = nn.ConvTranspose2d(in_ch, in_ch // 2, kernel_size=2, stride=2)

        self.conv = DoubleConv(in_ch, out_ch)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        x1 = self.upsample(x1)

        # Pad x1 to the size of x2
        diff_h = x2.shape[2] - x1.shape[2]
        diff_w = x2.shape[3] - x1.shape[3]

        x1 = F.pad(x1, [diff_w // 2, diff_w - diff_w // 2, diff_h // 2, diff_h - diff_h // 2])

        # Concatenate along the channels axis
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class ToTensor:
    """torchvision.transforms.ToTensor on an HWC uint8 array: CHW float in [0, 1]."""

    def __call__(self, pic: np.ndarray) -> torch.Tensor:
        img = torch.from_numpy(pic.transpose((2, 0, 1))).contiguous()
        return img.to(dtype=torch.get_default_dtype()).div(255)


class Normalize:
    """torchvision.transforms.Normalize."""

    def __init__(self, mean: list[float], std: list[float]) -> None:
        self.mean = torch.tensor(mean)[:, None, None]
        self.std = torch.tensor(std)[:, None, None]

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return (t - self.mean) / self.std


class SegModel(LightningModule):
    """Semantic Segmentation Module.

    This is a basic semantic segmentation module implemented with Lightning.
    It uses CrossEntropyLoss as the default loss function. May be replaced with
    other loss functions as required.
    It is specific to KITTI dataset i.e. dataloaders are for KITTI
    and Normalize transform uses the mean and standard deviation of this dataset.

    Adam optimizer is used along with Cosine Annealing learning rate scheduler.
    """

    def __init__(
        self,
        data_path: str,
        batch_size: int = 4,
        lr: float = 1e-3,
        num_layers: int = 3,
        features_start: int = 64,
        bilinear: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.data_path = data_path
        self.batch_size = batch_size
        self.lr = lr
        self.num_layers = num_layers
        self.features_start = features_start
        self.bilinear = bilinear

        self.net = UNet(
            num_classes=19, num_layers=self.num_layers, features_start=self.features_start,
            bilinear=self.bilinear
        )
        self.transform = Compose([
            ToTensor(),
            Normalize(mean=[0.35675976, 0.37380189, 0.3764753],
                      std=[0.32064945, 0.32098866, 0.32325324]),
        ])
        self.trainset = KITTI(self.data_path, split="train", transform=self.transform)
        self.validset = KITTI(self.data_path, split="valid", transform=self.transform)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_nb: int) -> dict[str, Any]:
        img, mask = batch
        img = img.float()
        mask = mask.long()
        out = self(img)
        loss = F.cross_entropy(out, mask, ignore_index=250)
        log_dict = {"train_loss": loss}
        return {"loss": loss, "log": log_dict, "progress_bar": log_dict}

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        return [opt], [sch]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.trainset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.validset, batch_size=self.batch_size, shuffle=False)


def step_fn(model: SegModel, batch: Any) -> torch.Tensor:
    """The module's ``training_step`` loss, for a batch already on the model's device."""
    return model.training_step(batch, 0)["loss"]


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data_path = str(cache_dir("lightning_kitti", _make_kitti))
    # the script's CLI defaults: --batch_size 16 --lr 0.001 --num_layers 5 (features scaled)
    module = SegModel(data_path, batch_size=16, lr=0.001, num_layers=5, features_start=8,
                      bilinear=False).to(dev)
    module.train()
    loader = module.train_dataloader()
    [opt], [sch] = module.configure_optimizers()
    state = {"i": 0}

    def batches() -> Iterator[Any]:
        while True:
            yield from loader
            sch.step()  # the Trainer steps an epoch-interval scheduler at the epoch's end

    def train_step(batch: Any) -> torch.Tensor:
        img, mask = batch[0].to(dev), batch[1].to(dev)
        opt.zero_grad()
        loss = module.training_step((img, mask), state["i"])["loss"]
        loss.backward()
        opt.step()
        state["i"] += 1
        return loss.detach()

    return {"model": module, "loader": loader, "optimizer": opt, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step, "batches": batches, "device": dev,
            "marks_steps": False, "covers": ("image-decode", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
