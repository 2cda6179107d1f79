"""The analysis commands: analyze, rules, metrics, compare, tensorboard.

Each is one thin function over the API a user would call; none imports torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from ..console import emit, make_console, progress
from ..errors import DiagnoseError, TraceNotFound
from ..report.stepstats import NOISE_FLOOR_PCT
from ..report.tensorboard import DEFAULT_HOST, DEFAULT_LOGDIR, DEFAULT_PORT
from .output import FormatOption, choose_format, wrote


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..api import analyze_runs
    from ..watching.timeline import is_watched

    fmt = choose_format(args.format, args.output)
    if len(args.paths) == 1 and is_watched(args.paths[0]):
        return _analyze_watched(args.paths[0], fmt, args.output, args.fail_on)
    with progress(f"analysing {_describe(args.paths)}"):
        runs = analyze_runs(args.paths, extra_rules=args.rules,
                            as_ranks=getattr(args, "as_ranks", False))
    # the exit status before any output: a reader that stops early (`| head`) keeps it
    args.status = 1 if args.fail_on and runs.at_least(args.fail_on) else 0  # every run
    if fmt == "json":
        text = json.dumps(runs.to_json(), indent=2, default=str)
        if args.output:
            _write(args.output, text + "\n")
        else:
            print(text)
    elif fmt == "html":
        from ..report.html import render_html, render_runs_html

        page = render_html(runs.runs[0]) if len(runs) == 1 else render_runs_html(runs)
        if args.output:
            _write(args.output, page)
        else:
            sys.stdout.write(page)
    elif args.output:
        from ..report.text import render_runs

        _write(args.output, render_runs(runs, detail=True))  # a file keeps all of it
    else:
        from ..report.text import print_runs

        print_runs(runs, detail=bool(getattr(args, "verbose", False)))
    return int(args.status)


def _analyze_watched(run_dir: str, fmt: str, output: str | None, fail_on: str | None) -> int:
    """A watched run's folder (killed runs too): its timeline, alarms and captures; exit 1
    where a capture's finding is at or above ``fail_on``."""
    from ..report.watch_timeline import (
        alarms_with_captures,
        render_watch_html,
        render_watch_text,
    )
    from ..watching.timeline import findings_at_least, read_watched

    tl = read_watched(run_dir)
    if tl is None:
        raise DiagnoseError(f"{run_dir}: its watch.jsonl has no meta record (not a watched "
                            "run, or cut off before its first flush)")
    status = 1 if fail_on and findings_at_least(tl, fail_on) else 0
    if fmt == "json":
        steps = {k: v.tolist() for k, v in tl.pop("steps").items()}
        text = json.dumps({**tl, "alarms": alarms_with_captures(tl), "steps": steps},
                          default=str)
    elif fmt == "html":
        from ..runfolder import load_samples

        text = render_watch_html(tl, run_dir, load_samples(run_dir))
    else:
        text = render_watch_text(tl, run_dir) + "\n"
    if output:
        _write(output, text)
    else:
        sys.stdout.write(text)
    return status


def _describe(paths: list[str]) -> str:
    """``a.json (306 MB)`` or ``3 paths``: what the spinner says is being read."""
    import os

    if len(paths) != 1:
        return f"{len(paths)} paths"
    try:
        size = os.path.getsize(paths[0]) if os.path.isfile(paths[0]) else None
    except OSError:
        size = None
    return paths[0] + (f" ({size / 2**20:,.0f} MiB)" if size else "")


def _write(path: str, text: str) -> None:
    """Write a report file and say so on stderr (one line)."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise DiagnoseError(f"{path}: cannot write the report ({e.strerror or e})") from None
    wrote(path)


def cmd_rules(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..report.text import render_rule
    from ..rules.engine import get_rule, load_rules

    rules = load_rules(args.rules)
    console = make_console()
    if args.rule_id:
        for part in render_rule(get_rule(args.rule_id, rules)):
            emit(part, console)
        return 0
    t = Table(title=f"{len(rules)} rules", title_justify="left")
    for col in ("id", "category", "title", "fixes"):
        t.add_column(col)
    for r in sorted(rules, key=lambda r: r.id):
        t.add_row(r.id, r.category, r.title, ", ".join(r.fixes))
    emit(t, console)
    console.print("`torch-diagnose rules ID` explains one.", style="dim")
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from ..api import analyze
    from ..metrics import CATALOG

    report = analyze(args.paths)
    for n in report.source_notes():  # which files were read: stderr, stdout stays the table
        print(f"note: {n}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({"metrics": report.metrics,
                          "ranks": [r.to_json() for r in report.ranks]}, indent=2, default=str))
        return 0
    from rich.table import Table

    t = Table(title="metrics", title_justify="left")
    for col in ("name", "value", "unit", "meaning"):
        t.add_column(col)
    for k, v in report.metrics.items():
        unit, doc = CATALOG.get(k, ("", ""))
        t.add_row(k, "n/a" if v is None else str(v), unit, doc)
    emit(t)
    return 0



# -------------------------------------------------------------------- compare A B
def _pct_arg(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be a percentage >= 0, got {s!r}")
    return v


def add_compare(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare", help="compare two runs: metrics with deltas, findings resolved/still/new",
        description="Compare run A (before) with run B (after): trace files, folders or run "
                    "folders.")
    p.add_argument("a", metavar="A", help="the run before (trace file, folder or run folder)")
    p.add_argument("b", metavar="B", help="the run after")
    p.add_argument("--format", choices=("text", "json", "html"), default=None, action=FormatOption,
                   help="text (default), json or html (one self-contained page); with -o FILE "
                   "the extension decides")
    p.add_argument("--json", dest="format", action=FormatOption, nargs=0, const="json",
                   help="the same as --format json")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the comparison to FILE (.json: JSON, .html: a page, .txt, .log, "
                   ".out or no extension: text; another extension needs --format)")
    p.add_argument("--fail-on-regression", type=_pct_arg, metavar="PCT",
                   help="exit 1 if B's step time is more than PCT%% above A's and beyond the "
                   "noise (see --noise-floor)")
    p.add_argument("--noise-floor", type=_pct_arg, metavar="PCT", default=NOISE_FLOOR_PCT,
                   help="a step-time change within PCT%% either way counts as no change: the "
                   "run-to-run noise one capture of each run cannot measure (default "
                   f"{NOISE_FLOOR_PCT:g}; 0: the per-step interval alone decides)")
    p.add_argument("--rules", action="append", metavar="FILE_OR_DIR", default=[],
                   help="add your own rule files (same TOML format); repeatable")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..api import analyze
    from ..report.compare import compare_reports, regression_line, render_text, renderables

    fmt = choose_format(args.format, args.output)
    a = analyze(args.a, extra_rules=args.rules)
    b = analyze(args.b, extra_rules=args.rules)
    c = compare_reports(a, b, noise_floor_pct=args.noise_floor)
    regressed = False
    line: str | None = None
    if args.fail_on_regression is not None:
        regressed, line = regression_line(c, args.fail_on_regression)
    args.status = 1 if regressed else 0  # before any output (see cmd_analyze)
    out: str | None
    if fmt == "json":
        doc = c.to_json()
        if args.fail_on_regression is not None:
            doc["regression"] = {"threshold_pct": args.fail_on_regression, "failed": regressed,
                                 "message": line}
        out = json.dumps(doc, indent=2, default=str) + "\n"
    elif fmt == "html":
        from ..report.compare_html import render_compare_html

        out = render_compare_html(c)
    else:
        out = render_text(c) if args.output else None
    if args.output:
        _write(args.output, out or "")
    elif out is not None:
        sys.stdout.write(out)
    else:
        from rich.console import Group

        emit(Group(*renderables(c)))
    if line is not None:
        print(f"torch-diagnose: {line}",
              file=sys.stderr if fmt != "text" else sys.stdout)
    return int(args.status)


# -------------------------------------------------------------------- tensorboard
def tensorboard_logs(path: str) -> bool:
    """Whether ``path`` is a log folder ``torch-diagnose tensorboard`` wrote: one of its run
    folders (event files beside the Diagnose tab's run file), or a folder whose runs are its
    children, not a run. A folder of a user's own event files and profiler traces (one
    SummaryWriter and tensorboard_trace_handler folder), or one that holds a log folder
    deeper down beside runs of its own, is read as before."""
    from ..report.tb_plugin.runfile import RUN_FILE

    p = Path(path)
    return p.is_dir() and any(
        next(run.parent.glob("events.out.tfevents.*"), None) is not None
        for pattern in (RUN_FILE, f"*/{RUN_FILE}") for run in p.glob(pattern))


def add_tensorboard(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "tensorboard",
        help="write a TensorBoard log dir (scalars, findings, profiler trace); --serve to view",
        description="Analyze traces and write each run they hold as a TensorBoard run: scalars (step time, "
                    "DataLoader share, GPU and host utilization), the findings as text, and a "
                    "copy of each trace that torch-tb-profiler 0.4.3 reads correctly.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files, folders or run folders")
    p.add_argument("--logdir", default=DEFAULT_LOGDIR, metavar="DIR",
                   help=f"TensorBoard log directory (default: {DEFAULT_LOGDIR})")
    p.add_argument("--run", metavar="NAME",
                   help="run name (default: from the PATH; several runs: NAME-<source>)")
    p.add_argument("--as-ranks", action="store_true",
                   help="take the files outside run folders as ranks of one run (forced)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a run of the same name that torch-diagnose wrote before")
    p.add_argument("--rules", action="append", metavar="FILE_OR_DIR", default=[],
                   help="add your own rule files; repeatable")
    p.add_argument("--serve", action="store_true",
                   help="then start TensorBoard on the log dir (Ctrl-C stops it)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address TensorBoard binds to with --serve (default: {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port for --serve (default: {DEFAULT_PORT}; 0: any free port)")
    p.set_defaults(func=cmd_tensorboard)


def _tensorboard_watched(run_dir: str, args: argparse.Namespace) -> None:
    """A watched run's folder: its timeline as scalars, its summary, the tab's plot."""
    from ..report.tb_watch import write_watched_logdir
    from ..runfolder import load_samples
    from ..watching.timeline import read_watched

    tl = read_watched(run_dir)
    if tl is None:
        raise DiagnoseError(f"{run_dir}: its watch.jsonl has no meta record (not a watched "
                            "run, or it was cut off before its first flush)")
    res = write_watched_logdir(tl, load_samples(run_dir), run_dir, args.logdir, run=args.run,
                               overwrite=args.overwrite)
    print(f"wrote {res.run_dir}: {res.scalars} scalar points in {len(res.tags)} tags "
          f"(the watched run's timeline), its summary as text, the timeline plot for the "
          f"Diagnose tab")


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from ..api import analyze_runs
    from ..report.tb_runs import write_runs
    from ..report.tensorboard import INSTALL_HINT, serve

    if not 0 <= args.port <= 65535:
        raise DiagnoseError(f"--port {args.port}: not a port number (0-65535)")
    for path in args.paths:  # a missing path is the first thing wrong, whatever is installed
        if not Path(path).exists():
            raise TraceNotFound(path)
    logs = [p for p in args.paths if tensorboard_logs(p)]
    if logs and args.serve and len(args.paths) == 1:  # a log folder written before: shown
        if importlib.util.find_spec("tensorboard") is None:
            raise DiagnoseError(f"the tensorboard command needs TensorBoard: {INSTALL_HINT}")
        return serve(logs[0], args.host, args.port)
    if logs:
        raise DiagnoseError(
            f"{logs[0]}: a TensorBoard log folder (it holds event files), not a run: show it "
            f"with `torch-diagnose tensorboard {logs[0]} --serve` (alone) or `tensorboard "
            "--logdir` it; give run folders (diagnose-runs/<time>) or traces to write one")
    if importlib.util.find_spec("tensorboard") is None:
        raise DiagnoseError(f"the tensorboard command needs TensorBoard: {INSTALL_HINT}")
    from ..watching.timeline import is_watched

    watched = [p for p in args.paths if is_watched(p)]
    for path in watched:
        _tensorboard_watched(path, args)
    rest = [p for p in args.paths if p not in watched]
    runs = analyze_runs(rest, extra_rules=args.rules,
                        as_ranks=getattr(args, "as_ranks", False)) if rest else None
    if runs is not None and len(runs) > 1:
        print(runs.summary())
    for res in write_runs(runs.runs if runs is not None else [], args.logdir, run=args.run,
                          overwrite=args.overwrite):
        adapted = sum(c.dataloader_events for c in res.copies)
        n_tags = len([t for t in res.tags if t.startswith(("metrics/", "step/", "samples/"))])
        print(f"wrote {res.run_dir}: {res.scalars} scalar points in {n_tags} tags, "
              f"findings as text, {len(res.copies)} trace "
              f"cop{'y' if len(res.copies) == 1 else 'ies'}"
              + (f" ({adapted} DataLoader events re-categorised for torch-tb-profiler)"
                 if adapted else ""))
    if args.serve:
        return serve(args.logdir, args.host, args.port)
    print(f"view it: tensorboard --logdir {args.logdir}  "
          f"(or: torch-diagnose tensorboard ... --serve)")
    return 0
