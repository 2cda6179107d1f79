"""What the fix units' transform tests share: a builder trace's step model, its replayed
median, the run's facts and a fix unit's prediction (tests/modeltraces.py has the traces
and their answers worked out by hand)."""

from __future__ import annotations

import numpy as np

from diagnose.fixes import FIXES, TrainConfig
from diagnose.stepmodel import step_model
from diagnose.stepmodel.facts import Facts
from diagnose.stepmodel.graph import replay
from diagnose.stepmodel.prediction import Predictor
from tests import modeltraces as mt


def _model(b, tmp_path):
    m = step_model(mt.as_trace(b, tmp_path))
    assert m.graph is not None, m.why
    assert abs(m.error) < 0.01
    return m


def _median(g) -> float:
    return float(np.median(replay(g).step_ms))


def _facts(m, **kw) -> Facts:
    """The run's facts: its profiled step and ``kw`` (metric names)."""
    return Facts.from_metrics({"step_time_median_ms": float(np.median(m.graph.steps_measured))
                               / 1e3, "step_count": m.graph.n_steps, **kw})


def _predict(fix: str, m, config: TrainConfig | None = None, **kw):
    """What the fix unit predicts (its transform, for each config autofix would try)."""
    facts = _facts(m, **kw)
    return FIXES[fix].predict(Predictor(m, facts), config or TrainConfig(), facts)


__all__ = ["_facts", "_median", "_model", "_predict"]
