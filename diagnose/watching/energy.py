"""Energy per step from NVML's total-energy counter, counted over windows of many steps.

The counter (mJ since the driver loaded) updates about every 100 ms, far slower than a
step, so a step's energy is never read alone: readings taken at ~1 Hz, each with the step
count at that moment, are closed into a window once it spans at least ``window_s``
seconds and ``min_steps`` steps; the window's joules over its steps is its J/step (and
over its samples, J/sample, where the loader's batch size is known). The counter's 100 ms
grain and the step count's one-step grain each err by under ``100 ms / window_s`` and
``1 / min_steps`` of a window. A counter that goes back (a driver reload) starts a new
window. The run's J/step is all windows' joules over all their steps.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["EnergyMeter"]

#: a window spans at least this long (s): the counter's ~100 ms grain is then <= 1%
WINDOW_S = 10.0
#: ... and at least this many steps: the step count's grain is then <= 5%
MIN_STEPS = 20


class EnergyMeter:
    """Feed readings with :meth:`add`; it returns each window as it closes (a dict:
    ``t0``, ``t1``, ``first``, ``steps``, ``joules``, ``j_per_step``, ``j_per_sample``,
    ``watts``). The last ``keep`` windows stay in :attr:`windows`."""

    def __init__(self, *, window_s: float = WINDOW_S, min_steps: int = MIN_STEPS,
                 batch_size: int | None = None, keep: int = 1000) -> None:
        self.window_s, self.min_steps, self.batch_size = window_s, min_steps, batch_size
        self.windows: deque[dict[str, Any]] = deque(maxlen=keep)
        self.joules = 0.0
        self.steps = 0
        self.count = 0
        self._start: tuple[float, int, int] | None = None  # (t, step, mJ) of the window

    def add(self, t: float, step: int, energy_mj: int | None) -> dict[str, Any] | None:
        """One reading: unix time, the steps done so far, the counter (None: not read)."""
        if energy_mj is None:
            return None
        start = self._start
        if start is None:
            self._start = (t, step, energy_mj)
            return None
        t0, s0, e0 = start
        if energy_mj < e0 or step < s0:  # the counter (or the step count) restarted
            self._start = (t, step, energy_mj)
            return None
        if t - t0 < self.window_s or step - s0 < self.min_steps:
            return None
        self._start = (t, step, energy_mj)
        joules, steps = (energy_mj - e0) / 1e3, step - s0
        self.joules += joules
        self.steps += steps
        self.count += 1
        jps = joules / steps
        w = {"t0": t0, "t1": t, "first": s0, "steps": steps, "joules": round(joules, 3),
             "j_per_step": round(jps, 6), "watts": round(joules / (t - t0), 3),
             "j_per_sample": (round(jps / self.batch_size, 8) if self.batch_size else None)}
        self.windows.append(w)
        return w

    def summary(self, why: str | None = None) -> dict[str, Any]:
        """The run's J/step and J/sample over all windows; None with ``why`` where no
        window closed (no counter, or too short a run)."""
        if not self.count:
            return {"j_per_step": None, "j_per_sample": None, "joules": None, "steps": 0,
                    "windows": 0,
                    "why": why or (f"no window of {self.window_s:.0f} s and "
                                   f"{self.min_steps} steps closed")}
        jps = self.joules / self.steps
        return {"j_per_step": round(jps, 6),
                "j_per_sample": round(jps / self.batch_size, 8) if self.batch_size else None,
                "joules": round(self.joules, 3), "steps": self.steps, "windows": self.count,
                "why": None}
