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


def test_a_slowdown_while_the_first_baseline_is_learnt_is_an_alarm(tmp_path: Path) -> None:
    """A new user's trial: 0.8 ms steps slowed 8x at step 700, inside the first learning
    (its counts paced to 0.8 ms steps: 4,200 values, 28 s at the new pace); 2,000 steps
    gave 'alarms: 0 (no sustained change)'. Now a learning also ends once its values span
    the time its counts were paced to (4 s), and a first baseline's values that end slower
    are split: the slowdown is an alarm from about 0.8 ms to about 6.4, begun at 700."""
    ms = np.exp(steady(2000, seed=21, level_ms=0.8, slow_frac=0.0))
    ms[700:] *= 8.0
    w = _watch(tmp_path, ms.astype(np.float32))
    alarms = [a for a in w.alarms if a.signal == "step_time"]
    assert len(alarms) == 1, [a.line() for a in w.alarms]
    a = alarms[0]
    assert a.start is not None and 695 <= a.start <= 705
    assert 0.7 < a.before < 0.9 and 5.6 < a.after < 7.2


def test_a_loader_slowing_while_its_baseline_is_relearnt_is_a_change(tmp_path: Path
                                                                     ) -> None:
    """A new user's trial: the baseline window's rest came before the loader wait's first
    baseline was learnt, so its relearning had no level before it; the wait went 2 -> 6 ms
    at step 1000, in that relearning, whose baseline took both levels as its spread: 346
    'single slow steps' (every step from 1147), never a change. Now its values are split
    where they end slower: a loader_wait change from about 2 ms to about 6, begun at
    1000, and no spikes."""
    from diagnose.watching.signals import WORSE, Reference
    from diagnose.watching.steptests import StepTests
    from diagnose.watching.store import StepStore

    n = 1500
    ms = np.exp(steady(n, seed=31, level_ms=6.5, slow_frac=0.0))
    wait = np.exp(steady(n, seed=32, level_ms=2.0, slow_frac=0.0))
    ms[1000:] += 4.0
    wait[1000:] += 4.0
    got: list[tuple[str, int, int | None]] = []
    refs = [Reference(WORSE[s], PARAMS[s].min_change, since=20)
            for s in ("step_time", "loader_wait")]
    tests = StepTests(PARAMS, 20, lambda s, c, step: got.append((s, c.start, step)),
                      lambda: False, lambda step: None)
    store, state = StepStore(), {"rest": None}

    def settle() -> None:  # as the watch: the baseline window asked, then relearnt
        tests.settle(True, refs)
        tests.relearn, state["rest"] = True, 0

    t = 0.0
    for i in range(n):
        t += float(ms[i]) / 1e3
        store.add(t, float(ms[i]), float(wait[i]))
        if i % 25 == 0 or i == n - 1:  # tested in batches, as every TEST_S
            tests.test(store, i + 1, False, settle)
            if state["rest"] == 0:  # the window: 8 steps not tested
                tests.rest(i + 1)
                tests.skip(i + 9, i + 11)
                state["rest"] = 1
    waits = [(start, step) for s, start, step in got if s == "loader_wait"]
    assert tests.wait_det is not None and len(waits) == 1, got
    assert waits[0][0] is not None and 995 <= waits[0][0] <= 1005
    assert tests.wait_det.mu is not None and \
        math.exp(tests.wait_det.mu) - tests.wait_off == pytest.approx(6.0, rel=0.1)
    assert [s for s in tests.spikes(final=True) if s[0] == "loader_wait"] == []
