"""Terminal rendering of a Report with rich: summary, findings, fixes as code."""

from __future__ import annotations

import copy
import io
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..console import emit, plain_text
from ..fixes import FIXES
from ..fixes.findings import NOT_KNOWN, ON_A_BUSY_MACHINE, OWN_POOLS, WORKER_POOLS, offered
from ..fixes.unit import CANNOT_TELL, NO_MODEL
from ..metrics.context.cpu_holders import cpu_wait_holders, workers_used
from ..result import step_time
from ..rules.engine import group_not_evaluated
from ..stepmodel.epochs import run_epoch_ms
from ..stepmodel.facts import Facts
from ..stepmodel.prediction import Prediction, prediction_line
from ..stepmodel.step import step_model_line
from .markup import BREAKDOWN
from .memory_text import memory_renderables, peak_line, shows_memory, what_if_table
from .runkind import device_line, fit_not_evaluated, fit_notes

if TYPE_CHECKING:
    from ..result import Analysis, Runs

_SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _summary(report: Analysis, detail: bool = True) -> Table:
    m = report.metrics
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    src = ", ".join(report.source)
    t.add_row("source", escape(src))
    if len(report.ranks) > 1:  # as the HTML page says it: each figure a mean over ranks
        t.add_row("ranks", f"{len(report.ranks)} (figures below: the mean over ranks, "
                           "each rank's median step among them)")
    dev = device_line(m)
    if dev:
        t.add_row("device", escape(dev))
    head, window = step_lines(m, predicts(report), each=detail)
    t.add_row("step time", head)
    if window:
        t.add_row("profiled", window)
    t.add_row("step model", escape(step_model_line(report.step_model, report.step_model_why)))
    if m.get("gpu_busy_frac") is not None:
        t.add_row("GPU busy", _pct(m.get("gpu_busy_frac")))
    parts = [f"{label} {m[f'share_{c}']:.0%}" for c, label, _ in BREAKDOWN
             if isinstance(m.get(f"share_{c}"), int | float) and m[f"share_{c}"] >= 0.005]
    if parts:
        t.add_row("breakdown", ", ".join(parts) + " (of the profiled window)")
    if m.get("dataloader_share") is not None:
        t.add_row("DataLoader", _pct(m.get("dataloader_share")) + " of the profiled window"
                  + unprofiled_dl(m))
    return t


def _ms(x: Any) -> str:
    return f"{x:,.2f} ms" if isinstance(x, int | float) else "n/a"


def no_findings(m: Mapping[str, Any]) -> str:
    """The line a report with no finding gives: a run with no profiled step, or a trace
    with events no metric reads (see its note), is no bottleneck-free run, only one with
    none in what was read."""
    if not m.get("step_count"):
        return ("No findings in what this run holds: no step was profiled (the note below "
                "says why), so only the rules on its context and samples were evaluated.")
    if m.get("trace_unread_events"):
        return ("No findings in what this analysis reads: the note below names the events "
                "it does not.")
    return "No findings: nothing in this run points at a bottleneck."


#: what each of the session's own timings (``probes_ms_each``, by probe) timed, in words
PROBE_WORDS = {
    "fetches": "a batched fetch against the loader's", "workers_idle": "the workers' idle CPUs",
    "batches_in_turn": "a worker's batch", "inprocess_batch": "a batch in the loop's process",
    "cpu_capacity": "the CPUs' capacity", "worker_handover": "a batch's hand-over",
    "threads": "the compute on fewer threads", "threads_busy": "the compute beside busy CPUs",
    "worker_send": "a worker's send", "work_after_fetch": "the fetches and the work after each",
    "worker_batches": "workers' batches at once",
    "threads_in_loop": "the loop's steps on one thread",
    "cpu_autocast": "the compute without CPU autocast",
    "fork_copy": "the compute after a fork", "optimizer_step": "the optimizer's step alone",
    "fork_copy_in_loop": "the loop's steps after a fork",
    "threads_spin": "torch's threads' spin after an op"}


def _probe_words(each: str) -> str:
    """``probes_ms_each`` ("threads 0.93 s, cpu_capacity 0.10 s") with each probe named by
    what it timed; a name not known stays as it is."""
    parts = []
    for part in each.split(", "):
        name, _, took = part.partition(" ")
        parts.append(f"{PROBE_WORDS.get(name, name)} {took}".strip())
    return ", ".join(parts)


def predicts(report: Analysis) -> bool:
    """Whether a finding's fix carries a predicted step (whose start the headline names)."""
    return any(isinstance(p, Prediction) for f in report.findings
               for p in (getattr(f, "predictions", None) or {}).values())


def step_lines(m: dict[str, Any], predicted: bool = True, each: bool = True
               ) -> tuple[str, str | None]:
    """The headline step time and the profiled window's line, from a run's metrics (shared
    by the text, HTML and TensorBoard views); ``predicted``: a fix carries a prediction,
    whose starting step the headline names; ``each``: the session's own timings each, not
    only their total."""
    st = step_time(m)
    n_prof = m.get("step_count")
    window = None if n_prof is None else (
        f"{n_prof} step{'s' if n_prof != 1 else ''} ({m.get('steps_source')}), median "
        f"{_ms(m.get('step_time_median_ms'))}, p90 {_ms(m.get('step_time_p90_ms'))}")
    probes = m.get("probes_ms_total")
    if window is not None and isinstance(probes, int | float) and probes > 0:
        took = f"{probes / 1e3:.1f} s" if probes >= 100 else f"{probes:.0f} ms"
        window += f"; the session's own timings of the job took {took}"
        parts = m.get("probes_ms_each")
        if each and isinstance(parts, str) and parts:
            window += f" (spent timing {_probe_words(parts)})"
    close = m.get("capture_profiler_close_ms")
    if window is not None and isinstance(close, int | float) and close >= 100:
        window += (f"; the loop waited {close / 1e3:.1f} s as the window ended (the "
                   "profiler's stop and trace export)")
    if st["median_ms"] is None:
        return "none profiled", None
    if st["measured"] == "as profiled":
        why = ("the loop ran no step outside the profiled window to time without it"
               if m.get("context_available") else
               "a saved trace: no steps were timed without the profiler")
        return f"{_ms(st['median_ms'])} median, as profiled ({why})", window
    r = st["profiler_overhead_ratio"]
    lo, hi = m.get("step_time_unprofiled_p10_ms"), m.get("step_time_unprofiled_p90_ms")
    spread = (f", p10-p90 {lo:,.2f}-{hi:,.2f} ms" if isinstance(lo, int | float)
              and isinstance(hi, int | float) else "")
    head = (f"{_ms(st['median_ms'])} median without the profiler ({st['steps']} step"
            f"{'s' if st['steps'] != 1 else ''} timed by the session{spread})")
    if m.get("step_time_device_paced"):
        # the host's own steps were launches only: the block's time, drain included
        head += (f"; the host ran ahead of the GPU, so the steps are the GPU's pace (the "
                 f"block's time with the {_ms(m.get('step_time_unprofiled_drain_ms'))} wait "
                 "for the GPU at its end, over its steps)")
    head += (_prediction_base(m, st["median_ms"], each) if predicted
             else _mean_apart(m, st["median_ms"]))
    if window is not None and isinstance(r, int | float):
        window += f"; the profiled steps took {r:.2f}x the plain ones' time"
    return head, window


#: the predictions' starting step is named where it differs from the median by this much
BASE_NAMED = 0.01


def _mean_apart(m: dict[str, Any], median: float) -> str:
    """The unprofiled steps' mean where it is not the median shown (no prediction to start
    from it)."""
    mean = m.get("step_time_unprofiled_mean_ms")
    if not isinstance(mean, int | float) or abs(mean - median) < BASE_NAMED * median:
        return ""
    return f"; mean {_ms(mean)}" + (": some steps take longer" if mean > 1.1 * median else "")


def _prediction_base(m: dict[str, Any], median: float, each: bool = True) -> str:
    """Where the predictions' starting step is not the median shown: the mean of the
    unprofiled steps (a pause that hits some steps is the job's time), or the steady
    steps' mean with an epoch's start spread over its steps. Without ``each`` (the short
    report), only the step they start from: one figure beside the median, not three."""
    mean = m.get("step_time_unprofiled_mean_ms")
    if not isinstance(mean, int | float):
        return ""
    steady = m.get("step_time_steady_mean_ms")
    facts = Facts.from_metrics(m)
    epoch, gap = facts.epoch_boundary_per_step_ms, facts.epoch_gap_per_step_ms
    pause = "some steps take longer; " if mean > 1.1 * median else ""
    if isinstance(steady, int | float) and epoch:
        # the clock's few steps hold an epoch's start at their own rate, not the epoch's
        base = steady + epoch + gap
        if abs(base - median) < BASE_NAMED * median and abs(mean - median) < BASE_NAMED * median:
            return ""
        if not each:
            return (f"; {pause}predictions start from {_ms(base)}, the steady steps' mean with "
                    "each epoch's start spread over them")
        # IN005 counts the steps after the start too (its figure a step is larger): here
        # they are in the steady mean, and the line says so
        after = m.get("dataloader_epoch_after_ms")
        tail = ("; the steps after it, until the new workers' first batches, are in the "
                "steady mean" if isinstance(after, int | float) and after > 0 else "")
        if gap:
            tail += f"; the loop's own work between epochs, {_ms(gap)} a step"
        return (f"; mean {_ms(mean)}: {pause}predictions start from {_ms(base)}, the steady "
                f"steps' mean and an epoch's start spread over its steps ({_ms(epoch)} a step"
                f"{tail})")
    # workers that restart every epoch: their start-up, spread over the epoch's steps,
    # is in every prediction's step (the clock's steps held none)
    start = run_epoch_ms(Facts.from_metrics(m))
    base, near = mean + start, abs(mean - median) < BASE_NAMED * median
    if not each:
        if abs(base - median) < BASE_NAMED * median:
            return ""
        spread = " with the workers' start-up each epoch spread over it" if start else ""
        return (f"; {pause}predictions start from {_ms(base)}, the mean step{spread}, as a "
                "run's time is its steps' sum")
    with_start = (f"{_ms(base)}, the {'median' if near else 'mean'} with the workers' "
                  f"start-up each epoch ({_ms(start)} a step)")
    if near:
        return f"; predictions start from {with_start}" if start else ""
    said = f"; mean {_ms(mean)}" + (": some steps take longer" if mean > 1.1 * median else "")
    if start:
        return f"{said}; predictions start from {with_start}"
    if mean > 1.1 * median:  # pauses that hit some steps (a collection, a slow read)
        return f"{said}, and predictions start from the mean"
    return f"{said}, which the predictions start from"


#: from this share of the unprofiled steps waiting for a CPU the run's own processes held,
#: the DataLoader line says so beside the workers' CPUs (CF008's least wait)
OWN_WAIT_SAID = 0.05


def unprofiled_dl(m: dict[str, Any]) -> str:
    """The loader's wait without the profiler, and in the steps that began no epoch
    (what IN001/IN002 grade by) where that differs by a point or more; then what its
    workers cost the CPUs (:func:`workers_cpu`)."""
    x, steady = m.get("dataloader_wait_unprofiled_share"), m.get("dataloader_wait_steady_share")
    if not isinstance(x, int | float):
        return workers_cpu(m)
    apart = isinstance(steady, int | float) and abs(steady - x) >= 0.01
    return f"; {x:.1%} without the profiler" + (
        f" ({steady:.1%} in the steps that began no epoch)" if apart else "") + workers_cpu(m)


def workers_cpu(m: Mapping[str, Any]) -> str:
    """The CPUs the loader's workers used (over the unprofiled steps, else the profiled
    window's: :func:`~diagnose.metrics.context.cpu_holders.workers_used`), and where the
    training thread waited :data:`OWN_WAIT_SAID` of its unprofiled steps for a CPU the
    run itself held (:func:`~diagnose.metrics.context.cpu_holders.cpu_wait_holders`), that
    wait: a loader that keeps up can still take the training's CPUs."""
    (used, where), k = workers_used(m), m.get("workers_count") or m.get(
        "dataloader_num_workers")
    if used is None or not isinstance(k, int) or k <= 0:
        return ""
    out = f"; its {k} worker{'s' if k != 1 else ''} used {used:.2f} CPUs{where}"
    wait = m.get("step_cpu_wait_unprofiled_share")
    if isinstance(wait, int | float) and wait >= OWN_WAIT_SAID and not cpu_wait_holders(m)[0]:
        out += (f", and the training thread waited {wait:.0%} of its steps for a CPU the "
                "run itself held (its workers and threads)")
    return out


def _ranks_table(report: Analysis) -> Table:
    """One row per rank: step time, GPU busy, DataLoader and communication shares, overlap;
    the straggler (when a finding names it) is marked with its cause."""
    from ..metrics.ranks import rank_row

    flagged = {r for f in report.findings if f.category == "imbalance" for r in (f.ranks or ())}
    cause = report.metrics.get("straggler_cause")
    t = Table(title="Ranks (profiled steps)", title_justify="left", expand=False)
    order = sorted(report.ranks, key=lambda r: (r.rank is None, r.rank if r.rank is not None
                                                else 0, r.path))
    rows = [rank_row(r.metrics) for r in order]
    gpu = any(row["gpu_busy"] is not None for row in rows)  # no GPU column on a CPU run
    for col in ("rank", "step ms", *(("GPU busy",) if gpu else ()), "DataLoader", "comm",
                "overlap"):
        t.add_column(col, justify="right", no_wrap=True)
    if flagged:
        t.add_column("straggler", no_wrap=True)
    for i, (r, row) in enumerate(zip(order, rows, strict=True)):
        label = r.rank if r.rank is not None else i
        step = row["step_ms"]
        mark = Text(f"yes ({cause})", style="bold yellow") if label in flagged else Text("")
        t.add_row(str(label), "n/a" if step is None else f"{step:.2f}",
                  *((_pct(row["gpu_busy"]),) if gpu else ()),
                  _pct(row["dataloader"]), _pct(row["comm"]), _pct(row["overlap"]),
                  *((mark,) if flagged else ()))
    return t


def _gain_change(f: Any) -> str | None:
    """The change whose predicted step set a finding's time at stake
    (``Finding.gain_change``), as text to compare; None where another estimate set it."""
    change = getattr(f, "gain_change", None)
    return repr(sorted(change.items())) if change and f.estimated_gain else None


def _row_hints(findings: Sequence[Any], detail: bool) -> list[list[str]]:
    """Each finding's hints as its row shows them: an info finding's only with ``detail``
    (but for why it was graded down to info: its message alone can read like a warning's),
    and a hint several findings share (the machine's, the run's) in the first row only."""
    shown: set[str] = set()
    out = []
    for f in findings:
        hints = f.hints if detail or f.severity != "info" else [
            h for h in f.hints if h.startswith("info: graded down from")]
        out.append([h for h in dict.fromkeys(hints) if h not in shown])
        shown.update(hints)
    return out


def _findings_table(report: Analysis, detail: bool = True) -> Table:
    """The findings, one row each: severity, rule, category, message with its hints (an
    info finding's only with ``detail``) and the share of the step at stake; a share that
    one change sets for several findings is given once, the later rows naming the first."""
    t = Table(show_lines=False, expand=True, title="Findings", title_justify="left")
    t.add_column("severity", no_wrap=True)
    t.add_column("rule", no_wrap=True)
    t.add_column("category", no_wrap=True)
    t.add_column("finding", ratio=1)
    t.add_column("gain", justify="right", no_wrap=True)
    by_change: dict[str, str] = {}  # the change that sets a share -> the first rule it set
    for f, hints in zip(report.findings, _row_hints(report.findings, detail), strict=True):
        msg = Text(f.message)
        for h in hints:
            msg.append("\n" + h, style="dim")
        if f.ranks:
            msg.append(f"\nranks: {', '.join(map(str, f.ranks))}", style="dim")
        gain = "" if f.estimated_gain is None else _gain(f.estimated_gain, f.gain_bound)
        if (change := _gain_change(f)) is not None:
            gain = f"= {by_change[change]}" if change in by_change else gain
            by_change.setdefault(change, f.rule)
        t.add_row(Text(f.severity, style=_SEV_STYLE[f.severity]), f.rule, f.category, msg, gain)
    return t


def _gain(share: float, bound: bool) -> str:
    """A finding's time at stake as its column shows it: ``≤ 38%`` where it is what a fix
    saves at most (a prediction), ``~ 66%`` where it is the rule's own estimate; ``none``
    where no fix is predicted to save any (under half a percent)."""
    if bound and round(share, 2) <= 0:
        return "none"
    return f"{'≤' if bound else '~'} {share:.0%}"


def fix_line(f: Any, fid: str) -> str:
    """A fix's predictions in one line: the step time (the step model's), then the peak;
    where only a memory what-if predicts, its step time where it gives one."""
    p = f.predictions.get(fid)
    time = prediction_line(p) or (p if isinstance(p, str) and p.startswith(
        (NOT_KNOWN, ON_A_BUSY_MACHINE, OWN_POOLS, WORKER_POOLS)) else "")
    if not time and isinstance(p, str) and p.startswith(NO_MODEL):
        why = p.split(": ", 1)[1] if ": " in p else "the step model does not replay this change"
        time = f"not predicted: {why}; time it before and after"
    elif not time and isinstance(p, str) and p.startswith(CANNOT_TELL):  # and the reason why
        time = f"not predicted: {p[len(CANNOT_TELL):].lstrip()}"
    peak = f.peaks.get(fid)
    mem = peak_line(peak)
    if mem and not time and isinstance(peak.get("step_ms"), int | float):
        mem += f", step {peak['step_ms']:.1f} ms"
    return "; ".join(x for x in (time, mem) if x)


def fix_title(f: Any, fid: str) -> str:
    """A fix's title for the change its prediction is for (``num_workers=0`` is not
    "worker processes"); the unit's own where nothing is predicted."""
    p = f.predictions.get(fid)
    return FIXES[fid].title_for(getattr(p, "change", None))


def larger_tie(f: Any, fid: str, by_hand: bool = False) -> str | None:
    """Where the finding's first fix ``fid`` leads a tie (:func:`~diagnose.fixes.findings.
    _order`: the safer of fixes the capture cannot order) over one predicted to gain more,
    the line that names that one too; else None. ``by_hand``: autofix leaves the loader's
    workers as they are (an IterableDataset's): the user times both."""
    lead = f.predictions.get(fid)
    lead_x = getattr(lead, "speedup", None)
    for other in offered(f)[1:]:
        q = f.predictions.get(other)
        x = getattr(q, "speedup", None)
        if isinstance(lead_x, float) and isinstance(x, float) and x > lead_x and other in FIXES:
            return (f"{f.rule}, also: {fix_title(f, other)}, {prediction_line(q)}: within the "
                    "model's error of the fix above, which is the safer; try both"
                    + ("" if by_hand else ", or let autofix measure them"))
    return None


class FixPanel(Panel):
    """A fix's box: its prediction line on the bottom edge where the width holds it, else
    the box's last line, dim (an edge cuts a longer line off, and a reason why nothing is
    predicted is read in full)."""

    def __rich_console__(self, console: Any, options: Any) -> Any:
        line = self.subtitle
        width = options.max_width if self.width is None else min(self.width, options.max_width)
        if line is None or Text.from_markup(str(line)).cell_len + 6 <= width:
            yield from super().__rich_console__(console, options)
            return
        inside = copy.copy(self)
        inside.subtitle = None
        inside.renderable = Group(self.renderable, Text.from_markup(str(line), style="dim"))
        yield from Panel.__rich_console__(inside, console, options)


def _fix_panels(report: Analysis) -> list[Panel | Text]:
    panels: list[Panel | Text] = []
    shown: dict[str, str] = {}  # a panel's fix -> the rule it was shown for
    codes: dict[str, str] = {}  # a panel's code -> the rule it was shown for
    shown_for: dict[str, Any] = {}  # a panel's fix -> its finding
    for f in report.findings:
        if f.severity == "info":
            continue
        # the first fix to try, none predicted to slow the job (its hint says so);
        # `torch-diagnose rules ID` has the rest
        for fid in offered(f)[:1]:
            if fid in shown:  # said, so that a warning never ends without its fix
                panels.append(Text(f"{f.rule} fix: {fix_title(f, fid)}, as {shown[fid]}'s "
                                   "above", style="dim"))
                continue
            if fid not in FIXES:
                continue
            shown[fid] = f.rule
            fix = FIXES[fid]
            code = f.fix_code.get(fid, fix.code)
            if code in codes:  # two units that land on one change (IN001's, IN004's)
                panels.append(Text(f"{f.rule} fix: {fix_title(f, fid)}, the same change as "
                                   f"{codes[code]}'s above", style="dim"))
                continue
            codes[code] = f.rule
            panels.append(FixPanel(Syntax(code, "python", theme="ansi_dark", word_wrap=True),
                                title=f"{f.rule} fix: {escape(fix_title(f, fid))}", title_align="left",
                                subtitle=escape(fix_line(f, fid)) or None,
                                subtitle_align="left"))
            shown_for[fid] = f
            by_hand = (getattr(report, "metrics", None) or {}).get("dataloader_iterable") is True
            if (more := larger_tie(f, fid, by_hand)) is not None:
                panels.append(Text(more, style="dim"))
    # a panel that takes the workers away and one that needs them are either-or
    gone = [(g.rule, fid) for fid, g in shown_for.items()
            if getattr(g.predictions.get(fid), "change", {}).get("num_workers") == 0]
    for fid, g in shown_for.items():
        if gone and "num_workers > 0" in (FIXES[fid].needs or ""):
            panels.append(Text(f"{g.rule}'s fix needs worker processes: apply it or "
                               f"{gone[0][0]}'s num_workers=0, not both", style="dim"))
    return panels


def not_evaluated_line(group: dict[str, Any]) -> str:
    """One group of :func:`diagnose.rules.engine.group_not_evaluated` as one line: a rule alone
    with its full reason, several as ``10 rules (A, B, ...): cause``."""
    if group["count"] == 1:
        (rule, reason), = group["reasons"].items()
        return f"{rule}: {reason}"
    return f"{group['count']} rules ({', '.join(group['rules'])}): {group['cause']}"


def _left_out(report: Analysis, mem: dict[str, Any] | None, what_ifs: bool) -> list[str]:
    """What the short report leaves out of the full one, each in a few words."""
    out = []
    if isinstance(report.metrics.get("probes_ms_each"), str) and report.metrics["probes_ms_each"]:
        out.append("each probe's own time")
    if mem and not what_ifs and (n := len(what_if_table(mem)[1])):
        out.append(f"{n} memory what-if{'s' if n != 1 else ''}")
    # an info finding whose hints all show in a warning's row has none left out
    full = _row_hints(report.findings, True)
    if n := sum(1 for f, hints in zip(report.findings, full, strict=True)
                if f.severity == "info" and hints):
        out.append("an info finding's reasons" if n == 1 else f"{n} info findings' reasons")
    if n := len(report.not_evaluated):
        out.append(f"why {n} rule{'s were' if n != 1 else ' was'} not evaluated")
    return out


def renderables(report: Analysis, detail: bool = False) -> list[Any]:
    """The report's parts in order. Short (the default): what a user acts on; with
    ``detail``, all of it (each timing, every what-if, the rules not evaluated and why).
    The short report's last line says what it left out and how to see it."""
    out: list[Any] = [_summary(report, detail)]
    if len(report.ranks) > 1:
        out.append(_ranks_table(report))
    if report.findings:
        out.append(_findings_table(report, detail))
        out.extend(_fix_panels(report))
    else:
        out.append(Text(no_findings(report.metrics), style="green"))
    mem = shows_memory(report)
    # the what-ifs are planning data: shown in short beside a memory finding only
    what_ifs = detail or any(f.category == "memory" for f in report.findings)
    out.extend(memory_renderables(mem, what_ifs))
    if report.not_evaluated and detail:
        lines = Text("Not evaluated:", style="bold")
        for g in group_not_evaluated(fit_not_evaluated(report)):
            lines.append(f"\n  {not_evaluated_line(g)}", style="dim")
        out.append(lines)
    for note in fit_notes(report):
        out.append(Text(f"note: {note}", style="dim"))
    if not detail and (left := _left_out(report, mem, what_ifs)):
        src = " ".join(shlex.quote(s) for s in report.source) or "PATH"
        out.append(Text(f"more ({', '.join(left)}): torch-diagnose analyze {src} -v",
                        style="dim"))
    return out


def _console(buf: io.StringIO, width: int, color: bool) -> Console:
    return Console(file=buf, width=width, force_terminal=color, color_system="standard" if color
                   else None, highlight=False, force_jupyter=False)


def render(report: Analysis, *, width: int = 110, color: bool = False,
           detail: bool = False) -> str:
    """The report as text (:func:`renderables`: short, or in full with ``detail``)."""
    buf = io.StringIO()
    _console(buf, width, color).print(Group(*renderables(report, detail)))
    return plain_text(buf.getvalue())


def print_report(report: Analysis, console: Console | None = None, detail: bool = False) -> None:
    emit(Group(*renderables(report, detail)), console)


def runs_renderables(runs: Runs, detail: bool = False) -> list[Any]:
    """Several runs: a line saying so, then each run's report under a rule naming it."""
    from rich.rule import Rule

    out: list[Any] = [Text(runs.summary(), style="bold")]
    for i, r in enumerate(runs.runs, 1):
        # a folder of run folders gives them newest first (its note says so)
        newest = " (the newest)" if i == 1 and any(
            "newest first" in n for n in getattr(r, "notes", None) or ()) else ""
        out.append(Rule(escape(f"run {i} of {len(runs.runs)}{newest}: {', '.join(r.source)}"),
                        align="left"))
        out.extend(renderables(r, detail))
    return out


def render_runs(runs: Runs, *, width: int = 110, color: bool = False,
                detail: bool = False) -> str:
    """One report per run as text (one run: that run's report alone)."""
    if len(runs.runs) == 1:
        return render(runs.runs[0], width=width, color=color, detail=detail)
    buf = io.StringIO()
    _console(buf, width, color).print(Group(*runs_renderables(runs, detail)))
    return plain_text(buf.getvalue())


def print_runs(runs: Runs, console: Console | None = None, detail: bool = False) -> None:
    items = (renderables(runs.runs[0], detail) if len(runs.runs) == 1
             else runs_renderables(runs, detail))
    emit(Group(*items), console)


def render_rule(rule: Any) -> list[Any]:
    """`torch-diagnose rules ID`: the rule's own documentation."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("rule", f"{rule.id}  {escape(rule.title)}")
    head.add_row("category", rule.category)
    head.add_row("fires when", escape(rule.when.src))
    if rule.warning is not None:
        head.add_row("warning", escape(rule.warning.src))
    if rule.critical is not None:
        head.add_row("critical", escape(rule.critical.src))
    head.add_row("fixes", ", ".join(rule.fixes))
    head.add_row("defined in", escape(rule.source))
    out: list[Any] = [head]
    for key, title in (("detects", "What it detects"), ("why", "Why it costs time"),
                       ("fix", "How to fix"), ("false_positives", "Known false positives")):
        if not rule.docs[key] and key != "fix":  # a rule of your own may have no docs
            continue
        out.append(Text(title, style="bold underline"))
        if rule.docs[key]:
            out.append(Text(rule.docs[key]))
        if key == "fix":
            out += _fix_examples(rule.fixes)
    return out


def _fix_examples(fix_ids: Iterable[str]) -> list[Any]:
    """Each fix's code as a finding shows it where the user's objects are not known: the
    fix unit's own generic rendering, never a copy."""
    out: list[Any] = []
    for fid in fix_ids:
        fix = FIXES.get(fid)
        if fix is None:
            continue
        how = "autofix can apply it" if fix.auto else "by hand"
        out.append(Text(f"{fid}: {fix.title} ({how})", style="bold"))
        out.append(Syntax(fix.code_for(None), "python", theme="ansi_dark", word_wrap=True))
    return out
