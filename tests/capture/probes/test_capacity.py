"""The CPUs' capacity (diagnose/capture/probes/capacity.py): forked processes alone
and one per CPU at once."""

from __future__ import annotations

import pytest

from diagnose.capture.probes.capacity import time_cpu_capacity


def test_cpu_capacity_is_between_one_cpu_and_all_of_them():
    """Forked processes run a Python loop alone and one per CPU at once: the ratio is
    clipped to [1, CPUs]; one CPU has nothing to measure."""
    assert time_cpu_capacity(1) is None
    cap = time_cpu_capacity(2, loops=100_000)
    assert cap is not None and 1.0 <= cap <= 2.0


def test_cpu_capacity_takes_each_sides_least_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs that give both: one process alone 10 ms, two at once 10 ms, but a busy
    moment slowed a different side in each round. Each side's least time gives the two
    CPUs; the median of the rounds' own ratios (2, 1.25, 1.33) gave 1.33. Two SMT
    siblings (two at once always 16 ms) stay at 1.25."""
    import diagnose.capture.probes.capacity as th

    def fake(times):
        it = iter(times)
        return lambda k, work: next(it)

    busy = [0.010, 0.010, 0.010, 0.016, 0.015, 0.015]  # (one, many) by round
    monkeypatch.setattr(th, "CAPACITY_S", 0.0)  # exactly the rounds asked for
    monkeypatch.setattr(th, "concurrent_s", fake(busy))
    assert th.work_capacity(2, lambda: 0.0, 3) == (0.010, 2.0)
    monkeypatch.setattr(th, "concurrent_s", fake([0.010, 0.016] * 3))
    assert th.work_capacity(2, lambda: 0.0, 3) == (0.010, 1.25)


def test_the_work_alone_is_its_median_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch alone is its typical (median) round, as the loop's batches are typical
    times; the capacity still comes from each side's least time (a busy moment only adds
    to a side). Alone 10, 14 and 12 ms, two at once 10 ms each time: 12 ms, 2 CPUs."""
    import diagnose.capture.probes.capacity as th

    it = iter([0.010, 0.010, 0.014, 0.010, 0.012, 0.010])  # (one, many) by round
    monkeypatch.setattr(th, "CAPACITY_S", 0.0)
    monkeypatch.setattr(th, "concurrent_s", lambda k, work: next(it))
    assert th.work_capacity(2, lambda: 0.0, 3) == (0.012, 2.0)


@pytest.mark.parametrize("pooled", [False, True])
def test_a_child_that_dies_fails_the_timing_instead_of_hanging(
        monkeypatch: pytest.MonkeyPatch, pooled: bool) -> None:
    """A forked child killed in its work (the job's dataset crashing in a forked process,
    the OOM killer) never writes its result while its siblings keep the pipe open: the
    timing gives up after RESULT_WAIT_S with a TimeoutError (the probe fails alone), and
    no child is left behind."""
    import os
    import signal
    import time

    import diagnose.capture.probes.capacity as cap

    monkeypatch.setattr(cap, "RESULT_WAIT_S", 0.5)
    parent = os.getpid()

    def dies() -> float:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return 0.01

    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        if pooled:
            cap.pooled_rounds(2, dies, 3)
        else:
            cap.concurrent_s(2, dies)
    assert time.perf_counter() - t0 < 10.0
    with pytest.raises(ChildProcessError):  # every child reaped
        os.waitpid(-1, os.WNOHANG)
