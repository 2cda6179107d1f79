"""Small helpers every layer may use: a number read out of loosely typed data (JSON,
metrics, a context file), and the number of CPUs this process may use."""

from __future__ import annotations

import math
import numbers
import os


def as_real(x: object) -> int | float | None:
    """``x`` as a Python int or float where it is a real number (numpy scalars count, bools
    do not: ``True`` is a flag, not a count); None otherwise. Integers stay integers."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return None


def as_number(x: object, *, finite: bool = True) -> float | None:
    """``x`` as a float where it is a real number (not a bool); None otherwise, and for NaN
    and infinities unless ``finite`` is False."""
    r = as_real(x)
    if r is None:
        return None
    f = float(r)
    return f if not finite or math.isfinite(f) else None


def as_int(x: object) -> int | None:
    """``x`` where it is an int (not a bool: JSON's true is no count); None otherwise."""
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
