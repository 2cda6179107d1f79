"""Several analysis runs as TensorBoard runs: one TensorBoard run per analysis run.

A run is named after its source (the trace file, or the capture's run folder); with
``run=NAME`` the names are ``NAME-<source name>``. Two runs that would share a name get
``-2``, ``-3``... in the order given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .tensorboard import DEFAULT_LOGDIR, WriteResult, _safe, default_run_name, write_logdir

if TYPE_CHECKING:
    from ..result import Analysis


def run_names(runs: Sequence[Analysis], run: str | None = None) -> list[str]:
    """Each run's TensorBoard run name, distinct (see the module docstring)."""
    if len(runs) == 1:
        return [_safe(run, "run") if run else default_run_name(runs[0])]
    names: list[str] = []
    for r in runs:
        base = default_run_name(r)
        base = f"{_safe(run, 'run')}-{base}" if run else base
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names


def write_runs(runs: Sequence[Analysis], logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, *,
               run: str | None = None, overwrite: bool = False) -> list[WriteResult]:
    """Write each analysis run as its own TensorBoard run under ``logdir``."""
    return [write_logdir(r, logdir, run=name, overwrite=overwrite)
            for r, name in zip(runs, run_names(runs, run), strict=True)]
