"""Re-running a step under FakeTensorMode at a changed setting, to measure its memory.

The model, the optimizer and the batch are copied as fake tensors (shapes, dtypes and
devices, no data, no memory), the change is made on the copies (a batch of another size,
micro-batches, autocast, checkpointed blocks, zero_grad's ``set_to_none``, foreach or
for-loop kernels, another optimizer class), one untracked step builds the optimizer's state
(the steady state the real job runs in) and one step runs under the
:class:`~diagnose.memory.tracker.StepTracker`. Its count is MemTracker's on the changed
job, without running it. A step whose code reads tensor values (``.item()`` on data,
``nonzero``) cannot run on fake tensors: :class:`FakeRunError` says so.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..errors import DiagnoseError
from .profile import StepMemory
from .tensors import leading_size
from .tracker import StepFn, StepSpec, StepTracker, optimizer_summary, run_step


class FakeRunError(DiagnoseError):
    """The step cannot be re-run on fake tensors (one line saying why)."""


@dataclass(frozen=True)
class Base:
    """How the measured step ran: what a change is made against."""

    set_to_none: bool = True
    amp_dtype: str | None = None
    micro_batches: int = 1

    @classmethod
    def of(cls, step: Mapping[str, Any] | None) -> Base:
        step = step or {}
        return cls(bool(step.get("set_to_none", True)), step.get("amp_dtype"),
                   int(step.get("micro_batches") or 1))


def resize(batch: Any, old: int | None, new: int) -> Any:
    """The batch with every tensor whose leading dimension is ``old`` made ``new`` long, in
    fresh storage: the samples repeated or cut (fake tensors: their values do not matter)."""
    from torch._subclasses.fake_tensor import FakeTensor

    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.dim() == 0 or t.shape[0] != old or not old:
            return t.clone()
        if isinstance(t, FakeTensor):
            return t.new_empty((new, *t.shape[1:]))
        return torch.cat([t] * -(-new // old))[:new].clone()
    return tree_map(one, batch)


def checkpointed(model: Any, names: list[str]) -> None:
    """Wrap each named submodule's forward in non-reentrant activation checkpointing."""
    from torch.utils.checkpoint import checkpoint

    for name in names:
        mod = model.get_submodule(name)
        mod.forward = functools.partial(checkpoint, mod.forward, use_reentrant=False)


def rebuilt_optimizer(optimizer: Any, real: Any, fake: Any, change: Mapping[str, Any]) -> Any:
    """An optimizer over the fake model's parameters: the same class and groups (another
    class, ``optimizer_class``, with its defaults and the learning rate), foreach or not."""
    pmap = {id(p): q for p, q in zip(real.parameters(), fake.parameters(), strict=True)}
    if not any(id(p) in pmap for g in optimizer.param_groups for p in g["params"]):
        raise FakeRunError("the optimizer steps none of the model's parameters")
    name = change.get("optimizer_class")
    cls = getattr(torch.optim, name) if name else type(optimizer)
    groups = []
    for g in optimizer.param_groups:
        params = [pmap[id(p)] for p in g["params"] if id(p) in pmap]
        if name:
            extra = {"momentum": 0.9} if name == "SGD" else {}
            groups.append({"params": params, "lr": float(g.get("lr", 1e-3)), **extra})
        else:
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": params})
    flags: dict[str, Any] = {}
    summary = optimizer_summary(optimizer)
    if summary and summary["foreach"] is not None and not summary["fused"]:
        # as torch picks for the real tensors (for fake ones it never picks foreach)
        flags = {"foreach": summary["foreach"]}
    if "optimizer_foreach" in change:
        flags = {"foreach": change["optimizer_foreach"]}
        if "fused" in getattr(optimizer, "defaults", {}):
            flags["fused"] = False  # foreach or a for-loop: not the fused kernels
    for g in groups:
        g.update(flags)
    return cls(groups)


def _fake_memo(model: Any, mode: Any) -> dict[int, Any]:
    """deepcopy's memo with a fake tensor for each parameter and buffer: the copy holds
    them and copies no data."""
    memo: dict[int, Any] = {}
    for t in (*model.parameters(), *model.buffers()):
        f = mode.from_tensor(t)
        memo[id(t)] = torch.nn.Parameter(f, requires_grad=t.requires_grad) if isinstance(
            t, torch.nn.Parameter) else f
    return memo


#: torch's logger for an operator that fails on fake tensors: it logs the traceback at
#: ERROR before raising, which this module turns into one line (FakeRunError)
FAKE_LOG = "torch._subclasses.fake_tensor"


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger ``name`` silent within."""
    log = logging.getLogger(name)
    old, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = old


def fake_step(model: Any, optimizer: Any, batch: Any, step_fn: StepFn,
              change: Mapping[str, Any], base: Base = Base(), *, fake: bool = True
              ) -> StepMemory:
    """MemTracker's count of one step of the job changed by ``change`` (TrainConfig fields:
    batch_size, grad_accum_steps, amp_dtype, zero_grad_set_to_none, optimizer_foreach,
    checkpoint_modules; and optimizer_class), run on fake copies; nothing real changes.
    ``fake=False`` runs it on real copies instead (the truth a prediction is checked by)."""
    from contextlib import AbstractContextManager, nullcontext

    from torch._subclasses.fake_tensor import FakeTensorMode

    b = leading_size(batch)
    micro = int(change.get("grad_accum_steps", base.micro_batches))
    size = int(change.get("batch_size", b or 1))
    amp = change.get("amp_dtype", base.amp_dtype)
    spec = StepSpec(amp_dtype=amp, set_to_none=bool(change.get(
        "zero_grad_set_to_none", base.set_to_none)))
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    ctx: AbstractContextManager[Any] = mode if fake else nullcontext()
    try:
        with ctx, _quiet(FAKE_LOG) if fake else nullcontext():
            fmodel = copy.deepcopy(model, _fake_memo(model, mode) if fake else None)
            checkpointed(fmodel, list(change.get("checkpoint_modules", ())))
            fopt = rebuilt_optimizer(optimizer, model, fmodel, change) if optimizer else None
            fbatch = tree_map(lambda t: mode.from_tensor(t) if fake and isinstance(
                t, torch.Tensor) else t, batch)

            def batches() -> list[Any]:
                return [resize(fbatch, b, size) for _ in range(micro)]

            run_step(fmodel, fopt, batches(), step_fn, spec)  # the optimizer's state
            mbs = batches()
            tracker = StepTracker(fmodel, fopt, mbs, batch_size=size)
            with tracker:
                run_step(fmodel, fopt, mbs, step_fn, spec)
            out = tracker.result()
            out.step = spec.to_json(micro)
    except (RuntimeError, NotImplementedError, TypeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise FakeRunError(f"the step could not run on fake tensors: {first}") from e
    return out


__all__ = ["Base", "FakeRunError", "checkpointed", "fake_step", "rebuilt_optimizer", "resize"]
