"""What the user sees in the terminal: a loop whose steps cannot be told gets that as the
report's first line, naming d.step() (never a wrong reason); torch's warnings once; no
USDT lines from the profiler; the report apart from the script's own output."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import diagnose.session.lifecycle as lifecycle  # noqa: E402
from diagnose.capture.quiet import WarningsOnce, drop_noise, quiet_stderr  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from diagnose.session.publish import HEADER  # noqa: E402
from diagnose.session.step_notes import UNTOLD  # noqa: E402
from tests.loops.shapes import make_sliced  # noqa: E402

QUICK: dict[str, Any] = {"steps": 3, "wait": 2, "warmup": 1, "clock_steps": 4, "sample_hz": 0}


def test_a_loop_nothing_tells_leads_the_report_with_d_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Raw tensors and a hand-written update, no model, loader or optimizer given."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 8, generator=g), torch.randn(256, 1, generator=g)
    w = torch.zeros(8, 1, requires_grad=True)
    with diagnose(out_dir=tmp_path, **QUICK) as d:
        for i in range(0, 256, 16):
            loss = ((x[i:i + 16] @ w - y[i:i + 16]) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
            print(f"step {i // 16} loss {loss.item():.3f}")
    assert not d.done and d.step_mode is None
    out = capsys.readouterr().out
    script, report = out.split(HEADER, 1)
    assert script.rstrip().endswith("step 15 loss " + script.rstrip().rsplit(" ", 1)[1])
    assert script.endswith("\n\n") or "\n\n" in script[-200:]  # a blank line before the rule
    # the report's first lines (the console wraps them) until its summary table
    first = " ".join(report.split("\n", 1)[1].split("\nsource")[0].split())
    assert first.startswith(UNTOLD) and first.endswith("Call d.step() at the end of each "
                                                       "step in the `with` block")
    assert "ended before the profiled window" not in out
    assert d.report.notes[0].startswith(UNTOLD)
    assert not any("cut short" in n or "no trace was written" in n for n in d.report.notes)


def test_d_step_needs_no_help(tmp_path: Path) -> None:
    w = torch.zeros(8, 1, requires_grad=True)
    with diagnose(out_dir=tmp_path, print_report=False, analyze=False, **QUICK) as d:
        for _ in range(100):
            (torch.randn(16, 8) @ w).sum().backward()
            w.grad = None
            d.step()
            if d.done:
                break
    assert d.done and d.step_mode == "manual" and d.untold is None


def test_d_step_before_the_block_says_it_marks_nothing(tmp_path: Path) -> None:
    """d.step() on a session not yet entered (the with block forgotten) warns; after the
    block it is quiet: a loop that goes on training past the session is no mistake."""
    d = diagnose(out_dir=tmp_path, print_report=False, analyze=False, **QUICK)
    with pytest.warns(RuntimeWarning, match="before `with diagnose"):
        d.step()
    with d:
        w = torch.zeros(8, 1, requires_grad=True)
        while not d.done:
            (torch.randn(16, 8) @ w).sum().backward()
            d.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d.step()


def test_torchs_warnings_show_once_a_run(tmp_path: Path) -> None:
    """torch's "This DataLoader will create N worker processes" check, run each epoch
    (here without starting workers), with the warnings filters changed in between (each
    change makes Python show a warning again)."""
    job = make_sliced()
    opt = torch.optim.SGD(job.model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 32), torch.randint(0, 10, (64,))),
                        batch_size=16, num_workers=0)
    wide = DataLoader(loader.dataset, num_workers=(os.cpu_count() or 2) * 4)
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        orig = warnings.showwarning
        warnings.showwarning = lambda m, *a, **k: shown.append(str(m))
        try:
            with diagnose(job.model, loader, out_dir=tmp_path, print_report=False,
                          analyze=False, **QUICK) as d:
                for _epoch in range(3):
                    wide.check_worker_number_rationality()
                    with warnings.catch_warnings():  # a filter change: shown again
                        warnings.filterwarnings("ignore", message="nothing")
                    for x, y in loader:
                        nn.functional.cross_entropy(job.model(x), y).backward()
                        opt.step()
                        opt.zero_grad()
            wide.check_worker_number_rationality()  # after the run: torch's own way again
        finally:
            warnings.showwarning = orig
    assert d.steps_seen > 0
    worker = [m for m in shown if "worker processes" in m]
    assert len(worker) == 2  # once in the run, once after it


def test_warnings_once_lets_other_warnings_through() -> None:
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, *a, **k: shown.append(str(m))
        once = WarningsOnce().install()
        try:
            for _ in range(3):
                warnings.warn("mine", UserWarning, stacklevel=1)
        finally:
            once.remove()
    assert shown == ["mine"] * 3


def test_usdt_lines_are_dropped_and_the_rest_kept() -> None:
    noise = (b"USDT:2026-11-28 05:25:15 12752:12752 SyncActivityProfilerHandler.cpp:52] "
             b"profiler_start\n")
    assert drop_noise(noise + b"real problem\n" + noise.replace(b"start", b"stop")) == \
        b"real problem\n"
    assert drop_noise(b"no newline at the end") == b"no newline at the end"
    assert drop_noise(noise.rstrip(b"\n")) == b""


def test_quiet_stderr_keeps_what_is_not_noise(capfd: pytest.CaptureFixture[str]) -> None:
    with quiet_stderr():
        os.write(2, b"USDT:2026-01-01 1:1 X.cpp:52] profiler_start\nkept\n")
        print("python's stderr too", file=sys.stderr)
    err = capfd.readouterr().err
    assert "USDT" not in err and "kept\n" in err and "python's stderr too" in err


def test_a_capture_prints_no_usdt_lines(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "_run_analysis", lambda run_dir: None)
    job = make_sliced()
    with diagnose(job.model, out_dir=tmp_path, **QUICK) as d:
        job.loop(d, 200)
    assert d.done
    assert "USDT" not in capfd.readouterr().err
