"""Collectives on the device (NCCL/RCCL kernels): their share and how much compute hides."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import intervals as iv
from .declare import COLLECTIVES, GPU, Metric, rnd
from .window import StepWindow

METRICS = (
    Metric("comm_frac", "fraction", "Communication (NCCL/RCCL) kernel time, as a union / window",
           (GPU,)),
    Metric("comm_overlap_frac", "fraction",
           "Share of communication time that overlaps compute kernels", (GPU, COLLECTIVES)),
    Metric("comm_exposed_frac", "fraction",
           "Communication time not hidden behind compute / window", (GPU,)),
)


def comm_metrics(w: StepWindow, comm_mask: np.ndarray, comm: iv.Intervals,
                 compute: iv.Intervals) -> dict[str, Any]:
    """The METRICS above. ``comm_mask``: the NCCL/RCCL kernels; ``comm`` and ``compute``:
    communication and compute kernels as interval sets."""
    has = w.has_gpu and bool(w.within(comm_mask).any())
    c = w.in_steps(comm)
    # |comm ∩ compute| by inclusion-exclusion, all measured inside the steps
    ov = max(c + w.in_steps(compute) - w.in_steps(iv.merge(comm, compute)), 0.0)
    return {
        "comm_frac": rnd(c / w.W) if w.has_gpu and w.W > 0 else None,
        "comm_overlap_frac": rnd(ov / c) if has and c > 0 else None,
        "comm_exposed_frac": rnd((c - ov) / w.W) if has and w.W > 0
        else (0.0 if w.has_gpu else None),
    }
