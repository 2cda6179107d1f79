"""What the memory tracker reads of a step's objects: the batch's tensors and size, the
model's device, whether it runs on fake tensors, and an out-of-memory error's message."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map_only

_TRIED = re.compile(r"[Tt]ried to allocate (\d+(?:\.\d+)?) ?([KMGT]?i?B|bytes)")
_UNIT = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
         "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, or a RuntimeError saying an allocator ran out of memory: a
    device's ("CUDA out of memory", "HIP out of memory") or the CPU's
    ("DefaultCPUAllocator: can't allocate memory")."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    msg = str(exc).lower() if isinstance(exc, RuntimeError) else ""
    return "out of memory" in msg or "can't allocate memory" in msg


def requested_bytes(message: str) -> int | None:
    """The allocation an OOM message says failed ("Tried to allocate 2.00 GiB")."""
    m = _TRIED.search(message)
    return None if m is None else int(float(m.group(1)) * _UNIT.get(m.group(2), 1))


def model_device(model: Any) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def is_fake(model: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    p = next(iter(model.parameters()), None)
    return isinstance(p, FakeTensor)


def tensors_of(batch: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(batch)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def own_storage(batch: Any) -> Any:
    """``batch`` with each tensor that is a view into a larger storage (a slice of data
    held in memory, ``X[:64]``) copied into one of its own: the tracker counts a tensor by
    its storage, and the step's batch is the slice, not the data it was cut from. The
    values are the same; tensors that own their storage are passed as they are."""
    def own(t: torch.Tensor) -> torch.Tensor:
        whole = t.untyped_storage().nbytes()
        return t.clone() if whole > t.numel() * t.element_size() else t
    return tree_map_only(torch.Tensor, own, batch)


def leading_size(batch: Any) -> int | None:
    """The batch size: the most common leading dimension of the batch's tensors."""
    sizes = [int(t.shape[0]) for t in tensors_of(batch) if t.dim() > 0]
    return max(set(sizes), key=sizes.count) if sizes else None


__all__ = ["is_fake", "is_oom", "leading_size", "model_device", "own_storage",
           "requested_bytes", "tensors_of"]
