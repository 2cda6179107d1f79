"""Audio classification with the features made per sample in the workers: each clip is a
synthetic waveform (a class-dependent chord with vibrato, clicks and noise, made from the
sample's index), turned into a log-magnitude spectrogram with ``torch.stft`` in
``__getitem__``, in 2 DataLoader workers; a 1-D conv net over time, SGD with Nesterov
momentum.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import forever, pick_device, run

RATE, SECONDS, CLASSES, CLIPS = 16_000, 1.0, 8, 4096
N_FFT, HOP = 512, 128


class SynthClips(Dataset):
    def __init__(self, n: int = CLIPS) -> None:
        self.n = n
        self.window = torch.hann_window(N_FFT)

    def __len__(self) -> int:
        return self.n

    def waveform(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        label = i % CLASSES
        t = torch.arange(int(RATE * SECONDS)) / RATE
        f0 = 110 * 2 ** (label / 4) * (1 + 0.01 * torch.rand((), generator=g))
        vib = 1 + 0.005 * torch.sin(2 * math.pi * 5 * t)
        wave = sum(torch.sin(2 * math.pi * f0 * k * vib * t) / k for k in (1, 2, 3))
        clicks = (torch.rand(t.shape, generator=g) < 0.0005).float()
        wave = wave + clicks + 0.1 * torch.randn(t.shape, generator=g)
        return wave / wave.abs().max(), label

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        wave, label = self.waveform(i)
        spec = torch.stft(wave, N_FFT, hop_length=HOP, window=self.window, return_complex=True)
        feats = torch.log1p(spec.abs())
        return (feats - feats.mean()) / (feats.std() + 1e-5), label


class Conv1dNet(nn.Module):
    def __init__(self, bins: int = N_FFT // 2 + 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(bins, 128, 5, padding=2), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Conv1d(128, 128, 5, padding=2, stride=2), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Conv1d(128, 128, 3, padding=1), nn.BatchNorm1d(128), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(128, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    cuda = dev.type == "cuda"
    loader = DataLoader(SynthClips(), batch_size=32, shuffle=True, num_workers=2,
                        pin_memory=cuda, persistent_workers=True, drop_last=True)
    model = Conv1dNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    loss_fn = nn.functional.cross_entropy

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev, non_blocking=cuda), batch[1].to(dev, non_blocking=cuda)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("features", "workers", "conv")}


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
