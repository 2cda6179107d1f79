"""The DataLoader's live workers left to fall idle before the probes time anything.

A loop that ends inside an epoch (a ``break``, the session's ``done``) leaves its
iterator's workers making the batches they were sent, up to ``prefetch_factor`` each:
seconds of CPU work on a small host. Every probe after the loop times work against the
CPUs, so they first wait until the workers stop using CPU time (their queues full, or
them gone), within the probes' budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from . import common
from .common import out_of_time, timed

#: how often the workers' CPU time is read (s), and the share of one CPU that all of them
#: together may use over one such poll and count as idle (a worker blocked on its index
#: queue uses none; a poll's readings move in the kernel's ticks, 10 ms at 100 Hz)
SETTLE_POLL_S = 0.02
SETTLE_IDLE_SHARE = 0.25
#: the longest wait (s), whatever the budget says: a worker past it is busy for good (an
#: iterable dataset streaming on, a worker stuck) and the probes meet it either way
SETTLE_MAX_S = 1.0


def _cpu_s(procs: list[Any]) -> float:
    """The summed user and system CPU seconds of the live ones of ``procs``."""
    import psutil

    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


@timed("workers_idle")
def wait_workers_idle(pids: Iterable[int]) -> float | None:
    """Wait until the worker processes ``pids`` together use under
    :data:`SETTLE_IDLE_SHARE` of one CPU over a poll of :data:`SETTLE_POLL_S`, or
    :data:`SETTLE_MAX_S` has passed, or the probes' budget has run out
    (:func:`~.common.out_of_time`). Returns the seconds waited; None where none of them is
    alive (nothing to wait for)."""
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(int(pid))
            if p.status() != psutil.STATUS_ZOMBIE:
                procs.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            continue
    if not procs:
        return None
    start = common._CLOCK()
    used = _cpu_s(procs)
    while True:
        time.sleep(SETTLE_POLL_S)
        now = _cpu_s(procs)
        idle = now - used < SETTLE_IDLE_SHARE * SETTLE_POLL_S
        used = now
        if idle or common._CLOCK() - start >= SETTLE_MAX_S or out_of_time():
            return common._CLOCK() - start
