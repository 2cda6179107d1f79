"""Commands ``torch-diagnose demo`` and ``torch-diagnose autofix TARGET`` (thin: they call the API).

Nothing here imports torch until a command runs, so the rest of the CLI stays torch-free.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import math
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..console import emit, make_console, progress
from ..errors import DiagnoseError
from ..runfolder import AUTOFIX_FILE
from ..values import interval_end, usable_cpus
from .output import check_writable, choose_format, wrote


def add_parser(sub: Any) -> None:
    d = sub.add_parser("demo", help="diagnose and autofix a built-in slow training loop",
                       description="An MNIST-sized net on 60k synthetic digits with per-sample "
                       "augmentation and num_workers=0: baseline -> diagnosis -> autofix -> "
                       "before/after.")
    d.add_argument("--samples", type=int, default=None, help="dataset size (default 60000)")
    d.add_argument("--batch-size", type=int, default=64)
    d.add_argument("--budget", type=float, default=120.0, metavar="S",
                   help="seconds autofix may spend, its baseline timing and before/after "
                   "included; at most 10%% more while a trial in flight ends (default 120)")
    d.add_argument("--max-trials", type=int, default=8, metavar="N",
                   help="the most trials autofix runs (default 8)")
    d.add_argument("--quick", action="store_true",
                   help="short rounds and a smaller dataset (seconds, wider intervals)")
    d.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch intra-op threads of the training process (default 1: the net is "
                   "too small to gain from more, and the CPUs are left to the DataLoader)")
    _add_output_args(d)
    d.set_defaults(func=run_demo)

    a = sub.add_parser("autofix", help="autofix your own workload: TARGET returns its objects",
                       description="TARGET is `path/to/file.py:function` or `module:function`; "
                       "the function takes no arguments and returns a dict with model, loader, "
                       "optimizer and loss_fn (or step_fn).")
    a.add_argument("target", metavar="TARGET")
    a.add_argument("--budget", type=float, default=300.0, metavar="S",
                   help="seconds autofix may spend, the baseline's capture and timing and "
                   "the before/after included; at most 10%% more while a trial in flight "
                   "ends (default 300)")
    a.add_argument("--max-trials", type=int, default=12, metavar="N",
                   help="the most trials autofix runs (default 12)")
    a.add_argument("--min-gain", type=float, default=0.03, metavar="F",
                   help="keep a change only if its speedup's interval lies above 1 + F "
                   "(default 0.03)")
    a.add_argument("--compile", action="store_true", help="also try torch.compile (opt-in)")
    a.add_argument("--fixes", metavar="ID,ID", help="try these fixes instead of the ones a "
                   "diagnosis of the baseline names (ids: `torch-diagnose rules ID`)")
    a.add_argument("--quick", action="store_true", help="short rounds (wider intervals)")
    a.add_argument("--keep-tuned-state", action="store_true",
                   help="leave the model as trained by the trials (default: restore it)")
    a.add_argument("--memory-budget", metavar="BYTES", default=None,
                   help="bytes a step may use (a number, or with KiB/MiB/GiB): a fix "
                   "predicted not to fit it is skipped, and the tuned peak is measured")
    _add_output_args(a)
    a.set_defaults(func=run_autofix)


def _add_output_args(p: Any) -> None:
    p.add_argument("--try-all", action="store_true",
                   help="try every named fix, even those the step model predicts will not help")
    p.add_argument("--out-dir", metavar="DIR", default=None,
                   help="make the run folder in DIR (default: diagnose-runs): the baseline's "
                   "capture, autofix.json and model_disagreements.jsonl go there")
    p.add_argument("--json", metavar="FILE", help="also write the autofix report as JSON")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="also write the autofix report to FILE (.json: JSON, .html: a page "
                   "with predicted beside measured for each decision, .txt, .log, .out or "
                   "no extension: text)")


def _outputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(path, format) of each report file asked for; checked before any trial runs."""
    out = []
    if args.json:
        out.append((args.json, choose_format("json", args.json, ("json",), said_by="--json")))
    if args.output:
        out.append((args.output, choose_format(None, args.output)))
    for path, _ in out:
        check_writable(path)
    return out


def _write_outputs(outputs: list[tuple[str, str]], tr: Any, run_dir: Path) -> None:
    """``autofix.json`` in the run folder, and the report files asked for (each said on
    stderr)."""
    _write_json(str(run_dir / AUTOFIX_FILE), tr.to_json())
    for path, fmt in outputs:
        if fmt == "json":
            _write_json(path, tr.to_json())
        elif fmt == "html":
            from ..report.autofix_html import render_autofix_html

            _write_text(path, render_autofix_html(tr))
        else:
            _write_text(path, tr.render_text())
        wrote(path)


R = TypeVar("R")


def _run_root(args: argparse.Namespace) -> None:
    """Where the run folders go (--out-dir) can hold them: checked, nothing made."""
    from ..runfolder import check_run_root

    _in_run_root(args, check_run_root)


def _run_dir(args: argparse.Namespace) -> Path:
    """The run folder of this command (under --out-dir): baseline capture, disagreements."""
    from ..runfolder import new_run_dir

    return _in_run_root(args, new_run_dir)


@contextlib.contextmanager
def _dropped_if_empty(run_dir: Path) -> Iterator[None]:
    """The command's run folder removed where it fails with nothing written in it (a job
    that fails at its first batch leaves no empty folder behind); one that holds anything
    stays, with what it holds."""
    try:
        yield
    except BaseException:
        folders = sorted((d for d in run_dir.rglob("*") if d.is_dir()), reverse=True)
        for d in [*folders, run_dir]:
            with contextlib.suppress(OSError):
                d.rmdir()  # only an empty folder goes
        raise


def _in_run_root(args: argparse.Namespace, do: Callable[[str | None], R]) -> R:
    """``do(--out-dir)``, an OSError as one line naming the folder."""
    try:
        return do(args.out_dir)
    except OSError as e:
        raise DiagnoseError(f"cannot create a run folder under "
                            f"{args.out_dir or 'diagnose-runs'}: {e.strerror or e}") from None


# ---------------------------------------------------------------------- demo
def _need_torch(command: str) -> None:
    """One line, not a traceback, where torch is not installed (saved traces need none)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise DiagnoseError(f"`torch-diagnose {command}` runs a training job and needs "
                            "PyTorch: install torch first (analysing saved traces does not)")


def run_demo(args: argparse.Namespace) -> int:
    _need_torch("demo")
    import torch

    from .. import demo
    from ..autofix import Plan, Workload, autofix
    from ..fixes import TrainConfig
    from ..session import capture_baseline

    _check_numbers(args)
    console = make_console()
    outputs = _outputs(args)
    plan = Plan.quick() if args.quick else Plan()
    samples = args.samples or (12_000 if args.quick else demo.SAMPLES)
    if samples < 4 * args.batch_size or args.batch_size < 1 or args.threads < 1:
        raise DiagnoseError("demo: need --batch-size >= 1, --threads >= 1 and "
                            "--samples >= 4 x batch size")
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    try:
        console.rule("torch-diagnose demo")
        console.print(f"machine: {demo.machine_line()}")
        console.print(f"command: {_demo_command(args)}")
        with progress("building the workload (60k samples in memory)"):
            wl = demo.build(samples=samples, batch_size=args.batch_size)
        console.print(
            f"workload: MLP 784-128-64-10, SGD(lr=0.01, momentum=0.9), {samples:,} synthetic "
            f"28x28 digits, per-sample RandomAffine + elastic distortion + Normalize on the CPU,\n"
            f"          DataLoader(ds, batch_size={args.batch_size}, shuffle=True) "
            f"(num_workers=0); torch threads {args.threads}; built in {wl.build_s:.1f} s")
        w = Workload.from_user(wl.model, wl.loader, wl.optimizer, loss_fn=wl.loss_fn)
        run_dir = _run_dir(args)
        console.print(f"run folder: {run_dir}")
        with progress("1/3 diagnosis: profiling the baseline with `with diagnose(...)`"):
            report = capture_baseline(w, TrainConfig.from_objects(wl.loader, wl.optimizer),
                                      out_dir=run_dir)
        if report is None:
            raise DiagnoseError("demo: the baseline capture produced no report")
        if report.source:  # the baseline's own run folder, inside the demo's
            console.print(f"baseline capture: {report.source[0]}")
        _print_findings(console, report)
        with progress("2/3 autofix") as status:
            tr = autofix(wl.model, wl.loader, wl.optimizer, loss_fn=wl.loss_fn, report=report,
                         max_trials=args.max_trials, budget_s=args.budget, plan=plan,
                         try_all=args.try_all, out_dir=run_dir,
                         progress=lambda s: status.update(f"2/3 autofix: {s}"))
        console.rule("3/3 result")
        tr.print(console)
        _verdict(console, tr, time.perf_counter() - t0)
        _write_outputs(outputs, tr, run_dir)
    finally:
        torch.set_num_threads(threads)
    return 0


def _demo_command(args: argparse.Namespace) -> str:
    parts = ["torch-diagnose", "demo"]
    for flag, value, default in (("--samples", args.samples, None),
                                 ("--batch-size", args.batch_size, 64),
                                 ("--budget", args.budget, 120.0),
                                 ("--max-trials", args.max_trials, 8),
                                 ("--threads", args.threads, 1)):
        if value != default:
            parts += [flag, str(value)]
    for flag, on in (("--quick", args.quick), ("--try-all", args.try_all)):
        if on:
            parts.append(flag)
    return " ".join(parts)


def _print_findings(console: Any, report: Any) -> None:
    from rich.table import Table

    t = Table(title="diagnosis of the baseline", title_justify="left")
    for col in ("severity", "rule", "finding", "fixes named"):
        t.add_column(col)
    for f in report.findings:
        t.add_row(f.severity, f.rule, f.message, ", ".join(f.fixes))
    if not report.findings:
        t.add_row("", "", "no findings", "")
    emit(t, console)


def _verdict(console: Any, tr: Any, total_s: float) -> None:
    named = set(tr.named)
    kept = tr.kept
    iv = tr.speedup
    load = _load_note()
    if iv is None:
        console.print("[yellow]no fix measurably helped on this machine now: the baseline "
                      f"stays[/yellow]{load}")
    else:
        faster = iv.lo > 1.0
        style = "bold green" if faster else "yellow"
        console.print(f"[{style}]tuned vs baseline: {iv.ratio:.2f}x faster, "
                      f"{iv.confidence:.0%} CI [{interval_end(iv.lo)}, {interval_end(iv.hi)}] "
                      f"({tr.final.rounds} interleaved rounds of {tr.final.steps} steps each)"
                      f"{'' if faster else ' -- not measurably faster'}[/{style}]"
                      f"{'' if faster else load}")
    if kept:
        ok = set(kept) <= named
        console.print(
            f"kept fixes: {', '.join(kept)}; named by the findings: "
            f"{', '.join(f'{k} ({tr.named[k]})' for k in kept if k in tr.named)}"
            f"{'' if ok else ' -- some kept fix was not named!'}")
    console.print(f"[dim]demo took {total_s:.0f} s[/dim]")


def _load_note() -> str:
    """Why worker processes may not help right now: other processes hold the CPUs."""
    import os

    try:
        load = os.getloadavg()[0]
        cpus = usable_cpus()
    except (AttributeError, OSError):
        return ""
    if load < cpus:
        return ""
    return (f"\n  (load average {load:.1f} on {cpus} CPUs: other processes hold the CPUs that "
            "DataLoader workers would use; run again on a quieter machine)")


def _write_json(path: str, data: Any) -> None:
    _write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def _write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise DiagnoseError(f"{path}: cannot write ({e.strerror or e})") from None


# ---------------------------------------------------------------------- autofix TARGET
def load_target(target: str) -> dict[str, Any]:
    """Call ``file.py:fn`` or ``module:fn``; it returns model, loader, optimizer, loss/step.

    Imported as ``python path/file.py`` (or ``python -m module``) would: the file's folder
    (the current folder for a module) goes first on ``sys.path``, so that the target can
    import the modules next to it."""
    if ":" not in target:
        raise DiagnoseError(f"{target}: expected path/to/file.py:function or module:function")
    where, fn_name = target.rsplit(":", 1)
    if not where or not fn_name:
        raise DiagnoseError(f"{target}: expected path/to/file.py:function or module:function "
                            f"(the {'file or module' if not where else 'function'} is missing)")
    is_file = where.endswith(".py") or Path(where).is_file()
    path = Path(where)
    if is_file and not path.is_file():
        raise DiagnoseError(f"{where}: no such file")
    folder = str(path.resolve().parent if is_file else Path.cwd())
    if not sys.path or sys.path[0] != folder:
        sys.path.insert(0, folder)
    with _job_argv(where):
        out = _import_and_call(target, where, fn_name, path, is_file, folder)
    if not isinstance(out, dict):
        raise DiagnoseError(f"{target}: must return a dict with model, loader, optimizer and "
                            f"loss_fn or step_fn (it returned a value of type {type(out).__name__})")
    missing = [k for k in ("model", "loader", "optimizer") if out.get(k) is None]
    if missing:
        raise DiagnoseError(f"{target}: its dict has no {', '.join(missing)} (it needs model, "
                            "loader, optimizer and loss_fn or step_fn)")
    import torch

    if not isinstance(out["optimizer"], torch.optim.Optimizer):
        raise DiagnoseError(f"{target}: its optimizer is of type {type(out['optimizer']).__name__}, "
                            "not a torch.optim optimizer (autofix drives the steps with it)")
    return out


def _not_defined(path: Path, name: str) -> str | None:
    """Why ``name`` cannot be the file's function, read from its source before it is run
    (importing runs the file, a whole training script where its training is not under
    ``if __name__ == "__main__":``): no top-level statement binds it and no ``import *``
    may. None where it may be there, or the source does not parse (the import says why)."""
    import ast

    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    bound, funcs = set(), []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
            if not isinstance(node, ast.ClassDef):
                funcs.append(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any(a.name == "*" for a in node.names):
                return None
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:  # assignments, loops, with, if/try blocks: any name they may bind
            bound.update(n.id for n in ast.walk(node)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
            bound.update(n.name for n in ast.walk(node) if isinstance(
                n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))
    if name in bound:
        return None
    return (f"{name!r} is not defined in {path.name} (its functions: "
            f"{', '.join(funcs) or 'none'}): autofix calls a function that returns the job")


@contextlib.contextmanager
def _job_argv(where: str) -> Iterator[None]:
    """``sys.argv`` as ``python path/file.py`` gives it (the file alone), not
    torch-diagnose's own command line, while the job is imported and set up."""
    saved = sys.argv
    sys.argv = [where]
    try:
        yield
    finally:
        sys.argv = saved


def _import_and_call(target: str, where: str, fn_name: str, path: Path, is_file: bool,
                     folder: str) -> Any:
    """The target function's result: the module imported, the function called; any error
    on the way one line that names where in the job it came from."""
    spec = importlib.util.spec_from_file_location(path.stem, path) if is_file else None
    if is_file and (spec is None or spec.loader is None):
        raise DiagnoseError(f"{where}: not a Python file autofix can import (name it *.py)")
    if is_file and (why := _not_defined(path, fn_name)) is not None:
        raise DiagnoseError(f"{target}: {why}")
    try:
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, mod)
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(where)
    except ImportError as e:
        missing = f"module {e.name!r}" if e.name else "a module"
        raise DiagnoseError(f"{where}: cannot import {missing} ({e}); looked in {folder} "
                            f"({'the file' if is_file else 'the current'} folder) and the "
                            "Python path") from None
    except SyntaxError as e:
        raise DiagnoseError(f"{where}: syntax error in {e.filename}, line {e.lineno}: "
                            f"{e.msg}") from None
    except SystemExit as e:
        raise DiagnoseError(
            f"{where}: exited while being imported (status {e.code}): autofix imports the "
            f"file and calls {fn_name}(); keep the script's own command-line parsing and "
            "training under `if __name__ == \"__main__\":`") from None
    except Exception as e:
        raise DiagnoseError(f"{where}: raised while being imported: {_where_raised(e, path)}"
                            ) from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise DiagnoseError(f"{target}: {fn_name!r} is not a function of {where}")
    try:
        return fn()
    except SystemExit as e:
        raise DiagnoseError(f"{target}: exited (status {e.code}) instead of returning the "
                            "job") from None
    except Exception as e:
        raise DiagnoseError(f"{target}: raised {_where_raised(e, path if is_file else None)}"
                            ) from None


def _where_raised(e: BaseException, job: Path | None = None) -> str:
    """``ValueError: ... (job.py, line 12)``: the error and where it came from, one line:
    the last place in the job's file ``job``, else the traceback's last outside this
    package (none: the call itself failed, e.g. a function that wants arguments)."""
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if job is not None and Path(f.filename) == job.resolve()]
    last = (mine or [f for f in frames if not _ours(f.filename)])[-1:]
    at = f" ({Path(last[0].filename).name}, line {last[0].lineno})" if last else ""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    if len(lines) > 1:  # a worker's error carries its traceback as text: its place, its end
        inner = re.findall(r'File "([^"]+)", line (\d+)', str(e))
        ours = [(f, n) for f, n in inner if job is not None and Path(f) == job.resolve()]
        if ours:
            at = f" ({Path(ours[-1][0]).name}, line {ours[-1][1]})"
        return f"{type(e).__name__}: {lines[0]} {lines[-1]}{at}"
    return f"{type(e).__name__}: {lines[0] if lines else ''}{at}"


def _ours(filename: str) -> bool:
    """Is ``filename`` this package's own source?"""
    return Path(filename).resolve().is_relative_to(_PACKAGE)


_PACKAGE = Path(__file__).resolve().parents[1]


def _check_fixes(fixes: list[str] | None) -> None:
    """``--fixes``: every id a known fix, before any of the user's code runs."""
    from ..autofix.runner import unknown_fix

    if (why := unknown_fix(fixes or [])) is not None:
        raise DiagnoseError(f"--fixes: {why}")


@contextlib.contextmanager
def _job_errors(target: str) -> Iterator[None]:
    """The job's own error in a trial (its model, dataset or loss raised: the traceback's
    deepest frame lies outside this package) as one line naming where; an error of this
    package's own propagates with its traceback."""
    try:
        yield
    except DiagnoseError:
        raise
    except Exception as e:
        frames = traceback.extract_tb(e.__traceback__)
        if not frames or _ours(frames[-1].filename):
            raise
        where = target.rsplit(":", 1)[0]
        job = Path(where) if where.endswith(".py") else None
        raise DiagnoseError(f"{target}: the job raised in a trial step: "
                            f"{_where_raised(e, job)}") from None


_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6,
          "gb": 10**9}


def memory_budget(text: str | None) -> int | None:
    """``--memory-budget``: bytes, as a number with an optional unit (``8GiB``, ``512 MiB``)."""
    if text is None:
        return None
    s = text.strip().lower()
    num = s.rstrip("kmgib ")
    unit = s[len(num):].strip()
    try:
        n = float(num) * _UNITS[unit]
    except (ValueError, KeyError):
        n = -1.0
    if not (math.isfinite(n) and n >= 1):
        raise DiagnoseError(f"--memory-budget {text!r}: give a positive number of bytes, "
                            "e.g. 8000000000 or 8GiB")
    return int(n)


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric options, by their flags, before any of the user's code runs."""
    for flag, value, ok, need in (("--budget", args.budget, args.budget > 0, "> 0"),
                                  ("--max-trials", args.max_trials, args.max_trials >= 0,
                                   ">= 0"),
                                  ("--min-gain", getattr(args, "min_gain", 0.0),
                                   getattr(args, "min_gain", 0.0) >= 0, ">= 0")):
        if not ok:
            raise DiagnoseError(f"{flag} {value:g}: give a number {need}")


def run_autofix(args: argparse.Namespace) -> int:
    _need_torch("autofix")
    from ..autofix import Plan
    from ..session import autofix

    _check_numbers(args)
    budget = memory_budget(args.memory_budget)
    outputs = _outputs(args)
    fixes = [f.strip() for f in args.fixes.split(",") if f.strip()] \
        if args.fixes is not None else None
    if fixes == []:
        raise DiagnoseError(f"--fixes {args.fixes!r}: names no fix (torch-diagnose rules lists "
                            "each rule's fixes)")
    _check_fixes(fixes)
    _run_root(args)  # before the job is made: a folder it cannot have is said first
    objs = load_target(args.target)
    console = make_console()
    run_dir = _run_dir(args)
    with progress("autofix") as status, _job_errors(args.target), _dropped_if_empty(run_dir):
        tr = autofix(objs["model"], objs["loader"], objs["optimizer"],
                     loss_fn=objs.get("loss_fn"), step_fn=objs.get("step_fn"),
                     max_trials=args.max_trials, budget_s=args.budget, min_gain=args.min_gain,
                     compile=args.compile, fixes=fixes, keep_tuned_state=args.keep_tuned_state,
                     plan=Plan.quick() if args.quick else None, try_all=args.try_all,
                     out_dir=run_dir, progress=lambda s: status.update(f"autofix: {s}"),
                     memory_budget=budget)
    tr.print(console)
    console.print(f"run folder: {run_dir}", style="dim")
    for sub in _diagnoses(run_dir):  # the capture whose findings named the fixes tried
        console.print(f"the diagnosis whose findings named these fixes: torch-diagnose "
                      f"analyze {sub}", style="dim")
    _write_outputs(outputs, tr, run_dir)
    return 0


def _diagnoses(run_dir: Path) -> list[Path]:
    """The run folders of the captures autofix made under ``run_dir`` (its diagnosis)."""
    try:
        return sorted(p for p in run_dir.iterdir() if (p / "report.json").is_file())
    except OSError:
        return []


__all__ = ["add_parser", "load_target", "memory_budget", "run_autofix", "run_demo"]
