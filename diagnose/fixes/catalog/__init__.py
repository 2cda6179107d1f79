"""The fix catalog: one module per fix or family of fixes, named after what they change.

Each module holds whole units: the fixes (:class:`~diagnose.fixes.unit.Fix` or a
subclass, each with its rule ``category``), their transforms of the step model, and the
trial's realisations of the config fields they change; it registers them in its ``FIXES``
(and ``REALISATIONS``) tuples. :data:`MODULES` lists the modules the registry reads. A test
fails when a module here is not in :data:`MODULES`, a unit declared in a module is not in
its ``FIXES``, or a part of a unit lives in another module.

Adding a fix: CONTRIBUTING.md, "A fix".
"""

from __future__ import annotations

from types import ModuleType

from . import (
    communication,
    config,
    fetch,
    imbalance,
    input,
    launch,
    memory,
    precision,
    sync,
    threads,
    transfer,
    workers,
)

#: The catalog modules the registry reads, in the order fixes are listed.
MODULES: tuple[ModuleType, ...] = (workers, input, threads, fetch, transfer, sync, launch,
                                   precision, memory, communication, imbalance, config)

__all__ = ["MODULES"]
