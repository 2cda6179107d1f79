"""ImageNet-style classification as in PyTorch's own example: an ``ImageFolder`` of JPEG
files (one sub-folder per class under ``train/``), each sample opened and decoded with PIL
and augmented with torchvision's transforms (``RandomResizedCrop``, ``RandomHorizontalFlip``,
``ToTensor``, ``Normalize`` with ImageNet's mean and std) in 4 DataLoader workers, shuffled,
with pinned memory; torchvision's ResNet-18 (1,000 classes), cross-entropy, SGD (lr 0.1,
momentum 0.9, weight decay 1e-4) with a StepLR (lr /10 every 30 epochs); each step also
computes top-1/top-5 accuracy and reads the loss with ``.item()``.

Adapted from pytorch/examples, imagenet/main.py, at commit
77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).

Changed:
- the ImageNet folder (``DIR/train``, 1.28 M JPEGs in 1,000 class folders) becomes 2,048
  synthetic JPEGs in 8 class folders (ImageNet-style ``n0000000k`` names, ``.JPEG``
  files), made offline at first use into the cache folder's ``train/`` (shapes on a
  class-coloured gradient, blurred, with noise); the validation folder, read only by the
  left-out validation pass, is not made;
- the source images are 64 px on the shorter side (ImageNet's are mostly 500x375 or
  375x500), just large enough for the crop, in ImageNet's usual shapes (4:3, 3:2, square,
  portrait);
- torchvision's ``datasets.ImageFolder`` (its ``find_classes``/``make_dataset`` and
  ``pil_loader``) is written here with PIL (no CPU torchvision wheel for torch 2.13), and
  ``transforms.Compose/RandomResizedCrop/RandomHorizontalFlip/ToTensor/Normalize`` come
  from ``_torchvision.py`` (torchvision's, written there on PIL images);
  ``RandomResizedCrop`` keeps its defaults (scale (0.08, 1), ratio (3/4, 4/3), bilinear);
- ``models.resnet18()`` (the default ``--arch``) is torchvision's ``ResNet``/``BasicBlock``
  written here, at full width and with its 1,000-class head and its initialisation;
- the crop is scaled from 224 to 56 and the batch from 256 to 8 (the sizes the earlier
  adaptation of this job used): on a 2-CPU machine a step at 224 and batch 256 would take
  tens of seconds; at 56 and 8 it takes about 70-80 ms on a quiet machine (85 ms under
  ``diagnose``; the earlier adaptation's runs recorded 160-175 ms);
- argparse becomes constants: the script's defaults (``--workers`` 4, ``--batch-size`` 256
  scaled as above, ``--lr`` 0.1, ``--momentum`` 0.9, ``--wd`` 1e-4, 90 epochs for the
  StepLR's step size of 30); ``torch.manual_seed(0)`` at the start (``--seed`` defaults to
  none; the cudnn settings it would bring are not set);
- the device is ``pick_device`` (CUDA where there is one) instead of
  ``torch.accelerator``; on CUDA the script wraps the model in ``nn.DataParallel``, which
  over one GPU (the benchmarks' GPU machine has one) is the ResNet itself behind a scatter: it is left out, so
  the job's ``model`` is the ResNet (as the earlier adaptation of this job had it);
  ``pin_memory=True`` is kept as the script sets it (on a CPU it does nothing);
- distributed training, ``--resume``/``--pretrained``/``--evaluate``/``--dummy``, the
  validation pass, checkpointing and the progress prints (with the time meters) are left
  out;
- the loop body of ``train()`` is ``train_step`` (to the device with ``non_blocking``,
  forward, loss, ``accuracy`` top-1/top-5, the meters' updates with ``loss.item()``,
  ``zero_grad``, ``backward``, ``step``); the epoch loop is the endless ``batches()``
  iterator, which calls ``model.train()`` at each epoch's start (as ``train()`` does) and
  steps the StepLR at each epoch's end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.optim
import torch.utils.data
from PIL import Image, ImageDraw, ImageFilter
from torch.optim.lr_scheduler import StepLR

from ._common import cache_dir, pick_device, run
from ._torchvision import Compose, Normalize, RandomHorizontalFlip, RandomResizedCrop, ToTensor

WORKERS, EPOCHS, LR, MOMENTUM, WEIGHT_DECAY, SEED = 4, 90, 0.1, 0.9, 1e-4, 0
#: scaled from the script's 256 (``--batch-size``) and 224 (``RandomResizedCrop(224)``)
BATCH_SIZE, CROP = 8, 56
CLASSES, PER_CLASS, SHORT_SIDE = 8, 256, 64
#: ImageNet's usual shapes, as (long side / short side, landscape?)
SHAPES = ((4 / 3, True), (3 / 2, True), (1.0, True), (4 / 3, False), (3 / 2, False))


def _make_imagenet(root: Path) -> None:
    """train/<wnid>/*.JPEG: PER_CLASS JPEGs in each of CLASSES folders."""
    rng = np.random.default_rng(1000)
    for c in range(CLASSES):
        folder = root / "train" / f"n{c:08d}"
        folder.mkdir(parents=True)
        base = rng.uniform(40, 215, 3)
        slope = rng.uniform(-100, 100, (2, 3))
        for i in range(PER_CLASS):
            aspect, landscape = SHAPES[int(rng.integers(len(SHAPES)))]
            long = int(round(SHORT_SIDE * aspect))
            w, h = (long, SHORT_SIDE) if landscape else (SHORT_SIDE, long)
            yy, xx = np.mgrid[0:h, 0:w] / max(w, h)
            tint = base + rng.normal(0, 15, 3)
            img = Image.fromarray(np.clip(tint + xx[..., None] * slope[0]
                                          + yy[..., None] * slope[1], 0, 255).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            for k in range(int(rng.integers(2, 6))):
                x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
                x1, y1 = x0 + int(rng.integers(6, w // 2)), y0 + int(rng.integers(6, h // 2))
                fill = tuple(int(v) for v in rng.integers(0, 256, 3))
                if (c + k) % 2:
                    draw.ellipse((x0, y0, x1, y1), fill=fill)
                else:
                    draw.rectangle((x0, y0, x1, y1), fill=fill)
            img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.2))))
            arr = np.asarray(img, dtype=np.float32) + rng.normal(0, 8, (h, w, 3))
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(
                folder / f"n{c:08d}_{1000 + i * 7}.JPEG", quality=90)


# --- torchvision.datasets.ImageFolder, inline ------------------------------------------

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def pil_loader(path: str) -> Image.Image:
    # open path as file to avoid ResourceWarning (https://github.com/python-pillow/Pillow/issues/835)
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


class ImageFolder(torch.utils.data.Dataset):
    def __init__(self, root, transform=None):
        self.root = root
        self.classes, self.class_to_idx = self.find_classes(root)
        self.samples = self.make_dataset(root, self.class_to_idx)
        self.targets = [s[1] for s in self.samples]
        self.loader = pil_loader
        self.transform = transform

    @staticmethod
    def find_classes(directory):
        classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
        class_to_idx = {cls_name: i for i, cls_name in enumerate(classes)}
        return classes, class_to_idx

    @staticmethod
    def make_dataset(directory, class_to_idx):
        instances = []
        for target_class in sorted(class_to_idx.keys()):
            class_index = class_to_idx[target_class]
            target_dir = os.path.join(directory, target_class)
            for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
                for fname in sorted(fnames):
                    path = os.path.join(root, fname)
                    if path.lower().endswith(IMG_EXTENSIONS):
                        instances.append((path, class_index))
        return instances

    def __getitem__(self, index):
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, target

    def __len__(self):
        return len(self.samples)


# --- torchvision.models.resnet18, inline -----------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1,
                     bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        # Both self.conv1 and self.downsample layers downsample the input when stride != 1
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)

        return x


def resnet18():
    return ResNet(BasicBlock, [2, 2, 2, 2])


# --- main.py ---------------------------------------------------------------------------

class AverageMeter:
    """Computes and stores the average and current value"""
    def __init__(self, name, fmt=":f"):
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def make_job(device: Any = None) -> dict[str, Any]:
    device = pick_device(device)
    torch.manual_seed(SEED)

    # create model
    model = resnet18()
    model.to(device)

    # define loss function (criterion), optimizer, and learning rate scheduler
    criterion = nn.CrossEntropyLoss().to(device)

    optimizer = torch.optim.SGD(model.parameters(), LR,
                                momentum=MOMENTUM,
                                weight_decay=WEIGHT_DECAY)

    """Sets the learning rate to the initial LR decayed by 10 every 30 epochs"""
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)

    # Data loading code
    traindir = os.path.join(str(cache_dir("examples_imagenet", _make_imagenet)), "train")
    normalize = Normalize(mean=[0.485, 0.456, 0.406],
                          std=[0.229, 0.224, 0.225])

    train_dataset = ImageFolder(
        traindir,
        Compose([
            RandomResizedCrop(CROP),
            RandomHorizontalFlip(),
            ToTensor(),
            normalize,
        ]))

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=BATCH_SIZE, shuffle=True,
        num_workers=WORKERS, pin_memory=True, sampler=None)

    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")

    def train_step(batch: Any) -> torch.Tensor:
        images, target = batch
        # move data to the same device as model
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        # compute output
        output = model(images)
        loss = criterion(output, target)

        # measure accuracy and record loss
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def batches() -> Iterator[Any]:
        while True:  # one epoch a pass, as train() then the epoch loop do it
            # switch to train mode
            model.train()
            for m in (losses, top1, top5):
                m.reset()
            yield from train_loader
            scheduler.step()

    return {"model": model, "loader": train_loader, "optimizer": optimizer,
            "loss_fn": criterion, "train_step": train_step, "batches": batches,
            "device": device, "marks_steps": False,
            "covers": ("image-decode", "augment", "workers", "workers>cpus", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
