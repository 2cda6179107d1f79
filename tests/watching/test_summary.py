"""The record, the text summary at the end and the progress line: at most once per
``progress_s`` (checked once a second), none when it is None."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from diagnose import watch  # noqa: E402
from diagnose.watching import Watch  # noqa: E402


def _loop(seconds: float, **kw: Any) -> Any:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
    with watch(model, loader, baseline=False, **kw) as w:
        end = time.monotonic() + seconds  # inside the watch: its start may be slow
        while time.monotonic() < end:
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(0.002)
    return w


def test_progress_lines_come_at_most_as_often_as_asked(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    w = _loop(3.2, out_dir=tmp_path, progress_s=1.5, print_summary=True)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("torch-diagnose watch: step ")]
    # the first comes at the first once-a-second check 1.5 s in; then at most one per
    # 1.5 s of the watch's own duration (~3.2 s: 2 at most, more if a slow host ran on)
    most = int(w.to_json()["duration_s"] // 1.5)
    assert 1 <= len(lines) <= most, (lines, most)
    assert " ms/step (p90 " in lines[0] and re.search(r" \d+ alarms?, \d+ spikes?", lines[0])
    assert f"torch-diagnose watch: {w.steps:,} steps in " in err  # the summary at the end
    assert "energy: not measured: no NVML GPU" in err


def test_no_progress_line_when_none_is_asked(tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    w = _loop(1.5, out_dir=tmp_path, progress_s=None, print_summary=False)
    assert capsys.readouterr().err == ""
    rec = json.loads(json.dumps(w.to_json()))  # plain JSON, no numpy or objects
    assert rec["steps"] == w.steps and rec["step_mode"] == "optimizer"
    assert rec["settings"]["detector"]["step_time"]["h"] == 10.0
    assert (Path(w.run_dir) / "watch.json").exists()
    assert w.summary().startswith("torch-diagnose watch: ")


def test_diagnose_watch_is_the_function(tmp_path: Path) -> None:
    import diagnose

    assert callable(diagnose.watch) and isinstance(diagnose.watch(None, None), Watch)
    with pytest.raises(Exception, match="one `with` block"):
        w = Watch(out_dir=tmp_path, print_summary=False, sample_hz=0)
        with w:
            pass
        with w:
            pass


@pytest.mark.parametrize("steps", [1, 5, 8, 13])
def test_n_optimizer_steps_are_n_steps(tmp_path: Path, steps: int) -> None:
    """A loop that breaks after its N-th optimizer step (or runs out of batches) has taken
    N steps: the last one's boundary waits for a batch that never comes, and the watch
    closes it on exit; the record and the timeline say N too."""
    from diagnose.watching import read_timeline

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=4)
    with watch(model, loader, out_dir=tmp_path, baseline=False, print_summary=False,
               progress_s=None) as w:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i + 1 == steps:
                break
    n = min(steps, 10)  # 10 batches: 13 runs the loader out
    assert w.steps == n and w.to_json()["steps"] == n
    tl = read_timeline(w.run_dir)
    assert tl is not None and len(tl["steps"]["ms"]) == n


@pytest.mark.parametrize("marked", [False, True])
def test_a_hand_written_update_without_a_loader_says_how_to_mark_steps(
        tmp_path: Path, marked: bool) -> None:
    """A loop with no torch.optim step and no DataLoader (``p -= lr * p.grad``, batches
    sliced from tensors) gave "0 steps" and "no sustained change", nothing more (a new
    user's): the summary says no boundary was seen and to call w.step(); with w.step()
    every step counts and there is no such note."""
    from diagnose.watching.summary import NO_STEPS

    model = torch.nn.Linear(4, 1)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    with watch(model, None, out_dir=tmp_path, baseline=False, print_summary=False,
               progress_s=None) as w:
        for i in range(0, 64, 8):
            loss = torch.nn.functional.mse_loss(model(x[i:i + 8]), y[i:i + 8])
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
            if marked:
                w.step()
    rec = w.to_json()
    assert rec["steps"] == (8 if marked else 0)
    assert (NO_STEPS in rec["notes"]) is not marked
    assert ("call w.step()" in w.summary()) is not marked


def test_an_alarm_prints_as_the_summary_says_it() -> None:
    """A new user printed an alarm as the README shows and got the capture's whole report
    (tens of kB) in a dataclass repr: ``str(alarm)`` is the summary's lines. Two signals of
    one change share one capture: the summary says so instead of repeating it."""
    from diagnose.watching.alarm import Alarm
    from diagnose.watching.summary import text

    class _Report:  # a capture's report: long, and never printed by the alarm
        def step_time(self) -> float:
            return 37.2

        findings: list[Any] = []

        def __repr__(self) -> str:
            return "Report(" + "x" * 50_000 + ")"

    a = Alarm(469, "step_time", "change", 17.67, 37.57, "ms", 0.0, capture=_Report(),
              capture_dir="runs/captures/002", changed=["grew info -> critical IN001"],
              host_line="the machine: other processes kept 0.12 CPUs busy")
    out = str(a)
    assert out.splitlines()[0] == "step 469: step_time 17.67 ms -> 37.57 ms (x2.13)"
    assert "capture: runs/captures/002" in out and "grew info -> critical IN001" in out
    assert len(out) < 500
    b = Alarm(469, "loader_wait", "change", 0.9, 18.1, "ms", 0.0, capture=_Report(),
              capture_dir="runs/captures/002", changed=["grew info -> critical IN001"])
    rec = {"steps": 900, "duration_s": 26.0, "run_dir": "runs", "alarms": [
        a.to_json(), b.to_json()], "step_time_ms": {"median": None}, "loader_wait_ms": {},
        "energy": {"j_per_step": None, "why": "not measured"}, "spikes": {"count": 0},
        "captures": [], "notes": []}
    summary = text(rec)
    assert summary.count("capture: runs/captures/002") == 1
    assert "step 469: loader_wait 0.9 ms -> 18.1 ms (x20.11): the same capture as the alarm " \
           "above" in summary


def test_a_watch_the_user_stopped_says_so_in_its_timeline(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C in a watched loop: the timeline's end record and `analyze RUN` say the loop
    raised KeyboardInterrupt (a new user read '119 steps over 7.5 s' as a finished run);
    an exception with no message leaves no dangling colon."""
    from diagnose.cli import main

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
    with pytest.raises(KeyboardInterrupt), watch(model, loader, baseline=False,
                                                 out_dir=tmp_path, print_summary=False) as w:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == 5:
                raise KeyboardInterrupt
    assert "the loop raised KeyboardInterrupt" in w.notes and not any(
        n.endswith(": ") for n in w.notes)
    assert main(["analyze", str(w.run_dir)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("(stopped: the loop raised KeyboardInterrupt)"), head


def test_the_summary_names_the_largest_shifts_in_step_order() -> None:
    from diagnose.report.watch_timeline import largest_shifts as _largest

    def s(step: int, before: float, after: float, signal: str = "step_time") -> dict:
        return {"step": step, "signal": signal, "before": before, "after": after, "unit": "ms"}
    shifts = [s(315, 17.0, 7.4), s(420, 7.4, 7.0), s(560, 7.0, 7.6), s(650, 7.6, 7.1),
              s(701, 6.6, 8.0), s(720, 40.0, 70.0, "gpu_util")]
    got = _largest(shifts, 3)
    # by ratio: 17 -> 7.4 (2.3x), 6.6 -> 8.0 (1.21x); the utilisation's 30 points next
    assert [a["step"] for a in got] == [315, 701, 720]


def test_an_alarm_that_shares_a_capture_names_its_folder() -> None:
    """A new user's watch: the step-time alarm (step 274) came while the loader wait's
    (step 263) capture ran and shared it, as the terminal said; the TensorBoard tab's notes
    said "capture: no capture" for it (the capture's records list step 263 only). Found
    by the folder the alarm's own record names."""
    from diagnose.report.watch_timeline import alarm_lines

    d = "/home/u/watch-runs/x/captures/002-step263-loader_wait"  # read_watched's, absolute
    cap = {"label": "002-step263-loader_wait", "dir": d, "alarms": [263], "baseline": False}
    tl = {"captures": [{"label": "001-baseline", "dir": "b", "alarms": [], "baseline": True},
                       cap, {**cap, "why": None, "passed": False}],
          "alarms": [{"step": 263, "signal": "loader_wait", "before": 13.3, "after": 49.6,
                      "unit": "ms", "capture_why": "pending"},
                     {"step": 274, "signal": "step_time", "before": 65.5, "after": 74.5,
                      "unit": "ms", "capture": {"dir": "watch-runs/x/captures/"
                                                       "002-step263-loader_wait"},
                      "capture_why": None},  # as the alarm's record wrote it
                     {"step": 900, "signal": "step_time", "before": 65.5, "after": 90.0,
                      "unit": "ms", "capture_why": "at most one every 600 s"}]}
    lines = alarm_lines(tl)
    assert [x.rsplit("capture: ", 1)[1] for x in lines] == [d, d, "at most one every 600 s"]


@pytest.mark.parametrize("learnt", [False, True])
def test_a_run_that_ends_before_its_baseline_says_its_steps_were_not_tested(
        tmp_path: Path, learnt: bool) -> None:
    """A new user's 2,000 steps of 0.8 ms ended inside the first baseline's learning (4 s
    of steps) and read "alarms: 0 (no sustained change)": nothing had been tested. With
    counts kept as given (learnt in 16 steps), the same loop is tested and says nothing."""
    from diagnose.watching.detector import Params
    from diagnose.watching.summary import UNTESTED

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    params = {"step_time": Params(learn=16, relearn=16)} if learnt else None
    with watch(model, None, out_dir=tmp_path, baseline=False, print_summary=False,
               progress_s=None, warmup_steps=0, params=params) as w:
        for _ in range(40):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    rec = w.to_json()
    assert rec["steps"] == 40 and (UNTESTED in rec["notes"]) is not learnt
    assert ("alarms: 0 (no step was tested: see the note)" in w.summary()) is not learnt
