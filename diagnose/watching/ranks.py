"""Many ranks: every ``every`` steps each rank's compact summary goes to every rank through
the run's own process group, and a straggler is named.

At the same step on every rank (steps are counted alike where the ranks run the same
loop), :meth:`RankWatch.gather` calls ``torch.distributed.all_gather_object`` on the
default group with a small dict: the rank's median step time and loader wait over its
last ``window`` steps (three gathers' worth by default: one busy moment of the machine
weighs less). Every rank then applies the same rule to the same data, so
all agree without a second message: a rank is slow in a gather when its median step is at
least ``margin`` above the median of the other ranks' (or its loader wait is more than
``margin`` of that median step above theirs: under a synchronous data-parallel step all
ranks' wall steps even out, and the loader is what the slow one shows); ``sustain``
gathers in a row make it a straggler. Rank 0 records the alarm; the straggler itself
takes the capture. A rank named once is named again only after it fell back in line.
The gather's own time is left out of the steps (the clock restarts after it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RankWatch", "Straggler"]


@dataclass(frozen=True)
class Straggler:
    """Rank ``rank`` was slow in ``sustain`` gathers in a row: its median step (ms) against
    the other ranks' median, and its loader wait against theirs."""

    rank: int
    step_ms: float
    others_ms: float
    wait_ms: float
    others_wait_ms: float


@dataclass
class RankWatch:
    rank: int
    world_size: int
    every: int = 20
    window: int = 60  # steps each summary's medians are over
    margin: float = 0.10
    sustain: int = 2
    gathers: int = 0
    cost_s: float = 0.0  # time spent in gathers
    last: list[dict[str, Any]] = field(default_factory=list)
    _runs: dict[int, int] = field(default_factory=dict)  # rank -> slow gathers in a row
    _named: set[int] = field(default_factory=set)

    def summary(self, step: int, ms: np.ndarray, wait: np.ndarray) -> dict[str, Any]:
        """This rank's summary of its last steps (a few numbers, well under a kB)."""
        return {"rank": self.rank, "step": step, "n": int(len(ms)),
                "ms": float(np.median(ms)) if len(ms) else None,
                "wait": float(np.median(wait)) if len(wait) else None}

    def gather(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's summary, in rank order (a collective: every rank calls it)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, mine)
        self.gathers += 1
        self.last = [s for s in out if isinstance(s, dict)]
        return self.last

    def judge(self, summaries: list[dict[str, Any]]) -> Straggler | None:
        """The rank that has now been slow ``sustain`` gathers in a row (None: none)."""
        got = {s["rank"]: s for s in summaries
               if isinstance(s.get("ms"), float) and isinstance(s.get("rank"), int)}
        if len(got) < 2:
            return None
        found: Straggler | None = None
        for r, s in sorted(got.items()):
            others = [o for q, o in got.items() if q != r]
            oms = statistics.median(o["ms"] for o in others)
            owait = statistics.median(o["wait"] or 0.0 for o in others)
            wait = s["wait"] or 0.0
            slow = oms > 0 and (s["ms"] >= (1 + self.margin) * oms
                                or wait - owait >= self.margin * oms)
            if not slow:
                self._runs[r] = 0
                self._named.discard(r)
                continue
            self._runs[r] = self._runs.get(r, 0) + 1
            if self._runs[r] >= self.sustain and r not in self._named and found is None:
                self._named.add(r)
                found = Straggler(r, s["ms"], oms, wait, owait)
        return found
