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
    assert b.run("worker_send", lambda: rounds(0.04)) == 3
    assert b.run("cpu_capacity", lambda: rounds(0.01), again=True) is None
    rec = b.record()
    assert rec["cut"] == ["threads", "worker_send"]
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


def _clock(waits: list[float], ms: float = 10.0, starts: list[int] | None = None
           ) -> dict[str, list]:
    """A step clock of unprofiled steps (``after``), the run's first one left out by the
    metrics: each step ``ms`` long (a step that began an epoch: ``starts``), waiting
    ``waits`` ms on its loader."""
    out: dict[str, list] = {"phase": ["wait"] + ["after"] * len(waits),
                            "ms": [ms] + [ms] * len(waits), "dataloader_ms": [0.0, *waits]}
    if starts is not None:
        out["loader_starts"] = [0, *starts]
    return out


def test_no_probe_runs_where_no_finding_it_serves_can_be_a_warning() -> None:
    """A loop that waited 1% of its steps on its DataLoader, with 2 workers on 4 CPUs:
    every probe is left out, and why. Waiting 10% of its steps, or no clock at all: every
    probe may be needed; 8 workers on 4 CPUs (IN004): all but the batched fetch's."""
    ctx = {"dataloader": {"num_workers": 2}, "cpu_count": 4}
    quiet = _clock([0.1] * 8)
    why = unneeded(ctx, quiet)
    assert set(why) == set(PROBES) and "1.0% of its steps" in why["threads"]
    b = ProbeBudget(10.0, 0.0, why)
    assert b.run("threads", lambda: 1) is None and b.record()["skipped"]["threads"] == why["threads"]
    assert unneeded(ctx, _clock([1.0] * 8)) == {}
    # IN004: every probe but the batched fetch's (IN001's, IN002's)
    assert set(unneeded({**ctx, "dataloader": {"num_workers": 8}}, quiet)) == {
        "fetches", "work_after_fetch"}
    assert unneeded(ctx, None) == {}
    assert unneeded(ctx, {"phase": [], "ms": []}) == {}  # a clock of no steps cannot tell


def test_the_gate_reads_the_steady_steps_a_burst_and_an_epochs_start() -> None:
    """Steps that began no epoch waiting 4%, with the one that began an epoch 5.8% of all:
    left out (IN001 reads the former; IN003 the latter only with a burst). A wait 20x the others' in 8 steps with workers (IN003's burst, 7% of the steps): needed;
    the same 7% spread evenly: left out. Workers that start again each epoch of 4 batches,
    the step that began one 60 ms longer (15 ms a step, 60% of a 10 ms step: IN005): the
    workers' timings needed; persistent workers: left out."""
    ctx = {"dataloader": {"num_workers": 2, "len": 4, "persistent_workers": False},
           "cpu_count": 4}
    steady = _clock([0.4] * 8 + [2.0], starts=[0] * 8 + [1])
    assert bmod.loader_metrics(ctx, steady)["dataloader_wait_steady_share"] == pytest.approx(0.04)
    assert "4.0% of the steps that began no epoch" in unneeded(ctx, steady)["threads"]
    burst = _clock([0.1] * 7 + [4.9], starts=[0] * 8)
    assert set(unneeded(ctx, burst)) == {"threads", "fork_copy", "fetches",
                                         "work_after_fetch"}  # IN003's alone
    even = _clock([0.7] * 8, starts=[0] * 8)
    assert set(unneeded(ctx, even)) == set(PROBES)
    restart = _clock([0.1] * 8 + [0.1], starts=[0] * 8 + [1])
    restart["ms"][-1] = 70.0
    assert "worker_batches" not in unneeded(ctx, restart, loader_starts=[{"workers": 2}])
    kept = {**ctx, "dataloader": {**ctx["dataloader"], "persistent_workers": True}}
    assert set(unneeded(kept, restart, loader_starts=[{"workers": 2}])) == set(PROBES)


def test_the_gate_sits_at_the_rules_own_warning_thresholds() -> None:
    """The gate's shares are where the rules whose fixes read the probes may first be
    graded warning: just under them (every other input at its worst: the window all
    waiting, the host saturated) no such rule's warning holds and the gate names none; at
    each one that rule's does and the gate names it."""
    from diagnose.rules.engine import load_rules

    rules = {r.id: r for r in load_rules() if r.id in bmod.INPUT_RULES}
    worst = {"dataloader_share": 0.99, "host_cpu_mean_pct": 100.0, "host_iowait_frac": 1.0,
             "dataloader_multiprocess": True, "dataloader_num_workers": 2, "cpu_count": 2,
             "input_worker_batch_cpus": 4.0, "dataloader_wait_max_ms": 1e3,
             "dataloader_wait_median_ms": 1.0, "dataloader_wait_unprofiled_max_ms": 1e3,
             "dataloader_wait_unprofiled_ms": 1.0, "input_worker_batch_cpu_ms": 1.0,
             "input_worker_batch_ms": 1.0}

    def warns(m: dict) -> set[str]:
        return {i for i, r in rules.items() if r.warning is not None and r.warning.evaluate(m)}

    under = {**worst, "dataloader_wait_steady_share": bmod.STEADY_WARNS - 1e-4,
             "dataloader_wait_unprofiled_share": bmod.UNPROFILED_WARNS - 1e-4,
             "dataloader_epoch_start_share": bmod.EPOCH_START_WARNS - 1e-4}
    assert warns(under) == set() == bmod.may_warn(under)
    no_burst = {**under, "dataloader_wait_unprofiled_share": 0.5,
                "dataloader_wait_unprofiled_max_ms": bmod.BURST_WARNS * 1.1 - 1e-3}
    assert warns(no_burst) == set() == bmod.may_warn(no_burst)
    for name, at, named in (
            ("dataloader_wait_steady_share", bmod.STEADY_WARNS, {"IN001", "IN002", "IN006"}),
            ("dataloader_wait_unprofiled_share", bmod.UNPROFILED_WARNS, {"IN003"}),
            ("dataloader_epoch_start_share", bmod.EPOCH_START_WARNS, {"IN005"})):
        over = {**under, name: at}
        assert warns(over) == named == bmod.may_warn(over), name
    # the rules' own fallback where the clock cannot tell the epochs' starts apart
    unsplit = {**under, "dataloader_wait_steady_share": None,
               "dataloader_wait_unprofiled_share": bmod.UNPROFILED_WARNS,
               "dataloader_wait_unprofiled_max_ms": 1.0}
    assert warns(unsplit) == {"IN001", "IN002", "IN006"} == bmod.may_warn(unsplit)
    more = {**under, "cpu_count": 1}  # IN004: more workers than CPUs
    assert warns(more) == {"IN004"} == bmod.may_warn(more)


def test_a_probe_runs_where_a_finding_it_serves_may_warn() -> None:
    """An epoch's start at 60% of the step (IN005 may warn) with the steady steps waiting
    4%: the workers' timings run, the thread, fork-copy and fetch timings (the threads
    split's, the worker count's and the batched fetch's, for IN001/IN002/IN004/IN006) do
    not, and each says why."""
    ctx = {"dataloader": {"num_workers": 2, "len": 4, "persistent_workers": False},
           "cpu_count": 4}
    restart = _clock([0.4] * 8 + [0.4], starts=[0] * 8 + [1])
    restart["ms"][-1] = 70.0
    why = unneeded(ctx, restart, loader_starts=[{"workers": 2}])
    assert set(why) == {"threads", "fork_copy", "fetches", "work_after_fetch"}
    assert why["threads"].endswith("none can be a warning; IN005 can")


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


def test_the_budget_is_the_issues_share() -> None:
    """The budget is issue 48's 5% of the capture's wall time."""
    assert bmod.PROBE_SHARE == 0.05


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
    # the host's pace: the fixed loop's rounds alone (median, least, most: ms)
    assert capacity.time_cpu_capacity_pace(2) == (2.0, 1.667, 2.0, (10.0, 10.0, 12.0))
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


def test_the_split_timings_are_needed_where_workers_and_threads_outnumber_the_cpus() -> None:
    """torch on 2 threads beside 2 workers on 2 CPUs, other processes on 0.0, the training
    thread waiting 20% of the unprofiled steps, the loop waiting on no loader: CF010 may
    warn, so the thread and workers' timings run (its threads split reads them); the
    batched fetch's do not. A 5% wait (CF010's info at most), threads and workers that fit
    the CPUs, more workers than CPUs (IN004's), another process on a CPU (CF008's) or a
    quota under the CPUs (CF009's): left out as before."""
    ctx = {"dataloader": {"num_workers": 2, "len": 40, "persistent_workers": True},
           "cpu_count": 2, "torch_num_threads": 2}
    clock = {"phase": ["wait", "active", "wait", "after", "after"],
             "ms": [10.0, 99.0, 10.0, 10.0, 10.0], "cpu_wait_ms": [9.0, 99.0, 2.0, 2.0, 2.0],
             "dataloader_ms": [0.0] * 5}
    assert bmod.workers_beside_threads(ctx, clock, 0.0)
    assert set(unneeded(ctx, clock, 0.0)) == {"fetches", "work_after_fetch"}
    assert set(unneeded(ctx, clock, None)) == {"fetches", "work_after_fetch"}
    small = {**clock, "cpu_wait_ms": [0.5, 99.0, 0.5, 0.5, 0.5]}
    for c, cl, others in ((ctx, small, 0.0),
                          ({**ctx, "cpu_count": 4}, clock, 0.0),
                          ({**ctx, "dataloader": {"num_workers": 3}}, clock, 0.0),
                          (ctx, clock, 1.0),
                          ({**ctx, "cpu_quota": 1.0}, clock, 0.0),
                          ({**ctx, "torch_num_threads": 1}, clock, 0.0)):
        assert not bmod.workers_beside_threads(c, cl, others), (c, others)
    assert "threads" in unneeded(ctx, small, 0.0)


def test_the_split_gate_sits_at_cf010s_own_warning_threshold() -> None:
    """CF010's warning holds from the wait share the gate opens at (CPU_WAITS), and not
    just under it: the gate runs the split's timings exactly where CF010 may warn."""
    from diagnose.rules.engine import load_rules

    (rule,) = [r for r in load_rules() if r.id == bmod.SPLIT_RULE]
    assert rule.warning is not None
    assert rule.warning.evaluate({"step_cpu_wait_unprofiled_share": bmod.CPU_WAITS})
    assert not rule.warning.evaluate({"step_cpu_wait_unprofiled_share": bmod.CPU_WAITS - 1e-4})
    assert bmod.OTHERS_CPUS == 0.5 and "step_others_cpus_unprofiled < 0.5" in rule.when.src
