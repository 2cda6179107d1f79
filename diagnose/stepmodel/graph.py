"""The step graph: tasks on resources, edges between them, and its replay.

A task runs on one resource (a host thread, a device stream, the DataLoader's producer)
in that resource's program order, and may also wait for other tasks through edges:

* ``START_AFTER_START``: a kernel or copy starts ``lag`` after the host call that
  launched it started (the launch edge, by correlation id);
* ``START_AFTER_END``: a task starts ``lag`` after another one ended (a cross-thread
  hand-over, a batch that a worker has to finish first);
* ``END_AFTER_END``: a task cannot end before another one ended, plus ``lag`` (a host
  call that waits for the device: a synchronisation, a blocking or pageable copy, the
  wait for the DataLoader's next batch).

Replay (:func:`replay`): each task starts when its resource is free (plus ``gap``, the
measured spacing of back-to-back work on a stream), its start edges are met and its
``release`` time (an absolute earliest start) has come; it ends ``dur`` later, or when
its end edges are met, whichever is later. A resource of capacity k (the loader's
workers) runs up to k tasks at once. With the measured durations, latencies and waits
the replay gives the measured times back; a fix is a change of this graph
(transforms.py) replayed the same way.

Collectives join later as tasks of kind COLLECTIVE on a communication stream with an
``END_AFTER_END`` edge from the matching collective of every peer rank (a collective
ends when its slowest peer has arrived): the replay needs nothing new, only the
graphs of the ranks merged into one.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import IntEnum, IntFlag

import numpy as np


class TaskKind(IntEnum):
    HOST = 0  # host work between the calls below (ops, Python): its measured time
    LAUNCH = 1  # a runtime call that queues device work (kernel, copy, memset, graph)
    SYNC = 2  # a host call that waits for the device (synchronize, .item()'s copy)
    COPY_WAIT = 3  # the host blocked in a blocking / pageable copy until the copy ends
    FETCH = 4  # in-process DataLoader __next__: fetch + collate on the main thread
    DL_WAIT = 5  # the wait for the next batch from worker processes
    KERNEL = 6
    MEMCPY = 7
    MEMSET = 8
    PRODUCER = 9  # a batch made by the loader (its cost on a worker)
    COLLECTIVE = 10  # reserved: a collective that waits for its peers (many ranks, later)


class Tag(IntFlag):
    """Where a task runs (device work inherits its launch's tags)."""

    OPTIMIZER = 1  # inside optimizer.step()
    ZERO_GRAD = 2  # inside optimizer.zero_grad()
    PAGEABLE = 4  # a pageable host-to-device copy (its launch and its wait too)
    FORWARD_BACKWARD = 8  # neither of the above nor the DataLoader: the model's own work


class ResKind(IntEnum):
    HOST = 0
    STREAM = 1
    PRODUCER = 2


class EdgeKind(IntEnum):
    START_AFTER_START = 0
    START_AFTER_END = 1
    END_AFTER_END = 2


DEVICE_TASKS = (TaskKind.KERNEL, TaskKind.MEMCPY, TaskKind.MEMSET, TaskKind.COLLECTIVE)


class CycleError(ValueError):
    """The graph's edges and program orders form a cycle: it has no replay."""


@dataclass
class Resource:
    name: str
    kind: ResKind
    capacity: int = 1
    free_at: float = 0.0  # when its work from before the window is done


@dataclass
class Graph:
    """Tasks (columns, one row each) and edges of a window of steps. Times in us."""

    kind: np.ndarray  # int8 TaskKind
    res: np.ndarray  # int32 index into resources
    dur: np.ndarray  # float64: the task's own time (without waiting)
    gap: np.ndarray  # float64: spacing after the resource's previous task
    release: np.ndarray  # float64: earliest start (NaN: none)
    step: np.ndarray  # int32: window step of a main-thread task, -1 for the others
    name_id: np.ndarray  # int32: the trace's name id (-1: made by a transform)
    nbytes: np.ndarray  # float64: bytes of a copy (NaN: unknown)
    start0: np.ndarray  # float64: measured start (NaN: made by a transform)
    tag: np.ndarray  # int32 bit set of Tag: where in the step a task runs
    # float64: the profiler's events that start inside a main-thread host task (its ops at
    # every depth, its runtime call): what the profiler's per-event cost scales with
    events: np.ndarray
    esrc: np.ndarray  # int64
    edst: np.ndarray  # int64
    ekind: np.ndarray  # int8 EdgeKind
    elag: np.ndarray  # float64
    resources: list[Resource]
    names: list[str]  # the trace's name table (selection by name)
    main: int  # the main thread's resource
    t0: float  # window start
    steps_measured: np.ndarray  # measured length of each window step (us)
    step_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # trace step numbers
    # the CPU time (us) each producer task holds where its duration is longer (workers
    # sharing the CPUs with other threads run slower than their work); NaN: its duration
    producer_cpu: float = math.nan
    # the time (us) between batches the workers give once their queue is full; NaN: no
    # producer changed by a transform
    producer_period: float = math.nan
    # the share of the collector's pauses timed inside the in-process loading that its
    # tasks still hold: 0 once a transform made the loading something that trips none (a
    # batched fetch, timed as one indexing call)
    loading_gc: float = 1.0
    # a topological order (replay); kept by changes of times and removed edges, which leave
    # it valid, dropped by anything that adds or removes tasks or adds edges
    order_cache: list[int] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def n_steps(self) -> int:
        return len(self.steps_measured)

    def is_kind(self, *kinds: TaskKind) -> np.ndarray:
        return np.isin(self.kind, [int(k) for k in kinds])

    def name_mask(self, pred: Callable[[str], object]) -> np.ndarray:
        """Tasks whose trace name satisfies ``pred`` (evaluated once per unique name)."""
        per = np.array([bool(pred(n)) for n in self.names], dtype=bool)
        ok = self.name_id >= 0
        out = np.zeros(len(self), bool)
        out[ok] = per[self.name_id[ok]] if len(per) else False
        return out

    def copy(self) -> Graph:
        arrays = {k: getattr(self, k).copy() for k in _ARRAYS}
        return replace(self, resources=[replace(r) for r in self.resources], **arrays)

    # ---- the primitives transforms are made of ----------------------------------
    def scale(self, mask: np.ndarray, factor: float | np.ndarray) -> Graph:
        g = self.copy()
        g.dur[mask] = g.dur[mask] * factor
        return g

    def remove_edges(self, mask: np.ndarray) -> Graph:
        g = self.copy()
        keep = ~mask
        g.esrc, g.edst, g.ekind, g.elag = g.esrc[keep], g.edst[keep], g.ekind[keep], g.elag[keep]
        return g

    def remove_tasks(self, mask: np.ndarray) -> Graph:
        """Drop tasks: their time goes; edges through them are bridged (a task that
        waited for a removed one waits for what that one waited for)."""
        g = self.copy()
        # bridge: dst <- removed <- src  becomes dst <- src (same kinds as the outer edge)
        gone = np.flatnonzero(mask)
        if len(gone):
            into = np.isin(g.edst, gone)
            outof = np.isin(g.esrc, gone)
            extra = []
            for i in np.flatnonzero(outof).tolist():
                r = g.esrc[i]
                for j in np.flatnonzero(into & (g.edst == r)).tolist():
                    extra.append((g.esrc[j], g.edst[i], g.ekind[i], g.elag[i] + g.elag[j]))
            keep = ~(into | outof)
            g.esrc, g.edst, g.ekind, g.elag = g.esrc[keep], g.edst[keep], g.ekind[keep], g.elag[keep]
            if extra:
                s, d, k, lag = (np.array(x) for x in zip(*extra, strict=True))
                g.esrc = np.concatenate([g.esrc, s.astype(np.int64)])
                g.edst = np.concatenate([g.edst, d.astype(np.int64)])
                g.ekind = np.concatenate([g.ekind, k.astype(np.int8)])
                g.elag = np.concatenate([g.elag, lag.astype(np.float64)])
        return g.take(~mask)

    def take(self, keep: np.ndarray) -> Graph:
        """The graph of the tasks in ``keep`` (edges renumbered; edges to dropped tasks go)."""
        idx = np.flatnonzero(keep)
        new_id = np.full(len(self), -1, np.int64)
        new_id[idx] = np.arange(len(idx))
        ok = (new_id[self.esrc] >= 0) & (new_id[self.edst] >= 0)
        arrays = {k: getattr(self, k)[idx] for k in _TASK_ARRAYS}
        return replace(self, **arrays, esrc=new_id[self.esrc[ok]], edst=new_id[self.edst[ok]],
                       ekind=self.ekind[ok], elag=self.elag[ok],
                       resources=[replace(r) for r in self.resources], order_cache=None)

    def add_edges(self, src: np.ndarray, dst: np.ndarray, kind: EdgeKind, lag: float | np.ndarray = 0.0) -> Graph:
        g = self.copy()
        g.order_cache = None
        n = len(src)
        g.esrc = np.concatenate([g.esrc, np.asarray(src, np.int64)])
        g.edst = np.concatenate([g.edst, np.asarray(dst, np.int64)])
        g.ekind = np.concatenate([g.ekind, np.full(n, int(kind), np.int8)])
        g.elag = np.concatenate([g.elag, np.broadcast_to(np.asarray(lag, np.float64), (n,))])
        return g

    def add_tasks(self, **cols: np.ndarray) -> tuple[Graph, np.ndarray]:
        """Append tasks (columns given; the rest default); returns the graph and their ids."""
        n = len(cols["kind"])
        defaults = {"gap": 0.0, "release": np.nan, "step": -1, "name_id": -1, "nbytes": np.nan,
                    "start0": np.nan, "dur": 0.0, "tag": 0, "events": 0.0}
        g = self.copy()
        g.order_cache = None
        for k in _TASK_ARRAYS:
            v = cols.get(k, defaults.get(k))
            arr = getattr(g, k)
            setattr(g, k, np.concatenate([arr, np.broadcast_to(np.asarray(v, arr.dtype), (n,))]))
        return g, np.arange(len(self), len(self) + n)


_TASK_ARRAYS = ("kind", "res", "dur", "gap", "release", "step", "name_id", "nbytes", "start0",
                "tag", "events")
_ARRAYS = (*_TASK_ARRAYS, "esrc", "edst", "ekind", "elag")


@dataclass
class Replay:
    start: np.ndarray
    end: np.ndarray
    step_ms: np.ndarray  # replayed length of each window step (ms)

    @property
    def mean_step_ms(self) -> float:
        return float(np.mean(self.step_ms)) if len(self.step_ms) else 0.0


def _order(g: Graph) -> list[int]:
    """A topological order: program order on each resource (by measured start, then id)
    plus the edges. Tasks made by transforms carry a start key next to their neighbours'."""
    n = len(g)
    key = np.where(np.isnan(g.start0), np.inf, g.start0)
    by_res = np.lexsort((np.arange(n), key, g.res))
    pred_res = np.full(n, -1, np.int64)
    same = g.res[by_res[1:]] == g.res[by_res[:-1]]
    pred_res[by_res[1:][same]] = by_res[:-1][same]
    indeg = np.bincount(g.edst, minlength=n) + (pred_res >= 0)
    succ_res = np.full(n, -1, np.int64)
    succ_res[pred_res[pred_res >= 0]] = np.flatnonzero(pred_res >= 0)
    eorder = np.argsort(g.esrc, kind="stable")
    eptr = np.searchsorted(g.esrc[eorder], np.arange(n + 1))
    edst_sorted = g.edst[eorder].tolist()
    indeg_l = indeg.tolist()
    succ_l = succ_res.tolist()
    eptr_l = eptr.tolist()
    ready = deque(np.flatnonzero(indeg == 0).tolist())
    out: list[int] = []
    while ready:
        i = ready.popleft()
        out.append(i)
        j = succ_l[i]
        if j >= 0:
            indeg_l[j] -= 1
            if indeg_l[j] == 0:
                ready.append(j)
        for k in range(eptr_l[i], eptr_l[i + 1]):
            d = edst_sorted[k]
            indeg_l[d] -= 1
            if indeg_l[d] == 0:
                ready.append(d)
    if len(out) != n:
        raise CycleError(f"the step graph has a cycle ({n - len(out)} of {n} tasks on it "
                         "or after it)")
    return out


def replay(g: Graph) -> Replay:
    """Replay the graph (see the module docstring); one pass in topological order."""
    n = len(g)
    if g.order_cache is None or len(g.order_cache) != n:
        g.order_cache = _order(g)
    ein = np.argsort(g.edst, kind="stable")
    iptr = np.searchsorted(g.edst[ein], np.arange(n + 1)).tolist()
    esrc = g.esrc[ein].tolist()
    ekind = g.ekind[ein].tolist()
    elag = g.elag[ein].tolist()
    res = g.res.tolist()
    dur = g.dur.tolist()
    gap = g.gap.tolist()
    ninf = -math.inf
    rel = np.where(np.isnan(g.release), ninf, g.release).tolist()
    caps = [r.capacity for r in g.resources]
    free = [r.free_at for r in g.resources]  # capacity 1: when the resource is free
    pools = {k: [r.free_at] * r.capacity for k, r in enumerate(g.resources) if r.capacity > 1}
    start = [0.0] * n
    end = [0.0] * n
    ss, se = int(EdgeKind.START_AFTER_START), int(EdgeKind.START_AFTER_END)
    for i in g.order_cache:
        r = res[i]
        multi = caps[r] > 1
        s = (pools[r][0] if multi else free[r]) + gap[i]
        x = rel[i]
        if x > s:
            s = x
        e_min = ninf
        a, b = iptr[i], iptr[i + 1]
        while a < b:
            kd = ekind[a]
            if kd == ss:
                x = start[esrc[a]] + elag[a]
                if x > s:
                    s = x
            elif kd == se:
                x = end[esrc[a]] + elag[a]
                if x > s:
                    s = x
            else:
                x = end[esrc[a]] + elag[a]
                if x > e_min:
                    e_min = x
            a += 1
        e = s + dur[i]
        if e_min > e:
            e = e_min
        start[i] = s
        end[i] = e
        if multi:
            heapq.heapreplace(pools[r], e)
        else:
            free[r] = e
    st, en = np.array(start), np.array(end)
    return Replay(st, en, step_lengths(g, en))


def step_lengths(g: Graph, end: np.ndarray) -> np.ndarray:
    """Each window step's replayed length (ms): from the end of the main thread's task
    before the step (the window start for the first) to the end of the step's last task."""
    main_idx = np.flatnonzero(g.res == g.main)
    key = np.where(np.isnan(g.start0[main_idx]), np.inf, g.start0[main_idx])
    main_idx = main_idx[np.lexsort((main_idx, key))]
    steps = g.step[main_idx]
    ends = end[main_idx]
    prev = np.concatenate([[g.resources[g.main].free_at], ends[:-1]])
    first = np.full(g.n_steps, np.inf)
    last = np.full(g.n_steps, -np.inf)
    inside = steps >= 0
    np.minimum.at(first, steps[inside], prev[inside])
    np.maximum.at(last, steps[inside], ends[inside])
    return (last - first) / 1e3
