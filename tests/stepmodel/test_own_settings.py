"""A change of workers read against the workers' model at the run's own settings
(diagnose/stepmodel/prediction.py, ``Predictor._own_settings_scale``): on the builder run
of tests/fixes/test_threads.py (6 workers beside torch's 2 threads on 2 CPUs, 3.5 ms a
step), where the model, given the run's own 6 workers, replays 3.2 ms, not 3.5."""

from __future__ import annotations

import pytest

from diagnose.fixes.catalog.threads import threads
from diagnose.fixes.catalog.workers import num_workers
from diagnose.stepmodel.calibrate import replayed_step_ms
from diagnose.stepmodel.prediction import Prediction, Predictor
from tests.fixes.steps import _facts, _model
from tests.fixes.test_threads import _worker_loader

RUN = dict(cpu_count=2, input_batch_bytes=1000, dataloader_num_workers=6,
           input_worker_handover_ms=0.2, torch_num_threads=2, proc_cpu_mean_pct=150.0,
           threads_one_thread_ratio=1.0, input_inprocess_batch_ms=2.0,
           input_worker_batch_ms=2.0)


def _replayed(p: Predictor, transform, change) -> float:
    """The changed step as the transform alone replays it, on the run's scale (ms)."""
    return replayed_step_ms(transform(p.g, change, p.facts)) / p.base_replay * p.steady_ms


def _step(p: Predictor, transform, change) -> float:
    got = p.predict_change(transform, change)
    assert isinstance(got, Prediction), got
    return got.step_ms


def test_another_count_of_workers_is_read_against_the_run_at_its_own(tmp_path) -> None:
    """The model replays the run's own 6 workers at 3.2 ms where the run took 3.5: its
    error there is the run's, not a change's. The run's own setting predicts the run's
    step (1.00x, not 1.09x), and 1 worker, replayed at 3.464 ms, is predicted 3.464 x
    3.5 / 3.2 = 3.789 ms: the same parts of the model (workers beside torch's threads as
    they are) on both sides."""
    m = _model(_worker_loader(), tmp_path)
    p = Predictor(m, _facts(m, **RUN))
    assert p.steady_ms == pytest.approx(3.5)
    assert _replayed(p, num_workers, {"num_workers": 6}) == pytest.approx(3.2, rel=0.01)
    assert _step(p, num_workers, {"num_workers": 6}) == pytest.approx(3.5, rel=0.01)
    one = _replayed(p, num_workers, {"num_workers": 1})
    assert one == pytest.approx(3.464, rel=0.01)
    assert _step(p, num_workers, {"num_workers": 1}) == pytest.approx(one * 3.5 / 3.2, rel=0.01)


def test_no_workers_or_another_thread_count_is_the_replay_as_it_is(tmp_path) -> None:
    """Batches made in the training process (nothing of the workers' model is on that
    side), or torch on one thread (the workers then meet other threads than the run's):
    the replay stands. Nor where the run's own workers are not known."""
    m = _model(_worker_loader(), tmp_path)
    p = Predictor(m, _facts(m, **RUN))
    assert _step(p, num_workers, {"num_workers": 0}) == pytest.approx(
        _replayed(p, num_workers, {"num_workers": 0}), rel=0.01)
    split = {"num_workers": 2, "intra_op_threads": 1}
    assert _step(p, threads, split) == pytest.approx(_replayed(p, threads, split), rel=0.01)
    blind = Predictor(m, _facts(m, **{**RUN, "dataloader_num_workers": None}))
    assert _step(blind, num_workers, {"num_workers": 1}) == pytest.approx(
        _replayed(blind, num_workers, {"num_workers": 1}), rel=0.01)
