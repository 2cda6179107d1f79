"""The rule engine: loads the declarative rule pack and turns metrics into findings.

A rule (``rules/*.toml``) names its category, a ``when`` condition, graded
``warning``/``critical`` conditions, a message template, an estimated gain, the fixes to
try, and its documentation. Conditions run in :mod:`diagnose.rules.condition`; a rule whose
metrics are missing is reported as not evaluated, never as passed.

Severity follows the time at stake: a rule's graded conditions give the most it may be
graded, and its estimated gain caps it (``warning`` needs ``WARNING_GAIN``, ``critical``
``CRITICAL_GAIN``; no estimate: ``info``), except the ``memory`` category. A fix whose
``in_place(metrics)`` gives a reason is left out with a hint, its ``instead`` fixes taking
its place; ``training_only`` rules are not evaluated on inference traces.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from ..errors import RuleError
from ..fixes import FIXES
from ..metrics import CATALOG as METRIC_CATALOG
from ..metrics.needs import why_none
from ..metrics.ranks import RANK_CATALOG, RUN_CATALOG
from ..values import as_number
from .condition import DivisionByZero, Expr, MissingMetric, compile_expr
from .message import format_message, template_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CATEGORIES = (
    "input", "transfer", "sync", "launch", "precision", "memory",
    "communication", "imbalance", "utilization", "config",
)
SEVERITIES = ("info", "warning", "critical")
_ID = re.compile(r"^[A-Z]{2,4}\d{3}$")
DOC_SECTIONS = ("detects", "why", "fix", "false_positives")

#: Least estimated gain (share of step time) for a ``warning`` and for a ``critical``.
WARNING_GAIN = 0.02
CRITICAL_GAIN = 0.15
#: Categories whose severity is not capped by the gain (a job that does not fit cannot run).
UNCAPPED = frozenset({"memory"})
INFERENCE_REASON = "training only: this looks like inference (no backward, no optimizer step)"


def known_metrics() -> frozenset[str]:
    """Every metric name a rule may use: trace, context, samples, per-rank and run metrics."""
    return frozenset(METRIC_CATALOG) | frozenset(RANK_CATALOG) | frozenset(RUN_CATALOG)


class _Hint(msgspec.Struct, forbid_unknown_fields=True):
    when: str
    text: str


class _Docs(msgspec.Struct, forbid_unknown_fields=True):
    detects: str
    why: str
    fix: str
    false_positives: str


class _RuleSpec(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    category: str
    title: str
    when: str
    message: str
    fixes: list[str]
    docs: _Docs | None = None  # what `torch-diagnose rules ID` prints: optional in your own
    gain: str | None = None  # only memory rules may leave it out (no step time to share)
    warning: str | None = None
    critical: str | None = None
    evidence: list[str] = []
    hints: list[_Hint] = []
    scope: str = "rank"  # "rank": per trace; "run": over all ranks' merged metrics
    training_only: bool = False  # not evaluated on inference traces (is_training False)
    fix_when: dict[str, str] = {}  # fix id -> the condition under which it is offered


class _PackFile(msgspec.Struct, forbid_unknown_fields=True):
    rule: list[_RuleSpec] = []


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    title: str
    when: Expr
    warning: Expr | None
    critical: Expr | None
    message: str
    gain: Expr | None
    fixes: tuple[str, ...]
    evidence: tuple[str, ...]
    hints: tuple[tuple[Expr, str], ...]
    docs: Mapping[str, str]
    source: str
    scope: str = "rank"
    training_only: bool = False
    #: fixes offered only where their condition holds (a straggler's cause, say); a
    #: condition that cannot be evaluated leaves its fix out
    fix_when: Mapping[str, Expr] = field(default_factory=dict)

    @property
    def needs(self) -> frozenset[str]:
        names = set(self.when.names)
        for e in (self.warning, self.critical):
            if e is not None:
                names |= e.names
        return frozenset(names)


@dataclass
class Finding:
    rule: str
    category: str
    severity: str
    title: str
    message: str
    evidence: dict[str, Any]
    fixes: list[str]
    estimated_gain: float | None
    hints: list[str] = field(default_factory=list)
    ranks: list[int] | None = None
    graded_down_from: str | None = None  # the rule's own grade, before the gain capped it
    fix_code: dict[str, str] = field(default_factory=dict)  # fix id -> code for this run
    # fix id -> the step model's Prediction (to_json, line) or why there is none
    predictions: dict[str, Any] = field(default_factory=dict)
    # fix id -> its predicted peak: the memory what-if of its change (fixes/catalog/memory.py
    # peak_prediction: peak_bytes, range, change, method, step_ms?) and base_bytes, the peak now
    peaks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the change whose predicted step set estimated_gain (None: another estimate set it)
    gain_change: dict[str, Any] | None = None
    # estimated_gain is the most a fix saves (a prediction, a measured share) rather than
    # the rule's own estimate from its symptom, which a fix may beat
    gain_bound: bool = False
    graded_up_from: str | None = None  # the rule's own grade, where a sure prediction raised it

    def _fix_json(self, f: str) -> dict[str, Any]:
        out = FIXES[f].to_json(self.fix_code.get(f))
        p = self.predictions.get(f)
        out["predicted"] = None if p is None or isinstance(p, str) else p.to_json()
        if p is not None and not isinstance(p, str):  # the exact change's title, as the text
            out["title"] = FIXES[f].title_for(p.change)
        out["predicted_why"] = p if isinstance(p, str) else (
            "not predicted: the step model predicts from one rank's trace" if p is None else None)
        peak = self.peaks.get(f)
        if peak is not None:
            out["predicted"] = _with_peak(out["predicted"], peak)
        return out

    def take_gain(self, gain: float, by: str = "the step model's prediction",
                  change: dict[str, Any] | None = None) -> None:
        """The time at stake from a prediction (``by`` names whose; ``change``: the change
        predicted to save it, where one did): the rule's own grade, capped by it. It is
        then what a fix saves at most (:attr:`gain_bound`), where the rule's was an
        estimate."""
        self.gain_change = change
        self.gain_bound = True
        own = self.graded_down_from or self.severity
        self.hints = [h for h in self.hints if not h.startswith(f"{self.severity}: graded down from")]
        self.estimated_gain = round(min(max(gain, 0.0), 1.0), 4)
        capped = _cap(self.category, own, self.estimated_gain)
        self.graded_down_from = own if capped != own else None
        if capped != own:
            self.hints.append(f"{capped}: graded down from {own}, {_share(self.estimated_gain)} of "
                              f"step time at stake by {by}")
        self.severity = capped

    def grade_up(self, why: str) -> None:
        """An info finding raised to warning where the step model is sure its first fix
        saves more than :data:`WARNING_GAIN` (``why``: that prediction, in words;
        :func:`diagnose.fixes.findings.predict_findings` decides): the time at stake is the
        grade's measure, and a rule's threshold on its symptom alone can miss what a fix
        also frees. Memory findings keep their grade."""
        if self.severity != "info" or self.category in UNCAPPED:
            return
        self.graded_up_from, self.severity = self.severity, "warning"
        # first among the hints: in a long cell the reason for the grade leads
        self.hints.insert(0, f"warning: graded up from info, {why}")

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "category": self.category,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "hints": self.hints,
            "evidence": self.evidence,
            "fixes": [self._fix_json(f) for f in self.fixes if f in FIXES],
            "estimated_gain": self.estimated_gain,
            "estimated_gain_bound": self.gain_bound,
            "graded_down_from": self.graded_down_from,
            "graded_up_from": self.graded_up_from,
            "ranks": self.ranks,
        }


def _with_peak(predicted: dict[str, Any] | None, peak: dict[str, Any]) -> dict[str, Any]:
    """A fix's ``predicted`` with its predicted peak merged in: ``peak_bytes``,
    ``peak_range`` and ``peak_method``, ``peak_fits`` where a budget is known, and
    ``peak_change`` where the what-if's change is not the time prediction's; without a
    time prediction, ``change`` and the peak keys."""
    keys = {"peak_bytes": peak.get("peak_bytes"), "peak_range": peak.get("range"),
            "peak_method": peak.get("method")}
    if peak.get("fits") is not None:
        keys["peak_fits"] = peak["fits"]
    if predicted is None:
        return {"change": peak.get("change"), **keys}
    if peak.get("change") != predicted.get("change"):
        keys["peak_change"] = peak.get("change")
    return {**predicted, **keys}


@dataclass
class NotEvaluated:
    """A rule this input cannot evaluate: ``reason`` names the metric it needs and why it
    is missing; ``cause`` is the why alone (default: the reason), so that rules missing
    different metrics for the same cause (no GPU activity...) group together."""

    rule: str
    reason: str
    cause: str = ""

    def __post_init__(self) -> None:
        if not self.cause:
            self.cause = self.reason

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "reason": self.reason}


def group_not_evaluated(items: Iterable[NotEvaluated]) -> list[dict[str, Any]]:
    """The rules not evaluated grouped by cause, largest group first: ``cause``, ``count``,
    ``rules`` (ids, sorted) and ``reasons`` (rule id -> its full reason)."""
    groups: dict[str, list[NotEvaluated]] = {}
    for n in items:
        groups.setdefault(n.cause, []).append(n)
    out = [{"cause": cause, "count": len(ns), "rules": sorted(n.rule for n in ns),
            "reasons": {n.rule: n.reason for n in sorted(ns, key=lambda n: n.rule)}}
           for cause, ns in groups.items()]
    return sorted(out, key=lambda g: (-g["count"], g["cause"]))


def severity_rank(sev: str) -> int:
    return SEVERITIES.index(sev)


# ------------------------------------------------------------------ loading
def builtin_rules_dir() -> Path:
    """The rule pack: inside the installed wheel, else the repository's rules/."""
    packaged = resources.files("diagnose") / "_rules"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "rules"  # diagnose/rules/engine.py -> repo


def _compile(src: str, where: str) -> Expr:
    try:
        return compile_expr(src)
    except RuleError as e:
        raise RuleError(f"{where}: {e}") from None


_AT_RULE = re.compile(r"^(?P<what>.*?) - at `\$\.rule\[(?P<i>\d+)\](?P<rest>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>\w+)`$")


def _schema_error(e: msgspec.ValidationError, data: Any) -> str:
    """msgspec's words for a rule file that does not fit the format, in a rule's terms:
    which rule (its id where it has one) and what it lacks or has wrong."""
    m = _AT_RULE.match(str(e))
    if m is None:
        if str(e).endswith(" - at `$.rule`"):  # `rule = 5`: not [[rule]] tables
            return ("`rule` must be a list of [[rule]] tables, one a rule (docs/rules.md, "
                    "Writing your own rules)")
        return str(e)
    i = int(m["i"])
    rules = data.get("rule") if isinstance(data, dict) else None
    rid = rules[i].get("id") if isinstance(rules, list) and i < len(rules) and isinstance(
        rules[i], dict) else None
    where = f"rule {rid}" if isinstance(rid, str) else f"rule {i + 1} (no id)"
    rest = m["rest"].lstrip(".")
    missing = _MISSING.match(m["what"])
    if missing:
        field = f"{rest}.{missing['field']}" if rest else missing["field"]
        return (f"{where} has no {field} (each rule needs id, category, title, when, message "
                "and fixes; docs/rules.md, Writing your own rules)")
    return f"{where}{' ' + rest if rest else ''}: {m['what']}"


def load_rule_file(path: Path) -> list[Rule]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise RuleError(f"{path}: cannot read rule file ({e.strerror or e})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
        pack = msgspec.convert(data, _PackFile)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise RuleError(f"{path}: not valid TOML ({e})") from None
    except msgspec.ValidationError as e:
        raise RuleError(f"{path}: {_schema_error(e, data)}") from None
    rules = []
    for spec in pack.rule:
        where = f"{path} rule {spec.id}"
        if not _ID.match(spec.id):
            raise RuleError(f"{where}: id must be a prefix and three digits, e.g. IN001")
        if spec.category not in CATEGORIES:
            raise RuleError(f"{where}: unknown category {spec.category!r} (one of {', '.join(CATEGORIES)})")
        unknown = [f for f in spec.fixes if f not in FIXES]
        if unknown:
            raise RuleError(f"{where}: unknown fix {unknown[0]!r} (see diagnose/fixes)")
        stray = [f for f in spec.fix_when if f not in spec.fixes]
        if stray:
            raise RuleError(f"{where}: fix_when names {stray[0]!r}, which is not in its fixes")
        if spec.scope not in ("rank", "run"):
            raise RuleError(f"{where}: scope must be 'rank' or 'run', not {spec.scope!r}")
        if spec.gain is None and spec.category not in UNCAPPED:
            raise RuleError(f"{where}: needs a gain (the share of step time a fix could save)")
        try:
            names: list[tuple[str, str]] = [(n, "message") for n in sorted(template_names(spec.message))]
            for h in spec.hints:
                names += [(n, "hint text") for n in sorted(template_names(h.text))]
        except RuleError as e:
            raise RuleError(f"{where}: {e}") from None
        rule = Rule(
            id=spec.id,
            category=spec.category,
            title=spec.title,
            when=_compile(spec.when, where),
            warning=_compile(spec.warning, where) if spec.warning else None,
            critical=_compile(spec.critical, where) if spec.critical else None,
            message=spec.message,
            gain=_compile(spec.gain, where) if spec.gain is not None else None,
            fixes=tuple(spec.fixes),
            evidence=tuple(spec.evidence),
            hints=tuple((_compile(h.when, where), h.text) for h in spec.hints),
            docs={k: getattr(spec.docs, k).strip() if spec.docs is not None else ""
                  for k in DOC_SECTIONS},
            source=str(path),
            scope=spec.scope,
            training_only=spec.training_only,
            fix_when={f: _compile(c, f"{where} fix_when {f}") for f, c in spec.fix_when.items()},
        )
        for field_name, cond in (("when", rule.when), ("warning", rule.warning),
                                 ("critical", rule.critical), ("gain", rule.gain)):
            if cond is not None:
                names += [(n, field_name) for n in sorted(cond.names)]
        names += [(n, "hint condition") for c, _ in rule.hints for n in sorted(c.names)]
        names += [(n, "fix_when") for c in rule.fix_when.values() for n in sorted(c.names)]
        names += [(n, "evidence") for n in spec.evidence]
        _check_names(names, where)
        rules.append(rule)
    return rules


def _check_names(names: list[tuple[str, str]], where: str) -> None:
    """Refuse a metric name that no stage computes (a typo would never be evaluated)."""
    known = known_metrics()
    for name, field_name in names:
        if name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else (
            "; `torch-diagnose metrics PATH` lists the metrics")
        raise RuleError(f"{where}: unknown metric {name!r} in {field_name}{hint}")


def _rule_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.toml"))
        if not files:
            raise RuleError(f"{path}: folder holds no rule files (*.toml)")
        return files
    if not path.exists():
        raise RuleError(f"{path}: no such rule file or folder")
    return [path]


@cache
def builtin_rules() -> tuple[Rule, ...]:
    return tuple(r for f in _rule_files(builtin_rules_dir()) for r in load_rule_file(f))


def load_rules(extra: Iterable[str | Path] | None = None) -> list[Rule]:
    """The built-in pack plus the user's own rule files; ids must be unique."""
    rules = list(builtin_rules())
    for p in extra or ():
        for f in _rule_files(Path(p)):
            rules.extend(load_rule_file(f))
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen:
            raise RuleError(f"rule id {r.id} defined twice ({seen[r.id]} and {r.source})")
        seen[r.id] = r.source
    return rules


def get_rule(rule_id: str, rules: Iterable[Rule] | None = None) -> Rule:
    for r in rules if rules is not None else builtin_rules():
        if r.id == rule_id.upper():
            return r
    raise RuleError(f"unknown rule {rule_id!r}: `torch-diagnose rules` lists them")


# --------------------------------------------------------------- evaluation
def missing_cause(name: str, metrics: Mapping[str, Any]) -> tuple[str, str]:
    """(cause, reason) why ``name`` has no value. The cause is one short string read from
    the metric's declaration (what it needs: GPU activity in the trace, a live capture, 2+
    ranks, ...), the same for every metric with that cause, so that rules group by it; the
    reason names the metric."""
    if name not in known_metrics():
        return "needs metrics torch-diagnose does not know", f"needs {name} (unknown metric)"
    cause = why_none(name, metrics)
    if cause is None:
        cause = "needs metrics this input lacks" if name in metrics else \
            "needs metrics not computed for this input"
        return cause, f"needs {name}" if name in metrics else \
            f"needs {name}: not computed for this input"
    return cause, cause if name in cause else f"needs {name}: {cause}"


def why_missing(name: str, metrics: Mapping[str, Any]) -> str:
    """Why ``name`` has no value, naming it (``needs gpu_busy_frac: the trace has no GPU
    activity``); :func:`missing_cause` gives the cause alone."""
    return missing_cause(name, metrics)[1]


def _reason(e: MissingMetric, metrics: Mapping[str, Any]) -> str:
    """Why a rule is not evaluated (the cause alone, so that reasons group)."""
    return str(e) if isinstance(e, DivisionByZero) else why_missing(e.name, metrics)


def _named_reason(e: MissingMetric, metrics: Mapping[str, Any]) -> str:
    """The same, naming the metric (for a finding's message or hint)."""
    why = _reason(e, metrics)
    return why if isinstance(e, DivisionByZero) or e.name in why else f"needs {e.name}: {why}"


def _not_evaluated(rule: str, e: MissingMetric, metrics: Mapping[str, Any]) -> NotEvaluated:
    if isinstance(e, DivisionByZero):
        return NotEvaluated(rule, str(e), "a metric its condition divides by is zero")
    cause, reason = missing_cause(e.name, metrics)
    return NotEvaluated(rule, reason, cause)


def _share(gain: float) -> str:
    """A gain as a percentage that never reads as a grade's threshold it is below (0.0198
    is "1.98%", not "2.0%", beside "warning needs >= 2%")."""
    text = f"{gain:.1%}"
    below = [t for t in (WARNING_GAIN, CRITICAL_GAIN) if gain < t <= float(text[:-1]) / 100]
    return f"{gain:.2%}" if below else text


def _cap(category: str, severity: str, gain: float | None) -> str:
    """The grade the time at stake allows (see the module doc)."""
    if category in UNCAPPED:
        return severity
    if gain is None or gain < WARNING_GAIN:
        return "info"
    if severity == "critical" and gain < CRITICAL_GAIN:
        return "warning"
    return severity


def _offered(rule: Rule, metrics: Mapping[str, Any]) -> list[str]:
    """The rule's fixes whose ``fix_when`` condition holds (those without one: all)."""
    out = []
    for fid in rule.fixes:
        cond = rule.fix_when.get(fid)
        try:
            if cond is None or cond.evaluate(metrics):
                out.append(fid)
        except MissingMetric:
            continue
    return out


def _in_place(fixes: Iterable[str], metrics: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The fixes to suggest, and the hints for those left out because the run already has
    them: each one's ``instead`` fixes take its place (those not named or in place)."""
    named = list(fixes)
    keep: list[str] = []
    hints: list[str] = []
    left_out = False
    for fid in named:
        fix = FIXES.get(fid)
        why = fix.in_place(metrics) if fix is not None else None
        if fix is None or why is None:
            if fid not in keep:
                keep.append(fid)
            continue
        left_out = True
        others = [i for i in fix.instead if i not in named and i not in keep
                  and FIXES[i].in_place(metrics) is None]
        keep += others
        hint = f"Not suggested: {fix.title}: {why}"
        if others:
            hint += "; try instead: " + "; ".join(FIXES[i].title for i in others)
        hints.append(hint)
    if left_out and not keep:
        # the time at stake stays: its cause (the lines above) is the user's to remove
        hints.append("Every fix the tool has for this finding is already in place in this "
                     "run: what is left is the cause the lines above name")
    return keep, hints


def evaluate(
    rules: Iterable[Rule], metrics: Mapping[str, Any]
) -> tuple[list[Finding], list[NotEvaluated]]:
    """Run every rule over one set of metrics."""
    findings: list[Finding] = []
    skipped: list[NotEvaluated] = []
    inference = metrics.get("is_training") is False
    for rule in rules:
        if rule.training_only and inference:
            skipped.append(NotEvaluated(rule.id, INFERENCE_REASON))
            continue
        try:
            fired = rule.when.evaluate(metrics)
        except MissingMetric as e:
            skipped.append(_not_evaluated(rule.id, e, metrics))
            continue
        if not fired:
            continue
        severity = "info"
        for sev, expr in (("critical", rule.critical), ("warning", rule.warning)):
            if expr is None:
                continue
            try:
                if expr.evaluate(metrics):
                    severity = sev
                    break
            except MissingMetric:
                continue
        try:
            message = format_message(rule.message, metrics)
        except MissingMetric as e:
            message = f"{rule.title} ({_named_reason(e, metrics)})"
        hints = []
        for cond, text in rule.hints:
            try:
                if cond.evaluate(metrics):
                    hints.append(format_message(text, metrics))
            except MissingMetric:
                continue
        gain, no_gain = None, "no estimate of the time at stake"
        if rule.gain is not None:
            try:
                g = as_number(rule.gain.evaluate(metrics), finite=False)
                gain = None if g is None else round(min(max(g, 0.0), 1.0), 4)
            except MissingMetric as e:
                no_gain = f"no estimate of the time at stake: {_named_reason(e, metrics)}"
        capped = _cap(rule.category, severity, gain)
        graded_from = None
        if capped != severity:
            graded_from = severity
            at_stake = (f"{_share(gain)} of step time at stake" if gain is not None else no_gain)
            need, grade = ((CRITICAL_GAIN, "critical") if capped == "warning"
                           else (WARNING_GAIN, "warning"))
            hints.append(f"{capped}: graded down from {severity}, {at_stake} "
                         f"({grade} needs >= {need:.0%} of step time)")
            severity = capped
        fixes, not_suggested = _in_place(_offered(rule, metrics), metrics)
        hints.extend(not_suggested)
        evidence = {n: metrics.get(n) for n in (rule.evidence or sorted(rule.needs))}
        findings.append(Finding(rule.id, rule.category, severity, rule.title, message,
                                evidence, fixes, gain, hints, graded_down_from=graded_from))
    findings.sort(key=lambda f: (-severity_rank(f.severity), -(f.estimated_gain or 0.0), f.rule))
    return findings, skipped
