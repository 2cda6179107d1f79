"""Memory fixes: a step that does not fit, or fits only just.

In a trial, the micro-batch (``batch_size``) is the rebuilt DataLoader's batch size over
the user's own sampler (or batch sampler, whose size cannot change), and
``grad_accum_steps`` the forward/backward passes per optimizer step, the loss divided by
their number; larger_batch (launch.py) changes both fields too.

A fix's predicted peak (:func:`peak_prediction`) is the memory section's what-if whose
change sets exactly the fields the fix changes (:data:`PEAK_FIELDS` for a fix that is
advice only); of several (accumulation over 2 or 4 micro-batches), the first whose range's
high end fits the budget less ``FIT_MARGIN``, else the lowest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...memory import FIT_MARGIN
from ..code import GENERIC_NOTE, Setup, loader_call
from ..config import TrainConfig, micro_batches
from ..realise import CannotRealise, Kwargs, Realisation, StepParts
from ..unit import Facts, Fix


class GradAccumulation(Fix):
    """The same effective batch in smaller micro-batches: every split, largest first."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return (config.batch_size or 0) > 1 and facts.oom is True

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [x for x in micro_batches(config)
                if (x.batch_size or 0) < (config.batch_size or 0)]

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
            head, loader_call(spec, before, show=["batch_size"], prefix="loader = "),
            "for x, y in loader:",
            "    loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()",
            f"# after: {k} micro-batches of {micro}, the same effective batch",
            loader_call(spec, before.replace(batch_size=micro), show=["batch_size"],
                        prefix="loader = "),
            "for i, (x, y) in enumerate(loader):",
            f"    (loss_fn(model(x), y) / {k}).backward()",
            f"    if (i + 1) % {k} == 0:",
            "        opt.step(); opt.zero_grad()"])


GRAD_ACCUMULATION = GradAccumulation(
    "grad_accumulation", "Smaller micro-batch with gradient accumulation", category="memory",
    auto=True, fields=("batch_size", "grad_accum_steps"),
    needs="a batch that does not fit (out of memory)")

ACTIVATION_CHECKPOINTING = Fix(
    "activation_checkpointing", "Recompute activations in backward instead of storing them",
    """
# before
h = self.block(h)
# after: trade ~30% more compute for much less activation memory
from torch.utils.checkpoint import checkpoint
h = checkpoint(self.block, h, use_reentrant=False)
""", category="memory")

EXPANDABLE_SEGMENTS = Fix("expandable_segments", "Reduce allocator fragmentation", """
# before: reserved memory far above what is allocated
# after (set before the first CUDA allocation):
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
""", category="memory")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (GRAD_ACCUMULATION, ACTIVATION_CHECKPOINTING, EXPANDABLE_SEGMENTS)

#: the what-if fields of fixes that are advice only (an automatic fix's are its ``fields``)
PEAK_FIELDS: dict[str, tuple[str, ...]] = {"activation_checkpointing": ("checkpoint_modules",)}


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


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("batch_size",), batching=_users_batching, fallback=True),
                Realisation(("grad_accum_steps",), step=_accumulate))
