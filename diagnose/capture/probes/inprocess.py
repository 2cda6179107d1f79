"""What a batch costs the training process when it makes it itself (no workers): the
dataset's items and the loader's collate_fn, timed after the loop."""

from __future__ import annotations

import statistics
from typing import Any

from .common import SLOW_S, make_batch, out_of_time, rng_kept, settled, timed


@timed("inprocess_batch")
def time_inprocess_batch(loader: Any, repeat: int = 5) -> float | None:
    """One batch made in the training process as an in-process loader would make it (the
    dataset's items for the first ``batch_size`` indices, then the loader's collate_fn),
    the median of ``repeat`` (ms; 3 or more, fewer once :func:`~.common.settled`). The
    median, not the least: the loop's own batches are a typical time, and the least of a
    few timings on a shared host reads well under them.
    The RNG states the dataset may draw from (torch, random, numpy) are put back. None for
    an iterable dataset, a custom batch sampler or a ``__getitems__`` dataset's failure."""
    ds, bs = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    collate = getattr(loader, "collate_fn", None)
    if ds is None or not isinstance(bs, int) or collate is None:
        return None
    try:
        n = len(ds)
    except TypeError:  # an IterableDataset
        return None
    idx = list(range(min(bs, n)))
    times: list[float] = []
    with rng_kept():
        for k in range(repeat):
            if k >= 3 and (settled(times) or out_of_time()):
                break
            times.append(make_batch(ds, collate, idx))
            if times[-1] > SLOW_S:
                break
    return round(statistics.median(times) * 1e3, 4)
