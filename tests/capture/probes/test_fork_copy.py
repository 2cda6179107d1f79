"""The memory a step writes, copied after a fork (diagnose/capture/probes/fork_copy.py)."""

from __future__ import annotations

import os

import psutil
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from diagnose.capture.probes import fork_copy
from diagnose.capture.probes.fork_copy import start_method, time_fork_copy

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _job() -> tuple[nn.Module, tuple[tuple[torch.Tensor], dict]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    return model, ((torch.randn(512, 64),), {})


def test_a_real_fork_copies_what_is_written_after_it_and_leaves_the_run_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every round taken: the work counts as quick however busy the machine (a neighbour's
    # load made it 66 ms once, one round)
    monkeypatch.setattr(fork_copy, "QUICK_S", 60.0)
    model, inputs = _job()
    before = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    children = {c.pid for c in psutil.Process().children()}
    threads = torch.get_num_threads()
    got = time_fork_copy(model, inputs, DataLoader(TensorDataset(torch.zeros(4)), num_workers=1))
    assert got is not None and got["start_method"] == "fork" and got["rounds"] == 3
    # a buffer written before the fork: each page written after it faults and is copied;
    # from one thread that always shows, on torch's two a busy host's stalls (a thread
    # descheduled for a tick, ~8 ms, against ~3 ms of copies) can hide it
    assert got["per_mib_1thread_ms"] > 0 and got["per_mib_ms"] >= 0
    assert torch.get_num_threads() == threads  # put back after the one-thread writes
    assert got["work_ms"] >= 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())  # no .grad written
    assert torch.equal(torch.get_rng_state(), rng)
    assert {c.pid for c in psutil.Process().children()} <= children  # no child left


def test_a_loader_whose_workers_do_not_fork_shares_no_pages() -> None:
    model, inputs = _job()
    loader = DataLoader(TensorDataset(torch.zeros(4)), num_workers=1,
                        multiprocessing_context="spawn")
    assert start_method(loader) == "spawn"
    assert time_fork_copy(model, inputs, loader) == {
        "start_method": "spawn", "work_ms": 0.0, "per_mib_ms": 0.0, "per_mib_1thread_ms": 0.0,
        "rounds": 0}


def test_it_does_not_apply_without_inputs_or_a_model_on_the_cpu_or_on_one_thread() -> None:
    model, inputs = _job()
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert time_fork_copy(model, inputs) is None
    finally:
        torch.set_num_threads(n)
    assert time_fork_copy(model, None) is None
    assert time_fork_copy(None, inputs) is None
    meta = nn.Linear(4, 4, device="meta")
    assert time_fork_copy(meta, ((torch.zeros(1, 4, device="meta"),), {})) is None


class _Counted(nn.Module):
    """The job's MLP, counting its forward calls (its own code, not a hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.calls = _job()[0], 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.net(x)


def test_one_fork_where_the_budget_is_spent_and_the_quiet_work_is_not_timed_again() -> None:
    """Past the probes' budget (their least rounds still run) one fork is timed, not three;
    given the thread timing's quiet work, the probe runs the work unforked once (to warm
    torch's pool back to its threads) instead of twice."""
    from diagnose.capture.probes import common

    model, (_, kw) = _Counted(), _job()[1]
    x = _job()[1][0]
    loader = DataLoader(TensorDataset(torch.zeros(4)), num_workers=1)
    with common.until(common._CLOCK() - 1.0, least=True):
        got = time_fork_copy(model, (x, kw), loader)
        assert got is not None and got["rounds"] == 1
        assert model.calls == 3  # warm, the work unforked, the work after the fork
        model.calls = 0
        quiet = time_fork_copy(model, (x, kw), loader, quiet_ms=2.0)
        assert quiet is not None and quiet["rounds"] == 1 and model.calls == 2
