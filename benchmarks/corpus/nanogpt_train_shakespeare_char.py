"""A character-level GPT trained nanoGPT's way, with no DataLoader: the text is encoded
once into a uint16 ``train.bin``, and each batch re-opens it as a ``np.memmap``, draws
random offsets, and stacks ``block_size`` slices into tensors with ``torch.from_numpy``
(pinned and copied non-blocking on CUDA); a GPT with flash attention, AdamW from the
model's ``configure_optimizers`` (2-D weights decayed), a warmup + cosine learning rate
set each step, gradient clipping at 1.0.

Adapted from karpathy/nanoGPT, train.py with config/train_shakespeare_char.py,
data/shakespeare_char/prepare.py and model.py, at commit
3adf61e154c3fe3fca428ad6bc3818b27a3b8291 (MIT; text in licenses/karpathy_nanoGPT.txt).

Changed:
- prepare.py's download of tiny shakespeare is ``english_like_text`` of its length; its
  steps (character vocabulary, 90/10 split, uint16 train.bin/val.bin, meta.pkl) run once
  at first use into the job's cache, which is the script's data_dir;
- the model is 6 layers, 6 heads as the config has them but 96 wide instead of 384, with
  block_size 64 instead of 256 and batch_size 8 instead of 64, for a step under 200 ms
  on 2 CPUs (dropout 0.2, bias False, gradient_accumulation_steps 1 as configured);
- compile is off: the script compiles by default (a GPU setting, and the config's "on
  macbook" note turns it off on the CPU); kept off on CUDA too, so that the job's first
  steps are not a compilation;
- the model's classes are copied in (``from_pretrained``, ``crop_block_size``,
  ``estimate_mfu`` and ``generate`` left out, unused in training from scratch);
- ``batches()`` is a generator calling ``get_batch('train')``: the script fetches the
  next batch inside the step, between the forward and the backward, and here it is
  fetched just before the step;
- the device is ``pick_device`` (the script's default is 'cuda'); the autocast context,
  GradScaler (``torch.amp.GradScaler('cuda')`` for the deprecated
  ``torch.cuda.amp.GradScaler``, enabled for float16 on CUDA only, as it ends up) and
  TF32 switches apply on CUDA as the script has them;
- evaluation, checkpoints, logging, wandb and DDP are left out; seeded with
  ``torch.manual_seed(1337)`` as the script does; prepare.py's prints are left out, long
  lines and comments rewrapped for the linter.
"""

from __future__ import annotations

import inspect
import math
import os
import pickle
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

from ._common import cache_dir, pick_device, run
from ._text import english_like_text

TEXT_CHARS = 1_115_394  # tiny shakespeare's length

# config/train_shakespeare_char.py over train.py's defaults
gradient_accumulation_steps = 1
batch_size = 8  # the config's 64, scaled down for the CPU
block_size = 64  # the config's 256, scaled down for the CPU
n_layer = 6
n_head = 6
n_embd = 96  # the config's 384, scaled down for the CPU
dropout = 0.2
bias = False
learning_rate = 1e-3
max_iters = 5000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
decay_lr = True
warmup_iters = 100
lr_decay_iters = 5000
min_lr = 1e-4
compile = False  # train.py's default is True: off here (see Changed:)


# --------------------------------------------------------------------------------- model.py

class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # regularization
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
            # causal mask to ensure that attention is only applied to the left in the input
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size,
                                                               config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)

        # query, key, values for all heads in batch, head moved forward to be the batch dim
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # causal self-attention; (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        if self.flash:
            # efficient attention using Flash Attention CUDA kernels
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                is_causal=True)
        else:
            # manual implementation of attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257, padded up to a multiple of 64 for efficiency
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # True: bias in Linears and LayerNorms, like GPT-2. False: a bit better


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # weight tying (https://paperswithcode.com/method/weight-tying)
        self.transformer.wte.weight = self.lm_head.weight

        # init all weights
        self.apply(self._init_weights)
        # apply special scaled init to the residual projections, per GPT-2 paper
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        # report number of parameters
        print(f"number of parameters: {self.get_num_params() / 1e6:.2f}M")

    def get_num_params(self, non_embedding=True):
        """The number of parameters in the model; for non-embedding count (default), the
        position embeddings get subtracted (the token embeddings are tied to lm_head)."""
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)

        # forward the GPT model itself
        tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            # if we are given some desired targets also calculate the loss
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            # inference-time mini-optimization: only forward the lm_head on the last position
            logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to keep the time dim
            loss = None

        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # start with all of the candidate parameters
        param_dict = {pn: p for pn, p in self.named_parameters()}
        # filter out those that do not require grad
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        # create optim groups. Any parameters that is 2D will be weight decayed, otherwise no.
        # i.e. all weight tensors in matmuls + embeddings decay, all biases and layernorms don't.
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0}
        ]
        num_decay_params = sum(p.numel() for p in decay_params)
        num_nodecay_params = sum(p.numel() for p in nodecay_params)
        print(f"num decayed parameter tensors: {len(decay_params)}, "
              f"with {num_decay_params:,} parameters")
        print(f"num non-decayed parameter tensors: {len(nodecay_params)}, "
              f"with {num_nodecay_params:,} parameters")
        # Create AdamW optimizer and use the fused version if it is available
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        print(f"using fused AdamW: {use_fused}")

        return optimizer


# ------------------------------------------------------------ data/shakespeare_char/prepare.py

def _prepare(root: Path) -> None:
    input_file_path = root / 'input.txt'
    input_file_path.write_text(english_like_text(TEXT_CHARS, seed=7), encoding='utf-8')
    with open(input_file_path) as f:
        data = f.read()

    # get all the unique characters that occur in this text
    chars = sorted(set(data))
    vocab_size = len(chars)

    # create a mapping from characters to integers
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}

    def encode(s):
        return [stoi[c] for c in s]  # encoder: take a string, output a list of integers

    # create the train and test splits
    n = len(data)
    train_data = data[:int(n * 0.9)]
    val_data = data[int(n * 0.9):]

    # encode both to integers
    train_ids = encode(train_data)
    val_ids = encode(val_data)

    # export to bin files
    train_ids = np.array(train_ids, dtype=np.uint16)
    val_ids = np.array(val_ids, dtype=np.uint16)
    train_ids.tofile(os.path.join(root, 'train.bin'))
    val_ids.tofile(os.path.join(root, 'val.bin'))

    # save the meta information as well, to help us encode/decode later
    meta = {'vocab_size': vocab_size, 'itos': itos, 'stoi': stoi}
    with open(os.path.join(root, 'meta.pkl'), 'wb') as f:
        pickle.dump(meta, f)


# -------------------------------------------------------------------------------- train.py

def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    device_type = 'cuda' if dev.type == 'cuda' else 'cpu'  # for later use in torch.autocast
    # 'float32', 'bfloat16', or 'float16', the latter will auto implement a GradScaler
    dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() \
        else 'float16'
    torch.manual_seed(1337)
    if device_type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
        torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16,
               'float16': torch.float16}[dtype]
    ctx = nullcontext() if device_type == 'cpu' \
        else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

    # poor man's data loader
    data_dir = str(cache_dir("nanogpt_train_shakespeare_char", _prepare))

    def get_batch(split):
        # We recreate np.memmap every batch to avoid a memory leak, as per
        # https://stackoverflow.com/questions/45132940/numpy-memmap-memory-usage-want-to-iterate-once/61472122#61472122
        if split == 'train':
            data = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')
        else:
            data = np.memmap(os.path.join(data_dir, 'val.bin'), dtype=np.uint16, mode='r')
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64))
                         for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64))
                         for i in ix])
        if device_type == 'cuda':
            # pin arrays x,y, which allows us to move them to GPU asynchronously
            x, y = x.pin_memory().to(dev, non_blocking=True), \
                y.pin_memory().to(dev, non_blocking=True)
        else:
            x, y = x.to(dev), y.to(dev)
        return x, y

    # attempt to derive vocab_size from the dataset
    with open(os.path.join(data_dir, 'meta.pkl'), 'rb') as f:
        meta = pickle.load(f)
    meta_vocab_size = meta['vocab_size']

    # model init from scratch
    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                      bias=bias, vocab_size=meta_vocab_size, dropout=dropout)
    model = GPT(GPTConfig(**model_args))
    model.to(dev)

    # initialize a GradScaler. If enabled=False scaler is a no-op
    scaler = torch.amp.GradScaler('cuda', enabled=(dtype == 'float16' and device_type == 'cuda'))

    # optimizer
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2),
                                           device_type)
    if compile:
        model = torch.compile(model)

    # learning rate decay scheduler (cosine with warmup)
    def get_lr(it):
        # 1) linear warmup for warmup_iters steps
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        # 2) if it > lr_decay_iters, return min learning rate
        if it > lr_decay_iters:
            return min_lr
        # 3) in between, use cosine decay down to min learning rate
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        assert 0 <= decay_ratio <= 1
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
        return min_lr + coeff * (learning_rate - min_lr)

    state = {"iter_num": 0}

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield get_batch('train')

    def step_fn(model: nn.Module, batch: Any) -> torch.Tensor:
        X, Y = batch
        logits, loss = model(X, Y)
        return loss

    def train_step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        X, Y = batch
        X, Y = X.to(dev), Y.to(dev)  # get_batch has put them there already
        iter_num = state["iter_num"]
        # determine and set the learning rate for this iteration
        lr = get_lr(iter_num) if decay_lr else learning_rate
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

        # forward backward update, with optional gradient accumulation to simulate larger
        # batch size and using the GradScaler if data type is float16
        for _micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                # scale the loss to account for gradient accumulation
                loss = loss / gradient_accumulation_steps
            # backward pass, with gradient scaling if training in fp16
            scaler.scale(loss).backward()
        # clip the gradient
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        # step the optimizer and scaler if training in fp16
        scaler.step(optimizer)
        scaler.update()
        # flush the gradients as soon as we can, no need for this memory anymore
        optimizer.zero_grad(set_to_none=True)
        state["iter_num"] = iter_num + 1
        return (loss * gradient_accumulation_steps).detach()

    return {"model": model, "loader": None, "optimizer": optimizer, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step, "batches": batches,
            "device": dev, "marks_steps": False,
            "covers": ("in-memory", "no-loader", "transformer")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
