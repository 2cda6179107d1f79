"""The batched fetch and gc.freeze units' transforms (diagnose/fixes/catalog/fetch.py,
config.py), alone and composed, on small builder traces worked out by hand."""

from __future__ import annotations

import pytest

from diagnose.fixes import FIXES
from diagnose.fixes.catalog import config as config_unit
from diagnose.fixes.catalog import fetch as fetch_unit
from diagnose.fixes.catalog import workers as workers_unit
from diagnose.stepmodel import calibration as cal
from diagnose.stepmodel.graph import TaskKind
from diagnose.stepmodel.prediction import Prediction, Predictor
from tests import modeltraces as mt
from tests.fixes.steps import _facts, _median, _model


def _gc_facts(m, **kw):
    """cpu_loader's run (2000 us fetch + 1000 us ops a step) whose clock measured 0.9 ms of
    collector pauses a step, 0.6 of them inside the wait for the batch (the loader's 1.5 ms
    fetch + 0.5 ms collate hold them)."""
    return _facts(m, gc_pause_ms=0.9, gc_pause_loader_ms=0.6, input_fetch_ms=1.5,
                  input_collate_ms=0.5, input_batched_fetch_ms=0.2, **kw)


def test_gc_pauses_come_off_where_the_clock_saw_them(tmp_path):
    """The loader's 0.6 ms come off its 2 ms (x 0.7: 1400 us), the other 0.3 ms off the ops'
    1000 us (700 us): 2100 us, 1.43x. A capture that did not say where the pauses fell
    takes all 0.9 ms off the thread's 3000 us in proportion (the same 2100 us here)."""
    m = _model(mt.cpu_loader(), tmp_path)
    g = FIXES["gc_freeze"].transform(m.graph, {"gc_freeze": True}, _gc_facts(m))
    assert _median(g) == pytest.approx(2.1, abs=0.01)
    fetch = g.is_kind(TaskKind.FETCH)
    assert float(g.dur[fetch].sum()) / g.n_steps == pytest.approx(1400, abs=1)
    old = _facts(m, gc_pause_ms=0.9)
    assert _median(FIXES["gc_freeze"].transform(m.graph, {"gc_freeze": True}, old)) == \
        pytest.approx(2.1, abs=0.01)
    assert isinstance(FIXES["gc_freeze"].transform(m.graph, {"gc_freeze": True},
                                                   _facts(m)), str)


def test_a_loop_without_a_dataloader_is_modelled_and_gc_freeze_predicted(tmp_path):
    """Host work alone (no DataLoader, no device): the model replays it as measured, and
    the full collections' 0.6 ms a step come off its 3000 us: 2400 us, 1.25x."""
    m = _model(mt.cpu_no_loader(), tmp_path)
    assert m.to_json()["host_only"] is True
    facts = _facts(m, gc_pause_ms=0.9, gc_pause_full_ms=0.6)
    g = FIXES["gc_freeze"].transform(m.graph, {"gc_freeze": True}, facts)
    assert _median(g) == pytest.approx(2.4, abs=0.01)
    p = Predictor(m, facts).predict_change(FIXES["gc_freeze"].transform, {"gc_freeze": True})
    assert isinstance(p, Prediction) and p.speedup == pytest.approx(1.25, abs=0.01)


def test_gc_freeze_spares_the_young_collections(tmp_path):
    """Of the 0.9 ms of pauses a step, 0.6 ms were full collections (0.4 of them inside the
    wait for a batch): only those go. The loader's 2000 us lose 0.4 ms (x 0.8: 1600 us),
    the ops' 1000 us 0.2 ms (800 us); the young collections' 0.3 ms stay: 2400 us, 1.25x,
    not the 1.43x of taking every pause off."""
    m = _model(mt.cpu_loader(), tmp_path)
    facts = _gc_facts(m, gc_pause_full_ms=0.6, gc_pause_full_loader_ms=0.4)
    g = FIXES["gc_freeze"].transform(m.graph, {"gc_freeze": True}, facts)
    assert _median(g) == pytest.approx(2.4, abs=0.01)
    fetch = g.is_kind(TaskKind.FETCH)
    assert float(g.dur[fetch].sum()) / g.n_steps == pytest.approx(1600, abs=1)
    none = _gc_facts(m, gc_pause_full_ms=0.0, gc_pause_full_loader_ms=0.0)
    assert "no full collection" in FIXES["gc_freeze"].transform(
        m.graph, {"gc_freeze": True}, none)


def test_a_batched_fetch_then_gc_freeze_compose(tmp_path):
    """A batched fetch takes the 2000 us loading to 200 us (one 0.2 ms call, timed): the
    collector's 0.6 ms of pauses inside the loading go with it (one indexing call trips
    none). gc.freeze after it takes off the ops' 0.3 ms (700 us): 900 us, 1.33x over the
    batched fetch's 1200 us, not the 3000 / 2100 it gives alone, nor 1200 / 840 with the
    loading's pauses taken off the batched fetch again. In the other order the same
    900 us: the freeze takes the loading to 1400 us and the ops to 700, and the batched
    fetch then makes the loading its 200 us, not 1400 x 0.1."""
    m = _model(mt.cpu_loader(), tmp_path)
    facts = _gc_facts(m)
    p = Predictor(m, facts)
    batched = p.predict_steps([(fetch_unit.batched_fetch, {"batched_fetch": True})])
    both = p.predict_steps([(fetch_unit.batched_fetch, {"batched_fetch": True}),
                            (config_unit.remove_gc_pauses, {"gc_freeze": True})])
    assert isinstance(batched, Prediction) and isinstance(both, Prediction)
    assert batched.step_ms == pytest.approx(1.2, abs=0.01)
    assert both.step_ms == pytest.approx(0.9, abs=0.01)
    assert both.change == {"batched_fetch": True, "gc_freeze": True}
    frozen = p.predict_steps([(config_unit.remove_gc_pauses, {"gc_freeze": True})])
    assert isinstance(frozen, Prediction) and frozen.step_ms == pytest.approx(2.1, abs=0.01)
    other = p.predict_steps([(config_unit.remove_gc_pauses, {"gc_freeze": True}),
                             (fetch_unit.batched_fetch, {"batched_fetch": True})])
    assert isinstance(other, Prediction) and other.step_ms == pytest.approx(0.9, abs=0.01)
    assert p.predict_steps([]).step_ms == pytest.approx(p.base_ms)


def test_a_batched_fetch_does_not_count_the_loaders_own_work_twice(tmp_path):
    """cpu_loader: 2000 us of fetch and collate a step beside 1000 us of ops. The loop
    waited 2.2 ms a step for its batch (0.2 ms of the loader's own work beyond the fetch
    and collate, which the step keeps), and the batched fetch timed 0.5 ms through a
    loader's next(), that 0.2 ms in it: the fetch becomes 300 us, a 1300 us step (1500
    counted twice). Without the wait timed, the timing is taken whole."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(input_fetch_ms=1.5, input_collate_ms=0.5, input_batched_fetch_ms=0.5,
              step_time_unprofiled_mean_ms=3.0)
    g = FIXES["batched_fetch"].transform(m.graph, {"batched_fetch": True}, _facts(
        m, dataloader_wait_unprofiled_share=2.2 / 3.0, **kw))
    assert _median(g) == pytest.approx(1.3, abs=0.01)
    whole = FIXES["batched_fetch"].transform(m.graph, {"batched_fetch": True},
                                             _facts(m, **kw))
    assert _median(whole) == pytest.approx(1.5, abs=0.01)


def test_a_batched_fetch_timed_before_the_loop_is_put_at_the_loops_pace(tmp_path):
    """cpu_loader: 2000 us of fetch and collate a step beside 1000 us of ops. Before the
    loop, the batched fetch timed 0.4 ms and the same batches fetched a sample at a time
    1.6 ms: the host ran 1.25x faster than the loop, whose median fetch and collate of a
    batch was 2.0 ms. At the loop's pace the batched fetch is 0.5 ms: a 1500 us step, not
    the 1400 us of taking the timing as it came. Without the paired timing, or without
    the loop's median, it is taken as timed."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(input_fetch_ms=1.5, input_collate_ms=0.5, input_batched_fetch_ms=0.4)
    paced = FIXES["batched_fetch"].transform(m.graph, {"batched_fetch": True}, _facts(
        m, input_batched_fetch_per_sample_ms=1.6, input_loading_median_ms=2.0, **kw))
    assert _median(paced) == pytest.approx(1.5, abs=0.01)
    for partial in ({"input_batched_fetch_per_sample_ms": 1.6},
                    {"input_loading_median_ms": 2.0}, {}):
        g = FIXES["batched_fetch"].transform(m.graph, {"batched_fetch": True},
                                             _facts(m, **partial, **kw))
        assert _median(g) == pytest.approx(1.4, abs=0.01)


def test_a_batched_fetch_wakes_the_ops_as_the_session_timed_them(tmp_path):
    """cpu_loader: 2000 us of fetch and collate a step beside 1000 us of ops; the batched
    fetch timed 0.4 ms. The session timed the model's work 1.25x as long after a batch
    fetched a sample at a time as after a batched one: the ops become 800 us, a 1200 us
    step. A ratio past WAKE_RATIO_MAX is taken at it; one under 1 (noise) changes
    nothing, as does none."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(input_fetch_ms=1.5, input_collate_ms=0.5, input_batched_fetch_ms=0.4)

    def step(**more):
        g = FIXES["batched_fetch"].transform(m.graph, {"batched_fetch": True},
                                             _facts(m, **kw, **more))
        return _median(g)

    assert step(input_batched_fetch_work_ratio=1.25) == pytest.approx(1.2, abs=0.01)
    assert step(input_batched_fetch_work_ratio=3.0) == pytest.approx(
        0.4 + 1.0 / cal.WAKE_RATIO_MAX, abs=0.01)
    assert step(input_batched_fetch_work_ratio=0.9) == pytest.approx(1.4, abs=0.01)
    assert step() == pytest.approx(1.4, abs=0.01)


def test_a_transform_after_another_starts_from_its_settings(tmp_path):
    """A transform applied after another reads the settings the first one made as the run's
    own: after a batched fetch (in process), num_workers=1 prices its worker at the
    batched fetch's 200 us a batch (+ 0.2 ms each side of the hand-over) beside the
    1000 us of ops (a 1200 us step)."""
    m = _model(mt.cpu_loader(), tmp_path)
    p = Predictor(m, _gc_facts(m, cpu_count=2, input_batch_bytes=1000, torch_num_threads=1,
                               dataloader_num_workers=0, input_worker_handover_ms=0.2,
                               proc_cpu_mean_pct=100.0))
    both = p.predict_steps([(fetch_unit.batched_fetch, {"batched_fetch": True}),
                            (workers_unit.num_workers, {"num_workers": 1})])
    assert isinstance(both, Prediction)
    assert both.step_ms == pytest.approx(1.2, abs=0.02)
    assert both.change == {"batched_fetch": True, "num_workers": 1}


def test_a_batched_fetch_without_its_timings_says_why(tmp_path):
    """No prediction without the timings, and the reason fits the capture: a saved trace
    was never timed; a live run with workers fetches where the clock does not look; a live
    in-process run whose timing before the loop did not run says so."""
    m = _model(mt.cpu_loader(), tmp_path)

    def why(**kw):
        got = FIXES["batched_fetch"].transform(m.graph, {"batched_fetch": True},
                                               _facts(m, **kw))
        assert isinstance(got, str)
        return got

    assert "a live capture times them" in why()
    assert "workers" in why(cpu_count=2, dataloader_num_workers=3)
    assert "live capture" not in why(cpu_count=2, dataloader_num_workers=3)
    assert "one batched fetch was not timed" in why(cpu_count=2, dataloader_num_workers=0,
                                                    input_fetch_ms=1.5, input_collate_ms=0.5)
    assert "fetch and collate were not timed" in why(cpu_count=2, dataloader_num_workers=0,
                                                     input_batched_fetch_ms=0.2)
