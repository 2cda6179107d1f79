"""torch's idle threads' spin after an op (diagnose/capture/probes/spin.py), timed in fresh
processes: GNU OpenMP reads its wait policy as the library loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SPIN = ("import torch; torch.set_num_threads({n}); "
        "from diagnose.capture.probes.spin import time_spin; print(time_spin())")


def _spin(n: int, **env: str) -> str:
    """The probe's value in a fresh process on ``n`` threads, the wait policy's variables
    as ``env`` gives them (others unset: the library's defaults)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", SPIN.format(n=n)], capture_output=True,
                         text=True, timeout=120, env={**base, **env}, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs for 2 threads")
def test_threads_told_not_to_spin_read_near_zero_and_by_default_more():
    """``OMP_WAIT_POLICY=PASSIVE``: the pool thread sleeps as the op ends, and the sleep
    after it takes (almost) no CPU; GNU OpenMP's default spins (300,000 rounds: ms on a
    current core), and reads longer. CPU time, not wall time: a busy host slows the spin's
    rounds without adding to them."""
    passive = float(_spin(2, OMP_WAIT_POLICY="PASSIVE"))
    default = float(_spin(2))
    assert 0.0 <= passive < 1.0
    assert default > passive + 0.5


def test_one_thread_has_no_pool_to_spin():
    assert _spin(1) == "None"
