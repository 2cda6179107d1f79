"""Where the loop's steps begin, told from what the loop does: no line of the user's changes.

Signals: the loader's batches (pulls), the calls of the models (those given, or else the
outermost modules with parameters that the loop calls: :class:`ModelHooks`), their
backward (one parameter of each model: its gradient accumulated), and the optimizers'
steps. A step starts where the loop next asks for input: the batch it pulls where it
iterates the loader, else its first call of a model. It ends:

- **optimizer**: once one round of the optimizers has stepped (one optimizer; a GAN's two).
  The round is the optimizers that stepped before one of them stepped again, or fewer
  where together they hold every trainable parameter of the models; one that steps later
  joins it. With models given, only optimizers holding their parameters count.
- **backward** (no optimizer: a hand-written update): a backward whose gradients were then
  cleared or whose parameters were written (``zero_grad``, ``p -= lr * p.grad``), not one
  still accumulating.
- **dataloader** / **forward** (no backward: inference): each batch; each model call made
  without autograd where the loop pulls no batch.
- **manual**: ``d.step()``; the others are off from then on.

A later signal of a stronger kind (an optimizer after batches alone) takes over; the session
then starts its wait steps over (:meth:`~diagnose.capture.profiler.WindowProfiler.
restart_wait`). Where nothing tells, :meth:`StepFinder.untold` says why, in a line.
"""

from __future__ import annotations

import contextlib
import numbers
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..values import a_type
from .eager import eager

#: steps whose gradients are looked at (set to None, or zeroed in place?) once optimizers
#: tell the steps; after these, a backward is only counted
GRAD_LOOKS = 8

#: the kinds of boundary, weakest first: a stronger one replaces a weaker one
RANK = {None: 0, "dataloader": 1, "forward": 1, "backward": 2, "optimizer": 3, "manual": 4}

#: model calls without autograd and without a backward before they count as inference steps
#: (each a step): an RL loop's rollout also calls its model without autograd, and its
#: first update comes later
FORWARD_ONLY = 8


def _grad_enabled() -> bool:
    import torch

    return torch.is_grad_enabled()


def named_models(model: Any) -> list[tuple[str, Any]]:
    """The models given to ``diagnose()``, each with a name: one (""), a list or tuple of
    them (each by its class, with its position where two share one: ``Generator``,
    ``Sequential[0]``), a dict of them (its keys; a ModuleDict is one model), or none."""
    if model is None:
        return []
    if isinstance(model, list | tuple):
        given = [(i, m) for i, m in enumerate(model) if m is not None]
        classes = [type(m).__name__ for _, m in given]
        return [(c if classes.count(c) == 1 else f"{c}[{i}]", m)
                for c, (i, m) in zip(classes, given, strict=True)]
    if isinstance(model, Mapping) and not callable(getattr(model, "parameters", None)):
        return [(str(k), m) for k, m in model.items() if m is not None]
    return [("", model)]


def as_models(model: Any) -> list[Any]:
    """The models given to ``diagnose()`` (:func:`named_models`, without their names)."""
    return [m for _, m in named_models(model)]


def wrong_counts(**counts: Any) -> str | None:
    """Why ``diagnose()``'s step counts cannot be used (None: they can): whole numbers
    (numpy's integers too, not a bool or text), ``steps`` and ``clock_steps`` at least 1,
    ``warmup`` and ``wait`` at least 0."""
    odd = [f"{k}={v!r}" for k, v in counts.items()
           if not isinstance(v, numbers.Integral) or isinstance(v, bool)]
    if odd:
        return f"diagnose(): {', '.join(odd)}: need whole numbers of steps"
    least = {"steps": 1, "clock_steps": 1, "warmup": 0, "wait": 0}
    if any(v < least.get(k, 0) for k, v in counts.items()):
        got = ", ".join(f"{k}={v}" for k, v in counts.items())
        return ("diagnose(): need steps >= 1, warmup >= 0, wait >= 0, clock_steps >= 1 "
                f"(got {got})")
    return None


def wrong_arguments(model: Any, loader: Any, caller: str = "diagnose", *,
                    optimizer: Any = None, loss_fn: Any = None, step_fn: Any = None,
                    **numbers: Any) -> str | None:
    """Why ``diagnose(model, loader)`` (or ``watch``: ``caller``) cannot take what it was
    given: the arguments the wrong way round (a DataLoader first, a model second), a model
    that is none (no ``parameters()``: a string, a path), a loader that is no iterable of
    batches (a string), an option of ``numbers`` (``sample_hz=...``) that is neither None
    nor a number of 0 or more, or what drives autofix's trials (:func:`wrong_step_arguments`);
    None where they can."""
    is_loader = hasattr(model, "batch_size") and hasattr(model, "dataset")
    is_model = callable(getattr(loader, "parameters", None)) and callable(
        getattr(loader, "register_forward_hook", None))
    if is_loader and is_model:
        return (f"{caller}(model, loader): the first argument is {a_type(model)} "
                f"and the second {a_type(loader)}: give the model first")
    for name, m in named_models(model):
        if not callable(getattr(m, "parameters", None)):
            return (f"{caller}(): the model{f' {name!r}' if name else ''} is "
                    f"{a_type(m)}, not a torch.nn.Module: give the model (a list or "
                    "dict of them, or None)")
    if loader is not None and (isinstance(loader, str | bytes | Path)
                               or not callable(getattr(loader, "__iter__", None))):
        return (f"{caller}(): the loader is {a_type(loader)}, not an iterable of "
                "batches: give the DataLoader (or None)")
    for name, v in numbers.items():
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool)
                              or not v >= 0):
            return f"{caller}(): {name} must be a number >= 0 (got {v!r})"
    return wrong_step_arguments(optimizer, loss_fn, step_fn, caller)


def unknown_options(caller: str, unknown: Mapping[str, Any], fn: Callable[..., Any]
                    ) -> str | None:
    """Why ``caller()`` cannot take the keywords in ``unknown`` (what ``**`` gathered): the
    first named, with the nearest of ``fn``'s own options where one is close (a typo);
    None where there are none."""
    if not unknown:
        return None
    import difflib
    import inspect

    known = [n for n, p in inspect.signature(fn).parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n != "self"]
    name = next(iter(unknown))
    near = difflib.get_close_matches(name, known, n=1)
    return (f"{caller}(): no option {name!r}" + (f" (did you mean {near[0]!r}?)" if near
                                                   else f"; its options: {', '.join(known)}"))


def wrong_step_arguments(optimizer: Any, loss_fn: Any, step_fn: Any,
                         caller: str = "diagnose") -> str | None:
    """Why what drives autofix's trials cannot: an ``optimizer`` that is no optimizer (no
    ``step()`` and ``param_groups``: a function, a class, a string), a ``loss_fn`` or
    ``step_fn`` that cannot be called (a loss's name); None where each is None or fits."""
    for opt in optimizer if isinstance(optimizer, list | tuple) else [optimizer]:
        if opt is not None and not (callable(getattr(opt, "step", None))
                                    and hasattr(opt, "param_groups")):
            return (f"{caller}(): optimizer is {a_type(opt)}, not a torch.optim.Optimizer: "
                    "give the optimizer object the loop steps (or None)")
    for name, fn in (("loss_fn", loss_fn), ("step_fn", step_fn)):
        if fn is not None and (not callable(fn) or isinstance(fn, type)):
            return (f"{caller}(): {name} is {a_type(fn)}, not a function: give the function "
                    f"itself (e.g. torch.nn.functional.cross_entropy), or None")
    return None


def model_names(model: Any) -> list[str]:
    """The names :func:`named_models` gives, in the same order."""
    return [n for n, _ in named_models(model)]


def param_ids(models: Sequence[Any], *, trainable: bool = False) -> frozenset[int]:
    """ids of the models' parameters (those that require grad, with ``trainable``)."""
    out: set[int] = set()
    for m in models:
        with contextlib.suppress(Exception):
            out.update(id(p) for p in m.parameters() if p.requires_grad or not trainable)
    return frozenset(out)


def _opt_params(opt: Any) -> list[Any]:
    try:
        return [p for g in opt.param_groups for p in g["params"]]
    except Exception:
        return []


@dataclass
class _Grad:
    """A probe parameter's gradient as its backward left it."""

    grad: weakref.ReferenceType[Any] | None
    grad_version: int
    param_version: int


class StepFinder:
    """Decides, signal by signal, whether a step boundary falls there (module doc).

    ``models``: those given (may be empty). ``pull()``, ``forward(grad_enabled)`` and
    ``optimizer_step(opt)`` return True where a boundary falls at that moment;
    ``backward(p)`` records a probe parameter's gradient. ``on_change(old, new)`` is told
    when the kind of boundary changes after a first one was placed.
    """

    def __init__(self, models: Sequence[Any] = (),
                 on_change: Callable[[str | None, str], None] | None = None) -> None:
        self.given = bool(models)
        self.owned = param_ids(models)  # an optimizer counts if it holds one of these
        self.target = param_ids(models, trainable=True) or None  # all of them: one round
        self.on_change = on_change
        self.mode: str | None = None
        self.placed = 0  # boundaries placed
        # since the last boundary
        self.pulls = 0
        self.forwards = 0
        self.backward_probes: set[int] = set()
        self.round: dict[int, str] = {}  # id(optimizer) -> class name
        # over the run
        self.by_pull = False  # the loop iterates the loader: batches start the steps
        self.by_forward = False  # model calls are seen (hooks on the models)
        self.members: set[int] | None = None  # the round, once known
        self.cover: set[int] = set()  # parameters the first round's optimizers hold
        self.optimizers: dict[int, weakref.ReferenceType[Any]] = {}  # counted, in order
        self.others: dict[int, tuple[str, int, int]] = {}  # not counted: class, tensors, values
        self.totals = {"pulls": 0, "forwards": 0, "grad_forwards": 0, "backwards": 0,
                       "optimizer_steps": 0, "other_steps": 0}
        self._grads: dict[int, tuple[weakref.ReferenceType[Any], _Grad]] = {}
        self.fresh_grads: list[bool] = []  # each step's first backward: a new gradient

    @property
    def grads_set_to_none(self) -> bool | None:
        """The steps' gradients were set to None between them (``zero_grad()``'s default),
        not zeroed in place; None where no step showed it."""
        if not self.fresh_grads:
            return None
        return all(self.fresh_grads)

    def signals(self) -> dict[str, Any]:
        """What the loop showed (``context.json``'s ``capture.step_signals``)."""
        return {**self.totals,
                "other_optimizers": [{"class": c, "tensors": n, "values": v}
                                     for c, n, v in self.others.values()],
                "grads_set_to_none": self.grads_set_to_none}

    # ------------------------------------------------------------------ optimizers
    def counts(self, opt: Any) -> bool:
        """The optimizer is one whose steps count: it holds a parameter of a model given
        (any optimizer, where no model was given)."""
        if not self.owned:
            return True
        return any(id(p) in self.owned for p in _opt_params(opt))

    def optimizer_step(self, opt: Any) -> bool:
        """An optimizer stepped; True: a boundary now (no batch or model call will say
        where the next step starts)."""
        key = id(opt)
        if not self.counts(opt):
            if key not in self.others:
                ps = _opt_params(opt)
                self.others[key] = (type(opt).__name__, len(ps),
                                    sum(int(p.numel()) for p in ps))
            self.totals["other_steps"] += 1
            return False
        self.totals["optimizer_steps"] += 1
        if key not in self.optimizers:
            with contextlib.suppress(TypeError):
                self.optimizers[key] = weakref.ref(opt)
        if self.members is None:
            if key in self.round:  # stepped again: the round is what stepped before it
                self.members = set(self.round)
                self.round = {}
            else:
                self.cover.update(id(p) for p in _opt_params(opt))
                if self.target is not None and self.target <= self.cover:
                    self.members = set(self.round) | {key}
        elif key not in self.members:  # a new optimizer joins the round
            self.members.add(key)
            self._changed("optimizer", "optimizer")
        self.round[key] = type(opt).__name__
        self._set_mode("optimizer")
        if self.mode != "optimizer" or self.by_pull or self.by_forward:
            return False
        return self._boundary_if(self._round_done())

    def _round_done(self) -> bool:
        return self.members is not None and self.members <= set(self.round)

    def closed_at_next_call(self) -> bool:
        """Did the optimizers' round just close in a loop whose step boundary waits for the
        next model call (model calls seen, no batches pulled)? The step's work is done
        here, outside any module's call; the boundary itself falls inside the next one."""
        return (self.mode == "optimizer" and self.by_forward and not self.by_pull
                and self._round_done())

    # ------------------------------------------------------------------ backward
    def watch_grad(self, p: Any) -> None:
        """``p``'s gradient was just accumulated (its post-accumulate-grad hook)."""
        self.totals["backwards"] += 1
        if self.mode in ("optimizer", "manual") and len(self.fresh_grads) >= GRAD_LOOKS:
            return  # the optimizers tell the steps: nothing more to learn from gradients
        g = p.grad
        prev = self._grads.get(id(p))
        if prev is not None and id(p) not in self.backward_probes and self.placed:
            # the first backward of a step: a new gradient tensor (the last one was set to
            # None) or the same one (zeroed in place)
            old = prev[1].grad() if prev[1].grad is not None else None
            self.fresh_grads.append(old is None or old is not g)
        try:
            ref = weakref.ref(g) if g is not None else None
        except TypeError:
            ref = None
        rec = _Grad(ref, int(getattr(g, "_version", 0)), int(getattr(p, "_version", 0)))
        with contextlib.suppress(TypeError):
            self._grads[id(p)] = (weakref.ref(p), rec)
        self.backward_probes.add(id(p))

    def _grads_used(self) -> bool:
        """A probe whose backward came since the last boundary had its gradient cleared
        (None, another tensor, written in place) or its parameter written since."""
        for key in self.backward_probes:
            pref, rec = self._grads.get(key, (None, None))
            p = pref() if pref is not None else None
            if p is None or rec is None:
                continue
            g = p.grad
            if (g is None or rec.grad is None or g is not rec.grad()
                    or int(getattr(g, "_version", 0)) != rec.grad_version
                    or int(getattr(p, "_version", 0)) != rec.param_version):
                return True
        return False

    # ------------------------------------------------------------------ input
    def pull(self) -> bool:
        """The loop asks the loader for a batch (before it comes); True: a boundary now."""
        self.by_pull = True
        self.totals["pulls"] += 1
        hit = self._starts(inference=self.pulls > 0)
        self.pulls += 1
        return hit

    def forward(self, grad_enabled: bool) -> bool:
        """The loop calls a model (outermost call); True: a boundary now. Where the loop
        pulls batches, a call starts a step only after a backward whose gradients were
        cleared after the batch came (``zero_grad()`` between the batch and the call)."""
        self.by_forward = True
        self.totals["forwards"] += 1
        self.totals["grad_forwards"] += bool(grad_enabled)
        nograd = self.totals["forwards"] - self.totals["grad_forwards"]
        hit = self._starts(call=True, inference=not grad_enabled and self.forwards > 0 and (
            self.mode == "forward" or nograd > FORWARD_ONLY))
        self.forwards += 1
        return hit

    def found_model(self, m: Any) -> None:
        """A model the hooks found (none was given): a round of optimizers is complete
        once together they hold its trainable parameters too."""
        ids = param_ids([m], trainable=True)
        if ids:
            self.target = (self.target or frozenset()) | ids

    def _starts(self, *, inference: bool, call: bool = False) -> bool:
        """The loop asks for input (``call``: a model call): a boundary where the step
        before is over."""
        if self.mode == "manual":
            return False
        batches = call and self.by_pull  # a call in a loop that pulls batches
        if self.mode == "optimizer":
            return False if batches else self._boundary_if(self._round_done())
        if self.backward_probes:
            if self._grads_used():
                self._set_mode("backward")
                return self._boundary_if(self.mode == "backward")
            return False
        if batches:
            return False
        if inference and self.totals["backwards"] == 0 and RANK[self.mode] <= 1:
            self._set_mode("dataloader" if self.by_pull else "forward")
            return self._boundary_if(True)
        return False

    # ------------------------------------------------------------------ state
    def manual(self) -> None:
        self._set_mode("manual")

    def _set_mode(self, mode: str) -> None:
        if RANK[mode] < RANK[self.mode]:
            return
        old, self.mode = self.mode, mode
        if old != mode:
            self._changed(old, mode)

    def _changed(self, old: str | None, new: str) -> None:
        """Boundaries of another kind from now on (after one was placed): say so."""
        if self.placed and self.on_change is not None:
            self.on_change(old, new)

    def _boundary_if(self, hit: bool) -> bool:
        if hit:
            self.placed += 1
            self.pulls = self.forwards = 0
            self.backward_probes = set()
            self.round = {}
        return hit

    @property
    def optimizer_list(self) -> list[Any]:
        """The optimizers whose steps counted, in the order they first stepped."""
        return [o for o in (r() for r in self.optimizers.values()) if o is not None]

    def untold(self) -> str | None:
        """Why no step boundary was found, in a line. None where one was, or where the
        loop simply ended before a second step could begin (an optimizer stepped once; a
        single batch): the profiled window was cut short, and the session says that."""
        t = self.totals
        if self.placed or self.mode == "manual" or t["optimizer_steps"] or t["pulls"] == 1:
            return None  # told, or the loop ended before a second step could begin
        if t["other_steps"]:
            return ("the only optimizers that stepped hold none of the parameters of the "
                    "model given")
        if t["backwards"] and t["forwards"] <= 1:
            return None  # one call, one backward: the loop's only step
        if t["backwards"]:
            return (f"backward ran {t['backwards']} times, but the gradients were never "
                    "cleared nor the parameters written in a way it can see")
        if t["forwards"] and t["grad_forwards"] == t["forwards"]:
            return (f"the model ran {t['forwards']} times with autograd on and never a "
                    "backward (an inference loop under torch.no_grad() is stepped by its "
                    "model calls)")
        if t["forwards"]:
            return (f"the model ran {t['forwards']} times, too few without autograd to "
                    "tell an inference loop's steps")
        seen = "no DataLoader batch, no optimizer step and no call of a model"
        return seen + ("" if self.given else " (no model was given to diagnose())")


class ModelHooks:
    """The hooks that feed a :class:`StepFinder` from the models: a forward pre-hook (and
    a post-hook, so nested calls count once) on each model, and a post-accumulate-grad hook
    on each model's first trainable parameter. With no model given, torch's global module
    hooks find the models (the outermost modules with parameters called) until the first
    boundary or :data:`DISCOVER_CALLS` calls, then hook those alone.
    ``on_forward(grad_enabled)`` and ``on_backward(param)`` are called."""

    #: outermost module calls the global hooks watch at most before they are removed
    DISCOVER_CALLS = 64

    def __init__(self, models: Sequence[Any], on_forward: Callable[[bool], None],
                 on_backward: Callable[[Any], None], *, discover: bool = False,
                 on_found: Callable[[Any], None] | None = None) -> None:
        self.on_forward, self.on_backward, self.on_found = on_forward, on_backward, on_found
        self.models: list[Any] = []
        self.found: list[weakref.ReferenceType[Any]] = []  # the models the hooks found
        self._handles: list[Any] = []
        self._global: list[Any] = []
        self._depth = 0
        self._calls = 0
        for m in models:
            self._hook(m)
        if discover and not self.models:
            self._discover()

    def _hook(self, m: Any) -> None:
        if not callable(getattr(m, "register_forward_pre_hook", None)):
            return
        try:
            self._handles.append(m.register_forward_pre_hook(eager(self._pre)))
            self._handles.append(m.register_forward_hook(eager(self._post), always_call=True))
        except Exception:
            return
        self.models.append(m)
        p = next((p for p in m.parameters() if p.requires_grad), None)
        register = getattr(p, "register_post_accumulate_grad_hook", None)
        if callable(register):
            with contextlib.suppress(Exception):
                self._handles.append(register(self.on_backward))

    def _pre(self, module: Any, args: Any) -> None:
        self._depth += 1
        if self._depth == 1:
            self.on_forward(_grad_enabled())

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    # ------------------------------------------------------------------ discovery
    def _discover(self) -> None:
        from torch.nn.modules import module as mm

        try:
            self._global = [mm.register_module_forward_pre_hook(eager(self._gpre)),
                            mm.register_module_forward_hook(eager(self._gpost),
                                                            always_call=True)]
        except Exception:
            self._global = []

    def _gpre(self, module: Any, args: Any) -> None:
        self._depth += 1
        if self._depth != 1:
            return
        try:
            has = next(iter(module.parameters()), None) is not None
        except Exception:
            has = False
        if not has:  # a loss module, an activation called alone: not a model
            return
        if not any(r() is module for r in self.found):
            with contextlib.suppress(TypeError):
                self.found.append(weakref.ref(module))
            if self.on_found is not None:
                self.on_found(module)
            p = next((p for p in module.parameters() if p.requires_grad), None)
            register = getattr(p, "register_post_accumulate_grad_hook", None)
            if callable(register):
                with contextlib.suppress(Exception):
                    self._handles.append(register(self.on_backward))
        self._calls += 1
        self.on_forward(_grad_enabled())

    def _gpost(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth == 0 and self._calls >= self.DISCOVER_CALLS:
            self.settle()

    def settle(self) -> None:
        """Stop discovering: the models found so far get hooks of their own (the global
        hooks slow every module call)."""
        if not self._global:
            return
        for h in self._global:
            h.remove()
        self._global = []
        if self._depth:  # removed inside a call: its post-hook will not come
            self._depth = 0
        handles = self._handles  # the gradient hooks already placed stay
        self._handles = []
        for r in self.found:
            m = r()
            if m is None:
                continue
            with contextlib.suppress(Exception):
                self._handles.append(m.register_forward_pre_hook(self._pre))
                self._handles.append(m.register_forward_hook(self._post, always_call=True))
                self.models.append(m)
        self._handles.extend(handles)

    @property
    def discovering(self) -> bool:
        return bool(self._global)

    def remove(self) -> None:
        for h in (*self._global, *self._handles):
            with contextlib.suppress(Exception):
                h.remove()
        self._global, self._handles = [], []
