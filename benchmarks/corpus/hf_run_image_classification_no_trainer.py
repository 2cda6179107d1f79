"""Image classification the Hugging Face way, without the Trainer: a folder of JPEG files,
one sub-folder per class (``load_dataset("imagefolder")``'s layout), held as dict rows
(``{"image": ..., "labels": int}``); each row's image is opened and decoded with PIL when
the row is read, then augmented by torchvision-style transforms set with ``with_transform``
(random resized crop, horizontal flip, to tensor, normalise with the image processor's
mean and std); a ``collate_fn`` stacks the dict samples into ``pixel_values`` and
``labels``; a shuffled DataLoader with no workers, batch 8; a ViT image classifier with
AdamW and a linear schedule, all wrapped by ``accelerate``'s ``Accelerator``.

Adapted from huggingface/transformers,
examples/pytorch/image-classification/run_image_classification_no_trainer.py, at commit
2774ec03290870685d54386e9bbb1cb6fa09d10b (Apache-2.0; text in
licenses/huggingface_transformers.txt). (The sibling jobs' commit 3c354ea2 is not stored
in the source index; 2774ec03 is the stored version, transformers 4.34.0.dev0.)

Changed:
- the dataset: ``load_dataset("imagefolder", data_files={"train": <train_dir>/**},
  task="image-classification")`` (the ``--train_dir`` path; the default ``--dataset_name``
  is cifar10, a download) becomes an image folder made offline at first use into the
  cache: 3 classes (beans' names) of 200 JPEGs each, 120-176 px a side (synthetic leaves:
  a class-coloured gradient, blotches, blur and noise; beans' are 500x500 photos), about
  4 MB in all;
- no ``datasets`` library here: the rows are a list of dicts in the imagefolder's order
  (class folders sorted, their names the labels), ``{"image": {"path": ..., "bytes":
  None}, "labels": int}`` (the ``image-classification`` task template renames ``label``
  to ``labels``); ``train_test_split(0.15)`` (there is no validation folder) is a seeded
  numpy permutation, the first 15% (rounded up) its test rows as there; ``with_transform``
  is a small ``Dataset`` that decodes a row's image as ``datasets.Image`` does
  (``PIL.Image.open`` then ``load()``) and calls ``preprocess_train`` on a batch of that
  one row, per sample (newer ``datasets`` releases fetch a batch's rows in one
  ``__getitems__`` call; the work per image is the same);
- torchvision's ``Compose``, ``RandomResizedCrop`` (scale 0.08-1, ratio 3/4-4/3, ten
  tries then a centre crop, bilinear), ``RandomHorizontalFlip``, ``ToTensor`` and
  ``Normalize`` come from ``_torchvision.py``, written there on PIL and torch, doing what
  torchvision does on a PIL image (no torchvision here); the validation transforms are left
  out with the evaluation;
- the model: the script fine-tunes ``google/vit-base-patch16-224-in21k``; with no weights
  to download, a ViT is made from a config (``AutoModelForImageClassification.from_config``)
  scaled down: image size 64 (224), patch size 8 (16; 64 patches an image, 196 there),
  hidden size 128 (768), 2 layers (12), 2 heads (12; 64 a head as there), intermediate
  size 512 (3,072), so that a step takes tens of ms on 2 CPUs (about 25 ms, 90 ms with
  the CPUs shared with other work; hidden 192 with 4 layers took 180-880 ms a step there);
  the config and the image processor (``ViTImageProcessor``'s defaults, mean and std 0.5
  as the checkpoint's, size 64x64; transformers 5 saves and reloads it as
  ``ViTImageProcessorPil``, its backend without torchvision) are saved into the cache and
  read with ``AutoConfig.from_pretrained`` (the script's arguments, its ``i2label`` typo
  kept) and ``AutoImageProcessor.from_pretrained``;
- argparse defaults kept as constants (batch 8, lr 5e-5, weight decay 0, 3 epochs for the
  linear schedule, no warm-up, gradient accumulation 1); logging, telemetry, hub,
  tracking, checkpointing, the evaluation DataLoader and loop, the metric and saving
  dropped;
- the loop body is ``train_step`` (the batch is moved to the device as the contract asks;
  the prepared loader has already put it there); ``HF_HUB_OFFLINE=1`` is set so nothing
  reaches the network; ``Accelerator(cpu=...)`` follows the job's device.
- ``torch.manual_seed(0)`` at the start (the script's ``--seed`` defaults to none).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run
from ._torchvision import Compose, Normalize, RandomHorizontalFlip, RandomResizedCrop, ToTensor

NAME = "hf_run_image_classification_no_trainer"
CLASSES = ("angular_leaf_spot", "bean_rust", "healthy")  # beans' labels
PER_CLASS = 200
MIN_SIDE, MAX_SIDE = 120, 176
# google/vit-base-patch16-224-in21k is image 224, patch 16, hidden 768, 12 layers,
# 12 heads, intermediate 3,072
IMAGE_SIZE, PATCH_SIZE, HIDDEN_SIZE, NUM_LAYERS, NUM_HEADS, INTERMEDIATE = 64, 8, 128, 2, 2, 512

# the script's argparse defaults
TRAIN_VAL_SPLIT = 0.15
PER_DEVICE_TRAIN_BATCH_SIZE = 8
LEARNING_RATE = 5e-5
WEIGHT_DECAY = 0.0
NUM_TRAIN_EPOCHS = 3
GRADIENT_ACCUMULATION_STEPS = 1
LR_SCHEDULER_TYPE = "linear"
NUM_WARMUP_STEPS = 0


def _make_data(root: Path) -> None:
    """``train/<class>/*.jpg`` (the --train_dir) and ``vit/`` (the --model_name_or_path: a
    config and a preprocessor config, no weights)."""
    from transformers import ViTConfig

    try:  # transformers 5: the PIL backend (the default one needs torchvision)
        from transformers import ViTImageProcessorPil as ViTImageProcessor
    except ImportError:
        from transformers import ViTImageProcessor

    rng = np.random.default_rng(224)
    for c, name in enumerate(CLASSES):
        folder = root / "train" / name
        folder.mkdir(parents=True)
        leaf = np.array([(70, 140, 40), (110, 120, 45), (60, 160, 60)][c], float)
        spot = np.array([(120, 90, 40), (150, 70, 30), (90, 170, 80)][c], float)
        for i in range(PER_CLASS):
            w, h = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, 2))
            yy, xx = np.mgrid[0:h, 0:w] / max(w, h)
            slope = rng.uniform(-40, 40, (2, 3))
            base = leaf + rng.uniform(-25, 25, 3)
            img = Image.fromarray(np.clip(base + xx[..., None] * slope[0]
                                          + yy[..., None] * slope[1], 0, 255).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            for _ in range(int(rng.integers(4, 16))):
                x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
                r = int(rng.integers(2, 3 + (12 if c < 2 else 30)))
                fill = tuple(int(v) for v in np.clip(spot + rng.normal(0, 20, 3), 0, 255))
                draw.ellipse((x0 - r, y0 - r, x0 + r, y0 + r), fill=fill)
            img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 1.5))))
            arr = np.asarray(img, dtype=np.float32) + rng.normal(0, 8, (h, w, 3))
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(
                folder / f"{name}_{i:03d}.jpg", quality=90)
    ViTConfig(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, hidden_size=HIDDEN_SIZE,
              num_hidden_layers=NUM_LAYERS, num_attention_heads=NUM_HEADS,
              intermediate_size=INTERMEDIATE).save_pretrained(str(root / "vit"))
    ViTImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(
        str(root / "vit"))


# --- what the datasets library does here ----------------------------------------------------

def _load_imagefolder(train_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """``load_dataset("imagefolder", ..., task="image-classification")["train"]``: a row a
    file, the labels the sorted class folders' names."""
    labels = sorted(p.name for p in train_dir.iterdir() if p.is_dir())
    rows = [{"image": {"path": str(p), "bytes": None}, "labels": k}
            for k, name in enumerate(labels) for p in sorted((train_dir / name).glob("*.jpg"))]
    return rows, labels


def _train_test_split(rows: list[dict[str, Any]], test_size: float,
                      seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """``Dataset.train_test_split(test_size)``: a permutation, its first ceil(n * test_size)
    rows the test split, the rest the train split."""
    n_test = math.ceil(len(rows) * test_size)
    permutation = np.random.default_rng(seed).permutation(len(rows))
    return {"train": [rows[i] for i in permutation[n_test:]],
            "test": [rows[i] for i in permutation[:n_test]]}


def _decode_image(value: dict[str, Any]) -> Image.Image:
    """``datasets.Image().decode_example``: open the file, load it (decode)."""
    image = Image.open(value["path"])
    image.load()  # to avoid "Too many open files" errors
    return image


class _WithTransform(Dataset):
    """``Dataset.with_transform(transform)`` on rows held as dicts: a row read is decoded,
    handed to ``transform`` as a batch of one and given back as a dict."""

    def __init__(self, rows: list[dict[str, Any]], transform: Any) -> None:
        self.rows, self.transform = rows, transform

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        batch = {"image": [_decode_image(row["image"])], "labels": [row["labels"]]}
        batch = self.transform(batch)
        return {k: v[0] for k, v in batch.items()}


# --- the script's main() ---------------------------------------------------------------------

def make_job(device: Any = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from accelerate import Accelerator
    from transformers import (
        AutoConfig,
        AutoImageProcessor,
        AutoModelForImageClassification,
        get_scheduler,
    )

    dev = pick_device(device)
    torch.manual_seed(0)
    root = cache_dir(NAME, _make_data)
    model_name_or_path = str(root / "vit")

    # Initialize the accelerator. We will let the accelerator handle device placement for
    # us in this example.
    accelerator = Accelerator(gradient_accumulation_steps=GRADIENT_ACCUMULATION_STEPS,
                              cpu=dev.type != "cuda")

    # load_dataset("imagefolder", data_files={"train": <train_dir>/**}, ...)
    train_rows, label_names = _load_imagefolder(root / "train")
    dataset = {"train": train_rows}

    # If we don't have a validation split, split off a percentage of train as validation.
    split = _train_test_split(dataset["train"], TRAIN_VAL_SPLIT)
    dataset["train"] = split["train"]
    dataset["validation"] = split["test"]

    # Prepare label mappings.
    labels = label_names
    label2id = {label: str(i) for i, label in enumerate(labels)}
    id2label = {str(i): label for i, label in enumerate(labels)}

    # Load the model config and image processor (the model from its config: no weights)
    config = AutoConfig.from_pretrained(
        model_name_or_path,
        num_labels=len(labels),
        i2label=id2label,
        label2id=label2id,
        finetuning_task="image-classification",
    )
    image_processor = AutoImageProcessor.from_pretrained(model_name_or_path)
    model = AutoModelForImageClassification.from_config(config)

    # Preprocessing the datasets

    # Define torchvision transforms to be applied to each image.
    if "shortest_edge" in image_processor.size:
        size = image_processor.size["shortest_edge"]
    else:
        size = (image_processor.size["height"], image_processor.size["width"])
    normalize = Normalize(mean=image_processor.image_mean, std=image_processor.image_std)
    train_transforms = Compose(
        [
            RandomResizedCrop(size),
            RandomHorizontalFlip(),
            ToTensor(),
            normalize,
        ]
    )

    def preprocess_train(example_batch):
        """Apply _train_transforms across a batch."""
        example_batch["pixel_values"] = [train_transforms(image.convert("RGB"))
                                         for image in example_batch["image"]]
        return example_batch

    with accelerator.main_process_first():
        # Set the training transforms
        train_dataset = _WithTransform(dataset["train"], preprocess_train)

    # DataLoaders creation:
    def collate_fn(examples):
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example["labels"] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=collate_fn,
        batch_size=PER_DEVICE_TRAIN_BATCH_SIZE
    )

    # Optimizer
    # Split weights in two groups, one with weight decay and the other not.
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters()
                       if not any(nd in n for nd in no_decay)],
            "weight_decay": WEIGHT_DECAY,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=LEARNING_RATE)

    # Scheduler and math around the number of training steps.
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / GRADIENT_ACCUMULATION_STEPS)
    max_train_steps = NUM_TRAIN_EPOCHS * num_update_steps_per_epoch

    lr_scheduler = get_scheduler(
        name=LR_SCHEDULER_TYPE,
        optimizer=optimizer,
        num_warmup_steps=NUM_WARMUP_STEPS * GRADIENT_ACCUMULATION_STEPS,
        num_training_steps=max_train_steps * GRADIENT_ACCUMULATION_STEPS,
    )

    # Prepare everything with our `accelerator`.
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )
    model.train()

    def step_fn(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch).loss

    def train_step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = {k: v.to(dev) for k, v in batch.items()}
        with accelerator.accumulate(model):
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        return loss.detach()

    return {"model": model, "loader": train_dataloader,
            "optimizer": optimizer.optimizer,  # the torch AdamW inside accelerate's wrapper
            "loss_fn": None, "step_fn": step_fn, "train_step": train_step,
            "batches": lambda: forever(train_dataloader), "device": dev,
            "marks_steps": False,
            "covers": ("image-decode", "augment", "dict-collate", "transformer")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
