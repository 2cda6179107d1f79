"""Statistics for autofix: is a candidate step measurably faster than the baseline?

Measurements come in *rounds*: baseline and candidate run alternately (A B, B A, ...) so
that drift on the machine hits both. Within a round, steps are timed in blocks of ``k``
consecutive steps (one device sync per block, see :mod:`diagnose.autofix.trial`); a block's
per-step time is one observation, the throughput the loop sees across a prefetch cycle
(:func:`block_means` groups single-step times the same way). Arms are compared by their
mean block: a pause that hits some steps (a full garbage collection) counts as the time it
costs, so a fix that removes it can be measured, and a stray slow block widens the interval
instead of being dropped.

Fixed-size comparisons (the before/after): the speedup is ``mean(baseline blocks) /
mean(candidate blocks)`` with a seeded, paired two-stage bootstrap interval (rounds with
replacement, the same for both arms, then blocks within each drawn round), so the interval
is as wide as the machine's round-to-round variation. The before/after confirms the
trials' winner; where its interval leaves that open it looks once more
(``measure.CONFIRM_LOOKS``), which cannot keep a change its trial did not keep.

Trials: repeated confidence intervals (Jennison & Turnbull, JRSS B 51, 1989) with a
Bonferroni split of ``alpha`` over at most ``K`` looks fixed before the trial starts:

- round ``r`` gives the paired log ratio ``d_r = log mean(base_r) - log mean(cand_r)``,
  treated as independent and normal with unknown variance;
- at a look after ``n`` rounds the interval is ``mean(d) +- t(1 - alpha/(2K), n-1) *
  sd(d) / sqrt(n)``, exponentiated; the trial reports the intersection of its looks
  (:class:`SequentialTrial`);
- keep when the lower end is above ``1 + min_gain``, revert when the upper end is below;
  after the last look, or when the budget share ends (from round
  ``measure.DEADLINE_MIN_ROUNDS`` on), revert undecided. A kept change is measured on
  until its interval is within ``Plan.precision``.

Error rates: by the union bound all of a trial's intervals cover the true speedup together
with probability at least ``1 - alpha``, so a change no faster than ``1 + min_gain`` is
kept with probability at most ``alpha / 2``, however many looks; stopping for the budget
only ends trials undecided. :func:`rounds_for` sizes the first look for ``power`` at the
predicted effect. ``tests/autofix/test_tune_sequential.py`` checks both rates by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ..values import interval_end


@dataclass(frozen=True)
class Interval:
    """Speedup (baseline time / candidate time) with its bootstrap interval."""

    ratio: float
    lo: float
    hi: float
    confidence: float

    def above(self, threshold: float) -> bool:
        return self.lo > threshold

    def below(self, threshold: float) -> bool:
        return self.hi < threshold

    def __str__(self) -> str:
        return f"{self.ratio:.2f}x [{interval_end(self.lo)}, {interval_end(self.hi)}]"



def block_means(times: np.ndarray, k: int) -> np.ndarray:
    """Means of consecutive blocks of ``k`` step times (a partial last block is dropped,
    unless it is the only one)."""
    times = np.asarray(times, dtype=np.float64)
    k = max(1, int(k))
    n = (len(times) // k) * k
    if n == 0:
        return times.mean(keepdims=True) if len(times) else times
    return times[:n].reshape(-1, k).mean(axis=1)


def pooled_mean(rounds: Sequence[np.ndarray]) -> float:
    """The mean block of all rounds: the mean step (the blocks are of equal length)."""
    return float(np.mean(np.concatenate([np.asarray(r, dtype=np.float64) for r in rounds])))


def _as_matrix(rounds: Sequence[np.ndarray]) -> np.ndarray:
    """Rounds as a (rounds, blocks) matrix (rounds cut to the shortest one)."""
    m = min(len(r) for r in rounds)
    return np.stack([np.asarray(r, dtype=np.float64)[:m] for r in rounds])


def _two_stage_means(x: np.ndarray, picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mean of each resample: the rounds in ``picks`` (resamples, rounds), then blocks
    with replacement within each of them."""
    resamples, r = picks.shape
    m = x.shape[1]
    chosen = x[picks]  # (resamples, rounds, blocks)
    idx = rng.integers(0, m, size=(resamples, r, m))
    drawn = np.take_along_axis(chosen, idx, axis=2)
    return np.mean(drawn.reshape(resamples, r * m), axis=1)


def speedup_interval(base: Sequence[np.ndarray], cand: Sequence[np.ndarray], *,
                     confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """Speedup of ``cand`` over ``base`` (per-round block times, paired by round) with a
    paired two-stage bootstrap interval of the ratio of means."""
    if not base or len(base) != len(cand) or any(len(r) == 0 for r in (*base, *cand)):
        raise ValueError("speedup_interval needs the same rounds for both arms, none empty")
    a, b = _as_matrix(base), _as_matrix(cand)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, a.shape[0], size=(resamples, a.shape[0]))
    ratios = _two_stage_means(a, picks, rng) / _two_stage_means(b, picks, rng)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return Interval(pooled_mean(base) / pooled_mean(cand), float(lo), float(hi), confidence)


# ---------------------------------------------------------------------- sequential rule
def _t_cdf_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with an integer number of degrees of freedom (the exact
    finite series, Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        total, term = 0.0, 1.0
        if df > 1:
            total = 1.0
            for j in range(1, (df - 3) // 2 + 1):
                term *= c2 * (2 * j) / (2 * j + 1)
                total += term
            total *= s * math.cos(theta)
        return 2.0 / math.pi * (theta + total)
    total, term = 1.0, 1.0
    for j in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * j - 1) / (2 * j)
        total += term
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``df`` >= 1 degrees of freedom."""
    if not 0.5 < p < 1.0 or df < 1:
        raise ValueError("t_quantile needs 0.5 < p < 1 and df >= 1")
    target = 2.0 * p - 1.0
    lo, hi = 0.0, 1.0
    while _t_cdf_two_sided(hi, df) < target:
        hi *= 2.0
    for _ in range(100):  # bisection: the CDF is monotone
        mid = (lo + hi) / 2.0
        if _t_cdf_two_sided(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class SequentialRule:
    """Repeated confidence intervals with the error ``alpha`` split over ``looks`` looks
    (see the module docstring for the rule and its error rates)."""

    alpha: float = 0.05  # two-sided, for all looks of one trial together
    looks: int = 4  # the most looks a trial may take
    power: float = 0.9  # the power the first look is sized for (:func:`rounds_for`)

    @property
    def confidence(self) -> float:
        return 1.0 - self.alpha

    @property
    def per_look(self) -> float:
        return self.alpha / self.looks

    def bounds(self, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, lo, hi) of the log speedup from per-round log ratios ``d`` (last axis:
        rounds, at least 2); vectorised over any leading axes."""
        d = np.asarray(d, dtype=np.float64)
        n = d.shape[-1]
        if n < 2:
            raise ValueError("a sequential interval needs at least 2 rounds")
        mean = d.mean(axis=-1)
        half = t_quantile(1.0 - self.per_look / 2.0, n - 1) * d.std(axis=-1, ddof=1) / \
            math.sqrt(n)
        return mean, mean - half, mean + half

    def verdict(self, d: np.ndarray, threshold: float) -> np.ndarray:
        """+1 keep (interval above ``threshold``), -1 stop (below), 0 go on; per row."""
        _, lo, hi = self.bounds(d)
        t = math.log(threshold)
        return np.where(lo > t, 1, np.where(hi < t, -1, 0))

    def interval(self, d: np.ndarray) -> Interval:
        mean, lo, hi = (float(x) for x in self.bounds(d))
        return Interval(math.exp(mean), math.exp(lo), math.exp(hi), self.confidence)


class SequentialTrial:
    """The looks of one trial (or of many at once, one per row, for simulations): the rule's
    interval at each look, intersected with those before it, and when to stop.

    All of a trial's repeated intervals cover the true speedup together (the union bound
    above), so their intersection does too, at the same level: it is the interval a trial
    reports, and it never widens from one look to the next. The verdict of the
    intersection is the rule's: it is above the threshold once any look was. (When the
    intervals do not overlap at all, a case the bound puts below ``alpha``, a kept trial
    stops with the interval it had, any other takes the newest alone.)

    ``precision``: a trial whose interval is above the threshold goes on to its next looks
    until the interval's half-width is within ``precision`` (0.10: the speedup known to
    +-10%), so that a large gain, kept at a first look of a few rounds, is also *measured*
    well enough to set beside its prediction.
    The decision is the same as without it (a keep is never taken back: the lower end only
    rises), so are its error rates; it only costs rounds, within the trial's share of the
    budget. A trial below the threshold stops at once: there is nothing to measure there.
    """

    def __init__(self, rule: SequentialRule, threshold: float, precision: float | None = None,
                 shape: tuple[int, ...] = ()) -> None:
        self.rule, self.threshold, self.precision = rule, threshold, precision
        self.mean = np.zeros(shape)
        self.lo = np.full(shape, -np.inf)
        self.hi = np.full(shape, np.inf)
        self.rounds = np.zeros(shape, dtype=int)
        self.open = np.ones(shape, dtype=bool)

    def look(self, d: np.ndarray) -> np.ndarray:
        """Take a look at the per-round log ratios so far (last axis: rounds); rows already
        stopped are left as they were. Returns where the trial stops now (or stopped)."""
        mean, lo, hi = self.rule.bounds(d)
        t = math.log(self.threshold)
        o, kept = self.open, self.lo > t
        new_lo, new_hi = np.maximum(self.lo, lo), np.minimum(self.hi, hi)
        apart = new_lo > new_hi
        # looks that disagree outright: a kept trial keeps its interval and stops; any
        # other takes the newest look alone, as the rule without intersections would
        hold = o & apart & kept
        take = o & ~hold
        self.lo = np.where(take, np.where(apart, lo, new_lo), self.lo)
        self.hi = np.where(take, np.where(apart, hi, new_hi), self.hi)
        self.mean = np.where(o, mean, self.mean)
        self.rounds = np.where(o, np.asarray(d).shape[-1], self.rounds)
        precise = True if self.precision is None else \
            (self.hi - self.lo) / 2.0 <= math.log1p(self.precision)
        self.open = o & ~(hold | (self.hi < t) | ((self.lo > t) & precise))
        return ~self.open

    @property
    def verdict(self) -> np.ndarray:
        """+1 keep, -1 below the threshold, 0 undecided."""
        t = math.log(self.threshold)
        return np.where(self.lo > t, 1, np.where(self.hi < t, -1, 0))

    def interval(self) -> Interval:
        """The reported speedup of a one-trial run: the newest look's mean (inside the
        intersection, where it is moved to its nearer end) and the intersection."""
        lo, hi = float(self.lo), float(self.hi)
        return Interval(math.exp(min(max(float(self.mean), lo), hi)), math.exp(lo),
                        math.exp(hi), self.rule.confidence)


def round_log_ratios(base: Sequence[np.ndarray], cand: Sequence[np.ndarray]) -> np.ndarray:
    """``log mean(base_r) - log mean(cand_r)`` for each round ``r`` (paired rounds)."""
    if not base or len(base) != len(cand) or any(len(r) == 0 for r in (*base, *cand)):
        raise ValueError("round_log_ratios needs the same rounds for both arms, none empty")
    a = np.array([np.mean(np.asarray(r, dtype=np.float64)) for r in base])
    b = np.array([np.mean(np.asarray(r, dtype=np.float64)) for r in cand])
    return np.log(a) - np.log(b)


def rounds_for(noise: float, predicted: float | None, threshold: float, rule: SequentialRule,
               minimum: int) -> int:
    """Rounds for the first look: enough that an effect as large as ``predicted`` is
    decided with probability ``rule.power`` (normal approximation), given ``noise`` (the
    standard deviation of one round's log ratio). Without a prediction: ``minimum``."""
    if predicted is None or predicted <= 0 or noise <= 0:
        return minimum
    margin = abs(math.log(predicted) - math.log(threshold))
    if margin == 0:
        return minimum
    nd = NormalDist()
    z = nd.inv_cdf(1.0 - rule.per_look / 2.0) + nd.inv_cdf(rule.power)
    # + 2 rounds: the t quantile with few degrees of freedom is wider than the normal one
    return max(minimum, math.ceil((z * noise / margin) ** 2) + 2)


def rounds_to_decide(iv: Interval, rounds: int, threshold: float) -> int | None:
    """Rounds in all after which a trial left undecided after ``rounds`` rounds with
    interval ``iv`` would be kept, if the speedup it measured is the true one: the
    half-width (log) shrinks as one over the square root of the rounds (the t quantile
    shrinks too: so this errs high) until the low end clears ``threshold``. The measured
    speedup is itself noisy, so it is a figure to plan with, not a promise
    (tests/autofix/test_tune_stats.py draws trials again at that many rounds). None where
    the speedup measured is not above the threshold (more rounds would not keep it) or
    nothing is to be decided. Unlike :func:`rounds_for` (before a trial, for ``rule.power``
    at a prediction), it plans from the measured interval's width, with no power term."""
    if rounds < 1 or iv.lo <= 0 or iv.ratio <= threshold or iv.lo > threshold:
        return None
    half = (math.log(iv.hi) - math.log(iv.lo)) / 2.0
    margin = math.log(iv.ratio) - math.log(threshold)
    return max(rounds + 1, math.ceil(rounds * (half / margin) ** 2))


def look_schedule(first: int, last: int, looks: int) -> list[int]:
    """At most ``looks`` round counts from ``first`` to ``last``, spaced geometrically
    (fixed before the trial starts: the rule's error split assumes it)."""
    first = max(2, min(first, last))
    if looks <= 1 or first >= last:
        return [last if looks <= 1 else first]
    ratio = (last / first) ** (1.0 / (looks - 1))
    out = sorted({min(last, round(first * ratio ** i)) for i in range(looks)})
    return out


__all__ = ["Interval", "SequentialRule", "SequentialTrial", "block_means", "look_schedule",
           "pooled_mean", "round_log_ratios", "rounds_for", "rounds_to_decide",
           "speedup_interval", "t_quantile"]
