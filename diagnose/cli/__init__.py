"""The torch-diagnose command line: a thin layer over the API, one function a subcommand.

The analysis commands are in :mod:`diagnose.cli.analysis` (torch-free), ``demo`` and
``autofix`` in :mod:`diagnose.cli.autofix` (torch is imported when they run).

Exit codes: 0 ok; 1 findings at or above --fail-on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .._version import __version__
from ..errors import DiagnoseError
from . import analysis, autofix
from .output import FormatOption


class _Parser(argparse.ArgumentParser):
    """argparse with whole option names only (``--fail-on`` is never read as
    ``--fail-on-regression``) and a usage error in one line, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="torch-diagnose",
        description="Find why PyTorch training is slow, and fix it: analyze a run of "
                    "`with diagnose(...)` or saved torch.profiler traces, explain a rule, "
                    "compare two runs, view a run in TensorBoard, or autofix a job.",
    )
    p.add_argument("--version", action="version", version=f"torch-diagnose {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    a = sub.add_parser("analyze", help="analyze trace files, folders or run folders")
    a.add_argument("paths", nargs="+", metavar="PATH")
    a.add_argument("--format", choices=("text", "json", "html"), default=None,
                   action=FormatOption,
                   help="text (default), json, or html: one self-contained page with plots; "
                   "with -o FILE the file's extension (.txt, .json, .html) decides")
    a.add_argument("--json", dest="format", action=FormatOption, nargs=0, const="json",
                   help="the same as --format json")
    a.add_argument("-o", "--output", metavar="FILE",
                   help="write the report to FILE, in the format its extension names")
    a.add_argument("--fail-on", choices=("info", "warning", "critical"),
                   help="exit 1 if a finding is at least this severe")
    a.add_argument("--rules", action="append", metavar="FILE_OR_DIR", default=[],
                   help="add your own rule files (same TOML format); repeatable")
    a.add_argument("--as-ranks", action="store_true",
                   help="take the files outside run folders as ranks of one run (forced: "
                        "their own ranks, or numbered in the order given)")
    a.add_argument("-v", "--verbose", action="store_true",
                   help="the text report in full: each probe's own time, every "
                        "memory what-if, info findings' reasons, the rules not evaluated "
                        "and why (a file written with -o always holds all of it)")

    r = sub.add_parser("rules", help="list the rules, or explain one")
    r.add_argument("rule_id", nargs="?", metavar="ID")
    r.add_argument("--rules", action="append", metavar="FILE_OR_DIR", default=[])

    m = sub.add_parser("metrics", help="every metric of a run (a trace or a run folder), with its unit and meaning")
    m.add_argument("paths", nargs="+", metavar="PATH")
    m.add_argument("--format", choices=("text", "json"), default="text")
    a.set_defaults(func=analysis.cmd_analyze)
    r.set_defaults(func=analysis.cmd_rules)
    m.set_defaults(func=analysis.cmd_metrics)
    analysis.add_compare(sub)
    analysis.add_tensorboard(sub)
    autofix.add_parser(sub)  # demo, autofix
    return p


def _run_folder_hint(args: argparse.Namespace) -> str:
    """Where a path given is a file of a run folder that is not its trace (report.json,
    context.json): the folder, which is what to give."""
    from ..runfolder import trace_files

    for p in getattr(args, "paths", None) or []:
        path = Path(p)
        if (path.is_file() and ".pt.trace.json" not in path.name
                and (path.parent / "context.json").is_file() and trace_files(path.parent)):
            return f" ({path.parent} is a run folder: give the folder)"
    return ""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; an option the command does not know is named with the command's
    own help (``torch-diagnose analyze --help``)."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        sub = subs[0].choices.get(args.cmd) if subs else None
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return int(args.func(args))
    except DiagnoseError as e:
        print(f"torch-diagnose: error: {e}{_run_folder_hint(args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("torch-diagnose: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`: the verdict still stands (a CI gate)
        return int(getattr(args, "status", 0))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
