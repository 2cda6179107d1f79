"""Precision fixes: fp32 math where tensor cores could do it in lower precision, and
lower precision on a CPU that computes it slower than fp32.

The model of AMP: fp32 GEMM/convolution kernels run ``tensor_core_speedup`` x faster (half
the datasheet peak ratio of the GPU, at most 4x: metrics/precision); other fp32 kernels
outside the optimizer are memory-bound and move half the bytes. The NHWC kernels
channels_last would run are not in the trace: no prediction, but where the device does not
set the step's pace even convolutions taking no time would not shorten it: "at most"
(:func:`~diagnose.stepmodel.prediction.device_only`). Leaving a CPU autocast out takes
the model's work to what the same work timed in fp32 after the loop (a measured ratio:
:mod:`diagnose.capture.probes.precision`).

In a trial: AMP runs the forward and loss under ``torch.autocast`` (fp16 with a GradScaler:
bf16 has fp32's range); channels_last relays the model's 4-D parameters and buffers (and
the optimizer's state that matches them) in place for the trial and back after, and the
step's 4-D floating inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...metrics.precision import CONV_KERNEL
from ...stepmodel.calibrate import replayed_step_ms
from ...stepmodel.calibration import AMP_MEMORY_BOUND_SCALE
from ...stepmodel.graph import Graph, Tag, TaskKind
from ...stepmodel.host import busy_threads, per_step
from ...stepmodel.prediction import device_only
from ...stepmodel.transforms import transform
from ..config import TrainConfig
from ..realise import Realisation, StepParts
from ..unit import Facts, Fix, cannot_tell
from .workers import num_workers as workers_transform

_GEMM = re.compile(r"gemm|gemv|cutlass|xmma|nvjet|cublas|scudnn|implicit_convolve|winograd|"
                   r"convolve|_fprop|wgrad|dgrad|conv2d|conv_|cudnn_.*(conv|infer|train)",
                   re.IGNORECASE)
_FP32_SIMT = re.compile(r"sgemm|scudnn|_simt_|<float, float|<float,\s*float|_ffma_|"
                        r"f32f32_f32f32_f32|winograd.*<float|engine<float", re.IGNORECASE)
_FP32_NAME = re.compile(r"\bfloat\b|<float|float>|f32", re.IGNORECASE)


def convolutions(g: Graph) -> np.ndarray:
    """The convolutions' kernels (and their backward's) among the graph's tasks, named as
    the metrics name them (``conv_kernel_ms_per_step``)."""
    return g.name_mask(lambda n: bool(CONV_KERNEL.search(n)))


@transform()
def amp(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """fp32 GEMM/convolution kernels run tensor_core_speedup x faster; other fp32 kernels
    outside the optimizer are memory-bound and take :data:`AMP_MEMORY_BOUND_SCALE` of their
    time in bf16/fp16."""
    tc = facts.tensor_core_speedup
    if tc is None:
        return cannot_tell("no tensor-core speedup is known for this device")
    kern = g.is_kind(TaskKind.KERNEL)
    simt = kern & g.name_mask(lambda n: bool(_GEMM.search(n)) and bool(_FP32_SIMT.search(n)))
    if not simt.any():
        return "no fp32 GEMM/convolution kernels in the profiled steps"
    other = (kern & ~g.name_mask(lambda n: bool(_GEMM.search(n)))
             & g.name_mask(lambda n: bool(_FP32_NAME.search(n)))
             & ((g.tag & int(Tag.OPTIMIZER)) == 0))
    out = g.scale(simt, 1 / tc)
    out.dur[other] *= AMP_MEMORY_BOUND_SCALE
    return out


@transform(assumes={"cpu_autocast_ratio": "the model's work is as fast in fp32",
                    "loop_own_work_unprofiled_ms": "the loop does no work between its steps"})
def cpu_fp32(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """The loop's CPU autocast left out: the main thread's forward and backward work
    (:data:`~diagnose.stepmodel.graph.Tag.FORWARD_BACKWARD`, less the loop's own work
    between steps, ``loop_own_work_unprofiled_ms``) takes 1 / ``cpu_autocast_ratio`` of its
    time, as the same work timed in fp32 did. Where the DataLoader's busy workers and
    torch's threads oversubscribe the CPUs, the same workers are shared with the shorter
    step again (the workers' transform at the run's count, as the threads split does): the
    contention the run has grows as the step shrinks around the same work of theirs."""
    ratio = facts.cpu_autocast_ratio
    if ratio is None:
        return cannot_tell("the model's work was not timed in fp32 (a live capture times it)")
    fb = ((g.res == g.main) & g.is_kind(TaskKind.HOST)
          & ((g.tag & int(Tag.FORWARD_BACKWARD)) > 0))
    if not fb.any() or not g.n_steps:
        return "no forward or backward on the training thread in the profiled steps"
    replay = replayed_step_ms(g)
    window_ms = float(per_step(g, fb, g.dur).mean()) / 1e3
    step_u = facts.step_time_unprofiled_mean_ms
    if step_u and replay > 0:  # the window's work at the unprofiled step's scale (the
        window_ms *= step_u / replay  # Predictor's graph is calibrated to it already)
    own = facts.loop_own_work_unprofiled_ms or 0.0
    share = max(0.0, 1.0 - own / window_ms) if window_ms > 0 else 1.0
    out = g.scale(fb, 1.0 - share * (1.0 - 1.0 / ratio))
    # the same busy workers beside torch's threads where the two oversubscribe the CPUs:
    # the contention the run has changes with the step (as the threads split's does)
    now_w, n = facts.dataloader_num_workers, facts.cpu_count
    if now_w and n and not facts.worker_batch_waits and busy_threads(facts) + min(now_w, n) > n:
        made = workers_transform(out, {"num_workers": now_w}, facts)
        if not isinstance(made, str):
            out = made
    return out


class Amp(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.on_cuda and config.amp_dtype is None

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [config.replace(amp_dtype="bfloat16" if bf16(facts) else "float16")]


def bf16(facts: Facts) -> bool:
    """Whether the device computes in bfloat16: as the live session asked torch, else (a
    saved trace) from its compute capability (NVIDIA GPUs from Ampere, 8.0, on)."""
    if facts.bf16_supported is not None:
        return facts.bf16_supported
    return (facts.device_cc_major or 0) >= 8


class ConvNetOnCuda(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.on_cuda and facts.convolutions


AMP = Amp("amp", "Automatic mixed precision (bf16, or fp16 with GradScaler)", """
# before
loss = loss_fn(model(x), y)
loss.backward()
opt.step()
# after: GEMMs and convolutions run on tensor cores
with torch.autocast("cuda", dtype=torch.bfloat16):       # Ampere or newer
    loss = loss_fn(model(x), y)
loss.backward()
opt.step()
# on GPUs without bf16 (e.g. V100): dtype=torch.float16 with a GradScaler
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    loss = loss_fn(model(x), y)
scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
""", category="precision", auto=True, needs="a CUDA device and an fp32 step",
    transform=amp, fields=("amp_dtype",))

CHANNELS_LAST = ConvNetOnCuda("channels_last", "channels_last memory format for convolution "
                              "nets", """
# before
model = model.cuda()
# after: NHWC layout that tensor-core convolutions prefer
model = model.cuda().to(memory_format=torch.channels_last)
x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
""", category="precision", auto=True, change={"channels_last": True},
    transform=device_only(cannot_tell("the NHWC kernels' times are not in the trace"),
                          convolutions, "the convolutions"),
    needs="a convolution net on a CUDA device")

CPU_FP32 = Fix("cpu_fp32", "Train in fp32 on a CPU that emulates bf16/fp16", """
# before: bf16 autocast on a CPU without bf16 matrix units (AVX2, AVX512 without BF16)
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = loss_fn(model(x), y)
# after: fp32 (or keep autocast where torch.ops.mkldnn._is_mkldnn_bf16_supported())
loss = loss_fn(model(x), y)
# Lightning: Trainer(precision="32-true")  HF Trainer: TrainingArguments(bf16=False)
""", category="precision", transform=cpu_fp32, needs="a CPU model under autocast")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (AMP, CHANNELS_LAST, CPU_FP32)


# ---------------------------------------------------------------------- in a trial
def _autocast(cfg: TrainConfig, parts: StepParts) -> None:
    """The forward and loss under autocast to ``amp_dtype``; fp16 scales the loss."""
    if not cfg.amp_dtype:
        return
    import torch

    dtype, device_type = getattr(torch, cfg.amp_dtype), parts.device.type
    parts.forward.append(lambda: torch.autocast(device_type, dtype=dtype))
    if cfg.uses_grad_scaler:
        parts.scaler = torch.amp.GradScaler(device_type)


def _relayout_state(optimizer: Any, relaid: list[Any], fmt: Any) -> None:
    """The optimizer's state tensors shaped as a relaid parameter, in ``fmt`` (fused and
    foreach kernels want matching strides)."""
    for p in relaid:
        st = optimizer.state.get(p)
        for k, v in (st or {}).items():
            if hasattr(v, "shape") and v.shape == p.shape and v.dim() == 4:
                st[k] = v.contiguous(memory_format=fmt)


def _channels_last(cfg: TrainConfig, model: Any, optimizer: Any
                   ) -> Callable[[], None] | None:
    """The model's 4-D parameters and buffers relaid in channels_last in place (the same
    tensor objects, new strides), and the optimizer's matching state; the undo lays them
    out contiguous again."""
    if not cfg.channels_last:
        return None
    import torch

    cl = torch.channels_last
    relaid: list[Any] = []
    for t in [*model.parameters(), *model.buffers()]:
        if t.dim() == 4 and not t.is_contiguous(memory_format=cl):
            with torch.no_grad():  # same tensor object, new strides
                t.set_(t.contiguous(memory_format=cl))
            relaid.append(t)
    _relayout_state(optimizer, relaid, cl)

    def undo() -> None:
        if relaid:
            _relayout_state(optimizer, relaid, torch.contiguous_format)
        with torch.no_grad():
            for t in relaid:
                t.set_(t.contiguous())
    return undo


def _channels_last_inputs(cfg: TrainConfig, parts: StepParts) -> None:
    if not cfg.channels_last:
        return
    import torch

    def relaid(t: Any) -> Any:
        if t.dim() == 4 and t.is_floating_point():
            return t.contiguous(memory_format=torch.channels_last)
        return t
    parts.inputs.append(relaid)


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("amp_dtype",), step=_autocast),
                Realisation(("channels_last",), process=_channels_last,
                            step=_channels_last_inputs))
