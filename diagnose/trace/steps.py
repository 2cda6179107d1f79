"""Which ``ProfilerStep#N`` spans of a trace are steps: the outermost ones, in order, and
not a last one that holds neither an operator nor device work (the profiler stopped as
that step began: the last span of a loop that ends mid-cycle holds such a stub, a few
microseconds long, which would count as a step)."""

from __future__ import annotations

import numpy as np

from .columns import CHUNK_EVENTS, DEVICE_KINDS, Kind, Trace, kind_in


def main_pid(t: Trace, host: np.ndarray) -> int:
    """The process with the most of the ``host`` events (a mask): the one a trace's steps
    are read from. Counted a chunk at a time: a count over a large trace's events at once
    would hold their ids, widened to 64 bits, in one array."""
    counts = np.zeros(len(t.pids), np.int64)
    for a in range(0, len(t), CHUNK_EVENTS):
        part = slice(a, min(a + CHUNK_EVENTS, len(t)))
        counts += np.bincount(t.pid_id[part][host[part]], minlength=len(t.pids))
    return int(np.argmax(counts))


def outermost(t: Trace, mask: np.ndarray) -> list[int]:
    """The indices of the spans among ``mask`` that lie in no other of them, by start:
    each starts after the last one kept has ended (a repeated or nested span goes)."""
    idx = np.flatnonzero(mask)
    idx = idx[np.argsort(t.ts[idx], kind="stable")]
    keep: list[int] = []
    last_end = -np.inf
    for i in idx.tolist():  # once per span (one a step), not per event
        if t.ts[i] >= last_end - 1e-3:
            keep.append(i)
            last_end = t.end[i]
    return keep


def step_indices(t: Trace, is_step: np.ndarray, host: np.ndarray,
                 max_steps: int | None = None) -> tuple[list[int], int, bool]:
    """The indices of the step spans among ``is_step`` (outermost, positive length, by
    start); how many past ``max_steps`` were left out (the loop ended inside them, as the
    capture says); and whether a hollow last one was left out (where none were).
    ``host``: the main process's host events, among which a step's operators are looked
    for."""
    keep = outermost(t, is_step & (t.dur > 0))
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
