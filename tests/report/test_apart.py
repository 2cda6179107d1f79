"""Writers run in a child Python (diagnose/report/child_writer.py): a session's report.html and
TensorBoard run, without the plotting library in the training process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from diagnose.report.child_writer import Apart, ApartError

ROOT = Path(__file__).resolve().parents[2]


def test_a_session_writes_its_page_and_tensorboard_run_without_importing_matplotlib(
        tmp_path: Path) -> None:
    """A real session in a fresh Python: report.html (with its plots) and the TensorBoard
    run are written, and the training process never imported matplotlib, so its collector
    walks no more objects than the job's own."""
    pytest.importorskip("torch")
    script = textwrap.dedent("""
        import gc, json, sys
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        from diagnose import diagnose
        torch.manual_seed(0)
        m = nn.Linear(8, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        dl = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,))),
                        batch_size=16)
        with diagnose(m, dl, out_dir=sys.argv[1], tensorboard=sys.argv[2], sample_hz=0,
                      print_report=False) as d:
            for x, y in dl:
                opt.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
        print(json.dumps({"matplotlib": "matplotlib" in sys.modules,
                          "run_dir": str(d.run_dir), "tb": str(d.tensorboard_dir),
                          "notes": d.report.notes if d.report is not None else None}))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "runs"),
                           str(tmp_path / "tb")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["matplotlib"] is False
    page = (Path(got["run_dir"]) / "report.html").read_text()
    assert "<svg" in page and "torch-diagnose report" in page
    run = json.loads((Path(got["tb"]) / "diagnose.json").read_text())
    assert run["plots"] and all("<svg" in p["svg"] for p in run["plots"].values())
    assert not any("could not write" in n for n in got["notes"] or [])


def test_a_writer_that_fails_in_the_child_gives_its_one_line(tmp_path: Path) -> None:
    out = Apart([("diagnose.report.html:write_html", (None, tmp_path / "report.html"))])
    (err,) = out.results()
    assert isinstance(err, ApartError)
    assert str(err).startswith("AttributeError: ") and "\n" not in str(err)
    assert not (tmp_path / "report.html").exists()


def test_each_writer_fails_alone(tmp_path: Path) -> None:
    """Two writers in one child: the first one's failure leaves the second's result."""
    pytest.importorskip("torch")
    import diagnose

    report = diagnose.analyze(ROOT / "samples" / "traces" / "cpu" / "healthy.pt.trace.json.gz")
    page = tmp_path / "report.html"
    bad, good = Apart([("diagnose.report.html:write_html", (None, tmp_path / "x.html")),
                       ("diagnose.report.html:write_html", (report, page))]).results()
    assert isinstance(bad, ApartError) and good == page
    assert "<svg" in page.read_text()


def test_arguments_that_do_not_pickle_run_here(tmp_path: Path) -> None:
    """A report that cannot be handed over is written in this process, as before: the
    writer's own exception comes back (not a child's line)."""
    (err,) = Apart([("diagnose.report.html:write_html",
                     (lambda: None, tmp_path / "report.html"))]).results()
    assert isinstance(err, AttributeError) and not isinstance(err, ApartError)


def test_a_child_that_cannot_run_its_writers_leaves_them_to_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that fails before any writer runs (here: an "interpreter" that exits 1 at
    once): the writers run here, and their own results come back."""
    monkeypatch.setattr(sys, "executable", "/bin/false")
    (err,) = Apart([("diagnose.report.html:write_html",
                     (None, tmp_path / "report.html"))]).results()
    assert isinstance(err, AttributeError) and not isinstance(err, ApartError)


def test_only_the_writers_it_knows_run_apart() -> None:
    with pytest.raises(ValueError, match="not a writer that runs apart"):
        Apart([("os:system", ("true",))])
