"""How many CPUs' worth of work the usable CPUs do at once.

One forked process runs a piece of work alone, then one per CPU run it at once, in
alternating rounds; the capacity is ``CPUs x least time alone / least time together``. It
is under the CPU count where CPUs share a core (SMT siblings) or the host is busy, and it
is what the cores give the workers and the training process together in the step model's
CPU bound. :func:`work_capacity` also serves :func:`~.worker_batch.time_worker_batches`
with a worker's batch as the work.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from .common import SETTLED, out_of_time, timed

#: the Python loop each process of :func:`time_cpu_capacity` runs (10-25 ms on a current
#: core, several scheduler ticks): interpreter work, like a DataLoader worker's per-sample
#: code. The capacity takes each side's least time, so a longer loop only costs the exit
CAPACITY_LOOP = 200_000
CAPACITY_ROUNDS = 2
#: more rounds, up to CAPACITY_MAX_ROUNDS within CAPACITY_S seconds in all, until each
#: side's two least times agree to :data:`~.common.SETTLED` (:func:`least_settled`): a busy
#: moment of the host can cover the first rounds of a short piece of work
CAPACITY_MAX_ROUNDS = 12
CAPACITY_S = 0.25
#: at most this many processes at once (a big machine is measured on this many CPUs)
CAPACITY_MAX_PROCS = 16


def least_settled(*series: list[float]) -> bool:
    """Do the two least values of every series agree to :data:`~.common.SETTLED`? The
    capacity takes each side's least time: once a second round comes that close to it,
    more rounds would move it by less than that."""
    for v in series:
        if len(v) < 2:
            return False
        a, b = sorted(v)[:2]
        if b > a * (1 + SETTLED):
            return False
    return True


def _spin(n: int) -> float:
    t0 = time.perf_counter()
    s = 0
    for i in range(n):
        s += i * i
    return time.perf_counter() - t0


def concurrent_s(k: int, work: Callable[[], float]) -> float | None:
    """``k`` forked processes run ``work`` (which returns the seconds it took) at once,
    released together by a pipe once all exist (forking is not timed); the mean of their
    times (s), None where a child failed."""
    import os
    import struct
    import warnings

    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    pids: list[int] = []
    times: list[float] = []
    try:
        for _ in range(k):
            with warnings.catch_warnings():  # Python 3.12+: fork in a threaded process
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: the work, then out without any clean-up
                took = -1.0
                try:
                    os.close(go_w)
                    os.read(go_r, 1)
                    took = float(work())
                finally:
                    os.write(res_w, struct.pack("d", took))
                    os._exit(0)
            pids.append(pid)
        os.write(go_w, b"g" * k)
        times = [struct.unpack("d", os.read(res_r, 8))[0] for _ in range(k)]
    finally:
        for fd in (go_r, go_w, res_r, res_w):
            os.close(fd)
        for pid in pids:
            os.waitpid(pid, 0)
    if len(times) != k or min(times) <= 0:
        return None
    return statistics.fmean(times)


def capacity_rounds(n: int, work: Callable[[], float], rounds: int
                    ) -> tuple[list[float], list[float]] | None:
    """(seconds alone, seconds together) of ``rounds`` or more alternating rounds of one
    process and of ``n`` running ``work``: more while cheap (:data:`CAPACITY_S`, within the
    probes' budget: :func:`~.common.out_of_time`) until each side's two least times agree
    (:func:`least_settled`); None where a child failed."""
    alone: list[float] = []
    together: list[float] = []
    start = time.perf_counter()
    for k in range(CAPACITY_MAX_ROUNDS):
        if k >= rounds and (time.perf_counter() - start > CAPACITY_S or out_of_time()
                            or least_settled(alone, together)):
            break
        one, many = concurrent_s(1, work), concurrent_s(n, work)
        if one is None or many is None:
            return None
        alone.append(one)
        together.append(many)
    return alone, together


def work_capacity(n: int, work: Callable[[], float], rounds: int
                  ) -> tuple[float, float] | None:
    """(the work's seconds alone; the CPUs' worth ``n`` processes did at once), from
    ``rounds`` (more while cheap: :data:`CAPACITY_S`) alternating rounds of one process and
    of ``n`` (:func:`capacity_rounds`). The work's time alone is its median round, a
    typical time as the loop's are. The capacity is a ratio of two sides timed apart: each
    side's least time, as a busy moment only adds to it, so ``n x least alone / least
    together`` (the median of the rounds' own ratios would let one disturbed side of a
    round through)."""
    got = capacity_rounds(n, work, rounds)
    if got is None:
        return None
    alone, together = got
    return (statistics.median(alone),
            min(float(n), max(1.0, n * min(alone) / min(together))))


@timed("cpu_capacity")
def time_cpu_capacity(cpus: int, loops: int = CAPACITY_LOOP) -> float | None:
    """How many CPUs' worth of Python work the usable CPUs do at once: one process per CPU
    running the same loop against one process alone, ``cpus x alone / together`` (the least
    times of :data:`CAPACITY_ROUNDS` alternating rounds, :func:`work_capacity`). None with
    one CPU or where ``os.fork`` is missing."""
    import os

    n = min(int(cpus), CAPACITY_MAX_PROCS)
    if n < 2 or not hasattr(os, "fork"):
        return None
    got = work_capacity(n, lambda: _spin(loops), CAPACITY_ROUNDS)
    return None if got is None else round(got[1], 3)


@timed("cpu_capacity")
def time_cpu_capacity_span(cpus: int, loops: int = CAPACITY_LOOP
                           ) -> tuple[float, float, float] | None:
    """The CPUs' capacity as :func:`time_cpu_capacity` times it, with the span its own
    rounds give: ``(capacity, least, most)``, the least and the most of the rounds' own
    ratios ``cpus x alone / together`` (each round's two sides a few ms apart) beside the
    capacity of the sides' least times. One timing in place of several seconds apart: how
    far its rounds lay apart is the noise the predictions that move CPU work are ranged
    over. None where :func:`time_cpu_capacity` gives None."""
    import os

    n = min(int(cpus), CAPACITY_MAX_PROCS)
    if n < 2 or not hasattr(os, "fork"):
        return None
    got = capacity_rounds(n, lambda: _spin(loops), CAPACITY_ROUNDS)
    if got is None:
        return None
    alone, together = got
    cap = min(float(n), max(1.0, n * min(alone) / min(together)))
    each = [min(float(n), max(1.0, n * a / t)) for a, t in zip(alone, together, strict=True)]
    return round(cap, 3), round(min(each + [cap]), 3), round(max(each + [cap]), 3)
