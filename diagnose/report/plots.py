"""Plots of a Report, drawn with matplotlib and rendered to SVG for the HTML report.

Figures are made with :class:`matplotlib.figure.Figure` directly, never through
``pyplot``: no GUI backend is touched and a notebook's own backend is left alone.
Every plotted number is read from the Report (``series``, ``metrics``,
``samples``, ``ranks``) or from the autofix rows passed in; a figure whose data
is missing is ``None``, never an empty chart.

``figures(report)`` returns them all by name, ``plot_title(key, report)`` their titles
(a run sampled without a GPU gets host titles); ``to_svg(fig)`` gives the inline
``<svg>`` markup (text stays text: ``svg.fonttype = none``; matplotlib escapes it).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib
from matplotlib.figure import Figure

from ..values import as_number
from .markup import BREAKDOWN

if TYPE_CHECKING:
    from ..result import Analysis, RankResult

IDLE: tuple[tuple[str, str, str], ...] = (
    ("gpu_busy_frac", "GPU busy", "#4C72B0"),
    ("idle_input_frac", "idle: waiting for input", "#C44E52"),
    ("idle_sync_frac", "idle: host sync", "#DA8BC3"),
    ("idle_launch_frac", "idle: late launches", "#CCB974"),
    ("idle_other_frac", "idle: other", "#B8B8B8"),
)
PLOT_TITLES: dict[str, str] = {
    "breakdown": "Per-step time breakdown",
    "idle": "GPU busy and idle time by cause",
    "samples": "GPU and host over time",
    "ranks": "Per-rank comparison",
    "autofix": "Autofix: step time before and after",
}
#: the samples plot's title where the run's samples hold no GPU series (a CPU run)
HOST_SAMPLES_TITLE = "Host CPU over time"

_RC: Any = {  # dict[str, Any]; matplotlib types its keys as literals
    "svg.fonttype": "none",  # text stays <text>, searchable and small
    "text.parse_math": False,  # a '$' in a label is a dollar sign, not mathtext
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
}


class AutofixRow(NamedTuple):
    """One autofix trial for the before/after chart: median step time without and with it;
    for the tables also the measured speedup with its interval and the step model's
    prediction with its range, where known."""

    label: str
    before_ms: float
    after_ms: float
    speedup: float | None = None
    ci_lo: float | None = None
    ci_hi: float | None = None
    predicted: float | None = None
    pred_lo: float | None = None
    pred_hi: float | None = None


def autofix_rows(result: Any) -> list[AutofixRow]:
    """Before/after rows from an autofix result (``diagnose.autofix.autofix``'s AutofixReport):
    each measured trial (its baseline and trial medians), then the final baseline-vs-tuned
    comparison when a change was kept. Read by attribute, so this module needs no autofix."""
    rows: list[AutofixRow] = []
    for d in getattr(result, "decisions", None) or ():
        before, after = as_number(getattr(d, "baseline_ms", None)), as_number(getattr(d, "trial_ms", None))
        if before is not None and after is not None:
            what = getattr(d, "change", "") or getattr(d, "fix", "?")
            rng = getattr(d, "predicted_range", None)
            lo, hi = (as_number(rng[0]), as_number(rng[1])) \
                if isinstance(rng, tuple | list) and len(rng) == 2 else (None, None)
            rows.append(AutofixRow(f"{what} ({getattr(d, 'status', '?')})", before, after,
                                   *_interval(getattr(d, "speedup", None)),
                                   as_number(getattr(d, "predicted_speedup", None)), lo, hi))
    final = getattr(result, "final", None)
    before, after = as_number(getattr(final, "base_ms", None)), as_number(getattr(final, "cand_ms", None))
    if before is not None and after is not None:
        tuned = as_number(getattr(result, "predicted_tuned_ms", None))
        rows.append(AutofixRow("baseline vs tuned (all kept changes)", before, after,
                               *_interval(getattr(final, "interval", None)),
                               before / tuned if tuned else None))
    return rows


def _interval(iv: Any) -> tuple[float | None, float | None, float | None]:
    return (as_number(getattr(iv, "ratio", None)), as_number(getattr(iv, "lo", None)),
            as_number(getattr(iv, "hi", None)))


@contextmanager
def _style() -> Iterator[None]:
    with matplotlib.rc_context(_RC):
        yield


def _nums(xs: Any) -> list[float | None]:
    return [as_number(x) for x in xs] if isinstance(xs, list) else []


# ---------------------------------------------------------------------------- figures
def breakdown_figure(series: dict[str, list[float]]) -> Figure | None:
    """Stacked bars, one per profiled step: where each step's time went (ms)."""
    steps = _nums(series.get("step_ms"))
    if not steps:
        return None
    n = len(steps)
    cols = [(key, label, color, _nums(series.get(f"{key}_ms"))) for key, label, color in BREAKDOWN]
    cols = [c for c in cols if len(c[3]) == n and any((v or 0) > 0 for v in c[3])]
    if not cols:
        return None
    with _style():
        fig = Figure(figsize=(9, 3.4), layout="constrained")
        ax = fig.add_subplot()
        x = list(range(1, n + 1))
        bottom = [0.0] * n
        for _key, label, color, vals in cols:
            v = [y or 0.0 for y in vals]
            ax.bar(x, v, bottom=bottom, color=color, label=label, width=0.7)
            bottom = [b + y for b, y in zip(bottom, v, strict=True)]
        ax.plot(x, [s if s is not None else math.nan for s in steps], "k_", markersize=18,
                markeredgewidth=1.5, label="step time", linestyle="none")
        ax.set_xlabel("profiled step")
        ax.set_ylabel("ms")
        ax.set_xticks(x if n <= 30 else x[:: math.ceil(n / 30)])
        ax.set_xlim(0.4, n + 0.6)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def idle_figure(metrics: dict[str, Any]) -> Figure | None:
    """One 100% bar of the profiled window: GPU busy, and idle time split by its cause."""
    if metrics.get("has_gpu") is False:
        return None
    parts = [(label, color, as_number(metrics.get(key))) for key, label, color in IDLE]
    if parts[0][2] is None or all(v is None for _, _, v in parts[1:]):
        return None
    with _style():
        fig = Figure(figsize=(9, 1.7), layout="constrained")
        ax = fig.add_subplot()
        left = 0.0
        for label, color, v in parts:
            if v is None:
                continue
            pct = v * 100
            ax.barh([0], [pct], left=left, color=color, height=0.6,
                    label=f"{label} {pct:.1f}%")
            if pct >= 6:
                ax.text(left + pct / 2, 0, f"{pct:.0f}%", ha="center", va="center",
                        color="white", fontweight="bold")
            left += pct
        ax.set_xlim(0, max(100.0, left))
        ax.set_yticks([])
        ax.set_xlabel("% of the profiled window")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


def _host_cpu_mean(rows: list[Any]) -> list[float]:
    out = []
    for row in rows:
        vals = [as_number(v) for v in row] if isinstance(row, list) else []
        good = [v for v in vals if v is not None]
        out.append(sum(good) / len(good) if good else math.nan)
    return out


def _xy(t: Sequence[float | None], ys: Sequence[float | None], t0: float,
        scale: float = 1.0) -> tuple[list[float], list[float]]:
    xs, out = [], []
    for ti, yi in zip(t, ys, strict=False):
        if ti is None:
            continue
        xs.append(ti - t0)
        out.append(yi * scale if yi is not None else math.nan)
    return xs, out


def samples_figure(samples: dict[str, Any] | None) -> Figure | None:
    """GPU utilization and memory, host and process CPU over time (from the run's samples)."""
    if not isinstance(samples, dict) or not isinstance(samples.get("series"), dict):
        return None
    series = samples["series"]
    gpu = series.get("gpu") if isinstance(series.get("gpu"), dict) else None
    host = series.get("host") if isinstance(series.get("host"), dict) else None
    gt, ht = (_nums(gpu.get("t")) if gpu else []), (_nums(host.get("t")) if host else [])
    starts = [t for t in (*gt[:1], *ht[:1]) if t is not None]
    if not starts:
        return None
    t0 = as_number(samples.get("t0")) or min(starts)
    panels: list[tuple[str, list[tuple[str, str, list[float], list[float]]]]] = []
    if gpu and gt:
        panels.append(("GPU util %", [("GPU utilization", "#4C72B0",
                                       *_xy(gt, _nums(gpu.get("util_pct")), t0))]))
        mem = _nums(gpu.get("mem_used_bytes"))
        if any(v is not None for v in mem):
            lines = [("used (all processes)", "#8172B3", *_xy(gt, mem, t0, 2**-30))]
            proc = _nums(gpu.get("proc_mem_bytes"))
            if any(v is not None for v in proc):
                lines.append(("this process", "#DD8452", *_xy(gt, proc, t0, 2**-30)))
            panels.append(("GPU memory GiB", lines))
    if host and ht:
        cpu = host.get("cpu_pct")
        lines = []
        if isinstance(cpu, list):
            lines.append(("host, mean of cores", "#55A868",
                          *_xy(ht, _host_cpu_mean(cpu), t0)))
        proc_cpu = _nums(host.get("proc_cpu_pct"))
        if any(v is not None for v in proc_cpu):
            lines.append(("training process (% of one core)", "#4C72B0", *_xy(ht, proc_cpu, t0)))
        wk = _nums(host.get("workers_cpu_pct"))
        if any(v is not None for v in wk):
            lines.append(("DataLoader workers (% of one core)", "#C44E52", *_xy(ht, wk, t0)))
        if lines:
            panels.append(("CPU %", lines))
    if not panels:
        return None
    marks: dict[str, Any] = samples["marks"] if isinstance(samples.get("marks"), dict) else {}
    lo, hi = as_number(marks.get("active_start")), as_number(marks.get("active_end"))
    with _style():
        fig = Figure(figsize=(9, 1.2 + 1.7 * len(panels)), layout="constrained")
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, (ylabel, lines) in zip(axes, panels, strict=True):
            for label, color, xs, ys in lines:
                ax.plot(xs, ys, color=color, label=label, marker="." if len(xs) < 40 else None)
            if lo is not None and hi is not None:
                ax.axvspan(lo - t0, hi - t0, color="#F2C14E", alpha=0.2, lw=0,
                           label="profiled window" if ax is axes[0] else None)
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        axes[-1].set_xlabel("seconds since sampling started")
    return fig


def _rank_label(r: RankResult, i: int) -> str:
    return f"rank {r.rank}" if r.rank is not None else f"trace {i + 1}"


def ranks_figure(ranks: Sequence[RankResult]) -> Figure | None:
    """Mean per-step breakdown of each rank side by side (only with two ranks or more)."""
    if len(ranks) < 2:
        return None
    order = sorted(range(len(ranks)), key=lambda i: (ranks[i].rank is None, ranks[i].rank or 0, i))
    means: dict[str, list[float]] = {}
    for key, _label, _color in BREAKDOWN:
        row = []
        for i in order:
            vals = [v for v in _nums(ranks[i].series.get(f"{key}_ms")) if v is not None]
            row.append(sum(vals) / len(vals) if vals else 0.0)
        means[key] = row
    if not any(v > 0 for row in means.values() for v in row):
        return None
    labels = [_rank_label(ranks[i], i) for i in order]
    with _style():
        fig = Figure(figsize=(9, 3.4), layout="constrained")
        ax = fig.add_subplot()
        x = list(range(len(order)))
        bottom = [0.0] * len(order)
        for key, label, color in BREAKDOWN:
            if not any(v > 0 for v in means[key]):
                continue
            ax.bar(x, means[key], bottom=bottom, color=color, label=label, width=0.7)
            bottom = [b + v for b, v in zip(bottom, means[key], strict=True)]
        ax.set_xticks(x, labels, rotation=0 if len(x) <= 8 else 90)
        ax.set_ylabel("ms per step (mean)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def autofix_figure(rows: Sequence[AutofixRow | tuple[str, float, float]] | None) -> Figure | None:
    """Before/after bars: median step time without and with each change autofix tried."""
    good = [AutofixRow(str(r[0]), float(r[1]), float(r[2])) for r in rows or ()
            if as_number(r[1]) is not None and as_number(r[2]) is not None]
    if not good:
        return None
    with _style():
        fig = Figure(figsize=(9, 0.9 + 0.55 * len(good)), layout="constrained")
        ax = fig.add_subplot()
        y = list(range(len(good)))[::-1]
        h = 0.38
        ax.barh([v + h / 2 for v in y], [r.before_ms for r in good], height=h,
                color="#B8B8B8", label="before")
        ax.barh([v - h / 2 for v in y], [r.after_ms for r in good], height=h,
                color="#4C72B0", label="after")
        for v, r in zip(y, good, strict=True):
            change = (r.after_ms - r.before_ms) / r.before_ms * 100 if r.before_ms else math.nan
            ax.text(max(r.before_ms, r.after_ms), v, f"  {r.after_ms:.1f} ms ({change:+.1f}%)",
                    va="center")
        ax.set_yticks(y, [r.label for r in good])
        ax.set_xlabel("median step time, ms")
        ax.set_xlim(0, max(max(r.before_ms, r.after_ms) for r in good) * 1.3)
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", frameon=False)
    return fig


def has_gpu_samples(samples: dict[str, Any] | None) -> bool:
    """The run's samples hold a GPU series with at least one time point."""
    series = samples.get("series") if isinstance(samples, dict) else None
    gpu = series.get("gpu") if isinstance(series, dict) else None
    return isinstance(gpu, dict) and any(t is not None for t in _nums(gpu.get("t")))


def plot_title(key: str, report: Analysis) -> str:
    """The title of plot ``key`` for this run: as PLOT_TITLES, but the samples plot of a
    run sampled without a GPU is titled for the host alone."""
    if key == "samples" and not has_gpu_samples(report.samples):
        return HOST_SAMPLES_TITLE
    return PLOT_TITLES[key]


def figures(report: Analysis, autofix: Sequence[AutofixRow | tuple[str, float, float]] | None = None
            ) -> dict[str, Figure]:
    """Every figure the report has data for, by name (keys of ``PLOT_TITLES``), in page order."""
    made = {
        "breakdown": breakdown_figure(report.series),
        "idle": idle_figure(report.metrics),
        "samples": samples_figure(report.samples),
        "ranks": ranks_figure(report.ranks),
        "autofix": autofix_figure(autofix),
    }
    return {k: f for k, f in made.items() if f is not None}


# ------------------------------------------------------------------------------ output
_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)


def to_svg(fig: Figure, *, salt: str = "plot") -> str:
    """The figure as an ``<svg>`` element to inline in HTML (no XML prolog, no doctype).

    ``salt`` makes the ids of clip paths unique per figure and the output reproducible.
    """
    buf = io.StringIO()
    with matplotlib.rc_context({**_RC, "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return _PROLOG.sub("", buf.getvalue(), count=1).strip()
