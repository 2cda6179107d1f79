"""analyze(): trace files -> metrics -> rules -> Report. The CLI calls the same function."""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine import Finding, NotEvaluated, Rule, evaluate, load_rules, severity_rank
from .errors import TraceError
from .metrics import CATALOG, compute_all
from .metrics.core import CATALOG as TRACE_CATALOG
from .metrics.core import MetricSet
from .trace import find_trace_files, read_trace

SCHEMA_VERSION = 1
_PARALLEL_MIN_BYTES = 16 * 2**20


@dataclass
class RankResult:
    path: str
    rank: int | None
    metrics: dict[str, Any]
    series: dict[str, list[float]]
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "path": self.path, "metrics": self.metrics, "series": self.series}


@dataclass
class Report:
    """What analysis found: metrics, findings (worst first), rules not evaluated, notes."""

    source: list[str]
    ranks: list[RankResult]
    metrics: dict[str, Any]
    findings: list[Finding]
    not_evaluated: list[NotEvaluated]
    notes: list[str] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=dict)
    samples: dict[str, Any] | None = None

    def worst(self) -> str | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=severity_rank)

    def at_least(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if severity_rank(f.severity) >= severity_rank(severity)]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "ranks": [r.to_json() for r in self.ranks],
            "metrics": self.metrics,
            "units": {k: CATALOG[k][0] for k in self.metrics if k in CATALOG},
            "findings": [f.to_json() for f in self.findings],
            "not_evaluated": [n.to_json() for n in self.not_evaluated],
            "notes": self.notes,
        }

    def render_text(self, *, width: int = 110, color: bool = False) -> str:
        from .report.text import render

        return render(self, width=width, color=color)

    def print(self, console: Any = None) -> None:
        from .report.text import print_report

        print_report(self, console)

    def __str__(self) -> str:
        return self.render_text()


def _analyze_file(path: str) -> tuple[str, int | None, MetricSet]:
    t = read_trace(path)
    from .metrics.core import compute

    return path, t.rank, compute(t)


def _read_all(files: list[Path]) -> list[tuple[str, int | None, MetricSet]]:
    total = sum(f.stat().st_size for f in files)
    workers = min(len(files), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else (os.cpu_count() or 1))
    if len(files) > 1 and workers > 1 and total >= _PARALLEL_MIN_BYTES:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(_analyze_file, map(str, files)))
    return [_analyze_file(str(f)) for f in files]


def _run_extras(files: list[Path], source: list[Path]) -> tuple[dict | None, dict | None]:
    """context.json and samples of a run folder (written by `with diagnose(...)`)."""
    try:
        from .capture.runfolder import load_context, load_samples
    except ImportError:  # pragma: no cover - capture not installed
        return None, None
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
) -> Report:
    """Analyze trace files (a file, a folder, a run folder, or several) into a Report."""
    srcs = [Path(source)] if isinstance(source, str | Path) else [Path(s) for s in source]
    rules = rules if rules is not None else load_rules(extra_rules)
    try:
        files = find_trace_files(srcs)
    except TraceError:
        # A run folder whose run failed before the profiled steps (e.g. out of memory in
        # the first step) has context and samples but no trace: evaluate what it holds.
        if len(srcs) == 1 and srcs[0].is_dir() and context is None and samples is None:
            ctx, smp = _run_extras([], srcs)
            if ctx is not None:
                return _report_without_trace(srcs[0], ctx, smp, rules)
        raise
    if context is None and samples is None:
        context, samples = _run_extras(files, srcs)
    results = _read_all(files)
    ranks: list[RankResult] = []
    all_findings: list[tuple[int | None, Finding]] = []
    not_eval: dict[str, NotEvaluated] = {}
    for path, rank, ms in results:
        values = compute_all(ms, context, samples)
        f, ne = evaluate([r for r in rules if r.scope == "rank"], values)
        all_findings.extend((rank, x) for x in f)
        for n in ne:
            not_eval.setdefault(n.rule, n)
        ranks.append(RankResult(path, rank, values, ms.series, ms.notes))
    merged = _merge_findings(all_findings, multi=len(ranks) > 1)
    fired = {f.rule for f in merged}
    not_evaluated = [n for k, n in sorted(not_eval.items()) if k not in fired]
    notes: list[str] = []
    for r in ranks:
        for n in r.notes:
            line = f"{Path(r.path).name}: {n}" if len(ranks) > 1 else n
            if line not in notes:
                notes.append(line)
    try:
        from .metrics.samples import samples_notes

        notes.extend(samples_notes(samples))
    except ImportError:  # pragma: no cover
        pass
    metrics = ranks[0].metrics if len(ranks) == 1 else _merge_metrics(ranks)
    series = ranks[0].series if len(ranks) == 1 else {}
    return Report(
        source=[str(s) for s in srcs],
        ranks=ranks,
        metrics=metrics,
        findings=merged,
        not_evaluated=not_evaluated,
        notes=notes,
        series=series,
        samples=samples,
    )


def _report_without_trace(run_dir: Path, ctx: dict, smp: dict | None, rules: list[Rule]) -> Report:
    values = compute_all(MetricSet(values=dict.fromkeys(TRACE_CATALOG)), ctx, smp)
    findings, not_evaluated = evaluate([r for r in rules if r.scope == "rank"], values)
    notes = ["no steps were profiled (the run ended before the profiled window): "
             "only rules on the run's context and samples were evaluated"]
    try:
        from .metrics.samples import samples_notes

        notes.extend(samples_notes(smp))
    except ImportError:  # pragma: no cover
        pass
    return Report(source=[str(run_dir)], ranks=[], metrics=values, findings=findings,
                  not_evaluated=not_evaluated, notes=notes, samples=smp)


def _merge_findings(items: list[tuple[int | None, Finding]], *, multi: bool) -> list[Finding]:
    """One finding per rule; across ranks the worst one speaks, naming the ranks affected."""
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
        out.append(f)
    out.sort(key=lambda f: (-severity_rank(f.severity), -(f.estimated_gain or 0.0), f.rule))
    return out


def _merge_metrics(ranks: list[RankResult]) -> dict[str, Any]:
    """Run-level metrics over ranks: the mean of numbers, the common value of the rest."""
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
    out["rank_count"] = len(ranks)
    return out
