"""How much the run's own workers slow torch's ops now (diagnose/stepmodel/host.py,
``free_contention``): the loop's own measure where it was taken, else weighed by how busy
the workers were measured to be; on the builder run of tests/fixes/test_threads.py (6
workers beside torch's 2 threads on 2 CPUs, 3000 us of ops a step); answers worked out by
hand."""

from __future__ import annotations

import pytest

from diagnose.stepmodel.host import free_contention, main_host_ms, workers_busy_now
from tests.fixes.steps import _facts, _model
from tests.fixes.test_threads import _worker_loader

RUN = dict(cpu_count=2, input_batch_bytes=1000, dataloader_num_workers=6,
           input_worker_handover_ms=0.2, torch_num_threads=2, proc_cpu_mean_pct=150.0)


def _ops_ms(tmp_path, **more) -> float:
    m = _model(_worker_loader(), tmp_path)
    return main_host_ms(free_contention(m.graph, _facts(m, **RUN, **more)))


def test_workers_busy_all_the_time_free_the_ops_by_the_whole_rule(tmp_path) -> None:
    """Busy all the time (a worker's CPU at 100%): 2 threads / (2 - 2 CPUs left, at least
    1) = 2x: the ops freed of it take 1500 us. Not measured: the same rule."""
    assert _ops_ms(tmp_path, workers_cpu_mean_pct=100.0) == pytest.approx(1.5, rel=0.01)
    assert _ops_ms(tmp_path) == pytest.approx(1.5, rel=0.01)


def test_workers_that_are_mostly_idle_slow_the_ops_little(tmp_path) -> None:
    """Each worker busy 5% of the time, independently: none busy 0.95^6 = 73.5% of the time
    (the ops at full pace), one or more 26.5% (at half pace: 2 threads on the 1 CPU left,
    or none left and taken as 1). Mean pace 0.735 + 0.265 / 2 = 0.867: the ops ran 1.153x
    as long as alone, and freed of that they take 3000 / 1.153 = 2601 us, not 1500."""
    assert _ops_ms(tmp_path, workers_cpu_mean_pct=5.0) == pytest.approx(
        3.0 / (1 / (0.95 ** 6 + (1 - 0.95 ** 6) / 2)), rel=0.01)


def test_how_busy_the_workers_are_is_the_larger_measurement() -> None:
    """A worker's CPU in the host samples, or one batch a step among the workers (8 ms
    batches, 4 workers, 100 ms steps: 2%); the larger, at most all the time; None where
    neither was measured."""
    from diagnose.stepmodel.facts import Facts

    f = Facts(dataloader_num_workers=4, step_time_unprofiled_mean_ms=100.0)
    assert workers_busy_now(f) is None
    assert workers_busy_now(f.replace(workers_cpu_mean_pct=0.5)) == pytest.approx(0.005)
    assert workers_busy_now(f.replace(workers_cpu_mean_pct=0.5, input_worker_batch_ms=8.0)
                            ) == pytest.approx(0.02)
    assert workers_busy_now(f.replace(workers_cpu_mean_pct=250.0)) == 1.0


def test_the_loops_own_contention_is_its_work_over_the_same_work_alone(tmp_path) -> None:
    """The loop's forward and backward took 3000 us a step; the same work alone after the
    loop 2 ms: 1.5x. Not where the loop made two forward calls a step (a GAN's: the work
    alone is one of them), nor without the timing, nor from a timing whose rounds spread
    past THREADS_NOISE_MAX (its one-thread ratio is not read either)."""
    from diagnose.stepmodel.calibration import THREADS_NOISE_MAX
    from diagnose.stepmodel.host import loop_contention

    m = _model(_worker_loader(), tmp_path)
    at = dict(RUN, model_work_quiet_ms=2.0)
    assert loop_contention(m.graph, _facts(m, **at, forward_calls_unprofiled=1)) == 1.5
    assert loop_contention(m.graph, _facts(m, **at, forward_calls_unprofiled=2)) is None
    assert loop_contention(m.graph, _facts(m, **RUN, forward_calls_unprofiled=1)) is None
    noisy = _facts(m, **at, forward_calls_unprofiled=1, threads_noise_rel=THREADS_NOISE_MAX)
    assert loop_contention(m.graph, noisy) == 1.5  # at the bound: still read
    assert loop_contention(m.graph, noisy.replace(threads_noise_rel=THREADS_NOISE_MAX * 1.4)) \
        is None


def test_a_window_off_the_loops_scale_gives_its_proportions(tmp_path) -> None:
    """A window profiled under another load replays 12x the loop's step (the calibration
    leaves it as it is): its forward and backward, 3000 us of a replayed step, count as the
    same share of the loop's unprofiled step, not as milliseconds. On the loop's scale
    (replay = step) nothing changes."""
    from diagnose.stepmodel.calibrate import replayed_step_ms
    from diagnose.stepmodel.host import loop_contention

    m = _model(_worker_loader(), tmp_path)
    f = _facts(m, **dict(RUN, model_work_quiet_ms=2.0), forward_calls_unprofiled=1)
    replay = replayed_step_ms(m.graph)
    assert loop_contention(m.graph, f, replay, replay) == pytest.approx(1.5)
    assert loop_contention(m.graph, f, replay / 12, replay) == pytest.approx(1.5 / 12)


def test_the_loops_own_measure_is_the_contention_freed(tmp_path) -> None:
    """Workers busy all the time: the sharing rule says 2x; the loop's own work ran 1.5x
    the same work alone: the measure wins, the ops freed by 1.5x, 3000 / 1.5 = 2000 us;
    and where the workers were measured near idle (the rule: 1.05x), the measure still
    does. A loop that ran faster than its work alone (0.8x: noise) frees nothing. A run
    that does not oversubscribe its CPUs frees nothing, whatever the loop's ratio."""
    assert _ops_ms(tmp_path, workers_cpu_mean_pct=100.0, loop_contention=1.5) == \
        pytest.approx(2.0, rel=0.01)
    assert _ops_ms(tmp_path, workers_cpu_mean_pct=1.0, loop_contention=1.5) == \
        pytest.approx(2.0, rel=0.01)
    assert _ops_ms(tmp_path, workers_cpu_mean_pct=100.0, loop_contention=0.8) == \
        pytest.approx(3.0, rel=0.01)
    m = _model(_worker_loader(), tmp_path)
    fit = _facts(m, **{**RUN, "dataloader_num_workers": 0}, loop_contention=1.5)
    assert main_host_ms(free_contention(m.graph, fit)) == pytest.approx(3.0, rel=0.01)


def test_the_window_and_the_clock_each_measure_it_and_their_geometric_mean_counts(
        tmp_path) -> None:
    """The window's forward and backward ran 1.5x the work alone (3000 us against 2 ms).
    The clock's forward, over every unprofiled step, ran 3.32x the forward alone (1 ms):
    2.32 ms more, added to the 2 ms of work alone (the backward unslowed): 4.32 / 2 =
    2.16x, not 3.32x. Joined: sqrt(1.5 x 2.16) = 1.8x. Without the forward alone's time
    the clock's measure is not read (the window's alone); the clock's alone where the
    window's cannot be read is not taken either: both set beside the same quiet timing."""
    from diagnose.stepmodel.host import clock_work_contention, loop_contention

    m = _model(_worker_loader(), tmp_path)
    f = _facts(m, **dict(RUN, model_work_quiet_ms=2.0), forward_calls_unprofiled=1,
               forward_contention=3.32, forward_quiet_ms=1.0)
    assert clock_work_contention(f) == pytest.approx(2.16)
    assert loop_contention(m.graph, f) == pytest.approx(1.8)
    assert loop_contention(m.graph, f.replace(forward_quiet_ms=None)) == pytest.approx(1.5)
    assert loop_contention(m.graph, f.replace(model_work_quiet_ms=None)) is None
    # several forward calls a step (a GAN's): the window's work is not one of each model's,
    # so the clock's measure (call for call) stands alone; none where the clock has none
    gan = f.replace(forward_calls_unprofiled=4)
    assert loop_contention(m.graph, gan) == pytest.approx(2.16)
    assert loop_contention(m.graph, gan.replace(forward_contention=None)) is None
    # an optimizer stepped a model not given (an autoencoder's decoder): the window's work
    # holds that model's too, the quiet timing does not: the clock's alone, as for a GAN
    part = f.replace(optimizer_values_outside_models=164_608)
    assert loop_contention(m.graph, part) == pytest.approx(2.16)
    assert loop_contention(m.graph, part.replace(optimizer_values_outside_models=0)) == \
        pytest.approx(1.8)


def test_a_forward_slowed_beside_a_workers_batch_frees_its_milliseconds_only() -> None:
    """A step whose 10 ms forward ran 27 ms beside a worker's batch, its 20 ms backward as
    alone: the loop's work 47 ms against 30 alone, 1.567x, where the forward's ratio
    (2.7x) would free 47 - 47 / 2.7 = 29.6 ms, more than the 17 ms the forward lost."""
    from diagnose.stepmodel.facts import Facts
    from diagnose.stepmodel.host import clock_work_contention

    f = Facts(forward_contention=2.7, forward_quiet_ms=10.0, model_work_quiet_ms=30.0)
    assert clock_work_contention(f) == pytest.approx(47 / 30)
    assert clock_work_contention(f.replace(forward_contention=None)) is None
    assert clock_work_contention(f.replace(model_work_quiet_ms=0.0)) is None


def test_the_backwards_own_slowdown_adds_its_milliseconds() -> None:
    """The same step whose 20 ms backward ran 30 ms in the loop (the clock's backward over
    the work alone less the forward): 27 + 30 = 57 ms against 30 alone, 1.9x; where the
    backward's ratio was not measured it is taken as unslowed (47 / 30)."""
    from diagnose.stepmodel.facts import Facts
    from diagnose.stepmodel.host import clock_work_contention

    f = Facts(forward_contention=2.7, forward_quiet_ms=10.0, model_work_quiet_ms=30.0,
              backward_contention=1.5)
    assert clock_work_contention(f) == pytest.approx(57 / 30)
    assert clock_work_contention(f.replace(backward_contention=None)) == pytest.approx(47 / 30)


def test_a_change_of_workers_or_threads_leaves_the_loops_contention_behind() -> None:
    """The loop's measured contention is the run's as captured: a transform that sets the
    workers or the threads clears it for the next one in a chain; one that sets neither
    keeps it."""
    from diagnose.fixes import FIXES
    from diagnose.stepmodel.facts import Facts

    f = Facts(loop_contention=1.5, dataloader_num_workers=6, torch_num_threads=2)
    assert FIXES["num_workers"].transform.now(f, {"num_workers": 2}).loop_contention is None
    assert FIXES["threads"].transform.now(
        f, {"num_workers": 2, "intra_op_threads": 1}).loop_contention is None
    assert FIXES["larger_batch"].transform.now(f, {"batch_size": 64}).loop_contention == 1.5


def test_the_loops_measure_is_freed_whole_however_little_cpu_the_workers_used(
        tmp_path) -> None:
    """The loop ran its ops 1.5x as long as alone, beside 6 workers the host samples saw at
    1% of a core each: 0.06 CPUs, at half pace (2 threads on the 1 CPU left) no more than
    1.07x by the CPU they took. The ops are freed of the whole 1.5x (3000 / 1.5 = 2000 us):
    torch's threads wait for one another at each op's end, so a worker's moment on a CPU
    stalls both; with the workers not sampled, the same."""
    m = _model(_worker_loader(), tmp_path)
    idle = _facts(m, **RUN, workers_cpu_mean_pct=1.0, workers_count=6, loop_contention=1.5)
    assert main_host_ms(free_contention(m.graph, idle)) == pytest.approx(2.0, rel=0.01)
    assert main_host_ms(free_contention(m.graph, idle.replace(workers_count=None))) == \
        pytest.approx(2.0, rel=0.01)


def test_the_optimizers_own_contention_frees_its_ops_alone(tmp_path) -> None:
    """6 workers beside torch's 2 threads on 2 CPUs, each step 1000 us of the model's ops
    and an optimizer step. The loop's optimizer took 6 ms a step where the same step
    alone took 2 ms: its ops are freed by 3x, the model's by the loop's own measure
    (1.5x). Where the optimizer alone was not timed, or another optimizer stepped a model
    not given, both by 1.5x; an optimizer that ran faster in the loop than alone (noise)
    is freed of nothing."""
    from diagnose.stepmodel.facts import Facts
    from diagnose.stepmodel.graph import Tag, TaskKind
    from diagnose.stepmodel.host import optimizer_contention
    from tests import tracebuilder as tb

    b = tb.TraceBuilder(device=None)
    for _ in range(5):
        with b.step():
            b.dataloader(500, workers=6)
            b.cpu(1000, "aten::addmm")
            b.optimizer_step(kernels=10, kernel_dur=50.0)
    g = _model(b, tmp_path).graph

    def per_step(g, tag) -> float:
        main = (g.res == g.main) & g.is_kind(TaskKind.HOST) & ((g.tag & int(tag)) > 0)
        return float(g.dur[main].sum()) / g.n_steps

    f = Facts(cpu_count=2, torch_num_threads=2, dataloader_num_workers=6,
              loop_contention=1.5, optimizer_unprofiled_ms=6.0, optimizer_quiet_ms=2.0)
    assert optimizer_contention(f) == 3.0
    opt, fb = per_step(g, Tag.OPTIMIZER), per_step(g, Tag.FORWARD_BACKWARD)
    assert opt > 0 and fb > 0
    freed = free_contention(g, f)
    assert per_step(freed, Tag.OPTIMIZER) == pytest.approx(opt / 3.0)
    assert per_step(freed, Tag.FORWARD_BACKWARD) == pytest.approx(fb / 1.5)
    alike = free_contention(g, f.replace(optimizer_quiet_ms=None))
    assert optimizer_contention(f.replace(optimizer_quiet_ms=None)) is None
    assert per_step(alike, Tag.OPTIMIZER) == pytest.approx(opt / 1.5)
    # an optimizer stepped a model not given: the window's optimizer work holds its steps,
    # which neither the clock nor the quiet timing counted: the loop's measure frees it
    other = f.replace(optimizer_values_outside_models=164_608)
    assert optimizer_contention(other) is None
    assert per_step(free_contention(g, other), Tag.OPTIMIZER) == pytest.approx(opt / 1.5)
    faster = f.replace(optimizer_quiet_ms=8.0)
    assert optimizer_contention(faster) == 1.0
    assert per_step(free_contention(g, faster), Tag.OPTIMIZER) == pytest.approx(opt)
