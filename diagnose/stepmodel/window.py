"""Which profiled steps the step model replays: the ``ProfilerStep#N`` spans of the main
thread (the ones the metrics use), and a few consecutive ones around the median step."""

from __future__ import annotations

import re

import numpy as np

from ..trace import HOST_KINDS, Kind, Trace
from ..trace.steps import step_indices

WINDOW_STEPS = 3  # replay at most this many consecutive steps, around the median one

_STEP = re.compile(r"^ProfilerStep#\d+$")


def step_spans(t: Trace, max_steps: int | None = None) -> tuple[np.ndarray, int, int] | str:
    """The ProfilerStep spans the metrics use (indices, main pid, main tid), or why none."""
    host = np.isin(t.kind, [int(k) for k in HOST_KINDS]) & np.isfinite(t.ts)
    if not host.any():
        return "no host events"
    main_pid = int(np.argmax(np.bincount(t.pid_id[host], minlength=len(t.pids))))
    is_step = (t.name_mask(lambda n: bool(_STEP.match(n))) & host & (t.pid_id == main_pid)
               & np.isin(t.kind, [int(Kind.ANNOTATION), int(Kind.CPU_OP)]))
    keep, _, _ = step_indices(t, is_step, host & (t.pid_id == main_pid), max_steps)
    if not keep:
        return "no ProfilerStep# ranges: no step to model"
    steps = np.array(keep, np.int64)
    tid = int(np.argmax(np.bincount(t.tid_id[steps], minlength=len(t.tids))))
    return steps, main_pid, tid


def pick_window(durs: np.ndarray, k: int = WINDOW_STEPS) -> tuple[int, int]:
    """[a, b): up to ``k`` consecutive steps centred on the median one."""
    n = len(durs)
    k = min(k, n)
    m = int(np.argsort(durs, kind="stable")[n // 2])
    a = min(max(m - k // 2, 0), n - k)
    return a, a + k
