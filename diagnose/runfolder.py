"""The run folder: where one capture writes everything it produces, and analysis reads.

It is the one interface between capture and analysis, so it sits below both.

Layout (TensorBoard's: the trace sits directly in the run folder, named the way
``torch.profiler.tensorboard_trace_handler(..., use_gzip=True)`` names it)::

    diagnose-runs/<stamp>/
        <host>_<pid>.<time_ns>.pt.trace.json.gz   the profiler trace (one per rank)
        context.json                                what the run was (see capture.runinfo)
        samples.jsonl                               sampler time series, one JSON object a line

A torch.distributed run shares one run folder: every rank writes its own trace (named
``<host>_<pid>_rank<N>``), rank 0 writes ``context.json`` with the other ranks' contexts
under ``rank_contexts``, and rank N > 0 samples into ``samples.rank<N>.jsonl``.

``load_context`` and ``load_samples`` are what the analysis (``diagnose.analysis``) calls
on a run folder, so in-process analysis and ``torch-diagnose analyze RUN`` read the
same files with the same code. Both are tolerant: a missing or corrupt file gives
``None``, never an exception (the trace alone can still be analysed).

The samples dict that ``load_samples`` returns (version 1)::

    {
      "version": 1,
      "pid": int,                     # the training process
      "interval_s": float,            # the sampling period asked for
      "t0": float, "t1": float|None,  # unix seconds: sampling started / ended (None: cut off)
      "info": {                       # static facts per sampler
        "host": {"cores": [int, ...], "cpu_count": int},
        "gpu": {"index": int, "name": str, "uuid": str, "mem_total_bytes": int,
                "nvml_driver": str},
      },
      "series": {                     # columnar time series, one list per field,
        "host": {                     # all the same length as "t"; None = not read
          "t": [float, ...],          # unix seconds (trace ts + baseTimeNanoseconds/1e3 = unix us)
          "cpu_pct": [[float, ...], ...],   # per tick: busy % of each core in info.host.cores
          "iowait_pct": [float, ...],       # % of all CPU time in iowait (system-wide)
          "steal_pct": [float, ...],        # % of all CPU time a hypervisor took (steal)
          "proc_cpu_pct": [float, ...],     # this process, % of one core (can exceed 100)
          "proc_rss_bytes": [int, ...],
          "workers_count": [int, ...],      # live DataLoader worker processes
          "workers_cpu_pct": [float|None, ...],  # sum over workers, % of one core
          "workers_cpu_n": [int, ...],           # workers in that sum (a new one needs 2 reads)
          "workers_rss_bytes": [int, ...],       # sum over workers (shared pages counted per worker)
          "peers_cpu_pct": [float|None, ...],    # under torchrun only: the other ranks on this
                                                 # host with their workers, % of one core
          "kids_cpu_pct": [float, ...],          # this process's other descendants (torch.compile's
                                                 # workers), those it reaped included, % of one core
        },
        "gpu": {
          "t": [...], "util_pct": [...], "mem_used_bytes": [...], "sm_clock_mhz": [...],
          "power_w": [...], "pcie_rx_kbps": [...], "pcie_tx_kbps": [...],
          "proc_mem_bytes": [...],    # this process's GPU memory (None where NVML can't say)
        },
      },
      "unavailable": {"gpu": "no CUDA device visible to torch"},  # sampler -> reason
      "errors": [{"sampler": "host", "t": float, "error": "ValueError: ..."}],
      "marks": {"active_start": float, "active_end": float},  # profiled window, unix s
    }

A series is absent when its sampler never produced a row. The file itself holds
one JSON object a line (``{"type": "meta"|"info"|"sample"|"unavailable"|"error"|
"mark"|"end", ...}``) so a long run streams to disk instead of growing in memory.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from pathlib import Path
from typing import Any

CONTEXT_FILE = "context.json"
#: what ``torch-diagnose autofix`` writes in its run folder (its capture in a folder below)
AUTOFIX_FILE = "autofix.json"
#: the tool's own JSON files in a run folder: none is a trace
OWN_JSON = (CONTEXT_FILE, "report.json", "samples.json", "watch.json", AUTOFIX_FILE)
SAMPLES_FILE = "samples.jsonl"
TRACE_SUFFIX = ".pt.trace.json.gz"
DEFAULT_ROOT = "diagnose-runs"
SAMPLES_VERSION = 1


def check_run_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The folder run folders go in (``root``, default ``diagnose-runs``), where nothing
    stands in its way: a file at it or above it raises NotADirectoryError saying so
    (mkdir's own "File exists" reads as if the folder were there). Nothing is made."""
    base = Path(root if root is not None else DEFAULT_ROOT)
    for folder in (base, *base.parents):
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{folder} is a file, not a folder")
    return base


def new_run_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """Create and return a fresh ``<root>/<stamp>/`` folder (root: ``diagnose-runs``).

    The stamp is local time to the millisecond; a clash (two runs in the same
    millisecond) gets a numeric suffix instead of sharing a folder.
    """
    base = check_run_root(root)
    base.mkdir(parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    for n in range(1000):
        path = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{base}: could not create a fresh run folder for stamp {stamp}")


def trace_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The profiler traces directly in a run folder, oldest first."""
    p = Path(run_dir)
    if not p.is_dir():
        return []
    return sorted(
        (
            f
            for f in p.iterdir()
            if f.is_file() and f.name.endswith((TRACE_SUFFIX, ".pt.trace.json"))
        ),
        key=lambda f: f.name,
    )


def _json_safe(obj: Any) -> Any:
    """Make a context value JSON-safe: NaN/inf -> None, unknown objects -> str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return str(obj)


def write_json(path: Path, obj: Any, **dumps: Any) -> Path:
    """Write ``obj`` as JSON at ``path`` atomically (a crash never leaves half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, **dumps), encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_context(run_dir: str | os.PathLike[str], context: dict[str, Any]) -> Path:
    """Write ``context.json`` atomically (a crash never leaves half a file)."""
    return write_json(Path(run_dir) / CONTEXT_FILE, _json_safe(context), indent=2,
                      sort_keys=True)


def load_context(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``context.json`` of a run folder, or None if it is missing or unreadable."""
    try:
        data = json.loads((Path(run_dir) / CONTEXT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def context_unreadable(run_dir: str | os.PathLike[str]) -> str | None:
    """Why a run folder's ``context.json`` is there but cannot be read, as a report's note
    (None: there is none, or it reads as a JSON object)."""
    path = Path(run_dir) / CONTEXT_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = f"{type(e).__name__}: {str(e)[:120]}"
    else:
        if isinstance(data, dict):
            return None
        why = f"a JSON {type(data).__name__}, not an object"
    return (f"{path} cannot be read ({why}): the trace was analysed without what the "
            "capture measured beside it (the unprofiled step time, the DataLoader, memory, "
            "the probes)")


def samples_file(rank: int | None = None) -> str:
    """Name of a rank's samples file: ``samples.jsonl`` (rank 0 or not distributed),
    ``samples.rank<N>.jsonl`` for the other ranks of a torch.distributed run."""
    return SAMPLES_FILE if not rank else f"samples.rank{rank}.jsonl"


def rank_context(context: dict[str, Any] | None, rank: int | None) -> dict[str, Any] | None:
    """One rank's context: a distributed run's ``context.json`` is rank 0's, with the other
    ranks' under ``rank_contexts`` (gathered by rank 0)."""
    if not rank or context is None:
        return context
    other = (context.get("rank_contexts") or {}).get(str(rank))
    return other if isinstance(other, dict) else context


def load_samples(
    run_dir: str | os.PathLike[str], rank: int | None = None
) -> dict[str, Any] | None:
    """The samples of a run folder (of one rank of it) as the columnar dict described above.

    None if there is no samples file or not even its header can be read.
    Bad lines (a run killed mid-write leaves a torn last line) are skipped.
    """
    path = Path(run_dir) / samples_file(rank)
    try:
        fh = path.open("r", encoding="utf-8", errors="replace")
    except OSError:
        return None
    out: dict[str, Any] = {
        "version": SAMPLES_VERSION,
        "pid": None,
        "interval_s": None,
        "t0": None,
        "t1": None,
        "info": {},
        "series": {},
        "unavailable": {},
        "errors": [],
        "marks": {},
    }
    seen_meta = False
    try:
        with fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                try:
                    seen_meta |= _absorb(out, rec)
                except (KeyError, TypeError, ValueError):
                    continue
    except OSError:
        return None
    if not seen_meta:
        return None
    _pad_series(out["series"])
    return out


def _absorb(out: dict[str, Any], rec: dict[str, Any]) -> bool:
    kind = rec.get("type")
    if kind == "meta":
        out["pid"] = rec.get("pid")
        out["interval_s"] = rec.get("interval_s")
        out["t0"] = rec.get("t0")
        return True
    if kind == "info":
        info = {k: v for k, v in rec.items() if k not in ("type", "sampler")}
        out["info"][str(rec["sampler"])] = info
    elif kind == "sample":
        name = str(rec["sampler"])
        series = out["series"].setdefault(name, {"t": []})
        n = len(series["t"])
        for key, value in rec.items():
            if key in ("type", "sampler", "t"):
                continue
            col = series.setdefault(key, [None] * n)
            col.extend([None] * (n - len(col)))
            col.append(value)
        series["t"].append(float(rec["t"]))
    elif kind == "unavailable":
        out["unavailable"][str(rec["sampler"])] = str(rec.get("reason", "unknown reason"))
    elif kind == "error":
        out["errors"].append(
            {"sampler": str(rec["sampler"]), "t": rec.get("t"), "error": str(rec.get("error"))}
        )
    elif kind == "mark":
        out["marks"][str(rec["name"])] = float(rec["t"])
    elif kind == "end":
        out["t1"] = rec.get("t")
    return False


def _pad_series(series: dict[str, dict[str, list[Any]]]) -> None:
    """Columns that started late or stopped early are padded with None."""
    for cols in series.values():
        n = len(cols["t"])
        for _key, col in cols.items():
            if len(col) < n:
                col.extend([None] * (n - len(col)))
            elif len(col) > n:
                del col[n:]
