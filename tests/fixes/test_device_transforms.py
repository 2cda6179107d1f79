"""The transforms of the transfer, sync, precision, launch and config units (pinned copies,
a removed sync, AMP, set_to_none, foreach, CUDA graphs, a larger batch) on small builder
traces whose answers are worked out by hand (tests/modeltraces.py)."""

from __future__ import annotations

import pytest

from diagnose.fixes import TrainConfig
from diagnose.fixes.catalog import config as config_unit
from diagnose.fixes.catalog import launch as launch_unit
from diagnose.fixes.catalog import precision as precision_unit
from diagnose.fixes.catalog import transfer as transfer_unit
from diagnose.stepmodel.facts import Facts
from diagnose.stepmodel.graph import TaskKind
from diagnose.stepmodel.prediction import Prediction
from tests import modeltraces as mt
from tests.fixes.steps import _median, _model, _predict


def test_pin_memory(tmp_path):
    """4525 us -> about 2532 us (pageable_behind_kernel's docstring)."""
    m = _model(mt.pageable_behind_kernel(), tmp_path)
    g = m.graph
    assert _median(g) == pytest.approx(4.525, abs=0.005)
    g2 = transfer_unit.pin_memory(g, {"pin_memory": True, "non_blocking": True},
                                  Facts(device_cc_major=9))
    assert _median(g2) == pytest.approx(2.532, abs=0.01)
    copy = g2.is_kind(TaskKind.MEMCPY)
    assert g2.dur[copy] == pytest.approx(20.0)  # 1 MB at 50 GB/s


def test_remove_sync(tmp_path):
    """sync_loop: 1111 us steps, 1000 us of them the host waiting for the kernel. Without the
    wait the host needs 113 us a step, but the GPU still runs 1000 us + a 1 us spacing per
    step: the prediction is that, 1001 us (busiest resource)."""
    m = _model(mt.sync_loop(), tmp_path)
    p = _predict("remove_sync", m)
    assert isinstance(p, Prediction)
    assert p.step_ms == pytest.approx(1.001, abs=0.003)
    assert p.speedup == pytest.approx(1.111 / 1.001, rel=0.005)


def test_amp(tmp_path):
    """sync_loop with an fp32 SIMT GEMM (ampere_sgemm) of 1000 us: 4x faster -> 250 us, so
    the step goes from 1111 to 361 us."""
    m = _model(mt.sync_loop(), tmp_path)
    g2 = precision_unit.amp(m.graph, {"amp_dtype": "bfloat16"}, Facts(tensor_core_speedup=4.0))
    assert _median(g2) == pytest.approx(0.361, abs=0.002)
    assert isinstance(precision_unit.amp(m.graph, {}, Facts()), str)  # no tensor cores known: why


def test_set_to_none(tmp_path):
    """fills: the zero_grad span (128 us for 10 fills) goes."""
    m = _model(mt.fills(), tmp_path)
    before = _median(m.graph)
    g2 = config_unit.set_to_none(m.graph, {"zero_grad_set_to_none": True}, Facts())
    assert before - _median(g2) == pytest.approx(0.128, abs=0.002)
    assert not g2.name_mask(lambda n: "FillFunctor" in n).any()


def test_foreach_optimizer(tmp_path):
    """per_param_optimizer: 320 launches = 64 parameters x 5 -> one multi-tensor launch per
    64 parameters: 5 launches. The optimizer's host time, 10 + 320 x 10 + 5 = 3215 us,
    shrinks by 5/320 to 50.2 us: the step is 3164.8 us shorter (its 320 x 3 us of kernels
    run under the 3000 us of host work that follows)."""
    m = _model(mt.per_param_optimizer(), tmp_path)
    before = _median(m.graph)
    g2 = config_unit.foreach_optimizer(m.graph, {"optimizer_foreach": True}, Facts())
    assert before - _median(g2) == pytest.approx(3.1648, abs=0.003)


def test_cuda_graphs(tmp_path):
    """many_launches: 100 launches of 8 us a step become one 8 us launch: 792 us less host
    time; the GPU (100 x 2 us) never limits."""
    m = _model(mt.many_launches(), tmp_path)
    before = _median(m.graph)
    g2 = launch_unit.cuda_graphs(m.graph, {}, Facts())
    assert before - _median(g2) == pytest.approx(0.792, abs=0.002)


def test_larger_batch_with_accumulation(tmp_path):
    """sync_loop with 2 accumulation steps: twice the batch doubles the kernel (1000 ->
    2000 us), the step becomes 111 + 2000 = 2111 us for the work of two old steps:
    1055.5 us per old step."""
    m = _model(mt.sync_loop(), tmp_path)
    p = _predict("larger_batch", m, TrainConfig(batch_size=32, grad_accum_steps=2),
                 grad_accum_steps=2, dataloader_batch_size=32)
    assert isinstance(p, Prediction)
    assert p.change == {"batch_size": 64, "grad_accum_steps": 1}
    assert p.step_ms == pytest.approx(1.0555, abs=0.002)
    assert isinstance(_predict("larger_batch", m, TrainConfig(batch_size=32)), str)


def test_what_the_model_cannot_tell(tmp_path):
    m = _model(mt.sync_loop(), tmp_path)
    for fix in ("cudnn_benchmark", "torch_compile", "channels_last"):
        assert _predict(fix, m).startswith("cannot tell")
    # without the CPU count or the batch's bytes, workers cannot be predicted
    assert "CPU" in _predict("num_workers", m)
    mc = _model(mt.cpu_loader(), tmp_path / "x") if (tmp_path / "x").mkdir() is None else None
    assert "bytes" in _predict("num_workers", mc, cpu_count=2)


def test_device_only_says_at_most_where_the_device_does_not_set_the_pace(tmp_path):
    """A fix the trace cannot show that changes only device work: where even no time in that
    work would leave the step as it is (many_launches: the host's 13 us a 2 us kernel set
    the pace), "at most 1.00x"; where the device sets the pace (sync_loop: the host waits
    1000 us a step for its kernel), the fix's own reason."""
    from diagnose.stepmodel.prediction import device_only
    from diagnose.stepmodel.transforms import AT_MOST

    kernels = lambda g: g.is_kind(TaskKind.KERNEL)  # noqa: E731
    fix = device_only("cannot tell: not in the trace", kernels, "the kernels")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host_paced = _model(mt.many_launches(), tmp_path / "a").graph
    got = fix(host_paced, {}, Facts())
    assert isinstance(got, str) and got.startswith(f"{AT_MOST} 1.0")
    device_paced = _model(mt.sync_loop(), tmp_path / "b").graph
    assert fix(device_paced, {}, Facts()) == "cannot tell: not in the trace"
    none = device_only("cannot tell: not in the trace", lambda g: g.is_kind(TaskKind.MEMSET),
                       "the memsets")
    assert none(host_paced, {}, Facts()) == "cannot tell: not in the trace"


def test_a_report_on_a_cuda_trace_is_on_cuda():
    """A report's facts come from the trace: a CUDA compute capability says the device was
    a CUDA one (channels_last and cudnn.benchmark then apply to a conv net)."""
    assert Facts(device_cc_major=9).on_cuda
    assert not Facts().on_cuda
    assert not Facts(device_type="cpu", device_cc_major=9).on_cuda
    assert config_unit.CUDNN_BENCHMARK.applies(TrainConfig(), Facts(device_cc_major=8,
                                                                      model_has_conv=True))


@pytest.mark.parametrize(("own_ms", "step_ms"), [
    (None, 2.5),  # the ops are all the model's work: they take half as long
    (0.5, 2.75),  # half of them are the loop's own work between steps: that half stays
])
def test_cpu_fp32(tmp_path, own_ms, step_ms):
    """cpu_loader: 2 ms of in-process fetch, then 1 ms of ops, a 3 ms step (unprofiled too).
    The work timed under autocast took 2x its fp32 time: the ops but the loop's own work
    between steps halve; the fetch stays."""
    m = _model(mt.cpu_loader(), tmp_path)
    facts = Facts(cpu_autocast_ratio=2.0, loop_own_work_unprofiled_ms=own_ms,
                  step_time_unprofiled_mean_ms=3.0)
    g2 = precision_unit.cpu_fp32(m.graph, {}, facts)
    assert _median(g2) == pytest.approx(step_ms, abs=0.01)
    fetch = g2.is_kind(TaskKind.FETCH)
    assert g2.dur[fetch].sum() == pytest.approx(m.graph.dur[fetch].sum())
    assert isinstance(precision_unit.cpu_fp32(m.graph, {}, Facts()), str)  # not timed: why
