"""Small helpers every layer may use: a number read out of loosely typed data (JSON,
metrics, a context file), the number of CPUs this process may use, a measured interval's
end as printed, and an object's type named with its article."""

from __future__ import annotations

import math
import numbers
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path


def a_type(x: object) -> str:
    """``x``'s type name with its article, as a message says it: "an int", "a list"."""
    name = type(x).__name__
    return f"{'an' if name[:1].lower() in 'aeio' else 'a'} {name}"  # "a UserDict"


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


def mib(n: object) -> str:
    """A size in bytes as MiB ("1,234.5 MiB"); "n/a" where it is not a number."""
    v = as_real(n)
    return "n/a" if v is None else f"{v / 2**20:,.1f} MiB"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cpu_quota(root: str = "/sys/fs/cgroup", cgroup: str = "/proc/self/cgroup") -> float | None:
    """CPUs' worth of time this process's cgroup may use: its CFS quota over its period
    (cgroup v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), the
    least along its path up to the mount's root (a container's ``--cpus``, a Kubernetes
    CPU limit). None where none is set or it cannot be read (not Linux)."""
    try:
        lines = Path(cgroup).read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hid == "0" and not ctrls:  # v2: one hierarchy
            quotas += _walk(Path(root), path, _v2_quota)
        elif "cpu" in ctrls.split(","):  # v1: the cpu controller's own mount
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                if (Path(root) / mount).is_dir():
                    quotas += _walk(Path(root) / mount, path, _v1_quota)
                    break
    return min(quotas) if quotas else None


def _walk(mount: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """``read`` of the cgroup folder at ``path`` under ``mount`` and of each above it."""
    out, at = [], mount / path.strip("/")
    while True:
        q = read(at)
        if q is not None:
            out.append(q)
        if at == mount or mount not in at.parents:
            return out
        at = at.parent


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


#: an interval's ends past these print as "<0.01" and ">100" (unbounded, as far as a
#: reader needs): a few rounds on a busy host bound a speedup that loosely (a t quantile of
#: 2 degrees of freedom, Bonferroni-split over the looks)
SPEEDUP_SHOWN = (0.01, 100.0)


def interval_end(x: float) -> str:
    """An interval's end as printed: 2 decimals, whole numbers from 10, clipped to
    :data:`SPEEDUP_SHOWN` (the exact value stays in the JSON)."""
    if x < SPEEDUP_SHOWN[0]:
        return f"<{SPEEDUP_SHOWN[0]:g}"
    if x > SPEEDUP_SHOWN[1]:
        return f">{SPEEDUP_SHOWN[1]:g}"
    return f"{x:.0f}" if x >= 10 else f"{x:.2f}"


#: the standard error of a median from the median absolute deviation: 1.4826 x MAD is a
#: normal spread's sigma, and a median's standard error is sqrt(pi / 2) sigma / sqrt(n)
MAD_SE = 1.4826 * math.sqrt(math.pi / 2)


def median_se(v: Sequence[float]) -> tuple[float, float] | None:
    """(median, its standard error ``MAD_SE x MAD / sqrt(n)``) of ``v``; None under 3
    values. The median absolute deviation, not the quartiles: a probe's few rounds may hold
    one disturbed round (a busy moment of the host), which the median and the MAD pass
    over and which the quartiles of three values would take as the spread."""
    if len(v) < 3:
        return None
    med = statistics.median(v)
    mad = statistics.median(abs(x - med) for x in v)
    return med, MAD_SE * mad / math.sqrt(len(v))
