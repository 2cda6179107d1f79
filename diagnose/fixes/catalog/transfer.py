"""Transfer fixes: host-to-device copies that block the host.

The model: a pageable host-to-device copy blocks the host (its wait, and the stream sync
that follows it); pinned, non-blocking, it does not, and runs at pinned bandwidth (the
capture's own timing of a pinned copy, else the link's by GPU generation). A trial
realises it as the rebuilt DataLoader's ``pin_memory`` and the step's
``.to(device, non_blocking=True)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...stepmodel.calibration import PINNED_GBPS
from ...stepmodel.graph import EdgeKind, Graph, Tag, TaskKind
from ...stepmodel.transforms import transform
from ..code import Setup, loader_change
from ..config import TrainConfig
from ..realise import Kwargs, Realisation, StepParts
from ..unit import Facts, Fix


@transform(sets={"pin_memory": ("dataloader_pin_memory",)},
          assumes={"memcpy_h2d_pinned_gbps": "pinned copies run at about 80% of the PCIe "
                   "link's rate"})
def pin_memory(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Pinned, non-blocking copies: a pageable host-to-device copy stops blocking the host
    (its wait and the stream sync that followed it go) and runs at pinned bandwidth
    (``memcpy_h2d_pinned_gbps``, else :data:`PINNED_GBPS` by compute capability)."""
    pg = (g.tag & int(Tag.PAGEABLE)) > 0
    copies = pg & g.is_kind(TaskKind.MEMCPY)
    if not copies.any():
        return "no pageable host-to-device copies in the profiled steps"
    cc = facts.device_cc_major
    rate = facts.memcpy_h2d_pinned_gbps or (PINNED_GBPS.get(cc) if cc else None)
    out = g.copy()
    if rate is not None:
        b = out.nbytes[copies]
        fast = np.where(np.isfinite(b), b / (rate * 1e3), out.dur[copies])
        out.dur[copies] = np.minimum(out.dur[copies], fast)
    waits = pg & g.is_kind(TaskKind.COPY_WAIT, TaskKind.SYNC)
    out.dur[waits] = 0.0
    return out.remove_edges(np.isin(out.edst, np.flatnonzero(waits))
                            & (out.ekind == EdgeKind.END_AFTER_END))


class PinMemory(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.on_cuda

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        """In place where the loader pins its batches (its setting, or, in a saved trace,
        pinned host-to-device copies beside the pageable ones): the pageable copies are
        then other tensors, made on the CPU in the step, which the loader's setting does
        not touch (whether a copy passes non_blocking=True is not recorded)."""
        if metrics.get("dataloader_pin_memory") is True:
            return "the DataLoader already pins its batches (pin_memory=True)"
        pinned = metrics.get("memcpy_h2d_pinned_count")
        if metrics.get("dataloader_pin_memory") is None and isinstance(pinned, int) \
                and pinned > 0:
            return (f"{pinned} host-to-device copies already come from pinned memory: the "
                    "pageable ones are other tensors")
        return None

    def render(self, setup: Setup | None) -> str:
        return loader_change(
            setup, "", "page-locked batches, copied without blocking the host",
            lambda c: c.replace(pin_memory=True), generic=TrainConfig(),
            before_extra=("for x, y in loader:", "    x, y = x.cuda(), y.cuda()"),
            after_extra=("for x, y in loader:",
                         "    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)"))


PIN_MEMORY = PinMemory(
    "pin_memory", "Pinned host memory and asynchronous copies (pin_memory + non_blocking)",
    category="transfer", auto=True, change={"pin_memory": True, "non_blocking": True},
    transform=pin_memory, instead=("device_tensors",),
    needs="a CUDA device (pinned memory speeds host-to-GPU copies)")

DEVICE_TENSORS = Fix("device_tensors", "Make the step's small tensors on the GPU", """
# before: a small tensor built on the CPU in every step, copied from pageable memory: the
# copy (and the sync after it) blocks the host until the GPU's queue is done
idx = torch.tensor(indices).cuda()
mask = (labels != -100).float().to("cuda")
# after: build it on the GPU; or pin it once and copy without blocking
idx = torch.tensor(indices, device="cuda")
mask = (labels_gpu != -100).float()             # from a tensor already on the GPU
weights = class_weights.pin_memory()            # once, before the loop
w = weights.to("cuda", non_blocking=True)       # in the step
""", category="transfer")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (PIN_MEMORY, DEVICE_TENSORS)


def _pin(cfg: TrainConfig, kw: Kwargs) -> None:
    kw["pin_memory"] = cfg.pin_memory


def _non_blocking(cfg: TrainConfig, parts: StepParts) -> None:
    parts.non_blocking = cfg.non_blocking


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("pin_memory",), loader=_pin),
                Realisation(("non_blocking",), step=_non_blocking))
