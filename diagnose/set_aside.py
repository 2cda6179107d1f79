"""The traces an analysis sets aside, each with a note, so that the others still give their
report: a trace found in a folder that cannot be read (truncated, not JSON), and one that
holds nothing to analyse. Where every trace is such, the first one's problem is the error
(one line, exit 2); a file named on its own is read or refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import DiagnoseError, TraceError
from .result import SET_ASIDE_NOTE
from .trace.grouping import Unit

#: why a trace with nothing to analyse is set aside (or refused, where it is all there is)
EMPTY = ("holds no operators and no device activity (such as the last, partial span "
         "tensorboard_trace_handler writes as the profiler stops)")


def _drop(units: list[Unit], files: list[Path]) -> list[Unit]:
    """The units without ``files``, those left with none dropped (in place: the units'
    extras are keyed by the unit)."""
    for u in units:
        u.files[:] = [f for f in u.files if f not in files]
    return [u for u in units if u.files]


def without_unreadable(units: list[Unit], errors: list[TraceError],
                       named: Iterable[Path] = ()) -> tuple[list[Unit], list[str]]:
    """The units without the traces found in a folder that could not be read (``errors``:
    each one's TraceError), and a note naming each with its problem. A trace ``named`` on
    its own (a file given, not found in a folder) is read or refused: its error is raised,
    as is the first where no trace is left."""
    if not errors:
        return units, []
    given = {p.resolve() for p in named}
    for e in errors:
        if Path(e.path).resolve() in given:
            raise e
    bad = [Path(e.path) for e in errors]
    kept = _drop(units, bad)
    if not kept:
        raise errors[0]
    return kept, [f"{Path(e.path).name}{SET_ASIDE_NOTE}{e.problem}" for e in errors]


def _empty(read: tuple[Any, ...]) -> bool:
    """A trace that recorded neither a host operator nor device work: a step annotation
    at most, no step time or finding can come from it."""
    values = read[2].values
    return values.get("share_cpu_exec") is None and values.get("has_gpu") is False


def without_empty(units: list[Unit], reads: dict[Path, Any]) -> tuple[list[Unit], list[str]]:
    """The units without their traces that hold nothing to analyse (:func:`_empty`), and
    a note naming each; where every trace is such, a DiagnoseError that says so."""
    empty = [f for f, r in reads.items() if _empty(r)]
    if not empty:
        return units, []
    kept = _drop(units, empty)
    if not kept:
        raise DiagnoseError(f"{empty[0]}: the trace {EMPTY}: nothing to analyse" if len(
            empty) == 1 else f"none of the {len(empty)} traces holds an operator or device "
            f"activity (e.g. {empty[0].name}): nothing to analyse")
    return kept, [f"{f.name}{SET_ASIDE_NOTE}it {EMPTY}" for f in empty]
