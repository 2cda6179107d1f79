"""Faults during capture: the user's exception reaches them unchanged, the run folder
holds what was measured, no worker process or sampler thread is left behind, and the
model and optimizer are as the loop left them."""

from __future__ import annotations

import errno
import gc
import multiprocessing
import os
import signal
import threading
import time
import tracemalloc
from pathlib import Path

import psutil
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from diagnose import diagnose
from diagnose.errors import CaptureError


class Squares(Dataset):
    def __init__(self, n: int = 256, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.fail_at is not None and i == self.fail_at:
            raise ValueError(f"corrupt sample {i}")
        x = torch.full((8,), float(i) / self.n)
        return x, x.sum().reshape(1)


def _setup(**loader_kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Squares(fail_at=loader_kw.pop("fail_at", None)), batch_size=8,
                        **loader_kw)
    return model, opt, loader


def _step(model, opt, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def _no_leftovers() -> None:
    """No child process and no session thread within 10 s. A worker killed by a signal is
    a zombie until its parent polls it (torch's iterator does so where it is collected;
    ``multiprocessing.active_children`` does it for any): a busy machine can delay that."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        gc.collect()
        multiprocessing.active_children()
        kids = psutil.Process().children(recursive=True)
        threads = [t for t in threading.enumerate() if "diagnose" in t.name.lower()]
        if not kids and not threads:
            return
        time.sleep(0.1)
    raise AssertionError(f"left behind: processes {kids}, threads {threads}")


def _run_dirs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir()]


def test_keyboard_interrupt_propagates_and_cleans_up(tmp_path):
    model, opt, loader = _setup()
    interrupt = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as info, \
            diagnose(model, loader, out_dir=tmp_path, print_report=False, steps=2):
        for i, (x, y) in enumerate(loader):
            _step(model, opt, x, y)
            if i == 4:
                raise interrupt
    assert info.value is interrupt
    (run,) = _run_dirs(tmp_path)
    assert (run / "context.json").exists()
    _no_leftovers()


def test_an_exception_in_the_window_is_named_in_the_report(tmp_path):
    """A loop that raises inside the profiled window: the exception reaches the user
    unchanged, the run folder is kept (context, the steps' trace) and the report's note
    says what cut the window short, with no advice on the schedule."""
    model, opt, loader = _setup()
    sessions = []
    with pytest.raises(ValueError, match="bad batch 4"), \
            diagnose(model, loader, out_dir=tmp_path, print_report=False, wait=1, warmup=0,
                     steps=5) as d:
        sessions.append(d)
        for i, (x, y) in enumerate(loader):
            _step(model, opt, x, y)
            if i == 4:
                raise ValueError("bad batch 4\nand a second line the note leaves out")
    (run,) = _run_dirs(tmp_path)
    assert run == sessions[0].run_dir and (run / "context.json").exists()
    assert any(p.name.endswith(".pt.trace.json.gz") for p in run.iterdir())
    report = sessions[0].report
    assert report is not None
    cut = [n for n in report.notes if "the profiled window was cut short" in n]
    assert cut, report.notes
    assert "cut short by ValueError: bad batch 4 raised in the loop" in cut[0]
    assert "second line" not in cut[0] and "end of the loop" not in cut[0]
    assert "use fewer wait/warmup/steps" not in cut[0]
    _no_leftovers()


def _raised(fn) -> str:
    """Run fn, return the text of what it raised; the exception (and the DataLoader
    iterator its traceback keeps alive, as in plain PyTorch) is released on return."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test checks what it was
        return f"{type(e).__name__}: {e}"
    raise AssertionError("nothing was raised")


def test_worker_that_raises(tmp_path):
    model, opt, loader = _setup(num_workers=2, fail_at=40)
    sessions = []

    def loop():
        with diagnose(model, loader, out_dir=tmp_path, print_report=False, steps=2) as d:
            sessions.append(d)
            for x, y in loader:
                _step(model, opt, x, y)

    assert _raised(loop).startswith("ValueError: Caught ValueError in DataLoader worker")
    gc.collect()
    (run,) = _run_dirs(tmp_path)
    assert (run / "context.json").exists()
    assert sessions[0].report is not None  # a partial report is still made
    _no_leftovers()


def test_worker_that_is_killed(tmp_path):
    model, opt, loader = _setup(num_workers=2)

    def loop():
        with diagnose(model, loader, out_dir=tmp_path, print_report=False, steps=2):
            for i, (x, y) in enumerate(loader):
                _step(model, opt, x, y)
                if i == 3:
                    for w in psutil.Process().children():
                        os.kill(w.pid, signal.SIGKILL)

    # torch's wording varies: "killed by signal" / "exited unexpectedly"; killed while it
    # handed a batch over, the file-descriptor transfer breaks first
    msg = _raised(loop)
    assert "DataLoader worker" in msg or msg.startswith("ConnectionResetError"), msg
    gc.collect()
    _no_leftovers()


def test_unwritable_output_folder_is_one_clear_error_before_training(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    model, opt, loader = _setup()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CaptureError) as info, diagnose(model, loader, out_dir=blocker / "runs"):
        pytest.fail("the loop must not start")
    msg = str(info.value)
    assert "\n" not in msg and "a_file" in msg
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    _no_leftovers()


def test_disk_full_while_sampling_is_reported_not_raised(tmp_path, monkeypatch):
    from diagnose.capture import samplers

    real_write = samplers.SamplerThread._write
    calls = {"n": 0}

    def full_disk(self, row):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, row)

    monkeypatch.setattr(samplers.SamplerThread, "_write", full_disk)
    model, opt, loader = _setup()
    with diagnose(model, loader, out_dir=tmp_path, print_report=False, steps=2,
                  sample_hz=50) as d:
        for x, y in loader:
            _step(model, opt, x, y)
            time.sleep(0.01)
    assert d.report is not None
    assert any("space" in n.lower() or "sampl" in n.lower() for n in d.report.notes), \
        d.report.notes
    _no_leftovers()


def test_long_capture_keeps_memory_bounded(tmp_path):
    """Thousands of steps: after the profiled window, per-step cost must not accumulate."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(8)]
    loader = DataLoader(data, batch_size=None)
    with diagnose(model, loader, out_dir=tmp_path, print_report=False, steps=2,
                  sample_hz=20) as d:
        n = 0

        def epoch():
            nonlocal n
            for x, y in loader:
                _step(model, opt, x, y)
                n += 1

        for _ in range(40):  # past the profiled window and the clock's steps after it
            epoch()
        assert d.done
        tracemalloc.start()
        base = tracemalloc.take_snapshot()
        for _ in range(500):  # 4,000 more steps
            epoch()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(base, "filename"))
        tracemalloc.stop()
    assert n == 4320
    assert grown < 1_000_000, f"{grown} bytes retained over 4,000 steps"
