"""Which changes are alarms: a change that leaves a signal worse than its reference level
by ``min_change``; a change for the better is a shift, and it becomes the reference only
once it held ``hold`` values."""

from __future__ import annotations

import math

from diagnose.watching.signals import Reference

L = math.log


def test_a_slowdown_past_min_change_is_an_alarm_and_a_speedup_is_not() -> None:
    r = Reference(1, L(1.10))
    assert not r.judge(L(2.0), L(1.5), 100)  # faster: a shift
    assert not r.judge(L(1.5), L(2.1), 150)  # back to about the reference: no alarm
    assert r.judge(L(2.1), L(2.6), 300)  # 2.6 ms against the reference's 2.0 / 2.1: alarm
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
