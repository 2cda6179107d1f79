"""The input pipeline as the trace shows it: time the host waits in DataLoader __next__."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import intervals as iv
from .declare import DATALOADER, HOST_OPS, Metric, per_step_ms, rnd
from .window import StepWindow

_NEEDS = (HOST_OPS, DATALOADER)  # its spans are host annotations

METRICS = (
    Metric("dataloader_share", "fraction",
           "Window time inside DataLoader __next__ (enumerate(DataLoader)) / window", _NEEDS),
    Metric("dataloader_wait_ms_per_step", "ms", "Mean DataLoader wait per step", _NEEDS),
    Metric("dataloader_wait_max_ms", "ms", "Longest DataLoader wait in one step", _NEEDS),
    Metric("dataloader_wait_median_ms", "ms", "Median DataLoader wait per step", _NEEDS),
    Metric("dataloader_multiprocess", "bool",
           "The loader uses worker processes (num_workers > 0), from the iterator's name",
           _NEEDS),
)


def dataloader_metrics(w: StepWindow, mask: np.ndarray, spans: iv.Intervals
                       ) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The METRICS above, and the ``dataloader_wait_ms`` series. ``mask``: the host's
    ``enumerate(DataLoader)`` events; ``spans``: the same as an interval set."""
    has = bool(w.within(mask).any())
    per_step = iv.measure_between(spans, w.step_lo, w.step_hi)
    series = {"dataloader_wait_ms": per_step_ms(per_step)}
    per_step = per_step / 1e3
    multi = None
    if has:
        names = set(w.t.names_of(np.flatnonzero(mask)))
        if any("_MultiProcessingDataLoaderIter" in n for n in names):
            multi = True
        elif any("_SingleProcessDataLoaderIter" in n for n in names):
            multi = False
    v: dict[str, Any] = {
        "dataloader_share": rnd(w.frac(spans)) if has else None,
        "dataloader_wait_ms_per_step": rnd(per_step.mean(), 3) if has else None,
        "dataloader_wait_max_ms": rnd(per_step.max(), 3) if has else None,
        "dataloader_wait_median_ms": rnd(np.median(per_step), 3) if has else None,
        "dataloader_multiprocess": multi,
    }
    return v, series
