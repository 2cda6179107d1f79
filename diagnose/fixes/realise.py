"""How a trial makes a TrainConfig real: one :class:`Realisation` per field (or per fields
that only make sense together), defined in the module of a fix that changes it.

A trial (:mod:`diagnose.autofix.trial`) rebuilds the user's DataLoader and optimizer and
runs the user's step; it knows no field by name and applies every registered realisation
(:data:`diagnose.fixes.REALISATIONS`). Each one contributes its part:

- ``batching``: how the new DataLoader makes batches from the dataset (sampler, batch
  size, collate): keyword arguments, or None where it does not make them for this config.
  The first that does wins; the ``fallback`` one (the user's own batching) serves else;
- ``loader``: keyword arguments of the new DataLoader (its workers, pinning, ...);
- ``optimizer``: constructor flags of the new optimizer, given those its class accepts;
- ``process``: a process-wide setting, set as the trial starts; returns its undo (run when
  the trial ends, last set first undone, also after an error), or None: nothing set;
- ``step``: how the step runs (:class:`StepParts`: micro-batches per optimizer step, the
  device copy, the inputs' layout, autocast, loss scaling, the module called, zero_grad).

A realisation that cannot make its field real on the user's objects raises
:class:`CannotRealise` with one line saying what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ..errors import DiagnoseError
from .config import TrainConfig

Kwargs = dict[str, Any]


class CannotRealise(DiagnoseError):
    """A config cannot be made real on the user's objects (one line saying why)."""


@dataclass
class StepParts:
    """What the step is made of, as the realisations set it (defaults: the user's step)."""

    model: Any  # the module the step calls (a realisation may wrap it: torch.compile)
    device: Any  # the torch.device the step runs on
    micro_batches: int = 1  # forward/backward passes per optimizer step (loss divided)
    non_blocking: bool = False  # the batch's copy to the device
    inputs: list[Callable[[Any], Any]] = field(default_factory=list)  # each tensor on it
    forward: list[Callable[[], AbstractContextManager[Any]]] = field(
        default_factory=list)  # contexts entered around the forward and the loss
    scaler: Any = None  # scales the loss for backward, unscales the step (scale/step/update)
    zero_grad: Kwargs = field(default_factory=dict)  # optimizer.zero_grad's arguments


@dataclass(frozen=True)
class Realisation:
    """How a trial makes ``fields`` real (module doc): each part optional."""

    fields: tuple[str, ...]
    batching: Callable[[TrainConfig, Any], Kwargs | None] | None = None
    fallback: bool = False
    loader: Callable[[TrainConfig, Kwargs], None] | None = None
    optimizer: Callable[[TrainConfig, Kwargs, Collection[str]], None] | None = None
    process: Callable[[TrainConfig, Any, Any], Callable[[], None] | None] | None = None
    step: Callable[[TrainConfig, StepParts], None] | None = None


def registry(realisations: Iterable[Realisation]) -> tuple[Realisation, ...]:
    """The realisations in order; a field realised twice, or two fallback batchings, are
    refused."""
    out = tuple(realisations)
    seen: dict[str, Realisation] = {}
    for r in out:
        for f in r.fields:
            if f in seen:
                raise ValueError(f"field {f!r} has two realisations")
            seen[f] = r
    if sum(r.fallback for r in out) > 1:
        raise ValueError("two realisations make the user's own batching")
    return out


def loader_kwargs(realisations: Iterable[Realisation], cfg: TrainConfig, orig: Any
                  ) -> Kwargs:
    """The keyword arguments the realisations give a DataLoader rebuilt from ``orig``:
    its batching (the first realisation that makes the batches, else the fallback) and
    its settings."""
    reals = tuple(realisations)
    kw: Kwargs = {}
    made = next((b for r in reals if r.batching is not None and not r.fallback
                 and (b := r.batching(cfg, orig)) is not None), None)
    if made is None:
        made = next((b for r in reals if r.batching is not None and r.fallback
                     and (b := r.batching(cfg, orig)) is not None), None)
    kw.update(made or {})
    for r in reals:
        if r.loader is not None:
            r.loader(cfg, kw)
    return kw


def optimizer_flags(realisations: Iterable[Realisation], cfg: TrainConfig,
                    accepted: Collection[str]) -> Kwargs:
    """The constructor flags the realisations give a rebuilt optimizer whose class accepts
    ``accepted`` keywords."""
    flags: Kwargs = {}
    for r in realisations:
        if r.optimizer is not None:
            r.optimizer(cfg, flags, accepted)
    return flags


def step_parts(realisations: Iterable[Realisation], cfg: TrainConfig, model: Any,
               device: Any) -> StepParts:
    """The step's parts for ``cfg``: the user's ``model`` on ``device``, as each
    realisation sets its part."""
    parts = StepParts(model=model, device=device)
    for r in realisations:
        if r.step is not None:
            r.step(cfg, parts)
    return parts


__all__ = ["CannotRealise", "Kwargs", "Realisation", "StepParts", "loader_kwargs",
           "optimizer_flags", "registry", "step_parts"]
