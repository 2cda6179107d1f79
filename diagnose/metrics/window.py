"""The profiled window: which steps count, and the event selections every area shares.

Fractions are of the profiled window: the union of ``ProfilerStep#N`` spans (time between
two steps does not count); where the trace has none, the steps its DataLoader's batches
mark (one batch asked for to the next), else its optimizer's steps (one step's end to the
next), else the whole trace span. :class:`StepWindow`
is computed once per trace and passed to every area module.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import numpy as np

from ..trace import (
    CHUNK_EVENTS,
    DEVICE_KINDS,
    HOST_KINDS,
    Kind,
    Trace,
    give_back_freed,
    kind_in,
)
from ..trace.steps import main_pid, outermost, step_indices
from . import intervals as iv
from .declare import Metric, per_step_ms, rnd
from .names import DATALOADER, OPTIMIZER_STEP, STEP

#: events per chunk where a per-event pass makes temporaries (the trace layer's)
CHUNK = CHUNK_EVENTS

METRICS = (
    Metric("steps_source", "", "Where the step windows come from: ProfilerStep, DataLoader "
           "batches (no ProfilerStep spans: from one batch asked for to the next), optimizer "
           "steps (nor a DataLoader: from one optimizer.step()'s end to the next) or whole "
           "trace"),
    Metric("step_count", "count", "Profiled steps (ProfilerStep# spans; 1 for a whole-trace window)"),
    Metric("window_ms", "ms", "Length of the profiled window (sum of the step spans)"),
    Metric("step_time_median_ms", "ms", "Median step time of the profiled window (under the profiler)"),
    Metric("step_time_p90_ms", "ms", "90th percentile step time of the profiled window"),
    Metric("step_time_mean_ms", "ms", "Mean step time of the profiled window (under the profiler)"),
    Metric("step_time_cv", "ratio", "Coefficient of variation of step time (std/mean)"),
    Metric("has_gpu", "bool", "The trace has device (kernel/memcpy/memset) activity"),
)


#: device ids :func:`_shared` tries before the whole intersection
_FEW_IDS = 4096


def _shared(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the two arrays of ids have a (non-NaN) value in common. First ``a`` against
    a few thousand of ``b``'s ids (a binary search, no sort of ``a``): in a GPU trace the
    first device ops' ids are runtime calls' ids; the whole intersection only where none
    of those is."""
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not len(a) or not len(b):
        return False
    few = np.sort(b[:_FEW_IDS])
    pos = np.minimum(np.searchsorted(few, a), len(few) - 1)
    if bool((few[pos] == a).any()):
        return True
    return bool(len(np.intersect1d(a, b[_FEW_IDS:])))


class StepWindow:
    """One trace's profiled steps and its host and device events (masks over all events).

    ``host``: host events of the main process (the one with the most host events);
    ``dev``: kernels, copies and memsets; ``has_ops``/``has_runtime``: whether the host
    recorded operators and runtime calls; ``has_links``: whether a correlation id ties a
    runtime call to device work; ``step_lo``/``step_hi``: the steps kept;
    ``W``: their summed length (us); ``notes``: what the step selection left out.
    """

    def __init__(self, t: Trace, max_steps: int | None = None) -> None:
        self.t = t
        self.notes: list[str] = []
        valid = np.isfinite(t.ts)
        host_all = kind_in(t.kind, HOST_KINDS) & valid
        if host_all.any():
            self.main_pid = main_pid(t, host_all)
            self.host: np.ndarray = host_all & (t.pid_id == self.main_pid)
        else:
            self.main_pid = -1
            self.host = host_all
        self.dev: np.ndarray = kind_in(t.kind, DEVICE_KINDS) & valid
        self.has_gpu = bool(self.dev.any())
        # what the trace recorded of the host beside its steps: operators (or annotations
        # other than ProfilerStep) and runtime calls. A trace of device activity alone has
        # neither, and the metrics that read them are None there, not 0
        ops = self.host & kind_in(t.kind, [Kind.CPU_OP, Kind.ANNOTATION])
        self.has_ops = bool((ops & ~t.name_mask(lambda n: bool(STEP.match(n)))).any())
        rt = self.host & (t.kind == Kind.RUNTIME)
        self.has_runtime = bool(rt.any())
        self.has_links = self.has_runtime and self.has_gpu and _shared(
            t.correlation[rt], t.correlation[self.dev])
        self.step_lo, self.step_hi, self.source = self._steps(max_steps)
        self.lo, self.hi = float(self.step_lo[0]), float(self.step_hi[-1])
        self.steps_u: iv.Intervals = (self.step_lo, self.step_hi)
        self.W = float(np.sum(self.step_hi - self.step_lo))
        self.n_steps = len(self.step_lo)

    def _steps(self, max_steps: int | None) -> tuple[np.ndarray, np.ndarray, str]:
        t = self.t
        is_step = (t.name_mask(lambda n: bool(STEP.match(n))) & self.host
                   & kind_in(t.kind, [Kind.ANNOTATION, Kind.CPU_OP]))
        keep, cut, hollow = step_indices(t, is_step, self.host, max_steps)
        idx = np.array(keep, dtype=np.int64)
        if hollow:
            self.notes.append("the last ProfilerStep span holds no operator (the profiler "
                              "stopped as that step began): left out")
        if cut:
            self.notes.append(f"{cut} ProfilerStep span(s) after the {max_steps} whole "
                              "step(s) left out (the loop ended)")
        if len(idx):
            return t.ts[idx], t.end[idx], "ProfilerStep"
        elsewhere = t.name_mask(lambda n: bool(STEP.match(n))) & ~self.host & kind_in(
            t.kind, [Kind.ANNOTATION, Kind.CPU_OP])
        if elsewhere.any():  # a profiler of another process: its steps are not this one's
            self.notes.append(f"{int(elsewhere.sum())} ProfilerStep# span(s) of a process "
                              "other than the one analysed (not its steps): left out, so "
                              "the process analysed has none")
        batches = self._batch_starts()
        marks, source, said = (
            (batches, "DataLoader batches", "no ProfilerStep# spans: {n} step(s) from the "
             "DataLoader's batches, each from one batch asked for to the next")
            if len(batches) >= 2 else
            (self._optimizer_ends(), "optimizer steps", "no ProfilerStep# spans and no "
             "DataLoader: {n} step(s) from the optimizer's steps, each from one "
             "optimizer.step()'s end to the next's (a loop with several optimizers ends a "
             "step at each: its own step is that many of these)"))
        if len(marks) >= 2:
            if max_steps is not None and len(marks) > max_steps + 1:
                marks = marks[:max_steps + 1]
            self.notes.append(said.format(n=len(marks) - 1) + "; a profiler with a schedule "
                              "and prof.step() each step records its own steps")
            return marks[:-1], marks[1:], source
        span = (self.host | self.dev) & (t.kind != Kind.TRACE)
        if not span.any():
            span = np.isfinite(t.ts) & (t.kind != Kind.TRACE)
        lo = float(np.min(t.ts[span])) if span.any() else 0.0
        hi = float(np.max(t.end[span])) if span.any() else 0.0
        self.notes.append("no ProfilerStep# spans and no DataLoader: the whole trace is "
                          "analysed as one window (a profiler with a schedule and prof.step() "
                          "each step records its steps)")
        return np.array([lo]), np.array([hi]), "whole trace"

    def _optimizer_ends(self) -> np.ndarray:
        """When each outermost ``Optimizer.step#`` span on the main thread ended, in order:
        a loop's step ends with its optimizer's step."""
        idx = outermost(self.t, self._named(OPTIMIZER_STEP))
        return self.t.ts[idx] + self.t.dur[idx]

    def _batch_starts(self) -> np.ndarray:
        """When the main thread asked its DataLoader for each batch (the starts of the
        outermost ``enumerate(DataLoader)#...__next__`` spans, in order): a training loop
        asks for one a step, so where the trace has no ProfilerStep spans (a plain
        ``export_chrome_trace``) they mark its steps."""
        return self.t.ts[outermost(self.t, self._named(DATALOADER))]

    def _named(self, pattern: re.Pattern[str]) -> np.ndarray:
        """The main process's annotations and operators whose name matches ``pattern``."""
        t = self.t
        return (self.host & kind_in(t.kind, [Kind.ANNOTATION, Kind.CPU_OP])
                & t.name_mask(lambda n: bool(pattern.match(n))))

    # ------------------------------------------------------------------ selections
    def sel(self, mask: np.ndarray) -> iv.Intervals:
        """The events of ``mask`` as an interval set. A large selection's temporaries
        (several arrays its size) go back to the system once it is made, so that the next
        one's are not stacked on them in the heap."""
        ts = self.t.ts[mask]
        n = len(ts)
        ends = self.t.dur[mask]
        ends += ts  # = t.end[mask], ts gathered once, the sum made in place
        pair = [ts, ends]
        del ts, ends  # the union frees them as it goes
        out = iv.union_taken(pair)
        if n >= CHUNK:
            give_back_freed()
        return out

    def mid(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The midpoints of events ``idx`` (computed when asked, never kept: an array the
        size of the trace held for the whole analysis is memory a large trace pays for)."""
        return self.t.ts[idx] + self.t.dur[idx] / 2

    @cached_property
    def in_window(self) -> np.ndarray:
        """Events whose midpoint lies inside a profiled step (computed once, in chunks: the
        temporaries of a large trace stay a chunk's size)."""
        n = len(self.t)
        out = np.empty(n, dtype=bool)
        for a in range(0, n, CHUNK):
            part = slice(a, min(a + CHUNK, n))
            out[part] = iv.inside(self.steps_u, self.mid(part))
        return out

    @cached_property
    def runtime_by_correlation(self) -> np.ndarray:
        """The runtime calls that carry a correlation id, sorted by it (stable): what a
        device event's launch is looked up in, sorted once (int32: kept small)."""
        t = self.t
        rt = np.flatnonzero(t.kind == Kind.RUNTIME)  # then filtered: no full-length temporaries
        rt = rt[~np.isnan(t.correlation[rt])]
        return rt[np.argsort(t.correlation[rt], kind="stable")].astype(np.int32)

    def within(self, mask: np.ndarray) -> np.ndarray:
        """Events (of ``mask``) whose midpoint lies inside a profiled step."""
        return mask & self.in_window

    def contains(self, u: iv.Intervals, mask: np.ndarray) -> np.ndarray:
        """Events of ``mask`` whose midpoint lies inside ``u`` (only those are searched, a
        chunk of events at a time: the temporaries of a large trace stay a chunk's size)."""
        out = np.zeros(len(mask), bool)
        for a in range(0, len(mask), CHUNK):
            idx = np.flatnonzero(mask[a:a + CHUNK]) + a
            out[idx] = iv.contains(u, self.mid(idx))
        return out

    def in_steps(self, u: iv.Intervals) -> float:
        """Length of ``u`` inside the profiled steps (time between steps does not count)."""
        return iv.overlap(self.steps_u, u)

    def frac(self, u: iv.Intervals) -> float:
        """Share of the window that ``u`` covers."""
        return self.in_steps(u) / self.W if self.W > 0 else 0.0

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Host events of the main process of these kinds."""
        return self.host & kind_in(self.t.kind, kinds)


#: profiled steps whose mean is this many times their median are uneven enough that the
#: window's shares speak mostly of the slow ones: a note says so (a note's threshold)
UNEVEN_MEAN_OVER_MEDIAN = 1.5


def window_metrics(w: StepWindow) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The METRICS above, and the ``step_ms`` series; a note where the profiled steps are
    uneven (:data:`UNEVEN_MEAN_OVER_MEDIAN`)."""
    st = (w.step_hi - w.step_lo) / 1e3
    med = float(np.median(st))
    slow = st[st >= 2 * med]
    if w.n_steps > 2 and med > 0 and float(np.mean(st)) >= UNEVEN_MEAN_OVER_MEDIAN * med \
            and len(slow):
        took = (f"{float(slow.min()):,.1f}-{float(slow.max()):,.1f} ms" if len(slow) > 1
                else f"{float(slow.max()):,.1f} ms")
        w.notes.append(
            f"the profiled steps are uneven: {len(slow)} of {w.n_steps} took {took} "
            f"against a median of "
            f"{med:,.1f} ms (a pause, a busy host, an epoch's start): the window's shares and "
            "milliseconds weigh those steps most")
    v: dict[str, Any] = {
        "steps_source": w.source,
        "step_count": w.n_steps,
        "window_ms": rnd(w.W / 1e3, 3),
        "step_time_median_ms": rnd(np.median(st), 3),
        "step_time_p90_ms": rnd(np.percentile(st, 90), 3),
        "step_time_mean_ms": rnd(np.mean(st), 3),
        "step_time_cv": rnd(np.std(st) / np.mean(st), 4)
        if w.n_steps > 1 and np.mean(st) > 0 else None,
        "has_gpu": w.has_gpu,
    }
    return v, {"step_ms": per_step_ms(w.step_hi - w.step_lo)}
