"""Which trace files are the ranks of one run, and which are separate runs.

Files are ranks of one run only when they say so:

- one run folder written by a capture (``context.json`` or ``samples.jsonl`` beside its
  traces: see :mod:`diagnose.runfolder`), with distinct ranks;
- traces whose ``distributedInfo`` gives a rank and a world size that agree
  (0 <= rank < world size), with distinct ranks and exactly world-size files of that world
  size (given together, or in one folder).

A folder of run folders holds separate runs: one each, newest first. Every other file is a
run of its own. ``as_ranks`` forces the files outside run folders into one run: their own
ranks when all of them carry distinct ones, else numbered in the order given.

Ambiguous sets are never grouped silently: duplicate ranks, or a world size that does not
match the number of files, are analysed as separate runs, each with a note saying why
(``as_ranks`` then groups a partial set, and refuses duplicate ranks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DiagnoseError
from ..runfolder import CONTEXT_FILE, SAMPLES_FILE, load_context
from .columns import Trace

#: rank and world size that a trace's distributedInfo declares, when they agree
Declared = tuple[int, int]

#: the name torch's ``tensorboard_trace_handler`` gives each profiled span of a process:
#: ``<worker name>.<time in ns>.pt.trace.json[.gz]`` (the worker name: host_pid)
_SPAN = re.compile(r"^(?P<worker>.+)\.(?P<stamp>\d{6,})\.pt\.trace\.json(?:\.gz)?$")


def process_spans(files: Sequence[str | Path]) -> list[Path] | None:
    """Two or more files that are the profiled spans of one process (one worker name in
    tensorboard_trace_handler's file names, distinct stamps), oldest first; None where
    they are not such spans (ranks of a job have a worker name each)."""
    keys = [_SPAN.match(Path(f).name) for f in files]
    if len(files) < 2 or not all(keys) or len({k.group("worker") for k in keys if k}) != 1 \
            or len({k.group("stamp") for k in keys if k}) != len(files):
        return None
    return [Path(f) for _, f in sorted(zip(keys, files, strict=True),
                                        key=lambda kf: int(kf[0].group("stamp")) if kf[0] else 0)]


def declared_rank(t: Trace) -> Declared | None:
    """(rank, world size) from the trace's ``distributedInfo`` when both are there and agree
    (0 <= rank < world size); None otherwise (a file name is no declaration)."""
    info = t.distributed_info or {}
    r, w = info.get("rank"), info.get("world_size")
    if not (isinstance(r, int) and isinstance(w, int)) or isinstance(r, bool) or isinstance(
            w, bool):
        return None
    return (r, w) if 0 <= r < w else None


def is_run_folder(d: Path) -> bool:
    """A folder a capture wrote: its context or samples lie beside the traces."""
    return (d / CONTEXT_FILE).is_file() or (d / SAMPLES_FILE).is_file()


@dataclass
class Unit:
    """Files read together before grouping: one run folder's, or the loose files."""

    files: list[Path]
    folder: Path | None  # the capture's run folder; None: files outside run folders
    notes: list[str] = field(default_factory=list)


@dataclass
class Group:
    """One run: its files and each file's rank (None: a lone file without one)."""

    files: list[Path]
    ranks: list[int | None]
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)


def _newest_key(u: Unit) -> tuple[str, str]:
    d = u.folder or Path()
    ctx = load_context(d) or {}
    created = ctx.get("created")
    return (created if isinstance(created, str) else "", d.name)


def split_units(srcs: Sequence[Path], files: Sequence[Path]) -> list[Unit]:
    """Run folders apart (each a unit, newest first inside a folder of run folders), then
    the loose files in the order given."""
    folders: dict[Path, Unit] = {}
    loose = Unit([], None)
    order: list[Unit] = []
    for f in files:
        d = f.parent
        if is_run_folder(d):
            if d not in folders:
                folders[d] = Unit([], d)
                order.append(folders[d])
            folders[d].files.append(f)
        else:
            if not loose.files:
                order.append(loose)
            loose.files.append(f)
    for src in srcs:  # a folder of run folders: newest first, and a note says so
        inside = [i for i, u in enumerate(order) if u.folder is not None and src.is_dir()
                  and u.folder != src and src in u.folder.parents]
        if len(inside) < 2:
            continue
        ranked = sorted((order[i] for i in inside), key=_newest_key, reverse=True)
        note = (f"{src} holds {len(inside)} run folders: separate runs (one capture each), "
                "one report each, newest first")
        for i, u in zip(inside, ranked, strict=True):
            u.notes.append(note)
            order[i] = u
    return order


def _names(files: Sequence[Path]) -> str:
    return ", ".join(f.name for f in files)


def _alone(files: Sequence[Path], ranks: Sequence[int | None], folder: Path | None,
           note: str | None) -> list[Group]:
    return [Group([f], [r], folder, [note] if note else []) for f, r in
            zip(files, ranks, strict=True)]


def _distinct(ranks: Sequence[int | None]) -> bool:
    return None not in ranks and len(set(ranks)) == len(ranks)


def group_folder(u: Unit, ranks: list[int | None]) -> list[Group]:
    """A capture's run folder: one run when its traces' ranks are distinct; otherwise each
    trace alone, with a note."""
    if len(u.files) == 1 or _distinct(ranks):
        return [Group(u.files, ranks, u.folder, list(u.notes))]
    shown = ", ".join("none" if r is None else str(r) for r in ranks)
    note = (f"{u.folder}: its {len(u.files)} traces do not carry distinct ranks "
            f"(ranks {shown}), so they are not taken as one run: each is analysed alone")
    return [Group([f], [r], u.folder, [*u.notes, note]) for f, r in
            zip(u.files, ranks, strict=True)]


def _complete(decl: Sequence[Declared]) -> bool:
    ranks = [r for r, _ in decl]
    return len(set(ranks)) == len(ranks) == decl[0][1]


def _why(files: Sequence[Path], decl: Sequence[Declared]) -> str:
    ranks = [r for r, _ in decl]
    world = decl[0][1]
    if len(set(ranks)) < len(ranks):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        what = f"duplicate rank{'s' if len(dup) > 1 else ''} {', '.join(map(str, dup))}"
        hint = "they come from different runs"
    else:
        what = f"{len(files)} traces for world size {world}"
        hint = "pass --as-ranks (as_ranks=True) to analyse them as one run"
    return (f"{_names(files)}: distributedInfo says ranks {', '.join(map(str, ranks))} of "
            f"world size {world}, with {what}, so they are not taken as ranks of one run: "
            f"each is analysed alone ({hint})")


def group_loose(files: list[Path], decl: list[Declared | None], ranks: list[int | None],
                *, as_ranks: bool = False) -> list[Group]:
    """The files outside run folders, in the order given: runs by distributedInfo (see the
    module docstring); ``ranks``: each trace's own rank (distributedInfo, else its name)."""
    if not files:
        return []
    if as_ranks and len(files) > 1:
        if process_spans(files):
            raise DiagnoseError(f"--as-ranks: {files[0].parent} holds the profiled spans of "
                                "one process (tensorboard_trace_handler's files), not ranks "
                                "of a job: analyse them without --as-ranks")
        return [_forced(files, decl)]
    out: dict[int, list[Group]] = {}  # index of a group's first file -> its run(s)
    pools: dict[int, dict[int, Declared]] = {}  # world size -> {file index: declared}
    for i, d in enumerate(decl):
        if d is None or d[1] == 1:
            out[i] = [Group([files[i]], [ranks[i]])]
        else:
            pools.setdefault(d[1], {})[i] = d
    for pool in pools.values():
        parts = [pool] if _complete(list(pool.values())) else _by_parent(files, pool)
        for part in parts:
            fs = [files[i] for i in part]
            ds = list(part.values())
            first = min(part)
            if len(part) == 1 or _complete(ds):
                out[first] = [Group(fs, [r for r, _ in ds])]
            else:
                out[first] = _alone(fs, [r for r, _ in ds], None, _why(fs, ds))
    return [g for i in sorted(out) for g in out[i]]


def _by_parent(files: Sequence[Path], pool: dict[int, Declared]) -> list[dict[int, Declared]]:
    parts: dict[Path, dict[int, Declared]] = {}
    for i, d in pool.items():
        parts.setdefault(files[i].parent, {})[i] = d
    return list(parts.values())


def _forced(files: list[Path], decl: list[Declared | None]) -> Group:
    """``as_ranks``: all the files as ranks of one run."""
    own = [d[0] for d in decl if d is not None]
    if len(own) == len(files):
        rs = own
        if len(set(rs)) < len(rs):
            dup = sorted({r for r in rs if rs.count(r) > 1})
            raise DiagnoseError(
                f"--as-ranks: {_names(files)} say ranks {', '.join(map(str, rs))} "
                f"(rank {dup[0]} twice): one rank cannot be two files")
        order = ", ".join(f"rank {r} = {f.name}" for r, f in zip(rs, files, strict=True))
        return Group(files, [*rs], notes=[
            f"ranks of one run by --as-ranks (forced), with their own ranks from "
            f"distributedInfo: {order}"])
    if own:
        has = [f.name for f, d in zip(files, decl, strict=True) if d is not None]
        raise DiagnoseError(
            f"--as-ranks: {', '.join(has)} carry ranks (distributedInfo) and the other files "
            "do not: give rank-less files, or files that all carry their ranks")
    order = ", ".join(f"rank {i} = {f.name}" for i, f in enumerate(files))
    return Group(files, list(range(len(files))), notes=[
        f"ranks of one run by --as-ranks (forced; the files carry no ranks), numbered in "
        f"the order given: {order}"])
