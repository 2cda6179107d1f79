"""The signals the watch tests for changes: how each is transformed and its detector's
parameters (:class:`~diagnose.watching.detector.Params`).

Per step (training thread): ``step_time`` as log ms, so a change is a ratio and the scale
a relative spread; ``loader_wait`` as log(wait + a fifth of the baseline step), so a
loader that never made the loop wait does not alarm on microseconds, and a change must
move the wait by a tenth of a step or more (from no wait; more from a long one). Per ~1 Hz sample (sampler thread):
``gpu_util`` as a fraction (a change of 10 points or more), ``memory`` as log bytes (5% or
more; the baseline is never refreshed, so a slow leak is seen), and per energy window
(~10 s) ``energy`` as log J/step (10% or more).
"""

from __future__ import annotations

import math

from .detector import Params

__all__ = ["LOADER_OFFSET", "PARAMS", "from_x", "to_x"]

#: the loader wait is tested as log(wait + this x the baseline's median step)
LOADER_OFFSET = 0.2

PARAMS: dict[str, Params] = {
    "step_time": Params(),
    "loader_wait": Params(min_change=math.log(1.5), sigma_floor=0.02),
    "gpu_util": Params(learn=30, relearn=15, refresh=120, min_len=10, sigma_floor=0.02,
                       min_change=0.10, spike_z=1e9, confirm=12),
    "memory": Params(learn=30, relearn=15, refresh=0, min_len=10, sigma_floor=0.005,
                     min_change=math.log(1.05), spike_z=1e9, confirm=12),
    "energy": Params(learn=6, relearn=4, refresh=0, min_len=4, sigma_floor=0.02,
                     min_change=math.log(1.10), spike_z=1e9, confirm=6),
}

_TINY = 1e-9


def to_x(signal: str, v: float, offset: float = 0.0) -> float:
    """A value in the signal's units to the detector's (``offset``: the loader's)."""
    if signal == "gpu_util":
        return v / 100.0
    if signal == "loader_wait":
        return math.log(max(v, 0.0) + offset + _TINY)
    return math.log(max(v, _TINY))


def from_x(signal: str, x: float, offset: float = 0.0) -> float:
    """A detector level back in the signal's units."""
    if signal == "gpu_util":
        return x * 100.0
    if signal == "loader_wait":
        return max(math.exp(x) - offset, 0.0)
    return math.exp(x)
