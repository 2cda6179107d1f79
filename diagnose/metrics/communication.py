"""Collectives on the device (NCCL/RCCL kernels): their share and how much compute hides;
and the host backends' collective spans that stand for them on a run without them."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..trace import Kind, kind_in
from . import intervals as iv
from .declare import COLLECTIVES, Metric, rnd
from .names import ALL_REDUCE
from .window import StepWindow

# CPU backends run collectives on the host: their work spans (gloo:all_reduce, ...) last as
# long as the collective, waiting included. NCCL's host annotations only enqueue: GPU runs
# measure its kernels instead.
HOST_BACKEND = re.compile(r"^(gloo|mpi|ucc):", re.IGNORECASE)
C10D_OP = re.compile(r"^c10d::")


def host_collectives(t: Any, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the host backends' collective spans, those with torch's ``c10d::`` ops) as masks
    of ``host``'s annotations and operators."""
    hostish = host & kind_in(t.kind, [Kind.ANNOTATION, Kind.CPU_OP])
    backend = hostish & t.name_mask(lambda s: bool(HOST_BACKEND.match(s)))
    return backend, backend | (hostish & t.name_mask(lambda s: bool(C10D_OP.match(s))))


#: on a run without device collectives the three are read off the host's gloo/MPI
#: collective spans instead (metrics/ranks.py), against the main thread's own work
METRICS = (
    Metric("comm_frac", "fraction", "Communication time, as a union / window: NCCL/RCCL "
           "kernels; without them, the host's gloo/MPI collective spans", (COLLECTIVES,)),
    Metric("comm_overlap_frac", "fraction",
           "Share of communication time that overlaps compute (kernels; on the host, the "
           "main thread's ops)", (COLLECTIVES,)),
    Metric("comm_exposed_frac", "fraction",
           "Communication time not hidden behind compute / window", (COLLECTIVES,)),
    Metric("comm_exposed_allreduce_frac", "fraction",
           "All-reduce time not hidden behind compute / window: what DDP's gradient buckets "
           "overlap (all-to-all, send/recv, broadcast are not theirs)", (COLLECTIVES,)),
)


def exposed(in_steps: Callable[[iv.Intervals], float], comm: iv.Intervals,
            compute: iv.Intervals) -> tuple[float, float]:
    """(time in ``comm``, the part of it that ``compute`` does not overlap), each measured
    by ``in_steps`` (inside the profiled steps): |comm ∩ compute| by inclusion-exclusion."""
    c = in_steps(comm)
    return c, c - max(c + in_steps(compute) - in_steps(iv.merge(comm, compute)), 0.0)


def comm_metrics(w: StepWindow, comm_mask: np.ndarray, comm: iv.Intervals,
                 compute: iv.Intervals) -> dict[str, Any]:
    """The METRICS above. ``comm_mask``: the NCCL/RCCL kernels; ``comm`` and ``compute``:
    communication and compute kernels as interval sets."""
    has = w.has_gpu and bool(w.within(comm_mask).any())
    c, out = exposed(w.in_steps, comm, compute)
    ar = w.within(comm_mask & w.t.name_mask(lambda n: bool(ALL_REDUCE.search(n)))) if has \
        else None
    return {
        "comm_frac": rnd(c / w.W) if w.has_gpu and w.W > 0 else None,
        "comm_overlap_frac": rnd(1 - out / c) if has and c > 0 else None,
        "comm_exposed_frac": rnd(out / w.W) if has and w.W > 0
        else (0.0 if w.has_gpu else None),
        "comm_exposed_allreduce_frac": rnd(exposed(w.in_steps, w.sel(ar), compute)[1] / w.W)
        if ar is not None and w.W > 0 else (0.0 if w.has_gpu else None),
    }
