"""GPU kernels and the host's launches of them (None where the trace recorded no runtime
calls); the top-kernels table for the reports."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace import Kind, Trace
from .declare import GPU, RUNTIME, Metric, rnd
from .names import GRAPH_LAUNCH, LAUNCH
from .window import StepWindow

#: Rows of the top-kernels table each rank carries.
TOP_KERNELS = 10

METRICS = (
    Metric("kernels_per_step", "count", "GPU kernels per step (graph replays included)", (GPU,)),
    Metric("launched_kernels_per_step", "count",
           "GPU kernels per step launched one by one: the step's kernel-launch calls (a graph's "
           "replay not counted)",
           (GPU, RUNTIME)),
    Metric("kernel_median_us", "us", "Median kernel duration", (GPU,)),
    Metric("kernel_ms_per_step", "ms", "Summed kernel time per step", (GPU,)),
    Metric("launch_api_median_us", "us",
           "Median duration of kernel-launch API calls (graph launches not included)",
           (GPU, RUNTIME)),
    Metric("launch_api_frac", "fraction", "Host time inside kernel-launch API calls / window",
           (GPU, RUNTIME)),
    Metric("launches_per_step", "count",
           "Kernel-launch API calls per step (graph launches not included)", (GPU, RUNTIME)),
)


def kernels_in_window(w: StepWindow) -> np.ndarray:
    """Kernels inside the profiled steps (a mask)."""
    return w.within((w.t.kind == Kind.KERNEL) & w.dev)


def kernel_metrics(w: StepWindow, kernels: np.ndarray) -> dict[str, Any]:
    """The METRICS above. ``kernels``: :func:`kernels_in_window`."""
    if not w.has_gpu:
        return dict.fromkeys(m.name for m in METRICS)
    t = w.t
    kd = t.dur[kernels]
    launch = w.within(w.host & (t.kind == Kind.RUNTIME) & t.name_mask(
        lambda n: bool(LAUNCH.match(n)) and not GRAPH_LAUNCH.match(n)))
    ld = t.dur[launch]
    n, rt = w.n_steps, w.has_runtime  # no runtime calls recorded: launches unknown
    return {
        "kernels_per_step": rnd(len(kd) / n, 1),
        # counted by their launch calls: a step's last kernels may run after its end
        "launched_kernels_per_step": rnd(len(ld) / n, 1) if rt else None,
        "kernel_median_us": rnd(np.median(kd), 3) if len(kd) else None,
        "kernel_ms_per_step": rnd(kd.sum() / 1e3 / n, 3),
        "launch_api_median_us": rnd(np.median(ld), 3) if len(ld) else None,
        "launch_api_frac": rnd(w.frac(w.sel(launch))) if rt else None,
        "launches_per_step": rnd(len(ld) / n, 1) if rt else None,
    }


def top_kernels(t: Trace, dev: np.ndarray, n: int = TOP_KERNELS) -> dict[str, Any] | None:
    """The kernels with the most total time in the whole trace (for the reports); None
    without kernels. ``dev``: the device events."""
    mask = (t.kind == Kind.KERNEL) & dev
    if not mask.any():
        return None
    ids = t.name_id[mask]
    total = np.bincount(ids, weights=t.dur[mask], minlength=len(t.names))
    calls = np.bincount(ids, minlength=len(t.names))
    all_us = float(total.sum())
    order = np.argsort(-total, kind="stable")[:n]
    return {
        "distinct": int((calls > 0).sum()),
        "rows": [{"name": t.names[i], "calls": int(calls[i]),
                  "total_ms": round(float(total[i]) / 1e3, 6),
                  "share": round(float(total[i]) / all_us, 6) if all_us > 0 else 0.0}
                 for i in order if calls[i] > 0]}
