"""The loop's own steps after a fork (diagnose.capture.fork_steps, ``forked`` phase) and what
the copies cost the loop from them (diagnose.metrics.context.loop_fork): the steps run once
the block is over where the session's gate lets them, never count as the job's steps, leave
no child behind, and their cost is set beside the steps before the fork."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
from diagnose.capture.fork_steps import FORK_STEPS  # noqa: E402
from diagnose.fixes.catalog.workers import WORKER_ASSUMES  # noqa: E402
from diagnose.metrics.context import context_metrics  # noqa: E402
from diagnose.metrics.context.loop_fork import loop_fork  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from diagnose.stepmodel.epochs import fork_copy_ms  # noqa: E402
from diagnose.stepmodel.facts import Facts  # noqa: E402
from tests.capture.test_one_thread_steps import _Slow  # noqa: E402
from tests.datasets import train  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _children() -> set[int]:
    return {c.pid for c in psutil.Process().children()}


def _drive(monkeypatch: pytest.MonkeyPatch, steps: int, gate: Any,
           one_thread: bool = False) -> tuple[steps_mod.Steps, list[int]]:
    """A Steps without profiler on a fake clock (10 ms steps), ``steps`` boundaries or until
    done: the rows, and the gate's calls (``one_thread``: those steps' gate says yes too;
    the block's end then falls on a one-thread step's turn)."""
    now = [0.0]
    monkeypatch.setattr(steps_mod, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(steps_mod, "MIN_AFTER_S", 0.0)
    calls: list[int] = []
    s = steps_mod.Steps(None, after=4, settle=1)
    s.forked.wanted = lambda: calls.append(1) or gate
    s.one_thread = (lambda: True) if one_thread else None
    s.start()
    for _ in range(steps):
        now[0] += 0.01
        s.advance()
        if s.done:
            break
    return s, calls


def test_the_forked_steps_follow_the_block_and_end_the_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = _children()
    s, calls = _drive(monkeypatch, 5 + FORK_STEPS - 1, True)
    phases = [r[0] for r in s.rows]
    assert calls == [1] and phases == ["settle"] + ["after"] * 4 + ["forked"] * (FORK_STEPS - 1)
    assert not s.done and s.forked.running and len(_children() - before) == 1  # the child
    s.advance()  # the last forked step: the child is let go and reaped, the clock done
    assert s.done and not s.forked.running and _children() <= before
    assert s._after == 5  # they are steps of their own: the block's count is the after steps'


def test_no_one_thread_step_runs_among_the_forked_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block ends on a one-thread step's turn: the forked steps run on torch's threads,
    all of them, and the child lives until the last."""
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        s, _ = _drive(monkeypatch, 40, True, one_thread=True)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(n)
    phases = [r[0] for r in s.rows]
    assert phases == ["settle"] + ["after"] * 4 + ["forked"] * FORK_STEPS and s.done


def test_a_gate_that_says_no_ends_the_clock_at_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    s, calls = _drive(monkeypatch, 40, False)
    assert calls == [1] and s.done and "forked" not in [r[0] for r in s.rows]
    s, calls = _drive(monkeypatch, 40, None)  # a gate never set is not asked
    assert s.done and "forked" not in [r[0] for r in s.rows]


def test_a_loop_that_stops_in_the_forked_steps_leaves_no_child(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = _children()
    s, _ = _drive(monkeypatch, 7, True)
    assert s.forked.running
    s.finish()  # the loop's end
    assert not s.forked.running and _children() <= before
    s, _ = _drive(monkeypatch, 7, True)
    s.restore_threads()  # the session's teardown (a block that raised)
    assert not s.forked.running and _children() <= before


def _clock(works: list[tuple[str, float]], wait: float = 2.0, gc: float = 0.5,
           starts: list[int] | None = None) -> dict[str, Any]:
    return {"phase": [p for p, _ in works], "ms": [w + wait + gc for _, w in works],
            "dataloader_ms": [wait] * len(works), "gc_ms": [gc] * len(works),
            "loader_starts": starts or [0] * len(works)}


def test_the_copies_are_the_forked_steps_beyond_the_steps_before() -> None:
    """Steps of 10 ms of work before the fork (a slower pace far earlier is not among the
    last BASE), 90, 14 and 11 ms after it: 85 ms of copies; their waits and the collector's
    pauses left out."""
    works = [("after", 30.0)] * 4 + [("after", 10.0)] * 8 + [
        ("forked", 90.0), ("forked", 14.0), ("forked", 11.0)]
    got = loop_fork(_clock(works))
    assert got == {"ms": pytest.approx(85.0), "noise_ms": 0.0, "steps": 3}
    m = context_metrics({"capture": {"step_clock": _clock(works)}})
    assert m["input_worker_fork_copy_loop_ms"] == pytest.approx(85.0)
    assert m["input_worker_fork_copy_loop_noise_rel"] == 0.0
    # an epoch that started in the forked steps: its own start is not copies
    assert loop_fork(_clock(works, starts=[0] * 13 + [1, 0])) is None
    assert loop_fork(_clock([("after", 10.0)] * 2 + [("forked", 30.0)])) is None  # too few
    assert loop_fork(_clock([("after", 10.0)] * 8)) is None


def test_the_model_takes_the_loops_copies_over_the_probes() -> None:
    """The loop's steps after a fork hold the whole step's writes: they stand for the
    probe's work and the states' price alike, at the one-thread price on one thread; either
    timing measured, the prediction assumes nothing of the copies."""
    probe = dict(input_worker_fork_copy_ms=40.0, input_worker_fork_copy_ms_per_mib=2.0,
                 mem_model_states_bytes=64 * 2**20, torch_num_threads=2,
                 input_worker_fork_copy_ms_per_mib_1thread=0.5)
    assert fork_copy_ms(Facts(**probe)) == pytest.approx(168.0)
    loop = Facts(**probe, input_worker_fork_copy_loop_ms=100.0)
    assert fork_copy_ms(loop) == pytest.approx(100.0)
    assert fork_copy_ms(loop, threads=1) == pytest.approx(25.0)
    assert fork_copy_ms(Facts(input_worker_fork_copy_loop_ms=100.0)) == pytest.approx(100.0)
    key = next(k for k in WORKER_ASSUMES if "input_worker_fork_copy_ms" in k)
    assert "input_worker_fork_copy_loop_ms" in key.split("|")


def test_a_session_times_the_loop_after_a_fork_where_workers_are_predicted(
        tmp_path: Any) -> None:
    """A real loop waiting on an in-process loader (adding workers may be a warning's fix):
    the session forks after the block and times the loop's next steps, reports the job's
    step from the others, leaves no child behind, charges their cost to the probes and
    leaves the model's own work out of the fork-copy timing after the loop."""
    before = _children()
    model = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 4))
    opt = torch.optim.Adam(model.parameters())
    loader = DataLoader(_Slow(), batch_size=32, shuffle=True)
    with diagnose(model, loader, out_dir=tmp_path, print_report=False) as d:
        for _ in range(50):  # epochs, until the clock is done (a busy host's steps are long)
            train(model, opt, loader, d)
            if d.done:
                break
    assert _children() <= before
    ctx = json.loads((d.run_dir / "context.json").read_text())
    clock = ctx["capture"]["step_clock"]
    phases = clock["phase"]
    assert phases.count("forked") == FORK_STEPS and phases[-1] == "forked"
    m = d.report.metrics
    started = any(n for p, n in zip(phases, clock["loader_starts"], strict=True) if p == "forked")
    if started:  # an epoch began in the forked steps: its own start is not copies
        assert m["input_worker_fork_copy_loop_ms"] is None
    else:
        assert m["input_worker_fork_copy_loop_ms"] is not None
        assert m["input_worker_fork_copy_loop_ms"] >= 0
    assert "fork_copy_in_loop" in ctx["probes_ms"]
    copy = ctx["dataloader"].get("fork_copy")
    assert copy is None or copy["work_ms"] is None  # not timed again after the loop
