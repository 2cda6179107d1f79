"""A watched run as a TensorBoard run: ``torch-diagnose tensorboard RUN`` on the folder of
a ``watch(...)``.

Scalars, with the run's step as TensorBoard's step: ``watch/step_ms`` and
``watch/loader_wait_ms`` (each point the median of a bucket of steps, at most
:data:`POINTS` of them, so a run of millions of steps stays small), the alarms as
``watch/alarm_<signal>`` (the level after the change, at its step), energy per step at
each energy window (``watch/energy_j_per_step``) and the host and GPU samples
(``samples/<sampler>/<field>``, at the step each was taken). Text: the summary. The
Diagnose tab gets ``diagnose.json`` with the timeline plot (alarms marked), one note
per alarm naming its capture's folder (each capture is a run of its own: write it with
``torch-diagnose tensorboard CAPTURE_DIR``) and each alarm's severity for the run list
(its capture's worst finding's, at least a warning). The watched run's files are only read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..errors import DiagnoseError
from ..rules.engine import SEVERITIES, severity_rank
from ..values import as_number
from .tb_plugin.runfile import FORMAT, RUN_FILE, VERSION
from .tensorboard import DEFAULT_LOGDIR, WriteResult, _Events, _prepare_run_dir, _safe
from .watch_timeline import alarm_lines, alarms_with_captures, render_watch_text, timeline_svg

__all__ = ["POINTS", "write_watched_logdir"]

#: scalar points per step series at most (each the median of its bucket of steps)
POINTS = 2000


def _buckets(y: np.ndarray, points: int = POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Bucket medians of ``y`` (at most ``points``) and each bucket's first step."""
    n = len(y)
    if n == 0:
        return np.zeros(0, dtype=int), np.zeros(0)
    size = max(1, -(-n // points))
    starts = np.arange(0, n, size)
    return starts, np.array([float(np.median(y[a:a + size])) for a in starts])


def _write_steps(ev: _Events, tl: dict[str, Any], t0: float) -> int:
    n = 0
    t = tl["steps"]["t"]
    for tag, key, what in (("watch/step_ms", "ms", "step wall time (ms), median of a bucket "
                                                   "of steps"),
                           ("watch/loader_wait_ms", "wait", "the loop's wait on the loader "
                                                            "(ms a step), bucket median")):
        starts, med = _buckets(np.asarray(tl["steps"][key], dtype=np.float64))
        for s, v in zip(starts.tolist(), med.tolist(), strict=True):
            ev.scalar(tag, v, s, wall_time=t0 + float(t[s]), description=what)
            n += 1
    for a in tl.get("alarms") or []:
        x, step = as_number(a.get("after")), a.get("step")
        if x is not None and isinstance(step, int):
            ev.scalar(f"watch/alarm_{a.get('signal')}", x, step,
                      description="an alarm: the level after the change, at its step")
            n += 1
    for e in tl.get("energy") or []:
        x, step = as_number(e.get("j_per_step")), e.get("step")
        if x is not None and isinstance(step, int):
            ev.scalar("watch/energy_j_per_step", x, step,
                      description="GPU energy per step over an energy window (J)")
            n += 1
    return n


def _write_samples(ev: _Events, samples: dict[str, Any] | None) -> int:
    """The samplers' numeric fields at the step each sample was taken."""
    series = (samples or {}).get("series")
    if not isinstance(series, dict):
        return 0
    n = 0
    for sampler, cols in sorted(series.items()):
        if not isinstance(cols, dict) or not isinstance(cols.get("step"), list):
            continue
        steps, ts = cols["step"], cols.get("t") or []
        for fld, values in sorted(cols.items()):
            if fld in ("t", "step") or not isinstance(values, list):
                continue
            for i, (step, v) in enumerate(zip(steps, values, strict=False)):
                x, s = as_number(v), as_number(step)
                if x is not None and s is not None:
                    wall = as_number(ts[i]) if i < len(ts) else None
                    ev.scalar(f"samples/{sampler}/{fld}", x, int(s), wall_time=wall)
                    n += 1
    return n


def _severity(alarm: dict[str, Any]) -> str:
    """An alarm's severity for the tab's run list: its capture's worst finding's, at least
    a warning (a sustained change of pace, whatever its capture found)."""
    cap = alarm.get("capture")
    found = [f.get("severity") for f in (cap.get("findings") if isinstance(cap, dict) else None)
             or [] if isinstance(f, dict)]
    return max(["warning", *(s for s in found if s in SEVERITIES)], key=severity_rank)


def _document(tl: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """``diagnose.json`` for the tab: no findings of its own (its captures', each a run of
    its own), the median of every step (all timed without the profiler), the alarms as
    notes, and the timeline plot."""
    ms = np.asarray(tl["steps"]["ms"], dtype=np.float64)
    notes = [f"watched run: {len(ms):,} steps" + ("" if tl.get("complete") else
                                                   " (cut off: the timeline to its last flush)")]
    lines = alarm_lines(tl)
    notes += [f"alarm: {line}" for line in lines] or ["no alarm: no sustained change"]
    # every step was timed without the profiler (the captures' windows are runs of their own)
    median = float(np.median(ms)) if len(ms) else None
    report = {"source": [run_dir], "findings": [], "notes": notes,
              "watched": {"steps": len(ms), "alarms": len(lines),
                          "alarm_severities": [_severity(a) for a in alarms_with_captures(tl)]},
              "metrics": {"step_time_unprofiled_median_ms": median,
                          "step_time_unprofiled_steps": len(ms)}}
    plot = {"title": "Step time over the watched run",
            "caption": "Step time and loader wait, each point the median of a bucket of "
                       "steps; dashed red lines are alarms.",
            "svg": timeline_svg(tl)}
    return {"format": FORMAT, "version": VERSION, "report": report,
            "autofix": None, "plots": {"timeline": plot}, "traces": []}


def write_watched_logdir(tl: dict[str, Any], samples: dict[str, Any] | None, run_dir: str,
                         logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, *,
                         run: str | None = None, overwrite: bool = False) -> WriteResult:
    """Write the watched run ``run_dir`` (its timeline ``tl`` and ``samples``, as
    ``read_watched`` and ``load_samples`` give them) as the run ``<logdir>/<run>``."""
    name = _safe(run, "run") if run else _safe(Path(run_dir).resolve().name, "watch")
    out = Path(logdir) / name
    _prepare_run_dir(out, [Path(run_dir) / "watch.jsonl"], overwrite)
    res = WriteResult(out, name)
    meta = tl.get("meta") or {}
    t0 = as_number(meta.get("t0")) or time.time()
    ev = _Events(out)
    try:
        res.scalars += _write_steps(ev, tl, t0)
        res.scalars += _write_samples(ev, samples)
        ev.text("watch", "```\n" + render_watch_text(tl, run_dir) + "\n```",
                description="the watched run's summary: pace, alarms, captures")
    finally:
        ev.close()
    res.tags = sorted(ev.tags)
    target = out / RUN_FILE
    tmp = target.with_name(f".{RUN_FILE}.tmp")
    try:
        tmp.write_bytes(msgspec.json.encode(_document(tl, run_dir)))
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise DiagnoseError(f"{target}: cannot write ({e.strerror or e})") from None
    return res
