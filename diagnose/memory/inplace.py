"""One of the loop's own steps tracked where it runs: the memory section of a live capture.

A live session cannot run a step by itself without changing the user's training, so it
tracks the loop's next step in place: a :class:`~.tracker.StepTracker` is entered at the
step boundary where the profiled window ends (the step after it is untimed: the clock's
``settle`` step) and left at the next boundary. Only a boundary outside any module's call
can start or stop it (a batch asked for, an optimizers' round done, ``d.step()``): one
inside a model's call would start the module hooks half way through that call. The loader's own
work is left out (:attr:`~.tracker.StepTracker.paused` from the request for a batch to its
arrival) and the batch is counted as ``other``. The section is built after the loop
(:func:`~.live.live_section`): what-ifs re-run under FakeTensorMode where the step is known
as a function (``step_fn``, or ``loss_fn(model(x), y)`` on pairs), else scaled. A process
forked while the tracker runs (a DataLoader's worker, at an epoch's start) inherits it
paused: its operators are not counted and cost no bookkeeping.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: how the section says the step was measured
IN_PLACE = "the loop's own step after the profiled window, tracked in place"


_RUNNING: weakref.WeakSet[Any] = weakref.WeakSet()  # trackers entered and not yet left


def _pause_in_child() -> None:
    for t in list(_RUNNING):
        t.paused = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pause_in_child)


def pair_step(loss_fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``step_fn(model, batch)`` of a ``loss_fn(output, target)`` on (inputs, target) pairs."""
    def step(model: Any, batch: Any) -> Any:
        x, y = batch
        return loss_fn(model(x), y)
    return step


class InPlaceStep:
    """The tracked step's state: ``idle`` until :meth:`boundary` starts it, ``tracking``,
    then ``done`` (a result) or ``skipped`` (:attr:`why` says why). The caller sets
    :attr:`safe` around the boundaries that fall outside any module's call."""

    def __init__(self) -> None:
        self.state = "idle"
        self.safe = False
        self.why: str | None = None
        self.tracker: Any = None
        self.result: Any = None  # the StepMemory of the tracked step
        self.model: Any = None
        self.optimizer: Any = None
        self.batch: Any = None
        self.model_given = True  # False: no model to track (nothing to say of it)

    # ------------------------------------------------------------------ the boundaries
    def boundary(self, window_over: bool, model: Any, optimizers: Sequence[Any],
                 roots: Mapping[str, Any] | None = None) -> None:
        """A step boundary: the first one after the window starts the tracker, the next
        ends it. ``optimizers``: those whose steps count (the optimizer's phase); ``roots``:
        every model by name, where there are several (their modules are named under it)."""
        if self.state == "idle" and window_over:
            if model is None:
                self.model_given = False
                self._skip("no model was given or found")
            elif not self.safe:
                # a later boundary outside the calls (an optimizers' round) may still start
                # it; where none comes, this is why no step was tracked
                self.why = ("no step's memory was tracked: with no optimizer's step and no "
                            "DataLoader's batch to mark it, a step's end was found only as the "
                            "next forward began, inside the model's call, where tracking "
                            "cannot start (d.step() at the end of each step marks it)")
            else:
                self.why = None
                self._start(model, optimizers, roots)
        elif self.state == "tracking" and self.safe:
            self._stop(None)

    def _skip(self, why: str) -> None:
        self.state, self.why = "skipped", f"no step's memory was tracked: {why}"

    def _start(self, model: Any, optimizers: Sequence[Any],
               roots: Mapping[str, Any] | None = None) -> None:
        from .tracker import StepTracker

        opts = [o for o in optimizers if o is not None]
        self.model, self.optimizer = model, (opts[0] if opts else None)
        t = StepTracker(model, self.optimizer, None, optimizers=opts[1:], catch_oom=True,
                        roots=roots)
        t.__enter__()
        _RUNNING.add(t)
        self.tracker, self.state = t, "tracking"

    def on_next(self) -> None:
        """The loop asks the loader for a batch: the loader's work is not the step's."""
        if self.state == "tracking":
            self.tracker.paused = True

    def on_batch(self, batch: Any) -> None:
        """The batch came: counted as ``other`` from now on."""
        if self.state == "tracking":
            t = self.tracker
            t.paused = False
            t.note_batch(batch)
            self.batch = batch

    def _stop(self, exc: BaseException | None) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        t: Any = self.tracker
        on_top = _get_current_dispatch_mode() is t
        if not on_top:
            if exc is None:
                return  # another mode entered in the step is still on: leave at the next
            self.tracker, self.state = None, "skipped"
            self.why = "no step's memory was tracked: another dispatch mode stayed on"
            return
        t.paused = False
        _RUNNING.discard(t)
        t.__exit__(type(exc) if exc is not None else None, exc, None)
        self.tracker = None
        if t.failed is not None or (exc is not None and t.oom is None):
            self._skip(f"torch's MemTracker could not count it ({t.failed})" if t.failed
                       else "the loop ended inside the tracked step")
            t.release()
            return
        res = t.result()
        res.step = {"amp_dtype": t.amp_dtype, "set_to_none": _set_to_none(res),
                    "micro_batches": _micro_batches(res, t.param_grads_at)}
        t.release()
        self.result, self.state = res, "done"

    def close(self) -> None:
        """The session ends (the loop's exception, if any, is the one being handled): a
        step still tracked is left; an out-of-memory error inside it is kept."""
        if self.state != "tracking":
            return
        exc = sys.exc_info()[1]
        try:
            self._stop(exc if exc is not None else RuntimeError("the loop ended"))
        finally:
            if self.state == "tracking":  # could not leave: given up
                self.tracker, self.state = None, "skipped"

    # ------------------------------------------------------------------ after the loop
    def section(self, *, step_fn: Any = None, loss_fn: Any = None,
                budget_bytes: int | None = None) -> dict[str, Any] | None:
        """The memory section of the tracked step (None: none tracked); the user's objects
        are let go once it is built."""
        from .live import live_section

        if self.result is None:
            return None
        fn = step_fn
        if fn is None and loss_fn is not None and isinstance(self.batch, tuple | list) \
                and len(self.batch) == 2:
            fn = pair_step(loss_fn)
        try:
            sec = live_section(self.result, model=self.model, optimizer=self.optimizer,
                               batch=self.batch if fn is not None else None, step_fn=fn,
                               budget_bytes=budget_bytes)
        finally:
            self.model = self.optimizer = self.batch = None
        sec["measured"] = IN_PLACE
        return sec


def _micro_batches(res: Any, grads_at: Sequence[int] = ()) -> int:
    """The backward passes before the optimizer's first operator that computed a
    parameter's gradient (``grads_at``: the timeline's length at each; a pass from its
    first point to the point after its last): ``autograd.grad`` on an input (a gradient
    penalty, a PINN's derivatives, an adversarial example) is no micro-batch, and a model
    called twice for one loss is one. No parameter's gradient seen: every pass counts."""
    spans: list[tuple[int, int]] = []
    last = -1
    for i, p in enumerate(res.points):
        if p.phase == 2:
            break
        if p.phase == 1 and last != 1:
            spans.append((i, i + 1))
        elif p.phase == 1:
            spans[-1] = (spans[-1][0], i + 1)
        last = p.phase
    if grads_at:
        spans = [(a, b) for a, b in spans if any(a <= g <= b for g in grads_at)]
    return max(1, len(spans))


def _set_to_none(res: Any) -> bool:
    """zero_grad's ``set_to_none`` as the step showed it: the gradients let go at some point
    of its forward (True where the step had no forward)."""
    held = [p.grads for p in res.points if p.phase == 0]
    return not held or not res.grad_bytes or min(held) < res.grad_bytes / 2


__all__ = ["IN_PLACE", "InPlaceStep", "pair_step"]
