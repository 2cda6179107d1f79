"""The capture's hooks on a user's module, kept out of what ``torch.compile`` traces.

A module compiled in place (``model.compile()``) compiles its call with its hooks: Dynamo
would trace a hook's ``time.perf_counter`` and the session's bookkeeping, break the
user's graph around them and recompile. :func:`eager` marks a hook to run as plain
Python (``torch.compiler.disable``): the forward's graph stays whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def eager(fn: F) -> F:
    """``fn`` as ``torch.compiler.disable`` leaves it (run, never traced); ``fn`` itself
    where torch has no compiler (an old torch)."""
    try:
        import torch
    except ImportError:
        return fn
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(fn) if callable(disable) else fn
