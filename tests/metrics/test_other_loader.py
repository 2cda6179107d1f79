"""A validation loader's batches inside the profiled steps are the loop's other work, not the
training input: a live session marks them (diagnose.capture.loader_shim, the
``diagnose::other_loader`` span) and the metrics and the step model leave them out of the
DataLoader wait."""

from __future__ import annotations

import pytest

from diagnose import analyze
from diagnose.metrics.names import OTHER_LOADER
from tests import tracebuilder as tb


def _run(marked: bool) -> tb.TraceBuilder:
    """CPU steps of 10 ms: 1 ms of training batch; every other step a validation pass of
    4 batches of 3 ms, inside the mark where ``marked``."""
    b = tb.TraceBuilder()
    for i in range(6):
        with b.step():
            b.dataloader(1000.0)
            b.cpu(9000.0, "aten::addmm")
            if i % 2:
                for _ in range(4):
                    if marked:
                        with b.annotation(OTHER_LOADER):
                            b.dataloader(3000.0)
                    else:
                        b.dataloader(3000.0)
                    b.cpu(1000.0, "aten::addmm")
    return b


def test_another_loaders_batches_are_not_the_training_wait(tmp_path) -> None:
    """Unmarked (a saved trace): every batch counts, 1 ms a step and 4 x 3 ms every other
    step (7 ms a step on average); marked: the training loader's 1 ms a step alone."""
    plain = analyze(_run(False).write(tmp_path / "plain.pt.trace.json.gz"))
    marked = analyze(_run(True).write(tmp_path / "marked.pt.trace.json.gz"))
    assert plain.metrics["dataloader_wait_ms_per_step"] == pytest.approx(1 + 12 / 2, rel=0.02)
    assert marked.metrics["dataloader_wait_ms_per_step"] == pytest.approx(1.0, rel=0.02)
    assert marked.metrics["dataloader_share"] < 0.1 < plain.metrics["dataloader_share"]
    assert not [f for f in marked.findings if f.rule.startswith("IN")
                and f.severity in ("warning", "critical")]


def test_a_session_marks_a_validation_loaders_batches(tmp_path) -> None:
    """A live loop that runs a validation loader every other step: the trace holds the mark
    around its batches, and the DataLoader share is the training loader's."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from diagnose import diagnose
    from tests.datasets import Pairs

    train_dl = DataLoader(Pairs(256), batch_size=32)
    val_dl = DataLoader(Pairs(256, delay_s=0.002), batch_size=32)
    model = torch.nn.Linear(16, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose(model, train_dl, out_dir=tmp_path, steps=4, warmup=1, wait=0,
                  clock_steps=3, print_report=False) as d:
        for _epoch in range(4):
            for i, (x, y) in enumerate(train_dl):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if i % 2:
                    with torch.no_grad():
                        for vx, _ in val_dl:
                            model(vx)
                if d.done:
                    break
            if d.done:
                break
    trace = next(d.run_dir.glob("*.pt.trace.json*"))
    import gzip

    assert OTHER_LOADER.encode() in gzip.decompress(trace.read_bytes())
    assert d.report is not None
    assert d.report.metrics["dataloader_wait_ms_per_step"] < 5.0  # 8 x 32 x 2 ms unmarked
