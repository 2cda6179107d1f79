"""What changed between the baseline window and an alarm's window, in lines a person reads
first: findings that appeared or grew, metrics that moved, and the prediction for the fix.

The comparison is ``torch-diagnose compare``'s (:func:`diagnose.report.compare.
compare_reports`, baseline as A, the alarm's capture as B); this module only picks and
orders: new findings at warning or above, then findings whose severity rose or whose time
at stake grew by :data:`MOVED` of the step or more, then the headline step time and the
key metrics that got worse by at least :data:`MOVED` (points for fractions), then the
findings that stayed as they were, then the worst finding's first fix, as its report offers it.
Without a baseline, the capture's own findings at warning or above stand in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from diagnose.fixes.findings import offered
from diagnose.report.compare import compare_reports, delta_text
from diagnose.rules.engine import severity_rank
from diagnose.stepmodel.prediction import CANNOT_TELL, Prediction

__all__ = ["PASSED", "what_changed"]

#: how the lines of a capture whose window found the pace back begin (the change passed)
PASSED = "passed:"

#: a metric that moved less than this (relative; points for fractions) is not named
MOVED = 0.10
#: at most this many metric lines
MAX_METRICS = 4


def _prediction(f: Any) -> str | None:
    """The finding's first fix as its report offers it (:func:`~diagnose.fixes.findings.
    offered`: by predicted effect, ties and "may not help" weighed), with its prediction or
    why there is none; None where no fix is offered."""
    fixes = offered(f)
    if not fixes:
        return None
    p = (getattr(f, "predictions", None) or {}).get(fixes[0])
    if isinstance(p, Prediction):
        return f"fix {fixes[0]}: {p.line()}"
    if isinstance(p, str) and p.startswith(CANNOT_TELL):
        return f"fix {fixes[0]}: not predicted: {p[len(CANNOT_TELL):].strip()}"
    return f"fix {fixes[0]}: not predicted"


def _grew(a: float | None, b: float | None) -> bool:
    """The time at stake grew by at least :data:`MOVED` of the step."""
    return isinstance(a, int | float) and isinstance(b, int | float) and b - a >= MOVED


def _findings_only(report: Any) -> list[str]:
    worst = [f for f in report.findings if severity_rank(f.severity) >= severity_rank("warning")]
    lines = [f"{f.severity} {f.rule} ({f.category}): {f.message}" for f in worst]
    if worst and (p := _prediction(worst[0])):
        lines.append(p)
    return lines or ["no finding at warning or above in the alarm's window"]


def _still_there(step_ms: float | None, alarms: Iterable[Any]) -> Any:
    """The step-time alarm whose change the window's step ``step_ms`` still shows (nearer
    the alarm's after than its before: past their geometric mean); None where none does."""
    if step_ms is None:
        return None
    return next((a for a in alarms if a.signal == "step_time" and a.before and a.after
                 and a.after > a.before and step_ms >= math.sqrt(a.before * a.after)), None)


def what_changed(baseline: Any, report: Any, alarms: Iterable[Any] = ()
                 ) -> tuple[list[str], dict[str, Any] | None]:
    """Lines that lead the alarm's report, and the comparison as JSON (None without a
    baseline: then the lines are the capture's own findings). ``alarms``: those the window
    serves; a step-time alarm whose pace the window still shows is not "passed", whatever
    the baseline window's own step (slower than the pace the watch learnt, it measures no
    change)."""
    if baseline is None:
        return ["no baseline window to compare with", *_findings_only(report)], None
    c = compare_reports(baseline, report)
    lines: list[str] = []
    still: list[str] = []
    warn = severity_rank("warning")
    gain_a = {f.rule: f.estimated_gain for f in baseline.findings}
    gain_b = {f.rule: f.estimated_gain for f in report.findings}
    for ch in c.findings:
        sb = severity_rank(ch.severity_b) if ch.severity_b else -1
        sa = severity_rank(ch.severity_a) if ch.severity_a else -1
        if ch.status == "new" and sb >= warn:
            lines.append(f"new {ch.severity_b} {ch.rule} ({ch.category}): {ch.message_b}")
        elif ch.status == "still" and sb > sa and sb >= warn:
            lines.append(f"grew {ch.severity_a} -> {ch.severity_b} {ch.rule} ({ch.category}): "
                         f"{ch.message_b}")
        elif ch.status == "still" and sb >= warn and _grew(gain_a.get(ch.rule),
                                                          gain_b.get(ch.rule)):
            lines.append(f"grew {ch.rule} ({ch.category}, {ch.severity_b}; at stake "
                         f"{gain_a[ch.rule]:.0%} -> {gain_b[ch.rule]:.0%} of the step): "
                         f"{ch.message_b}")
        elif ch.status == "still" and sb >= warn:
            still.append(f"still {ch.severity_b} {ch.rule} ({ch.category}): {ch.message_b}")
    if c.step is not None and c.step.change_pct is not None:
        lines.append(c.step.line())
        still_slow = _still_there(c.step.median_b, alarms)
        if c.step.verdict in ("within noise", "better") and still_slow is not None:
            lines.append(f"the window's step ({c.step.median_b:.1f} ms) is still at the "
                         f"alarm's pace ({still_slow.before:.1f} -> {still_slow.after:.1f} "
                         f"ms): the baseline window's own ({c.step.median_a:.1f} ms) was "
                         "slower than the pace the watch learnt, and measures no change")
        elif c.step.verdict in ("within noise", "better"):
            lines.insert(0, f"{PASSED} the step time was back to the baseline's in the "
                            "profiled window, so the change did not last until it was "
                            "profiled (the findings below are the window's)")
    moved = []
    for m in c.metrics:
        if m.headline or m.verdict != "worse":
            continue
        d = m.delta
        size = abs(d) if m.unit == "fraction" and d is not None else abs(
            (m.change_pct or 0.0) / 100)
        if size >= MOVED:
            moved.append((size, f"{m.name}: {delta_text(m)} (worse)"))
    lines.extend(t for _, t in sorted(moved, key=lambda x: -x[0])[:MAX_METRICS])
    lines.extend(still)
    top = [f for f in report.findings if severity_rank(f.severity) >= warn]
    if top and (p := _prediction(top[0])):
        lines.append(p)
    if not lines:
        lines.append("no finding or key metric moved between the baseline and this window")
    return lines, c.to_json()
