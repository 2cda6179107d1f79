"""The loop's own steps on one thread (diagnose.capture.steps, ``one_thread`` phase) and
what one thread costs the loop's work from them (diagnose.metrics.context.loop_threads):
the steps run where the session's gate lets them, never count as the job's steps, always
give torch's thread count back, and their ratio is paired with the steps beside them."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
from diagnose.metrics.context import context_metrics  # noqa: E402
from diagnose.metrics.context.loop_threads import loop_threads  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from diagnose.stepmodel.facts import Facts  # noqa: E402
from diagnose.stepmodel.host import thread_scale  # noqa: E402
from tests.datasets import train  # noqa: E402


@pytest.fixture
def two_threads() -> Any:
    """torch on 2 intra-op threads for the test, put back after it."""
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(n)


def _drive(monkeypatch: pytest.MonkeyPatch, steps: int, gate: Any) -> tuple[
        steps_mod.Steps, list[int], list[int]]:
    """A Steps without profiler on a fake clock (10 ms steps), ``steps`` boundaries: the
    rows, torch's thread count in each step, and the gate's calls."""
    now = [0.0]
    monkeypatch.setattr(steps_mod, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(steps_mod, "MIN_AFTER_S", 10.0)
    calls: list[int] = []
    s = steps_mod.Steps(None, after=4, settle=1)
    s.one_thread = lambda: calls.append(1) or gate
    s.start()
    seen = []
    for _ in range(steps):
        seen.append(torch.get_num_threads())
        now[0] += 0.01
        s.advance()
        if s.done:
            break
    return s, seen, calls


def test_every_fourth_step_after_the_window_runs_on_one_thread(
        monkeypatch: pytest.MonkeyPatch, two_threads: None) -> None:
    s, seen, calls = _drive(monkeypatch, 80, True)
    phases = [r[0] for r in s.rows]
    assert calls == [1]  # the gate is asked once
    assert phases[:11] == ["settle", "after", "after", "after", "after", "one_thread",
                           "after", "after", "after", "after", "one_thread"]
    assert phases.count("one_thread") == steps_mod.ONE_THREAD_STEPS == s.one_thread_steps
    # each one-thread step ran on one thread, every other on torch's two
    assert [n for n, p in zip(seen, phases, strict=False) if p == "one_thread"] == [1] * 12
    assert set(n for n, p in zip(seen, phases, strict=False) if p != "one_thread") == {2}
    assert torch.get_num_threads() == 2
    # they are steps of their own: the block's count is the after steps'
    assert s._after == 1 + phases.count("after")


def test_a_gate_that_says_no_runs_none(monkeypatch: pytest.MonkeyPatch,
                                       two_threads: None) -> None:
    s, seen, calls = _drive(monkeypatch, 40, False)
    assert calls == [1] and "one_thread" not in [r[0] for r in s.rows]
    assert set(seen) == {2}


def test_a_loop_that_stops_in_a_one_thread_step_gets_its_threads_back(
        monkeypatch: pytest.MonkeyPatch, two_threads: None) -> None:
    s, _, _ = _drive(monkeypatch, 5, True)  # the 5th boundary set one thread for the 6th
    assert torch.get_num_threads() == 1
    s.finish()
    assert torch.get_num_threads() == 2
    s, _, _ = _drive(monkeypatch, 5, True)
    s.restore_threads()  # the session's teardown (a block that raised)
    assert torch.get_num_threads() == 2


def _clock(works: list[tuple[str, float]], wait: float = 2.0) -> dict[str, Any]:
    return {"phase": [p for p, _ in works], "ms": [w + wait for _, w in works],
            "dataloader_ms": [wait] * len(works)}


def test_the_ratio_is_paired_with_the_steps_beside_it() -> None:
    """The host's pace doubles halfway: each one-thread step is 1.5x the work of its
    neighbours (its wait for a batch left out), which a ratio of the two phases' medians
    would not say (the pace moves both); the one just before the jump sits beside both
    paces (1.0), and the median passes over it."""
    works = []
    for pace in (8.0, 8.0, 16.0, 16.0):
        works += [("after", pace)] * 3 + [("one_thread", 1.5 * pace)]
    got = loop_threads(_clock(works + [("after", 16.0)]))
    assert got is not None and got["ratio"] == pytest.approx(1.5) and got["noise"] == 0.0
    assert got["steps"] == 4 and got["extra_ms"] == pytest.approx(4 + 0 + 8 + 8)
    few = loop_threads(_clock([("after", 8.0), ("one_thread", 12.0), ("after", 8.0)]))
    assert few == {"ratio": None, "noise": None, "steps": 1, "extra_ms": 4.0}
    assert loop_threads(_clock([("after", 8.0)] * 3)) is None


def test_the_loops_ratio_is_the_one_thread_ratio_and_holds_for_the_whole_work() -> None:
    works = [("after", 10.0), ("one_thread", 13.0), ("after", 10.0)] * 4
    ctx = {"capture": {"step_clock": _clock(works)},
           "threads": {"work_ms": 4.0, "work_1thread_ms": 8.0, "noise": 0.01}}
    m = context_metrics(ctx)
    assert m["threads_loop_ratio"] == pytest.approx(1.3) and m["threads_loop_steps"] == 4
    assert m["threads_one_thread_ratio"] == pytest.approx(1.3)  # not the probe's 2.0
    # Amdahl over the main thread's whole work: no share of it is left unscaled
    loop = Facts(torch_num_threads=2, threads_one_thread_ratio=1.3, threads_loop_ratio=1.3,
                 model_work_quiet_ms=2.0)
    probe = Facts(torch_num_threads=2, threads_one_thread_ratio=1.3, model_work_quiet_ms=2.0)
    assert thread_scale(loop, 1, host_ms=10.0) == pytest.approx(1.3)
    assert thread_scale(probe, 1, host_ms=10.0) == pytest.approx(1.06)


class _Slow(Dataset):
    """Samples made in Python for a while: the loop waits on its in-process loader."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2e-4:
            pass
        return torch.randn(32), torch.tensor(i % 4)


def test_a_session_runs_them_where_the_threads_split_is_needed(
        tmp_path: Any, two_threads: None) -> None:
    """A real loop waiting on an in-process loader: the session runs one-thread steps after
    the window, reports the job's step from its other steps, leaves no thread count changed,
    and the probes after the loop leave one thread out."""
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(_Slow(), batch_size=32, shuffle=True)
    with diagnose(model, loader, out_dir=tmp_path, print_report=False) as d:
        train(model, opt, loader, d)
    assert torch.get_num_threads() == 2
    ctx = json.loads((d.run_dir / "context.json").read_text())
    phases = ctx["capture"]["step_clock"]["phase"]
    assert phases.count("one_thread") >= 3
    m = d.report.metrics
    assert m["threads_loop_steps"] == phases.count("one_thread")
    assert m["threads_one_thread_ratio"] == m["threads_loop_ratio"] is not None
    assert m["model_work_one_thread_ms"] is None  # the probe's rounds left one thread out
    assert "threads_in_loop" in ctx["probes_ms"]
