"""A watched run's timeline in the run folder: written as it goes, read back after.

Two append-only files per rank (rank N > 0 adds ``.rank<N>`` before the suffix):

- ``watch.jsonl``: one JSON object a line, ``{"type": ..., ...}``: ``meta`` (first: the
  watch's settings and the steps file's record layout), ``block`` (a summary of each
  block of steps, :data:`~diagnose.watching.store.BLOCK_FIELDS`), ``alarm``, ``spike``, ``shift``,
  ``energy`` (a window of the NVML energy counter), ``ranks`` (a gather's per-rank
  summaries), ``capture`` (a profiled window, where its folder is), ``note``, and ``end``
  (last, with the whole record; absent where the run was killed);
- ``watch.steps.bin``: every step in order, 16 bytes each (:data:`STEP_DTYPE`: end time
  in s since the watch began, wall ms, loader wait ms); step i is record i.

Both are flushed to the OS together every ~2 s (:meth:`TimelineWriter.flush`), so a run
killed at any moment leaves its timeline up to the last flush. :func:`read_timeline` skips
a torn last line and a torn last record.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["STEP_DTYPE", "TimelineWriter", "is_watched", "read_timeline", "read_watched",
           "timeline_files"]

TIMELINE_VERSION = 1
#: one step in ``watch.steps.bin``
STEP_DTYPE = np.dtype([("t", "<f8"), ("ms", "<f4"), ("wait", "<f4")])
#: record types that :func:`read_timeline` collects into lists, and the list's key
LISTS = {"block": "blocks", "alarm": "alarms", "spike": "spikes", "shift": "shifts",
         "energy": "energy",
         "ranks": "ranks", "capture": "captures", "note": "notes", "host": "hosts"}


def timeline_files(rank: int | None = None) -> tuple[str, str]:
    """The names of a rank's two files: ``watch.jsonl`` and ``watch.steps.bin``."""
    tag = f".rank{rank}" if rank else ""
    return f"watch{tag}.jsonl", f"watch{tag}.steps.bin"


def _safe(obj: Any) -> Any:
    """JSON-safe: NaN and infinities become None, unknown objects their str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, dict):
        return {str(k): _safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return _safe(obj.item())
    return str(obj)


class TimelineWriter:
    """Appends records (any thread: :meth:`record`) and steps (the training thread:
    :meth:`steps`) to a rank's two files; :meth:`flush` hands both to the OS."""

    def __init__(self, run_dir: str | os.PathLike[str], rank: int | None = None) -> None:
        jsonl, steps = timeline_files(rank)
        self.path = Path(run_dir) / jsonl
        self.steps_path = Path(run_dir) / steps
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._bin: IO[bytes] | None = self.steps_path.open("ab")
        self.steps_written = 0
        self.errors: list[str] = []

    def record(self, type_: str, /, **fields: Any) -> None:
        """Queue one record of type ``type_`` (written at the next flush)."""
        line = json.dumps(_safe({**fields, "type": type_}), separators=(",", ":"))
        with self._lock:
            self._lines.append(line)

    def line(self, line: str) -> None:
        """Queue one record already written as a JSON line (the caller made it safe)."""
        with self._lock:
            self._lines.append(line)

    def spike(self, step: int, signal: str, before: float | None, after: float | None,
              unit: str) -> None:
        """A spike's record (many on a busy machine: the line is made directly)."""
        b, v = before, after
        if b is not None and v is not None and math.isfinite(b) and math.isfinite(v):
            self.line(f'{{"step":{step},"signal":"{signal}","before":{b!r},'
                      f'"after":{v!r},"unit":"{unit}","type":"spike"}}')
        else:
            self.record("spike", step=step, signal=signal, before=b, after=v, unit=unit)

    def steps(self, first: int, t: np.ndarray, ms: np.ndarray, wait: np.ndarray) -> None:
        """Append steps ``first`` .. ``first + len(t) - 1`` (buffered until the flush)."""
        if self._bin is None or len(t) == 0:
            return
        if first != self.steps_written:  # steps the ring lost: keep positions as step ids
            gap = first - self.steps_written
            self.record("note", text=f"{gap} steps were not recorded", first=self.steps_written)
            pad = np.zeros(max(gap, 0), dtype=STEP_DTYPE)
            pad["t"] = np.nan
            self._write_bin(pad.tobytes())
        rec = np.empty(len(t), dtype=STEP_DTYPE)
        rec["t"], rec["ms"], rec["wait"] = t, ms, wait
        self._write_bin(rec.tobytes())
        self.steps_written = first + len(t)

    def _write_bin(self, data: bytes) -> None:
        try:
            assert self._bin is not None
            self._bin.write(data)
        except OSError as e:
            self._fail(e)

    def flush(self, steps: bool = True) -> None:
        """Write queued records and hand both files to the OS (``steps=False``: the
        records only, for a thread other than the training one)."""
        with self._lock:
            lines, self._lines = self._lines, []
            try:
                if self._fh is not None and lines:
                    self._fh.write("\n".join(lines) + "\n")
                    self._fh.flush()
                if steps and self._bin is not None:
                    self._bin.flush()
            except OSError as e:
                self._fail(e)

    def _fail(self, e: OSError) -> None:
        """A disk problem (full, gone) ends writing; the run goes on."""
        self.errors.append(f"{type(e).__name__}: {e}")
        for fh in (self._fh, self._bin):
            with contextlib.suppress(OSError):
                if fh is not None:
                    fh.close()
        self._fh = self._bin = None

    def close(self) -> None:
        self.flush()
        with self._lock:
            for fh in (self._fh, self._bin):
                with contextlib.suppress(OSError):
                    if fh is not None:
                        fh.close()
            self._fh = self._bin = None


def read_timeline(run_dir: str | os.PathLike[str], rank: int | None = None
                  ) -> dict[str, Any] | None:
    """A rank's timeline: ``meta``, ``end`` (None: the run was cut off), one list per
    record type (:data:`LISTS`: ``blocks``, ``alarms``...), and ``steps``:
    numpy arrays ``t``, ``ms``, ``wait`` (step i at index i). None without a meta record."""
    jsonl, steps = timeline_files(rank)
    out: dict[str, Any] = {"meta": None, "end": None, **{k: [] for k in LISTS.values()}}
    try:
        with (Path(run_dir) / jsonl).open("r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line
                kind = rec.get("type") if isinstance(rec, dict) else None
                if kind == "meta":
                    out["meta"] = rec
                elif kind == "end":
                    out["end"] = rec
                elif kind in LISTS:
                    out[LISTS[kind]].append(rec)
    except OSError:
        return None
    if out["meta"] is None:
        return None
    try:
        raw = (Path(run_dir) / steps).read_bytes()
    except OSError:
        raw = b""
    whole = len(raw) - len(raw) % STEP_DTYPE.itemsize
    rec = np.frombuffer(raw[:whole], dtype=STEP_DTYPE)
    out["steps"] = {"t": rec["t"].astype(np.float64), "ms": rec["ms"].astype(np.float64),
                    "wait": rec["wait"].astype(np.float64)}
    out["complete"] = out["end"] is not None
    for h in out["hosts"]:  # what the machine did, written a second or more after its alarm
        for a in out["alarms"]:
            if a.get("step") == h.get("step") and a.get("signal") == h.get("signal"):
                a["host"], a["host_line"] = h.get("host"), h.get("host_line")
                a["neighbours"] = bool(h.get("neighbours"))
    told = out["end"].get("steps") if isinstance(out["end"], dict) else None
    #: steps the end record counts beyond those the step file holds (it was cut short)
    out["steps_missing"] = max(0, told - len(rec)) if isinstance(told, int) else 0
    return out


def is_watched(path: str | os.PathLike[str]) -> bool:
    """``path`` is a watched run's folder (it holds a timeline); False where it cannot be
    looked into (the reader that follows says why)."""
    try:
        return (Path(path) / timeline_files(None)[0]).is_file()
    except OSError:  # a folder without read permission: is_file raises, not False
        return False


def read_watched(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`read_timeline` of the run (rank 0's), with each capture record's
    ``findings`` (rule, severity, title) read from its folder's ``report.json`` where the
    analysis wrote one; and ``other_ranks``: each other rank's timeline in the folder
    (its ``rank``, ``steps``, ``median_ms``, ``complete``, ``alarms`` and ``captures``),
    whose step arrays are not kept."""
    tl = read_timeline(run_dir)
    if tl is None:
        return None
    _findings(run_dir, tl["captures"])
    tl["other_ranks"] = []
    for rank in _other_ranks(run_dir):
        other = read_timeline(run_dir, rank)
        if other is None:
            continue
        ms = other["steps"]["ms"]
        _findings(run_dir, other["captures"])
        tl["other_ranks"].append({
            "rank": rank, "steps": len(ms), "complete": other["complete"],
            "median_ms": float(np.median(ms)) if len(ms) else None,
            "alarms": other["alarms"], "captures": other["captures"]})
    return tl


def findings_at_least(tl: dict[str, Any], severity: str) -> list[dict[str, Any]]:
    """The findings of a watched run's captures (every rank's, the baseline's too) at or
    above ``severity``, as :func:`read_watched` gives them: what ``--fail-on`` reads."""
    from ..rules.engine import SEVERITIES, severity_rank

    least = severity_rank(severity)
    caps = [*tl.get("captures", []),
            *(c for other in tl.get("other_ranks") or [] for c in other.get("captures") or [])]
    return [f for c in caps for f in c.get("findings") or []
            if f.get("severity") in SEVERITIES and severity_rank(f["severity"]) >= least]


def _other_ranks(run_dir: str | os.PathLike[str]) -> list[int]:
    """The ranks > 0 with a timeline in the folder, in order."""
    out = []
    for p in Path(run_dir).glob("watch.rank*.jsonl"):
        tag = p.name[len("watch.rank"):-len(".jsonl")]
        if tag.isdigit() and int(tag) > 0:
            out.append(int(tag))
    return sorted(out)


def _findings(run_dir: str | os.PathLike[str], captures: list[dict[str, Any]]) -> None:
    """Each capture record's findings from its folder's report.json, where there is one;
    its ``dir`` the folder where it is now, whole (it was written relative to where the run
    started, and the run may have moved since)."""
    for cap in captures:
        d = cap.get("dir")
        if not d:
            continue
        here = Path(d) if Path(d).is_dir() else Path(run_dir) / "captures" / Path(d).name
        if here.is_dir():  # where it was written, else in this folder (the run was moved)
            cap["dir"] = str(here.resolve())
        if cap.get("findings") is not None:
            continue
        try:
            rep = json.loads((here / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found = rep.get("findings") if isinstance(rep, dict) else None
        if isinstance(found, list):
            cap["findings"] = [{k: f.get(k) for k in ("rule", "severity", "title")}
                               for f in found if isinstance(f, dict)]
