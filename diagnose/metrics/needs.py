"""Why a metric has no value, from its declaration: what it needs (GPU activity in the
trace, a live capture, 2+ ranks, ...), as one short cause shared by every metric with
that need, so that reasons group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import DECLARATIONS
from .declare import COLLECTIVES, RANKS, Metric, declared, missing_reason
from .ranks import RANK_CATALOG, RUN_CATALOG

#: name -> declaration of every metric: trace, run, context, samples, per-rank and per-run.
DECLARED: dict[str, Metric] = {
    m.name: m for m in [*DECLARATIONS, *declared([RANK_CATALOG], COLLECTIVES),
                        *declared([RUN_CATALOG], RANKS)]}


def why_none(name: str, metrics: Mapping[str, Any]) -> str | None:
    """The short cause of metric ``name`` having no value (None: an unknown metric, or
    none of its needs explains it)."""
    m = DECLARED.get(name)
    return missing_reason(m, metrics) if m is not None else None
