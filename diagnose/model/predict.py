"""What analysis takes from the step model: the replay's accuracy (``step_model`` in the
JSON) and, for each finding's fixes, a prediction of the step time the fix gives.

A prediction is a ratio of two replays of the same graph, the fix's transform against
the unmodified one, applied to the step time the report leads with (the unprofiled one
where the capture timed it). Its range widens the point by the replay's own error and
the spread of the measured steps. In a live capture the host's work is first scaled so
that the replay gives the unprofiled step (the profiler's per-op cost taken out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .graph import DEVICE_TASKS, EdgeKind, Graph, TaskKind, replay
from .step import StepModel
from .transforms import TRANSFORMS, cpu_bound_ms

# The analysis and its findings are typed in layers above this one (result, engine): they
# are taken as they come, and only their attributes are used.
Analysis = Any
Finding = Any

_SEVERITIES = ("info", "warning", "critical")  # engine.SEVERITIES (a layer above)
SLOWER = 0.98  # a fix predicted to give less than this speedup is not offered as the fix


@dataclass(frozen=True)
class Prediction:
    """What a fix is predicted to do: the exact change, the step time, the speedup."""

    change: dict[str, Any]
    step_ms: float
    speedup: float
    range: tuple[float, float]  # step_ms, low and high
    base_ms: float

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "step_ms": round(self.step_ms, 3),
                "speedup": round(self.speedup, 3),
                "range": [round(self.range[0], 3), round(self.range[1], 3)]}

    def line(self) -> str:
        return f"predicted {self.base_ms:.1f} -> {self.step_ms:.1f} ms ({self.speedup:.2f}x)"


def _num(facts: Mapping[str, Any], name: str) -> float | None:
    v = facts.get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def candidates(fix: str, facts: Mapping[str, Any]) -> list[dict[str, Any]] | str:
    """The changes autofix would try for ``fix`` (the best predicted one is reported)."""
    cpus = _num(facts, "cpu_count")
    now = int(_num(facts, "dataloader_num_workers") or 0)
    if fix in ("num_workers", "num_workers_cap"):
        if cpus is None:
            return "cannot tell: the number of CPUs is not known (a live capture records it)"
        n = int(cpus)
        if fix == "num_workers_cap" or now > n:
            ks = sorted({n, n - 1, n // 2, 1} - {now}, reverse=True)
            return [{"num_workers": k} for k in ks if 0 < k < now]
        ks, k = {n}, 1
        while k <= n:
            ks.add(k)
            k *= 2
        return [{"num_workers": k} for k in sorted(ks) if k > now]
    fixed = {
        "pin_memory": {"pin_memory": True, "non_blocking": True},
        "remove_sync": {},
        "foreach_optimizer": {"optimizer_foreach": True},
        "set_to_none": {"zero_grad_set_to_none": True},
        "cuda_graphs": {},
        "torch_compile": {"compile": True},
        "cudnn_benchmark": {"cudnn_benchmark": True},
        "channels_last": {"channels_last": True},
    }
    if fix in fixed:
        return [fixed[fix]]
    if fix == "amp":
        cc = _num(facts, "device_cc_major")
        return [{"amp_dtype": "bfloat16" if cc is not None and cc >= 8 else "float16"}]
    if fix == "larger_batch":
        b, acc = _num(facts, "dataloader_batch_size"), _num(facts, "grad_accum_steps")
        if b is None or acc is None or acc < 2:
            return "a larger batch changes training unless it replaces gradient accumulation"
        return [{"batch_size": int(2 * b), "grad_accum_steps": int(acc // 2)}]
    return "no model of this fix"


def busiest_ms(g: Graph) -> float:
    """Work per step of the busiest resource (ms): a host thread's or a stream's own time
    and spacing, the producer's over its workers. In steady state no step is shorter: a
    host that never waits for the device within the window still fills its queues."""
    # device work launched before the window belongs to the step before
    own = ~g.is_kind(*DEVICE_TASKS)
    own[g.edst[g.ekind == EdgeKind.START_AFTER_START]] = True
    per = np.bincount(g.res[own], weights=(g.dur + g.gap)[own], minlength=len(g.resources))
    caps = np.array([max(r.capacity, 1) for r in g.resources], float)
    return float((per / caps).max()) / max(g.n_steps, 1) / 1e3 if len(per) else 0.0


def _step(g: Graph) -> float:
    """The steady step of a replay: the median replayed step, and no less than the
    busiest resource's work per step (ms)."""
    return max(float(np.median(replay(g).step_ms)), busiest_ms(g))


def calibrate(g: Graph, target_ratio: float) -> Graph:
    """Scale the host's own work so the replay gives ``target_ratio`` x the profiled step
    (the profiler's per-op cost taken out); a few secant steps on the scale."""
    if not (0.2 < target_ratio < 1.0) or abs(target_ratio - 1) < 0.03:
        return g
    host = g.is_kind(TaskKind.HOST, TaskKind.LAUNCH, TaskKind.FETCH)
    base = _step(g)
    want = base * target_ratio
    lo_f, lo_v, hi_f, hi_v = 0.0, _step(g.scale(host, 0.0)), 1.0, base
    if lo_v >= want:  # even a free host does not get there: the device sets the step
        return g.scale(host, 0.0)
    f = 1.0
    for _ in range(4):
        f = lo_f + (want - lo_v) * (hi_f - lo_f) / max(hi_v - lo_v, 1e-9)
        v = _step(g.scale(host, f))
        if abs(v - want) <= 0.005 * want:
            break
        lo_f, lo_v, hi_f, hi_v = (f, v, hi_f, hi_v) if v < want else (lo_f, lo_v, f, v)
    return g.scale(host, f)


class Predictor:
    """Predictions for one run, from one rank's model and the run's metrics."""

    def __init__(self, model: StepModel, facts: Mapping[str, Any]) -> None:
        assert model.graph is not None
        self.facts = facts
        prof = _num(facts, "step_time_median_ms")
        un = _num(facts, "step_time_unprofiled_median_ms")
        self.base_ms = un or prof or (model.measured_ms or 0.0)
        g = model.graph
        self.g = calibrate(g, un / prof) if un and prof else g
        self.base_replay = _step(self.g)
        cv = _num(facts, "step_time_cv") or 0.0
        n = max(int(_num(facts, "step_count") or 1), 1)
        self.rel = abs(model.error or 0.0) + cv / math.sqrt(n)
        self.cache: dict[str, Prediction | str] = {}

    def predict(self, fix: str) -> Prediction | str:
        if fix not in self.cache:
            self.cache[fix] = self._predict(fix)
        return self.cache[fix]

    def _predict(self, fix: str) -> Prediction | str:
        tr = TRANSFORMS.get(fix)
        if tr is None:
            return "no model of this fix"
        cands = candidates(fix, self.facts)
        if isinstance(cands, str):
            return cands
        if not cands:
            return "no other setting to try"
        best: Prediction | str = "no model of this fix"
        for change in cands:
            g2 = tr(self.g, change, self.facts)
            if isinstance(g2, str):
                return g2
            ratio = _step(g2) / self.base_replay if self.base_replay > 0 else 1.0
            if fix == "larger_batch":
                ratio /= 2  # per step of the old size
            ms = self.base_ms * ratio
            bound = cpu_bound_ms(g2, change, self.facts) if fix.startswith("num_workers") else None
            if bound is not None:
                ms = max(ms, bound * self.base_ms / max(self.base_replay, 1e-9))
            p = Prediction(dict(change), ms, self.base_ms / ms if ms > 0 else math.inf,
                           (ms * (1 - self.rel), ms * (1 + self.rel)), self.base_ms)
            if isinstance(best, str) or p.step_ms < best.step_ms:
                best = p
        return best


def _pick(models: list[tuple[int | None, StepModel | None]]) -> tuple[int | None, StepModel | None]:
    """The rank whose replay is furthest from its measured step (the error a prediction
    must own up to), else the first rank's reason for having no model."""
    built = [(r, m) for r, m in models if m is not None and m.graph is not None]
    if built:
        return max(built, key=lambda x: abs(x[1].error or 0.0))
    return next(((r, m) for r, m in models if m is not None), (None, None))


def attach_models(a: Analysis, models: list[tuple[int | None, StepModel | None]],
                  context: dict | None) -> None:
    """Put the step model's replay accuracy on the analysis and a prediction on each
    finding's fixes (fixes ordered by predicted effect; severity from the prediction)."""
    rank, m = _pick(models)
    if m is None:
        a.step_model, a.step_model_why = None, "no trace analysed"
        return
    js: dict[str, Any] | None = m.to_json()
    if js is not None and len(models) > 1:
        js["rank"] = rank
    a.step_model, a.step_model_why = js, m.why
    if len(models) > 1:  # the JSON says why (engine.Finding): as in a live many-rank run
        return
    if m.graph is None:
        for f in a.findings:
            f.predictions = {x: f"cannot tell: no step model ({m.why})" for x in f.fixes}
        return
    pr = Predictor(m, a.metrics)
    for f in a.findings:
        predict_finding(f, pr)
    # worst first again (engine.severity_rank's order), the grades may have moved
    a.findings.sort(key=lambda f: (-_SEVERITIES.index(f.severity), -(f.estimated_gain or 0.0), f.rule))


def predict_finding(f: Finding, pr: Predictor) -> None:
    """Predict each fix of ``f``; order the fixes by predicted effect (unpredicted ones keep
    their place after the predicted ones that help); a fix predicted to slow the job down
    goes last and says so; the time at stake follows the best prediction."""
    preds = {x: pr.predict(x) for x in f.fixes}
    f.predictions = preds
    helps = [x for x in f.fixes if isinstance(preds[x], Prediction) and preds[x].speedup >= SLOWER]
    helps.sort(key=lambda x: -preds[x].speedup)
    unknown = [x for x in f.fixes if isinstance(preds[x], str)]
    slower = [x for x in f.fixes if isinstance(preds[x], Prediction) and preds[x].speedup < SLOWER]
    f.fixes = helps + unknown + slower
    for x in slower:
        p = preds[x]
        f.hints.append(f"{x}: predicted {p.speedup:.2f}x ({p.base_ms:.1f} -> {p.step_ms:.1f} ms), "
                       "slower: not offered as the fix")
    # the time at stake is the best prediction's saving; when the fixes the model predicts
    # do not help but others it cannot tell remain, the rule's own estimate stands
    made = [p for p in preds.values() if isinstance(p, Prediction)]
    if made and (helps or not unknown):
        f.take_gain(max(max(0.0, 1 - p.step_ms / p.base_ms) for p in made))


def prediction_line(p: Any) -> str:
    """A fix's prediction as the reports show it ("predicted 25.2 -> 14.1 ms (1.79x)"), from
    a Prediction or its JSON; empty when there is none."""
    if isinstance(p, Prediction):
        return p.line()
    if isinstance(p, dict) and isinstance(p.get("step_ms"), int | float) and isinstance(
            p.get("speedup"), int | float) and p["speedup"] > 0:
        base = p["step_ms"] * p["speedup"]
        return f"predicted {base:.1f} -> {p['step_ms']:.1f} ms ({p['speedup']:.2f}x)"
    return ""
