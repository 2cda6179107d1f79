"""What the probes share: the bound that keeps the session's exit quick, the RNG states
put back after a timing, a thread's time on a CPU, the clock of
the probes' own time (:func:`probe_clock`, :func:`timed`), and the end of their time
budget (:func:`until`, :func:`out_of_time`: :mod:`.budget` sets it)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from ...values import median_se

P = ParamSpec("P")
R = TypeVar("R")

#: a probe whose timing takes longer than this (s) stops (or gives None): the probes run
#: as the ``with`` block exits, and the exit must stay quick
SLOW_S = 0.5


@contextmanager
def rng_kept() -> Iterator[None]:
    """The RNG states a dataset may draw from (torch, random, numpy), put back after."""
    import random

    import torch

    states: list[tuple[Callable[[Any], Any], Any]] = [
        (torch.set_rng_state, torch.get_rng_state()), (random.setstate, random.getstate())]
    try:
        import numpy as np

        states.append((np.random.set_state, np.random.get_state()))
    except ImportError:  # pragma: no cover
        pass
    try:
        yield
    finally:
        for put, state in states:
            put(state)


#: this thread's time on a CPU and waiting in a run queue, ns (Linux schedstat)
SCHEDSTAT = Path("/proc/thread-self/schedstat")


def cpu_wanted_s() -> float:
    """Seconds this thread has run on a CPU (its CPU clock) or waited for one (runnable, on
    a run queue: Linux's schedstat), else its CPU time alone: what a busy host takes from
    CPU work is still CPU work, only a wait on files, the network or a sleep is not.
    schedstat's own run time is not read: for the thread reading it, the kernel brings it
    up to date only at a scheduler tick, so a batch shorter than a few ticks reads near 0;
    the CPU clock counts the slice still running. The wait is exact: it ends when the
    thread is put on a CPU."""
    try:
        queued = int(SCHEDSTAT.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        queued = 0
    return time.thread_time() + queued / 1e9


#: a probe's rounds stop, past their least number, once the median of each of its series
#: is known to this share of itself (:func:`median_se`), at most 2% of it. The predictions
#: built on these inputs are held to within 15%: a 2% input leaves them nearly all of it;
#: more rounds only cost the exit
SETTLED = 0.02


def median_noise(*series: Sequence[float]) -> float | None:
    """The largest relative standard error of the series' medians (:func:`median_se`):
    what a probe cut short hands on with its values; None where a series has under 3
    values or no positive median."""
    worst = 0.0
    for v in series:
        got = median_se(v)
        if got is None or got[0] <= 0:
            return None
        worst = max(worst, got[1] / got[0])
    return round(worst, 4)


def settled(*series: Sequence[float], tol: float = SETTLED) -> bool:
    """Is the median of every series known to ``tol`` of itself (:func:`median_se`)?
    False for a series of under 3 values or a median of 0 or less."""
    for v in series:
        got = median_se(v)
        if got is None or got[0] <= 0 or got[1] > tol * got[0]:
            return False
    return True


#: the probes' own clock, bound once: a test that stubs ``time.perf_counter`` to drive a
#: probe's rounds sees no extra reading of it
_CLOCK = time.perf_counter
#: where the probes run in this context add their own time: {probe: ms}, or None
_PROBE_MS: ContextVar[dict[str, float] | None] = ContextVar("diagnose_probe_ms", default=None)
#: when that clock was opened (the session's enter), by :data:`_CLOCK`
_OPENED: ContextVar[float | None] = ContextVar("diagnose_probe_opened", default=None)
#: the end of the probes' time budget (by :data:`_CLOCK`), None: no budget
_DEADLINE: ContextVar[float | None] = ContextVar("diagnose_probe_deadline", default=None)


def probe_clock() -> dict[str, float]:
    """A new ``{probe: ms}`` that every probe run from now on in this context (thread)
    adds its own wall time to (summed over its calls): a session opens one as it
    collects its context, and the dict, kept in that context, fills as the probes run.
    The time it was opened is kept too (:func:`capture_elapsed_s`)."""
    ms: dict[str, float] = {}
    _PROBE_MS.set(ms)
    _OPENED.set(_CLOCK())
    return ms


def capture_elapsed_s() -> float | None:
    """Seconds since this context's :func:`probe_clock` was opened (the capture's wall
    time so far); None where none is open."""
    t0 = _OPENED.get()
    return None if t0 is None else max(_CLOCK() - t0, 0.0)


#: the probes inside take their least rounds whatever the deadline (:func:`until`)
_LEAST: ContextVar[bool] = ContextVar("diagnose_probe_least", default=False)


@contextmanager
def until(deadline: float | None, least: bool = False) -> Iterator[None]:
    """The probes run inside stop their rounds at ``deadline`` (:data:`_CLOCK` time) once
    they hold their least values (:func:`out_of_time`), or give up where those would run
    past it (:func:`cannot_afford`; ``least``: never, their least rounds are always
    taken); None: no deadline."""
    token, gave, lt = _DEADLINE.set(deadline), _GAVE_UP.set(None), _LEAST.set(least)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
        _GAVE_UP.reset(gave)
        _LEAST.reset(lt)


def out_of_time() -> bool:
    """Has the probes' budget run out (:func:`until`)? False where none is set."""
    end = _DEADLINE.get()
    return end is not None and _CLOCK() >= end


#: the least rounds' cost (s) a probe gave up on (:func:`cannot_afford`), else None
_GAVE_UP: ContextVar[float | None] = ContextVar("diagnose_probe_gave_up", default=None)


def cannot_afford(round_s: float, rounds: int) -> bool:
    """Would ``rounds`` rounds of ``round_s`` seconds each run past the budget's end
    (:func:`until`)? A probe asks after its first (warm-up) round, the measure of its
    rounds, and gives up (None) where they would: its least rounds would hold values too
    few to trust or overrun the budget by more than that round. False without a budget."""
    end = _DEADLINE.get()
    need = max(round_s, 0.0) * rounds
    if end is None or _LEAST.get() or _CLOCK() + need <= end:
        return False
    _GAVE_UP.set(need)
    return True


def gave_up() -> float | None:
    """The least rounds' cost (s) the last probe in this context gave up on; None: none."""
    return _GAVE_UP.get()


def timed(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a probe: each call's wall time (ms) goes to the open :func:`probe_clock`
    under ``name``; nothing happens where none is open."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            t0 = _CLOCK()
            try:
                return fn(*args, **kwargs)
            finally:
                charge(name, _CLOCK() - t0)
        return run
    return wrap


def charge(name: str, seconds: float) -> None:
    """Add ``seconds`` to probe ``name``'s time on the open :func:`probe_clock` (none open:
    nothing): a probe that times two things states each one's time."""
    sink = _PROBE_MS.get()
    if sink is not None:
        sink[name] = round(sink.get(name, 0.0) + max(seconds, 0.0) * 1e3, 3)
