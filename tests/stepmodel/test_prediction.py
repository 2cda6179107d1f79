"""The Predictor's calibration of a live capture's replay to the unprofiled step
(diagnose/stepmodel/prediction.py), on small builder traces worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.fixes.catalog import fetch as fetch_unit
from diagnose.stepmodel import step_model
from diagnose.stepmodel.facts import Facts
from diagnose.stepmodel.graph import Tag, TaskKind, replay
from diagnose.stepmodel.prediction import Predictor
from tests import modeltraces as mt


def _model(b, tmp_path):
    m = step_model(mt.as_trace(b, tmp_path))
    assert m.graph is not None, m.why
    assert abs(m.error) < 0.01
    return m


def _median(g) -> float:
    return float(np.median(replay(g).step_ms))


def _facts(m, **kw) -> Facts:
    return Facts.from_metrics({"step_time_median_ms": float(np.median(m.graph.steps_measured))
                               / 1e3, "step_count": m.graph.n_steps, **kw})


def _loader_model(tmp_path, waits: list[float], workers: int, ops_us: float,
                  opt_kernels: int = 0):
    """The step model of a CPU trace whose steps wait ``waits[i]`` us for a batch from
    ``workers`` workers, then run ``ops_us`` of ops (and an optimizer.step() of
    ``opt_kernels`` ops of 200 us)."""
    from tests import tracebuilder as tb

    b = tb.TraceBuilder(device=None)
    for w in waits:
        with b.step():
            b.dataloader(w, workers=workers)
            b.cpu(ops_us, "aten::addmm")
            if opt_kernels:
                b.optimizer_step(kernels=opt_kernels, kernel_dur=200.0)
    m = step_model(mt.as_trace(b, tmp_path))
    assert m.graph is not None
    return m


def test_calibration_keeps_the_host_work_of_a_loader_bound_run(tmp_path):
    """Two workers that set the pace: each step waits ~3 ms for its batch (the first one
    was ready: 200 us, the hand-over), then 1000 us of ops; the window's steps take about
    4200 us. The clock timed 0.8x that without the profiler. The batches arrive at that
    pace (their arrivals 0.8x as far into the window), and the ops the trace measured stay
    as they are: the step is the arrivals', not the ops'. Scaling the ops alone could not
    get there (they are off the critical path) and must not shrink them away: a change
    that replaces the workers keeps those 1000 us of work."""
    m = _loader_model(tmp_path, [200] + [3000] * 5, 2, 1000)
    prof = float(np.median(m.graph.steps_measured)) / 1e3
    facts = _facts(m, step_time_unprofiled_mean_ms=0.8 * prof)
    p = Predictor(m, facts)
    assert p.base_replay == pytest.approx(0.8 * _median(m.graph), rel=0.02)
    ops = p.g.is_kind(TaskKind.HOST) & (p.g.res == p.g.main)
    assert float(p.g.dur[ops].sum()) / p.g.n_steps >= 0.5 * 1000


def _main_per_step(p, kind, also=None) -> float:
    """ms a step of the calibrated graph's main-thread tasks of ``kind`` (and ``also``)."""
    m = p.g.is_kind(kind) & (p.g.res == p.g.main)
    if also is not None:
        m &= also
    return float(p.g.dur[m].sum()) / p.g.n_steps / 1e3


def test_calibration_takes_the_waits_for_workers_the_clock_timed(tmp_path):
    """Six workers whose batches came just as the profiled loop asked for them: each step
    waited 400 us (the first 100 us: the hand-over of a ready batch), then 3000 us of ops.
    The clock timed 2720 us a step without the profiler, 1000 us of them waiting for
    batches (beside the faster loop the workers fell behind). The calibrated graph waits
    those 1000 us a step and its ops fill the rest, 1720 us: the arrivals the window saw
    (when the profiled loop asked for them) no longer say how long it waited. From the
    arrivals alone (no clock figure for the wait), the ops stay at 0.8x, 2400 us."""
    m = _loader_model(tmp_path, [100] + [400] * 5, 6, 3000)
    timed = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=2.72, input_worker_wait_ms=1.0))
    assert timed.base_replay == pytest.approx(2.72, rel=0.01)
    assert _main_per_step(timed, TaskKind.DL_WAIT) == pytest.approx(1.0, rel=0.01)
    assert _main_per_step(timed, TaskKind.HOST) == pytest.approx(1.72, rel=0.02)
    assert not timed.g.is_kind(TaskKind.PRODUCER).any()
    arrivals = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=2.72))
    assert _main_per_step(arrivals, TaskKind.HOST) == pytest.approx(2.4, rel=0.02)


def test_calibration_takes_the_steady_steps_own_wait_where_epochs_start(tmp_path):
    """The same run, whose workers start again at each 16-batch epoch: the clock's mean
    step, 5 ms, holds the epochs' starts; its steady steps (no epoch's start) 2.72 ms,
    which the predictions replay. The mean wait for a batch, 2.5 ms, holds the starts'
    long waits too; the steady steps waited 1 ms of their 2.72. The calibrated graph
    waits the steady 1 ms, its ops fill the other 1.72 ms; the mean wait beside the steady
    step would leave the ops 0.22 ms."""
    m = _loader_model(tmp_path, [100] + [400] * 5, 6, 3000)
    run = dict(step_time_unprofiled_mean_ms=5.0, step_time_steady_mean_ms=2.72,
               input_worker_wait_ms=2.5, dataloader_num_workers=6,
               dataloader_persistent_workers=False, dataloader_epoch_boundary_ms=36.0,
               dataloader_epoch_batches=16)
    p = Predictor(m, _facts(m, **run, dataloader_wait_steady_share=1.0 / 2.72))
    assert p.steady_ms == 2.72
    assert _main_per_step(p, TaskKind.DL_WAIT) == pytest.approx(1.0, rel=0.01)
    assert _main_per_step(p, TaskKind.HOST) == pytest.approx(1.72, rel=0.02)
    # without the steady steps' share the mean wait stands (saved contexts of old)
    old = Predictor(m, _facts(m, **run))
    assert _main_per_step(old, TaskKind.DL_WAIT) > 2.0


def test_calibration_gives_each_step_the_clocks_mean_loading(tmp_path):
    """In-process loading of 2000 us a step, but one of the window's 3 steps met a
    collector's pause in it (12000 us), then 1000 us of ops each. The clock's 40 steps
    timed 5000 us of fetch and collate and a 6000 us step on average: the pause fell in one
    step of a few. Every calibrated step loads 5000 us and its ops keep the other 1000 us;
    fitted to the median step with the window's loading as it fell, the ops were squeezed
    to the profiler's floor, and a batched fetch of 500 us was predicted 0.5 + 0.5 ms a
    step where the ops alone take 1 ms."""
    from tests import tracebuilder as tb

    b = tb.TraceBuilder(device=None)
    for w in (2000, 12000, 2000):
        with b.step():
            b.dataloader(w)
            b.cpu(1000, "aten::addmm")
    m = _model(b, tmp_path)
    facts = _facts(m, step_time_unprofiled_mean_ms=6.0, input_fetch_ms=4.0,
                   input_collate_ms=1.0, input_batched_fetch_ms=0.5)
    p = Predictor(m, facts)
    assert p.base_replay == pytest.approx(6.0, rel=0.01)
    fetch = p.g.is_kind(TaskKind.FETCH) & (p.g.step >= 0)
    per = np.bincount(p.g.step[fetch], weights=p.g.dur[fetch], minlength=p.g.n_steps)
    assert per == pytest.approx([5000.0] * 3, rel=0.01)
    assert _main_per_step(p, TaskKind.HOST) + _main_per_step(p, TaskKind.LAUNCH) \
        == pytest.approx(1.0, rel=0.03)
    batched = p.predict_change(fetch_unit.batched_fetch, {"batched_fetch": True})
    assert batched.step_ms == pytest.approx(1.5, rel=0.05)


def test_calibration_sets_the_optimizer_the_clock_timed(tmp_path):
    """Steps of a 200 us wait for a batch, 3000 us of ops and an optimizer.step() of 10 ops
    x 200 us (the profiler's cost in each of them). The clock timed 3800 us a step without
    the profiler, 600 us of them in optimizer.step(): the calibrated graph's optimizer
    holds those 600 us a step, the wait and the model's ops the rest of the step (3200 us).
    Without the clock's optimizer figure, both shrink alike."""
    m = _loader_model(tmp_path, [200] * 5, 2, 3000, opt_kernels=10)
    g = m.graph
    opt = (g.res == g.main) & ((g.tag & int(Tag.OPTIMIZER)) > 0)

    timed = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=3.8,
                                optimizer_unprofiled_ms=0.6))
    assert timed.base_replay == pytest.approx(3.8, rel=0.01)
    assert _main_per_step(timed, TaskKind.HOST, opt) == pytest.approx(0.6, rel=0.01)
    assert _main_per_step(timed, TaskKind.HOST, ~opt) == pytest.approx(3.0, rel=0.03)
    plain = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=3.8))
    assert _main_per_step(plain, TaskKind.HOST, opt) > 1.0


def test_calibration_takes_the_profilers_cost_off_per_event(tmp_path):
    """A step (after a 200 us in-process fetch) of one large op (4000 us) and 40 small
    ones (100 us each: the optimizer's kind): ~8200 us profiled. The clock timed 7200 us without the profiler: 800 us of
    recording cost over 41 events, ~19.5 us each. The small ops lose 40 x 19.5 = 780 us of
    their 4000, the large one ~20 us; a uniform scale would have taken 400 from each."""
    from tests import tracebuilder as tb

    b = tb.TraceBuilder(device=None)
    for _ in range(5):
        with b.step():
            b.dataloader(200)
            b.cpu(4000, "aten::addmm")
            b.optimizer_step(kernels=40, kernel_dur=100.0)
    m = _model(b, tmp_path)
    prof = float(np.median(m.graph.steps_measured)) / 1e3
    p = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=0.9 * prof))
    g = p.g
    assert p.base_replay == pytest.approx(0.9 * prof, rel=0.01)
    main = (g.res == g.main) & g.is_kind(TaskKind.HOST)
    opt = main & ((g.tag & int(Tag.OPTIMIZER)) > 0)
    fb = main & ((g.tag & int(Tag.FORWARD_BACKWARD)) > 0)
    cut_opt = float(m.graph.dur[opt].sum() - g.dur[opt].sum()) / g.n_steps
    cut_fb = float(m.graph.dur[fb].sum() - g.dur[fb].sum()) / g.n_steps
    assert cut_opt > 10 * cut_fb > 0
    assert float(g.events[opt].sum()) / g.n_steps >= 40


def test_a_saved_traces_convolution_kernels_say_the_model_convolves() -> None:
    """A saved trace names no layers, but its cuDNN kernels show convolutions: the
    convolution fixes (channels_last, cudnn.benchmark) apply on a CUDA device, rather than
    "does not apply: needs a convolution net". What the live session saw of the layers
    wins."""
    from diagnose.fixes import FIXES
    from diagnose.fixes import TrainConfig as Config
    from diagnose.stepmodel.facts import Facts

    trace = Facts.from_metrics({"conv_kernel_ms_per_step": 12.0, "device_cc_major": 7})
    assert trace.convolutions and trace.on_cuda
    assert FIXES["channels_last"].applies(Config(), trace)
    assert FIXES["cudnn_benchmark"].applies(Config(), trace)
    none = Facts.from_metrics({"conv_kernel_ms_per_step": 0.0, "device_cc_major": 7})
    assert not FIXES["channels_last"].applies(Config(), none)
    live = Facts.from_metrics({"conv_kernel_ms_per_step": 12.0, "model_has_conv": False,
                               "device_cc_major": 7})
    assert not live.convolutions
