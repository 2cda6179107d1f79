"""Build the step graph of a few representative profiled steps from a columnar Trace.

The same facts the metrics read (metrics/core.py): ``ProfilerStep#N`` spans on the
main process, launches matched to their kernels and copies by correlation id, the
synchronising runtime calls, pageable copies, DataLoader ``__next__`` spans. Host
threads are cut into tasks at the calls that matter to the device (launches, syncs,
blocking copies) and the DataLoader spans; the time between those calls is host work
of its measured length. A trace with no step, or whose device work no recorded call
launched (device activity alone), gets the reason instead of a graph. Everything is
vectorised; Python loops run once per step, thread or stream, never per event.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..metrics import intervals as iv
from ..metrics.breakdown import other_loaders
from ..trace import DEVICE_KINDS, Kind, Trace
from .calibration import (
    BLOCKING_COPY_SHARE,
    CLOCK_EPS_US,
    FULL_QUEUE_SHARE,
    LATE_US,
    LAUNCH_LATENCY_US,
    READY_WAIT_SHARE,
    READY_WAIT_US,
    SYNC_END_US,
    SYNC_LONG_RATIO,
    SYNC_LONG_US,
)
from .graph import DEVICE_TASKS, EdgeKind, Graph, ResKind, Resource, Tag, TaskKind
from .window import WINDOW_STEPS, around, pick_window, step_spans

EPS = CLOCK_EPS_US

_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#")
_SYNC = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
})
_OPT_STEP = re.compile(r"^Optimizer\.step#")
_OPT_ZERO = re.compile(r"^Optimizer\.zero_grad#")
_MEMCPY_API = re.compile(r"^(cuda|hip)Memcpy|^cuMemcpy")
_DEV_KIND = {int(Kind.KERNEL): TaskKind.KERNEL, int(Kind.MEMCPY): TaskKind.MEMCPY,
             int(Kind.MEMSET): TaskKind.MEMSET}


def _member(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.isin(x, ids)`` by a binary search in the sorted ``ids``: no temporaries the
    size of both arrays together (isin sorts their concatenation)."""
    if not len(ids) or not len(x):
        return np.zeros(len(x), bool)
    ids = np.sort(ids)
    pos = np.minimum(np.searchsorted(ids, x), len(ids) - 1)
    return ids[pos] == x


def _launcher(call_corr: np.ndarray, call_ts: np.ndarray, dev_corr: np.ndarray,
              dev_ts: np.ndarray) -> np.ndarray:
    """For each device op, the call (index into the calls) that launched it, -1 for none.

    A launch and its device op share a correlation id. Where several calls carry the
    same id (a merged or re-written trace, ids that wrap), the op belongs to the latest of
    them that started before it, else to the earliest: a launch never comes after the
    work it queued, so the match adds no edge back in time (which could close a cycle).
    """
    out = np.full(len(dev_corr), -1, np.int64)
    ci = np.flatnonzero(~np.isnan(call_corr))
    if not len(ci) or not len(dev_corr):
        return out
    ids, grp = np.unique(call_corr[ci], return_inverse=True)
    gd = np.minimum(np.searchsorted(ids, dev_corr), len(ids) - 1)
    hit = ids[gd] == dev_corr  # NaN never equals
    # exact integer keys (group, rank of the start among calls and ops): no float sums,
    # which lose the order of times near 2**53 us
    times = np.concatenate([call_ts[ci], dev_ts + EPS])
    rank = np.empty(len(times), np.int64)
    rank[np.argsort(times, kind="stable")] = np.arange(len(times))
    m = len(times) + 1
    kc = grp.astype(np.int64) * m + rank[: len(ci)]
    o = np.argsort(kc, kind="stable")
    kc = kc[o]
    kd = gd.astype(np.int64) * m + rank[len(ci):]
    pos = np.searchsorted(kc, kd, side="right") - 1
    before = hit & (pos >= 0) & (kc[np.maximum(pos, 0)] // m == gd)
    first = np.searchsorted(kc, gd.astype(np.int64) * m)  # the group's earliest call
    out[before] = ci[o[pos[before]]]
    after = hit & ~before
    out[after] = ci[o[first[after]]]
    return out


class _Rows:
    """Columns of tasks and edges, appended a block at a time."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in (
            "kind", "res", "dur", "gap", "release", "step", "name_id", "nbytes", "start0")}
        self.edges: dict[str, list[np.ndarray]] = {k: [] for k in ("esrc", "edst", "ekind", "elag")}
        self.n = 0

    def tasks(self, kind: np.ndarray | int, res: np.ndarray | int, dur: np.ndarray, start0: np.ndarray,
              **kw: np.ndarray | float | int) -> np.ndarray:
        m = len(dur)
        vals = {"kind": kind, "res": res, "dur": dur, "start0": start0, "gap": 0.0,
                "release": np.nan, "step": -1, "name_id": -1, "nbytes": np.nan, **kw}
        dtypes = {"kind": np.int8, "res": np.int32, "step": np.int32, "name_id": np.int32}
        for k, v in vals.items():
            self.cols[k].append(np.broadcast_to(np.asarray(v, dtypes.get(k, np.float64)), (m,)).copy())
        ids = np.arange(self.n, self.n + m)
        self.n += m
        return ids

    def edge(self, src: np.ndarray, dst: np.ndarray, kind: EdgeKind, lag: np.ndarray | float) -> None:
        m = len(src)
        self.edges["esrc"].append(np.asarray(src, np.int64))
        self.edges["edst"].append(np.asarray(dst, np.int64))
        self.edges["ekind"].append(np.full(m, int(kind), np.int8))
        self.edges["elag"].append(np.broadcast_to(np.asarray(lag, np.float64), (m,)).copy())

    def cat(self, k: str, src: dict[str, list[np.ndarray]], dtype: type) -> np.ndarray:
        return np.concatenate(src[k]).astype(dtype) if src[k] else np.zeros(0, dtype)


def build_graph(t: Trace, max_steps: int | None = None, window: int = WINDOW_STEPS) -> Graph | str:
    """The graph of up to ``window`` steps around the median step, or why there is none."""
    found = step_spans(t, max_steps)
    if isinstance(found, str):
        return found
    steps, main_pid, main_tid = found
    a, b = pick_window(t.dur[steps], window)
    lo, hi = t.ts[steps[a:b]], t.end[steps[a:b]]
    w0, w1 = float(lo[0]), float(hi[-1])
    return _Builder(around(t, w0, w1), main_pid, main_tid, lo, hi, w0, w1, np.arange(a, b)).build()


class _Builder:
    def __init__(self, t: Trace, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray,
                 w0: float, w1: float, step_index: np.ndarray) -> None:
        self.t, self.pid, self.tid = t, pid, tid
        self.lo, self.hi, self.w0, self.w1 = lo, hi, w0, w1
        self.step_index = step_index
        self.rows = _Rows()
        self.resources: list[Resource] = []
        self.main = 0  # the main thread's resource (created first)

    def _res(self, name: str, kind: ResKind, free_at: float, capacity: int = 1) -> int:
        self.resources.append(Resource(name, kind, capacity, free_at))
        return len(self.resources) - 1

    def _step_of(self, x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.lo, x, side="right") - 1
        ok = (i >= 0) & (x <= self.hi[np.maximum(i, 0)])
        return np.where(ok, i, -1)

    # ------------------------------------------------------------------ specials
    def _specials(self) -> dict[str, np.ndarray]:
        """Top-level host calls that matter to the device, and the DataLoader spans."""
        t = self.t
        in_win = (t.pid_id == self.pid) & (t.ts >= self.w0 - EPS) & (t.end[:] <= self.w1 + EPS)
        rt = in_win & (t.kind == Kind.RUNTIME)
        dev = np.isin(t.kind, [int(k) for k in DEVICE_KINDS]) & np.isfinite(t.ts)
        dev_corr = t.correlation[dev]
        del dev
        dev_corr = np.unique(dev_corr[~np.isnan(dev_corr)])
        # the window's runtime calls only: a membership test over every event of a large
        # trace would hold several arrays its size at once
        rt_idx = np.flatnonzero(rt)
        launches = np.zeros(len(t), bool)
        launches[rt_idx] = _member(t.correlation[rt_idx], dev_corr)
        del dev_corr
        syncs = rt & t.name_mask(lambda n: n in _SYNC)
        dl = in_win & t.name_mask(lambda n: bool(_DATALOADER.match(n))) & (t.tid_id == self.tid) & (
            np.isin(t.kind, [int(Kind.ANNOTATION), int(Kind.CPU_OP)]))
        dl &= ~other_loaders(t, dl, in_win)  # a validation loader's batches: not the input
        cand = np.flatnonzero(launches | syncs | dl)
        # outermost only: a driver call inside a runtime call, a launch inside a DataLoader span
        tids = t.tid_id[cand]
        order = np.lexsort((-t.dur[cand], t.ts[cand], tids))
        cand, tids = cand[order], tids[order]
        big = (self.w1 - self.w0) + 1e6
        trank = np.unique(tids, return_inverse=True)[1].astype(np.float64)
        s_shift = t.ts[cand] - self.w0 + trank * big
        e_shift = t.end[cand] - self.w0 + trank * big
        run = np.maximum.accumulate(e_shift) if len(cand) else e_shift
        nested = np.zeros(len(cand), bool)
        nested[1:] = s_shift[1:] < run[:-1] - 1e-3
        top = cand[~nested]
        # each nested call belongs to the outermost call around it (for its device work)
        top_s = s_shift[~nested]
        owner = np.searchsorted(top_s, s_shift, side="right") - 1
        return {"top": top, "all": cand, "owner_of_all": owner, "dl": dl, "syncs": syncs,
                "launches": launches}

    # --------------------------------------------------------------------- build
    def build(self) -> Graph | str:
        t, rows = self.t, self.rows
        sp = self._specials()
        top = sp["top"]
        is_dl = sp["dl"][top]
        is_sync = sp["syncs"][top] & ~is_dl
        memcpy_api = t.name_mask(lambda n: bool(_MEMCPY_API.match(n)))[top]

        # device ops: launched by a call in the window, or running in it
        dev = np.isin(t.kind, [int(k) for k in DEVICE_KINDS]) & np.isfinite(t.ts)
        all_corr = t.correlation[sp["all"]]
        # the membership test on device events only (a large trace's every event would
        # hold several arrays its size at once)
        dev_idx = np.flatnonzero(dev)
        launched = np.zeros(len(t), bool)
        launched[dev_idx] = _member(t.correlation[dev_idx], all_corr[~np.isnan(all_corr)])
        del dev_idx
        running = dev & (t.ts >= self.w0) & (t.ts < self.w1)
        # and on each stream what ran ahead of the window's own work: work launched before
        # the window, still queued when it ended (a host that ran ahead of its GPU)
        key = t.pid_id.astype(np.int64) * (len(t.tids) + 1) + t.tid_id
        li, after = np.flatnonzero(launched), np.flatnonzero(dev & (t.ts >= self.w1))
        for k in np.unique(key[li]).tolist():  # once per stream: its own ops only
            running[after[(key[after] == k) & (t.ts[after] < t.ts[li[key[li] == k]].max())]] = True
        d_idx = np.flatnonzero(launched | running)
        # the outermost call that launched each device op (NaN correlation: none)
        call_of = np.full(len(d_idx), -1, np.int64)  # index into top
        # a synchronising call launches nothing (a correlation id it shares with device
        # work is another call's): taken for a launch, it would wait for its own work
        ac = np.where(sp["syncs"][sp["all"]], np.nan, t.correlation[sp["all"]])
        src = _launcher(ac, t.ts[sp["all"]], t.correlation[d_idx], t.ts[d_idx])
        call_of[src >= 0] = sp["owner_of_all"][src[src >= 0]]
        if len(d_idx) and not (call_of >= 0).any():
            return ("no device op in the steps is tied to the host call that launched it: "
                    "the trace records no runtime calls, or no correlation ids, and a replay "
                    "could only repeat the measured times")

        # blocking copies: the call held the host until the copy (mostly) ran
        blocking = np.zeros(len(top), bool)
        copy_of = np.full(len(top), -1, np.int64)  # index into d_idx
        if len(d_idx):
            cop = (call_of >= 0) & (t.kind[d_idx] == Kind.MEMCPY)
            ci = np.flatnonzero(cop)
            copy_of[call_of[ci]] = ci
            has = copy_of >= 0
            dd = d_idx[np.maximum(copy_of, 0)]
            blocking = has & memcpy_api & (t.end[top] >= t.ts[dd] + BLOCKING_COPY_SHARE * t.dur[dd]) & ~is_dl

        # ---- host threads: the main one first, then the others of the main process
        tids = t.tid_id[top]
        thread_ids = [self.tid] + sorted(set(tids.tolist()) - {self.tid})
        call_task = np.full(len(top), -1, np.int64)  # task that launches (for SS edges)
        wait_task = np.full(len(top), -1, np.int64)  # task that waits (for EE edges)
        main_tasks = None
        for th in thread_ids:  # once per thread
            sel = np.flatnonzero(tids == th)
            r = self._res(f"host thread {t.tids[th]}", ResKind.HOST,
                          self.w0 if th == self.tid else -np.inf)
            if th == self.tid:
                main_tasks = self._main_thread(r, top, sel, is_dl, is_sync, blocking, call_task, wait_task)
            else:
                self._other_thread(r, top, sel, is_sync, blocking, call_task, wait_task, main_tasks)
        # ---- device streams
        dev_ids = self._device(d_idx, call_of, call_task)
        # ---- waits: syncs wait for the device op that ended last before they returned
        self._sync_edges(top, is_sync, wait_task, d_idx, dev_ids)
        self._full_queue_edges(top, ~(is_sync | is_dl | blocking), call_task, d_idx, dev_ids, call_of)
        bl = np.flatnonzero(blocking)
        if len(bl):
            c = dev_ids[copy_of[bl]]
            lag = t.end[top[bl]] - t.end[d_idx[copy_of[bl]]]
            rows.edge(c, wait_task[bl], EdgeKind.END_AFTER_END, lag)
            # the wait's own time: what the call took after the copy ended (at least 0)
            self._set("dur", wait_task[bl], np.maximum(lag, 0.0))
        return self._graph()

    def _main_thread(self, r: int, top: np.ndarray, sel: np.ndarray, is_dl: np.ndarray,
                     is_sync: np.ndarray, blocking: np.ndarray, call_task: np.ndarray,
                     wait_task: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t, rows = self.t, self.rows
        s, e = t.ts[top[sel]], t.end[top[sel]]
        # host work: the time between the calls, cut at step boundaries
        pts = np.unique(np.concatenate([[self.w0, self.w1], s, e, self.lo, self.hi, self._cuts()]))
        pts = pts[(pts >= self.w0) & (pts <= self.w1)]
        gs, ge = pts[:-1], pts[1:]
        gm = (gs + ge) / 2
        k = np.searchsorted(s, gm, side="right") - 1
        inside = (k >= 0) & (gm < e[np.maximum(k, 0)]) if len(s) else np.zeros(len(gm), bool)
        gs, ge = gs[~inside], ge[~inside]
        host_ids = rows.tasks(TaskKind.HOST, r, ge - gs, gs, step=self._step_of((gs + ge) / 2))
        self._calls(r, top, sel, is_dl, is_sync, blocking, call_task, wait_task, main=True)
        # main tasks sorted by start, for the other threads to find their host
        ids = np.concatenate([host_ids, call_task[sel], wait_task[sel]])
        ids = np.unique(ids[ids >= 0])
        starts = np.concatenate(rows.cols["start0"])[ids]
        o = np.argsort(starts, kind="stable")
        return ids[o], starts[o], np.isin(ids[o], host_ids)

    def _cuts(self) -> np.ndarray:
        """Bounds of the optimizer's spans on the main thread: host work is cut there, so
        that a task is inside optimizer.step() / zero_grad() or outside it, not both."""
        t = self.t
        m = ((t.pid_id == self.pid) & (t.tid_id == self.tid) & (t.ts < self.w1) & (t.end[:] > self.w0)
             & t.name_mask(lambda n: bool(_OPT_STEP.match(n) or _OPT_ZERO.match(n))))
        return np.concatenate([t.ts[m], t.end[m]])

    def _calls(self, r: int, top: np.ndarray, sel: np.ndarray, is_dl: np.ndarray, is_sync: np.ndarray,
               blocking: np.ndarray, call_task: np.ndarray, wait_task: np.ndarray, main: bool) -> None:
        t, rows = self.t, self.rows
        ev = top[sel]
        s, d = t.ts[ev], t.dur[ev]
        step = self._step_of(s + d / 2) if main else -1
        kind = np.full(len(sel), int(TaskKind.LAUNCH), np.int8)
        kind[is_sync[sel]] = TaskKind.SYNC
        dl = is_dl[sel]
        multi = np.array(["_MultiProcessing" in n for n in t.names_of(ev)], bool) & dl
        kind[dl & ~multi] = TaskKind.FETCH
        kind[multi] = TaskKind.DL_WAIT
        bl = blocking[sel]
        kind[bl] = TaskKind.LAUNCH  # the launch part; the wait part follows
        ids = rows.tasks(kind, r, np.where(bl, 0.0, d), s, step=step, name_id=t.name_id[ev],
                         nbytes=t.nbytes[ev])
        call_task[sel] = ids
        wait_task[sel] = ids
        if bl.any():
            b = np.flatnonzero(bl)
            wids = rows.tasks(TaskKind.COPY_WAIT, r, np.zeros(len(b)), s[b] + 1e-6,
                              step=step if isinstance(step, int) else step[b],
                              name_id=t.name_id[ev[b]])
            wait_task[sel[b]] = wids
        if multi.any():
            self._producer(ids[multi], s[multi], d[multi])

    def _producer(self, waits: np.ndarray, s: np.ndarray, d: np.ndarray) -> None:
        """Batches from worker processes: ready when the measured wait ended, less what
        receiving a ready batch costs (the shortest wait of the window)."""
        base = float(d.min())
        r = self._res("DataLoader workers", ResKind.PRODUCER, -np.inf, capacity=1)
        rel = s + d - base
        # a wait no longer than the shortest one: the batch was ready before it was asked
        # for (when, the trace cannot say): it does not hold a host that comes earlier
        rel = np.where(d <= base + max(READY_WAIT_US, READY_WAIT_SHARE * base), np.nan, rel)
        p = self.rows.tasks(TaskKind.PRODUCER, r, np.zeros(len(s)), np.where(np.isnan(rel), s, rel),
                            release=rel)
        dur = np.concatenate(self.rows.cols["dur"])
        self._set("dur", waits, np.full(len(waits), base))
        del dur
        self.rows.edge(p, waits, EdgeKind.END_AFTER_END, base)

    def _set(self, col: str, ids: np.ndarray, vals: np.ndarray) -> None:
        """Overwrite column values of tasks already added (blocks are few)."""
        blocks = self.rows.cols[col]
        off = 0
        for blk in blocks:
            m = (ids >= off) & (ids < off + len(blk))
            if m.any():
                blk[ids[m] - off] = vals[m]
            off += len(blk)

    def _other_thread(self, r: int, top: np.ndarray, sel: np.ndarray, is_sync: np.ndarray,
                      blocking: np.ndarray, call_task: np.ndarray, wait_task: np.ndarray,
                      main: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        """A second host thread (autograd's device thread, a pin-memory thread): its calls
        in program order, grouped into bursts by the main-thread task they fall in; a burst
        inside main-thread host work starts from it and that work waits for the burst."""
        t, rows = self.t, self.rows
        no_dl = np.zeros(len(top), bool)
        self._calls(r, top, sel, no_dl, is_sync, blocking, call_task, wait_task, main=False)
        ev = top[sel]
        s, e = t.ts[ev], t.end[ev]
        assert main is not None
        m_ids, m_start, m_host = main
        g = np.searchsorted(m_start, (s + e) / 2, side="right") - 1
        g = np.maximum(g, 0)
        # host work between calls of one burst
        same = g[1:] == g[:-1]
        gs, ge = e[:-1][same], s[1:][same]
        rows.tasks(TaskKind.HOST, r, np.maximum(ge - gs, 0.0), gs + 1e-6)
        first = np.ones(len(sel), bool)
        first[1:] = ~same
        last = np.ones(len(sel), bool)
        last[:-1] = ~same
        starts0 = np.concatenate(rows.cols["start0"])
        m_end = starts0[m_ids] + np.concatenate(rows.cols["dur"])[m_ids]
        host_ok = m_host[g]
        fi, li = np.flatnonzero(first), np.flatnonzero(last)
        # bursts inside main-thread host work: hand-over and wait
        hf = fi[host_ok[fi]]
        hl = li[host_ok[li]]
        mt_f, mt_l = m_ids[g[hf]], m_ids[g[hl]]
        rows.edge(mt_f, call_task[sel[hf]], EdgeKind.START_AFTER_START, s[hf] - starts0[mt_f])
        # the main thread joins the burst (a task of its own, so that no task both starts
        # a burst and waits for it)
        steps = np.concatenate(rows.cols["step"])[mt_l]
        join = rows.tasks(TaskKind.HOST, self.main, np.zeros(len(hl)), starts0[mt_l] + 1e-6, step=steps)
        rows.edge(wait_task[sel[hl]], join, EdgeKind.END_AFTER_END, m_end[g[hl]] - e[hl])
        # the main-thread work that waits for a burst does its own part before the burst
        self._set("dur", mt_f, s[hf] - starts0[mt_f])
        # bursts elsewhere keep their measured start
        nf = fi[~host_ok[fi]]
        self._set("release", call_task[sel[nf]], s[nf])

    def _device(self, d_idx: np.ndarray, call_of: np.ndarray, call_task: np.ndarray) -> np.ndarray:
        t, rows = self.t, self.rows
        if not len(d_idx):
            return np.zeros(0, np.int64)
        dev = np.isin(t.kind, [int(k) for k in DEVICE_KINDS]) & np.isfinite(t.ts)
        key = t.pid_id.astype(np.int64) * (len(t.tids) + 1) + t.tid_id
        ids = np.empty(len(d_idx), np.int64)
        # the task of the call that launched each op (-1: none in the window), and its start
        ct = np.full(len(d_idx), -1, np.int64)
        ct[call_of >= 0] = call_task[call_of[call_of >= 0]]
        launch_start = np.full(len(d_idx), np.nan)
        launch_start[ct >= 0] = np.concatenate(rows.cols["start0"])[ct[ct >= 0]]
        s, e = t.ts[d_idx], t.end[d_idx]
        lat = s - launch_start
        dkey = key[d_idx]
        prev_end = np.full(len(d_idx), np.nan)
        before = dev & (t.ts < self.w0)
        for k in np.unique(dkey).tolist():  # once per stream
            m = np.flatnonzero(dkey == k)
            m = m[np.argsort(s[m], kind="stable")]
            carried = before & (key == k) & ~np.isin(np.arange(len(t)), d_idx[m])
            free = float(t.end[carried].max()) if carried.any() else -np.inf
            pe = np.concatenate([[free], np.maximum.accumulate(e[m])[:-1]])
            prev_end[m] = pe
            self._res(f"stream {t.tids[t.tid_id[d_idx[m[0]]]]}", ResKind.STREAM, free)
            ids[m] = -1 - (len(self.resources) - 1)  # resource, resolved below
        res = -1 - ids
        gap = s - prev_end
        dk = t.kind[d_idx]
        # typical launch latency (on an idle stream) and spacing (behind queued work), per
        # kind of device op: the replay uses these, not each op's own, so that it has to
        # explain every wait by a dependency
        lat_typ = np.full(len(d_idx), LAUNCH_LATENCY_US)
        gap_typ = np.full(len(d_idx), 1.0)
        for k in np.unique(dk).tolist():  # once per kind of device op
            m = dk == k
            # launched onto a stream that had run dry: its start shows the launch latency
            idle = m & np.isfinite(lat) & (gap > 1.0) & (launch_start >= prev_end)
            if idle.any():
                lat_typ[m] = float(np.median(lat[idle]))
            q = m & np.isfinite(lat) & (launch_start + lat_typ < prev_end)
            if q.any():
                gap_typ[m] = float(np.median(np.clip(gap[q], 0, None)))
        lag = np.minimum(lat, lat_typ)
        expected = np.fmax(launch_start + lag, prev_end + gap_typ)
        late = np.isfinite(lat) & (s - expected > LATE_US)
        # a late op waits for work on another stream (an event wait): the op of another
        # stream that ended last before it started, if that explains the wait
        src = np.full(len(d_idx), -1, np.int64)
        for k in np.unique(dkey[late]).tolist():  # once per stream with late ops
            other = np.flatnonzero(dkey != k)
            if not len(other):
                continue
            oe = e[other]
            o = np.argsort(oe, kind="stable")
            mine = np.flatnonzero(late & (dkey == k))
            pos = np.searchsorted(oe[o], s[mine] + EPS, side="right") - 1
            ok = pos >= 0
            cand = other[o[np.maximum(pos, 0)]]
            ok &= e[cand] > expected[mine] - EPS
            src[mine[ok]] = cand[ok]
        unexplained = late & (src < 0)
        # kept as measured: a queued op its spacing behind its stream (a latency kept would
        # hold it as far behind its launch as the host once ran ahead, whatever the change);
        queued = launch_start + lat_typ <= prev_end  # one on a stream run dry its latency
        lag = np.where(unexplained & ~queued, lat, lag)
        spacing = np.where(unexplained & queued, np.fmax(gap, gap_typ), gap_typ)
        kinds = np.array([_DEV_KIND[int(k)] for k in dk], np.int8)
        no_launch = ct < 0
        # work launched before the window runs in stream order (queued behind the stream);
        # work the trace cannot place keeps its measured start
        queued_in = no_launch & (s - prev_end <= gap_typ + LATE_US)
        out = rows.tasks(kinds, res, t.dur[d_idx], s, gap=spacing,
                         release=np.where(no_launch & ~queued_in, s, np.nan), name_id=t.name_id[d_idx],
                         nbytes=t.nbytes[d_idx])
        hl = ~no_launch
        rows.edge(ct[hl], out[hl], EdgeKind.START_AFTER_START, lag[hl])
        xs = np.flatnonzero(src >= 0)
        rows.edge(out[src[xs]], out[xs], EdgeKind.START_AFTER_END, s[xs] - e[src[xs]])
        self.unexplained = int(unexplained.sum())
        return out

    def _full_queue_edges(self, top: np.ndarray, launch: np.ndarray, call_task: np.ndarray,
                          d_idx: np.ndarray, dev_ids: np.ndarray, call_of: np.ndarray) -> None:
        """A launch held far longer than launches take, returning just as a device op ends,
        waited for that op: the device's queue was full (the host ran a step or more ahead
        of a busy GPU). It waits for it in the replay too; its own time is a typical launch:
        the median of the launches that did not return as an op ended (where the queue
        stayed full, nearly every launch waited: the time each took after its op ended)."""
        t, rows = self.t, self.rows
        li = np.flatnonzero(launch)
        if not len(li) or not len(d_idx):
            return
        d = t.dur[top[li]]
        e = t.end[d_idx]
        # device ops launched before each call (by an earlier call) are candidates
        launched_at = np.full(len(d_idx), -np.inf)  # no call in the window: before it
        has = call_of >= 0
        launched_at[has] = t.ts[top[call_of[has]]]
        o = np.argsort(e, kind="stable")
        cs, ce = t.ts[top[li]], t.end[top[li]]
        pos = np.searchsorted(e[o], ce + EPS, side="right") - 1
        tgt = o[np.maximum(pos, 0)]
        ended = (pos >= 0) & (e[tgt] > cs) & (ce - e[tgt] < SYNC_END_US) & (launched_at[tgt] < cs)
        # a launch's own time (docstring); FULL_QUEUE_SHARE that ended: the queue stayed full
        typical = float(np.median(d[~ended] if (~ended).mean() > 1 - FULL_QUEUE_SHARE
                                  else (ce - e[tgt])[ended]))
        ok = ended & (d > max(SYNC_LONG_US, SYNC_LONG_RATIO * typical))
        if not ok.any():
            return
        long, tgt = li[ok], tgt[ok]
        rows.edge(dev_ids[tgt], call_task[long], EdgeKind.END_AFTER_END, ce[ok] - e[tgt])
        self._set("dur", call_task[long], np.full(len(long), typical))
        self.full_queue = len(long)

    def _sync_edges(self, top: np.ndarray, is_sync: np.ndarray, wait_task: np.ndarray,
                    d_idx: np.ndarray, dev_ids: np.ndarray) -> None:
        t, rows = self.t, self.rows
        sy = np.flatnonzero(is_sync)
        if not len(sy) or not len(d_idx):
            return
        e = t.end[d_idx]
        o = np.argsort(e, kind="stable")
        cs, ce = t.ts[top[sy]], t.end[top[sy]]
        pos = np.searchsorted(e[o], ce + EPS, side="right") - 1
        ok = pos >= 0
        tgt = o[np.maximum(pos, 0)]
        ok &= e[tgt] > cs
        # the call waited for its target: its own time is what follows the target's end
        tail = ce - e[tgt]
        rows.edge(dev_ids[tgt[ok]], wait_task[sy[ok]], EdgeKind.END_AFTER_END, tail[ok])
        self._set("dur", wait_task[sy[ok]], np.maximum(tail[ok], 0.0))

    def _tags(self, c: dict[str, np.ndarray], ed: dict[str, np.ndarray]) -> np.ndarray:
        """Tag host tasks by the optimizer spans they start in, device work by its launch,
        and pageable host-to-device copies with their launch and wait."""
        t = self.t
        tag = np.zeros(len(c["kind"]), np.int32)
        spans = (t.pid_id == self.pid) & (t.ts < self.w1) & (t.end[:] > self.w0) & np.isin(
            t.kind, [int(Kind.ANNOTATION), int(Kind.CPU_OP)])
        host = np.isin(c["kind"], [int(k) for k in (TaskKind.HOST, TaskKind.LAUNCH, TaskKind.SYNC,
                                                     TaskKind.COPY_WAIT)])
        for flag, pat in ((Tag.OPTIMIZER, _OPT_STEP), (Tag.ZERO_GRAD, _OPT_ZERO)):
            sp = np.flatnonzero(spans & t.name_mask(
                lambda n, p=pat: p.match(n) is not None))  # type: ignore[misc]
            if len(sp):
                lo, hi = iv.union(t.ts[sp], t.end[sp])
                tag[host & iv.inside((lo, hi), c["start0"])] |= int(flag)
        pg = np.fromiter(("Pageable" in n and ("HtoD" in n or "Host->Device" in n)
                          for n in t.names), bool, len(t.names))
        ok = c["name_id"] >= 0
        is_pg = np.zeros(len(tag), bool)
        is_pg[ok] = pg[c["name_id"][ok]] & (c["kind"][ok] == TaskKind.MEMCPY)
        tag[is_pg] |= int(Tag.PAGEABLE)
        ss = ed["ekind"] == EdgeKind.START_AFTER_START
        src, dst = ed["esrc"][ss], ed["edst"][ss]
        dev = np.isin(c["kind"][dst], [int(k) for k in DEVICE_TASKS])
        np.bitwise_or.at(tag, dst[dev], tag[src[dev]] & int(Tag.OPTIMIZER | Tag.ZERO_GRAD))
        # a pageable copy's launch, and the wait on it
        np.bitwise_or.at(tag, src[dev & is_pg[dst]], int(Tag.PAGEABLE))
        ee = ed["ekind"] == EdgeKind.END_AFTER_END
        w = ee & is_pg[ed["esrc"]]
        np.bitwise_or.at(tag, ed["edst"][w], int(Tag.PAGEABLE))
        work = (tag == 0) & np.isin(c["kind"], [int(k) for k in (TaskKind.HOST, TaskKind.LAUNCH,
                                                                  *DEVICE_TASKS)])
        tag[work] |= int(Tag.FORWARD_BACKWARD)
        return tag

    def _events(self, c: dict[str, np.ndarray]) -> np.ndarray:
        """How many of the profiler's host events (ops at every depth, annotations, runtime
        calls, Python frames) start inside each main-thread host task: the profiler pays
        its recording cost per event."""
        t = self.t
        m = ((t.pid_id == self.pid) & (t.tid_id == self.tid) & (t.ts < self.w1)
             & (t.end[:] > self.w0) & np.isin(t.kind, [int(k) for k in (
                 Kind.CPU_OP, Kind.ANNOTATION, Kind.RUNTIME, Kind.PYTHON)]))
        ev = np.sort(t.ts[m])
        out = np.zeros(len(c["kind"]))
        task = (c["res"] == 0) & np.isin(c["kind"], [int(k) for k in (
            TaskKind.HOST, TaskKind.LAUNCH, TaskKind.FETCH)])
        s = c["start0"][task]
        out[task] = (np.searchsorted(ev, s + c["dur"][task], side="left")
                     - np.searchsorted(ev, s, side="left"))
        return out

    def _graph(self) -> Graph:
        rows = self.rows
        c = {k: rows.cat(k, rows.cols, dt) for k, dt in (
            ("kind", np.int8), ("res", np.int32), ("dur", np.float64), ("gap", np.float64),
            ("release", np.float64), ("step", np.int32), ("name_id", np.int32),
            ("nbytes", np.float64), ("start0", np.float64))}
        ed = {k: rows.cat(k, rows.edges, dt) for k, dt in (
            ("esrc", np.int64), ("edst", np.int64), ("ekind", np.int8), ("elag", np.float64))}
        c["tag"] = self._tags(c, ed)
        c["events"] = self._events(c)
        cols: dict[str, Any] = {**c, **ed}
        return Graph(**cols, resources=self.resources, names=self.t.names, main=0,
                     t0=self.w0, steps_measured=self.hi - self.lo, step_index=self.step_index)
