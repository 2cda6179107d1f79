"""A batch's size in bytes: the tensors in its nested tuples, lists and mappings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_LEAVES = 4096  # a batch with more leaves than this is not weighed (bytes unknown)


def batch_nbytes(batch: Any) -> int | None:
    """Sum of the ``nbytes`` of the tensors in a batch (nested tuples, lists, mappings: a
    dict, or a Hugging Face BatchEncoding); None when it holds none or is too large a
    structure to walk cheaply."""
    total, found, seen = 0, False, 0
    stack = [batch]
    while stack:
        x = stack.pop()
        seen += 1
        if seen > _MAX_LEAVES:
            return None
        nb = getattr(x, "nbytes", None)
        if isinstance(nb, int) and hasattr(x, "dtype"):
            total, found = total + nb, True
        elif isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
    return total if found else None
