"""The session's own step clock: the unprofiled steps' times (median, mean, spread), the
collector's pauses in them, the loop's forward, optimizer and wait for batches, the
profiled window against them (the profiler's overhead), and whether the figure holds.

The steps counted are the ``wait`` and ``after`` ones, less the run's first and the
``settle`` steps after the window. Where the host ran ahead of the device, the ``after``
block's time over its steps, its final drain included, is the job's pace. Full garbage
collections count at their spacing (:class:`StepMeans`), so that every figure is of the
same steady step. :mod:`.clock_note` says when the figure cannot be trusted, and why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...values import as_int, as_number
from .fields import as_bool

CATALOG: dict[str, tuple[str, str]] = {
    "step_time_unprofiled_median_ms": (
        "ms",
        "median step time without the profiler (the session's clock, steps outside the "
        "profiled window but the run's first and the first after it): what the job does "
        "when nobody watches",
    ),
    "step_time_unprofiled_mean_ms": (
        "ms",
        "mean step time without the profiler (same steps as the median): the job's pace, "
        "pauses that hit some steps (garbage collection, a slow file) included; what a "
        "prediction starts from. Full collections count at their spacing where 3 or more "
        "came after the window (gc_full_every_steps), not as many as fell in the steps",
    ),
    "gc_full_every_steps": (
        "steps", "the mean spacing of the full (generation 2) collections after the "
        "profiled window, where 3 or more came: the gc_pause_* full figures are their mean "
        "pause over it"),
    "step_time_unprofiled_steps": ("count", "steps timed without the profiler"),
    "step_time_unprofiled_mean_error": (
        "fraction", "the standard error of the mean a prediction starts from, over that mean "
        "(std / mean / sqrt(n) of the unprofiled steps; of the steady ones where "
        "step_time_steady_mean_ms is known): the capture's own noise in a range"),
    "step_time_steady_mean_ms": (
        "ms", "the same mean over the unprofiled steps in which no loader iterator started "
        "(no epoch's start): where the clock saw both kinds; the step model replays this "
        "step and adds an epoch's start per epoch (dataloader_epoch_boundary_ms)"),
    "dataloader_epoch_boundary_ms": (
        "ms", "what an epoch's start cost the loop beyond a steady step: the median of the "
        "unprofiled steps in which a loader iterator started, less the median of the others "
        "(the last epoch's workers shut down, the new ones forked, their first batches), "
        "each less its dataloader_epoch_gap_ms"),
    "dataloader_epoch_gap_ms": (
        "ms", "the loop's own work in those steps from the loader's last iterator running out "
        "to the new one's iter() (an evaluation, a checkpoint between epochs), their median: "
        "no loader change saves it; 0 where the loop made the next iterator at once"),
    "dataloader_epoch_after_ms": (
        "ms", "what the steps just after an epoch's start cost beyond a steady step, summed: "
        "one step for each worker started (each hands over its first batch in them), the "
        "median over the epochs of each such step less the steady median; the new "
        "processes' start-up on the CPUs and the training process's copy-on-write faults "
        "after the fork, which workers kept alive do not pay (0 at least)"),
    "gc_pause_ms": (
        "ms", "mean per unprofiled step: the time Python's garbage collector paused the "
        "training thread (gc.callbacks)"),
    "gc_pause_share": ("fraction", "gc_pause_ms / the mean unprofiled step time"),
    "gc_full_collections": (
        "count", "full (generation 2) collections on the training thread in the unprofiled "
        "steps"),
    "gc_pause_max_ms": ("ms", "the longest garbage-collector time in one unprofiled step"),
    "gc_pause_loader_ms": (
        "ms", "of gc_pause_ms, the pauses inside the loop's wait for a batch (the loader's "
        "own allocations tripped them)"),
    "gc_pause_full_ms": (
        "ms", "of gc_pause_ms, the full (generation 2) collections' pauses: the ones "
        "gc.freeze() spares (young collections walk only new objects)"),
    "gc_pause_full_loader_ms": (
        "ms", "of gc_pause_full_ms, those inside the loop's wait for a batch"),
    "forward_unprofiled_ms": (
        "ms", "the model's forward calls per unprofiled step (median of the steps after the "
        "window when there are 5 or more, else of all unprofiled ones; module hooks time it)"),
    "forward_unprofiled_mean_ms": (
        "ms", "the model's forward calls per unprofiled step, the mean over the same steps "
        "as forward_unprofiled_ms less those that began an epoch and the steps after each "
        "in which its new workers hand over their first batches (the steady steps: the mean "
        "step the predictions start from holds every burst a worker's batch put in them)"),
    "backward_unprofiled_mean_ms": (
        "ms", "the models' backward per unprofiled step, from a CPU model's output getting "
        "its gradient to autograd's end (the mean over the steady steps, as "
        "forward_unprofiled_mean_ms; where no step is steady, the median over the steps of "
        "forward_unprofiled_ms; null on a GPU model or where a step had none)"),
    "forward_calls_unprofiled": (
        "count", "the model's outermost forward calls per unprofiled step (the median over "
        "the same steps as forward_unprofiled_ms)"),
    "optimizer_unprofiled_ms": (
        "ms", "the run's optimizer.step() per unprofiled step (the mean, full collections "
        "at their spacing; its step hooks time it)"),
    "step_time_unprofiled_p10_ms": (
        "ms", "10th percentile of the unprofiled steps' times (the spread's low end)"),
    "step_time_unprofiled_p90_ms": (
        "ms", "90th percentile of the unprofiled steps' times (the spread's high end)"),
    "step_time_unprofiled_spread": (
        "fraction",
        "(p90 - p10) / median of the unprofiled steps: how much they vary (a busy machine, "
        "uneven steps); above 0.5, or with fewer than 5 steps, the median is unreliable",
    ),
    "step_extra_calls_steps": (
        "count", "the unprofiled steps that called the model more often than the median step "
        "(an evaluation or a sample every few steps; None where the model calls were not "
        "counted)"),
    "step_extra_calls_ms": (
        "ms", "how much longer those steps took than the median of the others"),
    "step_time_unprofiled_drain_ms": (
        "ms", "the wait for the device's queued work at the end of the unprofiled steps after "
        "the window (one synchronize; None on a CPU run)"),
    "step_time_device_paced": (
        "bool", "the host ran ahead of the device in the unprofiled steps (the drain longer "
        "than a step): their times are the block's, drain included, over its steps"),
    "step_time_unprofiled_reliable": (
        "bool",
        "the unprofiled median can be trusted: at least 5 steps, spread <= 0.5, and the "
        "profiled steps not clearly faster than the unprofiled ones (ratio >= 0.95)",
    ),
    "dataloader_wait_unprofiled_share": (
        "fraction",
        "share of the unprofiled steps' time the loop waited for its next batch",
    ),
    "dataloader_wait_steady_share": (
        "fraction",
        "the same share over the unprofiled steps in which no epoch of the loader began "
        "(IN005 covers an epoch's start); None where the clock did not record the starts",
    ),
    "step_time_profiled_clock_median_ms": (
        "ms",
        "median step time of the profiled window by the same clock (for the overhead ratio)",
    ),
    "profiler_overhead_ratio": (
        "ratio",
        "profiled median step / unprofiled median step (1.0: the profiler costs nothing); "
        "None when the unprofiled figure is unreliable (see step_time_unprofiled_reliable)",
    ),
    "step_cpu_wait_unprofiled_share": (
        "fraction", "share of the unprofiled steps' time the training thread waited, runnable, "
        "for a CPU (Linux schedstat), over the steps after the window where the other "
        "processes' CPUs were read (step_others_cpus_unprofiled): how busy the machine was"),
    "step_others_cpus_unprofiled": (
        "CPUs", "other processes' mean CPUs over the steps timed after the window (the usable "
        "CPUs' busy time less the run's own processes', /proc/stat): who held the CPUs the "
        "training thread waited for then; the host samples cover the window only"),
    "step_workers_cpus_unprofiled": (
        "CPUs", "the DataLoader workers' mean CPUs (the training process's descendants') over "
        "the steps step_others_cpus_unprofiled reads; workers_cpus: the profiled window's"),
    "step_others_leave_out_ranks": (
        "count", "the job's ranks on this host whose processes step_others_cpus_unprofiled "
        "counts as the job's own, not as other processes (torchrun's local ranks; 1: the "
        "training process and its workers alone)"),
    "dataloader_wait_unprofiled_ms": (
        "ms", "time per unprofiled step the loop waited for its next batch (session's clock)"),
    "dataloader_wait_unprofiled_max_ms": (
        "ms", "the longest wait for a batch among the unprofiled steps (session's clock): "
              "whether the steps beyond the window stalled in bursts too"),
    "window_complete": (
        "bool",
        "the profiled window ran every step of its schedule (False: the loop ended first)",
    ),
    "whole_steps": ("count", "whole steps in the profiled window (a cut-short one has fewer)"),
}


#: above this (p90 - p10) / median, the unprofiled median is too noisy to trust
UNRELIABLE_SPREAD = 0.5

#: fewer unprofiled steps than this give no trustworthy median
MIN_CLOCK_STEPS = 5
#: steps timed beyond which the note asks for no more: their median's standard error is then
#: a tenth of their p10-p90 spread (1.25 sigma / sqrt(n) = 0.23 sigma at 30, for normal steps;
#: the spread is 2.56 sigma), so more steps no longer move the figure the note doubts
ENOUGH_STEPS = 30

#: full collections after the window that make their spacing a measure (see
#: _full_gc_spacing)
GC_FULL_SPACED = 3

#: profiled steps faster than the unprofiled ones by more than this: the clock is off
MIN_OVERHEAD_RATIO = 0.95

#: a drain of the device's queue after the unprofiled block longer than this many of its
#: median steps: the host ran ahead of the device (a loop that keeps up with its GPU leaves
#: at most a step's device work behind), so the job runs at the device's pace
DEVICE_PACED_STEPS = 1.0


def _clock_rows(cap: Any) -> list[dict[str, Any]]:
    """Every step the session's clock timed, one dict per step (the columns of
    ``capture.step_clock``; see diagnose.capture.steps)."""
    clock = cap.get("step_clock") if isinstance(cap, dict) else None
    if not isinstance(clock, dict):
        return []
    phase, ms = clock.get("phase") or [], clock.get("ms") or []
    if len(phase) != len(ms):
        return []
    cols = {k: v for k, v in clock.items() if isinstance(v, list) and len(v) == len(ms)}
    rows = [{k: v[i] for k, v in cols.items()} for i in range(len(ms))]
    if "loader_starts" in cols:  # each step's place after the last epoch's start
        since = None
        for r in rows:
            since = 0 if as_int(r.get("loader_starts")) else (
                None if since is None else since + 1)
            r["since_start"] = since
    return rows


def _unprofiled_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps that count as unprofiled: ``wait`` and ``after`` ones. Left out: the run's
    first step (one-time costs: workers starting, lazy init) and the ``settle`` steps just
    after the window (an older capture without them: the first after the window)."""
    settled = any(r.get("phase") == "settle" for r in rows)
    first_after = None if settled else next(
        (i for i, r in enumerate(rows) if r.get("phase") == "after"), None)
    return [r for i, r in enumerate(rows)
            if i > 0 and i != first_after and r.get("phase") in ("wait", "after")
            and as_number(r.get("ms"), finite=False) is not None]


def device_pace_ms(cap: Any) -> float | None:
    """The ``after`` block's time over its steps, its drain included, where the host ran
    ahead of the device (the drain longer than :data:`DEVICE_PACED_STEPS` of its median
    steps): the pace the job keeps once its launch queue is full, which the host's own
    steps, launches only, understate. None where the block kept up with its device, or
    had no drain (a CPU run, an older capture)."""
    drain = as_number(cap.get("step_clock_drain_ms"), finite=False) if isinstance(
        cap, dict) else None
    after = [float(r["ms"]) for r in _unprofiled_rows(_clock_rows(cap))
             if r.get("phase") == "after"]
    if drain is None or not after or drain <= DEVICE_PACED_STEPS * statistics.median(after):
        return None
    return (sum(after) + drain) / len(after)


def free_rows(cap: Any) -> list[dict[str, Any]]:
    """The unprofiled steps the metrics use: :func:`_unprofiled_rows`, or where the job ran
    at the device's pace (:func:`device_pace_ms`), the ``after`` block's steps with none
    shorter than that pace (the steps before the window had no drain: host launches only)."""
    rows = _unprofiled_rows(_clock_rows(cap))
    pace = device_pace_ms(cap)
    if pace is None:
        return rows
    return [{**r, "ms": max(float(r["ms"]), pace)} for r in rows if r.get("phase") == "after"]


def unprofiled_step_ms(context: Any) -> list[float]:
    """Each unprofiled step's time (ms) by the session's own clock, in the order run, from a
    run's context.json (``[]`` where the capture timed none, e.g. a saved trace); at the
    device's pace where the host ran ahead of it (:func:`device_pace_ms`)."""
    cap = context.get("capture") if isinstance(context, dict) else None
    return [float(r["ms"]) for r in free_rows(cap)]


def _mean_error(xs: list[float]) -> float | None:
    """The standard error of ``xs``' mean over the mean; None under two steps."""
    if len(xs) < 2 or statistics.fmean(xs) <= 0:
        return None
    return round(statistics.stdev(xs) / statistics.fmean(xs) / math.sqrt(len(xs)), 4)


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty list (numpy's default)."""
    return float(np.quantile(xs, q))


def _full_gc_spacing(free: list[dict[str, Any]]) -> float | None:
    """Steps between full collections after the window, where it saw GC_FULL_SPACED or
    more: (last - first) / (count - 1) over the contiguous steps after the window. A full
    collection comes every so many allocations, so at a steady cadence in a steady loop; a
    few dozen timed steps hold only a few of them, so their count is off by one as often
    as not, while their spacing is off by about a step."""
    after = [r for r in free if r.get("phase") == "after"]
    at = [i for i, r in enumerate(after) for _ in range(as_int(r.get("gc_full")) or 0)]
    if len(at) < GC_FULL_SPACED or at[-1] <= at[0]:
        return None
    spacing = (at[-1] - at[0]) / (len(at) - 1)
    # a cadence goes on: collections in a burst (garbage of the profiler's teardown,
    # collected over the first steps after the window) and then none for longer than
    # their spacing says are no cadence; their count over the steps stands
    if len(after) - 1 - at[-1] > 2 * spacing + 1:
        return None
    return spacing


class StepMeans:
    """Per-step means of the clock's columns over the unprofiled steps, with full
    collections counted at their spacing (:func:`_full_gc_spacing`) where it is known: a
    column's mean over the steps without one, plus its mean excess in the steps with one
    (per collection) over the spacing. Every figure of a step's time (the step, the
    loader's fetch and collate, the collector's pauses) is then of the same steady step:
    the one a prediction starts from. Where the spacing is not known (or every step held
    a full collection), the plain mean of the steps."""

    def __init__(self, free: list[dict[str, Any]]) -> None:
        self.free = free
        self.full = [as_int(r.get("gc_full")) or 0 for r in free]
        self.spacing = _full_gc_spacing(free) if 0 in self.full else None

    def __call__(self, col: str) -> float | None:
        """The mean of ``col`` per step (None counted as 0); None where a step lacks it."""
        vals = [as_number(r.get(col), finite=False) for r in self.free]
        if not vals or any(v is None for v in vals):
            return None
        xs = [v or 0.0 for v in vals]
        if self.spacing is None:
            return statistics.fmean(xs)
        clean = statistics.fmean([x for x, n in zip(xs, self.full, strict=True) if n == 0])
        excess = sum(x - clean for x, n in zip(xs, self.full, strict=True) if n > 0)
        return clean + excess / sum(self.full) / self.spacing


def _gc_metrics(free: list[dict[str, Any]], means: StepMeans) -> dict[str, object]:
    """The collector's pauses per unprofiled step (the clock's gc columns, at the full
    collections' spacing where it is known: :class:`StepMeans`)."""
    pauses = [as_number(r.get("gc_ms"), finite=False) or 0.0 for r in free]
    out: dict[str, object] = {
        "gc_full_collections": sum(means.full),
        "gc_pause_max_ms": round(max(pauses), 4),
        "gc_full_every_steps": None if means.spacing is None else round(means.spacing, 3)}
    for name, col in (("gc_pause_ms", "gc_ms"), ("gc_pause_loader_ms", "gc_loader_ms"),
                      ("gc_pause_full_ms", "gc_full_ms"),
                      ("gc_pause_full_loader_ms", "gc_full_loader_ms")):
        v = means(col)
        if v is not None:
            out[name] = round(v, 4)
    step, gc_ms = means("ms"), means("gc_ms")
    out["gc_pause_share"] = (round(gc_ms / step, 4) if gc_ms is not None and step
                             else None)
    return out


def _by_starts(free: list[dict[str, Any]]
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(the steps that began no epoch, those that did) by the clock's ``loader_starts``;
    None where a step lacks the column."""
    starts = [as_int(r.get("loader_starts")) for r in free]
    if any(n is None for n in starts):
        return None
    return ([r for r, n in zip(free, starts, strict=True) if not n],
            [r for r, n in zip(free, starts, strict=True) if n])


def _steady_rows(rows: list[dict[str, Any]], cap: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``rows`` less the steps that began an epoch and the k after each (``since_start``
    up to k, :func:`_start_workers`: the new workers hand over their first batches and the
    fork's copies are paid there, which the epoch's start is modelled with); all of
    ``rows`` where the clock has no ``loader_starts`` column."""
    k = _start_workers(cap) or 0
    return [r for r in rows if (at := r.get("since_start")) is None or at > k]


def _start_workers(cap: Mapping[str, Any]) -> int | None:
    """The workers each epoch's start forked (the median over the clock's
    ``capture.loader_starts``); None where none was recorded."""
    starts = cap.get("loader_starts")
    workers = sorted(w for s in starts if isinstance(s, Mapping)
                     and (w := as_int(s.get("workers")))) if isinstance(starts, list) else []
    return workers[len(workers) // 2] if workers else None


def _extra_calls(free: list[dict[str, Any]]) -> dict[str, object]:
    """The steps that called the model more often than the median step, and how much longer
    they took than the median of the others: a loop's periodic extra work (an evaluation
    every few steps), which spreads the step times on a quiet machine too."""
    calls = [as_int(r.get("forwards")) for r in free]
    if not calls or any(c is None for c in calls):
        return {}
    usual = statistics.median_low([c or 0 for c in calls])
    more = [float(r["ms"]) for r, c in zip(free, calls, strict=True) if (c or 0) > usual]
    rest = [float(r["ms"]) for r, c in zip(free, calls, strict=True) if (c or 0) <= usual]
    if not more or not rest:
        return {"step_extra_calls_steps": 0, "step_extra_calls_ms": None}
    return {"step_extra_calls_steps": len(more),
            "step_extra_calls_ms": round(statistics.mean(more) - statistics.median(rest), 3)}


def _steady_share(free: list[dict[str, Any]]) -> float | None:
    """The loader wait's share of the unprofiled steps that began no epoch: the
    steady-state wait, over many more steps than the profiled window and without the
    profiler's cost in them (None where the clock has no ``loader_starts``, or times fewer
    than MIN_CLOCK_STEPS such steps)."""
    split = _by_starts(free)
    if split is None:
        return None
    steady = split[0]
    total = sum(float(r["ms"]) for r in steady)
    if len(steady) < MIN_CLOCK_STEPS or total <= 0:
        return None
    return round(sum(as_number(r.get("dataloader_ms"), finite=False) or 0.0
                     for r in steady) / total, 4)


def _epoch_metrics(free: list[dict[str, Any]], cap: Mapping[str, Any]) -> dict[str, object]:
    """The steady steps' mean and an epoch's start beyond a steady step
    (``step_time_steady_mean_ms``, ``dataloader_epoch_boundary_ms``, the loop's own work
    between epochs apart: ``dataloader_epoch_gap_ms``), and the steps just
    after the start beyond it (:func:`_after_start_ms`), where the unprofiled steps hold
    both kinds (the clock's ``loader_starts`` column); {} otherwise."""
    split = _by_starts(free)
    if split is None or not split[0] or not split[1]:
        return {}
    steady, boundary = split
    mid = statistics.median(float(r["ms"]) for r in steady)
    gaps = [as_number(r.get("epoch_gap_ms"), finite=False) or 0.0 for r in boundary]
    return {"step_time_steady_mean_ms": round(StepMeans(steady)("ms") or 0.0, 3),
            "dataloader_epoch_boundary_ms": round(max(statistics.median(
                float(r["ms"]) - g for r, g in zip(boundary, gaps, strict=True)) - mid,
                0.0), 3),
            "dataloader_epoch_gap_ms": round(statistics.median(gaps), 3),
            "dataloader_epoch_after_ms": _after_start_ms(cap, mid)}


def _after_start_ms(cap: Mapping[str, Any], mid: float) -> float | None:
    """The k steps after each epoch's start beyond the steady median ``mid`` (ms, summed
    over the k; each step's median over the epochs), k the workers each start forked
    (``capture.loader_starts``): each new worker hands over its first batch in them, while
    the new processes start up on the CPUs and the training process pays copy-on-write
    faults for the memory it writes after the fork. Only the steps :func:`free_rows` counts
    do (a position with none of them: None), at the device's pace where the job kept it;
    0 at least."""
    k = _start_workers(cap)
    if not k:
        return None
    rows = _clock_rows(cap)
    pace = device_pace_ms(cap)
    counted = {id(r) for r in _unprofiled_rows(rows)
               if pace is None or r.get("phase") == "after"}
    at: dict[int, list[float]] = {j: [] for j in range(1, k + 1)}
    for r in rows:
        pos = r.get("since_start")
        if pos is not None and 1 <= pos <= k and id(r) in counted:
            at[pos].append(max(float(r["ms"]), pace or 0.0))
    if not all(at.values()):
        return None
    return round(max(sum(statistics.median(v) for v in at.values()) - k * mid, 0.0), 3)


def clock_metrics(cap: Any) -> dict[str, object]:
    """Step times by the session's own clock: the profiled window's steps against the
    unprofiled ones around it, with their spread and whether the figure holds."""
    out: dict[str, object] = {}
    if not isinstance(cap, dict):
        return out
    out["window_complete"] = as_bool(cap.get("window_complete"))
    out["whole_steps"] = as_int(cap.get("whole_steps"))
    rows = _clock_rows(cap)
    free = free_rows(cap)
    pace = device_pace_ms(cap)
    drain = as_number(cap.get("step_clock_drain_ms"), finite=False)
    out["step_time_unprofiled_drain_ms"] = drain
    out["step_others_cpus_unprofiled"] = as_number(cap.get("after_others_cpus"))
    out["step_workers_cpus_unprofiled"] = as_number(cap.get("after_workers_cpus"))
    out["step_others_leave_out_ranks"] = as_int(cap.get("after_own_local_ranks"))
    out["step_time_device_paced"] = None if drain is None else pace is not None
    prof = [float(r["ms"]) for r in rows if r.get("phase") == "active" and as_number(r.get("ms"), finite=False)]
    times = [float(r["ms"]) for r in free]
    med = statistics.median(times) if times else None
    spread: float | None = None
    if med is not None:
        means = StepMeans(free)
        out["step_time_unprofiled_median_ms"] = round(med, 3)
        out["step_time_unprofiled_mean_ms"] = round(means("ms") or 0.0, 3)
        out["step_time_unprofiled_steps"] = len(times)
        out.update(_epoch_metrics(free, cap))
        base = ([r for r in free if not as_int(r.get("loader_starts"))]
                if "step_time_steady_mean_ms" in out else free)
        out["step_time_unprofiled_mean_error"] = _mean_error([float(r["ms"]) for r in base])
        if means("gc_ms") is not None:
            out.update(_gc_metrics(free, means))
        # the steps after the window when there are enough: in the first ones worker
        # processes start and fill their queues, which the forward would pay for
        late = [r for r in free if r.get("phase") == "after"]
        timed = late if len(late) >= MIN_CLOCK_STEPS else free
        fwd = [as_number(r.get("forward_ms"), finite=False) for r in timed]
        if fwd and all(f is not None for f in fwd):
            out["forward_unprofiled_ms"] = round(statistics.median(
                [f or 0.0 for f in fwd]), 4)
            steady = _steady_rows(timed, cap)
            if steady:
                out["forward_unprofiled_mean_ms"] = round(statistics.fmean(
                    float(as_number(r.get("forward_ms"), finite=False) or 0.0)
                    for r in steady), 4)
            # the backward's as the forward's contention reads the forward: the steady
            # steps' mean, else (no step steady) the median of every step timed
            bwd = [as_number(r.get("backward_ms"), finite=False) for r in steady or timed]
            if bwd and all(b is not None for b in bwd):
                got = [b or 0.0 for b in bwd]
                out["backward_unprofiled_mean_ms"] = round(
                    statistics.fmean(got) if steady else statistics.median(got), 4)
            calls = [as_int(r.get("forwards")) for r in timed]
            if all(c is not None for c in calls):
                out["forward_calls_unprofiled"] = statistics.median_low(
                    [c or 0 for c in calls])
        opt = means("optimizer_ms")
        if opt is not None:
            out["optimizer_unprofiled_ms"] = round(opt, 4)
        p10, p90 = _quantile(times, 0.1), _quantile(times, 0.9)
        out["step_time_unprofiled_p10_ms"] = round(p10, 3)
        out["step_time_unprofiled_p90_ms"] = round(p90, 3)
        spread = (p90 - p10) / med if med > 0 else None
        out["step_time_unprofiled_spread"] = None if spread is None else round(spread, 4)
        out.update(_extra_calls(free))
        # over the steps the other processes' CPUs were read over (after the window) where
        # the clock read them: a burst before the window is no one's that they can name
        held = [r for r in free if r.get("phase") == "after"] \
            if out["step_others_cpus_unprofiled"] is not None else free
        held = held or free
        starved = [as_number(r.get("cpu_wait_ms"), finite=False) for r in held]
        span = sum(float(r["ms"]) for r in held)
        if all(w is not None for w in starved) and span > 0:
            out["step_cpu_wait_unprofiled_share"] = round(
                sum(w or 0.0 for w in starved) / span, 4)
        waits = [as_number(r.get("dataloader_ms"), finite=False) for r in free]
        if all(w is not None for w in waits):
            total = sum(times)
            out["dataloader_wait_unprofiled_share"] = (
                round(sum(w or 0.0 for w in waits) / total, 4) if total > 0 else None)
            out["dataloader_wait_unprofiled_ms"] = round(statistics.median(
                [w or 0.0 for w in waits]), 3)
            out["dataloader_wait_unprofiled_max_ms"] = round(max(w or 0.0 for w in waits), 3)
            out["dataloader_wait_steady_share"] = _steady_share(free)
    if prof:
        out["step_time_profiled_clock_median_ms"] = round(statistics.median(prof), 3)
    if med is not None:
        # against a device-paced step the profiled host steps (launches) say nothing of
        # the profiler's cost
        ratio = (round(statistics.median(prof) / med, 3) if prof and med > 0 and pace is None
                 else None)
        reliable = (len(times) >= MIN_CLOCK_STEPS and isinstance(spread, float)
                    and spread <= UNRELIABLE_SPREAD
                    and (ratio is None or ratio >= MIN_OVERHEAD_RATIO))
        out["step_time_unprofiled_reliable"] = reliable
        # a ratio from an unreliable clock misleads ("the profiler made steps 0.54x as long")
        out["profiler_overhead_ratio"] = ratio if reliable else None
    return out
