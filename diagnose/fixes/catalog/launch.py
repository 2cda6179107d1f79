"""Launch fixes: the host launching many small kernels one by one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...stepmodel import transforms as tr
from ..code import Setup, loader_change
from ..config import TrainConfig, micro_batches
from ..unit import Facts, Fix

_GRAPHS = "CUDA/HIP graphs are already in use"


class TorchCompile(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.get("allow_compile") is True

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("uses_compiled_code") is True:
            return "compiled code (Triton kernels) is already in use"
        return _GRAPHS if metrics.get("uses_cuda_graphs") is True else None


class CudaGraphs(Fix):
    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        return _GRAPHS if metrics.get("uses_cuda_graphs") is True else None


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
    transform=tr.cannot("cannot tell: what torch.compile fuses is not in the trace"),
    needs="opt-in: autofix(compile=True) (compile time is counted)")

CUDA_GRAPHS = CudaGraphs("cuda_graphs", "Capture the step in a CUDA graph", """
# before: every step launches every kernel from Python
loss = train_step(x, y)
# after: replay one captured graph (static shapes, static input buffers)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = train_step(static_x, static_y)
static_x.copy_(x); static_y.copy_(y); g.replay()
""", category="launch", transform=tr.cuda_graphs)

LARGER_BATCH = LargerBatch(
    "larger_batch", "Larger batch per step (keep the effective batch with fewer accumulation "
    "steps)", category="launch", auto=True, transform=tr.larger_batch,
    needs="gradient accumulation to trade for a larger micro-batch (effective batch kept)")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (TORCH_COMPILE, CUDA_GRAPHS, LARGER_BATCH)
