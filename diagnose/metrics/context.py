"""Metrics from a run's ``context.json`` (written by capture; see diagnose.capture.runinfo).

Flat names rules can use next to the trace metrics, e.g. ``dataloader_num_workers
== 0 and dataloader_wait_frac > 0.4``. Every value that the context does not
state is None (rule "not evaluated"), never a default.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ..values import as_int, as_number

CATALOG: dict[str, tuple[str, str]] = {
    "dataloader_num_workers": (
        "count",
        "DataLoader num_workers (0: batches are loaded in the training process)",
    ),
    "dataloader_pin_memory": ("bool", "DataLoader pin_memory"),
    "dataloader_batches_on_device": (
        "bool", "the dataset hands out batches already on the GPU (no worker process can "
        "make them; None: on the CPU, or not known)"),
    "dataloader_batch_size": (
        "samples",
        "DataLoader batch_size (None with a custom batch_sampler)",
    ),
    "dataloader_persistent_workers": ("bool", "DataLoader persistent_workers"),
    "dataloader_epoch_batches": ("batches", "len(loader): the batches of one epoch"),
    "input_worker_batch_ms": (
        "ms", "one batch made by a forked process set up as a DataLoader worker (one "
        "intra-op thread, warm), timed by the session after the loop"),
    "input_worker_start_ms": (
        "ms", "starting one DataLoader worker and taking its first batch (a copy of the "
        "loop's first), timed by the session after the loop"),
    "input_worker_fork_ms": (
        "ms", "of input_worker_start_ms, the iter() that forked the worker: the training "
        "process's own part of a worker's start, paid once per worker"),
    "input_worker_stop_ms": (
        "ms", "an epoch's end with that one worker: the next() that shuts it down and "
        "joins it, timed by the session after the loop"),
    "dataloader_start_ms": (
        "ms", "an epoch's start as the loop waits for it, with worker processes: iter() "
        "(the workers starting) plus the wait for the first batch (median over the new "
        "iterators the session saw)"),
    "dataloader_prefetch_factor": (
        "batches",
        "DataLoader prefetch_factor per worker (None when num_workers=0)",
    ),
    "cudnn_benchmark": ("bool", "torch.backends.cudnn.benchmark at capture time"),
    "optimizer_class": ("name", "class of the optimizer that stepped the model (e.g. 'AdamW')"),
    "optimizer_foreach": (
        "bool",
        "the optimizer runs foreach (multi-tensor) kernels, as torch resolves it",
    ),
    "optimizer_fused": ("bool", "the optimizer runs a fused kernel"),
    "torch_num_threads": ("count", "torch.get_num_threads() in the training process"),
    "cpu_count": ("count", "CPUs the training process may use (os.sched_getaffinity)"),
    "cpu_capacity": (
        "CPUs", "CPUs' worth of work the usable CPUs did at once, timed after the loop: one "
        "worker-like process per CPU making the loader's batches against one alone (a "
        "Python loop where batches cannot be made so) and a Python loop's, the most of five "
        "timings seconds apart; under cpu_count where CPUs share a core (SMT siblings) or the host is busy"),
    "cpu_capacity_min": (
        "CPUs", "the least of the CPUs' capacity timings after the loop: the predictions "
        "that move CPU work are made there too (their range's slow end)"),
    "cpu_capacity_max": ("CPUs", "the most of the CPUs' capacity timings after the loop"),
    "model_param_count": ("count", "number of parameters (elements) of the model"),
    "model_param_dtype": ("name", "dtype holding most of the model's parameters (e.g. 'float32')"),
    "model_device": (
        "name",
        "device of the model's parameters ('cuda:0', 'cpu'; 'mixed' if several)",
    ),
    "model_is_dataparallel": ("bool", "the model is wrapped in nn.DataParallel"),
    "model_has_conv": ("bool", "the model has convolution layers"),
    "torch_version": ("name", "torch.__version__ of the captured run"),
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
    "gc_frozen_objects": (
        "count", "objects gc.freeze() had moved out of the collector's reach (0: none)"),
    "forward_unprofiled_ms": (
        "ms", "the model's forward calls per unprofiled step (median of the steps after the "
        "window when there are 5 or more, else of all unprofiled ones; module hooks time it)"),
    "optimizer_unprofiled_ms": (
        "ms", "the run's optimizer.step() per unprofiled step (the mean, full collections "
        "at their spacing; its step hooks time it)"),
    "forward_quiet_ms": (
        "ms", "one forward on the first batch, on torch's threads, timed after the loop "
        "(nothing else running; CPU models with more than one thread only)"),
    "model_work_quiet_ms": (
        "ms", "the same batch's forward and backward on torch's threads, after the loop"),
    "model_work_one_thread_ms": (
        "ms", "the same forward and backward on one intra-op thread"),
    "threads_one_thread_ratio": (
        "ratio", "model_work_one_thread_ms / model_work_quiet_ms: what one thread costs the "
        "model's ops (1.0: they do not scale with threads)"),
    "threads_busy_ratio_1": (
        "ratio", "the model's forward and backward on torch's threads beside one busy process "
        "more than the CPUs those threads leave, over the same work alone (after the loop; "
        "what a busy DataLoader worker costs torch's parallel ops)"),
    "threads_busy_ratio_2": (
        "ratio", "the same beside two busy processes more than the CPUs torch's threads "
        "leave"),
    "forward_contention": (
        "ratio", "forward_unprofiled_ms / forward_quiet_ms: how much slower the loop's "
        "forward ran than the same forward alone (workers or other processes on the cores)"),
    "step_time_unprofiled_p10_ms": (
        "ms", "10th percentile of the unprofiled steps' times (the spread's low end)"),
    "step_time_unprofiled_p90_ms": (
        "ms", "90th percentile of the unprofiled steps' times (the spread's high end)"),
    "step_time_unprofiled_spread": (
        "fraction",
        "(p90 - p10) / median of the unprofiled steps: how much they vary (a busy machine, "
        "uneven steps); above 0.5, or with fewer than 5 steps, the median is unreliable",
    ),
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
        "fraction",
        "share of the unprofiled steps' time the training thread waited, runnable, for a CPU "
        "other processes held (Linux schedstat): how busy the machine was while timing",
    ),
    "dataloader_wait_unprofiled_ms": (
        "ms", "time per unprofiled step the loop waited for its next batch (session's clock)"),
    "input_fetch_ms": (
        "ms",
        "mean per unprofiled step (pauses such as garbage collection that hit it count): the "
        "dataset's reads (__getitem__ per sample, or __getitems__) of "
        "an in-process loader (num_workers=0); None with workers (they fetch elsewhere)",
    ),
    "input_fetch_share": ("fraction", "input_fetch_ms / the mean unprofiled step time"),
    "input_collate_ms": (
        "ms", "mean per unprofiled step: the collate_fn of an in-process loader (None with "
        "workers)"),
    "input_collate_share": ("fraction", "input_collate_ms / the mean unprofiled step time"),
    "input_loading_median_ms": (
        "ms", "an in-process loader's fetch and collate of one batch, median over the "
        "unprofiled steps (a pause that hits a few of them, such as a full garbage "
        "collection, left out): the loop's pace for the timings made beside the loop"),
    "input_pin_ms": (
        "ms",
        "mean per unprofiled step: the rest of an in-process loader's wait besides fetch and collate "
        "(pinning the batch, and the sampler) when pin_memory is on; None otherwise",
    ),
    "input_pin_share": ("fraction", "input_pin_ms / the unprofiled step time"),
    "input_worker_wait_ms": (
        "ms",
        "mean per unprofiled step: the wait for batches from worker processes (their fetch and "
        "collate not yet done, plus the transfer to this process); None in-process",
    ),
    "input_worker_wait_share": ("fraction", "input_worker_wait_ms / the unprofiled step time"),
    "input_batch_bytes": (
        "bytes", "median bytes of the tensors in one batch the loader hands out"),
    "dataloader_dataset_getitems": (
        "bool", "the dataset has __getitems__ (the loader fetches a batch with one call)"),
    "dataloader_dataset_tensor_indexable": (
        "bool", "the loader's batches come out the same from one dataset[indices] call "
        "(a TensorDataset with the default collate)"),
    "input_worker_handover_ms": (
        "ms", "receiving one batch like the run's from a DataLoader worker process, timed "
        "after the loop with a one-worker loader (shared memory, file descriptors, "
        "unpickling): what each batch costs the training process with workers"),
    "input_worker_send_ms": (
        "ms", "the CPU time a DataLoader worker's threads spend sending each batch (pickling "
        "it, handing over its tensors' file descriptors), beside making the next: timed "
        "after the loop with a real one-worker loader over the run's dataset (Linux)"),
    "input_inprocess_batch_ms": (
        "ms", "one batch made in the training process (the dataset's items and the "
        "collate_fn), timed after the loop with nothing else running: with workers, what "
        "fewer would cost; without, the pace of the timings after the loop against the "
        "loop's own fetch and collate"),
    "input_batched_fetch_ms": (
        "ms", "one batch fetched with a single dataset[indices] call through a loader that "
        "runs it so, timed before the loop (median of 9; None where the dataset cannot do "
        "that)"),
    "input_batched_fetch_per_sample_ms": (
        "ms", "the same batches fetched as the loader does (a __getitem__ a sample, then "
        "collated), timed in turn with input_batched_fetch_ms (median of 9): the two at "
        "one pace"),
    "input_batched_fetch_work_ratio": (
        "ratio", "the model's forward and backward timed right after a batch fetched a "
        "sample at a time, over the same right after a batched fetch, in turn after the loop "
        "(the median of the rounds' ratios; CPU models on more than one thread): a long "
        "single-threaded load leaves torch's thread pool asleep, and the ops after it pay "
        "for waking it"),
    "window_complete": (
        "bool",
        "the profiled window ran every step of its schedule (False: the loop ended first)",
    ),
    "whole_steps": ("count", "whole steps in the profiled window (a cut-short one has fewer)"),
    "oom": (
        "bool",
        "the run ended in an out-of-memory error (False when it did not; None: unknown)",
    ),
    "oom_requested_bytes": ("bytes", "size of the allocation that failed"),
    "oom_in_use_bytes": ("bytes", "memory allocated by PyTorch on the device when it failed"),
    "oom_total_bytes": ("bytes", "capacity of the device that ran out (None on CPU)"),
    "oom_device": ("name", "device that ran out of memory ('cuda:0', 'cpu')"),
}


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def context_metrics(ctx: dict[str, Any] | None) -> dict[str, object]:
    """The CATALOG names from a context dict; all None when there is no context."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    if not isinstance(ctx, dict):
        return out
    out["dataloader_num_workers"] = as_int(_get(ctx, "dataloader", "num_workers"))
    out["dataloader_pin_memory"] = _bool(_get(ctx, "dataloader", "pin_memory"))
    out["dataloader_batches_on_device"] = _bool(_get(ctx, "dataloader", "batches_on_device"))
    out["dataloader_batch_size"] = as_int(_get(ctx, "dataloader", "batch_size"))
    out["dataloader_persistent_workers"] = _bool(_get(ctx, "dataloader", "persistent_workers"))
    out["dataloader_prefetch_factor"] = as_int(_get(ctx, "dataloader", "prefetch_factor"))
    out["dataloader_dataset_getitems"] = _bool(_get(ctx, "dataloader", "dataset_getitems"))
    out["dataloader_dataset_tensor_indexable"] = _bool(
        _get(ctx, "dataloader", "dataset_tensor_indexable"))
    out["input_batched_fetch_ms"] = as_number(_get(ctx, "dataloader", "batched_fetch_ms"), finite=False)
    out["input_batched_fetch_per_sample_ms"] = as_number(
        _get(ctx, "dataloader", "batched_fetch_per_sample_ms"), finite=False)
    out["input_batched_fetch_work_ratio"] = as_number(
        _get(ctx, "dataloader", "work_after_fetch", "ratio"), finite=False)
    out["input_worker_handover_ms"] = as_number(
        _get(ctx, "dataloader", "worker_handover_ms"), finite=False)
    out["input_worker_send_ms"] = as_number(
        _get(ctx, "dataloader", "worker_send_ms"), finite=False)
    out["input_inprocess_batch_ms"] = as_number(
        _get(ctx, "dataloader", "inprocess_batch_ms"), finite=False)
    out["dataloader_epoch_batches"] = as_int(_get(ctx, "dataloader", "len"))
    out["input_worker_batch_ms"] = as_number(
        _get(ctx, "dataloader", "worker_batch_ms"), finite=False)
    out["input_worker_start_ms"] = as_number(
        _get(ctx, "dataloader", "worker_start_ms"), finite=False)
    out["input_worker_fork_ms"] = as_number(
        _get(ctx, "dataloader", "worker_fork_ms"), finite=False)
    out["input_worker_stop_ms"] = as_number(
        _get(ctx, "dataloader", "worker_stop_ms"), finite=False)
    starts = _get(ctx, "capture", "loader_starts")
    if isinstance(starts, list):
        waits = [a + b for r in starts if isinstance(r, dict) and (as_int(r.get("workers")) or 0)
                 and (a := as_number(r.get("iter_ms"))) is not None
                 and (b := as_number(r.get("first_wait_ms"))) is not None]
        if waits:
            out["dataloader_start_ms"] = round(statistics.median(waits), 4)
    out["cudnn_benchmark"] = _bool(ctx.get("cudnn_benchmark"))
    out["optimizer_class"] = _str(_get(ctx, "optimizer", "class"))
    foreach = _get(ctx, "optimizer", "foreach_effective")
    out["optimizer_foreach"] = _bool(
        foreach if foreach is not None else _get(ctx, "optimizer", "foreach")
    )
    fused = _get(ctx, "optimizer", "fused_effective")
    out["optimizer_fused"] = _bool(fused if fused is not None else _get(ctx, "optimizer", "fused"))
    out["torch_num_threads"] = as_int(ctx.get("torch_num_threads"))
    out["gc_frozen_objects"] = as_int(ctx.get("gc_frozen_objects"))
    out["cpu_count"] = as_int(ctx.get("cpu_count"))
    out["cpu_capacity"] = as_number(ctx.get("cpu_capacity"))
    span = ctx.get("cpu_capacity_span")
    lo, hi = span if isinstance(span, list | tuple) and len(span) == 2 else (None, None)
    out["cpu_capacity_min"], out["cpu_capacity_max"] = as_number(lo), as_number(hi)
    out["model_param_count"] = as_int(_get(ctx, "model", "param_count"))
    out["model_param_dtype"] = _str(_get(ctx, "model", "param_dtype"))
    out["model_device"] = _str(_get(ctx, "model", "device"))
    out["model_is_dataparallel"] = _bool(_get(ctx, "model", "is_dataparallel"))
    out["model_has_conv"] = _bool(_get(ctx, "model", "has_conv"))
    out["torch_version"] = _str(ctx.get("torch_version"))
    out.update(_clock_metrics(_get(ctx, "capture")))
    out.update(input_by_cause(_get(ctx, "capture"), _get(ctx, "dataloader")))
    out.update(_cuda_memory(_get(ctx, "capture", "cuda_memory")))
    out.update(_forward_metrics(out, ctx.get("threads")))
    busy = ctx.get("threads_busy")
    ratios = busy.get("busy_ratio") if isinstance(busy, dict) else None
    for e in ("1", "2"):
        v = as_number(ratios.get(e)) if isinstance(ratios, dict) else None
        out[f"threads_busy_ratio_{e}"] = v if v is not None and v > 0 else None
    if "oom" in ctx:  # a capture always writes the key: null means the run did not OOM
        oom = ctx.get("oom")
        out["oom"] = isinstance(oom, dict)
        if isinstance(oom, dict):
            out["oom_requested_bytes"] = as_int(oom.get("requested_bytes"))
            out["oom_in_use_bytes"] = as_int(oom.get("in_use_bytes"))
            out["oom_total_bytes"] = as_int(oom.get("total_bytes"))
            out["oom_device"] = _str(oom.get("device"))
    return out


#: above this (p90 - p10) / median, the unprofiled median is too noisy to trust
UNRELIABLE_SPREAD = 0.5
#: fewer unprofiled steps than this give no trustworthy median
MIN_CLOCK_STEPS = 5
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
    return [{k: v[i] for k, v in cols.items()} for i in range(len(ms))]


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


def _free_rows(cap: Any) -> list[dict[str, Any]]:
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
    return [float(r["ms"]) for r in _free_rows(cap)]


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty list (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _full_gc_spacing(free: list[dict[str, Any]]) -> float | None:
    """Steps between full collections after the window, where it saw GC_FULL_SPACED or
    more: (last - first) / (count - 1) over the contiguous steps after the window. A full
    collection comes every so many allocations, so every 5-8 steps of a steady loop (one
    run: 7, 7, 6, 6, 7, 5, 7, ...); a few dozen timed steps hold 3-5 of them, and their
    count is off by one as often as not, a share of the mean off by 20-30%, while their
    spacing is off by about a step over the spacings seen."""
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


def _clock_metrics(cap: Any) -> dict[str, object]:
    """Step times by the session's own clock: the profiled window's steps against the
    unprofiled ones around it, with their spread and whether the figure holds."""
    out: dict[str, object] = {}
    if not isinstance(cap, dict):
        return out
    out["window_complete"] = _bool(cap.get("window_complete"))
    out["whole_steps"] = as_int(cap.get("whole_steps"))
    rows = _clock_rows(cap)
    free = _free_rows(cap)
    pace = device_pace_ms(cap)
    drain = as_number(cap.get("step_clock_drain_ms"), finite=False)
    out["step_time_unprofiled_drain_ms"] = drain
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
        if means("gc_ms") is not None:
            out.update(_gc_metrics(free, means))
        # the steps after the window when there are enough: in the first ones worker
        # processes start and fill their queues, which the forward would pay for
        late = [r for r in free if r.get("phase") == "after"]
        fwd = [as_number(r.get("forward_ms"), finite=False)
               for r in (late if len(late) >= MIN_CLOCK_STEPS else free)]
        if fwd and all(f is not None for f in fwd):
            out["forward_unprofiled_ms"] = round(statistics.median(
                [f or 0.0 for f in fwd]), 4)
        opt = means("optimizer_ms")
        if opt is not None:
            out["optimizer_unprofiled_ms"] = round(opt, 4)
        p10, p90 = _quantile(times, 0.1), _quantile(times, 0.9)
        out["step_time_unprofiled_p10_ms"] = round(p10, 3)
        out["step_time_unprofiled_p90_ms"] = round(p90, 3)
        spread = (p90 - p10) / med if med > 0 else None
        out["step_time_unprofiled_spread"] = None if spread is None else round(spread, 4)
        starved = [as_number(r.get("cpu_wait_ms"), finite=False) for r in free]
        if all(w is not None for w in starved) and sum(times) > 0:
            out["step_cpu_wait_unprofiled_share"] = round(
                sum(w or 0.0 for w in starved) / sum(times), 4)
        waits = [as_number(r.get("dataloader_ms"), finite=False) for r in free]
        if all(w is not None for w in waits):
            total = sum(times)
            out["dataloader_wait_unprofiled_share"] = (
                round(sum(w or 0.0 for w in waits) / total, 4) if total > 0 else None)
            out["dataloader_wait_unprofiled_ms"] = round(statistics.median(
                [w or 0.0 for w in waits]), 3)
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


def _forward_metrics(m: dict[str, object], th: Any) -> dict[str, object]:
    """The forward's thread scaling and contention (diagnose.capture.threads)."""
    out: dict[str, object] = {}
    if not isinstance(th, dict):
        return out
    quiet = as_number(th.get("forward_ms"), finite=False)
    work = as_number(th.get("work_ms"), finite=False)
    one = as_number(th.get("work_1thread_ms"), finite=False)
    out["forward_quiet_ms"], out["model_work_quiet_ms"] = quiet, work
    out["model_work_one_thread_ms"] = one
    if work and work > 0 and one is not None:
        out["threads_one_thread_ratio"] = round(one / work, 4)
    if quiet and quiet > 0:
        loop = as_number(m.get("forward_unprofiled_ms"), finite=False)
        if loop is not None:
            out["forward_contention"] = round(loop / quiet, 4)
    return out


#: CPUs' worth of work by processes other than the run's under which a run with DataLoader
#: workers is taken to have waited for a CPU its own processes held, not a busy machine:
#: on the 2-vCPU development VM, captures of benchmarks/jobs/too_many_workers.py (six
#: workers on two CPUs) waited 22-32% of their steps with 0.0-0.40 CPUs of other work
#: beside them; a capture made while a test suite ran beside it, 44% with 1.08 CPUs
OTHERS_BUSY_CPUS = 0.5


def cpu_wait_holders(m: Mapping[str, object]) -> tuple[bool, str]:
    """Who held the CPUs the training thread waited for (``step_cpu_wait_unprofiled_share``):
    (whether the machine was busy with other work, the words that say who). A run with
    DataLoader workers beside less than :data:`OTHERS_BUSY_CPUS` of other processes' work
    (``host_cpu_others_cpus``) waited for its own processes: its workers and threads
    oversubscribe the CPUs, which is the run's doing, not the machine's."""
    others = m.get("host_cpu_others_cpus")
    workers = m.get("workers_count") or m.get("dataloader_num_workers")
    if (isinstance(others, float) and others < OTHERS_BUSY_CPUS and isinstance(workers, int)
            and workers > 0):
        return False, (f"this run's own processes held (its {workers} DataLoader workers "
                       f"beside it; other processes took {others:.2f} CPUs)")
    return True, "other processes held"


def clock_note(m: dict[str, object]) -> str | None:
    """What the report says when the unprofiled step time cannot be trusted, and how to get
    a better one (None when it can, or when there is none)."""
    if m.get("step_time_unprofiled_reliable") is not False:
        return None
    n, spread = m.get("step_time_unprofiled_steps"), m.get("step_time_unprofiled_spread")
    why = []
    if isinstance(n, int) and n < MIN_CLOCK_STEPS:
        why.append(f"only {n} step{'s' if n != 1 else ''} were timed")
    if isinstance(spread, float) and spread > UNRELIABLE_SPREAD:
        why.append(f"they vary widely (p10 {m.get('step_time_unprofiled_p10_ms')} ms, p90 "
                   f"{m.get('step_time_unprofiled_p90_ms')} ms, median "
                   f"{m.get('step_time_unprofiled_median_ms')} ms)")
    prof, free = m.get("step_time_profiled_clock_median_ms"), m.get(
        "step_time_unprofiled_median_ms")
    if isinstance(prof, float) and isinstance(free, float) and free > 0 and (
            prof / free < MIN_OVERHEAD_RATIO):
        why.append(f"the profiled steps came out faster ({prof} ms against {free} ms), which "
                   "a profiler cannot do: something else on the machine changed the pace")
    gc_share, gc_max = m.get("gc_pause_share"), m.get("gc_pause_max_ms")
    if isinstance(gc_share, float) and gc_share >= 0.03 and isinstance(gc_max, float):
        why.append(f"Python's garbage collector paused some of them (up to {gc_max:.0f} ms in "
                   "one step; see CF006)")
    busy = m.get("step_cpu_wait_unprofiled_share")
    elsewhere = True
    if isinstance(busy, float) and busy >= 0.05:
        elsewhere, holders = cpu_wait_holders(m)
        why.append(("the machine was busy: " if elsewhere else "")
                   + f"the training thread waited {busy:.0%} of these steps for a CPU "
                   + holders)
    return ("the step time without the profiler is unreliable: " + "; ".join(why or ["noisy"])
            + ". For a better figure, time more steps (diagnose(..., clock_steps=30))"
            + (" or run when the machine is less busy" if elsewhere else "")
            + "; the profiler's overhead is not stated")


def input_by_cause(cap: Any, loader: Any) -> dict[str, object]:
    """The DataLoader wait of the unprofiled steps split by cause (ms per step and share of
    the step): fetch and collate (in-process, timed around the loader's pieces), pinning
    (the rest of an in-process wait when pin_memory is on), and the wait for worker
    processes. A cause the capture could not see is None, never 0."""
    out: dict[str, object] = {}
    free = _free_rows(cap)
    if not free:
        return out
    # means per step: a pause that hits some fetches (garbage collection) is their cost
    per_step = StepMeans(free)
    step = per_step("ms") or 0.0

    nw = as_int(_get(loader, "num_workers"))
    fetch, collate, wait = per_step("fetch_ms"), per_step("collate_ms"), per_step(
        "dataloader_ms")
    pin = None
    if (fetch is not None and collate is not None and wait is not None
            and _bool(_get(loader, "pin_memory"))):
        pin = max(wait - fetch - collate, 0.0)
    workers = wait if nw is not None and nw > 0 else None
    for name, v in (("fetch", fetch), ("collate", collate), ("pin", pin),
                    ("worker_wait", workers)):
        out[f"input_{name}_ms"] = None if v is None else round(v, 3)
        out[f"input_{name}_share"] = None if v is None or step <= 0 else round(v / step, 4)
    sizes = [as_number(r.get("batch_bytes"), finite=False) for r in free]
    counts = [as_int(r.get("batches")) for r in free]
    loading = [(f + c) / n for f, c, n in zip(
        (as_number(r.get("fetch_ms"), finite=False) for r in free),
        (as_number(r.get("collate_ms"), finite=False) for r in free), counts, strict=True)
        if f is not None and c is not None and n is not None and n > 0]
    out["input_loading_median_ms"] = (round(statistics.median(loading), 4)
                                      if loading and (nw is None or nw == 0) else None)
    per_batch = [b / c for b, c in zip(sizes, counts, strict=True)
                 if b is not None and c is not None and c > 0]
    out["input_batch_bytes"] = int(statistics.median(per_batch)) if per_batch else None
    return out


def _cuda_memory(mem: Any) -> dict[str, object]:
    """The allocator's peaks read at the end of the window (a lean capture has no [memory]
    events): the same names the trace gives when it has them (the trace's values win)."""
    if not isinstance(mem, dict):
        return {}
    pa, pr, total = (as_int(mem.get(k)) for k in
                     ("peak_allocated_bytes", "peak_reserved_bytes", "total_bytes"))
    peak = pr if pr is not None else pa
    return {"gpu_mem_peak_allocated_bytes": pa, "gpu_mem_peak_reserved_bytes": pr,
            "gpu_mem_peak_frac": round(peak / total, 6) if peak is not None and total else None,
            "gpu_mem_frag_ratio": round(pr / pa, 3) if pr is not None and pa else None}
