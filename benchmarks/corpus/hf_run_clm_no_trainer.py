"""Causal-language-model training the Hugging Face way, without the Trainer: a text file
read as lines (line breaks kept), tokenised once at start-up by a fast byte-level BPE
tokenizer and concatenated and cut into fixed-length blocks (labels a copy of the inputs),
held in memory as dict rows of token lists; ``default_data_collator`` stacks each batch
into tensors; a shuffled DataLoader with no workers; a small GPT-2 with AdamW and a linear
schedule, wrapped by ``accelerate``'s ``Accelerator``.

Adapted from huggingface/transformers, examples/pytorch/language-modeling/run_clm_no_trainer.py,
at commit 3c354ea20e347edb9413ada30911e9fdc242719d (Apache-2.0; text in
licenses/huggingface_transformers.txt).

Changed:
- the dataset: ``load_dataset("text", data_files=..., keep_linebreaks=True)`` on a
  ``--train_file`` becomes a text file of ``english_like_text`` made offline into the cache,
  read into lines as the "text" loader reads them (line breaks kept); the train split is
  ``train[5%:]`` as the script takes it when there is no validation file;
- no ``datasets`` library here: ``raw_datasets.map(tokenize_function, batched=True)`` and
  ``.map(group_texts, batched=True)`` are done with plain Python lists in batches of 1,000
  rows (``map``'s default), and the train set is a list of dict rows of int lists (what a
  ``datasets.Dataset`` row gives);
- the tokenizer (``--tokenizer_name``): a GPT-2-style byte-level BPE tokenizer
  (``<|endoftext|>`` its one special token) trained offline with the ``tokenizers`` library
  on that text, saved with ``save_pretrained`` and loaded with ``AutoTokenizer``;
- the model: the script fine-tunes ``--model_name_or_path`` (required at this commit); with
  no weights to download, a GPT-2 is made from a config (``AutoModelForCausalLM.from_config``,
  as the script's own no-checkpoint branch does), scaled down (n_embd 128, 2 layers, 2
  heads; vocabulary the tokenizer's 4,000; its bos/eos ids the tokenizer's, so the
  tokenizer is loaded before the config), and ``block_size`` 128 (the default would be
  1,024), so that a step takes tens of ms on 2 CPUs;
- ``transformers.AdamW`` (gone from transformers 5) becomes ``torch.optim.AdamW`` given
  the old class's eps of 1e-6 (torch's default is 1e-8); the no-decay grouping is the
  script's;
- argparse defaults kept as constants (batch 8, lr 5e-5, weight decay 0, 3 epochs for the
  linear schedule, no warm-up, gradient accumulation 1); logging, hub, the evaluation loop
  (perplexity) and saving dropped;
- the loop body is ``train_step`` (the batch is moved to the device as the contract asks; the
  prepared loader has already put it there); ``HF_HUB_OFFLINE=1`` is set so nothing reaches
  the network; ``Accelerator(cpu=...)`` follows the job's device.
- ``torch.manual_seed(0)`` at the start (the script's ``--seed`` defaults to none).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from ._common import cache_dir, forever, pick_device, run
from ._text import english_like_text

NAME = "hf_run_clm_no_trainer"
TEXT_CHARS = 1_500_000
VOCAB = 4000
EOT = "<|endoftext|>"
# GPT-2 small is n_embd 768, 12 layers, 12 heads
N_EMBD, N_LAYER, N_HEAD = 128, 2, 2
BLOCK_SIZE = 128

# the script's argparse defaults
PER_DEVICE_TRAIN_BATCH_SIZE = 8
LEARNING_RATE = 5e-5
WEIGHT_DECAY = 0.0
NUM_TRAIN_EPOCHS = 3
GRADIENT_ACCUMULATION_STEPS = 1
LR_SCHEDULER_TYPE = "linear"
NUM_WARMUP_STEPS = 0
VALIDATION_SPLIT_PERCENTAGE = 5
MAP_BATCH_SIZE = 1000  # datasets.Dataset.map(batched=True)'s default


def _make_data(root: Path) -> None:
    """``train.txt`` (the --train_file) and ``tokenizer/`` (the --tokenizer_name), a
    byte-level BPE tokenizer trained on it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    text_file = root / "train.txt"
    text_file.write_text(english_like_text(TEXT_CHARS, seed=12), encoding="utf-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train([str(text_file)], trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT,
                                   unk_token=EOT, model_max_length=1024)
    fast.save_pretrained(str(root / "tokenizer"))


def _map_batched(function: Any, columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """``Dataset.map(function, batched=True)`` on columns held as lists: ``function`` on
    each run of 1,000 rows, its output columns concatenated (the input columns dropped, as
    ``remove_columns`` does, or overwritten by the output's)."""
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
        AutoModelForCausalLM,
        AutoTokenizer,
        default_data_collator,
        get_scheduler,
    )

    dev = pick_device(device)
    torch.manual_seed(0)
    root = cache_dir(NAME, _make_data)

    # Initialize the accelerator. We will let the accelerator handle device placement.
    accelerator = Accelerator(cpu=dev.type != "cuda")

    # load_dataset("text", data_files=..., keep_linebreaks=True): one row a line, train[5%:]
    lines = (root / "train.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    first = round(len(lines) * VALIDATION_SPLIT_PERCENTAGE / 100)
    raw_train = {"text": lines[first:]}

    tokenizer = AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    config = CONFIG_MAPPING["gpt2"](vocab_size=VOCAB, n_embd=N_EMBD, n_layer=N_LAYER,
                                    n_head=N_HEAD, bos_token_id=tokenizer.bos_token_id,
                                    eos_token_id=tokenizer.eos_token_id)
    model = AutoModelForCausalLM.from_config(config)

    model.resize_token_embeddings(len(tokenizer))

    # Preprocessing the datasets. First we tokenize all the texts.
    column_names = list(raw_train)
    text_column_name = "text" if "text" in column_names else column_names[0]

    def tokenize_function(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return dict(tokenizer(examples[text_column_name]))

    tokenized = _map_batched(tokenize_function, raw_train)

    block_size = min(BLOCK_SIZE, tokenizer.model_max_length)

    # Main data processing function that will concatenate all texts from our dataset and
    # generate chunks of block_size.
    def group_texts(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # Concatenate all texts.
        concatenated_examples = {k: sum(examples[k], []) for k in examples}
        total_length = len(concatenated_examples[list(examples.keys())[0]])
        # We drop the small remainder.
        if total_length >= block_size:
            total_length = (total_length // block_size) * block_size
        # Split by chunks of max_len.
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
            for k, t in concatenated_examples.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    lm_datasets = _map_batched(group_texts, tokenized)
    keys = list(lm_datasets)
    train_dataset = [{k: lm_datasets[k][i] for k in keys}
                     for i in range(len(lm_datasets[keys[0]]))]

    # DataLoaders creation:
    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=default_data_collator,
        batch_size=PER_DEVICE_TRAIN_BATCH_SIZE
    )

    # Optimizer: split weights in two groups, one with weight decay and the other not.
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
