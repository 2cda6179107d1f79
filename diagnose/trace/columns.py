"""The columnar Trace: one rank's events as numpy arrays.

Every analysis reads this object; none touches raw JSON. Columns are built
with C-level iteration (``map`` + ``attrgetter`` into ``np.fromiter``), never a
Python loop per event. Names, pids and tids are interned: each event holds an
int id into a small table of unique strings, so a predicate on names runs once
per unique name and is then broadcast to all events. An event is classified
and interned by one key, (category, name, pid, tid): one look-up per event, the
kind and the three ids then worked out once per distinct key. The chunked
readers hand over ``ts`` as JSON text, read in numpy by ``numbers.floats``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceError
from ..values import as_int
from .decode import FLOW_CATEGORY, ChunkEvent, Decoded, Event
from .numbers import NotNumbers, floats


class Kind(IntEnum):
    """What an event is, independent of the category spelling of its PyTorch version."""

    OTHER = 0
    CPU_OP = 1  # cpu_op (now), Operator (2021)
    ANNOTATION = 2  # user_annotation: ProfilerStep#, DataLoader, record_function
    RUNTIME = 3  # cuda_runtime, cuda_driver, Runtime (2021)
    KERNEL = 4  # kernel, Kernel
    MEMCPY = 5  # gpu_memcpy, Memcpy
    MEMSET = 6  # gpu_memset, Memset
    GPU_ANNOTATION = 7  # gpu_user_annotation
    MEMORY = 8  # '[memory]' instant events
    PYTHON = 9  # python_function
    TRACE = 10  # the profiler's own span


_CATEGORY_KINDS: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "python_function": Kind.PYTHON,
    "trace": Kind.TRACE,
}

DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
HOST_KINDS = (Kind.CPU_OP, Kind.ANNOTATION, Kind.RUNTIME, Kind.PYTHON)

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)
_WORKER_IN_NAME = re.compile(r"(?:^|[^a-z])worker[-_]?(\d+)", re.IGNORECASE)


def kind_in(kind: np.ndarray, kinds: Iterable[int]) -> np.ndarray:
    """``np.isin(kind, kinds)`` for a kind column: one byte comparison per kind, many
    times faster on a large trace than isin's general path."""
    out = np.zeros(len(kind), bool)
    for k in kinds:
        out |= kind == int(k)
    return out


def _kind_of(cat: str, name: str) -> Kind:
    if name == "[memory]":
        return Kind.MEMORY
    return _CATEGORY_KINDS.get(cat.lower(), Kind.OTHER)


AnyEvent = Event | ChunkEvent


def _column(evs: Sequence[AnyEvent], attr: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(attr), evs), dtype=np.float64, count=len(evs))


_TS = attrgetter("ts")


def _TS_OR_NONE(e: Any) -> Any:  # noqa: N802 - a getter, as _TS
    """An event's ts text; None for a flow (decoded field-less)."""
    return getattr(e, "ts", None)


def _times(evs: Sequence[AnyEvent]) -> np.ndarray:
    """The ts column: read from the JSON texts of chunked events (``numbers.floats``)."""
    if len(evs) and isinstance(evs[0], ChunkEvent):
        return floats(list(map(_TS, evs)))
    return _column(evs, "ts")


#: a byte no JSON number has: the ``ts`` of an event the columns do not keep is one
_NOT_NUMBER = re.compile(rb"[^-+.0-9eE ]")


def _numbers_or_none(evs: Sequence[Any], gone_mask: np.ndarray) -> None:
    """NotNumbers where an event the columns leave out (``gone_mask``: flows need not be
    in it, they are decoded without a ``ts``) has a ``ts`` that is not a number (null,
    text): the whole read refuses such events, so a chunked read of the file must give way
    to it (the kept events' texts are checked as they are read)."""
    gone = _take(evs, np.flatnonzero(gone_mask))
    texts = [t for t in map(_TS_OR_NONE, gone) if t]
    if texts and _NOT_NUMBER.search(b" ".join(texts)):
        raise NotNumbers("an event's ts is not a number")


def _take(evs: Sequence[AnyEvent], idx: np.ndarray) -> tuple[AnyEvent, ...]:
    """The events at ``idx`` (C-level gather)."""
    if len(idx) == 0:
        return ()
    if len(idx) == 1:
        return (evs[int(idx[0])],)
    return itemgetter(*idx.tolist())(evs)


def _sparse_values(evs: Sequence[AnyEvent], mask: np.ndarray, attr: str) -> tuple[np.ndarray, np.ndarray]:
    """(indices, values) of the events in ``mask`` that have a finite ``attr``."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return idx, np.zeros(0)
    vals = _column(evs if len(idx) == len(evs) else _take(evs, idx), attr)
    have = np.isfinite(vals)
    return (idx, vals) if have.all() else (idx[have], vals[have])


@dataclass(frozen=True, slots=True)
class SparseColumn:
    """A float column that few events carry (bytes of a copy, a memory event's totals):
    the indices of the events that have a value, sorted, and the values. Indexing reads
    like the dense column, NaN where an event has no value, without storing the NaNs."""

    idx: np.ndarray  # int64, sorted
    val: np.ndarray  # float64
    n: int  # length of the dense column

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return self.idx.nbytes + self.val.nbytes

    def __getitem__(self, sel: Any) -> Any:
        """``column[i]``, ``column[int_indices]`` or ``column[bool_mask]``, as if dense."""
        if np.ndim(sel) == 0:
            return float(self[np.array([sel], dtype=np.int64)][0])
        sel = np.asarray(sel)
        if sel.dtype == bool:
            sel = np.flatnonzero(sel)
        sel = np.where(sel < 0, sel + self.n, sel)
        out = np.full(len(sel), np.nan)
        if len(self.idx) and len(sel):
            pos = np.minimum(np.searchsorted(self.idx, sel), len(self.idx) - 1)
            hit = self.idx[pos] == sel
            out[hit] = self.val[pos[hit]]
        return out

    def dense(self) -> np.ndarray:
        out = np.full(self.n, np.nan)
        out[self.idx] = self.val
        return out


#: Arg columns that only some kinds of event carry: stored sparse (column, event
#: attribute, which kinds carry it). ``correlation`` is on most events of a GPU trace
#: (every launch and every device op) and stays a dense column.
_SPARSE_COLUMNS = (
    ("device", "args.device", "dev"),
    ("nbytes", "args.bytes", "dev"),
    ("mem_allocated", "args.total_allocated", "mem"),
    ("mem_reserved", "args.total_reserved", "mem"),
    ("mem_delta", "args.mem_bytes", "mem"),
    ("mem_device_type", "args.device_type", "mem"),
)
#: events per chunk where a pass over a trace's events makes temporaries: the memory a
#: large trace costs stays a chunk's arrays (a few MB), not the trace's
CHUNK_EVENTS = 1 << 18
#: a time or duration (us) past this is no run's (about 3,000 years; a trace's times are
#: at most microseconds since 1970, ~1.8e15): a corrupt or made-up file
IMPLAUSIBLE_US = 1e17
#: a trace whose timed events have negative durations in this share or more (and at least
#: NEGATIVE_MIN of them) is refused (no profiler writes one: the clock runs one way); fewer
#: are counted as 0 and said
NEGATIVE_SHARE_MAX = 0.5
NEGATIVE_MIN = 10
#: categories that no kind reads, whose events say nothing the analysis misses: Kineto's
#: CUDA synchronisation events (the host's sync calls are read as runtime events)
READ_ELSEWHERE = frozenset({"cuda_sync"})
#: name_mask compares ids when at most this many names match
_FEW_NAMES = 4
_DENSE_KEYS = ("ts", "dur", "kind", "name_id", "pid_id", "tid_id", "correlation")
_CORR_KINDS = [int(Kind.RUNTIME), *map(int, DEVICE_KINDS)]
_DEV_KINDS = [int(k) for k in DEVICE_KINDS]


class _Interner(dict):
    """Value -> dense id, in first-seen order. Lookups of known values stay in C
    (``dict.__getitem__``); Python runs only for a value's first occurrence."""

    def __missing__(self, key: Any) -> int:
        v = self[key] = len(self)
        return v

    def ids(self, evs: Sequence[AnyEvent], attr: str) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, map(attrgetter(attr), evs)), np.int32, len(evs))

    def in_order(self) -> list[Any]:
        """The values, by id."""
        return list(self)


class _Ends:
    """``ts + dur`` by index (see :attr:`Trace.end`)."""

    __slots__ = ("dur", "ts")

    def __init__(self, ts: np.ndarray, dur: np.ndarray) -> None:
        self.ts, self.dur = ts, dur

    def __getitem__(self, i: Any) -> Any:
        return self.ts[i] + self.dur[i]

    def __len__(self) -> int:
        return len(self.ts)


def give_back_freed() -> None:
    """Return freed heap pages to the OS (glibc's malloc_trim). A large trace's columns
    arrive in many part arrays of a few hundred kB, below the size glibc serves with their
    own mappings: freeing them leaves the pages in the heap, so the process's peak memory
    would hold the parts and the joined columns at once. No-op off glibc."""
    trim = _MALLOC_TRIM
    if trim is not None:
        trim(0)


def _malloc_trim() -> Any:
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


_MALLOC_TRIM = _malloc_trim()


#: What an event is interned by: its category, name, pid and tid at once (one pass over
#: the events; the kind and the three ids then come per distinct key, a few thousand)
_KEY = attrgetter("cat", "name", "pid", "tid")


class ColumnBuilder:
    """Builds a Trace from events given in chunks, so a huge file never has to exist as
    Python objects all at once: each chunk is classified, reduced to the events the
    analysis reads, turned into columns, and its structs are freed."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.names, self.pids, self.tids = _Interner(), _Interner(), _Interner()
        self.keys = _Interner()  # (cat, name, pid, tid) -> id
        # per key id: its kind, and its name, pid and tid ids (-1 for an event not kept)
        self.key_kind = np.zeros(0, np.int8)
        self.key_ids = np.zeros((3, 0), np.int32)
        self.key_flow = np.zeros(0, bool)  # per key id: a flow (decoded with no fields)
        self.n_total = 0
        #: categories no kind reads (another accelerator's, say), and how many events have
        #: them (metadata, flows and READ_ELSEWHERE are not counted: nothing is missed)
        self.unread: set[str] = set()
        self.n_unread = 0
        self.key_unread = np.zeros(0, bool)

    def _new_keys(self) -> None:
        """Kind and ids of the keys seen for the first time, in the order first seen (so
        names, pids and tids are numbered in the order the kept events bring them)."""
        new = list(itertools.islice(self.keys, len(self.key_kind), None))
        kinds = [_kind_of(cat, name) for cat, name, _, _ in new]
        ids = [(self.names[name], self.pids[pid], self.tids[tid]) if k != Kind.OTHER
               else (-1, -1, -1) for (_, name, pid, tid), k in zip(new, kinds, strict=True)]
        self.key_kind = np.concatenate((self.key_kind, np.array(kinds, np.int8)))
        self.key_flow = np.concatenate((self.key_flow, np.array(
            [cat == FLOW_CATEGORY for cat, _, _, _ in new], bool)))
        unread = [k == Kind.OTHER and bool(cat) and cat != FLOW_CATEGORY
                  and cat.lower() not in READ_ELSEWHERE
                  for (cat, _, _, _), k in zip(new, kinds, strict=True)]
        self.unread.update(cat for (cat, _, _, _), u in zip(new, unread, strict=True) if u)
        self.key_unread = np.concatenate((self.key_unread, np.array(unread, bool)))
        self.key_ids = np.concatenate((self.key_ids, np.array(ids, np.int32).reshape(-1, 3).T),
                                      axis=1)

    def add(self, evs: Sequence[AnyEvent]) -> None:
        self.n_total += len(evs)
        if not len(evs):
            return
        # 1. classify: the kind from the category ('[memory]' from the name), by key
        key = np.fromiter(map(self.keys.__getitem__, map(_KEY, evs)), np.int32, len(evs))
        if len(self.key_kind) < len(self.keys):
            self._new_keys()
        kind = self.key_kind[key]
        # 2. keep what the analysis reads: metadata, flows and unknown categories go (their
        # names are never interned: a third of a GPU trace's events are flows)
        keep = kind != Kind.OTHER
        if not keep.all():
            if self.unread:
                self.n_unread += int(np.count_nonzero(self.key_unread[key]))
            if isinstance(evs[0], ChunkEvent):
                _numbers_or_none(evs, ~keep & ~self.key_flow[key])
            idx = np.flatnonzero(keep)
            evs, kind, key = _take(evs, idx), kind[idx], key[idx]
        corr = kind_in(kind, _CORR_KINDS)
        masks = {"dev": kind_in(kind, _DEV_KINDS), "mem": kind == Kind.MEMORY}
        name_id, pid_id, tid_id = self.key_ids[:, key]
        part: dict[str, Any] = {
            "ts": _times(evs),
            "dur": _column(evs, "dur"),
            "kind": kind,
            "name_id": name_id,
            "pid_id": pid_id,
            "tid_id": tid_id,
        }
        if corr.all():
            part["correlation"] = _column(evs, "args.correlation")
        else:
            part["correlation"] = np.full(len(evs), np.nan)
            c_idx, c_val = _sparse_values(evs, corr, "args.correlation")
            part["correlation"][c_idx] = c_val
        for col, attr, which in _SPARSE_COLUMNS:
            part[col] = _sparse_values(evs, masks[which], attr)  # (indices in the part, values)
        self.parts.append(part)

    def finish(self, path: str | Path, meta: Decoded) -> Trace:
        cols: dict[str, Any]
        if self.parts:
            offsets = np.cumsum([0] + [len(p["ts"]) for p in self.parts[:-1]])
            # column by column, freeing each part's array as it is copied: the peak holds
            # the parts plus one finished column, not the parts plus every column
            cols = {}
            for k in _DENSE_KEYS:
                cols[k] = np.concatenate([p.pop(k) for p in self.parts])
                give_back_freed()  # the parts' arrays just freed: out of the process's RSS
            n = len(cols["ts"])
            for k, _, _ in _SPARSE_COLUMNS:
                pairs = [p.pop(k) for p in self.parts]
                cols[k] = SparseColumn(
                    np.concatenate([i + off for (i, _), off in zip(pairs, offsets, strict=True)]).astype(np.int64),
                    np.concatenate([v for _, v in pairs]).astype(np.float64), n)
        else:
            cols = {k: np.zeros(0, np.int8 if k == "kind" else (
                np.int32 if k.endswith("_id") else np.float64)) for k in _DENSE_KEYS}
            cols.update({k: SparseColumn(np.zeros(0, np.int64), np.zeros(0), 0)
                         for k, _, _ in _SPARSE_COLUMNS})
        self.parts = []
        give_back_freed()
        # Sanitise: negative/NaN durations count as 0; events without a time carry no weight.
        # A trace whose timed events mostly run backwards is no profiler's; a few are said
        ts, dur, kind = cols["ts"], cols["dur"], cols["kind"]
        negative = int(np.count_nonzero(dur < 0))
        if negative >= max(NEGATIVE_MIN, NEGATIVE_SHARE_MAX * np.count_nonzero(dur)):
            raise TraceError(path, f"{negative:,} of its {np.count_nonzero(dur):,} timed events "
                                   "have negative durations: not a profiler's timestamps")
        dur[~(np.isfinite(dur) & (dur > 0))] = 0.0  # in place: the column is this builder's own
        bad = ~np.isfinite(ts)
        if bad.any():
            cols["kind"] = np.where(bad, Kind.OTHER, kind).astype(np.int8)
        far = np.flatnonzero(~bad & ((np.abs(ts) > IMPLAUSIBLE_US) | (dur > IMPLAUSIBLE_US)))
        if len(far):
            i = int(far[0])
            raise TraceError(path, f"an event's time lies past any run (ts {ts[i]:.3g}, dur "
                                   f"{dur[i]:.3g} us): not a profiler's timestamps")
        return Trace(
            path=str(path),
            names=self.names.in_order(),
            pids=[str(p) for p in self.pids.in_order()],
            tids=[str(t) for t in self.tids.in_order()],
            device_properties=meta.device_properties,
            distributed_info=meta.distributed_info,
            schema_version=meta.schema_version,
            dropped_events=meta.dropped,
            n_events_total=self.n_total,
            unread_categories=tuple(sorted(self.unread)),
            n_unread_events=self.n_unread,
            negative_durations=negative,
            **cols,
        )


@dataclass
class Trace:
    """One rank's events, columnar. Times are float microseconds."""

    path: str
    ts: np.ndarray
    dur: np.ndarray
    kind: np.ndarray  # int8 Kind
    name_id: np.ndarray  # int32 into names
    names: list[str]
    pid_id: np.ndarray
    pids: list[str]
    tid_id: np.ndarray
    tids: list[str]
    correlation: np.ndarray  # float64, NaN where absent
    # args few events carry, stored sparse (index like a dense column, NaN where absent)
    device: SparseColumn  # device ops
    nbytes: SparseColumn  # copies and memsets
    mem_allocated: SparseColumn  # '[memory]' events
    mem_reserved: SparseColumn
    mem_delta: SparseColumn
    mem_device_type: SparseColumn
    device_properties: list[dict] = field(default_factory=list)
    distributed_info: dict | None = None
    schema_version: Any = None
    dropped_events: int = 0
    n_events_total: int = 0  # events in the file, before metadata/flows were set aside
    unread_categories: tuple[str, ...] = ()  # categories of events no metric reads
    n_unread_events: int = 0  # events of those categories
    negative_durations: int = 0  # events whose duration was negative (counted as 0)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_decoded(cls, dec: Decoded, path: str | Path) -> Trace:
        b = ColumnBuilder()
        b.add(dec.events)
        return b.finish(path, dec)

    # ---------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> _Ends:
        """Each event's end, ``end[i]`` = ``ts[i] + dur[i]``, computed for the events asked
        for: an array the size of the trace held for the whole analysis is memory a large
        trace pays for (``end[:]`` gives them all)."""
        return _Ends(self.ts, self.dur)

    def take(self, idx: np.ndarray) -> Trace:
        """The events at ``idx`` (sorted indices) as a trace of their own, in file order:
        the same name, pid and tid tables (so their ids mean the same) and the same facts
        of the file; a sparse column keeps the values of the events taken."""
        idx = np.asarray(idx, np.int64)
        cols: dict[str, Any] = {k: getattr(self, k)[idx] for k in _DENSE_KEYS}
        for k, _, _ in _SPARSE_COLUMNS:
            col: SparseColumn = getattr(self, k)
            pos = np.searchsorted(idx, col.idx)
            hit = pos < len(idx)
            hit[hit] = idx[pos[hit]] == col.idx[hit]
            cols[k] = SparseColumn(pos[hit], col.val[hit], len(idx))
        return replace(self, **cols)

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Indices of events of the given kinds, in file order."""
        return np.flatnonzero(kind_in(self.kind, kinds))

    def name_mask(self, pred: Callable[[str], bool]) -> np.ndarray:
        """Boolean mask over events: ``pred`` evaluated once per unique name. Where it
        holds for a few names, their ids are compared (a pass each, cheaper than the
        table look-up per event)."""
        per_name = np.fromiter(map(pred, self.names), dtype=bool, count=len(self.names))
        hits = np.flatnonzero(per_name)
        if len(hits) > _FEW_NAMES:
            return per_name[self.name_id]
        mask = np.zeros(len(self), bool)
        for i in hits.tolist():
            mask |= self.name_id == i
        return mask

    def names_of(self, idx: np.ndarray) -> list[str]:
        return [self.names[i] for i in self.name_id[idx]]

    @property
    def rank(self) -> int | None:
        info = self.distributed_info or {}
        r = as_int(info.get("rank"))
        if r is not None:
            return r
        name = Path(self.path).name
        m = _RANK_IN_NAME.search(name) or _WORKER_IN_NAME.search(name)
        return int(m.group(1)) if m else None

    @property
    def world_size(self) -> int | None:
        return as_int((self.distributed_info or {}).get("world_size"))

    @property
    def backend(self) -> str | None:
        b = (self.distributed_info or {}).get("backend")
        return b if isinstance(b, str) else None
