"""Multi-rank scenarios: the traces of every rank of one data-parallel run.

``ddp_run()`` simulates synchronous data parallelism (DDP) with one ``TraceBuilder`` per rank:
each step every rank loads its batch, runs forward/backward kernels, and then all-reduces
its gradients. The all-reduce completes only when the last rank arrives, so each rank's
NCCL kernel lasts the transfer time plus its wait for the latest rank: a slow rank's peers
show inflated communication, the slow rank itself the least. The host synchronises at the
end of each step, so every rank's step takes as long as the slowest one's, as in real runs.
Ranks start each step together.

``RankRun`` holds the builders; its ``write(path)`` writes one trace per rank into a folder
and returns the folder, so test helpers that write a single ``TraceBuilder`` accept it too.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from tests import tracebuilder as tb

_COMPUTE = 4  # layers of the bf16 transformer-ish block per step (~8 ms of kernels)


class RankRun(tb.TraceBuilder):
    """The ranks of one run (a TraceBuilder only so that single-trace writers accept it)."""

    def __init__(self, ranks: Sequence[tb.TraceBuilder]) -> None:
        super().__init__()
        self.ranks = list(ranks)

    def build(self) -> dict[str, Any]:
        raise TypeError("a multi-rank run has one document per rank: use docs()")

    def docs(self) -> list[dict[str, Any]]:
        return [b.build() for b in self.ranks]

    def write(self, path: str | pathlib.Path, *, gz: bool | None = None) -> pathlib.Path:
        """Write ``<path without suffixes>_ranks/rank<N>.pt.trace.json.gz``; return the folder."""
        path = pathlib.Path(path)
        folder = path.with_name(path.name.split(".")[0] + "_ranks")
        folder.mkdir(parents=True, exist_ok=True)
        for i, b in enumerate(self.ranks):
            r = b.rank if b.rank is not None else i
            b.write(folder / f"rank{r}.pt.trace.json.gz")
        return folder


def _per_rank(value: float | Mapping[int, float], rank: int, default: float) -> float:
    if isinstance(value, Mapping):
        return float(value.get(rank, default))
    return float(value)


def ddp_run(
    world: int = 4,
    *,
    steps: int = tb.STEPS,
    loader_us: float | Mapping[int, float] = 150.0,
    compute_scale: float | Mapping[int, float] = 1.0,
    transfer_us: float = 1200.0,
    collectives: bool = True,
    backend: str = "nccl",
    **kw: Any,
) -> RankRun:
    """``world`` ranks of synchronous data parallelism.

    ``loader_us`` (DataLoader wait per step) and ``compute_scale`` (kernel durations x) are
    one value for all ranks or a {rank: value} mapping overriding the defaults (150 us, 1.0).
    ``collectives=False``: independent ranks (no all-reduce, no waiting for each other).
    """
    bs = [tb.TraceBuilder(rank=r, world_size=world, backend=backend, pid=4000 + r, **kw)
          for r in range(world)]
    for _ in range(steps):
        with contextlib.ExitStack() as stack:
            for b in bs:
                stack.enter_context(b.step())
            arrival = []
            for r, b in enumerate(bs):
                scale = _per_rank(compute_scale, r, 1.0)
                b.dataloader(_per_rank(loader_us, r, 150.0), workers=8)
                tb._inputs(b)
                b.zero_grad(params=160)
                with b.annotation("## forward ##"):
                    for _ in range(_COMPUTE):
                        tb._layer(b, tb._FWD_BF16, pace=0.97, scale=scale)
                with b.annotation("## backward ##"):
                    for _ in range(_COMPUTE):
                        tb._layer(b, tb._BWD_BF16, pace=0.97, scale=scale, backward=True)
                # the all-reduce can start when both the host has launched it and the
                # compute stream has drained (ProcessGroupNCCL waits on it)
                arrival.append(max(b.now + 20.0, b._queued_end(7)))
            last = max(arrival)
            for r, b in enumerate(bs):
                if collectives:
                    b.nccl(dur=transfer_us + (last - arrival[r]))
                    b.stream_wait(stream=7, on=20)
                b.optimizer_step(kernels=200, foreach=True)
                b.sync()
        if collectives:  # the next step starts together on every rank
            start = max(b.now for b in bs)
            for b in bs:
                b.idle(start - b.now)
    return RankRun(bs)


def balanced(world: int = 4, **kw: Any) -> RankRun:
    """A healthy run: every rank within ~3% of the others (small, realistic jitter)."""
    jitter = {r: 1.0 + 0.03 * ((r * 7) % 5 - 2) / 2 for r in range(world)}
    loader = {r: 150.0 + 20.0 * (r % 3) for r in range(world)}
    return ddp_run(world, compute_scale=jitter, loader_us=loader, **kw)


def slow_input(world: int = 4, rank: int = 2, loader_us: float = 6000.0, **kw: Any) -> RankRun:
    """Rank ``rank`` waits ``loader_us`` per step for its DataLoader; the others 150 us."""
    return ddp_run(world, loader_us={rank: loader_us}, **kw)


def slow_compute(world: int = 4, rank: int = 3, scale: float = 1.5, **kw: Any) -> RankRun:
    """Rank ``rank``'s kernels take ``scale`` x as long (a throttled GPU, longer sequences)."""
    return ddp_run(world, compute_scale={rank: scale}, **kw)
