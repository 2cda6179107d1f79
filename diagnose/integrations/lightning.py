"""``diagnose.integrations.lightning.DiagnoseCallback``: profile a window of a Lightning
``Trainer.fit`` and report what slows it, as ``with diagnose(...)`` does for a hand-written
loop::

    from diagnose.integrations.lightning import DiagnoseCallback

    cb = DiagnoseCallback(steps=5)                  # any diagnose(...) capture option
    Trainer(callbacks=[cb]).fit(model, loader)
    cb.report, cb.run_dir                           # also printed once, on global rank 0

Steps are the trainer's batches: ``on_train_batch_end`` marks each step's end, so the wait
for a batch belongs to the step that uses it. The session opens in ``on_train_start`` on
the DataLoader the trainer iterates (``trainer.train_dataloader``: under DDP the copy
Lightning made with a DistributedSampler) and closes when the window is over, in
``on_train_end``, or in ``on_exception`` (an out-of-memory error becomes a memory finding).
With a ``TensorBoardLogger`` the run is also written into its ``log_dir`` (unless
``tensorboard=`` is given). Under DDP every rank captures into one run folder and global
rank 0 prints the cross-rank report, exactly as ``with diagnose(...)`` under torchrun.

With ``strategy="ddp_spawn"`` (or ``ddp_notebook``) the ranks are new processes that get
copies of the callback: rank 0's copy prints the report, and ``cb.report`` in the process
that called ``fit`` stays None (the run folder is on disk as always).

Works with ``lightning`` (``lightning.pytorch``) and the older ``pytorch_lightning``
package; where both are installed the callback is an instance of both ``Callback`` classes.
"""

from __future__ import annotations

from typing import Any

from diagnose.integrations._common import CallbackBase, WatchBase, import_trainer

__all__ = ["DiagnoseCallback", "WatchCallback"]

_pl = import_trainer(("lightning.pytorch", "pytorch_lightning"), "lightning",
                     "Lightning (lightning or pytorch_lightning)")
_BASES = tuple(dict.fromkeys(m.Callback for m in _pl))


def _tensorboard_dir(trainer: Any) -> str | None:
    """The log dir of the trainer's TensorBoard logger (the first one), if it has one."""
    for logger in getattr(trainer, "loggers", None) or ():
        if type(logger).__name__ == "TensorBoardLogger":
            return str(logger.log_dir)
    return None


class DiagnoseCallback(CallbackBase, *_BASES):  # type: ignore[misc]
    """Profile ``steps`` training batches (after ``wait`` + ``warmup``) and report on them.

    Takes ``diagnose(...)``'s keyword arguments (``steps``, ``warmup``, ``wait``,
    ``out_dir``, ``sample_hz``, ``record_shapes``, ``profile_memory``, ``with_stack``,
    ``print_report``, ``analyze``, ``tensorboard``, ...); see :class:`diagnose.session.Session`.
    After training: ``.report`` (the Report, None before or without analysis),
    ``.run_dir`` (the run folder) and ``.session``.
    """

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._capture.begin(pl_module, trainer.train_dataloader,
                            rank_zero=trainer.global_rank == 0,
                            logdir=_tensorboard_dir(trainer), trainer="lightning")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._capture.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._capture.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._capture.close(exception)


class WatchCallback(WatchBase, *_BASES):  # type: ignore[misc]
    """Watch the whole of ``Trainer.fit`` (``watch(...)``'s keyword arguments): each
    training batch is a step; after it ``.alarms``, ``.run_dir`` and ``.watch``."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._begin(pl_module, trainer.train_dataloader)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.close(exception)
