"""The machine's context around an alarm: per-step CPU time and CPU wait before and after
the change began, the other processes' CPUs, and the line that says who moved."""

from __future__ import annotations

import pytest

from diagnose.watching.host import HostContext, explain, neighbours


def _context(wait_after: float) -> HostContext:
    h = HostContext()
    # one interval a second, 100 steps each: 1 ms of CPU a step throughout; the CPU wait
    # goes from 0.1 ms a step to ``wait_after`` from step 1000 on
    for i in range(20):
        first = i * 100
        h.ticks.append((first, first + 100, 0.1, (0.01 if first < 1000 else wait_after / 10)))
        h.others.append((first, 0.2 if first < 1000 else 1.5))
    return h


def test_before_and_after_the_change_per_step() -> None:
    got = _context(0.8).around(1000, 2000)
    assert got == {"step_ms": [None, None], "cpu_ms_per_step": [1.0, 1.0],
                   "cpu_wait_ms_per_step": [0.1, 0.8], "others_cpus": [0.2, 1.5]}


def test_an_interval_of_other_work_does_not_set_the_per_step_figures() -> None:
    """A new user's watch said 'its thread's own CPU time 43.8 -> 0.924 ms a step' for
    0.41 ms steps: one interval before the change held other work on the thread (the
    watch's start) over a few steps. The figures are the median interval's."""
    h = HostContext()
    for first in range(0, 2000, 100):
        if first == 900:  # 45 ms of CPU over 2 steps, then the rest of the second
            h.ticks.append((900, 902, 0.09, 0.08))
            h.ticks.append((902, 1000, 0.098, 0.0098))
            continue
        h.ticks.append((first, first + 100, 0.1, 0.01 if first < 1000 else 0.08))
    got = h.around(1000, 2000)
    assert got is not None
    assert got["cpu_ms_per_step"] == [1.0, 1.0] and got["cpu_wait_ms_per_step"] == [0.1, 0.8]


def test_a_change_that_is_mostly_waiting_for_a_cpu_is_the_machine() -> None:
    h = _context(0.8).around(1000, 2000)
    assert h is not None
    line = explain(h, 1.2, 1.9)  # +0.7 ms a step, +0.7 ms of it waiting
    assert "waited for a CPU 0.1 -> 0.8 ms" in line and "0.20 -> 1.50 CPUs" in line
    assert "the machine's neighbours, not the job" in line
    assert "neighbours" not in explain(h, 1.2, 3.0)  # most of +1.8 ms is the job's own


def test_a_wait_while_the_others_took_no_more_is_not_blamed_on_them() -> None:
    """A new user's CPU-hungry thread inside the job: the loop waited for a CPU, while the
    other processes kept 0.95 -> 0.82 CPUs busy. Not the neighbours: the line says the
    others took no more."""
    h = _context(0.8).around(1000, 2000)
    assert h is not None
    h["others_cpus"] = [0.95, 0.82]
    line = explain(h, 1.2, 1.9)
    assert "neighbours" not in line and "other processes took no more" in line


def test_nothing_is_said_before_a_second_after_the_change() -> None:
    assert _context(0.8).around(1950, 2000) is None
    h = HostContext()
    h.tick(0)
    h.tick(10)
    h.reset()  # a profiled window: its interval is not the job's
    h.tick(20)
    assert len(h.ticks) == 1 and h.ticks[0][:2] == (0, 10)


def test_host_samples_give_the_others_cpus() -> None:
    h = HostContext()
    h.sample(5, {"cpu_pct": [50.0, 100.0], "proc_cpu_pct": 80.0, "workers_cpu_pct": None})
    assert h.others[0] == (5, 0.7)


def test_the_jobs_other_descendants_are_not_the_neighbours() -> None:
    """torch.compile's workers are the training process's children: their CPU
    (``kids_cpu_pct``), read in lumps as they are reaped, is the job's. Two ticks, 0.8 and
    1.6 CPUs busy, the process 60% each, the compile's 0% then 120% (one reaped): the
    others' mean over them is 0.0, not the 0.1 of ticks clamped one by one."""
    h = HostContext()
    h.sample(1, {"cpu_pct": [40.0, 40.0], "proc_cpu_pct": 60.0, "kids_cpu_pct": 0.0})
    h.sample(2, {"cpu_pct": [80.0, 80.0], "proc_cpu_pct": 60.0, "kids_cpu_pct": 120.0})
    h.sample(3, {"cpu_pct": [50.0, 50.0], "proc_cpu_pct": 60.0, "kids_cpu_pct": 0.0})
    assert [round(c, 3) for _, c in h.others] == [0.2, -0.2, 0.4]
    for first in range(3):
        h.ticks.append((first + 1, first + 2, 0.1, 0.01))
    assert h.around(3, 4)["others_cpus"] == [0.0, 0.4]  # type: ignore[index]


def test_a_sample_before_new_workers_are_read_says_nothing_of_the_others() -> None:
    """Workers started again at an epoch's start have no CPU reading in their first
    sample (the sampler's first reading is a baseline): a new user's slower
    ``__getitem__`` from epoch 2 was told "other processes kept 0.84 -> 1.29 CPUs busy
    ... the machine's neighbours, not the job", its workers' CPU read as theirs. Such a
    sample is left out, as is one without the process's own reading."""
    h = HostContext()
    row = {"cpu_pct": [100.0, 100.0], "proc_cpu_pct": 60.0, "workers_count": 2}
    h.sample(1, {**row, "workers_cpu_pct": None, "workers_cpu_n": 0})
    h.sample(2, {**row, "workers_cpu_pct": 70.0, "workers_cpu_n": 1})
    h.sample(3, {**row, "proc_cpu_pct": None, "workers_cpu_pct": 140.0, "workers_cpu_n": 2})
    assert not h.others
    h.sample(4, {**row, "workers_cpu_pct": 130.0, "workers_cpu_n": 2})
    assert len(h.others) == 1 and h.others[0][0] == 4
    assert h.others[0][1] == pytest.approx(0.1)



def test_the_steps_beside_a_captures_analysis_are_left_out() -> None:
    """A new user's alarm read 'the loop waited for a CPU 22 -> 9.26 ms a step, its
    thread's own CPU time 12.1 -> 7.37 ms' beside 15 ms steps: the seconds before it held
    the baseline capture's analysis, which this process ran beside the steps. An interval
    in which the watch saw an analysis running is dropped (the detectors rest too)."""
    import types

    from diagnose.watching.watcher import Watch

    w = Watch(print_summary=False, progress_s=None)
    analyst = types.SimpleNamespace(busy=False)
    w._caps = types.SimpleNamespace(window=None, analyst=analyst, due=False)
    w._tests = types.SimpleNamespace(test=lambda *a: None)
    w._next_tick = float("inf")  # the ticks below are the test's
    w._host.tick(100)
    for steps, busy, tick in ((150, True, False), (200, True, True), (250, True, False),
                              (300, False, True), (350, False, False), (400, False, True)):
        analyst.busy, w.steps = busy, steps
        w._due(0.0, 1.0, 0.0)
        if tick:
            w._host.tick(steps)
    assert [t[:2] for t in w._host.ticks] == [(300, 400)]  # the analysis ran in the others


def test_a_profiled_windows_seconds_are_not_the_jobs_pace() -> None:
    """A tick inside a profiled window keeps nothing, and the next interval begins at the
    window's end: a new user's alarm after a capture read "the loop waited for a CPU 1.15
    -> 62.9 ms a step" beside 27-30 ms steps, the window's seconds counted as its steps'."""
    h = HostContext()
    h.tick(0)
    h.tick(100)
    assert len(h.ticks) == 1
    h.tick(150, window=True)
    h.tick(180, window=True)
    assert len(h.ticks) == 1
    h.tick(200)  # the window's end: the next interval starts here
    assert len(h.ticks) == 1
    h.tick(300)
    assert len(h.ticks) == 2 and h.ticks[-1][:2] == (200, 300)


def test_a_change_of_the_jobs_own_work_is_the_job_even_while_it_waits_more() -> None:
    """A new user doubled the batch: the step went 16 -> 25 ms, the thread's own CPU time
    11.5 -> 28.7 ms a step and its wait for a CPU rose by 11 ms (others busy too). The
    line blamed the neighbours; the thread's own work rose more than the wait did: the
    job's."""
    h = {"cpu_ms_per_step": [11.5, 28.7], "cpu_wait_ms_per_step": [0.3, 11.3],
         "others_cpus": [0.9, 1.4]}
    line = explain(h, 16.0, 25.0)
    assert "neighbours" not in line and "the training thread's own work" in line
    # the wait rising more than the thread's own work is still the machine's
    h["cpu_ms_per_step"] = [11.5, 14.0]
    assert "the machine's neighbours, not the job" in explain(h, 16.0, 25.0)


def test_the_figures_are_weighed_against_the_steps_own_mean_in_those_seconds() -> None:
    """A re-check: on a steady CNN whose steps come unevenly (workers), the line said its
    thread's own CPU 22.0 ms and its wait 20.2 ms a step, beside a change 18.7 -> 22.6 ms
    (medians: the steps' mean in those seconds was ~45 ms). The ticks time the steps too:
    the line leads with their mean, and the verdict weighs the rises against it."""
    h = HostContext()
    for first in range(0, 2000, 100):  # 1 s a tick, 100 steps: 10 ms, then 45 ms a step
        after = first >= 1000
        h.ticks.append((first, first + 100, 1.0 if not after else 2.2,
                        0.5 if not after else 2.0, 1.0 if not after else 4.5))
        h.others.append((first, 0.5 if not after else 1.4))
    got = h.around(1000, 2000)
    assert got is not None and got["step_ms"] == [10.0, 45.0]
    line = explain(got, 18.7, 22.6)
    assert line.startswith("the machine: the steps took 10 -> 45 ms on average")
    # +35 ms a step: +15 waiting (under half), +12 of the thread's own: neither leads
    assert "most of the change" not in line
    assert not neighbours(got, 18.7, 22.6)
