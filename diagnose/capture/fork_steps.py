"""Steps of the loop itself run right after a fork: what an epoch's forks cost the job.

A DataLoader whose workers are not persistent forks them at every epoch's ``iter()``; the
training process's next writes to each page it shares with them copy the page first
(copy-on-write). Where the session asks (:attr:`~diagnose.capture.steps.Steps.forked`),
the clock forks an idle child (it shares every page, as a new worker does, and runs no
Python) once its ``after`` block is over, and times the next :data:`FORK_STEPS` steps of
the loop (phase ``forked``); the child is let go after them, or at the loop's end. Their
time beyond the block's steps is what the loop's own writes pay for the copies
(:mod:`diagnose.metrics.context.loop_fork`): the forward, backward and optimizer as the job
runs them, where a timing of the model's work alone misses the pages the allocator hands
to another call and the optimizer's.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

#: steps timed after the fork: the copies fall mostly on the first one, the rest on the
#: next few (blocks the allocator hands out in turn)
FORK_STEPS = 8


def fork_idle() -> Callable[[], None]:
    """A child forked that only waits to be let go (it runs no Python: a read, then
    ``_exit``); returns what lets it go and reaps it."""
    r, w = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.read(r, 1)
        finally:
            os._exit(0)

    def let_go() -> None:
        try:
            os.write(w, b"x")
        finally:
            os.waitpid(pid, 0)
            os.close(r)
            os.close(w)
    return let_go


class ForkedSteps:
    """The forked steps of one clock: asked for once (``wanted``, the session's gate, at
    the ``after`` block's end), then counted down; the child let go after the last."""

    def __init__(self) -> None:
        self.wanted: Callable[[], bool] | None = None
        self.asked = False
        self.left = 0
        self._let_go: Callable[[], None] | None = None

    @property
    def running(self) -> bool:
        """A child is forked: the step now running is a forked one."""
        return self._let_go is not None

    def begin(self, on_error: Callable[[str, BaseException], None] | None = None) -> bool:
        """Fork the child where the gate lets it (asked once); whether the forked steps
        begin now (not where the gate or the fork raised: that goes to ``on_error``)."""
        if self.asked or self.wanted is None or not hasattr(os, "fork"):
            return False
        self.asked = True
        try:
            if not self.wanted():
                return False
            self._let_go = fork_idle()
        except Exception as e:
            if on_error is not None:
                on_error("forked steps", e)
            return False
        self.left = FORK_STEPS
        return True

    def counted(self) -> bool:
        """A forked step ended; whether it was the last (the child is then let go)."""
        self.left -= 1
        if self.left > 0:
            return False
        self.release()
        return True

    def release(self) -> None:
        """Let the child go (the last forked step, the loop's end, the session's end)."""
        let_go, self._let_go = self._let_go, None
        if let_go is not None:
            let_go()
