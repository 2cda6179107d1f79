"""Metrics from a run's ``context.json`` (written by capture; see diagnose.capture.runinfo),
one module an area.

Flat names rules can use next to the trace metrics, e.g. ``dataloader_num_workers
== 0 and dataloader_wait_frac > 0.4``. Every value that the context does not state is None
(rule "not evaluated"), never a default. Each area declares its names statically in a
``CATALOG``; :data:`CATALOG` here is their union.

- :mod:`.settings`: the run's settings (DataLoader, optimizer, model, threads, CPUs)
- :mod:`.step_clock`: the unprofiled steps by the session's own clock, and its note
- :mod:`.loop_work`: the loop's own work between its steps, by that clock
- :mod:`.loop_threads`: what one thread costs the loop's work, by its one-thread steps
- :mod:`.loop_fork`: what an epoch's forks cost the loop's steps, by its forked steps
- :mod:`.cpu_holders`: who held the CPUs the training thread waited for
- :mod:`.loading`: the loop's wait for batches by cause, and the loader's probes
- :mod:`.cpu`: the CPUs' capacity, the model's threads and their contention
- :mod:`.cpu_autocast`: a CPU model's autocast against fp32
- :mod:`.outcome`: an out-of-memory error, the device's peak memory
"""

from __future__ import annotations

from typing import Any

from . import (
    cpu,
    cpu_autocast,
    loading,
    loop_fork,
    loop_threads,
    loop_work,
    outcome,
    settings,
    step_clock,
)
from .clock_note import clock_note, load_shift_note
from .cpu_holders import cpu_wait_holders, pool_clash
from .fields import get
from .loading import WORKER_POOL_CPUS, worker_pool
from .step_clock import UNRELIABLE_SPREAD, unprofiled_step_ms

CATALOG: dict[str, tuple[str, str]] = {
    **settings.CATALOG, **loading.CATALOG, **cpu.CATALOG, **step_clock.CATALOG,
    **outcome.CATALOG, **loop_work.CATALOG, **loop_threads.CATALOG, **loop_fork.CATALOG,
    **cpu_autocast.CATALOG}


def context_metrics(ctx: dict[str, Any] | None) -> dict[str, object]:
    """The CATALOG names from a context dict; all None when there is no context."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    if not isinstance(ctx, dict):
        return out
    out.update(settings.settings_metrics(ctx))
    out.update(step_clock.clock_metrics(get(ctx, "capture")))
    out.update(loop_work.loop_work_metrics(get(ctx, "capture")))
    out.update(loop_threads.loop_threads_metrics(get(ctx, "capture")))
    out.update(loop_fork.loop_fork_metrics(get(ctx, "capture")))
    out.update(loading.loading_metrics(ctx))
    out.update(loading.epoch_start_metrics(out))  # after the settings and the clock
    out.update(cpu.cpu_metrics(ctx, out))  # after the clock: the loop's own forward
    out.update(cpu_autocast.cpu_autocast_metrics(ctx, out))  # after the clock too
    out.update(outcome.outcome_metrics(ctx))
    return out


__all__ = ["CATALOG", "UNRELIABLE_SPREAD", "WORKER_POOL_CPUS", "clock_note", "context_metrics",
           "cpu_wait_holders", "load_shift_note", "pool_clash", "unprofiled_step_ms", "worker_pool"]
