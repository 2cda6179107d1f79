"""Fixes: one unit per change a person (or autofix) can make.

Each fix (:class:`Fix`, in :mod:`diagnose.fixes.unit`) knows when it applies and when it
is already in place, the configs autofix measures (``candidates``: pure, a new
:class:`TrainConfig` each, so a trial is reverted by keeping the old one), the code a
person would write by hand (``code``, or ``code_for(setup)`` from the user's own
DataLoader and optimizer), its prediction (``predict``, through the transform of the step
model defined beside it) and, in the same module, the trial's realisation of each config
field it changes (:mod:`diagnose.fixes.realise`).

The catalog (``diagnose/fixes/catalog/``) holds one module per fix or family;
:data:`FIXES` and :data:`REALISATIONS` are built from its modules.
"""

from __future__ import annotations

from collections.abc import Iterable

from .catalog import MODULES
from .code import Setup
from .config import TrainConfig, micro_batches
from .findings import Prediction
from .realise import CannotRealise, Realisation, StepParts
from .realise import registry as realisation_registry
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
from .worker_search import cpus_saturated, worker_ladder, workers_oversubscribed

#: Every fix, by id: the units each catalog module registers.
FIXES: dict[str, Fix] = registry(f for m in MODULES for f in m.FIXES)

#: How a trial makes each TrainConfig field real, in the catalog's order (one a field).
REALISATIONS: tuple[Realisation, ...] = realisation_registry(
    r for m in MODULES for r in getattr(m, "REALISATIONS", ()))


def fix_code(ids: Iterable[str], setup: Setup | None) -> dict[str, str]:
    """The known fixes among ``ids`` as code for ``setup`` (empty when nothing is known:
    the generic templates then serve)."""
    if setup is None:
        return {}
    return {i: FIXES[i].code_for(setup) for i in ids if i in FIXES}


__all__ = ["FIXES", "REALISATIONS", "SEARCH_CLIMB", "SEARCH_DESCEND", "SEARCH_EACH", "TIE",
           "CannotRealise", "Facts", "Fix", "Prediction", "Realisation", "Setup", "StepParts",
           "TrainConfig", "Transform", "cpus_saturated", "fix_code", "micro_batches",
           "workers_oversubscribed", "worker_ladder"]
