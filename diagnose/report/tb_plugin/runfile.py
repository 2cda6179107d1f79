"""``<run>/diagnose.json``: what the TensorBoard tab shows of one run, written with the run.

::

    {"format": "torch-diagnose-run", "version": 1,
     "report": {...},                       # Report.to_json(), as `analyze --format json`
     "autofix": {"rows": [[label, before_ms, after_ms, speedup, ci_lo, ci_hi, predicted],
                          ...], "code": "..."} | null,   # the last four may be null
     "plots": {"breakdown": {"title": "...", "caption": "...", "svg": "<svg ..."}, ...},
     "traces": ["host.1700000000000.pt.trace.json.gz", ...]}   # the copies for torch-tb-profiler

Writing needs no TensorBoard; reading never raises anything but :class:`RunFileError`, whose
message is what the tab shows for a run whose file is missing or broken.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import DiagnoseError

if TYPE_CHECKING:
    from ...result import Analysis
    from ..plots import AutofixRow

RUN_FILE = "diagnose.json"
FORMAT = "torch-diagnose-run"
VERSION = 1
_MAX_DEPTH = 6  # run folders below the log dir that are looked at
_MAX_DIRS = 20_000  # folders walked at most per listing (a log dir on a huge tree)

AutofixInput = Sequence["AutofixRow | tuple[str, float, float]"] | Any  # rows or a AutofixReport


class RunFileError(Exception):
    """A run's ``diagnose.json`` is missing or cannot be read: one line a person can act on."""


def run_document(report: Analysis, autofix: AutofixInput | None = None,
                 traces: Iterable[str] = ()) -> dict[str, Any]:
    """The content of ``diagnose.json`` for ``report`` (plots rendered to SVG here)."""
    # matplotlib only when a run is written: the CLI imports this module for every command
    from ..html import CAPTIONS
    from ..plots import autofix_rows, figures, plot_title, to_svg

    code = getattr(autofix, "code", None) if autofix is not None else None
    rows = autofix_rows(autofix) if hasattr(autofix, "decisions") else list(autofix or ())
    plots = {key: {"title": plot_title(key, report), "caption": CAPTIONS[key],
                   "svg": to_svg(fig, salt=key)}
             for key, fig in figures(report, rows or None).items()}
    return {
        "format": FORMAT, "version": VERSION,
        "report": report.to_json(),
        "autofix": {"rows": [[str(r[0]), float(r[1]), float(r[2]), *_optional(r)]
                             for r in rows],
                    "code": code if isinstance(code, str) and code else None} if rows else None,
        "plots": plots,
        "traces": list(traces),
    }


def _optional(r: Sequence[Any]) -> list[float | None]:
    """Speedup, its interval, the prediction and its range of a row (None where not
    known)."""
    out: list[float | None] = []
    for x in (*r[3:9], *[None] * 6)[:6]:
        out.append(float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None)
    return out


def write_run_file(run_dir: str | os.PathLike[str], report: Analysis,
                   autofix: AutofixInput | None = None, traces: Iterable[str] = ()) -> Path:
    """Write ``run_dir/diagnose.json`` (atomically); returns its path."""
    out = Path(run_dir) / RUN_FILE
    tmp = out.with_name(f".{RUN_FILE}.tmp")
    # msgspec, not json: a NaN becomes null (JSON.parse in the tab refuses NaN)
    data = msgspec.json.encode(run_document(report, autofix, traces))
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise DiagnoseError(f"{out}: cannot write ({e.strerror or e})") from None
    return out


def read_run_file(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The document in ``run_dir/diagnose.json``, checked for its shape."""
    path = Path(run_dir) / RUN_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunFileError(f"{RUN_FILE} is missing from this run folder (was the run removed "
                           "or is it being rewritten?); write it again with "
                           "`torch-diagnose tensorboard ... --overwrite`") from None
    except OSError as e:
        raise RunFileError(f"{RUN_FILE} cannot be read ({e.strerror or e})") from None
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise RunFileError(f"{RUN_FILE} is not valid JSON ({str(e).splitlines()[0][:120]}): "
                           "the file is damaged or was cut short; write the run again") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RunFileError(f"{RUN_FILE} was not written by torch-diagnose (no "
                           f"\"format\": \"{FORMAT}\")")
    version = doc.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise RunFileError(f"{RUN_FILE} has version {version!r}; this torch-diagnose reads "
                           f"version {VERSION}: upgrade torch-diagnose")
    if not isinstance(doc.get("report"), dict):
        raise RunFileError(f"{RUN_FILE} holds no report")
    return doc


def find_runs(logdir: str | os.PathLike[str]) -> dict[str, Path]:
    """Run name (as TensorBoard names runs: the folder relative to the log dir, ``.`` for the
    log dir itself) -> folder, for every folder that holds a ``diagnose.json``."""
    root = Path(logdir)
    runs: dict[str, Path] = {}
    for seen, (here, dirs, files) in enumerate(os.walk(root), 1):
        rel = Path(here).relative_to(root)
        if RUN_FILE in files:
            runs[rel.as_posix()] = Path(here)
        if seen >= _MAX_DIRS:
            break
        if len(rel.parts) >= _MAX_DEPTH:
            dirs.clear()
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return dict(sorted(runs.items()))
