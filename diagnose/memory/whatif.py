"""What a change does to the step's peak: predicted by scaling the measured kinds.

Every prediction here reads a measured step's JSON (:meth:`StepMemory.to_json`): its
timeline of stretches, each with its kinds. The model, point by point, then the maximum:

- the batch scales activations, the temporaries of forward and backward, and the batch
  itself; model states and the optimizer's temporaries do not. Weight-gradient temporaries
  do not scale either, nor, in a step under autocast, the half-size copies of the weights
  it saves for backward (counted as activations), so the range runs from "they scale" to
  "they do not";
- accumulation over n micro-batches: the batch's part over n, and the gradients held whole
  from the second micro-batch on;
- checkpointing blocks: a point keeps the share of its activations the blocks do not free,
  plus the largest block's saved activations, recomputed in its backward;
- zero_grad(set_to_none): gradients gone before the backward (or, turned off, always held);
- foreach vs a for-loop: the optimizer's temporaries span all parameters or the largest;
- another optimizer class: its state (see :mod:`.kinds`) for the one held;
- autocast: activations between half (all half precision) and whole, plus the half-size
  copies of the weights autocast caches for the forward.

A timeline point is a stretch of operators: each kind is its maximum over them, and
``most_bytes`` the most they held at once (the maxima may fall on different operators).
Each change is a point's bytes plus a shift that no operator of the stretch exceeds
(``up``: 0 for a change that only frees, the gradients a change holds whole, ...), so a
stretch's prediction is the lesser of the change applied to its maxima and its most bytes
plus that shift: never below the prediction from every operator, and no change at all
gives back the measured peak.

Each :class:`WhatIf` carries its range (the high end is what to plan with: an
under-prediction is an out-of-memory error) and its method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .kinds import KINDS, state_layout

SCALED = "scaled from the measured kinds"
FAKE = "re-run under FakeTensorMode"
#: what the fake re-run cannot see is outside the tracker: on CUDA the base step's share of
#: the allocator's peak the tracker did not see (measured per job, added to the count),
#: and the storages' rounding to the allocator's blocks, which MemTracker counts on CUDA.
#: 2%: one temporary's worth of difference in the order operators free memory.
FAKE_HIGH = 0.02
#: half precision halves what autocast computes in it; what it keeps in fp32 (norms,
#: softmax, losses) stays: the range is [1/2, 1] of the activations, the point their middle.
AMP_ACTIVATION_SHARE = (0.5, 1.0)
#: weight-sized temporaries in backward that do not scale with the batch: a parameter's
#: gradient before it is accumulated, and one more of that size (its transpose, a cast)
WEIGHT_TEMPORARIES = 2
SGD_MOMENTUM = 0.9  # the state another class is sized with: SGD with momentum (one buffer)


@dataclass
class WhatIf:
    """One change's predicted peak: ``range`` (low, high) and how it was predicted."""

    change: dict[str, Any]
    peak_bytes: int | None
    range: tuple[int, int] | None
    method: str
    note: str | None = None
    step_ms: float | None = None
    scaled_bytes: int | None = None  # the scaled estimate beside a fake re-run

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"change": self.change, "peak_bytes": self.peak_bytes,
                               "range": list(self.range) if self.range else None,
                               "method": self.method}
        for k in ("note", "step_ms", "scaled_bytes"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


class _P:
    """One timeline stretch, with the parts that scale with the batch."""

    def __init__(self, p: Mapping[str, Any], batch_bytes: int) -> None:
        self.phase = p.get("phase")
        self.in_blocks = bool(p.get("in_blocks"))
        self.k = {k: int(p.get(k) or 0) for k in KINDS}
        self.total = sum(self.k.values())
        most = p.get("most_bytes")  # absent in an older run's timeline: the kinds' sum
        self.most = min(int(most), self.total) if isinstance(most, int | float) else self.total
        opt = self.phase == "optimizer"
        self.act = self.k["activations"] + min(self.k["other"], batch_bytes)
        self.tmp = 0 if opt else self.k["temporaries"]
        self.fixed = self.total - self.act - self.tmp


class Profile:
    """A measured step's JSON, read for predictions."""

    def __init__(self, prof: Mapping[str, Any]) -> None:
        self.raw = prof
        model = prof.get("model") or {}
        self.P = int(model.get("parameters") or 0)
        self.G = int(model.get("gradients") or 0)
        self.S = int(model.get("optimizer_state") or 0)
        self.L = int(model.get("largest_parameter") or 0)
        # the largest gradient (frozen weights make none; a section from before it was
        # recorded: the largest parameter): the optimizer's temporaries, one at a time
        trained = model.get("largest_trained_parameter")
        self.LT = int(trained) if isinstance(trained, int) else self.L
        self.n_tensors = int(model.get("parameter_tensors") or 0)
        # what the optimizers hold (a hand-written update holds the rest): another
        # optimizer's state and step are sized by these; all trainable ones where unknown
        held = model.get("optimized_parameters")
        self.GO = int(held) if isinstance(held, int) else self.G
        n_held, big = model.get("optimized_tensors"), model.get("largest_optimized_parameter")
        self.n_opt = int(n_held) if isinstance(n_held, int) else self.n_tensors
        self.LO = int(big) if isinstance(big, int) else self.LT
        self.optimizer = model.get("optimizer") or None
        # several optimizers (a GAN's two): their classes; their state is S together
        self.optimizers = [str(c) for c in model.get("optimizer_classes") or ()]
        self.batch_size = prof.get("batch_size")
        self.peak = int(prof.get("peak_bytes") or 0)
        self.pts = [_P(p, int(prof.get("batch_bytes") or 0))
                    for p in ((prof.get("timeline") or {}).get("points") or [])]
        self.extra = max(0, self.peak - max((p.most for p in self.pts), default=0))
        self.step = prof.get("step") or {}
        first = self.pts[0].k["gradients"] if self.pts else 0
        self.set_to_none = bool(self.step.get("set_to_none", not (self.G and first >= self.G / 2)))

    def best(self, f: Callable[[_P], float], up: Callable[[_P], float] | float = 0.0) -> int:
        """The peak under a change: ``f`` of each stretch's maxima, at most its most bytes
        plus ``up`` (what the change adds to any one operator's bytes, at most: module
        doc), over the stretches."""
        def one(p: _P) -> float:
            return min(f(p), p.most + max(0.0, up(p) if callable(up) else up))
        return int(max((one(p) for p in self.pts), default=0)) + self.extra


def _done(change: dict[str, Any], lo: float, hi: float, point: float | None = None,
          note: str | None = None) -> WhatIf:
    lo, hi = sorted((int(lo), int(hi)))
    return WhatIf(change, int(point if point is not None else hi), (lo, hi), SCALED, note)


def _scaled(p: _P, k: float, weight_tmp: int, fixed_share: float, casts: int = 0) -> float:
    """A point at ``k`` times the batch, ``fixed_share`` (0..1) of the weight-sized part of
    its temporaries, and of its activations (``casts``: autocast's weight copies), left
    unscaled."""
    w = (min(p.tmp, weight_tmp) + min(p.act, casts)) * fixed_share
    return p.fixed + k * (p.act + p.tmp - w) + w


def _casts(pr: Profile) -> int:
    """The half-size copies of the fp32 weights a step under autocast saves for backward
    (0 without autocast): they do not scale with the batch."""
    return pr.P // 2 if pr.step.get("amp_dtype") else 0


def scale_batch(pr: Profile, k: float, change: dict[str, Any]) -> WhatIf:
    """The batch times ``k``: the range spans the weight-sized temporaries (the largest
    parameter's gradient, twice) scaling or not; the point is the range's high end."""
    wt, casts = WEIGHT_TEMPORARIES * pr.L, _casts(pr)

    def at(share: float) -> int:  # what scales grows with its stretch's maxima
        return pr.best(lambda p: _scaled(p, k, wt, share, casts),
                       lambda p: _scaled(p, k, wt, share, casts) - p.total)
    a, b = at(0.0), at(1.0)
    return _done(change, min(a, b), max(a, b))


def accumulate(pr: Profile, n: int, change: dict[str, Any]) -> WhatIf:
    """n micro-batches: each point at 1/n of the batch, with the gradients all held from the
    second micro-batch on (the optimizer's points as measured, activations scaled)."""
    wt, casts = WEIGHT_TEMPORARIES * pr.L, _casts(pr)

    def held(p: _P, share: float) -> float:
        grads = 0 if p.phase == "optimizer" else pr.G - p.k["gradients"]
        return _scaled(p, 1 / n, wt, share, casts) + grads

    def up(p: _P) -> float:  # the batch's part only shrinks; gradients at most all held
        return 0 if p.phase == "optimizer" else pr.G
    return _done(change, pr.best(lambda p: held(p, 0.0), up),
                 pr.best(lambda p: held(p, 1.0), up))


def checkpoint(pr: Profile, blocks: Mapping[str, Any], change: dict[str, Any]) -> WhatIf:
    """Each point keeps the share of its activations the blocks do not free (their share of
    the forward's activations); a point in a block's backward adds the largest block's
    saved activations, recomputed (the point). How much of a recomputed block is held at
    once beside the rest is not in the scaled kinds: the low end adds none of it, the high
    end all of it at every point."""
    acts = max((p.k["activations"] for p in pr.pts if p.phase == "forward"), default=0)
    freed = min(1.0, float(blocks.get("freed_bytes") or 0) / acts) if acts else 0.0
    big = int(blocks.get("largest_bytes") or 0)

    def plus(p: _P, recomputed: float, everywhere: bool) -> float:
        return recomputed if p.phase != "optimizer" and (p.in_blocks or everywhere) else 0

    def at(recomputed: float, everywhere: bool = False) -> int:
        def kept(p: _P) -> float:
            if p.phase == "optimizer":
                return p.total
            return p.total - freed * p.k["activations"] + plus(p, recomputed, everywhere)
        return pr.best(kept, lambda p: plus(p, recomputed, everywhere))
    return _done(change, at(0), at(big, True), at(big))


def set_to_none(pr: Profile, on: bool, change: dict[str, Any]) -> WhatIf:
    if not on:
        v = pr.best(lambda p: p.total - p.k["gradients"] + pr.G, pr.G)
        return _done(change, v, v)
    lo = pr.best(lambda p: p.total - (p.k["gradients"] if p.phase != "optimizer" else 0))
    hi = pr.best(lambda p: p.total - (p.k["gradients"] if p.phase == "forward" else 0))
    return _done(change, lo, hi, note="gradients made during backward are held either way")


def foreach(pr: Profile, on: bool, change: dict[str, Any]) -> WhatIf:
    ratio = (pr.GO / pr.LO if on else pr.LO / pr.GO) if pr.GO and pr.LO else 1.0

    def opt(p: _P, r: float) -> float:
        if p.phase != "optimizer":
            return p.total
        return p.total - p.k["temporaries"] + min(p.k["temporaries"] * r, 2 * pr.GO)

    def up(p: _P, r: float) -> float:  # the temporaries grow by r - 1, to 2GO at most
        return 0 if p.phase != "optimizer" else min(p.k["temporaries"] * (r - 1), 2 * pr.GO)
    a = pr.best(lambda p: opt(p, 1.0))
    b = pr.best(lambda p: opt(p, ratio), lambda p: up(p, ratio))
    return _done(change, a, b, note="the optimizer's temporaries over all parameters at once "
                 "(foreach) or one at a time")


def optimizer_class(pr: Profile, name: str, change: dict[str, Any]) -> WhatIf | None:
    """Another optimizer class: its state (SGD sized with momentum, one buffer a parameter)
    over the parameters the optimizers hold (not those a hand-written step updates),
    for the one held (every optimizer's, where the step ran several: the note names
    them), and its step's temporaries for those measured: from none (SGD's
    update in place) to two gradients' worth (a weight-decay copy and Nesterov's; Adam's
    square root and its quotient); a parameter's at a time where the optimizer steps them
    one by one (foreach off, or unset on a CPU), else all of them at once."""
    layout = state_layout(name, {"momentum": SGD_MOMENTUM})
    if layout is None:
        return None
    bufs, scalars = layout
    delta = bufs * pr.GO + scalars * 4 * pr.n_opt - pr.S
    opt = pr.optimizer or {}
    one_by_one = opt.get("foreach") is False or (
        opt.get("foreach") is None and not opt.get("fused")
        and str(pr.raw.get("device") or "cpu").startswith("cpu"))
    tmp_hi = 2 * ((pr.LO or pr.GO) if one_by_one else pr.GO)

    def held(p: _P, tmp: float) -> float:
        if p.phase != "optimizer":  # the state is held at every moment: the stretch's most
            return p.most + delta  # moves by it (its kinds' maxima need not coincide)
        return p.total + delta - p.k["temporaries"] + tmp

    def up(tmp: float) -> Callable[[_P], float]:
        return lambda p: delta + (tmp if p.phase == "optimizer" else 0)
    every = (f"; every optimizer of the step as {name} (its {len(pr.optimizers)}: "
             f"{', '.join(pr.optimizers)}), their state together"
             if len(pr.optimizers) > 1 else "")
    return _done(change, pr.best(lambda p: held(p, 0), up(0)),
                 pr.best(lambda p: held(p, tmp_hi), up(tmp_hi)),
                 note=f"advice only: another optimizer changes what is learned{every}"
                      f"{'; SGD with momentum (one buffer a parameter)' if name == 'SGD' else ''}")


def autocast(pr: Profile, dtype: str, change: dict[str, Any]) -> WhatIf:
    lo_s, hi_s = AMP_ACTIVATION_SHARE
    casts = pr.P // 2  # half-size copies of fp32 weights, cached for the forward

    def held(p: _P, share: float, cast: int) -> float:
        if p.phase == "optimizer":
            return p.total
        return p.fixed + share * (p.act + p.tmp) + cast
    def up(cast: int) -> Callable[[_P], float]:  # activations only shrink; the casts add
        return lambda p: 0 if p.phase == "optimizer" else cast
    mid = (lo_s + hi_s) / 2
    return _done(change, pr.best(lambda p: held(p, lo_s, 0), up(0)),
                 pr.best(lambda p: held(p, hi_s, casts), up(casts)),
                 pr.best(lambda p: held(p, mid, casts), up(casts)),
                 note="rough: which operators autocast runs in half precision is not measured")


def changes(prof: Mapping[str, Any], *, amp_dtypes: Iterable[str] = ("bfloat16",)
            ) -> list[dict[str, Any]]:
    """The changes worth predicting for a measured step (TrainConfig fields; the
    optimizer's class is advice only)."""
    pr = Profile(prof)
    b = pr.batch_size
    # a step with no backward, no gradient held and no optimizer is inference (the model's
    # gradients "when all exist" are sized from its parameters, trained or not): no
    # accumulation, recompute, zero_grad or optimizer change applies to it
    trains = bool(pr.optimizer) or any(p.phase in ("backward", "optimizer")
                                       or p.k["gradients"] for p in pr.pts)
    out: list[dict[str, Any]] = []
    if isinstance(b, int) and b > 0:
        if b >= 2:
            out.append({"batch_size": b // 2})
        out.append({"batch_size": 2 * b})
        micro = int(pr.step.get("micro_batches") or 1)
        for n in (2, 4) if trains else ():
            if b % n == 0 and b // n >= 1:
                out.append({"batch_size": b // n, "grad_accum_steps": micro * n})
    blocks = prof.get("blocks") or {}
    if blocks.get("blocks") and trains:
        out.append({"checkpoint_modules": [x["module"] for x in blocks["blocks"]]})
    if not pr.step.get("amp_dtype"):
        out.extend({"amp_dtype": d} for d in amp_dtypes)
    if not trains:
        return out
    opt = pr.optimizer or {}
    if opt.get("class"):  # a hand-written update clears (or keeps) its gradients itself
        out.append({"zero_grad_set_to_none": not pr.set_to_none})
    if opt.get("class") and not opt.get("fused") and opt.get("foreach") is not None:
        out.append({"optimizer_foreach": not opt["foreach"]})
    if opt.get("class") in ("Adam", "AdamW"):
        out.append({"optimizer_class": "SGD"})
    elif opt.get("class") == "SGD":
        out.append({"optimizer_class": "AdamW"})
    return out


def scaled(prof: Mapping[str, Any], change: Mapping[str, Any]) -> WhatIf | None:
    """One change's prediction from the measured kinds (None: not a change modelled here)."""
    pr = Profile(prof)
    ch = dict(change)
    b = pr.batch_size
    if "checkpoint_modules" in ch:
        return checkpoint(pr, prof.get("blocks") or {}, ch)
    if "grad_accum_steps" in ch and isinstance(b, int) and b:
        micro = int(pr.step.get("micro_batches") or 1)
        n = int(ch["grad_accum_steps"]) // micro
        if n >= 1 and ch.get("batch_size", b) * n == b:
            return accumulate(pr, n, ch)
    if "batch_size" in ch and isinstance(b, int) and b:
        return scale_batch(pr, ch["batch_size"] / b, ch)
    if "amp_dtype" in ch and ch["amp_dtype"]:
        return autocast(pr, ch["amp_dtype"], ch)
    if "zero_grad_set_to_none" in ch:
        return set_to_none(pr, bool(ch["zero_grad_set_to_none"]), ch)
    if "optimizer_foreach" in ch:
        return foreach(pr, bool(ch["optimizer_foreach"]), ch)
    if "optimizer_class" in ch:
        return optimizer_class(pr, str(ch["optimizer_class"]), ch)
    return None


def recompute_ms(prof: Mapping[str, Any], change: Mapping[str, Any],
                 step_ms: float | None) -> float | None:
    """A checkpointed step's time: the step plus the checkpointed blocks' forward once more
    (their share of the tracked step, timed under the tracker)."""
    blocks = prof.get("blocks") or {}
    step_s = float(prof.get("step_s") or 0.0)
    names = set(change.get("checkpoint_modules") or ())
    fwd = sum(float(x.get("forward_s") or 0.0) for x in blocks.get("blocks") or ()
              if x.get("module") in names)
    if step_ms is None or step_s <= 0 or not names:
        return None
    return round(step_ms * (1 + min(fwd / step_s, 1.0)), 3)


def scaled_what_ifs(prof: Mapping[str, Any], step_ms: float | None = None,
                    amp_dtypes: Iterable[str] = ("bfloat16",)) -> list[WhatIf]:
    out = []
    for ch in changes(prof, amp_dtypes=amp_dtypes):
        w = scaled(prof, ch)
        if w is not None:
            w.step_ms = recompute_ms(prof, ch, step_ms)
            out.append(w)
    return out


def largest_batch(prof: Mapping[str, Any], budget_bytes: int, margin: float) -> int | None:
    """The largest batch whose scaled peak (the range's high end) fits ``budget_bytes``
    less ``margin`` of it; None: not even a batch of one, or no batch size known."""
    pr = Profile(prof)
    b = pr.batch_size
    if not isinstance(b, int) or b <= 0 or not pr.pts:
        return None
    room = budget_bytes * (1 - margin)

    def fits(n: int) -> bool:
        r = scale_batch(pr, n / b, {}).range
        return r is not None and r[1] <= room
    if not fits(1):
        return None
    lo, hi = 1, 2
    while fits(hi) and hi < 1 << 24:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


__all__ = ["FAKE", "FAKE_HIGH", "SCALED", "Profile", "WhatIf", "changes", "largest_batch",
           "recompute_ms", "scaled", "scaled_what_ifs"]
