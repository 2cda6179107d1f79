"""Training loops in the shapes people write, tiny and on the CPU, each as its script
would have it: nothing in a loop knows about diagnose but ``if d is not None and d.done:
break`` (``d``: the session, or None to time the loop alone).

Each ``make_<shape>()`` returns a :class:`Job`: the objects a user would pass to
``diagnose()`` and the loop. The shapes follow public scripts: pytorch/examples'
word_language_model (tensor slices, a hand-written update) and dcgan (two models, two
optimizers, the discriminator called three times a step), a loop over pre-sliced batches
with one optimizer, REINFORCE (an episode of policy calls, then one update), SimCLR-style
contrastive learning (two views, the model called twice), a Hugging Face-style loop
(``model(**batch).loss``) and gradient accumulation (``optimizer.step()`` every k
batches).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


@dataclass
class Job:
    """What ``diagnose(model, loader)`` would be given, and the loop: ``loop(d, limit)``
    runs until ``d.done`` (``d`` not None) or ``limit`` steps, and returns the steps run."""

    model: Any
    loader: Any
    loop: Callable[[Any, int], int]
    per_step: dict[str, Any] = field(default_factory=dict)  # what one step holds


def _done(d: Any, n: int, limit: int) -> bool:
    return n >= limit or (d is not None and d.done)


# ---------------------------------------------------------------- word language model
class RNNModel(nn.Module):
    """word_language_model's RNNModel, small: embedding, LSTM, decoder."""

    def __init__(self, ntoken: int = 64, ninp: int = 16, nhid: int = 32) -> None:
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)
        self.ntoken, self.nhid = ntoken, nhid

    def forward(self, x: torch.Tensor, hidden: Any) -> tuple[torch.Tensor, Any]:
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, self.ntoken), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, bsz, self.nhid), torch.zeros(1, bsz, self.nhid)


def make_lm(bptt: int = 8, batch: int = 4, tokens: int = 40_000) -> Job:
    """word_language_model's train(): batches sliced from one long tensor, the update by
    hand (``p.data.add_(p.grad, alpha=-lr)``), ``model.zero_grad()`` first."""
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 64, (tokens // batch, batch), generator=g)
    torch.manual_seed(0)
    model = RNNModel()
    criterion = nn.CrossEntropyLoss()
    lr = 0.5

    def loop(d: Any, limit: int) -> int:
        hidden = model.init_hidden(batch)
        n = 0
        for i in range(0, data.size(0) - 1 - bptt, bptt):
            x, y = data[i:i + bptt], data[i + 1:i + 1 + bptt].reshape(-1)
            hidden = tuple(h.detach() for h in hidden)
            model.zero_grad()
            output, hidden = model(x, hidden)
            loss = criterion(output, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            n += 1
            if _done(d, n, limit):
                break
        return n

    return Job(model, None, loop, {"forwards": 1})


# ---------------------------------------------------------------- DCGAN
def make_gan(batch: int = 16, nz: int = 8, n: int = 4096) -> Job:
    """dcgan's loop on fake data: D on real, D on fake (detached), optD; D on fake again,
    optG. ``Job.model`` is the discriminator alone (what a newcomer passes);
    ``per_step["models"]`` has both."""
    torch.manual_seed(0)
    netG = nn.Sequential(nn.Linear(nz, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh())
    netD = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid())
    g = torch.Generator().manual_seed(1)
    loader = DataLoader(TensorDataset(torch.rand(n, 32, generator=g) * 2 - 1), batch_size=batch)
    criterion = nn.BCELoss()
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

    def loop(d: Any, limit: int) -> int:
        steps = 0
        for _epoch in range(100):
            for (real,) in loader:
                b = real.size(0)
                netD.zero_grad()
                label = torch.full((b, 1), 1.0)
                errD_real = criterion(netD(real), label)
                errD_real.backward()
                fake = netG(torch.randn(b, nz))
                label.fill_(0.0)
                errD_fake = criterion(netD(fake.detach()), label)
                errD_fake.backward()
                optD.step()
                netG.zero_grad()
                label.fill_(1.0)
                errG = criterion(netD(fake), label)
                errG.backward()
                optG.step()
                steps += 1
                if _done(d, steps, limit):
                    return steps
        return steps

    return Job(netD, loader, loop, {"forwards_of_model": 3, "models": [netG, netD]})


# ---------------------------------------------------------------- pre-sliced batches
def make_sliced(batch: int = 32, n: int = 8192) -> Job:
    """No DataLoader: batches sliced from tensors in memory, one optimizer."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)

    def loop(d: Any, limit: int) -> int:
        steps = 0
        for i in range(0, n, batch):
            loss = nn.functional.cross_entropy(model(X[i:i + batch]), Y[i:i + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            if _done(d, steps, limit):
                break
        return steps

    return Job(model, None, loop, {"forwards": 1})


# ---------------------------------------------------------------- parts called directly
class Wrapper(nn.Module):
    """A LightningModule's shape: the parts are attributes, and ``training_step`` calls
    them (``self.net(x)``), never the module's own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64))
        self.head = nn.Linear(64, 10)

    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.head(self.net(x)), y)


def make_parts_called(batch: int = 64, n: int = 8192, autocast: bool = False) -> Job:
    """A DataLoader over tensors; the loop calls the model's parts, not the model
    (``autocast``: under bf16 CPU autocast, as Lightning's ``precision="bf16-mixed"``)."""
    torch.manual_seed(0)
    model = Wrapper()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(n, 32, generator=g),
                                      torch.randint(0, 10, (n,), generator=g)),
                        batch_size=batch, shuffle=True)

    def loop(d: Any, limit: int) -> int:
        steps = 0
        while True:
            for x, y in loader:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = model.training_step(x, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                if _done(d, steps, limit):
                    return steps

    return Job(model, loader, loop)


# ---------------------------------------------------------------- REINFORCE
def make_reinforce(episode: int = 12, obs: int = 4, actions: int = 2) -> Job:
    """pytorch/examples' reinforce.py on a made-up environment: each step of an episode
    calls the policy (with autograd: its log-probabilities are kept), then one update."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(obs, 64), nn.ReLU(), nn.Linear(64, actions))
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)

    def loop(d: Any, limit: int) -> int:
        steps = 0
        for _ in range(100_000):
            state = torch.randn(obs, generator=g)
            log_probs, rewards = [], []
            for _t in range(episode):
                probs = torch.softmax(policy(state), dim=-1)
                dist = torch.distributions.Categorical(probs)
                action = dist.sample()
                log_probs.append(dist.log_prob(action))
                state = torch.randn(obs, generator=g)
                rewards.append(float(action.item() == 0))
            returns = torch.tensor(rewards).flip(0).cumsum(0).flip(0)
            returns = (returns - returns.mean()) / (returns.std() + 1e-6)
            loss = -(torch.stack(log_probs) * returns).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            if _done(d, steps, limit):
                break
        return steps

    return Job(policy, None, loop, {"forwards": episode})


# ---------------------------------------------------------------- contrastive
class TwoViews(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample as two noisy views of one vector (SimCLR's augmentations, cheaply)."""

    def __init__(self, n: int = 4096, dim: int = 32) -> None:
        self.x = torch.randn(n, dim, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        return x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)


def make_contrastive(batch: int = 32) -> Job:
    """A SimCLR-style step: the encoder on both views, NT-Xent loss, one optimizer."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(TwoViews(), batch_size=batch, shuffle=True, drop_last=True)

    def nt_xent(a: torch.Tensor, b: torch.Tensor, t: float = 0.5) -> torch.Tensor:
        z = nn.functional.normalize(torch.cat([a, b]), dim=1)
        sim = z @ z.t() / t
        sim.fill_diagonal_(float("-inf"))
        k = a.size(0)
        target = torch.cat([torch.arange(k, 2 * k), torch.arange(k)])
        return nn.functional.cross_entropy(sim, target)

    def loop(d: Any, limit: int) -> int:
        steps = 0
        for _epoch in range(100):
            for v1, v2 in loader:
                loss = nt_xent(model(v1), model(v2))
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                if _done(d, steps, limit):
                    return steps
        return steps

    return Job(model, loader, loop, {"forwards": 2})


# ---------------------------------------------------------------- Hugging Face-style
@dataclass
class Output:
    """What a transformers model returns: ``.loss`` and ``.logits``."""

    loss: torch.Tensor
    logits: torch.Tensor


class TinyClassifier(nn.Module):
    """``model(input_ids=..., attention_mask=..., labels=...)`` like a transformers model."""

    def __init__(self, vocab: int = 100, dim: int = 32, labels: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                labels: torch.Tensor) -> Output:
        h = (self.emb(input_ids) * attention_mask.unsqueeze(-1)).sum(1)
        h = h / attention_mask.sum(1, keepdim=True).clamp(min=1)
        logits = self.head(h)
        return Output(nn.functional.cross_entropy(logits, labels), logits)


def make_hf(batch: int = 16, n: int = 2048, seq: int = 24) -> Job:
    """A transformers-style loop: dict batches, ``outputs = model(**batch)``,
    ``outputs.loss.backward()``, optimizer and scheduler step, ``zero_grad()``."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (n, seq), generator=g)
    mask = (torch.rand(n, seq, generator=g) > 0.1).long()
    labels = torch.randint(0, 2, (n,), generator=g)
    rows = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": labels[i]}
            for i in range(n)]
    loader = DataLoader(rows, batch_size=batch, shuffle=True)  # default collate: a dict
    model = TinyClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))

    def loop(d: Any, limit: int) -> int:
        steps = 0
        model.train()
        for _epoch in range(100):
            for batch_ in loader:
                outputs = model(**batch_)
                outputs.loss.backward()
                opt.step()
                sched.step()
                opt.zero_grad()
                steps += 1
                if _done(d, steps, limit):
                    return steps
        return steps

    return Job(model, loader, loop, {"forwards": 1})


# ---------------------------------------------------------------- gradient accumulation
def make_accum(k: int = 4, batch: int = 8, n: int = 4096) -> Job:
    """One optimizer step every ``k`` batches, the loss divided by ``k``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(n, 32, generator=g),
                                      torch.randint(0, 10, (n,), generator=g)),
                        batch_size=batch)

    def loop(d: Any, limit: int) -> int:
        steps = 0
        for _epoch in range(100):
            for i, (x, y) in enumerate(loader):
                loss = nn.functional.cross_entropy(model(x), y) / k
                loss.backward()
                if (i + 1) % k == 0:
                    opt.step()
                    opt.zero_grad()
                    steps += 1
                    if _done(d, steps, limit):
                        return steps
        return steps

    return Job(model, loader, loop, {"batches": k})


SHAPES: dict[str, Callable[[], Job]] = {
    "lm": make_lm, "gan": make_gan, "sliced": make_sliced, "reinforce": make_reinforce,
    "contrastive": make_contrastive, "hf": make_hf, "accum": make_accum,
}
