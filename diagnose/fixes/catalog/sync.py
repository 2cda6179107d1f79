"""Sync fixes: the host waiting for the GPU inside the step."""

from __future__ import annotations

from ...stepmodel import transforms as tr
from ..unit import Fix

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
""", category="sync", transform=tr.remove_sync)

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (REMOVE_SYNC,)
