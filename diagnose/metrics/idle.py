"""GPU busy, and the GPU's idle time inside the steps split by its host-side cause.

Each idle gap (no kernel, copy or memset on any device) is attributed in turn to: the
host waiting on the DataLoader (the part of the gap it covers); a synchronisation that
drained the GPU (the gap begins inside a synchronising call or a blocking pageable copy);
the host launching late (the work that ends the gap was launched after the GPU ran dry);
or nothing attributable. A cause the trace did not record (no runtime calls tied to the
device work by correlation id: no launches or syncs; no host operators: no DataLoader) is
None, and so is the rest it would take from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace import Kind
from . import intervals as iv
from .declare import GPU, HOST_OPS, LINKS, RUNTIME, Metric, rnd
from .window import StepWindow

_LINKED = (GPU, RUNTIME, LINKS)  # a launch's time: its runtime call, by correlation id

METRICS = (
    Metric("gpu_busy_frac", "fraction",
           "Union of kernel, memcpy and memset time on the busiest device / window", (GPU,)),
    Metric("gpu_idle_frac", "fraction", "Window time with no device activity at all / window",
           (GPU,)),
    Metric("idle_input_frac", "fraction",
           "GPU idle while the host waits on the DataLoader / window", (GPU, HOST_OPS)),
    Metric("idle_sync_frac", "fraction",
           "GPU idle after the host drained it with a synchronising call (.item(), "
           "synchronize, a blocking pageable copy) until new work arrived / window",
           _LINKED),
    Metric("idle_copy_sync_frac", "fraction",
           "The part of idle_sync_frac that begins while the host is blocked in a pageable "
           "host-to-device copy (the copy call and the synchronisation it issues) / window",
           _LINKED),
    Metric("idle_sync_call_frac", "fraction",
           "The rest of idle_sync_frac: after .item(), synchronize and other synchronising "
           "calls / window", _LINKED),
    Metric("idle_kernel_launch_frac", "fraction",
           "The part of idle_launch_frac that ends with a kernel launched on its own (not "
           "replayed by a graph) / window", _LINKED),
    Metric("idle_graph_launch_frac", "fraction",
           "The part of idle_launch_frac that ends with kernels replayed by a CUDA/HIP graph "
           "(the GPU waits for one graph launch, not for per-kernel launches) / window",
           _LINKED),
    Metric("idle_launch_frac", "fraction",
           "GPU idle waiting for the host to launch the next work (launch overhead, Python "
           "and CPU work between launches) / window", _LINKED),
    Metric("idle_other_frac", "fraction", "GPU idle for no attributable host cause / window",
           (*_LINKED, HOST_OPS)),
    Metric("device_step_ms", "ms",
           "The GPU's work per step: how long the device ops each profiled step launched "
           "keep the device busy (their union), the mean over the steps; above the step time "
           "where the host ran ahead of the GPU (a loop that never waits for it)",
           _LINKED),
)

_NEEDS_LINKS = tuple(m.name for m in METRICS if LINKS in m.needs)

# the order the values come in (the declarations above keep the catalog's order)
_ORDER = ("gpu_busy_frac", "gpu_idle_frac", "idle_input_frac", "idle_sync_frac",
          "idle_launch_frac", "idle_other_frac", "idle_copy_sync_frac",
          "idle_sync_call_frac", "idle_graph_launch_frac", "idle_kernel_launch_frac",
          "device_step_ms")


def _launch_end(w: StepWindow, dev_events: np.ndarray) -> np.ndarray:
    """End time of the host runtime call that launched each device event (NaN if unknown)."""
    t = w.t
    order = w.runtime_by_correlation
    out = np.full(len(dev_events), np.nan)
    if not len(order):
        return out
    keys = t.correlation[order]
    want = t.correlation[dev_events]
    pos = np.searchsorted(keys, want)
    pos_c = np.minimum(pos, len(keys) - 1)
    hit = (pos < len(keys)) & (keys[pos_c] == want)
    out[hit] = t.end[order[pos_c[hit]]]
    return out


#: the GPU work a step launched may be this much longer than the host's step before the
#: host is said to have run ahead of the GPU
AHEAD_RATIO = 1.2


def host_ahead(metrics: Any) -> tuple[float, float] | None:
    """(the GPU work per step, the host's mean step), in ms, where the host ran ahead of the
    GPU (:data:`AHEAD_RATIO`); None where it did not or the metrics cannot tell."""
    pace, host = metrics.get("device_step_ms"), metrics.get("step_time_mean_ms")
    ok = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (pace, host))
    return (float(pace), float(host)) if ok and host > 0 and pace > AHEAD_RATIO * host else None


#: a device op that starts this long (us) after its launch returned waited in a queue
BACKLOG_US = 50.0


def _backlog_end(w: StepWindow) -> float:
    """Where the device's backlog from before the window ends (us; ``w.lo`` where it had
    none). A loop that never syncs lets the host run ahead of a busy GPU: the window's
    first kernels then wait behind work launched before the profiler recorded. That wait
    is the device working, not idle: the first recorded device op of the window, if it was
    launched before the recording began (its launch is not in the trace) or started well
    after its launch returned, marks where the backlog ends."""
    t = w.t
    dev = np.flatnonzero(w.dev)
    ts = t.ts[dev]
    idx = dev[ts >= w.lo]  # the first may start after the window: all of it was backlog
    if not len(idx):
        return w.lo
    first = idx[np.argmin(t.ts[idx])]
    before = dev[ts < w.lo]
    if len(before) and float(np.max(t.end[before])) > w.lo:  # recorded work spans the start
        return w.lo
    if not (t.kind == Kind.RUNTIME).any():  # no launches recorded at all: cannot tell
        return w.lo
    launched = _launch_end(w, np.array([first]))[0]
    start = float(t.ts[first])
    # launched before the recording began (no launch in the trace), or long before it ran
    queued = not np.isfinite(launched) or start - launched > BACKLOG_US
    return start if queued else w.lo


def _device_step_ms(w: StepWindow) -> float | None:
    """The GPU's work per step (ms): how long the device ops each profiled step launched
    keep the device busy (their union), the mean over the steps. No step is shorter once
    the device's queue is full. None where no launch is in the trace."""
    t = w.t
    dev_idx = np.flatnonzero(w.dev)
    launched = _launch_end(w, dev_idx)
    ok = np.isfinite(launched)
    if not ok.any():
        return None
    at = launched[ok]
    step = np.searchsorted(w.step_lo, at, side="right") - 1
    inside = (step >= 0) & (at <= w.step_hi[np.maximum(step, 0)])
    if not inside.any():
        return None
    ev, st = dev_idx[ok][inside], step[inside]
    # the events of each step, in their order: one stable sort, not a pass per step
    by_step = np.argsort(st, kind="stable")
    bounds = np.searchsorted(st[by_step], np.arange(w.n_steps + 1))
    ev = ev[by_step]
    busy = [iv.measure(iv.union(t.ts[e], np.asarray(t.end[e])))
            for e in (ev[bounds[k]:bounds[k + 1]] for k in range(w.n_steps))]
    return float(np.mean(busy)) / 1e3


def _busiest(w: StepWindow, backlog: iv.Intervals) -> float:
    """GPU busy share of the busiest device (its backlog from before the window counted)."""
    t = w.t
    dev_idx = np.flatnonzero(w.dev)
    dev_no = t.device[dev_idx]
    dev_key = np.where(np.isnan(dev_no), -1.0 - t.pid_id[dev_idx], dev_no)
    busiest = 0.0
    for d in np.unique(dev_key):  # once per device
        sel = dev_idx[dev_key == d]
        u = iv.union_taken([t.ts[sel], np.asarray(t.end[sel], dtype=np.float64)])
        del sel
        busiest = max(busiest, w.frac(iv.merge(u, backlog) if len(backlog[0]) else u))
    return busiest


#: the idle gaps whose parts are summed at a time: each part is an array over the gaps, a
#: dozen of them at once, so a large trace's (a hundred thousand gaps and more) would set
#: the analysis' peak memory
GAP_CHUNK = 1 << 14
#: what :func:`_gap_parts` sums, in its order
_PARTS = ("idle", "input", "sync", "launch", "other", "copy", "graph")


def _gap_parts(w: StepWindow, gs: np.ndarray, ge: np.ndarray, order: np.ndarray,
               starts: np.ndarray, dataloader: iv.Intervals, sync_spans: iv.Intervals,
               copy_blocked: iv.Intervals, graph_kernel: np.ndarray) -> np.ndarray:
    """The idle gaps [gs, ge) split by cause (module doc), summed, in :data:`_PARTS`'s
    order; ``order``: the device ops by start (``starts``), the next of which ends a gap."""
    glen = ge - gs
    input_part = iv.measure_between(dataloader, gs, ge)
    rest = np.maximum(glen - input_part, 0.0)
    copy_flag = iv.contains(copy_blocked, gs)
    sync_flag = iv.contains(sync_spans, gs) | copy_flag
    # which device op ends each gap, and when was it launched?
    nxt = np.searchsorted(starts, ge, side="left")
    has_next = nxt < len(order)
    nxt_ev = order[np.minimum(nxt, len(order) - 1)]
    launch_end = _launch_end(w, nxt_ev)
    host_late = has_next & ~np.isnan(launch_end) & (launch_end >= gs - 1e-3)
    # a gap is the host's doing only if the work that ends it was not yet launched when
    # the GPU ran dry; a gap between work already queued (inside a CUDA graph, behind a
    # cross-stream wait) is the device's own, whatever the host is doing meanwhile
    queued = has_next & ~np.isnan(launch_end) & ~host_late
    sync_flag &= ~queued
    copy_flag &= ~queued
    sync_part = np.where(sync_flag, rest, 0.0)
    launch_part = np.where(~sync_flag & host_late, rest, 0.0)
    other_part = rest - sync_part - launch_part
    copy_part = np.where(copy_flag, sync_part, 0.0)
    # idle gaps that end with work replayed by a CUDA/HIP graph: one graph launch, not
    # one launch per kernel (counted in idle_launch_frac, reported apart)
    graph_part = np.where(has_next & graph_kernel[nxt_ev], launch_part, 0.0)
    return np.array([glen.sum(), input_part.sum(), sync_part.sum(), launch_part.sum(),
                     other_part.sum(), copy_part.sum(), graph_part.sum()])


def idle_metrics(w: StepWindow, dataloader: iv.Intervals, sync_spans: iv.Intervals,
                 copy_blocked: iv.Intervals, graph_kernel: np.ndarray) -> dict[str, Any]:
    """The METRICS above.

    ``dataloader``: the host's DataLoader spans; ``sync_spans``: its synchronising calls;
    ``copy_blocked``: host time blocked by pageable copies; ``graph_kernel``: the device
    events a CUDA/HIP graph replays (a mask).
    """
    if not w.has_gpu or w.W <= 0:
        return dict.fromkeys(_ORDER)
    t = w.t
    # the device's backlog from before the window (work the profiler did not record), the
    # busiest device's share and the GPU's work per step first, before the gaps' arrays
    # exist: each needs temporaries over every device op, and made last they would set
    # the analysis' peak memory
    ahead = _backlog_end(w)
    backlog = (np.array([w.lo]), np.array([ahead])) if ahead > w.lo else iv.EMPTY
    busiest = _busiest(w, backlog)
    device_step = _device_step_ms(w)
    dev_idx = np.flatnonzero(w.dev)
    # idle gaps inside steps only: the time between two steps is set aside as if busy, and
    # so is the backlog
    between = (w.step_hi[:-1], w.step_lo[1:])
    keep = between[1] > between[0]
    busy = iv.merge(iv.merge(w.sel(w.dev), (between[0][keep], between[1][keep])), backlog)
    del keep, between
    gs, ge = iv.gaps(busy, w.lo, w.hi)
    del busy
    # which device op ends each gap: the device ops by start, once
    order = dev_idx[np.argsort(t.ts[dev_idx], kind="stable")]
    del dev_idx
    starts = t.ts[order]
    sums = np.zeros(len(_PARTS))
    for a in range(0, len(gs), GAP_CHUNK):  # the gaps' parts summed a group at a time
        part = slice(a, a + GAP_CHUNK)
        sums += _gap_parts(w, gs[part], ge[part], order, starts, dataloader, sync_spans,
                           copy_blocked, graph_kernel)
    got = dict(zip(_PARTS, sums, strict=True))
    W = w.W
    v = {
        "gpu_busy_frac": rnd(busiest),
        "gpu_idle_frac": rnd(got["idle"] / W),
        "idle_input_frac": rnd(got["input"] / W),
        "idle_sync_frac": rnd(got["sync"] / W),
        "idle_launch_frac": rnd(got["launch"] / W),
        "idle_other_frac": rnd(got["other"] / W),
        "idle_copy_sync_frac": rnd(got["copy"] / W),
        "idle_sync_call_frac": rnd((got["sync"] - got["copy"]) / W),
        "idle_graph_launch_frac": rnd(got["graph"] / W),
        "idle_kernel_launch_frac": rnd((got["launch"] - got["graph"]) / W),
        "device_step_ms": rnd(device_step),
    }
    # causes the trace did not record, and the rest that would hold their time
    unknown = (() if w.has_links else _NEEDS_LINKS) + (
        () if w.has_ops else ("idle_input_frac", "idle_other_frac"))
    v.update(dict.fromkeys(unknown))
    return v
