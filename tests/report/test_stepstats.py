"""The step-time comparison's statistics on synthetic per-step times with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diagnose.report.stepstats import _mw_counts, _rank_bound, spread, step_difference


@pytest.mark.parametrize("n,m,k", [(4, 4, 1), (5, 5, 3), (8, 8, 14), (10, 12, 30)])
def test_rank_bound_matches_the_mann_whitney_table(n: int, m: int, k: int) -> None:
    # the tables' two-sided 5% critical U, plus one
    assert _rank_bound(n, m, 0.05) == k


def test_counts_are_all_orderings() -> None:
    assert _mw_counts(3, 4).sum() == math.comb(7, 3)
    assert list(_mw_counts(2, 2)) == [1, 1, 2, 1, 1]
    assert _rank_bound(3, 3, 0.05) is None  # 1/20 > 2.5%: no 95% interval from 3 and 3
    assert _rank_bound(80, 80, 0.05) == pytest.approx(_rank_bound(60, 60, 0.05) * 80 ** 2
                                                      / 60 ** 2, rel=0.05)  # normal approx.


def test_spread() -> None:
    s = spread([10, 20, 30, 40, 50])
    assert (s.n, s.median, s.p25, s.p75) == (5, 30, 20, 40)


def test_same_times_are_within_noise() -> None:
    rng = np.random.default_rng(0)
    a = 20 * np.exp(rng.normal(0, 0.05, 12))
    d = step_difference(a, a[::-1], floor_pct=0)
    assert d.change_pct == pytest.approx(0) and d.lo_pct < 0 < d.hi_pct
    assert d.verdict == "within noise"


def test_a_clear_speedup_is_better_and_a_slowdown_worse() -> None:
    rng = np.random.default_rng(1)
    a = 20 * np.exp(rng.normal(0, 0.03, 10))
    b = a / 1.3 * np.exp(rng.normal(0, 0.03, 10))
    d = step_difference(a, b)
    assert d.verdict == "better" and d.hi_pct < -5
    assert d.lo_pct < (1 / 1.3 - 1) * 100 < d.hi_pct  # covers the true change
    assert step_difference(b, a).verdict == "worse"


def test_interval_covers_the_true_shift_at_its_rate() -> None:
    """Over many synthetic pairs with a true +10% change, the 95% interval misses it in
    about 5% of them (the interval is exact for a shift of iid times)."""
    rng = np.random.default_rng(2)
    miss = 0
    for _ in range(400):
        a = 20 * np.exp(rng.normal(0, 0.1, 7))
        b = 22 * np.exp(rng.normal(0, 0.1, 6))
        d = step_difference(a, b, floor_pct=0)
        miss += not (d.lo_pct <= 10.0 <= d.hi_pct)
    assert 0.01 <= miss / 400 <= 0.09


def test_small_change_inside_the_floor_is_within_noise() -> None:
    a = [20.0, 20.1, 19.9, 20.05, 19.95, 20.02]
    b = [x * 1.03 for x in a]  # +3%, tightly measured: beyond the steps' noise, not the floor
    assert step_difference(a, b, floor_pct=0).verdict == "worse"
    assert step_difference(a, b).verdict == "within noise"


def test_steps_that_differ_inside_the_floor_say_why_within_noise() -> None:
    """An interval that excludes no change but reaches into the band is "within noise"
    with its reason (a +12.7% change read "within noise" with nothing more); one that
    covers no change, or a verdict of better or worse, has no clause."""
    a = [20.0, 20.1, 19.9, 20.05, 19.95, 20.02]
    d = step_difference(a, [x * 1.03 for x in a])
    assert d.lo_pct > 0 and "B's steps are slower" in d.why() and "±5%" in d.why()
    assert "faster" in step_difference(a, [x / 1.03 for x in a]).why()
    assert step_difference(a, a[::-1]).why() == ""
    assert step_difference(a, [x * 1.3 for x in a]).why() == ""  # worse: no clause


def test_too_few_steps_gives_no_interval() -> None:
    d = step_difference([10, 11], [20, 21, 22])
    assert d.lo_pct is None and d.verdict == "within noise" and "too few steps" in d.interval_text()


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        step_difference([], [1.0])
    with pytest.raises(ValueError):
        step_difference([1.0], [1.0], confidence=1.5)
    # non-finite or non-positive times are left out
    d = step_difference([10, float("nan"), -1, 10, 10, 10], [10] * 5)
    assert d.a.n == 4


def test_alternating_steps_are_judged_by_their_mean() -> None:
    # two workers delivering in pairs: 2 ms, 60 ms, ... against steady 2.5 ms steps; the
    # medians' interval reaches across no change, the pace went 15x slower
    a = [2.4, 2.6, 2.5, 2.3, 2.7]
    b = [59.0, 2.3, 64.0, 1.7, 68.0]
    d = step_difference(a, b)
    assert d.lo_pct is not None and d.lo_pct < 0 < d.hi_pct  # the medians say nothing
    assert d.by_mean and d.verdict == "worse"
    assert d.verdict_change_pct == pytest.approx((np.mean(b) / np.mean(a) - 1) * 100)
    assert "by the mean step" in d.why() and d.to_json()["by_mean"] is True
    assert step_difference(b, a).verdict == "better"


def test_one_slow_step_does_not_make_a_verdict_by_the_mean() -> None:
    # a pause in one step of five moves the mean, not the pace: the bootstrap keeps it
    a = [10.0, 10.2, 9.9, 10.1, 10.0]
    b = [10.1, 9.8, 10.0, 50.0, 10.2]
    d = step_difference(a, b)
    assert not d.by_mean and d.verdict == "within noise"


def test_a_mean_far_from_the_median_is_named_beside_it() -> None:
    a = [27.0, 28.0, 40.0, 1.0, 60.0, 27.5, 1.2, 30.0, 29.0, 45.0, 1.1, 26.0]
    b = [1.0, 1.1, 0.9, 1.0, 20.0, 1.0, 1.05, 0.95, 18.0, 1.0, 1.0, 1.1]
    d = step_difference(a, b)
    assert d.verdict == "better" and not d.by_mean
    assert "the mean step" in d.why()  # -96% by the medians, about -84% by the means


def test_a_medians_change_outside_the_interval_gives_the_interval_its_own_point() -> None:
    """Steps of two paces: the medians can move more than the typical step's shift, whose
    interval the line prints; the line then says both, never a point outside its interval."""
    from diagnose.report.compare import StepComparison

    rng = np.random.default_rng(3)
    a = np.r_[np.full(10, 8.0), np.full(9, 12.0)] * np.exp(rng.normal(0, 0.01, 19))
    b = np.r_[np.full(9, 10.0), np.full(10, 13.5)] * np.exp(rng.normal(0, 0.01, 19))
    d = step_difference(a, b)
    pct = (np.median(b) / np.median(a) - 1) * 100
    assert not d.lo_pct <= pct <= d.hi_pct
    c = StepComparison("without the profiler", float(np.median(a)), float(np.median(b)), d)
    line = c.line()
    assert f"{pct:+.1f}% between the medians, the typical step {d.shift_pct:+.1f}%" in line


def test_a_wide_within_noise_says_the_steps_cannot_tell() -> None:
    """A new user's compare read "+202.5% between the medians ... within noise" with
    nothing more (run B's steps in two groups): where the medians differ by 25% or more,
    or the interval is 50 points wide, the verdict says the steps cannot tell, with their
    spreads; a narrow "within noise" says nothing more."""
    a = [15, 16, 30, 15.5, 16.5, 31, 15.2, 16.1]
    b = [15, 48, 16, 47, 15.5, 49, 16.5, 47]
    d = step_difference(a, b)
    assert d.verdict == "within noise" and d.change_pct > 90, d
    assert "cannot tell from 8 and 8 steps: they spread too widely" in d.why()
    quiet = step_difference(a, [x * 1.01 for x in a])
    assert quiet.verdict == "within noise" and quiet.why() == ""
