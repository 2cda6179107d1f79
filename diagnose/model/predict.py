"""What analysis takes from the step model: the replay's accuracy (``step_model`` in the
JSON) and, for each finding's fixes, a prediction of the step time the fix gives."""

from __future__ import annotations

from typing import Any

from .step import StepModel

# The analysis and its findings are typed in layers above this one (result, engine):
# they are taken as they come and only their attributes are used.
Analysis = Any


def _pick(models: list[tuple[int | None, StepModel | None]]) -> tuple[int | None, StepModel | None]:
    """The rank whose replay is furthest from its measured step (the error a prediction
    must own up to), else the first rank's reason for having no model."""
    built = [(r, m) for r, m in models if m is not None and m.graph is not None]
    if built:
        return max(built, key=lambda x: abs(x[1].error or 0.0))
    return next(((r, m) for r, m in models if m is not None), (None, None))


def attach_models(a: Analysis, models: list[tuple[int | None, StepModel | None]],
                  context: dict | None) -> None:
    """Put the step model's replay accuracy on the analysis (and, with it, predictions)."""
    rank, m = _pick(models)
    if m is None:
        a.step_model, a.step_model_why = None, "no trace analysed"
        return
    js: dict[str, Any] | None = m.to_json()
    if js is not None and len(models) > 1:
        js["rank"] = rank
    a.step_model, a.step_model_why = js, m.why
