"""Processes that keep a CPU busy each, as DataLoader workers making batches do, paused
and continued at will: what the threads probe (:mod:`.compute`) times the model's work
beside.

Torch's parallel ops wait for their descheduled threads at every op, so a worker more than
the CPUs torch's threads leave costs those ops far more than the CPUs' share says. The
probe times that directly: the model's work beside one busy process more than the CPUs
left (:data:`BUSY_EXCESS`), paused with SIGSTOP between its timings.
"""

from __future__ import annotations

from typing import Any

#: busy processes beyond the CPUs torch's threads leave: one. Beside more, the ops are
#: taken to wait as beside one more (each op waits for its descheduled thread); a second
#: set's timing cost a third of the probe and told the predictions nothing the first did
#: not (benchmarks/NOTES.md, "One busy set, not two")
BUSY_EXCESS = (1,)
#: no more busy processes than this (torch on few threads of many CPUs: not timed)
BUSY_MAX_PROCS = 8


def busy_left(threads: int, cpus: int | None) -> int | None:
    """The CPUs torch's ``threads`` leave of ``cpus``: the busy processes the timing runs
    beside are that many and :data:`BUSY_EXCESS` more. None where it does not apply (no
    CPU count, one thread, no SIGSTOP to pause them with, more than
    :data:`BUSY_MAX_PROCS` of them)."""
    import signal

    if cpus is None or cpus < 1 or threads < 2 or not hasattr(signal, "SIGSTOP"):
        return None
    left = max(0, cpus - threads)
    return None if left + max(BUSY_EXCESS) > BUSY_MAX_PROCS else left


#: a busy process: Python work until its parent (this process) is gone. Linux kills it
#: with its parent even while it is stopped (PR_SET_PDEATHSIG): a training process
#: killed with SIGKILL during the timing leaves none behind. It says when it is set up.
_SPIN = """import os, sys
p = os.getppid()
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, 9)
except Exception:
    pass
sys.stdout.write("r")
sys.stdout.flush()
while os.getppid() == p:
    sum(range(1000))
"""


def spinners(k: int) -> list[Any]:
    """``k`` processes, stopped, that keep one CPU each busy with Python once continued (as
    a worker making a batch does), started together. Fresh interpreters, not forks: a fork
    shares this process's pages, and each of its writes copies one, which would slow the
    model's work timed right after forking."""
    import signal
    import subprocess
    import sys

    procs: list[Any] = []
    try:
        for _ in range(k):
            procs.append(subprocess.Popen([sys.executable, "-S", "-c", _SPIN],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL))
        for p in procs:
            assert p.stdout is not None
            p.stdout.read(1)  # set up (stopped earlier, it could outlive a killed parent)
            p.stdout.close()
            p.send_signal(signal.SIGSTOP)
    except BaseException:
        stop(procs)
        raise
    return procs


def run_busy(procs: list[Any], k: int) -> None:
    """The first ``k`` of ``procs`` running, the others stopped."""
    import signal

    for i, p in enumerate(procs):
        p.send_signal(signal.SIGCONT if i < k else signal.SIGSTOP)


def stop(procs: list[Any]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()
