"""Which ``ProfilerStep#N`` spans of a trace are steps: the outermost ones, in order, and
not a last one that holds no operator nor device work (the profiler stopped as that step began: with
``tensorboard_trace_handler`` the last span of a loop that ends mid-cycle holds such a
stub, a few microseconds long, which would count as a step)."""

from __future__ import annotations

import numpy as np

from .columns import DEVICE_KINDS, Kind, Trace, kind_in


def step_indices(t: Trace, is_step: np.ndarray, host: np.ndarray,
                 max_steps: int | None = None) -> tuple[list[int], int, bool]:
    """The indices of the step spans among ``is_step`` (outermost, positive length, by
    start); how many past ``max_steps`` were left out (the loop ended inside them, as the
    capture says); and whether a hollow last one was left out (where none were).
    ``host``: the main process's host events, among which a step's operators are looked
    for."""
    idx = np.flatnonzero(is_step)
    idx = idx[np.argsort(t.ts[idx], kind="stable")]
    keep: list[int] = []
    last_end = -np.inf
    for i in idx.tolist():  # once per step (a handful), not per event
        if t.ts[i] >= last_end - 1e-3 and t.dur[i] > 0:
            keep.append(i)
            last_end = t.end[i]
    if max_steps is not None and len(keep) > max_steps:
        return keep[:max_steps], len(keep) - max_steps, False
    if len(keep) < 2:
        return keep, 0, False
    last = keep[-1]
    lo, hi = t.ts[last], t.end[last]
    inside = (t.ts >= lo) & (t.ts < hi)
    ops = inside & ((host & (t.kind == Kind.CPU_OP)) | kind_in(t.kind, DEVICE_KINDS))
    if ops.any():
        return keep, 0, False
    return keep[:-1], 0, True
