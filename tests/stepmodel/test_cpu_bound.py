"""The CPU bound on a change that runs work beside the main process (diagnose/stepmodel/
prediction.py, ``Predictor._predict``): the run as it is meets its own bound. A builder run
makes each batch in process (2000 us) and then 3000 us of ops on torch's 2 threads, 5 ms a
step, on 2 CPUs; its capacity timing said the CPUs gave 1 CPU's worth at once. Answers
worked out by hand."""

from __future__ import annotations

import pytest

from diagnose.fixes import FIXES
from diagnose.stepmodel.calibrate import replayed_step_ms as _step
from diagnose.stepmodel.host import cpu_bound_ms
from diagnose.stepmodel.prediction import Predictor
from tests import modeltraces as mt
from tests.fixes.steps import _facts, _model

RUN = dict(cpu_count=2, torch_num_threads=2, dataloader_num_workers=0,
           input_batch_bytes=1000, input_worker_handover_ms=0.2, input_worker_batch_ms=2.0,
           proc_cpu_mean_pct=100.0)
ONE_WORKER = {"num_workers": 1}


def _predictor(tmp_path, capacity: float) -> Predictor:
    m = _model(mt.cpu_loader(compute_us=3000.0), tmp_path)
    return Predictor(m, _facts(m, cpu_capacity=capacity, **RUN))


def test_a_bound_above_the_run_itself_is_scaled_to_it(tmp_path) -> None:
    """At 1 CPU's worth, the run's own bound is (3000 us x 2 threads + 2000 us of loading)
    / 1 = 8 ms, above the 5 ms it took: the CPUs did at least 8 / 5 of that. The bound on
    one worker is taken at 5 / 8 of what its inputs give, and the range's slow end keeps
    the bound as they give it."""
    p = _predictor(tmp_path, 1.0)
    now = cpu_bound_ms(p.g, p.g, {}, p.facts)
    assert now == pytest.approx(8.0, rel=0.02)
    assert p.base_replay == pytest.approx(5.0, rel=0.02)
    g2 = FIXES["num_workers"].transform(p.g, ONE_WORKER, p.facts)
    raw = cpu_bound_ms(p.g, g2, ONE_WORKER, p.facts)
    got = p.predict_change(FIXES["num_workers"].transform, ONE_WORKER)
    assert raw == pytest.approx(8.2, rel=0.05)  # 6000 + 2000 made + 200 handed over, / 1
    replayed = _step(g2) / p.base_replay * got.base_ms
    assert got.step_ms == pytest.approx(max(replayed, raw * 5 / 8), rel=0.01)
    assert got.step_ms < 0.7 * raw  # the bound as its inputs give it: 8.2 ms
    assert got.range[1] >= raw


def test_a_bound_the_run_meets_is_kept_as_it_is(tmp_path) -> None:
    """At 2 CPUs' worth the run's bound is 4 ms, under its 5 ms: nothing is scaled, and the
    point is the longer of the replay and the bound as its inputs give it."""
    p = _predictor(tmp_path, 2.0)
    assert cpu_bound_ms(p.g, p.g, {}, p.facts) == pytest.approx(4.0, rel=0.02)
    g2 = FIXES["num_workers"].transform(p.g, ONE_WORKER, p.facts)
    raw = cpu_bound_ms(p.g, g2, ONE_WORKER, p.facts)
    got = p.predict_change(FIXES["num_workers"].transform, ONE_WORKER)
    replayed = _step(g2) / p.base_replay * got.base_ms
    assert got.step_ms == pytest.approx(max(replayed, raw), rel=0.01)
