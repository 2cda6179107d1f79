"""The fix catalog, one module per rule category (as ``rules/<category>.toml``).

Each module declares its fixes as small units (:class:`~diagnose.fixes.unit.Fix` or a
subclass) and registers them in its ``FIXES`` tuple; :data:`MODULES` lists the modules
the registry reads. A test fails when a module here is not in :data:`MODULES`, or a unit
declared in a module is not in its ``FIXES``.

Adding a fix: declare it in the module of its category and add it to that module's
``FIXES``. An automatic fix also needs its :class:`~diagnose.fixes.config.TrainConfig`
field and the trial's realisation of that field (``diagnose/autofix/trial.py``).
"""

from __future__ import annotations

from types import ModuleType

from . import communication, config, imbalance, input, launch, memory, precision, sync, transfer

#: The catalog modules the registry reads, in the order fixes are listed.
MODULES: tuple[ModuleType, ...] = (input, transfer, sync, launch, precision, memory,
                                   communication, imbalance, config)

__all__ = ["MODULES"]
