"""``diagnose(..., out_dir=D).autofix()`` before any ``with`` block: the baseline it
captures goes under D, as the session's own run folder would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import diagnose.session.lifecycle as lc  # noqa: E402


def test_the_baseline_goes_under_the_sessions_out_dir(tmp_path: Path, monkeypatch) -> None:
    got: dict[str, Any] = {}
    monkeypatch.setattr(lc, "autofix", lambda *a, **kw: got.update(kw))
    model = torch.nn.Linear(2, 2)
    loader = [torch.zeros(4, 2)]
    lc.Session(model, loader, out_dir=tmp_path).autofix(budget_s=1)
    cap = got["capture"]
    assert cap.func is lc.capture_baseline and cap.keywords == {"out_dir": tmp_path}
    got.clear()
    lc.Session(model, loader).autofix(budget_s=1)  # no out_dir: autofix's own default
    assert "capture" not in got


def test_the_optimizer_and_loss_may_be_given_to_autofix(monkeypatch) -> None:
    """A new user wrote diagnose(model, loader), then followed autofix's 'pass optimizer='
    and called d.autofix(optimizer=opt, loss_fn=...): TypeError, 'multiple values for
    keyword argument'. Given there they are used; else diagnose()'s."""
    got: dict[str, Any] = {}
    monkeypatch.setattr(lc, "autofix", lambda *a, **kw: got.update(args=a, **kw))
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lc.Session(model, [torch.zeros(4, 2)]).autofix(optimizer=opt, loss_fn=len, budget_s=1)
    assert got["args"][2] is opt and got["loss_fn"] is len and got["step_fn"] is None
    got.clear()
    lc.Session(model, [torch.zeros(4, 2)], optimizer=opt, step_fn=max).autofix()
    assert got["args"][2] is opt and got["step_fn"] is max and got["loss_fn"] is None
