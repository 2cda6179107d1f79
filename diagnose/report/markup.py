"""The report's shared formatting: escaping HTML building (:func:`el`, :func:`text`,
:func:`raw_svg` and the :class:`Markup` they alone make), the number formats every view
uses (:func:`fmt`) and the page style (:data:`CSS`). The HTML page, the comparison and
the TensorBoard tab all build from these, so a figure reads the same everywhere.

Escaping is structural rather than a matter of care at each call site: :func:`el`
escapes every ``str`` it is given (text and attribute values alike) and passes through
only :class:`Markup`. A kernel named ``<script>`` can only ever appear as text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from ..metrics import CATALOG

__all__ = ["CSS", "Child", "Markup", "el", "fmt", "gain_words", "raw_svg", "text"]


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
#: units :func:`fmt` writes into the value itself (a fraction as a percentage, bytes in MiB)
_IN_VALUE = frozenset({"fraction", "bytes", "ms", "us", "%", "MHz", "W", "MB/s"})


def unit_beside(name: str) -> str:
    """The unit a table shows beside :func:`fmt`'s value: the catalog's, or "" where the
    value carries it ("491.9 ms", not "491.9 ms ms")."""
    unit = CATALOG.get(name, ("", ""))[0]
    return "" if unit in _IN_VALUE else unit


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


def gain_words(share: float, bound: bool) -> str:
    """A finding's time at stake in words: what a fix saves at most where a prediction set
    it (``bound``), else the rule's own estimate from its symptom, which a fix may beat."""
    if bound and share <= 0:
        return "no fix is predicted to save step time"
    if bound:
        return f"fixing it could save up to {share:.0%} of step time"
    return f"fixing it could save about {share:.0%} of step time (the rule's own estimate)"


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


# The per-step breakdown, in the order categories claim time (README "What it measures").
BREAKDOWN: tuple[tuple[str, str, str], ...] = (
    ("kernel", "kernel", "#4C72B0"),
    ("memcpy", "memcpy", "#DD8452"),
    ("memset", "memset", "#937860"),
    ("communication", "communication", "#8172B3"),
    ("runtime", "CUDA runtime", "#CCB974"),
    ("dataloader", "DataLoader", "#C44E52"),
    ("cpu_exec", "CPU exec", "#55A868"),
    ("other", "other", "#B8B8B8"),
)
