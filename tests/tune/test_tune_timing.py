"""Trials time steps as the user's loop runs them: no synchronisation inside a step, one
drain of the device queue per timed block, per-step time = block time / steps."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.fixes import TrainConfig  # noqa: E402
from diagnose.tune.trial import Trial, Workload  # noqa: E402


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
    from diagnose.tune.measure import Plan
    from diagnose.tune.search import Tuner

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
    from diagnose.fixes import FIXES
    from diagnose.tune.measure import Plan
    from diagnose.tune.search import Tuner

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
