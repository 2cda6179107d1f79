"""A CPU model's autocast against fp32 as metrics (diagnose/metrics/context/cpu_autocast.py):
the probe's timing, what it saves a step by the clock's forward calls, and nothing where the
probe did not run."""

from __future__ import annotations

import pytest

from diagnose.metrics.context.cpu_autocast import CATALOG, cpu_autocast_metrics

PROBE = {"dtype": "bfloat16", "work_ms": 30.0, "forward_ms": 10.0, "work_fp32_ms": 10.0,
         "ratio": 3.0, "rounds": 4, "noise": 0.05, "native": False, "capability": "AVX2"}


@pytest.mark.parametrize(("clock", "work", "saving", "frac"), [
    ({"step_time_unprofiled_mean_ms": 100.0}, 30.0, 20.0, 0.2),  # one call where not timed
    ({"step_time_unprofiled_mean_ms": 100.0, "forward_calls_unprofiled": 2}, 60.0, 40.0, 0.4),
    # the loop's forward 1.5x the quiet one: the work as the loop ran it, 1.5x too
    ({"step_time_unprofiled_mean_ms": 100.0, "forward_unprofiled_ms": 15.0,
      "forward_calls_unprofiled": 1}, 45.0, 30.0, 0.3),
    ({"step_time_unprofiled_mean_ms": 30.0, "forward_calls_unprofiled": 4}, 120.0, 30.0, 1.0),
    ({}, 30.0, 20.0, None),  # no clock: no share of a step
])
def test_the_saving_is_the_loops_work_less_that_work_at_the_fp32_ratio(clock, work, saving,
                                                                       frac):
    m = cpu_autocast_metrics({"cpu_autocast": PROBE}, clock)
    assert m["cpu_autocast_ratio"] == 3.0  # the rounds' own median ratio, as timed
    assert m["cpu_autocast_loop_work_ms"] == pytest.approx(work)
    assert m["cpu_autocast_saving_ms"] == pytest.approx(saving)
    assert m["cpu_autocast_saving_frac"] == (None if frac is None else pytest.approx(frac))
    assert m["cpu_autocast_native"] is False and m["cpu_capability"] == "AVX2"


@pytest.mark.parametrize("ctx", [{}, {"cpu_autocast": None},
                                 {"cpu_autocast": {**PROBE, "work_fp32_ms": 0}}])
def test_no_timing_no_numbers(ctx):
    m = cpu_autocast_metrics(ctx, {"step_time_unprofiled_mean_ms": 100.0})
    assert set(m) == set(CATALOG)
    assert all(m[k] is None for k in CATALOG if k not in ("cpu_autocast_dtype", "cpu_capability",
                                                          "cpu_autocast_native"))
