"""The notes a session writes for a profiled window cut short
(diagnose/session/publish.py): by the end of the loop, or by an exception raised in it."""

from __future__ import annotations

from types import SimpleNamespace

from diagnose.session.publish import RAISED_CHARS, raised, window_notes


def _prof(steps: int) -> SimpleNamespace:
    return SimpleNamespace(errors=[], window_complete=False, steps=steps, total_steps=6)


def test_the_end_of_the_loop_gets_advice_on_the_schedule() -> None:
    (note,) = window_notes(_prof(4), SimpleNamespace(seen=4), (1, 0, 5))
    assert note.startswith("the profiled window was cut short by the end of the loop")
    assert "only the 3 whole steps are analysed" in note
    assert note.endswith("use fewer wait/warmup/steps, or run the loop over more batches")


def test_an_exception_is_named_and_gets_no_advice() -> None:
    exc = KeyError("mine")
    (note,) = window_notes(_prof(1), SimpleNamespace(seen=1), (1, 0, 5), exc)
    assert note.startswith("the profiled window was cut short by KeyError: 'mine' raised "
                           "in the loop: it ran 1 step boundaries")
    assert note.endswith("no whole step was profiled, so the trace is not analysed")


def test_an_exception_is_one_short_line() -> None:
    assert raised(ValueError("first\nsecond")) == "ValueError: first"
    assert raised(RuntimeError()) == "RuntimeError"
    long = raised(RuntimeError("x" * 500))
    assert long.endswith("...") and len(long) == len("RuntimeError: ") + RAISED_CHARS
