"""The input pipeline: the loop's wait for batches split by cause (fetch, collate, pinning,
workers) from the step clock, and what the probes after the loop timed of the loader (a
worker's batch, start, stop, hand-over and send; the in-process batch; the batched fetch
and the work after it; an epoch's start as the loop met it)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ...values import as_int, as_number
from .fields import as_bool, get
from .step_clock import StepMeans, free_rows

CATALOG: dict[str, tuple[str, str]] = {
    "loader_given_other": (
        "bool", "what was given to diagnose as the loader is no torch DataLoader (nor a "
        "wrapper of one): a generator, a list; its batches are not timed apart (False: a "
        "DataLoader or nothing was given)"),
    "dataloader_batches_on_device": (
        "bool", "the dataset hands out batches already on the GPU (no worker process can "
        "make them; None: on the CPU, or not known)"),
    "input_worker_batch_ms": (
        "ms", "one batch made by a forked process set up as a DataLoader worker (one "
        "intra-op thread, warm), timed by the session after the loop"),
    "input_worker_batch_cpu_ms": (
        "ms", "of input_worker_batch_ms, the time the worker ran on a CPU or waited for one "
        "(its CPU clock and Linux schedstat's run-queue wait; else its CPU time); the rest it "
        "waited on files, the network or a sleep: loading that waits needs no CPU of its own, "
        "and more workers overlap it"),
    "input_worker_batch_cpus": (
        "CPUs", "the CPUs a worker's batch kept busy: the forked worker process's CPU time, "
        "every thread of it, over the batch's time (median of the in-turn batches); over 1 "
        "where a library's thread pool (numpy's BLAS, OpenMP, OpenCV) worked beside the "
        "worker's own thread"),
    "input_worker_start_ms": (
        "ms", "starting one DataLoader worker and taking its first batch (a copy of the "
        "loop's first), timed by the session after the loop"),
    "input_worker_fork_ms": (
        "ms", "of input_worker_start_ms, the iter() that forked the worker: the training "
        "process's own part of a worker's start, paid once per worker"),
    "input_worker_stop_ms": (
        "ms", "an epoch's end with that one worker: the next() that shuts it down and "
        "joins it, timed by the session after the loop"),
    "input_worker_fork_copy_ms": (
        "ms", "the model's forward and backward on the first batch right after a fork, "
        "beyond the same work unforked: the copies of the pages it writes (copy-on-write), "
        "paid by an epoch's first step where the workers are forked every epoch; timed by "
        "the session after the loop, 0 where the loader's workers do not fork"),
    "input_worker_fork_copy_ms_per_mib": (
        "ms", "what writing a MiB written before a fork costs after it, beyond the same "
        "write unforked (on torch's threads): the price of the optimizer's writes to the "
        "parameters and its state after an epoch's fork"),
    "input_worker_fork_copy_ms_per_mib_1thread": (
        "ms", "input_worker_fork_copy_ms_per_mib written from one thread: a page fault in a "
        "process whose other threads run flushes their CPUs' view of the page, which one "
        "thread alone does not pay"),
    "dataloader_start_ms": (
        "ms", "an epoch's start as the loop waits for it, with worker processes: iter() "
        "(the workers starting) plus the wait for the first batch (median over the new "
        "iterators the session saw)"),
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
        "runs it so, timed after the loop for an in-process loader (the median of its "
        "rounds; None where the dataset cannot do that)"),
    "input_batched_fetch_per_sample_ms": (
        "ms", "the same batches fetched as the loader does (a __getitem__ a sample, then "
        "collated), timed in turn with input_batched_fetch_ms (the median of its rounds): "
        "the two at one pace"),
    "input_batched_fetch_work_ratio": (
        "ratio", "the model's forward and backward timed right after a batch fetched a "
        "sample at a time, over the same right after a batched fetch, in turn after the loop "
        "(the median of the rounds' ratios; CPU models on more than one thread): a long "
        "single-threaded load leaves torch's thread pool asleep, and the ops after it pay "
        "for waking it"),
    "input_batched_fetch_work_noise_rel": (
        "ratio", "the relative noise of input_batched_fetch_work_ratio (the standard error "
        "of its rounds' medians): the batched fetch's prediction is made at both its ends"),
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
    "dataloader_epoch_start_ms": (
        "ms", "what an epoch's start cost the loop beyond steady steps: the step that held "
        "it (dataloader_epoch_boundary_ms) and the steps after it until each new worker "
        "handed over its first batch (dataloader_epoch_after_ms, where timed)"),
    "dataloader_epoch_start_per_step_ms": (
        "ms", "an epoch's start beyond steady steps (dataloader_epoch_start_ms) spread "
        "over the epoch's batches, where the workers start again each epoch (not "
        "persistent); None without workers, with persistent ones, or where the clock saw "
        "no epoch start"),
    "dataloader_epoch_start_share": (
        "fraction", "dataloader_epoch_start_per_step_ms / (the steady unprofiled step + it + "
        "the loop's work between epochs a step, dataloader_epoch_gap_ms / the epoch's steps): "
        "the share of the job's mean step its epochs' starts cost, by the clock's steps "
        "(whether or not the profiled window held one)"),
}


#: a worker set up as torch sets one up runs its batch on one thread, which keeps at most
#: one CPU busy (the interpreter's own housekeeping adds a few %): a quarter of a CPU
#: beyond that is another thread's work, a library's pool (numpy's BLAS, OpenMP, OpenCV)
WORKER_POOL_CPUS = 1.25


def worker_pool(m: Mapping[str, object]) -> str | None:
    """Where a DataLoader worker's batch keeps :data:`WORKER_POOL_CPUS` or more CPUs busy
    (``input_worker_batch_cpus``): a thread pool works in every worker beside its own
    thread, the words that say so; else None."""
    cpus = m.get("input_worker_batch_cpus")
    if not isinstance(cpus, float) or cpus < WORKER_POOL_CPUS:
        return None
    return f"a worker's batch kept {cpus:.1f} CPUs busy: a thread pool works in each worker"


def loading_metrics(ctx: dict[str, Any]) -> dict[str, object]:
    """The :data:`CATALOG` names from a context dict (:func:`input_by_cause` for the
    wait's causes)."""
    out: dict[str, object] = {}
    out["dataloader_batches_on_device"] = as_bool(get(ctx, "dataloader", "batches_on_device"))
    other = get(ctx, "capture", "loader_given_other")
    out["loader_given_other"] = isinstance(other, str) and bool(other)
    for name, key in (("input_batched_fetch_ms", "batched_fetch_ms"),
                      ("input_batched_fetch_per_sample_ms", "batched_fetch_per_sample_ms"),
                      ("input_worker_handover_ms", "worker_handover_ms"),
                      ("input_worker_send_ms", "worker_send_ms"),
                      ("input_inprocess_batch_ms", "inprocess_batch_ms"),
                      ("input_worker_batch_ms", "worker_batch_ms"),
                      ("input_worker_batch_cpu_ms", "worker_batch_cpu_ms"),
                      ("input_worker_batch_cpus", "worker_batch_cpus"),
                      ("input_worker_start_ms", "worker_start_ms"),
                      ("input_worker_fork_ms", "worker_fork_ms"),
                      ("input_worker_stop_ms", "worker_stop_ms")):
        out[name] = as_number(get(ctx, "dataloader", key), finite=False)
    for name, key in (("input_worker_fork_copy_ms", "work_ms"),
                      ("input_worker_fork_copy_ms_per_mib", "per_mib_ms"),
                      ("input_worker_fork_copy_ms_per_mib_1thread", "per_mib_1thread_ms")):
        out[name] = as_number(get(ctx, "dataloader", "fork_copy", key))
    out["input_batched_fetch_work_ratio"] = as_number(
        get(ctx, "dataloader", "work_after_fetch", "ratio"), finite=False)
    noise = as_number(get(ctx, "dataloader", "work_after_fetch", "noise"))
    out["input_batched_fetch_work_noise_rel"] = noise if noise is not None and noise >= 0 \
        else None
    starts = get(ctx, "capture", "loader_starts")
    if isinstance(starts, list):
        waits = [a + b for r in starts if isinstance(r, dict) and (as_int(r.get("workers")) or 0)
                 and (a := as_number(r.get("iter_ms"))) is not None
                 and (b := as_number(r.get("first_wait_ms"))) is not None]
        if waits:
            out["dataloader_start_ms"] = round(statistics.median(waits), 4)
    out.update(input_by_cause(get(ctx, "capture"), get(ctx, "dataloader")))
    return out


def epoch_start_metrics(out: dict[str, object]) -> dict[str, object]:
    """What the epochs' starts cost the job's mean step, from the settings' and the clock's
    metrics in ``out``: an epoch's start beyond steady steps (the step that held it and
    the steps after it until each new worker's first batch) over the epoch's batches,
    where the loader starts its workers again each epoch."""
    k, n = as_int(out.get("dataloader_num_workers")), as_int(out.get("dataloader_epoch_batches"))
    boundary = as_number(out.get("dataloader_epoch_boundary_ms"))
    steady = as_number(out.get("step_time_steady_mean_ms"))
    if (not k or k <= 0 or out.get("dataloader_persistent_workers") is True or not n
            or n <= 0 or boundary is None or steady is None):
        return {}
    start = boundary + (as_number(out.get("dataloader_epoch_after_ms")) or 0.0)
    per_step = start / n
    mean = steady + per_step + (as_number(out.get("dataloader_epoch_gap_ms")) or 0.0) / n
    return {"dataloader_epoch_start_ms": round(start, 3),
            "dataloader_epoch_start_per_step_ms": round(per_step, 4),
            "dataloader_epoch_start_share": round(per_step / mean, 4) if mean > 0 else None}


def input_by_cause(cap: Any, loader: Any) -> dict[str, object]:
    """The DataLoader wait of the unprofiled steps split by cause (ms per step and share of
    the step): fetch and collate (in-process, timed around the loader's pieces), pinning
    (the rest of an in-process wait when pin_memory is on), and the wait for worker
    processes. A cause the capture could not see is None, never 0."""
    out: dict[str, object] = {}
    free = free_rows(cap)
    if not free:
        return out
    # means per step: a pause that hits some fetches (garbage collection) is their cost
    per_step = StepMeans(free)
    step = per_step("ms") or 0.0

    nw = as_int(get(loader, "num_workers"))
    fetch, collate, wait = per_step("fetch_ms"), per_step("collate_ms"), per_step(
        "dataloader_ms")
    pin = None
    if (fetch is not None and collate is not None and wait is not None
            and as_bool(get(loader, "pin_memory"))):
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
