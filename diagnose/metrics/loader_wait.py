"""The loader wait a finding is graded on, as its headline quotes it.

The input rules grade the wait on the steps timed without the profiler where the clock
timed them (those that began no epoch, where it told them apart), else on the profiled
window; the headline must quote the same figure, not the window's (the profiler slows
the step, not the loader, so the window's share of the wait can be far below the job's).
The share, its ms a step, the mean step of those steps, and which steps they are, in
words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..values import as_number
from .declare import DATALOADER, Metric

DECLARATIONS = (
    Metric("dataloader_wait_graded_share", "fraction",
           "The share of the step the input rules grade the loader wait on: the unprofiled "
           "steps that began no epoch, else every unprofiled step, else the profiled window "
           "(dataloader_wait_steady_share, dataloader_wait_unprofiled_share, dataloader_share)",
           (DATALOADER,)),
    Metric("dataloader_wait_graded_ms", "ms",
           "That wait in ms a step: the share of the mean step of the same steps",
           (DATALOADER,)),
    Metric("dataloader_wait_graded_step_ms", "ms",
           "The mean step of the steps that share is of", (DATALOADER,)),
    Metric("dataloader_wait_graded_steps", "name",
           "Which steps those are, in words ('without the profiler', 'under the profiler')",
           (DATALOADER,)),
)


def graded_wait(m: Mapping[str, Any]) -> dict[str, object]:
    """The :data:`DECLARATIONS` from the merged metrics ``m`` (all None without a
    DataLoader share of any kind)."""
    out: dict[str, object] = {d.name: None for d in DECLARATIONS}
    steady, steady_ms = (as_number(m.get("dataloader_wait_steady_share")),
                         as_number(m.get("step_time_steady_mean_ms")))
    free, free_ms = (as_number(m.get("dataloader_wait_unprofiled_share")),
                     as_number(m.get("step_time_unprofiled_mean_ms")))
    prof, prof_ms = as_number(m.get("dataloader_share")), as_number(m.get("step_time_mean_ms"))
    for share, step, said in (
            (steady, steady_ms, "without the profiler, in the steps that began no epoch"),
            (free, free_ms, "without the profiler"), (prof, prof_ms, "under the profiler")):
        if share is not None and step is not None:
            out.update({"dataloader_wait_graded_share": share,
                        "dataloader_wait_graded_ms": round(share * step, 3),
                        "dataloader_wait_graded_step_ms": step,
                        "dataloader_wait_graded_steps": said})
            break
    return out
