"""An epoch's start and end for a loader whose workers are not persistent: what the loop
pays per epoch outside the profiled window (the workers forked and their first batches
made at ``iter()``, shut down and joined at the end), spread over the epoch's steps, and
what keeping them alive saves. Read by the worker fixes' predictions and transforms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .facts import Facts


def restart_saving(facts: Facts, k: int, wait_ms: float, batch_ms: float) -> float:
    """What persistent workers save an epoch (ms) where the clock saw the loop wait
    ``wait_ms`` beyond a steady step at the epoch's start, and k workers share the CPUs
    with torch's threads. CPU accounting over that wait: the CPUs (``cpu_count``) are free
    of training work; the k new workers' start-ups take k x (one start, less its
    hand-over: ``input_worker_start_ms``), and the rest of the CPU time makes batches
    ahead, ``batch_ms`` each, at most ``prefetch_factor`` a worker and at most the epoch's
    batches (``dataloader_epoch_batches``: no worker makes a batch the epoch does not
    have; its last one holds ``dataloader_last_batch_share`` of a full one's samples, and
    of its work). Persistent workers make those batches in the steps instead, beside the
    training on the same CPUs: their work over the CPUs comes back; the rest of the wait
    is saved."""
    n_cpus = max(1.0, float(facts.cpu_count or 1))
    one = facts.input_worker_start_ms
    each = max((one or 0.0) - (facts.input_worker_handover_ms or 0.0), 0.0)
    made = float(k * (facts.dataloader_prefetch_factor or 2))  # the most held ahead
    n = facts.dataloader_epoch_batches
    if n:
        # in full batches' work: the epoch's last batch, where made ahead, is short
        made = min(made, n * mean_batch_share(facts))
    room = made if one is None else (n_cpus * wait_ms - k * each) / max(batch_ms, 1e-6)
    ahead = max(min(1.0, made), min(made, room))
    return max(wait_ms - ahead * batch_ms / n_cpus, 0.0)


def mean_batch_share(facts: Facts) -> float:
    """An epoch's mean batch over a full one: (n - 1 + the last batch's share) / n over its
    ``dataloader_epoch_batches`` n, the last holding ``dataloader_last_batch_share`` of a
    full one's samples (and of its work: a batch is made sample by sample). 1 where either
    is not known. A batch timed full stands for the epoch's mean one by this factor."""
    n, last = facts.dataloader_epoch_batches, facts.dataloader_last_batch_share
    if not n or n < 1 or last is None or not 0 < last <= 1:
        return 1.0
    return (n - 1 + last) / n


def epoch_end_ms(facts: Facts, k: float) -> float:
    """What an epoch's end costs the loop with ``k`` workers, not persistent (ms): the
    loader shuts them down and joins them. One worker's, timed by the session after the
    loop (``input_worker_stop_ms``), k of them spread over the CPUs; 0 where not timed."""
    n_cpus = max(1.0, facts.cpu_count or 1.0)
    return (facts.input_worker_stop_ms or 0.0) * max(1.0, k / n_cpus)


def fork_copy_ms(facts: Facts, threads: int | None = None) -> float:
    """What the first steps after an epoch's forks pay for the memory they write (ms, once
    an epoch): every page a step writes is shared with the children and copied at its first
    write (copy-on-write). Where the loop's own steps were timed after a fork
    (``input_worker_fork_copy_loop_ms``), what they paid: the whole step's writes as the
    job makes them. Else as the session timed it after the loop: the model's forward and
    backward beyond the same work unforked (``input_worker_fork_copy_ms``), and the
    optimizer's writes, the parameters, gradients and optimizer state
    (``mem_model_states_bytes``), at the price of a MiB written after a fork
    (``input_worker_fork_copy_ms_per_mib``). On one intra-op thread (``threads``, where
    torch ran on more), all of it at the price of a MiB written from one thread over the
    price on torch's (``_1thread``: a fault in a process whose other threads run flushes
    their CPUs' view of the page). 0 where neither was timed (a model on a GPU: its memory
    is the device's); the work's part alone where the states or their price are not
    known."""
    per_mib, states = facts.input_worker_fork_copy_ms_per_mib, facts.mem_model_states_bytes
    work = facts.input_worker_fork_copy_ms
    if facts.input_worker_fork_copy_loop_ms is not None:
        copies = facts.input_worker_fork_copy_loop_ms
    elif work is None:
        return 0.0
    else:
        copies = work + (per_mib * states / 2**20 if per_mib is not None and states else 0.0)
    one = facts.input_worker_fork_copy_ms_per_mib_1thread
    if (threads == 1 and (facts.torch_num_threads or 1) > 1 and one is not None
            and per_mib is not None and per_mib > 0):
        copies *= min(1.0, one / per_mib)
    return copies


def run_epoch_ms(facts: Facts) -> float:
    """The run's own epoch start and end per step, as every prediction adds it to both
    sides: :func:`epoch_start_ms` of the run as it is; 0 where the clock's mean holds them
    already (:attr:`~.facts.Facts.epoch_in_clock`) or they are not known."""
    return 0.0 if facts.epoch_in_clock else epoch_start_ms(facts) or 0.0


def epoch_start_ms(facts: Facts, change: Mapping[str, Any] | None = None
                   ) -> float | None:
    """An epoch's start and end spread over its steps (ms per step), for the run's loader
    or with ``change`` made: a loader with worker processes (not persistent) starts them
    at every ``iter()`` and the loop waits for the first batch, and at the epoch's end it
    shuts them down and joins them, once per epoch (``dataloader_epoch_batches`` steps).
    0 without workers or with persistent ones; None where it is not known.

    The start: the run's own where the session saw one with these workers: the clock's
    step that held it beyond a steady step, end included
    (:attr:`~diagnose.stepmodel.facts.Facts.epoch_boundary_per_step_ms`), else the wait for
    its first batch (``dataloader_start_ms``) and the pages the first step after the forks
    copies (:func:`fork_copy_ms`; the clock's step holds those already). Else from the
    one worker the session started after the loop (``input_worker_start_ms``: the fork,
    ``input_worker_fork_ms``, then the child's start-up and the hand-over of a copy of a
    batch) and a worker's batch (``input_worker_batch_ms``): the training process forks its
    k workers one after
    another and only then sends the first batch's indices, and the children's start-up
    is CPU work too; the loop waits for the longest of: the forks and then a batch, one
    worker's start and batch, and every child's start-up and first batch (each worker
    makes one at once) over the CPUs; then the pages the first step copies
    (:func:`fork_copy_ms`, once: the forks all come before it). Without the fork timed,
    each start is taken whole, one after another (an upper bound). Where a worker's batch waits (files, the
    network: :attr:`~.facts.Facts.worker_batch_waits`), the forks (or the start-ups over
    the CPUs) and what the first batches cost beyond the steady pace (:func:`_fill_ms`).
    The end: :func:`epoch_end_ms`."""
    change = change or {}
    k = change.get("num_workers", facts.dataloader_num_workers)
    keep = change.get("persistent_workers", facts.dataloader_persistent_workers)
    if not isinstance(k, int | float) or k <= 0 or keep is True:
        return 0.0
    n = facts.dataloader_epoch_batches
    if not n or n <= 0:
        return None
    n_cpus = max(1.0, facts.cpu_count or 1.0)
    stop = epoch_end_ms(facts, k)
    if k == facts.dataloader_num_workers:
        clock = facts.epoch_boundary_per_step_ms  # the run's own, beyond a steady step
        if clock is not None:
            return clock
        if (seen := facts.dataloader_start_ms) is not None:  # the first step's copies after
            return (seen + fork_copy_ms(facts) + stop) / n
    one, batch = facts.input_worker_start_ms, facts.input_worker_batch_ms
    hand = facts.input_worker_handover_ms or 0.0
    fork = facts.input_worker_fork_ms
    if one is None or batch is None:
        return None
    each = max(one - hand, 0.0)
    if facts.worker_batch_waits:
        # loading that waits: the forks (or the start-ups over the CPUs), then the first
        # batches, made at once, less what the loop would spend on them anyway
        forks = max(k * each if fork is None else k * fork + hand, k * each / n_cpus)
        start = forks + _fill_ms(facts, k, n, batch)
    elif fork is None:
        start = k * each + batch
    else:
        start = max(k * fork + batch + hand, one + batch, k * (each + batch) / n_cpus)
    copies = fork_copy_ms(facts, change.get("intra_op_threads"))
    return (start + copies + stop) / n


def _fill_ms(facts: Facts, k: float, n: float, batch: float) -> float:
    """What an epoch's first batches cost the loop beyond its steady pace (ms), where the
    k workers' batches wait (no CPU shared): all k arrive ``batch`` ms after the start,
    the rest one every batch / k. A loop whose own work a step (C: the steady step less
    its wait for batches, as the clock timed it) is longer than batch / k waits the whole
    first batch, then never again; one that waits for its batches anyway loses nothing,
    those k batches being what the steady pipeline gives in that time. The epoch takes
    batch + max(n C, (n - k) batch / k) against n max(C, batch / k) steady. Without C, the
    whole batch (the most it can be)."""
    step = facts.step_time_steady_mean_ms or facts.step_time_unprofiled_mean_ms
    share = facts.dataloader_wait_unprofiled_share
    if step is None or share is None:
        return batch
    own = step * max(0.0, 1.0 - share)
    pace = batch / max(k, 1.0)
    lost = batch + max(n * own, (n - k) * pace) - n * max(own, pace)
    return min(batch, max(0.0, lost))


def ready_at_start(facts: Facts, change: Mapping[str, Any]) -> float:
    """The share of an epoch's steps whose batches are made during its start, where
    ``change`` restarts k workers (not persistent) every epoch of n batches: k workers
    start together and each makes its first batch before the loop's first arrives
    (:func:`epoch_start_ms` counts that start, those batches' work in it), so the first
    min(k, n) steps find a batch ready and wait for none. 0 where the change keeps the
    run's worker count (its own epoch start was timed beside its own steps), keeps the
    workers alive, or the epoch's length is not known; 0 too where a worker's batch
    waits (files, the network): the start's fill (:func:`_fill_ms`) counts those steps."""
    if "num_workers" not in change:
        return 0.0
    k = change["num_workers"]
    keep = change.get("persistent_workers", facts.dataloader_persistent_workers)
    n = facts.dataloader_epoch_batches
    if (not isinstance(k, int | float) or k <= 0 or keep is True or not n or n <= 0
            or k == facts.dataloader_num_workers or facts.worker_batch_waits):
        return 0.0
    return min(k, n) / n

