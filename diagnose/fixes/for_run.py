"""Each finding's fixes as code for the run: its own DataLoader and optimizer where
context.json knows them; where only a saved trace speaks, what it shows (the optimizer's
class from ``Optimizer.step#SGD.step``, a loader with worker processes); else the fixes'
generic templates. A fix whose prediction is for an exact worker count or thread split
shows that change (its own template writes an expression, ``min(8, CPUs - 1)``, that may
be another config)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..stepmodel.facts import Facts
from ..stepmodel.prediction import Prediction
from . import FIXES, fix_code
from .catalog.config import THREAD_POOLS
from .catalog.threads import TORCH_THREADS
from .catalog.workers import NUM_WORKERS
from .code import OptimizerSpec, Setup, exact_change, some_workers, with_imports
from .config import TrainConfig
from .trainer_args import after_loader_args, elsewhere, fix_field_code, trainer_code
from .worker_search import most_workers, worker_ladder, workers_oversubscribed


def run_config(context: dict | None, metrics: Mapping[str, Any]) -> TrainConfig:
    """The run's own settings, as autofix would start from them: its DataLoader and
    optimizer (context.json), and what the trace shows of its step (gradients zeroed by
    fills, a foreach optimizer); torch's defaults where nothing is known."""
    setup = Setup.from_context(context)
    loader = setup.loader if setup is not None else None
    opt = setup.optimizer if setup is not None else None
    cfg = loader.config() if loader is not None else TrainConfig()
    if opt is not None:
        cfg = cfg.replace(optimizer_foreach=opt.foreach, optimizer_fused=opt.fused)
    if loader is None and metrics.get("dataloader_multiprocess") is True:
        cfg = cfg.replace(num_workers=1)  # at least one: the trace shows worker processes
    fills = metrics.get("zero_grad_fill_ops_per_step")
    if isinstance(fills, int | float) and fills > 0:
        cfg = cfg.replace(zero_grad_set_to_none=False)
    if metrics.get("optimizer_uses_foreach") is False and not cfg.optimizer_fused:
        cfg = cfg.replace(optimizer_foreach=False)
    return cfg


def code_for_run(findings: Iterable[Any], metrics: Mapping[str, Any],
                 context: dict | None) -> None:
    """Set each finding's ``fix_code`` (see the module doc): only the fixes whose code the
    run's own objects change; the rest keep their generic template."""
    setup = Setup.from_context(context)
    named = metrics.get("optimizer_step_class")
    if isinstance(named, str) and "," not in named and (setup is None or setup.optimizer is None):
        # a trace names the optimizer's class (Optimizer.step#SGD.step), not its arguments
        setup = Setup(setup.loader if setup is not None else None,
                      OptimizerSpec(named, args_known=False))
    config = run_config(context, metrics)
    more = (setup is None or setup.loader is None) and metrics.get(
        "dataloader_multiprocess") is True
    for f in findings:
        # the generic template where the run's own objects change nothing in it
        f.fix_code = {k: v for k, v in fix_code(f.fixes, setup).items() if v != FIXES[k].code}
        prefix = metrics.get("thread_pool_beside_torch_prefix")
        if "thread_pools" in f.fixes and isinstance(prefix, str) and prefix:
            f.fix_code["thread_pools"] = THREAD_POOLS.for_pool(prefix)
        if "torch_threads" in f.fixes and (code := TORCH_THREADS.for_run(metrics)):
            f.fix_code["torch_threads"] = code
        if more and "num_workers" in f.fixes:  # workers there, their count not known
            f.fix_code["num_workers"] = NUM_WORKERS.render_more()
        elif "num_workers" in f.fixes and (code := _workers_code(setup, config, metrics)):
            f.fix_code["num_workers"] = code  # overwritten below where a prediction is
        # a predicted fix shows the exact change its prediction is for
        for fid, p in f.predictions.items():
            if isinstance(p, Prediction) and fid in FIXES:
                code = FIXES[fid].code_for_change(setup, config, p.change, p.candidates,
                                                   p.at_least)
                if code is not None:
                    f.fix_code[fid] = code
        if isinstance(context, dict) and context.get("trainer") == "transformers":
            _as_training_arguments(f, config)
        if isinstance(context, dict) and context.get("trainer") == "lightning":
            f.fix_code = {k: LIGHTNING_LOADER + v if "DataLoader(" in v else v
                          for k, v in ((x, f.fix_code.get(x, FIXES[x].code))
                                       for x in f.fixes if x in FIXES)}
        f.fix_code = {k: with_imports(v) for k, v in f.fix_code.items()}


def _workers_code(setup: Setup | None, config: TrainConfig,
                  metrics: Mapping[str, Any]) -> str | None:
    """num_workers' code for a run's own loader with workers, where no prediction sets the
    count, in the direction its search goes: downward where the workers oversubscribe the
    CPUs or the CPUs were saturated (the ladder's first rung); upward where its loading
    waits and the template (CPUs - 1) would not raise the count (the most workers the CPUs
    keep busy, :func:`~.catalog.workers.most_workers`). None: the template says it."""
    facts = Facts.from_metrics(metrics)
    top, n, nw = most_workers(facts), facts.cpu_count, config.num_workers
    if setup is None or setup.loader is None or not nw or top is None or n is None:
        return None
    if workers_oversubscribed(config, facts):
        down = [c.num_workers for c in worker_ladder(config, facts) if c.num_workers < nw]
        return None if not down else exact_change(
            setup, config, config.replace(num_workers=down[0]),
            f"fewer workers: they and the training process oversubscribe the {n} CPUs "
            "(measure both ways, or let autofix)")
    if top <= n or nw < some_workers(n) or nw >= top:
        return None
    return exact_change(setup, config, config.replace(num_workers=top),
                        f"its loading waits: up to {top} workers keep what the CPUs give "
                        "busy (measure, or let autofix)")


#: how a DataLoader fix's code begins on a Lightning run: the Trainer calls the loader
#: hook, so the DataLoader call to change is the one it returns
LIGHTNING_LOADER = ("# Lightning: the DataLoader your train_dataloader() returns (in the "
                    "LightningDataModule\n# or the LightningModule)\n")


def _as_training_arguments(f: Any, config: TrainConfig) -> None:
    """A Hugging Face Trainer's run: each fix of ``f`` as the TrainingArguments it sets (a
    prediction's exact change, else the settings of the fix's own DataLoader call), else
    its code headed by where a Trainer user makes it (:mod:`.trainer_args`)."""
    for fid in f.fixes:
        code = f.fix_code.get(fid, FIXES[fid].code)
        p = f.predictions.get(fid)
        if isinstance(p, Prediction):
            change: Mapping[str, Any] | None = p.change
            note = "the change predicted below"
        else:
            change = FIXES[fid].change or after_loader_args(code)
            note = FIXES[fid].title[:1].lower() + FIXES[fid].title[1:]
        args = trainer_code(config, change, note) if change else None
        args = args if args is not None else fix_field_code(fid, note)
        if args is not None:
            f.fix_code[fid] = args
        elif "DataLoader(" in code:
            f.fix_code[fid] = elsewhere(code)
