"""Launch fixes: the host launching many small kernels one by one.

The models: a CUDA graph turns a step's launches into one (each launch call's host time
becomes a share of one median launch); a larger micro-batch with fewer accumulation steps
doubles the device work and the input of a step, keeps its launches and host work, and is
predicted per old step. What torch.compile fuses is not in the trace: no prediction. A
trial realises ``compile`` by calling ``torch.compile(model)`` in its steps (the first step
holds the compile time).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...stepmodel.graph import DEVICE_TASKS, Graph, Tag, TaskKind
from ...stepmodel.transforms import cannot, transform
from ..code import Setup, loader_change
from ..config import TrainConfig, micro_batches
from ..realise import Realisation, StepParts
from ..unit import Facts, Fix, cannot_tell

_GRAPHS = "CUDA/HIP graphs are already in use"


@transform()
def cuda_graphs(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """One graph launch per step instead of one launch per kernel: the launch calls' host
    time per step becomes that of one launch (the median one); op dispatch stays."""
    launch = g.is_kind(TaskKind.LAUNCH) & ((g.tag & int(Tag.PAGEABLE)) == 0) & (g.step >= 0)
    if launch.sum() < 2 * g.n_steps:
        return "few launches per step: nothing for a graph to save"
    if facts.graph_launches_per_step:
        return "CUDA graphs are already in use"
    out = g.copy()
    per = np.bincount(g.step[launch], minlength=g.n_steps).astype(float)
    one = float(np.median(g.dur[launch]))
    out.dur[launch] = one / per[g.step[launch]]
    return out


def per_old_step(change: Mapping[str, Any], facts: Facts) -> float | None:
    """A step of a larger micro-batch with fewer accumulation steps holds new / old
    micro-batch of the old steps' samples: the prediction is per old step."""
    old_b, new_b = facts.dataloader_batch_size, change.get("batch_size")
    if "grad_accum_steps" in change and isinstance(new_b, int) and old_b:
        return new_b / old_b
    return None


@transform(sets={"batch_size": ("dataloader_batch_size",),
                 "grad_accum_steps": ("grad_accum_steps",)}, per_step=per_old_step)
def larger_batch(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Twice the micro-batch, half the accumulation steps (the effective batch kept): a
    step's kernels and its input take twice as long, its launches and host work stay; the
    replayed step is then halved (the same samples as before per step)."""
    acc = facts.grad_accum_steps
    if acc is None or acc < 2:
        return "a larger batch changes training unless it replaces gradient accumulation"
    out = g.scale(g.is_kind(*DEVICE_TASKS, TaskKind.FETCH, TaskKind.PRODUCER), 2.0)
    out.steps_measured = g.steps_measured * 2  # two of the old steps' work per step
    return out


class TorchCompile(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.allow_compile is True

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        f = Facts.from_metrics(metrics)
        if f.uses_compiled_code is True:
            return "compiled code (Triton kernels) is already in use"
        return _GRAPHS if f.uses_cuda_graphs is True else None


class CudaGraphs(Fix):
    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        return _GRAPHS if Facts.from_metrics(metrics).uses_cuda_graphs is True else None


class LargerBatch(Fix):
    """A larger micro-batch, paid for with fewer accumulation steps (effective batch kept)."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return config.grad_accum_steps > 1 and config.batch_size is not None

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        larger = [x for x in micro_batches(config)
                  if (x.batch_size or 0) > (config.batch_size or 0)]
        return larger[-1:]  # the next larger micro-batch that divides the effective batch

    def render(self, setup: Setup | None) -> str:
        if setup is not None and setup.loader is not None and setup.loader.batch_size is None:
            setup = None  # a batch sampler: no batch_size to show
        return loader_change(
            setup, "tiny kernels, the GPU mostly waits for launches",
            "more work per kernel; scale the learning rate or keep the effective batch",
            lambda c: c.replace(batch_size=8 * (c.batch_size or 16)),
            generic=TrainConfig(batch_size=16),
            after_extra=("# autofix applies it only where the effective batch stays: fewer "
                         "accumulation steps",))


TORCH_COMPILE = TorchCompile("torch_compile", "torch.compile: fuse small kernels, cut launch "
                             "overhead", """
# before
model = Net().cuda()
# after: fused kernels; mode="reduce-overhead" also captures CUDA graphs
model = torch.compile(Net().cuda())               # or torch.compile(model, mode="reduce-overhead")
""", category="launch", auto=True, change={"compile": True},
    transform=cannot(cannot_tell("what torch.compile fuses is not in the trace")),
    needs="opt-in: autofix(compile=True) (compile time is counted)")

CUDA_GRAPHS = CudaGraphs("cuda_graphs", "Capture the step in a CUDA graph", """
# before: every step launches every kernel from Python
loss = train_step(x, y)
# after: replay one captured graph (static shapes, static input buffers)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = train_step(static_x, static_y)
static_x.copy_(x); static_y.copy_(y); g.replay()
""", category="launch", transform=cuda_graphs)

LARGER_BATCH = LargerBatch(
    "larger_batch", "Larger batch per step (keep the effective batch with fewer accumulation "
    "steps)", category="launch", auto=True, transform=larger_batch,
    fields=("batch_size", "grad_accum_steps"),
    needs="gradient accumulation to trade for a larger micro-batch (effective batch kept)")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (TORCH_COMPILE, CUDA_GRAPHS, LARGER_BATCH)


def _compiled(cfg: TrainConfig, parts: StepParts) -> None:
    if cfg.compile:
        import torch

        parts.model = torch.compile(parts.model)


#: How a trial makes this module's fields real (``batch_size`` and ``grad_accum_steps``,
#: which larger_batch changes too, are realised beside grad_accumulation in memory.py).
REALISATIONS = (Realisation(("compile",), step=_compiled),)
