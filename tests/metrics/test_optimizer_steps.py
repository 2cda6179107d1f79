"""Optimizer metrics from the optimizers seen stepping: a loop that zeroes gradients with
Module.zero_grad (no Optimizer.zero_grad# span) still gets its fills counted, so CF002 is
evaluated (a GAN: netD.zero_grad(), netG.zero_grad(), two optimizers)."""

from __future__ import annotations

from diagnose.metrics.core import analyse
from diagnose.metrics.optimizer import optimizer_metrics
from diagnose.metrics.window import StepWindow
from diagnose.trace import read_trace
from tests import tracebuilder as tb

STEPS = 4


def _gan(tmp_path, *, fills: int, annotated: bool = False):
    """Two models' steps (CPU only): each model's gradients zeroed (``fills`` aten::zero_
    calls each, Module.zero_grad(set_to_none=False); 0: set to None), a forward holding
    a torch.zeros (its aten::zero_ is no gradient), a backward, an optimizer step."""
    b = tb.TraceBuilder(device=None)
    for _ in range(STEPS):
        with b.step():
            for name in ("Adam", "SGD"):
                if annotated:
                    b.zero_grad(params=fills, set_to_none=fills == 0, name=name)
                else:
                    for _ in range(fills):
                        with b._span("aten::zero_", pre=1.0, post=1.0):
                            b.cpu(1.0, "aten::fill_")
                with b._span("aten::zeros", pre=1.0, post=1.0):
                    b.cpu(1.0, "aten::zero_")  # inside another op: not a gradient
                with b.annotation("## forward ##"):
                    b.cpu(50.0, "aten::addmm")
                    b.cpu(2.0, "aten::zero_")  # inside an annotated span: not counted
                b.cpu(80.0, "aten::mm")
                b.optimizer_step(kernels=10, name=name)
    return read_trace(b.write(tmp_path / "gan.pt.trace.json.gz"))


def test_module_zero_grad_fills_are_counted_per_step(tmp_path) -> None:
    m = analyse(_gan(tmp_path, fills=3), None).metrics.values
    assert m["zero_grad_fill_ops_per_step"] == 6  # 3 a model, two models
    assert m["zero_grad_cost_frac"] is not None and 0 < m["zero_grad_cost_frac"] < 0.2


def test_gradients_set_to_none_count_no_fills(tmp_path) -> None:
    m = analyse(_gan(tmp_path, fills=0), None).metrics.values
    assert m["zero_grad_fill_ops_per_step"] == 0
    assert m["zero_grad_cost_frac"] == 0


def test_the_capture_saying_set_to_none_gives_zero(tmp_path) -> None:
    w = StepWindow(_gan(tmp_path, fills=3))
    v = optimizer_metrics(w, None, grads_set_to_none=True)
    assert v["zero_grad_fill_ops_per_step"] == 0 and v["zero_grad_cost_frac"] == 0
    assert optimizer_metrics(w, None)["zero_grad_fill_ops_per_step"] == 6


def test_annotated_zero_grad_is_read_as_before(tmp_path) -> None:
    m = analyse(_gan(tmp_path, fills=3, annotated=True), None).metrics.values
    assert m["zero_grad_fill_ops_per_step"] == 6


def test_no_optimizer_seen_leaves_the_fills_unknown(tmp_path) -> None:
    b = tb.TraceBuilder(device=None)
    for _ in range(STEPS):
        with b.step(), b._span("aten::zero_", pre=1.0, post=1.0):
            b.cpu(1.0, "aten::fill_")
    m = analyse(read_trace(b.write(tmp_path / "x.pt.trace.json.gz")), None).metrics.values
    assert m["zero_grad_fill_ops_per_step"] is None


def test_a_run_folder_passes_the_captures_set_to_none_to_the_metrics(tmp_path) -> None:
    """A run folder whose context says the capture saw gradients set to None reads no
    fills, though the trace's own zero_ fills (unannotated) would be counted without it."""
    import json

    from diagnose import analyze
    from diagnose.analysis import grads_cleared

    run = tmp_path / "run"
    run.mkdir()
    _gan(run, fills=3)
    assert analyze(run).metrics["zero_grad_fill_ops_per_step"] == 6
    ctx = {"capture": {"step_signals": {"grads_set_to_none": True}}}
    (run / "context.json").write_text(json.dumps(ctx))
    assert grads_cleared(ctx) is True and grads_cleared({"capture": {}}) is None
    assert analyze(run).metrics["zero_grad_fill_ops_per_step"] == 0


def test_fills_found_a_few_events_at_a_time_are_the_same(tmp_path, monkeypatch) -> None:
    """The holders of each aten::zero_ are read a chunk of events at a time (a large
    trace's temporaries stay small): chunks of 5 events find the same fills."""
    import diagnose.metrics.optimizer as opt

    t = _gan(tmp_path, fills=3)
    whole = analyse(t, None).metrics.values
    monkeypatch.setattr(opt, "CHUNK", 5)
    chunked = analyse(t, None).metrics.values
    assert chunked["zero_grad_fill_ops_per_step"] == whole["zero_grad_fill_ops_per_step"] == 6
    assert chunked["zero_grad_cost_frac"] == whole["zero_grad_cost_frac"]
