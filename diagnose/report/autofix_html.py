"""``torch-diagnose autofix … -o af.html`` (and ``demo``): the autofix result as one page.

Each decision with the step model's predicted speedup beside the measured one (and its
interval), the before/after chart and table, the speed of light, the change by hand, the
notes, and the findings of the diagnosis that named the fixes. The result is read by
attribute (``diagnose.autofix``'s AutofixResult), so this module needs nothing from
autofix; pages are built as in :mod:`diagnose.report.html`.
"""

from __future__ import annotations

from typing import Any

from ..result import Analysis
from ..values import as_number, interval_end
from .html import findings_section, kv, page
from .markup import Child, Markup, el, raw_svg
from .plots import autofix_figure, autofix_rows, to_svg

_CLASS = {"kept": "better", "reverted": "worse", "does not fit": "worse", "error": "worse"}


def _ms(x: Any) -> str:
    v = as_number(x)
    return "" if v is None else f"{v:,.2f} ms" if v < 10 else f"{v:,.1f} ms"


def _x(x: Any) -> str:
    v = as_number(x)
    return "" if v is None else f"{v:.2f}x"


def _predicted(d: Any) -> str:
    """A trial's predicted speedup with its range where it has one: ``1.79x [1.00, 2.13]``."""
    rng = getattr(d, "predicted_range", None)
    point = _x(getattr(d, "predicted_speedup", None))
    lo, hi = (as_number(x) for x in rng) if isinstance(rng, tuple | list) and len(rng) == 2 \
        else (None, None)
    return point + (f" [{lo:.2f}, {hi:.2f}]" if point and lo is not None and hi is not None
                    else "")


def _measured(iv: Any) -> str:
    """``1.52x [1.40, 1.65]`` from an interval (ratio, lo, hi), else ""."""
    ratio, lo, hi = (as_number(getattr(iv, k, None)) for k in ("ratio", "lo", "hi"))
    if ratio is None:
        return ""
    return f"{ratio:.2f}x" + ("" if lo is None or hi is None else f" [{interval_end(lo)}, {interval_end(hi)}]")


def _summary(r: Any) -> Markup:
    final = getattr(r, "final", None)
    iv = getattr(final, "interval", None)
    kept = list(getattr(r, "kept_changes", None) or getattr(r, "kept", []) or [])
    elapsed = as_number(getattr(r, "elapsed_s", None)) or 0.0
    orig, base = getattr(r, "original", None), getattr(r, "baseline", None)
    fitted = orig is not None and base is not None and bool(orig.describe_change(base))
    tuned: Child = ("the fit to memory only: no speed fix was kept" if fitted
                    else "no fix was kept: the baseline stays")
    if iv is not None:
        lo = as_number(getattr(iv, "lo", None))
        tuned = el("span", f"{_measured(iv)} measured",
                   class_="better" if lo is not None and lo > 1 else None)
    tuned_pred = as_number(getattr(r, "predicted_tuned_ms", None))
    base_ms = as_number(getattr(final, "base_ms", None))
    rows: list[tuple[str, Child] | None] = [
        ("trials", f"{getattr(r, 'trials', 0)} in {elapsed:.1f} s on "
                   f"{getattr(r, 'device', '?')} ({getattr(r, 'cpus', '?')} CPUs usable)"),
        ("kept", ", ".join(kept) or "nothing"),
        ("tuned vs baseline", tuned),
        ("predicted", f"{_x(base_ms / tuned_pred)} by the step model")
        if tuned_pred and base_ms else None,
    ]
    return el("section", el("h2", "Summary"), kv(rows), id="summary")


def _decisions(r: Any) -> Markup:
    decisions = list(getattr(r, "decisions", []) or [])
    gain = as_number(getattr(r, "min_gain", None))
    rows = []
    for d in decisions:
        status = str(getattr(d, "status", ""))
        rows.append(el(
            "tr",
            el("td", el("code", str(getattr(d, "fix", "")))),
            el("td", getattr(d, "finding", None) or ""),
            el("td", getattr(d, "change", "") or "",
               el("br") if getattr(d, "change", "") and getattr(d, "reason", "") else None,
               el("span", getattr(d, "reason", "") or "", class_="muted")),
            el("td", _ms(getattr(d, "baseline_ms", None)), class_="num"),
            el("td", _ms(getattr(d, "trial_ms", None)), class_="num"),
            el("td", _predicted(d), class_="num"),
            el("td", _measured(getattr(d, "speedup", None)), class_="num"),
            el("td", status, class_=_CLASS.get(status)),
            data_fix=str(getattr(d, "fix", "")), data_status=status))
    head = el("tr", el("th", "fix"), el("th", "finding"), el("th", "change / reason"),
              el("th", "baseline", class_="num"), el("th", "trial", class_="num"),
              el("th", "predicted", class_="num"), el("th", "measured [CI]", class_="num"),
              el("th", "decision"))
    rule = f" A change is kept only if its interval's lower end is above {1 + gain:.2f}." \
        if gain is not None else ""
    return el("section", el("h2", f"Decisions ({len(decisions)})"),
              el("p", "Mean step of the baseline and of the trial (their interleaved blocks "
                 "pooled); the step model's "
                 "predicted speedup beside the measured one." + rule, class_="muted"),
              el("table", el("thead", head), el("tbody", rows)), id="decisions")


def _before_after(r: Any) -> Markup:
    final = getattr(r, "final", None)
    iv = getattr(final, "interval", None)
    rows: list[tuple[str, Child] | None]
    if final is None or iv is None:
        rows = [("baseline = tuned", _ms(getattr(r, "tuned_ms", None)) or "n/a")]
    else:
        pred = as_number(getattr(r, "predicted_tuned_ms", None))
        rows = [("baseline", _ms(final.base_ms)),
                ("tuned", f"{_ms(final.cand_ms)}: {_measured(iv)}"
                          + (f" (predicted {_ms(pred)})" if pred else ""))]
    b = getattr(r, "bound", None)
    if b is not None:
        rows += [("compute only", _ms(getattr(b, "compute_ms", None))),
                 ("input only", _ms(getattr(b, "data_ms", None))),
                 ("speed of light", f"{_ms(getattr(b, 'bound_ms', None))}, limited by "
                                    f"{getattr(b, 'limited_by', '?')}")]
    fig = autofix_figure(autofix_rows(r))
    plot = None if fig is None else el("figure", raw_svg(to_svg(fig, salt="autofix")),
                                       class_="plot", id="plot-autofix", role="img",
                                       aria_label="step time before and after")
    return el("section", el("h2", "Before / after"), kv(rows), plot, id="before-after")


def _code(r: Any) -> Markup | None:
    code = getattr(r, "code", "") or ""
    if not code:
        return None
    return el("section", el("h2", "The change by hand"),
              el("pre", el("code", code, class_="language-python")), id="code")


def _notes(r: Any) -> Markup | None:
    notes = list(getattr(r, "notes", []) or [])
    if not notes:
        return None
    return el("section", el("h2", "Notes"), el("ul", [el("li", n) for n in notes]), id="notes")


def render_autofix_html(result: Any, *, title: str | None = None) -> str:
    """An autofix result (``diagnose.autofix.autofix``'s AutofixReport) as one
    self-contained HTML page (a str)."""
    diag = getattr(result, "diagnosis", None)
    sections: list[tuple[str, str, Markup | None]] = [
        ("summary", "Summary", _summary(result)),
        ("decisions", "Decisions", _decisions(result)),
        ("before-after", "Before / after", _before_after(result)),
        ("code", "Code", _code(result)),
        ("notes", "Notes", _notes(result)),
        ("findings", "Diagnosis", findings_section(diag) if isinstance(diag, Analysis) else None),
    ]
    nav = el("nav", [el("a", t, href=f"#{sid}") for sid, t, s in sections if s is not None])
    source = ", ".join(diag.source) if isinstance(diag, Analysis) else "the trials"
    return page(title or "autofix", f"autofix on {getattr(result, 'device', '?')}: {source}",
                nav, [s for _, _, s in sections], heading="torch-diagnose autofix",
                source="autofix's measured trials")


__all__ = ["render_autofix_html"]
