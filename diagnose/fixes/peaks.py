"""The predicted peak of each memory finding's fixes: the memory section's what-if of the
fix's change, against the bytes a step may use. Independent of the step model."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..memory import FIT_MARGIN
from ..values import mib
from . import FIXES
from .catalog.memory import peak_prediction
from .findings import DOES_NOT_APPLY


def memory_budget(memory: dict[str, Any] | None, metrics: dict[str, Any]) -> int | None:
    """The bytes a step may use: the device's memory, else the total of the device that ran
    out, else the budget an out-of-memory explanation was made against (an emulated one)."""
    ex = (memory or {}).get("oom_explanation")
    for v in (metrics.get("device_memory_bytes"), metrics.get("oom_total_bytes"),
              ex.get("budget_bytes") if isinstance(ex, dict) else None):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def predict_peaks(findings: Iterable[Any], memory: dict[str, Any] | None,
                  metrics: dict[str, Any]) -> None:
    """Each fix of each memory finding gets its predicted peak (``Finding.peaks``): the
    memory section's what-if of the fix's change (:func:`~.catalog.memory.peak_prediction`, against
    :func:`memory_budget`), with ``base_bytes``, the step's peak as it is (the whole
    step's, re-run, where the tracked one ran out), and ``fits``: the range's high end
    within the budget less ``FIT_MARGIN`` (None: no budget). Independent of the step model."""
    if not memory:
        return
    ran_out = metrics.get("oom") is True and not memory.get("oom")
    full = memory.get("full_step")
    base = full.get("peak_bytes") if isinstance(full, dict) else None
    base = base if isinstance(base, int) else memory.get("peak_bytes")
    budget = memory_budget(memory, metrics)
    for f in findings:
        if f.category != "memory":
            continue
        if ran_out and "oom_device" in f.evidence:
            # the step that ran out was another than the one tracked: its need is unknown
            f.hints.append(f"the step tracked fit (its peak {mib(memory.get('peak_bytes'))}); "
                           "the one that ran out of memory came later, untracked: its fixes' "
                           "peaks are not predicted (a larger batch, or memory that grows "
                           "step by step: ME005)")
            continue
        for x in f.fixes:
            p = peak_prediction(FIXES[x], memory, budget) if x in FIXES else None
            if p is not None:
                f.peaks[x] = {**p, "base_bytes": base if isinstance(base, int) else None,
                              "budget_bytes": budget, "fits": None if budget is None else
                              (p["range"] or [0, p["peak_bytes"]])[1]
                              <= budget * (1 - FIT_MARGIN)}
                why = (f.predictions or {}).get(x)
                if isinstance(why, str) and why.startswith(DOES_NOT_APPLY):
                    # the peak is predicted; what does not apply is autofix's trial of it
                    f.predictions[x] = ("its step time is not predicted: autofix does not "
                                        "try it on this run" + why[len(DOES_NOT_APPLY):])
