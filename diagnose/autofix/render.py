"""Terminal rendering of an autofix result with rich: decisions, before/after, bound, code."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..console import emit, plain_text
from .decisions import KEPT

if TYPE_CHECKING:
    from .decisions import AutofixResult

_STYLE = {"kept": "bold green", "reverted": "yellow", "does not fit": "red", "fits": "green",
          "error": "red", "skipped": "dim", "not applicable": "dim", "no change": "dim",
          "advice": "cyan"}


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _ms3(x: float | None) -> str:
    """Three significant digits or so: 0.42, 2.39, 12.3, 127."""
    if x is None:
        return "?"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _ms_pair(d: Any) -> str:
    if d.baseline_ms is None and d.trial_ms is None:
        return ""
    return f"{_ms3(d.baseline_ms)} → {_ms3(d.trial_ms)}"


def _predicted(p: float | None, rng: tuple[float, float] | None) -> str:
    """A predicted speedup with its range where it has one: ``1.26x [0.57, 1.50]``."""
    if p is None:
        return ""
    return f"{p:.2f}x" if rng is None else f"{p:.2f}x [{rng[0]:.2f}, {rng[1]:.2f}]"


def _tuned_range(r: AutofixResult, speedup: float) -> tuple[float, float] | None:
    """The range of the model's tuned speedup where one fix was kept and its prediction
    has a range: that range over its point, scaled to ``speedup``. None otherwise (the
    model gives no range for several kept changes together)."""
    kept = [d for d in r.decisions if d.status == KEPT]
    if len(kept) != 1:
        return None
    p, rng = kept[0].predicted_speedup, getattr(kept[0], "predicted_range", None)
    if not p or rng is None:
        return None
    return speedup * rng[0] / p, speedup * rng[1] / p


def decisions_table(r: AutofixResult) -> Table:
    """One row per decision: the fix, the finding that named it, the change with the reason
    under it, the times, the speedup, the decision. Sized for logs as well as terminals:
    only the change/reason column wraps, so at 120 columns or more a row is two lines (the
    change, then the reason) with the fix, the numbers and the decision intact on the
    first."""
    ci = "speedup [CI]"
    for d in r.decisions:
        if d.speedup is not None:
            ci = f"speedup [{d.speedup.confidence:.0%} CI]"
            break
    t = Table(title=f"autofix decisions (ms: baseline → trial step; kept only if the CI's "
                    f"lower bound > {1 + r.min_gain:.2f})",
              title_justify="left", expand=False, box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False, padding=(0, 1, 0, 0))
    keep: dict[str, Any] = {"no_wrap": True, "overflow": "ellipsis"}
    longest = max((len(d.fix) for d in r.decisions), default=3)
    t.add_column("fix", min_width=longest, **keep)
    t.add_column("by", **keep)
    t.add_column("change / reason", overflow="fold", min_width=24)
    t.add_column("ms", justify="right", **keep)
    t.add_column(ci, justify="right", **keep)
    predicted = any(getattr(d, "predicted_speedup", None) is not None for d in r.decisions)
    if predicted:  # the step model's prediction, next to the measurement
        t.add_column("predicted", justify="right", **keep)
    t.add_column("decision", **keep)
    for d in r.decisions:
        what = Text(d.change)
        if d.reason:
            if d.change:
                what.append("\n")
            what.append(d.reason, style="dim")
        cells: list[Any] = [d.fix, d.finding or "", what, _ms_pair(d),
                            "" if d.speedup is None else str(d.speedup)]
        if predicted:
            cells.append(_predicted(d.predicted_speedup, getattr(d, "predicted_range", None)))
        t.add_row(*cells, Text(d.status, style=_STYLE.get(d.status, "")))
    return t


def _per_s(cfg: Any, ms: float | None) -> str:
    eb = cfg.effective_batch
    if eb is None or not ms:
        return ""
    return f"{eb / (ms / 1e3):,.0f}"


def before_after_table(r: AutofixResult) -> Table:
    """Baseline and tuned: measured step, throughput, speedup; the step model's predicted
    tuned step beside the measured one when every kept fix had a prediction, its speedup
    with a range as in the decisions table where :func:`_tuned_range` gives one."""
    t = Table(title="before / after", title_justify="left")
    f = r.final
    pred = getattr(r, "predicted_tuned_ms", None) if f is not None else None
    cols = ["", "config", "ms / step", *(["predicted ms / step"] if pred else []),
            "samples / s", "vs baseline"]
    for col in cols:
        t.add_column(col, justify="right" if "/" in col else "left")
    if f is None or f.interval is None:
        fitted = bool(r.original.describe_change(r.baseline))  # made to fit memory
        t.add_row("baseline = tuned", escape(_cfg_text(r.baseline, r.original)),
                  _ms(r.tuned_ms), _per_s(r.baseline, r.tuned_ms),
                  "the fit to memory only: no speed fix was kept" if fitted
                  else "no fix was kept")
        return t
    extra = [""] if pred else []
    t.add_row("baseline", escape(_cfg_text(r.baseline, r.original)), _ms(f.base_ms), *extra,
              _per_s(r.baseline, f.base_ms), "1.00x")
    if pred and f.base_ms:
        x = f.base_ms / pred
        extra = [f"{_ms(pred)} ({_predicted(x, _tuned_range(r, x))})"]
    t.add_row(Text("tuned", style="bold green"), escape(_cfg_text(r.best, r.baseline)),
              _ms(f.cand_ms), *extra, _per_s(r.best, f.cand_ms),
              Text(f"{f.interval}", style="bold green" if f.interval.lo > 1 else "yellow"))
    return t


def _cfg_text(cfg: Any, ref: Any) -> str:
    d = ref.describe_change(cfg)
    loader = f"num_workers={cfg.num_workers}"
    if cfg.batch_size:
        loader += f", batch {cfg.batch_size}"
        if cfg.grad_accum_steps > 1:
            loader += f" x {cfg.grad_accum_steps}"
    return d if d else loader


def bound_table(r: AutofixResult) -> Table | None:
    b = r.bound
    if b is None:
        return None
    t = Table(title="speed of light (the step is no faster than compute alone or input alone)",
              title_justify="left")
    for col in ("", "ms / step", "note"):
        t.add_column(col, justify="right" if col == "ms / step" else "left")
    t.add_row("compute only", _ms(b.compute_ms), "one batch, already on the device, reused")
    t.add_row("input only", _ms(b.data_ms),
              f"the DataLoader iterated alone (num_workers={b.config.num_workers})")
    t.add_row(Text("bound", style="bold"), _ms(b.bound_ms), f"limited by {b.limited_by}")
    tuned = r.tuned_ms
    if tuned:
        left = tuned - b.bound_ms
        # within the gain autofix keeps a change for, the tuned step is at its bound; well
        # below it the bound's own timing met a busier moment than the tuned rounds
        note = (f"{b.bound_ms / tuned:.0%} of the bound's speed: {left:.2f} ms / step left"
                if left > 0 else "at the bound (within measurement noise)"
                if tuned >= b.bound_ms / (1 + r.min_gain) else
                f"{b.bound_ms / tuned:.2f}x faster than its bound: the bound's timing met a "
                "busier moment, read it with care")
        t.add_row("tuned", _ms(tuned), note + " (same rounds as the bound)")
    return t


def parts(r: AutofixResult) -> list[Any]:
    head = Text()
    head.append("autofix ", style="bold")
    trials = f"{r.trials} trial{'s' if r.trials != 1 else ''}"
    head.append(f"{trials} in {r.elapsed_s:.1f} s on {r.device} "
                f"({r.cpus} CPUs usable); kept: {', '.join(r.kept_changes) or 'nothing'}")
    # no fix named, none tried: a line instead of a table with no rows
    table = decisions_table(r) if r.decisions else Text(
        "no fix to try: the diagnosis named none that autofix can apply", style="green")
    out: list[Any] = [head, table, before_after_table(r)]
    bt = bound_table(r)
    if bt is not None:
        out.append(bt)
    if r.code:
        out.append(Panel(Syntax(r.code, "python", theme="ansi_dark", word_wrap=True),
                         title="the change by hand", title_align="left"))
    for n in r.notes:
        out.append(Text(f"note: {n}", style="dim"))
    return out


def print_report(r: AutofixResult, console: Any = None) -> None:
    emit(Group(*parts(r)), console)


def render(r: AutofixResult, *, width: int = 120, color: bool = False) -> str:
    buf = io.StringIO()
    c = Console(file=buf, width=width, color_system="standard" if color else None,
                highlight=False, force_terminal=color)
    c.print(Group(*parts(r)))
    return plain_text(buf.getvalue())


__all__ = ["before_after_table", "bound_table", "decisions_table", "print_report", "render"]
