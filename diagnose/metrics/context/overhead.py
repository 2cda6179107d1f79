"""The note on how much the profiler slowed the steps it recorded: the profiled steps' median
over the unprofiled ones' (``profiler_overhead_ratio``), said where it passes
:data:`OVERHEAD_NOTE_RATIO`. Where other processes took a CPU or more while the window ran
than while the plain steps were timed, the slowdown is not the profiler's alone, and the
note says the load moved instead of blaming it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..window import UNEVEN_MEAN_OVER_MEDIAN
from .cpu_holders import OTHERS_BUSY_CPUS

#: the profiled steps may be this much slower than the unprofiled ones before a note says so
OVERHEAD_NOTE_RATIO = 1.2


def overhead_note(metrics: Mapping[str, Any]) -> str | None:
    """The profiler's slowdown in words, or None where it is under OVERHEAD_NOTE_RATIO."""
    r = metrics.get("profiler_overhead_ratio")
    if not isinstance(r, int | float) or r <= OVERHEAD_NOTE_RATIO:
        return None
    window, after = metrics.get("host_cpu_others_cpus"), metrics.get("step_others_cpus_unprofiled")
    if (isinstance(window, float) and isinstance(after, float)
            and window - after >= OTHERS_BUSY_CPUS):
        # the window ran under a load the steps after it did not: the ratio holds both
        return (f"the profiled steps took {r:.2f}x the plain ones' time, while other "
                f"processes took {window:.2f} CPUs (against {after:.2f} as the plain steps "
                "were timed): how much of it is the profiler's is not known; the step time "
                "above is the unprofiled one")
    mean, med = metrics.get("step_time_mean_ms"), metrics.get("step_time_median_ms")
    even = not (isinstance(mean, int | float) and isinstance(med, int | float)
                and mean >= UNEVEN_MEAN_OVER_MEDIAN * med)
    prof = metrics.get("step_time_profiled_clock_median_ms")
    un = metrics.get("step_time_unprofiled_median_ms")
    ms = "{:.2f} ms".format
    return (f"the profiler slowed the profiled steps {r:.2f}x (the loop's clock: median "
            f"{ms(prof) if isinstance(prof, int | float) else '?'} profiled, "
            f"{ms(un) if isinstance(un, int | float) else '?'} without it): the step time "
            "above is the unprofiled one; the breakdown's milliseconds are from the profiled "
            "window" + (" (its shares hold up better)" if even else ""))
