"""Synthetic step-time series for the detector's tests: log step times with realistic,
heavy-tailed noise (seeded, so every run sees the same series).

The noise is what a training loop's own clock shows on a shared machine: a Student-t body
(3 degrees of freedom: heavier tails than a normal), a slow wander (AR(1), so neighbouring
steps are alike), and rare slow steps (a preempted step, a collection, a checkpoint:
1.5-20x the level). Levels are log milliseconds.
"""

from __future__ import annotations

import math

import numpy as np


def steady(n: int, *, seed: int, level_ms: float = 40.0, spread: float = 0.03,
           wander: float = 0.5, slow_frac: float = 0.005) -> np.ndarray:
    """``n`` log step times around ``level_ms``."""
    rng = np.random.default_rng(seed)
    e = rng.standard_t(3, n) * spread
    out = np.empty(n)
    prev = 0.0
    for i, v in enumerate(e.tolist()):  # AR(1): each step is half its predecessor's noise
        prev = wander * prev + v
        out[i] = prev
    slow = rng.random(n) < slow_frac
    out[slow] += np.log(rng.uniform(1.5, 20.0, int(slow.sum())))
    return out + math.log(level_ms)


def with_change(n: int, at: int, ratio: float, *, seed: int, **kw: float) -> np.ndarray:
    """A steady series whose level is multiplied by ``ratio`` from step ``at`` on."""
    x = steady(n, seed=seed, **kw)
    x[at:] += math.log(ratio)
    return x
