"""A TrainConfig made real: the user's step run with a rebuilt DataLoader and optimizer.

A :class:`Trial` never touches the user's DataLoader or optimizer objects: it
builds a new DataLoader from the original's dataset, collate_fn, worker_init_fn,
timeout and multiprocessing context (with a copy of its generator), and a new
optimizer of the same class over the same parameter groups and hyper-parameters,
loaded with a deep copy of the original's state. The model is the user's own (its
training is what is timed); :mod:`diagnose.autofix.state` puts it back afterwards.

What each config field changes, its realisation says
(:data:`diagnose.fixes.REALISATIONS`, defined beside the fixes that change the field;
see :mod:`diagnose.fixes.realise`): the new DataLoader's batching and keyword
arguments, the new optimizer's flags, the parts of the step, and process-wide
settings. The trial applies them all and knows no field by name. Process-wide
settings are set on entering a trial's ``with`` block and undone on leaving it (last
set first undone, also after an error), so interleaved trials never see each other's
settings. Leaving the block also shuts the DataLoader's worker processes down.

Timing, as the user's loop runs
-------------------------------
A training loop does not wait for the GPU after every step: the host queues the
next step's copies and kernels while the device still runs the last ones, and
that overlap is what ``pin_memory`` + ``non_blocking`` (or removing a sync)
buys. So a trial never synchronises inside a step. Timed steps come in
*blocks* of ``block`` steps: the device queue is drained once before the first
block (after the warmup) and once at the end of every block, and each block's
time is taken from that drain to the next. The per-step time of a block is its
time / ``block``. A block is long enough (the runner uses at least 4 steps and
2 x the DataLoader workers) that the one drain at its end, which the user's loop
pays at most once per many steps, is a small share of it, while the steps inside
it overlap as they do in real training. On the CPU the drain is a no-op.

An epoch's start is the loop's time too: a DataLoader with worker processes (not
persistent) starts them again at every epoch and the loop waits for the first
batch, and shuts them down at its end. Each round runs on a fresh iterator, whose
start is timed in its warmup; the timed steps carry its share, (start + end) /
``len(loader)`` a step, the end as the trial last ran into one
(:meth:`Trial.epoch_share_s`), unless they began an epoch themselves. So fewer workers,
or persistent ones, are measured as the loop runs them over whole epochs.

A short epoch with workers (at most :data:`WHOLE_EPOCH_STEPS` steps) is timed whole
instead, one value a round (:meth:`Trial.run`): its workers start, make its batches
beside the steps, finish them early and go idle while the last steps take them from the
queue, and a few steps a round would fall on one part of that cycle.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..capture.loader_shim import shut_down
from ..capture.runinfo import is_oom
from ..errors import DiagnoseError
from ..fixes import REALISATIONS, CannotRealise, TrainConfig
from ..fixes.realise import loader_kwargs, optimizer_flags, step_parts


class TuneError(DiagnoseError):
    """autofix cannot run this workload (one line saying what to change)."""


@dataclass
class Workload:
    """The user's objects, read-only: model, DataLoader, optimizer and the loss."""

    model: Any
    loader: Any
    optimizer: Any
    loss_fn: Callable[[Any, Any], Any] | None
    step_fn: Callable[[Any, Any], Any] | None
    device: Any

    @classmethod
    def from_user(cls, model: Any, loader: Any, optimizer: Any, *, loss_fn: Any = None,
                  step_fn: Any = None, device: Any = None) -> Workload:
        import torch
        from torch.utils.data import DataLoader

        if not isinstance(model, torch.nn.Module):
            several = isinstance(model, list | tuple | dict)
            raise TuneError(
                f"autofix needs one torch.nn.Module model (got {type(model).__name__})"
                + (": a loop with several models or optimizers (a GAN) is diagnosed, not "
                   "autofixed; time its fixes by hand (docs/autofix.md)" if several else ""))
        params = list(model.parameters())
        if not params:
            raise TuneError("autofix needs a model with parameters to train")
        if not isinstance(loader, DataLoader):
            raise TuneError(
                "autofix rebuilds the DataLoader: pass a torch DataLoader "
                f"(got {type(loader).__name__})"
            )
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TuneError("autofix drives the steps itself: pass optimizer=<your "
                            "torch.optim optimizer> to diagnose(...) or autofix(...)")
        if (loss_fn is None) == (step_fn is None):
            raise TuneError("autofix needs exactly one of loss_fn=(output, target) -> loss "
                            "or step_fn=(model, batch) -> loss, passed to diagnose(...) or "
                            "autofix(...)")
        dev = torch.device(device) if device is not None else params[0].device
        return cls(model, loader, optimizer, loss_fn, step_fn, dev)

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.on_cuda:
            import torch

            torch.cuda.synchronize(self.device)


# ---------------------------------------------------------------------- building the pieces
@contextlib.contextmanager
def _realising() -> Iterator[None]:
    """A realisation that cannot make its field real is autofix's error (one line)."""
    try:
        yield
    except CannotRealise as e:
        raise TuneError(str(e)) from None


def _clone_generator(g: Any) -> Any:
    if g is None:
        return None
    import torch

    c = torch.Generator(device=g.device)
    c.set_state(g.get_state())
    return c


def build_loader(orig: Any, cfg: TrainConfig) -> Any:
    """A new DataLoader over the original's data with ``cfg``'s loader settings: the
    original's own arguments, then the realisations' batching and keyword arguments."""
    from torch.utils.data import DataLoader

    kw: dict[str, Any] = {
        "collate_fn": orig.collate_fn,
        "timeout": orig.timeout,
        "worker_init_fn": orig.worker_init_fn,
        "multiprocessing_context": orig.multiprocessing_context,
        "generator": _clone_generator(orig.generator),
    }
    if getattr(orig, "in_order", True) is not True:
        kw["in_order"] = orig.in_order
    if getattr(orig, "pin_memory_device", ""):
        kw["pin_memory_device"] = orig.pin_memory_device
    with _realising():
        kw.update(loader_kwargs(REALISATIONS, cfg, orig))
    return DataLoader(orig.dataset, **kw)


def build_optimizer(orig: Any, cfg: TrainConfig) -> Any:
    """Same class, parameter groups, hyper-parameters and (copied) state; the flags the
    realisations give for ``cfg`` (its kernels), on the defaults and every group."""
    cls = type(orig)
    accepted: Mapping[str, inspect.Parameter]
    try:
        accepted = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - C-implemented optimizers
        accepted = {}
    defaults = {k: v for k, v in orig.defaults.items() if k in accepted}
    groups = [{**g, "params": list(g["params"])} for g in orig.param_groups]
    state = copy.deepcopy(orig.state_dict())
    with _realising():
        flags = optimizer_flags(REALISATIONS, cfg, accepted)
    for d in (defaults, *groups, *state["param_groups"]):
        d.update({k: v for k, v in flags.items() if k in d or d is defaults})
    try:
        new = cls(groups, **defaults)
        new.load_state_dict(state)
    except Exception as e:
        raise TuneError(f"cannot rebuild the optimizer {cls.__name__} with "
                        f"{flags or 'its settings'}: {type(e).__name__}: {e}") from e
    return new


def to_device(batch: Any, device: Any, non_blocking: bool = False,
              inputs: Iterable[Callable[[Any], Any]] = ()) -> Any:
    """Tensors of a (nested) batch on ``device``, each then through ``inputs`` in turn (a
    realisation's layout of the step's inputs)."""
    import torch

    hooks = tuple(inputs)
    if isinstance(batch, torch.Tensor):
        t = batch.to(device, non_blocking=non_blocking)
        for h in hooks:
            t = h(t)
        return t
    if isinstance(batch, tuple | list):
        out = [to_device(b, device, non_blocking, hooks) for b in batch]
        return type(batch)(out) if isinstance(batch, list) else tuple(out)
    if isinstance(batch, Mapping):  # a dict, or a BatchEncoding: its own type where it can
        moved = {k: to_device(v, device, non_blocking, hooks) for k, v in batch.items()}
        try:
            made: Any = type(batch)
            return moved if made is dict else made(moved)
        except Exception:
            return moved
    return batch


def release_memory(w: Workload) -> None:
    """After an out-of-memory error: drop gradients and cached blocks."""
    for p in w.model.parameters():
        p.grad = None
    gc.collect()
    if w.on_cuda:
        import torch

        torch.cuda.empty_cache()


#: a loader with workers whose epoch is at most this many optimizer steps is timed in whole
#: epochs (the module doc): a round's timed steps are about 8-16, so an epoch of a few
#: rounds' steps has a cycle those steps would sample by their phase
WHOLE_EPOCH_STEPS = 64


def epoch_steps_of(loader: Any, micro_batches: int) -> int | None:
    """The optimizer steps of one epoch of ``loader`` where a trial times it whole: a loader
    with workers (persistent or not) of at most :data:`WHOLE_EPOCH_STEPS` steps of
    ``micro_batches`` batches each; else None."""
    if loader is None or not loader.num_workers:
        return None
    try:
        n = len(loader) // max(1, micro_batches)
    except TypeError:  # an iterable dataset: no length
        return None
    return n if 0 < n <= WHOLE_EPOCH_STEPS else None


# ---------------------------------------------------------------------- the trial
class Trial:
    """One config, realised. Use as ``with trial: times = trial.run(warmup, n)``."""

    def __init__(self, w: Workload, cfg: TrainConfig, optimizer: Any = None) -> None:
        """``optimizer``: a rebuilt optimizer to share between trials with the same optimizer
        settings (each copy of the state costs as much device memory as the state)."""
        self.w, self.cfg = w, cfg
        self.loader = build_loader(w.loader, cfg)
        self.optimizer = optimizer if optimizer is not None else build_optimizer(w.optimizer, cfg)
        with _realising():
            self.parts = step_parts(REALISATIONS, cfg, w.model, w.device)
        self.scaler = self.parts.scaler
        self.net = self.parts.model
        self.first_step_s: float | None = None  # includes a compiled model's compile time
        # an epoch's start as the loop waits for it: iter() and the first batch (s), of the
        # last fresh iterator; epochs begun inside the timed blocks of the last timing
        self.start_s: float | None = None
        # an epoch's end as the loop waits for it: the workers shut down and joined (s),
        # where this trial ran into one
        self.stop_s: float | None = None
        self.restarts = 0
        self.timed_restarts = 0
        self._it: Any = None
        # the undos of the process-wide settings this trial made (run at exit)
        self._undo = contextlib.ExitStack()

    # ------------------------------------------------------------------ enter / exit
    def __enter__(self) -> Trial:
        """Each realisation's process-wide setting (its undo kept for the exit)."""
        try:
            with _realising():
                for r in REALISATIONS:
                    if r.process is not None:
                        undo = r.process(self.cfg, self.w.model, self.optimizer)
                        if undo is not None:
                            self._undo.callback(undo)
        except BaseException:
            self._undo.close()
            raise
        self.optimizer.zero_grad(set_to_none=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        finally:
            self._undo.close()  # last set, first undone; each runs even if one fails
            self._undo = contextlib.ExitStack()

    def close(self) -> None:
        """Shut the worker processes down (also persistent ones)."""
        it, self._it = self._it, None
        shut_down(self.loader, it)

    # ------------------------------------------------------------------ steps
    def next_batch(self) -> Any:
        if self._it is None:
            t0 = time.perf_counter()
            self._it = iter(self.loader)
            batch = self._first()
            self.start_s = time.perf_counter() - t0
            return batch
        t0 = time.perf_counter()
        try:
            return next(self._it)
        except StopIteration:  # a new epoch, as a training loop would start one
            # the next() that ended the epoch shut the workers down and joined them
            self.stop_s = time.perf_counter() - t0
            self.restarts += 1
            self._it = iter(self.loader)
            return self._first()

    def _first(self) -> Any:
        """A new epoch's first batch; an epoch with none is one line, not StopIteration."""
        assert self._it is not None
        try:
            return next(self._it)
        except StopIteration:
            raise TuneError("the loader gives no batches (an empty dataset, or drop_last=True "
                            "with fewer samples than a batch)") from None

    def epoch_share_s(self) -> float:
        """An epoch's start and end per optimizer step (s) that the last timing missed: a
        loader with worker processes (not persistent) starts them at every epoch, and the
        loop waits for them and the first batch (``start_s``, timed on the round's fresh
        iterator, in its warmup), and shuts them down at its end (``stop_s``, where this
        trial ran into an epoch's end: rounds are shut down mid-epoch, which waits for
        batches in flight); once per ``len(loader)`` batches. Timed blocks that began an
        epoch themselves hold both already (a short epoch: nothing is added). 0 without
        workers, with persistent ones (they start once a run), or a loader without a
        length."""
        loader = self.loader
        if (not loader.num_workers or loader.persistent_workers or self.start_s is None
                or self.timed_restarts):
            return 0.0
        try:
            n = len(loader)
        except TypeError:
            return 0.0
        return ((self.start_s + (self.stop_s or 0.0)) * self.parts.micro_batches / n
                if n > 0 else 0.0)

    def _loss(self, batch: Any) -> Any:
        w = self.w
        if w.step_fn is not None:
            return w.step_fn(self.net, batch)
        if not (isinstance(batch, tuple | list) and len(batch) == 2):
            raise TuneError("with loss_fn, batches must be (inputs, target) pairs; "
                            "pass step_fn=(model, batch) -> loss for other batches")
        x, y = batch
        return w.loss_fn(self.net(x), y)  # type: ignore[misc]

    def _place(self, batch: Any) -> Any:
        """A batch on the device, as the step's parts say (the copy, the inputs' layout)."""
        parts = self.parts
        return to_device(batch, parts.device, parts.non_blocking, parts.inputs)

    def step(self, fetch: Callable[[], Any] | None = None) -> None:
        """One optimizer step: ``micro_batches`` forward/backward passes (the loss divided
        by their number), each inside the forward's contexts, then the update (through the
        loss scaler where there is one) and zero_grad."""
        import torch

        parts = self.parts
        fetch = fetch or self.next_batch
        k = parts.micro_batches
        contexts = [make() for make in parts.forward]
        for _ in range(k):
            batch = self._place(fetch())
            with contextlib.ExitStack() as forward:
                for c in contexts:
                    forward.enter_context(c)
                loss = self._loss(batch)
            if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
                raise TuneError("the step must return the loss as a tensor that requires grad "
                                f"(got {type(loss).__name__})")
            if k > 1:
                loss = loss / k
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(**parts.zero_grad)
        # no synchronisation here: the timing drains the queue once per block (see above)

    def _timed(self, n: int, warmup: int, one: Callable[[], None], block: int) -> np.ndarray:
        """Per-step seconds of each block of ``block`` steps (``n // block`` values, at least
        one), after ``warmup`` discarded steps; one device sync per block (module docstring).
        The first warmup step is timed alone (``first_step_s``: a compiled model's compile)."""
        block = max(1, min(int(block), n))
        if n <= 0:
            return np.empty(0, dtype=np.float64)
        self._warm(warmup, one)
        self.w.sync()  # the timed blocks start with an empty queue
        before = self.restarts
        out = np.empty(max(1, n // block), dtype=np.float64)
        for j in range(len(out)):
            t0 = time.perf_counter()
            for _ in range(block):
                one()
            self.w.sync()
            out[j] = (time.perf_counter() - t0) / block
        self.timed_restarts = self.restarts - before
        return out

    def _warm(self, warmup: int, one: Callable[[], None]) -> None:
        """``warmup`` discarded steps of ``one``; the first, where no step was timed alone
        yet, timed alone to its drain (``first_step_s``: a compiled model's compile)."""
        for i in range(warmup):
            t0 = time.perf_counter()
            one()
            if i == 0 and self.first_step_s is None:
                self.w.sync()
                self.first_step_s = time.perf_counter() - t0

    def run(self, warmup: int, n: int, block: int = 1) -> np.ndarray:
        """Seconds per optimizer step, one value per block of ``block`` steps, of ``n`` steps
        after ``warmup`` discarded ones, on a fresh iterator (workers start inside the
        warmup), each with the epoch's start spread over its steps
        (:meth:`epoch_share_s`: the loop pays it, the timed blocks may not hold one);
        workers are shut down after. A short epoch with workers is timed whole
        (:meth:`whole_epoch`)."""
        self.close()
        try:
            if self.epoch_steps() is not None:
                return self.whole_epoch(warmup)
            return self._timed(n, warmup, self.step, block) + self.epoch_share_s()
        finally:
            self.close()

    def epoch_steps(self) -> int | None:
        """The optimizer steps of one epoch where it is timed whole (:func:`epoch_steps_of`)."""
        return epoch_steps_of(self.loader, self.parts.micro_batches)

    def whole_epoch(self, warmup: int) -> np.ndarray:
        """Seconds per optimizer step over one whole epoch (one value): from ``iter()``
        through its last batch and its end (the workers shut down), one device drain at
        each end. Before the trial's first, ``warmup`` steps on an iterator of their own
        (the first timed alone: a compiled model's compile)."""
        if self.first_step_s is None:
            self._warm(max(1, warmup), self.step)
            self.close()
        steps = self.epoch_steps() or 1
        self.w.sync()
        t0 = time.perf_counter()
        it = self._it = iter(self.loader)
        for _ in range(steps):
            self.step(lambda: next(it))
        for _ in it:  # the epoch's last batches (a part step) and its end
            pass
        self.w.sync()
        self.timed_restarts = 1  # the epoch's start and end are in the time
        return np.array([(time.perf_counter() - t0) / steps])

    def compute_only(self, warmup: int, n: int, block: int = 1) -> np.ndarray:
        """Step times with one batch, already on the device, reused: no input pipeline."""
        try:
            batch = self._place(self.next_batch())
        finally:
            self.close()
        return self._timed(n, warmup, lambda: self.step(lambda: batch), block)

    def data_only(self, warmup: int, n: int, block: int = 1) -> np.ndarray:
        """Time per optimizer step's worth of batches with the loader iterated alone."""
        k = self.parts.micro_batches

        def fetch() -> None:
            for _ in range(k):
                self.next_batch()

        self.close()
        try:
            return self._timed(n, warmup, fetch, block)
        finally:
            self.close()


def fits(trial: Trial, steps: int = 2) -> tuple[bool, str]:
    """Whether ``steps`` optimizer steps run without running out of memory."""
    oom_msg = ""
    try:
        with trial:
            trial.run(0, steps)
        return True, ""
    except Exception as e:
        if not is_oom(e):
            raise
        oom_msg = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    release_memory(trial.w)  # after the except block: the frames holding tensors are gone
    return False, oom_msg


__all__ = ["Trial", "TuneError", "Workload", "build_loader", "build_optimizer", "fits",
           "is_oom", "release_memory", "to_device"]
