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

from ._version import __version__
from .api import Report, analyze
from .errors import DiagnoseError, TraceError
from .fixes import FIXES, TrainConfig
from .rules.engine import Finding

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
