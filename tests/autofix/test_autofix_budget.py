"""autofix keeps to its budget: the time of every arm comes from a fake clock, so the
budget's arithmetic is checked exactly, on any machine, however busy (no real timing).

Each arm of a round advances the clock by its steps x a slow step (0.4 s); arms of
configs with workers run faster where a test says so. Trials, the before/after and the
speed of light are all timed on that clock: the run must end within 10% of its budget,
start no trial whose fewest rounds cannot end in time, and say why it skipped one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix import SKIPPED, Bound, Plan, autofix  # noqa: E402
from diagnose.autofix import runner as tune  # noqa: E402
from diagnose.autofix.budget import OVERRUN  # noqa: E402
from diagnose.autofix.measure import HARD_END_MIN_ROUNDS, Measurer  # noqa: E402
from diagnose.fixes import TrainConfig  # noqa: E402

STEP_S = 0.4  # seconds per fake step: a slow job, where the budget matters
# the worker-count ladder rebuilds loaders of more workers than this machine has CPUs
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
PLAN = Plan(warmup=2, round_s=0.1, min_steps=8, max_steps=80, min_rounds=4, max_rounds=30,
            looks=3, final_rounds=10, resamples=500)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _install(monkeypatch: pytest.MonkeyPatch, speed: Callable[[TrainConfig], float]
             ) -> FakeClock:
    """Fake timing: ``speed(cfg)`` is the step time of a config, as a multiple of STEP_S."""
    clock = FakeClock()
    rng = np.random.default_rng(0)
    monkeypatch.setattr(Measurer, "clock", staticmethod(clock))

    def arm(self: Measurer, t: object, what: str, warmup: int, n: int, k: int
            ) -> Callable[[], np.ndarray]:
        step = STEP_S * speed(t.cfg)  # type: ignore[attr-defined]
        # a short epoch with workers is timed whole, one value, as Trial.run times it
        whole = what == "step" and self.arm_steps(t.cfg) != warmup + n  # type: ignore[attr-defined]
        steps = self.arm_steps(t.cfg) if whole else warmup + n  # type: ignore[attr-defined]

        def run() -> np.ndarray:
            clock.now += steps * step
            return step * (1 + 0.05 * rng.standard_normal(1 if whole else max(1, n // k)))
        return run

    def pilot(self: Measurer, cfg: TrainConfig) -> float:
        warmup, n, _ = self.layout(cfg)
        clock.now += (warmup + n) * STEP_S
        self.step_s = STEP_S
        self.steps = self.plan.min_steps
        return STEP_S

    def bound(self: Measurer, cfg: TrainConfig) -> Bound:
        warmup, n, _ = self.layout(cfg)
        clock.now += 2 * (warmup + n) * STEP_S
        return Bound(0.3e3 * STEP_S, 0.7e3 * STEP_S, cfg)

    monkeypatch.setattr(Measurer, "_arm", arm)
    monkeypatch.setattr(Measurer, "pilot", pilot)
    monkeypatch.setattr(Measurer, "bound", bound)
    monkeypatch.setattr(tune, "cpu_count", lambda: 8)  # a ladder of worker counts
    return clock


def _job(samples: int = 2048) -> dict[str, object]:
    """A job whose epoch is ``samples`` / 8 steps (the default: longer than a trial times
    whole, so every arm is its warmup and timed steps)."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    loader = DataLoader(TensorDataset(torch.randn(samples, 8),
                                      torch.randint(0, 4, (samples,))), batch_size=8)
    return {"model": model, "loader": loader,
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1), "loss_fn": F.cross_entropy}


def _run(budget: float, samples: int = 2048, **kw: object):  # type: ignore[no-untyped-def]
    j = _job(samples)
    return autofix(j["model"], j["loader"], j["optimizer"], loss_fn=j["loss_fn"],
                   fixes=["num_workers", "set_to_none", "gc_freeze", "batched_fetch"],
                   try_all=True, max_trials=100, budget_s=budget, plan=PLAN, **kw)


@pytest.mark.parametrize("budget", [60.0, 150.0, 400.0])
def test_no_change_helps_and_the_budget_holds(monkeypatch: pytest.MonkeyPatch,
                                              budget: float) -> None:
    """Nothing helps (the rule cannot decide early: every trial runs to its deadline)."""
    _install(monkeypatch, lambda cfg: 1.0)
    r = _run(budget)
    assert r.elapsed_s <= budget * (1 + OVERRUN), r.render_text()
    assert r.kept == [] and r.bound is not None  # the speed of light was measured too
    skipped = [d for d in r.decisions if d.status == SKIPPED]
    assert all("budget" in d.reason for d in skipped), r.render_text()


@pytest.mark.parametrize("budget", [250.0, 400.0, 800.0])
def test_a_kept_change_leaves_time_for_its_before_after(monkeypatch: pytest.MonkeyPatch,
                                                        budget: float) -> None:
    """Workers halve the step: kept, and the before/after (4 arms, 10+ rounds) still fits."""
    _install(monkeypatch, lambda cfg: 0.5 if cfg.num_workers else 1.0)
    r = _run(budget)
    assert r.elapsed_s <= budget * (1 + OVERRUN), r.render_text()
    assert "num_workers" in r.kept and r.final is not None, r.render_text()
    assert r.final.interval is not None and r.final.interval.lo > 1.0


def test_a_trial_that_cannot_end_in_time_is_not_started(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """25 s of budget: the pilot and the bound take ~12 s, a trial at least 3 rounds of
    2 x 10 steps of 0.4 s (24 s): none starts, each says so, and the run ends in budget."""
    _install(monkeypatch, lambda cfg: 1.0)
    r = _run(25.0)
    assert r.trials == 0 and r.elapsed_s <= 25.0 * (1 + OVERRUN), r.render_text()
    tried = [d for d in r.decisions if d.change]
    assert tried and all(d.status == SKIPPED and "a trial at least" in d.reason
                         for d in tried), r.render_text()
    # each says what budget would have tried it: more than the one given
    asked = [float(d.reason.split("of about ")[1].split(" s")[0]) for d in tried]
    assert all(a > 25.0 for a in asked), [d.reason for d in tried]


@pytest.mark.parametrize("budget", [60.0, 150.0, 400.0])
def test_a_loader_timed_in_whole_epochs_is_budgeted_by_its_epoch(
        monkeypatch: pytest.MonkeyPatch, budget: float) -> None:
    """An epoch of 32 steps with workers is timed whole (32 steps an arm, not a round's
    warmup and timed steps): the budget's arithmetic counts those steps, so the run still
    ends within its budget, and a trial it cannot afford says which budget would."""
    from diagnose.autofix.trial import WHOLE_EPOCH_STEPS

    assert WHOLE_EPOCH_STEPS >= 256 // 8
    _install(monkeypatch, lambda cfg: 0.5 if cfg.num_workers else 1.0)
    r = _run(budget, samples=256)
    assert r.elapsed_s <= budget * (1 + OVERRUN), r.render_text()
    for d in r.decisions:
        assert d.status != SKIPPED or "budget" in d.reason, r.render_text()


def test_a_whole_epoch_arm_counts_its_epoch_steps() -> None:
    """The round's expected time: a config whose short epoch is timed whole counts the
    epoch's steps; one without workers, its warmup and timed steps."""
    j = _job(256)
    m = Measurer(tune.Workload.from_user(j["model"], j["loader"], j["optimizer"],
                                         loss_fn=j["loss_fn"]), PLAN, 0.03, None)
    base = TrainConfig.from_objects(j["loader"], j["optimizer"])
    workers = base.replace(num_workers=2)
    m.step_s = 0.5
    assert m.arm_steps(base) == sum(m.layout(base)[:2])
    assert m.arm_steps(workers) == 32
    assert m.round_s(base, workers) == pytest.approx((sum(m.layout(base)[:2]) + 32) * 0.5)
    assert m.arm_steps(base.replace(num_workers=2, grad_accum_steps=2)) == 16


def test_a_loader_it_cannot_build_counts_as_a_rounds_steps(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Counting an epoch builds the config's loader; where that cannot be done (the trial
    then records the error), the arm counts its warmup and timed steps, and nothing
    raises out of the budget's arithmetic."""
    from diagnose.autofix import measure
    from diagnose.fixes.realise import CannotRealise

    def refuse(*a: object, **k: object) -> None:
        raise CannotRealise("a batch_sampler of the user's own cannot change its batch")

    monkeypatch.setattr(measure, "build_loader", refuse)
    j = _job(256)
    m = Measurer(tune.Workload.from_user(j["model"], j["loader"], j["optimizer"],
                                         loss_fn=j["loss_fn"]), PLAN, 0.03, None)
    workers = TrainConfig.from_objects(j["loader"], j["optimizer"]).replace(num_workers=2)
    assert m.arm_steps(workers) == sum(m.layout(workers)[:2])


def test_rounds_stop_at_the_hard_end_with_whole_rounds(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """No arm starts that would end past the hard end once each has two rounds; the round
    in progress is dropped, so the arms keep the same number of rounds."""
    clock = FakeClock()
    monkeypatch.setattr(Measurer, "clock", staticmethod(clock))
    m = Measurer.__new__(Measurer)  # an arm: (0 warmup + 4 steps) x 1 s, as the fake's
    m.plan, m.steps, m.step_s = Plan(warmup=0), 4, 1.0
    m.progress = lambda s: None
    m.hard_end = clock.now + 25.0

    def arm() -> np.ndarray:
        clock.now += 4.0
        return np.ones(2)

    res = m._rounds([("a", arm), ("b", arm), ("c", arm)], [20], "test", arm_s=4.0)
    sizes = {len(v) for v in res.values()}
    assert sizes == {HARD_END_MIN_ROUNDS}  # 3 arms x 4 s: the hard end falls in round 3
    assert clock.now <= 1000.0 + 25.0  # the arm that would end past it was not started


def test_help_shows_the_default_budget(capsys: pytest.CaptureFixture[str]) -> None:
    from diagnose.cli import main

    for cmd, default in (("autofix", "300"), ("demo", "120")):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "--budget S seconds autofix may spend" in out and f"(default {default})" in out


def test_a_short_budget_tries_what_fits_and_shortens_the_before_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """100 s: after the pilot and the bound (~12 s) a trial's fewest rounds (3 x 2 arms x
    10 steps of 0.4 s: 24 s) fit beside the before/after's fewest (3 x 4 arms: 48 s), not
    beside its whole first look (10 rounds: 160 s). A budget like this once tried nothing;
    now the workers' trial runs, and the before/after takes the rounds left (at least 3,
    fewer than 10), within the budget."""
    _install(monkeypatch, lambda cfg: 0.5 if cfg.num_workers else 1.0)
    r = _run(100.0)
    assert r.trials >= 1, r.render_text()
    assert r.elapsed_s <= 100.0 * (1 + OVERRUN), r.render_text()
    assert "num_workers" in r.kept and r.final is not None, r.render_text()
    assert 3 <= r.final.rounds < PLAN.final_rounds, r.render_text()


def test_fixes_that_do_not_apply_take_no_share_of_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's autofix ended after 89 s of 300, each trial undecided at its share: the
    shares were split with persistent_workers and prefetch_factor, which need workers the
    run did not have (not applicable, they took no time). Here nothing helps, so every
    trial runs to its share: the worker trials use the budget, less the before/after."""
    _install(monkeypatch, lambda cfg: 1.0)
    j = _job()
    r = autofix(j["model"], j["loader"], j["optimizer"], loss_fn=j["loss_fn"],
                fixes=["num_workers", "persistent_workers", "prefetch_factor"], try_all=True,
                max_trials=100, budget_s=300.0, plan=PLAN)
    assert r.elapsed_s <= 300.0 * (1 + OVERRUN), r.render_text()
    assert r.elapsed_s >= 0.85 * 300.0, r.render_text()  # 212 s when they shared it
    assert {d.fix for d in r.decisions if not d.change} >= {"persistent_workers",
                                                            "prefetch_factor"}
