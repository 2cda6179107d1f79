"""What both trainer callbacks share: one :class:`~diagnose.session.Session` driven by a
trainer's own hooks instead of a ``with`` block.

The trainer's hooks open the session when training starts (where the loader the trainer
iterates is known), mark each step's end with the session's manual ``step()``, and close
it as soon as the profiled window is over, when training ends, or on an exception: closing
is the session's own ``__exit__`` (hooks removed, samplers joined, run folder analysed,
report printed on rank 0).
"""

from __future__ import annotations

import atexit
import importlib
import os
import warnings
from pathlib import Path
from typing import Any

from diagnose.errors import DiagnoseError, OptionError

__all__ = ["CallbackBase", "MissingExtraError", "TrainerCapture", "import_trainer"]

# Session's arguments that the trainer supplies; a callback takes every other one.
_FROM_TRAINER = ("model", "loader")


class MissingExtraError(DiagnoseError, ImportError):
    """A trainer integration was imported without its trainer installed.

    Also an ``ImportError``, so ``try: import ... except ImportError`` still works."""


def import_trainer(modules: tuple[str, ...], extra: str, what: str) -> list[Any]:
    """The modules of ``modules`` that import (in order); none: one clear error naming the
    extra that installs them."""
    found = []
    error: ImportError | None = None
    for name in modules:
        try:
            found.append(importlib.import_module(name))
        except ImportError as e:  # the cause stays chained (a broken install shows there)
            error = error or e
    if not found:
        raise MissingExtraError(
            f"diagnose.integrations.{extra} needs {what}: "
            f"pip install 'torch-diagnose[{extra}]'"
        ) from error
    return found


class TrainerCapture:
    """One capture per training run, opened and closed by a trainer's callback hooks.

    ``options`` are ``diagnose(...)``'s keyword arguments, passed to the Session unchanged
    (checked here, when the callback is made, by the Session itself).
    """

    def __init__(self, owner: str, options: dict[str, Any]) -> None:
        from diagnose.session import Session

        taken = [k for k in _FROM_TRAINER if k in options]
        if taken:
            raise DiagnoseError(
                f"{owner}: {', '.join(taken)} come from the trainer; pass only capture options"
            )
        try:  # the Session validates its options now (OptionError, CaptureError)
            Session(**options)
        except OptionError as e:  # an unknown option: named as the user's own call has it
            raise OptionError(str(e).replace("diagnose()", f"{owner}()", 1)) from None
        self.owner = owner
        self.options = dict(options)
        self.session: Any = None
        self._open = False

    # ------------------------------------------------------------------ state
    @property
    def open(self) -> bool:
        """A session is running: profiler, hooks or samplers may be installed."""
        return self._open

    @property
    def report(self) -> Any:
        return None if self.session is None else self.session.report

    @property
    def run_dir(self) -> Path | None:
        return None if self.session is None else self.session.run_dir

    # ------------------------------------------------------------------ hooks
    def begin(self, model: Any, loader: Any, *, rank_zero: bool,
              logdir: str | os.PathLike[str] | None, trainer: str | None = None) -> None:
        """Training starts: open a new session on the loader the trainer iterates.

        ``rank_zero``: this process prints the report (the trainer's global rank 0).
        ``logdir``: the trainer's TensorBoard log dir, used unless ``tensorboard=`` was given.
        ``trainer``: the trainer ("transformers", "lightning"), recorded in context.json
        (the report writes its fixes in that trainer's settings).
        """
        from diagnose.session import Session

        self.close()  # a session a failed earlier run left open (no exception hook)
        kw = dict(self.options)
        kw["print_report"] = bool(kw.get("print_report", True)) and rank_zero
        if kw.get("tensorboard") is None and logdir is not None:
            kw["tensorboard"] = str(logdir)
        session = Session(model, _base_loader(loader), **kw)
        session.trainer = trainer
        try:
            session.__enter__()
        except DiagnoseError as e:  # e.g. another diagnose() block is running: train anyway
            warnings.warn(f"{self.owner}: not profiling this run: {e}", RuntimeWarning,
                          stacklevel=3)
            return
        # The trainer's hooks mark every boundary: no automatic optimizer/batch guess,
        # not even before the first step() (a batch fetched ahead would count as a step).
        session.step_mode = "manual"
        self.session = session
        self._open = True
        # Hugging Face's Trainer has no exception hook: a run that raises inside the window
        # leaves the session open until close(), the next train() or interpreter exit.
        atexit.register(self.close)

    def step(self) -> None:
        """A trainer step ended: one boundary; closes the session once the window is over."""
        if not self.open:
            return
        self.session.step()
        if self.session.done:
            self.close()

    def close(self, exc: BaseException | None = None) -> None:
        """Close the session if it is open (idempotent): the session's own ``__exit__``."""
        if not self._open:
            return
        self._open = False
        atexit.unregister(self.close)
        if exc is None:
            self.session.__exit__(None, None, None)
        else:
            self.session.__exit__(type(exc), exc, exc.__traceback__)


class CallbackBase:
    """What both ``DiagnoseCallback`` classes expose; mixed in before the trainer's base."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self._capture = TrainerCapture(type(self).__name__, options)

    @property
    def report(self) -> Any:
        """The Report (None before the window is over, or with ``analyze=False``)."""
        return self._capture.report

    @property
    def run_dir(self) -> Path | None:
        """The run folder (trace, samples, context.json, report.html)."""
        return self._capture.run_dir

    @property
    def session(self) -> Any:
        """The last run's :class:`~diagnose.session.Session`."""
        return self._capture.session

    def close(self) -> None:
        """Close a session that is still open (normally the trainer's hooks do it)."""
        self._capture.close()


def _base_loader(loader: Any) -> Any:
    """The torch DataLoader under a trainer's wrapper (accelerate's ``DataLoaderShard``
    iterates its ``base_dataloader``): the session recognises the batches it pulls."""
    base = getattr(loader, "base_dataloader", None)
    return base if base is not None else loader



class WatchBase:
    """What both ``WatchCallback`` classes share: one :class:`~diagnose.watching.Watch`
    over the whole of ``fit``/``train`` (opened when training starts, on the loader the
    trainer iterates; each trainer step marks a boundary, as ``w.step()`` does; closed when
    training ends or raises). Takes ``watch(...)``'s keyword arguments."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self._options = options
        self.watch: Any = None  # the last run's Watch (open while training runs)
        self._open = False

    @property
    def alarms(self) -> list[Any]:
        """The last run's alarms (see :class:`diagnose.watching.Alarm`)."""
        return list(self.watch.alarms) if self.watch is not None else []

    @property
    def run_dir(self) -> Path | None:
        return self.watch.run_dir if self.watch is not None else None

    def _begin(self, model: Any, loader: Any) -> None:
        from diagnose.watching import Watch

        self.close()
        w = Watch(model, _base_loader(loader) if loader is not None else None,
                  **self._options)
        w.__enter__()
        w.step(mark=False)  # the trainer's steps are the boundaries (no batch read ahead)
        self.watch, self._open = w, True

    def _step(self) -> None:
        if self._open:
            self.watch.step()

    def close(self, exc: BaseException | None = None) -> None:
        """End the watch if it is open (idempotent): its summary, watch.json, the timeline."""
        if not self._open:
            return
        self._open = False
        if exc is None:
            self.watch.__exit__(None, None, None)
        else:
            self.watch.__exit__(type(exc), exc, exc.__traceback__)
