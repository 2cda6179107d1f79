"""The HTML report: one self-contained file that works offline.

Summary, findings with their evidence and the fix as code, plots (inline SVG
drawn by matplotlib, see :mod:`diagnose.report.plots`), the per-rank
comparison, autofix before/after, the heaviest GPU kernels, and every metric.
No JavaScript, no external URL; a Content-Security-Policy forbids scripts and
remote loads, so even a mistake in escaping could not run code.

Escaping is structural rather than a matter of care at each call site: pages
are built from :func:`el`, which escapes every ``str`` it is given (text and
attribute values alike) and passes through only :class:`Markup`, which only
:func:`el` and :func:`raw_svg` make. A kernel named ``<script>`` therefore can
only ever appear as text. (No template engine: the page is a few small
functions, and this keeps the package free of a Jinja2 dependency.)
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine import SEVERITIES, severity_rank
from ..fixes import FIXES
from ..metrics import CATALOG
from ..model.predict import prediction_line
from ..model.step import step_model_line
from .plots import BREAKDOWN, PLOT_TITLES, AutofixRow, autofix_rows, figures, to_svg
from .text import step_lines, unprofiled_dl

if TYPE_CHECKING:
    from ..engine import Finding
    from ..result import Analysis, RankResult

AutofixRows = Sequence[AutofixRow | tuple[str, float, float]]


# ------------------------------------------------------------------- escaping builder
class Markup(str):
    """HTML that is already safe: made only by :func:`el` and :func:`raw_svg`."""

    __slots__ = ()


Child = Any  # str | int | float | Markup | None | Iterable[Child]


def _children(items: Iterable[Child]) -> Iterable[str]:
    for c in items:
        if c is None or c is False:
            continue
        if isinstance(c, Markup):
            yield c
        elif isinstance(c, str | int | float):
            yield html.escape(str(c), quote=True)
        else:
            yield from _children(c)


_VOID = frozenset({"meta", "br", "hr", "col", "img"})


def el(tag: str, *children: Child, **attrs: Any) -> Markup:
    """``<tag attrs>children</tag>``; every str child and attribute value is escaped.

    Attribute names are Python names (``class_`` -> ``class``, ``http_equiv`` ->
    ``http-equiv``); ``True`` gives a bare attribute, ``None``/``False`` omits it.
    """
    parts = [tag]
    for k, v in attrs.items():
        if v is None or v is False:
            continue
        name = k.rstrip("_").replace("_", "-")
        parts.append(name if v is True else f'{name}="{html.escape(str(v), quote=True)}"')
    head = "<" + " ".join(parts) + ">"
    if tag in _VOID:
        return Markup(head)
    return Markup(head + "".join(_children(children)) + f"</{tag}>")


def text(*children: Child) -> Markup:
    """Several children as one piece of (escaped) markup."""
    return Markup("".join(_children(children)))


def raw_svg(svg: str) -> Markup:
    """An ``<svg>`` made by matplotlib (which escapes its text itself)."""
    if not svg.lstrip().startswith("<svg"):
        raise ValueError("raw_svg() takes an <svg> element")
    return Markup(svg)


# ---------------------------------------------------------------------- formatting
def fmt(name: str, v: Any) -> str:
    """A metric value as a person reads it, by the unit its catalog entry gives."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    unit = CATALOG.get(name, ("", ""))[0]
    if not isinstance(v, int | float):
        return str(v)
    if unit == "fraction":
        return f"{v:.1%}"
    if unit == "bytes":
        return _bytes(v)
    if unit == "ms":
        return f"{v:,.2f} ms" if abs(v) < 10 else f"{v:,.1f} ms"
    if unit == "us":
        return f"{v:,.1f} µs"
    if unit == "%":
        return f"{v:.1f}%"
    if unit in ("MHz", "W", "MB/s"):
        return f"{v:,.1f} {unit}"
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.1f}"


def _bytes(v: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:,.1f} {unit}"
    return f"{int(v):,} B"


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{v:.1%}"


# -------------------------------------------------------------------------- sections
CSS = """
:root { --crit: #b3261e; --warn: #9a6700; --info: #0b62a4; --ok: #1a7f37; --line: #d8dee4;
        --muted: #57606a; --bg-soft: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
       margin: 0; background: #fff; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 12px; padding-bottom: 4px;
     border-bottom: 1px solid var(--line); }
h3 { font-size: 17px; margin: 0; display: inline; }
h4 { font-size: 14px; margin: 14px 0 6px; text-transform: uppercase; letter-spacing: .04em;
     color: var(--muted); }
p.sub { color: var(--muted); margin: 0; word-break: break-all; }
nav { margin: 14px 0 0; font-size: 14px; }
nav a { margin-right: 14px; }
a { color: var(--info); }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 5px 10px; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { background: var(--bg-soft); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { width: 180px; background: none; }
code, pre { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
td code { word-break: break-all; }
pre { background: #0d1117; color: #e6edf3; padding: 12px 14px; border-radius: 6px; overflow-x: auto;
      margin: 6px 0 0; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 10px; font-size: 12px;
         font-weight: 700; color: #fff; text-transform: uppercase; letter-spacing: .03em;
         vertical-align: 2px; }
.badge.critical { background: var(--crit); } .badge.warning { background: var(--warn); }
.badge.info { background: var(--info); } .badge.ok { background: var(--ok); }
.badge.auto { background: #6e7781; text-transform: none; }
.finding { border: 1px solid var(--line); border-left: 6px solid var(--info); border-radius: 6px;
           padding: 14px 18px; margin: 14px 0; }
.finding.critical { border-left-color: var(--crit); }
.finding.warning { border-left-color: var(--warn); }
.finding header { display: flex; flex-wrap: wrap; gap: 8px; align-items: baseline; }
.rule { font-weight: 700; font-family: ui-monospace, monospace; }
.cat { color: var(--muted); }
.gain { margin-left: auto; color: var(--muted); font-size: 14px; }
.message { font-size: 16px; margin: 10px 0 4px; }
ul.hints { margin: 4px 0; padding-left: 20px; color: var(--muted); }
details { margin: 6px 0; }
summary { cursor: pointer; font-weight: 600; }
.evidence td:first-child { white-space: nowrap; }
.muted { color: var(--muted); }
figure.plot { margin: 18px 0 26px; }
figure.plot figcaption { font-weight: 600; margin-bottom: 4px; }
figure.plot figcaption span { font-weight: 400; color: var(--muted); }
figure.plot svg { max-width: 100%; height: auto; display: block; }
.better { color: var(--ok); } .worse { color: var(--crit); }
footer { margin-top: 40px; color: var(--muted); font-size: 13px; }
@media print { pre { white-space: pre-wrap; } .finding { break-inside: avoid; } }
"""


def _kv(rows: Iterable[tuple[str, Child] | None]) -> Markup:
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


def summary_facts(m: dict[str, Any], n_ranks: int) -> list[tuple[str, str]]:
    """The summary's rows between source and findings, as (label, text): also the TensorBoard
    tab's (:mod:`diagnose.report.tb_plugin`), which reads the metrics back from JSON."""
    head, window = step_lines(m)
    breakdown = [f"{label} {m[f'share_{key}']:.0%}" for key, label, _ in BREAKDOWN
                 if isinstance(m.get(f"share_{key}"), int | float) and m[f"share_{key}"] >= 0.005]
    device = m.get("device_name") or ("no GPU activity in the trace" if m.get("has_gpu") is False
                                      else None)
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
        *summary_facts(report.metrics, len(report.ranks)),
        ("step model", step_model_line(report.step_model, report.step_model_why)),
        ("findings", _counts(report)),
    ]
    return el("section", el("h2", "Summary"), _kv(rows), id="summary")


def _evidence(f: Finding) -> Markup:
    rows = [el("tr", el("td", el("code", k)), el("td", fmt(k, v), class_="num"),
               el("td", CATALOG.get(k, ("", ""))[1], class_="muted"))
            for k, v in f.evidence.items()]
    return el("table", el("thead", el("tr", el("th", "metric"), el("th", "value", class_="num"),
                                       el("th", "meaning"))),
              el("tbody", rows), class_="evidence")


def _fixes(f: Finding) -> Markup | None:
    known = [FIXES[x] for x in f.fixes if x in FIXES]
    if not known:
        return None
    items = []
    for i, fix in enumerate(known):
        label = "try first: " if i == 0 and len(known) > 1 else ""
        items.append(el("details",
                        el("summary", label, fix.title, " ",
                           el("span", prediction_line(f.predictions.get(fix.id)), class_="muted")
                           if f.predictions.get(fix.id) is not None else None, " ",
                           el("span", "autofix can apply", class_="badge auto")
                           if fix.auto else None),
                        el("pre", el("code", f.fix_code.get(fix.id, fix.code),
                                      class_="language-python")),
                        open=i == 0, class_="fix", data_fix=fix.id))
    return text(el("h4", "Fix" if len(known) == 1 else f"Fixes ({len(known)})"), items)


def _finding(f: Finding) -> Markup:
    gain = (el("span", f"fixing it could save up to {f.estimated_gain:.0%} of step time",
               class_="gain") if f.estimated_gain else None)
    return el(
        "article",
        el("header", el("span", f.severity, class_=f"badge {f.severity}"),
           el("span", f.rule, class_="rule"), el("span", f.category, class_="cat"),
           el("h3", f.title), gain),
        el("p", f.message, class_="message"),
        el("ul", [el("li", h) for h in f.hints], class_="hints") if f.hints else None,
        el("p", "ranks: ", ", ".join(map(str, f.ranks)), class_="muted") if f.ranks else None,
        el("h4", "Evidence"), _evidence(f),
        _fixes(f),
        el("p", el("code", f"torch-diagnose rules {f.rule}"),
           " explains what the rule detects, why it costs time and its known false positives.",
           class_="muted"),
        class_=f"finding {f.severity}", id=f"finding-{f.rule}", data_rule=f.rule,
    )


def _findings(report: Analysis) -> Markup:
    if not report.findings:
        body: Child = el("p", "No findings: nothing in this run points at a bottleneck.",
                         class_="message")
    else:
        body = [_finding(f) for f in sorted(report.findings,
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
        out.append(el("figure", el("figcaption", PLOT_TITLES[key], " ",
                                   el("span", "— ", CAPTIONS[key])),
                      raw_svg(to_svg(fig, salt=key)),
                      class_="plot", id=f"plot-{key}", data_plot=key, role="img",
                      aria_label=PLOT_TITLES[key]))
    missing = []
    unavailable = (report.samples or {}).get("unavailable") or {}
    if "samples" not in figs:
        missing.append("GPU/host over time: no samples (saved traces have none; "
                       "a capture with diagnose(model, loader) records them)")
    elif isinstance(unavailable, dict) and unavailable.get("gpu"):
        missing.append(f"GPU over time: not sampled ({unavailable['gpu']})")
    if "idle" not in figs and report.metrics.get("has_gpu") is False:
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
    step model's predicted speedup, and its class (better, worse or empty); also the
    TensorBoard tab's. Rows of three (label, before, after) have no speedup or prediction."""
    label, before, after = str(r[0]), float(r[1]), float(r[2])
    extra = [None if x is None else float(x) for x in (*r[3:7], None, None, None, None)[:4]]
    ratio, lo, hi, predicted = extra
    change = (after - before) / before if before else None
    cls = "" if change is None else ("better" if change < 0 else "worse")
    measured = "" if ratio is None else f"{ratio:.2f}x" + (
        "" if lo is None or hi is None else f" [{lo:.2f}, {hi:.2f}]")
    return (label, fmt("step_time_median_ms", before), fmt("step_time_median_ms", after),
            "n/a" if change is None else f"{change:+.1%}", measured,
            "" if predicted is None else f"{predicted:.2f}x", cls)


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
                                         el("th", "predicted", class_="num"))),
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
    return el("section", el("h2", f"Not evaluated ({len(report.not_evaluated)})"),
              el("p", "Rules whose metrics this run cannot give: neither passed nor failed.",
                 class_="muted"),
              el("ul", [el("li", el("span", n.rule, class_="rule"), ": ", n.reason)
                        for n in report.not_evaluated]), id="not-evaluated")


def _notes(report: Analysis) -> Markup | None:
    if not report.notes:
        return None
    return el("section", el("h2", "Notes"), el("ul", [el("li", n) for n in report.notes]),
              id="notes")


def _metrics(report: Analysis) -> Markup:
    rows = [el("tr", el("td", el("code", k)), el("td", fmt(k, v), class_="num"),
               el("td", CATALOG.get(k, ("", ""))[0]), el("td", CATALOG.get(k, ("", ""))[1],
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

    ``autofix``: what ``diagnose.tune.autofix`` returned, or ``(label, before_ms,
    after_ms)`` rows (median step time without and with each change tried), for the
    before/after chart and table. ``kernels``: include the first rank's top-kernels
    table (computed with its metrics).
    """
    from .._version import __version__

    if autofix is not None and hasattr(autofix, "decisions"):
        autofix = autofix_rows(autofix)

    name = title or ", ".join(Path(s).name for s in report.source) or "report"
    plots, _ = _plots(report, autofix)
    sections = [
        ("summary", "Summary", _summary(report)),
        ("findings", "Findings", _findings(report)),
        ("plots", "Plots", plots),
        ("ranks", "Ranks", _ranks_table(report.ranks)),
        ("autofix", "Autofix", _autofix_table(autofix)),
        ("kernels", "Kernels", _kernels(report) if kernels else None),
        ("not-evaluated", "Not evaluated", _not_evaluated(report)),
        ("notes", "Notes", _notes(report)),
        ("metrics", "Metrics", _metrics(report)),
    ]
    nav = el("nav", [el("a", t, href=f"#{sid}") for sid, t, s in sections if s is not None])
    page = el(
        "html",
        el("head", el("meta", charset="utf-8"),
           el("meta", http_equiv="Content-Security-Policy", content=_CSP),
           el("meta", name="viewport", content="width=device-width, initial-scale=1"),
           el("meta", name="generator", content=f"torch-diagnose {__version__}"),
           el("title", f"torch-diagnose: {name}"),
           el("style", Markup(CSS))),
        el("body", el("main",
                      el("header", el("h1", "torch-diagnose report"),
                         el("p", ", ".join(report.source), class_="sub"), nav),
                      [s for _, _, s in sections],
                      el("footer", f"torch-diagnose {__version__}. Every number on this page "
                                   "comes from the analysis of the source above; the page works "
                                   "offline and runs no script."))),
        lang="en",
    )
    return "<!doctype html>\n" + page + "\n"


def write_html(report: Analysis, path: str | os.PathLike[str], **kw: Any) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path."""
    p = Path(path)
    p.write_text(render_html(report, **kw), encoding="utf-8")
    return p
