"""Masked-language-model pretraining the Hugging Face way, without the Trainer: a text file
read as lines, tokenised once at start-up by a fast WordPiece tokenizer and concatenated
and cut into fixed-length chunks, held in memory as dict rows of token lists;
``DataCollatorForLanguageModeling`` pads each batch and masks 15% of its tokens in Python;
a shuffled DataLoader with no workers; a small BERT trained from scratch
(``AutoModelForMaskedLM.from_config``) with AdamW and a linear schedule, all wrapped by
``accelerate``'s ``Accelerator``.

Adapted from huggingface/transformers, examples/pytorch/language-modeling/run_mlm_no_trainer.py,
at commit cbeb5d01b54d6cbbc4193a792dbe9a824588681a (Apache-2.0; text in
licenses/huggingface_transformers.txt).

Changed:
- the dataset: ``load_dataset("text", data_files=...)`` on a ``--train_file`` becomes a text
  file of ``english_like_text`` made offline into the cache, read into lines as the "text"
  loader reads them (line breaks dropped); the train split is ``train[5%:]`` as the script
  takes it when there is no validation file;
- no ``datasets`` library here: ``raw_datasets.map(tokenize_function, batched=True)`` and
  ``.map(group_texts, batched=True)`` are done with plain Python lists in batches of 1,000
  rows (``map``'s default), and the train set is a list of dict rows of int lists (what a
  ``datasets.Dataset`` row gives);
- the tokenizer (``--tokenizer_name``, which the script requires when training from
  scratch): a WordPiece tokenizer trained offline with the ``tokenizers`` library on that
  text (BERT's normaliser, pre-tokeniser, special tokens, ``[CLS] $A [SEP]`` template and
  model inputs),
  saved with ``save_pretrained`` and loaded with ``AutoTokenizer.from_pretrained``;
- the model (``--model_type bert``): BERT scaled down to BERT-tiny's shape (hidden 128, 2
  layers, 2 heads, intermediate 512; vocabulary the tokenizer's 4,000) and
  ``max_seq_length`` 128 (the default would be 512 here), so that a step takes tens of ms
  on 2 CPUs;
- argparse defaults kept as constants (batch 8, lr 5e-5, weight decay 0, 3 epochs for the
  linear schedule, no warm-up, mlm_probability 0.15, gradient accumulation 1); logging,
  telemetry, hub, tracking, checkpointing, the evaluation loop and saving dropped;
- the loop body is ``train_step`` (the batch is moved to the device as the contract asks; the
  prepared loader has already put it there); ``HF_HUB_OFFLINE=1`` is set so nothing reaches
  the network; ``Accelerator(cpu=...)`` follows the job's device.
- ``torch.manual_seed(0)`` at the start (the script's ``--seed`` defaults to none).
"""

from __future__ import annotations

import math
import os
from itertools import chain
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from ._common import cache_dir, forever, pick_device, run
from ._text import english_like_text

NAME = "hf_run_mlm_no_trainer"
TEXT_CHARS = 1_500_000
VOCAB = 4000
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# BERT-tiny's shape (google/bert_uncased_L-2_H-128_A-2); BERT-base is 768, 12, 12, 3,072
HIDDEN, LAYERS, HEADS, INTERMEDIATE = 128, 2, 2, 512
MAX_SEQ_LENGTH = 128

# the script's argparse defaults
PER_DEVICE_TRAIN_BATCH_SIZE = 8
LEARNING_RATE = 5e-5
WEIGHT_DECAY = 0.0
NUM_TRAIN_EPOCHS = 3
GRADIENT_ACCUMULATION_STEPS = 1
LR_SCHEDULER_TYPE = "linear"
NUM_WARMUP_STEPS = 0
MLM_PROBABILITY = 0.15
VALIDATION_SPLIT_PERCENTAGE = 5
MAP_BATCH_SIZE = 1000  # datasets.Dataset.map(batched=True)'s default


def _make_data(root: Path) -> None:
    """``train.txt`` (the --train_file) and ``tokenizer/`` (the --tokenizer_name), a
    WordPiece tokenizer trained on it."""
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

    text_file = root / "train.txt"
    text_file.write_text(english_like_text(TEXT_CHARS, seed=11), encoding="utf-8")
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train([str(text_file)], trainers.WordPieceTrainer(vocab_size=VOCAB,
                                                          special_tokens=SPECIALS))
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
        AutoModelForMaskedLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        get_scheduler,
    )

    dev = pick_device(device)
    torch.manual_seed(0)
    root = cache_dir(NAME, _make_data)

    accelerator = Accelerator(gradient_accumulation_steps=GRADIENT_ACCUMULATION_STEPS,
                              cpu=dev.type != "cuda")

    # load_dataset("text", data_files={"train": ...}): one row a line, split train[5%:]
    lines = (root / "train.txt").read_text(encoding="utf-8").splitlines()
    first = round(len(lines) * VALIDATION_SPLIT_PERCENTAGE / 100)
    raw_train = {"text": lines[first:]}

    config = CONFIG_MAPPING["bert"](vocab_size=VOCAB, hidden_size=HIDDEN,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    intermediate_size=INTERMEDIATE)
    tokenizer = AutoTokenizer.from_pretrained(str(root / "tokenizer"))
    model = AutoModelForMaskedLM.from_config(config)

    # We resize the embeddings only when necessary to avoid index errors.
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embedding_size:
        model.resize_token_embeddings(len(tokenizer))

    column_names = list(raw_train)
    text_column_name = "text" if "text" in column_names else column_names[0]
    max_seq_length = min(MAX_SEQ_LENGTH, tokenizer.model_max_length)

    # line_by_line False: tokenize every text, then concatenate them together before
    # splitting them in smaller parts.
    def tokenize_function(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return dict(tokenizer(examples[text_column_name], return_special_tokens_mask=True))

    tokenized = _map_batched(tokenize_function, raw_train)

    def group_texts(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # Concatenate all texts.
        concatenated_examples = {k: list(chain(*examples[k])) for k in examples}
        total_length = len(concatenated_examples[list(examples.keys())[0]])
        # We drop the small remainder.
        total_length = (total_length // max_seq_length) * max_seq_length
        # Split by chunks of max_len.
        result = {
            k: [t[i : i + max_seq_length] for i in range(0, total_length, max_seq_length)]
            for k, t in concatenated_examples.items()
        }
        return result

    grouped = _map_batched(group_texts, tokenized)
    keys = list(grouped)
    train_dataset = [{k: grouped[k][i] for k in keys} for i in range(len(grouped[keys[0]]))]

    # Data collator: this one will take care of randomly masking the tokens.
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer,
                                                    mlm_probability=MLM_PROBABILITY)

    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=data_collator,
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
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=LEARNING_RATE)

    # Scheduler and math around the number of training steps.
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / GRADIENT_ACCUMULATION_STEPS)
    max_train_steps = NUM_TRAIN_EPOCHS * num_update_steps_per_epoch
    lr_scheduler = get_scheduler(
        name=LR_SCHEDULER_TYPE,
        optimizer=optimizer,
        num_warmup_steps=NUM_WARMUP_STEPS * accelerator.num_processes,
        num_training_steps=max_train_steps,
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
            "marks_steps": False, "covers": ("dict-collate", "in-memory", "transformer")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
