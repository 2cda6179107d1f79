"""The session's own timings of the job (context.probes_ms) as one metric and each with its
time, and the line the report shows them on."""

from __future__ import annotations

from diagnose.metrics.context import context_metrics
from diagnose.report.text import step_lines


def test_the_probes_time_is_summed_and_shown_beside_the_profiled_window() -> None:
    m = context_metrics({"probes_ms": {"cpu_capacity": 100.0, "threads": 250.5, "x": None,
                                       "fetches": 2.0}})
    assert m["probes_ms_total"] == 352.5
    # longest first; one under 5 ms is in the total, not in the list
    assert m["probes_ms_each"] == "threads 0.25 s, cpu_capacity 0.10 s"
    assert context_metrics({"probes_ms": {}})["probes_ms_total"] is None
    assert context_metrics({})["probes_ms_total"] is None
    line = step_lines({"step_count": 5, "steps_source": "ProfilerStep",
                       "step_time_median_ms": 10.0, "step_time_p90_ms": 11.0,
                       "probes_ms_total": 4100.0})[1]
    assert line is not None and line.endswith("the session's own timings of the job took 4.1 s")
    each = step_lines({"step_count": 5, "steps_source": "ProfilerStep",
                       "step_time_median_ms": 10.0, "step_time_p90_ms": 11.0,
                       "probes_ms_total": 350.5,
                       "probes_ms_each": "threads 0.25 s, cpu_capacity 0.10 s"})[1]
    assert each is not None and each.endswith(
        "took 0.4 s (threads 0.25 s, cpu_capacity 0.10 s)")
