"""What autofix knows for sure about the running process (it overrides a diagnosis' metrics)."""

from __future__ import annotations

import math
import os
from typing import Any

from ..fixes import TrainConfig
from .result import Bound
from .trial import Workload


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask; the machine's count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def live_facts(w: Workload, allow_compile: bool, cpus: int | None = None) -> dict[str, Any]:
    """The facts fixes read (see :mod:`diagnose.fixes`), measured on the live objects
    (``cpus``: the usable CPUs, default :func:`cpu_count`)."""
    import inspect

    import torch

    cuda = w.on_cuda
    bf16 = False
    if cuda:
        try:
            bf16 = bool(torch.cuda.is_bf16_supported())
        except Exception:
            bf16 = False
    try:
        fused_ok = "fused" in inspect.signature(type(w.optimizer).__init__).parameters
    except (TypeError, ValueError):
        fused_ok = False
    has_conv = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in w.model.modules())
    iterable = isinstance(w.loader.dataset, torch.utils.data.IterableDataset)
    return {"device_type": w.device.type, "cpu_count": cpus or cpu_count(), "bf16_supported": bf16,
            "fused_supported": fused_ok, "model_has_conv": has_conv,
            "iterable_dataset": iterable, "allow_compile": allow_compile, "oom": False}


def workers_estimate(b: Bound, cfg: TrainConfig, cpus: int) -> int:
    """Workers needed so input keeps up with compute: one worker's time per step's batches
    over the compute-only step time (both measured), within 1..cpus."""
    per_worker = b.data_ms * max(1, cfg.num_workers)
    est = math.ceil(per_worker / max(b.compute_ms, 1e-6))
    return max(1, min(cpus, est))


__all__ = ["cpu_count", "live_facts", "workers_estimate"]
