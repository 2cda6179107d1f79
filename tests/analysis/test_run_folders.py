"""A run folder the user changed after the run: its trace deleted, its context.json torn.
The report says what is missing instead of analysing as if nothing were."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose import analyze, diagnose  # noqa: E402
from diagnose.runfolder import CONTEXT_FILE, trace_files  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,))),
                        batch_size=16)
    with diagnose(model, loader, steps=3, warmup=1, out_dir=tmp_path_factory.mktemp("runs"),
                  print_report=False, sample_hz=0) as d:
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if d.done:
                break
    assert d.run_dir is not None and trace_files(d.run_dir)
    return Path(d.run_dir)


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def test_a_deleted_trace_is_said_not_taken_for_a_run_that_ended_early(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path)
    for f in trace_files(run):
        f.unlink()
    notes = analyze(run).notes
    assert any("moved or deleted" in n for n in notes), notes
    assert not any("ended before the profiled window" in n for n in notes), notes


@pytest.mark.parametrize("text", ['{"capture": ', "[1, 2]", "\udcff"])
def test_an_unreadable_context_is_said(run_dir, tmp_path, text):
    run = _copy(run_dir, tmp_path)
    (run / CONTEXT_FILE).write_text(text, encoding="utf-8", errors="surrogateescape")
    r = analyze(run)
    assert r.ranks  # the trace is still analysed
    (note,) = [n for n in r.notes if "cannot be read" in n]
    assert str(run / CONTEXT_FILE) in note


def test_an_intact_run_folder_has_no_such_note(run_dir):
    notes = analyze(run_dir).notes
    assert not any("cannot be read" in n or "moved or deleted" in n for n in notes), notes
