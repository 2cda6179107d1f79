"""The columnar Trace: one rank's events as numpy arrays.

Every analysis reads this object; none touches raw JSON. Columns are built
with C-level iteration (``map`` + ``attrgetter`` into ``np.fromiter``), never a
Python loop per event. Names, categories, pids and tids are interned: each
event holds an int id into a small table of unique strings, so a predicate on
names runs once per unique name and is then broadcast to all events.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from .decode import Decoded, Event


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


def _kind_of(cat: str, name: str) -> Kind:
    if name == "[memory]":
        return Kind.MEMORY
    return _CATEGORY_KINDS.get(cat.lower(), Kind.OTHER)


def _intern(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    table: dict[Any, int] = {}
    for v in dict.fromkeys(values):  # unique values, first-seen order (C-level)
        table[v] = len(table)
    ids = np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))
    return ids, list(table)


def _column(evs: Sequence[Event], attr: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(attr), evs), dtype=np.float64, count=len(evs))


def _take(evs: Sequence[Event], idx: np.ndarray) -> tuple[Event, ...]:
    """The events at ``idx`` (C-level gather)."""
    if len(idx) == 0:
        return ()
    if len(idx) == 1:
        return (evs[int(idx[0])],)
    return itemgetter(*idx.tolist())(evs)


def _sparse_column(evs: Sequence[Event], mask: np.ndarray, attr: str) -> np.ndarray:
    """``attr`` for the events in ``mask``, NaN elsewhere."""
    out = np.full(len(evs), np.nan)
    if mask.all():
        return _column(evs, attr)
    idx = np.flatnonzero(mask)
    if len(idx):
        out[idx] = _column(_take(evs, idx), attr)
    return out


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
    device: np.ndarray
    nbytes: np.ndarray
    mem_allocated: np.ndarray
    mem_reserved: np.ndarray
    mem_delta: np.ndarray
    mem_device_type: np.ndarray
    mem_device_id: np.ndarray
    device_properties: list[dict] = field(default_factory=list)
    distributed_info: dict | None = None
    schema_version: Any = None
    dropped_events: int = 0
    n_events_total: int = 0  # events in the file, before metadata/flows were set aside

    # ------------------------------------------------------------------ build
    @classmethod
    def from_decoded(cls, dec: Decoded, path: str | Path) -> Trace:
        evs: list[Event] | tuple[Event, ...] = dec.events
        # 1. classify: kind from the (interned) category, '[memory]' from the name
        cat_id, cat_table = _intern(list(map(attrgetter("cat"), evs)))
        cat_kind = np.array([int(_kind_of(c, "")) for c in cat_table], dtype=np.int8)
        kind = cat_kind[cat_id] if len(evs) else np.zeros(0, np.int8)
        name_id, names = _intern(list(map(attrgetter("name"), evs)))
        if "[memory]" in names:
            kind[name_id == names.index("[memory]")] = Kind.MEMORY
        del cat_id
        # 2. keep what the analysis reads: metadata, flows and unknown categories go
        keep = kind != Kind.OTHER
        if not keep.all():
            evs = _take(evs, np.flatnonzero(keep))
            kind, name_id = kind[keep], name_id[keep]
        ts = _column(evs, "ts")
        dur = _column(evs, "dur")
        pid_id, pid_raw = _intern(list(map(attrgetter("pid"), evs)))
        tid_id, tid_raw = _intern(list(map(attrgetter("tid"), evs)))
        # 3. args, read only on the event kinds that carry them
        corr_kinds = np.isin(kind, [int(Kind.RUNTIME), *map(int, DEVICE_KINDS)])
        dev_kinds = np.isin(kind, [int(k) for k in DEVICE_KINDS])
        mem_kind = kind == Kind.MEMORY
        cols = {
            "correlation": _sparse_column(evs, corr_kinds, "args.correlation"),
            "device": _sparse_column(evs, dev_kinds, "args.device"),
            "nbytes": _sparse_column(evs, dev_kinds, "args.bytes"),
            "mem_allocated": _sparse_column(evs, mem_kind, "args.total_allocated"),
            "mem_reserved": _sparse_column(evs, mem_kind, "args.total_reserved"),
            "mem_delta": _sparse_column(evs, mem_kind, "args.mem_bytes"),
            "mem_device_type": _sparse_column(evs, mem_kind, "args.device_type"),
            "mem_device_id": _sparse_column(evs, mem_kind, "args.device_id"),
        }
        del evs
        # Sanitise: negative/NaN durations count as 0; events without a time carry no weight.
        bad = ~np.isfinite(ts)
        dur = np.where(np.isfinite(dur) & (dur > 0), dur, 0.0)
        if bad.any():
            kind = np.where(bad, Kind.OTHER, kind).astype(np.int8)
        return cls(
            path=str(path),
            ts=ts,
            dur=dur,
            kind=kind.astype(np.int8),
            name_id=name_id,
            names=names,
            pid_id=pid_id,
            pids=[str(p) for p in pid_raw],
            tid_id=tid_id,
            tids=[str(t) for t in tid_raw],
            device_properties=dec.device_properties,
            distributed_info=dec.distributed_info,
            schema_version=dec.schema_version,
            dropped_events=dec.dropped,
            n_events_total=len(dec.events),
            **cols,
        )

    # ---------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.ts)

    @cached_property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Indices of events of the given kinds, in file order."""
        return np.flatnonzero(np.isin(self.kind, [int(k) for k in kinds]))

    def name_mask(self, pred: Callable[[str], bool]) -> np.ndarray:
        """Boolean mask over events: ``pred`` evaluated once per unique name."""
        per_name = np.fromiter(map(pred, self.names), dtype=bool, count=len(self.names))
        return per_name[self.name_id] if len(self.names) else np.zeros(len(self), bool)

    def names_of(self, idx: np.ndarray) -> list[str]:
        return [self.names[i] for i in self.name_id[idx]]

    @property
    def rank(self) -> int | None:
        info = self.distributed_info or {}
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool):
            return r
        name = Path(self.path).name
        m = _RANK_IN_NAME.search(name) or _WORKER_IN_NAME.search(name)
        return int(m.group(1)) if m else None

    @property
    def world_size(self) -> int | None:
        w = (self.distributed_info or {}).get("world_size")
        return w if isinstance(w, int) and not isinstance(w, bool) else None

    @property
    def backend(self) -> str | None:
        b = (self.distributed_info or {}).get("backend")
        return b if isinstance(b, str) else None
