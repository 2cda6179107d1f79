"""Finding trace files and reading them into Traces.

Accepted inputs: one ``.json`` / ``.json.gz`` file; a folder of them; the
TensorBoard layout (``<run>/*.pt.trace.json*`` and
``<run>/plugins/profile/<stamp>/*.trace.json*``). In a folder, a JSON file that is no
trace (an ``hparams.json`` beside one, a package's metadata) is passed over: one whose
name is not a profiler's (``*.pt.trace.json``) and whose first :data:`HEAD_BYTES` of text
hold no ``"traceEvents":`` key; a file named alone is read whatever it holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..errors import TraceError, TraceNotFound
from ..runfolder import OWN_JSON
from ..values import usable_cpus
from . import inflate
from .columns import Trace
from .decode import decode, max_bytes, read_bytes
from .parallel import (
    PARALLEL_MIN_BYTES,
    PIPELINE_MIN_GZ_BYTES,
    read_parallel,
    read_pipelined,
    read_text_ranges,
)
from .stream import NotStreamable, read_streaming

_SUFFIXES = (".json", ".json.gz")


#: how much of a folder's JSON file (its text, for .gz) is looked at for ``"traceEvents"``:
#: profilers write the key after a header of at most tens of KB (17 KB in shared/traces)
HEAD_BYTES = 2**20
_TRACE_NAME = (".pt.trace.json", ".pt.trace.json.gz")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:')
_UNREADABLE: tuple[type[BaseException], ...] = (OSError, *inflate.ERRORS)


def _looks_like_trace(p: Path) -> bool:
    """Whether a folder's JSON file ``p`` is a trace (module doc); an unreadable one is
    kept, so that the read says what is wrong with it."""
    if p.name.endswith(_TRACE_NAME):
        return True
    try:
        with open(p, "rb") as f:
            head = f.read(HEAD_BYTES)
        if head[:2] == inflate.MAGIC:
            head = inflate.gzip_member().decompress(head, HEAD_BYTES)
    except _UNREADABLE:
        return True
    return _EVENTS_KEY.search(head) is not None


#: a watched run's timeline (diagnose.watching.timeline): its folder is no trace's
WATCH_TIMELINE = "watch.jsonl"


def is_trace_file(p: Path) -> bool:
    """A ``.json`` / ``.json.gz`` file that is none of the tool's own (:data:`OWN_JSON`)."""
    return p.name.endswith(_SUFFIXES) and p.name not in OWN_JSON


def find_trace_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every trace file named by ``paths`` (files as given, folders searched)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise TraceNotFound(p)
        if p.is_file():
            found.append(p)
            continue
        if not p.is_dir():
            raise TraceError(p, "not a regular file or folder")
        try:
            watched = (p / WATCH_TIMELINE).is_file()
            named = sorted(f for f in p.iterdir() if f.is_file() and is_trace_file(f))
            direct = [f for f in named if _looks_like_trace(f)]
            # TensorBoard layouts: <run>/plugins/profile/<stamp>/..., or run folders below
            below = [] if direct or watched else sorted(
                f for f in p.rglob("*") if f.is_file() and is_trace_file(f))
            nested = [f for f in below if _looks_like_trace(f)]
        except PermissionError as e:
            where = p if e.filename is None or Path(e.filename) == p else Path(e.filename)
            raise TraceError(where, "folder cannot be read (permission denied)") from None
        if watched:
            # the tool's own watch.json is no trace: name the folders that hold them
            raise TraceError(p, "a watched run's folder: `torch-diagnose analyze` on it alone "
                                "shows its timeline; its profiled windows are the folders "
                                "under its captures/ (analyze or compare those)")
        if direct:
            found.extend(direct)
            continue
        if not nested:
            other = [f.name for f in named or below]
            own = sorted(f.name for f in p.iterdir() if f.name in OWN_JSON and f.is_file())
            raise TraceError(p, "folder holds no trace files (*.json or *.json.gz)" + (
                f"; passed over, with no \"traceEvents\" near their start: "
                f"{', '.join(other[:3])}{' ...' if len(other) > 3 else ''} (name a file "
                "to read it whatever it holds)" if other else "") + (
                f"; {', '.join(own)} {'is' if len(own) == 1 else 'are'} this tool's own "
                "output, not a trace: name the run folder the trace is in" if own else ""))
        found.extend(nested)
    # the same file named twice is read once
    return list(dict.fromkeys(found))


#: Files at least this large (compressed size for .gz) are read as a stream of chunks.
STREAM_MIN_BYTES = 16 * 2**20
STREAM_MIN_GZ_BYTES = 2 * 2**20


def _sizes(p: Path) -> tuple[int, int]:
    """(plain size, gzipped size): the file's size in one of them, 0 in the other (and in
    both for an unreadable path)."""
    try:
        gz = inflate.is_gzip(p)
        size = p.stat().st_size
    except OSError:
        return 0, 0
    return (0, size) if gz else (size, 0)


def _large(p: Path) -> bool:
    try:
        size = p.stat().st_size
        gz = inflate.is_gzip(p)
    except OSError:
        return False  # read_bytes gives the clear error
    return size >= (STREAM_MIN_GZ_BYTES if gz else STREAM_MIN_BYTES)


def read_trace(path: str | Path, *, stream: bool | None = None,
               workers: int | None = None) -> Trace:
    """Read one trace file into a columnar Trace (TraceError on bad input).

    ``stream``: None reads large files chunk by chunk (bounded memory) and small ones
    whole; True always tries the chunked read first; False never does. ``workers``:
    processes for a large file (None: every usable CPU; 1: none): a plain one is cut into
    byte ranges that the workers read; a gzipped one's text too, each worker decompressing
    it up to the end of its range (where a range cannot be cut so, the text is
    decompressed here and its arrays decoded by the workers). A file whose layout does not
    allow chunking is read whole either way.
    """
    p = Path(path)
    if stream is None:
        stream = _large(p)
    trace = None
    workers = usable_cpus() if workers is None else workers
    plain, gz = _sizes(p) if stream and workers > 1 else (0, 0)
    if plain >= PARALLEL_MIN_BYTES or gz >= PIPELINE_MIN_GZ_BYTES:
        for read in ((read_parallel,) if plain else (read_text_ranges, read_pipelined)):
            try:
                trace = read(p, max_bytes(), workers)
                break
            except (NotStreamable, BrokenProcessPool):
                # a worker that died (killed for memory, say) costs speed, not the analysis
                trace = None
    if stream and trace is None:
        try:
            trace = read_streaming(p, max_bytes())
        except NotStreamable:
            trace = None
    if trace is None:
        data = read_bytes(p)
        dec = decode(data, p)
        del data
        trace = Trace.from_decoded(dec, p)
    if len(trace) == 0:
        raise TraceError(p, "no profiler events (only metadata, flow or unknown events): "
                            "not a torch.profiler trace")
    return trace
