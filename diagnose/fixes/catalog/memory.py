"""Memory fixes: a step that does not fit, or fits only just."""

from __future__ import annotations

from ..code import GENERIC_NOTE, Setup, loader_call
from ..config import TrainConfig, micro_batches
from ..unit import Facts, Fix


class GradAccumulation(Fix):
    """The same effective batch in smaller micro-batches: every split, largest first."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return (config.batch_size or 0) > 1 and facts.get("oom") is True

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [x for x in micro_batches(config)
                if (x.batch_size or 0) < (config.batch_size or 0)]

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        b = spec.batch_size if spec is not None else None
        k = next((k for k in (4, 2, 3) if b and b % k == 0 and b > k), None)
        if b is None or k is None:
            spec, b, k = None, 256, 4
        micro = b // k
        before = spec.config() if spec is not None else TrainConfig(batch_size=b)
        head = f"# before: batch {b} does not fit" + ("" if spec is not None else
                                                       f"\n# {GENERIC_NOTE}")
        return "\n".join([
            head, loader_call(spec, before, show=["batch_size"], prefix="loader = "),
            "for x, y in loader:",
            "    loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()",
            f"# after: {k} micro-batches of {micro}, the same effective batch",
            loader_call(spec, before.replace(batch_size=micro), show=["batch_size"],
                        prefix="loader = "),
            "for i, (x, y) in enumerate(loader):",
            f"    (loss_fn(model(x), y) / {k}).backward()",
            f"    if (i + 1) % {k} == 0:",
            "        opt.step(); opt.zero_grad()"])


GRAD_ACCUMULATION = GradAccumulation(
    "grad_accumulation", "Smaller micro-batch with gradient accumulation", category="memory",
    auto=True, needs="a batch that does not fit (out of memory)")

ACTIVATION_CHECKPOINTING = Fix(
    "activation_checkpointing", "Recompute activations in backward instead of storing them",
    """
# before
h = self.block(h)
# after: trade ~30% more compute for much less activation memory
from torch.utils.checkpoint import checkpoint
h = checkpoint(self.block, h, use_reentrant=False)
""", category="memory")

EXPANDABLE_SEGMENTS = Fix("expandable_segments", "Reduce allocator fragmentation", """
# before: reserved memory far above what is allocated
# after (set before the first CUDA allocation):
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
""", category="memory")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (GRAD_ACCUMULATION, ACTIVATION_CHECKPOINTING, EXPANDABLE_SEGMENTS)
