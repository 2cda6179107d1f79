"""The torch-diagnose command line: a thin layer over the API.

Exit codes: 0 ok; 1 findings at or above --fail-on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from collections.abc import Sequence

from . import __version__
from .errors import DiagnoseError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torch-diagnose",
        description="Find why PyTorch training is slow: analyze torch.profiler traces.",
    )
    p.add_argument("--version", action="version", version=f"torch-diagnose {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    a = sub.add_parser("analyze", help="analyze trace files, folders or run folders")
    a.add_argument("paths", nargs="+", metavar="PATH")
    a.add_argument("--format", choices=("text", "json", "html"), default="text",
                   help="html: one self-contained page with plots (use with -o FILE)")
    a.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE")
    a.add_argument("--fail-on", choices=("info", "warning", "critical"),
                   help="exit 1 if a finding is at least this severe")
    a.add_argument("--rules", action="append", metavar="FILE_OR_DIR", default=[],
                   help="add your own rule files (same TOML format); repeatable")

    r = sub.add_parser("rules", help="list the rules, or explain one")
    r.add_argument("rule_id", nargs="?", metavar="ID")
    r.add_argument("--rules", action="append", metavar="FILE_OR_DIR", default=[])

    m = sub.add_parser("metrics", help="print the raw metrics of a trace")
    m.add_argument("paths", nargs="+", metavar="PATH")
    m.add_argument("--format", choices=("text", "json"), default="text")
    for mod in _command_modules():
        mod.add_parser(sub)
    return p


# Further commands live next to the code they drive. Each module defines
# ``add_parser(subparsers)`` (which sets ``func=run`` via set_defaults) and ``run(args) -> int``.
_COMMAND_MODULES = (
    "diagnose.tune_cli",          # demo, autofix
    "diagnose.report.compare",    # compare A B
    "diagnose.report.tensorboard",  # tensorboard PATH
)


def _command_modules() -> list:
    mods = []
    for name in _COMMAND_MODULES:
        if importlib.util.find_spec(name) is not None:
            mods.append(importlib.import_module(name))
    return mods


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .api import analyze

    report = analyze(args.paths, extra_rules=args.rules)
    if args.format == "json":
        text = json.dumps(report.to_json(), indent=2, default=str)
        if args.output:
            _write(args.output, text + "\n")
        else:
            print(text)
    elif args.format == "html":
        from .report.html import render_html

        page = render_html(report)
        if args.output:
            _write(args.output, page)
        else:
            sys.stdout.write(page)
    elif args.output:
        _write(args.output, report.render_text())
    else:
        report.print()
    if args.fail_on and report.at_least(args.fail_on):
        return 1
    return 0


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise DiagnoseError(f"{path}: cannot write the report ({e.strerror or e})") from None


def _cmd_rules(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .engine import get_rule, load_rules
    from .report.text import render_rule

    rules = load_rules(args.rules)
    console = Console(highlight=False)
    if args.rule_id:
        for part in render_rule(get_rule(args.rule_id, rules)):
            console.print(part)
        return 0
    t = Table(title=f"{len(rules)} rules", title_justify="left")
    for col in ("id", "category", "title", "fixes"):
        t.add_column(col)
    for r in rules:
        t.add_row(r.id, r.category, r.title, ", ".join(r.fixes))
    console.print(t)
    console.print("`torch-diagnose rules ID` explains one.", style="dim")
    return 0


def _cmd_metrics(args: argparse.Namespace) -> int:
    from .api import analyze
    from .metrics import CATALOG

    report = analyze(args.paths)
    if args.format == "json":
        print(json.dumps({"metrics": report.metrics,
                          "ranks": [r.to_json() for r in report.ranks]}, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="metrics", title_justify="left")
    for col in ("name", "value", "unit", "meaning"):
        t.add_column(col)
    for k, v in report.metrics.items():
        unit, doc = CATALOG.get(k, ("", ""))
        t.add_row(k, "None" if v is None else str(v), unit, doc)
    Console(highlight=False).print(t)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "analyze":
            return _cmd_analyze(args)
        if args.cmd == "rules":
            return _cmd_rules(args)
        if args.cmd == "metrics":
            return _cmd_metrics(args)
        return int(args.func(args))
    except DiagnoseError as e:
        print(f"torch-diagnose: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("torch-diagnose: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
