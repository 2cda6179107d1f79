"""A fix as a transform of the step graph, and what its change does beyond the graph.

Each fix unit (:mod:`diagnose.fixes.catalog`) states its prediction as a
:class:`Transform` defined next to it. ``graph(g, change, facts)`` returns the graph the
change gives, built from Daydream's primitives (select tasks, scale their time, remove or
insert tasks and edges), or a sentence saying why the model cannot tell. ``change`` is
exactly the TrainConfig change autofix applies (``{"num_workers": 2}``); ``facts`` are the
run's :class:`~.facts.Facts` (a field that is None: cannot tell).

What the replay of the graph does not hold, the transform declares for the Predictor
(:mod:`diagnose.stepmodel.prediction`), which knows no fix and no field by name:

- ``sets``: the :class:`~.facts.Facts` fields that say how the run is set up, by the config
  field whose change sets them: a transform applied after this one reads the setting this
  one made;
- ``moves_cpu``: fields whose change moves CPU work between torch's threads and worker
  processes: the step is then held at the CPU bound (:func:`~.host.cpu_bound_ms`) and also
  predicted at both ends of the CPUs' capacity timings;
- ``per_step``: where a change alters the samples a step holds, how many old steps one
  changed step is (the prediction is per old step);
- ``outside``: what the window's steps do not hold but the job pays per step (an epoch's
  start), before and after the change, ms per step;
- ``outside_left``: where ``outside`` cannot tell a cost the change alters (no start timed),
  what the prediction leaves out of it, in a clause (named with the assumptions);
- ``assumes``: for each :class:`~.facts.Facts` field a live capture measures and the
  transform falls back on without it (a saved trace), what it then assumes, in a clause: a
  prediction names the assumptions it was made on. ``a|b``: either field measured will do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .facts import FIELDS, Facts
from .graph import Graph

Change = Mapping[str, Any]
#: the graph a change gives, or why the model cannot tell
GraphChange = Callable[[Graph, Change, Facts], "Graph | str"]
#: old steps per changed step, None where the change keeps the step's samples
PerStep = Callable[[Change, Facts], "float | None"]
#: (before, after) ms per step the window does not hold; None where not known or not changed
Outside = Callable[[Facts, Change], "tuple[float, float] | None"]
#: what a prediction leaves out of the costs outside the window, in a clause; None: nothing
OutsideLeft = Callable[[Facts, Change], "str | None"]


@dataclass(frozen=True, eq=False)
class Transform:
    """A fix's graph transform and what its change does beyond the graph (module doc)."""

    graph: GraphChange
    sets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    moves_cpu: frozenset[str] = frozenset()
    per_step: PerStep | None = None
    outside: Outside | None = None
    assumes: Mapping[str, str] = field(default_factory=dict)
    outside_left: OutsideLeft | None = None
    # where the model cannot tell what the change does: the reason, every time
    cannot: str | None = None

    def __call__(self, g: Graph, change: Change, facts: Facts) -> Graph | str:
        return self.graph(g, change, facts)

    @property
    def name(self) -> str:
        """The graph function's name (a prediction's cache key)."""
        return str(getattr(self.graph, "__name__", repr(self.graph)))

    def __post_init__(self) -> None:
        unknown = ({n for names in self.sets.values() for n in names}
                   | {n for key in self.assumes for n in key.split("|")}) - FIELDS
        if unknown:
            raise ValueError(f"transform {self.name}: sets unknown fact {sorted(unknown)[0]!r}")

    def assumed(self, facts: Facts, change: Change | None = None) -> list[str]:
        """What this transform assumes of ``facts``: the clauses of its fields not measured,
        and, for ``change``, what it leaves out of the costs outside the window."""
        out = [what for key, what in self.assumes.items()
               if all(getattr(facts, name) is None for name in key.split("|"))]
        left = self.outside_left(facts, change) if self.outside_left and change else None
        return out + [left] if left else out

    def now(self, facts: Facts, change: Change) -> Facts:
        """``facts`` once ``change`` is made: the settings it sets (``sets``); a change of
        workers or threads leaves the loop's measured contention to the run as captured."""
        made: dict[str, Any] = {name: v for k, v in change.items()
                                for name in self.sets.get(k, ())}
        if made.keys() & {"dataloader_num_workers", "torch_num_threads"}:
            made["loop_contention"] = None
        return facts.replace(**made) if made else facts


def transform(*, sets: Mapping[str, tuple[str, ...]] | None = None,
              moves_cpu: frozenset[str] = frozenset(), per_step: PerStep | None = None,
              outside: Outside | None = None, assumes: Mapping[str, str] | None = None,
              outside_left: OutsideLeft | None = None
              ) -> Callable[[GraphChange], Transform]:
    """Decorator: the graph function below, as a :class:`Transform` declaring the rest."""
    def wrap(fn: GraphChange) -> Transform:
        return Transform(fn, dict(sets or {}), frozenset(moves_cpu), per_step, outside,
                         dict(assumes or {}), outside_left)
    return wrap


def as_transform(t: Transform | GraphChange) -> Transform:
    """A bare graph function as a transform that declares nothing beyond the graph."""
    return t if isinstance(t, Transform) else Transform(t)


def cannot(why: str) -> Transform:
    """The transform of a fix whose effect the trace cannot show: its reason."""
    return Transform(lambda g, change, facts: why, cannot=why)


#: How the reason starts where the model cannot tell what a fix does but can tell that it
#: saves too little to matter (:func:`~.prediction.device_only`): a finding's time at stake
#: then follows the predictions, as it does for a fix predicted to change nothing.
AT_MOST = "at most"


__all__ = ["AT_MOST", "Change", "Facts", "GraphChange", "Outside", "PerStep", "Transform",
           "as_transform", "cannot", "transform"]
