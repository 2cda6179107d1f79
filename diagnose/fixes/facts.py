"""Reading the facts and metrics fixes decide on: each a value of a known type, or None."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def count(m: Mapping[str, Any], name: str) -> int | None:
    """An integer fact (not a bool), or None when missing or of another type."""
    v = m.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def cpus(m: Mapping[str, Any]) -> int | None:
    """The CPUs this process may use (``cpu_count``), or None when not known."""
    n = count(m, "cpu_count")
    return n if n is not None and n > 0 else None


def cuda(m: Mapping[str, Any]) -> bool:
    return m.get("device_type") == "cuda"


def cpus_saturated(facts: Mapping[str, Any]) -> bool:
    """The diagnosis saw the usable CPUs busy 85% of the time or more."""
    v = facts.get("host_cpu_mean_pct")
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 85


__all__ = ["count", "cpus", "cpus_saturated", "cuda"]
