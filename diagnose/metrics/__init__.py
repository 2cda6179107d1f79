"""Named measurements: from the trace, the capture context and the samples.

``CATALOG`` maps every metric name to (unit, one-line documentation); ``DECLARED`` maps it
to its full declaration (:class:`~diagnose.metrics.declare.Metric`, with what it needs).
Both are the union of static declarations: nothing is computed to build them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .context import CATALOG as _CTX_CATALOG
from .context import context_metrics
from .core import DECLARATIONS as _TRACE_DECLARATIONS
from .core import MetricSet, compute
from .declare import LIVE, RANKS, SAMPLES, Metric, catalog, declared, missing_reason
from .samples import CATALOG as _SMP_CATALOG
from .samples import samples_metrics

_RUN_INFO = (
    Metric("context_available", "bool", "The run's context.json (from a live capture) was read"),
    Metric("rank_count", "count", "Number of ranks (trace files) analysed together"),
)

_DECLARATIONS: list[Metric] = [*_TRACE_DECLARATIONS, *_RUN_INFO,
                               *declared([_CTX_CATALOG], LIVE), *declared([_SMP_CATALOG], SAMPLES)]
CATALOG: dict[str, tuple[str, str]] = catalog(_DECLARATIONS)

# the cross-rank metrics (ranks.py adds its catalogs to CATALOG when imported)
from .declare import COLLECTIVES as _COLLECTIVES  # noqa: E402
from .ranks import RANK_CATALOG as _RANK_CATALOG  # noqa: E402
from .ranks import RUN_CATALOG as _RUN_CATALOG  # noqa: E402

_DECLARATIONS += declared([_RANK_CATALOG], _COLLECTIVES) + declared([_RUN_CATALOG], RANKS)
#: name -> declaration of every metric: trace, run, context, samples, per-rank and per-run.
DECLARED: dict[str, Metric] = {m.name: m for m in _DECLARATIONS}


def why_none(name: str, metrics: Mapping[str, Any]) -> str | None:
    """The short cause of metric ``name`` having no value (None: unknown metric, or no
    declared need explains it)."""
    m = DECLARED.get(name)
    return missing_reason(m, metrics) if m is not None else None


def compute_all(ms: MetricSet, context: dict | None, samples: dict | None) -> dict[str, Any]:
    """Trace metrics merged with context and sample metrics (trace values win)."""
    values: dict[str, Any] = {}
    values.update(context_metrics(context))
    values.update(samples_metrics(samples))
    values["context_available"] = context is not None
    for k, v in ms.values.items():
        if v is not None or k not in values:
            values[k] = v
    return values


__all__ = ["CATALOG", "DECLARED", "MetricSet", "compute", "compute_all", "why_none"]
