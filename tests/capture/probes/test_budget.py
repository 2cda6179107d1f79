"""The probes' time budget (diagnose/capture/probes/budget.py) and the capacity timed once
with its rounds' span, on injected timings."""

from __future__ import annotations

import contextvars

import pytest

from diagnose.capture.probes import budget as bmod
from diagnose.capture.probes import capacity, common
from diagnose.capture.probes.budget import (
    PROBES,
    ProbeBudget,
    cpu_wait_share,
    loader_share,
    threads_short,
    unneeded,
)
from tests.capture.probes.conftest import FakeClock


def test_the_budget_is_a_share_of_the_capture_so_far_less_what_probes_spent(
        clock: FakeClock) -> None:
    """Opened at 0, the probes start at 20 s: 5% of it is 1 s, less the 200 ms the fetch
    timings on enter spent: 800 ms. No clock open (the probes called alone): no bound."""
    def at_exit() -> ProbeBudget:
        common.probe_clock()
        clock.t = 20.0
        return ProbeBudget.of_capture({"fetches": 200.0})

    # fresh contexts: a session run earlier in this thread leaves its probe clock open
    b = contextvars.Context().run(at_exit)
    assert b.total_s == pytest.approx(0.8) and b.left_s() == pytest.approx(0.8)
    assert b.record()["budget_ms"] == 800.0
    free = contextvars.Context().run(lambda: ProbeBudget.of_capture(None))
    assert free.total_s == float("inf") and free.record()["budget_ms"] is None


def test_a_probe_stops_its_rounds_at_the_budgets_end_and_the_next_takes_its_least(
        clock: FakeClock) -> None:
    """A budget of 300 ms. The first probe's rounds take 40 ms each, at least 3: it stops
    at the first round past the end (8 rounds, 320 ms) and is recorded as cut. The next
    one still takes its least rounds (3), no more; a timing made again is left out
    silently."""
    b = ProbeBudget(0.3, clock.t)

    def rounds(each: float, least: int = 3) -> int:
        k = 0
        while k < 20 and not (k >= least and common.out_of_time()):
            clock.t += each
            k += 1
        return k

    assert b.run("threads", lambda: rounds(0.04)) == 8
    assert clock.t == pytest.approx(0.32)
    assert b.run("threads_busy", lambda: rounds(0.04)) == 3
    assert b.run("cpu_capacity", lambda: rounds(0.01), again=True) is None
    rec = b.record()
    assert rec["cut"] == ["threads", "threads_busy"]
    assert rec["skipped"] == {}
    assert not common.out_of_time()  # the deadline is the budget's only while it runs


def test_a_probe_that_needs_its_least_rounds_overruns_by_them_only(clock: FakeClock) -> None:
    """30 ms left, a probe of 3 rounds of 40 ms at least: it holds its least values (120 ms,
    90 ms over), and so does the next; a second timing is not made."""
    b = ProbeBudget(0.03, clock.t)

    def three() -> int:
        k = 0
        while not (k >= 3 and common.out_of_time()):
            clock.t += 0.04
            k += 1
        return k

    assert b.run("batches_in_turn", three) == 3
    assert b.run("cpu_capacity", three) == 3
    assert b.run("cpu_capacity", three, again=True) is None
    assert clock.t == pytest.approx(0.24)


def test_no_probe_runs_where_the_loop_never_waited_on_its_loader() -> None:
    """A loop that waited 1% of its steps on its DataLoader, with 2 workers on 4 CPUs,
    fires no input rule: every probe is left out, and why. Waiting 10% of its steps, or 8
    workers on 4 CPUs (IN004), or no clock at all: every probe may be needed."""
    ctx = {"dataloader": {"num_workers": 2}, "cpu_count": 4}
    quiet = {"phase": ["after"] * 4, "ms": [10.0] * 4, "dataloader_ms": [0.1] * 4}
    assert loader_share(quiet) == pytest.approx(0.01)
    why = unneeded(ctx, quiet)
    assert set(why) == set(PROBES) and "1.0% of its steps" in why["threads"]
    b = ProbeBudget(10.0, 0.0, why)
    assert b.run("threads", lambda: 1) is None and b.record()["skipped"]["threads"] == why["threads"]
    assert unneeded(ctx, {**quiet, "dataloader_ms": [1.0] * 4}) == {}
    assert unneeded({**ctx, "dataloader": {"num_workers": 8}}, quiet) == {}
    assert unneeded(ctx, None) == {} and loader_share({"ms": [], "dataloader_ms": []}) is None


def test_the_thread_timing_is_needed_where_torchs_threads_were_short_of_cpus() -> None:
    """torch on 2 threads of 2 CPUs, another process on 1.0 of them, the training thread
    waiting 20% of the unprofiled steps (the first left out, the profiled ones not
    counted): the thread timing serves CF008 though the loop never waited on a loader;
    every other probe stays left out. Others on 0.3 CPUs, a 2% wait, torch on one thread
    or on as many threads as the CPUs left: not needed."""
    ctx = {"dataloader": {"num_workers": 0}, "cpu_count": 2, "torch_num_threads": 2}
    clock = {"phase": ["wait", "active", "wait", "after", "after"],
             "ms": [10.0, 99.0, 10.0, 10.0, 10.0], "cpu_wait_ms": [9.0, 99.0, 2.0, 2.0, 2.0],
             "dataloader_ms": [0.0] * 5}
    assert cpu_wait_share(clock) == pytest.approx(0.2)
    assert threads_short(ctx, clock, 1.0)
    why = unneeded(ctx, clock, 1.0)
    assert "threads" not in why and set(why) == set(PROBES) - {"threads"}
    quiet = {**clock, "cpu_wait_ms": [0.0, 0.0, 0.2, 0.2, 0.2]}
    assert not threads_short(ctx, clock, 0.3) and not threads_short(ctx, quiet, 1.0)
    assert not threads_short({**ctx, "torch_num_threads": 1}, clock, 1.0)
    assert not threads_short({**ctx, "cpu_count": 8}, clock, 1.0)
    assert "threads" in unneeded(ctx, clock, 0.3) and "threads" in unneeded(ctx, clock)
    assert cpu_wait_share(None) is None and cpu_wait_share({"phase": [], "ms": []}) is None
    # a cgroup's quota under the CPUs explains the wait (CF009, no timing): not needed
    assert not threads_short({**ctx, "cpu_quota": 1.0}, clock, 1.0)
    assert threads_short({**ctx, "cpu_quota": 4.0}, clock, 1.0)


def test_the_share_and_the_threshold_sit_under_the_least_input_rule() -> None:
    """The budget is the issue's 5%; a loop is taken as waiting on its loader under the
    least share an input rule fires at (IN003: 3%)."""
    assert bmod.PROBE_SHARE == 0.05 and bmod.LOADER_WAITED < 0.03


def test_the_capacity_is_the_median_round_and_spans_its_quartiles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs, rounds (alone, together): (10, 10), (10, 16), (12, 10), (10, 12),
    (10, 10) ms. The rounds' ratios are 2.0, 1.25, 2.0 (2.4 clipped to the 2 CPUs), 1.667
    and 2.0: the capacity is their median, 2.0, the span their quartiles, 1.667-2.0. Each
    side's least time alone would give 2.0 whatever the rounds; one CPU: nothing to time."""
    got = ([0.010, 0.010, 0.012, 0.010, 0.010], [0.010, 0.016, 0.010, 0.012, 0.010])
    monkeypatch.setattr(capacity, "pooled_rounds", lambda n, work, rounds: got)
    assert capacity.time_cpu_capacity_span(2) == (2.0, 1.667, 2.0)
    assert capacity.time_cpu_capacity(2) == 2.0
    got = ([0.010] * 3, [0.016, 0.016, 0.012])  # SMT siblings, one round less shared
    assert capacity.time_cpu_capacity_span(2) == (1.25, 1.25, 1.458)
    assert capacity.time_cpu_capacity_span(1) is None


def test_the_pooled_rounds_fork_once_and_stop_at_the_budget(clock: FakeClock) -> None:
    """Two forked children run a work that reports 10 ms every time: each round gives the
    alone side and the mean of the two at once. Past the budget's end only the least
    rounds run; a child whose work fails ends the timing (None); no child outlives it."""
    import psutil

    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with common.until(-1.0):
        got = capacity.pooled_rounds(2, lambda: 0.010, 3)
    assert got == ([0.010] * 3, [0.010] * 3)

    def fails() -> float:
        raise RuntimeError("no")

    with common.until(-1.0):
        assert capacity.pooled_rounds(2, fails, 3) is None
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= before


def test_the_capacity_rounds_end_at_the_budget(monkeypatch: pytest.MonkeyPatch,
                                               clock: FakeClock) -> None:
    """Rounds past the least two stop once the budget's end has passed, settled or not."""
    monkeypatch.setattr(capacity, "CAPACITY_S", 10.0)
    times = iter([0.010, 0.020, 0.011, 0.015] * 5)

    def timed(k: int, work: object) -> float:
        clock.t += 0.05
        return next(times)

    monkeypatch.setattr(capacity, "concurrent_s", timed)
    with common.until(0.15):
        got = capacity.capacity_rounds(2, lambda: 0.0, 2)
    assert got is not None and len(got[0]) == 2  # 4 timings, 200 ms: past the end


def test_median_noise_is_the_standard_error_of_the_median() -> None:
    """[10, 11, 9, 10.5]: median 10.25, absolute deviations 0.25, 0.75, 1.25, 0.25, MAD
    0.5: 1.4826 x sqrt(pi / 2) x 0.5 / 2 / 10.25 = 0.0453. Three rounds, one disturbed
    ([5, 5.1, 20]): the median 5.1 stands, MAD 0.1, noise 0.021 (the quartiles would have
    made it 0.79); under 3 values the noise is not known."""
    assert common.median_noise([10.0, 11.0, 9.0, 10.5]) == pytest.approx(0.0453, abs=1e-4)
    assert common.median_noise([5.0, 5.1, 20.0]) == pytest.approx(0.0210, abs=1e-4)
    assert common.median_noise([10.0, 10.0]) is None


def test_a_probe_never_gives_up_its_least_rounds_under_the_budget(clock: FakeClock) -> None:
    """200 ms left; a probe whose warm-up round took 100 ms needs 3 rounds more (300 ms):
    under the budget it takes them all the same (a skipped probe's assumption held worse
    than its least rounds); only outside a budget's run does cannot_afford answer."""
    def probe() -> int | None:
        clock.t += 0.1  # the warm-up round
        return None if common.cannot_afford(0.1, 3) else 3

    b = ProbeBudget(0.3, clock.t)
    clock.t = 0.1
    assert b.run("threads", probe) == 3
    assert b.record()["skipped"] == {}
    with common.until(clock.t + 0.2):  # a deadline without the least rounds' promise
        assert common.cannot_afford(0.1, 3)
    assert not common.cannot_afford(10.0, 10)  # no budget: never
