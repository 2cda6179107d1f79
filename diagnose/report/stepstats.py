"""Is run B's step time different from run A's, beyond the step-to-step noise?

From each run's per-step times: the spread of each (median, quartiles), and an interval
for the relative change from A to B. The interval is the distribution-free one of
Hodges-Lehmann for a shift in log step time (Mann-Whitney: the order statistics of all
``log b_j - log a_i`` differences; exact counts for small runs, the normal approximation
beyond), so a run of 5 steps gets an honest, wide interval and a right-skewed step time
(a few slow steps) does not drag it. Too few steps for any interval at the confidence
asked: no interval, and ``within noise``.

Steps of one run share the machine's state, so that interval speaks of the noise between
steps, not of a quieter or busier machine between the two runs, which one capture of each
cannot measure. So "no change" is a band: a change within
``NOISE_FLOOR_PCT`` (5%) either way. ``better``/``worse`` only when the interval lies
wholly outside that band; otherwise ``within noise``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist
from typing import Any

import numpy as np

CONFIDENCE = 0.95
#: Run-to-run noise (percent) a comparison of one capture each cannot see: "no change".
NOISE_FLOOR_PCT = 5.0
_EXACT_MAX = 60  # exact Mann-Whitney counts while both runs have at most this many steps


@dataclass(frozen=True)
class Spread:
    """One run's per-step times (ms): how many, median and quartiles."""

    n: int
    median: float
    p25: float
    p75: float

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.n, "median_ms": round(self.median, 4),
                "p25_ms": round(self.p25, 4), "p75_ms": round(self.p75, 4)}


@dataclass(frozen=True)
class StepDiff:
    """Run B against run A: the change of the median and the interval of the change (%)."""

    a: Spread
    b: Spread
    change_pct: float  # median B vs median A
    shift_pct: float  # the Hodges-Lehmann estimate of the change
    lo_pct: float | None  # None: too few steps for an interval
    hi_pct: float | None
    confidence: float
    floor_pct: float = NOISE_FLOOR_PCT  # changes within +-floor count as no change

    @property
    def verdict(self) -> str:
        """``better`` (B faster), ``worse`` (B slower) or ``within noise``."""
        if self.lo_pct is None or self.hi_pct is None:
            return "within noise"
        if self.hi_pct < -self.floor_pct:
            return "better"
        if self.lo_pct > self.floor_pct:
            return "worse"
        return "within noise"

    def why(self) -> str:
        """Why "within noise" where the steps do differ (the interval excludes no change
        but reaches into the band): the clause the text puts after the verdict, else ""."""
        if self.verdict != "within noise" or self.lo_pct is None or self.hi_pct is None:
            return ""
        if not (self.lo_pct > 0 or self.hi_pct < 0):
            return ""
        side = "slower" if self.lo_pct > 0 else "faster"
        near = min(abs(self.lo_pct), abs(self.hi_pct))
        return (f" (B's steps are {side}, but by as little as {near:.1f}% at the "
                f"interval's near end, within the ±{self.floor_pct:g}% that two captures "
                "of one unchanged job can differ by)")

    def interval_text(self) -> str:
        if self.lo_pct is None or self.hi_pct is None:
            return (f"too few steps ({self.a.n} and {self.b.n}) for a "
                    f"{self.confidence:.0%} interval")
        floor = (f"; two captures of one job differ by up to ±{self.floor_pct:g}%"
                 if self.floor_pct else "")
        return (f"{self.confidence:.0%} interval {self.lo_pct:+.1f}% to {self.hi_pct:+.1f}%"
                f"{floor}")

    def to_json(self) -> dict[str, Any]:
        r = _round2
        return {"a": self.a.to_json(), "b": self.b.to_json(), "change_pct": r(self.change_pct),
                "shift_pct": r(self.shift_pct),
                "interval_pct": None if self.lo_pct is None else [r(self.lo_pct),
                                                                    r(self.hi_pct)],
                "confidence": self.confidence, "noise_floor_pct": self.floor_pct,
                "verdict": self.verdict,
                "method": "Hodges-Lehmann shift of log step time, Mann-Whitney interval"}


def _round2(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def spread(times_ms: Sequence[float] | np.ndarray) -> Spread:
    x = np.asarray(times_ms, dtype=float)
    p25, med, p75 = np.percentile(x, [25, 50, 75])
    return Spread(len(x), float(med), float(p25), float(p75))


def clean(times_ms: Sequence[Any] | None) -> list[float]:
    """The usable per-step times: finite, positive numbers."""
    out = []
    for t in [] if times_ms is None else list(times_ms):
        if isinstance(t, int | float | np.floating) and not isinstance(t, bool) \
                and math.isfinite(t) and t > 0:
            out.append(float(t))
    return out


def step_difference(a_ms: Sequence[float], b_ms: Sequence[float], *,
                    confidence: float = CONFIDENCE,
                    floor_pct: float = NOISE_FLOOR_PCT) -> StepDiff:
    """The change from A's per-step times to B's, with its interval (see the module doc)."""
    a, b = np.asarray(clean(a_ms)), np.asarray(clean(b_ms))
    if len(a) == 0 or len(b) == 0:
        raise ValueError("step_difference: each run needs at least one step time")
    if not 0 < confidence < 1 or not floor_pct >= 0:
        raise ValueError(f"need 0 < confidence < 1 and floor_pct >= 0 (got {confidence}, "
                         f"{floor_pct})")
    d = np.sort((np.log(b)[None, :] - np.log(a)[:, None]).ravel())
    k = _rank_bound(len(a), len(b), 1 - confidence)
    lo = hi = None
    if k is not None:  # the k-th smallest and k-th largest difference (1-based)
        lo, hi = _pct(d[k - 1]), _pct(d[len(d) - k])
    sa, sb = spread(a), spread(b)
    return StepDiff(sa, sb, (sb.median / sa.median - 1) * 100, _pct(float(np.median(d))),
                    lo, hi, confidence, floor_pct)


def _pct(log_ratio: float) -> float:
    return (math.exp(log_ratio) - 1) * 100


def _rank_bound(n: int, m: int, alpha: float) -> int | None:
    """k such that [D_(k), D_(nm+1-k)] covers the shift with probability >= 1 - alpha:
    1 + the largest u with P(U <= u) <= alpha/2 (None: even u = 0 is likelier)."""
    if n <= _EXACT_MAX and m <= _EXACT_MAX:
        cdf = np.cumsum(_mw_counts(n, m))
        cdf /= cdf[-1]
        below = np.nonzero(cdf <= alpha / 2 + 1e-12)[0]
        return int(below[-1]) + 1 if len(below) else None
    mean, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
    k = int(math.floor(mean - NormalDist().inv_cdf(1 - alpha / 2) * sd))  # normal approx.
    return max(k, 1)


@cache
def _mw_counts(n: int, m: int) -> np.ndarray:
    """How many of the C(n+m, n) orderings give each Mann-Whitney U = 0..n*m."""
    # f[j]: the counts for (i, j) as i grows; f(i, j)[u] = f(i-1, j)[u-j] + f(i, j-1)[u]
    f = [np.ones(1)] * (m + 1)
    for i in range(1, n + 1):
        g = [np.ones(1)]
        for j in range(1, m + 1):
            size = i * j + 1
            cur = np.zeros(size)
            up = f[j]  # (i-1, j): shifted by j
            cur[j:j + len(up)] += up
            left = g[j - 1]  # (i, j-1)
            cur[:len(left)] += left
            g.append(cur)
        f = g
    return f[m]


__all__ = ["CONFIDENCE", "NOISE_FLOOR_PCT", "Spread", "StepDiff", "clean", "spread", "step_difference"]
