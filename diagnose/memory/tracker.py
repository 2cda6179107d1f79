"""One training step's memory, by kind and by module, measured with torch's MemTracker.

:class:`StepTracker` is torch's ``MemTracker`` (a dispatch mode filing every tensor under a
kind: parameter, buffer, gradient, activation, temporary, optimizer state, other) plus the
kinds after every operator (the timeline: forward, backward or optimizer), the saved-for-
backward tensors by the module that made them (alive bytes per module at the peak; at the
start of backward, what a checkpointed block would free) and an out-of-memory error caught
with what was held. It runs on CPU, CUDA and under FakeTensorMode; ``limit_bytes`` emulates
a device of that size. :func:`track_step` runs one step under it; the session instead enters
it around one iteration of the user's loop (:mod:`.inplace`): the batch is named when it
comes, the loader's work is left out (:attr:`StepTracker.paused`), the batch size and
autocast are read from the model's outermost call. An output sharing the storage of an
input the tracker never saw (a slice of a dataset in memory) is held before the step: not
counted.
"""

from __future__ import annotations

import gc
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch.distributed._tools.common_utils import get_untyped_storages
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
from torch.utils._pytree import tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

from .kinds import (
    model_states,
    optimized,
    optimizer_hyper,
    optimizer_params,
    optimizer_state,
    tensor_bytes,
)
from .modtracker import LeafSafeModTracker
from .profile import OUTSIDE, PHASES, Point, StepMemory, blocks_from_saved
from .saved import Packed, Release, by_creator, unpack
from .tensors import (
    is_fake,
    is_oom,
    leading_size,
    model_device,
    own_storage,
    requested_bytes,
    tensors_of,
)

_ACT, _PARAM, _BUF, _GRAD = _MemRefType.ACT, _MemRefType.PARAM, _MemRefType.BUFFER, _MemRefType.GRAD
_TEMP, _OPT, _OTH = _MemRefType.TEMP, _MemRefType.OPT, _MemRefType.OTH

StepFn = Callable[[Any, Any], Any]


#: a hook handle with no hook (a frozen parameter's, see StepTracker)
_NO_HOOK = SimpleNamespace(remove=lambda: None)


def _guarded(hook: Callable[..., None]) -> Callable[..., None]:
    """A hook of :class:`StepTracker` (a module hook, MemTracker's ``_track``) that never
    raises into the step: where it does, the tracker gives up its count (``_give_up``) and
    later calls do nothing."""
    def run(self: Any, *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            hook(self, *args)
        except Exception as e:  # the user's step must go on: the result says why
            self._give_up(e)
    run.__doc__ = hook.__doc__
    return run


class StepTracker(MemTracker):
    """MemTracker plus the timeline, saved activations by module and a caught OOM (module
    docstring). Use as a context manager around one step; then :meth:`result`."""

    def __init__(self, model: Any, optimizer: Any = None, batch: Any = None, *,
                 limit_bytes: int | None = None, catch_oom: bool = False,
                 batch_size: int | None = None, optimizers: Sequence[Any] = (),
                 roots: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        # torch's ModTracker raises under autograd.grad on a module's leaf input (.modtracker)
        self._mod_tracker = LeafSafeModTracker(self._untracked)
        self.model, self.optimizer, self.batch = model, optimizer, batch
        # the optimizers whose steps are the optimizer's phase (each gets hooks of its own:
        # torch's global hook table may be being walked when the session enters the tracker)
        self.optimizers = [o for o in (optimizer, *optimizers) if o is not None]
        self.paused = False  # operators run untracked (the loader making the batch)
        self.failed: str | None = None  # why the count was given up (a hook of it raised)
        # the timeline's length each time a parameter's gradient was computed: the backward
        # passes that make one are the step's micro-batches (not autograd.grad on inputs)
        self.param_grads_at: list[int] = []
        self._grad_marks: list[Any] = []
        self._marked = WeakIdKeyDictionary()
        self.amp_dtype: str | None = None  # autocast at the model's outermost call
        self._before: set[int] = set()  # the current operator's inputs the tracker never saw
        self.limit_bytes, self.catch_oom = limit_bytes, catch_oom
        self.batch_size = batch_size if batch_size is not None else leading_size(batch)
        self.dev = model_device(model)
        self.points: list[Point] = []
        self.point_module: list[int] = []  # the innermost module of each point's operator
        self._module_ids: dict[str, int] = {}
        self.peak_op = -1
        self._creator = WeakIdKeyDictionary()  # storage -> module that made it
        # storage -> [bytes, creator, packers, ref, the graph's live holds of it]
        self._saved = WeakIdKeyDictionary()
        self._saved_alive: dict[str, int] = {}
        self._graph_held: dict[str, int] = {}  # bytes a graph still holds, by creator
        self.saved_at_peak: dict[str, int] = {}
        self.saved_at_backward: list[tuple[int, str, frozenset[str]]] | None = None
        self.oom: dict[str, Any] | None = None
        self._fw_start: dict[str, float] = {}
        self._entered = ""  # the module whose forward began last
        self.forward_s: dict[str, float] = {}
        self.classes: dict[str, str] = {n or "": type(m).__name__
                                        for n, m in model.named_modules()}
        self._root = type(model).__name__
        several = roots is not None and len(roots) > 1
        # torch's ModTracker names a module it meets first by its class: two models of one
        # class (a GAN's two nn.Sequential) would share names, and a child called without its
        # root (a LightningModule's self.net in training_step) is named "Sequential": every
        # module is named under its root's key (several models) or class before the step
        known = getattr(self._mod_tracker, "_known_modules", {})  # torch's private
        for key, root in (roots.items() if several and roots else [(self._root, model)]):
            known.update((m, f"{key}.{n}" if n else key) for n, m in root.named_modules())
        if several and roots is not None:
            self.classes = {f"{key}.{n}" if n else key: type(m).__name__
                            for key, root in roots.items() for n, m in root.named_modules()}
            # outside every model's call (the loss): filed under "", as the models together
            self.classes[""] = "+".join(type(r).__name__ for r in roots.values())
            self._root = ""
        # every model's parameters, gradients and buffers, every optimizer's state: their
        # kinds are known before the step (a second model or optimizer left out would have
        # its tensors counted as temporaries)
        self.models = list(roots.values()) if roots is not None and len(roots) > 1 else [model]
        self._hooks: ExitStack | None = None
        self._t0 = 0.0
        self.step_s = 0.0
        self.batch_bytes = sum(tensor_bytes(t) for t in tensors_of(batch))
        self.untracked_bytes = 0
        self.allocator_peak: int | None = None
        self._peak_before = 0

    # ------------------------------------------------------------------ context
    def __enter__(self) -> StepTracker:
        # garbage made before the step is collected now: collected inside it, it changes
        # what the tracker counts
        gc.collect()
        self.track_external(*self.models, *self.optimizers, *tensors_of(self.batch))
        if self.dev.type == "cuda" and not is_fake(self.model):
            torch.cuda.synchronize(self.dev)
            # the user's peak statistics are theirs: not reset; the step's own peak shows
            # only where it rises above the run's peak so far (else the tracker's count)
            self._peak_before = int(torch.cuda.max_memory_allocated(self.dev))
            known = self.get_tracker_snapshot().get(self.dev, {}).get("Total", 0)
            self.untracked_bytes = max(0, torch.cuda.memory_allocated(self.dev) - int(known))
        super().__enter__()
        self._hooks = ExitStack()
        self._hooks.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, unpack))
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> bool:  # type: ignore[override]
        self.step_s = time.perf_counter() - self._t0
        if self._hooks is not None:
            self._hooks.close()
        for h in self._grad_marks:
            h.remove()
        self._grad_marks = []
        super().__exit__(*exc)
        if self.dev.type == "cuda" and not is_fake(self.model):
            torch.cuda.synchronize(self.dev)
            after = int(torch.cuda.max_memory_allocated(self.dev))
            self.allocator_peak = after if after > self._peak_before else None
        err = exc[1] if len(exc) > 1 else None
        if isinstance(err, BaseException) and is_oom(err):
            if self.oom is None:
                self._note_oom(requested_bytes(str(err)), str(err))
            return self.catch_oom
        return False

    # ------------------------------------------------------------------ MemTracker hooks
    def _track_module_params_and_buffers(self, module: Any, install_grad_hooks: bool = True
                                         ) -> tuple[int, int]:
        """MemTracker's count of a module's parameters and buffers, every gradient hooked,
        the models given's too (torch.compile's submodules never show their forward begin,
        and their gradients counted as temporaries); torch refuses a hook on a frozen one
        (``requires_grad=False``): those get handles that hold no hook."""
        for p in module.parameters():
            if not p.requires_grad and self._param_to_grad_hook_handles.get(p) is None:
                self._param_to_grad_hook_handles[p] = (_NO_HOOK, _NO_HOOK)
            elif p.requires_grad and p not in self._marked:
                self._marked[p] = True
                self._grad_marks.append(p.register_hook(self._param_grad))
        return super()._track_module_params_and_buffers(module, True)

    def _param_grad(self, grad: Any) -> None:
        self.param_grads_at.append(len(self.points))

    @_guarded
    def _track(self, reftype: Any, t: torch.Tensor) -> None:
        """MemTracker's count of an operator's output, but for storage an input held that the
        tracker never saw (memory held before the step: a view of it, an in-place update)."""
        if self._before and any(id(st) in self._before for st in get_untyped_storages(t)):
            return
        super()._track(reftype, t)

    def _update_peak_stats(self, peak_state: Any) -> None:
        """Not kept: the peak comes from the timeline's points (MemTracker walks every
        module's stats after each operator for its own per-module peaks)."""

    def _register_global_optimizer_hook(self) -> None:
        """The optimizer's phase from hooks on the known optimizers alone (torch's global
        ones where none is known). A closure given to ``step()`` (Lightning's automatic
        optimization, LBFGS) runs the forward and backward inside it: wrapped, so that
        what it runs is not the optimizer's phase."""
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        def pre(opt: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
            self._in_opt = True
            return self._closure_outside(opt, args, kwargs)

        def post(opt: Any, args: Any, kwargs: Any) -> None:
            self._in_opt = False
            if self.failed is None:
                try:
                    self._track_optimizer_states(_OPT, opt)
                except Exception as e:  # the step goes on (_give_up)
                    self._give_up(e)
        if not self.optimizers:
            self._optimizer_hook_handles = (register_optimizer_step_pre_hook(pre),
                                            register_optimizer_step_post_hook(post))
            return
        handles = []
        for o in self.optimizers:
            handles += [o.register_step_pre_hook(pre), o.register_step_post_hook(post)]
        self._optimizer_hook_handles = tuple(handles)

    def _closure_outside(self, opt: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """``step()``'s (args, kwargs) with its closure, where it has one, run outside the
        optimizer's phase; None (unchanged) where it has none. The hooks are given the
        optimizer itself as the first of ``args``."""
        given = "closure" in kwargs
        at = 1 if args and args[0] is opt else 0
        closure = kwargs["closure"] if given else (args[at] if len(args) > at else None)
        if not callable(closure):
            return None

        def run() -> Any:
            self._in_opt = False
            try:
                return closure()
            finally:
                self._in_opt = True
        return ((args, {**kwargs, "closure": run}) if given
                else ((*args[:at], run, *args[at + 1:]), kwargs))

    def note_batch(self, batch: Any) -> None:
        """The step's batch, come from the loader while the tracker runs: counted as
        ``other`` (the batch), and its size taken as the step's."""
        tensors = tensors_of(batch)
        for t in tensors:
            self._update_and_maybe_create_winfos(t, _OTH)
        self.batch = batch
        self.batch_bytes = sum(tensor_bytes(t) for t in tensors)
        self.batch_size = leading_size(batch) if self.batch_size is None else self.batch_size

    def _root_call(self, inputs: Any) -> None:
        """The model's outermost call: the batch size (where no batch was named) and
        autocast."""
        if self.batch_size is None:
            self.batch_size = leading_size(inputs)
        dev = self.dev.type
        try:
            if torch.is_autocast_enabled(dev):
                self.amp_dtype = str(torch.get_autocast_dtype(dev)).removeprefix("torch.")
        except (TypeError, RuntimeError):  # an older torch, a device autocast does not know
            pass

    @contextmanager
    def _untracked(self) -> Iterator[None]:
        """Operators run inside are not counted (the tracker's own detach of a leaf)."""
        was, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = was

    def release(self) -> None:
        """Forget every storage seen (their weak references and callbacks): once the result
        is taken, the tracker costs the loop nothing more."""
        self._WINFO = WeakIdKeyDictionary()
        self._saved = WeakIdKeyDictionary()
        self._creator = WeakIdKeyDictionary()
        self.memory_tracking.clear()

    def _give_up(self, e: Exception) -> None:
        """A part of the tracker's bookkeeping raised (a hook, the dispatch's notes, the
        saved-tensor filing): the count stops (operators run untracked) and the step goes
        on; the result says why (:attr:`failed`). Nothing of it may raise into the user's
        step."""
        if self.failed is None:
            self.failed = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
        self.paused = True

    @_guarded
    def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
        if module is self.model and not self._mod_tracker.is_bw:
            self._root_call(inputs)
        # MemTracker refuses a root module called again (a micro-batch, a GAN's second
        # pass): it is tracked already, and its per-module stats are not used here
        with suppress(NotImplementedError, KeyError, AssertionError):
            super()._pre_fw_hook(module, inputs)
        if not self._mod_tracker.is_bw:
            self._entered = self._name(module)
            self._fw_start[self._entered] = time.perf_counter()
            # a module named from another root than the model's (Lightning calls its
            # submodule, not the LightningModule): its class from the module itself
            self.classes.setdefault(self._entered, type(module).__name__)

    # the module hooks never raise into the step: a module MemTracker did not file (called
    # before the tracker started, in a graph made before it) is skipped
    @_guarded
    def _post_fw_hook(self, module: Any, inputs: Any, outputs: Any) -> None:
        with suppress(KeyError):
            super()._post_fw_hook(module, inputs, outputs)
        name = self._name(module)
        t0 = self._fw_start.pop(name, None)
        if t0 is not None:
            self.forward_s[name] = self.forward_s.get(name, 0.0) + time.perf_counter() - t0

    # torch's hooks warn "Module is None. Skipping ..." for a backward whose module it did
    # not see go forward (a graph partly made outside the tracked modules): nothing the
    # user can act on, and the step's count does not need it
    @_guarded
    def _pre_bw_hook(self, module: Any, args: Any) -> None:
        with suppress(KeyError), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Module is None")
            super()._pre_bw_hook(module, args)

    @_guarded
    def _post_bw_hook(self, module: Any, args: Any) -> None:
        with suppress(KeyError), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Module is None")
            super()._post_bw_hook(module, args)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        if self.paused or self.failed is not None:
            return func(*args, **(kwargs or {}))
        before = self._current()
        try:
            self._before = {id(st) for t in tensors_of((args, kwargs))
                            for st in get_untyped_storages(t) if st not in self._WINFO}
        except Exception as e:  # a tensor with no storage to count (sparse): given up
            self._give_up(e)
            return func(*args, **(kwargs or {}))
        try:
            res = super().__torch_dispatch__(func, types, args, kwargs)
        except Exception as e:
            if is_oom(e) and self.oom is None:
                self._note_oom(requested_bytes(str(e)), str(e), before)
            raise
        finally:
            self._before = set()
        if res is NotImplemented or self.failed is not None:
            return res
        try:
            self._note_point(res)
        except Exception as e:  # the step goes on (_give_up)
            self._give_up(e)
            return res
        if self.limit_bytes is not None:
            now = self._current()
            if now[0] > self.limit_bytes:
                self._note_oom(now[0] - before[0], "emulated limit", before)
                raise torch.OutOfMemoryError(
                    f"out of memory (emulated limit of {self.limit_bytes} bytes): Tried to "
                    f"allocate {now[0] - before[0]} bytes")
        return res

    def _note_point(self, res: Any) -> None:
        """After an operator: its outputs' creator, the saved tensors when backward begins,
        and the timeline's point."""
        bw, opt = self._mod_tracker.is_bw, self._in_opt
        if not bw and not opt:
            # made outside every model's forward (the loop's own slice of a batch): OUTSIDE
            here = self._here() if set(self._mod_tracker.parents) - {"Global"} else OUTSIDE
            tree_map_only(torch.Tensor, lambda t: self._note_creator(t, here), res)
        if self.saved_at_backward is None and bw:
            self.saved_at_backward = self._saved_records()
        self._record_point(2 if opt else 1 if bw else 0)

    # ------------------------------------------------------------------ bookkeeping
    def _name(self, module: Any) -> str:
        fqn = self._mod_tracker.get_known_fqn(module) or ""
        return _strip(fqn, self._root)

    def _here(self) -> str:
        inner = max((p for p in self._mod_tracker.parents if p != "Global"),
                    key=lambda p: p.count("."), default="")
        return _strip(inner, self._root)

    def _note_creator(self, t: torch.Tensor, here: str) -> None:
        for st in get_untyped_storages(t):
            if st not in self._creator:
                self._creator[st] = here

    def _pack(self, t: torch.Tensor) -> Any:
        """A tensor saved for backward, filed under the module that saved it (and the one
        that made it); backward gets the tensor itself, whatever happens here. An
        activation's is handed to autograd in a :class:`_Packed` whose life is the graph's
        hold on it (a backward, or the graph's end, frees it)."""
        if self.failed is None and not (self._mod_tracker.is_bw or self._in_ac):
            try:
                held = self._file_saved(t)
                if held:
                    return Packed.holding(t, held, self._graph_held)
            except Exception as e:  # the step goes on (_give_up)
                self._give_up(e)
        return t

    def _file_saved(self, t: torch.Tensor) -> list[list[Any]]:
        """File ``t``'s activation storages as saved; their records."""
        here, held = self._here(), []
        for st in get_untyped_storages(t):
            winfo = self._WINFO.get(st, (None, None))[0]
            if winfo is None or winfo.reftype != _ACT:
                continue  # parameters, the batch, ...: not activations
            rec = self._saved.get(st)
            if rec is not None:
                rec[2].add(here)
                held.append(rec)
                continue
            creator = self._creator.get(st, here)
            nbytes = int(winfo.mem_consumed)
            self._saved_alive[creator] = self._saved_alive.get(creator, 0) + nbytes
            ref = weakref.ref(st, Release(self._saved_alive, creator, nbytes))
            self._saved[st] = rec = [nbytes, creator, {here}, ref, 0]
            held.append(rec)
        return held

    def _saved_records(self) -> list[tuple[int, str, frozenset[str]]]:
        return [(int(r[0]), str(r[1]), frozenset(r[2])) for r in list(self._saved.values())]

    def _current(self) -> tuple[int, ...]:
        snap = self._curr_mem_snap.get(self.dev, {})
        return (int(snap.get("Total", 0)),
                *(int(snap.get(k, 0)) for k in (_PARAM, _BUF, _GRAD, _OPT, _ACT, _TEMP, _OTH)))

    def _record_point(self, phase: int) -> None:
        c = self._current()
        self.points.append(Point(phase, c[1] + c[2], c[3], c[4], c[5], c[6], c[7]))
        here = self._here()
        self.point_module.append(self._module_ids.setdefault(here, len(self._module_ids)))
        if self.peak_op < 0 or c[0] > self.points[self.peak_op].total:
            self.peak_op = len(self.points) - 1
            self.saved_at_peak = {k: v for k, v in self._saved_alive.items() if v > 0}

    def _note_oom(self, requested: int | None, message: str,
                  before: tuple[int, ...] | None = None) -> None:
        c = before or self._current()
        phase = 2 if self._in_opt else 1 if self._mod_tracker.is_bw else 0
        self.oom = {"requested_bytes": requested, "message": message[:500],
                    "phase": PHASES[phase],
                    "module": self._here() or (self._entered if phase == 0 else "") or None,
                    "point": Point(phase, c[1] + c[2], c[3], c[4], c[5], c[6], c[7]),
                    "saved_by_module": {k: v for k, v in self._saved_alive.items() if v > 0}}

    # ------------------------------------------------------------------ result
    def result(self) -> StepMemory:
        """What the step held: the peak by kind, the timeline, modules and blocks."""
        whole = self.model if len(self.models) == 1 else torch.nn.ModuleList(self.models)
        states = model_states(whole)  # a ModuleList: each parameter once, whichever model
        opt_state = sum(optimizer_state(o) for o in self.optimizers)
        saved = self.saved_at_backward if self.saved_at_backward is not None else \
            self._saved_records()
        params = list(whole.parameters())
        big = max((tensor_bytes(p) for p in params), default=0)
        # the largest gradient a step makes (frozen parameters make none): what the
        # optimizer's temporaries are sized by, one parameter at a time
        trained = max((tensor_bytes(p) for p in params if p.requires_grad), default=0)
        return StepMemory(
            device=str(self.dev), batch_size=self.batch_size, points=self.points,
            point_module=self.point_module, module_names=list(self._module_ids),
            opt_state_bytes=opt_state,
            param_bytes=states["parameters"], largest_param_bytes=big,
            largest_trained_bytes=trained,
            batch_bytes=self.batch_bytes, grad_bytes=sum(
                tensor_bytes(p) for p in params if p.requires_grad),
            param_tensors=sum(1 for p in params if p.requires_grad),
            optimizer=optimizer_summary(self.optimizer), saved_at_peak=self.saved_at_peak,
            optimizer_classes=[type(o).__name__ for o in self.optimizers],
            saved_at_backward=by_creator(saved),
            # saved for backward and still held by a graph as the step ends (a tensor the
            # loop's own variables keep, its graph freed by backward, is no such graph)
            saved_after={k: v for k, v in self._graph_held.items() if v > 0},
            blocks=blocks_from_saved(saved, self.classes, self.forward_s,
                                     models_at_root=self._root == ""),
            classes=self.classes, step_s=self.step_s, oom=self.oom,
            untracked_bytes=self.untracked_bytes, allocator_peak_bytes=self.allocator_peak,
            optimized=optimized(self.optimizers))


def optimizer_summary(optimizer: Any) -> dict[str, Any] | None:
    """The optimizer's class, whether its step runs foreach (multi-tensor) kernels, and
    the hyper-parameters that size its state."""
    if optimizer is None:
        return None
    hyper = optimizer_hyper(optimizer)
    foreach = hyper.get("foreach")
    if foreach is None and not hyper.get("fused"):
        try:
            from torch.optim.optimizer import _default_to_fused_or_foreach

            _, foreach = _default_to_fused_or_foreach(optimizer_params(optimizer), False,
                                                      use_fused=False)
        except Exception:
            foreach = None
    return {"class": type(optimizer).__name__, "foreach": foreach,
            "fused": bool(hyper.get("fused")),
            "hyper": {k: hyper[k] for k in ("momentum", "amsgrad", "centered")
                      if isinstance(hyper.get(k), bool | int | float)}}


def _strip(fqn: str, root: str) -> str:
    if fqn == root:
        return ""
    return fqn[len(root) + 1:] if fqn.startswith(root + ".") else fqn


# ---------------------------------------------------------------------- one step
_AMP = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class StepSpec:
    """How :func:`run_step` runs a step: autocast to ``amp_dtype`` around each forward and
    its loss, and zero_grad's ``set_to_none`` (the micro-batches are the batches given)."""

    amp_dtype: str | None = None
    set_to_none: bool = True

    def to_json(self, micro_batches: int = 1) -> dict[str, Any]:
        return {"amp_dtype": self.amp_dtype, "set_to_none": self.set_to_none,
                "micro_batches": micro_batches}


def run_step(model: Any, optimizer: Any, batches: Sequence[Any], step_fn: StepFn,
             spec: StepSpec | None = None) -> None:
    """One optimizer step: ``step_fn(model, batch) -> loss`` on each of ``batches`` (the loss
    divided by their number) with backward, then ``optimizer.step()`` and ``zero_grad``."""
    spec = spec or StepSpec()
    k = len(batches)
    dev = model_device(model)
    for b in batches:
        ctx: AbstractContextManager[Any] = (
            torch.autocast(dev.type, dtype=_AMP[spec.amp_dtype]) if spec.amp_dtype
            else nullcontext())
        with ctx:
            loss = step_fn(model, b)
        (loss / k if k > 1 else loss).backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=spec.set_to_none)


def track_step(model: Any, optimizer: Any, batch: Any, step_fn: StepFn, *,
               spec: StepSpec | None = None, batches: Sequence[Any] | None = None,
               limit_bytes: int | None = None) -> StepMemory:
    """Run one real training step (the model is updated) under a :class:`StepTracker` and
    return what it held. An out-of-memory error inside it is caught and described in the
    result's ``oom``. ``batches``: the micro-batches, where ``batch`` is split."""
    mbs = [own_storage(b) for b in (list(batches) if batches is not None else [batch])]
    tracker = StepTracker(model, optimizer, mbs, limit_bytes=limit_bytes, catch_oom=True,
                          batch_size=leading_size(mbs[0]))
    with tracker:
        run_step(model, optimizer, mbs, step_fn, spec)
    if tracker.failed is not None:
        raise RuntimeError(f"torch's MemTracker could not count this step: {tracker.failed}")
    out = tracker.result()
    spec = spec or StepSpec()
    if spec.amp_dtype is None and tracker.amp_dtype is not None:  # step_fn's own autocast
        spec = StepSpec(amp_dtype=tracker.amp_dtype, set_to_none=spec.set_to_none)
    out.step = spec.to_json(len(mbs))
    return out


__all__ = ["StepFn", "StepSpec", "StepTracker", "run_step", "track_step"]
