"""A prediction's range (diagnose/stepmodel/prediction.py): the model's error on a change
(EFFECT_FLOOR plus EFFECT_ERROR, a share of the effect's log), the capture's noise, "may not help", and the
assumptions a prediction names where nothing measured them; on builder traces with answers
worked out by hand."""

from __future__ import annotations

import math

import pytest

from diagnose.fixes.catalog import workers as workers_unit
from diagnose.stepmodel.calibration import EFFECT_ERROR, EFFECT_FLOOR
from diagnose.stepmodel.prediction import Prediction, model_error, prediction_line, widened
from tests import modeltraces as mt
from tests.fixes.steps import _facts, _model

MEASURED = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
                input_worker_handover_ms=0.2, torch_num_threads=1, proc_cpu_mean_pct=180.0,
                input_worker_batch_ms=2.0, cpu_capacity=2.0, input_worker_send_ms=0.1,
                input_worker_start_ms=30.0, input_inprocess_batch_ms=2.0,
                input_worker_fork_copy_ms=3.0, dataloader_epoch_batches=1000)


def _predictor(tmp_path, **facts):
    from diagnose.stepmodel.prediction import Predictor

    m = _model(mt.cpu_loader(), tmp_path)
    return Predictor(m, _facts(m, **facts))


def test_the_range_is_the_effect_error_and_the_captures_noise(tmp_path) -> None:
    """cpu_loader with 2 workers: 3.0 -> 1.7 ms (tests/fixes/test_workers.py). A change of
    workers is widened by EFFECT_FLOOR["cpu"] + EFFECT_ERROR["cpu"] x ln(3.0 / 1.7) on
    each side, then by the capture's own relative noise (``rel``); the point lies inside."""
    p = _predictor(tmp_path, **MEASURED)
    got = p.predict_change(workers_unit.num_workers, {"num_workers": 2})
    assert isinstance(got, Prediction)
    w = EFFECT_FLOOR["cpu"] + EFFECT_ERROR["cpu"] * math.log(got.speedup)
    assert model_error(got.speedup, True) == pytest.approx(w)
    assert got.range == pytest.approx((got.step_ms * math.exp(-w) / (1 + p.rel),
                                       got.step_ms * math.exp(w) * (1 + p.rel)))
    assert got.range[0] < got.step_ms < got.range[1]
    # however noisy the capture, both ends stay above zero: the noise is a factor
    noisy = _predictor(tmp_path, **MEASURED)
    noisy.rel = 1.5
    wide = noisy.predict_change(workers_unit.num_workers, {"num_workers": 2})
    assert isinstance(wide, Prediction) and 0 < wide.range[0] < wide.step_ms < wide.range[1]
    # the speedups at its ends: base / high .. base / low, both sides of the point
    lo_x, hi_x = got.base_ms / got.range[1], got.base_ms / got.range[0]
    assert lo_x < got.speedup < hi_x


def test_the_captures_noise_is_the_mean_steps_standard_error(tmp_path) -> None:
    """The capture's noise is the standard error of the mean step the predictions start
    from: the clock's (``step_time_unprofiled_mean_error``) where it timed the steps, else
    the profiled steps' cv over sqrt(count); the range's parts give back its ends."""
    clocked = _predictor(tmp_path, **MEASURED, step_time_unprofiled_mean_error=0.04,
                         step_time_cv=0.5, step_count=4)
    saved = _predictor(tmp_path, **MEASURED, step_time_cv=0.5, step_count=4)
    replay = abs(_model(mt.cpu_loader(), tmp_path).error or 0.0)
    assert clocked.rel == pytest.approx(replay + 0.04)
    assert saved.rel == pytest.approx(replay + 0.5 / math.sqrt(4))
    got = clocked.predict_change(workers_unit.num_workers, {"num_workers": 2})
    assert isinstance(got, Prediction) and got.range_parts is not None
    parts = got.to_json()["range_parts"]
    assert parts["noise"] == pytest.approx(clocked.rel, abs=1e-4)
    assert parts["model_error"] == pytest.approx(model_error(got.speedup, True), abs=1e-4)
    assert widened(parts["low_ms"], parts["high_ms"], parts["model_error"], parts["noise"]) \
        == pytest.approx(got.range, rel=1e-3)


def test_a_change_that_saves_little_has_a_narrow_range(tmp_path) -> None:
    """A change that moves no CPU work is widened by a share of the effect: a saving of 1%
    of the step widens by far less than a saving of half of it."""
    p = _predictor(tmp_path, **MEASURED)
    small, big = p.per_step_saving({"x": 1}, 0.03), p.per_step_saving({"x": 1}, 1.5)
    rel = lambda q: q.range[1] / q.range[0]  # noqa: E731
    assert rel(small) < rel(big)
    assert small.range[0] == pytest.approx(
        small.step_ms * math.exp(-EFFECT_FLOOR["other"] - EFFECT_ERROR["other"]
                                 * math.log(small.speedup)) / (1 + p.rel))


def test_a_change_of_cpu_work_owns_the_models_floor() -> None:
    """The model's error on a change of CPU work has a floor (a change predicted to do
    nothing may do much: the tune rows say so), so even a null effect keeps a width; a
    change of nothing else predicted at 1.0x is exact but for the capture's noise."""
    assert model_error(1.0, True) == pytest.approx(EFFECT_FLOOR["cpu"]) and EFFECT_FLOOR["cpu"] > 0
    assert model_error(1.0, False) == pytest.approx(EFFECT_FLOOR["other"])
    assert model_error(2.0, True) == pytest.approx(
        EFFECT_FLOOR["cpu"] + EFFECT_ERROR["cpu"] * math.log(2.0))
    assert model_error(0.5, False) == pytest.approx(model_error(2.0, False))  # a slowdown too


def test_a_range_that_reaches_the_step_may_not_help() -> None:
    """A range whose slow end is the step as it is says "may not help", in the line and the
    JSON; one whose slow end is faster does not."""
    maybe = Prediction({"pin_memory": True}, 9.5, 10 / 9.5, (9.0, 10.2), 10.0)
    sure = Prediction({"pin_memory": True}, 8.0, 1.25, (7.5, 9.0), 10.0)
    assert maybe.may_not_help and not sure.may_not_help
    assert maybe.line().endswith("over its range): may not help")
    assert maybe.to_json()["may_not_help"] is True and "may_not_help" not in sure.to_json()
    assert prediction_line(maybe.to_json()).endswith("may not help")
    assert sure.line() == "predicted 10.0 -> 8.0 ms (1.25x; 1.11-1.33x over its range)"
    # a range wholly slower than the step as it is says so, as the JSON's ``slower``
    worse = Prediction({"num_workers": 1}, 12.5, 0.8, (10.5, 14.0), 10.0)
    assert worse.to_json()["slower"] is True
    assert worse.line().endswith("over its range): slower")
    assert prediction_line(worse.to_json()).endswith("over its range): slower")
    # the JSON's range is the changed step's ms; speedup_range is the same, as the line's
    assert sure.to_json()["range"] == [7.5, 9.0]
    assert sure.to_json()["speedup_range"] == [1.111, 1.333]
    # a bound's range has a slow end only: printed, and "may not help" where it reaches
    # the step as it is, in the line and the JSON
    bound = Prediction({"x": 1}, 9.5, 1.05, (9.0, 10.2), 10.0, at_least=True)
    assert not bound.may_not_help and bound.to_json()["may_not_help"] is True
    assert bound.line() == prediction_line(bound.to_json()) == (
        "predicted at least 1.05x (10.0 -> at most 9.5 ms; at least 0.98x over its range): "
        "may not help")
    firm = Prediction({"x": 1}, 8.0, 1.25, (7.5, 9.0), 10.0, at_least=True)
    assert "may_not_help" not in firm.to_json()
    assert firm.line() == prediction_line(firm.to_json()) == (
        "predicted at least 1.25x (10.0 -> at most 8.0 ms; at least 1.11x over its range)")
    # a bound under 1.02x promises nothing: said so, from the object and from its JSON
    low = Prediction({"x": 1}, 10.3, 0.97, (10.0, 12.0), 10.0, at_least=True)
    assert low.line() == prediction_line(low.to_json()) == (
        "predicted at least 0.97x (10.0 -> at most 10.3 ms; at least 0.83x over its range): "
        "may not help")
    # without a range, the bound alone
    assert prediction_line({"step_ms": 9.5, "speedup": 1.05, "at_least": True}) == (
        "predicted at least 1.05x (10.0 -> at most 9.5 ms)")
    # a range slower at both ends is flagged as such in the JSON
    worse = Prediction({"x": 1}, 15.2, 0.66, (12.4, 18.6), 10.0)
    assert worse.to_json()["slower"] is True and "slower" not in maybe.to_json()


def test_reach_is_the_speedup_at_the_ranges_fast_end() -> None:
    """A fix's reach (what ties fixes and configs) is base over the range's fast end; a
    bound, or a range without a fast end, reaches only its point."""
    assert Prediction({"x": 1}, 8.0, 1.25, (5.0, 9.0), 10.0).reach == pytest.approx(2.0)
    assert Prediction({"x": 1}, 8.0, 1.25, (5.0, 9.0), 10.0, at_least=True).reach == 1.25
    assert Prediction({"x": 1}, 8.0, 1.25, (0.0, 9.0), 10.0).reach == 1.25
    assert Prediction({"x": 1}, 8.0, 1.25, (9.0, 9.5), 10.0).reach == 1.25  # never below


def test_a_prediction_names_what_it_assumed_where_nothing_was_measured(tmp_path) -> None:
    """Without the hand-over rate, a worker's batch or the CPUs' capacity timed, the
    workers' prediction names each assumption; with them timed it names none."""
    p = _predictor(tmp_path, **MEASURED)
    measured = p.predict_change(workers_unit.num_workers, {"num_workers": 2})
    assert isinstance(measured, Prediction) and measured.assumed == ()
    assert "assumed" not in measured.to_json()
    bare = {k: v for k, v in MEASURED.items()
            if k not in ("input_worker_handover_ms", "input_worker_batch_ms", "cpu_capacity",
                         "input_worker_send_ms", "input_inprocess_batch_ms",
                         "input_worker_fork_copy_ms")}
    q = _predictor(tmp_path, **bare).predict_change(workers_unit.num_workers,
                                                    {"num_workers": 2})
    assert isinstance(q, Prediction)
    # the batch untimed, the new workers' start at each epoch is not known: left out, and said
    left = workers_unit.epoch_left_out(_predictor(tmp_path, **bare).facts, {"num_workers": 2})
    assert left is not None and left.startswith("the workers' start at each epoch is left out")
    assert set(q.assumed) == {*workers_unit.WORKER_ASSUMES.values(), left}
    assert q.to_json()["assumed"] == list(q.assumed)


def test_an_epoch_start_left_out_is_named_only_where_the_change_alters_it(tmp_path) -> None:
    """A change of workers whose epoch starts cannot be told names what it leaves out: the
    new loader's starts, or the run's own it ends, and why; a change that keeps the workers,
    persistent workers, or starts that are known, name nothing."""
    from diagnose.stepmodel.facts import Facts

    left = workers_unit.epoch_left_out
    base = Facts(cpu_count=2, dataloader_num_workers=0, dataloader_epoch_batches=100)
    assert left(base, {"intra_op_threads": 1}) is None  # no change of workers
    assert left(base, {"num_workers": 0}) is None  # none before or after: nothing starts
    assert left(base, {"num_workers": 2, "persistent_workers": True}) is None  # once
    new = left(base, {"num_workers": 2})
    assert new is not None and "a worker's start and its batch" in new
    unknown_len = left(base.replace(dataloader_epoch_batches=None), {"num_workers": 2})
    assert unknown_len is not None and "len(loader)" in unknown_len
    timed = base.replace(input_worker_start_ms=30.0, input_worker_batch_ms=2.0)
    assert left(timed, {"num_workers": 2}) is None
    # the run's own workers untimed, a change to none leaves their starts out
    own = Facts(cpu_count=2, dataloader_num_workers=4, dataloader_persistent_workers=False,
                dataloader_epoch_batches=100)
    ended = left(own, {"num_workers": 0})
    assert ended is not None and ended.startswith("the run's own workers' start")
    assert "left out" in ended
    # where the measured mean step holds them, they stay in the predicted one: said so
    kept = left(own.replace(step_time_unprofiled_steps=150), {"num_workers": 0})  # > 100
    assert kept is not None and "is kept in the predicted one" in kept


def test_an_untimed_thread_cost_spans_its_physical_ends(tmp_path) -> None:
    """Without the thread timing, a change to one thread is ranged from torch's ops that do
    not scale at all (one thread costs them nothing) to ops that scale fully (twice as long
    on one of two threads): the model's ends hold the step each of those gives."""
    from diagnose.fixes.catalog import threads as threads_unit

    facts = {**MEASURED, "torch_num_threads": 2}
    change = {"intra_op_threads": 1}
    got = _predictor(tmp_path, **facts).predict_change(threads_unit.threads, change)
    assert isinstance(got, Prediction) and got.range_parts is not None
    assert "torch's ops scale fully with their threads" in got.assumed
    ends = [_predictor(tmp_path, **facts, threads_one_thread_ratio=r).predict_change(
        threads_unit.threads, change) for r in (1.0, 2.0)]
    assert all(isinstance(e, Prediction) for e in ends)
    none, full = (e.step_ms for e in ends)  # type: ignore[union-attr]
    assert full > 1.2 * none  # the two ends are apart: the range has something to hold
    assert got.range_parts["low_ms"] == pytest.approx(min(none, got.step_ms), rel=1e-6)
    assert got.range_parts["high_ms"] == pytest.approx(max(full, got.step_ms), rel=1e-6)
    # timed, the ratio is an input with its own noise: no physical ends are added
    timed = ends[1]
    assert timed.range_parts is not None  # type: ignore[union-attr]
    assert timed.range_parts["high_ms"] < 1.01 * timed.step_ms  # type: ignore[union-attr]
