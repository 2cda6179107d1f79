"""The analysis result's ``memory`` section, from what a run left: a live capture's
tracked step (``context.json``'s ``memory``) and the trace's ``[memory]`` events.

A tracked step leads (its kinds, modules, timeline and what-ifs, with the trace's view
under ``trace``); a trace alone gives its step's growth and, on a GPU, the batch what-ifs
scaled from it. Every section has the keys ``peak_bytes``, ``by_kind``, ``top_modules``,
``timeline`` and ``what_if``. A checkpointing what-if without a step time gets one from
the run's measured step time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kinds import KINDS
from .trace import trace_what_ifs
from .whatif import recompute_ms

#: the keys every section has (docs/json.md's ``memory``)
KEYS = ("peak_bytes", "by_kind", "top_modules", "timeline", "what_if")


def _trace_summary(tr: Mapping[str, Any]) -> dict[str, Any]:
    return {k: tr.get(k) for k in ("device", "peak_bytes", "growth_bytes",
                                   "held_at_step_start", "peak_phase", "steps")}


def memory_section(context: Mapping[str, Any] | None, trace: Mapping[str, Any] | None,
                   step_ms: float | None = None, batch_size: int | None = None
                   ) -> dict[str, Any] | None:
    """The run's memory section (None: neither a tracked step nor memory events).
    ``step_ms``: the run's step time (for a checkpointing what-if's time); ``batch_size``:
    the loader's, for a trace's what-ifs."""
    live = context.get("memory") if isinstance(context, Mapping) else None
    if isinstance(live, Mapping) and "peak_bytes" in live:
        sec = dict(live)
        whats = []
        for w in sec.get("what_if") or []:
            w = dict(w)
            if w.get("step_ms") is None and "checkpoint_modules" in (w.get("change") or {}):
                ms = recompute_ms(sec, w["change"], step_ms)
                if ms is not None:
                    w["step_ms"] = ms
            whats.append(w)
        sec["what_if"] = whats
        if trace is not None:
            sec["trace"] = _trace_summary(trace)
    elif trace is not None:
        sec = dict(trace)
        sec["what_if"] = trace_what_ifs(sec, batch_size)
    else:
        return None
    for k in KEYS:
        sec.setdefault(k, [] if k in ("top_modules", "what_if") else None)
    if isinstance(sec.get("by_kind"), Mapping):
        sec["by_kind"] = {k: sec["by_kind"].get(k) for k in KINDS}
    return sec


__all__ = ["KEYS", "memory_section"]
