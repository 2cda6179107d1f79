"""The watch's step clock: step boundaries found as ``diagnose`` finds them, each step's
wall time and the loop's wait on the loader, at a few µs a step.

Boundaries follow :class:`diagnose.capture.steps.Steps`: the run's optimizer stepping (a
global ``torch.optim`` step post-hook; the boundary falls just before the loop pulls its
next batch, or right after ``opt.step()`` where the loop does not iterate the loader),
batches pulled (until the first optimizer step; inference loops), or ``w.step()``, which
turns the others off. The loader's wait is timed around its iterator's ``__next__`` by
the one DataLoader shim (:mod:`diagnose.capture.loader_shim`). Nothing else is timed: no
profiler, no per-step reads of ``/proc``.

At a boundary ``on_step(now, ms, wait_ms)`` runs on the training thread; the next step
starts when it returns, or at :meth:`StepClock.restart` (so the watch's own rare work at a
boundary, a capture's start or a gather, belongs to no step).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from diagnose.capture import loader_shim
from diagnose.capture.runinfo import model_param_ids

__all__ = ["StepClock"]


class StepClock:
    """Install with :meth:`install`, undo with :meth:`remove`."""

    def __init__(self, model: Any, loader: Any,
                 on_step: Callable[[float, float, float], None]) -> None:
        self.loader = loader
        self.on_step = on_step
        self.param_ids = model_param_ids(model) if model is not None else frozenset()
        self.mode: str | None = None  # "optimizer" | "dataloader" | "manual"
        self.batches = 0
        self.opt_steps = 0
        self.worker_pids: set[int] = set()
        self.notes: list[str] = []
        self.errors: list[str] = []
        self._t0 = 0.0
        self._wait = 0.0
        self._pending = False
        self._opt_ref: weakref.ReferenceType[Any] | None = None
        self._last_iter: weakref.ReferenceType[Any] | None = None
        self._handles: list[Any] = []
        self._loader_hook: loader_shim.LoaderHook | None = None
        self.loader_hooked = False
        self.active = False

    # ------------------------------------------------------------------ lifecycle
    def install(self) -> None:
        """Hook the optimizer steps and the loader; the first step starts now."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        if self.loader is not None:
            why = loader_shim.missing(self.loader)
            if why is None:
                self._loader_hook = loader_shim.install(self.loader, self._on_next,
                                                        self._on_batch)
                self.loader_hooked = self._loader_hook is not None
            else:
                self.notes.append(f"DataLoader hooks unavailable ({why}): steps come from the "
                                  "optimizer (or w.step()) only, and the loader wait is not "
                                  "timed")
        self.active = True
        self.restart()

    def remove(self) -> None:
        self.active = False
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._loader_hook is not None:
            self._loader_hook.restore()
            self._loader_hook = None

    def pending_step(self) -> tuple[float, float, float] | None:
        """The step the optimizer ended whose boundary waited for a next batch that never
        came (the loop broke or ran out): ``(now, ms, wait_ms)`` as a boundary now gives
        them, the step closed; None where no step is pending."""
        if not (self.active and self._pending and self.mode == "optimizer"):
            return None
        self._pending = False
        return self._end_step()

    def restart(self) -> None:
        """The step now running starts now (the watch's own work before it is no step's)."""
        self._t0 = time.perf_counter()

    @property
    def optimizer(self) -> Any:
        return self._opt_ref() if self._opt_ref is not None else None

    # ------------------------------------------------------------------ boundaries
    def _end_step(self) -> tuple[float, float, float]:
        """The step now running ends now: ``(now, ms, wait_ms)``; the next one starts."""
        now = time.perf_counter()
        ms = (now - self._t0) * 1e3
        wait, self._wait = self._wait * 1e3, 0.0
        self._t0 = now
        return now, ms, wait

    def _boundary(self) -> None:
        now, ms, wait = self._end_step()
        try:
            self.on_step(now, ms, wait)
        except Exception as e:  # never break the user's loop
            if len(self.errors) < 10:
                self.errors.append(f"{type(e).__name__}: {e}")

    def manual(self) -> None:
        """``w.step()``: a boundary now; the automatic ones are off from here on."""
        if self.active:
            self.mode = "manual"
            self._pending = False
            self._boundary()

    def _on_optimizer_step(self, opt: Any, args: Any = None, kwargs: Any = None) -> None:
        if not self.active:
            return
        known = self._opt_ref() if self._opt_ref is not None else None
        if known is None:
            if not self._owns(opt):
                return
            self._opt_ref = weakref.ref(opt)
        elif opt is not known:
            return
        self.opt_steps += 1
        if self.mode == "manual":
            return
        self.mode = "optimizer"
        if self.batches > 0:
            self._pending = True  # the boundary falls just before the next batch is pulled
        else:
            self._boundary()

    def _owns(self, opt: Any) -> bool:
        if not self.param_ids:
            return True
        try:
            return any(id(p) in self.param_ids for g in opt.param_groups for p in g["params"])
        except Exception:
            return False

    def _on_next(self, it: Any) -> None:
        if not self.active:
            return
        last = self._last_iter() if self._last_iter is not None else None
        if last is not it:  # a new iterator (an epoch): its workers
            self._last_iter = weakref.ref(it)
            self.worker_pids.update(loader_shim.worker_pids(it))
        self.batches += 1
        mode = self.mode
        if mode == "optimizer":
            if self._pending:
                self._pending = False
                self._boundary()
        elif (mode is None or mode == "dataloader") and self.batches > 1:
            self.mode = "dataloader"
            self._boundary()

    def _on_batch(self, it: Any, seconds: float, batch: Any) -> None:
        self._wait += seconds
