"""Named measurements: from the trace, the capture context and the samples.

``CATALOG`` maps every metric name to (unit, one-line documentation).
"""

from __future__ import annotations

from typing import Any

from .core import CATALOG as _TRACE_CATALOG
from .core import MetricSet, compute

CATALOG: dict[str, tuple[str, str]] = dict(_TRACE_CATALOG)
CATALOG["context_available"] = ("bool", "The run's context.json (from a live capture) was read")
CATALOG["rank_count"] = ("count", "Number of ranks (trace files) analysed together")

try:  # context and samples metrics come with capture
    from .context import CATALOG as _CTX_CATALOG
    from .context import context_metrics
    from .samples import CATALOG as _SMP_CATALOG
    from .samples import samples_metrics

    CATALOG.update(_CTX_CATALOG)
    CATALOG.update(_SMP_CATALOG)
except ImportError:  # pragma: no cover - during development only
    context_metrics = samples_metrics = None  # type: ignore[assignment]


def compute_all(ms: MetricSet, context: dict | None, samples: dict | None) -> dict[str, Any]:
    """Trace metrics merged with context and sample metrics (trace values win)."""
    values: dict[str, Any] = {}
    if context_metrics is not None:
        values.update(context_metrics(context))
    if samples_metrics is not None:
        values.update(samples_metrics(samples))
    values["context_available"] = context is not None
    for k, v in ms.values.items():
        if v is not None or k not in values:
            values[k] = v
    return values


__all__ = ["CATALOG", "MetricSet", "compute", "compute_all"]
