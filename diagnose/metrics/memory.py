"""Device memory from the trace's ``[memory]`` events (the caching allocator's totals)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace import Kind, Trace
from .declare import DEVICE_PROPERTIES, GPU, MEMORY_EVENTS, Metric, rnd

_EVENTS = (GPU, MEMORY_EVENTS)

METRICS = (
    Metric("gpu_mem_peak_allocated_bytes", "bytes",
           "Peak memory allocated by PyTorch's caching allocator ([memory] events)",
           _EVENTS),
    Metric("gpu_mem_peak_reserved_bytes", "bytes",
           "Peak memory reserved by the caching allocator ([memory] events)", _EVENTS),
    Metric("gpu_mem_peak_frac", "fraction", "Peak reserved (else allocated) / device capacity",
           (*_EVENTS, DEVICE_PROPERTIES)),
    Metric("gpu_mem_frag_ratio", "ratio", "Peak reserved / peak allocated", _EVENTS),
    Metric("gpu_mem_growth_peak_bytes", "bytes",
           "Peak of the running sum of allocation deltas in the trace (a lower bound on use)",
           _EVENTS),
)


def memory_metrics(t: Trace, device_memory_bytes: int | None) -> dict[str, Any]:
    """The METRICS above; ``device_memory_bytes``: the device's capacity, where known."""
    dtype = t.mem_device_type
    mem = dtype.idx[dtype.val == 1]  # memory events of a GPU (device type 1)
    mem = mem[t.kind[mem] == Kind.MEMORY]
    alloc = t.mem_allocated[mem]
    res = t.mem_reserved[mem]
    alloc = alloc[np.isfinite(alloc)]
    res = res[np.isfinite(res)]
    pa = float(alloc.max()) if len(alloc) else None
    pr = float(res.max()) if len(res) else None
    total = device_memory_bytes
    peak = pr if pr is not None else pa
    # 2021 traces carry only per-allocation deltas: the peak growth is still known
    deltas = t.mem_delta[mem]
    deltas = deltas[np.isfinite(deltas)]
    return {
        "gpu_mem_peak_allocated_bytes": int(pa) if pa is not None else None,
        "gpu_mem_peak_reserved_bytes": int(pr) if pr is not None else None,
        "gpu_mem_peak_frac": rnd(peak / total) if total and peak is not None else None,
        "gpu_mem_frag_ratio": rnd(pr / pa, 3) if pr is not None and pa else None,
        "gpu_mem_growth_peak_bytes": int(np.max(np.cumsum(deltas))) if len(deltas) else None,
    }
