"""What one thread costs the loop's own work, from steps of the loop itself run on one
intra-op thread (the clock's ``one_thread`` steps: diagnose.capture.steps).

A one-thread step's work is its time less its wait for a batch (the forward, backward,
optimizer and the loop's Python, as the job runs them). Each is set beside the median of
the work of the steps next to it on torch's threads (up to :data:`NEIGHBOURS` on each
side), so the host's pace, which drifts over seconds, is the same on both sides of every
ratio. The point is the median of those ratios, its noise their median's relative standard
error. No model stands between this and the thread-count change a fix makes: it is that
change, made on the job's own steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ...values import as_number, median_se

#: the steps on torch's threads each one-thread step is set beside, on each side
NEIGHBOURS = 2
#: one-thread steps needed for a ratio (a median and its standard error need three)
LEAST_PAIRS = 3
PHASE = "one_thread"

CATALOG: dict[str, tuple[str, str]] = {
    "threads_loop_steps": (
        "count", "steps of the loop the session ran on one intra-op thread after the "
        "profiled window (a CPU model on 2+ threads without DataLoader workers, where the "
        "threads split may be graded warning); where there are at least 3, "
        "threads_one_thread_ratio is theirs"),
    "threads_loop_ratio": (
        "ratio", "the loop's own work (a step less its wait for a batch) on one thread over "
        "the same on torch's threads in the steps beside it: the median over the one-thread "
        "steps"),
    "threads_loop_noise_rel": (
        "ratio", "the relative standard error of threads_loop_ratio's median"),
}


def _work(ms: Any, wait: Any) -> float | None:
    """A step's own work (ms): its time less its wait for a batch; None where unknown."""
    t = as_number(ms, finite=False)
    if t is None:
        return None
    w = as_number(wait, finite=False) or 0.0
    return t - w if t - w > 0 else None


def loop_threads(clock: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"ratio", "noise", "steps", "extra_ms"}`` from a step clock (``capture.step_clock``):
    the one-thread steps' work over their neighbours' (module doc), and what they cost
    the loop beyond those neighbours (ms in all: the probes' share reads it); None where
    the clock has no one-thread step. ``ratio`` and ``noise`` are None under
    :data:`LEAST_PAIRS` pairs."""
    if not isinstance(clock, Mapping):
        return None
    phases = clock.get("phase") or []
    ms = clock.get("ms") or []
    waits = clock.get("dataloader_ms") or [None] * len(ms)
    if PHASE not in phases or len(phases) != len(ms):
        return None
    work = [_work(m, w) for m, w in zip(ms, waits, strict=False)]
    ratios, extra, steps = [], 0.0, 0
    for i, p in enumerate(phases):
        if p != PHASE:
            continue
        steps += 1
        one = work[i]
        sides = (range(i - 1, -1, -1), range(i + 1, len(phases)))
        near_ok = [x for side in sides
                   for x in [work[j] for j in side if phases[j] == "after"][:NEIGHBOURS]
                   if x is not None]
        if one is None or not near_ok:
            continue
        base = statistics.median(near_ok)
        ratios.append(one / base)
        extra += max(0.0, one - base)
    got = median_se(ratios) if len(ratios) >= LEAST_PAIRS else None
    return {"ratio": round(got[0], 4) if got else None,
            "noise": round(got[1] / got[0], 4) if got and got[0] > 0 else None,
            "steps": steps, "extra_ms": round(extra, 3)}


def loop_threads_metrics(cap: Any) -> dict[str, object]:
    """The :data:`CATALOG` names from the context's ``capture`` section."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    got = loop_threads(cap.get("step_clock") if isinstance(cap, Mapping) else None)
    if got is not None:
        out.update(threads_loop_steps=got["steps"], threads_loop_ratio=got["ratio"],
                   threads_loop_noise_rel=got["noise"])
    return out
