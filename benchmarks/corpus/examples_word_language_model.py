"""PyTorch's word-level language model example (Wikitext-2, LSTM): the train/valid/test
text files are read once and tokenised by whitespace into one long id tensor each,
``batchify`` cuts the training ids into 20 columns, and each step takes the next 35 rows
(``get_batch``) with no DataLoader; a 2-layer LSTM (embedding 200, hidden 200, dropout
0.2) with NLL loss on log-softmax, the hidden state carried over and detached, and the
update written by hand: clip the gradient norm to 0.25, then ``p.data.add_(p.grad,
alpha=-lr)`` with lr 20 (no ``torch.optim``).

Adapted from pytorch/examples, word_language_model/main.py (with model.py and data.py),
at commit 77f55b912142e11fcfdf5b530231fb9c52f181e8 (BSD-3-Clause; text in
licenses/pytorch_examples.txt).

Changed:
- the repository's data/wikitext-2 (train.txt is not readable from the stored snapshot,
  and the repository is not there when this job runs) becomes English-like text made
  offline at first use (``english_like_text``), of wikitext-2's size (10.8 MB train,
  1.1 MB valid, 1.3 MB test), cut from one text so the three files share their words,
  written as train/valid/test.txt into the cache folder; ``data.Corpus`` reads and
  tokenises them as the script does;
- the vocabulary is scaled down from wikitext-2's ~33k words to ~2k (400 made-up words,
  each also capitalised and with a comma or full stop): with ~33k the decoder's 200 x 33k
  matmuls made one step 0.9-2 s on a 2-CPU machine; with ~2k it is within 200 ms. The
  model's sizes and every other hyper-parameter are the script's defaults;
- argparse becomes constants (the script's defaults: LSTM, emsize 200, nhid 200, 2
  layers, lr 20, clip 0.25, batch 20, bptt 35, dropout 0.2, not tied, seed 1111);
- the device is ``pick_device`` (CUDA where there is one) instead of ``--accel``;
- the loop body is ``train_step``, the loop over ``get_batch`` offsets is ``batches()``
  (the hidden state restarts from zeros each epoch, as ``train()`` does); the periodic
  log print, evaluation, lr annealing, checkpointing and ONNX export are left out;
- the Transformer model, PositionalEncoding and the ``--use-optimizer`` (AdamW) branch
  are left out (not used by the default LSTM run).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._common import cache_dir, pick_device, run
from ._text import english_like_text

MODEL, EMSIZE, NHID, NLAYERS = "LSTM", 200, 200, 2
LR, CLIP, BATCH_SIZE, BPTT, DROPOUT, TIED, SEED = 20.0, 0.25, 20, 35, 0.2, False, 1111
#: wikitext-2's files' sizes in characters (train, valid, test)
SIZES = {"train.txt": 10_800_000, "valid.txt": 1_120_000, "test.txt": 1_260_000}
#: made-up words in the text (each in ~5 forms: ~2,000 dictionary entries)
WORDS = 400


def _make_text(root: Path) -> None:
    """train/valid/test.txt cut (at paragraph ends) from one English-like text."""
    text = english_like_text(sum(SIZES.values()), seed=11, vocab=WORDS)
    paragraphs = text.split("\n\n")
    start = 0
    for name, size in SIZES.items():
        out, n = [], 0
        while start < len(paragraphs) and n < size:
            out.append(paragraphs[start])
            n += len(paragraphs[start]) + 2
            start += 1
        (root / name).write_text("\n\n".join(out) + "\n", encoding="utf8")


# --- data.py ---------------------------------------------------------------------------

class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, 'train.txt'))
        self.valid = self.tokenize(os.path.join(path, 'valid.txt'))
        self.test = self.tokenize(os.path.join(path, 'test.txt'))

    def tokenize(self, path):
        """Tokenizes a text file."""
        assert os.path.exists(path)
        # Add words to the dictionary
        with open(path, encoding="utf8") as f:
            for line in f:
                words = line.split() + ['<eos>']
                for word in words:
                    self.dictionary.add_word(word)

        # Tokenize file content
        with open(path, encoding="utf8") as f:
            idss = []
            for line in f:
                words = line.split() + ['<eos>']
                ids = []
                for word in words:
                    ids.append(self.dictionary.word2idx[word])
                idss.append(torch.tensor(ids).type(torch.int64))
            ids = torch.cat(idss)

        return ids


# --- model.py --------------------------------------------------------------------------

class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            except KeyError as e:
                raise ValueError("""An invalid option for `--model` was supplied,
                                 options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']""") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


# --- main.py ---------------------------------------------------------------------------

def batchify(data, bsz, device):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""

    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i+seq_len]
    target = source[i+1:i+1+seq_len].view(-1)
    return data, target


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(SEED)
    corpus = Corpus(cache_dir("examples_word_language_model", _make_text))
    train_data = batchify(corpus.train, BATCH_SIZE, dev)
    ntokens = len(corpus.dictionary)
    model = RNNModel(MODEL, ntokens, EMSIZE, NHID, NLAYERS, DROPOUT, TIED).to(dev)
    criterion = nn.NLLLoss()
    lr = LR
    state: dict[str, Any] = {"hidden": None, "total_loss": 0.0}

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:  # one epoch of train()
            model.train()
            state["hidden"] = model.init_hidden(BATCH_SIZE)
            for i in range(0, train_data.size(0) - 1, BPTT):
                yield get_batch(train_data, i)

    def train_step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        data, targets = batch[0].to(dev), batch[1].to(dev)
        if state["hidden"] is None:
            state["hidden"] = model.init_hidden(BATCH_SIZE)
        model.zero_grad()
        hidden = repackage_hidden(state["hidden"])
        output, state["hidden"] = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

        state["total_loss"] += loss.item()
        return loss.detach()

    return {"model": model, "loader": None, "optimizer": None, "loss_fn": None,
            "train_step": train_step, "batches": batches, "device": dev,
            "marks_steps": False,
            "covers": ("in-memory", "no-loader", "hand-update", "rnn")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
