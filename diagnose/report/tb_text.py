"""The TensorBoard run's text: the findings and the notes as markdown, written beside the
scalars (:mod:`diagnose.report.tensorboard`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..result import step_time
from ..values import as_number
from .markup import gain_words
from .runkind import fit_not_evaluated, fit_notes

if TYPE_CHECKING:
    from ..result import Analysis

#: the category the trace copies give GPU-side ProfilerStep events (tensorboard.py's
#: adapt_trace), named in the notes
GPU_STEP_CAT = "gpu_user_annotation_step"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def findings_markdown(report: Analysis) -> str:
    """The findings as markdown: the run's step (the job's own where the clock timed it)
    and shares, a table, then each finding with its hints and fixes."""
    m = report.metrics
    lines = [f"**source**: {', '.join(f'`{s}`' for s in report.source)}", ""]
    facts = []
    shown = step_time(m)  # the job's own step where the clock timed it
    m = {**m, "step_time_median_ms": shown["median_ms"]}
    prof = "" if shown["measured"] == "without the profiler" else ", profiled"
    for key, label, fmt in (("step_time_median_ms", f"step time (median{prof})", "{:.1f} ms"),
                            ("share_dataloader", "DataLoader share of step time", "{:.1%}"),
                            ("gpu_busy_frac", "GPU busy", "{:.1%}"),
                            ("gpu_util_mean_pct", "GPU utilization (NVML)", "{:.0f}%"),
                            ("host_cpu_mean_pct", "host CPU", "{:.0f}%")):
        x = as_number(m.get(key))
        if x is not None:
            facts.append(f"{label} **{fmt.format(x)}**")
    if facts:
        lines += [" · ".join(facts), ""]
    if not report.findings:
        lines.append("No findings: nothing slows this run down that the rules know of.")
        return "\n".join(lines)
    lines += ["| severity | rule | category | finding |", "|---|---|---|---|"]
    for f in report.findings:
        lines.append(f"| {f.severity} | {f.rule} | {f.category} | {_md_escape(f.message)} |")
    for f in report.findings:
        lines += ["", f"### {f.rule} · {f.severity} · {f.category}: {f.title}", "", f.message]
        if f.ranks:
            lines += ["", f"ranks: {', '.join(map(str, f.ranks))}"]
        if f.hints:
            lines += [""] + [f"- {h}" for h in f.hints]
        gain = as_number(f.estimated_gain)
        if gain is not None:
            lines += ["", gain_words(gain, f.gain_bound).capitalize() + "."]
        for j in f.to_json()["fixes"]:  # the run's own code and the exact change's title
            how = "autofix can apply it" if j.get("auto") else "by hand"
            lines += ["", f"**Fix: {j.get('title', j['id'])}** ({how})"]
            code = j.get("code")
            if code:
                lines += ["", "```python", str(code).rstrip(), "```"]
    return "\n".join(lines)


def notes_markdown(report: Analysis, copies: Sequence[Any]) -> str:
    """What was not evaluated, the notes, and what each trace copy changed (``copies``:
    :class:`~diagnose.report.tensorboard.TraceCopy`)."""
    lines: list[str] = []
    if report.not_evaluated:
        lines += ["**Not evaluated**", ""]
        lines += [f"- {n.rule}: {n.reason}" for n in fit_not_evaluated(report)]
        lines.append("")
    notes = fit_notes(report)
    if notes:
        lines += ["**Notes**", ""] + [f"- {n}" for n in notes] + [""]
    if copies:
        lines += ["**Traces for the PyTorch Profiler tab** (adapted copies; originals untouched)", ""]
        for c in copies:
            what = []
            if c.dataloader_events:
                what.append(f"{c.dataloader_events} DataLoader events user_annotation -> cpu_op")
            if c.gpu_step_events:
                what.append(f"{c.gpu_step_events} GPU-side ProfilerStep events -> {GPU_STEP_CAT}")
            if c.wrapped:
                what.append("event list wrapped in traceEvents")
            lines.append(f"- `{c.path.name}` from `{c.source}`: "
                         + ("; ".join(what) if what else "copied unchanged"))
    return "\n".join(lines) if lines else "Nothing to note."
