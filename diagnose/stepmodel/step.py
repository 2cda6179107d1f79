"""The step model of one rank: its graph, the replay of the unmodified step, and how
close that replay comes to the measured step (``step_model`` in the JSON).

Where a trace cannot carry a model (no steps, no launches tied to their device work, a
replay with no step length) the model is None with the reason, which the report prints
as "none (<reason>)"; building it never raises on a trace the reader accepted."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Trace
from .build import build_graph
from .graph import DEVICE_TASKS, CycleError, Graph, replay


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
                "steps": self.graph.n_steps,
                "host_only": not bool(self.graph.is_kind(*DEVICE_TASKS).any())}


#: a host-only replay this close to the measured step matched it by construction (the
#: trace's own tasks in order; what is left is rounding and the loader's waits as fitted)
BY_CONSTRUCTION = 0.005
#: how a model that failed on a trace begins its reason (a bug: tests look for it)
FAILED = "the step model failed on this trace"


def step_model(t: Trace, max_steps: int | None = None) -> StepModel:
    """Build and replay the model of ``t`` (a few steps around the median one), or say
    why there is none. A failure of the model's own code gives no model and says so (the
    report goes on without predictions) rather than ending the analysis."""
    try:
        return _step_model(t, max_steps)
    except Exception as e:  # a bug in the model: the rest of the report still stands
        return StepModel(None, f"{FAILED} ({type(e).__name__}: {e}); please report it")


def _step_model(t: Trace, max_steps: int | None) -> StepModel:
    g = build_graph(t, max_steps)
    if isinstance(g, str):
        return StepModel(None, g)
    if t.unread_categories and not g.is_kind(*DEVICE_TASKS).any():
        # another accelerator's events (categories this analysis does not read): a model
        # of the host alone would leave out the device the step may wait on
        return StepModel(None, "no device work this analysis reads: the trace's device "
                               f"events are of categories it does not ({', '.join(t.unread_categories)})")
    try:
        r = replay(g)
    except CycleError as e:
        return StepModel(None, f"{e}: the trace's launches, syncs and copies are out of time "
                               "order, so no replay follows from them")
    measured, replayed = float(np.mean(g.steps_measured)) / 1e3, r.mean_step_ms
    if not (math.isfinite(replayed) and replayed > 0 and math.isfinite(measured)
            and measured > 0):
        return StepModel(None, f"the replay gives no step length ({replayed:g} ms for a "
                               f"measured {measured:g} ms): the steps hold no host work")
    return StepModel(g, None, measured, replayed)


def step_model_line(js: Any, why: Any) -> str:
    """The report's one line on the step model, from its JSON (text, HTML, TensorBoard).
    A model of host work only (``host_only``: no device work) replays the trace's own
    tasks in their order, so it matches the measured step by construction (within
    :data:`BY_CONSTRUCTION`): the line says so rather than quote an error of zero as a
    check."""
    if isinstance(js, dict) and isinstance(js.get("error"), int | float):
        n = js.get("steps")
        if js.get("host_only") is True and abs(js["error"]) < BY_CONSTRUCTION:
            return (f"{n} step{'s' if n != 1 else ''} of host work ({js.get('measured_ms', 0):,.2f}"
                    " ms a step, their mean), replayed as measured: with no device work to "
                    "overlap, the replay matches by construction")
        return (f"replayed to {js['error']:+.1%} of the measured step ({js.get('replayed_ms', 0):,.2f} "
                f"vs {js.get('measured_ms', 0):,.2f} ms, {n} step{'s' if n != 1 else ''})")
    return f"none ({why})" if isinstance(why, str) and why else "none"
