"""Which changes are alarms: a change that leaves a signal worse than its reference level
by ``min_change``; a change for the better is a shift, and it becomes the reference only
once it held ``hold`` values (as long as a slow start had lasted, early in a run)."""

from __future__ import annotations

import math

from diagnose.watching.detector import Change
from diagnose.watching.signals import Reference

L = math.log


def test_a_slowdown_past_min_change_is_an_alarm_and_a_speedup_is_not() -> None:
    r = Reference(1, L(1.10))
    assert not r.judge(L(2.0), L(1.5), 1000)  # faster: a shift
    assert not r.judge(L(1.5), L(2.1), 1050)  # back to about the reference: no alarm
    assert r.judge(L(2.1), L(2.6), 1200)  # 2.6 ms against the reference's 2.0 / 2.1: alarm
    assert r.level == L(2.6)


def test_small_slowdowns_are_no_alarm_until_they_add_up() -> None:
    r = Reference(1, L(1.10))
    assert not r.judge(L(2.0), L(2.1), 100)
    assert r.level == L(2.0)
    assert r.judge(L(2.1), L(2.25), 400)  # 12.5% slower than the reference, in two steps


def test_a_faster_pace_that_held_becomes_the_reference() -> None:
    r = Reference(1, L(1.10), hold=1000)
    assert not r.judge(L(2.0), L(1.5), 100)
    assert r.judge(L(1.5), L(2.0), 1200)  # 1.5 ms held 1,100 values: back to 2.0 is slower


def test_lower_is_worse_for_utilisation() -> None:
    r = Reference(-1, 0.10)
    assert not r.judge(0.80, 0.95, 10)
    assert r.judge(0.95, 0.60, 20)


def test_a_change_just_past_the_floor_must_clear_its_estimates_noise() -> None:
    """11% slower on a spread of 8%: the new level's median of 16 could be 10% by chance."""
    assert Reference(1, L(1.10), n=16).judge(L(2.0), L(2.22), 100, sigma=0.0)
    assert not Reference(1, L(1.10), n=16).judge(L(2.0), L(2.22), 100, sigma=0.08)
    assert Reference(1, L(1.10), n=16).judge(L(2.0), L(2.4), 100, sigma=0.08)  # 20%: yes


def test_a_slow_start_is_no_reference_once_the_faster_pace_held_as_long() -> None:
    """17 ms for the run's first 230 values after the warm-up (a cold cache), 7 ms for 310,
    then 15 ms: the run was faster for as long as its start had lasted, so the faster pace
    is the reference and the 2x slowdown from it is an alarm, read from 7 ms."""
    r = Reference(1, L(1.10), hold=1000, since=20)
    assert not r.judge(L(17.0), L(7.0), 266, start=250)
    assert r.judge(L(7.0), L(15.0), 576, start=560)
    assert r.judged_from == L(7.0)


def test_a_slow_start_left_in_two_steps() -> None:
    """17 ms, 12 ms from 250, 7 ms from 400, then 13 ms from 600: faster than the start for
    350 values (it lasted 230): measured from 7 ms, an alarm."""
    r = Reference(1, L(1.10), hold=1000, since=20)
    assert not r.judge(L(17.0), L(12.0), 266, start=250)
    assert not r.judge(L(12.0), L(7.0), 416, start=400)
    assert r.judge(L(7.0), L(13.0), 616, start=600)


def test_a_short_early_lull_is_no_reference() -> None:
    """10 ms for 150 values, 8.5 ms for 100, then 10 ms again: faster for less time than
    the start had lasted: back to the reference, no alarm. The sampled signals (no
    ``since``) have no slow start: a lull needs the whole hold."""
    r = Reference(1, L(1.10), hold=1000, since=20)
    assert not r.judge(L(10.0), L(8.5), 186, start=170)
    assert not r.judge(L(8.5), L(10.1), 286, start=270)
    e = Reference(1, L(1.10), hold=1000)
    assert not e.judge(L(10.0), L(8.5), 12, start=8)
    assert not e.judge(L(8.5), L(10.0), 30, start=26)


def test_a_short_faster_stretch_stays_a_lull_and_the_alarm_reads_from_the_reference() -> None:
    """8 ms for 305 values, 25 faster ones at 2.9 ms, then 13 ms: the stretch was shorter
    than the start had lasted, so the slowdown is judged, and shown, from 8 ms (x1.6), not
    from the stretch (x4.5)."""
    from diagnose.watching.detector import Change

    r = Reference(1, L(1.10), hold=1000, since=20)
    assert not r.judge(L(8.0), L(2.9), 341, start=325)
    assert r.judge(L(2.9), L(13.0), 366, start=350)
    c = r.measured_from(Change(366, 350, L(2.9), L(13.0), 0.03))
    assert (c.before, c.after) == (L(8.0), L(13.0))


def test_a_lull_after_a_long_established_pace_must_hold_the_whole_hold() -> None:
    r = Reference(1, L(1.10), hold=1000, since=20)
    assert not r.judge(L(2.0), L(1.5), 5016, start=5000)  # a neighbour left the CPUs
    assert not r.judge(L(1.5), L(2.05), 5916, start=5900)  # 900 values: back, no alarm


def test_after_the_neighbours_leave_the_jobs_own_change_is_an_alarm() -> None:
    """A new user's watch: a neighbour's CPU hog raised the step to 19.4 ms (an alarm the
    machine explained as its neighbours'); it left, the pace went back to 12 ms (a shift),
    and 100 steps later the job's own samples made it 17 ms: judged against 19.4 ms, that
    was 'back to about the reference', called only 156 steps later. With the alarm the
    neighbours', the reference is the job's own 12 ms again when the pace leaves it."""
    for told_before_it_left in (True, False):
        r = Reference(1, L(1.10), hold=1000)
        assert r.judge(L(12.0), L(19.4), 167)  # the neighbours' alarm
        if told_before_it_left:
            r.neighbours()
        assert not r.judge(L(19.4), L(12.0), 330)  # they left: a shift
        if not told_before_it_left:
            r.neighbours()  # the machine's line came after the shift
        assert r.level == L(12.0)
        assert r.judge(L(12.0), L(17.0), 425)  # the job's own change: an alarm
    plain = Reference(1, L(1.10), hold=1000)  # not the neighbours': as before, held
    assert plain.judge(L(12.0), L(19.4), 167) and not plain.judge(L(19.4), L(12.0), 330)
    assert not plain.judge(L(12.0), L(17.0), 425)


def test_a_passed_change_gives_the_reference_back_at_once() -> None:
    """A re-check of a new user's watch: a bump at step 718 (15.8 -> 18.0 ms, an alarm
    whose window found the pace back) stayed the reference, and the job's own x1.69 at
    step 1,616 read 'x1.48' from 18.0 ms: no change for the better was ever called (the
    bump was small). Passed, the reference is the level before the bump at once."""
    r = Reference(1, L(1.10), hold=1000)
    assert r.judge(L(15.8), L(18.0), 718)  # the bump's alarm
    r.neighbours(passed=True)  # its window found the pace back
    assert r.level == L(15.8)
    assert r.measured_from(Change(1616, 1568, L(15.8), L(26.6), 0.01)).before == L(15.8)
    assert r.judge(L(15.8), L(26.6), 1616)
