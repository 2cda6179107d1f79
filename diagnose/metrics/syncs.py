"""Host waits on the device: synchronising runtime calls and ``.item()`` (None where the
trace recorded no runtime calls, or no operators for ``.item()``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Kind
from . import intervals as iv
from .declare import GPU, HOST_OPS, RUNTIME, Metric, rnd
from .names import SYNC_OPS, SYNC_RUNTIME
from .window import StepWindow

METRICS = (
    Metric("sync_calls_per_step", "count",
           "Synchronising runtime calls (cuda*Synchronize, blocking cudaMemcpy) per step",
           (GPU, RUNTIME)),
    Metric("item_calls_per_step", "count", "aten::item calls (.item(), float(t), ...) per step",
           (GPU, HOST_OPS)),
    Metric("sync_frac", "fraction", "Host time inside synchronising calls / window",
           (GPU, RUNTIME)),
    Metric("sync_ms_per_step", "ms", "Host time inside synchronising calls per step",
           (GPU, RUNTIME)),
)


@dataclass(frozen=True)
class Syncs:
    """``spans``: host time in synchronising calls and ops (an interval set); ``runtime``
    and ``item``: masks of the synchronising runtime calls and of ``aten::item``."""

    spans: iv.Intervals
    runtime: np.ndarray
    item: np.ndarray


def syncs(w: StepWindow) -> Syncs:
    t = w.t
    runtime = w.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda n: n in SYNC_RUNTIME)
    ops = w.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n in SYNC_OPS)
    item = w.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n == "aten::item")
    return Syncs(w.sel(runtime | ops), runtime, item)


def sync_metrics(w: StepWindow, s: Syncs) -> dict[str, Any]:
    """The METRICS above."""
    if not w.has_gpu:
        return dict.fromkeys(m.name for m in METRICS)
    n, rt = w.n_steps, w.has_runtime
    return {
        "sync_calls_per_step": rnd(int(w.within(s.runtime).sum()) / n, 2) if rt else None,
        "item_calls_per_step": rnd(int(w.within(s.item).sum()) / n, 2) if w.has_ops else None,
        "sync_frac": rnd(w.frac(s.spans)) if rt else None,
        "sync_ms_per_step": rnd(w.in_steps(s.spans) / 1e3 / n, 3) if rt else None,
    }
