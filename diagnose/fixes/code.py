"""The code a person would write by hand: the user's own DataLoader and optimizer calls.

:class:`Setup` is what is known about the user's objects: read from the live DataLoader
and optimizer (``Setup.from_objects``) or from a run's ``context.json``
(``Setup.from_context``), so that ``torch-diagnose analyze RUN`` shows the same arguments
as the live run. Where nothing is known (a saved trace alone) the code is a generic
template that says so (``DataLoader(dataset, ...)``: "..." stands for the other arguments).

``render_change(before, after, setup=...)`` writes the DataLoader call before and after
and the lines of the step that change (what autofix prints as "the change by hand").
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import TrainConfig

#: The first line of a generic template's ``# before``: what "..." means.
GENERIC_NOTE = '("..." stands for your other arguments, unchanged)'

_WIDTH = 88  # wrap a call's arguments beyond this many characters


# ---------------------------------------------------------------------- names of callables
def _collate_is_default(fn: Any) -> bool:
    name = getattr(fn, "__name__", "")
    mod = getattr(fn, "__module__", "") or ""
    return name in ("default_collate", "default_convert") and mod.startswith("torch.utils.data")


def callable_name(fn: Any, param: str) -> str | None:
    """How a callable argument reads in code: the function's name (``pad_collate``), a
    callable object's class (``Collator(...)``), else the parameter's own name."""
    if fn is None:
        return None
    name = getattr(fn, "__name__", None)
    if isinstance(name, str) and name.isidentifier():
        return name
    cls = type(fn).__name__
    if not inspect.isroutine(fn) and cls != "partial" and cls.isidentifier():
        return f"{cls}(...)"
    return param


def loader_arguments(loader: Any) -> dict[str, Any]:
    """The DataLoader arguments code shows that ``context.json`` does not hold otherwise
    (JSON values): custom batch sampler, collate_fn, worker_init_fn, generator, timeout,
    multiprocessing context. ``capture.runinfo.dataloader_info`` adds them."""
    bs = getattr(loader, "batch_sampler", None)
    custom_bs = getattr(loader, "batch_size", None) is None and bs is not None
    collate = getattr(loader, "collate_fn", None)
    mp = getattr(loader, "multiprocessing_context", None)
    return {
        "batch_sampler_class": type(bs).__name__ if custom_bs else None,
        "collate_fn": None if collate is None or _collate_is_default(collate)
        else callable_name(collate, "collate_fn"),
        "worker_init_fn": callable_name(getattr(loader, "worker_init_fn", None),
                                        "worker_init_fn"),
        "generator": getattr(loader, "generator", None) is not None,
        "timeout": getattr(loader, "timeout", 0) or 0,
        "multiprocessing_context": None if mp is None else (
            getattr(mp, "_name", None) or getattr(mp, "get_start_method", lambda: None)()),
    }


_SIMPLE = (bool, int, float, str, type(None))


def _plain(v: Any) -> Any:
    """A hyper-parameter as a JSON value (tuples as lists), or None when it is not one."""
    if isinstance(v, _SIMPLE):
        return v
    if isinstance(v, tuple | list) and all(isinstance(x, _SIMPLE) for x in v):
        return list(v)
    if hasattr(v, "item") and getattr(v, "numel", lambda: 0)() == 1:  # a tensor lr
        return _plain(v.item())
    return None


def optimizer_arguments(opt: Any) -> dict[str, Any]:
    """The optimizer's hyper-parameters as the user set them: ``lr`` always, the others
    where they differ from the class's defaults (foreach/fused are the config's)."""
    defaults = getattr(opt, "defaults", {}) or {}
    sig: Mapping[str, inspect.Parameter]
    try:
        sig = inspect.signature(type(opt).__init__).parameters
    except (TypeError, ValueError):
        sig = {}
    out: dict[str, Any] = {}
    for k, v in defaults.items():
        if k in ("foreach", "fused", "params"):
            continue
        pv = _plain(v)
        if pv is None and v is not None:
            continue
        p = sig.get(k)
        if sig and p is None:  # set by the class itself (AdamW: decoupled_weight_decay)
            continue
        dflt = _plain(p.default) if p is not None and p.default is not p.empty else object()
        if k == "lr" or pv != dflt:
            out[k] = pv
    return out


# ---------------------------------------------------------------------- what is known
@dataclass(frozen=True)
class LoaderSpec:
    """The user's DataLoader call: what code shows (values as they are, callables by name)."""

    batch_size: int | None = 1  # None: a batch_sampler, or automatic batching off
    shuffle: bool | None = False  # None: neither (a custom sampler, an IterableDataset)
    sampler: str | None = None  # class of a custom sampler
    batch_sampler: str | None = None  # class of a custom batch sampler
    drop_last: bool = False
    collate_fn: str | None = None  # name of a custom collate_fn (None: torch's default)
    worker_init_fn: str | None = None
    generator: bool = False
    timeout: float = 0
    multiprocessing_context: str | None = None
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    # the names the user's code binds the loader and its dataset to (the session found
    # them in the frame that opened it); None: not known, the code says loader, dataset
    variable: str | None = None
    dataset_variable: str | None = None
    iterable: bool = False  # an IterableDataset: each worker runs its own __iter__
    remade: bool = False  # the loop makes a new DataLoader as this one each epoch

    @classmethod
    def from_loader(cls, loader: Any) -> LoaderSpec:
        from_ctx = {**_loader_info(loader), **loader_arguments(loader)}
        return cls.from_context(from_ctx) or cls()

    @classmethod
    def from_context(cls, d: Mapping[str, Any] | None) -> LoaderSpec | None:
        """From ``context.json``'s ``dataloader`` entry (None when there is none)."""
        if not isinstance(d, Mapping) or d.get("num_workers") is None:
            return None  # none, or not a torch DataLoader (no num_workers): not known
        sampler_cls = d.get("sampler_class")
        custom_bs = d.get("batch_sampler_class")
        bs = d.get("batch_size")
        shuffle: bool | None = None
        sampler = None
        # automatic batching off (batch_size=None) keeps its sampler too: a custom one (a
        # BatchSampler given as the sampler, whose indices the dataset takes whole) or
        # torch's for shuffle
        if not custom_bs and not d.get("iterable_dataset"):
            if sampler_cls == "RandomSampler":
                shuffle = True
            elif sampler_cls in ("SequentialSampler", None):
                shuffle = False
            elif sampler_cls != "_InfiniteConstantSampler":
                sampler = str(sampler_cls)
        nw = int(d.get("num_workers") or 0)
        return cls(
            batch_size=bs if isinstance(bs, int) else None, shuffle=shuffle, sampler=sampler,
            batch_sampler=str(custom_bs) if custom_bs else None,
            drop_last=bool(d.get("drop_last")), collate_fn=d.get("collate_fn"),
            worker_init_fn=d.get("worker_init_fn"), generator=bool(d.get("generator")),
            timeout=d.get("timeout") or 0,
            multiprocessing_context=d.get("multiprocessing_context"), num_workers=nw,
            pin_memory=bool(d.get("pin_memory")),
            persistent_workers=bool(d.get("persistent_workers")) and nw > 0,
            prefetch_factor=d.get("prefetch_factor") if nw > 0 else None,
            variable=_identifier(d.get("variable")),
            dataset_variable=_identifier(d.get("dataset_variable")),
            iterable=d.get("iterable_dataset") is True, remade=bool(d.get("remade")))

    @property
    def name(self) -> str:
        """The loader as the user's code names it, else ``loader``."""
        return self.variable or "loader"

    @property
    def dataset(self) -> str:
        """The dataset as the user's code names it, else ``dataset``."""
        return self.dataset_variable or "dataset"

    def config(self, **step: Any) -> TrainConfig:
        """The TrainConfig of this loader (step settings from ``step``)."""
        return TrainConfig(num_workers=self.num_workers, pin_memory=self.pin_memory,
                           persistent_workers=self.persistent_workers,
                           prefetch_factor=self.prefetch_factor, batch_size=self.batch_size,
                           **step)


def _identifier(v: Any) -> str | None:
    """``v`` where it is a Python name (a context.json value is data, not trusted code)."""
    return v if isinstance(v, str) and v.isidentifier() else None


def loader_name(loader: LoaderSpec | Any | None) -> str:
    """The user's loader in code: ``train_dl`` (a :class:`LoaderSpec` that knows the
    name), else ``loader``."""
    return loader.name if isinstance(loader, LoaderSpec) else "loader"


def assign(loader: LoaderSpec | Any | None) -> str:
    """The start of the line that makes the user's loader: ``train_dl = ``."""
    return f"{loader_name(loader)} = "


def _loader_info(loader: Any) -> dict[str, Any]:
    """The settings ``context.json`` records for a DataLoader (see capture.runinfo)."""
    ds = getattr(loader, "dataset", None)
    sampler = getattr(loader, "sampler", None)
    try:
        from torch.utils.data import IterableDataset

        iterable = isinstance(ds, IterableDataset)
    except ImportError:  # pragma: no cover
        iterable = False
    return {"num_workers": getattr(loader, "num_workers", 0),
            "pin_memory": getattr(loader, "pin_memory", False),
            "batch_size": getattr(loader, "batch_size", None),
            "persistent_workers": getattr(loader, "persistent_workers", False),
            "prefetch_factor": getattr(loader, "prefetch_factor", None),
            "drop_last": getattr(loader, "drop_last", False), "iterable_dataset": iterable,
            "sampler_class": None if sampler is None else type(sampler).__name__}


@dataclass(frozen=True)
class OptimizerSpec:
    """The user's optimizer call: class, hyper-parameters as set, foreach/fused as set."""

    cls: str = "Optimizer"
    args: tuple[tuple[str, Any], ...] = ()
    foreach: bool | None = None
    fused: bool | None = None
    args_known: bool = True  # False: the class alone is known (a trace names it): "..."

    @classmethod
    def from_optimizer(cls, opt: Any) -> OptimizerSpec:
        d = getattr(opt, "defaults", {}) or {}
        return cls(type(opt).__name__, tuple(optimizer_arguments(opt).items()),
                   d.get("foreach"), d.get("fused"))

    @classmethod
    def from_context(cls, d: Mapping[str, Any] | None) -> OptimizerSpec | None:
        if not isinstance(d, Mapping) or not d.get("class"):
            return None
        args = d.get("arguments")
        return cls(str(d["class"]), tuple(args.items()) if isinstance(args, Mapping) else (),
                   d.get("foreach"), d.get("fused"))


@dataclass(frozen=True)
class Setup:
    """What is known about the user's DataLoader and optimizer (None: not known)."""

    loader: LoaderSpec | None = None
    optimizer: OptimizerSpec | None = None

    @classmethod
    def from_objects(cls, loader: Any = None, optimizer: Any = None) -> Setup:
        return cls(None if loader is None else LoaderSpec.from_loader(loader),
                   None if optimizer is None else OptimizerSpec.from_optimizer(optimizer))

    @classmethod
    def from_context(cls, ctx: Mapping[str, Any] | None) -> Setup | None:
        """From a run's ``context.json`` (None when it knows neither object)."""
        if not isinstance(ctx, Mapping):
            return None
        s = cls(LoaderSpec.from_context(ctx.get("dataloader")),
                OptimizerSpec.from_context(ctx.get("optimizer")))
        return None if s.loader is None and s.optimizer is None else s


# ---------------------------------------------------------------------- calls
def call(prefix: str, head: str, args: Iterable[str], width: int = _WIDTH) -> str:
    """``prefix + head(args)``, the arguments wrapped under the parenthesis when long."""
    args = list(args)
    one = f"{prefix}{head}(" + ", ".join(args) + ")"
    if len(one) <= width or len(args) < 2:
        return one
    indent = " " * (len(prefix) + len(head) + 1)
    lines, cur = [], f"{prefix}{head}(" + args[0]
    for a in args[1:]:
        if len(cur) + 2 + len(a) + 1 > width:
            lines.append(cur + ",")
            cur = indent + a
        else:
            cur += ", " + a
    lines.append(cur + ")")
    return "\n".join(lines)


def _as_spec(loader: Any) -> LoaderSpec | None:
    if loader is None or isinstance(loader, LoaderSpec):
        return loader
    return LoaderSpec.from_loader(loader)


def loader_args(loader: LoaderSpec | Any | None, cfg: TrainConfig | None = None, *,
                show: Iterable[str] = (), override: Mapping[str, str] | None = None) -> list[str]:
    """The arguments of the user's DataLoader call with ``cfg``'s settings, in torch's order.

    ``loader``: a :class:`LoaderSpec`, a live DataLoader, or None (generic: ``...`` for the
    arguments not known). ``show``: settings written even at their default (the ones that
    change); ``override``: settings written as the given expression.
    """
    spec = _as_spec(loader)
    if cfg is None:
        cfg = spec.config() if spec is not None else TrainConfig()
    show, override = set(show), dict(override or {})
    out: dict[str, str] = {}
    if spec is None:
        if cfg.batch_size is not None and "batch_size" in show:
            out["batch_size"] = str(cfg.batch_size)
    else:
        bs = cfg.batch_size or spec.batch_size
        if spec.batch_sampler:
            out["batch_sampler"] = "batch_sampler"
        elif bs is not None:
            out["batch_size"] = str(bs)
        else:
            out["batch_size"] = "None"
        if spec.shuffle is not None:
            out["shuffle"] = str(spec.shuffle)
        if spec.sampler:
            out["sampler"] = "sampler"
    workers = int(override["num_workers"] != "0") if "num_workers" in override \
        else cfg.num_workers
    if cfg.num_workers or "num_workers" in show or "num_workers" in override:
        out["num_workers"] = str(cfg.num_workers)
    if spec is not None and spec.collate_fn:
        out["collate_fn"] = spec.collate_fn
    if cfg.pin_memory or "pin_memory" in show:
        out["pin_memory"] = str(cfg.pin_memory)
    if spec is not None:
        if spec.drop_last and not spec.batch_sampler:
            out["drop_last"] = "True"
        if spec.timeout:
            out["timeout"] = repr(spec.timeout)
        if spec.worker_init_fn:
            out["worker_init_fn"] = spec.worker_init_fn
        if spec.multiprocessing_context:
            out["multiprocessing_context"] = repr(spec.multiprocessing_context)
        if spec.generator:
            out["generator"] = "generator"
    if workers:
        if cfg.prefetch_factor not in (None, 2) or "prefetch_factor" in show:
            out["prefetch_factor"] = str(cfg.prefetch_factor or 2)
        if cfg.persistent_workers or "persistent_workers" in show:
            out["persistent_workers"] = str(cfg.persistent_workers)
    out.update(override)
    order = ["batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
             "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context",
             "generator", "prefetch_factor", "persistent_workers"]
    args = [spec.dataset if spec is not None else "dataset"] + (["..."] if spec is None else [])
    return args + [f"{k}={out[k]}" for k in order if k in out]


def loader_call(loader: LoaderSpec | Any | None, cfg: TrainConfig | None = None, *,
                show: Iterable[str] = (), override: Mapping[str, str] | None = None,
                prefix: str = "") -> str:
    """``DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)`` for ``cfg`` (see
    :func:`loader_args`); ``prefix`` (e.g. ``"loader = "``) lines wrapped arguments up."""
    return call(prefix, "DataLoader", loader_args(loader, cfg, show=show, override=override))


def optimizer_call(opt: OptimizerSpec | Any | None, *, foreach: bool | None = None,
                   fused: bool | None = None, prefix: str = "opt = ") -> str:
    """``opt = torch.optim.AdamW(model.parameters(), lr=0.001, fused=True)``: the user's
    class and hyper-parameters (``...`` where they are not known) with these kernels."""
    if opt is not None and not isinstance(opt, OptimizerSpec):
        opt = OptimizerSpec.from_optimizer(opt)
    cls = opt.cls if opt is not None else "AdamW"
    args = ["model.parameters()"]
    if opt is None or not opt.args_known:
        args.append("...")
    else:
        for k, v in opt.args:
            args.append(f"{k}={tuple(v) if isinstance(v, list) else v!r}")
    if fused is not None:
        args.append(f"fused={fused}")
    if foreach is not None:
        args.append(f"foreach={foreach}")
    return call(prefix, f"torch.optim.{cls}", args)


# ---------------------------------------------------------------------- a fix's DataLoader code
#: The CPUs this process may use, as code.
AFFINITY = "len(os.sched_getaffinity(0))"
#: Some workers, as code: the CPUs less one for the training process, at most 8.
SOME_WORKERS = f"min(8, {AFFINITY} - 1)"


def with_imports(code: str) -> str:
    """``code`` with the imports its expressions need that it lacks (``os`` for
    :data:`AFFINITY`), so that it runs as pasted."""
    if "os.sched_getaffinity" in code and not re.search(r"^import os$", code, re.MULTILINE):
        return "import os\n" + code
    return code


def some_workers(cpus: int) -> int:
    """What :data:`SOME_WORKERS` comes to on ``cpus`` CPUs."""
    return max(0, min(8, cpus - 1))


def loader_change(setup: Setup | None, before_note: str, after_note: str,
                  after: Callable[[TrainConfig], TrainConfig], *, generic: TrainConfig,
                  override: Mapping[str, str] | None = None, needs_workers: bool = False,
                  before_extra: tuple[str, ...] = (), after_extra: tuple[str, ...] = ()) -> str:
    """A fix's ``# before`` / ``# after`` of the user's DataLoader call (``generic``
    settings and ``DataLoader(dataset, ...)`` when the loader is not known).
    ``needs_workers``: the change needs worker processes, so a loader without them gets
    some in the after."""
    spec = setup.loader if setup is not None else None
    before = spec.config() if spec is not None else generic
    new = after(before)
    over = dict(override or {})
    if needs_workers and before.num_workers == 0:
        new = new.replace(num_workers=1)
        over.setdefault("num_workers", SOME_WORKERS)
    changed = [*before.diff(new), *over]
    head = "# before" + (f": {before_note}" if before_note else "")
    if spec is None:
        head += f" {GENERIC_NOTE}" if len(head) + len(GENERIC_NOTE) < _WIDTH else \
            f"\n# {GENERIC_NOTE}"
    return "\n".join([head, loader_call(spec, before, show=changed, prefix=assign(spec)),
                      *before_extra, f"# after: {after_note}",
                      loader_call(spec, new, show=changed, override=over, prefix=assign(spec)),
                      *after_extra, *_sharded(spec, before, new, "num_workers" in over)])


#: The fields whose code :func:`exact_change` writes: the DataLoader's and torch's threads.
EXACT_FIELDS = frozenset({"num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                          "batch_size", "intra_op_threads"})


def exact_change(setup: Setup | None, before: TrainConfig, after: TrainConfig,
                 after_note: str) -> str:
    """``# before`` / ``# after`` of the DataLoader call (and torch's thread count) for one
    exact change of :data:`EXACT_FIELDS`: the values a prediction is for, where a fix's own
    template writes an expression (``min(8, CPUs - 1)`` workers) that may come to another
    config on this machine."""
    spec = setup.loader if setup is not None else None
    changed = [k for k in before.diff(after) if k != "intra_op_threads"]
    head = "# before" + ("" if spec is not None else f" {GENERIC_NOTE}")
    lines = [head, loader_call(spec, before, show=changed, prefix=assign(spec)),
             f"# after: {after_note}"]
    if after.intra_op_threads is not None and after.intra_op_threads != before.intra_op_threads:
        lines.append(f"torch.set_num_threads({after.intra_op_threads})")
    return "\n".join([*lines, loader_call(spec, after, show=changed, prefix=assign(spec)),
                      *_sharded(spec, before, after)])


def _sharded(spec: LoaderSpec | None, before: TrainConfig, after: TrainConfig,
             more: bool = False) -> tuple[str, ...]:
    """Where an IterableDataset gets more workers (``more``: a count written as an
    expression), the lines that say each one must take its own share: every worker runs
    its own ``__iter__``, and one that walks the data unsharded repeats every sample."""
    if spec is None or not spec.iterable or not (more or after.num_workers > before.num_workers):
        return ()
    return ("# an IterableDataset: each worker runs its own __iter__; shard its samples by",
            "# torch.utils.data.get_worker_info() (.id of .num_workers), or they repeat")


# ---------------------------------------------------------------------- a change, by hand
def _loader_view(c: TrainConfig) -> tuple[Any, ...]:
    """What ``c``'s DataLoader call holds (torch takes persistent_workers and
    prefetch_factor only with worker processes; prefetch_factor defaults to 2)."""
    workers = c.num_workers > 0
    return (c.num_workers, c.pin_memory, c.persistent_workers if workers else None,
            (c.prefetch_factor or 2) if workers else None, c.batch_size)


def _loader_changed(a: TrainConfig, b: TrainConfig) -> bool:
    return _loader_view(a) != _loader_view(b)


_LOADER_FIELDS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                  "batch_size")


def render_change(before: TrainConfig, after: TrainConfig, *, setup: Setup | None = None,
                  loader: Any = None, optimizer: Any = None, device: str | None = None) -> str:
    """Code, ``# before`` / ``# after``, for the fields that differ (empty: nothing to do).

    The DataLoader and optimizer calls are the user's own (``setup``, or the live
    ``loader`` / ``optimizer``); a generic template where they are not known. ``device``:
    where the job's model is ("cpu", "cuda:0"): the loop moves its batch there (not at all
    on the CPU) and autocasts for its type; unknown, a GPU's with a ``device`` to define."""
    if before == after:
        return ""
    if setup is None and (loader is not None or optimizer is not None):
        setup = Setup.from_objects(loader, optimizer)
    spec = setup.loader if setup is not None else None
    ospec = setup.optimizer if setup is not None else None
    lines: list[str] = []
    if _loader_changed(before, after):
        changed = [k for k in before.diff(after) if k in _LOADER_FIELDS]
        lines += ["# before" + ("" if spec is not None else " " + GENERIC_NOTE),
                  loader_call(spec, before, show=changed, prefix=assign(spec)),
                  "# after", loader_call(spec, after, show=changed, prefix=assign(spec))]
    step: list[str] = []
    dev = "cuda" if device is None else device.split(":")[0]
    if after.intra_op_threads is not None and after.intra_op_threads != before.intra_op_threads:
        step.append(f"torch.set_num_threads({after.intra_op_threads})")
    if after.batched_fetch and not before.batched_fetch:
        bs = after.batch_size or (spec.batch_size if spec is not None else None) or "batch_size"
        order = ("SequentialSampler(dataset)" if spec is not None and spec.shuffle is False
                 else "RandomSampler(dataset)")
        step += [f"from torch.utils.data import BatchSampler, {order.split('(')[0]}",
                 "loader = DataLoader(dataset, batch_size=None,  # one dataset[indices] per "
                 "batch",
                 f"                    sampler=BatchSampler({order}, batch_size={bs}, "
                 f"drop_last={spec.drop_last if spec is not None else False}))"]
    if after.gc_freeze and not before.gc_freeze:
        step += ["import gc", "gc.collect()", "gc.freeze()  # once, before the loop"]
    if after.cudnn_benchmark and not before.cudnn_benchmark:
        step.append("torch.backends.cudnn.benchmark = True")
    if after.channels_last and not before.channels_last:
        step.append("model = model.to(memory_format=torch.channels_last)")
    if after.compile and not before.compile:
        step.append("model = torch.compile(model)")
    if after.checkpoint_modules and after.checkpoint_modules != before.checkpoint_modules:
        names = ", ".join(repr(n) for n in after.checkpoint_modules)
        step += ["from functools import partial",
                 "from torch.utils.checkpoint import checkpoint",
                 f"for name in ({names},):  # their forward recomputed in backward",
                 "    block = model.get_submodule(name)",
                 "    block.forward = partial(checkpoint, block.forward, use_reentrant=False)"]
    if (after.optimizer_foreach, after.optimizer_fused) != (
            before.optimizer_foreach, before.optimizer_fused):
        step.append(optimizer_call(ospec, foreach=after.optimizer_foreach or None,
                                   fused=after.optimizer_fused or None))
    if after.uses_grad_scaler and not before.uses_grad_scaler:
        step.append(f'scaler = torch.amp.GradScaler("{dev}")')
    k = after.grad_accum_steps
    dl = loader_name(spec)
    loop = [f"for i, (x, y) in enumerate({dl}):" if k > 1 else f"for x, y in {dl}:"]
    nb = ", non_blocking=True" if after.non_blocking else ""
    to = "device" if device is None else repr(device)
    if dev != "cpu":
        loop.append(f"    x, y = x.to({to}{nb}), y.to({to}{nb})")
    if after.channels_last:
        loop.append("    x = x.contiguous(memory_format=torch.channels_last)")
    indent = "    "
    if after.amp_dtype:
        loop.append(f'    with torch.autocast("{dev}", dtype=torch.{after.amp_dtype}):')
        indent = "        "
    loop.append(f"{indent}loss = loss_fn(model(x), y){f' / {k}' if k > 1 else ''}")
    loop.append("    scaler.scale(loss).backward()" if after.uses_grad_scaler
                else "    loss.backward()")
    body = "        " if k > 1 else "    "
    if k > 1:
        loop.append(f"    if (i + 1) % {k} == 0:")
    if after.uses_grad_scaler:
        loop += [f"{body}scaler.step(opt)", f"{body}scaler.update()"]
    else:
        loop.append(f"{body}opt.step()")
    loop.append(f"{body}opt.zero_grad(set_to_none={after.zero_grad_set_to_none})")
    step_fields = {"non_blocking", "amp_dtype", "channels_last", "zero_grad_set_to_none",
                   "grad_accum_steps"}
    # the loop, written as the common (x, y) form, only where the change is inside it; a
    # change made once before the loop (the threads, a sampler, gc.freeze) stands alone, as
    # the user's own step (a step_fn, dict batches) stays as it is
    in_loop = bool(step_fields & set(before.diff(after)))
    if step or in_loop:
        if lines:
            lines.append("")
        lines.append("# the step" if in_loop else "# before the loop")
        lines += step + (loop if in_loop else [])
    # a setting this rendering does not write yet is still named, never dropped
    others = {k: v for k, v in before.diff(after).items() if k not in _RENDERED}
    if others:
        if lines:
            lines.append("")
        lines += [f"# also: {k} {a!r} -> {b!r} (see the fix's code)"
                  for k, (a, b) in others.items()]
    return "\n".join(lines)


#: The TrainConfig fields :func:`render_change` writes as code (others are named).
_RENDERED = frozenset({*_LOADER_FIELDS, "non_blocking", "amp_dtype", "channels_last",
                       "cudnn_benchmark", "compile", "zero_grad_set_to_none",
                       "optimizer_foreach", "optimizer_fused", "grad_accum_steps",
                       "intra_op_threads", "batched_fetch", "gc_freeze",
                       "checkpoint_modules"})


__all__ = ["AFFINITY", "EXACT_FIELDS", "GENERIC_NOTE", "SOME_WORKERS", "LoaderSpec", "OptimizerSpec", "Setup", "call", "callable_name",
           "loader_args", "loader_arguments", "loader_call", "loader_change", "optimizer_arguments",
           "optimizer_call", "render_change", "some_workers", "with_imports", "assign", "loader_name"]
