"""Real CPU jobs whose pace changes at a random step, watched end to end: the alarm comes
within 50 steps or two of a change's least holds (HOLD_S, on the changed steps' own
clock), its capture is analysed, and it blames the right thing."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from diagnose import watch  # noqa: E402
from diagnose.rules.engine import severity_rank  # noqa: E402
from diagnose.watching import read_timeline  # noqa: E402
from diagnose.watching.signals import HOLD_S  # noqa: E402

pytestmark = pytest.mark.slow


#: each step waits this long besides its compute (as a loop waits for its GPU): the steps
#: are then paced by a sleep, whose jitter a busy machine moves less than CPU work
DEVICE_S = 0.010


class SlowingData(torch.utils.data.Dataset):
    """Rows read from memory, until ``slow``: then each read sleeps ``slow_s`` (a disk
    gone cold, a decoder). The default, 16 ms more a batch of 4 on a ~11 ms step, is
    ~2.4x: clear of the 1.5x the tests require of the alarm, however busy the host."""

    def __init__(self, slow_s: float = 0.004) -> None:
        self.slow_s = slow_s
        self.slow = False
        self.x = torch.randn(512, 32)

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int) -> tuple[Any, int]:
        if self.slow:
            time.sleep(self.slow_s)
        return self.x[i % 512], i % 4


class Growing(torch.nn.Module):
    """An MLP whose forward repeats its hidden layer ``extra`` more times once grown."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(32, 256)
        self.hidden = torch.nn.Linear(256, 256)
        self.out = torch.nn.Linear(256, 4)
        self.extra = 0

    def forward(self, x: Any) -> Any:
        h = torch.relu(self.inp(x))
        for _ in range(1 + self.extra):
            h = torch.relu(self.hidden(h))
        return self.out(h)


def _run(tmp_path: Path, loader: Any, model: Growing, change: Any, seed: int,
         loop: Any = None) -> tuple[Any, int]:
    """Train until the baseline window is analysed and the watch tests steps again, then
    change the job at a random step (``change()``); return the watch and the watch's step
    at the change."""
    rng = random.Random(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    at = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with watch(model, loader, out_dir=tmp_path, print_summary=False, progress_s=None,
                   capture_interval_s=0) as w:
            wait_for = None
            for x, y in loop or loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                time.sleep(DEVICE_S)
                opt.step()
                if wait_for is None and w.baseline is not None and w.testing:
                    wait_for = w.steps + rng.randint(30, 120)  # a random step after it
                if at is None and wait_for is not None and w.steps >= wait_for:
                    change()
                    at = w.steps
                if (at is not None and w.steps >= at + _within(w, at) + 100) or w.steps > 6000:
                    break
    finally:
        torch.set_num_threads(threads)
    assert at is not None, "the baseline window was never analysed"
    return w, at


def _big_before(w: Any, at: int, ratio: float) -> list[str]:
    """The alarms before the change at ``at`` that moved the step (or the loader wait) up
    by ``ratio`` or more: none is expected (a busy machine may add a small one, under the
    ratio the change itself must clear, as :func:`_first_after` allows)."""
    return [a.line() for a in w.alarms if a.step < at and a.after >= ratio * a.before]


def _within(w: Any, at: int) -> int:
    """Steps an alarm may take after its change at ``at``: 50, two of the detector's holds
    in values, or the steps after the change that span two HOLD_S on their own clock (a
    change holds HOLD_S however long its steps, and a busy host lengthens the changed
    steps). Steps not run yet count as unspent, so a run in progress goes on."""
    _, ms, _ = w.store.span(at, w.steps)
    spent = int(np.searchsorted(np.cumsum(ms), 2 * HOLD_S * 1e3)) + 1
    return max(50, 2 * w._tests.det.p.min_len, spent)


def _first_after(w: Any, at: int, ratio: float) -> Any:
    """The first alarm within :func:`_within` steps of the change at ``at`` that moved the
    step (or the loader wait) up by ``ratio`` or more (a busy machine may add a small one
    of its own)."""
    within = _within(w, at)
    found = [a for a in w.alarms if at <= a.step <= at + within
             and a.after >= ratio * a.before]
    assert found, f"no alarm within {within} steps of the change at {at}: " \
                  f"{[a.line() for a in w.alarms]}"
    return found[0]


def test_a_slower_loader_is_caught_and_its_capture_names_the_input(tmp_path: Path) -> None:
    data = SlowingData()
    loader = torch.utils.data.DataLoader(data, batch_size=4)

    def slow_down() -> None:
        data.slow = True

    w, at = _run(tmp_path, loader, Growing(), slow_down, seed=1)
    assert _big_before(w, at, 1.5) == []  # no alarm of the change's size before it
    a = _first_after(w, at, 1.5)
    assert a.signal in ("step_time", "loader_wait")
    assert a.capture is not None, a.capture_why
    worst = [f for f in a.capture.findings
             if f.category == "input" and severity_rank(f.severity) >= severity_rank("warning")]
    assert worst, [(f.rule, f.severity) for f in a.capture.findings]
    assert worst[0].rule in a.changed[0], a.changed  # what changed, first
    rec = json.loads((Path(w.run_dir) / "watch.json").read_text())
    rec_a = rec["alarms"][w.alarms.index(a)]  # a small alarm of a busy host may come first
    assert rec_a["step"] == a.step and rec_a["capture"]["findings"]
    assert rec["baseline"] is not None
    tl = read_timeline(w.run_dir)
    assert tl is not None and tl["complete"] and len(tl["steps"]["ms"]) == w.steps
    assert (Path(a.capture_dir) / "report.json").exists()
    assert "alarms: " in w.summary()


def _layers_for(model: Growing, ms: float) -> int:
    """The extra hidden layers whose forward and backward take about ``ms`` on one thread
    on this CPU (a batch of 64): the growth is sized by the host, not by a CPU's speed."""
    x = torch.randn(64, 32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        took = {}
        for extra in (0, 16):
            model.extra = extra
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                model(x).sum().backward()
                times.append(time.perf_counter() - t0)
            took[extra] = sorted(times)[3]
    finally:
        model.extra = 0
        model.zero_grad()
        torch.set_num_threads(threads)
    per_layer = max((took[16] - took[0]) / 16, 1e-6)
    return max(8, round(ms / 1e3 / per_layer))


def test_a_growing_compute_is_caught_and_not_blamed_on_the_input(tmp_path: Path) -> None:
    data = torch.utils.data.TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,)))
    batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data), 64, False)
    loader = torch.utils.data.DataLoader(data, sampler=batches, batch_size=None)  # one read
    model = Growing()
    extra = _layers_for(model, 12.0)  # ~12 ms more on a ~11 ms step: ~2x, on any CPU

    def grow() -> None:  # ~2x the step: the alarm's 1.5x is clear of noise
        model.extra = extra

    w, at = _run(tmp_path, loader, model, grow, seed=2, loop=_Repeat(loader))
    assert _big_before(w, at, 1.5) == []
    a = _first_after(w, at, 1.5)
    assert a.signal == "step_time"
    assert a.capture is not None, a.capture_why
    blamed = [(f.rule, f.severity) for f in a.capture.findings if f.category == "input"
              and severity_rank(f.severity) >= severity_rank("warning")]
    assert blamed == []


class _Repeat:
    """Iterates ``loader`` again and again (one iterator an epoch, as a loop would)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        while True:
            yield from self.loader
