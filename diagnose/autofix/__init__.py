"""Autofix: try the fixes the findings name as measured trials; keep what helps.

- :mod:`~diagnose.autofix.runner`: orchestrating (:func:`autofix`): baseline, fixes in
  predicted order, before/after
- :mod:`~diagnose.autofix.search`: searching: one fix's trials and decisions, the num_workers
  and micro-batch searches
- :mod:`~diagnose.autofix.measure`: measuring (:class:`Plan`): interleaved rounds, looks
- :mod:`~diagnose.autofix.order`: the step model's predictions: order, skips, disagreements
- :mod:`~diagnose.autofix.live`: what is known about the live process (CPUs, bf16, ...)
- :mod:`~diagnose.autofix.trial`: one realised config (loader, optimizer, step, block timing)
- :mod:`~diagnose.autofix.stats`: the sequential rule of trials (error rates documented), the
  bootstrap interval of fixed comparisons
- :mod:`~diagnose.autofix.state`: snapshot and bit-exact restore of model/optimizer/RNG state
- :mod:`~diagnose.autofix.decisions`: the result types (data); :mod:`~diagnose.autofix.report`
  adds printing (:class:`AutofixReport`), rendered by :mod:`~diagnose.autofix.render`

It needs nothing from the layers above it: the baseline capture comes in as ``capture``
(``diagnose(...).autofix()`` passes the session's), and ``diagnose.report`` never imports it.
"""

from .decisions import (
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
    AutofixResult,
    Bound,
    Comparison,
    Decision,
)
from .report import AutofixReport
from .runner import Capture, Plan, autofix, cpu_count, planned_fixes
from .trial import TuneError, Workload

__all__ = ["ADVICE", "ERROR", "FITS", "KEPT", "NOT_APPLICABLE", "NO_CHANGE", "NO_FIT", "OK",
           "REVERTED", "SKIPPED", "Bound", "Capture", "Comparison", "Decision", "Plan",
           "TuneError", "AutofixReport", "AutofixResult", "Workload", "autofix", "cpu_count",
           "planned_fixes"]
