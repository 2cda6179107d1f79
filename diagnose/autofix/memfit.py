"""Autofix under a memory budget: a fix whose predicted peak does not fit is not tried,
and the tuned config's peak is measured beside the kept fixes' predicted peaks.

The prediction is the diagnosis' memory what-if of the fix's change
(:func:`~diagnose.fixes.catalog.memory.peak_prediction`): the fix fits where the high end
of its range is within the budget less ``FIT_MARGIN``; a fix with no what-if is tried as
before. The measurement is one optimizer step of a config: the allocator's peak
(``torch.cuda.max_memory_allocated``) on CUDA, the memory tracker (diagnose.memory) on CPU.
"""

from __future__ import annotations

from typing import Any

from ..fixes import Fix
from ..fixes.catalog.memory import peak_prediction
from ..memory import FIT_MARGIN
from .trial import Trial, fits


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def predicted_peak(fix: Fix, report: Any, budget: int) -> dict[str, Any] | None:
    """The fix's predicted peak from ``report.memory`` (None: no what-if of its change)."""
    return peak_prediction(fix, getattr(report, "memory", None), budget)


def over_budget(peak: dict[str, Any], budget: int) -> str | None:
    """Why a fix predicted ``peak`` is not tried under ``budget`` bytes (None: it fits)."""
    rng = peak.get("range")
    high = int(rng[1]) if rng else int(peak["peak_bytes"])
    if high <= budget * (1 - FIT_MARGIN):
        return None
    return (f"predicted peak {mib(peak['peak_bytes'])} (up to {mib(high)}, "
            f"{peak.get('method') or 'memory what-if'}) does not fit the memory budget "
            f"{mib(budget)} less {FIT_MARGIN:.0%}")


def measure_peak(trial: Trial) -> int | None:
    """The peak bytes of one optimizer step of ``trial`` (None: it ran out of memory)."""
    import torch

    dev = torch.device(trial.w.device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        ok, _ = fits(trial, steps=1)
        return int(torch.cuda.max_memory_allocated(dev)) if ok else None
    from ..memory.tracker import StepTracker

    tracker = StepTracker(trial.w.model, trial.optimizer)
    with tracker:
        ok, _ = fits(trial, steps=1)
    return int(tracker.result().peak_bytes) if ok else None


__all__ = ["measure_peak", "mib", "over_budget", "predicted_peak"]
