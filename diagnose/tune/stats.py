"""Statistics for autofix: is a candidate step measurably faster than the baseline?

Measurements come in *rounds*: baseline and candidate run alternately (A B, B A,
A B, ...) so that drift on the machine hits both. Within a round, per-step times
are grouped into blocks of ``k`` consecutive steps and each block's mean is one
observation: a step that only waits for the next batch and a step that gets
two batches at once belong to the same prefetch cycle, so the block mean is the
throughput the loop actually sees, and the median over blocks ignores a stray
slow block (another process, garbage collection).

The speedup is ``median(baseline blocks) / median(candidate blocks)``; its
confidence interval is a seeded, paired two-stage bootstrap: each resample
draws rounds with replacement (the same rounds for both arms, so drift that
hit both in a round cancels) and then blocks with replacement within each drawn
round. Drawing rounds makes the interval as wide as the round-to-round
variation of the machine (another process starting, caches, thermal state),
which a bootstrap of steps alone would hide. A change is kept only if the whole
interval lies above ``1 + min_gain``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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
        return f"{self.ratio:.2f}x [{self.lo:.2f}, {self.hi:.2f}]"


def block_means(times: np.ndarray, k: int) -> np.ndarray:
    """Means of consecutive blocks of ``k`` step times (a partial last block is dropped,
    unless it is the only one)."""
    times = np.asarray(times, dtype=np.float64)
    k = max(1, int(k))
    n = (len(times) // k) * k
    if n == 0:
        return times.mean(keepdims=True) if len(times) else times
    return times[:n].reshape(-1, k).mean(axis=1)


def pooled_median(rounds: Sequence[np.ndarray]) -> float:
    return float(np.median(np.concatenate([np.asarray(r, dtype=np.float64) for r in rounds])))


def _as_matrix(rounds: Sequence[np.ndarray]) -> np.ndarray:
    """Rounds as a (rounds, blocks) matrix (rounds cut to the shortest one)."""
    m = min(len(r) for r in rounds)
    return np.stack([np.asarray(r, dtype=np.float64)[:m] for r in rounds])


def _two_stage_medians(x: np.ndarray, picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Median of each resample: the rounds in ``picks`` (resamples, rounds), then blocks
    with replacement within each of them."""
    resamples, r = picks.shape
    m = x.shape[1]
    chosen = x[picks]  # (resamples, rounds, blocks)
    idx = rng.integers(0, m, size=(resamples, r, m))
    drawn = np.take_along_axis(chosen, idx, axis=2)
    return np.median(drawn.reshape(resamples, r * m), axis=1)


def speedup_interval(base: Sequence[np.ndarray], cand: Sequence[np.ndarray], *,
                     confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """Speedup of ``cand`` over ``base`` (per-round block times, paired by round) with a
    paired two-stage bootstrap interval of the ratio of medians."""
    if not base or len(base) != len(cand) or any(len(r) == 0 for r in (*base, *cand)):
        raise ValueError("speedup_interval needs the same rounds for both arms, none empty")
    a, b = _as_matrix(base), _as_matrix(cand)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, a.shape[0], size=(resamples, a.shape[0]))
    ratios = _two_stage_medians(a, picks, rng) / _two_stage_medians(b, picks, rng)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return Interval(pooled_median(base) / pooled_median(cand), float(lo), float(hi), confidence)


__all__ = ["Interval", "block_means", "pooled_median", "speedup_interval"]
