"""The findings of two runs side by side: A's resolved in B, still there, no longer
evaluated, and B's new ones (``torch-diagnose compare``). A rule B could not evaluate
because one of A's finding's fixes is in place in B (persistent workers: no epoch restarts
them) is resolved, and says which fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..rules.engine import severity_rank

if TYPE_CHECKING:
    from ..result import Analysis


@dataclass
class FindingChange:
    rule: str
    title: str
    category: str
    status: str  # "resolved" | "still" | "new" | "not_evaluated"
    severity_a: str | None
    severity_b: str | None
    message_a: str | None
    message_b: str | None
    # why B could not evaluate it ("not_evaluated"), or which fix B has in place
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("rule", "title", "category", "status", "severity_a",
                                              "severity_b", "message_a", "message_b", "reason")}


def finding_changes(a: Analysis, b: Analysis) -> list[FindingChange]:
    """A's findings as B has them, then B's new ones: new first, then still there, not
    evaluated, resolved; within each, the most severe first."""
    fa = {f.rule: f for f in a.findings}
    fb = {f.rule: f for f in b.findings}
    ne_b = {n.rule: n.reason for n in b.not_evaluated}
    changes: list[FindingChange] = []
    for rule, f in fa.items():
        g = fb.get(rule)
        if g is not None:
            status, reason = "still", None
        elif rule in ne_b and (done := _fixed_in(f.fixes, b.metrics)) is not None:
            # B could not evaluate the rule because A's fix removed what it reads (no
            # epoch restarts its workers): the cause is gone, not unknown
            status, reason = "resolved", f"its fix is in place: {done}"
        elif rule in ne_b:
            status, reason = "not_evaluated", ne_b[rule]
        else:
            status, reason = "resolved", None
        changes.append(FindingChange(rule, f.title, f.category, status, f.severity,
                                     g.severity if g else None, f.message,
                                     g.message if g else None, reason))
    for rule, g in fb.items():
        if rule not in fa:
            changes.append(FindingChange(rule, g.title, g.category, "new", None, g.severity,
                                         None, g.message))
    order = {"new": 0, "still": 1, "not_evaluated": 2, "resolved": 3}
    changes.sort(key=lambda c: (order[c.status],
                                -severity_rank(c.severity_b or c.severity_a or "info"), c.rule))
    return changes


def reason_text(ch: FindingChange) -> str:
    """The line under a finding B did not report: why B could not evaluate it, or that
    A's fix is in place in B."""
    return (f"not evaluated ({ch.reason})" if ch.status == "not_evaluated"
            else str(ch.reason))


def _fixed_in(fixes: list[str], metrics: dict[str, Any]) -> str | None:
    """Which of a finding's fixes ``metrics`` (run B's) has in place, said as its fix
    says it (``persistent_workers=True already``); None where none is."""
    from ..fixes import FIXES

    for name in fixes:
        fix = FIXES.get(name)
        why = fix.in_place(metrics) if fix is not None else None
        if why:
            return why
    return None
