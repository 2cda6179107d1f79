"""Config fixes: settings of the optimizer, zero_grad, cuDNN, the garbage collector and the
native thread pools (the training process's, each DataLoader worker's).

The models: a foreach/fused optimizer collapses per-parameter launches into a few
multi-tensor ones (its kernels' total time stays); ``set_to_none`` removes the gradient
fills; ``gc.freeze()`` removes the full collections' pauses the session timed on the
training thread. cuDNN's autotuned algorithms are not in the trace: no prediction.

In a trial: the rebuilt optimizer's ``fused``/``foreach`` flags, zero_grad's
``set_to_none``, and two process-wide settings put back after it: cudnn.benchmark, and
``gc.collect(); gc.freeze()`` (never undoing a freeze the user made).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from ...metrics.context import WORKER_POOL_CPUS
from ...stepmodel.calibration import (
    ADAM_KERNELS_PER_PARAM,
    FOREACH_MIN_LAUNCHES,
    FOREACH_PARAMS_PER_LAUNCH,
)
from ...stepmodel.graph import DEVICE_TASKS, Graph, Tag, TaskKind
from ...stepmodel.host import loading_ms, loading_pauses, per_step
from ...stepmodel.prediction import device_only
from ...stepmodel.transforms import transform
from ..code import GENERIC_NOTE, Setup, assign, loader_call, optimizer_call
from ..config import TrainConfig
from ..realise import Kwargs, Realisation, StepParts
from ..unit import Facts, Fix, cannot_tell
from .precision import convolutions


@transform()
def foreach_optimizer(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Per-parameter launches collapse into a few multi-tensor ones: the optimizer's host
    work shrinks by launches-after / launches-before (parameters counted from the launches
    at :data:`ADAM_KERNELS_PER_PARAM`, :data:`FOREACH_PARAMS_PER_LAUNCH` of them a launch);
    its kernels' total time stays."""
    opt = (g.tag & int(Tag.OPTIMIZER)) > 0
    launches = opt & g.is_kind(TaskKind.LAUNCH)
    n = float(per_step(g, launches, np.ones(len(g))).mean())
    if n < 2 * FOREACH_PARAMS_PER_LAUNCH / 8:
        return "the optimizer already launches few kernels"
    params = n / ADAM_KERNELS_PER_PARAM
    after = max(FOREACH_MIN_LAUNCHES,
                math.ceil(params / FOREACH_PARAMS_PER_LAUNCH) * ADAM_KERNELS_PER_PARAM)
    if after >= n:
        return "the optimizer already launches few kernels"
    host = opt & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH) & (g.res == g.main)
    return g.scale(host, after / n)


@transform()
def set_to_none(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """zero_grad(set_to_none=True): the fills go, host and device."""
    zero = (g.tag & int(Tag.ZERO_GRAD)) > 0
    work = zero & g.is_kind(TaskKind.LAUNCH, *DEVICE_TASKS)
    if not work.any():
        return "optimizer.zero_grad() launches no fills"
    out = g.copy()
    out.dur[zero & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH)] = 0.0
    return out.remove_tasks(zero & g.is_kind(*DEVICE_TASKS))


@transform()
def remove_gc_pauses(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """``gc.freeze()``: the full (generation 2) collections' pauses on the training thread
    go. A full collection walks every object the collector tracks, and after the freeze
    those are out of its reach; a young collection walks only the objects made since the
    last one, which the freeze does not change, so its pauses stay. The session timed the
    pauses per step (``gc_pause_full_ms``, a mean over the unprofiled steps;
    ``gc_pause_ms`` for all of them where a capture did not split them) and which of them
    fell inside the loop's wait for a batch (``gc_pause_full_loader_ms``,
    ``gc_pause_loader_ms``). Those come off the in-process loading, the share of it the
    clock measured them to be, and the loading then holds none (``Graph.loading_gc``; after
    a batched fetch it holds none already). The others come off the main thread's own work
    (ops, launches), in proportion (a pause lands on whichever allocation trips it)."""
    full = facts.gc_pause_full_ms
    pause = full if full is not None else facts.gc_pause_ms
    if pause is None:
        return cannot_tell("the collector's pauses were not timed (a live capture times "
                "them)")
    if pause <= 0:
        return ("the collector made no full collection on the training thread"
                if full is not None else "the collector did not pause the training thread")
    main = g.res == g.main
    fetch = main & g.is_kind(TaskKind.FETCH)
    out, rest = g, pause
    own_kinds: tuple[TaskKind, ...] = (TaskKind.HOST, TaskKind.LAUNCH, TaskKind.FETCH)
    inside = loading_pauses(facts)
    if inside is not None and fetch.any():
        made = loading_ms(facts) or 0.0
        if made > 0 and inside > 0 and g.loading_gc > 0:
            out = out.scale(fetch, 1.0 - g.loading_gc * inside / made)
            out.loading_gc = 0.0
        rest, own_kinds = pause - inside, (TaskKind.HOST, TaskKind.LAUNCH)
    host = main & out.is_kind(*own_kinds)
    own = float(per_step(out, host, out.dur).mean()) / 1e3 if out.n_steps else 0.0
    if rest > 0 and own > 0:
        out = out.scale(host, max(0.0, own - rest) / own)
    return out


class ForeachOptimizer(Fix):
    """Multi-tensor kernels: fused first where CUDA supports it, else foreach."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return not config.optimizer_fused and config.optimizer_foreach is not True

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        out = []
        if facts.on_cuda and facts.fused_supported:
            out.append(config.replace(optimizer_fused=True, optimizer_foreach=None))
        out.append(config.replace(optimizer_foreach=True, optimizer_fused=None))
        return out

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        f = Facts.from_metrics(metrics)
        if f.optimizer_fused is True:
            return "the optimizer is already fused"
        if f.optimizer_foreach is True:
            return "the optimizer already runs foreach (multi-tensor) kernels"
        return None

    def render(self, setup: Setup | None) -> str:
        o = setup.optimizer if setup is not None else None
        head = "# before: one small kernel per parameter per operation"
        if o is None:
            head += f"\n# {GENERIC_NOTE}"
            before = optimizer_call(None, foreach=False)
        elif not o.args_known:  # its class from a trace: what it was called with is not known
            head += f"\n# {GENERIC_NOTE}"
            before = optimizer_call(o)
        else:
            before = optimizer_call(o, foreach=o.foreach, fused=o.fused)
        return "\n".join([head, before, "# after: a few multi-tensor kernels for all "
                          "parameters", optimizer_call(o, fused=True) + "   # or foreach=True"])


class CudnnBenchmark(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.on_cuda and facts.convolutions

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if Facts.from_metrics(metrics).cudnn_benchmark is True:
            return "torch.backends.cudnn.benchmark is already True"
        return None


FOREACH_OPTIMIZER = ForeachOptimizer(
    "foreach_optimizer", "Multi-tensor (foreach) or fused optimizer", category="config",
    transform=foreach_optimizer, fields=("optimizer_fused", "optimizer_foreach"),
    auto=True,
    needs="an optimizer not already foreach or fused")

SET_TO_NONE = Fix("set_to_none", "zero_grad(set_to_none=True)", """
# before: a fill kernel per parameter every step
optimizer.zero_grad(set_to_none=False)
# after: gradients are simply dropped (the default since PyTorch 2.0)
optimizer.zero_grad(set_to_none=True)
""", category="config", auto=True, change={"zero_grad_set_to_none": True},
    transform=set_to_none)

CUDNN_BENCHMARK = CudnnBenchmark("cudnn_benchmark", "Let cuDNN pick the fastest convolution "
                                 "algorithm", """
# before: cuDNN uses a heuristic algorithm choice
# after: benchmarks once per input shape, then reuses the fastest (fixed input shapes)
torch.backends.cudnn.benchmark = True
""", category="config", auto=True, change={"cudnn_benchmark": True},
    transform=device_only(cannot_tell("cuDNN's autotuned algorithms are not in the trace"),
                          convolutions, "the convolutions"),
    needs="a convolution net on a CUDA device")



class GcFreeze(Fix):
    """``gc.freeze()`` once everything the run keeps exists: full collections skip it."""

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        n = Facts.from_metrics(metrics).gc_frozen_objects
        return (f"gc.freeze() is in place already ({n:,} objects frozen)"
                if n is not None and n > 0 else None)


GC_FREEZE = GcFreeze("gc_freeze", "Freeze what the process holds before the loop (gc.freeze)", """
# before: every full collection walks every object the process holds (torch's included)
for batch in batches:  # the training loop, with a DataLoader or without
    ...
# after: built the model, dataset and loader? collect once, then freeze what is left:
# later collections skip those objects (gc.unfreeze() undoes it)
import gc
gc.collect()
gc.freeze()
for batch in batches:
    ...
""", category="config", auto=True, change={"gc_freeze": True}, transform=remove_gc_pauses,
    needs="a live capture that timed the collector's pauses")

class ThreadPools(Fix):
    """The training process's other native thread pool (numpy's BLAS, another OpenMP
    runtime) held to one thread, torch's own as it is: advice (no model of the turns two
    pools take; the user measures it)."""

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        n = metrics.get("thread_pool_beside_torch_threads")
        return ("no thread pool beside torch's has more than one thread"
                if isinstance(n, int) and n <= 1 else None)

    def for_pool(self, prefix: str) -> str:
        """The code with the pool the capture found (its library prefix)."""
        return self.code.replace('"libscipy_openblas"', repr(prefix).replace("'", '"'))


THREAD_POOLS = ThreadPools("thread_pools", "Hold the other thread pool in the training process "
                           "to one thread (threadpoolctl)", """
# before: numpy's BLAS (or another library's OpenMP) keeps a thread per CPU beside torch's
# own; both pools spin while they wait for work and take turns on the same CPUs
for batch in batches:  # the training loop
    ...
# after: that pool held to one thread in this process, torch's threads as they are
# (or OPENBLAS_NUM_THREADS=1 in the environment, set before numpy is imported)
from threadpoolctl import threadpool_limits
threadpool_limits(limits={"libscipy_openblas": 1})  # the pool's library, as the report names it
for batch in batches:
    ...
""", category="config", needs="a thread pool beside torch's with 2 or more threads")


class WorkerPools(Fix):
    """Each DataLoader worker's native thread pools held to one thread as it starts (its
    ``worker_init_fn``; the user's own one still runs): advice (the step model counts a
    worker as one thread; the user measures it)."""

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        cpus = metrics.get("input_worker_batch_cpus")
        return (f"a worker's batch kept {cpus:.1f} CPUs busy: no pool works beside its thread"
                if isinstance(cpus, float) and cpus < WORKER_POOL_CPUS else None)

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        theirs = spec.worker_init_fn if spec is not None else None
        body = ["    threadpool_limits(1)  # BLAS and OpenMP pools (OpenCV: cv2.setNumThreads(1))"]
        if theirs:
            body.append(f"    {theirs}(worker_id)  # your own, as before")
        return "\n".join([
            "# before: numpy's BLAS (or OpenMP, OpenCV) starts a thread per CPU in every worker;",
            "# the workers' threads outnumber the CPUs and spin while they wait for work",
            loader_call(spec, prefix=assign(spec)),
            "# after: each worker holds its pools to one thread as it starts",
            "from threadpoolctl import threadpool_limits  # pip install threadpoolctl",
            "",
            "",
            "def one_thread(worker_id):",
            *body,
            "",
            "",
            loader_call(spec, override={"worker_init_fn": "one_thread"}, prefix=assign(spec))])


WORKER_POOLS = WorkerPools("worker_pools", "One thread for each DataLoader worker's native pools "
                           "(worker_init_fn)", category="config",
                           needs="DataLoader workers whose batches keep a thread pool busy")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (FOREACH_OPTIMIZER, SET_TO_NONE, CUDNN_BENCHMARK, GC_FREEZE, THREAD_POOLS, WORKER_POOLS)


# ---------------------------------------------------------------------- in a trial
def _kernels(cfg: TrainConfig, flags: Kwargs, accepted: Collection[str]) -> None:
    """The optimizer's fused or foreach flag, where its class takes it (one on turns the
    other to torch's default)."""
    if cfg.optimizer_fused is not None and "fused" in accepted:
        flags["fused"] = cfg.optimizer_fused
        if cfg.optimizer_fused:
            flags["foreach"] = None
    if cfg.optimizer_foreach is not None and "foreach" in accepted:
        flags["foreach"] = cfg.optimizer_foreach
        if cfg.optimizer_foreach:
            flags["fused"] = None


def _zero_grad(cfg: TrainConfig, parts: StepParts) -> None:
    parts.zero_grad["set_to_none"] = cfg.zero_grad_set_to_none


def _cudnn_benchmark(cfg: TrainConfig, model: Any, optimizer: Any) -> Callable[[], None]:
    """cudnn.benchmark as the config says for the trial; the undo puts it back."""
    import torch

    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = cfg.cudnn_benchmark

    def undo() -> None:
        torch.backends.cudnn.benchmark = before
    return undo


def _gc_freeze(cfg: TrainConfig, model: Any, optimizer: Any) -> Callable[[], None] | None:
    """Collect, then freeze what is left, where the config asks and nothing is frozen yet
    (a freeze of the user's own is never undone); the undo unfreezes."""
    if not cfg.gc_freeze or gc.get_freeze_count() != 0:
        return None
    gc.collect()
    gc.freeze()
    return gc.unfreeze


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("optimizer_fused", "optimizer_foreach"), optimizer=_kernels),
                Realisation(("zero_grad_set_to_none",), step=_zero_grad),
                Realisation(("cudnn_benchmark",), process=_cudnn_benchmark),
                Realisation(("gc_freeze",), process=_gc_freeze))
