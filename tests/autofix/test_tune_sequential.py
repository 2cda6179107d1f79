"""The sequential rule trials decide with (diagnose.autofix.stats), on simulated timings: its
error rates stay under the documented bounds, a true 1.2x is kept, a clear loss stops early.

Timings are simulated as the runner measures them: each round, each arm runs ``steps``
steps with a per-step coefficient of variation ``cv`` (lognormal), grouped into blocks of
4; the round's value per arm is the median of its blocks; each arm also gets its own
round-level drift (another process starting between the arms). The default Plan's looks
are used, so these are the rates of autofix's trials as configured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diagnose.autofix.measure import Plan
from diagnose.autofix.stats import (
    Interval,
    SequentialRule,
    SequentialTrial,
    look_schedule,
    round_log_ratios,
    rounds_for,
    t_quantile,
)

PLAN = Plan()
RULE = PLAN.rule
THRESHOLD = 1.03  # 1 + the default min_gain
TRIALS = 4000


def simulate(rng: np.random.Generator, trials: int, rounds: int, speedup: float, cv: float,
             steps: int = 8, block: int = 4, drift: float = 0.03) -> np.ndarray:
    """Per-round log ratios d[trial, round] of baseline over candidate."""
    sig = math.sqrt(math.log(1 + cv * cv))

    def arm(scale: float) -> np.ndarray:
        t = np.exp(rng.normal(-sig * sig / 2, sig, (trials, rounds, steps)))
        t *= np.exp(rng.normal(0.0, drift, (trials, rounds, 1))) * scale
        blocks = t.reshape(trials, rounds, steps // block, block).mean(axis=-1)
        return np.median(blocks, axis=-1)

    return np.log(arm(1.0)) - np.log(arm(1.0 / speedup))


def run_rule(d: np.ndarray, looks: list[int], rule: SequentialRule = RULE
             ) -> tuple[np.ndarray, np.ndarray]:
    """(verdict, rounds used) per simulated trial: +1 kept, -1 stopped below, 0 undecided."""
    verdict = np.zeros(len(d), dtype=int)
    used = np.full(len(d), looks[-1])
    open_ = np.ones(len(d), dtype=bool)
    for n in looks:
        v = rule.verdict(d[:, :n], THRESHOLD)
        hit = open_ & (v != 0)
        verdict[hit], used[hit] = v[hit], n
        open_ &= ~hit
    return verdict, used


def run_trial(d: np.ndarray, looks: list[int], precision: float | None = PLAN.precision
              ) -> SequentialTrial:
    """Many trials as the runner takes them (stats.SequentialTrial), one per row."""
    tr = SequentialTrial(RULE, THRESHOLD, precision, shape=(len(d),))
    for n in looks:
        tr.look(d[:, :n])
        if not tr.open.any():
            break
    return tr


def schedule(predicted: float | None, noise: float = PLAN.noise) -> list[int]:
    first = rounds_for(noise, predicted, THRESHOLD, RULE, PLAN.min_rounds)
    return look_schedule(first, PLAN.max_rounds, PLAN.looks)


def _slack(p: float, n: int) -> float:
    return 3 * math.sqrt(p * (1 - p) / n)  # three standard errors of a simulated rate


def test_t_quantile_matches_the_tables() -> None:
    for p, df, want in [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182),
                        (0.975, 10, 2.228), (0.995, 5, 4.032), (0.995, 19, 2.861),
                        (0.9975, 30, 3.030), (0.95, 120, 1.658)]:
        assert t_quantile(p, df) == pytest.approx(want, abs=1.5e-3), (p, df)
    with pytest.raises(ValueError):
        t_quantile(0.4, 3)


def test_an_interval_prints_its_ends_readably() -> None:
    """Three rounds on a busy host bound a speedup to [0.0003, 429] (a new user's autofix
    printed "1.42x [0.00, 429.25]"): ends past 0.01 and 100 print as such, from 10 on as
    whole numbers."""
    assert str(Interval(1.42, 0.0003, 429.25, 0.95)) == "1.42x [<0.01, >100]"
    assert str(Interval(1.80, 1.6, 2.0, 0.95)) == "1.80x [1.60, 2.00]"
    assert str(Interval(5.05, 3.15, 12.4, 0.95)) == "5.05x [3.15, 12]"
    assert str(Interval(0.98, 0.011, 99.6, 0.95)) == "0.98x [0.01, 100]"


@pytest.mark.parametrize("cv", [0.05, 0.15])
@pytest.mark.parametrize("predicted", [None, 1.3])
def test_false_keep_rate_at_the_threshold_is_within_alpha_over_2(cv: float,
                                                                 predicted: float | None) -> None:
    """A change exactly as fast as the keep threshold must be kept in at most alpha/2 of the
    trials, however the looks were sized (here also by a wrong prediction of 1.3x)."""
    d = simulate(np.random.default_rng(1), TRIALS, PLAN.max_rounds, THRESHOLD, cv)
    verdict, _ = run_rule(d, schedule(predicted))
    bound = RULE.alpha / 2
    assert (verdict == 1).mean() <= bound + _slack(bound, TRIALS)


def test_a_null_change_is_almost_never_kept() -> None:
    d = simulate(np.random.default_rng(2), TRIALS, PLAN.max_rounds, 1.0, 0.15)
    verdict, _ = run_rule(d, schedule(None))
    assert (verdict == 1).mean() <= 0.01


def test_looking_after_every_round_without_the_split_breaks_the_bound() -> None:
    """Why the error is split over the looks: a plain 95% interval checked after every round
    keeps a change at the threshold far more often than 2.5% (this test shows the checks
    above can fail)."""
    d = simulate(np.random.default_rng(3), TRIALS, PLAN.max_rounds, THRESHOLD, 0.15)
    naive = SequentialRule(alpha=0.05, looks=1)
    verdict, _ = run_rule(d, list(range(3, PLAN.max_rounds + 1)), naive)
    assert (verdict == 1).mean() > 0.025 + _slack(0.025, TRIALS)


@pytest.mark.parametrize("cv", [0.05, 0.10, 0.15])
@pytest.mark.parametrize("predicted", [None, 1.2])
def test_a_true_1_2x_is_kept_within_the_default_plan(cv: float, predicted: float | None) -> None:
    """A true 1.2x with 5-15% per-step noise, only 8 steps per arm and round (the fewest a
    round has) and 3% drift between the arms: kept in >= 99% of trials, and never left
    undecided in more than 1%."""
    d = simulate(np.random.default_rng(4), TRIALS, PLAN.max_rounds, 1.2, cv)
    verdict, used = run_rule(d, schedule(predicted))
    assert (verdict == 1).mean() >= 0.99
    assert np.median(used) <= 8  # and usually at one of the first looks


@pytest.mark.parametrize("cv", [0.05, 0.15])
def test_a_fix_predicted_far_below_1_that_measures_so_stops_after_the_first_rounds(
        cv: float) -> None:
    looks = schedule(0.7)
    assert looks[0] == PLAN.min_rounds
    d = simulate(np.random.default_rng(5), TRIALS, PLAN.max_rounds, 0.7, cv)
    verdict, used = run_rule(d, looks)
    assert (verdict == -1).mean() >= 0.999
    assert (used == looks[0]).mean() >= 0.9 and (used <= looks[1]).mean() >= 0.999


def test_a_real_gain_is_rarely_called_below_the_threshold() -> None:
    """The other error: a change truly faster than the threshold stopped as 'no gain worth
    keeping' (interval below the threshold) in at most alpha/2 of the trials."""
    d = simulate(np.random.default_rng(6), TRIALS, PLAN.max_rounds, THRESHOLD * 1.001, 0.15)
    verdict, _ = run_rule(d, schedule(None))
    bound = RULE.alpha / 2
    assert (verdict == -1).mean() <= bound + _slack(bound, TRIALS)


def test_power_sizes_the_first_look() -> None:
    assert rounds_for(0.05, None, THRESHOLD, RULE, 4) == 4
    near, far = (rounds_for(0.05, p, THRESHOLD, RULE, 4) for p in (1.08, 1.5))
    assert near > far >= 4
    assert rounds_for(0.10, 1.08, THRESHOLD, RULE, 4) > near  # noisier: more rounds
    looks = look_schedule(5, 20, 4)
    assert looks[-1] == 20 and looks == sorted(set(looks)) and len(looks) <= 4
    assert look_schedule(30, 20, 4) == [20]


def test_the_rule_on_one_trial_is_the_rule_on_many() -> None:
    """The runner decides one trial at a time (1-D); the simulations above, many (2-D)."""
    d = simulate(np.random.default_rng(7), 50, 8, 1.1, 0.1)
    rows = RULE.verdict(d, THRESHOLD)
    assert [int(RULE.verdict(r, THRESHOLD)) for r in d] == rows.tolist()
    iv = RULE.interval(d[0])
    m, lo, hi = (float(x) for x in RULE.bounds(d[0]))
    assert (iv.ratio, iv.lo, iv.hi) == pytest.approx((math.exp(m), math.exp(lo), math.exp(hi)))
    assert iv.confidence == 1 - RULE.alpha


def test_round_log_ratios_pair_the_rounds() -> None:
    """Each round's arms by their mean block (the mean step): a block that held a pause
    (the 8.0: a full collection in one block of three) counts as the time it cost."""
    a = [np.array([2.0, 2.0, 8.0]), np.array([3.0])]
    b = [np.array([1.0]), np.array([3.0, 3.0])]
    assert round_log_ratios(a, b).tolist() == pytest.approx([math.log(4.0), 0.0])
    with pytest.raises(ValueError):
        round_log_ratios(a, b[:1])


@pytest.mark.parametrize("speedup", [0.7, 1.0, THRESHOLD, 1.2, 6.0])
def test_measuring_a_kept_change_on_decides_as_the_rule_does(speedup: float) -> None:
    """The intersection of the looks and the rounds after a keep change no decision: the
    verdicts are the plain rule's, trial for trial (so are its error rates, above)."""
    d = simulate(np.random.default_rng(8), TRIALS, PLAN.max_rounds, speedup, 0.15)
    looks = schedule(None)
    verdict, used = run_rule(d, looks)
    tr = run_trial(d, looks)
    assert tr.verdict.tolist() == verdict.tolist()
    assert (tr.rounds[verdict != 1] == used[verdict != 1]).all()  # only keeps go on
    assert (tr.rounds[verdict == 1] >= used[verdict == 1]).all()


@pytest.mark.parametrize("speedup, cv, drift, closer, precise_at_least",
                         [(1.2, 0.15, 0.03, 0.9, 0.99), (6.0, 0.3, 0.08, 0.6, 0.2)])
def test_a_kept_change_is_measured_on_toward_the_plans_precision(
        speedup: float, cv: float, drift: float, closer: float, precise_at_least: float) -> None:
    """A large gain kept at its first look of 4 rounds was reported as 5.05x [3.15, 8.09]
    (autofix_jobs, tensor_rows), where the job's before/after measured 6.46x. Measured on,
    a kept change's interval is within +-10% or has used every look, its point is nearer
    the truth, and the intervals still cover the true speedup at their stated level."""
    d = simulate(np.random.default_rng(9), TRIALS, PLAN.max_rounds, speedup, cv, drift=drift)
    looks = schedule(speedup)
    plain, on = run_trial(d, looks, None), run_trial(d, looks, PLAN.precision)
    kept = on.verdict == 1
    assert kept.mean() >= 0.99 and (plain.verdict == on.verdict).all()
    assert np.median(plain.rounds[kept]) <= looks[1]  # decided early: measured on after

    def error(tr: SequentialTrial) -> float:
        return float(np.median(np.abs(np.clip(tr.mean, tr.lo, tr.hi) - math.log(speedup))[
            kept]))

    half = (on.hi - on.lo)[kept] / 2
    precise = half <= math.log1p(PLAN.precision)
    assert (precise | (on.rounds[kept] == looks[-1])).all()  # precise, or out of looks
    assert precise.mean() >= precise_at_least
    assert np.median(half) < np.median((plain.hi - plain.lo)[kept] / 2)
    assert error(on) < closer * error(plain)
    cover = (on.lo[kept] <= math.log(speedup)) & (math.log(speedup) <= on.hi[kept])
    assert cover.mean() >= RULE.confidence - _slack(RULE.confidence, int(kept.sum()))


def test_looks_that_disagree_outright_keep_the_kept_interval() -> None:
    """Two looks whose intervals do not overlap (below alpha in all): a kept trial stops
    with the interval it had; the interval of one trial is read back as a speedup."""
    tr = SequentialTrial(RULE, THRESHOLD, PLAN.precision)
    first = np.log([1.5, 1.7, 1.6, 1.55])
    tr.look(first)
    kept = (float(tr.lo), float(tr.hi))
    assert tr.verdict == 1 and bool(tr.open)  # kept, not yet precise: goes on
    later = np.concatenate([first, np.full(16, math.log(1.1))])
    assert float(RULE.bounds(later)[2]) < kept[0]  # the later look alone lies below
    tr.look(later)
    assert not tr.open and (float(tr.lo), float(tr.hi)) == kept and tr.verdict == 1
    iv = tr.interval()
    assert iv.lo == pytest.approx(math.exp(kept[0])) and iv.lo <= iv.ratio <= iv.hi
    assert iv.confidence == RULE.confidence


@pytest.mark.parametrize("precision", [None, PLAN.precision])
def test_the_runner_measures_a_kept_change_on(monkeypatch, precision: float | None) -> None:
    """Measurer.compare, with arms that return simulated block times (a 6x change, 15%
    noise per block): without a precision the trial stops at its first look; with it, it
    runs on until its interval is within +-10% or its looks are used; kept either way."""
    from types import SimpleNamespace

    from diagnose.autofix.measure import Looks, Measurer
    from diagnose.fixes import TrainConfig

    rng = np.random.default_rng(10)

    def arm(self, t, what, warmup, n, k):
        return lambda: t.scale * np.exp(rng.normal(0.0, 0.15, 4))

    monkeypatch.setattr(Measurer, "trial_for", lambda self, cfg: SimpleNamespace(
        scale=1.0 if cfg.num_workers == 0 else 1 / 6, first_step_s=None))
    monkeypatch.setattr(Measurer, "_arm", arm)
    m = Measurer(None, Plan(precision=precision), min_gain=THRESHOLD - 1, progress=None)
    c, _ = m.compare(TrainConfig(num_workers=0), TrainConfig(num_workers=1), "6x",
                     rounds=Looks((4, 7, 12, 20)))
    iv = c.interval
    assert iv is not None and iv.above(THRESHOLD) and iv.lo <= 6.0 <= iv.hi
    if precision is None:
        assert c.rounds == 4
    else:
        assert c.rounds > 4 and (math.log(iv.hi / iv.lo) / 2 <= math.log1p(precision)
                                 or c.rounds == 20)


@pytest.mark.parametrize(("ratios", "rounds", "confirmed"), [
    ([1.6, 0.95, 1.5, 1.0, 1.4, 1.3, 1.5, 1.4], 8, True),  # open at 4: as many again
    ([1.5, 1.6, 1.4, 1.5], 4, True),  # clear at 4
    ([0.9, 1.0, 0.95, 0.9], 4, False),  # no faster: nothing more to look at
])
def test_the_before_after_looks_again_while_it_leaves_the_gain_open(
        monkeypatch, ratios: list[float], rounds: int, confirmed: bool) -> None:
    """The before/after (fixed rounds, the bootstrap interval) runs as many rounds again
    where its interval leaves open whether the tuned config is faster (lower end at or
    below 1, estimate above): a noisy host's 4 rounds once read 1.32x [0.98, 1.72] for a
    1.77x change. It does not look again where it is clear either way."""
    from types import SimpleNamespace

    from diagnose.autofix.measure import Measurer
    from diagnose.fixes import TrainConfig

    script = iter(ratios)
    now = {"ratio": 1.0}

    def arm(self, t, what, warmup, n, k):
        def run():
            if t.tuned:
                return np.full(4, 1.0 / now["ratio"])
            now["ratio"] = next(script)  # the baseline runs first in a round or second
            return np.ones(4)
        return run

    def arms_in_order(self, arms, looks, label, done=None, deadline=None, arm_s=0.0):
        # rounds with the baseline first, so that each round's ratio is the script's
        res = {name: [] for name, _ in arms}
        for r in range(looks[-1]):
            for name, fn in arms:
                res[name].append(fn())
            if done is not None and r + 1 in looks and done(res):
                break
        return res

    monkeypatch.setattr(Measurer, "trial_for", lambda self, cfg: SimpleNamespace(
        tuned=cfg.num_workers > 0, first_step_s=None))
    monkeypatch.setattr(Measurer, "_arm", arm)
    monkeypatch.setattr(Measurer, "_rounds", arms_in_order)
    m = Measurer(None, Plan.quick(), min_gain=0.03, progress=None)
    c, _ = m.compare(TrainConfig(num_workers=0), TrainConfig(num_workers=2), "before/after",
                     rounds=4, confirm=1.0)
    assert c.rounds == rounds and c.interval is not None
    assert c.interval.above(1.0) == confirmed
    if rounds == 8:  # the first 4 alone left it open
        script, now["ratio"] = iter(ratios[:4]), 1.0
        c4, _ = m.compare(TrainConfig(num_workers=0), TrainConfig(num_workers=2), "b/a",
                          rounds=4)
        assert c4.rounds == 4 and c4.interval is not None
        assert c4.interval.lo <= 1.0 < c4.interval.ratio
