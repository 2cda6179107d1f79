"""Autofix: try the fixes the findings name as measured trials; keep what helps.

- :mod:`~diagnose.tune.runner`: the trials and decisions (:func:`autofix`, :class:`Plan`)
- :mod:`~diagnose.tune.trial`: one realised config (loader, optimizer, step, timing)
- :mod:`~diagnose.tune.stats`: block bootstrap of the speedup and its interval
- :mod:`~diagnose.tune.state`: snapshot and bit-exact restore of model/optimizer/RNG state
- :mod:`~diagnose.tune.result`: the result types (data); :mod:`~diagnose.tune.report`
  adds printing (:class:`TuneReport`), rendered by :mod:`~diagnose.tune.render`

It needs nothing from the layers above it: the baseline capture comes in as ``capture``
(``diagnose(...).autofix()`` passes the session's), and ``diagnose.report`` never imports it.
"""

from .report import TuneReport
from .result import (
    ADVICE,
    ERROR,
    FITS,
    KEPT,
    NO_CHANGE,
    NO_FIT,
    NOT_APPLICABLE,
    REVERTED,
    SKIPPED,
    Bound,
    Comparison,
    Decision,
    TuneResult,
)
from .runner import Capture, Plan, autofix, cpu_count, planned_fixes
from .trial import TuneError, Workload

__all__ = ["ADVICE", "ERROR", "FITS", "KEPT", "NOT_APPLICABLE", "NO_CHANGE", "NO_FIT",
           "REVERTED", "SKIPPED", "Bound", "Capture", "Comparison", "Decision", "Plan", "TuneError", "TuneReport",
           "TuneResult", "Workload", "autofix", "cpu_count", "planned_fixes"]
