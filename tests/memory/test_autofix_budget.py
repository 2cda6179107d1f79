"""Autofix under a memory budget (diagnose/autofix/memfit.py): a fix whose predicted peak
does not fit the budget less 10% is skipped with that reason; a kept fix's decision carries
its predicted peak beside the tuned config's peak, measured on one real step (the memory
tracker on CPU). Timings are faked (tests/autofix/test_tune_predict.py's fixture)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from diagnose.autofix import KEPT, SKIPPED, TuneError  # noqa: E402
from diagnose.cli.autofix import memory_budget  # noqa: E402
from diagnose.errors import DiagnoseError  # noqa: E402
from tests.autofix.test_tune_predict import FA, FB, _run, faked  # noqa: E402, F401

MEMORY = {"what_if": [
    {"change": {"zero_grad_set_to_none": False}, "peak_bytes": 3000, "range": [3000, 3100],
     "method": "scaled"},
    {"change": {"cudnn_benchmark": True}, "peak_bytes": 1000, "range": [1000, 1050],
     "method": "scaled"}]}


def test_a_fix_predicted_not_to_fit_is_skipped_and_a_kept_one_measured(faked) -> None:  # noqa: F811
    """Budget 2000 bytes: fb's 3100 > 1800 is skipped untried; fa (1050 <= 1800) is tried,
    kept, and carries its predicted 1000 bytes and the tuned step's measured peak."""
    r = _run(fixes=[FA, FB], report=SimpleNamespace(memory=MEMORY, findings=[]),
             memory_budget=2000)
    by = {d.fix: d for d in r.decisions}
    assert by["fb"].status == SKIPPED and "does not fit the memory budget" in by["fb"].reason
    assert [c.split()[0] for c, _ in faked] == ["cudnn_benchmark"]  # fb never tried
    fa = by["fa"]
    assert fa.status == KEPT and fa.predicted_peak_bytes == 1000
    # nn.Linear(8, 4) and batches of 8: a few hundred bytes at least, well under a MiB
    assert fa.measured_peak_bytes is not None and 0 < fa.measured_peak_bytes < 2**20
    assert "peak predicted" in fa.reason and "measured" in fa.reason
    j = {d["fix"]: d for d in r.to_json()["decisions"]}
    assert j["fa"]["predicted_peak_bytes"] == 1000
    assert j["fa"]["measured_peak_bytes"] == fa.measured_peak_bytes
    assert any("measured peak" in n for n in r.notes)


def test_without_a_budget_nothing_changes(faked) -> None:  # noqa: F811
    r = _run(fixes=[FA, FB], report=SimpleNamespace(memory=MEMORY, findings=[]))
    assert all(d.status != SKIPPED and d.predicted_peak_bytes is None for d in r.decisions)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_a_bad_budget_is_one_clear_error(bad) -> None:
    with pytest.raises(TuneError, match="memory_budget"):
        _run(fixes=[FA], memory_budget=bad)


def test_the_command_lines_budget() -> None:
    assert memory_budget("8GiB") == 8 * 2**30 and memory_budget("512 MiB") == 512 * 2**20
    assert memory_budget("1000") == 1000 and memory_budget(None) is None
    for bad in ("lots", "-1", "0", "inf", "8 parsecs"):
        with pytest.raises(DiagnoseError, match="--memory-budget"):
            memory_budget(bad)
