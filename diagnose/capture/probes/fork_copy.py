"""What forking the DataLoader's workers costs the training process's next step: the memory
it writes is copied first.

A forked child shares the parent's pages until one side writes one; the parent's first
write to each then faults and copies it (copy-on-write), dearer where torch's threads fault
at once (each fault flushes the other CPUs' view of the page). A loader whose workers are
not persistent forks them at every epoch's ``iter()``, so the first step of each epoch
pays for every page a step writes. Timed here, with a child forked that only waits (as an
idle worker does):

- the model's forward and backward on the first batch (:func:`~.compute.model_work`, on
  torch's threads) right after the fork, less the same work unforked: the copies of its
  activations, temporaries and gradients;
- a buffer written before the fork, written again: the price of a MiB, at which the
  optimizer's step writes the parameters and its state (their bytes are the memory
  section's, read by the metrics); on torch's threads, and a second buffer on one thread
  (a change to one thread faults from one: no other CPU's view to flush).

A loader whose workers start otherwise (spawn, forkserver) shares no pages: both read 0,
untimed.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from ..fork_steps import fork_idle
from .common import cannot_afford, out_of_time, rng_kept, timed
from .compute import Inputs, cpu_pairs, models_work, on_cpu

#: the buffer written before and after the fork (MiB): a few thousand pages, a few ms of
#: copies, long enough that the unforked write (~0.1 ms) is no part of the reading
COPY_MIB = 8
#: forks timed: one at least, more (up to ROUNDS) while the probes' budget lasts where the
#: work is quick (under QUICK_S): the copies are the same pages each time, so more forks
#: narrow the work's reading (a MiB's price barely moves), and a slow work's copies are many
ROUNDS = 3
QUICK_S = 0.05


def _write(buf: Any) -> float:
    t0 = time.perf_counter()
    buf.add_(1.0)
    return time.perf_counter() - t0


def start_method(loader: Any) -> str | None:
    """How the loader's workers start: its own ``multiprocessing_context``, else the
    default; None where it cannot be told."""
    import multiprocessing

    ctx = getattr(loader, "multiprocessing_context", None)
    if isinstance(ctx, str):
        return ctx
    if ctx is not None and hasattr(ctx, "get_start_method"):
        return str(ctx.get_start_method())
    try:
        return multiprocessing.get_start_method(allow_none=False)
    except (RuntimeError, ValueError):  # pragma: no cover
        return None


@timed("fork_copy")
def time_fork_copy(model: Any, inputs: Inputs | None, loader: Any = None,
                   others: Sequence[tuple[Any, Inputs]] = (), quiet_ms: float | None = None,
                   work: bool = True) -> dict[str, Any] | None:
    """``{"start_method", "work_ms", "per_mib_ms", "per_mib_1thread_ms", "rounds"}``: the
    model's work (ms) after a fork beyond the same work unforked, and what a MiB written
    before the fork costs written after it (ms), on torch's threads and on one, the
    medians over the forks timed (:data:`ROUNDS`; the module doc);
    ``others``: the loop's other models, in the same work; ``quiet_ms``: that work unforked
    on torch's threads as the thread timing just gave it (its median), else timed here;
    ``work`` False: the loop's own steps timed the copies after a fork
    (:mod:`~diagnose.capture.fork_steps`), so only a MiB's prices are timed, one fork
    (``work_ms`` None).
    All three 0, untimed, where
    the loader's workers do not fork. None where it does not apply (no inputs, a model off the
    CPU: its memory is the device's; torch on one thread, as for the thread timing: a
    fault from one thread costs a fraction of one from several, and the model's work is
    not run again where the copies matter least) or the budget cannot hold it."""
    import torch

    if (inputs is None or model is None or not on_cpu(model) or not hasattr(os, "fork")
            or torch.get_num_threads() < 2):
        return None
    method = start_method(loader)
    if method is not None and method != "fork":
        return {"start_method": method, "work_ms": 0.0, "per_mib_ms": 0.0,
                "per_mib_1thread_ms": 0.0, "rounds": 0}

    timing: Any = models_work(cpu_pairs(model, inputs, others), idle_s=0.0) if work else (
        contextlib.nullcontext((None, lambda: 0.0)))
    works: list[float] = []
    copies: list[float] = []
    ones: list[float] = []
    n = torch.get_num_threads()
    with rng_kept(), timing as (_, run):
        if work:
            t0 = time.perf_counter()
            warm = run()  # the pool back on torch's threads after the thread timing's one
            # unforked: as the thread timing gave it, else timed here
            timed_here = quiet_ms is None or quiet_ms <= 0
            base = min(warm, run()) if timed_here else (quiet_ms or 0.0) / 1e3
            if cannot_afford(time.perf_counter() - t0, 2):  # a fork: the work and its copies
                return None
        rounds = ROUNDS if work and base < QUICK_S else 1
        buf, other = (torch.ones(COPY_MIB * 2**20 // 4) for _ in range(2))
        plain = min(_write(buf) for _ in range(3))
        try:
            torch.set_num_threads(1)
            plain_one = min(_write(other) for _ in range(3))
            for k in range(rounds):
                if k and out_of_time():  # more forks only while the budget lasts
                    break
                torch.set_num_threads(n)
                let_go = fork_idle()
                try:
                    took = run()
                    wrote = _write(buf)
                    torch.set_num_threads(1)
                    wrote_one = _write(other)
                finally:
                    let_go()
                if work:
                    works.append(max(0.0, took - base))
                copies.append(max(0.0, wrote - plain) / COPY_MIB)
                ones.append(max(0.0, wrote_one - plain_one) / COPY_MIB)
        finally:
            torch.set_num_threads(n)
    return {"start_method": method or "fork", "rounds": len(copies),
            "work_ms": round(statistics.median(works) * 1e3, 4) if works else None,
            "per_mib_ms": round(statistics.median(copies) * 1e3, 4),
            "per_mib_1thread_ms": round(statistics.median(ones) * 1e3, 4)}
