"""The step record in bounded memory: recent steps in full, older ones in summary blocks.

Each step is three numbers: when it ended (seconds since the watch began), its wall time
and the loop's wait on the loader (ms). The last ``ring`` steps are kept in full in numpy
arrays (a ring buffer). Every ``block`` steps the block just ended is summarised (count,
median, p90, min, max of both times, and its span) into a table of at most
``max_blocks`` rows; when it fills, neighbouring rows are merged in pairs, so the table
covers the whole run at a coarser grain (a merged row's min, max and count are exact; its
median and p90 are the count-weighted mean of the two rows', an approximation said in
docs/watch.md). So memory is fixed however long the run. Full-resolution steps and every
block as first made go to the run folder (:class:`~diagnose.watching.timeline.TimelineWriter`)
before the ring overwrites them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np

__all__ = ["BLOCK_FIELDS", "StepStore"]

#: the columns of a summary block
BLOCK_FIELDS = ("first", "count", "t0", "t1", "ms_median", "ms_p90", "ms_min", "ms_max",
                "wait_median", "wait_p90", "wait_min", "wait_max")
_F = {name: i for i, name in enumerate(BLOCK_FIELDS)}


class StepStore:
    """Add steps with :meth:`add` (the training thread's hot path: three array writes).

    ``on_block(row)`` is told of each block as it is made (a dict of :data:`BLOCK_FIELDS`);
    ``on_steps(first, t, ms, wait)`` gets the steps not yet handed over when
    :meth:`take_new` is called (the writer's flush), and is called by :meth:`add` itself
    before the ring would overwrite steps it has not been given.
    """

    def __init__(self, ring: int = 8192, block: int = 1000, max_blocks: int = 4096,
                 on_block: Callable[[dict[str, float]], None] | None = None,
                 on_steps: Callable[[int, np.ndarray, np.ndarray, np.ndarray], None]
                 | None = None) -> None:
        if ring < 2 * block or block < 2 or max_blocks < 2:
            raise ValueError(f"need ring >= 2 * block, block >= 2, max_blocks >= 2 "
                             f"(ring={ring}, block={block}, max_blocks={max_blocks})")
        self.cap, self.block, self.max_blocks = ring, block, max_blocks
        # the ring's memory is array.array (a scalar write costs ~2/3 of numpy's) and read
        # through numpy arrays over the same buffer
        self._t = array("d", bytes(8 * ring))
        self._ms = array("f", bytes(4 * ring))
        self._wait = array("f", bytes(4 * ring))
        self.t = np.frombuffer(self._t, dtype=np.float64)
        self.ms = np.frombuffer(self._ms, dtype=np.float32)
        self.wait = np.frombuffer(self._wait, dtype=np.float32)
        self.n = 0  # steps added
        self.handed = 0  # steps handed to on_steps
        self.blocks = np.zeros((max_blocks, len(BLOCK_FIELDS)), dtype=np.float64)
        self.nblocks = 0
        self.merges = 0  # times the table was coarsened
        self.on_block, self.on_steps = on_block, on_steps
        self._next_block = block
        self._hand_at = ring - block  # hand steps over before the ring wraps onto them
        self._due = min(self._next_block, self._hand_at)  # the next step that has work

    def add(self, t: float, ms: float, wait: float) -> None:
        """One step: its end (s since start), wall time and loader wait (ms)."""
        n = self.n
        i = n % self.cap
        self._t[i] = t
        self._ms[i] = ms
        self._wait[i] = wait
        n = self.n = n + 1
        if n >= self._due:
            self._due_now(n)

    def _due_now(self, n: int) -> None:
        """A block ends, or the ring is about to overwrite steps not handed over yet."""
        if n == self._next_block:
            self._close_block()
        if n - self.handed >= self._hand_at:
            self.take_new()
        self._due = min(self._next_block, self.handed + self._hand_at)

    # ------------------------------------------------------------------ reading
    def last(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The last ``count`` steps (at most what the ring holds): t, ms, wait, oldest
        first (copies)."""
        count = max(0, min(count, self.n, self.cap))
        idx = np.arange(self.n - count, self.n) % self.cap
        return self.t[idx], self.ms[idx], self.wait[idx]

    def span(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps ``first`` .. ``stop - 1`` that the ring still holds (copies)."""
        first = max(first, self.n - self.cap, 0)
        idx = np.arange(first, max(stop, first)) % self.cap
        return self.t[idx], self.ms[idx], self.wait[idx]

    def block_rows(self) -> list[dict[str, float]]:
        """The summary table, oldest first."""
        return [dict(zip(BLOCK_FIELDS, map(float, r), strict=True))
                for r in self.blocks[:self.nblocks]]

    def take_new(self) -> None:
        """Hand the steps added since the last call to ``on_steps`` (the writer's flush)."""
        first, stop = self.handed, self.n
        if stop <= first:
            return
        self.handed = stop
        self._due = min(self._next_block, stop + self._hand_at)
        if self.on_steps is not None:
            t, ms, wait = self.span(first, stop)
            self.on_steps(max(first, stop - self.cap), t, ms, wait)

    @property
    def nbytes(self) -> int:
        """Memory the store holds (arrays only; fixed once made)."""
        return self.t.nbytes + self.ms.nbytes + self.wait.nbytes + self.blocks.nbytes

    # ------------------------------------------------------------------ blocks
    def _close_block(self) -> None:
        first = self.n - self.block
        self._next_block += self.block
        t, ms, wait = self.span(first, self.n)
        mq = np.percentile(ms, (50, 90))
        wq = np.percentile(wait, (50, 90))
        row = np.array([first, len(ms), t[0], t[-1], mq[0], mq[1], ms.min(), ms.max(),
                        wq[0], wq[1], wait.min(), wait.max()], dtype=np.float64)
        if self.on_block is not None:
            self.on_block(dict(zip(BLOCK_FIELDS, map(float, row), strict=True)))
        if self.nblocks == self.max_blocks:
            self._merge()
        self.blocks[self.nblocks] = row
        self.nblocks += 1

    def _merge(self) -> None:
        """Halve the table: each pair of neighbouring rows becomes one."""
        b = self.blocks[:self.nblocks - self.nblocks % 2]
        a, c = b[0::2], b[1::2]
        wa, wc = a[:, _F["count"]], c[:, _F["count"]]
        out = a.copy()
        out[:, _F["count"]] = wa + wc
        out[:, _F["t1"]] = c[:, _F["t1"]]
        for name in ("ms_median", "ms_p90", "wait_median", "wait_p90"):
            j = _F[name]
            out[:, j] = (a[:, j] * wa + c[:, j] * wc) / (wa + wc)
        for name, fn in (("ms_min", np.minimum), ("wait_min", np.minimum),
                         ("ms_max", np.maximum), ("wait_max", np.maximum)):
            j = _F[name]
            out[:, j] = fn(a[:, j], c[:, j])
        half = len(out)
        odd = self.blocks[self.nblocks - 1].copy() if self.nblocks % 2 else None
        self.blocks[:half] = out
        self.nblocks = half
        if odd is not None:
            self.blocks[half] = odd
            self.nblocks += 1
        self.blocks[self.nblocks:] = 0.0
        self.merges += 1
