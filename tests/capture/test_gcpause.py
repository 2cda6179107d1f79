"""The garbage collector's pauses on the training thread (diagnose/capture/gcpause.py)."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from diagnose.capture.gcpause import GcTimer  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.datasets import Pairs  # noqa: E402


def test_timer_reports_this_threads_collections_only():
    seen: list[tuple[float, int]] = []
    timer = GcTimer(lambda s, g: seen.append((s, g)))
    try:
        gc.collect()  # a full collection on this thread
        other = threading.Thread(target=gc.collect)
        other.start()
        other.join()
    finally:
        timer.remove()
    gc.collect()  # removed: not seen
    assert [g for _, g in seen] == [2] and seen[0][0] > 0


def _collecting_run(dataset: Pairs, out: Path, *, collects: bool = True, wait: int = 3):
    """A captured loop over ``dataset`` that makes a full collection of its own every other
    step (in the loop's code, not the loader's; none without ``collects``); the session."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(dataset, batch_size=8)
    with diagnose(model, loader, steps=2, wait=wait, clock_steps=6, out_dir=out,
                  sample_hz=0, print_report=False) as d:
        i = 0
        while not d.done:
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if collects and i % 2:
                    gc.collect()
                i += 1
                if d.done:
                    break
    return d


def test_session_times_full_collections_in_the_loop(tmp_path: Path):
    """A loop that triggers a full collection every other step: the clock's gc_ms and
    gc_full columns see them, and the run records that nothing was frozen."""
    d = _collecting_run(Pairs(n=400), tmp_path)
    ctx = load_context(d.run_dir)
    clock = ctx["capture"]["step_clock"]
    assert sum(clock["gc_full"]) >= 3
    assert all(ms > 0 for ms, n in zip(clock["gc_ms"], clock["gc_full"], strict=True) if n)
    assert ctx["gc_frozen_objects"] == 0
    m = d.report.metrics
    assert m["gc_full_collections"] >= 2 and m["gc_pause_ms"] > 0


class _CollectingPairs(Pairs):
    """Pairs whose every 8th sample makes a full collection (the loader's allocations)."""

    def __getitem__(self, i):
        if i % 8 == 0:
            gc.collect()
        return super().__getitem__(i)


def test_the_clock_says_which_pauses_fell_in_the_wait_for_a_batch(tmp_path: Path):
    """Collections inside the in-process loader's fetch go to gc_loader_ms as well as gc_ms;
    those in the loop's own code only to gc_ms. The metric gc_pause_loader_ms is their
    mean, at most gc_pause_ms."""
    d = _collecting_run(_CollectingPairs(n=800), tmp_path)  # one loader collection a batch
    clock = load_context(d.run_dir)["capture"]["step_clock"]
    rows = list(zip(clock["gc_ms"], clock["gc_loader_ms"], clock["gc_full"], strict=True))
    assert all(inside > 0 for _, inside, _ in rows[1:])  # a loader collection every step
    assert all(inside <= total for total, inside, _ in rows)
    assert any(total > inside and full >= 2 for total, inside, full in rows)  # the loop's
    m = d.report.metrics
    assert 0 < m["gc_pause_loader_ms"] < m["gc_pause_ms"]
    # the loader's and the loop's collections here are all full ones (gc.collect()): the
    # full columns hold them, and never more than the columns they are part of
    full = list(zip(clock["gc_full_ms"], clock["gc_full_loader_ms"], strict=True))
    assert all(f <= total + 1e-9 and fl <= inside + 1e-9
               for (f, fl), (total, inside, _) in zip(full, rows, strict=True))
    assert all(f > 0 for (f, _), (_, _, n) in zip(full, rows, strict=True) if n)
    assert all(f == 0 for (f, _), (_, _, n) in zip(full, rows, strict=True) if not n)
    assert 0 < m["gc_pause_full_loader_ms"] <= m["gc_pause_full_ms"] <= m["gc_pause_ms"]


def test_the_profilers_leftovers_are_collected_at_the_window_end(tmp_path: Path, monkeypatch):
    """The window's end collects the profiler's own garbage between two steps (one full
    collection, on no step's clock), unless the loop turned the collector off."""
    from diagnose.capture.profiler import WindowProfiler

    calls: list[int] = []
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(1) or real(*a))
    for enabled in (True, False):
        calls.clear()
        prof = WindowProfiler(tmp_path / str(enabled), wait=0, warmup=1, active=1)
        prof.start()
        was = gc.isenabled()
        if not enabled:
            gc.disable()
        try:
            for _ in range(2):
                torch.ones(4).sum()
                prof.step()
        finally:
            if was:
                gc.enable()
        assert prof.finished
        assert calls == ([1] if enabled else [])


def _gc_clock(full_at: list[int], n_after: int = 40, pause: float = 130.0,
              step: float = 20.0) -> dict:
    """A clock of 3 wait steps, 5 profiled ones, a settling one, then ``n_after`` steps of
    ``step`` ms with a young collection (1 ms) each; the after-steps numbered in
    ``full_at`` also pause ``pause`` ms for a full collection inside the loader's wait."""
    phase = ["wait"] * 4 + ["active"] * 5 + ["settle"] + ["after"] * n_after
    ms, gc_ms, full, full_ms = [], [], [], []
    for i, p in enumerate(phase):
        hit = p == "after" and (i - 10) in full_at
        ms.append(step + (pause if hit else 0.0))
        gc_ms.append(1.0 + (pause if hit else 0.0))
        full.append(1 if hit else 0)
        full_ms.append(pause if hit else 0.0)
    return {"capture": {"step_clock": {
        "phase": phase, "ms": ms, "gc_ms": gc_ms, "gc_full": full, "gc_loader_ms": gc_ms,
        "gc_full_ms": full_ms, "gc_full_loader_ms": full_ms}}}


def test_full_collections_count_at_their_spacing():
    """Full collections every 6 steps, 130 ms each, in steps of 20 ms: the job's mean step
    is 20 + 130/6 = 41.7 ms. 40 steps after the window hold 6 or 7 of them depending on
    where the first falls (a timed mean of 39.5-42.8 ms, and of fewer steps worse); their
    spacing gives 41.7 wherever they start, the full pauses' figures with it. Fewer than 3
    after the window: the timed mean, as before."""
    from diagnose.metrics.context import context_metrics

    want = 20.0 + 130.0 / 6
    for first in range(6):
        at = list(range(first, 40, 6))
        m = context_metrics(_gc_clock(at))
        assert m["gc_full_every_steps"] == 6.0
        assert m["step_time_unprofiled_mean_ms"] == pytest.approx(want, abs=0.01)
        assert m["gc_pause_full_ms"] == pytest.approx(130.0 / 6, abs=0.01)
        assert m["gc_pause_full_loader_ms"] == pytest.approx(130.0 / 6, abs=0.01)
        assert m["gc_pause_ms"] == pytest.approx(1.0 + 130.0 / 6, abs=0.01)
        assert m["gc_pause_share"] == pytest.approx((1.0 + 130.0 / 6) / want, abs=1e-3)
        assert m["gc_full_collections"] == len(at)
    # spacings that vary as a real loop's do (7, 6, 6, 7, 5): their mean, 6.2
    m = context_metrics(_gc_clock([2, 9, 15, 21, 28, 33]))
    assert m["gc_full_every_steps"] == pytest.approx(6.2)
    # three in a burst after the window (2 steps apart), then none for 30 steps: no
    # cadence, the steps' own mean (43 steps, 3 pauses)
    m = context_metrics(_gc_clock([1, 3, 5]))
    assert m["gc_full_every_steps"] is None
    assert m["step_time_unprofiled_mean_ms"] == pytest.approx(
        (40 * 20.0 + 3 * 150.0) / 43, abs=0.01)
    # two: no spacing to trust; the steps' own mean (43 steps, 2 pauses)
    m = context_metrics(_gc_clock([5, 30]))
    assert m["gc_full_every_steps"] is None
    timed = (41 * 20.0 + 2 * 150.0) / 43
    assert m["step_time_unprofiled_mean_ms"] == pytest.approx(timed, abs=0.01)


def _plain_run(out: Path, *, collector: bool = True):
    """A captured loop with the analysis at its exit; ``collector``: gc enabled in it. The
    session and the collector's counts right after the ``with``."""
    was = gc.isenabled()
    if not collector:
        gc.disable()
    try:
        d = _collecting_run(Pairs(n=400), out, collects=False, wait=1)
        return d, gc.get_count()
    finally:
        if was:
            gc.enable()


def test_the_analysis_leftovers_are_collected_before_the_user_code_runs_on(tmp_path: Path):
    """The session's exit ends with a full collection, after the analysis: the user's code
    after the ``with`` finds the collector's generations empty (no full collection of the
    analysis' objects due in its next steps). A loop that turned the collector off gets
    none."""
    d, counts = _plain_run(tmp_path / "on")
    assert d.report is not None and counts[1:] == (0, 0)
    _, off = _plain_run(tmp_path / "off", collector=False)
    assert off[1:] != (0, 0) or off[0] > 700
