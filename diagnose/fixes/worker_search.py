"""The DataLoader worker counts a fix searches: the most workers the CPUs keep busy, and
whether the search goes up from the current count or down from it (the ladder autofix
measures in order; the report's num_workers fixes predict its rungs).
"""

from __future__ import annotations

import math

from ..stepmodel.calibration import SATURATED_PCT, WAITING_WORKERS_PER_CPU
from .config import TrainConfig
from .unit import SEARCH_CLIMB, SEARCH_DESCEND, Facts, Fix


def cpus_saturated(facts: Facts) -> bool:
    """The diagnosis saw the usable CPUs busy :data:`SATURATED_PCT` of the time or more."""
    return facts.host_cpu_mean_pct is not None and facts.host_cpu_mean_pct >= SATURATED_PCT


def most_workers(facts: Facts) -> int | None:
    """The most workers the CPUs this process may use keep busy: one a CPU; for loading
    that waits (:attr:`~diagnose.stepmodel.facts.Facts.worker_batch_waits`), as
    many as that share of theirs fills the CPUs, at most :data:`WAITING_WORKERS_PER_CPU` a
    CPU. None where the CPUs are not known."""
    n = facts.cpu_count
    if n is None:
        return None
    on = facts.worker_batch_on_cpu
    if on is None or not facts.worker_batch_waits:
        return n
    return max(n, min(WAITING_WORKERS_PER_CPU * n, math.floor(n / max(on, 1e-6))))


def workers_oversubscribed(config: TrainConfig, facts: Facts) -> bool:
    """More DataLoader workers than the CPUs this process may use keep busy
    (:func:`most_workers`), workers on CPUs the diagnosis saw saturated, or as many as
    that most with torch's threads beside them outnumbering the CPUs (no more workers can
    help; the training process's threads take turns with them): fewer workers may be
    faster (searched downward)."""
    top = most_workers(facts)
    if top is None or config.num_workers <= 0:
        return False
    threads = config.intra_op_threads or facts.torch_num_threads
    beside = (config.num_workers >= top and threads is not None
              and facts.cpu_count is not None
              and config.num_workers + threads > facts.cpu_count)
    return config.num_workers > top or cpus_saturated(facts) or beside


def worker_ladder(config: TrainConfig, facts: Facts) -> list[TrainConfig]:
    """num_workers candidates, measured in this order.

    Upward (fewer workers than the CPUs keep busy, :func:`most_workers`): 1, 2, 4, ... and
    the CPU count and that most above the current value. Downward (more workers than that,
    the CPUs saturated, or that most beside torch's threads outnumbering the CPUs;
    :func:`workers_oversubscribed`): the CPU count, one less, half, 1 and 0 below the
    current value (0: batches made in the training process, no inter-process transfer at
    all).
    """
    n, top = facts.cpu_count, most_workers(facts)
    if n is None or top is None:
        return []
    if workers_oversubscribed(config, facts):
        down = {top, n, n - 1, n // 2, 1, 0}
        return [config.replace(num_workers=v) for v in sorted(down, reverse=True)
                if 0 <= v < config.num_workers]
    values, k = set(), 1
    while k <= top:
        values.add(k)
        k *= 2
    values |= {n, top}
    return [config.replace(num_workers=v) for v in sorted(values) if v > config.num_workers]


class WorkerSearch(Fix):
    """num_workers searched on a ladder: upward from the measured need, or downward."""

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return worker_ladder(config, facts)

    def search_mode(self, config: TrainConfig, candidates: list[TrainConfig]) -> str:
        down = bool(candidates) and candidates[0].num_workers < config.num_workers
        return SEARCH_DESCEND if down else SEARCH_CLIMB

    def search_start(self, config: TrainConfig, candidates: list[TrainConfig], *,
                     input_ms: float, compute_ms: float) -> int:
        """The first rung with the workers input needs to keep up with compute: one
        worker's time per step's batches (``input_ms`` x the workers that made it) over
        the compute-only step time, within 1..the top rung."""
        if not candidates:
            return 0
        per_worker = input_ms * max(1, config.num_workers)
        top = candidates[-1].num_workers
        need = max(1, min(top, math.ceil(per_worker / max(compute_ms, 1e-6))))
        return next((i for i, c in enumerate(candidates) if c.num_workers >= need),
                    len(candidates) - 1)
