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
        "took 0.4 s (spent timing the compute on fewer threads 0.25 s, the CPUs' capacity "
        "0.10 s)")
    small = step_lines({"step_count": 5, "steps_source": "ProfilerStep",
                        "step_time_median_ms": 10.0, "step_time_p90_ms": 11.0,
                        "probes_ms_total": 12.0, "probes_ms_each": "fetches 0.01 s"})[1]
    assert small is not None and small.endswith(  # not 0.0 s
        "took 12 ms (spent timing a batched fetch against the loader's 0.01 s)")
    # a probe every timing names has words in the report; an unknown name stays as it is
    from diagnose.capture.probes.budget import PROBES
    from diagnose.report.text import PROBE_WORDS, _probe_words

    assert set(PROBES) <= set(PROBE_WORDS)
    assert _probe_words("mine 0.20 s, threads_busy 0.36 s") == (
        "mine 0.20 s, the compute beside busy CPUs 0.36 s")


def test_the_headline_says_which_step_the_predictions_start_from() -> None:
    """Some steps pause (mean 45 ms over a median of 22 ms). Where the clock saw an epoch's
    start with workers that restart, the predictions start from the steady steps' mean and
    that start spread over the epoch's 24 steps (41 + 60 / 24 = 43.5 ms), and the line says
    so; without one, from the mean."""
    m = {"step_count": 5, "steps_source": "ProfilerStep", "step_time_median_ms": 44.0,
         "step_time_unprofiled_median_ms": 22.0, "step_time_unprofiled_steps": 10,
         "step_time_unprofiled_mean_ms": 45.0}
    head = step_lines(m)[0]
    assert head.endswith("mean 45.00 ms: some steps take longer, and predictions start from the mean")
    epoch = {**m, "step_time_steady_mean_ms": 41.0, "dataloader_epoch_boundary_ms": 60.0,
             "dataloader_num_workers": 4, "dataloader_epoch_batches": 24,
             "dataloader_persistent_workers": False}
    head = step_lines(epoch)[0]
    assert "predictions start from 43.50 ms, the steady steps' mean" in head
    assert "(2.50 ms a step)" in head
    # the steps after the start (IN005 counts them in its figure a step) are in the
    # steady mean here, and the line says so where they cost anything
    head = step_lines({**epoch, "dataloader_epoch_after_ms": 12.0})[0]
    assert head.endswith("(2.50 ms a step; the steps after it, until the new workers' "
                         "first batches, are in the steady mean)")
    # a run whose findings carry no prediction names the mean, not a start (a new user's
    # hand-written update read "predictions start from the mean" and had none)
    for metrics in (m, epoch):
        head = step_lines(metrics, predicted=False)[0]
        assert head.endswith("mean 45.00 ms: some steps take longer") and "predict" not in head


def test_a_mean_a_little_above_the_median_is_named_as_the_predictions_start() -> None:
    """A new user read "66.39 ms median" and then "predicted 68.4 -> 53.4 ms": a mean 3%
    above the median is where the predictions start, and the headline names it; one within
    1% is not worth a word."""
    m = {"step_count": 5, "steps_source": "ProfilerStep", "step_time_median_ms": 80.0,
         "step_time_unprofiled_median_ms": 66.39, "step_time_unprofiled_steps": 40,
         "step_time_unprofiled_mean_ms": 68.4}
    assert step_lines(m)[0].endswith("; mean 68.40 ms, which the predictions start from")
    m["step_time_unprofiled_mean_ms"] = 66.5
    assert "mean" not in step_lines(m)[0].split("median", 1)[1]
    # workers that restart every epoch: every prediction adds that start (the wait for
    # the first batch, 128 ms, over 64 steps) to both sides, and the line names the step
    # they all start from (a new user saw two: 70.4 ms for a change of workers, 68.4 ms
    # for persistent workers)
    m.update(step_time_unprofiled_mean_ms=68.4, dataloader_num_workers=3,
             dataloader_persistent_workers=False, dataloader_epoch_batches=64,
             dataloader_start_ms=128.0)
    assert step_lines(m)[0].endswith(
        "; mean 68.40 ms; predictions start from 70.40 ms, the mean with the workers' "
        "start-up each epoch (2.00 ms a step)")


def test_the_short_headline_names_one_step_beside_the_median() -> None:
    """The short report (``each=False``) gave a new user three step times in one line
    (the median, the mean, and where the predictions start): it now names the median and
    the step the predictions start from; the full one keeps the mean and the arithmetic."""
    m = {"step_count": 5, "steps_source": "ProfilerStep", "step_time_median_ms": 80.0,
         "step_time_unprofiled_median_ms": 27.09, "step_time_unprofiled_steps": 90,
         "step_time_unprofiled_mean_ms": 29.02, "step_time_steady_mean_ms": 27.64,
         "dataloader_epoch_boundary_ms": 125.0, "dataloader_num_workers": 3,
         "dataloader_epoch_batches": 94, "dataloader_persistent_workers": False}
    short, full = step_lines(m, each=False)[0], step_lines(m)[0]
    assert short.endswith("; predictions start from 28.97 ms, the steady steps' mean with "
                          "each epoch's start spread over them")
    assert "29.02" not in short and "mean 29.02 ms" in full and "(1.33 ms a step)" in full
    restart = {k: v for k, v in m.items() if k != "step_time_steady_mean_ms"}
    restart.update(step_time_unprofiled_mean_ms=28.5, dataloader_start_ms=94.0)
    assert step_lines(restart, each=False)[0].endswith(
        "; predictions start from 29.50 ms, the mean step with the workers' start-up each "
        "epoch spread over it, as a run's time is its steps' sum")
    assert "(1.00 ms a step)" in step_lines(restart)[0]
