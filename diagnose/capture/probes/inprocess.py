"""What a batch costs the training process when it makes it itself (no workers): the
dataset's items and the loader's collate_fn, timed after the loop."""

from __future__ import annotations

import statistics
from typing import Any

from .batches import loader_batches
from .common import SLOW_S, out_of_time, rng_kept, settled, timed


@timed("inprocess_batch")
def time_inprocess_batch(loader: Any, repeat: int = 5) -> float | None:
    """One batch made in the training process as an in-process loader would make it (its
    first batch, :mod:`.batches`),
    the median of ``repeat`` (ms; 3 or more, fewer once :func:`~.common.settled`). The
    median, not the least: the loop's own batches are a typical time, and the least of a
    few timings on a shared host reads well under them.
    The RNG states the dataset may draw from (torch, random, numpy) are put back. None for
    an iterable dataset."""
    b = loader_batches(loader, 1)
    if b is None:
        return None
    times: list[float] = []
    with rng_kept():
        for k in range(repeat):
            if k >= 3 and (settled(times) or out_of_time()):
                break
            times.append(b.make(0))
            if times[-1] > SLOW_S:
                break
    return round(statistics.median(times) * 1e3, 4)
