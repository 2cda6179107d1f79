"""The HTML report: one self-contained file that works offline.

Summary, findings with their evidence and the fix as code, plots (inline SVG drawn by
matplotlib, :mod:`diagnose.report.plots`), the per-rank comparison, autofix before/after,
the heaviest GPU kernels, and every metric. No JavaScript, no external URL; a
Content-Security-Policy forbids scripts and remote loads. Pages are built with
:func:`~diagnose.report.markup.el`, which escapes every ``str`` it is given (see
:mod:`diagnose.report.markup`), so no template engine is needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fixes import FIXES
from ..fixes.findings import offered
from ..metrics import CATALOG
from ..rules.engine import SEVERITIES, group_not_evaluated, severity_rank
from ..stepmodel.step import step_model_line
from ..values import interval_end
from .markup import CSS, Child, Markup, _pct, el, fmt, gain_words, raw_svg, text, unit_beside
from .memory_text import (
    WHAT_IF_NUMERIC,
    WHAT_IF_TITLE,
    memory_lines,
    shows_memory,
    what_if_table,
)
from .plots import BREAKDOWN, AutofixRow, autofix_rows, figures, plot_title, to_svg
from .runkind import cpu_run, device_line, fit_not_evaluated, fit_notes, traced
from .text import fix_line, fix_title, no_findings, predicts, step_lines, unprofiled_dl

if TYPE_CHECKING:
    from ..result import Analysis, RankResult, Runs
    from ..rules.engine import Finding

AutofixRows = Sequence[AutofixRow | tuple[str, float, float]]


def kv(rows: Iterable[tuple[str, Child] | None]) -> Markup:
    """A two-column table of (label, value) rows; None rows are left out."""
    return el("table", el("tbody", [el("tr", el("th", k, scope="row"), el("td", v))
                                     for r in rows if r is not None for k, v in [r]]),
              class_="kv")


def _counts(report: Analysis) -> Markup:
    if not report.findings:
        return el("span", "no findings", class_="badge ok")
    out = []
    for sev in reversed(SEVERITIES):
        n = sum(1 for f in report.findings if f.severity == sev)
        if n:
            out.append(el("span", f"{n} {sev}", class_=f"badge {sev}"))
    return text(*[text(b, " ") for b in out])


def summary_facts(m: dict[str, Any], n_ranks: int, predicted: bool = True
                  ) -> list[tuple[str, str]]:
    """The summary's rows between source and findings, as (label, text): also the TensorBoard
    tab's (:mod:`diagnose.report.tb_plugin`), which reads the metrics back from JSON.
    ``predicted``: a fix carries a prediction (:func:`~.text.step_lines`)."""
    head, window = step_lines(m, predicted)
    breakdown = [f"{label} {m[f'share_{key}']:.0%}" for key, label, _ in BREAKDOWN
                 if isinstance(m.get(f"share_{key}"), int | float) and m[f"share_{key}"] >= 0.005]
    device = device_line(m)
    rows: list[tuple[str, str] | None] = [
        ("ranks", f"{n_ranks} (figures below: the mean over ranks)") if n_ranks > 1 else None,
        ("device", str(device)) if device else None,
        ("step time", head),
        ("profiled", window) if window else None,
        ("GPU busy", _pct(m.get("gpu_busy_frac"))) if m.get("gpu_busy_frac") is not None else None,
        ("breakdown", ", ".join(breakdown) + " (of the profiled window)") if breakdown else None,
        ("DataLoader", f"{_pct(m.get('dataloader_share'))} of the profiled window"
         + unprofiled_dl(m)) if m.get("dataloader_share") is not None else None,
    ]
    return [r for r in rows if r is not None]


def _summary(report: Analysis) -> Markup:
    rows: list[tuple[str, Child]] = [
        ("source", el("code", ", ".join(report.source))),
        *summary_facts(report.metrics, len(report.ranks), predicts(report)),
        ("step model", step_model_line(report.step_model, report.step_model_why)),
        ("findings", _counts(report)),
    ]
    return el("section", el("h2", "Summary"), kv(rows), id="summary")


def _evidence(f: Finding) -> Markup:
    """The finding's evidence: each metric it quotes with a value (None is no evidence)."""
    rows = [el("tr", el("td", el("code", k)), el("td", fmt(k, v), class_="num"),
               el("td", CATALOG.get(k, ("", ""))[1], class_="muted"))
            for k, v in f.evidence.items() if v is not None]
    return el("table", el("thead", el("tr", el("th", "metric"), el("th", "value", class_="num"),
                                       el("th", "meaning"))),
              el("tbody", rows), class_="evidence")


def _fixes(f: Finding, trainer: bool = False) -> Markup | None:
    """The finding's fixes, those the text offers first (:func:`offered`: none predicted
    slower, none that does not apply), the rest after them, marked "not offered". Under a
    trainer (``trainer``) no fix is badged for autofix: the trainer builds the loader and
    the optimizer autofix would change, and the fixes are written as its arguments."""
    shown = offered(f)
    known = [FIXES[x] for x in [*shown, *(x for x in f.fixes if x not in shown)]
             if x in FIXES]
    if not known:
        return None
    items = []
    for i, fix in enumerate(known):
        label = ("not offered: " if fix.id not in shown else
                 "try first: " if i == 0 and len(known) > 1 else "")
        items.append(el("details",
                        el("summary", label, fix_title(f, fix.id), " ",
                           el("span", fix_line(f, fix.id), class_="muted")
                           if fix_line(f, fix.id) else None, " ",
                           el("span", "autofix can apply", class_="badge auto")
                           if fix.auto and not trainer else None),
                        el("pre", el("code", f.fix_code.get(fix.id, fix.code),
                                      class_="language-python")),
                        open=i == 0 and fix.id in shown, class_="fix", data_fix=fix.id))
    return text(el("h4", "Fix" if len(known) == 1 else f"Fixes ({len(known)})"), items)


def _finding(f: Finding, trainer: bool = False) -> Markup:
    gain = (el("span", gain_words(f.estimated_gain, f.gain_bound), class_="gain")
            if f.estimated_gain is not None else None)
    return el(
        "article",
        el("header", el("span", f.severity, class_=f"badge {f.severity}"),
           el("span", f.rule, class_="rule"), el("span", f.category, class_="cat"),
           el("h3", f.title), gain),
        el("p", f.message, class_="message"),
        el("ul", [el("li", h) for h in f.hints], class_="hints") if f.hints else None,
        el("p", "ranks: ", ", ".join(map(str, f.ranks)), class_="muted") if f.ranks else None,
        el("h4", "Evidence"), _evidence(f),
        _fixes(f, trainer),
        el("p", el("code", f"torch-diagnose rules {f.rule}"),
           " explains what the rule detects, why it costs time and its known false positives.",
           class_="muted"),
        class_=f"finding {f.severity}", id=f"finding-{f.rule}", data_rule=f.rule,
    )


def findings_section(report: Analysis) -> Markup:
    if not report.findings:
        body: Child = el("p", no_findings(report.metrics), class_="message")
    else:
        trainer = report.metrics.get("run_trainer") in ("transformers", "lightning")
        body = [_finding(f, trainer) for f in sorted(report.findings,
                                                     key=lambda f: -severity_rank(f.severity))]
    return el("section", el("h2", f"Findings ({len(report.findings)})"), body, id="findings")


CAPTIONS = {
    "breakdown": "each step split by category (a category claims only time no category before"
                 " it in the legend claimed); the black mark is the step time",
    "idle": "share of the profiled window the GPU was busy, and what it waited for while idle",
    "samples": "from the samplers of the run; the shaded band is the profiled window",
    "ranks": "mean time per step of each rank, by category (medians: the Ranks table)",
    "autofix": "median step time of the baseline and with each change autofix tried",
}


def _plots(report: Analysis, autofix: AutofixRows | None
           ) -> tuple[Markup | None, list[str]]:
    figs = figures(report, autofix)
    out = []
    for key, fig in figs.items():
        title = plot_title(key, report)
        out.append(el("figure", el("figcaption", title, " ",
                                   el("span", "— ", CAPTIONS[key])),
                      raw_svg(to_svg(fig, salt=key)),
                      class_="plot", id=f"plot-{key}", data_plot=key, role="img",
                      aria_label=title))
    # what is missing, where the run could have had it: a CPU run has no GPU to plot, and
    # a run without a trace says so once (its notes), not per plot
    missing = []
    cpu = cpu_run(report.metrics)
    unavailable = (report.samples or {}).get("unavailable") or {}
    if "samples" not in figs:
        missing.append(f"{'host' if cpu else 'GPU/host'} over time: no samples (saved traces "
                       "have none; a capture with diagnose(model, loader) records them)")
    elif isinstance(unavailable, dict) and unavailable.get("gpu") and not cpu:
        missing.append(f"GPU over time: not sampled ({unavailable['gpu']})")
    if ("idle" not in figs and report.metrics.get("has_gpu") is False and not cpu
            and traced(report)):
        missing.append("GPU busy/idle: the trace has no GPU activity")
    if not out:
        return None, list(figs)
    body = [el("h2", "Plots"), out]
    if missing:
        body.append(el("ul", [el("li", x) for x in missing], class_="muted"))
    return el("section", body, id="plots"), list(figs)


def _ranks_table(ranks: Sequence[RankResult]) -> Markup | None:
    if len(ranks) < 2:
        return None
    cols = ("step_time_median_ms", "step_time_p90_ms", "gpu_busy_frac", "dataloader_share",
            "comm_exposed_frac", "idle_input_frac")
    heads = ("median step", "p90 step", "GPU busy", "DataLoader", "comm exposed", "idle: input")
    medians = [r.metrics.get("step_time_median_ms") for r in ranks]
    known = [m for m in medians if isinstance(m, int | float)]
    slowest = max(known) if len(known) > 1 else None
    rows = []
    for r in sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0)):
        med = r.metrics.get("step_time_median_ms")
        rows.append(el("tr", el("td", "n/a" if r.rank is None else str(r.rank)),
                       el("td", el("code", Path(r.path).name)),
                       [el("td", fmt(c, r.metrics.get(c)), class_="num") for c in cols],
                       el("td", "slowest" if slowest is not None and med == slowest else "",
                          class_="worse")))
    return el("section", el("h2", f"Ranks ({len(ranks)})"),
              el("table", el("thead", el("tr", el("th", "rank"), el("th", "trace"),
                                         [el("th", h, class_="num") for h in heads], el("th", ""))),
                 el("tbody", rows)), id="ranks")


def autofix_cells(r: AutofixRow | Sequence[Any]) -> tuple[str, str, str, str, str, str, str]:
    """One autofix row as shown: label, before, after, change, measured speedup [CI], the
    step model's predicted speedup [range], and its class (better, worse or empty); also
    the TensorBoard tab's. Rows of three (label, before, after) have no speedup or
    prediction; rows of seven, a prediction without its range."""
    label, before, after = str(r[0]), float(r[1]), float(r[2])
    extra = [None if x is None else float(x) for x in (*r[3:9], *[None] * 6)[:6]]
    ratio, lo, hi, predicted, p_lo, p_hi = extra
    change = (after - before) / before if before else None
    cls = "" if change is None else ("better" if change < 0 else "worse")
    measured = "" if ratio is None else f"{ratio:.2f}x" + (
        "" if lo is None or hi is None else f" [{interval_end(lo)}, {interval_end(hi)}]")
    return (label, fmt("step_time_median_ms", before), fmt("step_time_median_ms", after),
            "n/a" if change is None else f"{change:+.1%}", measured,
            "" if predicted is None else f"{predicted:.2f}x" + (
                "" if p_lo is None or p_hi is None
                else f" [{interval_end(p_lo)}, {interval_end(p_hi)}]"), cls)


def _autofix_table(rows: AutofixRows | None) -> Markup | None:
    if not rows:
        return None
    body = []
    for r in rows:
        label, before, after, change, measured, predicted, cls = autofix_cells(r)
        body.append(el("tr", el("td", label), el("td", before, class_="num"),
                       el("td", after, class_="num"),
                       el("td", change, class_=f"num {cls}" if cls else "num"),
                       el("td", measured, class_="num"), el("td", predicted, class_="num")))
    return el("section", el("h2", "Autofix"),
              el("table", el("thead", el("tr", el("th", "change tried"),
                                         el("th", "before (median step)", class_="num"),
                                         el("th", "after", class_="num"),
                                         el("th", "change", class_="num"),
                                         el("th", "speedup [CI]", class_="num"),
                                         el("th", "predicted [range]", class_="num"))),
                 el("tbody", body)), id="autofix")


def _kernels(report: Analysis) -> Markup | None:
    if not report.ranks:
        return None
    first = min(report.ranks, key=lambda r: (r.rank is None, r.rank or 0))
    table = first.tables.get("top_kernels")
    if not table or not table.get("rows"):
        return None
    rows, distinct = table["rows"], table["distinct"]
    multi = len(report.ranks) > 1 and first.rank is not None
    where = f"rank {first.rank}" if multi else "the trace"
    return el(
        "section", el("h2", "Top GPU kernels"),
        el("p", f"The {len(rows)} of {distinct} distinct kernels with the most total time in ",
           where, " (", el("code", Path(first.path).name), "), whole trace.", class_="muted"),
        el("table",
           el("thead", el("tr", el("th", "kernel"), el("th", "calls", class_="num"),
                          el("th", "total", class_="num"),
                          el("th", "of kernel time", class_="num"))),
           el("tbody", [el("tr", el("td", el("code", k["name"])),
                           el("td", f"{k['calls']:,}", class_="num"),
                           el("td", f"{k['total_ms']:,.1f} ms", class_="num"),
                           el("td", f"{k['share']:.1%}", class_="num")) for k in rows])),
        id="kernels")


def _not_evaluated(report: Analysis) -> Markup | None:
    if not report.not_evaluated:
        return None
    items = []
    for g in group_not_evaluated(fit_not_evaluated(report)):
        rules = [el("li", el("span", rule, class_="rule"), ": ", reason)
                 for rule, reason in g["reasons"].items()]
        if g["count"] == 1:
            items.append(rules[0])
            continue
        items.append(el("li", el("details", el("summary", f"{g['count']} rules: {g['cause']}"),
                                 el("ul", rules))))
    return el("section", el("h2", f"Not evaluated ({len(report.not_evaluated)})"),
              el("p", "Rules whose metrics this run cannot give: neither passed nor failed; "
                 "grouped by cause.", class_="muted"),
              el("ul", items), id="not-evaluated")


def _notes(report: Analysis) -> Markup | None:
    notes = fit_notes(report)
    if not notes:
        return None
    return el("section", el("h2", "Notes"), el("ul", [el("li", n) for n in notes]),
              id="notes")


def _memory(report: Analysis) -> Markup | None:
    """The memory section, as the console shows it (:func:`~.memory_text.memory_lines`,
    :func:`~.memory_text.what_if_table`): a tracked step's, or a trace's beside a memory finding."""
    mem = shows_memory(report)
    if mem is None:
        return None
    lines = [el("li", line, class_="muted" if kind == "modules" else None)
             for line, kind in memory_lines(mem)]
    cols, rows = what_if_table(mem)
    right = WHAT_IF_NUMERIC
    table = el("table", el("caption", WHAT_IF_TITLE),
               el("thead", el("tr", [el("th", c, class_="num" if c in right else None)
                                     for c in cols])),
               el("tbody", [el("tr", [el("td", v, class_="num" if c in right else None)
                                      for c, v in zip(cols, row, strict=True)])
                            for row in rows])) if rows else None
    return el("section", el("h2", "Memory"), el("ul", lines), table, id="memory")


def _metrics(report: Analysis) -> Markup:
    rows = [el("tr", el("td", el("code", k)), el("td", fmt(k, v), class_="num"),
               el("td", unit_beside(k)), el("td", CATALOG.get(k, ("", ""))[1],
                                                         class_="muted"))
            for k, v in report.metrics.items()]
    return el("section", el("h2", "Metrics"),
              el("details", el("summary", f"All {len(rows)} metrics (n/a: the run cannot give it)"),
                 el("table", el("thead", el("tr", el("th", "name"), el("th", "value", class_="num"),
                                            el("th", "unit"), el("th", "meaning"))),
                    el("tbody", rows))), id="metrics")


# ------------------------------------------------------------------------------- page
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
        "form-action 'none'")


def render_html(
    report: Analysis,
    *,
    autofix: Any = None,
    kernels: bool = True,
    title: str | None = None,
) -> str:
    """The report as one self-contained HTML page (a str).

    ``autofix``: what ``diagnose.autofix.autofix`` returned, or ``(label, before_ms,
    after_ms)`` rows (median step time without and with each change tried), for the
    before/after chart and table. ``kernels``: include the first rank's top-kernels
    table (computed with its metrics).
    """
    if autofix is not None and hasattr(autofix, "decisions"):
        autofix = autofix_rows(autofix)

    name = title or ", ".join(Path(s).name for s in report.source) or "report"
    sections = _sections(report, autofix, kernels)
    nav = el("nav", [el("a", t, href=f"#{sid}") for sid, t, s in sections if s is not None])
    return page(name, ", ".join(report.source), nav, [s for _, _, s in sections])


def _sections(report: Analysis, autofix: Any, kernels: bool
              ) -> list[tuple[str, str, Markup | None]]:
    plots, _ = _plots(report, autofix)
    return [
        ("summary", "Summary", _summary(report)),
        ("findings", "Findings", findings_section(report)),
        ("memory", "Memory", _memory(report)),
        ("plots", "Plots", plots),
        ("ranks", "Ranks", _ranks_table(report.ranks)),
        ("autofix", "Autofix", _autofix_table(autofix)),
        ("kernels", "Kernels", _kernels(report) if kernels else None),
        ("not-evaluated", "Not evaluated", _not_evaluated(report)),
        ("notes", "Notes", _notes(report)),
        ("metrics", "Metrics", _metrics(report)),
    ]


def page(name: str, sub: str, nav: Markup, body: Child, *,
         heading: str = "torch-diagnose report",
         source: str = "the analysis of the source above") -> str:
    """A whole self-contained page: ``heading`` over ``sub``, the ``nav`` links, ``body``;
    the footer says the numbers come from ``source``."""
    from .._version import __version__

    doc = el(
        "html",
        el("head", el("meta", charset="utf-8"),
           el("meta", http_equiv="Content-Security-Policy", content=_CSP),
           el("meta", name="viewport", content="width=device-width, initial-scale=1"),
           el("meta", name="generator", content=f"torch-diagnose {__version__}"),
           el("title", f"torch-diagnose: {name}"),
           el("style", Markup(CSS))),
        el("body", el("main",
                      el("header", el("h1", heading),
                         el("p", sub, class_="sub"), nav),
                      body,
                      el("footer", f"torch-diagnose {__version__}. Every number on this page "
                                   f"comes from {source}; the page works offline and runs "
                                   "no script."))),
        lang="en",
    )
    return "<!doctype html>\n" + doc + "\n"


def render_runs_html(runs: Runs, *, kernels: bool = True) -> str:
    """Several runs on one page: a list of the runs, then each run's report in a section of
    its own (``#run<N>``, its parts ``#run<N>-summary``, ...), in order."""
    n = len(runs.runs)
    nav = el("nav", [el("a", f"run {i}", href=f"#run{i}") for i in range(1, n + 1)])
    body = [el("p", runs.summary(), class_="muted"),
            el("ol", [el("li", el("a", ", ".join(r.source), href=f"#run{i}"))
                      for i, r in enumerate(runs.runs, 1)])]
    for i, r in enumerate(runs.runs, 1):
        parts = _sections(r, None, kernels)
        # each part's id gets the run's prefix, so that ids stay unique on the page (a
        # section's own id is an attribute el() wrote: the text in it is escaped)
        kept = [Markup(s.replace(f' id="{sid}"', f' id="run{i}-{sid}"', 1))
                for sid, _, s in parts if s is not None]
        links = el("nav", [el("a", t, href=f"#run{i}-{sid}") for sid, t, s in parts
                           if s is not None])
        body.append(el("section", el("h2", f"Run {i} of {n}: ", el("code", ", ".join(r.source))),
                       links, kept, id=f"run{i}", class_="run"))
    return page(f"{n} runs", f"{n} separate runs", nav, body)


def write_html(report: Analysis, path: str | os.PathLike[str], **kw: Any) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path."""
    p = Path(path)
    p.write_text(render_html(report, **kw), encoding="utf-8")
    return p
