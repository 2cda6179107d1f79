"""Autofix: try the fixes the findings name as measured trials; keep what helps.

- :mod:`~diagnose.tune.runner`: orchestrating (:func:`autofix`): baseline, fixes in
  predicted order, before/after
- :mod:`~diagnose.tune.search`: searching: one fix's trials and decisions, the num_workers
  and micro-batch searches
- :mod:`~diagnose.tune.measure`: measuring (:class:`Plan`): interleaved rounds, looks
- :mod:`~diagnose.tune.predict`: the step model's predictions: order, skips, disagreements
- :mod:`~diagnose.tune.facts`: what is known about the live process (CPUs, bf16, ...)
- :mod:`~diagnose.tune.trial`: one realised config (loader, optimizer, step, block timing)
- :mod:`~diagnose.tune.stats`: the sequential rule of trials (error rates documented), the
  bootstrap interval of fixed comparisons
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
    OK,
    REVERTED,
    SKIPPED,
    Bound,
    Comparison,
    Decision,
    TuneResult,
)
from .runner import Capture, Plan, autofix, cpu_count, planned_fixes
from .trial import TuneError, Workload

__all__ = ["ADVICE", "ERROR", "FITS", "KEPT", "NOT_APPLICABLE", "NO_CHANGE", "NO_FIT", "OK",
           "REVERTED", "SKIPPED", "Bound", "Capture", "Comparison", "Decision", "Plan",
           "TuneError", "TuneReport", "TuneResult", "Workload", "autofix", "cpu_count",
           "planned_fixes"]
