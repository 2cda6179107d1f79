"""The watch's capture policy (diagnose.watching.captures.Captures.want): one capture per
``interval_s`` unless a later alarm's change is BIGGER times the last capture's."""

from __future__ import annotations

from diagnose.watching.alarm import Alarm
from diagnose.watching.captures import Captures


def _captures() -> Captures:
    return Captures(steps=3, max_captures=5, interval_s=600.0, rank=None, worker_name=None,
                    context=lambda *a, **k: {}, before=lambda *a, **k: [], record=None)


def _taken(c: Captures) -> None:
    """The capture asked for ran (its window started, was analysed and ended)."""
    c._last = c._queue.pop(0)


def _alarm(step: int, before: float, after: float) -> Alarm:
    return Alarm(step=step, signal="step_time", kind="change", before=before, after=after,
                 unit="ms", t=0.0, start=step - 10)


def test_a_blip_does_not_leave_a_real_slowdown_unprofiled() -> None:
    """A new user's watch: a x1.41 noise alarm at step 314 took the capture, and the x10.4
    slowdown at step 1015, a second later, got 'at most one every 600 s'."""
    c = _captures()
    blip, real = _alarm(314, 0.50, 0.705), _alarm(1015, 0.476, 4.967)
    c.want(blip)
    _taken(c)
    c.want(real)
    assert real.capture_why == "pending" and [j.alarms for j in c._queue] == [[real]]


def test_a_change_of_the_same_size_waits_for_the_interval() -> None:
    c = _captures()
    first, second = _alarm(300, 0.5, 1.0), _alarm(2000, 1.0, 2.2)
    c.want(first)
    _taken(c)
    c.want(second)
    assert second.capture_why is not None and "at most one every 600 s" in second.capture_why


def test_a_capture_of_the_neighbours_change_does_not_space_the_next() -> None:
    """A new user's watch: an alarm the machine explained as 'the machine's neighbours, not
    the job' took the run's capture for 600 s, and the job's own 3x heavier samples, a
    change of about the same size, got none. Released, it spaces no capture; an alarm it
    does not explain still does; both count within max_captures."""
    c = _captures()
    noise, real, later = _alarm(167, 15.0, 22.0), _alarm(425, 16.0, 24.0), _alarm(900, 24.0, 36.0)
    c.want(noise)
    _taken(c)
    noise.neighbours = True
    c.release(noise)
    c.want(real)
    assert real.capture_why == "pending" and [j.alarms for j in c._queue] == [[real]]
    _taken(c)
    c.want(later)  # within 600 s of the job's own change's capture
    assert later.capture_why is not None and "at most one every 600 s" in later.capture_why
    assert c._taken == 2


def test_a_capture_that_found_the_change_passed_does_not_space_the_next(monkeypatch) -> None:
    """A new user's watch: a brief bump's alarm (step 228) took the capture, whose window
    found the pace back ('passed:'); the batch doubling 25 s later got 'at most one every
    600 s'. Passed, its alarm is handed to the watch (its reference goes back) and its
    capture spaces no other; an alarm whose window saw the change still does."""
    import diagnose.watching.captures as caps

    c = _captures()
    c.baseline = object()
    verdict = ["passed: the step time was back to the baseline's"]
    monkeypatch.setattr(caps, "what_changed", lambda base, rep, alarms: (list(verdict), None))
    bump, real, later = _alarm(228, 16.0, 25.7), _alarm(1752, 16.0, 37.0), _alarm(3000, 37, 60)
    c.want(bump)
    job = c._queue[0]
    _taken(c)
    c._finish(job, object(), None)
    assert bump.passed and c.take_passed() == [bump] and c.take_passed() == []
    c.want(real)
    assert real.capture_why == "pending"
    job = c._queue[0]
    _taken(c)
    verdict[0] = "step time 16 -> 37 ms: worse"
    c._finish(job, object(), None)
    assert not real.passed and c.take_passed() == []
    c.want(later)
    assert later.capture_why is not None and "at most one every 600 s" in later.capture_why


def test_the_baseline_window_waits_while_a_change_is_under_way() -> None:
    """A new user's trial: the step time's baseline was learnt as the pace slowed, and the
    baseline window profiled the slow pace; the alarm compared its window with it
    (understated). Now the baseline window waits while a change is under way, and an
    alarm's window asked meanwhile goes first."""
    under_way = [True]
    c = Captures(steps=3, max_captures=5, interval_s=600.0, rank=None, worker_name=None,
                 context=lambda *a, **k: {}, before=lambda *a, **k: [], record=None,
                 defer=lambda: under_way[0])
    c.ask_baseline()
    assert not c.due
    c.want(_alarm(800, 5.9, 11.4))
    assert c.due and not c._queue[0].baseline and c._queue[1].baseline
    under_way[0] = False
    c._queue.pop(0)
    assert c.due and c._queue[0].baseline
