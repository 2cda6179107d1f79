"""``torch-diagnose compare A B``: two runs side by side, and what changed.

A and B are anything ``analyze`` takes (trace files, folders, run folders). The
comparison leads with the step time ``analyze`` leads with (without the profiler when
both runs timed such steps, else as profiled), each run's per-step spread and an interval
for the change (:mod:`diagnose.report.stepstats`): "better" or "worse" only when the
interval excludes no change, else "within noise". Then the metrics that say most about
speed with their deltas, and the findings of A that are resolved in B, still there, or
new. The table speaks with the headline's voice: its step-time row is the headline's
figure with the headline's verdict, and the other step statistics (p90, spread) carry no
verdict of their own; every other metric is listed once, and where the step time is within
noise, the window's timed shares and times are too (counts keep their verdicts). ``--fail-on-regression PCT`` exits 1 when B's step time is more than PCT percent
above A's and the interval says B is slower (for CI).

Exit codes: 0 compared; 1 regression beyond --fail-on-regression; 2 bad input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..console import plain_text
from ..errors import DiagnoseError
from ..metrics import CATALOG
from ..metrics.context.cpu_holders import cpu_wait_holders
from ..metrics.idle import host_ahead
from ..result import step_time
from ..stepmodel.calibration import BUSY
from ..values import as_number
from .compare_findings import FindingChange, finding_changes, reason_text
from .stepstats import NOISE_FLOOR_PCT, StepDiff, clean, step_difference

if TYPE_CHECKING:
    from ..result import Analysis

SCHEMA_VERSION = 1

# (metric, which direction is better: "lower" | "higher" | None when neither is). The
# breakdown's share_dataloader is left out: dataloader_share is the same wait (the whole of
# it, where share_dataloader keeps only what no category before it claimed) and is the one
# the summary and the input rules quote.
KEY_METRICS: tuple[tuple[str, str | None], ...] = (
    ("step_time_median_ms", "lower"),
    ("step_time_p90_ms", "lower"),
    ("step_time_cv", "lower"),
    ("gpu_busy_frac", "higher"),
    ("dataloader_share", "lower"),
    ("dataloader_wait_ms_per_step", "lower"),
    ("share_kernel", None),
    ("share_memcpy", None),
    ("share_memset", None),
    ("share_communication", None),
    ("share_runtime", None),
    ("share_cpu_exec", None),
    ("share_other", None),
    ("idle_input_frac", "lower"),
    ("idle_sync_frac", "lower"),
    ("idle_launch_frac", "lower"),
    ("idle_other_frac", "lower"),
    ("sync_calls_per_step", "lower"),
    ("item_calls_per_step", "lower"),
    ("sync_ms_per_step", "lower"),
    ("memcpy_pageable_host_frac", "lower"),
    ("memcpy_pageable_host_ms_per_step", "lower"),
    ("memcpy_h2d_pageable_count", "lower"),
    ("memcpy_h2d_pinned_count", None),
    ("kernels_per_step", None),
    ("kernel_median_us", None),
    ("launch_api_frac", "lower"),
    ("gemm_fp32_frac", "lower"),
    ("comm_exposed_frac", "lower"),
    ("gpu_mem_peak_frac", None),
    ("step_count", None),
)
_SAME = 0.005  # changes below 0.5% (half a point for fractions) count as unchanged
#: a share of the step whose time is also compared: a smaller share is no gain where that
#: time grew (the step grew around it), nor a larger one a loss where it fell or held (the
#: step shrank around it): the share gets a verdict only where its time agrees
_SHARE_OF: dict[str, str] = {"dataloader_share": "dataloader_wait_ms_per_step",
                             "memcpy_pageable_host_frac": "memcpy_pageable_host_ms_per_step"}
#: the profiled window's timed shares and times (a few steps each): where the headline's
#: step time is within noise, their changes are too (one capture's window against
#: another's moved a loader's share by 20 points with the step unchanged); counts keep
#: their verdicts
_WINDOW_TIMED = frozenset({"gpu_busy_frac", "dataloader_share", "dataloader_wait_ms_per_step",
                           "idle_input_frac", "idle_sync_frac", "idle_launch_frac",
                           "idle_other_frac", "sync_ms_per_step", "memcpy_pageable_host_frac",
                           "memcpy_pageable_host_ms_per_step", "launch_api_frac",
                           "comm_exposed_frac"})
#: a window-timed share that moved this much (points) while the step stayed within noise
#: gets a line of its own: "within noise" alone reads as if the share had not moved
MOVED_PP = 0.10
#: step statistics the headline's interval does not speak for: figures, no verdict
_STEP_STATS = frozenset({"step_time_median_ms", "step_time_p90_ms", "step_time_cv",
                         "step_time_unprofiled_median_ms"})


@dataclass
class MetricDelta:
    """One metric of both runs. ``said``: the verdict given from outside (the headline's,
    for the step time it leads with); ``headline``: this row is the headline's figure."""

    name: str
    unit: str
    a: Any
    b: Any
    better: str | None
    said: str | None = None
    headline: bool = False
    # a share of the step that moved against its time: no verdict (see _SHARE_OF)
    step_moved: bool = False
    # the headline's step time is within noise (see _WINDOW_TIMED)
    step_same: bool = False

    @property
    def delta(self) -> float | None:
        if not (_isnum(self.a) and _isnum(self.b)):
            return None
        return float(self.b) - float(self.a)

    @property
    def change_pct(self) -> float | None:
        """Relative change in percent (None for fractions, which change in points)."""
        d = self.delta
        if d is None or self.unit == "fraction" or not self.a:
            return None
        return d / abs(float(self.a)) * 100.0

    @property
    def verdict(self) -> str | None:
        """``better``/``worse``/``same`` (a change under 0.5%); the headline's row: the
        headline's verdict (``within noise`` included); other step statistics: None."""
        if self.headline:
            return self.said
        d = self.delta
        if d is None or self.better is None or self.name in _STEP_STATS or self.step_moved:
            return None
        size = abs(d) if self.unit == "fraction" else (
            abs(d) / abs(float(self.a)) if self.a else abs(d))
        if size < _SAME:
            return "same"
        if self.step_same and self.name in _WINDOW_TIMED:
            return "within noise"
        return "better" if (d < 0) == (self.better == "lower") else "worse"

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "unit": self.unit, "a": self.a, "b": self.b,
               "delta": _round(self.delta), "change_pct": _round(self.change_pct, 2),
               "better": self.better, "verdict": self.verdict}
        if self.headline:
            out["headline"] = True
        return out


@dataclass
class StepComparison:
    """The headline step time of both runs, measured the same way, and its change."""

    measured: str  # "without the profiler" | "as profiled"
    median_a: float | None
    median_b: float | None
    diff: StepDiff | None  # None: a run has no per-step times
    note: str | None = None  # why "as profiled" when one run had unprofiled steps
    # the runs' batch sizes where they differ: the change, its interval and its verdict
    # are then per sample (the medians stay per step)
    per_sample: tuple[float, float] | None = None

    @property
    def verdict(self) -> str | None:
        return self.diff.verdict if self.diff is not None else None

    @property
    def sample_ms(self) -> tuple[float, float] | None:
        """Each run's median step over its batch size (ms a sample), where they differ."""
        a, b, per = self.median_a, self.median_b, self.per_sample
        if per is None or a is None or b is None:
            return None
        return a / per[0], b / per[1]

    @property
    def change_pct(self) -> float | None:
        a, b = self.sample_ms or (self.median_a, self.median_b)
        return (b / a - 1) * 100 if a is not None and b is not None and a else None

    def spread(self, d: Any) -> str:
        """One run's median and middle half, per step (or per sample where the verdict is)."""
        if self.per_sample is None:
            return f"median {d.median:,.1f} ms, middle half {d.p25:,.1f}-{d.p75:,.1f} ms"
        return (f"median {d.median:,.4g} ms a sample, middle half {d.p25:,.4g}-{d.p75:,.4g} "
                "ms")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"measured": self.measured, "note": self.note,
                               "a_median_ms": self.median_a, "b_median_ms": self.median_b,
                               "change_pct": _round(self.change_pct, 2),
                               "verdict": self.verdict}
        if self.diff is not None:
            d = self.diff.to_json()
            out.update(a=d["a"], b=d["b"], interval_pct=d["interval_pct"],
                       confidence=d["confidence"], noise_floor_pct=d["noise_floor_pct"],
                       shift_pct=d["shift_pct"], method=d["method"],
                       mean_change_pct=d["mean_change_pct"],
                       mean_interval_pct=d["mean_interval_pct"], by_mean=d["by_mean"],
                       tells_apart_pct=_round(self.least_pct, 2))
        if (per := self.sample_ms) is not None and self.per_sample is not None:
            out.update(per="sample", batch_sizes=list(self.per_sample),
                       a_ms_per_sample=_round(per[0]), b_ms_per_sample=_round(per[1]))
        return out

    @property
    def least_pct(self) -> float | None:
        """The smallest change (percent) one capture each can tell apart: the noise floor
        plus the interval's half-width. None without an interval."""
        d = self.diff
        if d is None or d.lo_pct is None or d.hi_pct is None:
            return None
        return d.floor_pct + (d.hi_pct - d.lo_pct) / 2

    def resolution(self) -> str | None:
        """Where the verdict is ``within noise``: the smallest change one capture each can
        tell apart (the noise floor plus the interval's half-width), and how to see a
        smaller one. None for other verdicts or without an interval."""
        least, d = self.least_pct, self.diff
        if self.verdict != "within noise" or least is None or d is None:
            return None
        return (f"one capture each tells apart only a change beyond about ±{least:.0f}% "
                f"(that ±{d.floor_pct:g}%, more on a busy host, plus these steps' spread); "
                "to measure a smaller one, "
                "such as a fix predicted under 1.1x, time A and B in turn several times, "
                "as `torch-diagnose autofix` does")

    def line(self) -> str:
        """``step time without the profiler: 59.5 ms -> 61.0 ms (+2.5%; 95% interval ...):
        within noise``."""
        a, b = self.median_a, self.median_b
        if not (_isnum(a) and _isnum(b)):
            return f"step time {self.measured}: not in both runs"
        head = f"step time {self.measured}: {a:,.1f} ms -> {b:,.1f} ms"
        if (per := self.sample_ms) is not None:
            head = f"time per sample {self.measured}: {per[0]:,.4g} ms -> {per[1]:,.4g} ms"
        pct = self.change_pct
        if self.diff is None:
            return head + (f" ({pct:+.1f}%)" if pct is not None else "") + \
                ": no per-step times, no interval"
        d = self.diff
        said = d.verdict if d.lo_pct is not None else "cannot tell"
        point = f"{pct:+.1f}%" if pct is not None else "a median of 0 ms"
        if pct is not None and d.lo_pct is not None and d.hi_pct is not None and not (
                d.lo_pct <= pct <= d.hi_pct):
            # the medians' ratio can fall outside the interval of the typical step's shift
            # (steps of two or more paces): the interval's own estimate beside it
            point = f"{pct:+.1f}% between the medians, the typical step {d.shift_pct:+.1f}%"
        return f"{head} ({point}; {d.interval_text()}): {said}{d.why()}"


def _series(r: Analysis, name: str) -> list[float]:
    if r.series.get(name):
        return clean(r.series[name])
    return clean(r.ranks[0].series.get(name)) if len(r.ranks) >= 1 else []


def compare_step(a: Analysis, b: Analysis, *,
                 noise_floor_pct: float = NOISE_FLOOR_PCT) -> StepComparison:
    """The step time ``analyze`` leads with, for both runs measured the same way."""
    sa, sb = step_time(a.metrics), step_time(b.metrics)
    un_a, un_b = _series(a, "step_unprofiled_ms"), _series(b, "step_unprofiled_ms")
    note = None
    if sa["measured"] == sb["measured"] == "without the profiler" and un_a and un_b:
        measured, ma, mb, xa, xb = ("without the profiler", sa["median_ms"], sb["median_ms"],
                                    un_a, un_b)
    else:
        measured, ma, mb = "as profiled", sa["profiled_median_ms"], sb["profiled_median_ms"]
        xa, xb = _series(a, "step_ms"), _series(b, "step_ms")
        if "without the profiler" in (sa["measured"], sb["measured"]):
            which = "A" if sa["measured"] != "without the profiler" else "B"
            note = (f"run {which} has no steps timed without the profiler (e.g. a saved "
                    "trace): both are compared as profiled")
    ahead = [(which, host_ahead(r.metrics)) for which, r in (("A", a), ("B", b))]
    said = [f"run {which}'s host ran ahead of its GPU ({pace:.2f} ms of GPU work a step in "
            f"{host:.2f} ms host steps)" for which, (pace, host) in
            ((w, x) for w, x in ahead if x is not None)]
    if said and measured == "as profiled":
        note = "; ".join([*([note] if note else []), *said]) + (
            ": the profiled steps are the host's, not the job's pace")
    models = _other_model(a.metrics, b.metrics)
    if models:
        note = "; ".join([*([note] if note else []), models])
    batches = _other_batch(a.metrics, b.metrics, ma, mb)
    if batches:
        note = "; ".join([*([note] if note else []), batches[0]])
    caveats = [c for c in (_caveat("A", a.metrics), _caveat("B", b.metrics),
                           _host_pace(a.metrics, b.metrics, noise_floor_pct)) if c]
    if caveats:
        host = any(busy for _, busy in caveats)
        note = "; ".join([*([note] if note else []), *(c for c, _ in caveats)]) + (
            ": compare again on a quieter host" if host else
            ": the spread is the run's own, which a quieter host leaves as it is; compare more "
            "steps of each")
    per = batches[1] if batches else None
    if per is not None:  # the interval and the verdict per sample
        xa, xb = [x / per[0] for x in xa], [x / per[1] for x in xb]
    diff = step_difference(xa, xb, floor_pct=noise_floor_pct) if xa and xb else None
    return StepComparison(measured, ma, mb, diff, note, per)


def _other_model(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Where the two runs' models differ in their parameter count: the step times then
    compare two models (another job, or a model changed on purpose), not a change of
    settings. None where they match or either is not known."""
    pa, pb = a.get("model_param_count"), b.get("model_param_count")
    if not (isinstance(pa, int | float) and isinstance(pb, int | float)) or pa == pb:
        return None
    return (f"the runs' models differ (A {int(pa):,} parameters, B {int(pb):,}): the step "
            "times compare two models, not a change of settings")


def _other_batch(a: dict[str, Any], b: dict[str, Any], ma: Any, mb: Any
                 ) -> tuple[str, tuple[float, float]] | None:
    """Where the two runs' DataLoaders batch a different number of samples: a step does
    other work, so the steps are compared per sample (``ma``/``mb``: the medians per
    step): the words, and the batch sizes. None where they match or either is not known."""
    ba, bb = as_number(a.get("dataloader_batch_size")), as_number(b.get("dataloader_batch_size"))
    if ba is None or bb is None or ba == bb or ba <= 0 or bb <= 0:
        return None
    per = (f" ({ma / ba:.3f} against {mb / bb:.3f} ms a sample; {ma:,.1f} against "
           f"{mb:,.1f} ms a step)" if _isnum(ma) and _isnum(mb) else "")
    return (f"the runs' batches differ (A {int(ba):,} samples, B {int(bb):,}): a step does "
            f"other work, so the steps are compared per sample{per}"), (ba, bb)


def _host_pace(a: dict[str, Any], b: dict[str, Any], floor_pct: float
               ) -> tuple[str, bool] | None:
    """Where the host's own pace moved between the runs (``host_pace_*``: a fixed loop's
    rounds alone as each capture began): every round of one run slower than every round of
    the other, their medians beyond the noise floor. The step times then moved with the
    host too: said, as a busy host's doing. None where it held or is not known."""
    got = [as_number(m.get(f"host_pace{k}_ms")) for m in (a, b) for k in ("", "_min", "_max")]
    if any(x is None or x <= 0 for x in got):
        return None
    pa, lo_a, hi_a, pb, lo_b, hi_b = (float(x or 0.0) for x in got)
    apart = lo_a > hi_b or lo_b > hi_a
    if not apart or abs(math.log(pb / pa)) <= math.log1p(floor_pct / 100):
        return None
    return (f"the host's own pace moved: a fixed Python loop, timed alone as each capture "
            f"began, took {pa:.2f} ms in A and {pb:.2f} ms in B ({pb / pa - 1:+.0%}), so the "
            "step times moved with the host as well as with the job", True)


def _caveat(which: str, m: dict[str, Any]) -> tuple[str, bool] | None:
    """Why run ``which``'s own report doubts its step time, and whether a busy machine is
    to blame: its clock marked it unreliable (the machine's doing unless the training
    thread waited for a CPU its own processes held: its workers, its thread pools), or
    other processes held the CPU the training thread waited for in BUSY or more of its
    timed steps. None: no doubt."""
    said, host = [], False
    busy = m.get("step_cpu_wait_unprofiled_share")
    waited = isinstance(busy, float) and busy >= BUSY
    elsewhere, holders = cpu_wait_holders(m) if waited else (True, "")
    if m.get("step_time_unprofiled_reliable") is False:
        if waited and not elsewhere:
            said.append(f"marks its step time unreliable: its training thread waited "
                        f"for a CPU {holders}")
        else:
            said.append("marks its step time unreliable")
            host = True
    if waited and elsewhere:
        said.append(f"waited for a CPU other processes held in {busy:.0%} of its steps")
        host = True
    return (f"run {which}'s own report {' and '.join(said)}", host) if said else None


@dataclass
class Comparison:
    a: Analysis
    b: Analysis
    metrics: list[MetricDelta]
    findings: list[FindingChange]
    step: StepComparison | None = field(default=None)

    def step_change_pct(self) -> float | None:
        """The headline's change of the step time (percent)."""
        if self.step is not None and self.step.change_pct is not None:
            return self.step.change_pct
        return next((m.change_pct for m in self.metrics if m.name == "step_time_median_ms"), None)

    def by_status(self, status: str) -> list[FindingChange]:
        return [f for f in self.findings if f.status == status]

    def notes(self) -> list[str]:
        """A line for each share of the window that moved :data:`MOVED_PP` or more while
        the headline's step time stayed within noise: the time did not leave the step."""
        out = []
        for m in self.metrics:
            d = m.delta
            if (m.verdict == "within noise" and not m.headline and m.unit == "fraction"
                    and d is not None and abs(d) >= MOVED_PP):
                out.append(
                    f"{m.name} {'fell' if d < 0 else 'rose'} {float(m.a):.1%} -> "
                    f"{float(m.b):.1%} while the step time stayed within noise: that time "
                    "moved to other work within the step (or the two windows caught "
                    "different steps), it did not leave the step; the step time is the "
                    "verdict")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "a": {"source": self.a.source, "ranks": len(self.a.ranks),
                  "notes": self.a.source_notes()},
            "b": {"source": self.b.source, "ranks": len(self.b.ranks),
                  "notes": self.b.source_notes()},
            "metrics": [m.to_json() for m in self.metrics],
            "findings": {s: [f.to_json() for f in self.by_status(s)]
                         for s in ("resolved", "still", "new", "not_evaluated")},
            "step_time_median_change_pct": _round(self.step_change_pct(), 2),
            "step_time": self.step.to_json() if self.step is not None else None,
            "notes": self.notes(),
        }


def _isnum(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _round(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(x, nd)


def compare_reports(a: Analysis, b: Analysis, *,
                    noise_floor_pct: float = NOISE_FLOOR_PCT) -> Comparison:
    """What changed from run A to run B: the headline step time, key metrics and findings
    (``noise_floor_pct``: a step-time change within it either way is "within noise")."""
    step = compare_step(a, b, noise_floor_pct=noise_floor_pct)
    metrics = [MetricDelta(name, CATALOG.get(name, ("", ""))[0], a.metrics.get(name),
                           b.metrics.get(name), better)
               for name, better in KEY_METRICS
               if a.metrics.get(name) is not None or b.metrics.get(name) is not None]
    metrics = _with_headline(metrics, step)
    if step.verdict == "within noise":
        for m in metrics:
            m.step_same = True
    by_name = {m.name: m for m in metrics}
    for m in metrics:
        time = by_name.get(_SHARE_OF.get(m.name, ""))
        if (m.verdict in ("better", "worse") and time is not None
                and time.verdict in ("better", "worse", "same") and time.verdict != m.verdict):
            m.step_moved = True  # the share moved only because the step moved around it
    changes = finding_changes(a, b)
    return Comparison(a, b, metrics, changes, step)


def _with_headline(metrics: list[MetricDelta], step: StepComparison) -> list[MetricDelta]:
    """The rows with the headline's step time first: the metric it reads (the median
    without the profiler, else as profiled), its figures and its verdict."""
    if not (_isnum(step.median_a) and _isnum(step.median_b)):
        return metrics
    name = ("step_time_unprofiled_median_ms" if step.measured == "without the profiler"
            else "step_time_median_ms")
    head = MetricDelta(name, "ms", step.median_a, step.median_b, "lower",  # per sample:
                       said=step.verdict if step.per_sample is None else None,  # no verdict
                       headline=True)
    return [head, *(m for m in metrics if m.name != name)]


# ------------------------------------------------------------------------------- text
def _fmt(m: MetricDelta, v: Any) -> str:
    from .markup import fmt

    return fmt(m.name, v)


def delta_text(m: MetricDelta) -> str:
    d = m.delta
    if d is None:
        return ""
    if m.unit == "fraction":
        return f"{d * 100:+.1f} pp"
    if d == 0:
        return "0"
    pct = m.change_pct
    unit = {"ms": " ms", "us": " µs"}.get(m.unit, "")
    mag = abs(d)
    head = f"{d:+,.0f}" if mag >= 100 else f"{d:+,.1f}" if mag >= 1 else f"{d:+.2g}"
    return head + unit + (f" ({pct:+.1f}%)" if pct is not None else "")


def steps_label(run: Analysis, n: int) -> str:
    """Whose ``n`` steps a run's spread is of: rank 0's where the run has many ranks (its
    headline step is the mean over the ranks' medians)."""
    if len(run.ranks) > 1:
        return f"{n} steps of rank 0; the step above is the mean of the {len(run.ranks)} ranks'"
    return f"{n} steps"


def renderables(c: Comparison) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column(overflow="fold")
    for who, run in (("A", c.a), ("B", c.b)):
        head.add_row(who, Text(", ".join(run.source)))
        for n in run.source_notes():  # which of its files were read
            head.add_row("", Text(n, style="dim"))
    if c.step is not None:
        style = {"better": "green", "worse": "red"}.get(c.step.verdict or "", "")
        head.add_row("step", Text(c.step.line(), style=style))
        for who, d in (("A", c.step.diff.a), ("B", c.step.diff.b)) if c.step.diff else ():
            run = c.a if who == "A" else c.b
            head.add_row("", Text(f"{who}: {c.step.spread(d)} ({steps_label(run, d.n)})",
                                  style="dim"))
        if c.step.note:
            head.add_row("", Text(c.step.note, style="dim"))
        if told := c.step.resolution():
            head.add_row("", Text(told, style="dim"))
    t = Table(title="Metrics", title_justify="left")
    t.add_column("metric", overflow="fold")
    t.add_column("A", justify="right", no_wrap=True)
    t.add_column("B", justify="right", no_wrap=True)
    t.add_column("Δ", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True)
    mstyle = {"better": "green", "worse": "red", "same": "dim", "within noise": "dim"}
    for m in c.metrics:
        t.add_row(m.name, _fmt(m, m.a), _fmt(m, m.b), delta_text(m),
                  Text(m.verdict or "", style=mstyle.get(m.verdict or "", "")))
    f = Table(title="Findings (A -> B)", title_justify="left")
    for col in ("status", "rule", "category", "A", "B"):
        f.add_column(col, no_wrap=True)
    f.add_column("finding (as B reports it; A where B has none)", ratio=1)
    sstyle = {"resolved": "green", "new": "red", "still": "yellow", "not_evaluated": "dim"}
    for ch in c.findings:
        what = ch.message_b or ch.message_a or ch.title
        if ch.reason:
            what += "\nB: " + reason_text(ch)
        f.add_row(Text(ch.status.replace("_", " "), style=sstyle[ch.status]), ch.rule,
                  ch.category, ch.severity_a or "-", ch.severity_b or "-", Text(what))
    out: list[Any] = [head, t, *(Text(n, style="dim") for n in c.notes())]
    if c.findings:
        out.append(f)
    else:
        out.append(Text("No findings in either run.", style="green"))
    counts = ", ".join(f"{len(c.by_status(s))} {s.replace('_', ' ')}"
                       for s in ("resolved", "still", "new", "not_evaluated") if c.by_status(s))
    if counts:
        out.append(Text(f"findings: {counts}"))
    return out


def render_text(c: Comparison, *, width: int = 110) -> str:
    import io

    from rich.console import Console, Group

    buf = io.StringIO()
    # force_jupyter=False: inside a notebook rich would display the output instead of writing it
    Console(file=buf, width=width, color_system=None, highlight=False,
            force_jupyter=False).print(Group(*renderables(c)))
    return plain_text(buf.getvalue())


def regression_line(c: Comparison, pct: float) -> tuple[bool, str]:
    """(regressed, the one line that says so) for --fail-on-regression PCT: B's headline
    step time more than PCT% above A's, and the interval says B is slower (not noise)."""
    st = c.step if c.step is not None else compare_step(c.a, c.b)
    change = st.change_pct
    if change is None:
        which = "A" if not _isnum(st.median_a) else "B"
        raise DiagnoseError(f"--fail-on-regression: run {which} has no median step time "
                            "(no profiled steps)")
    if st.diff is not None and st.diff.lo_pct is None and change > pct:
        raise DiagnoseError(
            f"--fail-on-regression: {st.line()}; too few steps to tell a regression from "
            "noise: capture 4 or more profiled steps in each run")
    if st.diff is not None and st.diff.by_mean:  # the verdict is the mean step's
        change = st.diff.verdict_change_pct
    noisy = st.diff is not None and st.verdict != "worse"
    worse = change > pct and not noisy
    if worse:
        verdict = f"regression: more than the allowed +{pct:g}%"
    elif change > pct:
        verdict = f"above +{pct:g}% but within noise: not a regression"
    else:
        verdict = f"within the allowed +{pct:g}%"
    return worse, f"{st.line()}; {verdict}" + (f" ({st.note})" if st.note else "")
