"""What a batch costs a DataLoader worker, against what it costs the training process.

A forked process set up as torch sets up a worker (one intra-op thread, the worker info
set so that default_collate builds the batch in shared memory, no garbage collection in
the timed batches) makes the loader's batches. :func:`time_batches_in_turn` has it and this
process make the same batches one after the other, so that a busy moment of the host falls
on both sides of a turn; :func:`time_worker_batches` runs one such worker alone and one per
CPU at once, for the CPUs' capacity with the job's own batches as the work.
"""

from __future__ import annotations

import statistics
import struct
import time
from contextlib import suppress
from typing import Any

from .batches import LoaderBatches, forked_batches
from .capacity import (
    CAPACITY_MAX_PROCS,
    CAPACITY_ROUNDS,
    concurrent_s,
    read_result,
    reap,
    work_capacity,
)
from .common import SLOW_S, cannot_afford, out_of_time, rng_kept, settled, timed

#: batches made in turn by :func:`time_batches_in_turn`: PAIRS at least, then more, up to
#: MAX_PAIRS within PAIRS_S seconds in all, until this process's median and that of the
#: turns' ratios are settled (:func:`~.common.settled`)
PAIRS = 3
MAX_PAIRS = 15
PAIRS_S = 0.4


def as_worker(b: LoaderBatches) -> None:
    """This (forked) process set up as torch sets up a DataLoader worker, the loader's
    ``worker_init_fn`` run last (it may hold a library's thread pool to one thread)."""
    import gc

    import torch
    from torch.utils.data._utils import worker

    # no collections in the timed batches: the child starts from the training process's
    # collector counts, so that a full collection of the forked heap could fall in every
    # timed batch; the step model adds the loop's own pauses to a worker's batch instead
    gc.disable()
    torch.set_num_threads(1)  # as in a DataLoader worker
    # as in a worker, default_collate writes the batch into shared memory (a new
    # segment per batch, its pages faulted in), which the hand-over then passes on
    worker._worker_info = worker.WorkerInfo(id=0, num_workers=1, seed=0, dataset=b.dataset)
    if b.worker_init is not None:
        b.worker_init(0)


@timed("batches_in_turn")
def time_batches_in_turn(loader: Any) -> tuple[float, float, float, float] | None:
    """What a batch costs a DataLoader worker against what it costs this process, timed in
    turn: one forked process set up as a worker (:func:`as_worker`) and this process make
    the same batch one after the other, a new batch each turn (the loader's 2nd, 3rd, ...
    batch, :mod:`.batches`: a worker's next batch touches pages it has not touched
    yet), after one untimed batch each at once (imports, caches; the pages this process
    writes after the fork copied once). :data:`PAIRS` turns or more while cheap.

    Returns (ms a worker's batch, ms this process's batch: :func:`paired_medians` of the
    turns; ms of the worker's batch on or waiting for a CPU: that share of its time in
    the turn that wanted a CPU most, the rest waiting on files, the network or a sleep;
    the CPUs its batch kept busy: the worker process's CPU time, all its threads, over
    the batch's time, the median of the turns: above 1 where a library's thread pool
    worked beside the worker's own thread); None where :func:`~.batches.forked_batches`
    gives None, or where this process's warm batch took over :data:`~.common.SLOW_S` (a
    turn over it is the last: the exit must stay quick). The RNG states are put back; the
    child is gone on return."""
    import os

    b = forked_batches(loader)
    if b is None:
        return None
    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    import warnings

    with warnings.catch_warnings():  # Python 3.12+: fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the worker: a batch for each index it is sent, until -1 or EOF
        try:
            os.close(go_w)
            os.close(res_r)
            as_worker(b)
            os.write(res_w, _made(b, 0))
            while len(got := os.read(go_r, 4)) == 4 and (j := struct.unpack("i", got)[0]) >= 0:
                os.write(res_w, _made(b, j))
        finally:
            os._exit(0)
    os.close(go_r)
    os.close(res_w)
    mine: list[float] = []
    theirs: list[float] = []
    cpu: list[float] = []  # the share of the worker's batch on or queued for a CPU, each turn
    cpus: list[float] = []  # the worker process's CPU time (all threads) over the batch's

    def worker_batch(j: int | None) -> float | None:
        if j is not None:
            os.write(go_w, struct.pack("i", j))
        got = read_result(res_r, _MADE.size)  # EOF where it died; a stuck one times out
        if len(got) != _MADE.size:
            return None
        took, used, process = _MADE.unpack(got)
        if j is not None and took > 0:
            cpu.append(used / took)
            cpus.append(process / took)
        return float(took)

    done = False
    try:
        with rng_kept():
            # beside the worker's first (untimed) batch; a slow batch ends it (quick exit)
            warm = b.make(0)
            if worker_batch(None) is None or warm > SLOW_S:
                return None
            if cannot_afford(2 * warm, PAIRS):  # a turn: this process's batch, a worker's
                return None
            start = time.perf_counter()
            for j in range(1, MAX_PAIRS + 1):
                if j > PAIRS and (time.perf_counter() - start > PAIRS_S or out_of_time()
                                  or settled(mine, [t / m for t, m in zip(
                                      theirs, mine, strict=True) if m > 0])):
                    break
                mine.append(b.make(j))
                took = worker_batch(j)
                if took is None:
                    return None
                theirs.append(took)
                if max(mine[-1], took) > SLOW_S:  # one slow turn is timing enough
                    break
        done = True
    finally:
        with suppress(OSError):  # the child may be gone already
            os.write(go_w, struct.pack("i", -1))
        os.close(go_w)
        os.close(res_r)
        reap([pid], failed=not done)
    worker_ms, own_ms = paired_medians(theirs, mine)
    # the turn that wanted a CPU most: a virtual machine's host may take the CPU in a way
    # the guest counts neither as running nor as queued (steal), so CPU work reads low in
    # some turns; loading that waits reads low in all of them
    return (worker_ms, own_ms, round(worker_ms * min(1.0, max(cpu)), 4),
            round(statistics.median(cpus), 3))


#: what the in-turn worker sends for a batch: seconds; seconds its thread was on or
#: waiting for a CPU; seconds of CPU time its whole process used (every thread)
_MADE = struct.Struct("ddd")
#: the CPU time of this process, every thread of it (s)
_PROCESS_CPU_S = time.process_time


def _made(b: LoaderBatches, j: int) -> bytes:
    """The ``j``-th batch made in this (worker) process, as :data:`_MADE`."""
    p0 = _PROCESS_CPU_S()
    took, used = b.make_cpu(j)
    return _MADE.pack(took, used, _PROCESS_CPU_S() - p0)


def paired_medians(theirs: list[float], mine: list[float]) -> tuple[float, float]:
    """(ms a worker's batch, ms this process's) from batches timed in turn (s): this
    process's median turn, and the worker's at the median of the turns' own ratios
    (worker / this process), so that the two stay paired: a busy moment of the host
    falls on both sides of a turn, and their ratio keeps. Each side's median alone would
    let a pace that moved for a few turns land on one side only."""
    own = statistics.median(mine)
    ratio = statistics.median(t / m for t, m in zip(theirs, mine, strict=True) if m > 0)
    return round(own * ratio * 1e3, 4), round(own * 1e3, 4)


@timed("worker_batches")
def time_worker_batches(loader: Any, cpus: int) -> tuple[float, float] | None:
    """What a batch costs a DataLoader worker, and how many CPUs' worth of them the usable
    CPUs make at once: forked processes set up as workers (:func:`as_worker`) make the
    loader's second batch (:mod:`.batches`) after its first, one alone and one per CPU at
    once.
    Returns (ms a batch alone: the median of :data:`~.capacity.CAPACITY_ROUNDS` or more
    rounds; the capacity their least times give, :func:`~.capacity.work_capacity`); None
    for an iterable dataset, a loader whose workers are not forked, one CPU, or a batch over :data:`~.common.SLOW_S` (the exit must stay quick)."""
    b = forked_batches(loader, 2)
    n = min(int(cpus), CAPACITY_MAX_PROCS)
    if b is None or n < 2:
        return None

    def batch() -> float:
        """A warm worker's batch: the first one warms the process (imports, caches), the
        second (other samples, whose pages it copies on first touch as a worker does)
        is timed."""
        as_worker(b)
        took = 0.0
        for j in (0, 1):
            took = b.make(j)
        return took

    t0 = time.perf_counter()
    one = concurrent_s(1, batch)
    # a process's warm-up batch and its timed one: a batch erratic enough (a pool that
    # spins) to pass quick once and not the next time shows in the two together
    both = time.perf_counter() - t0
    # a round: the work alone, then one a CPU at once
    if (one is None or one > SLOW_S or both > 3 * SLOW_S
            or cannot_afford(2 * one, CAPACITY_ROUNDS)):
        return None
    cap = work_capacity(n, batch, CAPACITY_ROUNDS)
    return None if cap is None else (round(cap[0] * 1e3, 4), round(cap[1], 3))
