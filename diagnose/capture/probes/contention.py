"""The model's work on torch's threads beside processes that keep a CPU busy each, as
DataLoader workers making batches do.

Torch's parallel ops wait for their descheduled threads at every op, so a worker more than
the CPUs torch's threads leave costs those ops far more than the CPUs' share says. The
probe times that directly: the model's forward and backward alone, then beside one and two
busy processes more than the CPUs left (paused between rounds with SIGSTOP), and gives
their ratios to the workers' predictions.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .common import SLOW_S, cannot_afford, median_noise, out_of_time, settled, timed
from .compute import Inputs, model_work, on_cpu

#: busy processes beyond the CPUs torch's threads leave (1, then 2: a worker more, where
#: two are busy at once)
BUSY_EXCESS = (1, 2)
#: rounds of each (a quiet work, then the work beside the busy processes), more within
#: BUSY_S seconds in all until their medians are settled (:func:`~.common.settled`)
BUSY_ROUNDS = 2
BUSY_MAX_ROUNDS = 8
BUSY_S = 0.3
#: no more busy processes than this (torch on few threads of many CPUs: not timed)
BUSY_MAX_PROCS = 8
#: timed works beside each set of busy processes (after an untimed one)
BUSY_REPEAT = 2


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


def _spinners(k: int) -> list[Any]:
    """``k`` processes, stopped, that keep one CPU each busy with Python once continued (as
    a worker making a batch does). Fresh interpreters, not forks: a fork shares this
    process's pages, and each of its writes copies one, which would slow the model's work
    timed right after forking."""
    import signal
    import subprocess
    import sys

    procs = []
    for _ in range(k):
        p = subprocess.Popen([sys.executable, "-S", "-c", _SPIN],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        procs.append(p)
        assert p.stdout is not None
        p.stdout.read(1)  # set up (stopped earlier, it could outlive a killed parent)
        p.stdout.close()
        p.send_signal(signal.SIGSTOP)
    return procs


def _run(procs: list[Any], k: int) -> None:
    """The first ``k`` of ``procs`` running, the others stopped."""
    import signal

    for i, p in enumerate(procs):
        p.send_signal(signal.SIGCONT if i < k else signal.SIGSTOP)


def _stop(procs: list[Any]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


@timed("threads_busy")
def time_threads_beside_busy(model: Any, inputs: Inputs | None, cpus: int
                             ) -> dict[str, Any] | None:
    """The model's forward and backward on torch's threads beside processes that keep a
    CPU busy each: one more of them than the CPUs torch's threads leave, then two
    (:data:`BUSY_EXCESS`). Returns ``{"torch_threads", "cpus", "work_ms", "busy_ratio":
    {excess: the work's time beside them / work_ms}}`` (the medians of
    :data:`BUSY_ROUNDS` to :data:`BUSY_MAX_ROUNDS` alternating rounds); nothing of the run
    changes (:func:`~.compute.model_work`). None where it does not apply (no inputs, a GPU
    model, one thread, no SIGSTOP to pause the busy processes with, more of them than
    :data:`BUSY_MAX_PROCS`)."""
    import signal

    if (inputs is None or model is None or not on_cpu(model)
            or not hasattr(signal, "SIGSTOP")):
        return None
    import torch

    n = torch.get_num_threads()
    left = max(0, cpus - n)
    if n < 2 or cpus < 1 or left + max(BUSY_EXCESS) > BUSY_MAX_PROCS:
        return None
    quiet: list[float] = []
    busy: dict[int, list[float]] = {e: [] for e in BUSY_EXCESS}
    procs = _spinners(left + max(BUSY_EXCESS))
    start = time.perf_counter()
    try:
        with model_work(model, inputs) as (_, work):
            once = work()  # warm; a round is a quiet work and BUSY_REPEAT busy ones a set
            if cannot_afford(once * (1 + BUSY_REPEAT) * len(BUSY_EXCESS), BUSY_ROUNDS):
                return None
            for k in range(BUSY_MAX_ROUNDS):
                if k >= BUSY_ROUNDS and (time.perf_counter() - start > BUSY_S
                                         or settled(quiet, *busy.values()) or out_of_time()):
                    break
                t0 = time.perf_counter()
                for e in BUSY_EXCESS:
                    _run(procs, 0)
                    quiet.append(work())
                    _run(procs, left + e)
                    busy[e].extend(work() for _ in range(BUSY_REPEAT))
                _run(procs, 0)
                if time.perf_counter() - t0 > 3 * SLOW_S:
                    break
    finally:
        _stop(procs)
    if not quiet:
        return None
    base = statistics.median(quiet)
    return {"torch_threads": n, "cpus": cpus, "work_ms": round(base * 1e3, 4),
            "busy_ratio": {str(e): round(statistics.median(v) / base, 4)
                           for e, v in busy.items() if v},
            "noise": median_noise(quiet, *busy.values())}
