"""The loader's live workers left to fall idle before the probes
(diagnose/capture/probes/settle.py): on injected CPU times, and on real processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from diagnose.capture.probes import common, settle
from tests.capture.probes.conftest import FakeClock


@pytest.fixture
def slept(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The probes' clock held still, moved by each sleep."""

    def sleep(s: float) -> None:
        clock.t += s

    monkeypatch.setattr(settle.time, "sleep", sleep)
    return clock


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield p
    p.kill()
    p.wait()


def test_the_wait_ends_once_the_workers_use_no_cpu(monkeypatch: pytest.MonkeyPatch,
                                                   slept: FakeClock, sleeper) -> None:
    """Workers busy for three polls (20 ms of CPU each), then 1 ms over a poll (under a
    quarter of one CPU's 20 ms): the wait ends after the fourth poll, 80 ms."""
    used = iter([0.0, 0.02, 0.04, 0.06, 0.061, 0.062])
    monkeypatch.setattr(settle, "_cpu_s", lambda procs: next(used))
    assert settle.wait_workers_idle([sleeper.pid]) == pytest.approx(0.08)


def test_the_wait_stops_at_its_cap_and_at_the_budget(monkeypatch: pytest.MonkeyPatch,
                                                    slept: FakeClock, sleeper) -> None:
    """Workers that never stop: the wait ends at SETTLE_MAX_S; with the probes' budget
    ending at 100 ms, there."""
    busy = iter(0.02 * k for k in range(1000))
    monkeypatch.setattr(settle, "_cpu_s", lambda procs: next(busy))
    assert settle.wait_workers_idle([sleeper.pid]) == pytest.approx(settle.SETTLE_MAX_S)
    slept.t = 0.0
    with common.until(0.1):
        assert settle.wait_workers_idle([sleeper.pid]) == pytest.approx(0.1)


def test_a_sleeping_worker_is_idle_at_once_and_a_gone_one_is_not_waited_for(
        sleeper) -> None:
    """A real process asleep uses no CPU: one poll; a pid that is gone: nothing to wait
    for (None)."""
    waited = settle.wait_workers_idle([sleeper.pid])
    assert waited is not None and waited < settle.SETTLE_MAX_S
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert settle.wait_workers_idle([gone.pid]) is None
