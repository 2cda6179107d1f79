"""Fixes: one unit per change a person (or autofix) can make.

Each fix (:class:`Fix`, in :mod:`diagnose.fixes.unit`) knows when it applies and when it
is already in place, the configs autofix measures (``candidates``: pure, a new
:class:`TrainConfig` each, so a trial is reverted by keeping the old one), the code a
person would write by hand (``code``, or ``code_for(setup)`` from the user's own
DataLoader and optimizer), and a slot for its prediction (``predict``).

The catalog is arranged by rule category (``diagnose/fixes/catalog/<category>.py``);
:data:`FIXES` is built from its modules.
"""

from __future__ import annotations

from collections.abc import Iterable

from .catalog import MODULES
from .catalog.input import too_many_workers, worker_ladder
from .code import Setup
from .config import TrainConfig, micro_batches
from .facts import cpus_saturated
from .findings import Prediction
from .unit import (
    SEARCH_CLIMB,
    SEARCH_DESCEND,
    SEARCH_EACH,
    TIE,
    Facts,
    Fix,
    Transform,
    registry,
)

#: Every fix, by id: the units each catalog module registers.
FIXES: dict[str, Fix] = registry(f for m in MODULES for f in m.FIXES)


def fix_code(ids: Iterable[str], setup: Setup | None) -> dict[str, str]:
    """The known fixes among ``ids`` as code for ``setup`` (empty when nothing is known:
    the generic templates then serve)."""
    if setup is None:
        return {}
    return {i: FIXES[i].code_for(setup) for i in ids if i in FIXES}


__all__ = ["FIXES", "SEARCH_CLIMB", "SEARCH_DESCEND", "SEARCH_EACH", "TIE", "Facts", "Fix",
           "Prediction", "Setup", "TrainConfig", "Transform", "cpus_saturated",
           "fix_code", "micro_batches", "too_many_workers", "worker_ladder"]
