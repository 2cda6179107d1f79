"""A map-style loader's batches as its fetcher makes them, for the probes after the loop.

Each batch comes from a key. With automatic batching (``batch_size`` set, or a
``batch_sampler`` given) a key is a list of indices, fetched with the dataset's
``__getitems__`` where it has one, else item by item, then collated. Without it
(``batch_size=None``: a ``BatchSampler`` given as the sampler, a sampler of slices or ids)
a key is one element of the sampler, passed whole to ``dataset[key]``, then to
``collate_fn`` (torch's ``default_convert`` unless given): torch's ``_MapDatasetFetcher``.

The keys: for a ``batch_size``, runs of consecutive indices (a worker's next batch touches
rows it has not touched yet, and no sampler is drawn from). For torch's own samplers (a
``BatchSampler`` over a ``RandomSampler`` or a ``SequentialSampler``, or either alone) keys
of the same kind, random ones from a generator of the probes' own: iterating a random
sampler permutes the whole dataset. For any other, the first
keys a fresh iterator of it gives (a bucketing sampler's batches differ in size, and only
it knows them), with the RNG states put back (the global ones and those of the torch
generators the sampler holds: the loop's own order is untouched), drawn once per loader.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from .common import cpu_wanted_s, rng_kept

#: the most batches a probe makes from distinct keys: the in-turn timing's warm batch and
#: its 15 turns (``worker_batch.MAX_PAIRS``); a probe that makes more cycles through them
KEYS = 16


@dataclass(frozen=True)
class LoaderBatches:
    """The dataset, the collate_fn, the keys of the batches to make (in order), whether
    the loader batches automatically (a key is a list of indices), and the loader's
    ``worker_init_fn`` (what each of its workers runs first)."""

    dataset: Any
    collate: Callable[[Any], Any]
    keys: tuple[Any, ...]
    auto: bool
    worker_init: Callable[[int], Any] | None = None

    def key(self, j: int) -> Any:
        """The ``j``-th batch's key (the keys cycle)."""
        return self.keys[j % len(self.keys)]

    def make_cpu(self, j: int) -> tuple[float, float]:
        """(seconds, seconds on or waiting for a CPU: :func:`~.common.cpu_wanted_s`) to make
        the ``j``-th batch on this thread, as the loader's fetcher does; the rest is what
        the batch waited for (files, the network, a sleep)."""
        t0, c0 = time.perf_counter(), cpu_wanted_s()
        self.collate(self.fetch(self.key(j)))
        return time.perf_counter() - t0, cpu_wanted_s() - c0

    def make(self, j: int) -> float:
        """Seconds to make the ``j``-th batch (:meth:`make_cpu`)."""
        return self.make_cpu(j)[0]

    def fetch(self, key: Any) -> Any:
        """What the fetcher gives ``collate_fn`` for ``key``."""
        ds = self.dataset
        if not self.auto:
            return ds[key]
        many = getattr(ds, "__getitems__", None)
        return many(key) if callable(many) else [ds[i] for i in key]

    def loader(self, **kwargs: Any) -> Any:
        """A DataLoader that makes these batches, in order, with ``kwargs`` (workers)."""
        from torch.utils.data import DataLoader

        keys = list(self.keys)
        if self.auto:
            return DataLoader(self.dataset, batch_sampler=keys, collate_fn=self.collate,
                              **kwargs)
        return DataLoader(self.dataset, sampler=keys, batch_size=None,
                          collate_fn=self.collate, **kwargs)


def loader_batches(loader: Any, n: int = KEYS) -> LoaderBatches | None:
    """The batches of a map-style loader (module doc), at most ``n`` keys; None for an
    iterable dataset, an empty one, or a loader without a collate_fn or a sampler."""
    ds = getattr(loader, "dataset", None)
    collate = getattr(loader, "collate_fn", None)
    if ds is None or collate is None:
        return None
    try:
        size = len(ds)
    except TypeError:  # an IterableDataset
        return None
    if size < 1:
        return None
    bs = getattr(loader, "batch_size", None)
    if isinstance(bs, int) and bs > 0:
        keys: tuple[Any, ...] = tuple(list(range(at, min(at + bs, size)))
                                      for at in range(0, bs * min(n, max(1, size // bs)), bs))
        return LoaderBatches(ds, collate, keys, True)
    batch_sampler = getattr(loader, "batch_sampler", None)
    source, auto = (batch_sampler, True) if batch_sampler is not None else (
        getattr(loader, "sampler", None), False)
    if source is None:
        return None
    known = torch_keys(source, size, n)
    keys = known if known is not None else _drawn_once(loader, source, size)[:n]
    return LoaderBatches(ds, collate, keys, auto) if keys else None


def forked_batches(loader: Any, n: int = KEYS) -> LoaderBatches | None:
    """:func:`loader_batches` of a loader whose workers are forked (the start method the
    probes' own workers take), with its ``worker_init_fn``; None for any other."""
    ctx = getattr(loader, "multiprocessing_context", None)
    method = ctx.get_start_method() if ctx is not None and hasattr(ctx, "get_start_method") \
        else "fork"
    if not hasattr(os, "fork") or method != "fork":
        return None
    b = loader_batches(loader, n)
    init = getattr(loader, "worker_init_fn", None)
    return dataclasses.replace(b, worker_init=init) if b is not None and callable(init) else b


def torch_keys(source: Any, size: int, n: int) -> tuple[Any, ...] | None:
    """``n`` keys like those torch's own ``source`` gives over a dataset of ``size``: lists
    of its batch size for a ``BatchSampler``, indices for a lone sampler; consecutive for a
    ``SequentialSampler``, random (a generator of the probes' own) for a ``RandomSampler``.
    None for any other sampler."""
    import torch
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    bs, inner = (source.batch_size, source.sampler) if type(source) is BatchSampler \
        else (None, source)
    if type(inner) not in (RandomSampler, SequentialSampler) or (
            bs is not None and (not isinstance(bs, int) or bs < 1)):
        return None
    many = n * (bs or 1)
    if type(inner) is SequentialSampler:
        flat = [i % size for i in range(many)]
    else:
        flat = torch.randint(size, (many,), generator=torch.Generator().manual_seed(0)).tolist()
    if bs is None:
        return tuple(flat)
    return tuple(flat[at:at + bs] for at in range(0, many, bs))


#: a custom sampler's keys, drawn once per loader (its dataset's length and the sampler
#: with them: a loader given a new one draws again)
_DRAWN: weakref.WeakKeyDictionary[Any, tuple[int, int, tuple[Any, ...]]] = \
    weakref.WeakKeyDictionary()


def _drawn_once(loader: Any, source: Any, size: int) -> tuple[Any, ...]:
    try:
        hit = _DRAWN.get(loader)
    except TypeError:  # not weakly referable
        hit = None
    if hit is not None and hit[:2] == (id(source), size):
        return hit[2]
    keys = drawn_keys(source, KEYS)
    with suppress(TypeError):
        _DRAWN[loader] = (id(source), size, keys)
    return keys


def drawn_keys(source: Any, n: int) -> tuple[Any, ...]:
    """The first ``n`` keys of a fresh iterator of ``source`` (a sampler or a batch sampler),
    with every RNG state it may draw from put back (:func:`generators_kept`)."""
    with generators_kept(source), rng_kept():
        return tuple(itertools.islice(iter(source), n))


@contextmanager
def generators_kept(source: Any) -> Iterator[None]:
    """The states of the torch generators ``source`` holds (its ``generator``, and those
    of the samplers it wraps, a few levels down), put back after."""
    found = list(_generators(source, 4))
    states = [g.get_state() for g in found]
    try:
        yield
    finally:
        for g, s in zip(found, states, strict=True):
            g.set_state(s)


def _generators(obj: Any, depth: int) -> Iterator[Any]:
    import torch

    seen: set[int] = set()
    todo = [(obj, depth)]
    while todo:
        o, d = todo.pop()
        if o is None or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Generator):
            yield o
            continue
        if d > 0:
            todo += [(getattr(o, a, None), d - 1) for a in ("generator", "sampler",
                                                             "batch_sampler")]
