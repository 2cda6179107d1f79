"""The watch tests its steps in batches (diagnose.watching.steptests): on injected step
times its alarms are the ones a detector fed step by step calls, at the same steps."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from diagnose.watching.detector import Detector
from diagnose.watching.signals import HOLD_S, PARAMS, paced
from diagnose.watching.watcher import Watch
from tests.watching.noise import steady


def test_batched_tests_alarm_at_the_steps_a_step_by_step_detector_calls(tmp_path: Path) -> None:
    """Steps of ~1 ms, many tested together, with the detector's counts paced to them and
    a change held HOLD_S on the steps' clock: the alarms are those a detector with those
    counts and that clock calls step by step, at the same steps, and the 30% slowdown's
    comes within two of its holds."""
    ms = np.exp(steady(30000, seed=4, level_ms=1.0, slow_frac=0.0)).astype(np.float32)
    ms[15000:] *= np.float32(1.3)  # the loop slows by 30% at step 15000
    w = Watch(None, None, out_dir=tmp_path, baseline=False, max_captures=0, sample_hz=0,
              print_summary=False, progress_s=None, warmup_steps=20)
    with w:
        now = w._perf0
        for v in ms.tolist():  # steps of ~1 ms: many are tested together
            now += v / 1e3
            w._on_step(now, v, 0.0)
    tests = w._tests
    assert tests.scale == pytest.approx(HOLD_S / (16 * 1e-3), rel=0.05)
    # min_len stays a count; the baseline counts are paced to the level after the slowdown
    assert tests.det.p.min_len == 16 and tests.det.p.learn < math.ceil(64 * tests.scale)
    ends = np.cumsum(ms.astype(np.float64)) / 1e3
    ref, want = Detector(paced(PARAMS["step_time"], tests.step_s or 0.0)[0], hold_s=HOLD_S,
                         time_of=lambda i: float(ends[i] - ends[0]) if i >= 0 else 0.0,
                         pace_of=tests._step_pace), []
    for i in range(20, len(ms)):
        c = ref.update(math.log(float(ms[i])), i)
        if c is not None:
            want.append((i, c.up))
    got = [(a.step, a.after > a.before) for a in list(w.alarms) + list(w.shifts)]
    assert sorted(got) == sorted(want)
    alarms = [a for a in w.alarms if a.signal == "step_time"]
    assert [a.step for a in alarms if a.step < 15000] == []
    # within two holds of the change: 2 s of its own 1.3 ms steps
    assert alarms and 15000 <= alarms[0].step <= 15000 + 2 * HOLD_S / 1.3e-3


def test_a_fast_loop_slowed_35x_is_an_alarm_within_its_hold(tmp_path: Path) -> None:
    """A new user's watch: 0.45 ms steps for 12 s, then the loader slowed every step to
    17.7 ms for 15 s (900 steps), and no alarm came: the hold was counted in steps of the
    old pace (2,200 of them). Held in time, the slowdown is an alarm within about two
    seconds of its own steps, from about 0.45 ms to about 17.7; after it, the detector
    learns the new level at the new pace (seconds, not minutes), so that the pace's
    return is seen too (a change for the better: a shift, not an alarm)."""
    fast = np.exp(steady(26000, seed=12, level_ms=0.45, slow_frac=0.0))
    slow = np.exp(steady(900, seed=13, level_ms=17.7, slow_frac=0.0))
    back = np.exp(steady(9000, seed=14, level_ms=0.45, slow_frac=0.0))
    w = _watch(tmp_path, np.r_[fast, slow, back].astype(np.float32))
    alarms = [a for a in w.alarms if a.signal == "step_time"]
    assert len(alarms) == 1, [a.line() for a in w.alarms]
    assert 26000 <= alarms[0].step <= 26000 + 2 * HOLD_S / 17.7e-3
    assert 0.4 < alarms[0].before < 0.5 and 16 < alarms[0].after < 19.5
    assert any(s.step > 26900 and s.after < 1.0 for s in w.shifts), \
        [s.line() for s in w.shifts]


def _watch(tmp_path: Path, ms: np.ndarray, params: bool = False) -> Watch:
    """The steps ``ms`` watched (``params``: the step time's detector parameters given, so
    its counts are kept as they are, not paced: the tests of the reference below count
    in steps)."""
    w = Watch(None, None, out_dir=tmp_path, baseline=False, max_captures=0, sample_hz=0,
              print_summary=False, progress_s=None, warmup_steps=20,
              params={"step_time": PARAMS["step_time"]} if params else None)
    with w:
        now = w._perf0
        for v in ms.tolist():
            now += v / 1e3
            w._on_step(now, v, 0.0)
    return w


def test_short_bursts_of_a_fast_loop_are_no_alarm(tmp_path: Path) -> None:
    """Steps of ~0.4 ms with bursts of 60 steps at 1.8x every 1,500 (a shared host's other
    processes, for 25-45 ms at a time): paced, no alarm; with the detector's counts as
    given (16 steps hold a change: 6 ms), the bursts are alarms."""
    ms = np.exp(steady(40000, seed=11, level_ms=0.4, slow_frac=0.0))
    for at in range(3000, 40000, 1500):
        ms[at:at + 60] *= 1.8
    paced = _watch(tmp_path / "paced", ms.astype(np.float32))
    assert [a.line() for a in paced.alarms] == []
    raw = _watch(tmp_path / "raw", ms.astype(np.float32), params=True)
    assert len(raw.alarms) >= 3


def test_a_slowdown_after_a_slow_start_is_an_alarm_from_the_pace_kept(tmp_path: Path) -> None:
    """17 ms for 250 steps, 7 ms for 250, then 15 ms (a run's slow start, then a real 2x
    slowdown): an alarm near step 500, from about 7 ms to about 15."""
    ms = np.exp(steady(1000, seed=7, level_ms=1.0, slow_frac=0.0))
    ms *= np.r_[np.full(250, 17.0), np.full(250, 7.0), np.full(500, 15.0)]
    w = _watch(tmp_path, ms.astype(np.float32), params=True)
    alarms = [a for a in w.alarms if a.signal == "step_time"]
    assert len(alarms) == 1 and 500 <= alarms[0].step <= 540
    assert 6.5 < alarms[0].before < 7.5 and 14 < alarms[0].after < 16


def test_an_alarm_after_a_short_faster_stretch_reads_from_the_reference(tmp_path: Path) -> None:
    """8 ms, 25 steps at 3 ms from step 325, then 13 ms from 350: one alarm, 8 -> 13 ms."""
    ms = np.exp(steady(700, seed=8, level_ms=1.0, slow_frac=0.0))
    ms *= np.r_[np.full(325, 8.0), np.full(25, 3.0), np.full(350, 13.0)]
    w = _watch(tmp_path, ms.astype(np.float32), params=True)
    alarms = [a for a in w.alarms if a.signal == "step_time"]
    assert len(alarms) == 1
    assert 7.5 < alarms[0].before < 8.5 and 12 < alarms[0].after < 14


def test_a_slow_start_left_in_two_steps_then_a_slowdown(tmp_path: Path) -> None:
    """17 ms x250, 12 ms x150, 7 ms x200, then 13 ms: one alarm, from about 7 ms."""
    ms = np.exp(steady(1000, seed=9, level_ms=1.0, slow_frac=0.0))
    ms *= np.r_[np.full(250, 17.0), np.full(150, 12.0), np.full(200, 7.0), np.full(400, 13.0)]
    alarms = [a for a in _watch(tmp_path, ms.astype(np.float32), params=True).alarms
              if a.signal == "step_time"]
    assert len(alarms) == 1 and 6.5 < alarms[0].before < 7.5 and 12 < alarms[0].after < 14


def test_a_short_early_lull_then_the_runs_own_pace_is_no_alarm(tmp_path: Path) -> None:
    """10 ms x150, 8.5 ms x100, then 10 ms again: the pace the run kept, no alarm."""
    ms = np.exp(steady(800, seed=10, level_ms=1.0, slow_frac=0.0))
    ms *= np.r_[np.full(150, 10.0), np.full(100, 8.5), np.full(550, 10.0)]
    w = _watch(tmp_path, ms.astype(np.float32), params=True)
    assert [a for a in w.alarms if a.signal == "step_time"] == []
