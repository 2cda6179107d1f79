"""``with diagnose(model, loader) as d:`` around a user's own, unchanged training loop.

Inside the block the loop runs as written. Step boundaries are found without user code
(the optimizer stepping, batches pulled from ``loader``, or ``d.step()``; see
:mod:`diagnose.capture.steps`). The profiler runs one wait/warmup/active cycle; the
``wait`` steps before it and the steps after it are timed without the profiler; then
``d.done`` becomes True (``if d.done: break`` ends a long loop early) and the loop goes on
without profiler or samplers. On exit the session tears down, runs its probes, writes
``context.json`` and analyses the run folder with the same code as ``torch-diagnose
analyze``; the report is printed and kept in ``d.report``. An exception from the block
propagates unchanged and is named in the report's notes; an out-of-memory error is
recorded in ``context.json`` (``oom``) so the rule pack reports it as a ``memory`` finding.

The rooms: :mod:`.lifecycle` (enter, teardown, finish), :mod:`.after_loop` (the probes
run on exit), :mod:`.publish` (writing, analysing, printing).
"""

from .lifecycle import Session, autofix, capture_baseline, diagnose

__all__ = ["Session", "autofix", "capture_baseline", "diagnose"]
