"""torch's ModTracker, safe for ``torch.autograd.grad`` on a module's leaf inputs.

ModTracker ends a module's backward with a multi-grad hook on the module's inputs that
need a gradient. torch's hook asks the engine whether each input's node will run, and
under ``autograd.grad`` that question raises for a leaf tensor (pytorch/pytorch#131753,
open): a gradient penalty's interpolated images, a PINN's coordinates, an adversarial
example made with ``requires_grad_()``. The error surfaces in the user's own
``autograd.grad`` call, so the tracked step would fail. Here the hook is given only the
inputs that have a ``grad_fn``; a module whose only such inputs are leaves ends its
backward when the backward ends, as torch does for a module with none. The tracker's
bookkeeping sees the leaves detached (the same storage and shape); the module's own call
gets its inputs untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.distributed._tools.mod_tracker import ModTracker
from torch.utils._pytree import tree_flatten, tree_unflatten


def _leaf(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.requires_grad and a.grad_fn is None


class LeafSafeModTracker(ModTracker):
    """ModTracker whose backward hook on a module's inputs leaves out leaf tensors (module
    docstring). ``untracked``: a context in which operators are not counted (the memory
    tracker's pause), around the detach."""

    def __init__(self, untracked: Callable[[], AbstractContextManager[Any]] = nullcontext
                 ) -> None:
        super().__init__()
        self._untracked = untracked

    def _fw_pre_hook(self, mod: Any, input: Any) -> None:
        if torch._dynamo.eval_frame._is_in_optimized_module():  # torch's own first return
            return super()._fw_pre_hook(mod, input)
        args, spec = tree_flatten(input)
        if any(_leaf(a) for a in args):
            with self._untracked():
                input = tree_unflatten([a.detach() if _leaf(a) else a for a in args], spec)
        super()._fw_pre_hook(mod, input)
