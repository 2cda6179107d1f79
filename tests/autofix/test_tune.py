"""autofix: trials keep what helps and revert what does not, survive out-of-memory,
leave no worker processes, and put model, optimizer and RNG state back bit-exact."""

from __future__ import annotations

import random
import time

import numpy as np
import psutil
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from diagnose.autofix import (  # noqa: E402
    FITS,
    KEPT,
    NO_FIT,
    NOT_APPLICABLE,
    REVERTED,
    Plan,
    TuneError,
    autofix,
)
from diagnose.autofix.trial import build_loader, build_optimizer  # noqa: E402
from diagnose.fixes import Fix, TrainConfig  # noqa: E402

QUICK = Plan.quick()


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a busy 2-CPU machine OpenMP threads of a tiny model spin
    against the DataLoader workers and other processes (steps of ~1 ms become 50 ms)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Sleepy(Dataset):
    """Each sample waits ~0.5 ms (storage latency): worker processes overlap the waits
    without needing CPU, so they help even on a busy machine."""

    def __init__(self, n: int = 512, delay: float = 0.0005) -> None:
        self.x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.delay)
        return self.x[i], i % 4


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_a_fix_that_helps_is_kept_and_no_worker_is_left() -> None:
    """Workers overlap a loader's waits (2 ms a sample, 16 ms a batch): about 2x, clear of
    a noisy machine's spread. With 0.5 ms a sample, a 2-vCPU host whose pace moved by
    half within seconds measured 0 -> 2 workers 1.30x [0.88, 1.90] in the quick plan's
    rounds, and kept nothing."""
    before_children = children()
    model, ds = make_model(), Sleepy(delay=0.002)
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    between: list[set[int]] = []  # worker processes alive at the start of every round
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["num_workers"], plan=QUICK,
                progress=lambda msg: between.append(children() - before_children))
    assert len(between) > 4 and not any(between)  # each trial's workers are gone after it
    assert "num_workers" in r.kept, r.render_text()
    assert r.best.num_workers >= 1 and r.speedup is not None and r.speedup.lo > 1.0
    kept = [d for d in r.decisions if d.status == KEPT]
    assert all(d.speedup is not None and d.speedup.lo > 1 + r.min_gain for d in kept)
    # ready to use: the same dataset and sampler, the winning settings; yours unchanged
    assert r.loader is not loader and r.loader.dataset is ds and r.loader.sampler is loader.sampler
    assert r.loader.num_workers == r.best.num_workers and loader.num_workers == 0
    assert "num_workers=" in r.code and r.bound is not None and r.bound.limited_by == "input"
    assert r.optimizer is None  # optimizer settings unchanged: keep yours
    assert children() <= before_children  # every trial's workers were shut down
    assert "autofix decisions" in r.render_text()


def test_a_fix_that_does_not_help_is_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    """cudnn.benchmark changes nothing on the CPU: the trial must show no gain. Its arms
    really run (the switch is set and put back), but 4 rounds timed on a busy 2-CPU host
    read a no-op as anything from 0.9x to 1.1x, so each step arm's times are replaced by
    a busy host's, both arms drawn alike: each arm's level moved by ~10% (one seeded draw
    an arm, so the same on any machine), its blocks by 2%. The draws read the no-op as
    ~1.07x, over the 1.03 bar: only the interval says it is noise, and it is reverted."""
    from diagnose.autofix.measure import Measurer

    real_arm = Measurer._arm
    levels, blocks = np.random.default_rng(9), np.random.default_rng(0)

    def arm(self, t, what, warmup, n, k):  # type: ignore[no-untyped-def]
        run_real = real_arm(self, t, what, warmup, n, k)

        def run() -> np.ndarray:
            real = run_real()
            if what != "step":
                return real
            level = 1e-3 * np.exp(0.10 * levels.standard_normal())  # this arm's pace
            return level * (1 + 0.02 * blocks.standard_normal(len(real)))
        return run

    monkeypatch.setattr(Measurer, "_arm", arm)
    noop = Fix("noop_test", "cudnn.benchmark on a CPU", "# before\n# after", auto=True,
               change={"cudnn_benchmark": True})
    model = make_model()
    ds = TensorDataset(torch.randn(2048, 8), torch.randint(0, 4, (2048,)))
    loader = DataLoader(ds, batch_size=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    flag = torch.backends.cudnn.benchmark
    plan = Plan(warmup=2, round_s=0.1, min_steps=12, max_steps=80, min_rounds=4, max_rounds=4)
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=[noop], plan=plan)
    (d,) = r.decisions
    assert d.status == REVERTED and d.speedup is not None and not d.speedup.above(1.03)
    assert d.speedup.ratio > 1.03, d.speedup  # the chance gain the interval sees through
    assert d.baseline_ms and d.trial_ms and "CI" in d.reason
    assert r.best == r.baseline and r.kept == [] and r.final is None and r.code == ""
    assert torch.backends.cudnn.benchmark == flag  # the global switch is put back


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    return {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "opt": {k: {n: t.clone() for n, t in s.items()}
                for k, s in opt.state_dict()["state"].items()},
        "opt_ids": {k: {n: id(t) for n, t in s.items()} for k, s in opt.state.items()},
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
        "param_ids": [id(p) for p in model.parameters()],
        "training": [m.training for m in model.modules()],
        "torch_rng": torch.get_rng_state(),
        "np_rng": np.random.get_state(),
        "py_rng": random.getstate(),
    }


def _assert_same(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k  # bit-exact
    for ga, gb in zip(a["grads"], b["grads"], strict=True):
        assert (ga is None and gb is None) or torch.equal(ga, gb)
    for k in a["opt"]:
        for n in a["opt"][k]:
            assert torch.equal(a["opt"][k][n], b["opt"][k][n]), (k, n)
    assert a["opt_ids"] == b["opt_ids"]  # the same state tensors: the optimizer was not touched
    assert a["groups"] == b["groups"] and a["param_ids"] == b["param_ids"]
    assert a["training"] == b["training"]
    assert torch.equal(a["torch_rng"], b["torch_rng"])
    na, nb = a["np_rng"], b["np_rng"]
    assert na[0] == nb[0] and np.array_equal(na[1], nb[1]) and na[2:] == nb[2:]
    assert a["py_rng"] == b["py_rng"]


def test_state_is_restored_bit_exact() -> None:
    model = make_model()
    gen = torch.Generator().manual_seed(3)
    loader = DataLoader(Sleepy(256), batch_size=8, shuffle=True, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in list(loader)[:2]:  # real optimizer state and gradients left in place
        F.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()  # a flag trials must not leave changed
    model[1].train()
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    before, gen_state = _state(model, opt), gen.get_state()
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["num_workers"], plan=QUICK,
                max_trials=1)
    assert r.trials == 1
    _assert_same(before, _state(model, opt))
    assert torch.equal(gen.get_state(), gen_state)
    assert loader.num_workers == 0 and loader._iterator is None


def test_keep_tuned_state_keeps_the_trained_weights() -> None:
    model = make_model()
    loader = DataLoader(Sleepy(256), batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w0 = model[0].weight.detach().clone()
    autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["persistent_workers"],
            plan=QUICK, keep_tuned_state=True)
    assert not torch.equal(w0, model[0].weight)


def _oom_step(limit: int):
    def step_fn(model: nn.Module, batch: tuple) -> torch.Tensor:
        x, y = batch
        if x.shape[0] > limit:  # what a too-large batch does on a GPU
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB")
        return F.cross_entropy(model(x), y)
    return step_fn


def test_out_of_memory_trials_are_survived_and_the_batch_search_keeps_the_effective_batch() -> None:
    model = make_model()
    ds = TensorDataset(torch.randn(2048, 8), torch.randint(0, 4, (2048,)))
    loader = DataLoader(ds, batch_size=64, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    r = autofix(model, loader, opt, step_fn=_oom_step(16), fixes=["larger_batch"], plan=QUICK)
    assert (r.baseline.batch_size, r.baseline.grad_accum_steps) == (16, 4)  # largest that fits
    assert r.baseline.effective_batch == 64 == r.original.effective_batch
    search = [d for d in r.decisions if d.fix == "grad_accumulation"]
    assert search[0].status == NO_FIT and "out of memory" in search[0].reason
    assert any(d.status == FITS and "16" in d.change for d in search)
    assert not any(d.status == FITS and "32" in d.change for d in search)
    (trial,) = [d for d in r.decisions if d.fix == "larger_batch"]
    assert trial.status == NO_FIT and "32" in trial.change  # the trial ran out of memory ...
    assert r.best == r.baseline  # ... was recorded and reverted; autofix went on
    assert r.loader.batch_size == 16 and r.step_settings()["grad_accum_steps"] == 4
    assert loader.batch_size == 64
    assert any("does not fit" in n for n in r.notes)
    # the report says whose step its times are: autofix's own, not the user's whole loop
    from diagnose.autofix.runner import STEP_TIMED

    assert STEP_TIMED in r.notes


def test_nothing_fits_is_one_clear_error() -> None:
    model = make_model()
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    with pytest.raises(TuneError, match="micro-batch 1"):
        autofix(model, DataLoader(ds, batch_size=4), torch.optim.SGD(model.parameters(), lr=0.1),
                step_fn=_oom_step(0), fixes=[], plan=QUICK)


def test_user_errors_are_one_line() -> None:
    model = make_model()
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    loader = DataLoader(ds, batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TuneError, match="exactly one of loss_fn"):
        autofix(model, loader, opt)
    with pytest.raises(TuneError, match="optimizer="):
        autofix(model, loader, None, loss_fn=F.cross_entropy)
    with pytest.raises(TuneError, match="DataLoader"):
        autofix(model, [1, 2], opt, loss_fn=F.cross_entropy)
    with pytest.raises(TuneError, match="unknown fix"):
        autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["no_such_fix"], plan=QUICK)
    triples = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64), torch.randn(64)),
                         batch_size=8)
    with pytest.raises(TuneError, match="step_fn"):
        autofix(model, triples, opt, loss_fn=F.cross_entropy, fixes=[], plan=QUICK)


def test_rebuilt_optimizer_and_loader_leave_the_originals_alone() -> None:
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.8, 0.9), foreach=False)
    F.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 2, 3])).backward()
    opt.step()
    new = build_optimizer(opt, TrainConfig(optimizer_foreach=True))
    assert type(new) is type(opt) and new is not opt
    assert new.param_groups[0]["foreach"] is True and opt.param_groups[0]["foreach"] is False
    assert new.param_groups[0]["lr"] == 3e-4 and new.param_groups[0]["betas"] == (0.8, 0.9)
    assert [p is q for p, q in zip(new.param_groups[0]["params"], opt.param_groups[0]["params"],
                                   strict=True)] == [True] * len(opt.param_groups[0]["params"])
    p0 = opt.param_groups[0]["params"][0]
    assert torch.equal(new.state[p0]["exp_avg"], opt.state[p0]["exp_avg"])
    assert new.state[p0]["exp_avg"] is not opt.state[p0]["exp_avg"]  # a copy of the state

    gen = torch.Generator().manual_seed(1)
    ds = TensorDataset(torch.randn(32, 8))
    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=gen, drop_last=True)
    nl = build_loader(loader, TrainConfig(num_workers=1, persistent_workers=True, batch_size=8))
    assert nl.sampler is loader.sampler and nl.batch_size == 8 and nl.drop_last
    assert nl.generator is not gen and torch.equal(nl.generator.get_state(), gen.get_state())
    from torch.utils.data import BatchSampler, SequentialSampler

    custom = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False))
    assert build_loader(custom, TrainConfig()).batch_sampler is custom.batch_sampler
    with pytest.raises(TuneError, match="batch_sampler"):
        build_loader(custom, TrainConfig(batch_size=8))


def test_session_entry_point_uses_the_findings() -> None:
    """diagnose(model, loader, optimizer=, loss_fn=).autofix(): capture -> findings -> fixes."""
    from diagnose import diagnose

    model = make_model()
    # 2 ms a sample: workers' gain stands clear of a noisy machine's spread (at 0.5 ms, a
    # 2-vCPU host whose pace moved by half within seconds once kept nothing)
    loader = DataLoader(Sleepy(1024, delay=0.002), batch_size=8, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # a budget no busy host runs out of (the quick plan's 6 rounds a trial end far sooner):
    # at 60 s a slow capture and pilot left the workers' trial too few rounds, or none
    r = diagnose(model, loader, optimizer=opt, loss_fn=F.cross_entropy).autofix(
        plan=QUICK, max_trials=3, budget_s=300)
    assert r.diagnosis is not None and any(f.rule == "IN001" for f in r.diagnosis.findings)
    assert r.named.get("num_workers") == "IN001"
    assert set(r.kept) <= set(r.named)  # only what the findings named is ever kept
    # workers are kept: on their own, or with torch's threads split where that split is
    # predicted the best (its change sets num_workers too)
    assert {"num_workers", "threads"} & set(r.kept) and r.best.num_workers > 0, r.render_text()
    assert any(d.status in (NOT_APPLICABLE, REVERTED, KEPT, "skipped") for d in r.decisions)


cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="needs a CUDA GPU (none visible to torch here)")


@cuda
def test_real_cuda_out_of_memory_is_survived() -> None:
    dev = torch.device("cuda")
    free, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction(min(1.0, (512 << 20) / total))
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(dev)
        ds = TensorDataset(torch.randn(4096, 4096), torch.randint(0, 10, (4096,)))
        loader = DataLoader(ds, batch_size=4096)  # activations of 4096 x 4096: 64 MiB each ...
        opt = torch.optim.Adam(model.parameters())
        r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=[], plan=QUICK)
        assert r.baseline.effective_batch == 4096 and r.baseline.batch_size < 4096
        assert r.decisions[0].status == NO_FIT
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


@cuda
def test_cuda_step_settings_are_realised_and_put_back() -> None:
    dev = torch.device("cuda")
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(4)).to(dev)
    model(torch.randn(2, 3, 16, 16, device=dev))
    ds = TensorDataset(torch.randn(512, 3, 16, 16), torch.randint(0, 4, (512,)))
    loader = DataLoader(ds, batch_size=32)
    opt = torch.optim.AdamW(model.parameters())
    w0 = model[0].weight.detach().clone()
    stride0 = model[0].weight.stride()
    flag = torch.backends.cudnn.benchmark
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, plan=QUICK,
                fixes=["pin_memory", "amp", "channels_last", "cudnn_benchmark",
                       "foreach_optimizer"])
    assert {d.fix for d in r.decisions} >= {"pin_memory", "amp", "channels_last"}
    assert all(d.status != "error" for d in r.decisions), r.render_text()
    assert torch.equal(model[0].weight, w0) and model[0].weight.stride() == stride0
    assert torch.backends.cudnn.benchmark == flag


def test_a_win_the_before_after_does_not_confirm_is_reverted(monkeypatch) -> None:
    """The machine can change between a trial and the before/after (another process starts):
    a kept fix the before/after does not confirm is reverted, and the baseline stays."""
    from diagnose.autofix import runner as tune
    from diagnose.autofix.stats import Interval

    def fake_compare(self, a, b, label, *, rounds=None, bound=False, confirm=None,
                     deadline=None):
        if not bound:  # the trial: a clear win
            return tune.Comparison(10.0, 6.0, Interval(1.6, 1.4, 1.8, 0.95), 4, 12), None
        return (tune.Comparison(10.0, 11.8, Interval(0.85, 0.81, 0.89, 0.95), 10, 12),
                tune.Bound(1.0, 9.0, b))

    monkeypatch.setattr(tune._Tuner, "compare", fake_compare)
    model = make_model()
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,))),
                        batch_size=8)
    r = autofix(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                loss_fn=F.cross_entropy, fixes=["persistent_workers", "num_workers"],
                plan=QUICK, max_trials=1)
    assert r.best == r.baseline and r.kept == [] and r.final is None and r.code == ""
    conf = r.decisions[-1]
    assert conf.fix == "confirmation" and conf.status == REVERTED and "0.85x" in conf.reason
    # a new user read "CI lower bound 1.56 > 1.03; not confirmed" and the next trial
    # starting from it: the row says it was kept, then reverted, and where to look
    assert any(d.fix == "num_workers" and "kept, and the trials after it started from it"
               in d.reason and "(the confirmation row)" in d.reason for d in r.decisions)
    assert r.loader.num_workers == 0 and r.bound is not None and r.tuned_ms is not None


def test_uneven_rounds_say_why_the_ms_and_the_speedup_differ(monkeypatch) -> None:
    """A trial's ms are the arms' mean steps and its speedup pairs the rounds: where a
    slow round pulls the means apart from the paired ratio, the reason says so; where
    they agree, nothing is added."""
    from diagnose.autofix import runner as tune
    from diagnose.autofix.stats import Interval

    given = [(176.0, 91.3, Interval(1.29, 0.60, 2.76, 0.95)),
             (10.0, 9.9, Interval(1.02, 0.98, 1.06, 0.95))]

    def fake_compare(self, a, b, label, *, rounds=None, bound=False, confirm=None,
                     deadline=None):
        return tune.Comparison(*given[0], 6, 12), None

    monkeypatch.setattr(tune._Tuner, "compare", fake_compare)
    model = make_model()
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,))),
                        batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["num_workers"],
                plan=QUICK, max_trials=1)
    (d,) = [d for d in r.decisions if d.fix == "num_workers"]
    assert "the mean steps give 1.93x" in d.reason, d.reason
    given.pop(0)  # the means agree with the pairs: nothing more is said
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["num_workers"],
                plan=QUICK, max_trials=1)
    (d,) = [d for d in r.decisions if d.fix == "num_workers"]
    assert "mean steps" not in d.reason and "no gain shown" in d.reason, d.reason


def test_an_undecided_gain_says_what_would_keep_it(monkeypatch) -> None:
    """A trial that measured a gain but stayed undecided says how many rounds (and
    seconds) would keep it at its noise, and the run's notes name it: more time where
    that is within a trial's rounds, a quieter machine where it is past them. A trial
    that measured no gain says nothing of the kind."""
    from diagnose.autofix import runner as tune
    from diagnose.autofix.stats import Interval

    given = [(Interval(1.30, 1.01, 1.67, 0.95), 3),  # 4 rounds would keep it (QUICK: 6)
             (Interval(1.51, 0.98, 2.33, 0.95), 6),  # 8 rounds: past QUICK's 6
             (Interval(1.00, 0.90, 1.11, 0.95), 6)]  # no gain: nothing to say

    def fake_compare(self, a, b, label, *, rounds=None, bound=False, confirm=None,
                     deadline=None):
        iv, n = given[0]
        return tune.Comparison(10.0, 10.0 / iv.ratio, iv, n, 12), None

    monkeypatch.setattr(tune._Tuner, "compare", fake_compare)
    model = make_model()
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,))),
                        batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def run() -> tuple[str, list[str]]:
        r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=["num_workers"],
                    plan=QUICK, max_trials=1)
        (d,) = [d for d in r.decisions if d.fix == "num_workers"]
        return d.reason, [n for n in r.notes if "stayed undecided" in n]

    reason, notes = run()
    assert "about 4 rounds" in reason and "would keep it" in reason, reason
    assert len(notes) == 1 and "1.30x" in notes[0] and "--budget" in notes[0], notes
    given.pop(0)
    reason, notes = run()
    assert "about 8 rounds" in reason, reason
    assert len(notes) == 1 and "more than a trial's 6 rounds" in notes[0], notes
    given.pop(0)
    reason, notes = run()
    assert "would keep it" not in reason and not notes, (reason, notes)


def test_too_many_workers_are_searched_downward(monkeypatch) -> None:
    """6 workers on 2 usable CPUs, each batch a cheap slice of a tensor: worker processes
    only add inter-process transfer. IN004 names num_workers_cap, IN001 num_workers: one
    search, downward (2, 1, 0: measured, each against the best so far), in the table."""
    from types import SimpleNamespace

    from diagnose.autofix import NO_CHANGE
    from diagnose.autofix import runner as tune

    monkeypatch.setattr(tune, "cpu_count", lambda: 2)  # what the fixes see, on any machine
    model = make_model()
    ds = TensorDataset(torch.randn(4096, 8), torch.randint(0, 4, (4096,)))
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=6)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    diagnosis = SimpleNamespace(metrics={}, findings=[
        SimpleNamespace(rule="IN004", fixes=["num_workers_cap"]),
        SimpleNamespace(rule="IN001", fixes=["num_workers", "persistent_workers"])])
    before_children = children()
    plan = Plan(warmup=2, round_s=0.1, min_steps=8, max_steps=80, min_rounds=4, max_rounds=10,
                looks=3, final_rounds=6, resamples=1000)  # more rounds than QUICK: loaded machine
    # a budget no busy host runs out of (rounds of 6 workers each are slow to start): a
    # trial of the ladder skipped for want of time would leave its rung unmeasured
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, report=diagnosis, plan=plan,
                budget_s=900)
    table = r.render_text(width=132)
    down = [d for d in r.decisions if d.fix == "num_workers_cap"]
    assert down and all(d.finding == "IN004" for d in down), table
    # the ladder below 6 on 2 CPUs, in order; each trial measured against the best so far
    tried = [int(d.change.rsplit("→", 1)[1]) for d in down]
    assert tried[0] == 2 and tried == sorted(tried, reverse=True) and tried[-1] == 0, table
    for d in down:
        assert d.baseline_ms and d.trial_ms and d.speedup is not None and d.rounds > 0, table
        rows = table.split("autofix decisions", 1)[1].splitlines()  # the table, not the head
        row = next(line for line in rows if d.change in line)  # one line:
        assert row.split()[:2] == ["num_workers_cap", "IN004"], table  # fix, finding,
        assert str(d.speedup) in row and row.rstrip().endswith(d.status), table  # numbers
    (again,) = [d for d in r.decisions if d.fix == "num_workers"]
    assert again.status == NO_CHANGE and "num_workers_cap" in again.reason
    assert r.best.num_workers <= 6 and loader.num_workers == 6  # yours unchanged
    assert children() <= before_children
    # 0 workers is ~3-4x faster here (no inter-process transfer): a huge, reliable effect
    assert "num_workers_cap" in r.kept and r.best.num_workers < 6, table
    assert "num_workers=6" in r.code and f"num_workers={r.best.num_workers}" in r.code


def test_decision_table_rows_stay_whole_in_a_log() -> None:
    """Piped to a file or a CI log (no terminal): at 120 columns or more each decision is
    at most two lines, and its fix, finding, times, speedup and decision share the first."""
    from diagnose.autofix import ADVICE, ERROR, NO_CHANGE, AutofixReport, Decision
    from diagnose.autofix.stats import Interval

    iv = Interval(1.73, 1.39, 2.27, 0.95)
    decisions = [
        Decision("num_workers_cap", "num_workers 6 → 2", REVERTED,
                 "no gain shown: CI lower bound 0.90 ≤ 1.03", "IN004", 2.39, 2.01,
                 Interval(1.19, 0.90, 1.51, 0.95), 4, 36),
        Decision("num_workers_cap", "num_workers 2 → 0", KEPT, "CI lower bound 1.39 > 1.03",
                 "IN004", 2.57, 1.48, iv, 4, 36),
        Decision("num_workers", "", NO_CHANGE, "searched above, as num_workers_cap", "IN001"),
        Decision("persistent_workers", "persistent_workers False → True", REVERTED,
                 "slower: CI upper bound 0.97 < 1", "IN001", 126.53, 131.2,
                 Interval(0.96, 0.93, 0.97, 0.95), 6, 48),
        Decision("pin_memory", "", NOT_APPLICABLE,
                 "needs a CUDA device (pinned memory speeds host-to-GPU copies)", "TR001"),
        Decision("faster_input", "", ADVICE, "Make each sample cheaper to produce", "IN002"),
        Decision("foreach_optimizer", "optimizer_foreach default → True", ERROR,
                 "RuntimeError: " + "a long message " * 12, "CF001", 3.1, None),
    ]
    cfg = TrainConfig(num_workers=6, batch_size=8)
    r = AutofixReport(original=cfg, baseline=cfg, best=cfg, decisions=decisions, final=None,
                   bound=None, bound_before=None, tuned_ms=2.0, named={}, diagnosis=None,
                   loader=None, optimizer=None, code="", trials=3, elapsed_s=9.5,
                   device="cpu", cpus=2, min_gain=0.03)
    for width in (120, 132, 200):
        text = r.render_text(width=width)
        table = text.split("before / after")[0].splitlines()
        assert all(len(line) <= width for line in table)
        starts = [next(i for i, line in enumerate(table) if line.startswith(d.fix + " ")
                       and (d.change or d.reason[:20]) in line) for d in decisions]
        ends = [*starts[1:], len(table)]
        for d, start, end in zip(decisions, starts, ends, strict=True):
            first = table[start]  # the fix, the finding, the numbers, the decision
            assert first.split()[1] == d.finding and first.rstrip().endswith(d.status), text
            if d.baseline_ms is not None:
                assert f"{d.baseline_ms:.3g}"[:3] in first, text
            if d.speedup is not None:
                assert str(d.speedup) in first, text
            if d.status != ERROR:  # (a long error message takes the lines it needs)
                assert end - start <= 2, text  # the change, then the reason
