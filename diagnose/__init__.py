"""torch-diagnose: find why PyTorch training is slow, and fix it.

    from diagnose import diagnose
    with diagnose(model, loader) as d:
        for x, y in loader:
            ...
    d.report          # findings with their numbers and the fix as code

    from diagnose import analyze
    analyze("run/trace.pt.trace.json.gz").print()

``diagnose`` imports torch on first use; analysing saved traces does not need torch.
"""

from __future__ import annotations

from typing import Any


def _import_rich() -> None:
    """rich.style, when imported, draws the start of its style ids from Python's global
    random generator: imported here, with that generator's state put back, so that neither
    importing this package nor printing a report moves the user's random sequence."""
    import random

    state = random.getstate()
    try:
        import rich.style  # noqa: F401
    finally:
        random.setstate(state)


_import_rich()

from ._version import __version__  # noqa: E402
from .api import Report, analyze  # noqa: E402
from .errors import DiagnoseError, TraceError  # noqa: E402
from .fixes import FIXES, TrainConfig  # noqa: E402
from .rules.engine import Finding  # noqa: E402

__all__ = [
    "FIXES",
    "DiagnoseError",
    "Finding",
    "Report",
    "TraceError",
    "TrainConfig",
    "analyze",
    "diagnose",
    "watch",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "diagnose":  # lazy: keeps `import diagnose` (and the CLI) free of torch
        from .session import diagnose

        return diagnose
    if name == "watch":  # lazy, as diagnose
        from .watching import watch

        return watch
    raise AttributeError(f"module 'diagnose' has no attribute {name!r}")
