"""The threads unit's transform (diagnose/fixes/catalog/threads.py): torch's intra-op
threads split against the loader's workers, and the thread scaling it rests on."""

from __future__ import annotations

import pytest

from diagnose.fixes import FIXES
from diagnose.fixes.catalog import threads as threads_unit
from diagnose.stepmodel import host
from diagnose.stepmodel.facts import Facts
from diagnose.stepmodel.graph import TaskKind, replay
from diagnose.stepmodel.prediction import Prediction, noise_ends
from tests import modeltraces as mt
from tests.fixes.steps import _facts, _median, _model, _predict


def test_thread_scale_from_the_timed_forward_and_backward():
    """Amdahl from two timings: 1.5x as long on one thread as on two means half of the
    two-thread time scales (p = 0.5 / 0.5 = 1 in units of it, serial 0.5): one thread
    gives 0.5 + 1 = 1.5. Where the model's work is half of the main thread's own work,
    the rest (optimizer, Python) does not scale: 1 + 0.5 x 0.5 = 1.25."""
    facts = Facts(threads_one_thread_ratio=1.5, torch_num_threads=2, model_work_quiet_ms=1.0)
    assert host.thread_scale(facts, 1) == pytest.approx(1.5)
    assert host.thread_scale(facts, 2) == pytest.approx(1.0)
    assert host.thread_scale(facts, 1, host_ms=2.0) == pytest.approx(1.25)
    assert host.thread_scale(Facts(torch_num_threads=2), 1) is None  # not timed: no scale


def test_one_thread_timed_faster_is_taken_as_timed():
    """Beside another busy process torch's threads wait for a CPU it holds: the forward and
    backward took 0.69x as long on one thread. One thread is then that (Amdahl, which has no
    room below 1, would say 1.0); the work that does not scale stays; a thread count that
    was not timed gets no gain."""
    facts = Facts(threads_one_thread_ratio=0.69, torch_num_threads=4, model_work_quiet_ms=1.0)
    assert host.thread_scale(facts, 1) == pytest.approx(0.69)
    assert host.thread_scale(facts, 1, host_ms=2.0) == pytest.approx(1 - 0.5 * 0.31)
    assert host.thread_scale(facts, 2) == pytest.approx(1.0)


def test_one_thread_is_never_faster_than_it_was_timed_alone():
    """A host busy with another process made the work on torch's 2 threads take 435 ms
    where one thread took 32.7 ms (ratio 0.075): the main thread's 40 ms of work on one
    thread is still at least those 32.7 ms (ratio 0.82), not 40 x 0.075 = 3 ms. A sound
    timing (1.5x on one thread) is above that floor and unchanged."""
    busy = Facts(threads_one_thread_ratio=0.075, torch_num_threads=2,
                 model_work_quiet_ms=435.0, model_work_one_thread_ms=32.7)
    assert host.thread_scale(busy, 1, host_ms=40.0) == pytest.approx(32.7 / 40.0)
    assert host.thread_scale(busy, 2, host_ms=40.0) == pytest.approx(1.0)
    sound = Facts(threads_one_thread_ratio=1.5, torch_num_threads=2, model_work_quiet_ms=20.0,
                  model_work_one_thread_ms=30.0)
    assert host.thread_scale(sound, 1, host_ms=40.0) == pytest.approx(1.25)


def test_a_thread_timing_too_noisy_to_use_gives_no_number(tmp_path):
    """The thread timing's rounds spread 86% (another process held a CPU while they ran):
    the threads split, which reads it, is not predicted and says why; at 14% it is."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(_SPLIT)
    noisy = _predict("threads", m, threads_noise_rel=0.86, **kw)
    assert isinstance(noisy, str) and "varied by 86% round to round" in noisy, noisy
    assert isinstance(_predict("threads", m, threads_noise_rel=0.14, **kw), Prediction)


def test_threads_split_with_the_timed_scaling_is_a_point_prediction(tmp_path):
    """cpu_loader on 2 CPUs, torch on both. The session timed the model's work 1.5x as
    long on one thread, and it is all of the main thread's 1000 us of ops. One worker and
    one thread: the main process needs 1000 x 1.5 + 200 (the hand-over the session timed)
    = 1700 us, the worker 2000 + 200 us (its side of the hand-over) a batch; the CPUs
    (1500 + 2200 + 200) / 2 = 1950 us: the step is 2200 us, 1.36x, stated as a
    prediction, not a bound. Two workers beside the one thread: three runnable threads on
    2 CPUs while they all run. Each side gets an equal part of the CPUs with those runnable
    beside it: the main thread's 1500 us of ops take (1 + 2 x 0.7) / 2 = 1.2x as long
    (the workers make batches 70% of the step each), 1800 + 200 = 2000 us a step, its ops
    running 90% of it; a worker's batch (1 + 0.9 + 0.7) / 2 = 1.3x as long, 2000 x 1.3 +
    200 = 2800 us (one every 1400 us, two at once: 70% of the step). The step, above the
    CPUs' 1950 us, is 2000 us: 1.5x, still the best split."""
    m = _model(mt.cpu_loader(), tmp_path)
    p = _predict("threads", m, cpu_count=2, input_batch_bytes=400_000,
                 dataloader_num_workers=0, input_worker_handover_ms=0.2,
                 torch_num_threads=2, proc_cpu_mean_pct=180.0,
                 threads_one_thread_ratio=1.5, model_work_quiet_ms=1.0)
    assert isinstance(p, Prediction)
    assert p.change == {"num_workers": 2, "intra_op_threads": 1}
    assert not p.at_least
    assert p.step_ms == pytest.approx(2.0, abs=0.01)
    one = dict(p.candidates)[(("intra_op_threads", 1), ("num_workers", 1))]
    assert one == pytest.approx(3.0 / 2.2, rel=0.01)


def _worker_loader(steps: int = 5):
    """6 workers on 2 CPUs: each step waits 500 us for its batch, then 3000 us of ops that
    the busy workers slowed 2x (the forward in the loop against the same forward alone)."""
    from tests import tracebuilder as tb

    b = tb.TraceBuilder(device=None)
    for _ in range(steps):
        with b.step():
            b.dataloader(500, workers=6)
            b.cpu(3000, "aten::addmm")
    return b


def _one_thread_split(tmp_path, batch_ms: float):
    """The run of _worker_loader (6 workers beside torch's 2 threads on 2 CPUs) split to
    one thread, a batch made alone in ``batch_ms``, handed over in 0.2 ms: (its model, its
    facts, the threads fix's prediction, which must be 2 workers, and 1 worker's speedup)."""
    m = _model(_worker_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=1000, dataloader_num_workers=6,
              input_worker_handover_ms=0.2, torch_num_threads=2, proc_cpu_mean_pct=150.0,
              threads_one_thread_ratio=1.0, input_inprocess_batch_ms=batch_ms)
    p = _predict("threads", m, **kw)
    assert isinstance(p, Prediction)
    assert p.change == {"num_workers": 2, "intra_op_threads": 1}
    return m, kw, p, dict(p.candidates)[(("intra_op_threads", 1), ("num_workers", 1))]


def test_fewer_workers_than_cpus_from_a_run_with_too_many(tmp_path):
    """The run above (3500 us steps), a batch made alone in 2 ms, handed over in 0.2 ms,
    ops that do not scale with threads. Its ops (the model's forward and backward) ran
    2 / (2 - 2) -> 2x as long as alone (torch's 2 threads beside busy workers on 2 CPUs:
    the rule that says what oversubscribing costs, read the other way). One worker, one
    thread: the ops take 1500 us (+200 us hand-over), the worker 2000 + 200 us a batch;
    the CPUs (1500 + 2200 + 200) / 2 = 1950 us: a 2200 us step, 1.59x. Two workers beside
    the one thread shed the contention too (one thread has no parallel op to wait for),
    but the three share the 2 CPUs while they all run (as in
    test_threads_split_with_the_timed_scaling_is_a_point_prediction): the workers a batch
    every 1400 us, the main process 1500 x 1.2 + 200 = 2000 us, above the CPUs' 1950:
    1.75x, the best split."""
    m, kw, p, one = _one_thread_split(tmp_path, 2.0)
    assert p.step_ms == pytest.approx(2.0, abs=0.02)
    assert p.speedup == pytest.approx(3.5 / 2.0, rel=0.02)
    assert one == pytest.approx(3.5 / 2.2, rel=0.02)
    # two workers beside torch's two threads still oversubscribe the CPUs: the contention
    # stays, the wait for the batch goes, the hand-over comes: 3000 + 200 us
    q = FIXES["num_workers"].transform(m.graph, {"num_workers": 2}, _facts(m, **kw))
    assert _median(q) == pytest.approx(3.2, abs=0.02)
    # workers that keep up have the window's first batch ready too (their queue filled
    # during the steps before it): no step of the replay waits for a batch to be made
    assert replay(q).step_ms == pytest.approx(3.2, abs=0.02)


def test_two_workers_beside_one_thread_share_the_cpus_as_each_is_busy(tmp_path):
    """The run above with batches of 1.7 ms. One worker and one thread: the worker's
    1700 + 200 us a batch sets the step (the main thread needs 1500 + 200 us): 1900 us.
    Two workers beside the one thread: each side gets an equal part of the CPUs with those
    runnable beside it. The workers are each busy 62% of the step and the main thread's
    ops 89%: a batch takes (1 + 0.89 + 0.62) / 2 = 1.26x as long, the ops (1 + 2 x 0.62) /
    2 = 1.12x: 1500 x 1.12 + 200 = 1882 us, a little faster than one worker. Taken as both
    always busy (as beside torch's threads, which are runnable inside each op), the
    batches took 1.45x and the ops 1.18x: 1966 us, slower than one worker, where
    too_many_workers' loop timed two workers 1.04-1.12x faster than one in 9 trials."""
    _, _, p, one = _one_thread_split(tmp_path, 1.7)
    assert p.step_ms == pytest.approx(1.882, abs=0.01)
    assert one == pytest.approx(3.5 / 1.9, rel=0.01) and one < p.speedup


def test_one_threads_cost_is_taken_against_the_work_freed_of_contention(tmp_path):
    """The run above, its ops timed alone on torch's 2 threads (1.5 ms: all of the main
    thread's work, freed of the 2x the busy workers cost it) and 1.5x as long on one
    thread. One thread beside 1 worker (the two fit the 2 CPUs): the ops take 1500 x 1.5
    = 2250 us. Taken against the contended 3000 us the timed work would be half of the
    main thread's, and one thread would cost 1.25x (1875 us)."""
    m = _model(_worker_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=1000, dataloader_num_workers=6,
              input_worker_handover_ms=0.2, torch_num_threads=2, proc_cpu_mean_pct=150.0,
              threads_one_thread_ratio=1.5, model_work_quiet_ms=1.5,
              input_inprocess_batch_ms=2.0)
    g = threads_unit.threads(m.graph, {"num_workers": 1, "intra_op_threads": 1}, _facts(m, **kw))
    assert not isinstance(g, str)
    main = (g.res == g.main) & g.is_kind(TaskKind.HOST)
    assert float(g.dur[main].sum()) / g.n_steps == pytest.approx(2250, rel=0.01)


#: a loader in the training process on 2 CPUs, one thread timed 1.5x as long as two
_SPLIT = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              input_worker_handover_ms=0.2, torch_num_threads=2, proc_cpu_mean_pct=180.0,
              threads_one_thread_ratio=1.5, model_work_quiet_ms=1.0)


def test_a_busier_thread_timing_widens_the_split_towards_its_gain(tmp_path):
    """The session timed the threads twice: one thread 1.5x as long in the quieter timing
    (the point), 0.8x in the busier one (torch's two threads waited for a CPU something
    else held). The split's point stays the quieter timing's; its range reaches the step
    the busier timing gives, shorter, as a job on that busy machine would see it."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(_SPLIT)
    quiet = _predict("threads", m, **kw)
    both = _predict("threads", m, threads_one_thread_ratio_min=0.8, **kw)
    busy = _predict("threads", m, **{**kw, "threads_one_thread_ratio": 0.8})
    assert isinstance(quiet, Prediction) and isinstance(both, Prediction)
    assert isinstance(busy, Prediction) and busy.change == both.change
    assert both.step_ms == pytest.approx(quiet.step_ms)
    assert busy.step_ms < quiet.step_ms  # one thread is cheaper at the busier timing
    assert both.range[0] < quiet.range[0]
    assert both.range[0] <= busy.step_ms
    assert both.range[1] == pytest.approx(quiet.range[1], rel=0.05)


def test_the_thread_timings_noise_reaches_the_range_as_the_replay_carries_it(tmp_path):
    """One thread 1.5x as long, timed with a 10% standard error: the split is also made at
    1.5 / 1.1 and 1.5 x 1.1, and its range holds both of those steps. The point stays; the
    step moves by less than 10% (the model's work is part of the step, not all of it), so
    the range is narrower than a 10% factor on the whole step would make it."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(_SPLIT)
    quiet = _predict("threads", m, **kw)
    noisy = _predict("threads", m, threads_noise_rel=0.1, **kw)
    lo = _predict("threads", m, **{**kw, "threads_one_thread_ratio": 1.5 / 1.1})
    hi = _predict("threads", m, **{**kw, "threads_one_thread_ratio": 1.5 * 1.1})
    for p in (quiet, noisy, lo, hi):
        assert isinstance(p, Prediction)
    assert noisy.step_ms == pytest.approx(quiet.step_ms)
    assert lo.step_ms < quiet.step_ms < hi.step_ms
    assert noisy.range[0] <= quiet.range[0] * lo.step_ms / quiet.step_ms * 1.001
    assert noisy.range[1] >= quiet.range[1] * hi.step_ms / quiet.step_ms * 0.999
    assert noisy.range[1] / quiet.range[1] < 1.1


def test_noise_ends_only_for_the_values_a_change_reads():
    """Ends at value / (1 + noise) and value x (1 + noise) for each read value with a
    noise; none for a value the change does not read, or one timed without noise."""
    f = Facts(threads_one_thread_ratio=1.5, threads_noise_rel=0.2,
              input_batched_fetch_work_ratio=1.2, input_batched_fetch_work_noise_rel=0.0)
    ends = noise_ends(f, ["threads_one_thread_ratio", "model_work_quiet_ms"])
    assert [e.threads_one_thread_ratio for e in ends] == pytest.approx([1.25, 1.8])
    assert noise_ends(f, ["input_batched_fetch_work_ratio"]) == []
    assert noise_ends(f, []) == []


def test_a_split_that_keeps_torchs_threads_is_in_place():
    """Torch on one thread of 2 CPUs: every split leaves it on one thread and changes the
    workers alone (num_workers' own fix), so the split is in place, with or without
    workers. On 2 threads beside 2 workers it is not; nor on one thread of 8 CPUs without
    workers, where a split gives torch the CPUs the workers leave (1 worker, 7 threads)."""
    fix = FIXES["threads"]
    one = {"torch_num_threads": 1, "dataloader_num_workers": 0, "cpu_count": 2}
    assert "no split of the 2 CPUs" in (fix.in_place(one) or "")
    assert "no split" in (fix.in_place({**one, "dataloader_num_workers": 2}) or "")
    assert fix.in_place({**one, "torch_num_threads": 2, "dataloader_num_workers": 2}) is None
    assert fix.in_place({**one, "cpu_count": 8}) is None


def test_autofix_says_an_iterable_datasets_workers_are_left_alone():
    """Of the threads split's needs, the one an IterableDataset fails is named: the dataset
    splits its samples among its workers itself, so autofix does not change them."""
    from diagnose.fixes import TrainConfig

    stream = Facts(cpu_count=2, torch_num_threads=2, iterable_dataset=True)
    why = FIXES["threads"].why_not(TrainConfig(num_workers=4), stream)
    assert why is not None and "IterableDataset" in why and "by hand" in why
    one_cpu = Facts(cpu_count=1, torch_num_threads=2)
    assert FIXES["threads"].why_not(TrainConfig(num_workers=4), one_cpu).startswith("needs ")


def test_fewer_threads_beside_the_same_busy_workers_shed_their_contention(tmp_path):
    """2 workers beside torch's 2 threads on 2 CPUs: each step waits 500 us for its batch,
    then 3000 us of ops the busy workers slowed 2x (1500 us timed alone, 1.5x as long on
    one thread). torch on one thread, the workers kept: the ops take 1500 x 1.5 = 2250 us
    and no longer wait for a second thread; the three runnable threads share the 2 CPUs
    only while the workers make batches, a little more (under 10%). Scaled with the
    contention kept, they took 4500 us, and a new user's job was told 0.63x for a change
    that measured 1.10-1.28x."""
    m = _model(mt.cpu_loader(fetch_us=500, compute_us=3000, workers=2), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=1000, dataloader_num_workers=2,
              input_worker_handover_ms=0.2, torch_num_threads=2, proc_cpu_mean_pct=150.0,
              threads_one_thread_ratio=1.5, model_work_quiet_ms=1.5,
              input_inprocess_batch_ms=2.0)
    g = threads_unit.threads(m.graph, {"intra_op_threads": 1}, _facts(m, **kw))
    assert not isinstance(g, str)
    main = (g.res == g.main) & g.is_kind(TaskKind.HOST)
    assert 2250 <= float(g.dur[main].sum()) / g.n_steps < 2250 * 1.1
    assert float(replay(g).step_ms.mean()) < 3.5  # faster than the run's 3500 us steps
    # workers whose batches wait (files, the network) hold no CPU: nothing to shed
    waits = threads_unit.threads(m.graph, {"intra_op_threads": 1},
                                 _facts(m, input_worker_batch_ms=2.0,
                                       input_worker_batch_cpu_ms=0.2, **kw))
    assert not isinstance(waits, str)
    main = (waits.res == waits.main) & waits.is_kind(TaskKind.HOST)
    assert float(waits.dur[main].sum()) / waits.n_steps > 2250 * 1.1
