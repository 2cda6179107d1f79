"""The probes' shared clock of their own time and the rule that ends their rounds."""

from __future__ import annotations

import contextvars

import pytest

from diagnose.capture.probes import common
from diagnose.capture.probes.common import probe_clock, settled, timed


def test_settled_needs_three_values_and_a_tight_median() -> None:
    """0.93 x IQR / sqrt(n) against 2% of the median: [10, 10, 10] is settled at once;
    [10, 11, 9, 10.5] has IQR 1.125 (inclusive quartiles 9.75, 10.875), 0.93 x 1.125 / 2 =
    0.52 > 0.2: not; two values never are; a series of zeros never is."""
    assert settled([10.0, 10.0, 10.0])
    assert not settled([10.0, 11.0, 9.0, 10.5])
    assert not settled([10.0, 10.0])
    assert not settled([0.0, 0.0, 0.0])
    assert settled([10.0, 10.0, 10.0], [5.0, 5.0, 5.1, 5.0])
    assert not settled([10.0, 10.0, 10.0], [5.0, 9.0, 1.0])


def test_timed_probes_add_their_own_time_to_the_open_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call's time (a stubbed clock: 5 ms, then 7 ms) is summed under the probe's name,
    in the clock opened in this context (its opening read first); with none open nothing
    is kept."""
    ticks = iter([-1.0, 0.0, 0.005, 1.0, 1.007, 2.0, 2.001])
    monkeypatch.setattr(common, "_CLOCK", lambda: next(ticks))

    @timed("probe")
    def probe(x: int) -> int:
        return x + 1

    def run() -> dict[str, float]:
        ms = probe_clock()
        assert probe(1) == 2 and probe(2) == 3
        return ms

    assert contextvars.copy_context().run(run) == {"probe": 12.0}
    assert contextvars.copy_context().run(lambda: probe(0)) == 1  # no clock: nothing kept


def test_cpu_wanted_counts_the_running_slice_and_the_queued_wait(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread's own CPU clock (exact, the running slice included) plus schedstat's run
    queue wait; schedstat's run time, which the kernel updates for a running thread only at
    a tick, is not read (it read 0.0 for a 2 ms batch). Without the file: the CPU clock."""
    stat = tmp_path / "schedstat"
    stat.write_text("123000000 3000000 7\n")  # a stale run time, 3 ms queued
    monkeypatch.setattr(common, "SCHEDSTAT", stat)
    clock = iter([1.0, 1.002])
    monkeypatch.setattr(common.time, "thread_time", lambda: next(clock))
    a = common.cpu_wanted_s()
    stat.write_text("123000000 4000000 8\n")  # the run time not moved; 1 ms more queued
    b = common.cpu_wanted_s()
    assert a == pytest.approx(1.003) and b - a == pytest.approx(0.003)
    monkeypatch.setattr(common, "SCHEDSTAT", tmp_path / "absent")
    monkeypatch.setattr(common.time, "thread_time", lambda: 5.0)
    assert common.cpu_wanted_s() == 5.0
