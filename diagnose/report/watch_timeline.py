"""A watched run, rendered: the text summary and the HTML timeline of what
``diagnose.watching.read_timeline`` read from its folder (given here as a dict; this
module reads no file).

The text gives the steps, the pace over the run (the step time's median over up to ten
equal spans of steps), the alarms with what each capture found, spikes and shifts. The
page plots step time and loader wait per step (each point the median of a bucket of
steps, so a run of millions of steps stays a few kB), then, where they were sampled, the
GPU's and the process's utilisation, memory, and GPU energy per step, by step; it marks
each alarm with a line on each plot and links each alarm to its capture's folder. A run cut off (killed) is said to be, with the
timeline up to its last flush.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .markup import CSS, Markup, el, raw_svg

__all__ = ["alarm_lines", "machine_svgs", "pace", "render_watch_html", "render_watch_text", "timeline_svg"]

#: points on the plot at most (each the median of its bucket of steps)
POINTS = 1200
#: spans of the run the pace is given for
SPANS = 10


def pace(ms: np.ndarray, spans: int = SPANS) -> list[tuple[int, int, float]]:
    """(first step, last step, median ms) over up to ``spans`` equal spans of steps."""
    n = len(ms)
    if n == 0:
        return []
    edges = np.linspace(0, n, min(spans, n) + 1).astype(int)
    return [(int(a), int(b) - 1, float(np.median(ms[a:b])))
            for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _found(cap: dict[str, Any] | None) -> list[str]:
    """What a capture found: what changed against the baseline, then its findings."""
    if cap is None:
        return []
    out = [str(c) for c in cap.get("changed") or []][:6]
    out += [f"{f.get('severity', '?')} {f.get('rule', '?')}: {f.get('title', '')}"
            for f in cap.get("findings") or []][:6]
    return out


def _captures(tl: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each capture's records merged (the last wins), by the steps of the alarms it
    serves (an alarm's own record was written before its capture began)."""
    merged: dict[str, dict[str, Any]] = {}
    for c in tl.get("captures") or []:
        key = str(c.get("dir") or c.get("label"))
        merged[key] = {**merged.get(key, {}), **c}
    return {int(step): c for c in merged.values() if not c.get("baseline")
            for step in c.get("alarms") or []}


def alarms_with_captures(tl: dict[str, Any]) -> list[dict[str, Any]]:
    """The alarms as recorded (each before its capture began: "pending"), with what their
    capture's later records say: its folder, why there is none, what changed, its
    findings (as the text and the HTML show them)."""
    caps = _captures(tl)
    out = []
    for a in tl.get("alarms") or []:
        cap = _capture_of(caps, a)
        if cap is not None:
            a = {**a, "capture_dir": cap.get("dir"), "capture_why": cap.get("why"),
                 "changed": cap.get("changed") or a.get("changed") or [],
                 "passed": bool(cap.get("passed")),
                 "capture": {"dir": cap.get("dir"), "findings": cap.get("findings") or []}}
        out.append(a)
    return out


def _capture_of(caps: dict[int, dict[str, Any]], a: dict[str, Any]) -> dict[str, Any] | None:
    """The capture serving alarm ``a``: by its step, else by the folder its own record names
    (an alarm that came while another's capture ran shares it, and that capture's records
    list the first alarm's step only)."""
    step = a.get("step")
    if isinstance(step, int) and step in caps:
        return caps[step]
    own = a.get("capture")
    d = a.get("capture_dir") or (own.get("dir") if isinstance(own, dict) else None)
    name = Path(str(d)).name if d else None  # the records' folders may be made absolute
    return next((c for c in caps.values() if name and c.get("dir")
                 and Path(str(c["dir"])).name == name), None)


def _alarm_line(a: dict[str, Any]) -> str:
    ratio = a.get("ratio")
    times = f" (x{ratio:.2f})" if ratio and a.get("unit") != "%" else ""
    who = f" (rank {a['rank']})" if a.get("signal") == "rank" and a.get("rank") is not None \
        else ""
    return (f"step {a.get('step', 0):,}: {a.get('signal')}{who} {_num(a.get('before'))} -> "
            f"{_num(a.get('after'))} {a.get('unit', '')}{times}")


def _num(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, int | float) else "?"


def render_watch_text(tl: dict[str, Any], run_dir: str) -> str:
    """The text summary of a watched run's timeline."""
    ms, wait = tl["steps"]["ms"], tl["steps"]["wait"]
    n = len(ms)
    end = tl.get("end")
    head = f"watched run {run_dir}: {n:,} steps"
    if len(tl["steps"]["t"]):
        head += f" over {float(tl['steps']['t'][-1]):.1f} s"
    raised = end.get("raised") if isinstance(end, dict) else None
    out = [head + (f" (stopped: the loop raised {raised})" if raised else "")
           if end is not None else
           head + " (cut off: no end record, the timeline up to its last flush)"]
    missing = tl.get("steps_missing") or 0
    if missing:
        out.append(f"  note: the run ended after {n + missing:,} steps, but its step file "
                   f"(watch.steps.bin) holds only the first {n:,}: it was cut short or "
                   "truncated since; the figures below are those steps'")
    if n:
        q = np.percentile(ms, (10, 50, 90))
        out.append(f"  step time: median {q[1]:.3g} ms (p10-p90 {q[0]:.3g}-{q[2]:.3g}); "
                   f"loader wait median {float(np.median(wait)):.3g} ms a step")
        out.append("  pace over the run (median step time):")
        out += [f"    steps {a:>10,} - {b:<10,} {m:8.3g} ms" for a, b, m in pace(ms)]
    caps = _captures(tl)
    alarms = tl.get("alarms") or []
    out.append(f"  alarms: {len(alarms)}" + ("" if alarms else " (no sustained change)"))
    told: set[str] = set()  # captures already shown: two signals of one change share one
    for a in alarms:
        out.append(f"    {_alarm_line(a)}")
        if a.get("host_line"):
            out.append(f"      {a['host_line']}")
        cap = _capture_of(caps, a)
        if cap is None:
            why = a.get("capture_why")
            out.append(f"      capture: {why if why and why != 'pending' else 'none'}")
            continue
        where = str(cap.get("dir"))
        if where in told:
            out.append(f"      capture: the one above ({Path(where).name})")
            continue
        told.add(where)
        state = "" if cap.get("analysed") else f" ({cap.get('why') or 'not analysed'})"
        out.append(f"      capture: {where}{state}")
        out += [f"      {line}" for line in _found(cap)]
    for other in tl.get("other_ranks") or []:
        med = other.get("median_ms")
        out.append(f"  rank {other.get('rank')}: {other.get('steps', 0):,} steps"
                   + (f", median {med:.3g} ms" if isinstance(med, int | float) else "")
                   + ("" if other.get("complete") else " (cut off)")
                   + f", {len(other.get('alarms') or [])} alarms")
        ocaps = _captures(other)
        for a in other.get("alarms") or []:
            cap = _capture_of(ocaps, a)
            out.append(f"    {_alarm_line(a)}; capture: "
                       f"{cap.get('dir') if cap else a.get('capture_why') or 'none'}")
            out += [f"      {line}" for line in _found(cap)]
    if tl.get("spikes"):
        out.append(f"  spikes (single slow steps, not alarms): {len(tl['spikes']):,}")
    shifts = tl.get("shifts") or []
    if shifts:
        out.append(shifts_line(shifts, len(shifts)))
    return "\n".join(out)


#: shifts a text summary names: the largest changes, in step order
SHIFTS_SHOWN = 3


def largest_shifts(shifts: list[dict[str, Any]], n: int = SHIFTS_SHOWN
                   ) -> list[dict[str, Any]]:
    """The ``n`` shifts that moved their signal most (by ratio; a utilisation's by points),
    in step order."""
    def size(a: dict[str, Any]) -> float:
        b, x = a.get("before") or 0.0, a.get("after") or 0.0
        if a.get("signal") == "gpu_util" or b <= 0 or x <= 0:
            return abs(x - b) / 100.0
        return abs(math.log(x / b))
    return sorted(sorted(shifts, key=size, reverse=True)[:n], key=lambda a: a.get("step") or 0)


def shifts_line(recent: list[dict[str, Any]], count: int) -> str:
    """The summary's line of shifts: ``count`` in all, and the largest of the ``recent``
    records kept (:func:`largest_shifts`), said to be so where there are more."""
    big = largest_shifts(recent)
    which = "" if count <= len(big) else f"; the {len(big)} largest" + (
        "" if len(recent) >= count else f" of the latest {len(recent)}")
    parts = [f"step {a.get('step') or 0:,} {a.get('signal')} {a.get('before') or 0:.4g} "
             f"-> {a.get('after') or 0:.4g} {a.get('unit') or ''}" for a in big]
    return ("  shifts (changes for the better, or too small to be alarms): "
            f"{count:,}{which}" + (": " + "; ".join(parts) if parts else ""))


def _buckets(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bucket medians of ``y`` (at most :data:`POINTS`) and each bucket's first step."""
    n = len(y)
    size = max(1, -(-n // POINTS))
    m = n // size * size
    xs = np.arange(0, m, size)
    med = np.median(y[:m].reshape(-1, size), axis=1) if m else np.zeros(0)
    if m < n:
        xs, med = np.append(xs, m), np.append(med, np.median(y[m:]))
    return xs, med


def _svg(series: Sequence[tuple[str, np.ndarray, np.ndarray, str]], n: int,
         marks: Sequence[tuple[int, str]], unit: str, w: int = 960, h: int = 220) -> str:
    """Lines of (label, steps, values, colour) over steps 0..n, alarms as red lines."""
    pad = 40
    top = max((float(np.max(y)) for _, _, y, _ in series if len(y)), default=1.0) or 1.0
    sx = (w - 2 * pad) / max(n, 1)
    sy = (h - 2 * pad) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}">',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#888"/>',
             f'<text x="{pad}" y="{pad - 8}" font-size="11">{top:.3g} {unit}</text>',
             f'<text x="{w - pad}" y="{h - 8}" font-size="11" text-anchor="end">'
             f'step {n:,}</text>']
    for i, (label, xs, y, colour) in enumerate(series):
        pts = " ".join(f"{pad + x * sx:.1f},{h - pad - v * sy:.1f}"
                       for x, v in zip(xs.tolist(), y.tolist(), strict=True))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1" '
                     f'points="{pts}"/>')
        parts.append(f'<text x="{pad + 170 * i}" y="{h - 8}" font-size="11" '
                     f'fill="{colour}">{label}</text>')
    for step, tag in marks:
        x = pad + step * sx
        parts.append(f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{h - pad}" '
                     f'stroke="#d33" stroke-dasharray="4 2"><title>{tag}</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def _marks(tl: dict[str, Any]) -> list[tuple[int, str]]:
    return [(int(a.get("step", 0)), f"alarm #{i + 1}: {a.get('signal')}")
            for i, a in enumerate(tl.get("alarms") or [])]


def _sampled(samples: dict[str, Any] | None, sampler: str, field: str,
             scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A sampled field by the step it was taken at (samples as ``load_samples`` gives
    them; the watch tags each row with its step)."""
    cols = ((samples or {}).get("series") or {}).get(sampler) or {}
    pairs = [(s, v * scale) for s, v in zip(cols.get("step") or [], cols.get(field) or [],
                                            strict=False)
             if isinstance(s, int | float) and isinstance(v, int | float)
             and not isinstance(v, bool) and np.isfinite(v)]
    return (np.array([p[0] for p in pairs], dtype=np.float64),
            np.array([p[1] for p in pairs], dtype=np.float64))


def machine_svgs(tl: dict[str, Any], samples: dict[str, Any] | None) -> list[str]:
    """The machine over the run, by step, where it was sampled: utilisation (GPU, and
    this process's CPU), memory (GPU used, process RSS) and GPU energy per step (one
    point per energy window); a panel with nothing in it is left out."""
    n, marks = len(tl["steps"]["ms"]), _marks(tl)
    energy = [(e.get("step"), e.get("j_per_step")) for e in tl.get("energy") or []]
    energy = [(s, v) for s, v in energy if isinstance(s, int) and isinstance(v, int | float)]
    panels = [
        ("%", [("GPU utilisation (%)", *_sampled(samples, "gpu", "util_pct"), "#9467bd"),
               ("process CPU (%)", *_sampled(samples, "host", "proc_cpu_pct"), "#8c564b")]),
        ("GB", [("GPU memory used (GB)", *_sampled(samples, "gpu", "mem_used_bytes", 1e-9),
                 "#d62728"),
                ("process RSS (GB)", *_sampled(samples, "host", "proc_rss_bytes", 1e-9),
                 "#7f7f7f")]),
        ("J/step", [("GPU energy (J a step)", np.array([float(s) for s, _ in energy]),
                     np.array([float(v) for _, v in energy]), "#ff7f0e")]),
    ]
    return [_svg([s for s in series if len(s[1])], n, marks, unit)
            for unit, series in panels if any(len(s[1]) for s in series)]


def timeline_svg(tl: dict[str, Any]) -> str:
    """The plot of a watched run: step time and loader wait over the steps (bucket
    medians), each alarm a dashed red line at its step."""
    ms, wait = tl["steps"]["ms"], tl["steps"]["wait"]
    return _svg([("step time (ms)", *_buckets(ms), "#1f77b4"),
                 ("loader wait (ms)", *_buckets(wait), "#2ca02c")], len(ms), _marks(tl), "ms")


def alarm_lines(tl: dict[str, Any]) -> list[str]:
    """One line per alarm, with its capture's folder (or why it has none)."""
    caps = _captures(tl)
    out = []
    for a in tl.get("alarms") or []:
        cap = _capture_of(caps, a)
        where = cap.get("dir") if cap else (a.get("capture_why") or "no capture")
        out.append(f"{_alarm_line(a)}; capture: {where}")
    return out


def render_watch_html(tl: dict[str, Any], run_dir: str,
                      samples: dict[str, Any] | None = None) -> str:
    """The HTML timeline of a watched run: the plots (the steps, then the machine where
    it was sampled), the alarms (linked to their captures), and the text summary."""
    alarms = tl.get("alarms") or []
    plots = [raw_svg(svg) for svg in (timeline_svg(tl), *machine_svgs(tl, samples))]
    caps = _captures(tl)
    rows = []
    for i, a in enumerate(alarms):
        cap = _capture_of(caps, a)
        d = cap.get("dir") if cap else None
        link: Markup | str = (el("a", str(d), href=Path(d).resolve().as_uri()) if d
                              else a.get("capture_why") or "none")
        host = [el("br"), el("small", a["host_line"])] \
            if a.get("host_line") else []
        rows.append(el("tr", el("td", f"#{i + 1}"), el("td", _alarm_line(a), *host),
                       el("td", link), el("td", el("ul", [el("li", s) for s in _found(cap)]))))
    table = (el("table", el("tr", el("th", ""), el("th", "alarm"), el("th", "capture"),
                                 el("th", "what the capture found")), rows)
             if rows else el("p", "No alarm: no sustained change of pace."))
    cut = [] if tl.get("end") is not None else [
        el("p", el("strong", "Cut off:"), " no end record; the timeline up to its last flush.")]
    body = el("body", el("h1", f"Watched run {run_dir}"), *cut, *plots, el("h2", "Alarms"),
              table, el("h2", "Summary"), el("pre", render_watch_text(tl, run_dir)))
    page = el("html", el("head", el("meta", charset="utf-8"),
                         el("title", f"watch: {run_dir}"), el("style", Markup(CSS))), body)
    return "<!doctype html>\n" + page
