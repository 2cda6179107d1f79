"""The model's work under the loop's CPU autocast against fp32
(diagnose/capture/probes/precision.py): real rounds, each side really in its precision,
the run left as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import diagnose.capture.probes.precision as precision
from diagnose.capture.probes.compute import ForwardTimer
from diagnose.capture.probes.precision import cpu_autocast, time_autocast
from diagnose.stepmodel.calibration import THREADS_NOISE_MAX


class Seen(nn.Module):
    """A linear layer that notes the dtype of each output it gives."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 8)
        self.dtypes: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        self.dtypes.append(out.dtype)
        return out


def _recorded(model: nn.Module, cast: torch.dtype | None) -> ForwardTimer:
    """A forward timer that saw one forward of ``model``, under CPU autocast to ``cast``."""
    timer = ForwardTimer(model, lambda s: None)
    with torch.autocast("cpu", dtype=cast or torch.bfloat16, enabled=cast is not None):
        model(torch.randn(4, 16))
    timer.remove()
    return timer


def test_both_sides_run_in_their_own_precision_and_the_run_is_left_as_it_was():
    torch.manual_seed(0)
    m = Seen()
    timer = _recorded(m, torch.bfloat16)
    assert cpu_autocast(m) == "bfloat16"
    m.dtypes.clear()
    rng = torch.get_rng_state()
    out = time_autocast(m, timer.inputs)
    assert out is not None and out["dtype"] == "bfloat16"
    assert out["work_ms"] > 0 and out["work_fp32_ms"] > 0 and out["ratio"] > 0
    assert out["rounds"] >= 3 and out["noise"] is not None
    # the rounds alternate: the warm-up round too, one work under autocast then one without
    n = out["rounds"] + 1
    assert m.dtypes == [torch.bfloat16, torch.float32] * n
    assert not torch.is_autocast_enabled("cpu")  # nothing left on
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(p.grad is None for p in m.parameters())  # the backward writes no .grad


def test_no_autocast_in_the_loop_no_timing():
    m = Seen()
    timer = _recorded(m, None)
    assert cpu_autocast(m) is None
    assert time_autocast(m, timer.inputs) is None
    assert time_autocast(m, None) is None


def test_a_part_fed_half_precision_activations_runs_in_fp32_without_autocast():
    """A loop that calls a model's parts (a LightningModule's net, then its head) under
    autocast hands the head bf16 activations; the fp32 side widens them, as an fp32 loop
    would have handed fp32 ones."""

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.head = nn.Linear(16, 16), Seen()
            self.head.lin = nn.Linear(16, 8)

    m = Two()
    timer = ForwardTimer(m, lambda s: None)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m.head(m.net(torch.randn(4, 16)))
    timer.remove()
    (net, x), (head, h) = timer.works()
    assert h[0][0].dtype == torch.bfloat16
    head.dtypes.clear()
    out = time_autocast(head, h)
    assert out is not None and set(head.dtypes) == {torch.bfloat16, torch.float32}


def test_a_work_too_slow_for_more_rounds_is_timed_by_its_one_round(monkeypatch):
    monkeypatch.setattr(precision, "SLOW_S", 0.0)
    m = Seen()
    timer = _recorded(m, torch.bfloat16)
    out = time_autocast(m, timer.inputs)
    assert out is not None and out["rounds"] == 1 and out["noise"] == THREADS_NOISE_MAX


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8"])
def test_the_cpus_own_answer_is_read_or_none(dtype):
    got = precision.cpu_native(dtype)
    assert got is None if dtype == "int8" else isinstance(got, bool)
    assert isinstance(precision.cpu_capability(), str)


def test_a_session_times_a_loop_under_cpu_autocast_in_fp32_too(tmp_path):
    """Lightning's bf16-mixed shape on the CPU (the loop calls the model's parts under
    autocast): after the loop the session times the first part's work both ways
    (PR002's input), and states the probe's own time; a loop without autocast gets no such
    timing."""
    from diagnose.runfolder import load_context
    from diagnose.session import diagnose
    from tests.loops.shapes import make_parts_called

    plan = {"steps": 3, "wait": 1, "warmup": 1, "clock_steps": 4, "sample_hz": 0,
            "print_report": False, "analyze": False}
    for autocast in (True, False):
        job = make_parts_called(autocast=autocast)
        with diagnose(job.model, job.loader, out_dir=tmp_path, **plan) as d:
            job.loop(d, 200)
        ctx = load_context(d.run_dir)
        if not autocast:
            assert "cpu_autocast" not in ctx
            continue
        got = ctx["cpu_autocast"]
        assert got["dtype"] == "bfloat16" and got["rounds"] >= 1
        assert got["work_ms"] > 0 and got["work_fp32_ms"] > 0
        assert ctx["probes_ms"]["cpu_autocast"] > 0
