"""The native thread pools of the training process, read from the loaded libraries
(diagnose/capture/runinfo.py thread_pools, with threadpoolctl), and the metrics CF007 reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diagnose.capture.runinfo import thread_pools
from diagnose.metrics.context.settings import settings_metrics


def test_torchs_own_pool_is_told_from_numpys():
    """This process loads torch (its OpenMP runtime ships in torch/lib) and numpy (its own
    BLAS): each pool with its threads, torch's marked as such; the metrics name the largest
    pool that is not torch's, with the prefix threadpool_limits takes."""
    np.ones((4, 4)) @ np.ones((4, 4))  # numpy's BLAS loaded
    pools = thread_pools()
    assert pools is not None and pools, pools
    others = [p for p in pools if not p["torch"]]
    if not others:
        pytest.skip("numpy's BLAS is not a separate library here")
    assert all(isinstance(p["num_threads"], int) and p["num_threads"] >= 1 for p in pools)
    assert all(p["user_api"] in ("blas", "openmp") for p in pools)
    m = settings_metrics({"thread_pools": pools, "torch_num_threads": torch.get_num_threads()})
    top = max(others, key=lambda p: p["num_threads"])
    assert m["thread_pool_beside_torch_threads"] == top["num_threads"]
    assert m["thread_pool_beside_torch_prefix"] == top["prefix"]
    assert str(top["internal_api"]) in str(m["thread_pool_beside_torch"])


def test_no_pool_beside_torch_and_none_recorded():
    only = [{"user_api": "openmp", "internal_api": "openmp", "prefix": "libgomp",
             "num_threads": 2, "torch": True}]
    assert settings_metrics({"thread_pools": only})["thread_pool_beside_torch_threads"] == 0
    assert settings_metrics({}).get("thread_pool_beside_torch_threads") is None
