"""Receiving a batch from a worker (diagnose/capture/probes/handover.py)."""

from __future__ import annotations

from collections import UserDict

import torch

from diagnose.capture.probes.handover import holds_device_tensors, time_worker_handover


def test_worker_hand_over_is_timed_with_a_real_worker():
    batch = (torch.randn(256, 256), torch.arange(256))
    rng = torch.get_rng_state()
    timed = time_worker_handover(batch)
    assert timed is not None
    ms, start, fork, stop = timed
    assert ms > 0
    assert start > ms  # a process started, and its first batch made and handed over
    assert 0 < fork < start  # of it, the fork in iter(); the child's start-up follows
    assert stop > 0  # the epoch's end: the worker shut down and joined
    assert torch.equal(torch.get_rng_state(), rng)


def test_a_batch_on_a_device_is_told_from_one_on_the_cpu() -> None:
    """Batches (nested as loaders hand them out) holding a tensor off the CPU (the meta
    device stands in for a GPU here) are the ones no forked worker can make."""
    cpu = torch.zeros(2)
    assert not holds_device_tensors((cpu, {"y": [cpu, 3]}, "text"))
    assert holds_device_tensors((cpu, {"y": [torch.empty(2, device="meta")]}))
    assert holds_device_tensors(UserDict({"y": torch.empty(2, device="meta")}))  # BatchEncoding
    assert not holds_device_tensors(None)
