"""Imbalance fixes: one rank slower than the others, the rest wait for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..code import Setup, assign, call, loader_args
from ..unit import Fix


class BalanceRanks(Fix):
    """Every rank the same share of samples (a DistributedSampler that drops the uneven
    tail) through the user's own loader call, its other arguments kept."""

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        """In place where the loader draws through a DistributedSampler (or a class named
        after one: Lightning's DistributedSamplerWrapper, an elastic one): every rank gets
        the same number of samples already (it pads the last ones, or with drop_last drops
        them), so the straggler's lag is not the split."""
        name = metrics.get("dataloader_sampler_class")
        if isinstance(name, str) and "DistributedSampler" in name:  # subclasses, wrappers
            return f"the DataLoader already splits the samples evenly across ranks ({name})"
        return None

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        ds = spec.dataset if spec is not None else "dataset"
        # the loader's own order: a sampler shuffles unless the loader did not
        order = ", shuffle=False" if spec is not None and spec.shuffle is False else ""
        args = [a for a in loader_args(spec, override={"sampler": "sampler"})
                if not a.startswith("shuffle=")]  # the sampler shuffles (its default)
        return "\n".join([
            "# before: one rank gets slower input or larger samples",
            "from torch.utils.data.distributed import DistributedSampler",
            f"sampler = DistributedSampler({ds}{order})",
            "# after: every rank the same number of samples; keep the input equally fast on",
            "# every rank (the same workers, local data) and the work per batch alike",
            "# (bucket samples by length); call sampler.set_epoch(epoch) each epoch",
            f"sampler = DistributedSampler({ds}{order}, drop_last=True)",
            call(assign(spec), "DataLoader", args)])


BALANCE_RANKS = BalanceRanks("balance_ranks", "Even out work across ranks",
                             category="imbalance")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (BALANCE_RANKS,)
