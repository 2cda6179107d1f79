"""The step model of one rank: its graph, the replay of the unmodified step, and how
close that replay comes to the measured step (``step_model`` in the JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Trace
from .build import build_graph
from .graph import DEVICE_TASKS, Graph, TaskKind, replay


@dataclass
class StepModel:
    """A rank's model: the graph (None when none could be built, with ``why``)."""

    graph: Graph | None
    why: str | None = None
    measured_ms: float | None = None  # mean measured step of the window
    replayed_ms: float | None = None  # mean replayed step of the window

    @property
    def error(self) -> float | None:
        if self.measured_ms is None or self.replayed_ms is None or self.measured_ms <= 0:
            return None
        return self.replayed_ms / self.measured_ms - 1

    def to_json(self) -> dict[str, Any] | None:
        if self.graph is None:
            return None
        err = self.error
        return {"measured_ms": round(self.measured_ms or 0.0, 4),
                "replayed_ms": round(self.replayed_ms or 0.0, 4),
                "error": round(err, 5) if err is not None else None,
                "steps": self.graph.n_steps}


def step_model(t: Trace, max_steps: int | None = None) -> StepModel:
    """Build and replay the model of ``t`` (a few steps around the median one)."""
    g = build_graph(t, max_steps)
    if isinstance(g, str):
        return StepModel(None, g)
    if not g.is_kind(*DEVICE_TASKS, TaskKind.FETCH, TaskKind.DL_WAIT).any():
        return StepModel(None, "no device work and no DataLoader in the profiled steps: "
                               "nothing to model beyond the host's own time")
    r = replay(g)
    return StepModel(g, None, float(np.mean(g.steps_measured)) / 1e3, r.mean_step_ms)


def step_model_line(js: Any, why: Any) -> str:
    """The report's one line on the step model, from its JSON (text, HTML, TensorBoard)."""
    if isinstance(js, dict) and isinstance(js.get("error"), int | float):
        n = js.get("steps")
        return (f"replayed to {js['error']:+.1%} of the measured step ({js.get('replayed_ms', 0):,.2f} "
                f"vs {js.get('measured_ms', 0):,.2f} ms, {n} step{'s' if n != 1 else ''})")
    return f"none ({why})" if isinstance(why, str) and why else "none"
