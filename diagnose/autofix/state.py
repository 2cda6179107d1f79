"""Everything autofix's trials can change in the user's process, saved and put back bit-exact.

Trials train the user's model for real (that is what is timed), so before the
first one we save: every parameter and buffer (a copy on the CPU, so the
snapshot takes no device memory), the gradients, each module's train/eval
flag, the random number generators (torch, CUDA, numpy, ``random``, and the
``torch.Generator`` objects the DataLoader and its sampler hold), and the
``cudnn.benchmark`` flag. ``restore`` puts all of it back; a parameter whose
memory layout a trial changed (``channels_last``) gets its original tensor
back (``Tensor.set_``; ``torch.utils.swap_tensors`` for a changed dtype), every
other one is copied into in place, so tensors the user holds stay the same
objects. The user's optimizer and DataLoader are never given to a
trial (trials use rebuilt copies), so they need no restoring.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def loader_generators(loader: Any) -> list[Any]:
    """The torch.Generator objects a DataLoader draws from (its own, its samplers')."""
    import torch

    found: list[Any] = []
    objs = [loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)]
    bs = getattr(loader, "batch_sampler", None)
    objs.append(getattr(bs, "sampler", None))
    for o in objs:
        g = getattr(o, "generator", None) if o is not None else None
        if isinstance(g, torch.Generator) and all(g is not x for x in found):
            found.append(g)
    return found


@dataclass
class Snapshot:
    tensors: list[tuple[Any, Any]] = field(default_factory=list)  # (live, saved copy)
    grads: list[tuple[Any, Any]] = field(default_factory=list)  # (param, saved grad or None)
    training: list[tuple[Any, bool]] = field(default_factory=list)
    torch_rng: Any = None
    cuda_rng: list[Any] | None = None
    numpy_rng: Any = None
    python_rng: Any = None
    generators: list[tuple[Any, Any]] = field(default_factory=list)
    cudnn_benchmark: bool | None = None


def _cpu_copy(t: Any) -> Any:
    # clone keeps the strides of a dense tensor; .to("cpu", copy=True) as well
    return t.detach().to("cpu", copy=True)


def take(model: Any, loader: Any = None) -> Snapshot:
    """Save the state that trials may change (see the module docstring)."""
    import torch

    s = Snapshot()
    seen: set[int] = set()
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) in seen:  # tied weights
            continue
        seen.add(id(t))
        s.tensors.append((t, _cpu_copy(t)))
    for p in model.parameters():
        s.grads.append((p, None if p.grad is None else _cpu_copy(p.grad)))
    s.training = [(m, m.training) for m in model.modules()]
    s.torch_rng = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        s.cuda_rng = torch.cuda.get_rng_state_all()
    s.numpy_rng = np.random.get_state()
    s.python_rng = random.getstate()
    if loader is not None:
        s.generators = [(g, g.get_state()) for g in loader_generators(loader)]
    s.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
    return s


def _put_back(live: Any, saved: Any) -> None:
    import torch

    with torch.no_grad():
        if live.dtype == saved.dtype and live.shape == saved.shape and \
                live.stride() == saved.stride():
            live.copy_(saved)
        elif live.dtype == saved.dtype:  # a trial changed its layout: same object, old strides
            live.set_(saved.to(live.device))
        else:  # its dtype: the same Python object holding the original tensor
            new = saved.to(live.device)
            if isinstance(live, torch.nn.Parameter):
                new = torch.nn.Parameter(new, requires_grad=live.requires_grad)
            torch.utils.swap_tensors(live, new)


def restore(s: Snapshot) -> None:
    """Put everything :func:`take` saved back, bit-exact."""
    import torch

    for live, saved in s.tensors:
        _put_back(live, saved)
    for p, g in s.grads:
        p.grad = None if g is None else g.to(p.device)
    for m, flag in s.training:
        m.training = flag
    torch.set_rng_state(s.torch_rng)
    if s.cuda_rng is not None:
        torch.cuda.set_rng_state_all(s.cuda_rng)
    np.random.set_state(s.numpy_rng)
    random.setstate(s.python_rng)
    for g, state in s.generators:
        g.set_state(state)
    if s.cudnn_benchmark is not None:
        torch.backends.cudnn.benchmark = s.cudnn_benchmark


__all__ = ["Snapshot", "loader_generators", "restore", "take"]
