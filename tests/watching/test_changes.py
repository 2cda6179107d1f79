"""What an alarm's capture leads with (diagnose.watching.changes): the worst finding's
first fix as its report offers it, not the fix with the highest point."""

from __future__ import annotations

import types

from diagnose.stepmodel.prediction import Prediction, cannot_tell
from diagnose.watching.changes import what_changed


def _finding(fixes: list[str], predictions: dict) -> types.SimpleNamespace:
    return types.SimpleNamespace(rule="IN001", severity="critical", category="input",
                                 message="Training waits on the DataLoader",
                                 fixes=fixes, predictions=predictions)


def _p(speedup: float, lo: float, hi: float) -> Prediction:
    base = 32.5
    return Prediction({"k": 1}, base / speedup, speedup, (base / hi, base / lo), base)


def test_the_fix_line_is_the_reports_first_fix() -> None:
    """A new user's watch led with 'fix prefetch_factor: predicted 32.5 -> 32.5 ms
    (1.00x ...): may not help' where the report offered persistent_workers first: the line
    took the highest point among every prediction, offered or not."""
    f = _finding(["persistent_workers", "prefetch_factor"],
                 {"persistent_workers": cannot_tell("no worker start was timed"),
                  "prefetch_factor": _p(1.001, 0.9, 1.1)})
    lines, _ = what_changed(None, types.SimpleNamespace(findings=[f]))
    assert lines[-1] == "fix persistent_workers: not predicted: no worker start was timed"
    f = _finding(["num_workers", "prefetch_factor"],
                 {"num_workers": _p(1.4, 1.3, 1.5), "prefetch_factor": _p(1.001, 0.9, 1.1)})
    lines, _ = what_changed(None, types.SimpleNamespace(findings=[f]))
    assert lines[-1].startswith("fix num_workers: predicted") and "1.40x" in lines[-1]
    slower = _finding(["num_workers"], {"num_workers": _p(0.7, 0.6, 0.8)})
    lines, _ = what_changed(None, types.SimpleNamespace(findings=[slower]))
    assert not any(line.startswith("fix ") for line in lines)  # a slower fix is not offered


def test_an_alarm_whose_window_found_the_pace_back_says_it_passed(monkeypatch) -> None:
    """A new user's alarm at x1.66 read, two lines on, 'step time without the profiler:
    0.5 ms -> 0.5 ms (+0.0% ...): within noise' and nothing else about it: where the
    profiled window found the step back to the baseline's, the alarm's lines lead with
    that; a window that found it slower does not."""
    import diagnose.watching.changes as changes

    def compared(verdict: str) -> types.SimpleNamespace:
        step = types.SimpleNamespace(verdict=verdict, change_pct=0.0, median_a=10.0,
                                     median_b=10.0, line=lambda: f"step time ...: {verdict}")
        return types.SimpleNamespace(findings=[], step=step, metrics=[], to_json=dict)

    empty = types.SimpleNamespace(findings=[])
    for verdict, passed in (("within noise", True), ("better", True), ("worse", False)):
        monkeypatch.setattr(changes, "compare_reports", lambda a, b, v=verdict: compared(v))
        lines, _ = what_changed(empty, empty)
        assert lines[0].startswith("passed: ") == passed, lines
        assert f"step time ...: {verdict}" in lines


def test_a_window_still_at_the_alarms_pace_has_not_passed(monkeypatch) -> None:
    """A new user's watch: the alarm said 54.5 -> 73.1 ms and held to the end, its window
    ran at 73.8 ms, and it read "passed": the baseline window's own step (77.6 ms, taken
    over early slow steps) was slower than the pace the watch learnt. A window whose step
    is nearer the alarm's after than its before is not passed, and says why; one back
    near the before still is."""
    import diagnose.watching.changes as changes

    def compared(b_ms: float) -> types.SimpleNamespace:
        step = types.SimpleNamespace(verdict="within noise", change_pct=-4.9, median_a=77.6,
                                     median_b=b_ms, line=lambda: "step time ...")
        return types.SimpleNamespace(findings=[], step=step, metrics=[], to_json=dict)

    empty = types.SimpleNamespace(findings=[])
    alarm = types.SimpleNamespace(signal="step_time", before=54.54, after=73.11)
    for b_ms, passed in ((73.8, False), (66.0, False), (60.0, True), (54.0, True)):
        monkeypatch.setattr(changes, "compare_reports", lambda a, b, v=b_ms: compared(v))
        lines, _ = what_changed(empty, empty, [alarm])
        assert lines[0].startswith("passed: ") == passed, (b_ms, lines)
        assert any("still at the alarm's pace (54.5 -> 73.1 ms)" in x
                   for x in lines) != passed, lines
    # an alarm of another signal leaves the verdict to the comparison
    other = types.SimpleNamespace(signal="loader_wait", before=1.0, after=9.0)
    monkeypatch.setattr(changes, "compare_reports", lambda a, b: compared(73.8))
    assert what_changed(empty, empty, [other])[0][0].startswith("passed: ")
