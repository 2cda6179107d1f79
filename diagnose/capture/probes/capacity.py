"""How many CPUs' worth of work the usable CPUs do at once.

One process per CPU is forked once; in each round one of them (in turn) runs a piece of
work alone, then all of them at once, a few ms later. A round's ratio is ``CPUs x time
alone / time together``, and the capacity is the median of the rounds' ratios: a shared
host's pace moves over tens of ms (a busy neighbour, a core's clock), and both sides of a
round meet the same moment of it. It is under the CPU count where CPUs share a core (SMT
siblings) or the host is busy, and it is what the cores give the workers and the training
process together in the step model's CPU bound. :func:`work_capacity` times a worker's
batch with processes forked for each side, by each side's least time
(:func:`~.worker_batch.time_worker_batches`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import suppress

from .common import SETTLED, SLOW_S, out_of_time, timed

#: the Python loop each process of :func:`time_cpu_capacity` runs (5-12 ms on a current
#: core, a few scheduler ticks): interpreter work, like a DataLoader worker's per-sample
#: code; short, so that both sides of a round meet the same moment of the host
CAPACITY_LOOP = 100_000
#: at least this many rounds; more, up to CAPACITY_MAX_ROUNDS within CAPACITY_S seconds in
#: all: a busy moment of a shared host lasts tens of ms and can cover several rounds in a
#: row, so the rounds go on for the time (not until a few agree)
CAPACITY_ROUNDS = 3
CAPACITY_MAX_ROUNDS = 24
CAPACITY_S = 0.25
#: at most this many processes at once (a big machine is measured on this many CPUs)
CAPACITY_MAX_PROCS = 16
#: the longest a child's result is waited for (s): a child that died (the job's dataset
#: crashing in a forked process, the OOM killer) never writes it, and its siblings keep
#: the pipe open; ten times the slowest timing a probe keeps
RESULT_WAIT_S = 10 * SLOW_S


def read_result(fd: int, size: int) -> bytes:
    """``size`` bytes from a children's result pipe, within :data:`RESULT_WAIT_S`
    (TimeoutError past it: the probe fails alone, as any of its errors does)."""
    import os
    import select

    if not select.select([fd], [], [], RESULT_WAIT_S)[0]:
        raise TimeoutError(f"a forked timing process gave no result in {RESULT_WAIT_S:.0f} s")
    return os.read(fd, size)


def reap(pids: list[int], failed: bool) -> None:
    """Wait for the forked ``pids``; where the timing ``failed`` (a child may be stuck in
    the job's own code), end them first: they are this probe's, with nothing to clean."""
    import os
    import signal

    for pid in pids:
        if failed:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)


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
    done = False
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
        times = [struct.unpack("d", read_result(res_r, 8))[0] for _ in range(k)]
        done = True
    finally:
        for fd in (go_r, go_w, res_r, res_w):
            os.close(fd)
        reap(pids, failed=not done)
    if len(times) != k or min(times) <= 0:
        return None
    return statistics.fmean(times)


def capacity_rounds(n: int, work: Callable[[], float], rounds: int
                    ) -> tuple[list[float], list[float]] | None:
    """(seconds alone, seconds together) of ``rounds`` or more alternating rounds of one
    process and of ``n`` running ``work``: more while cheap (:data:`CAPACITY_S`, within the
    probes' budget: :func:`~.common.out_of_time`) until each side's two least times agree
    (:func:`least_settled`); None where a child failed, or where a round's work took
    longer than :data:`~.common.SLOW_S` alone or twice that together (the work's first
    timing was quick, the rounds are not: the exit must stay quick)."""
    alone: list[float] = []
    together: list[float] = []
    start = time.perf_counter()
    for k in range(CAPACITY_MAX_ROUNDS):
        if k >= rounds and (time.perf_counter() - start > CAPACITY_S or out_of_time()
                            or least_settled(alone, together)):
            break
        one, many = concurrent_s(1, work), concurrent_s(n, work)
        if one is None or many is None or one > SLOW_S or many > 2 * SLOW_S:
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


def pooled_rounds(n: int, work: Callable[[], float], rounds: int
                  ) -> tuple[list[float], list[float]] | None:
    """(seconds alone, seconds together: the mean of the ``n``), by round, of ``rounds``
    or more rounds of ``n`` processes forked once (forking is not timed): in each round one
    of them, in turn, runs ``work`` (which returns the seconds it took) alone, then all
    ``n`` at once. More rounds for :data:`CAPACITY_S` (within the probes' budget:
    :func:`~.common.out_of_time`); None where a child failed. The children are gone on
    return."""
    import os
    import struct
    import warnings

    res_r, res_w = os.pipe()
    go: list[int] = []
    pids: list[int] = []
    alone: list[float] = []
    together: list[float] = []
    done = False
    try:
        for _ in range(n):
            r, w = os.pipe()
            try:
                with warnings.catch_warnings():  # Python 3.12+: fork in a threaded process
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:  # no process left to fork: this pair is not kept below
                os.close(r)
                os.close(w)
                raise
            if pid == 0:  # the child: the work once per byte read, until EOF
                try:
                    os.close(w)
                    os.close(res_r)
                    for fd in go:
                        os.close(fd)
                    while os.read(r, 1) == b"g":
                        took = -1.0
                        try:
                            took = float(work())
                        finally:
                            os.write(res_w, struct.pack("d", took))
                finally:
                    os._exit(0)
            os.close(r)
            go.append(w)
            pids.append(pid)

        def run(which: list[int]) -> list[float]:
            for j in which:
                os.write(go[j], b"g")
            return [struct.unpack("d", read_result(res_r, 8))[0] for _ in which]

        if min(run(list(range(n)))) <= 0:  # one untimed round: the children's first pages
            return None
        start = time.perf_counter()
        for k in range(CAPACITY_MAX_ROUNDS):
            if k >= rounds and (time.perf_counter() - start > CAPACITY_S or out_of_time()):
                break
            one, many = run([k % n]), run(list(range(n)))
            if min(one + many) <= 0:
                return None
            alone.append(one[0])
            together.append(statistics.fmean(many))
        done = True
    finally:
        for fd in go:  # EOF: the children leave
            os.close(fd)
        reap(pids, failed=not done)
        os.close(res_r)
        os.close(res_w)
    return alone, together


def round_ratios(n: int, alone: list[float], together: list[float]) -> list[float]:
    """Each round's ``n x alone / together``, within [1, n]."""
    return [min(float(n), max(1.0, n * a / t)) for a, t in zip(alone, together, strict=True)]


@timed("cpu_capacity")
def time_cpu_capacity(cpus: int, loops: int = CAPACITY_LOOP) -> float | None:
    """How many CPUs' worth of Python work the usable CPUs do at once: one process per CPU
    running the same loop against one of them alone, the median of the rounds'
    ``cpus x alone / together`` (:func:`pooled_rounds`). None with one CPU or where
    ``os.fork`` is missing."""
    got = _capacity_span(cpus, loops)
    return None if got is None else got[0]


@timed("cpu_capacity")
def time_cpu_capacity_span(cpus: int, loops: int = CAPACITY_LOOP
                           ) -> tuple[float, float, float] | None:
    """The CPUs' capacity as :func:`time_cpu_capacity` times it, with the span its own
    rounds give: ``(capacity, first quartile, third quartile)`` of the rounds' ratios. One
    timing in place of several seconds apart: how far its rounds lay apart is the noise
    the predictions that move CPU work are ranged over. None with one CPU or where
    ``os.fork`` is missing."""
    got = _capacity_span(cpus, loops)
    return None if got is None else got[:3]


#: the host's own pace: a fixed loop's time on one CPU alone (ms), the median of a
#: capacity timing's rounds, and the least and the most of them
Pace = tuple[float, float, float]


@timed("cpu_capacity")
def time_cpu_capacity_pace(cpus: int, loops: int = CAPACITY_LOOP
                           ) -> tuple[float, float, float, Pace] | None:
    """:func:`time_cpu_capacity_span`'s three, and the host's own pace (:data:`Pace`). The
    loop is fixed, so that its time moves with the host alone: two captures whose rounds
    alone lie apart ran on a host whose pace moved."""
    return _capacity_span(cpus, loops)


def _capacity_span(cpus: int, loops: int) -> tuple[float, float, float, Pace] | None:
    """(median, first quartile, third quartile) of the rounds' ratios (:func:`round_ratios`
    of :func:`pooled_rounds`), and the rounds' times alone (:data:`Pace`); None with one
    CPU or without ``os.fork``."""
    import os

    n = min(int(cpus), CAPACITY_MAX_PROCS)
    if n < 2 or not hasattr(os, "fork"):
        return None
    got = pooled_rounds(n, lambda: _spin(loops), CAPACITY_ROUNDS)
    if got is None or not got[0]:
        return None
    each = round_ratios(n, *got)
    q1, med, q3 = (statistics.quantiles(each, n=4, method="inclusive") if len(each) > 1
                   else each * 3)
    alone = got[0]
    pace: Pace = (round(statistics.median(alone) * 1e3, 4), round(min(alone) * 1e3, 4),
                  round(max(alone) * 1e3, 4))
    return round(med, 3), round(q1, 3), round(q3, 3), pace
