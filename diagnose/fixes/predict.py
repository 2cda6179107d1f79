"""The slot for a fix's prediction: what applying it would do to the step time.

A fix predicts through a *transform* of a model of the step (Daydream's what-if: select
tasks, scale or remove them, replay). The step model and the transforms live elsewhere;
here is only the contract a fix unit offers them (``Transform`` in
:mod:`diagnose.fixes.unit`):

``transform(fix, model, config, facts) -> Prediction | NoPrediction``: ``model`` is the
replayable step model of the run, ``config`` the run's current :class:`TrainConfig`,
``facts`` the flat mapping fixes read (see :mod:`diagnose.fixes.unit`). A transform may
ask ``fix.candidates(config, facts)`` for the changes autofix would measure and predict
each. Where the model cannot tell, it answers :class:`NoPrediction` with the reason:
never an invented number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Prediction:
    """The step time a fix is expected to give (JSON ``findings[].fixes[].predicted``)."""

    change: Mapping[str, Any]  # TrainConfig fields -> value: exactly what autofix applies
    step_ms: float  # predicted step time after the change
    speedup: float  # current step time / step_ms (below 1: the change makes it slower)
    range: tuple[float, float]  # the speedup's plausible range (lo, hi)

    def to_json(self) -> dict[str, Any]:
        return {"change": dict(self.change), "step_ms": self.step_ms, "speedup": self.speedup,
                "range": list(self.range)}


@dataclass(frozen=True)
class NoPrediction:
    """No number for this fix, and why (JSON ``predicted: null`` with ``predicted_why``)."""

    why: str


__all__ = ["NoPrediction", "Prediction"]
