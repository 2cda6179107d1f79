"""The model's work after each kind of fetch (diagnose/capture/probes/after_fetch.py)."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from diagnose.capture.probes.after_fetch import AFTER_FETCH_ROUNDS, time_work_after_fetches


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Dropout(0.5),
                         nn.Linear(64, 4)).train()


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_the_work_after_each_kind_of_fetch_is_timed_in_turn_and_changes_nothing():
    """The model's work after a per-sample batch and after a batched fetch of a real
    TensorDataset loader: real timings, in rounds of both, and the run as it was
    (gradients, buffers, the RNGs, the thread count). A loader whose batches cannot be
    fetched with one call, one intra-op thread, or no inputs: None."""
    m = _model()
    x = torch.randn(16, 32)
    m(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    bufs = [b.clone() for b in m.buffers()]
    loader = DataLoader(TensorDataset(torch.randn(4000, 32), torch.randint(0, 4, (4000,))),
                        batch_size=256, shuffle=True)
    rng, py, threads = torch.get_rng_state(), random.getstate(), torch.get_num_threads()
    out = time_work_after_fetches(m, ((x,), {}), loader)
    # AFTER_FETCH_ROUNDS, or 3 where the rounds ran long (a busy host: 118 ms a work seen)
    assert out is not None and out["rounds"] >= min(3, AFTER_FETCH_ROUNDS)
    assert out["after_per_sample_ms"] > 0 and out["after_batched_ms"] > 0
    # the fetches, timed in the same rounds (their order is not asserted: a busy host
    # may stall the indexing op's threads)
    assert out["batched_fetch_ms"] > 0 and out["per_sample_fetch_ms"] > 0
    assert out["ratio"] > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads, strict=True))
    assert all(torch.equal(b, s) for b, s in zip(m.buffers(), bufs, strict=True))
    assert torch.equal(torch.get_rng_state(), rng) and random.getstate() == py
    assert torch.get_num_threads() == threads
    own = DataLoader(TensorDataset(torch.randn(64, 32)), batch_size=8,
                     collate_fn=lambda rows: torch.stack([r[0] for r in rows]))
    assert time_work_after_fetches(m, ((x,), {}), own) is None
    assert time_work_after_fetches(m, None, loader) is None
    torch.set_num_threads(1)
    try:
        assert time_work_after_fetches(m, ((x,), {}), loader) is None
    finally:
        torch.set_num_threads(threads)
