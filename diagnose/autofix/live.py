"""What autofix knows for sure about the running process (it overrides a diagnosis' metrics)."""

from __future__ import annotations

from ..fixes.catalog.fetch import batch_indexable
from ..stepmodel.facts import Facts
from ..values import usable_cpus
from .trial import Workload

cpu_count = usable_cpus  # CPUs this process may run on (its affinity mask)


def live_facts(w: Workload, allow_compile: bool, cpus: int | None = None) -> Facts:
    """The facts autofix knows on the live objects (``cpus``: the usable CPUs, default
    :func:`cpu_count`); the rest None. ``Facts.from_metrics(metrics, live=...)`` lays them
    over a diagnosis' metrics."""
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
    return Facts(device_type=w.device.type, cpu_count=cpus or cpu_count(), bf16_supported=bf16,
                 fused_supported=fused_ok, model_has_conv=has_conv, iterable_dataset=iterable,
                 allow_compile=allow_compile, oom=False,
                 torch_num_threads=torch.get_num_threads(),
                 dataloader_dataset_tensor_indexable=batch_indexable(w.loader) is True)


__all__ = ["cpu_count", "live_facts"]
