"""The step model: a dependency graph of a few profiled steps, its replay, and fixes
as transforms of it (README.md, "Predictions: a model of the step")."""

from __future__ import annotations

from .build import build_graph
from .graph import EdgeKind, Graph, Replay, ResKind, TaskKind, replay
from .step import StepModel, step_model

#: where analysis keeps a rank's StepModel between reading the trace and the report
MODEL_TABLE = "_step_model"

__all__ = ["MODEL_TABLE", "EdgeKind", "Graph", "Replay", "ResKind", "StepModel", "TaskKind", "build_graph",
           "replay", "step_model"]
