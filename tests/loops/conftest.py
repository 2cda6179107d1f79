"""The loop tests check where steps fall: the probes after the loop (seconds of worker and
thread timings, tested in tests/capture) are left out, and the clock times the steps it
plans, no more, however busy the machine."""

from __future__ import annotations

import pytest

import diagnose.capture.steps as steps_mod
import diagnose.session.lifecycle as lifecycle


@pytest.fixture(autouse=True)
def _quick_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps_mod, "EXTEND", 1)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 1)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 1)
    monkeypatch.setattr(lifecycle, "time_after_loop", lambda ctx, **kw: None)
