"""The memory section of the terminal and HTML reports: the peak by kind, the modules
whose saved activations are largest, a graph kept past its step, an out-of-memory error
explained, and the what-ifs (diagnose/memory) as rows of text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..values import mib

if TYPE_CHECKING:
    from ..result import Analysis


def _small(n: float) -> str:
    """A size as :func:`~diagnose.values.mib` gives it, in KiB under 0.1 MiB (not "0.0 MiB")."""
    return mib(n) if n >= 0.1 * 2**20 else f"{n / 2**10:,.0f} KiB"


def _change(change: dict[str, Any]) -> str:
    """A what-if's change as the settings it names (``batch_size=32``), as a fix's is."""
    parts = []
    for k, v in change.items():
        if k == "checkpoint_modules":
            parts.append(f"checkpoint {len(v)} blocks")
        elif k == "zero_grad_set_to_none":
            parts.append(f"zero_grad(set_to_none={v})")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def shows_memory(report: Analysis) -> dict[str, Any] | None:
    """The memory section's data where the report shows it: a tracked step's, or a trace's
    totals beside a memory finding; else None."""
    return memory_shown(getattr(report, "memory", None),
                        [f.category for f in report.findings])


def memory_shown(mem: Any, categories: Iterable[Any]) -> dict[str, Any] | None:
    """:func:`shows_memory` on a report's JSON ``memory`` and its findings' categories
    (the TensorBoard tab reads them from ``diagnose.json``)."""
    if isinstance(mem, dict) and mem and (mem.get("source") == "tracker"
                                          or "memory" in categories):
        return dict(mem)
    return None


#: the least share of the peak a kind has to be named on the peak's line (less prints as 0%)
KIND_SHOWN = 0.005


def memory_lines(mem: dict[str, Any]) -> list[tuple[str, str]]:
    """The memory section's lines under its title, each (text, kind): the peak by kind
    ("peak"), the modules whose saved activations are largest ("modules"), a graph kept
    past the step and an out-of-memory error explained ("oom")."""
    kinds = {k: v for k, v in (mem.get("by_kind") or {}).items() if v}
    peak = mem.get("peak_bytes")
    if peak is None and mem.get("growth_bytes") is not None:
        first = (f"the step grew by {mib(mem['growth_bytes'])} (the trace's CPU totals count "
                 "only what profiling saw)")
    else:
        phase = f" in {mem['peak_phase']}" if mem.get("peak_phase") else ""
        first = f"peak {mib(peak)}{phase}"
    if kinds:
        total = sum(kinds.values()) or 1
        # a kind that would print as 0% of the peak (a few KB) is left off the line, and
        # what those left off add up to is said once
        shown = [(k, v) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
                 if v / total > KIND_SHOWN]
        first += ": " + ", ".join(f"{k.replace('_', ' ')} {mib(v)} ({v / total:.0%})"
                                  for k, v in shown)
        if len(shown) < len(kinds):
            rest = total - sum(v for _, v in shown)
            first += f", the rest {_small(rest)} ({rest / total:.1%})"
    out = [(first, "peak")]
    # a module that saved under 1% of the largest one's adds nothing to the list
    mods = [m for m in mem.get("top_modules") or []
            if isinstance(m.get("saved_bytes"), int | float)]
    most = max((m["saved_bytes"] for m in mods), default=0)
    mods = [m for m in mods if m["saved_bytes"] >= 0.01 * most]
    if mods:
        when = (" (as backward began: the peak holds almost none)"
                if mem.get("top_modules_at") == "backward start" else "")
        out.append((f"largest saved activations{when}: " + ", ".join(
            f"{_module(m)} {_small(m['saved_bytes'])}" for m in mods[:4]), "modules"))
    kept = (mem.get("kept_after_step") or {}).get("bytes")
    if isinstance(kept, int) and kept > 0:
        out.append((f"still alive after the step: {mib(kept)} saved for backward (a graph "
                    "kept past its step: ME005)", "oom"))
    out += [(line, "oom") for line in (mem.get("oom_explanation") or {}).get("lines") or []]
    return out


def _module(m: dict[str, Any]) -> str:
    """A module as the memory lines name it: its name, its class where it has one (not the
    tensors made outside the model)."""
    return f"{m['module']} ({m['class']})" if m.get("class") else str(m["module"])


#: the what-if table's title
WHAT_IF_TITLE = "Memory what-ifs (plan with the range's high end)"
#: the what-if table's columns that hold numbers (set right-aligned)
WHAT_IF_NUMERIC = ("peak", "range", "step ms")


def what_if_table(mem: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The what-ifs as (columns, rows of text); no rows where there are none. The step's
    column only where a what-if says it; a change that saves nothing says so."""
    whats = mem.get("what_if") or []
    peak = mem.get("peak_bytes")
    timed = any(w.get("step_ms") is not None for w in whats)
    cols = ["change", "peak", "range", *(("step ms",) if timed else ()), "method"]
    rows = []
    for w in whats:
        rng = w.get("range") or [None, None]
        step = ["" if w.get("step_ms") is None else f"{w['step_ms']:.1f}"] if timed else []
        how = str(w.get("method") or "")
        got = w.get("peak_bytes")
        if "could not run on fake tensors" in str(w.get("note") or ""):
            how += " (its re-run on fake tensors failed: the JSON's note says why)"
        if isinstance(got, int | float) and isinstance(peak, int | float) and got >= peak:
            low = rng[0] if isinstance(rng[0], int | float) else got
            how += ("; above the peak now" if low > peak else "; no lower than the peak now"
                    if low >= peak else "; may not lower the peak")
        rows.append([_change(w.get("change") or {}), mib(got),
                     f"{mib(rng[0])} - {mib(rng[1])}", *step, how])
    return cols, rows


def memory_renderables(mem: dict[str, Any] | None, what_ifs: bool = True) -> list[Any]:
    """The memory section (diagnose/memory): :func:`memory_lines` under its title, then
    the what-ifs (:func:`what_if_table`) where ``what_ifs``."""
    if not mem:
        return []
    styles = {"peak": "", "modules": "dim", "oom": "red"}
    # each line indented as a whole, so that a line the terminal wraps keeps its indent
    out: list[Any] = [Group(Text("Memory", style="bold"), *(
        Padding(Text(line, style=styles[kind]), (0, 0, 0, 2), expand=False) for line, kind in memory_lines(mem)))]
    cols, rows = what_if_table(mem)
    if rows and what_ifs:
        t = Table(title=WHAT_IF_TITLE, title_justify="left")
        for col in cols:
            t.add_column(col, justify="right" if col in WHAT_IF_NUMERIC else "left")
        for row in rows:
            t.add_row(*(escape(c) for c in row))
        out.append(t)
    return out


def _scaled(n: float, scale: int) -> str:
    return f"{n / scale:.1f}"


def peak_line(peak: dict[str, Any] | None) -> str:
    """A fix's predicted peak as the reports show it ("peak 7.9 -> 5.2 GiB predicted
    (4.9-5.6)", and ", over the 4.0 GiB budget" where its range's high end does not fit);
    empty when there is none."""
    if not isinstance(peak, dict) or not isinstance(peak.get("peak_bytes"), int | float):
        return ""
    base, new, rng = peak.get("base_bytes"), peak["peak_bytes"], peak.get("range")
    top = max(new, base) if isinstance(base, int | float) else new
    unit, scale = next(((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
                        if top >= s), ("B", 1))
    head = f"{_scaled(base, scale)} -> " if isinstance(base, int | float) else ""
    out = f"peak {head}{_scaled(new, scale)} {unit} predicted"
    if isinstance(rng, list | tuple) and len(rng) == 2:
        out += f" ({_scaled(rng[0], scale)}-{_scaled(rng[1], scale)})"
    budget = peak.get("budget_bytes")
    if peak.get("fits") is False and isinstance(budget, int | float):
        out += f", over the {_scaled(budget, scale)} {unit} budget"
    return out
