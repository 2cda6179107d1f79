"""Reading ``context.json``'s values: a nested key, and a value of the one type a metric
takes (anything else, or a missing key, is None: the metric is "not evaluated")."""

from __future__ import annotations

from typing import Any


def get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``; None where a level is missing or not a dict."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def as_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def as_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None
