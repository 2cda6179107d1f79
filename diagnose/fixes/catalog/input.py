"""Input fixes: the DataLoader's workers, their queue, and the cost of each sample."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ...stepmodel import transforms as tr
from ...stepmodel.prediction import epoch_end_ms
from ...values import as_number
from ..code import AFFINITY, SOME_WORKERS, Setup, loader_call, loader_change, some_workers
from ..config import TrainConfig
from ..facts import count, cpus, cpus_saturated
from ..unit import SEARCH_CLIMB, SEARCH_DESCEND, Facts, Fix


# ---------------------------------------------------------------------- the worker search
def too_many_workers(config: TrainConfig, facts: Facts) -> bool:
    """More DataLoader workers than the CPUs this process may use, or workers on CPUs the
    diagnosis saw saturated: fewer workers may be faster (searched downward)."""
    n = cpus(facts)
    return n is not None and config.num_workers > 0 and (
        config.num_workers > n or cpus_saturated(facts))


def worker_ladder(config: TrainConfig, facts: Facts) -> list[TrainConfig]:
    """num_workers candidates, measured in this order.

    Upward (fewer workers than CPUs): 1, 2, 4, ... and the CPU count itself above the
    current value, never more workers than CPUs this process may use. Downward (more
    workers than CPUs, or the CPUs saturated; :func:`too_many_workers`): the CPU count,
    one less, half, 1 and 0 below the current value (0: batches made in the training
    process, no inter-process transfer at all).
    """
    n = cpus(facts)
    if n is None:
        return []
    if too_many_workers(config, facts):
        down = {n, n - 1, n // 2, 1, 0}
        return [config.replace(num_workers=v) for v in sorted(down, reverse=True)
                if 0 <= v < config.num_workers]
    values, k = set(), 1
    while k <= n:
        values.add(k)
        k *= 2
    values.add(n)
    return [config.replace(num_workers=v) for v in sorted(values) if v > config.num_workers]


class _WorkerSearch(Fix):
    """num_workers searched on a ladder: upward from the measured need, or downward."""

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return worker_ladder(config, facts)

    def search_mode(self, config: TrainConfig, candidates: list[TrainConfig]) -> str:
        down = bool(candidates) and candidates[0].num_workers < config.num_workers
        return SEARCH_DESCEND if down else SEARCH_CLIMB

    def search_start(self, config: TrainConfig, candidates: list[TrainConfig], *,
                     input_ms: float, compute_ms: float) -> int:
        """The first rung with the workers input needs to keep up with compute: one
        worker's time per step's batches (``input_ms`` x the workers that made it) over
        the compute-only step time, within 1..the top rung."""
        if not candidates:
            return 0
        per_worker = input_ms * max(1, config.num_workers)
        top = candidates[-1].num_workers
        need = max(1, min(top, math.ceil(per_worker / max(compute_ms, 1e-6))))
        return next((i for i, c in enumerate(candidates) if c.num_workers >= need),
                    len(candidates) - 1)


def _workers(m: Mapping[str, Any]) -> tuple[int | None, int | None]:
    return count(m, "dataloader_num_workers"), cpus(m)


class NumWorkers(_WorkerSearch):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        n = cpus(facts)
        return n is not None and facts.get("iterable_dataset") is not True and (
            config.num_workers < n or too_many_workers(config, facts))

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        nw, n = _workers(metrics)
        if nw is None or n is None or nw != some_workers(n):
            return None
        if n == 1:
            return "1 CPU: no core to spare for a worker process"
        return f"num_workers={nw} already: min(8, CPUs - 1) on {n} CPUs"

    def render(self, setup: Setup | None) -> str:
        return loader_change(setup, "", "workers prepare batches in parallel with the "
                             "training step", lambda c: c, generic=TrainConfig(),
                             override={"num_workers": SOME_WORKERS})


class NumWorkersCap(_WorkerSearch):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        n = cpus(facts)
        return n is not None and config.num_workers > n and \
            facts.get("iterable_dataset") is not True

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        nw, n = _workers(metrics)
        if nw is None or n is None or nw > max(0, n - 1):
            return None
        if nw == 0:
            return "num_workers=0: no worker processes to cap"
        return f"num_workers={nw} already leaves a CPU of {n} to the training process"

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        if spec is not None and not spec.num_workers:
            setup = spec = None  # no workers to cap: the generic example
        n = spec.num_workers if spec is not None else 32
        return loader_change(setup, "workers fight for the CPUs (and with the training "
                             "process)", "at most the CPUs; fewer (even 0) can be faster: "
                             "measure", lambda c: c, generic=TrainConfig(num_workers=32),
                             override={"num_workers": f"min({n}, {AFFINITY} - 1)"})


class PersistentWorkers(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return config.num_workers > 0 and not config.persistent_workers

    def predict(self, predictor: Any, config: TrainConfig, facts: Facts) -> Any:
        """Each epoch starts its workers again: the loop waits for ``iter()`` and the first
        batch (``dataloader_start_ms``, as the session saw an epoch start with the run's
        workers; for another worker count, or where none was seen, one worker started
        after the loop, ``input_worker_start_ms``), where live workers would make
        only that batch (``input_inprocess_batch_ms``; a run without workers: its own
        fetch and collate per batch). The difference, once per epoch
        (``dataloader_epoch_batches`` steps), comes off the mean step, with the epoch's
        end (the workers shut down and joined: :func:`epoch_end_ms`). The profiled window
        holds no epoch start, so this is not a replay of the graph."""
        if not self.applies(config, facts):
            return self.why_not(config, facts) or "nothing left to change"
        # the loop's own epoch start where it had these workers; else one worker's
        # (processes start one after another in iter(): fewer workers start sooner)
        same = as_number(facts.get("dataloader_num_workers")) == config.num_workers
        start = as_number(facts.get("dataloader_start_ms")) if same else None
        if start is None:
            start = as_number(facts.get("input_worker_start_ms"))
        n = as_number(facts.get("dataloader_epoch_batches"))
        batch = as_number(facts.get("input_inprocess_batch_ms"))
        if batch is None:
            made = [as_number(facts.get(k)) for k in ("input_fetch_ms", "input_collate_ms")]
            batch = None if None in made else sum(x or 0.0 for x in made)
        if start is None:
            return "cannot tell: no worker start was timed (a live capture times one)"
        if not n or n <= 0:
            return "cannot tell: the batches of an epoch are not known (len(loader))"
        if batch is None:
            return ("cannot tell: what one batch costs a worker was not timed (a live "
                    "capture with workers times it)")
        # and at its end the loader shuts its workers down and joins them (epoch_end_ms)
        end = epoch_end_ms(facts, config.num_workers)
        p = predictor.per_step_saving({"persistent_workers": True},
                                      (start + end - batch) / n)
        return dataclasses.replace(p, candidates=(((("persistent_workers", True),),
                                                   p.speedup),))

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("dataloader_persistent_workers") is True:
            return "persistent_workers=True already"
        return None

    def render(self, setup: Setup | None) -> str:
        return loader_change(setup, "", "no worker start-up stall at every epoch",
                             lambda c: c.replace(persistent_workers=True),
                             generic=TrainConfig(num_workers=4), needs_workers=True)


def _more_prefetch(c: TrainConfig) -> TrainConfig:
    return c.replace(prefetch_factor=max(4, 2 * (c.prefetch_factor or 2)))


class PrefetchFactor(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return config.num_workers > 0

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [_more_prefetch(config)]

    def render(self, setup: Setup | None) -> str:
        def more(c: TrainConfig) -> TrainConfig:
            return _more_prefetch(c.replace(num_workers=c.num_workers or 1))

        spec = setup.loader if setup is not None else None
        n = more(spec.config() if spec is not None else TrainConfig()).prefetch_factor
        return loader_change(setup, "", f"each worker keeps {n} batches ready, absorbing "
                             "slow samples", more, generic=TrainConfig(num_workers=4),
                             needs_workers=True)


class Threads(Fix):
    """torch's intra-op threads and the loader's workers share the CPUs: split them.

    Candidates: each worker count ``w`` of 1, 2, 4, ... up to half the CPUs (and the
    current count) with torch on the ``CPUs - w`` CPUs left, and as many workers as CPUs
    with torch on one thread (where the main process mostly waits for its batches, its
    second thread only competes with them); never the current split. Autofix measures them
    in the order of their predictions."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        n = cpus(facts)
        return (n is not None and n >= 2 and count(facts, "torch_num_threads") is not None
                and facts.get("iterable_dataset") is not True)

    def predict(self, predictor: Any, config: TrainConfig, facts: Facts) -> Any:
        """A point prediction where the session timed the forward on one thread; without
        that, the thread pool's CPU is read as work and the prediction is a bound."""
        bound = tr.thread_scale(facts, 1) is None
        return dataclasses.replace(self, predicts_at_least=bound).predict_as_fix(
            predictor, config, facts)

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        n, threads = cpus(facts), count(facts, "torch_num_threads")
        if n is None or threads is None or n < 2:
            return []
        now = config.intra_op_threads or threads
        ws, k = set(), 1
        while k <= max(1, n // 2):
            ws.add(k)
            k *= 2
        if 0 < config.num_workers < n:
            ws.add(config.num_workers)
        ws.add(n)  # every CPU to the workers, torch on one thread (the main process mostly waits)
        out = [config.replace(num_workers=w, intra_op_threads=max(1, n - w)) for w in sorted(ws)]
        return [c for c in out
                if (c.num_workers, c.intra_op_threads) != (config.num_workers, now)]

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        threads, (nw, n) = count(metrics, "torch_num_threads"), _workers(metrics)
        if threads is None or nw is None or n is None or nw < 1 or threads + nw > n:
            return None  # no workers yet: nothing is split, the fix would add one
        return f"torch's {threads} threads and {nw} workers already fit the {n} CPUs"

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        if spec is None:
            return self.code  # the generic template
        n = spec.num_workers or 1
        before = loader_call(spec, prefix="loader = ")
        after = loader_call(spec, spec.config().replace(num_workers=n), show=["num_workers"],
                            prefix="loader = ")
        who = (f"the DataLoader's {n} worker{'s' if n > 1 else ''}" if spec.num_workers
               else "the loading done in the training process")
        return "\n".join([
            f"# before: torch's intra-op threads (one per CPU) compete with {who}", before,
            "# after: the workers keep their CPUs, torch's math gets the rest (measure "
            "both ways)", f"torch.set_num_threads(max(1, {AFFINITY} - {n}))", after])


# ---------------------------------------------------------------------- the units
NUM_WORKERS = NumWorkers(
    "num_workers", "Load batches in worker processes (DataLoader num_workers)",
    category="input", auto=True, search_key="num_workers", transform=tr.num_workers,
    instead=("threads", "faster_input"),
    needs="a map-style dataset (an IterableDataset must shard itself across workers) and "
          "workers other than the CPU count: fewer are searched upward, more (or saturated "
          "CPUs) downward")

NUM_WORKERS_CAP = NumWorkersCap(
    "num_workers_cap", "No more DataLoader workers than CPUs", category="input", auto=True,
    search_key="num_workers", transform=tr.num_workers,
    needs="more workers than the CPUs this process may use, and a map-style dataset")

PERSISTENT_WORKERS = PersistentWorkers(
    "persistent_workers", "Keep DataLoader workers alive between epochs", category="input",
    auto=True, change={"persistent_workers": True}, needs="worker processes (num_workers > 0)")

PREFETCH_FACTOR = PrefetchFactor(
    "prefetch_factor", "Queue more batches ahead (DataLoader prefetch_factor)",
    category="input", auto=True, needs="worker processes (num_workers > 0)",
    transform=tr.deeper_queue)

THREADS = Threads("threads", "Split the CPUs between torch's threads and the loader's workers",
                  f"""
# before: torch's intra-op threads (one per CPU) compete with the DataLoader's workers
loader = DataLoader(dataset, ..., num_workers=workers)
# after: the workers keep their CPUs, torch's math gets the rest (measure both ways)
torch.set_num_threads(max(1, {AFFINITY} - workers))
loader = DataLoader(dataset, ..., num_workers=workers)
""", category="input", auto=True, transform=tr.threads, predicts_at_least=True,
                  needs="2 or more CPUs, torch's thread count and a map-style dataset")


class BatchedFetch(Fix):
    """Fetch a whole batch with one ``dataset[indices]`` call: per-sample ``__getitem__`` and
    ``default_collate`` stacking the rows cost more than the training step on big batches
    of in-memory tensor rows."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.get("dataloader_dataset_tensor_indexable") is True

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("dataloader_dataset_tensor_indexable") is False:
            return ("the dataset cannot hand over a batch in one indexing call (not a plain "
                    "TensorDataset with the default collate)")
        return None

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        bs = spec.batch_size if spec is not None and spec.batch_size else "batch_size"
        order = ("RandomSampler(dataset)" if spec is None or spec.shuffle
                 else "SequentialSampler(dataset)")
        drop = spec.drop_last if spec is not None else False
        before = (loader_call(spec, prefix="loader = ") if spec is not None
                  else "loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, ...)")
        rest = ""
        if spec is not None:
            extra = [f"num_workers={spec.num_workers}"] if spec.num_workers else []
            extra += ["pin_memory=True"] if spec.pin_memory else []
            rest = "".join(f", {e}" for e in extra)
        else:
            rest = ", ..."
        return "\n".join([
            "# before: one __getitem__ per sample, then default_collate stacks the rows",
            before,
            "# after: one indexing call per batch (a TensorDataset takes a list of indices);",
            "# the batches are the same tensors. For your own Dataset, define",
            "# __getitems__(self, indices) returning the batch's samples in one go instead.",
            "from torch.utils.data import BatchSampler, " + order.split("(")[0],
            "loader = DataLoader(dataset, batch_size=None, sampler=BatchSampler(",
            f"    {order}, batch_size={bs}, drop_last={drop}){rest})"])


FASTER_INPUT = Fix("faster_input", "Make each sample cheaper to produce", """
# before: decode + augment every sample on the CPU, every epoch
class DS(Dataset):
    def __getitem__(self, i):
        return augment(decode(read(self.paths[i])))
# after: decode once and cache (or decode on the GPU, e.g. NVIDIA DALI / torchvision.io
# decode_jpeg(device="cuda")); keep only cheap random augmentation per step
class DS(Dataset):
    def __init__(self, paths):
        self.cache = [decode(read(p)) for p in paths]   # or a memory-mapped array on fast storage
    def __getitem__(self, i):
        return augment(self.cache[i])
""", category="input")

BATCHED_FETCH = BatchedFetch(
    "batched_fetch", "Fetch each batch with one indexing call", category="input", auto=True,
    change={"batched_fetch": True}, transform=tr.batched_fetch,
    needs="a TensorDataset-like dataset (rows indexed by a list of indices), torch's default "
          "collate and the DataLoader's own batch_size")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (NUM_WORKERS, NUM_WORKERS_CAP, PERSISTENT_WORKERS, PREFETCH_FACTOR, FASTER_INPUT,
         THREADS, BATCHED_FETCH)
