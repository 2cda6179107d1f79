"""What receiving a batch from a DataLoader worker process costs the training process, and
what a worker's start and an epoch's end cost without persistent workers.

A one-worker DataLoader over a dataset that hands out copies of the loop's first batch:
each batch is taken once the worker has had time to make it, so the time is the hand-over
alone (shared memory, file descriptors, unpickling, and the first touch of the batch's
pages). A batch already on a GPU is told apart first: no forked worker can make it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .common import timed

#: batches handed over (after the first, which pays for the worker's start)
HANDOVERS = 5
#: the least wait before each timed hand-over (s); the wait is otherwise twice what one copy
#: of the batch takes here (the worker copies it, then pickles it into shared memory), so
#: that the next batch is ready and the timing holds the hand-over alone
WAIT_S = 0.002


def holds_device_tensors(x: Any) -> bool:
    """True where a batch (tensors, nested in tuples, lists and mappings) holds a tensor off the
    CPU: a dataset that hands out batches already on the GPU. A forked DataLoader worker
    cannot make those (CUDA does not start in a forked child)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.device.type != "cpu"
    if isinstance(x, Mapping):
        return any(holds_device_tensors(v) for v in x.values())
    if isinstance(x, tuple | list):
        return any(holds_device_tensors(v) for v in x)
    return False


def _clone(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, Mapping):  # a BatchEncoding too: as a dict, the same tensors to move
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return type(x)(_clone(v) for v in x) if not hasattr(x, "_fields") else type(x)(
            *(_clone(v) for v in x))
    return x


class _Repeat:
    """A map-style dataset whose every item is a fresh copy of one batch (made in the
    worker, as a worker makes its batches)."""

    def __init__(self, batch: Any, n: int) -> None:
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return _clone(self.batch)


def _touch(x: Any) -> None:
    """Read one element of every memory page of the tensors in ``x``: a batch from a worker
    lives in shared memory that this process has only mapped, and its first use (the copy
    to the GPU, the forward) faults every page in, a cost that receiving alone (the
    mapping) does not show."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu" and x.numel():
            flat = x.detach().reshape(-1)
            flat[:: max(1, 4096 // max(1, x.element_size()))].sum()
    elif isinstance(x, Mapping):
        for v in x.values():
            _touch(v)
    elif isinstance(x, tuple | list):
        for v in x:
            _touch(v)


@timed("worker_handover")
def time_worker_handover(batch: Any) -> tuple[float, float, float, float] | None:
    """What receiving one batch like ``batch`` from a DataLoader worker process costs the
    training process (ms, the least of :data:`HANDOVERS`, each taken once the worker had
    time to make it: :data:`WAIT_S`; a busy moment only adds to it),
    the first touch of its pages included (:func:`_touch`).
    Also, for the stalls an epoch pays without persistent workers (ms): what starting that
    worker took (``iter()`` and its first batch, a copy), of which ``iter()`` alone (the
    fork: the training process forks its workers one after another, and each child's own
    start-up overlaps the next fork), and the end of the epoch (the ``next()`` that
    raises StopIteration: the loader shuts its workers down and joins them). The RNG state
    the loader's seeding draws from is put back. Returns ``(hand_over, start, fork,
    stop)``."""
    import torch
    from torch.utils.data import DataLoader

    if batch is None:
        return None
    rng = torch.get_rng_state()
    t0 = time.perf_counter()
    _clone(batch)
    wait = max(WAIT_S, 2 * (time.perf_counter() - t0))
    try:
        ds: Any = _Repeat(batch, HANDOVERS + 1)  # map-style: __len__ and __getitem__
        loader: Any = DataLoader(ds, batch_size=None, num_workers=1,
                                 prefetch_factor=HANDOVERS + 1)
        t0 = time.perf_counter()
        it = iter(loader)
        try:
            fork = time.perf_counter() - t0
            next(it)
            start = time.perf_counter() - t0
            times = []
            for _ in range(HANDOVERS):
                time.sleep(wait)  # the worker has the next batch ready
                t0 = time.perf_counter()
                _touch(next(it))
                times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in it:  # the epoch's end: the worker is shut down and joined
                pass
            stop = time.perf_counter() - t0
        finally:
            del it
    finally:
        torch.set_rng_state(rng)
    return (round(min(times) * 1e3, 4), round(start * 1e3, 4), round(fork * 1e3, 4),
            round(stop * 1e3, 4))
