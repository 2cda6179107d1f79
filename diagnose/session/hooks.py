"""The hooks a session puts on the user's objects for the ``with`` block, and their removal.

Into :class:`~diagnose.capture.steps.Steps`: torch's global optimizer step pre/post hooks,
the garbage collector's callbacks, the models' calls and backward
(:class:`~diagnose.capture.boundaries.ModelHooks`: the models given, or those the loop
calls where none was), each given model's forward time
(:class:`~diagnose.capture.probes.ForwardTimer`; the first one's inputs go to the probes
after the loop), and the DataLoader's batches (:mod:`~diagnose.capture.loader_shim`).
Each boundary also goes to the in-place memory tracking
(:class:`~diagnose.memory.inplace.InPlaceStep`), told whether it fell outside any module's
call (a batch asked for, an optimizer's step, ``d.step()``), and the batches to it too.
:meth:`Hooks.remove` undoes every one of them, each even if one before failed.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from diagnose.capture import loader_shim
from diagnose.capture.boundaries import ModelHooks
from diagnose.capture.gcpause import GcTimer
from diagnose.capture.probes import ForwardTimer
from diagnose.capture.probes.compute import ModelCalls
from diagnose.capture.steps import Steps
from diagnose.values import a_type


class Hooks:
    """Installs the hooks for ``models`` (a list, maybe empty) and ``loader`` into
    ``steps``; ``notes`` gets a line where the DataLoader cannot be hooked, or where the
    loop took its batches from other loaders alone."""

    def __init__(self, steps: Steps, models: list[Any], loader: Any, notes: list[str],
                 memory: Any = None, names: list[str] | None = None) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.steps = steps
        self.models = models
        self.names = names if names is not None and len(names) == len(models) else None
        self.memory = memory  # an InPlaceStep, or None: memory is not tracked
        self.loader_hook: loader_shim.LoaderHook | None = None
        #: the type of what was given as the loader where it is no torch DataLoader (nor a
        #: wrapper of one): a generator, a list
        self.loader_given_other: str | None = None
        self._notes = notes
        # another loader's batches pulled between two of the given one's (a zip of loaders):
        # the steps that had some, the given loader's batches, the most workers of another
        self._beside, self._pulls, self._other_since, self._other_most = 0, 0, False, 0
        self._others = 0  # other loaders' batches in all
        self._other_seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self.timers: list[ForwardTimer] = []
        self.model_hooks: ModelHooks | None = None
        self.gc: GcTimer | None = None
        self._handles: list[Any] = []
        self._handles.append(register_optimizer_step_post_hook(self._optimizer_step))
        self._handles.append(register_optimizer_step_pre_hook(steps.on_optimizer_start))
        self.gc = GcTimer(steps.on_gc)
        steps.gc_timed = True
        for m in models:
            if callable(getattr(m, "register_forward_pre_hook", None)):
                self.timers.append(ForwardTimer(m, steps.on_forward, steps.on_backward_start))
        self.model_hooks = ModelHooks(models, steps.on_model_call, steps.on_grad,
                                      discover=not models,
                                      on_found=steps.finder.found_model)
        steps.forwards_counted = bool(self.model_hooks.models) or not models
        self._discovering = self.model_hooks.discovering  # the first boundary ends the search
        steps.on_boundary = self._boundary
        self._hook_loader(loader, notes)

    @property
    def forward(self) -> ForwardTimer | None:
        """The first model's forward timer (its inputs feed the probes after the loop)."""
        return self.timers[0] if self.timers else None

    def take_works(self) -> tuple[list[Any], dict[int, ModelCalls]]:
        """What the loop called of each model (the model, else its parts), with its first
        inputs, and each one's calls (:meth:`ForwardTimer.calls`); the timers are let go."""
        works = [w for t in self.timers for w in t.works()]
        calls = {k: c for t in self.timers for k, c in t.calls().items()}
        self.timers = []
        return works, calls

    @property
    def loader_hooked(self) -> bool:
        return self.loader_hook is not None

    def found_models(self) -> list[Any]:
        """The models the hooks found the loop calling, where none was given."""
        mh = self.model_hooks
        return [] if mh is None else [m for m in (r() for r in mh.found) if m is not None]

    def _boundary(self) -> None:
        if self._discovering:
            self._discovering = False
            if self.model_hooks is not None:
                self.model_hooks.settle()
        self._memory_boundary()

    def _memory_boundary(self) -> None:
        """A step boundary for the memory tracking (it starts or stops only at one outside
        any module's call: :attr:`InPlaceStep.safe`)."""
        mem = self.memory
        if mem is None or mem.state not in ("idle", "tracking"):
            return
        try:
            prof = self.steps.profiler
            found = self.models or self.found_models()
            names = (self.names if self.models and self.names
                     else [str(i) for i in range(len(found))])
            mem.boundary(prof is not None and prof.finished, found[0] if found else None,
                         self.steps.finder.optimizer_list,
                         dict(zip(names, found, strict=True)) if len(found) > 1 else None)
        except Exception as e:  # never break the user's step
            self._drop_memory(e)

    def _drop_memory(self, e: BaseException) -> None:
        """A problem in the memory tracking: it stops (a step being tracked is left), and
        the problem goes to the session's notes."""
        mem, self.memory = self.memory, None
        with contextlib.suppress(Exception):
            if mem is not None:
                mem.close()
        if self.steps.on_error is not None:
            self.steps.on_error("memory tracking", e)

    # A boundary found in these calls falls outside any module's call: the memory tracking
    # is told so (``safe``) for their length. Plain try/finally, not a context manager:
    # they run on every step of the user's loop.
    def _optimizer_step(self, opt: Any, args: Any = None, kwargs: Any = None) -> None:
        mem = self.memory
        if mem is None:
            self.steps.on_optimizer_step(opt, args, kwargs)
            return
        mem.safe = True
        try:
            self.steps.on_optimizer_step(opt, args, kwargs)
            # a loop without a loader steps at its next model call, inside that call: the
            # memory tracking takes the optimizers' round as its boundary instead
            if self.steps.finder.closed_at_next_call():
                self._memory_boundary()
        finally:
            mem.safe = False

    def manual(self) -> None:
        """``d.step()``: a boundary the user marks, outside any module's call."""
        mem = self.memory
        if mem is not None:
            mem.safe = True
        try:
            self.steps.manual()
        finally:
            if mem is not None:
                mem.safe = False

    def _on_other(self, it: Any) -> None:
        """Another loader's iterator ``it`` hands out a batch."""
        self._other_since = True
        self._others += 1
        with contextlib.suppress(TypeError):  # not weak-referenceable: its workers unknown
            if it not in self._other_seen:
                self._other_seen.add(it)
                self._other_most = max(self._other_most, len(loader_shim.worker_pids(it)))

    def _on_next(self, it: Any) -> None:
        self._pulls += 1
        self._beside += self._other_since
        self._other_since = False
        mem = self.memory
        if mem is not None:
            mem.safe = True
        try:
            self.steps.on_next(it)
        finally:
            if mem is not None:
                mem.safe = False
        if self.memory is not None:
            self.memory.on_next()

    def _on_batch(self, it: Any, seconds: float, batch: Any) -> None:
        self.steps.on_batch(it, seconds, batch)
        if self.memory is not None:
            try:
                self.memory.on_batch(batch)
            except Exception as e:
                self._drop_memory(e)

    def _hook_loader(self, loader: Any, notes: list[str]) -> None:
        if loader is None:
            return
        why = loader_shim.missing()
        if why is not None:  # a torch whose DataLoader internals moved: fall back, say so
            notes.append(
                f"DataLoader hooks unavailable ({why}): steps are found from the optimizers "
                "and the models' calls (or d.step()), and the DataLoader wait is not timed "
                "by the session")
            return
        given = type(loader).__name__
        loader, held_as = loader_shim.unwrap(loader)
        if held_as is not None:
            notes.append(f"the loader given is a {given} wrapping a torch DataLoader (its "
                         f"`{held_as}`): its batches are timed on that DataLoader")
        if loader_shim.missing(loader) is not None:
            self.loader_given_other = type(loader).__name__
            notes.append(
                f"the loader given is {a_type(loader)}, not a torch DataLoader: its "
                "batches are not timed, and steps are found from the optimizers and the "
                "models' calls")
            return
        self.loader_hook = loader_shim.install(loader, self._on_next, self._on_batch,
                                               self._on_other)
        self.steps.hook = self.loader_hook

    def _beside_note(self) -> str:
        """Another loader fed the loop beside the given one, in half its steps or more."""
        workers = self._other_most
        procs = (f", with {workers} worker process{'es' if workers != 1 else ''} of its own "
                 "beside the given loader's on the same CPUs" if workers else "")
        return (f"another DataLoader handed out batches beside the given one's in "
                f"{self._beside} of {self._pulls} steps (a zip of loaders?){procs}: the "
                "DataLoader wait is the given loader's alone (the other's counts as the "
                "step's own time), and the fixes change the given loader's settings alone")

    def remove(self) -> None:
        """Every hook off, each even if one before failed; a step still tracked is left."""
        if self.memory is not None:
            try:
                self.memory.close()
            except Exception as e:
                self._drop_memory(e)
        for h in self._handles:
            with contextlib.suppress(Exception):
                h.remove()
        self._handles = []
        for t in self.timers:
            with contextlib.suppress(Exception):
                t.remove()
        if self.model_hooks is not None:
            self.model_hooks.remove()
        if self.gc is not None:
            self.gc.remove()
            self.gc = None
        if self.loader_hook is not None:
            if not self.steps.batches and self._others:
                self._notes.append(
                    f"the loader given handed out no batch while other DataLoaders handed "
                    f"out {self._others}: the loop iterates another loader, so "
                    "the DataLoader wait is not timed and the input rules are not "
                    "evaluated; give diagnose() the loader the training loop iterates")
            elif self._pulls >= 4 and self._beside >= self._pulls / 2:
                self._notes.append(self._beside_note())
            self.loader_hook.restore()
            self.loader_hook = None
            self.steps.hook = None
