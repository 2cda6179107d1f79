"""The analysis result types: one rank's measurements and the whole analysis.

Data only, so that every stage above (renderers, autofix, capture) can take them without
importing each other: printing lives in :class:`diagnose.api.Report`, a subclass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .metrics import CATALOG
from .rules.engine import Finding, NotEvaluated, group_not_evaluated, severity_rank

SCHEMA_VERSION = 1


def step_time(m: Mapping[str, Any]) -> dict[str, Any]:
    """The step time to lead with, from a run's metrics: what the job does without the
    profiler when the capture timed unprofiled steps, else the profiled window's."""
    un, prof = m.get("step_time_unprofiled_median_ms"), m.get("step_time_median_ms")
    base = {"profiled_median_ms": prof, "profiled_steps": m.get("step_count"),
            "profiler_overhead_ratio": m.get("profiler_overhead_ratio")}
    if isinstance(un, int | float):
        return {"median_ms": un, "measured": "without the profiler",
                "steps": m.get("step_time_unprofiled_steps"), **base}
    return {"median_ms": prof, "measured": "as profiled", "steps": m.get("step_count"), **base}


@dataclass
class RankResult:
    path: str
    rank: int | None
    metrics: dict[str, Any]
    series: dict[str, list[float]]
    notes: list[str]
    tables: dict[str, Any] = field(default_factory=dict)  # top_kernels: see docs/json.md
    # rule -> the share of this rank's step its own step model predicts the rule's best fix
    # saves: what a many-rank report grades that rank's finding by (analysis.rank_gains)
    gains: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "path": self.path, "metrics": self.metrics,
                "series": self.series, "tables": self.tables}


#: how the notes that say which files were read begin or run: a process's spans, of which
#: one was analysed; a trace with nothing to analyse set aside (diagnose/analysis.py)
SPANS_NOTE = "profiled spans of one process"
SET_ASIDE_NOTE = " set aside: "


@dataclass
class Analysis:
    """What analysis found: metrics, findings (worst first), rules not evaluated, notes.

    Data only: :class:`diagnose.Report` adds printing (``print``, ``render_text``).
    """

    source: list[str]
    ranks: list[RankResult]
    metrics: dict[str, Any]
    findings: list[Finding]
    not_evaluated: list[NotEvaluated]
    notes: list[str] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=dict)
    samples: dict[str, Any] | None = None
    # the step model's replay of the unmodified step (diagnose/stepmodel): JSON step_model
    step_model: dict[str, Any] | None = None
    step_model_why: str | None = "no trace analysed"
    # the model's predictor for this run (diagnose.stepmodel.prediction.Predictor; None: no model,
    # or many ranks): autofix predicts kept changes and the next trial together through it.
    # Not in the JSON.
    predictor: Any = field(default=None, repr=False, compare=False)
    # where the step's bytes go and what a change does to its peak (diagnose/memory):
    # JSON memory, None where the run recorded no memory
    memory: dict[str, Any] | None = None

    def source_notes(self) -> list[str]:
        """The notes that say which of the given files were read (a span of several, a
        trace set aside): what a command that shows no notes still says."""
        return [n for n in self.notes if SPANS_NOTE in n or SET_ASIDE_NOTE in n]

    def worst(self) -> str | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=severity_rank)

    def at_least(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if severity_rank(f.severity) >= severity_rank(severity)]

    @property
    def predictions(self) -> dict[str, float | None]:
        """Each fix's predicted speedup from the step model (the best over the findings that
        name it; None where the model cannot tell): what autofix orders its trials by."""
        out: dict[str, float | None] = {}
        for f in self.findings:
            for fix, p in (f.predictions or {}).items():
                s = getattr(p, "speedup", None)
                if getattr(p, "at_least", False) and isinstance(s, int | float) and s < 1:
                    s = None  # a bound below 1: not a reason to skip the trial
                if isinstance(s, int | float):
                    prev = out.get(fix)
                    out[fix] = max(prev, s) if isinstance(prev, float) else float(s)
                else:
                    out.setdefault(fix, None)
        return out

    @property
    def prediction_highs(self) -> dict[str, float]:
        """Each predicted fix's speedup at the fast end of its range (the best over the
        findings that name it): autofix skips a fix only where even that is no gain."""
        out: dict[str, float] = {}
        for f in self.findings:
            for fix, p in (f.predictions or {}).items():
                rng, base = getattr(p, "range", None), getattr(p, "base_ms", None)
                if getattr(p, "at_least", False) or not rng or not isinstance(
                        base, int | float) or not rng[0] > 0:
                    continue
                out[fix] = max(out.get(fix, 0.0), float(base) / float(rng[0]))
        return out

    @property
    def prediction_spans(self) -> dict[str, tuple[float, float]]:
        """Each predicted fix's range as speedups over its point, (slow end, fast end)
        (that of its best point over the findings that name it; not for a bound):
        autofix scales a trial's own point by it."""
        out: dict[str, tuple[float, float]] = {}
        best: dict[str, float] = {}
        for f in self.findings:
            for fix, p in (f.predictions or {}).items():
                s = getattr(p, "speedup", None)
                if getattr(p, "at_least", False) or not isinstance(s, int | float) or s <= 0 \
                        or s <= best.get(fix, 0.0):
                    continue
                lo, hi = getattr(p, "floor", None), getattr(p, "reach", None)
                if isinstance(lo, int | float) and isinstance(hi, int | float):
                    best[fix], out[fix] = float(s), (float(lo) / s, float(hi) / s)
        return out

    @property
    def candidate_predictions(self) -> dict[str, dict[frozenset[tuple[str, Any]], float]]:
        """Each fix's predicted speedup for every config its search would try (the change
        from the diagnosed run's settings, as a set of (field, value)); point predictions
        only. Autofix predicts each trial of a ladder from these."""
        out: dict[str, dict[frozenset[tuple[str, Any]], float]] = {}
        for f in self.findings:
            for fix, p in (f.predictions or {}).items():
                if getattr(p, "at_least", False):
                    continue
                for change, speedup in getattr(p, "candidates", ()) or ():
                    out.setdefault(fix, {})[frozenset(change)] = float(speedup)
        return out

    @property
    def advised_changes(self) -> dict[str, frozenset[tuple[str, Any]]]:
        """Each predicted fix's advice: the change its prediction is for (the best
        predicted config, a tie going to the one whose loader has headroom)."""
        out: dict[str, frozenset[tuple[str, Any]]] = {}
        for f in self.findings:
            for fix, p in (f.predictions or {}).items():
                change = getattr(p, "change", None)
                if isinstance(change, dict) and change:
                    out.setdefault(fix, frozenset(change.items()))
        return out

    def step_time(self) -> dict[str, Any]:
        """The step time to lead with (see :func:`step_time`)."""
        return step_time(self.metrics)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "step_time": self.step_time(),
            "ranks": [r.to_json() for r in self.ranks],
            "metrics": self.metrics,
            "units": {k: CATALOG[k][0] for k in self.metrics if k in CATALOG},
            "step_model": self.step_model,
            "step_model_why": None if self.step_model is not None else self.step_model_why,
            "memory": self.memory,
            "findings": [f.to_json() for f in self.findings],
            "not_evaluated": [n.to_json() for n in self.not_evaluated],
            "not_evaluated_groups": group_not_evaluated(self.not_evaluated),
            "notes": self.notes,
        }


@dataclass
class Runs:
    """What analysis found in sources that hold several runs: one Analysis per run, in order
    (see :func:`diagnose.analysis.analyze_runs`). A single run is that run's Analysis."""

    runs: list[Analysis]
    as_ranks: bool = False  # the files outside run folders were taken as ranks of one run

    def __len__(self) -> int:
        return len(self.runs)

    def worst(self) -> str | None:
        sev = [w for r in self.runs if (w := r.worst()) is not None]
        return max(sev, key=severity_rank) if sev else None

    def at_least(self, severity: str) -> list[Finding]:
        """Findings at or above ``severity`` in any run (``--fail-on`` reads all of them)."""
        return [f for r in self.runs for f in r.at_least(severity)]

    def summary(self) -> str:
        from .trace.grouping import process_spans

        if all(len(r.source) == 1 for r in self.runs) and process_spans(
                [r.source[0] for r in self.runs]):
            return (f"{len(self.runs)} {SPANS_NOTE} (tensorboard_trace_handler's files), one "
                    "report each; compare, metrics and diagnose.analyze() take the newest of "
                    "those with the most steps")
        if self.as_ranks:  # asked for, and the runs are still several: run folders
            return (f"{len(self.runs)} separate runs, one report each: --as-ranks joins the "
                    "files outside run folders; each run folder (a capture's) is a run of its "
                    "own")
        return (f"{len(self.runs)} separate runs, one report each: files are ranks of one run "
                "only when they say so (distributedInfo rank and world size, or a capture's "
                "run folder); --as-ranks forces rank-less files into one run")

    def to_json(self) -> dict[str, Any]:
        """One run: that run's document, unchanged. Several: ``{"schema_version", "runs":
        [<one run's document>, ...], "notes": [...]}``."""
        if len(self.runs) == 1:
            return self.runs[0].to_json()
        return {"schema_version": SCHEMA_VERSION, "runs": [r.to_json() for r in self.runs],
                "notes": [self.summary()]}
