"""A quiet terminal: autofix shows each of torch's warnings once per run (torch's "This
DataLoader will create N worker processes..." came once per rebuilt loader), and puts the
warning machinery back as it was."""

from __future__ import annotations

import os
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix import runner as tune  # noqa: E402
from diagnose.capture.quiet import warnings_once  # noqa: E402
from tests.autofix.test_autofix_budget import _install, _run  # noqa: E402

TORCH_SAYS = "worker processes in total"


def _too_many_workers() -> DataLoader:
    ds = TensorDataset(torch.randn(16, 2))
    return DataLoader(ds, batch_size=4, num_workers=4096)  # never iterated: no process


def _torch_warnings(log: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in log if TORCH_SAYS in str(w.message)]


def test_each_distinct_warning_once_then_restored() -> None:
    loader = _too_many_workers()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        before = (warnings.showwarning, list(warnings.filters))
        with warnings_once():
            for _ in range(8):
                with warnings.catch_warnings():  # as torch does: clears once-per-place
                    pass
                loader.check_worker_number_rationality()
            warnings.warn("another one", UserWarning, stacklevel=1)
        assert len(_torch_warnings(log)) == 1 and "another one" in str(log[-1].message)
        assert (warnings.showwarning, list(warnings.filters)) == before
        loader.check_worker_number_rationality()  # a new run: shown again
        assert len(_torch_warnings(log)) == 2


def test_filters_still_decide() -> None:
    loader = _too_many_workers()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("ignore")
        with warnings_once():
            loader.check_worker_number_rationality()
        assert log == []
        warnings.simplefilter("error")
        with warnings_once(), pytest.raises(UserWarning):
            loader.check_worker_number_rationality()


def test_an_autofix_run_shows_each_torch_warning_once(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """The trials of a worker-count ladder rebuild the DataLoader many times (fake timings:
    no worker starts); each count's warning is shown once. Without the scope (control),
    the same run shows them again and again."""
    _install(monkeypatch, lambda cfg: 0.5 if cfg.num_workers else 1.0)
    # torch suggests at most as many workers as CPUs: one, so every rung of 2+ warns
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        _run(400.0)
        shown = _torch_warnings(log)
        assert shown and len(shown) == len(set(shown)), shown
        assert warnings.showwarning is warnings._showwarning_orig  # type: ignore[attr-defined]
        del log[:]
        monkeypatch.setattr(tune, "autofix", tune.autofix.__wrapped__)  # type: ignore[attr-defined]
        monkeypatch.setattr("tests.autofix.test_autofix_budget.autofix", tune.autofix)
        _run(400.0)
        again = _torch_warnings(log)
        assert len(again) > len(set(again)), again  # the control repeats them
