"""The one module that touches ``torch.utils.data``'s private DataLoader internals.

The session needs three things torch has no public API for:

- a hook on every batch a loader's iterator hands out: a patch of
  ``_BaseDataLoaderIter.__next__`` that acts only on iterators of the session's loader
  (told apart by the ``_index_sampler`` they were made from), or of a new DataLoader made
  as it was (a loop that makes its loader again each epoch: :func:`made_alike`), and is
  undone on exit;
- the pids of the worker processes (``_workers`` of a multi-process iterator);
- in-process loaders: the ``_dataset_fetcher`` whose ``fetch`` (dataset ``__getitem__`` /
  ``__getitems__`` and the collate function) and ``collate_fn`` are timed by wrapping them
  on that one fetcher object (results pass through unchanged; the originals are put back).

Each is checked before use: :func:`missing` says why the internals cannot be used (a torch
older than :data:`MIN_TORCH`, or a name gone); the session then finds steps from the
optimizer hook (or ``d.step()``) alone and says so in a note. Tested against the installed
torch and with the names taken away (tests/capture/test_loader_shim.py).
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..values import a_type

#: the oldest torch whose DataLoader internals this module was written against
MIN_TORCH = (1, 13)


def _version(v: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else None


def missing(loader: Any = None) -> str | None:
    """Why the DataLoader hooks cannot be used here (None: they can). With ``loader``,
    also checks that it is a torch DataLoader that exposes its index sampler."""
    try:
        import torch
        from torch.utils.data import DataLoader
        from torch.utils.data import dataloader as dlmod
    except ImportError:  # pragma: no cover - the session needs torch anyway
        return "torch is not installed"
    ver = _version(torch.__version__)
    if ver is None or ver < MIN_TORCH:
        return (f"torch {torch.__version__} is older than "
                f"{MIN_TORCH[0]}.{MIN_TORCH[1]}, whose DataLoader internals the hooks read")
    it_cls = getattr(dlmod, "_BaseDataLoaderIter", None)
    if it_cls is None or not callable(getattr(it_cls, "__next__", None)):
        return f"torch {torch.__version__} has no _BaseDataLoaderIter.__next__"
    if not isinstance(getattr(DataLoader, "_index_sampler", None), property):
        return f"torch {torch.__version__}'s DataLoader has no _index_sampler"
    if loader is not None and not isinstance(loader, DataLoader):
        return f"the loader is {a_type(loader)}, not a torch DataLoader"
    return None


#: wrappers known to iterate the one torch DataLoader they hold, by the attribute holding
#: it: Lightning Fabric's ``setup_dataloaders`` gives a ``_FabricDataLoader`` (not a
#: DataLoader) that holds it as ``_dataloader``; accelerate's ``prepare`` gives a
#: ``DataLoaderShard`` whose ``__class__`` claims the DataLoader's class while its type is
#: not one, and whose ``__iter__`` iterates ``base_dataloader``. A wrapper that makes a new
#: DataLoader at each ``iter()`` (DeepSpeed's) is not unwrapped: a hook on an earlier one
#: would time none of its batches
WRAPPED_AS = ("_dataloader", "base_dataloader")


def unwrap(loader: Any) -> tuple[Any, str | None]:
    """The torch DataLoader ``loader`` is or wraps, and the attribute it was found under
    (None: ``loader`` itself, or no DataLoader found, when ``loader`` comes back as given).
    One level, and only the wrappers of :data:`WRAPPED_AS`: their batches are that
    DataLoader's."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:  # pragma: no cover - the session needs torch anyway
        return loader, None
    if loader is None or issubclass(type(loader), DataLoader):
        return loader, None
    for name in WRAPPED_AS:
        try:  # a wrapper's own __getattr__ may raise anything
            inner = getattr(loader, name, None)
        except Exception:
            continue
        if issubclass(type(inner), DataLoader):
            return inner, name
    return loader, None


def made_alike(dl: Any, loader: Any) -> bool:
    """``dl`` is another DataLoader made as ``loader`` was, as a loop that makes its loader
    again each epoch makes it (the hook asks this of DataLoaders made inside the
    session): over the same dataset (the object, or one of its class and length: a
    dataset made again too), with the same batch size, sampler class and worker count. A validation loader differs in its dataset, or in its sampler (no
    shuffle) or batch size."""
    if dl is loader or type(dl) is not type(loader):
        return False
    try:
        if (dl.batch_size != loader.batch_size or dl.num_workers != loader.num_workers
                or type(dl.sampler) is not type(loader.sampler)):
            return False
        a, b = dl.dataset, loader.dataset
        return a is b or (type(a) is type(b) and len(a) == len(b))
    except Exception:  # no len() (an IterableDataset), or a property that raised
        return False


@dataclass
class FetchTimes:
    """Time (s) an in-process loader spent in its fetcher since the last :meth:`take`:
    ``fetch`` is the whole ``fetcher.fetch`` call (dataset reads and the collate function),
    ``collate`` the collate function's share of it."""

    fetch: float = 0.0
    collate: float = 0.0
    batches: int = 0

    def take(self) -> tuple[float, float, int]:
        out = (self.fetch, self.collate, self.batches)
        self.fetch = self.collate = 0.0
        self.batches = 0
        return out


@dataclass
class LoaderHook:
    """The patch of ``_BaseDataLoaderIter.__next__`` for one loader; :meth:`restore` undoes
    it and every fetcher wrap. ``on_next(it)`` runs before each batch is pulled and
    ``on_batch(it, seconds, batch)`` after it came (``seconds``: the time the loop waited).
    ``remade``: the iterators of DataLoaders made inside the session (``made``) as its
    loader was (:func:`made_alike`); their batches count as its."""

    it_cls: Any
    original: Any
    fetch_times: FetchTimes = field(default_factory=FetchTimes)
    # the patch of DataLoader.__iter__ (the loader's class, its original __iter__) and, for
    # each new iterator of the session's loader, when iter() began (perf_counter) and the
    # seconds it took (worker start-up)
    loader_cls: Any = None
    loader_iter: Any = None
    started: weakref.WeakKeyDictionary[Any, tuple[float, float]] = field(
        default_factory=weakref.WeakKeyDictionary)
    remade: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    made: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    loader_init: Any = None  # DataLoader.__init__ as it was
    _wrapped: list[tuple[weakref.ReferenceType[Any], Any]] = field(default_factory=list)
    _seen: weakref.WeakKeyDictionary[Any, bool] = field(
        default_factory=weakref.WeakKeyDictionary)

    def restore(self) -> None:
        if self.it_cls is not None:
            self.it_cls.__next__ = self.original
            self.it_cls = None
        if self.loader_cls is not None:
            self.loader_cls.__iter__ = self.loader_iter
            self.loader_cls.__init__ = self.loader_init
            self.loader_cls = None
        for ref, collate in self._wrapped:
            fetcher = ref()
            if fetcher is None:
                continue
            fetcher.__dict__.pop("fetch", None)  # back to the class's method
            fetcher.collate_fn = collate
        self._wrapped.clear()

    def time_fetcher(self, it: Any) -> bool:
        """Wrap the fetcher of an in-process iterator (once per iterator); False when it has
        none (worker processes fetch in other processes)."""
        known = self._seen.get(it)
        if known is not None:
            return known
        self._seen[it] = False
        fetcher = getattr(it, "_dataset_fetcher", None)
        fetch, collate = getattr(fetcher, "fetch", None), getattr(fetcher, "collate_fn", None)
        if fetcher is None or not callable(fetch) or not callable(collate):
            return False
        times = self.fetch_times

        @functools.wraps(collate)
        def timed_collate(data: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return collate(data)
            finally:
                times.collate += time.perf_counter() - t0

        @functools.wraps(fetch)
        def timed_fetch(index: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fetch(index)
            finally:
                times.fetch += time.perf_counter() - t0
                times.batches += 1

        fetcher.collate_fn = timed_collate
        fetcher.fetch = timed_fetch
        self._wrapped.append((weakref.ref(fetcher), collate))
        self._seen[it] = True
        return True


def install(loader: Any, on_next: Callable[[Any], None],
            on_batch: Callable[[Any, float, Any], None],
            on_other: Callable[[Any], None] | None = None) -> LoaderHook | None:
    """Patch ``__next__`` for the iterators of ``loader`` and of DataLoaders made as it was
    (None when :func:`missing` says the internals are not there). Iterators of other
    loaders pass through, marked (``on_other(it)`` told of each batch)."""
    if missing(loader) is not None:
        return None
    from torch.autograd.profiler import record_function
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from ..metrics.names import OTHER_LOADER

    index_sampler = loader._index_sampler
    orig = _BaseDataLoaderIter.__next__
    hook = LoaderHook(_BaseDataLoaderIter, orig)
    remade = hook.remade

    @functools.wraps(orig)
    def __next__(it: Any) -> Any:
        if getattr(it, "_index_sampler", None) is not index_sampler and it not in remade:
            # another loader's batch (a validation pass): marked, so that the trace's
            # DataLoader wait is the training loader's alone
            if on_other is not None:
                on_other(it)
            with record_function(OTHER_LOADER):
                return orig(it)
        on_next(it)
        t0 = time.perf_counter()
        batch = None
        try:
            batch = orig(it)
            return batch
        finally:  # the loop waited for its batch this long (StopIteration included)
            on_batch(it, time.perf_counter() - t0, batch)

    _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign,assignment]
    # DataLoader.__iter__ (public): how long making an iterator took (with workers: their
    # processes starting), for the session's loader and those made as it was
    from torch.utils.data import DataLoader

    target = weakref.ref(loader)
    orig_iter: Callable[[Any], Any] = DataLoader.__iter__

    @functools.wraps(orig_iter)
    def __iter__(dl: Any) -> Any:
        given = target()
        again = dl in hook.made and given is not None and made_alike(dl, given)
        if dl is not given and not again:
            return orig_iter(dl)
        t0 = time.perf_counter()
        it = orig_iter(dl)
        with contextlib.suppress(TypeError):  # not weak-referenceable: not timed
            hook.started[it] = (t0, time.perf_counter() - t0)
            if again:
                remade.add(it)
        return it

    orig_init: Callable[..., None] = DataLoader.__init__

    @functools.wraps(orig_init)
    def __init__(dl: Any, *args: Any, **kwargs: Any) -> None:  # DataLoaders made from now
        orig_init(dl, *args, **kwargs)
        with contextlib.suppress(TypeError):
            hook.made.add(dl)

    DataLoader.__iter__ = __iter__  # type: ignore[method-assign]
    DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]
    hook.loader_cls, hook.loader_iter, hook.loader_init = DataLoader, orig_iter, orig_init
    return hook


def shut_down(loader: Any, *iterators: Any) -> None:
    """Stop the worker processes of ``iterators`` and of ``loader``'s persistent iterator
    now, rather than when the garbage collector finds them (torch has no public call for
    it). Missing internals: nothing is done, and the workers end with their iterator."""
    its = [*iterators, getattr(loader, "_iterator", None)]
    with contextlib.suppress(AttributeError):
        loader._iterator = None
    for it in its:
        stop = getattr(it, "_shutdown_workers", None) if it is not None else None
        if callable(stop):
            stop()


def worker_pids(it: Any) -> list[int]:
    """pids of a multi-process iterator's worker processes ([] in-process or unknown)."""
    out = []
    for w in getattr(it, "_workers", ()) or ():
        pid = getattr(w, "pid", None)
        if isinstance(pid, int):
            out.append(pid)
    return out


def in_process(it: Any) -> bool:
    """The iterator builds batches in this process (num_workers=0)."""
    return getattr(it, "_dataset_fetcher", None) is not None
