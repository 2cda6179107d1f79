"""The shared helpers: numbers read out of loosely typed data, and the usable CPUs."""

from __future__ import annotations

import math
import os

import numpy as np

from diagnose.values import as_int, as_number, as_real, usable_cpus


def test_numbers_from_loose_data():
    assert as_real(3) == 3 and type(as_real(np.int64(3))) is int
    assert type(as_real(np.float32(0.5))) is float and as_real(0.5) == 0.5
    for not_a_number in (True, False, np.bool_(True), None, "1", [1], {}):
        assert as_real(not_a_number) is None, not_a_number
        assert as_number(not_a_number) is None, not_a_number
    assert as_number(2) == 2.0 and type(as_number(2)) is float
    assert as_number(math.nan) is None and as_number(math.inf) is None
    assert as_number(math.inf, finite=False) == math.inf
    assert as_int(4) == 4 and as_int(True) is None and as_int(4.0) is None and as_int("4") is None


def test_usable_cpus_is_the_affinity():
    want = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert usable_cpus() == want >= 1
