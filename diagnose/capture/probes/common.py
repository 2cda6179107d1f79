"""What the probes share: the bound that keeps the session's exit quick, the RNG states
put back after a timing, and a batch made as the loader's fetcher makes it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: a probe whose timing takes longer than this (s) stops (or gives None): the probes run
#: as the ``with`` block exits, and the exit must stay quick
SLOW_S = 0.5


@contextmanager
def rng_kept() -> Iterator[None]:
    """The RNG states a dataset may draw from (torch, random, numpy), put back after."""
    import random

    import torch

    states: list[tuple[Callable[[Any], Any], Any]] = [
        (torch.set_rng_state, torch.get_rng_state()), (random.setstate, random.getstate())]
    try:
        import numpy as np

        states.append((np.random.set_state, np.random.get_state()))
    except ImportError:  # pragma: no cover
        pass
    try:
        yield
    finally:
        for put, state in states:
            put(state)


def make_batch(ds: Any, collate: Callable[[Any], Any], idx: list[int]) -> float:
    """Seconds to make the batch of ``idx`` as the loader's fetcher does: the dataset's
    ``__getitems__`` where it has one, else its items one by one; then ``collate``."""
    t0 = time.perf_counter()
    many = getattr(ds, "__getitems__", None)
    collate(many(idx) if callable(many) else [ds[i] for i in idx])
    return time.perf_counter() - t0
