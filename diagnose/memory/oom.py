"""Why a step ran out of memory: what held the bytes, the largest batch predicted to fit,
and the cheapest change predicted to fit.

Reads JSON only: the tracked step's ``oom`` (the kinds and the modules' saved activations
when the failing allocation was asked for), the full step's profile where one could be
measured (a re-run under FakeTensorMode: the failed step's own timeline stops at the
failure), and the what-ifs. A change fits when the high end of its predicted range does,
with :data:`FIT_MARGIN` of the budget left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..values import mib
from .kinds import MODEL_STATES
from .whatif import largest_batch

#: budget share kept free: the caching allocator reserves more than it has allocated
#: (cached blocks split for other sizes); ME003 calls 1.5x fragmentation, and a healthy run
#: reserves ~1.0-1.1x its allocated peak, so a tenth of the device stays unplanned.
FIT_MARGIN = 0.10

#: what a change costs, cheapest first where no step time is predicted: no time
#: (zero_grad, the optimizer's kernels), faster (autocast), the same samples in more
#: passes (accumulation), the forward twice (checkpointing), then fewer samples per step.
_COST_ORDER = ("zero_grad_set_to_none", "optimizer_foreach", "amp_dtype", "grad_accum_steps",
               "checkpoint_modules", "batch_size", "optimizer_class")


def _rank(w: Mapping[str, Any]) -> tuple[int, float]:
    change = w.get("change") or {}
    keys = [k for k in _COST_ORDER if k in change]
    first = _COST_ORDER.index(keys[0]) if keys else len(_COST_ORDER)
    if "grad_accum_steps" in change:
        first = _COST_ORDER.index("grad_accum_steps")
    return first, float(w.get("step_ms") or 0.0)


def fitting(what_ifs: Sequence[Mapping[str, Any]], budget_bytes: int,
            margin: float = FIT_MARGIN) -> list[Mapping[str, Any]]:
    """The what-ifs whose range's high end fits the budget less the margin, cheapest first
    (batch sizes above the measured one are not remedies and are left out)."""
    room = budget_bytes * (1 - margin)
    out = [w for w in what_ifs if w.get("range") and w["range"][1] <= room
           and "optimizer_class" not in (w.get("change") or {})]
    return sorted(out, key=_rank)


def explain(prof: Mapping[str, Any], budget_bytes: int | None,
            what_ifs: Sequence[Mapping[str, Any]] = (), full: Mapping[str, Any] | None = None,
            largest: int | None = None, largest_method: str | None = None) -> dict[str, Any]:
    """The explanation of ``prof``'s out-of-memory error (``prof["oom"]``): held bytes by
    kind and module, the largest batch predicted to fit (``largest`` where the caller
    measured it with ``largest_method``, None there meaning none fits; else scaled from
    ``full`` or ``prof``) and the changes predicted to fit."""
    oom = prof.get("oom") or {}
    held = oom.get("held_bytes")
    req = oom.get("requested_bytes")
    out: dict[str, Any] = {
        "held_bytes": held, "requested_bytes": req, "budget_bytes": budget_bytes,
        "phase": oom.get("phase"), "module": oom.get("module"),
        "by_kind": oom.get("by_kind"), "top_modules": oom.get("top_modules") or [],
        "largest_batch": None, "fits": [], "cheapest": None,
    }
    if budget_bytes:
        base = full if full is not None else prof
        method = largest_method or ("scaled from the full step re-run under FakeTensorMode"
                                    if full is not None else
                                    "scaled from the kinds held up to the failure: at most")
        n = largest if largest_method else largest_batch(base, budget_bytes, FIT_MARGIN)
        out["largest_batch"] = {"batch_size": n, "of": prof.get("batch_size"),
                                "margin": FIT_MARGIN, "method": method}
        fits = fitting([w for w in what_ifs if (w.get("change") or {}).get("batch_size", 0)
                        <= (prof.get("batch_size") or 0)], budget_bytes)
        out["fits"] = [dict(w) for w in fits]
        out["cheapest"] = dict(fits[0]) if fits else None
    out["lines"] = lines(out)
    return out


def lines(ex: Mapping[str, Any]) -> list[str]:
    """The explanation in a few sentences."""
    out = []
    kinds = ex.get("by_kind") or {}
    parts = ", ".join(f"{k.replace('_', ' ')} {mib(v)}" for k, v in sorted(
        kinds.items(), key=lambda kv: -(kv[1] or 0)) if v)
    where = f" in {ex['phase']}" + (f" ({ex['module']})" if ex.get("module") else "")
    out.append(f"It failed{where if ex.get('phase') else ''} asking for "
               f"{mib(ex.get('requested_bytes'))} while {mib(ex.get('held_bytes'))} were "
               f"held: {parts or 'nothing tracked'}.")
    mods = ex.get("top_modules") or []
    if mods:
        out.append("Saved activations, largest: " + ", ".join(
            m["module"] + (f" ({m['class']})" if m.get("class") else "")
            + f" {mib(m['saved_bytes'])}" for m in mods[:3])
            + ".")
    lb = ex.get("largest_batch") or {}
    if lb.get("batch_size"):
        out.append(f"Largest batch predicted to fit in {mib(ex.get('budget_bytes'))} with "
                   f"{lb['margin']:.0%} to spare: {lb['batch_size']} (of {lb.get('of')}; "
                   f"{lb['method']}).")
    elif ex.get("budget_bytes"):
        states = sum(v for k in MODEL_STATES if isinstance(v := kinds.get(k), int | float))
        out.append("Not even a batch of one is predicted to fit: " + (
            "the model states alone need the room." if states >= ex["budget_bytes"] * (
                1 - FIT_MARGIN) else f"its step needs more than {mib(ex['budget_bytes'])} "
            f"beyond the model states ({mib(states)}): what the step makes per sample."))
    best = ex.get("cheapest")
    if best:
        ms = f", step {best['step_ms']:.1f} ms" if best.get("step_ms") else ""
        out.append(f"Cheapest change predicted to fit: {describe(best['change'])} "
                   f"(peak {mib(best['peak_bytes'])}, up to {mib(best['range'][1])}{ms}).")
    return out


def describe(change: Mapping[str, Any]) -> str:
    """A change in words: ``batch_size 32, grad_accum_steps 2``; blocks by count."""
    parts = []
    for k, v in change.items():
        if k == "checkpoint_modules":
            parts.append(f"checkpoint {len(v)} blocks ({', '.join(v[:3])}"
                         f"{', ...' if len(v) > 3 else ''})")
        else:
            parts.append(f"{k} {v}")
    return ", ".join(parts)


__all__ = ["FIT_MARGIN", "describe", "explain", "fitting", "lines"]
