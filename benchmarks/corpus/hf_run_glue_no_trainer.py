"""Sentence-pair classification fine-tuning the Hugging Face way, without the Trainer (GLUE
MRPC's shape, from your own csv file): a csv of ``sentence1``, ``sentence2`` and ``label``
columns read once, each pair tokenised once at start-up by a fast WordPiece tokenizer with
no padding, held in memory as dict rows of token lists of different lengths;
``DataCollatorWithPadding`` pads each batch to its longest pair in Python, in the main
process; a shuffled DataLoader with no workers; a small BERT with a classification head
(``AutoModelForSequenceClassification``) with AdamW and a linear schedule, all wrapped by
``accelerate``'s ``Accelerator``.

Adapted from huggingface/transformers, examples/pytorch/text-classification/run_glue_no_trainer.py,
at commit 0310c247aafa21ef0567787645656d0ef1d42cf9 (Apache-2.0; text in
licenses/huggingface_transformers.txt). The sibling jobs' commit, 3c354ea2, is not stored
where this was read; 0310c247 is the stored version of the same era (``transformers.AdamW``,
the scheduler made after ``accelerator.prepare``, the loop body below). A newer stored
version, a22a4378, has the same data path, collator, DataLoader, grouping and loop body.

Changed:
- the dataset: ``--task_name`` (a GLUE download) is not given; ``--train_file`` is a csv
  made offline into the cache, MRPC-like: 4,000 pairs of ``english_like_text`` sentences
  where ``sentence2`` is either ``sentence1`` reworded (a word or two dropped, two
  neighbours swapped; label 1) or another sentence (label 0), half each, so the label is a
  simple function of the text and learnable; ``load_dataset("csv", data_files=...)`` is
  read with Python's ``csv`` module, the label column parsed to ``int`` as the csv loader's
  type inference makes it (so not a regression; ``label_list`` its sorted unique values and
  ``label_to_id`` as the script builds them); no validation file, so no evaluation loop;
- no ``datasets`` library here: ``raw_datasets.map(preprocess_function, batched=True,
  remove_columns=...)`` is done with plain Python lists in batches of 1,000 rows
  (``map``'s default), and the train set is a list of dict rows of int lists (what a
  ``datasets.Dataset`` row gives); ``preprocess_function`` is the script's (padding False,
  ``max_length`` 128, truncation);
- the tokenizer and the model (``--model_name_or_path``, required; the README's example is
  ``bert-base-cased``): with nothing to download, a cased WordPiece tokenizer is trained
  offline with the ``tokenizers`` library on the csv's text (BERT's normaliser without
  lower-casing, pre-tokeniser, special tokens, ``[CLS] $A [SEP] $B [SEP]`` template with
  token type ids), saved with ``save_pretrained`` and loaded with
  ``AutoTokenizer.from_pretrained``; the BERT is made from a config
  (``AutoModelForSequenceClassification.from_config``, ``num_labels`` as the script gives
  it) instead of ``from_pretrained``, scaled down: hidden size 128 (768 in
  bert-base-cased), 2 layers (12), 2 heads (12), intermediate size 512 (3,072), vocabulary
  the tokenizer's 4,000 (28,996), about 1.0 M parameters, so that a step takes tens of ms
  on 2 CPUs;
- ``transformers.AdamW`` (gone from transformers 5) becomes ``torch.optim.AdamW`` given
  the old class's eps of 1e-6 (torch's default is 1e-8); the no-decay grouping is the
  script's; ``accelerator.use_fp16`` (gone from accelerate) is read as
  ``accelerator.mixed_precision == "fp16"`` for the collator's ``pad_to_multiple_of``;
- argparse defaults kept as constants (batch 8, lr 5e-5, weight decay 0, 3 epochs for the
  linear schedule, no warm-up, gradient accumulation 1, ``max_length`` 128, no
  ``--pad_to_max_length``); logging, the sample printout, the metric, the evaluation loop
  and saving dropped;
- the loop body is ``train_step`` (the batch is moved to the device as the contract asks; the
  prepared loader has already put it there); ``HF_HUB_OFFLINE=1`` is set so nothing reaches
  the network; ``Accelerator(cpu=...)`` follows the job's device.
- ``torch.manual_seed(0)`` at the start (the script's ``--seed`` defaults to none).
"""

from __future__ import annotations

import csv
import math
import os
import random
import re
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from ._common import cache_dir, forever, pick_device, run
from ._text import english_like_text

NAME = "hf_run_glue_no_trainer"
TEXT_CHARS = 700_000
PAIRS = 4000  # MRPC's train split has 3,668
VOCAB = 4000
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# bert-base-cased is hidden 768, 12 layers, 12 heads, intermediate 3,072, vocabulary 28,996
HIDDEN, LAYERS, HEADS, INTERMEDIATE = 128, 2, 2, 512

# the script's argparse defaults
MAX_LENGTH = 128
PAD_TO_MAX_LENGTH = False
PER_DEVICE_TRAIN_BATCH_SIZE = 8
LEARNING_RATE = 5e-5
WEIGHT_DECAY = 0.0
NUM_TRAIN_EPOCHS = 3
GRADIENT_ACCUMULATION_STEPS = 1
LR_SCHEDULER_TYPE = "linear"
NUM_WARMUP_STEPS = 0
MAP_BATCH_SIZE = 1000  # datasets.Dataset.map(batched=True)'s default


def _reword(sentence: str, rng: random.Random) -> str:
    """The sentence with a word or two dropped and two neighbouring words swapped."""
    words = sentence.rstrip(".").split()
    words[0] = words[0].lower()
    for _ in range(rng.randint(1, 2)):
        if len(words) > 3:
            del words[rng.randrange(len(words))]
    i = rng.randrange(len(words) - 1)
    words[i], words[i + 1] = words[i + 1], words[i]
    words[0] = words[0].capitalize()
    return " ".join(words).rstrip(",") + "."


def _make_data(root: Path) -> None:
    """``train.csv`` (the --train_file) and ``tokenizer/`` (the tokenizer of
    --model_name_or_path), a cased WordPiece tokenizer trained on its text."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(13)
    text = english_like_text(TEXT_CHARS, seed=13)
    sentences = [s.strip() for s in re.split(r"(?<=\.)\s+", text) if len(s.split()) >= 4]
    rows = []
    for i in range(PAIRS):
        s1 = sentences[i]
        if rng.random() < 0.5:
            s2, label = _reword(s1, rng), 1
        else:
            s2, label = sentences[PAIRS + rng.randrange(len(sentences) - PAIRS)], 0
        rows.append({"sentence1": s1, "sentence2": s2, "label": label})
    with open(root / "train.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["sentence1", "sentence2", "label"])
        writer.writeheader()
        writer.writerows(rows)

    corpus = root / "tokenizer_text.txt"
    corpus.write_text(text, encoding="utf-8")
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train([str(corpus)], trainers.WordPieceTrainer(vocab_size=VOCAB,
                                                       special_tokens=SPECIALS))
    corpus.unlink()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]", model_max_length=512,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    fast.save_pretrained(str(root / "tokenizer"))


def _map_batched(function: Any, columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """``Dataset.map(function, batched=True, remove_columns=...)`` on columns held as
    lists: ``function`` on each run of 1,000 rows, its output columns concatenated (the
    input columns dropped)."""
    n = len(next(iter(columns.values())))
    out: dict[str, list[Any]] = {}
    for i in range(0, n, MAP_BATCH_SIZE):
        result = function({k: v[i:i + MAP_BATCH_SIZE] for k, v in columns.items()})
        for k, v in result.items():
            out.setdefault(k, []).extend(v)
    return out


def make_job(device: Any = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from accelerate import Accelerator
    from transformers import (
        CONFIG_MAPPING,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        default_data_collator,
        get_scheduler,
    )

    dev = pick_device(device)
    torch.manual_seed(0)
    root = cache_dir(NAME, _make_data)

    # Initialize the accelerator. We will let the accelerator handle device placement for us
    # in this example.
    accelerator = Accelerator(cpu=dev.type != "cuda")

    # Loading the dataset from local csv file: load_dataset("csv", data_files={"train": ...})
    with open(root / "train.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        column_names = list(reader.fieldnames or [])
        raw_train: dict[str, list[Any]] = {k: [] for k in column_names}
        for row in reader:
            for k in column_names:
                raw_train[k].append(int(row[k]) if k == "label" else row[k])

    # Labels
    # Trying to have good defaults here, don't hesitate to tweak to your needs.
    is_regression = any(isinstance(v, float) for v in raw_train["label"])
    if is_regression:
        num_labels = 1
    else:
        label_list = sorted(set(raw_train["label"]))  # Dataset.unique("label"), sorted
        num_labels = len(label_list)

    # Load pretrained model and tokenizer
    config = CONFIG_MAPPING["bert"](vocab_size=VOCAB, hidden_size=HIDDEN,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    intermediate_size=INTERMEDIATE, num_labels=num_labels,
                                    finetuning_task=None)
    tokenizer = AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    model = AutoModelForSequenceClassification.from_config(config)

    # Preprocessing the datasets
    # Again, we try to have some nice defaults but don't hesitate to tweak to your use case.
    non_label_column_names = [name for name in column_names if name != "label"]
    if "sentence1" in non_label_column_names and "sentence2" in non_label_column_names:
        sentence1_key, sentence2_key = "sentence1", "sentence2"
    else:
        if len(non_label_column_names) >= 2:
            sentence1_key, sentence2_key = non_label_column_names[:2]
        else:
            sentence1_key, sentence2_key = non_label_column_names[0], None

    # No --task_name: the labels are mapped to ids in sorted order.
    label_to_id = None if is_regression else {v: i for i, v in enumerate(label_list)}

    padding = "max_length" if PAD_TO_MAX_LENGTH else False

    def preprocess_function(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # Tokenize the texts
        texts = (
            (examples[sentence1_key],) if sentence2_key is None
            else (examples[sentence1_key], examples[sentence2_key])
        )
        result = dict(tokenizer(*texts, padding=padding, max_length=MAX_LENGTH,
                                truncation=True))

        if "label" in examples:
            if label_to_id is not None:
                # Map labels to IDs (not necessary for GLUE tasks)
                result["labels"] = [label_to_id[lb] for lb in examples["label"]]
            else:
                # In all cases, rename the column to labels because the model will expect that.
                result["labels"] = examples["label"]
        return result

    processed = _map_batched(preprocess_function, raw_train)
    keys = list(processed)
    train_dataset = [{k: processed[k][i] for k in keys} for i in range(len(processed[keys[0]]))]

    # DataLoaders creation:
    if PAD_TO_MAX_LENGTH:
        # If padding was already done ot max length, we use the default data collator that
        # will just convert everything to tensors.
        data_collator = default_data_collator
    else:
        # Otherwise, `DataCollatorWithPadding` will apply dynamic padding for us (by padding
        # to the maximum length of the samples passed). When using mixed precision, we add
        # `pad_to_multiple_of=8` to pad all tensors to multiple of 8s.
        data_collator = DataCollatorWithPadding(
            tokenizer, pad_to_multiple_of=(8 if accelerator.mixed_precision == "fp16" else None))

    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=data_collator,
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
    # transformers.AdamW's defaults: eps 1e-6 (torch's is 1e-8), bias correction on
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=LEARNING_RATE, eps=1e-6)

    # Prepare everything with our `accelerator`.
    model, optimizer, train_dataloader = accelerator.prepare(
        model, optimizer, train_dataloader
    )

    # Scheduler and math around the number of training steps.
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / GRADIENT_ACCUMULATION_STEPS)
    max_train_steps = NUM_TRAIN_EPOCHS * num_update_steps_per_epoch
    lr_scheduler = get_scheduler(
        name=LR_SCHEDULER_TYPE,
        optimizer=optimizer,
        num_warmup_steps=NUM_WARMUP_STEPS,
        num_training_steps=max_train_steps,
    )
    model.train()
    state = {"step": 0}

    def step_fn(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch).loss

    def train_step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = {k: v.to(dev) for k, v in batch.items()}
        step = state["step"] % len(train_dataloader)
        state["step"] += 1
        outputs = model(**batch)
        loss = outputs.loss
        loss = loss / GRADIENT_ACCUMULATION_STEPS
        accelerator.backward(loss)
        if step % GRADIENT_ACCUMULATION_STEPS == 0 or step == len(train_dataloader) - 1:
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        return loss.detach()

    return {"model": model, "loader": train_dataloader,
            "optimizer": optimizer.optimizer,  # the torch AdamW inside accelerate's wrapper
            "loss_fn": None, "step_fn": step_fn, "train_step": train_step,
            "batches": lambda: forever(train_dataloader), "device": dev,
            "marks_steps": False, "covers": ("dict-collate", "in-memory", "transformer")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
