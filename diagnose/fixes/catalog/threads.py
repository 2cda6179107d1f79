"""The threads split: torch's intra-op threads and the DataLoader's workers share the CPUs.

The model: the main process's own work on ``t`` threads takes as much longer as the
forward and backward the session timed on one thread and on torch's threads says
(:func:`~diagnose.stepmodel.host.thread_scale`, Amdahl); the workers' side is the workers'
transform (:mod:`.workers`), run on the CPUs as the new threads leave them: a new count, or
the same busy workers where they and torch's threads oversubscribe the CPUs now (the
contention the run has is freed and the new threads' taken). Without that
timing, the process's measured CPU less its in-process loading is read as the threads its
ops kept busy, each op taken to scale with them (an idle-spinning pool counts as busy), and
the prediction is a bound. A trial sets torch's thread count (``torch.set_num_threads``)
for its run and puts it back after.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ...stepmodel.calibration import THREADS_LOADING_MAX
from ...stepmodel.graph import Graph, TaskKind
from ...stepmodel.host import (
    busy_threads,
    free_contention,
    main_host_ms,
    per_step,
    thread_scale,
)
from ...stepmodel.transforms import transform
from ..code import AFFINITY, Setup, assign, loader_call
from ..config import TrainConfig
from ..realise import Realisation
from ..unit import HOST_CPUS, Facts, Fix, cannot_tell
from .workers import WORKER_ASSUMES, epoch_costs, epoch_left_out
from .workers import num_workers as workers_transform


@transform(sets={"num_workers": ("dataloader_num_workers",),
                 "intra_op_threads": ("torch_num_threads",)},
           moves_cpu=frozenset({"num_workers", "intra_op_threads"}), outside=epoch_costs,
           assumes={"threads_one_thread_ratio": "torch's ops scale fully with their threads",
                    **WORKER_ASSUMES},
           outside_left=epoch_left_out)
def threads(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """torch on ``intra_op_threads`` threads beside ``num_workers`` workers (module doc).
    The share of the main thread's work the timed forward and backward stand for is taken
    of that work freed of the contention the run has now (the timing was made alone). The
    CPU bound is the Predictor's (``moves_cpu``)."""
    now = facts.torch_num_threads
    t = change.get("intra_op_threads")
    if now is None or not isinstance(t, int):
        return cannot_tell("torch's thread count is not known (a live capture records it)")
    scale = thread_scale(facts, t, main_host_ms(free_contention(g, facts)))
    if scale is None:
        used: float = now
        pct = facts.proc_cpu_mean_pct
        step = float(g.steps_measured.mean()) if g.n_steps else 0.0
        if pct is not None and step > 0:
            loading = float(per_step(g, g.is_kind(TaskKind.FETCH), g.dur).mean()) / step
            if loading < THREADS_LOADING_MAX:
                used = min(now, max(1.0, (pct / 100 - loading) / (1 - loading)))
        scale = max(1.0, used / t)
    # the main thread's work on its new threads first: the workers' side then shares the
    # CPUs with it as it will run
    out = g.scale((g.res == g.main) & g.is_kind(TaskKind.HOST), scale)
    # the workers' side: a new count, or the same busy workers beside the new threads where
    # the two oversubscribe the CPUs now (the contention the run has changes with the threads)
    now_w, n = facts.dataloader_num_workers, facts.cpu_count
    if "num_workers" not in change and now_w and n and not facts.worker_batch_waits and (
            busy_threads(facts) + min(now_w, n) > n):
        change = {**change, "num_workers": now_w}
    if "num_workers" in change:
        made = workers_transform(out, change, facts)
        if isinstance(made, str) and not made.startswith(cannot_tell("nothing changes")):
            return made
        out = out if isinstance(made, str) else made
    return out


class Threads(Fix):
    """torch's intra-op threads and the loader's workers share the CPUs: split them.

    Candidates: each worker count ``w`` of 1, 2, 4, ... up to half the CPUs (and the
    current count) with torch on the ``CPUs - w`` CPUs left, and as many workers as CPUs
    with torch on one thread (where the main process mostly waits for its batches, its
    second thread only competes with them); never the current split. Autofix measures them
    in the order of their predictions."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        n = facts.cpu_count
        return (n is not None and n >= 2 and facts.torch_num_threads is not None
                and facts.iterable_dataset is not True)

    def unknown(self, facts: Facts) -> str | None:
        return (f"{HOST_CPUS} or torch's thread count" if facts.cpu_count is None
                or facts.torch_num_threads is None else None)

    def predict(self, predictor: Any, config: TrainConfig, facts: Facts) -> Any:
        """A point prediction where the session timed the forward on one thread; without
        that, the thread pool's CPU is read as work and the prediction is a bound."""
        bound = thread_scale(facts, 1) is None
        return dataclasses.replace(self, predicts_at_least=bound).predict_as_fix(
            predictor, config, facts)

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        n, threads = facts.cpu_count, facts.torch_num_threads
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
        f = Facts.from_metrics(metrics)
        threads, nw, n = f.torch_num_threads, f.dataloader_num_workers, f.cpu_count
        if threads is None or n is None:
            return None
        # a split that leaves torch's threads as they are changes the workers alone: that
        # is num_workers' fix (torch on one thread of 2 CPUs: every split keeps it there)
        if n >= 2 and nw is not None and not any(c.intra_op_threads != threads for c in self.search(
                TrainConfig(num_workers=nw), f)):
            return (f"torch already runs on {threads} thread{'s' if threads > 1 else ''} "
                    f"and no split of the {n} CPUs changes that: what is left is the "
                    "workers' count")
        if nw is None or nw < 1 or threads + nw > n:
            return None  # no workers yet: nothing is split, the fix would add one
        return f"torch's {threads} threads and {nw} workers already fit the {n} CPUs"

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        if spec is None:
            return self.code  # the generic template
        n = spec.num_workers or 1
        before = loader_call(spec, prefix=assign(spec))
        after = loader_call(spec, spec.config().replace(num_workers=n), show=["num_workers"],
                            prefix=assign(spec))
        who = (f"the DataLoader's {n} worker{'s' if n > 1 else ''}" if spec.num_workers
               else "the loading done in the training process")
        return "\n".join([
            f"# before: torch's intra-op threads (one per CPU) compete with {who}", before,
            "# after: the workers keep their CPUs, torch's math gets the rest (measure "
            "both ways)", f"torch.set_num_threads(max(1, {AFFINITY} - {n}))", after])


THREADS = Threads("threads", "Split the CPUs between torch's threads and the loader's workers",
                  f"""
# before: torch's intra-op threads (one per CPU) compete with the DataLoader's workers
loader = DataLoader(dataset, ..., num_workers=workers)
# after: the workers keep their CPUs, torch's math gets the rest (measure both ways)
torch.set_num_threads(max(1, {AFFINITY} - workers))
loader = DataLoader(dataset, ..., num_workers=workers)
""", category="input", auto=True, transform=threads, predicts_at_least=True,
                  fields=("num_workers", "intra_op_threads"),
                  needs="2 or more CPUs, torch's thread count and a map-style dataset")

class TorchThreads(Fix):
    """torch's intra-op threads held to the CPUs the process can get (CF008, CF009): the
    whole CPUs other processes leave, and no more than its cgroup's CPU quota (at least
    one, fewer than now). Not predicted: the step model does not replay a thread pool
    taking turns with other processes or a quota's pauses; CF008 rests on the thread
    timing after the loop beside the same load, CF009 on the quota and the loop's wait,
    and autofix measures it."""

    def count(self, facts: Facts) -> int | None:
        """The thread count it sets: the whole CPUs left by the other processes and the
        job's own DataLoader workers, within the quota; None where torch runs on one
        thread, or neither the other processes' CPUs nor a quota under the CPUs is known."""
        n, t, others = facts.cpu_count, facts.torch_num_threads, facts.step_others_cpus_unprofiled
        quota, workers = facts.cpu_quota_cpus, facts.dataloader_num_workers or 0
        if n is None or t is None or t < 2:
            return None
        limits = ([n - others - workers] if others is not None else []) + (
            [quota - workers] if quota is not None and quota < n else [])
        return max(1, min(t - 1, int(min(limits)))) if limits else None

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return self.count(facts) is not None

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        """The count the CPUs left give, then one thread (what the rules' timing compared
        torch's threads with), where that is another."""
        k = self.count(facts)
        return [] if k is None else [config.replace(intra_op_threads=x) for x in dict.fromkeys((k, 1))]

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        t = Facts.from_metrics(metrics).torch_num_threads
        return "torch already runs on one thread" if t is not None and t < 2 else None

    def for_run(self, metrics: Mapping[str, Any]) -> str | None:
        """The code with the run's own count (None: not known)."""
        k = self.count(Facts.from_metrics(metrics))
        return None if k is None else self.code.replace(
            "torch.set_num_threads(1)", f"torch.set_num_threads({k})")


TORCH_THREADS = TorchThreads("torch_threads", "Hold torch's threads to the CPUs the process can "
                             "get (torch.set_num_threads)", """
# before: torch starts a thread per CPU; other processes hold some of those CPUs (or the
# container's CPU quota allows fewer), and every parallel op waits until each of its
# threads has had a CPU
# after, once before the training loop: as many threads as the whole CPUs left to the
# process (set it again where the machine's load or the quota changes)
torch.set_num_threads(1)
""", category="config", auto=True, fields=("intra_op_threads",),
                             needs="torch on 2 or more threads, and the CPUs other processes held "
                                   "(a live capture's clock) or a CPU quota under the CPUs",
                             unmodelled="the step model does not replay torch's threads taking "
                                        "turns with other processes, or a CPU quota's pauses "
                                        "(the finding's own numbers are the thread timing "
                                        "beside the same load; autofix measures it)")

#: The registered units of this module (a test checks that each one declared is here).
FIXES = (THREADS, TORCH_THREADS)


def _set_threads(cfg: TrainConfig, model: Any, optimizer: Any) -> Callable[[], None] | None:
    """torch on ``intra_op_threads`` threads for the trial (None: as it is); the undo."""
    if cfg.intra_op_threads is None:
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(cfg.intra_op_threads)
    return lambda: torch.set_num_threads(before)


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("intra_op_threads",), process=_set_threads),)
