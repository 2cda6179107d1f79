"""A large trace's step model (and its memory section) built in a forked process while
the analysis computes the metrics in its own: the two take one CPU each where they took
one CPU in turn. The child reads the trace from its copy of this process's memory (set
before the fork, never pickled) and sends back the model, a small object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .memory import trace_memory
from .stepmodel import step_model
from .trace.parallel import BrokenProcessPool, fork_pool
from .values import usable_cpus

R = TypeVar("R")

#: a trace of at least this many events has its step model built (and its memory read) in
#: a forked process while this one computes the metrics, on a second CPU: the model takes
#: ~0.1 s a million events, the fork and its answer (a pickled model, ~1 MB) a few ms
#: (benchmarks/analyze_speed.py)
MODEL_APART_MIN_EVENTS = 250_000
#: the trace a forked model process reads: set before the fork, so the child has it in its
#: copy of this process's memory and nothing of it is pickled
_FORKED: tuple[Any, int | None] | None = None


def model_and_memory(t: Any, max_steps: int | None) -> tuple[Any, Any]:
    """The trace's step model and its memory section."""
    return step_model(t, max_steps), trace_memory(t, max_steps)


def _forked_model() -> tuple[Any, Any]:
    """:func:`model_and_memory` of the trace set for the fork (the child's side)."""
    assert _FORKED is not None
    return model_and_memory(*_FORKED)


def start(t: Any, max_steps: int | None, workers: int | None
          ) -> Callable[[], tuple[Any, Any]] | None:
    """Start the step model (and the memory section) of a large trace in a forked process;
    a callable that waits for them (built here where the process died). None where the
    trace is small, one CPU is to be used (``workers`` 1: a read inside a pool) or forking
    is not safe (:func:`fork_pool`): the caller builds them itself."""
    global _FORKED
    if len(t) < MODEL_APART_MIN_EVENTS or workers == 1 or usable_cpus() < 2:
        return None
    pool = fork_pool(1)
    if pool is None:
        return None
    _FORKED = (t, max_steps)  # held until the answer: the pool forks when it likes
    try:
        future = pool.submit(_forked_model)
    except (BrokenProcessPool, OSError):  # no fork (out of memory, say): built here
        _FORKED = None
        pool.shutdown()
        return None

    def wait() -> tuple[Any, Any]:
        global _FORKED
        try:
            with pool:
                return future.result()
        except BrokenProcessPool:  # killed (for memory, say): built here instead
            return model_and_memory(t, max_steps)
        finally:
            _FORKED = None

    return wait


def beside(t: Any, max_steps: int | None, workers: int | None,
           work: Callable[[], R]) -> tuple[R, Any, Any]:
    """(``work()``, the trace's step model, its memory section): ``work`` runs here while
    the model is built in a forked process (:func:`start`), else after it here. The forked
    process is waited for even where ``work`` raises, so none is left behind."""
    wait = start(t, max_steps, workers)
    if wait is None:
        return (work(), *model_and_memory(t, max_steps))
    try:
        out = work()
    finally:
        model, mem = wait()
    return out, model, mem
