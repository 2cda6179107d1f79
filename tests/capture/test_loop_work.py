"""The loop's own work between steps (IN007): the clock times it from an optimizer step's
return to the next model call; a loop that makes its batches itself, with no DataLoader,
is told so, and one whose batches are ready is not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
from diagnose.metrics.context import context_metrics  # noqa: E402
from diagnose.session import diagnose  # noqa: E402


class FakeClock:
    """``time.perf_counter`` moved by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _fake_clock_steps(monkeypatch: pytest.MonkeyPatch
                      ) -> tuple[FakeClock, nn.Parameter, torch.optim.Optimizer, steps_mod.Steps]:
    """A step clock started on a hand-moved clock, with a parameter and its optimizer."""
    clock = FakeClock()
    monkeypatch.setattr(steps_mod.time, "perf_counter", clock)
    w = nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=0.1)
    s = steps_mod.Steps(None, after=100, extend=False)
    s.start()
    return clock, w, opt, s


def test_the_time_from_an_optimizer_step_to_the_next_forward_is_the_steps_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step: 4 ms of the loop's own work after the optimizer returns, then the
    forward, backward and optimizer (6 ms). The clock's between_ms reads 4 ms in every
    step once the steps are told (its first row, while the boundaries' kind is learnt,
    spans more than one step and holds each gap inside it)."""
    clock, w, opt, s = _fake_clock_steps(monkeypatch)
    for _ in range(8):
        clock.t += 0.004  # the loop makes its batch
        s.on_model_call(True)
        clock.t += 0.005  # forward and backward
        w.grad = torch.ones(2)
        s.on_optimizer_start(opt)
        clock.t += 0.001
        s.on_optimizer_step(opt)
    rows = s.clock()
    between = rows["between_ms"]
    assert len(between) >= 4 and between[0] <= rows["ms"][0]
    assert between[1:] == pytest.approx([4.0] * (len(between) - 1))
    assert rows["ms"][1:] == pytest.approx([10.0] * (len(between) - 1))
    m = context_metrics({"capture": {"step_clock": rows}})
    assert m["loop_own_work_unprofiled_share"] == pytest.approx(0.4)
    assert m["loop_own_work_unprofiled_ms"] == pytest.approx(4.0)


def test_the_collectors_pauses_between_steps_are_not_the_loops_own_work(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step: 4 ms of the loop's own work after the optimizer returns, with a 3 ms
    full collection inside it (a new user's loop counted it twice: IN007's 19.5% and
    CF006's 14%): the clock's between_ms reads 7 ms, its gc_between_ms 3, and the loop's
    own work 4 ms; the pause stays CF006's (gc_ms)."""
    clock, w, opt, s = _fake_clock_steps(monkeypatch)
    s.gc_timed = True
    for _ in range(8):
        clock.t += 0.002
        clock.t += 0.003
        s.on_gc(0.003, 2)  # a full collection, outside any wait for a batch
        clock.t += 0.002
        s.on_model_call(True)
        clock.t += 0.005
        w.grad = torch.ones(2)
        s.on_optimizer_start(opt)
        clock.t += 0.001
        s.on_optimizer_step(opt)
    rows = s.clock()
    assert rows["between_ms"][1:] == pytest.approx([7.0] * (len(rows["ms"]) - 1))
    assert rows["gc_between_ms"][1:] == pytest.approx([3.0] * (len(rows["ms"]) - 1))
    m = context_metrics({"capture": {"step_clock": rows}})
    assert m["loop_own_work_unprofiled_ms"] == pytest.approx(4.0, abs=0.3)
    assert m["gc_pause_ms"] == pytest.approx(3.0, abs=0.3)


def test_a_dataloaders_wait_is_not_the_loops_own_work() -> None:
    """8 ms between steps of which the DataLoader's wait took 6: 2 ms of the loop's own."""
    rows = {"phase": ["wait"] * 5, "ms": [20.0] * 5, "between_ms": [8.0] * 5,
            "dataloader_ms": [6.0] * 5}
    m = context_metrics({"capture": {"step_clock": rows}})
    assert m["loop_own_work_unprofiled_ms"] == pytest.approx(2.0)
    assert m["loop_own_work_unprofiled_share"] == pytest.approx(0.1)
    older = context_metrics({"capture": {"step_clock": {"phase": ["wait"] * 5,
                                                        "ms": [20.0] * 5}}})
    assert older["loop_own_work_unprofiled_share"] is None  # not timed: not evaluated


def _batches(delay_s: float) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """A user's generator: each batch made on the spot (``delay_s`` of it stands for
    tokenising), no DataLoader."""
    g = torch.Generator().manual_seed(0)
    while True:
        if delay_s:
            time.sleep(delay_s)
        yield torch.randn(8, 16, generator=g), torch.randint(0, 3, (8,), generator=g)


def _capture(tmp_path: Path, delay_s: float) -> object:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose(model, steps=3, wait=2, clock_steps=6, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        for x, y in _batches(delay_s):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if d.done:
                break
    return d.report


def test_a_generator_that_makes_each_batch_is_found(tmp_path: Path) -> None:
    """25 ms of batch making a step beside a step of about a millisecond of model work:
    IN007 at warning or above, its fix the DataLoader workers, not predicted."""
    report = _capture(tmp_path, 0.025)
    assert report.metrics["loop_own_work_unprofiled_ms"] >= 25.0  # a sleep is never shorter
    (f,) = [f for f in report.findings if f.rule == "IN007"]
    assert f.severity in ("warning", "critical")
    assert f.fixes[0] == "loop_batches_in_workers"


def test_batches_made_ahead_raise_nothing(tmp_path: Path) -> None:
    """The same loop with its batches ready (nothing made between steps): no IN007."""
    report = _capture(tmp_path, 0.0)
    assert report.metrics["loop_own_work_unprofiled_share"] is not None
    assert not [f for f in report.findings if f.rule == "IN007"]


def test_an_evaluation_every_few_steps_is_named_not_a_busy_machine() -> None:
    """A loop that evaluates every 5th step (3 more model calls, 45 ms longer than its
    57 ms steps) on a machine where the training thread never waited for a CPU: the note
    names those steps and asks for no quieter machine."""
    from diagnose.metrics.context import clock_note

    n = 40
    slow = [i % 5 == 4 for i in range(n)]
    rows = {"phase": ["wait"] * n, "ms": [102.0 if s else 57.0 for s in slow],
            "forwards": [4 if s else 1 for s in slow], "cpu_wait_ms": [0.0] * n}
    m = context_metrics({"capture": {"step_clock": rows}})
    assert m["step_extra_calls_steps"] == 8 and m["step_extra_calls_ms"] == pytest.approx(45.0)
    note = clock_note(m)
    assert note is not None and "8 of them called the model more often" in note
    assert "less busy" not in note


def test_a_gradient_accumulations_micro_batches_are_timed_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """4 micro-batches a step, each made in 3 ms before its model call; a backward's end
    starts the loop's own time as an optimizer step's return does, and an optimizer step
    after a backward (the 4th) drops it: 12 ms a step, the optimizer's 1 ms not among
    them."""
    clock, w, opt, s = _fake_clock_steps(monkeypatch)
    for _ in range(8):
        for _k in range(4):
            clock.t += 0.003  # the loop makes its micro-batch
            s.on_model_call(True)
            clock.t += 0.002  # forward and backward
            s.on_backward_end()
            w.grad = torch.ones(2)
        clock.t += 0.0005  # clipping, logging: after a backward, before the optimizer
        s.on_optimizer_start(opt)
        clock.t += 0.001
        s.on_optimizer_step(opt)
    rows = s.clock()
    between = rows["between_ms"]
    assert len(between) >= 4
    assert between[1:] == pytest.approx([12.0] * (len(between) - 1))
    assert rows["ms"][1:] == pytest.approx([21.5] * (len(between) - 1))


def test_a_real_backward_queues_its_end(tmp_path: Path) -> None:
    """A loop accumulating 4 micro-batches from a generator that takes 6 ms to make each:
    the loop's own work counts all four (24 ms a step or more), not the first alone."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose(model, steps=3, wait=2, clock_steps=6, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        batches = _batches(0.006)
        while not d.done:
            for _ in range(4):
                x, y = next(batches)
                (nn.functional.cross_entropy(model(x), y) / 4).backward()
            opt.step()
            opt.zero_grad()
    assert d.report.metrics["loop_own_work_unprofiled_ms"] >= 24.0


def test_a_hand_written_update_says_why_its_batch_making_is_not_timed(
        tmp_path: Path) -> None:
    """No torch optimizer (the weights written by hand): the clock has no optimizer step
    to time the loop's own work from, and IN007's line in "Not evaluated" says so."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    with diagnose(model, steps=3, wait=2, clock_steps=6, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        for x, y in _batches(0.002):
            nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
            if d.done:
                break
    (why,) = [n.reason for n in d.report.not_evaluated if n.rule == "IN007"]
    assert "stepped no torch optimizer" in why
