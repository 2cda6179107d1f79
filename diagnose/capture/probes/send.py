"""What sending its batches costs a DataLoader worker, beside making them.

A worker's threads other than the one that makes batches (the queue's feeder, which
pickles each batch, and the one that hands this process each tensor's file descriptor)
run beside the next batch. A real one-worker loader over the run's dataset makes batches
while this process takes them, and the CPU time of those threads is read from Linux
schedstat over a few batches.
"""

from __future__ import annotations

import time
from typing import Any

from .batches import forked_batches
from .common import SLOW_S, cannot_afford, out_of_time, rng_kept, timed

#: batches: SEND_WARM first, then up to SEND_BATCHES timed while they take under SEND_S
#: seconds
SEND_WARM = 1
SEND_BATCHES = 8
SEND_S = 0.25


def _other_threads_cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds the threads of process ``pid`` other than its main one have used
    (Linux schedstat); None where the kernel does not say."""
    import os

    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            if int(tid) != pid:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


@timed("worker_send")
def time_worker_send(loader: Any) -> float | None:
    """What sending its batches costs a DataLoader worker (ms a batch): the CPU time of a
    real one-worker loader's threads other than the one that makes batches, over
    :data:`SEND_BATCHES` of them (after :data:`SEND_WARM`). The batch timed as a worker
    makes it (:func:`~.worker_batch.time_batches_in_turn`) holds none of it.

    None where no worker is forked (:func:`~.batches.forked_batches`), the kernel does
    not say (Linux schedstat), the epoch is too short, or a batch takes over
    :data:`~.common.SLOW_S`. The RNG states are put back; the worker is gone on return."""
    b = forked_batches(loader)
    if b is None or len(b.keys) < SEND_WARM + 3:
        return None
    import warnings

    with rng_kept(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. fork in a threaded process
        dl: Any = b.loader(num_workers=1, prefetch_factor=2)
        it: Any = iter(dl)
        try:
            workers = getattr(it, "_workers", None) or [None]
            pid = getattr(workers[0], "pid", None)
            if not pid:
                return None
            for _ in range(SEND_WARM + 1):  # the first pays for the worker's start
                t0 = time.perf_counter()
                next(it)
                if time.perf_counter() - t0 > SLOW_S:
                    return None
            if cannot_afford(time.perf_counter() - t0, 2):  # at least two batches timed
                return None
            a = _other_threads_cpu_ns(pid)
            start, n = time.perf_counter(), 0
            last = min(SEND_BATCHES, len(b.keys) - SEND_WARM - 2)
            while n < last and (n < 2 or (time.perf_counter() - start < SEND_S
                                          and not out_of_time())):
                t0 = time.perf_counter()
                next(it)
                n += 1
                if time.perf_counter() - t0 > SLOW_S:
                    return None
            z = _other_threads_cpu_ns(pid)
        finally:
            del it
    if a is None or z is None or n == 0:
        return None
    return round((z - a) / n / 1e6, 4)
