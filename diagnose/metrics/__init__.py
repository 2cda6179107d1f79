"""Named measurements: from the trace, the capture context and the samples.

``CATALOG`` maps every metric name to (unit, one-line documentation): the union of the
static declarations (:class:`~diagnose.metrics.declare.Metric`), nothing is computed to
build it. The cross-rank metrics join it when :mod:`.ranks` is imported; :mod:`.needs`
tells from the declarations why a metric has no value.
"""

from __future__ import annotations

from typing import Any

from .context import CATALOG as _CTX_CATALOG
from .context import context_metrics
from .core import DECLARATIONS as _TRACE_DECLARATIONS
from .core import MetricSet, compute
from .declare import (
    DATALOADER,
    EPOCH_START,
    LIVE,
    MAP_STYLE,
    OPTIMIZER_STEPS,
    SAMPLES,
    WORKER_TIMED,
    Metric,
    catalog,
    declared,
)
from .loader_wait import DECLARATIONS as _GRADED_WAIT
from .loader_wait import graded_wait
from .samples import CATALOG as _SMP_CATALOG
from .samples import samples_metrics

_RUN_INFO = (
    Metric("context_available", "bool", "The run's context.json (from a live capture) was read"),
    Metric("rank_count", "count", "Number of ranks (trace files) analysed together"),
)

#: the context's metrics that need an epoch's start among the clock's steps (of a
#: DataLoader: a loop without one has no epoch for its workers to start)
_EPOCH = ("dataloader_epoch_boundary_ms", "dataloader_epoch_after_ms", "dataloader_epoch_gap_ms",
          "dataloader_epoch_start_ms", "dataloader_epoch_start_per_step_ms",
          "dataloader_epoch_start_share")
_CONTEXT = [Metric(m.name, m.unit, m.doc, (*m.needs, DATALOADER, EPOCH_START))
            if m.name in _EPOCH else
            # the loader's own settings: a loop without one has none
            Metric(m.name, m.unit, m.doc, (*m.needs, DATALOADER))
            if m.name.startswith("dataloader_") else
            # a worker's batch timed after the loop: of a map-style dataset, where needed
            Metric(m.name, m.unit, m.doc, (*m.needs, DATALOADER, MAP_STYLE, WORKER_TIMED))
            if m.name.startswith("input_worker_batch") else
            # the clock's work between an optimizer's steps: a hand-written update has none
            Metric(m.name, m.unit, m.doc, (*m.needs, OPTIMIZER_STEPS))
            if m.name.startswith("loop_own_work_") else m
            for m in declared([_CTX_CATALOG], LIVE)]
#: Every metric's declaration but the cross-rank ones (see :mod:`.needs`).
DECLARATIONS: list[Metric] = [*_TRACE_DECLARATIONS, *_RUN_INFO, *_CONTEXT,
                              *declared([_SMP_CATALOG], SAMPLES), *_GRADED_WAIT]
CATALOG: dict[str, tuple[str, str]] = catalog(DECLARATIONS)


def compute_all(ms: MetricSet, context: dict | None, samples: dict | None) -> dict[str, Any]:
    """Trace metrics merged with context and sample metrics (trace values win), and the
    loader wait the input rules grade on (:mod:`.loader_wait`: from both)."""
    values: dict[str, Any] = {}
    values.update(context_metrics(context))
    values.update(samples_metrics(samples))
    values["context_available"] = context is not None
    for k, v in ms.values.items():
        if v is not None or k not in values:
            values[k] = v
    values.update(graded_wait(values))
    return values


__all__ = ["CATALOG", "DECLARATIONS", "MetricSet", "compute", "compute_all"]
