"""What sending its batches costs a real worker (diagnose/capture/probes/send.py)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from diagnose.capture.probes.send import SEND_WARM, time_worker_send


class _Tensors(torch.utils.data.Dataset):
    """Samples of ``n`` small tensors each (2 ms a sample): a batch of them is ``n``
    tensors, each sent from a worker with its own file descriptor."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        time.sleep(0.002)
        return {f"t{j}": torch.full((16,), float(i)) for j in range(self.n)}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux schedstat")
def test_what_sending_its_batches_costs_a_real_worker_is_timed():
    """A real one-worker loader: what its threads other than the one making batches spend
    a batch, which grows with the tensors sent (a file descriptor and a handshake each:
    24 tensors against 1). The RNGs are put back and no child is left; a spawned loader,
    an iterable dataset or an epoch too short for the steady batches give None."""
    import multiprocessing as mp

    import psutil

    kids = {p.pid for p in psutil.Process().children(recursive=True)}
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    few = time_worker_send(DataLoader(_Tensors(1), batch_size=4, shuffle=True))
    many = time_worker_send(DataLoader(_Tensors(24), batch_size=4, shuffle=True))
    assert few is not None and many is not None
    assert few > 0 and many > 3 * few, (few, many)
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= kids
    spawned = DataLoader(_Tensors(1), batch_size=4,
                         multiprocessing_context=mp.get_context("spawn"), num_workers=1)
    assert time_worker_send(spawned) is None
    assert time_worker_send(DataLoader(_Tensors(1), batch_size=64 // (SEND_WARM + 3) + 1)) \
        is None

    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert time_worker_send(DataLoader(Stream(), batch_size=2)) is None
