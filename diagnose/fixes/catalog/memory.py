"""Memory fixes: a step that does not fit, or fits only just.

In a trial, the micro-batch (``batch_size``) is the rebuilt DataLoader's batch size over
the user's own sampler (or batch sampler, whose size cannot change), and
``grad_accum_steps`` the forward/backward passes per optimizer step, the loss divided by
their number; larger_batch (launch.py) changes both fields too.

A fix's predicted peak (:func:`peak_prediction`) is the memory section's what-if whose
change sets exactly the fields the fix changes (:data:`PEAK_FIELDS` for a fix that is
advice only); of several (accumulation over 2 or 4 micro-batches), the first whose range's
high end fits the budget less ``FIT_MARGIN``, else the lowest.

Activation checkpointing (``checkpoint_modules``) is tried only to fit a memory budget: its
candidates are the blocks of the memory section's what-if (``Checkpointing.for_memory``),
proposed where the step's peak is near the budget or over it (:meth:`Checkpointing.propose`),
with the what-if's peak and the step once more through the blocks' forward
(:func:`~diagnose.memory.whatif.recompute_ms`). In a trial each named submodule's forward
runs under non-reentrant ``torch.utils.checkpoint``, put back as it was when the trial ends.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...memory import FIT_MARGIN
from ...memory.whatif import recompute_ms, scaled
from ..code import GENERIC_NOTE, Setup, assign, loader_call, loader_name
from ..config import TrainConfig, micro_batches
from ..realise import CannotRealise, Kwargs, Realisation, StepParts
from ..unit import Facts, Fix


@dataclass(frozen=True)
class Proposal:
    """A change proposed to fit a memory budget: the config, its predicted peak (the
    what-if: point, range, method) and its predicted step time as a multiple of the
    step's (None: not predicted)."""

    fix: str
    config: TrainConfig
    change: dict[str, Any]
    peak_bytes: int
    range: tuple[int, int]
    method: str
    step_ratio: float | None = None

    @property
    def high(self) -> int:
        return self.range[1]


def near_budget(peak_bytes: int | None, budget_bytes: int | None) -> bool:
    """The step's peak is within ``FIT_MARGIN`` of the budget, or over it."""
    return bool(peak_bytes and budget_bytes and peak_bytes > budget_bytes * (1 - FIT_MARGIN))


def _what_if_range(w: Mapping[str, Any]) -> tuple[int, int]:
    r = w.get("range")
    return (int(r[0]), int(r[1])) if r else (int(w["peak_bytes"]), int(w["peak_bytes"]))


class GradAccumulation(Fix):
    """The same effective batch in smaller micro-batches: every split, largest first."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return (config.batch_size or 0) > 1 and facts.oom is True

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [x for x in micro_batches(config)
                if (x.batch_size or 0) < (config.batch_size or 0)]

    def propose(self, config: TrainConfig, memory: Mapping[str, Any] | None,
                budget_bytes: int, peak_bytes: int | None = None) -> list[Proposal]:
        """Every smaller micro-batch at the same effective batch, where the step's peak is
        near the budget or over it: the section's what-if of that split where it has one
        (a re-run), else scaled from the section's measured kinds; the step time is not
        predicted here."""
        peak = peak_bytes if peak_bytes is not None else (memory or {}).get("peak_bytes")
        if memory is None or not near_budget(peak, budget_bytes):
            return []
        whats = {(c.get("batch_size"), c.get("grad_accum_steps")): w
                 for w in memory.get("what_if") or ()
                 if set(c := w.get("change") or {}) == {"batch_size", "grad_accum_steps"}
                 and isinstance(w.get("peak_bytes"), int)}
        same = memory.get("batch_size") == config.batch_size
        out = []
        for x in self.search(config, Facts()):
            change = {"batch_size": x.batch_size, "grad_accum_steps": x.grad_accum_steps}
            w: Any = whats.get((x.batch_size, x.grad_accum_steps))
            if w is None and same:
                est = scaled(memory, change)
                w = est.to_json() if est is not None and est.range else None
            if w is not None:
                out.append(Proposal(self.id, x, change, int(w["peak_bytes"]),
                                    _what_if_range(w), str(w.get("method") or "")))
        return out

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        b = spec.batch_size if spec is not None else None
        k = next((k for k in (4, 2, 3) if b and b % k == 0 and b > k), None)
        if b is None or k is None:
            spec, b, k = None, 256, 4
        micro = b // k
        before = spec.config() if spec is not None else TrainConfig(batch_size=b)
        head = f"# before: batch {b} does not fit" + ("" if spec is not None else
                                                       f"\n# {GENERIC_NOTE}")
        return "\n".join([
            head, loader_call(spec, before, show=["batch_size"], prefix=assign(spec)),
            f"for x, y in {loader_name(spec)}:",
            "    loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()",
            f"# after: {k} micro-batches of {micro}, the same effective batch",
            loader_call(spec, before.replace(batch_size=micro), show=["batch_size"],
                        prefix=assign(spec)),
            f"for i, (x, y) in enumerate({loader_name(spec)}):",
            f"    (loss_fn(model(x), y) / {k}).backward()",
            f"    if (i + 1) % {k} == 0:",
            "        opt.step(); opt.zero_grad()"])


GRAD_ACCUMULATION = GradAccumulation(
    "grad_accumulation", "Smaller micro-batch with gradient accumulation", category="memory",
    auto=True, fields=("batch_size", "grad_accum_steps"),
    needs="a batch that does not fit (out of memory)")

@dataclass(frozen=True)
class Checkpointing(Fix):
    """Recompute the named blocks' forward in backward: tried only to fit a memory budget
    (it costs time); its blocks come from the memory section (:meth:`for_memory`)."""

    modules: tuple[str, ...] = ()  # the blocks a memory section names (none: not bound)

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return bool(self.modules) and facts.oom is True

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [config.replace(checkpoint_modules=self.modules)] if self.modules else []

    def for_memory(self, memory: Mapping[str, Any] | None) -> Checkpointing:
        """This unit with the blocks of ``memory``'s checkpointing what-if."""
        w = _checkpoint_what_if(memory)
        names = tuple((w or {}).get("change", {}).get("checkpoint_modules") or ())
        return dataclasses.replace(self, modules=names)

    def naming(self, modules: Iterable[str]) -> Checkpointing:
        """This unit bound to submodules the user names (checked as the field is)."""
        return dataclasses.replace(self, modules=TrainConfig(
            checkpoint_modules=tuple(modules)).checkpoint_modules)

    def propose(self, config: TrainConfig, memory: Mapping[str, Any] | None,
                budget_bytes: int, peak_bytes: int | None = None) -> list[Proposal]:
        """The blocks checkpointed, where the step's peak (``peak_bytes``, else the
        section's) is near the budget or over it: the what-if's peak, and the step time
        with the blocks' forward once more."""
        w = _checkpoint_what_if(memory)
        peak = peak_bytes if peak_bytes is not None else (memory or {}).get("peak_bytes")
        if w is None or memory is None or not near_budget(peak, budget_bytes):
            return []
        change = dict(w["change"])
        names = tuple(change["checkpoint_modules"])
        if set(names) <= set(config.checkpoint_modules):
            return []
        return [Proposal(self.id, config.replace(checkpoint_modules=names), change,
                         int(w["peak_bytes"]), _what_if_range(w), str(w.get("method") or ""),
                         recompute_ms(memory, change, 1.0))]


def _checkpoint_what_if(memory: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return next((w for w in (memory or {}).get("what_if") or ()
                 if (w.get("change") or {}).get("checkpoint_modules")
                 and isinstance(w.get("peak_bytes"), int)), None)


ACTIVATION_CHECKPOINTING = Checkpointing(
    "activation_checkpointing", "Recompute activations in backward instead of storing them",
    """
# before
h = self.block(h)
# after: trade ~30% more compute for much less activation memory
from torch.utils.checkpoint import checkpoint
h = checkpoint(self.block, h, use_reentrant=False)
""", category="memory", auto=True, fields=("checkpoint_modules",),
    needs="a step over its memory budget and the blocks a memory profile names "
          "(autofix fits the step before it speeds it up)")

EXPANDABLE_SEGMENTS = Fix("expandable_segments", "Reduce allocator fragmentation", """
# before: reserved memory far above what is allocated
# after (set before the first CUDA allocation):
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
""", category="memory")

RELEASE_GRAPHS = Fix("release_graphs", "Keep numbers, not graphs, past the step", """
# before: a tensor kept past its step holds its graph (every tensor its forward saved)
losses.append(loss)                    # a running total: total_loss += loss
val_out = model(x_val)                 # a forward with autograd on, output kept
# after: a number (or a detached tensor); an evaluation without autograd
losses.append(loss.item())             # or loss.detach()
with torch.no_grad():
    val_out = model(x_val)
""", category="memory")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (GRAD_ACCUMULATION, ACTIVATION_CHECKPOINTING, EXPANDABLE_SEGMENTS, RELEASE_GRAPHS)

#: the what-if fields of fixes that are advice only (an automatic fix's are its ``fields``)
PEAK_FIELDS: dict[str, tuple[str, ...]] = {}


def peak_prediction(fix: Fix, memory: Mapping[str, Any] | None,
                    budget_bytes: int | None = None) -> dict[str, Any] | None:
    """The predicted peak of ``fix`` from the memory section's what-ifs (module doc):
    ``{"peak_bytes", "range", "change", "method"}`` (and ``step_ms`` where the what-if has
    one); None where no what-if makes the fix's change."""
    fields = set(PEAK_FIELDS.get(fix.id, fix.fields))
    whats = [w for w in (memory or {}).get("what_if") or ()
             if fields and set(w.get("change") or ()) == fields
             and isinstance(w.get("peak_bytes"), int)]
    if not whats:
        return None

    def high(w: Mapping[str, Any]) -> int:
        r = w.get("range")
        return int(r[1]) if r else int(w["peak_bytes"])
    room = budget_bytes * (1 - FIT_MARGIN) if budget_bytes else None
    fit = [w for w in whats if room is not None and high(w) <= room]
    best = fit[0] if fit else min(whats, key=high)
    out = {k: best.get(k) for k in ("peak_bytes", "range", "change", "method")}
    if best.get("step_ms") is not None:
        out["step_ms"] = best["step_ms"]
    return out


# ---------------------------------------------------------------------- in a trial
def _users_batching(cfg: TrainConfig, orig: Any) -> Kwargs:
    """The user's own batching at the config's micro-batch: the loader's own BatchSampler
    over its sampler, the user's batch sampler (its size cannot change), or none (the
    dataset yields batches)."""
    from torch.utils.data import IterableDataset

    iterable = isinstance(orig.dataset, IterableDataset)
    kw: Kwargs = {}
    if orig.batch_size is not None:  # the loader made its own BatchSampler
        kw["batch_size"] = cfg.batch_size or orig.batch_size
        kw["drop_last"] = orig.drop_last
        if not iterable:
            kw["sampler"] = orig.sampler
    elif orig.batch_sampler is not None:  # the user's own batch sampler
        if cfg.batch_size is not None:
            raise CannotRealise("the DataLoader uses its own batch_sampler: autofix cannot "
                                "change its batch size")
        kw["batch_sampler"] = orig.batch_sampler
    else:  # automatic batching off: the dataset yields batches
        kw["batch_size"] = None
        if not iterable:
            kw["sampler"] = orig.sampler
    return kw


def _accumulate(cfg: TrainConfig, parts: StepParts) -> None:
    parts.micro_batches = cfg.grad_accum_steps


_NONE = object()


def _checkpointing(cfg: TrainConfig, model: Any, optimizer: Any) -> Callable[[], None] | None:
    """Each named submodule's forward wrapped in non-reentrant checkpointing; the undo puts
    back what each module held (its own ``forward`` attribute, or none)."""
    if not cfg.checkpoint_modules:
        return None
    from torch.utils.checkpoint import checkpoint

    mods = []
    for name in cfg.checkpoint_modules:
        try:
            mods.append(model.get_submodule(name))
        except AttributeError:
            raise CannotRealise(f"checkpoint_modules: {name!r} is not a submodule of the "
                                f"model ({type(model).__name__})") from None
    held = [(m, m.__dict__.get("forward", _NONE)) for m in mods]
    for m in mods:
        m.forward = functools.partial(checkpoint, m.forward, use_reentrant=False)

    def undo() -> None:
        for m, before in reversed(held):
            if before is _NONE:
                m.__dict__.pop("forward", None)
            else:
                m.forward = before
    return undo


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("batch_size",), batching=_users_batching, fallback=True),
                Realisation(("grad_accum_steps",), step=_accumulate),
                Realisation(("checkpoint_modules",), process=_checkpointing))
