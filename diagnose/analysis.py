"""The analysis pipeline: trace files -> metrics -> rules -> :class:`~diagnose.result.Analysis`.

``diagnose.analyze`` (diagnose/api.py) wraps its result in the printable Report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import model_apart
from .errors import DiagnoseError, TraceError
from .fixes import FIXES
from .fixes.findings import predict_findings, sort_findings
from .fixes.for_run import code_for_run, run_config
from .fixes.peaks import predict_peaks
from .memory import memory_section
from .metrics import compute_all
from .metrics.context import unprofiled_step_ms
from .metrics.context.overhead import overhead_note
from .metrics.core import CATALOG as TRACE_CATALOG
from .metrics.core import MetricSet
from .metrics.idle import host_ahead
from .metrics.memory import section_metrics
from .metrics.ranks import RUN_CATALOG, SPREAD_EVIDENCE, run_metrics
from .metrics.samples import samples_notes
from .result import SPANS_NOTE, Analysis, RankResult
from .rules.engine import Finding, NotEvaluated, Rule, evaluate, load_rules, severity_rank
from .runfolder import context_unreadable, load_context, load_samples, rank_context
from .set_aside import without_empty, without_unreadable
from .stepmodel import MODEL_TABLE
from .stepmodel.prediction import attach_models, predictor_for
from .trace import find_trace_files, read_trace
from .trace.grouping import (
    Declared,
    Group,
    Unit,
    declared_rank,
    group_folder,
    group_loose,
    process_spans,
    split_units,
)
from .trace.inflate import is_gzip
from .trace.parallel import BrokenProcessPool, fork_pool
from .values import usable_cpus

# Read several traces in a process pool once the files other than the largest add up to
# this much: below it the pool's start costs more than it saves (benchmarks/parse_ranks.py).
_PARALLEL_MIN_BYTES = 4 * 2**20
MEMORY_TABLE = "memory"  # a trace's memory events (diagnose/memory/trace.py), per rank


def _analyze_file(path: str, workers: int | None = None, max_steps: int | None = None,
                  grads_set_to_none: bool | None = None
                  ) -> tuple[str, int | None, MetricSet, Declared | None]:
    """One trace's metrics, its own rank (distributedInfo, else its file name) and the rank
    and world size its distributedInfo declares (see diagnose.trace.grouping).
    ``grads_set_to_none``: what the capture saw of the gradients (:func:`grads_cleared`)."""
    t = read_trace(path, workers=workers)
    from .metrics.ranks import compute_rank
    ms, model, mem = model_apart.beside(  # the model beside the metrics, on a large trace
        t, max_steps, workers, lambda: compute_rank(t, max_steps, grads_set_to_none=grads_set_to_none))
    ms.tables[MODEL_TABLE], ms.tables[MEMORY_TABLE] = model, mem  # taken out in the analysis
    return path, t.rank, ms, declared_rank(t)


def whole_steps(context: dict | None) -> int | None:
    """How many whole steps the trace of a cut-short window holds (None: all of them)."""
    cap = context.get("capture") if isinstance(context, dict) else None
    if not isinstance(cap, dict) or cap.get("window_complete") is not False:
        return None
    n = cap.get("whole_steps")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def grads_cleared(context: dict | None) -> bool | None:
    """Whether the capture saw the gradients set to None between steps
    (``capture.step_signals.grads_set_to_none``); None where it could not tell."""
    cap = context.get("capture") if isinstance(context, dict) else None
    sig = cap.get("step_signals") if isinstance(cap, dict) else None
    got = sig.get("grads_set_to_none") if isinstance(sig, dict) else None
    return got if isinstance(got, bool) else None


#: the share of all the CPUs' time the hypervisor took while the job ran (steal) from which
#: the report says so: a threshold for a note, read by nothing else
STEAL_NOTE_FRAC = 0.05


def capture_notes(context: dict | None, metrics: dict[str, Any]) -> list[str]:
    """What the capture itself noted (a cut-short window, a shortened schedule, hooks that
    failed) and how much the profiler slowed the steps it recorded."""
    cap = context.get("capture") if isinstance(context, dict) else None
    notes = [n for n in (cap.get("notes") or []) if isinstance(n, str)] if isinstance(
        cap, dict) else []
    overhead = overhead_note(metrics)
    if overhead is not None:
        notes.append(overhead)
    steal = metrics.get("host_steal_frac")
    if isinstance(steal, int | float) and steal >= STEAL_NOTE_FRAC:
        notes.append(
            f"the hypervisor took {steal:.0%} of the CPUs' time while the job ran (steal: "
            "this machine's CPUs are shared with other machines): step times, the probes "
            "after the loop and so the predictions move with their load; compare runs made "
            "when it is quieter, or let autofix measure")
    ahead = host_ahead(metrics)
    if ahead is not None:
        pace, host = ahead
        notes.append(
            f"the host ran ahead of the GPU: each profiled step launched {pace:.2f} ms of "
            f"device work, in host steps of {host:.2f} ms (the loop does not wait for the "
            "GPU). The job runs at the GPU's pace once its launch queue fills; the profiled "
            "step times and shares are the host's window")
    return notes


_GZ_RATIO = 8  # a gzipped trace holds at least ~8x its size in JSON (7-30x in shared/traces)


def _work_bytes(f: Path) -> int:
    """About how much JSON reading ``f`` decodes: its size, times _GZ_RATIO when gzipped."""
    try:
        gz = is_gzip(f)
        return f.stat().st_size * (_GZ_RATIO if gz else 1)
    except OSError:
        return 0  # the reader reports it


def _read_file(path: str, workers: int | None = None, max_steps: int | None = None,
               grads_set_to_none: bool | None = None
               ) -> tuple[str, int | None, MetricSet, Declared | None] | TraceError:
    """:func:`_analyze_file`, or the TraceError that says why the trace cannot be read
    (naming ``path``, the file as the analysis holds it)."""
    try:
        return _analyze_file(path, workers, max_steps, grads_set_to_none)
    except TraceError as e:
        return e if e.path == path else TraceError(path, e.problem)


def _read_all(files: list[Path], steps: list[int | None] | None = None,
              cleared: list[bool | None] | None = None
              ) -> list[tuple[str, int | None, MetricSet, Declared | None] | TraceError]:
    """Read and measure each trace (its whole ``steps`` and gradients ``cleared``: see
    :func:`_analyze_file`), or say why it cannot be read; several in a process pool once
    they are big enough that parallel work outweighs starting the pool
    (benchmarks/parse_ranks.py measures it)."""
    steps = steps if steps is not None else [None] * len(files)
    cleared = cleared if cleared is not None else [None] * len(files)
    sizes = sorted((_work_bytes(f) for f in files), reverse=True)
    workers = min(len(files), usable_cpus())
    # the pool pays off when the work beyond the largest file (which bounds the parallel
    # time) is large enough: total minus largest, not the total alone
    pool = (fork_pool(workers) if len(files) > 1 and workers > 1
            and sum(sizes[1:]) >= _PARALLEL_MIN_BYTES else None)
    if pool is not None:
        try:
            with pool:
                # one file per process: no second level of processes inside a file's read
                return list(pool.map(_read_file, map(str, files), [1] * len(files),
                                     steps, cleared))
        except BrokenProcessPool:
            pass  # a worker died (killed for memory, say): read them here instead
    return [_read_file(str(f), None, n, c)
            for f, n, c in zip(files, steps, cleared, strict=True)]


def _run_extras(files: list[Path], source: list[Path]) -> tuple[dict | None, dict | None]:
    """context.json and samples of a run folder (written by `with diagnose(...)`)."""
    dirs = {p for p in source if p.is_dir()} | {f.parent for f in files}
    for d in sorted(dirs):
        ctx, smp = load_context(d), load_samples(d)
        if ctx is not None or smp is not None:
            return ctx, smp
    return None, None


def analyze(
    source: str | Path | Iterable[str | Path],
    *,
    context: dict | None = None,
    samples: dict | None = None,
    extra_rules: Iterable[str | Path] | None = None,
    rules: list[Rule] | None = None,
    as_ranks: bool = False,
) -> Analysis:
    """Analyze trace files (a file, a folder, a run folder, or several) that hold one run
    into an Analysis; the profiled spans of one process (a tensorboard_trace_handler
    folder) give the newest of those with the most steps, with a note; sources holding
    several runs raise a DiagnoseError that says so (:func:`analyze_runs` gives one
    Analysis per run)."""
    runs = analyze_runs(source, context=context, samples=samples, extra_rules=extra_rules,
                        rules=rules, as_ranks=as_ranks)
    spans = process_spans([s for r in runs for s in r.source]) if len(runs) > 1 and all(
        len(r.source) == 1 for r in runs) else None
    if spans is not None:  # a process's profiled spans: the one with most steps, the newest
        order = {p: i for i, p in enumerate(spans)}
        run = max(runs, key=lambda r: (_steps(r), order[Path(r.source[0])]))
        run.notes.insert(0, f"{len(runs)} {SPANS_NOTE} "
                            f"(tensorboard_trace_handler's files): "
                            f"{Path(run.source[0]).name}, the newest of those with the most "
                            "steps, is the one analysed (`torch-diagnose analyze` reports "
                            "each)")
        run.source = [str(s) for s in _sources(source)]
        return run
    if len(runs) > 1:
        raise DiagnoseError(
            f"{len(runs)} separate runs in {', '.join(str(p) for p in _sources(source))} "
            f"({'; '.join(', '.join(r.source) for r in runs)}): pass one of them, e.g. "
            f"{runs[-1].source[0]} (a tensorboard_trace_handler folder holds a file per "
            "profiled span); `torch-diagnose analyze` reports each (in Python: analyze_runs); "
            "files that are the ranks of one job: `analyze --as-ranks` (as_ranks=True)")
    return runs[0]


def _steps(r: Analysis) -> int:
    n = r.metrics.get("step_count")
    return n if isinstance(n, int) else 0


def _sources(source: str | Path | Iterable[str | Path]) -> list[Path]:
    return [Path(source)] if isinstance(source, str | Path) else [Path(s) for s in source]


def analyze_runs(
    source: str | Path | Iterable[str | Path],
    *,
    context: dict | None = None,
    samples: dict | None = None,
    extra_rules: Iterable[str | Path] | None = None,
    rules: list[Rule] | None = None,
    as_ranks: bool = False,
) -> list[Analysis]:
    """One Analysis per run that the sources hold, in order (see diagnose.trace.grouping:
    files are ranks of one run only when they say so; a folder of run folders gives its runs
    newest first). ``as_ranks``: the files outside run folders are ranks of one run (their
    own ranks, or numbered in the order given). ``context``/``samples`` apply to every run."""
    srcs = _sources(source)
    rules = rules if rules is not None else load_rules(extra_rules)
    if as_ranks:  # the reader reads a file named twice once: one file is one rank
        named = [p.resolve() for p in srcs if p.is_file()]
        twice = next((p for p in named if named.count(p) > 1), None)
        if twice is not None:
            raise DiagnoseError(f"--as-ranks: {twice.name} is given twice: one file cannot "
                                "be two ranks")
    try:
        files = find_trace_files(srcs)
    except TraceError:
        # A run folder whose run failed before the profiled steps (e.g. out of memory in
        # the first step) has context and samples but no trace: evaluate what it holds.
        if len(srcs) == 1 and srcs[0].is_dir() and context is None and samples is None:
            ctx, smp = _run_extras([], srcs)
            if ctx is not None:
                return [with_fix_code(_report_without_trace(srcs[0], ctx, smp, rules), ctx)]
        raise
    given = context is not None or samples is not None
    units = split_units(srcs, files)
    extras = {id(u): (context, samples) if given or u.folder is None
              else _run_extras(u.files, [u.folder]) for u in units}
    cut = {id(u): whole_steps(extras[id(u)][0]) for u in units}
    todo = [f for u in units if not (cut[id(u)] == 0 and len(u.files) == 1) for f in u.files]
    steps = {f: cut[id(u)] for u in units for f in u.files}
    none = {f: grads_cleared(extras[id(u)][0]) for u in units for f in u.files}
    got = _read_all(todo, [steps[f] for f in todo], [none[f] for f in todo])
    units, unreadable = without_unreadable(units, [r for r in got if isinstance(r, TraceError)],
                                           named=[s for s in srcs if s.is_file()])
    reads = {Path(r[0]): r for r in got if not isinstance(r, TraceError)}
    units, set_aside = without_empty(units, reads)
    set_aside = unreadable + set_aside
    runs: list[Analysis] = []
    for u in units:
        ctx, smp = extras[id(u)]
        if cut[id(u)] == 0 and len(u.files) == 1:  # the loop ended inside the first step
            where = u.folder or u.files[0]
            runs.append(_report_without_trace(where, ctx or {}, smp, rules, cut_short=True))
            continue
        for g in _groups(u, [reads[f] for f in u.files], as_ranks):
            whole = g.folder is not None and len(g.files) == len(u.files)
            src = [str(g.folder)] if whole else [str(f) for f in g.files]
            runs.append(_analyze_group(g, src, [reads[f] for f in g.files], ctx, smp, rules,
                                       per_rank=not given))
    if len(runs) == 1:
        runs[0].source = [str(s) for s in srcs]
    else:  # a run that is all of one folder given is named by the folder, as it is alone
        for d in (s for s in srcs if s.is_dir()):
            inside = {str(f) for f in files if d in f.parents}
            for r in runs:
                if inside and set(r.source) == inside:
                    r.source = [str(d)]
    unread = [n for d in dict.fromkeys([*(u.folder for u in units if u.folder is not None),
                                        *(s for s in srcs if s.is_dir())])
              if not given and (n := context_unreadable(d)) is not None]
    for r in runs:
        r.notes[:0] = [*unread, *set_aside]
    return runs


def _groups(u: Unit, reads: list[tuple[str, int | None, MetricSet, Declared | None]],
            as_ranks: bool) -> list[Group]:
    own = [r[1] for r in reads]
    if u.folder is not None:
        return group_folder(u, own)
    return group_loose(u.files, [r[3] for r in reads], own, as_ranks=as_ranks)


def _analyze_group(g: Group, src: list[str],
                   reads: list[tuple[str, int | None, MetricSet, Declared | None]], context: dict | None, samples: dict | None, rules: list[Rule], *,
                   per_rank: bool) -> Analysis:
    """One run's report from its files' metrics, each rank labelled by the group's rank."""
    ranks: list[RankResult] = []
    models = [(rank, ms.tables.pop(MODEL_TABLE, None))
              for (_path, _own, ms, _decl), rank in zip(reads, g.ranks, strict=True)]
    memory: list[dict[str, Any] | None] = []
    for (path, _own, ms, _decl), rank, (_, model) in zip(reads, g.ranks, models, strict=True):
        ctx, smp = (_rank_extras(Path(path), rank, context, samples) if per_rank
                    else (context, samples))
        values = compute_all(ms, ctx, smp)
        memory.append(_memory(ctx, ms.tables.pop(MEMORY_TABLE, None), values))
        if rank is not None:
            values["rank"] = rank
        gains = _guarded_gains(values, model, ctx, rules) if len(reads) > 1 else {}
        ranks.append(RankResult(path, rank, values, ms.series, ms.notes, ms.tables, gains))
    report = report_from_ranks(src, ranks, rules=rules, samples=samples)
    report.memory = memory[0] if memory else None
    report.notes[:0] = [*g.notes, *capture_notes(context, report.metrics)]
    predictor = attach_models(report, models)
    if len(ranks) == 1:  # many ranks: no predictions, as rank 0 of a live run reports them
        predict_findings(report.findings, predictor, run_config(context, report.metrics),
                         report.metrics, FIXES)
        sort_findings(report.findings)
        report.predictor = None if isinstance(predictor, str) else predictor
    predict_peaks(report.findings, report.memory, report.metrics)
    clock = unprofiled_step_ms(context)
    if clock:  # the per-step spread of the headline step time (compare's interval reads it)
        report.series["step_unprofiled_ms"] = [round(x, 4) for x in clock]
    return with_fix_code(report, context)


def _memory(context: dict | None, trace: dict[str, Any] | None, values: dict[str, Any]
            ) -> dict[str, Any] | None:
    """The rank's memory section (diagnose/memory/section.py); its metrics join ``values``."""
    step = values.get("step_time_unprofiled_median_ms") or values.get("step_time_median_ms")
    sec = memory_section(context, trace, step if isinstance(step, int | float) else None,
                         values.get("dataloader_batch_size"))
    dev = values.get("device_memory_bytes")
    values.update(section_metrics(sec, dev if isinstance(dev, int) else None))
    return sec


def rank_gains(values: dict[str, Any], model: Any, context: dict | None,
               rules: list[Rule]) -> dict[str, float]:
    """{rule: the share of one rank's step its own step model predicts the rule's best fix
    saves}, as that rank's report alone would grade its findings. A many-rank report
    predicts no fix (a change is made on every rank at once, and a rank's step waits on
    the others), but grades each rank's findings by these before it merges them, so that
    a rule's raw share (an upper bound) does not grade it where the model says less is at
    stake. Rules whose time at stake no prediction set are left out."""
    predictor = predictor_for(model, values)
    if isinstance(predictor, str):
        return {}
    found, _ = evaluate([r for r in rules if r.scope == "rank"], values)
    own = {f.rule: f.estimated_gain for f in found}
    predict_findings(found, predictor, run_config(context, values), values, FIXES)
    return {f.rule: f.estimated_gain for f in found
            if f.estimated_gain is not None and f.estimated_gain != own[f.rule]}


def _guarded_gains(values: dict[str, Any], model: Any, context: dict | None,
                   rules: list[Rule]) -> dict[str, float]:
    """:func:`rank_gains`, none where a prediction fails: the rank's findings keep their
    rules' own time at stake, and the report still comes."""
    try:
        return rank_gains(values, model, context, rules)
    except Exception:  # a prediction's defect must not cost the many-rank report
        return {}


def _comm_itself(f: Finding, run: dict[str, Any]) -> None:
    """A communication finding of one of many ranks, graded by what communication itself
    costs: the exposed share of the rank that waits least in its collectives (the others'
    excess is waiting for a slower rank, which no overlap of communication removes: IM001's)."""
    least = run.get("rank_comm_exposed_frac_min")
    who = run.get("rank_comm_exposed_frac_min_rank")
    if (f.category == "communication" and isinstance(least, float)
            and f.estimated_gain is not None and least < f.estimated_gain):
        f.take_gain(least, by=f"the communication itself: rank {who}, which waits least in "
                              "its collectives, has that much of its step exposed (the rest "
                              "is waiting for a slower rank)")


def with_fix_code(a: Analysis, context: dict | None) -> Analysis:
    """Each finding's fixes as code for the run (:func:`diagnose.fixes.for_run.code_for_run`:
    its own DataLoader and optimizer, from context.json or what a saved trace shows)."""
    code_for_run(a.findings, a.metrics, context)
    return a


def report_from_ranks(
    source: list[str],
    ranks: list[RankResult],
    *,
    rules: list[Rule] | None = None,
    samples: dict | None = None,
) -> Analysis:
    """Evaluate the rules over per-rank metrics already computed: one report for the run.

    With two or more ranks, the run-scope metrics (spread across ranks, straggler) are
    computed from the ranks' metrics and the run-scope rules evaluated on them; rank rules
    see them too (for hints). Rank 0 of a live distributed run calls this with the
    summaries it gathered, without reading the other ranks' traces.
    """
    rules = rules if rules is not None else load_rules()
    multi = len(ranks) > 1
    if multi:
        ranks = _labelled(ranks)
    run = _merge_metrics(ranks) if multi else (ranks[0].metrics if ranks else {})
    run_only = {k: run[k] for k in RUN_CATALOG if k in run} if multi else {}
    all_findings: list[tuple[int | None, Finding]] = []
    not_eval: dict[str, NotEvaluated] = {}
    for r in ranks:
        values = {**r.metrics, **run_only} if multi else r.metrics
        found, skipped_here = evaluate([x for x in rules if x.scope == "rank"], values)
        for f in found:
            if multi:
                _comm_itself(f, run_only)
            if multi and f.rule in r.gains:
                by = f"rank {r.rank}'s own step model (fixes are not predicted across ranks)"
                f.take_gain(r.gains[f.rule], by=by)
                if f.graded_down_from is None:
                    f.hints.append(f"{f.estimated_gain:.1%} of step time at stake by {by}")
        all_findings.extend((r.rank, x) for x in found)
        for ne in skipped_here:
            not_eval.setdefault(ne.rule, ne)
    merged = _merge_findings(all_findings, multi=multi, run=run)
    run_rules = [x for x in rules if x.scope == "run"]
    if multi:
        run_findings, run_skipped = evaluate(run_rules, run)
        for rf in run_findings:
            who = run.get("straggler_rank") if rf.category == "imbalance" else None
            rf.ranks = [who] if isinstance(who, int) else None
            _add_spread(rf, run)
        merged = sorted(merged + run_findings, key=lambda x: (
            -severity_rank(x.severity), -(x.estimated_gain or 0.0), x.rule))
        for skipped in run_skipped:
            not_eval.setdefault(skipped.rule, skipped)
    else:
        for rule in run_rules:
            not_eval.setdefault(rule.id, NotEvaluated(
                rule.id, "needs 2 or more ranks analysed together (one trace per rank)"))
    fired = {f.rule for f in merged}
    not_evaluated = [n for k, n in sorted(not_eval.items()) if k not in fired]
    notes: list[str] = []
    for r in ranks:
        for n in r.notes:
            line = f"{Path(r.path).name}: {n}" if multi else n
            if line not in notes:
                notes.append(line)
    notes.extend(samples_notes(samples))
    series = ranks[0].series if len(ranks) == 1 else {}
    return Analysis(
        source=source,
        ranks=ranks,
        metrics=run,
        findings=merged,
        not_evaluated=not_evaluated,
        notes=notes,
        series=series,
        samples=samples,
    )


def _labelled(ranks: list[RankResult]) -> list[RankResult]:
    """Ranks of one run, each with a label: a rank not known takes the lowest number no
    other rank has, in order, so that the table, findings and JSON all name it the same."""
    if all(r.rank is not None for r in ranks):
        return ranks
    taken = {r.rank for r in ranks}
    free = (i for i in range(len(ranks) + len(taken)) if i not in taken)
    return [r if r.rank is not None else dataclasses.replace(r, rank=next(free)) for r in ranks]


def _rank_extras(path: Path, rank: int | None, context: dict | None,
                 samples: dict | None) -> tuple[dict | None, dict | None]:
    """The context and samples of one rank of a distributed run folder (rank 0's, or the
    folder's only ones, otherwise)."""
    if not rank:
        return context, samples
    smp = load_samples(path.parent, rank=rank)
    return rank_context(context, rank), smp if smp is not None else samples


def _report_without_trace(run_dir: Path, ctx: dict, smp: dict | None, rules: list[Rule],
                          *, cut_short: bool = False) -> Analysis:
    values = compute_all(MetricSet(values=dict.fromkeys(TRACE_CATALOG)), ctx, smp)
    memory = _memory(ctx, None, values)
    findings, not_evaluated = evaluate([r for r in rules if r.scope == "rank"], values)
    for f in findings:  # no trace, no step model: the memory what-ifs still predict a peak
        f.predictions = dict.fromkeys(f.fixes, "not predicted: no steps were profiled, so "
                                      "the step model has no trace to replay")
    predict_peaks(findings, memory, values)
    cap = ctx.get("capture") if isinstance(ctx, dict) else None
    untold = isinstance(cap, dict) and bool(cap.get("steps_untold"))
    # a capture that could not tell the loop's steps says why in its own notes; one whose
    # profiled window opened and closed on a run that did not raise wrote a trace
    window = isinstance(cap, dict) and all(
        isinstance(cap.get(k), int | float) for k in ("active_start", "active_end"))
    if cut_short or untold:
        notes = capture_notes(ctx, values)
    elif window and not ctx.get("exception"):
        notes = [f"no trace file in {run_dir}, though its context.json says the capture "
                 "profiled its steps: the trace was moved or deleted. Only rules on the "
                 "run's context and samples were evaluated"]
    else:
        notes = ["no steps were profiled (the run ended before the profiled window): "
                 "only rules on the run's context and samples were evaluated"]
    notes.extend(samples_notes(smp))
    return Analysis(source=[str(run_dir)], ranks=[], metrics=values, findings=findings,
                    not_evaluated=not_evaluated, notes=notes, samples=smp, memory=memory)


def _merge_findings(items: list[tuple[int | None, Finding]], *, multi: bool,
                    run: dict[str, Any] | None = None) -> list[Finding]:
    """One finding per rule; across ranks the worst one speaks, naming the ranks affected
    and carrying the spread across ranks of what it is about (``run``: run metrics)."""
    if not multi:
        return [f for _, f in items]
    by_rule: dict[str, tuple[Finding, list[int]]] = {}
    for rank, f in items:
        cur = by_rule.get(f.rule)
        rl = [rank] if rank is not None else []
        if cur is None:
            by_rule[f.rule] = (f, rl)
            continue
        best, ranks = cur
        ranks.extend(rl)
        if (severity_rank(f.severity), f.estimated_gain or 0) > (
            severity_rank(best.severity), best.estimated_gain or 0):
            by_rule[f.rule] = (f, ranks)
    out = []
    for f, ranks in by_rule.values():
        f.ranks = sorted(set(ranks)) or None
        _add_spread(f, run)
        out.append(f)
    out.sort(key=lambda f: (-severity_rank(f.severity), -(f.estimated_gain or 0.0), f.rule))
    return out


def _add_spread(f: Finding, run: dict[str, Any] | None) -> None:
    """A multi-rank finding's evidence: the spread across ranks of what it is about."""
    for k in SPREAD_EVIDENCE.get(f.category, ()):
        if run is not None and run.get(k) is not None:
            f.evidence.setdefault(k, run[k])


def _merge_metrics(ranks: list[RankResult]) -> dict[str, Any]:
    """Run-level metrics over ranks: the mean of numbers, the common value of the rest, and
    the run-scope metrics of metrics/ranks.py (spread across ranks, straggler)."""
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for r in ranks for k in r.metrics))
    for k in keys:
        vals = [r.metrics.get(k) for r in ranks]
        nums = [v for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
        if nums and len(nums) == len([v for v in vals if v is not None]):
            mean = sum(nums) / len(nums)
            out[k] = round(mean) if all(isinstance(v, int) for v in nums) else round(mean, 6)
        else:
            distinct = {repr(v) for v in vals if v is not None}
            out[k] = next((v for v in vals if v is not None), None) if len(distinct) == 1 else None
    out["rank"] = None  # not one rank's any more (their ranks are in Report.ranks)
    out["rank_count"] = len(ranks)
    out.update(run_metrics([(r.rank, r.metrics) for r in ranks]))
    return out
