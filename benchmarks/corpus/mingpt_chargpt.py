"""A character-level GPT on a text file, minGPT's way: the whole text is held as one Python
string, and each sample slices ``block_size + 1`` characters at a random offset and maps
them to ids with a dict lookup per character (``__getitem__``), in 4 DataLoader workers
drawing from a ``RandomSampler`` with replacement; a small GPT, AdamW with weight-decay
groups, gradient clipping at 1.0.

Adapted from karpathy/minGPT, projects/chargpt/chargpt.py with mingpt/model.py and
mingpt/trainer.py, at commit 37baab71b9abea1b76ab957409a1cc2fbfba8a26 (MIT; text in
licenses/karpathy_minGPT.txt).

Changed:
- input.txt (tiny shakespeare, downloaded by hand) is ``english_like_text`` of its length
  (1,115,394 characters), written once to the job's cache and read back as the script does;
- the model is 'gpt-nano' (3 layers, 3 heads, 48 wide) instead of 'gpt-mini' (6, 6, 192)
  and the batch 16 instead of the trainer's 64, for a step under 200 ms on 2 CPUs
  (block_size 128 as the script has it);
- the model's classes are copied in (``GPT.from_pretrained`` and ``generate`` left out,
  unused in training), with the few lines of ``CfgNode`` they need;
- ``Trainer.run``'s loop body is ``train_step``; its DataLoader, optimizer and clipping are
  as the trainer sets them (pin_memory=True even on the CPU, as it does); the device is
  ``pick_device`` instead of the config's 'auto' (the same choice); the batch-end callback
  (printing, sampling and saving every 500 iterations) is left out;
- seeded with ``torch.manual_seed(3407)`` (the script's ``set_seed``), no work dir/logging;
- for the linter: %-formatting as f-strings, long lines and comments rewrapped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import Dataset
from torch.utils.data.dataloader import DataLoader

from ._common import cache_dir, forever, pick_device, run
from ._text import english_like_text

TEXT_CHARS = 1_115_394  # tiny shakespeare's length


class CN:
    """minGPT's CfgNode, the parts the model and trainer use."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)

    def merge_from_dict(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)


# ----------------------------------------------------------------------------- mingpt/model.py

class NewGELU(nn.Module):
    """GELU as in Google BERT's repo (identical to OpenAI GPT)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    """A vanilla multi-head masked self-attention layer with a projection at the end."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        # regularization
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x):
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)

        # query, key, values for all heads in batch, head moved forward to be the batch dim
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # causal self-attention; (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y


class Block(nn.Module):
    """ an unassuming Transformer block """

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(dict(
            c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
            c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
            act=NewGELU(),
            dropout=nn.Dropout(config.resid_pdrop),
        ))
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))  # MLP forward

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x


class GPT(nn.Module):
    """ GPT Language Model """

    @staticmethod
    def get_default_config():
        C = CN()
        # either model_type or (n_layer, n_head, n_embd) must be given in the config
        C.model_type = 'gpt'
        C.n_layer = None
        C.n_head = None
        C.n_embd = None
        # these options must be filled in externally
        C.vocab_size = None
        C.block_size = None
        # dropout hyperparameters
        C.embd_pdrop = 0.1
        C.resid_pdrop = 0.1
        C.attn_pdrop = 0.1
        return C

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.block_size = config.block_size

        type_given = config.model_type is not None
        params_given = all([config.n_layer is not None, config.n_head is not None,
                            config.n_embd is not None])
        assert type_given ^ params_given  # exactly one of these (XOR)
        if type_given:
            # translate from model_type to detailed configuration
            config.merge_from_dict({
                # names follow the huggingface naming conventions
                # GPT-1
                'openai-gpt': dict(n_layer=12, n_head=12, n_embd=768),  # 117M params
                # GPT-2 configs
                'gpt2': dict(n_layer=12, n_head=12, n_embd=768),  # 124M params
                'gpt2-medium': dict(n_layer=24, n_head=16, n_embd=1024),  # 350M params
                'gpt2-large': dict(n_layer=36, n_head=20, n_embd=1280),  # 774M params
                'gpt2-xl': dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M params
                # Gophers
                'gopher-44m': dict(n_layer=8, n_head=16, n_embd=512),
                # (there are a number more...)
                # I made these tiny models up
                'gpt-mini': dict(n_layer=6, n_head=6, n_embd=192),
                'gpt-micro': dict(n_layer=4, n_head=4, n_embd=128),
                'gpt-nano': dict(n_layer=3, n_head=3, n_embd=48),
            }[config.model_type])

        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.embd_pdrop),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

        # init all weights, and a special scaled init to the residual projections (GPT-2 paper)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        # report number of parameters (note we don't count the decoder parameters in lm_head)
        n_params = sum(p.numel() for p in self.transformer.parameters())
        print(f"number of parameters: {n_params / 1e6:.2f}M")

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            torch.nn.init.zeros_(module.bias)
            torch.nn.init.ones_(module.weight)

    def configure_optimizers(self, train_config):
        """All parameters in two buckets: those with weight decay and those without (biases,
        layernorm/embedding weights); returns the AdamW optimizer."""
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (torch.nn.Linear, )
        blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, _p in m.named_parameters():
                fpn = f'{mn}.{pn}' if mn else pn  # full param name
                if pn.endswith('bias'):
                    # all biases will not be decayed
                    no_decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                    # weights of whitelist modules will be weight decayed
                    decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                    # weights of blacklist modules will NOT be weight decayed
                    no_decay.add(fpn)

        # validate that we considered every parameter
        param_dict = {pn: p for pn, p in self.named_parameters()}
        inter_params = decay & no_decay
        union_params = decay | no_decay
        assert len(inter_params) == 0, \
            f"parameters {inter_params} made it into both decay/no_decay sets!"
        assert len(param_dict.keys() - union_params) == 0, \
            f"parameters {param_dict.keys() - union_params} were not separated into either " \
            "decay/no_decay set!"

        # create the pytorch optimizer object
        optim_groups = [
            {"params": [param_dict[pn] for pn in sorted(decay)],
             "weight_decay": train_config.weight_decay},
            {"params": [param_dict[pn] for pn in sorted(no_decay)], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(optim_groups, lr=train_config.learning_rate,
                                      betas=train_config.betas)
        return optimizer

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0)  # shape (1, t)

        # forward the GPT model itself
        tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (1, t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)

        # if we are given some desired targets also calculate the loss
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)

        return logits, loss


# --------------------------------------------------------------------------- mingpt/trainer.py

def trainer_config() -> CN:
    """``Trainer.get_default_config()``."""
    C = CN()
    C.device = 'auto'
    # dataloder parameters
    C.num_workers = 4
    # optimizer parameters
    C.max_iters = None
    C.batch_size = 64
    C.learning_rate = 3e-4
    C.betas = (0.9, 0.95)
    C.weight_decay = 0.1  # only applied on matmul weights
    C.grad_norm_clip = 1.0
    return C


def step_fn(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    logits, loss = model(x, y)
    return loss


def trainer_job(config: CN, model: GPT, train_dataset: Dataset, dev: Any,
                covers: tuple[str, ...]) -> dict[str, Any]:
    """``Trainer.run``'s set-up, and its loop body as ``train_step``."""
    model = model.to(dev)

    # setup the optimizer
    optimizer = model.configure_optimizers(config)

    # setup the dataloader
    train_loader = DataLoader(
        train_dataset,
        sampler=torch.utils.data.RandomSampler(train_dataset, replacement=True,
                                               num_samples=int(1e10)),
        shuffle=False,
        pin_memory=True,
        batch_size=config.batch_size,
        num_workers=config.num_workers,
    )
    model.train()

    def train_step(batch: Any) -> torch.Tensor:
        batch = [t.to(dev) for t in batch]
        x, y = batch

        # forward the model
        logits, loss = model(x, y)

        # backprop and update the parameters
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
        optimizer.step()
        return loss.detach()

    return {"model": model, "loader": train_loader, "optimizer": optimizer, "loss_fn": None,
            "step_fn": step_fn, "train_step": train_step,
            "batches": lambda: forever(train_loader), "device": dev, "marks_steps": False,
            "covers": covers}


# --------------------------------------------------------------------- projects/chargpt/chargpt.py

def get_config() -> CN:
    C = CN()
    # data
    C.data = CharDataset.get_default_config()
    # model
    C.model = GPT.get_default_config()
    C.model.model_type = 'gpt-nano'  # the script's 'gpt-mini', scaled down for the CPU
    # trainer
    C.trainer = trainer_config()
    C.trainer.learning_rate = 5e-4  # the model is so small that we can go a bit faster
    C.trainer.batch_size = 16  # the trainer's 64, scaled down for the CPU
    return C


class CharDataset(Dataset):
    """
    Emits batches of characters
    """

    @staticmethod
    def get_default_config():
        C = CN()
        C.block_size = 128
        return C

    def __init__(self, config, data):
        self.config = config

        chars = sorted(set(data))
        data_size, vocab_size = len(data), len(chars)
        print(f'data has {data_size} characters, {vocab_size} unique.')

        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}
        self.vocab_size = vocab_size
        self.data = data

    def get_vocab_size(self):
        return self.vocab_size

    def get_block_size(self):
        return self.config.block_size

    def __len__(self):
        return len(self.data) - self.config.block_size

    def __getitem__(self, idx):
        # grab a chunk of (block_size + 1) characters from the data
        chunk = self.data[idx:idx + self.config.block_size + 1]
        # encode every character to an integer
        dix = [self.stoi[s] for s in chunk]
        # return as tensors
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)
        return x, y


def _make_text(root: Path) -> None:
    (root / "input.txt").write_text(english_like_text(TEXT_CHARS, seed=11), encoding="utf-8")


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    config = get_config()
    torch.manual_seed(3407)

    # construct the training dataset
    path = cache_dir("mingpt_chargpt", _make_text) / "input.txt"
    with open(path) as f:
        text = f.read()
    train_dataset = CharDataset(config.data, text)

    # construct the model
    config.model.vocab_size = train_dataset.get_vocab_size()
    config.model.block_size = train_dataset.get_block_size()
    model = GPT(config.model)

    return trainer_job(config.trainer, model, train_dataset, dev,
                       ("tokenise", "in-memory", "workers", "workers>cpus", "transformer"))


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
