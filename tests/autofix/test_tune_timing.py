"""Trials time steps as the user's loop runs them: no synchronisation inside a step, one
drain of the device queue per timed block, per-step time = block time / steps."""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix.trial import Trial, Workload  # noqa: E402
from diagnose.fixes import Facts, TrainConfig  # noqa: E402


class Drain:
    """A stand-in for torch.cuda.synchronize: counts calls; each one waits ``wait_s`` (the
    queued device work the host catches up with)."""

    def __init__(self, wait_s: float = 0.0) -> None:
        self.calls, self.wait_s = 0, wait_s

    def __call__(self) -> None:
        self.calls += 1
        if self.wait_s:
            time.sleep(self.wait_s)


def _workload(drain: Drain) -> Workload:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,))),
                        batch_size=8)
    w = Workload.from_user(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                           loss_fn=F.cross_entropy)
    w.sync = drain  # type: ignore[method-assign]
    return w


def test_a_step_does_not_synchronise() -> None:
    drain = Drain()
    w = _workload(drain)
    with Trial(w, TrainConfig.from_objects(w.loader, w.optimizer)) as t:
        for _ in range(5):
            t.step()
    assert drain.calls == 0


@pytest.mark.parametrize("what", ["run", "compute_only", "data_only"])
def test_one_sync_per_timed_block(what: str) -> None:
    drain = Drain()
    w = _workload(drain)
    with Trial(w, TrainConfig.from_objects(w.loader, w.optimizer)) as t:
        times = getattr(t, what)(2, 12, block=4)
    # the first warmup step (its own time: compile), the start of the timed blocks, and
    # one at the end of each of the 3 blocks
    assert len(times) == 3 and drain.calls == 1 + 1 + 3


def test_the_drain_is_paid_once_per_block() -> None:
    """A block's time runs to the end of its drain: the device work the host ran ahead of
    is counted, once per block, spread over the block's steps."""
    # the drain (0.2 s) dwarfs the tiny step, so the comparison holds on a busy machine
    drain = Drain(wait_s=0.2)
    w = _workload(drain)
    with Trial(w, TrainConfig.from_objects(w.loader, w.optimizer)) as t:
        per_step = t.run(1, 8, block=4)
        one = t.run(1, 8, block=1)  # the old way: a drain after every step
    assert len(per_step) == 2 and len(one) == 8
    assert (per_step >= 0.2 / 4).all() and (one >= 0.2).all()
    assert float(per_step.max()) < float(one.min())


def test_a_gc_freeze_trial_freezes_and_undoes_only_its_own() -> None:
    """gc_freeze: the trial's steps run with the collector's objects frozen, and the trial
    unfreezes them after; a user's own freeze is left as it was."""
    import gc

    w = _workload(Drain())
    cfg = TrainConfig.from_objects(w.loader, w.optimizer).replace(gc_freeze=True)
    assert gc.get_freeze_count() == 0
    with Trial(w, cfg) as t:
        t.step()
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()  # the user's own
    try:
        mine = gc.get_freeze_count()
        with Trial(w, cfg) as t:
            t.step()
        assert 0 < gc.get_freeze_count() <= mine  # not unfrozen (some frozen objects died)
    finally:
        gc.unfreeze()


def test_a_trial_after_a_kept_change_is_predicted_against_it() -> None:
    """Predictions are made against the baseline. After a kept change, a trial that sets
    the same fields again is predicted against the kept one (the model's two predictions
    divided); a change to other fields keeps its own prediction; a kept change without a
    prediction leaves the overriding trial without one."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner

    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {"threads": 2.0, "num_workers": 1.6})
    split = base.replace(num_workers=1, intra_op_threads=1)
    t.kept.append((frozenset(base.diff(split)), 2.0))
    assert t.relative(1.6, split, split.replace(num_workers=0)) == pytest.approx(0.8)
    assert t.relative(1.3, split, split.replace(pin_memory=True)) == pytest.approx(1.3)
    t.kept.append((frozenset({"pin_memory"}), None))
    pinned = split.replace(pin_memory=True)
    assert t.relative(1.1, pinned, pinned.replace(pin_memory=False)) is None


def test_a_ladder_rung_is_predicted_from_the_search_own_configs() -> None:
    """The diagnosis predicted every config num_workers' search tries (from the baseline,
    num_workers=0): after 0 -> 2 was kept, the rung 2 -> 1 is predicted as the ratio of the
    two configs' predictions, not as the kept one divided by itself."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner
    from diagnose.fixes import FIXES

    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {"num_workers": 1.77})
    t.original = base
    t.cand_preds = {"num_workers": {frozenset({("num_workers", 1)}): 1.10,
                                    frozenset({("num_workers", 2)}): 1.77}}
    two = base.replace(num_workers=2)
    t.kept.append((frozenset({"num_workers"}), 1.77))
    fix = FIXES["num_workers"]
    assert t.relative(1.77, two, two.replace(num_workers=1), fix) == pytest.approx(1.10 / 1.77)
    assert t.relative(1.77, two, base, fix) == pytest.approx(1 / 1.77)  # back to the baseline
    # a config the search did not predict: the kept prediction divided out, as before
    assert t.relative(1.77, two, two.replace(num_workers=4), fix) == pytest.approx(1.0)


def test_a_trial_after_kept_changes_is_predicted_with_them_in_the_model(tmp_path) -> None:
    """With the diagnosis' step model, the kept changes are in the model when the next
    trial is predicted (tests/fixes/test_workers.py's cpu_loader run, 2000 us fetch +
    1000 us ops, 0.9 ms of collector pauses, 0.6 of them in the loading): after the
    batched fetch (3000 -> 1200 us, the loading's pauses gone with it) gc_freeze is
    predicted over it (1200 -> 900 us: the ops' 0.3 ms, 1.33x), not over the baseline
    (3000 -> 2100, 1.43x) nor as the 4x of taking every pause off what is left.
    num_workers after a kept threads split goes through the split's transform, which
    covers it."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner
    from diagnose.fixes import FIXES
    from diagnose.stepmodel import step_model
    from diagnose.stepmodel.prediction import Predictor
    from tests import modeltraces as mt

    m = step_model(mt.as_trace(mt.cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "gc_pause_ms": 0.9,
             "gc_pause_loader_ms": 0.6, "input_fetch_ms": 1.5, "input_collate_ms": 0.5,
             "input_batched_fetch_ms": 0.2}
    facts = Facts.from_metrics(facts)
    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {"batched_fetch": 2.5, "gc_freeze": 1.43})
    t.original, t.predictor = base, Predictor(m, facts)
    batched = base.replace(batched_fetch=True)
    assert t.relative(2.5, base, batched, FIXES["batched_fetch"]) == pytest.approx(2.5, rel=0.01)
    t.kept_fixes.append((FIXES["batched_fetch"], frozenset({"batched_fetch"})))
    frozen = batched.replace(gc_freeze=True)
    assert t.relative(1.43, batched, frozen, FIXES["gc_freeze"]) == pytest.approx(
        1.2 / 0.9, rel=0.01)
    # a field no kept fix or this one set: no composed prediction (the older rules answer)
    assert t.composed(FIXES["gc_freeze"], batched.replace(pin_memory=True),
                      frozen.replace(pin_memory=True)) is None


def test_changes_to_the_same_fields_are_one_change_through_the_covering_transform() -> None:
    """A kept threads split (num_workers, intra_op_threads), then num_workers 1 -> 0: one
    change, through the split's transform (its fields cover num_workers), with the
    config's values; a ladder's rungs (num_workers twice) are its own transform with the
    rung's value; pin_memory beside them is a change of its own, after them."""
    from diagnose.autofix.search import _steps
    from diagnose.fixes import FIXES

    base = TrainConfig()
    split = base.replace(num_workers=1, intra_op_threads=1)
    kept = [(FIXES["threads"], frozenset({"num_workers", "intra_op_threads"}))]
    back = _steps(base, split.replace(num_workers=0),
                  [*kept, (FIXES["num_workers"], frozenset({"num_workers"}))])
    assert back == [(FIXES["threads"].transform, {"intra_op_threads": 1})]
    rungs = [(FIXES["num_workers"], frozenset({"num_workers"}))] * 2
    assert _steps(base, base.replace(num_workers=4), rungs) == [
        (FIXES["num_workers"].transform, {"num_workers": 4})]
    pinned = split.replace(pin_memory=True)
    assert _steps(base, pinned, [*kept, (FIXES["pin_memory"], frozenset({"pin_memory"}))]) == [
        (FIXES["threads"].transform, {"num_workers": 1, "intra_op_threads": 1}),
        (FIXES["pin_memory"].transform, {"pin_memory": True})]
    assert _steps(base, pinned, kept) is None  # pin_memory: no owner


def test_persistent_workers_after_kept_workers_is_predicted_on_the_kept_step(tmp_path) -> None:
    """A run diagnosed without workers has no persistent_workers prediction; after
    num_workers 0 -> 1 was kept (3.0 -> 2.2 ms in the model: the worker makes a batch in
    2000 + 200 us), the trial is predicted for that config: a worker started in 14 ms
    less one 2 ms batch, once per 24 batches, is 0.5 ms a step off 2.2 ms."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner
    from diagnose.fixes import FIXES
    from diagnose.stepmodel import step_model
    from diagnose.stepmodel.prediction import Predictor
    from tests import modeltraces as mt

    m = step_model(mt.as_trace(mt.cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
             "input_batch_bytes": 1000, "torch_num_threads": 1, "dataloader_num_workers": 0,
             "input_worker_handover_ms": 0.2, "proc_cpu_mean_pct": 100.0,
             "input_fetch_ms": 1.5, "input_collate_ms": 0.5, "input_worker_start_ms": 14.0,
             "dataloader_epoch_batches": 24}
    facts = Facts.from_metrics(facts)
    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    assert base.num_workers == 0
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {})
    t.original, t.predictor, t.facts = base, Predictor(m, facts), facts
    one = base.replace(num_workers=1)
    t.kept_fixes.append((FIXES["num_workers"], frozenset({"num_workers"})))
    assert t.tuned_speedup(one) == pytest.approx(3.0 / 2.2, rel=0.01)
    kept = one.replace(persistent_workers=True)
    assert t.relative(None, one, kept, FIXES["persistent_workers"]) == pytest.approx(
        2.2 / 1.7, rel=0.01)


def _slow_start(_: int) -> None:
    time.sleep(0.2)  # a worker that takes 0.2 s to start (a fork of a big process)


def _slow_workers(samples: int) -> tuple[Workload, TrainConfig]:
    """A workload of ``samples`` rows in batches of 8, and its config with one worker that
    takes 0.2 s to start."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    loader = DataLoader(TensorDataset(torch.randn(samples, 8),
                                      torch.randint(0, 4, (samples,))),
                        batch_size=8, worker_init_fn=_slow_start)
    w = Workload.from_user(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                           loss_fn=F.cross_entropy)
    return w, TrainConfig.from_objects(w.loader, w.optimizer).replace(num_workers=1)


def test_an_epochs_start_is_spread_over_its_steps() -> None:
    """Workers that are not persistent start again every epoch, and the loop waits for
    them: a round's fresh iterator times that start (here over 0.2 s: a worker_init_fn
    that sleeps) and each timed step carries its share (one start per 128 batches: 1.5 ms
    or more), which 8 timed steps of a 128-batch epoch would not hold. Persistent workers
    start once a run; without workers there is nothing to start."""
    w, base = _slow_workers(1024)
    with Trial(w, base) as t:
        assert t.epoch_steps() is None  # 128 steps: longer than a whole epoch's timing
        times = t.run(2, 8, block=4)
        assert t.start_s is not None and t.start_s >= 0.2 and t.timed_restarts == 0
        assert t.epoch_share_s() == pytest.approx(t.start_s / 128)
        assert (times >= 0.2 / 128).all()
    with Trial(w, base.replace(persistent_workers=True)) as t:
        t.run(2, 8, block=4)
        assert t.start_s is not None and t.start_s >= 0.2 and t.epoch_share_s() == 0.0
    with Trial(w, base.replace(num_workers=0)) as t:
        t.run(2, 8, block=4)  # its steps' times depend on the machine: only the share counts
        assert t.epoch_share_s() == 0.0
    # timed blocks that cross an epoch's end hold its start already: nothing is added
    with Trial(w, base) as t:
        t.run(126, 8, block=4)
        assert t.timed_restarts == 1 and t.epoch_share_s() == 0.0
        # that end (the worker shut down and joined) was timed, and a later round whose
        # blocks hold no epoch's start or end carries both
        assert t.stop_s is not None and t.stop_s > 0
        t.run(2, 8, block=4)
        assert t.timed_restarts == 0
        assert t.epoch_share_s() == pytest.approx((t.start_s + t.stop_s) / 128)


def test_a_short_epoch_with_workers_is_timed_whole() -> None:
    """An epoch of 32 steps with a worker: a round times the whole epoch, one value, from
    iter() (the worker's 0.2 s start inside it: at least 0.2 / 32 s a step) through its end,
    with one drain at each end after the trial's warm-up steps; nothing is added for the
    epoch's start. Without workers there is no cycle: the blocks as before."""
    drain = Drain()
    w, base = _slow_workers(256)
    w.sync = drain  # type: ignore[method-assign]
    with Trial(w, base) as t:
        assert t.epoch_steps() == 32
        first = t.run(2, 8, block=4)
        assert len(first) == 1 and first[0] >= 0.2 / 32
        assert drain.calls == 1 + 2  # the first warm-up step; the epoch's two ends
        again = t.run(2, 8, block=4)  # warmed up: the epoch alone
        assert len(again) == 1 and again[0] >= 0.2 / 32 and drain.calls == 3 + 2
        assert t.epoch_share_s() == 0.0
    with Trial(w, base.replace(num_workers=0)) as t:
        assert t.epoch_steps() is None and len(t.run(2, 8, block=4)) == 2


def test_a_tied_advice_is_tried_first() -> None:
    """The threads split's configs as the diagnosis predicted them: 1 worker 1.48x, 2
    workers 1.47x (a tie within TIE), and the advice names 2 workers (its loader has
    headroom): autofix tries the advice first. A config predicted clearly better than the
    advice keeps its place; no advice, the predicted order."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner, _advice_first
    from diagnose.fixes import FIXES

    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {"threads": 1.48})
    t.original = base
    one = base.replace(num_workers=1, intra_op_threads=1)
    two = base.replace(num_workers=2, intra_op_threads=1)
    fix = FIXES["threads"]

    def key(c: TrainConfig) -> frozenset:
        return frozenset((k, new) for k, (_, new) in base.diff(c).items())

    t.cand_preds = {"threads": {key(one): 1.48, key(two): 1.47}}
    assert _advice_first(t, fix, [one, two]) == [one, two]  # no advice: predicted order
    t.advised = {"threads": frozenset({("num_workers", 2), ("intra_op_threads", 1)})}
    assert _advice_first(t, fix, [one, two]) == [two, one]
    t.cand_preds["threads"][key(one)] = 1.7
    assert _advice_first(t, fix, [one, two]) == [one, two]


def test_each_arm_has_its_own_warmup_and_blocks() -> None:
    """A baseline without workers warms up 3 steps and times blocks of 4, whatever the
    candidate has; 16 workers start inside their own 19-step warmup and are timed in
    blocks of 32 (one round-robin of theirs twice). The budget share is sized from both:
    the workers' epoch of 32 steps is timed whole, so their arm is those 32 steps."""
    from diagnose.autofix.measure import Measurer, Plan

    w = _workload(Drain())
    m = Measurer(w, Plan(), 0.03, None)
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    many = base.replace(num_workers=16)
    assert m.layout(base) == (3, 8, 4)
    assert m.layout(many) == (19, 32, 32)
    m.step_s = 0.06  # 60 ms steps: (3 + 8) + 32 steps a round = 2.58 s
    looks = m.schedule(3.7, 2.58 * 6, base, many)
    assert looks.at[-1] == 6


def test_a_climb_starts_at_the_rung_predicted_best() -> None:
    """num_workers from 0 on 16 CPUs: the model predicted 8 workers best (3.7x) and 16 at
    2.8x; the climb's first trial is 0 -> 8, not the 16 the input/compute ratio names.
    Without predictions it starts where the fix's estimate says."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner, try_fix
    from diagnose.fixes import FIXES

    class Record(Tuner):
        def trial(self, fix, best, cand, finding):  # type: ignore[no-untyped-def]
            tried.append(cand.num_workers)
            return False

    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    preds = {1: 1.9, 2: 2.9, 4: 3.5, 8: 3.7, 16: 2.8}
    t = Record(w, Plan(), 0.03, 10, 60.0, None, {"num_workers": 3.7})
    t.original = base
    t.cand_preds = {"num_workers": {frozenset({("num_workers", k)}): p
                                    for k, p in preds.items()}}
    facts = Facts(cpu_count=16)
    tried: list[int] = []
    try_fix(t, FIXES["num_workers"], base, facts, "IN001", input_ms=60.0, compute_ms=1.7)
    assert tried[0] == 8
    t2 = Record(w, Plan(), 0.03, 10, 60.0, None, {})
    t2.original = base
    tried = []
    try_fix(t2, FIXES["num_workers"], base, facts, "IN001", input_ms=60.0, compute_ms=1.7)
    assert tried[0] == 16


def test_a_trial_past_its_budget_share_still_gets_three_rounds() -> None:
    """The deadline ends a trial's rounds only from the third on: two rounds give an
    interval of one degree of freedom, which a true 9x gain with noisy rounds did not
    clear (reverted with [0.01, 14830]). Before the deadline, the looks decide."""
    from diagnose.autofix.measure import DEADLINE_MIN_ROUNDS, Measurer, Plan

    w = _workload(Drain())
    m = Measurer(w, Plan(), 0.03, None)
    calls = {"a": 0, "b": 0}

    def arm(name: str):
        def run():
            calls[name] += 1
            return np.array([0.01])
        return run

    looked: list[int] = []

    def done(res) -> bool:
        looked.append(len(res["a"]))
        return False

    past = time.perf_counter() - 1.0
    res = m._rounds([("a", arm("a")), ("b", arm("b"))], [10], "t", done, past)
    assert DEADLINE_MIN_ROUNDS == 3
    assert len(res["a"]) == len(res["b"]) == 3 and looked == [3]
    res = m._rounds([("a", arm("a")), ("b", arm("b"))], [4, 10], "t", done, None)
    assert len(res["a"]) == 10 and looked[1:] == [4, 10]


def test_a_split_is_predicted_again_with_the_capacity_timed_before_its_trials(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture timed the CPUs at 1.5 (a busy moment): one worker beside torch's thread
    was predicted 3.0 -> 2.867 ms (tests/fixes/test_workers.py). Before the trials the
    CPUs time 2.0: the fix's configs are predicted again at the most of all the timings
    (3.0 -> 2.2 ms), the range keeps the capture's 1.5 as its slow end, and the notes say
    so. A later timing below the most moves nothing but the range; a fix that moves no CPU
    work times nothing."""
    from diagnose.autofix import search
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner
    from diagnose.fixes import FIXES
    from diagnose.stepmodel import step_model
    from diagnose.stepmodel.prediction import Predictor
    from tests import modeltraces as mt

    m = step_model(mt.as_trace(mt.cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
             "input_batch_bytes": 400_000, "dataloader_num_workers": 0,
             "worker_transfer_gbps": 2.0, "torch_num_threads": 1, "proc_cpu_mean_pct": 100.0,
             "cpu_capacity": 1.5, "cpu_capacity_min": 1.5, "cpu_capacity_max": 1.5}
    facts = Facts.from_metrics(facts)
    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    fix = FIXES["num_workers"]
    pred = Predictor(m, facts)
    first = fix.predict(pred, base, facts)
    one = frozenset({("num_workers", 1)})
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {"num_workers": first.speedup})
    t.original, t.predictor, t.facts = base, pred, facts
    t.cand_preds = {fix.id: {frozenset(c): s for c, s in first.candidates}}
    assert t.cand_preds[fix.id][one] == pytest.approx(3.0 / 2.867, rel=0.01)
    cands = fix.candidates(base, t.facts)
    timed = [2.0, 1.2]
    monkeypatch.setattr(search, "time_cpu_capacity", lambda cpus: timed.pop(0))
    t.retime_capacity(fix, cands, base)
    assert t.cand_preds[fix.id][one] == pytest.approx(3.0 / 2.2, rel=0.01)
    assert t.relative(None, base, base.replace(num_workers=1), fix) == pytest.approx(
        3.0 / 2.2, rel=0.01)
    assert t.preds[fix.id] == pytest.approx(max(t.cand_preds[fix.id].values()))
    assert t.facts.cpu_capacity == 2.0 and t.facts.cpu_capacity_min == 1.5
    got = pred.predict_change(fix.transform, {"num_workers": 1})
    import math

    from diagnose.stepmodel.prediction import model_error

    widen = math.exp(model_error(got.speedup, True))
    assert got.range[1] == pytest.approx(2.867 * widen * (1 + pred.rel), rel=0.01)
    t.retime_capacity(fix, cands, base)  # 1.2: the range's slow end only
    assert t.cand_preds[fix.id][one] == pytest.approx(3.0 / 2.2, rel=0.01)
    assert (t.facts.cpu_capacity, t.facts.cpu_capacity_min) == (2.0, 1.2)
    assert t.capacity_note() == (
        "the CPUs' capacity, timed again before the trials that move CPU work: 1.20-2.00 "
        "CPUs (the capture's: 1.50); those trials were predicted at the most of all the "
        "timings")
    # ends that print alike print once (the demo read "1.98-1.98 CPUs")
    t.capacity_timings = [1.981, 1.984]
    assert "work: 1.98 CPUs (the capture's" in (t.capacity_note() or "")

    def never(cpus: int) -> float:
        raise AssertionError("timed for a fix that moves no CPU work")

    monkeypatch.setattr(search, "time_cpu_capacity", never)
    t.retime_capacity(FIXES["pin_memory"], [base.replace(pin_memory=True)], base)


def test_a_trial_from_the_baseline_is_predicted_as_the_diagnosis_predicts_it(tmp_path) -> None:
    """A run with six workers that start each epoch (26 ms over 24 batches): every
    prediction, a change of workers too, starts from the step with that start in it. The
    first trial's prediction is the diagnosis' own speedup for that change (once, the
    baseline's step left the start out: too_many_workers' 6 -> 2 was 1.43x in its trial
    and 1.52x in its finding)."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner
    from diagnose.fixes import FIXES
    from diagnose.stepmodel import step_model
    from diagnose.stepmodel.prediction import Predictor
    from tests import modeltraces as mt

    m = step_model(mt.as_trace(mt.cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
             "input_batch_bytes": 400_000, "dataloader_num_workers": 6,
             "worker_transfer_gbps": 2.0, "torch_num_threads": 1, "proc_cpu_mean_pct": 180.0,
             "dataloader_start_ms": 26.0, "input_worker_start_ms": 14.0,
             "input_inprocess_batch_ms": 2.0, "dataloader_epoch_batches": 24,
             "input_worker_batch_ms": 2.0}
    facts = Facts.from_metrics(facts)
    w = _workload(Drain())
    six = TrainConfig.from_objects(w.loader, w.optimizer).replace(num_workers=6)
    fix = FIXES["num_workers"]
    pred = Predictor(m, facts)
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {})
    t.original, t.predictor, t.facts = six, pred, facts
    said = pred.predict_change(fix.transform, {"num_workers": 2})
    # the six workers' start, a step's share, is in the one base
    assert said.base_ms == pytest.approx(pred.base_ms) == pytest.approx(3.0 + 26 / 24)
    two = six.replace(num_workers=2)
    assert t.composed(fix, six, two) == pytest.approx(said.speedup)
    assert t.composed(fix, six, two) == pytest.approx(pred.base_ms / said.step_ms)
    t.kept_fixes.append((fix, frozenset({"num_workers"})))
    assert t.tuned_speedup(two) == pytest.approx(said.speedup)
    # and the next rung from there: the two configs' steps, each with its own start
    one = pred.predict_change(fix.transform, {"num_workers": 1})
    assert t.composed(fix, two, six.replace(num_workers=1)) == pytest.approx(
        said.step_ms / one.step_ms)


def test_no_trial_is_predicted_where_the_diagnosis_withheld_its_number(tmp_path) -> None:
    """A new user's autofix, on a machine another job kept busy: the diagnosis withheld
    every change of workers ('other processes held the CPU ...'), yet the decisions table
    predicted num_workers 3 -> 2 at 2.21x (measured 1.04x). The diagnosis withholds them in
    the Predictor (Predictor.withhold), which autofix shares: no trial of them is
    predicted either, and the other changes still are."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner
    from diagnose.fixes import FIXES
    from diagnose.fixes.findings import ON_A_BUSY_MACHINE, predict_findings
    from diagnose.stepmodel import step_model
    from diagnose.stepmodel.prediction import Predictor
    from tests import modeltraces as mt

    m = step_model(mt.as_trace(mt.cpu_loader(), tmp_path))
    metrics = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
               "input_batch_bytes": 400_000, "dataloader_num_workers": 6,
               "worker_transfer_gbps": 2.0, "torch_num_threads": 1,
               "proc_cpu_mean_pct": 180.0, "input_inprocess_batch_ms": 2.0,
               "input_worker_batch_ms": 2.0}
    busy = {**metrics, "step_cpu_wait_unprofiled_share": 0.6, "host_cpu_others_cpus": 1.2,
            "workers_count": 6}
    facts = Facts.from_metrics(metrics)
    w = _workload(Drain())
    six = TrainConfig.from_objects(w.loader, w.optimizer).replace(num_workers=6)
    quiet = Predictor(m, facts)
    predict_findings([], quiet, six, metrics, FIXES)  # a quiet run: nothing withheld
    assert quiet.withholds({"num_workers"}) is None
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {})
    t.original, t.predictor, t.facts = six, quiet, facts
    two = six.replace(num_workers=2)
    assert t.composed(FIXES["num_workers"], six, two) is not None
    t.predictor = Predictor(m, facts)
    predict_findings([], t.predictor, six, busy, FIXES)  # the diagnosis, on a busy machine
    for fields in ({"num_workers"}, {"intra_op_threads"}, {"persistent_workers"}):
        assert (t.predictor.withholds(fields) or "").startswith(ON_A_BUSY_MACHINE)
    said = t.predictor.predict_change(FIXES["num_workers"].transform, {"num_workers": 2})
    assert isinstance(said, str) and said.startswith(ON_A_BUSY_MACHINE)
    assert t.composed(FIXES["num_workers"], six, two) is None
    t.kept_fixes.append((FIXES["num_workers"], frozenset({"num_workers"})))
    assert t.tuned_speedup(two) is None
    assert t.predictor.withholds({"pin_memory"}) is None  # the others predict


def test_a_downward_search_tries_the_rung_predicted_best_first(monkeypatch) -> None:
    """4 workers on 2 CPUs: the diagnosis advised num_workers=0 (1.08x); 2 and 1 were
    predicted at 0.96x. A new user's autofix walked the ladder 4 -> 2, 4 -> 1, then
    4 -> 0 with what was left of its budget (4 rounds: no verdict). The rung predicted
    best goes first; then the rest below the best so far, in ladder order."""
    from diagnose.autofix.measure import Plan
    from diagnose.autofix.search import Tuner, try_fix
    from diagnose.fixes import FIXES

    w = _workload(Drain())
    base = TrainConfig.from_objects(w.loader, w.optimizer).replace(num_workers=4)
    t = Tuner(w, Plan(), 0.03, 10, 60.0, None, {"num_workers_cap": 1.08})
    t.original = base
    t.cand_preds = {"num_workers_cap": {frozenset({("num_workers", 2)}): 0.96,
                                        frozenset({("num_workers", 1)}): 0.96,
                                        frozenset({("num_workers", 0)}): 1.08}}
    tried: list[int] = []

    def trial(fix, best, cand, finding, keep=()):
        tried.append(cand.num_workers)
        return cand.num_workers in keep

    monkeypatch.setattr(t, "retime_capacity", lambda *a: None)
    facts = Facts(device_type="cpu", cpu_count=2)
    fix = FIXES["num_workers_cap"]
    monkeypatch.setattr(t, "trial", trial)
    assert try_fix(t, fix, base, facts, "IN004", input_ms=1.0, compute_ms=1.0) == base
    assert tried == [0, 2, 1]
    # the first kept: nothing left below it; none predicted: the ladder's own order
    tried.clear()
    t.searched.clear()
    monkeypatch.setattr(t, "trial", lambda *a: trial(*a, keep=(0,)))
    assert try_fix(t, fix, base, facts, "IN004", input_ms=1.0, compute_ms=1.0).num_workers == 0
    assert tried == [0]
    tried.clear()
    t.searched.clear()
    t.cand_preds = {}
    monkeypatch.setattr(t, "trial", trial)
    try_fix(t, fix, base, facts, "IN004", input_ms=1.0, compute_ms=1.0)
    assert tried == [2, 1, 0]


def test_a_baseline_whose_pace_moved_between_trial_and_check_is_said() -> None:
    """A new user's autofix on a machine under another job's load: the first trial's
    baseline took 21.7 ms a step and the before/after check's 67.8 ms, and the table said
    6.38x beside a 1.96x trial with nothing to say why. A note says the pace moved; a
    baseline within PACE_MOVED of itself says nothing."""
    from types import SimpleNamespace

    from diagnose.autofix.decisions import Decision
    from diagnose.autofix.runner import PACE_MOVED, _pace_moved

    first = [Decision("num_workers", "num_workers 2 -> 0", "kept", "", finding="IN001",
                      baseline_ms=21.7, trial_ms=8.18)]
    note = _pace_moved(first, SimpleNamespace(base_ms=67.84))
    assert note is not None and note.startswith(
        "the baseline's step took 21.70 ms in the first trial and 67.84 ms in the "
        "before/after check")
    assert _pace_moved(first, SimpleNamespace(base_ms=21.7 * PACE_MOVED * 0.99)) is None
    assert _pace_moved(first, None) is None and _pace_moved([], SimpleNamespace(base_ms=9.0)) \
        is None
