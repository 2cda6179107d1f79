"""The workers unit's transform (diagnose/fixes/catalog/workers.py): worker processes on
the CPUs beside torch's threads, their epoch start, a deeper queue, persistent workers;
on small builder traces whose answers are worked out by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from diagnose.fixes import TrainConfig
from diagnose.fixes.catalog import workers as workers_unit
from diagnose.fixes.worker_search import workers_oversubscribed
from diagnose.stepmodel import calibration as cal
from diagnose.stepmodel.facts import Facts
from diagnose.stepmodel.graph import Tag, TaskKind
from diagnose.stepmodel.prediction import Prediction, Predictor
from diagnose.stepmodel.transforms import AT_MOST
from tests import modeltraces as mt
from tests.fixes.steps import _facts, _model, _predict

#: cpu_loader's run on 2 CPUs with workers started at every epoch of 24 batches: a worker
#: takes 6 ms to start (6.2 with a batch's 0.2 ms hand-over) and 2 ms a batch
EPOCH_RUN = dict(cpu_count=2, input_batch_bytes=400_000, worker_transfer_gbps=2.0,
                 torch_num_threads=1, proc_cpu_mean_pct=180.0, input_worker_start_ms=6.2,
                 input_worker_handover_ms=0.2, input_worker_batch_ms=2.0,
                 dataloader_epoch_batches=24)


def test_num_workers_cpu_bound(tmp_path):
    """cpu_loader: 3000 us steps (2000 us fetch + 1000 us compute) on 2 CPUs, 400 kB batches
    (200 us to hand over at a measured 2 GB/s). k=1: the worker makes a batch every 2000 us: 2000 us.
    k=2: a batch every 1000 us; the main process needs 200 + 1000 = 1200 us; but the CPUs
    must do 1000 (compute) + 2000 (fetch) + 2 x 200 (hand-over, both sides) = 3400 us of
    work a step on 2 cores: 1700 us. Best: 2 workers, 1700 us, 1.76x."""
    m = _model(mt.cpu_loader(), tmp_path)
    p = _predict("num_workers", m, cpu_count=2, input_batch_bytes=400_000,
                 dataloader_num_workers=0, worker_transfer_gbps=2.0, torch_num_threads=1,
                 proc_cpu_mean_pct=180.0)
    assert isinstance(p, Prediction)
    assert p.change == {"num_workers": 2}
    assert p.step_ms == pytest.approx(1.7, abs=0.01)
    assert p.speedup == pytest.approx(3.0 / 1.7, rel=0.01)
    # every config the search tries is predicted (autofix predicts each rung from these):
    # one worker makes a batch every 2000 + 200 us (its side of the hand-over)
    each = dict(p.candidates)
    assert each[(("num_workers", 2),)] == pytest.approx(p.speedup)
    assert each[(("num_workers", 1),)] == pytest.approx(3.0 / 2.2, rel=0.01)


def test_no_worker_is_predicted_for_batches_made_on_the_gpu(tmp_path):
    """The same job, its dataset handing out batches already on the GPU: no worker process
    can make them, so no worker count is predicted, and the reason says so."""
    m = _model(mt.cpu_loader(), tmp_path)
    p = _predict("num_workers", m, cpu_count=2, input_batch_bytes=400_000,
                 dataloader_num_workers=0, worker_transfer_gbps=2.0, torch_num_threads=1,
                 proc_cpu_mean_pct=180.0, dataloader_batches_on_device=True)
    assert isinstance(p, str) and "on the GPU" in p and "forked" in p


def test_a_workers_batch_timed_after_the_loop_is_put_at_the_loops_pace(tmp_path):
    """cpu_loader's loop made a batch in process in 2000 us; after the loop the session
    timed one in process in 1600 us and one in a worker in 2000 us: the host ran 1.25x as
    fast then, so a worker's batch in the loop costs 2500 us, and one worker makes one every
    2500 us (3.0 / 2.5 ms: its side of the hand-over, writing the batch into shared
    memory, is in what was timed as a worker makes it). Timed at the loop's pace (2000 us
    in process), the worker's 2000 us stand (3.0 / 2.0); a pace above PACE_BOUNDS is taken
    at the bound. An in-process batch timed slower than the loop's by more than the bounds
    is this process's timing held up on its own, not the host's pace: the worker's batch
    stands as timed; unless the worker's batch, timed in turn with it, was as slow (at
    least WORKER_AGREES of it): the host was, and the pace is taken at the bound. Within
    the bounds alike: a slower in-process batch is the host's pace only where the
    worker's agrees."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=1, proc_cpu_mean_pct=180.0,
              input_worker_batch_ms=2.0)

    def one_worker(**more):
        p = _predict("num_workers", m, **kw, **more)
        return dict(p.candidates)[(("num_workers", 1),)]

    assert one_worker(input_inprocess_batch_ms=1.6) == pytest.approx(3.0 / 2.5, rel=0.01)
    assert one_worker(input_inprocess_batch_ms=2.0) == pytest.approx(3.0 / 2.0, rel=0.01)
    assert one_worker() == pytest.approx(3.0 / 2.0, rel=0.01)  # not timed: as timed
    hi = cal.PACE_BOUNDS[1]
    assert one_worker(input_inprocess_batch_ms=0.5) == pytest.approx(
        3.0 / (2.0 * hi), rel=0.01)
    lo = cal.PACE_BOUNDS[0]
    # just within the bounds, slower than the loop: the worker's batch, timed in turn,
    # was not (2.0 against 2.96 ms): the in-process one was held up on its own
    assert one_worker(input_inprocess_batch_ms=2.0 / lo * 0.99) == pytest.approx(
        3.0 / 2.0, rel=0.01)
    # ... where it was as slow, the host was: the loop's pace
    agrees = {**kw, "input_worker_batch_ms": 2.0 / lo * 0.99 * cal.WORKER_AGREES}
    p = _predict("num_workers", m, **agrees, input_inprocess_batch_ms=2.0 / lo * 0.99)
    assert dict(p.candidates)[(("num_workers", 1),)] == pytest.approx(
        3.0 / (2.0 * cal.WORKER_AGREES), rel=0.01)
    assert one_worker(input_inprocess_batch_ms=3.6) == pytest.approx(3.0 / 2.0, rel=0.01)
    slow = {**kw, "input_worker_batch_ms": 3.6 * cal.WORKER_AGREES}
    p = _predict("num_workers", m, **slow, input_inprocess_batch_ms=3.6)
    assert dict(p.candidates)[(("num_workers", 1),)] == pytest.approx(
        3.0 / (3.6 * cal.WORKER_AGREES * lo), rel=0.01)
    p = _predict("num_workers", m, **{**slow, "input_worker_batch_ms": 3.6 * 0.9},
                 input_inprocess_batch_ms=3.6)
    assert dict(p.candidates)[(("num_workers", 1),)] == pytest.approx(3.0 / 3.24, rel=0.01)
    # 400 us of the loop's 2000 were the garbage collector's pauses inside the loading:
    # not the pace (1600 against 1600 timed), but what a worker making the same objects
    # pays too: 2000 + 400 us a batch
    assert one_worker(input_inprocess_batch_ms=1.6, gc_pause_loader_ms=0.4) == pytest.approx(
        3.0 / 2.4, rel=0.01)
    # what the worker's other threads spend sending each batch (pickling it, the file
    # descriptors' handshakes), timed with a real worker, is not in a batch timed as a
    # worker makes it: 500 us more a batch, at the loop's pace (625 us)
    assert one_worker(input_worker_send_ms=0.5) == pytest.approx(3.0 / 2.5, rel=0.01)
    assert one_worker(input_worker_send_ms=0.5, input_inprocess_batch_ms=1.6) == \
        pytest.approx(3.0 / 3.125, rel=0.01)


def test_a_workers_batch_as_timed_is_an_end_of_the_range(tmp_path):
    """The point puts the worker's 2000 us at the loop's pace (the loop made a batch in
    process in 2000 us, the session in 1600: 2500 us, 3.0 / 2.5 = 1.2x); the range holds the
    worker's batch as timed too (3.0 / 2.0 = 1.5x before the model's error widens it): the
    host may meet the change at either pace. Where the loop's loading was not timed by the
    clock, or matches the timing after it, the range holds no such end."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=1, proc_cpu_mean_pct=180.0,
              input_worker_batch_ms=2.0, input_inprocess_batch_ms=1.6)
    change = {"num_workers": 1}

    def predicted(**more):
        p = Predictor(m, _facts(m, **{**kw, **more})).predict_change(
            workers_unit.num_workers, change)
        assert isinstance(p, Prediction)
        return p

    both = predicted(input_fetch_ms=2.0, input_collate_ms=0.0)
    alone = predicted()
    assert both.speedup == pytest.approx(alone.speedup) == pytest.approx(1.2, rel=0.01)
    fast = both.base_ms / both.range[0]
    assert fast > 1.5 > alone.base_ms / alone.range[0]
    assert both.range[1] == pytest.approx(alone.range[1])
    # the in-process batch timed after the loop as the loop made it (2000 us): both
    # estimates agree, and the range is the one without the clock's loading
    same = predicted(input_fetch_ms=2.0, input_collate_ms=0.0, input_inprocess_batch_ms=2.0)
    assert same.speedup == pytest.approx(1.5, rel=0.01)
    assert same.range == pytest.approx(predicted(input_inprocess_batch_ms=2.0).range,
                                       rel=0.01)


def test_num_workers_big_batches_are_slower(tmp_path):
    """The same job with 8 MB batches: each takes 4000 us to hand over, so the main process
    needs 4000 + 1000 us a step with workers; the CPUs need (1000 + 2000 + 2 x 4000) / 2 =
    5500 us: with any number of workers the step is 5500 us against 3000 in-process, 0.55x."""
    m = _model(mt.cpu_loader(), tmp_path)
    p = _predict("num_workers", m, cpu_count=2, input_batch_bytes=8_000_000,
                 dataloader_num_workers=0, worker_transfer_gbps=2.0, torch_num_threads=1,
                 proc_cpu_mean_pct=180.0)
    assert isinstance(p, Prediction)
    assert p.speedup == pytest.approx(3.0 / 5.5, rel=0.01)


def test_num_workers_beside_torch_on_every_cpu(tmp_path):
    """cpu_loader again, torch's intra-op threads on both CPUs (the process measured at 180%
    of a core: CPU-bound loading). A busy worker takes one of the two cores from torch's
    threads, so the main process's 1000 us of ops take 2 / (2 - 1) = 2x as long, and the
    worker shares the CPUs with torch's two threads while they run those ops (a share u of
    the step): three runnable threads on 2 CPUs, the worker doubles up with one of torch's
    for 2u - 1 of the time, and its 2000 us batch takes 1 + (2u - 1) = 2u as long. The step
    is the batch and its side of the hand-over, 4000u + 200, and u = 2000 / step: u =
    0.683, 2930 us, 1.02x (the loop timed tokenizing's worker beside torch's 2 threads at
    2.0x its batch alone, benchmarks/loop_parts.py; a fair share of the CPUs said 1.4x).
    Two workers: the ops 2x (2200 us with the hand-over), the workers (2 + 2u) / 2 as
    long, two at once, and the CPUs' work, (1000 x 2 + 2000 + 2 x 200) / 2 = 2200 us, sets
    the step: 1.36x, where the same job with torch on one thread (test_num_workers_cpu_bound,
    2 workers) reached 1.76x."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=2, proc_cpu_mean_pct=180.0)
    p = _predict("num_workers", m, **kw)
    assert isinstance(p, Prediction)
    assert p.step_ms == pytest.approx(2.2, abs=0.01) and p.change == {"num_workers": 2}
    assert dict(p.candidates)[(("num_workers", 1),)] == pytest.approx(3.0 / 2.930, rel=0.01)
    q = _predict("threads", m, **kw)
    # beside one thread, one worker runs at the pace the CPUs' work sets (2200 us); two
    # busy workers and the main thread are three runnable threads on 2 CPUs: the workers'
    # batches and the main thread's work both take longer (_worker_share), and two
    # workers' points are slower than one's; but the range of a change of CPU work is wide,
    # two workers' reaches one's point, and one capture cannot tell them apart (augment_cnn's
    # loop timed 2 and 1 workers beside one thread at 14.4 and 14.2 ms,
    # benchmarks/loop_parts.py): the tie goes to the loader with more headroom, two workers
    assert isinstance(q, Prediction) and q.change == {"num_workers": 2, "intra_op_threads": 1}
    assert q.at_least and q.speedup > 1
    each = dict(q.candidates)
    assert each[(("intra_op_threads", 1), ("num_workers", 2))] == pytest.approx(q.speedup)
    assert each[(("intra_op_threads", 1), ("num_workers", 2))] < 0.95 * each[
        (("intra_op_threads", 1), ("num_workers", 1))]


def test_num_workers_for_loading_that_waits(tmp_path):
    """The same job whose loading waits (I/O): the training process kept a third of a core
    busy, so a worker overlaps the 2000 us of loading although torch holds both CPUs: as
    test_num_workers_cpu_bound with one worker, 2000 us a step. Without the samples the
    model cannot tell which kind of loading it is."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=2)
    assert "I/O" in _predict("num_workers", m, **kw)
    p = _predict("num_workers", m, **kw, proc_cpu_mean_pct=30.0)
    assert isinstance(p, Prediction) and p.speedup > 1.3


def test_a_worker_batch_that_waits_is_not_charged_a_cpu(tmp_path):
    """test_num_workers_cpu_bound's job with a worker's batch timed after the loop: 2 ms,
    of which the worker held a CPU 0.1 ms (its loading sleeps on files or the network).
    The CPU bound counts that 0.1 ms, not the 2 ms, so the step is the main process's
    1000 us of compute + 200 us of hand-over once two workers make a batch each 1000 us:
    1200 us, 2.5x (more workers tie; the most headroom leads), where the same batch on a
    CPU all through is held to the bound: 1000 + 2000 + 200 us of CPU work on 2 CPUs,
    1600 us. Loading that waits is given up to 4 workers a CPU (8 here; 0.1 of 2 ms
    would fill the 2 CPUs with 40); more than the CPUs are not workers to cap."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=1, proc_cpu_mean_pct=180.0,
              input_worker_batch_ms=2.0, input_inprocess_batch_ms=2.0)
    waits = _predict("num_workers", m, **kw, input_worker_batch_cpu_ms=0.1)
    busy = _predict("num_workers", m, **kw, input_worker_batch_cpu_ms=2.0)
    assert isinstance(waits, Prediction) and isinstance(busy, Prediction)
    assert waits.step_ms == pytest.approx(1.2, abs=0.01)
    assert busy.change == {"num_workers": 2} and busy.step_ms == pytest.approx(1.6, abs=0.01)
    each = {dict(c)["num_workers"]: x for c, x in waits.candidates}
    assert set(each) == {1, 2, 4, 8} and each[2] == pytest.approx(2.5, rel=0.01)
    assert each[1] == pytest.approx(1.5, rel=0.01) and each[8] == pytest.approx(each[2])
    assert {dict(c)["num_workers"] for c, _ in busy.candidates} == {1, 2}
    facts = Facts(cpu_count=2, input_worker_batch_ms=2.0, input_worker_batch_cpu_ms=0.1)
    six = TrainConfig(num_workers=6)
    assert not workers_oversubscribed(six, facts)
    assert not workers_unit.NUM_WORKERS_CAP.applies(six, facts)
    assert workers_unit.NUM_WORKERS_CAP.applies(
        six, facts.replace(input_worker_batch_cpu_ms=2.0))


def test_timed_hand_over_wins_over_the_byte_rate(tmp_path):
    """test_num_workers_cpu_bound with the hand-over timed by the session (0.2 ms a batch)
    instead of a bandwidth: the same 1700 us."""
    m = _model(mt.cpu_loader(), tmp_path)
    p = _predict("num_workers", m, cpu_count=2, input_batch_bytes=400_000,
                 dataloader_num_workers=0, input_worker_handover_ms=0.2,
                 torch_num_threads=1, proc_cpu_mean_pct=180.0)
    assert isinstance(p, Prediction) and p.step_ms == pytest.approx(1.7, abs=0.01)


def test_persistent_workers_take_the_epoch_start_off_the_mean_step(tmp_path):
    """Workers start again every epoch: the loop waited 26 ms for iter() and its first
    batch, where live workers would make only that batch (2 ms). Once per 24 batches, the
    job's mean step is the clock's steady 3 ms with that start spread over the epoch
    (3 + 26 / 24), the step every prediction starts from; live workers take 1 ms a step off
    it, 1.32x, and never a step below the steady one (the old base, the steady step alone,
    predicted 2 ms). The session's own worker start (after the loop) serves where no epoch
    start with workers was seen; without a start, or the epoch's length, the model cannot
    tell."""
    m = _model(mt.cpu_loader(), tmp_path)
    cfg = TrainConfig(num_workers=2)
    p = _predict("persistent_workers", m, cfg, dataloader_start_ms=26.0,
                 dataloader_num_workers=2, input_inprocess_batch_ms=2.0,
                 dataloader_epoch_batches=24)
    assert isinstance(p, Prediction)
    assert p.change == {"persistent_workers": True}
    assert p.base_ms == pytest.approx(3.0 + 26 / 24)
    assert p.step_ms == pytest.approx(3.0 + 2 / 24)
    assert p.speedup == pytest.approx((3.0 + 26 / 24) / (3.0 + 2 / 24))
    q = _predict("persistent_workers", m, cfg, input_worker_start_ms=14.0,
                 input_inprocess_batch_ms=2.0, dataloader_epoch_batches=24)
    assert isinstance(q, Prediction) and q.step_ms == pytest.approx(2.5)
    assert "cannot tell" in _predict("persistent_workers", m, cfg, dataloader_epoch_batches=24,
                                     input_inprocess_batch_ms=2.0)
    assert "cannot tell" in _predict("persistent_workers", m, cfg, dataloader_start_ms=26.0,
                                     dataloader_num_workers=2, input_inprocess_batch_ms=2.0)


def test_persistent_workers_for_an_epoch_of_days_change_nothing(tmp_path):
    """A new user's watch: a batch sampler of 10**9 batches (an endless stream), no
    worker start timed in the watch's capture: 'fix persistent_workers: not predicted'
    led every capture. An epoch that lasts a day or more at the measured step
    (EPOCH_LONG_S) starts its workers too rarely to matter: at most 1.00x, said so; a
    day's epoch less a step is still not known."""
    m = _model(mt.cpu_loader(), tmp_path)
    cfg = TrainConfig(num_workers=2)
    kw = dict(input_inprocess_batch_ms=2.0, step_time_unprofiled_mean_ms=20.0)
    p = _predict("persistent_workers", m, cfg, dataloader_epoch_batches=10**9, **kw)
    assert p.startswith(AT_MOST) and "lasts 231 days at this step" in p
    day = int(cal.EPOCH_LONG_S * 1e3 / 20.0)
    assert _predict("persistent_workers", m, cfg, dataloader_epoch_batches=day,
                    **kw).startswith(AT_MOST)
    assert "cannot tell" in _predict("persistent_workers", m, cfg,
                                     dataloader_epoch_batches=day - 1, **kw)


def test_persistent_workers_beside_busy_cpus_take_the_wider_error(tmp_path):
    """The same saving (1.32x): with 2 workers beside torch's 1 thread on 4 CPUs the restart
    runs on CPUs the training does not use, and the range is that of a change that moves
    nothing (EFFECT_FLOOR and EFFECT_ERROR "other"); beside 2 threads on 2 CPUs the new workers start up on
    the training's CPUs, and the range is that of a change of CPU work ("cpu"). Same
    point, and the range of the kind with the larger error holds the other's."""
    m = _model(mt.cpu_loader(), tmp_path)
    cfg = TrainConfig(num_workers=2)
    kw = dict(dataloader_start_ms=26.0, dataloader_num_workers=2,
              input_inprocess_batch_ms=2.0, dataloader_epoch_batches=24)
    apart = _predict("persistent_workers", m, cfg, cpu_count=4, torch_num_threads=1, **kw)
    shared = _predict("persistent_workers", m, cfg, cpu_count=2, torch_num_threads=2, **kw)
    assert isinstance(apart, Prediction) and isinstance(shared, Prediction)
    x = (3.0 + 26 / 24) / (3.0 + 2 / 24)
    assert apart.speedup == pytest.approx(shared.speedup) == pytest.approx(x)
    w = {k: cal.EFFECT_FLOOR[k] + v * math.log(x) for k, v in cal.EFFECT_ERROR.items()}
    assert apart.range[1] / apart.step_ms == pytest.approx(math.exp(w["other"]), rel=0.05)
    assert shared.range[1] / shared.step_ms == pytest.approx(math.exp(w["cpu"]), rel=0.05)
    narrow, wide = (apart, shared) if w["cpu"] > w["other"] else (shared, apart)
    assert wide.range[0] < narrow.range[0] < narrow.range[1] < wide.range[1]


@pytest.mark.parametrize("wait,start,epoch,saved", [
    (300.0, 32.0, None, 260.0),  # 600 CPU-ms: 120 start 4 workers, 8 batches ahead (most)
    (70.0, 32.0, None, 60.0),  # 140 CPU-ms: 120 start them, 2 batches ahead
    (50.0, 32.0, None, 45.0),  # the start-ups take it all: the first batch still comes back
    (300.0, None, None, 260.0),  # no start timed: every worker's batches ahead
    (300.0, 32.0, 3, 285.0),  # an epoch of 3 batches: no more than 3 made ahead
])
def test_restart_saving_gives_back_the_batches_made_ahead(wait, start, epoch, saved):
    """4 workers on 2 CPUs, a batch 10 ms, 2 ahead a worker, a start 32 ms with a 2 ms
    hand-over: during the loop's wait the CPUs start the workers and make batches ahead
    (no more than the epoch has); persistent workers save the wait less those batches'
    work over the CPUs."""
    from diagnose.stepmodel.epochs import restart_saving

    facts = Facts(cpu_count=2, dataloader_prefetch_factor=2, input_worker_start_ms=start,
                  input_worker_handover_ms=2.0, dataloader_epoch_batches=epoch)
    assert restart_saving(facts, 4, wait, 10.0) == pytest.approx(saved)


@pytest.mark.parametrize("epoch,last,saved", [
    (3, 0.125, 289.375),  # 2 full batches and one of 8 samples in 64: 2.125 batches' work
    (3, None, 285.0),  # the last batch's samples not known: taken as full
    (12, 0.125, 260.0),  # a long epoch: its last batch is not among those made ahead
])
def test_an_epochs_short_last_batch_costs_its_share_of_a_batch(epoch, last, saved):
    """As above, an epoch of 200 samples in batches of 64 (3 full and one of 8, here an
    epoch of 3 with its last of 8): persistent workers make the epoch's batches in the
    steps instead, the short one at its share of a batch's work."""
    from diagnose.stepmodel.epochs import restart_saving

    facts = Facts(cpu_count=2, dataloader_prefetch_factor=2, input_worker_start_ms=32.0,
                  input_worker_handover_ms=2.0, dataloader_epoch_batches=epoch,
                  dataloader_last_batch_share=last)
    assert restart_saving(facts, 4, 300.0, 10.0) == pytest.approx(saved)


@pytest.mark.parametrize("loader,share", [
    ({"len": 4, "batch_size": 64, "dataset_len": 200, "sampler_class": "RandomSampler"},
     0.125),
    ({"len": 4, "batch_size": 64, "sampler_len": 256, "sampler_class": "WeightedSampler"},
     1.0),
    ({"len": 4, "batch_size": 64, "dataset_len": 200, "sampler_class": "SubsetSampler"},
     None),  # a sampler that need not draw the whole dataset, its own length unknown
    ({"len": 3, "batch_size": 64, "dataset_len": 200, "drop_last": True,
      "sampler_class": "RandomSampler"}, 1.0),
    ({"len": 4, "batch_size": 64, "dataset_len": 999, "sampler_class": "RandomSampler"},
     None),  # more samples than the batches hold: not a count to trust
])
def test_the_last_batch_share_is_read_from_the_epochs_samples(loader, share):
    from diagnose.metrics.context import context_metrics

    got = context_metrics({"dataloader": loader})["dataloader_last_batch_share"]
    assert got == (pytest.approx(share) if share is not None else None)


def test_persistent_workers_on_shared_cpus_save_the_clock_wait_less_work_ahead(tmp_path):
    """The clock saw each epoch's start 300 ms beyond a steady step, once per 24 steps; 4
    workers beside torch's 2 threads on 2 CPUs: 260 ms of it saved (as above), 10.8 ms a
    step; with the workers on CPUs of their own the wait less one batch, 290 ms."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(dataloader_num_workers=4, input_inprocess_batch_ms=10.0,
              dataloader_epoch_batches=24, dataloader_epoch_boundary_ms=300.0,
              step_time_steady_mean_ms=3.0, input_worker_start_ms=32.0,
              input_worker_handover_ms=2.0, dataloader_prefetch_factor=2)
    shared = _predict("persistent_workers", m, TrainConfig(num_workers=4), cpu_count=2,
                      torch_num_threads=2, **kw)
    apart = _predict("persistent_workers", m, TrainConfig(num_workers=4), cpu_count=8,
                     torch_num_threads=2, **kw)
    assert isinstance(shared, Prediction) and isinstance(apart, Prediction)
    assert shared.base_ms - shared.step_ms == pytest.approx(260 / 24, rel=1e-3)
    assert apart.base_ms - apart.step_ms == pytest.approx(290 / 24, rel=1e-3)


def test_the_loops_work_between_epochs_stays_on_both_sides(tmp_path):
    """The same run whose loop also evaluates between epochs, 48 ms (2 ms a step) apart
    from the 300 ms start: every prediction starts 2 ms a step higher, and persistent
    workers save what they saved without it."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(dataloader_num_workers=4, input_inprocess_batch_ms=10.0,
              dataloader_epoch_batches=24, dataloader_epoch_boundary_ms=300.0,
              step_time_steady_mean_ms=3.0, input_worker_start_ms=32.0,
              input_worker_handover_ms=2.0, dataloader_prefetch_factor=2, cpu_count=8,
              torch_num_threads=2)
    plain = _predict("persistent_workers", m, TrainConfig(num_workers=4), **kw)
    gap = _predict("persistent_workers", m, TrainConfig(num_workers=4),
                   dataloader_epoch_gap_ms=48.0, **kw)
    assert isinstance(plain, Prediction) and isinstance(gap, Prediction)
    assert gap.base_ms == pytest.approx(plain.base_ms + 2.0)
    assert gap.base_ms - gap.step_ms == pytest.approx(plain.base_ms - plain.step_ms)
    assert gap.speedup < plain.speedup


def test_a_change_of_workers_predicts_the_mean_step_over_an_epoch(tmp_path):
    """cpu_loader's 2 workers make a 1.6 ms step with a worker's batch timed at 2 ms (the
    CPUs: (1000 + 2000 + 200) / 2 us; its side of the hand-over is in that timing), and 1
    worker 2.0 ms; but a loader without persistent workers starts them at every epoch: here each
    worker takes 6 ms to start (the session's one took 6.2 ms to start and hand over a copy
    of a batch, 0.2 ms of it the hand-over) and the loop then waits for the first batch (a
    worker makes one in 2 ms), once per 24 steps: 1 worker (6 + 2) / 24 = 0.33 ms a step,
    2 workers (12 + 2) / 24 = 0.58. A run with 6 workers whose epoch start the session saw
    (26 ms) has that in its base. Persistent workers, or a start not timed: the steady
    step alone."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(EPOCH_RUN)
    p = _predict("num_workers", m, dataloader_num_workers=0, **kw)
    assert isinstance(p, Prediction) and p.change == {"num_workers": 2}
    assert p.step_ms == pytest.approx(1.6 + 14 / 24, abs=0.01)
    assert p.speedup == pytest.approx(3.0 / (1.6 + 14 / 24), rel=0.01)
    each = dict(p.candidates)
    # 1 worker: the loop waits on it (2.0 ms a step), but the batch it made during the
    # epoch's start is ready for the first step, which takes only its own 1.2 ms
    assert each[(("num_workers", 1),)] == pytest.approx(3.0 / (2.0 + (8 - 0.8) / 24),
                                                          rel=0.01)
    # the run's own start, with its 6 workers, is in the base every change starts from
    six = Predictor(m, _facts(m, dataloader_num_workers=6, dataloader_start_ms=26.0, **kw))
    one = six.predict_change(workers_unit.num_workers, {"num_workers": 1})
    assert isinstance(one, Prediction)
    assert one.base_ms == pytest.approx(six.base_ms) == pytest.approx(3.0 + 26 / 24)
    # persistent workers start once; no timed start: the steady steps, as before
    keep = Predictor(m, _facts(m, dataloader_num_workers=0, dataloader_persistent_workers=True,
                               **kw)).predict_change(workers_unit.num_workers, {"num_workers": 2})
    blind = Predictor(m, _facts(m, dataloader_num_workers=0, **{
        k: v for k, v in kw.items() if k != "input_worker_start_ms"})).predict_change(
        workers_unit.num_workers, {"num_workers": 2})
    assert isinstance(keep, Prediction) and isinstance(blind, Prediction)
    assert keep.step_ms == pytest.approx(1.6, abs=0.01) == blind.step_ms


def test_an_epochs_start_the_clock_saw_is_replayed_apart_from_the_steady_steps(tmp_path):
    """The clock saw 6 workers' steady steps at 3 ms (cpu_loader's) and, in the steps where
    an epoch started, 27 ms more (the last epoch's workers joined, 6 forked, their first
    batches): its mean, 4.5 ms, holds its few steps' starts at their own rate, not at the
    epoch's. The replay is the steady 3 ms, the run's pace 3 + 27 / 24, and a change of
    workers starts from that pace: the same as a run whose 27 ms start was timed as the
    wait for its first batch. A change that keeps the workers pays the start on both
    sides. Persistent workers save it less the batches made ahead in it (the 6 workers
    share 2 CPUs with torch's threads): of its 2 x 27 CPU-ms, 6 x 6 start the workers and
    18 make nine 2 ms batches, which come back over the 2 CPUs: 18 / 24 a step; where the
    steps after the start took 6 ms more than steady ones, those too, with no more workers
    than CPUs. Without the steady steps: the clock's mean, as before."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(EPOCH_RUN, input_inprocess_batch_ms=2.0, dataloader_num_workers=6)
    seen = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=4.5,
                               step_time_steady_mean_ms=3.0,
                               dataloader_epoch_boundary_ms=27.0, **kw))
    waited = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=3.0,
                                 dataloader_start_ms=27.0, **kw))
    assert seen.steady_ms == pytest.approx(3.0)
    assert seen.base_ms == pytest.approx(3.0 + 27 / 24)
    for k in (1, 2, 4):
        a = seen.predict_change(workers_unit.num_workers, {"num_workers": k})
        b = waited.predict_change(workers_unit.num_workers, {"num_workers": k})
        assert isinstance(a, Prediction) and isinstance(b, Prediction)
        assert (a.base_ms, a.step_ms) == pytest.approx((b.base_ms, b.step_ms))
        assert a.base_ms == pytest.approx(seen.base_ms)
    same = seen.predict_steps([])
    assert isinstance(same, Prediction) and same.step_ms == pytest.approx(seen.base_ms)
    keep = _predict("persistent_workers", m, TrainConfig(num_workers=6),
                    step_time_unprofiled_mean_ms=4.5, step_time_steady_mean_ms=3.0,
                    dataloader_epoch_boundary_ms=27.0, **kw)
    assert isinstance(keep, Prediction)
    assert keep.step_ms == pytest.approx(seen.base_ms - 18 / 24)
    # the steps after the start took 6 ms more than steady ones (the new processes'
    # start-up, the fork's copy-on-write faults): 2 live workers on the 2 CPUs save those
    # too; 6 of them queue for the CPUs at every start, live or new: not counted
    clock = dict(step_time_unprofiled_mean_ms=4.5, step_time_steady_mean_ms=3.0,
                 dataloader_epoch_boundary_ms=27.0)
    for k, saved in ((2, 6 / 24), (6, 0.0)):
        both = [_predict("persistent_workers", m, TrainConfig(num_workers=k), **clock,
                         **{**kw, "dataloader_num_workers": k},
                         dataloader_epoch_after_ms=after) for after in (None, 6.0)]
        assert all(isinstance(p, Prediction) for p in both)
        assert both[0].step_ms - both[1].step_ms == pytest.approx(saved)
    # no start told apart in 10 steps: the workers' timed start is added to the mean; in
    # 24 steps or more (an epoch's), the clock's mean holds the starts already
    from diagnose.stepmodel.epochs import epoch_start_ms

    blind = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=4.5,
                                step_time_unprofiled_steps=10, **kw))
    assert blind.epoch_ms > 0 and blind.epoch_ms == pytest.approx(epoch_start_ms(blind.facts))
    assert blind.base_ms == pytest.approx(4.5 + blind.epoch_ms)
    held = Predictor(m, _facts(m, step_time_unprofiled_mean_ms=4.5,
                               step_time_unprofiled_steps=24, **kw))
    assert held.base_ms == pytest.approx(4.5) and held.epoch_ms == 0.0
    for k in (1, 2):  # a change of workers adds only its start's difference to that mean
        p = held.predict_change(workers_unit.num_workers, {"num_workers": k})
        assert isinstance(p, Prediction) and p.base_ms == pytest.approx(4.5)


def test_an_epochs_start_forks_workers_one_after_another_and_its_end_joins_them(tmp_path):
    """With the fork timed (1 ms of the one worker's 6.2 ms start; 0.2 ms of it the
    hand-over) the loop waits for the longest of: the k forks (then the hand-over), one
    worker's start and its batch (6.2 + 2), and every child's start-up and first batch
    over the CPUs. 2 workers on 2 CPUs: max(2.2, 8.2, 2 x 8 / 2) = 8.2 ms; 6 workers:
    max(6.2, 8.2, 6 x 8 / 2) = 24 ms. The epoch's end joins them: one took 3 ms, 6 of
    them over 2 CPUs 9 ms. Once per 24 steps."""
    from diagnose.stepmodel.epochs import epoch_end_ms, epoch_start_ms

    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(EPOCH_RUN, input_worker_fork_ms=1.0, input_worker_stop_ms=3.0)
    facts = _facts(m, dataloader_num_workers=0, **kw)
    assert epoch_start_ms(facts, {"num_workers": 2}) == pytest.approx((8.2 + 3) / 24)
    assert epoch_start_ms(facts, {"num_workers": 6}) == pytest.approx((24 + 9) / 24)
    assert epoch_end_ms(facts, 6) == pytest.approx(9.0)
    assert epoch_start_ms(facts, {"num_workers": 2, "persistent_workers": True}) == 0.0
    p = _predict("num_workers", m, dataloader_num_workers=0, **kw)
    assert isinstance(p, Prediction) and p.change == {"num_workers": 2}
    assert p.step_ms == pytest.approx(1.6 + 11.2 / 24, abs=0.01)
    # the run's own start seen with its 6 workers: its end is added to it
    six = _facts(m, dataloader_num_workers=6, dataloader_start_ms=26.0, **kw)
    assert epoch_start_ms(six) == pytest.approx((26 + 9) / 24)


def test_a_deeper_queue_changes_nothing_at_the_workers_mean_rate(tmp_path):
    """prefetch_factor: steady waits (the model's mean rate: the step stays, 1.00x); waits
    in bursts (one of 40 ms against a 1 ms median), or none measured: the model cannot
    tell, unless the workers are the model's own (a change before it)."""
    m = _model(mt.cpu_loader(), tmp_path)
    cfg = TrainConfig(num_workers=2)
    steady = _predict("prefetch_factor", m, cfg, dataloader_num_workers=2,
                      dataloader_wait_max_ms=3.0, dataloader_wait_median_ms=1.0)
    assert isinstance(steady, Prediction)
    assert steady.change == {"prefetch_factor": 4} and steady.speedup == pytest.approx(1.0)
    bursts = _predict("prefetch_factor", m, cfg, dataloader_num_workers=2,
                      dataloader_wait_max_ms=40.0, dataloader_wait_median_ms=1.0)
    assert isinstance(bursts, str) and "bursts" in bursts
    assert "cannot tell" in _predict("prefetch_factor", m, cfg)
    # workers the model made for a change before it (a run without any, then 2 workers
    # kept by autofix): at their mean rate a deeper queue changes nothing
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=1, proc_cpu_mean_pct=180.0)
    p = Predictor(m, _facts(m, **kw))
    two = p.predict_steps([(workers_unit.num_workers, {"num_workers": 2})])
    deeper = p.predict_steps([(workers_unit.num_workers, {"num_workers": 2}),
                              (workers_unit.deeper_queue, {"prefetch_factor": 4})])
    assert isinstance(two, Prediction) and isinstance(deeper, Prediction)
    assert deeper.step_ms == pytest.approx(two.step_ms)


def test_persistent_workers_for_another_worker_count_use_one_worker_start(tmp_path):
    """The run had 6 workers (its epoch start: 26 ms, in the base: 3 + 26 / 24); persistent
    workers tried with 1 worker take one worker's start (14 ms) instead: (14 - 2) / 24 =
    0.5 ms a step off that base."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(dataloader_start_ms=26.0, input_worker_start_ms=14.0, dataloader_num_workers=6,
              input_inprocess_batch_ms=2.0, dataloader_epoch_batches=24)
    six = _predict("persistent_workers", m, TrainConfig(num_workers=6), **kw)
    one = _predict("persistent_workers", m, TrainConfig(num_workers=1), **kw)
    base = 3.0 + 26 / 24
    assert six.base_ms == pytest.approx(base) == one.base_ms
    assert six.step_ms == pytest.approx(base - 1.0) and one.step_ms == pytest.approx(base - 0.5)


def test_workers_on_cpus_that_give_less_than_their_count(tmp_path):
    """cpu_loader on 2 CPUs that did 1.5 CPUs' worth of work at once (SMT siblings): one
    worker beside torch's one thread makes both sides take 2 / 1.5 as long. The worker
    makes a batch in 2000 x 4/3 + 200 (its side of the hand-over) = 2867 us, which sets
    the step (the main process: 1000 x 4/3 + 200 = 1533 us); without the capacity it was
    2200 us. Two workers: the CPU bound is all the work over 1.5 CPUs, not 2."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=1, proc_cpu_mean_pct=100.0)
    full = dict(_predict("num_workers", m, **kw).candidates)
    shared = _predict("num_workers", m, cpu_capacity=1.5, **kw)
    each = dict(shared.candidates)
    assert full[(("num_workers", 1),)] == pytest.approx(3.0 / 2.2, rel=0.01)
    assert each[(("num_workers", 1),)] == pytest.approx(3.0 / 2.867, rel=0.01)
    # two workers beside torch's thread oversubscribe the CPUs: each worker gets 1.5 / 3 of
    # a CPU (4200 us a batch, 2100 with two at once), and the CPU bound sets the step:
    # (1000 + 2000 + 2 x 200) / 1.5 = 2267 us
    assert each[(("num_workers", 2),)] == pytest.approx(3.0 / 2.267, rel=0.01)


def test_a_change_of_cpu_work_is_predicted_at_both_ends_of_the_capacity_timings(tmp_path):
    """The CPUs' capacity timed 1.5, 1.75 and 2.0 after the loop: one worker's step is
    predicted at the median (1.75) and its range holds the steps at 1.5 (2867 us, as
    above) and 2.0 (2200 us), each widened by the model's error on a change of CPU work
    (model_error) and the replay's own error. A run with one timing
    (no span) keeps the point's range alone; the reports show the range beside the point."""
    import math

    from diagnose.stepmodel.prediction import model_error

    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(cpu_count=2, input_batch_bytes=400_000, dataloader_num_workers=0,
              worker_transfer_gbps=2.0, torch_num_threads=1, proc_cpu_mean_pct=100.0)
    one = {"num_workers": 1}

    def at(**more):
        return Predictor(m, _facts(m, **kw, **more))

    p = at(cpu_capacity=1.75, cpu_capacity_min=1.5, cpu_capacity_max=2.0)
    got = p.predict_change(workers_unit.num_workers, one)
    slow = at(cpu_capacity=1.5).predict_change(workers_unit.num_workers, one)
    fast = at(cpu_capacity=2.0).predict_change(workers_unit.num_workers, one)
    mid = at(cpu_capacity=1.75).predict_change(workers_unit.num_workers, one)
    assert fast.step_ms == pytest.approx(2.2, rel=0.01)
    assert slow.step_ms == pytest.approx(2.867, rel=0.01)
    assert got.step_ms == pytest.approx(mid.step_ms) and fast.step_ms < got.step_ms < slow.step_ms
    w = math.exp(model_error(got.speedup, True))
    assert got.range == pytest.approx((fast.step_ms / w * (1 - p.rel),
                                       slow.step_ms * w * (1 + p.rel)))
    assert mid.range == pytest.approx((mid.step_ms / w * (1 - p.rel), mid.step_ms * w * (1 + p.rel)))
    assert got.range[1] > mid.range[1] and got.range[0] < mid.range[0]
    # the reports show a range that wide beside the point (from the JSON too)
    from diagnose.stepmodel.prediction import prediction_line

    lo_x, hi_x = got.base_ms / got.range[1], got.base_ms / got.range[0]
    said = f"({got.speedup:.2f}x; {lo_x:.2f}-{hi_x:.2f}x over its range)"
    if got.may_not_help:
        said += ": slower" if got.range[0] >= got.base_ms else ": may not help"
    assert got.line().endswith(said) and prediction_line(got.to_json()).endswith(said)


def test_a_change_that_oversubscribes_slows_the_optimizer_too(tmp_path):
    """In-process loading beside torch's 2 threads on 2 CPUs; one worker takes a core from
    them, and the optimizer's ops, split across the threads like the model's, wait for a
    descheduled thread alike: both take up to 2 / (2 - 1) = 2x as long, for the share of
    the step the worker is busy. Its batch (2000 us, 1.5x as long beside the threads)
    sets the step here: it is busy nearly all of it. A run oversubscribed now (6 workers)
    has that in its measured optimizer, as much as its workers were busy while it ran:
    only the model's ops are freed and slowed again."""
    from tests import tracebuilder as tb

    def graph(workers: int) -> Any:
        b = tb.TraceBuilder(device=None)
        for _ in range(5):
            with b.step():
                b.dataloader(2000, workers=workers)
                b.cpu(1000, "aten::addmm")
                b.optimizer_step(kernels=10, kernel_dur=50.0)
        (tmp_path / f"w{workers}").mkdir()
        return _model(b, tmp_path / f"w{workers}").graph

    def opt_fb(g: Any) -> tuple[float, float]:
        main = (g.res == g.main) & g.is_kind(TaskKind.HOST)
        per = [float(g.dur[main & ((g.tag & int(t)) > 0)].sum()) / g.n_steps
               for t in (Tag.OPTIMIZER, Tag.FORWARD_BACKWARD)]
        return per[0], per[1]

    facts = Facts(cpu_count=2, torch_num_threads=2, input_batch_bytes=400_000,
                  proc_cpu_mean_pct=180.0, input_worker_handover_ms=0.2)
    g = graph(0)
    one = workers_unit.num_workers(g, {"num_workers": 1}, facts.replace(dataloader_num_workers=0))
    assert not isinstance(one, str)
    (opt0, fb0), (opt1, fb1) = opt_fb(g), opt_fb(one)
    assert opt0 >= 500 and 1.9 * opt0 <= opt1 <= 2 * opt0
    assert opt1 / opt0 == pytest.approx(fb1 / fb0, rel=1e-6)
    g6 = graph(6)
    two = workers_unit.num_workers(g6, {"num_workers": 2}, facts.replace(
        dataloader_num_workers=6, input_worker_batch_ms=2.0))
    assert not isinstance(two, str)
    (opt6, fb6), (opt2, fb2) = opt_fb(g6), opt_fb(two)
    assert opt2 == pytest.approx(opt6, rel=0.01) and fb2 == pytest.approx(fb6, rel=0.01)


def _inprocess(tmp_path, fetch_us: float, ops_us: float) -> Any:
    """The graph of 5 steps of in-process loading and one op, no GPU."""
    from tests import tracebuilder as tb

    b = tb.TraceBuilder(device=None)
    for _ in range(5):
        with b.step():
            b.dataloader(fetch_us)
            b.cpu(ops_us, "aten::addmm")
    return _model(b, tmp_path).graph


def test_workers_that_rest_most_of_the_step_slow_torchs_ops_only_while_they_work(tmp_path):
    """A compute-bound step (a 100 ms op beside a 6 ms in-process fetch), torch on 2
    threads on 2 CPUs. A worker makes a batch in 6 ms alone, 2u x 6 ms beside torch's
    threads (busy a share u of the step: test_num_workers_beside_torch_on_every_cpu), once
    a step: torch's ops wait for a descheduled thread (2x) only in that share of the step,
    12 / 110 or so, not all of it (which predicted 0.53x for such a job where 0.93-1.0x
    was timed). Known answer: the fixed point of op = 100 x (1 + 12u / step), u = op /
    step, step = op + 0.2 ms of hand-over (~110.8 ms)."""
    g = _inprocess(tmp_path, 6000, 100_000)
    facts = Facts(cpu_count=2, torch_num_threads=2, input_batch_bytes=400_000,
                  proc_cpu_mean_pct=190.0, input_worker_handover_ms=0.2,
                  input_worker_batch_ms=6.0, dataloader_num_workers=0)
    one = workers_unit.num_workers(g, {"num_workers": 1}, facts)
    assert not isinstance(one, str)
    fb = (one.res == one.main) & ((one.tag & int(Tag.FORWARD_BACKWARD)) > 0)
    op = float(one.dur[fb].sum()) / one.n_steps / 1e3
    step = op + 0.2
    assert op == pytest.approx(100 * (1 + 12 * (op / step) / step), rel=0.01)
    assert 110 < op < 112  # the whole rule would give 200
    # a run with 2 workers beside 2 threads now keeps the whole rule its measured work
    # is freed by: the same config again predicts the step it has
    from tests import tracebuilder as tb

    now = facts.replace(dataloader_num_workers=2)
    b2 = tb.TraceBuilder(device=None)
    for _ in range(5):
        with b2.step():
            b2.dataloader(500, workers=2)
            b2.cpu(100_000, "aten::addmm")
    (tmp_path / "w2").mkdir()
    g2 = _model(b2, tmp_path / "w2").graph
    same = workers_unit.num_workers(g2, {"num_workers": 2}, now)
    assert not isinstance(same, str)
    fb2 = (g2.res == g2.main) & ((g2.tag & int(Tag.FORWARD_BACKWARD)) > 0)
    fbs = (same.res == same.main) & ((same.tag & int(Tag.FORWARD_BACKWARD)) > 0)
    assert float(same.dur[fbs].sum()) == pytest.approx(float(g2.dur[fb2].sum()), rel=0.01)


def test_an_epoch_start_with_workers_that_wait():
    """8 workers, 96 batches an epoch, a worker's batch 100 ms: forked 20 ms each, started
    in 30 ms (1 ms of it the hand-over). Loading on a CPU: the loop waits for the slowest
    of the forks then a batch, one start and a batch, and every start-up and first batch
    over the 2 CPUs: 8 x (29 + 100) / 2 = 516 ms. Loading that waits (3 ms of the 100 on a
    CPU): the forks, 8 x 20 + 1 = 161 ms (the start-ups over the CPUs, 116 ms, are less),
    then the first batches: a loop that waits for its batches anyway (its own 6 ms a step
    under the pipeline's 12.5) loses none of them, the 8 arriving together being what the
    pipeline gives in that time; a loop busy 30 ms a step loses the whole first batch
    (100 + 96 x 30 against 96 x 30); without the clock's step, the whole batch too."""
    from diagnose.stepmodel.epochs import epoch_start_ms

    f = Facts(cpu_count=2, dataloader_num_workers=2, dataloader_epoch_batches=96,
              input_worker_start_ms=30.0, input_worker_fork_ms=20.0,
              input_worker_handover_ms=1.0, input_worker_batch_ms=100.0,
              input_worker_batch_cpu_ms=100.0)
    assert epoch_start_ms(f, {"num_workers": 8}) == pytest.approx(516 / 96)
    waits = f.replace(input_worker_batch_cpu_ms=3.0)
    assert waits.worker_batch_waits and not f.worker_batch_waits
    assert epoch_start_ms(waits, {"num_workers": 8}) == pytest.approx(261 / 96)
    loader_bound = waits.replace(step_time_unprofiled_mean_ms=60.0,
                                 dataloader_wait_unprofiled_share=0.9)
    assert epoch_start_ms(loader_bound, {"num_workers": 8}) == pytest.approx(161 / 96)
    busy = loader_bound.replace(dataloader_wait_unprofiled_share=0.5)
    assert epoch_start_ms(busy, {"num_workers": 8}) == pytest.approx(261 / 96)


def test_persistent_workers_count_the_batch_as_a_worker_makes_it(tmp_path):
    """Live workers make the epoch's first batch and those ahead, one intra-op thread
    each: a worker's batch timed after the loop (8 ms) leads over one made in the loop's
    process (a noisier timing beside torch's threads, 20 ms here), which serves where no
    worker's batch was timed. Shared CPUs: 300 ms wait less 4 batches ahead over 2 CPUs."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(dataloader_num_workers=4, dataloader_epoch_batches=4,
              dataloader_epoch_boundary_ms=300.0, step_time_steady_mean_ms=3.0,
              input_worker_start_ms=32.0, input_worker_handover_ms=2.0,
              dataloader_prefetch_factor=2, cpu_count=2, torch_num_threads=2)
    cfg = TrainConfig(num_workers=4)
    both = _predict("persistent_workers", m, cfg, input_worker_batch_ms=8.0,
                    input_inprocess_batch_ms=20.0, **kw)
    inproc = _predict("persistent_workers", m, cfg, input_inprocess_batch_ms=20.0, **kw)
    assert isinstance(both, Prediction) and isinstance(inproc, Prediction)
    assert both.base_ms - both.step_ms == pytest.approx((300 - 4 * 8 / 2) / 4, rel=1e-3)
    assert inproc.base_ms - inproc.step_ms == pytest.approx((300 - 4 * 20 / 2) / 4, rel=1e-3)


def test_the_first_steps_of_a_short_epoch_take_the_batches_made_at_its_start(tmp_path):
    """4 workers restarted every epoch of 4 batches, each worker's batch 2 ms on 2 CPUs:
    the start makes the 4 batches, so no step of the epoch waits for one and the mean step
    is the loop's own (1.2 ms) plus the start; 1 worker makes one batch at the start, and
    only the first of 4 steps takes it without waiting. A run with workers whose batches
    wait (files), and a change that keeps the run's workers, take no such credit."""
    from diagnose.stepmodel.epochs import ready_at_start

    facts = Facts(dataloader_num_workers=0, dataloader_epoch_batches=4)
    assert ready_at_start(facts, {"num_workers": 4}) == 1.0
    assert ready_at_start(facts, {"num_workers": 8}) == 1.0
    assert ready_at_start(facts, {"num_workers": 1}) == 0.25
    assert ready_at_start(facts, {"num_workers": 0}) == 0.0
    assert ready_at_start(facts, {"num_workers": 1, "persistent_workers": True}) == 0.0
    assert ready_at_start(facts, {"persistent_workers": True}) == 0.0
    assert ready_at_start(facts.replace(dataloader_num_workers=1), {"num_workers": 1}) == 0.0
    waits = facts.replace(input_worker_batch_ms=2.0, input_worker_batch_cpu_ms=0.1)
    assert waits.worker_batch_waits and ready_at_start(waits, {"num_workers": 1}) == 0.0
    assert ready_at_start(facts.replace(dataloader_epoch_batches=None), {"num_workers": 1}) == 0.0
    m = _model(mt.cpu_loader(), tmp_path)
    kw = {**EPOCH_RUN, "dataloader_epoch_batches": 4}
    p = _predict("num_workers", m, dataloader_num_workers=0, **kw)
    assert isinstance(p, Prediction)
    each = dict(p.candidates)
    # 1 worker: steps at 2.0, 1.2, then its start (6 + 2 ms) over the 4 steps
    assert 3.0 / each[(("num_workers", 1),)] == pytest.approx(
        (3 * 2.0 + 1.2) / 4 + 8 / 4, rel=0.01)


@pytest.mark.parametrize(("epoch", "last", "share"), [(4, 0.5, 0.875), (4, 1.0, 1.0),
                                                      (1, 0.25, 0.25), (4, None, 1.0),
                                                      (None, 0.5, 1.0)])
def test_an_epochs_mean_batch_holds_its_short_last_one(epoch, last, share):
    """mean_batch_share: an epoch of 4 batches whose last holds half a batch's samples
    averages 3.5 / 4 of a full batch; unknown either way, a full one."""
    from diagnose.stepmodel.epochs import mean_batch_share

    facts = Facts(dataloader_epoch_batches=epoch, dataloader_last_batch_share=last)
    assert mean_batch_share(facts) == pytest.approx(share)


def test_loading_in_process_costs_the_epochs_mean_batch(tmp_path):
    """Two workers' run (each step waits 100 us for its batch, then 3000 us of ops) whose
    epoch is 4 batches, the last holding half a batch's samples: made in process, a batch
    timed full at 2 ms costs the epoch's mean one, 3.5 / 4 of it, so the step with
    ``num_workers=0`` is 0.25 ms shorter than where every batch is full."""
    m = _model(mt.cpu_loader(steps=6, fetch_us=100.0, compute_us=3000.0, workers=2), tmp_path)
    kw = dict(cpu_count=2, dataloader_num_workers=2, torch_num_threads=1,
              input_batch_bytes=400_000, input_inprocess_batch_ms=2.0,
              dataloader_epoch_batches=4, dataloader_persistent_workers=True)

    def step(**more: Any) -> float:
        p = Predictor(m, _facts(m, **kw, **more)).predict_change(
            workers_unit.num_workers, {"num_workers": 0})
        assert isinstance(p, Prediction), p
        return p.step_ms

    full, short = step(dataloader_last_batch_share=1.0), step(dataloader_last_batch_share=0.5)
    assert full - short == pytest.approx(0.25, abs=0.01)
    assert step() == pytest.approx(full)


def test_a_batch_timed_after_the_loop_enters_the_window_at_its_pace(tmp_path):
    """A window whose replay (3.1 ms a step: a 100 us wait for a worker's batch, 3000 us of
    ops) is six times the unprofiled step (0.52 ms), past what the calibration scales: the
    prediction is the window's changed step in proportion. A batch timed after the loop at
    2 ms is real time, not the window's: it enters the window six times as long, so that
    the proportion gives it back as timed: made in process, the step is 2 ms and the
    window's ops at the unprofiled pace, 0.5 ms, not a sixth of 5 ms."""
    m = _model(mt.cpu_loader(steps=6, fetch_us=100.0, compute_us=3000.0, workers=2), tmp_path)
    window = float(np.median(m.graph.steps_measured)) / 1e3
    p = Predictor(m, _facts(m, cpu_count=4, dataloader_num_workers=2, torch_num_threads=1,
                            input_batch_bytes=400_000, input_inprocess_batch_ms=2.0,
                            dataloader_persistent_workers=True,
                            step_time_unprofiled_mean_ms=window / 6))
    assert p.facts.window_pace == pytest.approx(6.0, rel=0.02)
    got = p.predict_change(workers_unit.num_workers, {"num_workers": 0})
    assert isinstance(got, Prediction), got
    assert got.step_ms == pytest.approx(2.0 + 3.0 / 6, rel=0.05)
