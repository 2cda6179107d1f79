"""The probes after the loop within their budget (diagnose/session/after_loop.py), on a fake
clock: each stubbed probe moves the clock by its own cost."""

from __future__ import annotations

import math
from typing import Any

import pytest

import diagnose.session.after_loop as al
from diagnose.capture.probes import common
from diagnose.capture.probes.budget import ProbeBudget
from diagnose.stepmodel.prediction import Predictor, model_error


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Forward:
    inputs: Any = ((), {})


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, list[str]]:
    """Every probe stubbed: rounds of 20 ms, at least 3 (60 ms), more up to 300 ms until
    the budget's end; the order they ran in is kept."""
    clock = FakeClock()
    monkeypatch.setattr(common, "_CLOCK", clock)
    ran: list[str] = []

    def probe(name: str, value: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            ran.append(name)
            k = 0
            while k < 15 and not (k >= 3 and common.out_of_time()):
                clock.t += 0.02
                k += 1
            return value
        return timed

    monkeypatch.setattr(al, "time_batches_in_turn", probe("batches_in_turn", (7.0, 5.0, 6.0, 1.0)))
    monkeypatch.setattr(al, "time_inprocess_batch", probe("inprocess_batch", 5.0))
    monkeypatch.setattr(al, "time_cpu_capacity_span", probe("cpu_capacity", (1.9, 1.7, 2.0)))
    monkeypatch.setattr(al, "time_worker_handover", probe("worker_handover", (1.0, 40.0, 5.0, 9.0)))
    monkeypatch.setattr(al, "time_threads", probe("threads", {"work_ms": 2.0, "work_1thread_ms": 3.0}))
    monkeypatch.setattr(al, "time_worker_send", probe("worker_send", 1.5))
    monkeypatch.setattr(al, "time_work_after_fetches", probe("work_after_fetch", {"ratio": 1.1}))
    monkeypatch.setattr(al, "time_worker_batches", probe("worker_batches", (9.0, 2.0)))
    monkeypatch.setattr(al, "wait_workers_idle", probe("workers_idle", 0.06))
    monkeypatch.setattr(al, "time_spin", probe("threads_spin", 6.5))
    monkeypatch.setattr(al, "usable_cpus", lambda: 2)
    return clock, ran


def _ctx() -> dict[str, Any]:
    return {"dataloader": {"num_workers": 0}, "cpu_count": 2}


def _errors(where: str, e: BaseException) -> None:
    raise AssertionError(f"{where}: {e}")


def test_past_the_budget_each_probe_takes_its_least_rounds_in_order_of_need(
        run: tuple[FakeClock, list[str]]) -> None:
    """A budget of 250 ms and probes that run until the budget's end once they hold their
    least rounds: the first of the order (a worker's batch in turn with this process's)
    runs to 260 ms and is cut; every probe after it still takes its least rounds, in the
    order of need, and none is skipped; the timings made again are not made."""
    clock, ran = run
    ctx = _ctx()
    al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(0.25, 0.0))
    assert ran[0] == "batches_in_turn" and ran.count("cpu_capacity") == 1
    assert ran.index("cpu_capacity") < ran.index("threads")  # the order of need
    rec = ctx["probes"]
    assert rec["budget_ms"] == 250.0 and rec["cut"][0] == "batches_in_turn"
    assert rec["skipped"] == {}
    assert ctx["dataloader"]["worker_batch_ms"] == 7.0


def test_probes_that_settle_leave_budget_for_the_next(run: tuple[FakeClock, list[str]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes that stop at their least 3 rounds (60 ms each) in a budget of 340 ms, an
    in-process loader whose batches one indexing call fetches: the first six of the order
    run (360 ms: the sixth started with 40 ms left and took its least; the threads and the
    work beside busy processes are one probe), the batched fetch's first, whose fetches go
    to the loader's keys. The workers' capacity timing, a second one where the worker's
    batch was timed in turn, is left out silently, as is the capacity's made again, but
    not the threads' (the threads split reads them: a second moment); the capacity's span
    is its rounds'."""
    clock, ran = run

    def settled(name: str, value: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            ran.append(name)
            clock.t += 0.06
            return value
        return timed

    for fn, name, value in (
            ("time_batches_in_turn", "batches_in_turn", (7.0, 5.0, 6.0, 1.0)),
            ("time_cpu_capacity_span", "cpu_capacity", (1.9, 1.7, 2.0)),
            ("time_worker_handover", "worker_handover", (1.0, 40.0, 5.0, 9.0)),
            ("time_threads", "threads", {"work_ms": 2.0, "work_1thread_ms": 3.0}),
            ("time_worker_send", "worker_send", 1.5),
            ("time_work_after_fetches", "work_after_fetch",
             {"ratio": 1.1, "batched_fetch_ms": 2.0, "per_sample_fetch_ms": 5.0}),
            ("time_worker_batches", "worker_batches", (9.0, 2.0))):
        monkeypatch.setattr(al, fn, settled(name, value))
    monkeypatch.setattr(al, "batch_indexable", lambda loader: True)
    ctx = _ctx()
    al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(0.34, 0.0))
    assert ran == ["work_after_fetch", "batches_in_turn", "cpu_capacity", "worker_handover",
                   "threads", "worker_send", "threads"]
    assert clock.t == pytest.approx(0.36 + 0.06)  # the second thread timing's least rounds
    assert ctx["probes"]["skipped"] == {} and ctx["probes"]["cut"] == ["worker_send", "threads"]
    assert (ctx["cpu_capacity"], ctx["cpu_capacity_span"]) == (1.9, [1.7, 2.0])
    assert ctx["dataloader"]["work_after_fetch"] == {"ratio": 1.1}
    assert (ctx["dataloader"]["batched_fetch_ms"],
            ctx["dataloader"]["batched_fetch_per_sample_ms"]) == (2.0, 5.0)


@pytest.mark.parametrize("workers, gpu, unneeded, ran_fetch", [
    (0, False, False, ["work_after_fetch"]),      # one probe times the fetches and the work
    (0, True, False, ["work_after_fetch", "fetches"]),  # no work to time: the fetches alone
    (2, False, False, []),                        # workers fetch out of the clock's sight
    (0, False, True, []),                         # a loop that never waited: no fix needs it
])
def test_the_batched_fetchs_timings_run_where_its_prediction_reads_them(
        run: tuple[FakeClock, list[str]], monkeypatch: pytest.MonkeyPatch, workers: int,
        gpu: bool, unneeded: bool, ran_fetch: list[str]) -> None:
    """The batched fetch is predicted for an in-process loader alone: its fetches are
    timed with the work after each, or alone where the work gives none (a GPU model),
    and neither where the loader has workers or the loop never waited on it."""
    clock, ran = run
    fetches: list[str] = []

    def fetch_probe(loader: Any) -> tuple[float, float]:
        fetches.append("fetches")
        return 2.0, 5.0

    after = {"ratio": 1.1, "batched_fetch_ms": 3.0, "per_sample_fetch_ms": 6.0}
    monkeypatch.setattr(al, "time_work_after_fetches",
                        lambda *a: (fetches.append("work_after_fetch"), None if gpu else after)[1])
    monkeypatch.setattr(al, "time_fetches", fetch_probe)
    monkeypatch.setattr(al, "batch_indexable", lambda loader: True)
    ctx = {"dataloader": {"num_workers": workers}, "cpu_count": 2}
    clock_ = {"phase": ["wait"] + ["after"] * 8, "ms": [10.0] * 9,
              "dataloader_ms": [0.0 if unneeded else 3.0] * 9}
    al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, clock=clock_,
                       budget=None if unneeded else ProbeBudget(1.0, 0.0))
    assert fetches == ran_fetch
    got = (ctx["dataloader"].get("batched_fetch_ms"),
           ctx["dataloader"].get("batched_fetch_per_sample_ms"))
    assert got == ({(): (None, None), ("work_after_fetch",): (3.0, 6.0)}.get(
        tuple(ran_fetch), (2.0, 5.0)))
    if ran_fetch == ["work_after_fetch"]:
        assert ctx["dataloader"]["work_after_fetch"] == {"ratio": 1.1}
    if unneeded:
        assert "work_after_fetch" in ctx["probes"]["skipped"]


def test_the_loaders_live_workers_are_left_to_fall_idle_first(
        run: tuple[FakeClock, list[str]]) -> None:
    """Workers still alive at the loop's end (pids given): the wait for them runs before
    every timing, inside the budget; none given: no wait."""
    clock, ran = run
    ctx = _ctx()
    al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(0.25, 0.0),
                       worker_pids=[4242])
    assert ran[0] == "workers_idle" and ran[1] == "batches_in_turn"
    ran.clear()
    al.time_after_loop(_ctx(), model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(0.25, 0.0))
    assert "workers_idle" not in ran


def test_a_loop_that_never_waited_on_its_loader_gets_no_probe(run: tuple[FakeClock, list[str]]
                                                              ) -> None:
    """The clock says the loop waited 0.5% of its steps on its DataLoader: nothing is
    timed, whatever the budget, and each probe says why."""
    clock, ran = run
    ctx = _ctx()
    quiet = {"phase": ["after"] * 3, "ms": [10.0] * 3, "dataloader_ms": [0.05] * 3}
    al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, clock=quiet)
    assert ran == [] and clock.t == 0.0
    assert "waited on its DataLoader for 0.5%" in ctx["probes"]["skipped"]["threads"]


def test_the_range_holds_the_base_noise_beyond_the_models_error() -> None:
    """The capture's own noise 2% (the replay's error and the base mean's standard
    error): a change with no model error left is ranged over 2% each way."""
    p = Predictor.__new__(Predictor)
    p.rel = 0.02
    lo, hi = p._range(10.0, 10.0, 1.0, False)[0]
    w = math.exp(model_error(1.0, False))
    assert (lo, hi) == pytest.approx((10.0 / 1.02 / w, 10.2 * w))


def test_the_noise_of_the_probes_cut_short_is_stated() -> None:
    """context -> the probes_noise_rel metric: the most noise among the probes the budget
    cut short (each prediction reads its own probes' noise: noise_ends)."""
    from diagnose.metrics.context.outcome import probes_noise

    ctx = {"probes": {"cut": ["threads", "work_after_fetch", "cpu_capacity"]},
           "threads": {"noise": 0.03}, "dataloader": {"work_after_fetch": {"noise": 0.06}}}
    assert probes_noise(ctx) == 0.06
    assert probes_noise({"probes": {"cut": []}}) == 0.0
    assert probes_noise({}) is None


def test_a_loop_without_a_dataloader_gets_no_thread_timing(
        run: tuple[FakeClock, list[str]]) -> None:
    """No DataLoader seen (no batch from one): the threads split, the one fix the thread
    timings serve, cannot apply, so they are not made, and the record says why; nothing
    else runs either."""
    clock, ran = run
    ctx: dict[str, Any] = {"cpu_count": 2}
    al.time_after_loop(ctx, model=object(), loader=None, forward=Forward(),  # type: ignore[arg-type]
                       batch=None, on_error=_errors, budget=ProbeBudget(1.0, 0.0))
    assert ran == [] and clock.t == 0.0
    assert "threads" not in ctx and ctx["probes"]["skipped"] == {"threads": al.NO_LOADER}


def test_torchs_threads_short_of_cpus_get_the_thread_timing_alone(
        run: tuple[FakeClock, list[str]]) -> None:
    """No DataLoader, torch on 2 threads of 2 CPUs, another process on 1.0 of them, the
    training thread waiting 20% of the steps: the thread timing alone runs (CF008 reads
    it; not beside busy processes: the load is there), again while budget is left;
    nothing else."""
    clock, ran = run
    ctx: dict[str, Any] = {"cpu_count": 2, "torch_num_threads": 2}
    waited = {"phase": ["wait"] * 4, "ms": [10.0] * 4, "cpu_wait_ms": [2.0] * 4}
    al.time_after_loop(ctx, model=object(), loader=None, forward=Forward(),  # type: ignore[arg-type]
                       batch=None, on_error=_errors, clock=waited, others_cpus=1.0)
    assert set(ran) == {"threads"} and ctx["threads"]["work_1thread_ms"] == 3.0
    assert "threads" not in ctx["probes"]["skipped"]


@pytest.mark.parametrize("noise,loaded,again", [(0.3, True, True), (0.05, True, True),
                                               (0.3, False, True), (0.05, False, False)])
def test_a_thread_timing_is_made_again_past_the_budget_where_it_is_read(
        run: tuple[FakeClock, list[str]], monkeypatch: pytest.MonkeyPatch, noise: float,
        loaded: bool, again: bool) -> None:
    """The budget spent (as above): a thread timing the threads split reads (a loader), or
    one whose rounds spread 30%, is made again at the end all the same, and the two joined
    (each median their geometric mean); one that spread 5% for CF008 alone (no loader,
    torch's threads short of CPUs) is not."""
    clock, ran = run
    first = {"work_ms": 4.0, "work_1thread_ms": 2.0, "noise": noise}
    seconds = iter([first, {"work_ms": 2.0, "work_1thread_ms": 1.2}])  # ratios 0.5, 0.6
    monkeypatch.setattr(al, "time_threads", lambda *a: (
        ran.append("threads"), setattr(clock, "t", clock.t + 0.06), next(seconds))[2])
    if loaded:
        ctx = _ctx()
        al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                           batch=("x",), on_error=_errors, budget=ProbeBudget(0.25, 0.0))
    else:  # CF008's timing, then the second one, in a small budget
        ctx = {"cpu_count": 2, "torch_num_threads": 2}
        waited = {"phase": ["wait"] * 4, "ms": [10.0] * 4, "cpu_wait_ms": [2.0] * 4}
        small = ProbeBudget(0.05, 0.0, al.unneeded(ctx, waited, 1.0))
        al.time_after_loop(ctx, model=object(), loader=None, forward=Forward(),  # type: ignore[arg-type]
                           batch=None, on_error=_errors, clock=waited, others_cpus=1.0,
                           budget=small)
    assert ran.count("threads") == (2 if again else 1)
    if again:  # the stub's second timing: 1.2 ms on one thread against 2 on torch's
        got = ctx["threads"]
        assert got["work_1thread_ms"] == pytest.approx(math.sqrt(2.0 * 1.2), rel=1e-4)
        assert got["work_ms"] == pytest.approx(math.sqrt(4.0 * 2.0), rel=1e-4)
        assert ctx["threads_span"] == [0.5, 0.6]
    else:
        assert ctx["threads"]["work_ms"] == 4.0 and ctx["threads_span"] is None


@pytest.mark.parametrize("third_ratio,joined", [(0.55, (0.5, 0.55)), (1.4, (1.5, 1.4))])
def test_two_thread_timings_that_disagree_get_a_third_and_the_two_that_agree_lead(
        run: tuple[FakeClock, list[str]], monkeypatch: pytest.MonkeyPatch,
        third_ratio: float, joined: tuple[float, float]) -> None:
    """A loader's thread timings whose one-thread ratios lie further apart than AGAIN_NOISE
    (0.5 and 1.5: a moment slowed one of them) get a third past the budget; the two whose
    ratios agree are joined, and the span keeps all three's ends."""
    clock, ran = run
    timings = iter([{"work_ms": 4.0, "work_1thread_ms": 2.0, "noise": 0.05},
                    {"work_ms": 2.0, "work_1thread_ms": 3.0, "noise": 0.05},
                    {"work_ms": 2.0, "work_1thread_ms": 2.0 * third_ratio, "noise": 0.05}])
    monkeypatch.setattr(al, "time_threads", lambda *a: (
        ran.append("threads"), setattr(clock, "t", clock.t + 0.06), next(timings))[2])
    ctx = _ctx()
    al.time_after_loop(ctx, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(0.25, 0.0))
    assert ran.count("threads") == 3
    got = ctx["threads"]
    assert got["work_1thread_ms"] / got["work_ms"] == pytest.approx(
        math.sqrt(joined[0] * joined[1]), rel=1e-3)
    assert got["noise"] == pytest.approx(abs(math.log(joined[0] / joined[1])) / 2, abs=1e-3)
    assert ctx["threads_span"] == [0.5, 1.5]


def test_each_capacity_timing_is_kept_beside_the_span() -> None:
    """The capacity is the most of the timings, its span the least first quartile to the
    most third; each timing is kept by when it was made, so that a low end can be told to
    a moment of the host (all low) or to one timing (one low)."""
    ctx: dict[str, Any] = {}
    al._capacity_of(ctx, [("after_loop", 1.9, 1.09, 1.95), ("worker_batches", 1.7, 1.7, 1.7),
                          ("on_enter", 1.771, 1.644, 1.877)])
    assert ctx["cpu_capacity"] == 1.9 and ctx["cpu_capacity_span"] == [1.09, 1.95]
    assert ctx["cpu_capacity_timings"] == {"after_loop": [1.9, 1.09, 1.95],
                                           "worker_batches": [1.7, 1.7, 1.7],
                                           "on_enter": [1.771, 1.644, 1.877]}
    one: dict[str, Any] = {}
    al._capacity_of(one, [("worker_batches", 1.7, 1.7, 1.7)])  # one point: no span
    assert one["cpu_capacity_span"] is None and one["cpu_capacity_timings"] == {
        "worker_batches": [1.7, 1.7, 1.7]}


def test_a_loop_under_cpu_autocast_gets_the_fp32_timing_with_or_without_a_loader(
        run: tuple[FakeClock, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """PR002's timing has no gate on the clock: where the loop's forward ran under CPU
    autocast it runs, a DataLoader or none; where it did not, it does not."""
    clock, ran = run
    timed = {"dtype": "bfloat16", "work_ms": 3.0, "work_fp32_ms": 1.0, "ratio": 3.0}
    monkeypatch.setattr(al, "time_autocast", lambda *a: (ran.append("cpu_autocast"), timed)[1])
    ctx: dict[str, Any] = {"cpu_count": 2}
    al.time_after_loop(ctx, model=object(), loader=None, forward=Forward(),  # type: ignore[arg-type]
                       batch=None, on_error=_errors, budget=ProbeBudget(1.0, 0.0))
    assert ran == [] and "cpu_autocast" not in ctx  # no autocast recorded
    monkeypatch.setattr(al, "cpu_autocast", lambda model: "bfloat16")
    al.time_after_loop(ctx, model=object(), loader=None, forward=Forward(),  # type: ignore[arg-type]
                       batch=None, on_error=_errors, budget=ProbeBudget(1.0, 0.0))
    assert ran == ["cpu_autocast"] and ctx["cpu_autocast"] == timed


def test_the_threads_spin_is_timed_after_the_threads_for_a_cpu_model_alone(
        run: tuple[FakeClock, list[str]]) -> None:
    """A CPU model with a loader: its idle threads' spin is timed right after the threads
    and lands in the context; a model that is not on the CPU (a GPU's: torch's threads
    launch, they do not share the CPUs' work) is not timed for it."""
    import torch

    class Model(torch.nn.Module):  # called as the fake forward's inputs call it: no args
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self) -> torch.Tensor:
            return self.w.sum()

    clock, ran = run
    ctx = _ctx()
    al.time_after_loop(ctx, model=Model(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(10.0, 0.0))
    assert ran[ran.index("threads") + 1] == "threads_spin"
    assert ctx["threads_spin_ms"] == 6.5
    ran.clear()
    other = _ctx()
    al.time_after_loop(other, model=object(), loader=object(), forward=Forward(),  # type: ignore[arg-type]
                       batch=("x",), on_error=_errors, budget=ProbeBudget(10.0, 0.0))
    assert "threads_spin" not in ran and "threads_spin_ms" not in other
