"""A batch made by the training process (diagnose/capture/probes/inprocess.py)."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from diagnose.capture.probes.inprocess import time_inprocess_batch


def test_in_process_batch_is_timed_and_the_rngs_put_back():
    class Noisy(TensorDataset):
        def __getitem__(self, i):  # draws from every RNG, as augmentations do
            random.random(), np.random.rand(), torch.rand(1)
            return super().__getitem__(i)

    loader = DataLoader(Noisy(torch.randn(100, 8), torch.arange(100)), batch_size=10,
                        num_workers=2)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    ms = time_inprocess_batch(loader)
    assert ms is not None and ms > 0
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_an_in_process_batch_is_its_median_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process batch is the median of its repeats, not the least: a loop's batches
    are typical times, and one busy repeat does not move a median."""
    ticks = iter([0.0, 0.010, 1.0, 1.030, 2.0, 2.011, 3.0, 3.012, 4.0, 4.013])
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    loader = DataLoader(TensorDataset(torch.randn(40, 4)), batch_size=10)
    assert time_inprocess_batch(loader, repeat=5) == 12.0
