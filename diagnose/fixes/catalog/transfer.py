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

    # never in place from the metrics: whether the copies pass non_blocking=True is not
    # recorded, and a run that copies pageable memory (TR001) does not

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
    transform=pin_memory,
    needs="a CUDA device (pinned memory speeds host-to-GPU copies)")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (PIN_MEMORY,)


def _pin(cfg: TrainConfig, kw: Kwargs) -> None:
    kw["pin_memory"] = cfg.pin_memory


def _non_blocking(cfg: TrainConfig, parts: StepParts) -> None:
    parts.non_blocking = cfg.non_blocking


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("pin_memory",), loader=_pin),
                Realisation(("non_blocking",), step=_non_blocking))
