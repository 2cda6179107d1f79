"""Sync fixes: the host waiting for the GPU inside the step.

The model: a removed sync removes an edge: the host no longer waits for the device in
``.item()``, ``synchronize`` or a blocking copy of a result (the calls' own time stays).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...stepmodel.graph import EdgeKind, Graph, Tag, TaskKind
from ...stepmodel.transforms import transform
from ..unit import Facts, Fix


@transform()
def remove_sync(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """The host stops waiting for the device in .item(), synchronize and blocking copies of
    results to the host (their own time stays): those edges go."""
    waits = g.is_kind(TaskKind.SYNC, TaskKind.COPY_WAIT) & ((g.tag & int(Tag.PAGEABLE)) == 0)
    if not waits.any():
        return "no synchronising calls in the profiled steps"
    return g.remove_edges(np.isin(g.edst, np.flatnonzero(waits))
                          & (g.ekind == EdgeKind.END_AFTER_END))


REMOVE_SYNC = Fix("remove_sync", "Take host synchronisation out of the step", """
# before: .item() forces the host to wait for the GPU every step
for x, y in loader:
    loss = train_step(x, y)
    total += loss.item()
# after: accumulate on the GPU, read it once in a while
running = torch.zeros((), device="cuda")
for i, (x, y) in enumerate(loader):
    loss = train_step(x, y)
    running += loss.detach()
    if i % 100 == 0:
        print(running.item() / 100); running.zero_()
""", category="sync", transform=remove_sync)

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (REMOVE_SYNC,)
