"""Keyword spotting on a small clip set: 320 one-second 16 kHz waveforms stored once in a
``.npy`` file (memory-mapped); each ``__getitem__`` applies a random time shift and gain,
computes ``torch.stft`` and a log-mel spectrogram (a triangular filterbank matmul) and
per-clip normalisation, in 2 DataLoader workers that are not persistent, so they restart
at every short epoch (20 batches of 16); a 2-D CNN over the spectrogram, Adam.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import cache_dir, forever, pick_device, run

RATE, CLIPS, CLASSES, BATCH = 16_000, 320, 10, 16
N_FFT, HOP, MELS = 400, 160, 40


def _make(root: Path) -> None:
    rng = np.random.default_rng(9)
    t = np.arange(RATE, dtype=np.float32) / RATE
    wav = np.empty((CLIPS, RATE), dtype=np.float32)
    labels = np.arange(CLIPS) % CLASSES
    for i, c in enumerate(labels):
        f0 = 200 + 80 * c + rng.normal(0, 10)
        env = np.exp(-((t - rng.uniform(0.3, 0.7)) ** 2) / 0.02)
        sig = sum(np.sin(2 * math.pi * f0 * k * t + rng.uniform(0, 6)) / k for k in (1, 2, 3))
        wav[i] = env * sig + rng.normal(0, 0.05, RATE)
    np.save(root / "wav.npy", wav)
    np.save(root / "labels.npy", labels)


def mel_filterbank(n_fft: int, mels: int, rate: int) -> torch.Tensor:
    def hz2mel(f: float) -> float:
        return 2595 * math.log10(1 + f / 700)

    pts = torch.linspace(hz2mel(0), hz2mel(rate / 2), mels + 2)
    hz = 700 * (10 ** (pts / 2595) - 1)
    bins = torch.floor((n_fft + 1) * hz / rate).long()
    fb = torch.zeros(mels, n_fft // 2 + 1)
    for m in range(1, mels + 1):
        lo, mid, hi = bins[m - 1].item(), bins[m].item(), bins[m + 1].item()
        for k in range(lo, mid):
            fb[m - 1, k] = (k - lo) / max(1, mid - lo)
        for k in range(mid, hi):
            fb[m - 1, k] = (hi - k) / max(1, hi - mid)
    return fb


class Clips(Dataset):
    def __init__(self, root: Path) -> None:
        self.wav = np.load(root / "wav.npy", mmap_mode="r")
        self.labels = np.load(root / "labels.npy")
        self.window = torch.hann_window(N_FFT)
        self.fb = mel_filterbank(N_FFT, MELS, RATE)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = torch.from_numpy(np.array(self.wav[i]))
        x = torch.roll(x, int(torch.randint(-1600, 1600, ()))) * float(torch.empty(()).uniform_(0.7, 1.3))
        spec = torch.stft(x, N_FFT, HOP, window=self.window, return_complex=True).abs() ** 2
        mel = torch.log(self.fb @ spec + 1e-6)
        mel = (mel - mel.mean()) / (mel.std() + 1e-5)
        return mel.unsqueeze(0), int(self.labels[i])


def make_model() -> nn.Module:
    def blk(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))
    return nn.Sequential(blk(1, 16), blk(16, 32), blk(32, 48), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Dropout(0.2), nn.Linear(48, CLASSES))


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    torch.manual_seed(0)
    data = Clips(cache_dir("keyword_clips", _make))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=2,
                        persistent_workers=False, drop_last=True)
    model = make_model().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch: Any) -> torch.Tensor:
        x, y = batch[0].to(dev), batch[1].to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return {"model": model, "loader": loader, "optimizer": opt, "loss_fn": loss_fn,
            "train_step": train_step, "batches": lambda: forever(loader), "device": dev,
            "marks_steps": False, "covers": ("features", "workers", "conv")}


def main(steps: int = 8) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
