"""IN001's headline quotes the loader wait its grade reads (diagnose.metrics.loader_wait):
a new user's run read "critical: 2.8% of step time waiting on DataLoader" where the grade
came from the 31.8% of the steps timed without the profiler (the profiler slowed the step
11x)."""

from __future__ import annotations

from diagnose.metrics import CATALOG
from diagnose.metrics.loader_wait import DECLARATIONS, graded_wait
from diagnose.rules.engine import builtin_rules, evaluate

#: the new user's figures: the profiled window's and the clock's
RUN = {"dataloader_share": 0.028, "dataloader_wait_ms_per_step": 5.1,
       "step_time_mean_ms": 178.3, "dataloader_multiprocess": True,
       "dataloader_wait_unprofiled_share": 0.33, "step_time_unprofiled_mean_ms": 16.4,
       "dataloader_wait_steady_share": 0.318, "step_time_steady_mean_ms": 15.8}


def test_the_graded_wait_is_the_steady_steps_then_the_unprofiled_then_the_window() -> None:
    assert {d.name for d in DECLARATIONS} <= set(CATALOG)
    assert graded_wait(RUN) == {
        "dataloader_wait_graded_share": 0.318, "dataloader_wait_graded_ms": 5.024,
        "dataloader_wait_graded_step_ms": 15.8,
        "dataloader_wait_graded_steps": "without the profiler, in the steps that began no "
                                        "epoch"}
    no_starts = {k: v for k, v in RUN.items() if "steady" not in k}
    assert graded_wait(no_starts)["dataloader_wait_graded_share"] == 0.33
    assert graded_wait(no_starts)["dataloader_wait_graded_steps"] == "without the profiler"
    saved = {k: v for k, v in no_starts.items() if "unprofiled" not in k}
    assert graded_wait(saved) == {
        "dataloader_wait_graded_share": 0.028, "dataloader_wait_graded_ms": 4.992,
        "dataloader_wait_graded_step_ms": 178.3,
        "dataloader_wait_graded_steps": "under the profiler"}
    assert set(graded_wait({}).values()) == {None}


def test_in001_leads_with_the_figure_its_grade_reads() -> None:
    rules = [r for r in builtin_rules() if r.id == "IN001"]
    found, _ = evaluate(rules, {**RUN, **graded_wait(RUN)})
    (f,) = found
    assert f.severity == "critical"
    assert f.message.startswith("31.8% of step time waiting on DataLoader (5.0 ms of the mean "
                                "15.8 ms step without the profiler, in the steps that began")
    # the window's own figure stays, in a hint
    assert any("Under the profiler, the window's steps waited 2.8%" in h for h in f.hints)
    # a saved trace (the README's): the window's figure, as before
    saved = {"dataloader_share": 0.658, "dataloader_wait_ms_per_step": 19.6,
             "step_time_mean_ms": 29.76, "dataloader_multiprocess": False}
    (f,) = evaluate(rules, {**saved, **graded_wait(saved)})[0]
    assert f.message == ("65.8% of step time waiting on DataLoader (19.6 ms of the mean 29.8 ms "
                         "step under the profiler)")


def test_in001_offers_persistent_workers_only_where_its_wait_holds_the_epochs_starts() -> None:
    """A new user's capture read IN001's steady wait (the steps that began no epoch) and led
    it with persistent workers, which save only the starts it left out (IN005's). Where the
    figure is the window's or the clock's whole (a saved trace), the starts are in it."""
    rules = [r for r in builtin_rules() if r.id == "IN001"]
    (f,) = evaluate(rules, {**RUN, **graded_wait(RUN)})[0]
    assert "persistent_workers" not in f.fixes and "num_workers" in f.fixes
    saved = {"dataloader_share": 0.658, "dataloader_wait_ms_per_step": 19.6,
             "step_time_mean_ms": 29.76, "dataloader_multiprocess": True}
    (f,) = evaluate(rules, {**saved, **graded_wait(saved)})[0]
    assert "persistent_workers" in f.fixes


def test_in001_names_torchs_spinning_threads_where_they_hold_every_cpu():
    """An in-process loader waited on 88% of the step, torch on 2 threads on 2 CPUs whose
    idle threads spin 7.3 ms after each op: IN001 says the workers it offers will share the
    CPUs with the spin, and how to give it back. Told not to spin (PASSIVE: 0.05 ms), on
    fewer threads than CPUs, or not timed: no such hint."""
    from diagnose.rules.engine import evaluate, load_rules

    in001 = [r for r in load_rules() if r.id == "IN001"]
    m = {"dataloader_share": 0.88, "dataloader_wait_steady_share": 0.89,
         "dataloader_wait_unprofiled_share": 0.89, "dataloader_multiprocess": False,
         "dataloader_num_workers": 0, "cpu_count": 2, "torch_num_threads": 2,
         "threads_spin_ms": 7.3}

    def spin_hints(**change):
        (f,), _ = evaluate(in001, {**m, **change})
        return [h for h in f.hints if "spin" in h]

    (hint,) = spin_hints()
    assert "spin 7.3 ms of CPU after each op" in hint and "OMP_WAIT_POLICY=PASSIVE" in hint
    assert spin_hints(threads_spin_ms=0.05) == []
    assert spin_hints(threads_spin_ms=None) == []
    assert spin_hints(cpu_count=8) == []
