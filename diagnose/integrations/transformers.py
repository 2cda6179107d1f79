"""``diagnose.integrations.transformers.DiagnoseCallback``: profile a window of a Hugging
Face ``Trainer.train`` and report what slows it, as ``with diagnose(...)`` does for a
hand-written loop::

    from diagnose.integrations.transformers import DiagnoseCallback

    cb = DiagnoseCallback(steps=5)                  # any diagnose(...) capture option
    Trainer(model, args, train_dataset=ds, callbacks=[cb]).train()
    cb.report, cb.run_dir                           # also printed once, on world process 0

Steps are the trainer's optimizer steps: ``on_step_end`` marks each step's end, so the wait
for the batches of a step (all its gradient-accumulation micro-batches) belongs to it. The
session opens in ``on_train_begin`` on the loader the trainer iterates (the
``train_dataloader`` it passes; under accelerate's ``DataLoaderShard`` wrapper, the torch
DataLoader inside it, whose batches the session recognises) and closes when the window is
over and in ``on_train_end``. With ``report_to`` including ``"tensorboard"`` the run is also
written into the trainer's TensorBoard folder (``args.logging_dir`` where the installed
transformers has it, else ``$TENSORBOARD_LOGGING_DIR``, else ``<output_dir>/runs``, the
folder transformers' own TensorBoard runs go into), unless ``tensorboard=`` is given.
Under torch.distributed (``torchrun`` / ``accelerate launch``) every rank captures into one
run folder and world process 0 prints the cross-rank report.

Limit: ``TrainerCallback`` has no exception hook. When ``train()`` raises inside the
profiled window (the first ``wait + warmup + steps`` steps) the session stays open (profiler
and hooks installed) until ``cb.close()``, the next ``train()`` with this callback, or the
interpreter's exit; call ``cb.close()`` in an ``except`` or ``finally`` to end it at once.
After the window nothing of the session is left installed.
"""

from __future__ import annotations

import os
from typing import Any

from diagnose.integrations._common import CallbackBase, WatchBase, import_trainer

__all__ = ["DiagnoseCallback", "WatchCallback"]

_hf = import_trainer(("transformers",), "transformers", "Hugging Face transformers")[0]
TrainerCallback: Any = _hf.TrainerCallback  # imported at run time: a base mypy cannot see


def _tensorboard_dir(args: Any) -> str | None:
    """Where the trainer's TensorBoard runs go, when it reports to TensorBoard."""
    report_to = getattr(args, "report_to", None) or []
    if isinstance(report_to, str):
        report_to = [report_to]
    if "tensorboard" not in report_to and "all" not in report_to:
        return None
    logging_dir = getattr(args, "logging_dir", None)  # transformers < 5
    if logging_dir:
        return str(logging_dir)
    env = os.environ.get("TENSORBOARD_LOGGING_DIR")
    if env:
        return os.path.expanduser(env)
    return os.path.join(args.output_dir, "runs")


class DiagnoseCallback(CallbackBase, TrainerCallback):
    """Profile ``steps`` optimizer steps (after ``wait`` + ``warmup``) and report on them.

    Takes ``diagnose(...)``'s keyword arguments (``steps``, ``warmup``, ``wait``,
    ``out_dir``, ``sample_hz``, ``record_shapes``, ``profile_memory``, ``with_stack``,
    ``print_report``, ``analyze``, ``tensorboard``, ...); see :class:`diagnose.session.Session`.
    After training: ``.report`` (the Report, None before or without analysis),
    ``.run_dir`` (the run folder) and ``.session``.
    """

    # ------------------------------------------------------------------ hooks
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._capture.begin(kwargs.get("model"), kwargs.get("train_dataloader"),
                            rank_zero=bool(state.is_world_process_zero),
                            logdir=_tensorboard_dir(args), trainer="transformers")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._capture.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._capture.close()


class WatchCallback(WatchBase, TrainerCallback):
    """Watch the whole of ``Trainer.train`` (``watch(...)``'s keyword arguments): each
    optimizer step is a step; after it ``.alarms``, ``.run_dir`` and ``.watch``. Where
    training raises, call ``cb.close()`` (the trainer has no exception hook)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._begin(kwargs.get("model"), kwargs.get("train_dataloader"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()
