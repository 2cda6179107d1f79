"""Finding trace files and reading them into Traces.

Accepted inputs: one ``.json`` / ``.json.gz`` file; a folder of them; the
TensorBoard layout (``<run>/*.pt.trace.json*`` and
``<run>/plugins/profile/<stamp>/*.trace.json*``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import TraceError
from .decode import decode, read_bytes
from .model import Trace

_SUFFIXES = (".json", ".json.gz")


def is_trace_file(p: Path) -> bool:
    n = p.name
    return n.endswith(_SUFFIXES) and n not in ("context.json", "report.json", "samples.json")


def find_trace_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every trace file named by ``paths`` (files as given, folders searched)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise TraceError(p, "no such file or folder")
        if p.is_file():
            found.append(p)
            continue
        if not p.is_dir():
            raise TraceError(p, "not a regular file or folder")
        try:
            direct = sorted(f for f in p.iterdir() if f.is_file() and is_trace_file(f))
        except PermissionError:
            raise TraceError(p, "folder cannot be read (permission denied)") from None
        if direct:
            found.extend(direct)
            continue
        # TensorBoard layouts: <run>/plugins/profile/<stamp>/..., or run folders below.
        nested = sorted(f for f in p.rglob("*") if f.is_file() and is_trace_file(f))
        if not nested:
            raise TraceError(p, "folder holds no trace files (*.json or *.json.gz)")
        found.extend(nested)
    # the same file named twice is read once
    return list(dict.fromkeys(found))


def read_trace(path: str | Path) -> Trace:
    """Read one trace file into a columnar Trace (TraceError on bad input)."""
    p = Path(path)
    data = read_bytes(p)
    dec = decode(data, p)
    del data
    trace = Trace.from_decoded(dec, p)
    if len(trace) == 0:
        raise TraceError(p, "no profiler events (only metadata, flow or unknown events): "
                            "not a torch.profiler trace")
    return trace
