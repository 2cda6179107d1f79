"""The probes' clock, held still: a test moves it by hand (``clock.t``)."""

from __future__ import annotations

import pytest

from diagnose.capture.probes import common


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The probes' clock (``common._CLOCK``) replaced by a :class:`FakeClock` at 0."""
    c = FakeClock()
    monkeypatch.setattr(common, "_CLOCK", c)
    return c
