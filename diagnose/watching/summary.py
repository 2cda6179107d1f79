"""The watch's record (``w.to_json()``, ``watch.json``), its text summary at the end and
the progress line during the run.

The record is assembled from what the watch holds: settings and detector parameters, the
recent steps' statistics, the summary blocks, alarms (each with its capture's headline and
what changed), spikes (a count and the latest), captures with their own cost, energy,
the per-rank gathers, notes. The text and the progress line read only the record (or a
few of the watch's numbers), never the trace. ``w`` is a :class:`~.watcher.Watch`, typed
loosely so that this module does not import the one that imports it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from ..report.watch_timeline import shifts_line
from .alarm import alarm_lines

__all__ = ["progress_line", "record", "settings", "text"]

SCHEMA_VERSION = 1
#: the recent steps' statistics are over at most this many steps
RECENT = 1000


def settings(w: Any) -> dict[str, Any]:
    """The watch's options and each signal's detector parameters."""
    keys = ("capture_steps", "baseline_wanted", "max_captures", "capture_interval_s",
            "sample_hz", "progress_s", "warmup_steps", "rank_every", "rank_margin",
            "flush_s")
    return {**{k: getattr(w, k) for k in keys}, "ring": w.store.cap, "block": w.store.block,
            "detector": {s: dataclasses.asdict(p) for s, p in w.params.items()}}


def _stats(v: np.ndarray) -> dict[str, Any]:
    if len(v) == 0:
        return {"n": 0, "median": None, "p10": None, "p90": None}
    q = np.percentile(v, (10, 50, 90))
    return {"n": int(len(v)), "median": round(float(q[1]), 4), "p10": round(float(q[0]), 4),
            "p90": round(float(q[2]), 4)}


def energy_why(w: Any) -> str | None:
    """Why there is no J/step, where the cause is known before any window."""
    if not w.sample_hz:
        return "not measured: no sampling (sample_hz=0)"
    st = w._sampler
    if st is not None and "gpu" in st.unavailable:
        return f"not measured: no NVML GPU ({st.unavailable['gpu']})"
    gs = w._gpu_sampler
    if gs is not None and gs.energy_why:
        return f"not measured: {gs.energy_why}"
    if st is not None and any(e.startswith("gpu:") for e in st.errors):
        return f"not measured: the GPU sampler stopped ({st.errors[0]})"
    return None


def _capture_head(rep: Any) -> dict[str, Any] | None:
    if rep is None:
        return None
    return {"step_time": rep.step_time(),
            "findings": [{"rule": f.rule, "category": f.category, "severity": f.severity,
                          "title": f.title} for f in rep.findings]}


#: the note of a watched run that ended without a step boundary (a hand-written update
#: with its batches sliced from tensors: no torch.optim step, no DataLoader)
NO_STEPS = ("no step boundary was seen: the loop stepped no torch.optim optimizer and "
            "pulled no more than one batch from a DataLoader, which is how watch finds its "
            "steps; call w.step() at the end of each step (with watch(...) as w:)")


#: the note of a watched run that ended before its steps were tested (no alarm then says
#: nothing of its pace)
UNTESTED = ("the run ended before the step time's first baseline was learnt (after the "
            "warm-up steps, about 4 s of steps): its steps were not tested for a change")


def record(w: Any) -> dict[str, Any]:
    """The whole record of a watch (JSON-ready)."""
    _, ms, wait = w.store.last(RECENT)
    ended = w.ended or time.time()
    rw = w._ranks
    energy = w.energy.summary(energy_why(w))
    energy["recent_windows"] = list(w.energy.windows)[-20:]
    return {
        "schema_version": SCHEMA_VERSION,
        "run_dir": str(w.run_dir) if w.run_dir else None,
        "rank": w.rank, "world_size": w.world_size,
        "started": w.started, "ended": w.ended or None,
        "duration_s": round(ended - w.started, 3) if w.started else None,
        "steps": w.steps, "step_mode": w.step_mode,
        "settings": settings(w),
        "step_time_ms": _stats(ms), "loader_wait_ms": _stats(wait),
        "blocks": w.store.block_rows(), "block_merges": w.store.merges,
        "alarms": [a.to_json() for a in list(w.alarms)],
        "spikes": {"count": w.spike_count,
                   "recent": [{"step": s.step, "signal": s.signal, "before": s.before,
                               "after": s.after, "unit": s.unit}
                              for s in list(w.spikes)[-100:]]},
        "shifts": {"count": w.shift_count,
                   "recent": [a.to_json() for a in list(w.shifts)[-100:]]},
        "rests": [list(r) for r in w.rests],
        "baseline": _capture_head(w.baseline),
        "captures": [j.to_json() for j in list(w.captures)],
        "energy": energy,
        "ranks": None if rw is None else {"world_size": rw.world_size, "every": rw.every,
                                           "gathers": rw.gathers,
                                           "cost_s": round(rw.cost_s, 4), "last": rw.last},
        "host": dict(w.host),
        "notes": list(w.notes) + ([NO_STEPS] if w.ended and not w.steps else [])
        + ([UNTESTED] if w.ended and w.steps and not w._tests.settled else []),
    }


def _dur(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def text(rec: dict[str, Any]) -> str:
    """The summary printed at the end of a watched run."""
    st, lw = rec["step_time_ms"], rec["loader_wait_ms"]
    out = [f"torch-diagnose watch: {rec['steps']:,} steps in {_dur(rec['duration_s'])}"
           + (f" (rank {rec['rank']})" if rec.get("rank") is not None else "")
           + f", run folder {rec['run_dir']}"]
    if st["median"] is not None:
        first = rec["blocks"][0]["ms_median"] if rec["blocks"] else None
        out.append(f"  step time: median {st['median']:.3g} ms (p10-p90 {st['p10']:.3g}-"
                   f"{st['p90']:.3g}) over the last {st['n']:,} steps"
                   + (f"; {first:.3g} ms in the first block" if first else ""))
        out.append(f"  loader wait: median {lw['median']:.3g} ms a step")
    e = rec["energy"]
    if e["j_per_step"] is not None:
        per = f", {e['j_per_sample']:.4g} J/sample" if e.get("j_per_sample") else ""
        out.append(f"  energy: {e['j_per_step']:.4g} J/step{per} over {e['steps']:,} steps")
    else:
        out.append(f"  energy: {e['why']}")
    alarms = rec["alarms"]
    out.append(f"  alarms: {len(alarms)}" + ("" if alarms else " (no step was tested: see the "
                                                 "note)" if UNTESTED in rec["notes"] else
                                                 " (no sustained change)"))
    for i, a in enumerate(alarms):
        # two signals of one change (the step time and the loader's wait) share a capture
        same = (i > 0 and a.get("capture") is not None and a["step"] == alarms[i - 1]["step"]
                and a.get("capture_dir") == alarms[i - 1].get("capture_dir"))
        out.extend(f"    {line}" for line in alarm_lines(a, same_capture=same))
    sp = rec["spikes"]
    if sp["count"]:
        big = max(sp["recent"], key=lambda s: (s["after"] or 0) / (s["before"] or 1))
        out.append(f"  spikes (single slow steps, not alarms): {sp['count']:,}; the largest of "
                   f"the latest x{(big['after'] or 0) / (big['before'] or 1):.1f} at step "
                   f"{big['step']:,}")
    sh = rec.get("shifts") or {"count": 0, "recent": []}
    if sh["count"]:
        out.append(shifts_line(sh["recent"], sh["count"]))
    caps = rec["captures"]
    if caps:
        cost = sum(c["cost_s"] for c in caps)
        base = sum(1 for c in caps if c["baseline"])
        out.append(f"  captures: {len(caps)} ({base} baseline), the profiler's own time at "
                   f"their boundaries {cost:.2f} s")
    out.extend(f"  note: {n}" for n in rec["notes"])
    return "\n".join(out)


def progress_line(w: Any) -> str:
    """One line on the run so far (printed at most once per ``progress_s``)."""
    _, ms, wait = w.store.last(min(RECENT, w.store.n))
    st, lw = _stats(ms), _stats(wait)
    head = f"torch-diagnose watch: step {w.steps:,}"
    if st["median"] is None:
        return head
    return (f"{head} · {st['median']:.3g} ms/step (p90 {st['p90']:.3g}) · loader wait "
            f"{lw['median']:.3g} ms · {_n(len(w.alarms), 'alarm')}, "
            f"{_n(w.spike_count, 'spike')}")


def _n(count: int, noun: str) -> str:
    """``1 alarm``, ``2 alarms``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
