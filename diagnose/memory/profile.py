"""A tracked step's memory as data: the timeline's points, the peak by kind, the modules
whose saved activations are largest, the blocks a checkpoint could free; and its JSON.

Plain Python and numpy (no torch): the tracker fills a :class:`StepMemory`, and its JSON is
what the session writes to ``context.json`` and the analysis reads back. The timeline is
cut into at most :data:`TIMELINE_POINTS` stretches of consecutive operators of one phase,
each holding the maximum of every kind over its operators (so a prediction made from them
is never below one made from every operator) and the most bytes held at once in it (the
kinds' maxima may fall on different operators: their sum can exceed it, which bounds the
predictions, :mod:`.whatif`); the peak and each phase's highest point are stretches of
their own, exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .kinds import KINDS

PHASES = ("forward", "backward", "optimizer")
#: the module a tensor made outside every model's forward is filed under (the loop's own
#: slice of a batch, which the first layer saves): not the model's own ("(model)")
OUTSIDE = "(outside the model)"
TIMELINE_POINTS = 256  # stretches kept in the JSON timeline (a plot's width; ~40 KB)
TOP_MODULES = 8
#: checkpointing is offered where the blocks free at least this share of the saved
#: activations (as backward begins): less is not worth recomputing their forwards for
BLOCKS_WORTH = 0.05


class Point(NamedTuple):
    """The tracked bytes after one operator: its phase (index into PHASES) and MemTracker's
    kinds (``opt``: everything the optimizer's step made, its state and its temporaries)."""

    phase: int
    params: int  # parameters and buffers
    grads: int
    opt: int
    act: int
    temp: int
    other: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.opt + self.act + self.temp + self.other


def point_kinds(p: Iterable[int], opt_state: int, extra_other: int = 0) -> dict[str, int]:
    """A point's six kinds: the optimizer's bytes beyond its state are temporaries."""
    _, params, grads, opt, act, temp, other = (int(x) for x in p)
    state = min(opt, opt_state)
    return {"parameters": params, "gradients": grads, "optimizer_state": state,
            "activations": act, "temporaries": temp + opt - state,
            "other": other + extra_other}


def _under(name: str, prefix: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def _common(names: Iterable[str]) -> str:
    """The deepest module holding all of ``names`` ("" : the model)."""
    parts: list[str] | None = None
    for n in names:
        p = n.split(".") if n else []
        if parts is None:
            parts = p
        else:
            k = 0
            while k < min(len(parts), len(p)) and parts[k] == p[k]:
                k += 1
            parts = parts[:k]
    return ".".join(parts or [])


def blocks_from_saved(records: Iterable[tuple[int, str, frozenset[str]]],
                      classes: Mapping[str, str], forward_s: Mapping[str, float],
                      models_at_root: bool = False) -> dict[str, Any] | None:
    """The blocks worth checkpointing: the children of the module whose children, each
    checkpointed, would lower the peak the most. A saved tensor is freed by checkpointing
    block B when B made it and only modules inside B saved it (a block's input and its
    output, saved by the next block, stay). In backward each block's activations come back
    while it is recomputed, one block at a time: the peak keeps the largest, so a container
    is worth what its blocks free less its largest block (one block holding all the
    activations frees nothing at the peak). A child whose forward the step never called (a
    ModuleList, called through its items) is no block: wrapping its forward recomputes
    nothing. Nor is a single layer (a module with no children): checkpointed, it saves its
    input in place of what it kept (a ReLU's output, a BatchNorm's statistics), nor a whole
    model of several (``models_at_root``: the root's children are the models, named by the
    session, not modules a user's code can reach by name). None: no
    module has two such children, or they free under :data:`BLOCKS_WORTH` of the saved
    bytes."""
    freed: dict[str, int] = {}
    records = list(records)
    for nbytes, creator, packers in records:
        lcp = _common([creator, *packers])
        parts = lcp.split(".") if lcp else []
        for k in range(len(parts) + 1):
            name = ".".join(parts[:k])
            freed[name] = freed.get(name, 0) + nbytes
    best: tuple[int, int, str, list[str]] | None = None
    children: dict[str, list[str]] = {}
    for name in classes:
        if name:
            children.setdefault(name.rpartition(".")[0], []).append(name)
    called = {k for k, s in forward_s.items() if s > 0}  # none timed: every one may be
    for parent, kids in children.items():
        if models_at_root and not parent:
            continue
        useful = [k for k in kids if freed.get(k, 0) > 0 and (not called or k in called)
                  and k in children]
        if len(useful) < 2:
            continue
        total = sum(freed[k] for k in useful)
        worth = total - max(freed[k] for k in useful)
        if best is None or (worth, total) > best[:2]:
            best = (worth, total, parent, useful)
    if best is None or best[0] <= max(0.0, BLOCKS_WORTH * sum(r[0] for r in records)):
        return None
    _, total, parent, useful = best
    blocks: list[dict[str, Any]] = [
        {"module": k, "class": classes.get(k), "saved_bytes": freed[k],
         "forward_s": round(forward_s.get(k, 0.0), 6)} for k in useful]
    return {"container": parent, "class": classes.get(parent), "blocks": blocks,
            "freed_bytes": total, "largest_bytes": max(freed[k] for k in useful),
            "forward_s": round(sum(forward_s.get(k, 0.0) for k in useful), 6)}


def downsample(points: list[Point], n: int = TIMELINE_POINTS
               ) -> list[tuple[int, Point, int]]:
    """Stretches of at most ``n``-th of the step (phase-pure), each the maximum of every
    kind over its operators; the peak and each phase's top are stretches of their own.
    Returns (first operator's index, the stretch's maxima, the most bytes at once in it)."""
    if not points:
        return []
    arr = np.asarray(points, dtype=np.int64)
    tot = arr[:, 1:].sum(axis=1)
    ph = arr[:, 0]
    cut = {0, *np.flatnonzero(np.diff(ph) != 0) + 1}
    cut.update(range(0, len(arr), max(1, -(-len(arr) // n))))
    for p in (*np.unique(ph), -1):
        sel = np.flatnonzero(ph == p) if p >= 0 else np.arange(len(arr))
        top = int(sel[np.argmax(tot[sel])])
        cut.update((top, top + 1))
    bounds = np.array(sorted(c for c in cut if c < len(arr)), dtype=np.int64)
    mx = np.maximum.reduceat(arr[:, 1:], bounds, axis=0)
    most = np.maximum.reduceat(tot, bounds)
    return [(int(b), Point(int(ph[b]), *(int(x) for x in row)), int(t))
            for b, row, t in zip(bounds, mx, most, strict=True)]


#: saved activations under this share of the peak are not what holds it: the modules
#: listed are then those of the activations' own peak (as backward began). A share of the
#: page's own rounding: the kinds print as whole percents of the peak
SAVED_AT_PEAK_MIN = 0.01


@dataclass
class StepMemory:
    """One tracked step (see :mod:`diagnose.memory.tracker`); :meth:`to_json` is the form
    that travels (``context.json``'s ``memory``)."""

    device: str
    batch_size: int | None
    points: list[Point]
    opt_state_bytes: int
    param_bytes: int
    largest_param_bytes: int
    batch_bytes: int
    point_module: list[int] = field(default_factory=list)  # each point's module (an index)
    module_names: list[str] = field(default_factory=list)
    grad_bytes: int = 0  # the trainable parameters' size: the gradients once all exist
    param_tensors: int = 0
    optimizer: dict[str, Any] | None = None  # class, foreach, hyper-parameters
    # every optimizer whose steps the step ran, by class, where there are several (a GAN's
    # two): the optimizer's state and phase are theirs together
    optimizer_classes: list[str] = field(default_factory=list)
    step: dict[str, Any] | None = None  # how it ran: amp_dtype, set_to_none, micro_batches
    saved_at_peak: dict[str, int] = field(default_factory=dict)
    saved_at_backward: dict[str, int] = field(default_factory=dict)  # when backward began
    saved_after: dict[str, int] = field(default_factory=dict)  # still alive after the step
    blocks: dict[str, Any] | None = None
    classes: dict[str, str] = field(default_factory=dict)
    step_s: float = 0.0
    oom: dict[str, Any] | None = None
    untracked_bytes: int = 0  # held on the device but never seen by the tracker (CUDA)
    allocator_peak_bytes: int | None = None  # torch.cuda.max_memory_allocated (CUDA)
    largest_trained_bytes: int | None = None  # the largest parameter that takes a gradient
    # the trainable parameters the optimizers hold (kinds.optimized: bytes, tensors, the
    # largest): what another optimizer's state is sized by (a hand-written update holds
    # the rest); None where the step ran no known optimizer
    optimized: dict[str, int] | None = None

    @property
    def peak_index(self) -> int:
        return int(np.argmax([p.total for p in self.points])) if self.points else -1

    @property
    def tracked_peak_bytes(self) -> int:
        return self.points[self.peak_index].total if self.points else 0

    @property
    def extra_bytes(self) -> int:
        """Bytes the allocator held at its peak beyond what the tracker saw (CUDA)."""
        seen = self.tracked_peak_bytes + self.untracked_bytes
        return self.untracked_bytes + max(0, (self.allocator_peak_bytes or 0) - seen)

    @property
    def peak_bytes(self) -> int:
        return self.tracked_peak_bytes + self.extra_bytes

    def by_kind(self) -> dict[str, int]:
        if not self.points:
            return dict.fromkeys(KINDS, 0)
        return point_kinds(self.points[self.peak_index], self.opt_state_bytes,
                           self.extra_bytes)

    def phases(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for i, name in enumerate(PHASES):
            mine = [p for p in self.points if p.phase == i]
            if mine:
                top = max(mine, key=lambda p: p.total)
                out[name] = {"peak_bytes": top.total + self.untracked_bytes,
                             "by_kind": point_kinds(top, self.opt_state_bytes,
                                                    self.untracked_bytes)}
        return out

    def top_modules(self) -> tuple[str, list[dict[str, Any]]]:
        """The modules whose saved activations are largest at the peak, by the module that
        made them; where the peak holds none, or under :data:`SAVED_AT_PEAK_MIN` of it
        (it is in the optimizer's step, the loop still holding the model's output),
        those when backward began, the activations' own peak. Returns (when, modules)."""
        at, saved = "peak", self.saved_at_peak
        held = sum(saved.values())
        if (held < SAVED_AT_PEAK_MIN * self.peak_bytes
                and sum(self.saved_at_backward.values()) > held):
            at, saved = "backward start", self.saved_at_backward
        total = max(1, sum(saved.values()))
        top = sorted(saved.items(), key=lambda kv: -kv[1])[:TOP_MODULES]
        return at, [{"module": name or "(model)", "class": self.classes.get(name),
                     "saved_bytes": n, "share": round(n / total, 4)} for name, n in top]

    def kept_after_step(self) -> dict[str, Any]:
        """What was saved for backward in the step and is still alive as it ends: a graph
        the loop keeps past its step (a backward frees what it used), by the module that
        made it, largest first: ``{"bytes", "modules"}``."""
        top = sorted(self.saved_after.items(), key=lambda kv: -kv[1])[:TOP_MODULES]
        return {"bytes": sum(self.saved_after.values()),
                "modules": [{"module": name or "(model)", "class": self.classes.get(name),
                             "saved_bytes": n} for name, n in top]}

    def in_blocks(self) -> list[int]:
        """1 for each point whose operator ran in one of :attr:`blocks` in backward (where
        a checkpointed block recomputes its forward), else 0."""
        names = [b["module"] for b in (self.blocks or {}).get("blocks", ())]
        inside = [int(any(_under(n, b) for b in names)) for n in self.module_names]
        if not names or len(self.point_module) != len(self.points):
            return [0] * len(self.points)
        return [inside[m] if p.phase == 1 else 0
                for m, p in zip(self.point_module, self.points, strict=True)]

    def timeline(self) -> dict[str, Any]:
        pts = []
        flags = np.asarray(self.in_blocks(), dtype=np.int64)
        stretches = downsample(self.points)
        starts = np.array([op for op, _, _ in stretches], dtype=np.int64)
        inb: list[int] = (np.maximum.reduceat(flags, starts).tolist()
                          if len(flags) and len(starts) else [])
        for (op, p, most), f in zip(stretches, inb, strict=True):
            pts.append({"op": op, "phase": PHASES[p.phase],
                        **point_kinds(p, self.opt_state_bytes, self.untracked_bytes),
                        "most_bytes": most + self.untracked_bytes,
                        **({"in_blocks": True} if f else {})})
        return {"unit": "operator", "ops": len(self.points), "points": pts,
                "stretches": "each point is the maximum of each kind over the operators "
                             "from its op to the next point's; most_bytes: the most held "
                             "at once over them"}

    def to_json(self) -> dict[str, Any]:
        kinds = self.by_kind()
        at, top = self.top_modules()
        peak = self.points[self.peak_index] if self.points else None
        oom = None
        if self.oom is not None:
            o = self.oom
            oom = {"requested_bytes": o.get("requested_bytes"), "phase": o.get("phase"),
                   "module": o.get("module"), "message": o.get("message"),
                   "held_bytes": o["point"].total + self.untracked_bytes,
                   "by_kind": point_kinds(o["point"], self.opt_state_bytes,
                                          self.untracked_bytes),
                   "top_modules": [{"module": k or "(model)", "class": self.classes.get(k),
                                    "saved_bytes": v} for k, v in sorted(
                       o.get("saved_by_module", {}).items(), key=lambda kv: -kv[1])
                       [:TOP_MODULES]]}
        return {
            "source": "tracker", "device": self.device,
            "peak_bytes": self.peak_bytes, "tracked_peak_bytes": self.tracked_peak_bytes,
            "by_kind": kinds,
            "peak_phase": PHASES[peak.phase] if peak is not None else None,
            "phases": self.phases(), "top_modules": top, "top_modules_at": at,
            "kept_after_step": self.kept_after_step(),
            "blocks": self.blocks, "timeline": self.timeline(),
            "batch_size": self.batch_size, "batch_bytes": self.batch_bytes,
            "model": {"parameters": self.param_bytes, "gradients": self.grad_bytes,
                      "optimizer_state": self.opt_state_bytes,
                      "largest_parameter": self.largest_param_bytes,
                      "largest_trained_parameter": self.largest_trained_bytes,
                      "parameter_tensors": self.param_tensors, "optimizer": self.optimizer,
                      **({"optimized_parameters": self.optimized["bytes"],
                          "optimized_tensors": self.optimized["tensors"],
                          "largest_optimized_parameter": self.optimized["largest"]}
                         if self.optimized is not None else {}),
                      **({"optimizer_classes": self.optimizer_classes}
                         if len(self.optimizer_classes) > 1 else {})},
            "untracked_bytes": self.untracked_bytes,
            "allocator_peak_bytes": self.allocator_peak_bytes,
            "step": self.step, "step_s": round(self.step_s, 6), "oom": oom,
        }


__all__ = ["OUTSIDE", "PHASES", "TIMELINE_POINTS", "Point", "StepMemory", "blocks_from_saved",
           "downsample", "point_kinds"]
