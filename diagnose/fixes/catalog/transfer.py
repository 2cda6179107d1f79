"""Transfer fixes: host-to-device copies that block the host."""

from __future__ import annotations

from ...stepmodel import transforms as tr
from ..code import Setup, loader_change
from ..config import TrainConfig
from ..facts import cuda
from ..unit import Facts, Fix


class PinMemory(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return cuda(facts)

    # never in place from the metrics: whether the copies pass non_blocking=True is not
    # recorded, and a run that copies pageable memory (TR001) does not

    def render(self, setup: Setup | None) -> str:
        return loader_change(
            setup, "", "page-locked batches, copied without blocking the host",
            lambda c: c.replace(pin_memory=True), generic=TrainConfig(num_workers=4),
            before_extra=("for x, y in loader:", "    x, y = x.cuda(), y.cuda()"),
            after_extra=("for x, y in loader:",
                         "    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)"))


PIN_MEMORY = PinMemory(
    "pin_memory", "Pinned host memory and asynchronous copies (pin_memory + non_blocking)",
    category="transfer", auto=True, change={"pin_memory": True, "non_blocking": True},
    transform=tr.pin_memory,
    needs="a CUDA device (pinned memory speeds host-to-GPU copies)")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (PIN_MEMORY,)
