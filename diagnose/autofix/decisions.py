"""The autofix result types: each decision, the before/after comparison, the bound.

Data only (no renderer, no runner): ``diagnose.autofix.report.AutofixReport`` adds printing,
``diagnose.autofix.runner`` produces them, and renderers elsewhere read them by attribute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..fixes import TrainConfig
from .stats import Interval

# What a decision can be (the table's last columns).
KEPT, REVERTED, NO_FIT, FITS = "kept", "reverted", "does not fit", "fits"
NOT_APPLICABLE, NO_CHANGE, SKIPPED, ADVICE, ERROR = (
    "not applicable", "no change", "skipped", "advice", "error")
# What a comparison can end in: measured (OK), or NO_FIT / ERROR as above.
OK = "ok"


@dataclass(frozen=True)
class Decision:
    """One trial (or one fix that was not tried), as shown in the table."""

    fix: str
    change: str
    status: str
    reason: str
    finding: str | None = None  # rule id that named the fix ("OOM": the baseline did not fit)
    baseline_ms: float | None = None
    trial_ms: float | None = None
    speedup: Interval | None = None
    rounds: int = 0
    steps: int = 0
    setup_s: float | None = None  # first step of the trial (torch.compile: compile time)
    predicted_speedup: float | None = None  # the step model's prediction for the fix
    # under a memory budget (autofix/memfit.py): the fix's predicted peak, and the tuned
    # config's measured peak (one step of all the kept changes together)
    predicted_peak_bytes: int | None = None
    measured_peak_bytes: int | None = None
    # the prediction's range (speedups, slow end first): the diagnosis' printed range,
    # scaled to this trial's point
    predicted_range: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        s = self.speedup
        return {"fix": self.fix, "change": self.change, "status": self.status,
                "reason": self.reason, "finding": self.finding,
                "baseline_ms": self.baseline_ms, "trial_ms": self.trial_ms,
                "speedup": None if s is None else s.ratio,
                "ci": None if s is None else [s.lo, s.hi],
                "rounds": self.rounds, "steps": self.steps, "setup_s": self.setup_s,
                "predicted_speedup": self.predicted_speedup,
                "predicted_range": None if self.predicted_range is None else [
                    round(v, 4) for v in self.predicted_range],
                "predicted_peak_bytes": self.predicted_peak_bytes,
                "measured_peak_bytes": self.measured_peak_bytes}


@dataclass(frozen=True)
class Bound:
    """Speed of light: the step can be no faster than compute alone or input alone."""

    compute_ms: float  # one batch, already on the device, reused
    data_ms: float  # the DataLoader iterated alone, per optimizer step
    config: TrainConfig

    @property
    def bound_ms(self) -> float:
        return max(self.compute_ms, self.data_ms)

    @property
    def limited_by(self) -> str:
        return "input" if self.data_ms >= self.compute_ms else "compute"

    def to_json(self) -> dict[str, Any]:
        return {"compute_ms": self.compute_ms, "data_ms": self.data_ms,
                "bound_ms": self.bound_ms, "limited_by": self.limited_by}


@dataclass(frozen=True)
class Comparison:
    base_ms: float | None
    cand_ms: float | None
    interval: Interval | None
    rounds: int
    steps: int
    status: str = OK  # OK | NO_FIT | ERROR
    note: str = ""
    setup_s: float | None = None


@dataclass
class AutofixResult:
    """What autofix did and found: every decision, before/after, the bound, the code.

    Data only: :class:`diagnose.autofix.AutofixReport` adds printing.
    """

    original: TrainConfig
    baseline: TrainConfig
    best: TrainConfig
    decisions: list[Decision]
    final: Comparison | None
    bound: Bound | None
    bound_before: Bound | None
    tuned_ms: float | None  # the winner's step time, measured in the same rounds as the bound
    named: dict[str, str]  # fix id -> rule id that named it
    diagnosis: Any  # the baseline's Report (None when findings were given another way)
    loader: Any  # a DataLoader with the winning settings (built, not yet iterated)
    optimizer: Any  # rebuilt optimizer when its kernels changed, else None (keep yours)
    code: str
    trials: int
    elapsed_s: float
    device: str
    cpus: int
    min_gain: float
    notes: list[str] = field(default_factory=list)
    predicted_tuned_ms: float | None = None  # the model's tuned step (all kept fixes predicted)
    model_disagreements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def kept(self) -> list[str]:
        return [d.fix for d in self.decisions if d.status == KEPT]

    @property
    def kept_changes(self) -> list[str]:
        """Each kept change as its fix and what it changed, for the page's summary (a fix
        kept twice, the threads at two counts, shows both)."""
        return [f"{d.fix} ({d.change})" if d.change else d.fix
                for d in self.decisions if d.status == KEPT]

    @property
    def speedup(self) -> Interval | None:
        return None if self.final is None else self.final.interval

    def step_settings(self) -> dict[str, Any]:
        """How to run the step with the winning config (the DataLoader is ``loader``)."""
        b = self.best
        return {"non_blocking": b.non_blocking, "amp_dtype": b.amp_dtype,
                "grad_scaler": b.uses_grad_scaler, "channels_last": b.channels_last,
                "cudnn_benchmark": b.cudnn_benchmark, "compile": b.compile,
                "zero_grad_set_to_none": b.zero_grad_set_to_none,
                "grad_accum_steps": b.grad_accum_steps, "batch_size": b.batch_size}

    def to_json(self) -> dict[str, Any]:
        f = self.final
        return {
            "original": self.original.to_json(), "baseline": self.baseline.to_json(),
            "best": self.best.to_json(), "decisions": [d.to_json() for d in self.decisions],
            "final": None if f is None or f.interval is None else {
                "baseline_ms": f.base_ms, "tuned_ms": f.cand_ms, "speedup": f.interval.ratio,
                "ci": [f.interval.lo, f.interval.hi], "rounds": f.rounds, "steps": f.steps},
            "bound": None if self.bound is None else self.bound.to_json(),
            "bound_before": None if self.bound_before is None else self.bound_before.to_json(),
            "tuned_ms": self.tuned_ms,
            "kept": self.kept, "named": self.named, "code": self.code, "trials": self.trials,
            "elapsed_s": self.elapsed_s, "device": self.device, "cpus": self.cpus,
            "min_gain": self.min_gain, "notes": self.notes,
            "predicted_tuned_ms": self.predicted_tuned_ms,
            "model_disagreements": self.model_disagreements,
        }
