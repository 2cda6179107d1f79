"""The model's work right after each kind of fetch: a batch made a sample at a time, and
the same batch fetched with one ``dataset[indices]`` call.

A long stretch of single-threaded loading leaves torch's thread pool asleep (OpenMP's
threads stop spinning after a short wait and block), and the ops that follow pay for waking
it. The batched-fetch prediction needs that cost besides the fetch itself: this probe gives
it as the median ratio of the work timed after each kind of fetch, in turn.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from diagnose.fixes.catalog.fetch import batch_indexable

from .common import cannot_afford, median_noise, out_of_time, rng_kept, settled, timed
from .compute import Inputs, model_work, on_cpu

#: rounds: at least AFTER_FETCH_ROUNDS, then more within AFTER_FETCH_S seconds in all
#: until the ratio's median is settled (:func:`~.common.settled`), at most
#: AFTER_FETCH_MAX_ROUNDS; at least 3 where they took that long (huge batches)
AFTER_FETCH_ROUNDS = 4
AFTER_FETCH_MAX_ROUNDS = 24
AFTER_FETCH_S = 0.3


@timed("work_after_fetch")
def time_work_after_fetches(model: Any, inputs: Inputs | None, loader: Any
                            ) -> dict[str, Any] | None:
    """The model's forward and backward on ``inputs`` timed right after a batch fetched
    as the loader does now (a ``__getitem__`` a sample, then collated) and right after the
    same batch fetched with one ``dataset[indices]`` call, in turn (ms, the medians, and
    the median of the rounds' ratios, ``ratio``). The fetched batches are dropped
    (``inputs`` is what runs, as in :func:`~.compute.time_threads`); their indices come
    from a generator of this timing's own. Nothing of the run changes
    (:func:`~.compute.model_work`). None where it does not apply: no inputs, a GPU model,
    one intra-op thread (no pool to wake), batches that cannot be fetched with one call."""
    if inputs is None or model is None or not on_cpu(model):
        return None
    import torch
    from torch.utils.data import BatchSampler, DataLoader

    if torch.get_num_threads() < 2 or not batch_indexable(loader):
        return None
    ds, bs = loader.dataset, int(loader.batch_size)
    n = len(ds)
    if n < 1:
        return None
    gen = torch.Generator().manual_seed(1)
    order = torch.randint(n, ((AFTER_FETCH_MAX_ROUNDS + 1) * bs,), generator=gen).tolist()
    after: tuple[list[float], list[float]] = ([], [])
    with rng_kept(), model_work(model, inputs, idle_s=0.0) as (_, work):
        # the loaders' own seeds come from that generator too, not the user's RNG
        batched = iter(DataLoader(ds, sampler=BatchSampler(order, bs, drop_last=False),
                                  batch_size=None, generator=gen))
        per_sample = iter(DataLoader(ds, sampler=order, batch_size=bs, generator=gen))
        next(batched), next(per_sample)
        if cannot_afford(2 * work(), AFTER_FETCH_ROUNDS):  # warm; a round is two works
            return None
        start = time.perf_counter()
        for k in range(AFTER_FETCH_MAX_ROUNDS):
            took = time.perf_counter() - start
            if (k >= AFTER_FETCH_ROUNDS and (took > AFTER_FETCH_S or out_of_time() or settled(
                    [a / b for a, b in zip(*after, strict=True) if b > 0]))) or (
                    k >= 3 and took > 2 * AFTER_FETCH_S):
                break
            # the order turns each round: neither side always follows the other's work
            pair = ((per_sample, after[0]), (batched, after[1]))
            for it, out in (pair if k % 2 == 0 else pair[::-1]):
                next(it)
                out.append(work())
    if not after[1] or min(after[1]) <= 0:
        return None
    ratios = [a / b for a, b in zip(*after, strict=True)]
    return {"after_per_sample_ms": round(statistics.median(after[0]) * 1e3, 4),
            "after_batched_ms": round(statistics.median(after[1]) * 1e3, 4),
            "ratio": round(statistics.median(ratios), 4), "rounds": len(after[1]),
            "noise": median_noise(ratios)}
