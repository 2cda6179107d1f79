"""An info finding whose first fix the step model is sure of (measured inputs, the range's
slow end at least HELPS) is raised to warning; one whose range reaches the step as it is,
one that rests on an assumption, a memory finding, and a change a warning already leads
with keep their grade."""

from __future__ import annotations

import dataclasses

from diagnose.fixes import FIXES
from diagnose.fixes.findings import _grade_sure, sort_findings
from diagnose.rules.engine import Finding
from diagnose.stepmodel.calibration import HELPS
from diagnose.stepmodel.prediction import Prediction

SPLIT = {"num_workers": 1, "intra_op_threads": 1}


def _finding(rule: str, severity: str, speedup: float, change: dict, fix: str = "threads",
             category: str = "input", spread: float = 1.1) -> Finding:
    """A finding whose one fix is predicted ``speedup`` with a range of ``spread`` either
    side of its step (slow end: speedup / spread)."""
    step = 10.0 / speedup
    p = Prediction(change, step, speedup, (step / spread, step * spread), 10.0)
    return Finding(rule, category, severity, "t", "m", {}, [fix], 0.09, predictions={fix: p})


def test_a_sure_gain_grades_an_info_finding_up() -> None:
    f = _finding("IN001", "info", 1.66, SPLIT)  # slow end 1.51x: sure
    f.hints.append("the rule's own hint")
    _grade_sure([f], FIXES)
    assert f.severity == "warning" and f.graded_up_from == "info"
    assert f.to_json()["graded_up_from"] == "info"
    # the reason for the grade leads the cell (a user read it last of five)
    assert f.hints[1:] == ["the rule's own hint"] and f.hints[0] == (
        "warning: graded up from info, its first fix (" + FIXES["threads"].title_for(SPLIT)
        + ") is predicted 1.66x, at least 1.51x within its range")
    # a raised finding follows the warnings its rule graded, whatever its time at stake:
    # captures of one job put a slow end on either side of the line, and the advice that
    # leads must not flip with it
    natural = _finding("IN005", "warning", 1.05, {"persistent_workers": True},
                       "persistent_workers")
    info = _finding("IN002", "info", 1.2, {"num_workers": 0}, "num_workers")
    sort_findings(fs := [info, f, natural])
    assert fs == [natural, f, info]


def test_an_unsure_or_assumed_gain_keeps_the_grade() -> None:
    edge = 1.1 * HELPS * 0.999  # slow end just under HELPS
    unsure = _finding("IN001", "info", edge, SPLIT)
    assumed = _finding("IN001", "info", 1.66, SPLIT)
    p = assumed.predictions["threads"]
    assumed.predictions["threads"] = dataclasses.replace(p, assumed=("one worker's batch",))
    memory = _finding("ME004", "info", 1.66, {"activation_checkpointing": True},
                      "activation_checkpointing", category="memory")
    bound = _finding("IN001", "info", 1.66, SPLIT)
    bound.predictions["threads"] = dataclasses.replace(bound.predictions["threads"],
                                                       at_least=True)
    _grade_sure([unsure, assumed, memory, bound], FIXES)
    assert [x.severity for x in (unsure, assumed, memory, bound)] == ["info"] * 4
    assert all(x.graded_up_from is None and not x.hints
               for x in (unsure, assumed, memory, bound))
    sure = _finding("IN001", "info", 1.1 * HELPS * 1.001, SPLIT)  # just over: raised
    _grade_sure([sure], FIXES)
    assert sure.severity == "warning"


def test_a_change_a_warning_leads_with_is_not_raised_twice() -> None:
    warn = _finding("IN004", "warning", 1.75, {"num_workers": 0}, "num_workers_cap")
    same = _finding("IN001", "info", 1.75, {"num_workers": 0}, "num_workers")
    other = _finding("IN002", "info", 1.4, SPLIT)
    _grade_sure([warn, same, other], FIXES)
    assert (same.severity, other.severity) == ("info", "warning")
    twice = [_finding("IN001", "info", 1.6, SPLIT), _finding("CF008", "info", 1.5, SPLIT)]
    _grade_sure(twice, FIXES)
    assert [x.severity for x in twice] == ["warning", "info"]  # the first raised names it
