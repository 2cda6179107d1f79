"""The tokenising classifier with its DataLoader's worker count copied from a bigger
machine: 6 workers, whatever the CPUs this process may use."""

from __future__ import annotations

from typing import Any

from tokenizing import make_job as _make  # a sibling module, as a user's job imports one


def make_job() -> dict[str, Any]:
    return _make(num_workers=6)
