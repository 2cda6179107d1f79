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

The median speaks for the typical step, not for the pace: where steps alternate (workers
that deliver batches in pairs: 2 ms, 60 ms, 2 ms, ...) a 15x change of the pace can leave
the medians' interval across no change. So the mean step (the pace the job trains at) is
compared too, with a percentile bootstrap interval of the ratio of the means (each run's
steps resampled apart, a fixed seed): where the medians say "within noise" and that
interval lies wholly outside the band, its verdict stands, and the text says why.
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
#: bootstrap resamples of the ratio of the mean steps: the interval's ends move by well
#: under a percent between seeds at this count; fixed seed, so a comparison is repeatable
_BOOT = 2000
#: the mean's change is named beside the median's where their ratios differ by more than this
_MEAN_APART = 1.2
#: a "within noise" whose medians differ by this much (percent), or whose interval is twice
#: as wide, says that the steps cannot tell rather than that nothing changed
UNSURE_PCT = 25.0


@dataclass(frozen=True)
class Spread:
    """One run's per-step times (ms): how many, median and quartiles."""

    n: int
    median: float
    p25: float
    p75: float
    mean: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.n, "median_ms": round(self.median, 4),
                "p25_ms": round(self.p25, 4), "p75_ms": round(self.p75, 4),
                "mean_ms": None if self.mean is None else round(self.mean, 4)}


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
    # the mean step's change and its bootstrap interval (None: too few steps)
    mean_change_pct: float | None = None
    mean_lo_pct: float | None = None
    mean_hi_pct: float | None = None

    def _beyond(self, lo: float | None, hi: float | None) -> str:
        if lo is None or hi is None:
            return "within noise"
        if hi < -self.floor_pct:
            return "better"
        if lo > self.floor_pct:
            return "worse"
        return "within noise"

    @property
    def by_mean(self) -> bool:
        """True where the verdict is the mean step's: the medians' interval reaches into
        the band, the means' lies wholly outside it."""
        return (self.lo_pct is not None  # too few steps for the medians: for the means too
                and self._beyond(self.lo_pct, self.hi_pct) == "within noise"
                and self._beyond(self.mean_lo_pct, self.mean_hi_pct) != "within noise")

    @property
    def verdict(self) -> str:
        """``better`` (B faster), ``worse`` (B slower) or ``within noise``."""
        if self.by_mean:
            return self._beyond(self.mean_lo_pct, self.mean_hi_pct)
        return self._beyond(self.lo_pct, self.hi_pct)

    @property
    def verdict_change_pct(self) -> float:
        """The change the verdict speaks of: the mean step's where it is the mean's."""
        return self.mean_change_pct if self.by_mean and self.mean_change_pct is not None \
            else self.change_pct

    def _mean_text(self) -> str:
        return (f"the mean step {self.a.mean:,.1f} ms -> {self.b.mean:,.1f} ms "
                f"({self.mean_change_pct:+.1f}%; {self.confidence:.0%} interval "
                f"{self.mean_lo_pct:+.1f}% to {self.mean_hi_pct:+.1f}%)")

    def why(self) -> str:
        """The clause the text puts after the verdict, else "": a verdict the mean step
        gave (the medians' interval said nothing), the mean step's change where it differs
        much from the median's, or why "within noise" where the steps do differ (the
        interval excludes no change but reaches into the band)."""
        if self.by_mean:
            return (f" by {self._mean_text()}: the steps spread too unevenly "
                    f"(p25-p75 {self.b.p25:,.1f}-{self.b.p75:,.1f} ms in B, "
                    f"{self.a.p25:,.1f}-{self.a.p75:,.1f} ms in A) for their medians to show it")
        if (self.verdict != "within noise" and self.mean_change_pct is not None
                and self.mean_lo_pct is not None
                and abs(math.log((100 + self.mean_change_pct) / (100 + self.change_pct)))
                > math.log(_MEAN_APART)):
            return f" ({self._mean_text()})"
        if self.verdict != "within noise" or self.lo_pct is None or self.hi_pct is None:
            return ""
        if not (self.lo_pct > 0 or self.hi_pct < 0):
            if abs(self.change_pct) < UNSURE_PCT and self.hi_pct - self.lo_pct < 2 * UNSURE_PCT:
                return ""
            # a wide interval across no change: the steps cannot tell, not "nothing changed"
            return (f" (that is, cannot tell from {self.a.n} and {self.b.n} steps: they "
                    f"spread too widely, p25-p75 {self.a.p25:,.1f}-{self.a.p75:,.1f} ms in A, "
                    f"{self.b.p25:,.1f}-{self.b.p75:,.1f} ms in B; more steps narrow it)")
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
                "mean_change_pct": r(self.mean_change_pct),
                "mean_interval_pct": None if self.mean_lo_pct is None else [
                    r(self.mean_lo_pct), r(self.mean_hi_pct)],
                "by_mean": self.by_mean,
                "method": "Hodges-Lehmann shift of log step time, Mann-Whitney interval; "
                          "the mean step's ratio, percentile bootstrap"}


def _round2(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def spread(times_ms: Sequence[float] | np.ndarray) -> Spread:
    x = np.asarray(times_ms, dtype=float)
    p25, med, p75 = np.percentile(x, [25, 50, 75])
    return Spread(len(x), float(med), float(p25), float(p75), float(x.mean()))


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
    assert sa.mean is not None and sb.mean is not None
    # too few steps for the medians' interval are too few for a bootstrap of the means too
    means = mean_interval(a, b, confidence) if k is not None else None
    return StepDiff(sa, sb, (sb.median / sa.median - 1) * 100, _pct(float(np.median(d))),
                    lo, hi, confidence, floor_pct, (sb.mean / sa.mean - 1) * 100,
                    *(means or (None, None)))


def mean_interval(a: np.ndarray, b: np.ndarray, confidence: float = CONFIDENCE
                  ) -> tuple[float, float] | None:
    """The percentile bootstrap interval (%) of the change of the mean step from A to B:
    each run's steps (:func:`_expanded`) resampled apart, :data:`_BOOT` times, a fixed seed. None with fewer
    than 2 steps in either run (a resample would be the step itself)."""
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(0)
    a, b = _expanded(a), _expanded(b)
    ma = a[rng.integers(0, len(a), (_BOOT, len(a)))].mean(axis=1)
    mb = b[rng.integers(0, len(b), (_BOOT, len(b)))].mean(axis=1)
    ratio = np.log(mb / ma)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratio, [tail, 100 - tail])
    return _pct(float(lo)), _pct(float(hi))


def _expanded(x: np.ndarray) -> np.ndarray:
    """The steps spread about their mean by sqrt(n / (n - 1)) (Hesterberg's expanded
    bootstrap): a resample's mean varies by sigma^2 (n - 1) / n^2, not sigma^2 / n, and a
    plain percentile interval of a few steps is too narrow; kept above zero."""
    m = float(x.mean())
    return np.maximum(m + (x - m) * math.sqrt(len(x) / (len(x) - 1)), 1e-3 * m)


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


__all__ = ["CONFIDENCE", "NOISE_FLOOR_PCT", "Spread", "StepDiff", "clean", "mean_interval", "spread",
           "step_difference"]
