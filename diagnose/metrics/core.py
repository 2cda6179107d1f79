"""Named measurements computed from one Trace, area by area.

Every metric is declared with a name, unit, documentation and what it needs in the module
of its area (window, device, workload, breakdown, idle, dataloader, transfers, syncs,
kernels, precision, communication, memory, optimizer); ``CATALOG`` is the union of those
declarations. A metric the trace cannot give (no GPU events, no DataLoader annotation,
...) is ``None``, never 0, so a rule that needs it is "not evaluated" rather than "passed".

:func:`analyse` computes the shared pieces once (the step window, the time categories,
the synchronising calls, the graph-replayed kernels, the host blocked by pageable copies)
and hands each area exactly what it reads: no area depends on another having run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Trace, give_back_freed
from . import (
    breakdown,
    communication,
    dataloader,
    device,
    idle,
    kernels,
    memory,
    optimizer,
    precision,
    syncs,
    transfers,
    window,
    workload,
)
from . import intervals as iv
from .declare import Metric, MetricSet, catalog
from .kernels import TOP_KERNELS
from .precision import TC_SPEEDUP_CAP
from .transfers import PAGEABLE_COPY_US, PAGEABLE_GBPS

#: Every trace metric's declaration, in the order a trace's metrics come in.
DECLARATIONS: tuple[Metric, ...] = (
    window.METRICS + device.METRICS + workload.METRICS + breakdown.METRICS + idle.METRICS
    + dataloader.METRICS + transfers.METRICS + syncs.METRICS + kernels.METRICS
    + precision.METRICS + communication.METRICS + memory.METRICS + optimizer.METRICS
    + device.DROPPED
)

#: name -> (unit, one-line documentation) of every trace metric.
CATALOG: dict[str, tuple[str, str]] = catalog(DECLARATIONS)


@dataclass(frozen=True)
class Analysed:
    """A trace's metrics, with the pieces other measurements (per-rank collectives) build on."""

    metrics: MetricSet
    window: window.StepWindow
    categories: breakdown.Categories


def analyse(t: Trace, max_steps: int | None = None, *,
            grads_set_to_none: bool | None = None) -> Analysed:
    """All trace metrics for one rank (of its first ``max_steps`` ProfilerSteps, if given:
    a window cut short by the end of the loop ends in a step that is not whole).
    ``grads_set_to_none``: what the capture saw of the steps' gradients (see
    :func:`~.optimizer.optimizer_metrics`)."""
    w = window.StepWindow(t, max_steps)
    give_back_freed()  # each area's temporaries out of the process's memory before the next's
    cats = breakdown.categories(w)
    give_back_freed()
    sync = syncs.syncs(w)
    graph_kernel = workload.graph_replayed(w)
    pageable = transfers.pageable_h2d(w)
    blocked = transfers.pageable_blocked(w, pageable) if w.has_gpu else iv.EMPTY
    in_window_kernels = kernels.kernels_in_window(w)

    values: dict[str, Any] = {}
    series: dict[str, list[float]] = {}
    v, s = window.window_metrics(w)
    notes = list(w.notes)
    values.update(v)
    series.update(s)
    dev = device.device_metrics(t)
    values.update(dev)
    v, n = workload.workload_metrics(w, graph_kernel)
    values.update(v)
    notes.extend(n)
    v, s = breakdown.breakdown_metrics(w, cats)
    for cat in breakdown.CLAIMED_ONLY:  # read by the breakdown alone: out of memory now
        cats.sets.pop(cat, None)
    give_back_freed()
    values.update(v)
    series.update(s)
    idle_v = idle.idle_metrics(w, cats.sets["dataloader"], sync.spans, blocked, graph_kernel)
    give_back_freed()
    values.update(idle_v)
    v, s = dataloader.dataloader_metrics(w, cats.dataloader, cats.sets["dataloader"])
    values.update(v)
    series.update(s)
    values.update(transfers.transfer_metrics(w, pageable, blocked))
    give_back_freed()
    values.update(syncs.sync_metrics(w, sync))
    values.update(kernels.kernel_metrics(w, in_window_kernels))
    give_back_freed()
    values.update(precision.precision_metrics(t, in_window_kernels, w.n_steps, w.has_gpu, dev))
    values.update(communication.comm_metrics(w, cats.comm, cats.sets["communication"],
                                             cats.sets["kernel"]))
    values.update(memory.memory_metrics(t, dev["device_memory_bytes"]))
    values.update(optimizer.optimizer_metrics(w, idle_v["idle_launch_frac"],
                                              grads_set_to_none=grads_set_to_none))
    give_back_freed()
    values.update(device.dropped_metrics(t))
    unread = device.unread_note(t)
    if unread:
        notes.append(unread)
    tables: dict[str, Any] = {}
    top = kernels.top_kernels(t, w.dev)
    if top is not None:
        tables["top_kernels"] = top
    return Analysed(MetricSet(values, series, notes, tables), w, cats)


def compute(trace: Trace, max_steps: int | None = None) -> MetricSet:
    """All trace metrics for one rank (``max_steps``: see :func:`analyse`)."""
    return analyse(trace, max_steps).metrics


class _Computer:
    """What metrics/ranks.py reads of one trace's analysis (the window's selections and
    the communication kernels), kept under the name it imports until it calls
    :func:`analyse` itself."""

    def __init__(self, t: Trace, max_steps: int | None = None,
                 grads_set_to_none: bool | None = None) -> None:
        self.t = t
        self.max_steps = max_steps
        self.grads_set_to_none = grads_set_to_none

    def run(self) -> MetricSet:
        a = analyse(self.t, self.max_steps, grads_set_to_none=self.grads_set_to_none)
        w = a.window
        self.host: np.ndarray = w.host
        self.n_steps, self.W, self.has_gpu = w.n_steps, w.W, w.has_gpu
        self.comm_mask: np.ndarray = a.categories.comm
        self.sets = a.categories.sets
        self._in_window = w.within
        self.in_steps = w.in_steps
        self._sel = w.sel
        return a.metrics


__all__ = ["CATALOG", "DECLARATIONS", "PAGEABLE_COPY_US", "PAGEABLE_GBPS", "TC_SPEEDUP_CAP",
           "TOP_KERNELS", "Analysed", "MetricSet", "analyse", "compute"]
