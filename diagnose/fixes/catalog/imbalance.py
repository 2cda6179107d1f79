"""Imbalance fixes: one rank slower than the others, the rest wait for it."""

from __future__ import annotations

from ..unit import Fix

BALANCE_RANKS = Fix("balance_ranks", "Even out work across ranks", """
# before: one rank gets slower input or larger samples
sampler = DistributedSampler(dataset)
# after: the same per-rank input speed (workers per rank, local data),
# and similar work per batch (bucket by sequence length, drop_last=True)
sampler = DistributedSampler(dataset, drop_last=True)
loader = DataLoader(dataset, sampler=sampler, num_workers=workers_per_rank)
""", category="imbalance")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (BALANCE_RANKS,)
