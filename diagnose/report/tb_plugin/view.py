"""What the tab shows of a run, from its ``diagnose.json``: every value already a string.

Numbers are formatted here, by the same helpers as the HTML report (:func:`markup.fmt`,
:func:`html.summary_facts`, :func:`html.autofix_cells`, the memory section's
:mod:`..memory_text`), so the script in the page only places text. The document comes from a file on disk and is read defensively: a field of the
wrong type is shown as missing, never a traceback.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from ...metrics import CATALOG
from ...result import step_time
from ...rules.engine import SEVERITIES
from ...stepmodel.prediction import prediction_line
from ...stepmodel.step import step_model_line
from ...values import as_number
from ..html import autofix_cells, summary_facts
from ..markup import fmt, gain_words
from ..memory_text import (
    WHAT_IF_NUMERIC,
    WHAT_IF_TITLE,
    memory_lines,
    memory_shown,
    what_if_table,
)

NO_FINDINGS = "No findings: nothing in this run points at a bottleneck."


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _str(x: Any) -> str:
    return "" if x is None else str(x)


def _metrics(report: dict[str, Any]) -> dict[str, Any]:
    """The report's metrics, a value of the wrong type for its unit read as missing."""
    out = {}
    for k, v in _dict(report.get("metrics")).items():
        unit = CATALOG.get(k, ("", ""))[0]
        if unit == "bool":
            ok = v is None or isinstance(v, bool)
        elif unit in ("", "name"):
            ok = v is None or isinstance(v, str | int | float)
        else:
            ok = v is None or as_number(v, finite=False) is not None
        out[str(k)] = v if ok else None
    return out


def _severity(f: dict[str, Any]) -> str:
    s = f.get("severity")
    return s if s in SEVERITIES else "info"


def _findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    found = [f for f in _list(report.get("findings")) if isinstance(f, dict)]
    return sorted(found, key=lambda f: -SEVERITIES.index(_severity(f)))


def _counts(findings: list[dict[str, Any]]) -> dict[str, int]:
    return {sev: n for sev in reversed(SEVERITIES)
            if (n := sum(1 for f in findings if _severity(f) == sev))}


def _alarms(report: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A watched run's alarms as findings of their severity (each its capture's worst
    finding's, at least a warning: tb_watch writes them); None for a run not watched."""
    watched = report.get("watched")
    if not isinstance(watched, dict):
        return None
    n = int(as_number(watched.get("alarms")) or 0)
    sevs = _list(watched.get("alarm_severities"))
    if len(sevs) != n:  # a diagnose.json written before the severities were
        sevs = ["warning"] * n
    return [{"severity": s} for s in sevs]


def run_summary(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """One line of the run list: name, worst severity, counts, median step time, headline,
    and a watched run's alarms (their count; worst and counts are theirs)."""
    report = _dict(doc.get("report"))
    findings = _findings(report)
    alarms = _alarms(report)
    ranked = findings if alarms is None else _findings({"findings": alarms})
    shown = step_time(_metrics(report))  # the job's own step where the clock timed it
    step = as_number(shown["median_ms"], finite=False)
    return {
        "run": name,
        "worst": _severity(ranked[0]) if ranked else None,
        "counts": _counts(ranked),
        "alarms": None if alarms is None else len(alarms),
        "step_time": None if step is None else fmt("step_time_median_ms", step)
        + ("" if shown["measured"] == "without the profiler" else " (profiled)"),
        "headline": _str(findings[0].get("message")) if findings else _no_findings(report),
    }


def _no_findings(report: dict[str, Any]) -> str:
    """The headline of a run without findings: a watched run's says where they are."""
    watched = report.get("watched")
    if not isinstance(watched, dict):
        return NO_FINDINGS
    n = as_number(watched.get("alarms")) or 0
    if not n:
        return "A watched run: no alarm, no sustained change of pace."
    return (f"A watched run: {n:.0f} alarm{'s' if n != 1 else ''} (the notes below); each "
            "alarm's capture is a run of its own, with its findings: write it with "
            "torch-diagnose tensorboard CAPTURE_DIR.")


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    gain = as_number(f.get("estimated_gain"), finite=False)
    evidence = _dict(f.get("evidence"))
    fixes = [x for x in _list(f.get("fixes")) if isinstance(x, dict)]
    return {
        "rule": _str(f.get("rule")), "severity": _severity(f),
        "category": _str(f.get("category")), "title": _str(f.get("title")),
        "message": _str(f.get("message")),
        "hints": [_str(h) for h in _list(f.get("hints"))],
        "ranks": ", ".join(map(_str, _list(f.get("ranks")))),
        "gain": gain_words(gain, f.get("estimated_gain_bound") is not False) if gain else "",
        "evidence": [[_str(k), fmt(str(k), v), CATALOG.get(str(k), ("", ""))[1]]
                     for k, v in evidence.items() if v is not None],  # no n/a as evidence
        "fixes": [{"id": _str(x.get("id")),
                   "title": " ".join(filter(None, (_str(x.get("title") or x.get("id")),
                                                   prediction_line(x.get("predicted"))))),
                   "code": _str(x.get("code")), "auto": bool(x.get("auto"))} for x in fixes],
    }


def _autofix(doc: dict[str, Any]) -> dict[str, Any] | None:
    af = _dict(doc.get("autofix"))
    rows = []
    for r in _list(af.get("rows")):
        if isinstance(r, list) and len(r) in (3, 7, 9) and None not in (as_number(r[1], finite=False), as_number(r[2], finite=False)):
            # (label, before, after), also (speedup, ci_lo, ci_hi, predicted), and since
            # the prediction's range (pred_lo, pred_hi); any null
            rows.append(list(autofix_cells((_str(r[0]), float(r[1]), float(r[2]),
                                            *[as_number(x, finite=False) for x in r[3:]]))))
    if not rows:
        return None
    code = af.get("code")
    return {"rows": rows, "code": code if isinstance(code, str) else None}


def _kernels(report: dict[str, Any]) -> dict[str, Any] | None:
    ranks = [r for r in _list(report.get("ranks")) if isinstance(r, dict)]
    if not ranks:
        return None
    first = min(ranks, key=lambda r: (not isinstance(r.get("rank"), int), r.get("rank") or 0))
    table = _dict(_dict(first.get("tables")).get("top_kernels"))
    rows = [k for k in _list(table.get("rows")) if isinstance(k, dict)]
    if not rows:
        return None
    multi = len(ranks) > 1 and isinstance(first.get("rank"), int)
    where = f"rank {first['rank']}" if multi else "the trace"
    total = (as_number(k.get("total_ms"), finite=False) for k in rows)
    share = (as_number(k.get("share"), finite=False) for k in rows)
    return {
        "caption": f"The {len(rows)} of {_str(table.get('distinct'))} distinct kernels with the "
                   f"most total time in {where} ({PurePath(_str(first.get('path'))).name}), "
                   "whole trace.",
        "rows": [[_str(k.get("name")), _str(k.get("calls")),
                  "n/a" if t is None else f"{t:,.1f} ms", "n/a" if s is None else f"{s:.1%}"]
                 for k, t, s in zip(rows, total, share, strict=True)],
    }


def _memory(report: dict[str, Any]) -> dict[str, Any] | None:
    """The memory section where the HTML report shows one: its lines ([text, kind], kind
    "peak", "modules" or "oom") and the what-if table; None where a field is damaged."""
    mem = memory_shown(report.get("memory"), [f.get("category") for f in _findings(report)])
    if mem is None:
        return None
    try:
        lines = [[text, kind] for text, kind in memory_lines(mem)]
        cols, rows = what_if_table(mem)
    except (TypeError, ValueError, KeyError, AttributeError):  # not the shape written
        return None
    table = {"title": WHAT_IF_TITLE, "columns": cols, "rows": rows,
             "numeric": [i for i, c in enumerate(cols) if c in WHAT_IF_NUMERIC]}
    return {"lines": lines, "what_if": table if rows else None}


def run_view(name: str, doc: dict[str, Any], *, profiler_tab: bool = False) -> dict[str, Any]:
    """Everything the tab shows of one run."""
    report = _dict(doc.get("report"))
    m = _metrics(report)
    ranks = _list(report.get("ranks"))
    findings = _findings(report)
    source = [_str(s) for s in _list(report.get("source"))]
    plots = [{"key": _str(k), "title": _str(p.get("title") or k),
              "caption": _str(p.get("caption"))}
             for k, p in _dict(doc.get("plots")).items()
             if isinstance(p, dict) and isinstance(p.get("svg"), str)
             and p["svg"].lstrip().startswith("<svg")]
    return {
        **run_summary(name, doc),
        "summary": [["source", ", ".join(source)],
                    *map(list, summary_facts(m, len(ranks), any(
                        isinstance(x, dict) and isinstance(x.get("predicted"), dict)
                        for f in findings for x in _list(f.get("fixes"))))),
                    ["step model", step_model_line(report.get("step_model"),
                                                   report.get("step_model_why"))]],
        "findings": [_finding(f) for f in findings],
        "memory": _memory(report),
        "plots": plots,
        "autofix": _autofix(doc),
        "kernels": _kernels(report),
        "not_evaluated": [[_str(n.get("rule")), _str(n.get("reason"))]
                          for n in _list(report.get("not_evaluated")) if isinstance(n, dict)],
        "notes": [_str(n) for n in _list(report.get("notes"))],
        "metrics": [[_str(k), fmt(str(k), v), CATALOG.get(str(k), ("", ""))[0]]
                    for k, v in m.items()],
        "traces": [_str(t) for t in _list(doc.get("traces"))],
        "profiler_tab": profiler_tab and bool(_list(doc.get("traces"))),
    }


def plot_svg(doc: dict[str, Any], key: str) -> str | None:
    """The SVG of plot ``key``, or None."""
    svg = _dict(_dict(doc.get("plots")).get(key)).get("svg")
    return svg if isinstance(svg, str) and svg.lstrip().startswith("<svg") else None
