"""``torch-diagnose compare A B -o c.html``: the comparison as one self-contained page.

The same content as the text view (:mod:`diagnose.report.compare`), in the HTML report's
page and style (:mod:`diagnose.report.html`): the headline step time with each run's
spread, the metrics with their deltas and verdicts, and the findings resolved, still there
or new.
"""

from __future__ import annotations

from pathlib import Path

from .compare import Comparison, delta_text, steps_label
from .compare_findings import reason_text
from .html import kv, page
from .markup import Child, Markup, el, fmt

_STATUS = ("resolved", "still", "new", "not_evaluated")


def _summary(c: Comparison) -> Markup:
    rows: list[tuple[str, Child] | None] = [
        ("A (before)", el("code", ", ".join(c.a.source))),
        ("B (after)", el("code", ", ".join(c.b.source))),
    ]
    st = c.step
    if st is not None:
        cls = {"better": "better", "worse": "worse"}.get(st.verdict or "")
        rows.append(("step time", el("span", st.line(), class_=cls)))
        for who, d in (("A", st.diff.a), ("B", st.diff.b)) if st.diff else ():
            rows.append((f"{who} steps", f"{st.spread(d)} "
                                         f"({steps_label(c.a if who == 'A' else c.b, d.n)})"))
        if st.note:
            rows.append(("note", st.note))
        if told := st.resolution():
            rows.append(("can tell", told))
    counts = ", ".join(f"{len(c.by_status(s))} {s.replace('_', ' ')}" for s in _STATUS
                       if c.by_status(s))
    rows.append(("findings", counts or "no findings in either run"))
    return el("section", el("h2", "Summary"), kv(rows), id="summary")


def _metrics(c: Comparison) -> Markup:
    rows = []
    for m in c.metrics:
        v = m.verdict or ""
        cls = {"better": "better", "worse": "worse"}.get(v, "muted" if v else "")
        rows.append(el("tr", el("td", el("code", m.name)),
                       el("td", fmt(m.name, m.a), class_="num"),
                       el("td", fmt(m.name, m.b), class_="num"),
                       el("td", delta_text(m), class_="num"), el("td", v, class_=cls or None),
                       data_metric=m.name))
    return el("section", el("h2", "Metrics"),
              el("p", "The step-time row is the headline's figure and verdict; better or "
                 "worse elsewhere: a change of 0.5% or more (half a point for shares).",
                 class_="muted"),
              el("table", el("thead", el("tr", el("th", "metric"), el("th", "A", class_="num"),
                                         el("th", "B", class_="num"),
                                         el("th", "Δ", class_="num"), el("th", ""))),
                 el("tbody", rows)), id="metrics")


def _findings(c: Comparison) -> Markup:
    if not c.findings:
        return el("section", el("h2", "Findings"),
                  el("p", "No findings in either run.", class_="better"), id="findings")
    cls = {"resolved": "better", "new": "worse"}
    rows = []
    for ch in c.findings:
        what = ch.message_b or ch.message_a or ch.title
        rows.append(el("tr", el("td", ch.status.replace("_", " "), class_=cls.get(ch.status)),
                       el("td", el("span", ch.rule, class_="rule")), el("td", ch.category),
                       el("td", ch.severity_a or "-"), el("td", ch.severity_b or "-"),
                       el("td", what, el("br") if ch.reason else None,
                          el("span", "B: " + reason_text(ch), class_="muted")
                          if ch.reason else None),
                       data_rule=ch.rule, data_status=ch.status))
    return el("section", el("h2", "Findings (A → B)"),
              el("table", el("thead", el("tr", el("th", "status"), el("th", "rule"),
                                         el("th", "category"), el("th", "A"), el("th", "B"),
                                         el("th", "finding (as B reports it; A where B has "
                                                  "none)"))),
                 el("tbody", rows)), id="findings")


def render_compare_html(c: Comparison) -> str:
    """The comparison of run A with run B as one self-contained HTML page (a str)."""
    a = ", ".join(Path(s).name for s in c.a.source) or "A"
    b = ", ".join(Path(s).name for s in c.b.source) or "B"
    sections = [("summary", "Summary", _summary(c)), ("metrics", "Metrics", _metrics(c)),
                ("findings", "Findings", _findings(c))]
    nav = el("nav", [el("a", t, href=f"#{sid}") for sid, t, _ in sections])
    return page(f"{a} vs {b}", f"A: {', '.join(c.a.source)} — B: {', '.join(c.b.source)}",
                nav, [s for _, _, s in sections], heading="torch-diagnose comparison",
                source="the analyses of runs A and B")


__all__ = ["render_compare_html"]
