"""Config fixes: settings of the optimizer, zero_grad and cuDNN."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...stepmodel import transforms as tr
from ..code import GENERIC_NOTE, Setup, optimizer_call
from ..config import TrainConfig
from ..facts import cuda
from ..unit import Facts, Fix


class ForeachOptimizer(Fix):
    """Multi-tensor kernels: fused first where CUDA supports it, else foreach."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return not config.optimizer_fused and config.optimizer_foreach is not True

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        out = []
        if cuda(facts) and facts.get("fused_supported"):
            out.append(config.replace(optimizer_fused=True, optimizer_foreach=None))
        out.append(config.replace(optimizer_foreach=True, optimizer_fused=None))
        return out

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("optimizer_fused") is True:
            return "the optimizer is already fused"
        if metrics.get("optimizer_foreach") is True:
            return "the optimizer already runs foreach (multi-tensor) kernels"
        return None

    def render(self, setup: Setup | None) -> str:
        o = setup.optimizer if setup is not None else None
        head = "# before: one small kernel per parameter per operation"
        if o is None:
            head += f"\n# {GENERIC_NOTE}"
            before = optimizer_call(None, foreach=False)
        else:
            before = optimizer_call(o, foreach=o.foreach, fused=o.fused)
        return "\n".join([head, before, "# after: a few multi-tensor kernels for all "
                          "parameters", optimizer_call(o, fused=True) + "   # or foreach=True"])


class CudnnBenchmark(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return cuda(facts) and facts.get("model_has_conv") is True

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("cudnn_benchmark") is True:
            return "torch.backends.cudnn.benchmark is already True"
        return None


FOREACH_OPTIMIZER = ForeachOptimizer(
    "foreach_optimizer", "Multi-tensor (foreach) or fused optimizer", category="config",
    transform=tr.foreach_optimizer,
    auto=True,
    needs="an optimizer not already foreach or fused")

SET_TO_NONE = Fix("set_to_none", "zero_grad(set_to_none=True)", """
# before: a fill kernel per parameter every step
optimizer.zero_grad(set_to_none=False)
# after: gradients are simply dropped (the default since PyTorch 2.0)
optimizer.zero_grad(set_to_none=True)
""", category="config", auto=True, change={"zero_grad_set_to_none": True},
    transform=tr.set_to_none)

CUDNN_BENCHMARK = CudnnBenchmark("cudnn_benchmark", "Let cuDNN pick the fastest convolution "
                                 "algorithm", """
# before: cuDNN uses a heuristic algorithm choice
# after: benchmarks once per input shape, then reuses the fastest (fixed input shapes)
torch.backends.cudnn.benchmark = True
""", category="config", auto=True, change={"cudnn_benchmark": True},
    transform=tr.cannot("cannot tell: cuDNN's autotuned algorithms are not in the trace"),
    needs="a convolution net on a CUDA device")



class GcFreeze(Fix):
    """``gc.freeze()`` once everything the run keeps exists: full collections skip it."""

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        n = metrics.get("gc_frozen_objects")
        return (f"gc.freeze() is in place already ({n:,} objects frozen)"
                if isinstance(n, int) and n > 0 else None)


GC_FREEZE = GcFreeze("gc_freeze", "Freeze what the process holds before the loop (gc.freeze)", """
# before: every full collection walks every object the process holds (torch's included)
for x, y in loader:
    ...
# after: built the model, dataset and loader? collect once, then freeze what is left:
# later collections skip those objects (gc.unfreeze() undoes it)
import gc
gc.collect()
gc.freeze()
for x, y in loader:
    ...
""", category="config", auto=True, change={"gc_freeze": True}, transform=tr.remove_gc_pauses,
    needs="a live capture that timed the collector's pauses")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (FOREACH_OPTIMIZER, SET_TO_NONE, CUDNN_BENCHMARK, GC_FREEZE)
