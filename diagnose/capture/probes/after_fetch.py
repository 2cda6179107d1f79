"""The batched fetch's inputs: one batch fetched with one ``dataset[indices]`` call against
the same batch made a sample at a time (as the loader makes it now), and the model's work
right after each kind of fetch.

A long stretch of single-threaded loading leaves torch's thread pool asleep (OpenMP's
threads stop spinning after a short wait and block), and the ops that follow pay for waking
it. The batched-fetch prediction needs that cost besides the fetch itself: one probe times
both, in rounds of a fetch and the work after it, each kind in turn (so the fetches are
timed as the loop meets them, after the model's work). Where the work cannot be timed (a
GPU model, one intra-op thread, no inputs) the fetches are timed alone
(:func:`time_fetches`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from diagnose.fixes.catalog.fetch import batch_indexable

from .common import cannot_afford, median_noise, out_of_time, rng_kept, settled, timed
from .compute import Inputs, model_work, on_cpu

#: rounds: at least AFTER_FETCH_ROUNDS, then more within AFTER_FETCH_S seconds in all
#: until the work's ratio and both fetches' medians are settled
#: (:func:`~.common.settled`), at most AFTER_FETCH_MAX_ROUNDS; at least 3 where they took
#: that long (huge batches)
AFTER_FETCH_ROUNDS = 4
AFTER_FETCH_MAX_ROUNDS = 24
AFTER_FETCH_S = 0.3
#: the most the fetches timed alone take (s; at least 3 pairs of batches are timed)
FETCHES_S = 1.5


def _loaders(loader: Any, rounds: int, seed: int) -> tuple[Any, Any] | None:
    """Iterators over the same random batches of ``loader``'s dataset, one fetching each
    with one ``dataset[indices]`` call as the change runs it (``BatchSampler`` lists of
    indices spread over the dataset, ``batch_size=None``), one a ``__getitem__`` a sample
    then collated as the loader does now; ``rounds`` + 1 batches each, from a generator
    of their own (the user's random state is left as it is). None where batches cannot be
    fetched that way."""
    if not batch_indexable(loader):
        return None
    import torch
    from torch.utils.data import BatchSampler, DataLoader

    ds, bs = loader.dataset, int(loader.batch_size)
    n = len(ds)
    if n < 1:
        return None
    gen = torch.Generator().manual_seed(seed)
    order = torch.randint(n, ((rounds + 1) * bs,), generator=gen).tolist()
    # the loaders' own seeds come from that generator too, not the user's RNG
    batched = iter(DataLoader(ds, sampler=BatchSampler(order, bs, drop_last=False),
                              batch_size=None, generator=gen))
    per_sample = iter(DataLoader(ds, sampler=order, batch_size=bs, generator=gen))
    return batched, per_sample


def _ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1e3, 4)


@timed("fetches")
def time_fetches(loader: Any, batches: int = 9) -> tuple[float, float] | None:
    """The fetches alone, in ms: the median time of ``batches`` batches (after one
    untimed; fewer where they take more than :data:`FETCHES_S`, but at least 3) fetched
    with one ``dataset[indices]`` call, and, in turn with each, of the same batch fetched
    as the loader does now (:func:`_loaders`). Timed in turn, their ratio holds while the
    host's pace moves; the second puts the first on the loop's pace. None where batches
    cannot be fetched that way."""
    its = _loaders(loader, batches, seed=0)
    if its is None:
        return None
    next(its[0]), next(its[1])
    times: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    for i in range(batches):
        for it, out in zip(its, times, strict=True):
            t0 = time.perf_counter()
            next(it)
            out.append(time.perf_counter() - t0)
        if i >= 2 and (time.perf_counter() - start > FETCHES_S  # huge batches: 3 pairs
                       or settled(*times)):  # or medians known well enough
            break
    return _ms(times[0]), _ms(times[1])


@timed("work_after_fetch")
def time_work_after_fetches(model: Any, inputs: Inputs | None, loader: Any
                            ) -> dict[str, Any] | None:
    """In rounds, each kind in turn: a batch fetched as the loader does now (a
    ``__getitem__`` a sample, then collated) or with one ``dataset[indices]`` call
    (:func:`_loaders`), then the model's forward and backward on ``inputs``. Gives the
    fetches' medians (``batched_fetch_ms``, ``per_sample_fetch_ms``), the work's after each
    (ms) and the median of the rounds' ratios of the work (``ratio``, with its ``noise``).
    The fetched batches are dropped (``inputs`` is what runs, as in
    :func:`~.compute.time_threads`). Nothing of the run changes
    (:func:`~.compute.model_work`). None where it does not apply: no inputs, a GPU model,
    one intra-op thread (no pool to wake), batches that cannot be fetched with one call."""
    if inputs is None or model is None or not on_cpu(model):
        return None
    import torch

    if torch.get_num_threads() < 2:
        return None
    its = _loaders(loader, AFTER_FETCH_MAX_ROUNDS, seed=1)
    if its is None:
        return None
    batched, per_sample = its
    after: tuple[list[float], list[float]] = ([], [])
    fetch: tuple[list[float], list[float]] = ([], [])
    with rng_kept(), model_work(model, inputs, idle_s=0.0) as (_, work):
        next(batched), next(per_sample)
        if cannot_afford(2 * work(), AFTER_FETCH_ROUNDS):  # warm; a round is two works
            return None
        start = time.perf_counter()
        for k in range(AFTER_FETCH_MAX_ROUNDS):
            took = time.perf_counter() - start
            if (k >= AFTER_FETCH_ROUNDS and (took > AFTER_FETCH_S or out_of_time() or (
                    settled([a / b for a, b in zip(*after, strict=True) if b > 0])
                    and settled(*fetch)))) or (k >= 3 and took > 2 * AFTER_FETCH_S):
                break
            # the order turns each round: neither side always follows the other's work
            pair = ((per_sample, after[0], fetch[0]), (batched, after[1], fetch[1]))
            for it, out, got in (pair if k % 2 == 0 else pair[::-1]):
                t0 = time.perf_counter()
                next(it)
                got.append(time.perf_counter() - t0)
                out.append(work())
    if not after[1] or min(after[1]) <= 0:
        return None
    ratios = [a / b for a, b in zip(*after, strict=True)]
    return {"batched_fetch_ms": _ms(fetch[1]), "per_sample_fetch_ms": _ms(fetch[0]),
            "after_per_sample_ms": _ms(after[0]), "after_batched_ms": _ms(after[1]),
            "ratio": round(statistics.median(ratios), 4), "rounds": len(after[1]),
            "noise": median_noise(ratios)}
