"""Which profiled steps the step model replays: the ``ProfilerStep#N`` spans of the main
thread (the ones the metrics use), and a few consecutive ones around the median step."""

from __future__ import annotations

import re

import numpy as np

from ..trace import CHUNK_EVENTS, DEVICE_KINDS, HOST_KINDS, Kind, Trace, kind_in
from ..trace.steps import main_pid, step_indices
from .calibration import CLOCK_EPS_US

WINDOW_STEPS = 3  # replay at most this many consecutive steps, around the median one

_STEP = re.compile(r"^ProfilerStep#\d+$")


def step_spans(t: Trace, max_steps: int | None = None) -> tuple[np.ndarray, int, int] | str:
    """The ProfilerStep spans the metrics use (indices, main pid, main tid), or why none."""
    host = kind_in(t.kind, HOST_KINDS) & np.isfinite(t.ts)
    if not host.any():
        return "no host events"
    pid = main_pid(t, host)
    is_step = (t.name_mask(lambda n: bool(_STEP.match(n))) & host & (t.pid_id == pid)
               & kind_in(t.kind, (Kind.ANNOTATION, Kind.CPU_OP)))
    keep, _, _ = step_indices(t, is_step, host & (t.pid_id == pid), max_steps)
    if not keep:
        return "no ProfilerStep# ranges: no step to model"
    steps = np.array(keep, np.int64)
    tid = int(np.argmax(np.bincount(t.tid_id[steps], minlength=len(t.tids))))
    return steps, pid, tid


def pick_window(durs: np.ndarray, k: int = WINDOW_STEPS) -> tuple[int, int]:
    """[a, b): up to ``k`` consecutive steps centred on the median one."""
    n = len(durs)
    k = min(k, n)
    m = int(np.argsort(durs, kind="stable")[n // 2])
    a = min(max(m - k // 2, 0), n - k)
    return a, a + k


def around(t: Trace, w0: float, w1: float) -> Trace:
    """The events the graph of the window [w0, w1] is built from, as a trace of their own:
    the host events that reach into it (within :data:`~.calibration.CLOCK_EPS_US`), and the
    device events from a window's length before it (clocks may disagree a little) up to the
    last one its calls launched (a host that runs ahead queues its work steps later), every
    stream's work up to then with it. A few steps of a long trace are a small part of it:
    the build's temporaries, each the size of the trace it reads, shrink with it."""
    host: list[np.ndarray] = []
    dev: list[np.ndarray] = []
    for a in range(0, len(t), CHUNK_EVENTS):
        part = slice(a, min(a + CHUNK_EVENTS, len(t)))
        ts, kind = t.ts[part], t.kind[part]
        on_dev = kind_in(kind, DEVICE_KINDS)
        dev.append(np.flatnonzero(on_dev & (ts >= w0 - (w1 - w0) - CLOCK_EPS_US)) + a)
        near = (ts <= w1 + CLOCK_EPS_US) & (ts + t.dur[part] >= w0 - CLOCK_EPS_US) & ~on_dev
        host.append(np.flatnonzero(near) + a)
    h = np.concatenate(host) if host else np.zeros(0, np.int64)
    d = np.concatenate(dev) if dev else np.zeros(0, np.int64)
    if len(d):  # the device work of the window's calls, and what ran before it on its stream
        calls = h[t.kind[h] == Kind.RUNTIME]
        corr = t.correlation[calls]
        ours = np.isin(t.correlation[d], corr[~np.isnan(corr)])
        last = float(t.ts[d[ours]].max()) if ours.any() else w1
        d = d[t.ts[d] <= max(last, w1) + CLOCK_EPS_US]
    idx = np.union1d(h, d)
    return t if len(idx) == len(t) else t.take(idx)
