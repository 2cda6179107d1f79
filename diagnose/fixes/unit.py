"""A fix is one unit: when it applies, when it is already in place, the configs autofix
measures, the code by hand, its prediction (a transform of the step model) and, in the
same module, the trial's realisation of the config fields it changes.

A plain ``Fix(...)`` declares an advice-only fix (its code) or a fixed change
(``change={"cudnn_benchmark": True}``). A fix whose behaviour is computed subclasses
``Fix`` and overrides what differs (each method below says its default):

- ``applies(config, facts)``: autofix may try it on this config (``needs`` says when, in
  words); ``why_not`` turns both into the reason shown.
- ``in_place(metrics)``: the reason it is already in place in the diagnosed run (the
  engine then does not suggest it, and suggests ``instead``); it reads
  ``Facts.from_metrics(metrics)``.
- ``search(config, facts)``: the configs to measure, best guess first. ``candidates``
  (what callers use) drops those equal to ``config`` and repeats; ``apply`` is the first.
- ``search_key``, ``search_mode`` and ``search_start``: how autofix walks the candidates
  (fixes with one key share one search; see the SEARCH_* modes).
- ``render(setup)``: the code for the user's own DataLoader and optimizer
  (:class:`~diagnose.fixes.code.Setup`; None: the generic template, ``code``).
- ``transform``: the fix as a transform of the step model
  (:class:`~diagnose.stepmodel.transforms.Transform`, defined in the fix's own module);
  ``predict(predictor, config, facts)`` replays it for each config autofix would measure
  and returns the best (see :mod:`diagnose.fixes.findings`); a fix without one says so.
- ``fields``: the TrainConfig fields its candidates change (a fixed ``change`` gives
  them); each has one realisation (:mod:`diagnose.fixes.realise`) in the module of a fix
  that changes it.

Facts
-----
``applies``, ``search``, ``predict`` and the transforms read one typed value,
:class:`~diagnose.stepmodel.facts.Facts`: the metrics of a diagnosis overlaid by what
autofix measures live (``Facts.from_metrics``). A fact that is None is not known, and a
fix that needs it does not apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..stepmodel.calibration import HELPS, SLOWER, TIE
from ..stepmodel.facts import Facts
from ..stepmodel.prediction import CANNOT_TELL, Prediction, Predictor, cannot_tell
from ..stepmodel.transforms import GraphChange, Transform, as_transform
from .code import EXACT_FIELDS, Setup, exact_change, with_imports
from .config import TrainConfig

#: how a fix without a transform says it is not predicted (the text report words it so)
NO_MODEL = "no model of what"

#: what a saved trace does not say that the worker and thread fixes read (``Fix.unknown``)
HOST_CPUS = "how many CPUs the host has"

#: How autofix walks a fix's candidates (``Fix.search_mode``):
#: each in order against the best so far, while the fix still applies;
SEARCH_EACH = "each"
#: an upward ladder of one setting, from the rung predicted best (else ``search_start``)
#: while each step is a gain;
SEARCH_CLIMB = "climb"
#: a downward ladder, every value against the best so far (a loss does not end it).
SEARCH_DESCEND = "descend"


def setting_words(field: str, value: Any) -> str:
    """A config's setting as the user writes it: torch's thread count as its call, a loader
    argument as ``name=value`` (a new user read ``intra_op_threads=1``, no torch API)."""
    return f"torch.set_num_threads({value})" if field == "intra_op_threads" else f"{field}={value}"


@dataclass(frozen=True)
class Fix:
    """One change a person (or autofix) can make; see the module doc for what it owns."""

    id: str
    title: str
    code: str = ""  # the generic template (empty: ``render(None)`` writes it)
    auto: bool = False  # autofix can apply it mechanically
    change: Mapping[str, Any] | None = None  # the fields a fixed change sets
    needs: str = ""  # when it applies, in words (the reason shown when it does not)
    category: str = ""  # the rule category it answers (its module in diagnose/fixes/catalog)
    search_key: str | None = None  # one search serves every fix with this key
    instead: tuple[str, ...] = ()  # fix ids to suggest when this one is in place
    transform: Transform | None = field(default=None, repr=False, compare=False)
    # the transform gives the least the fix does (a bound), not a point: see Prediction
    predicts_at_least: bool = False
    # the TrainConfig fields its candidates change (default: the keys of ``change``)
    fields: tuple[str, ...] = ()
    # without a transform: why the step model does not replay it, in words for the report
    unmodelled: str = ""

    def __post_init__(self) -> None:
        code = self.code or self.render(None)
        object.__setattr__(self, "code", with_imports(code.strip("\n")))
        if not self.fields and self.change:
            object.__setattr__(self, "fields", tuple(self.change))

    # ------------------------------------------------------------------ when
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        """Autofix may try it on ``config`` (default: always)."""
        return True

    def why_not(self, config: TrainConfig, facts: Facts) -> str | None:
        """None when autofix may try it on ``config``; else the reason, in words."""
        if not self.auto:
            return "advice only: a person makes this change"
        try:
            ok = bool(self.applies(config, facts))
        except Exception as e:  # a broken condition is reported, never raised
            return f"condition failed: {type(e).__name__}: {e}"
        if ok:
            return None
        if facts.iterable_dataset is True and {"num_workers", "intra_op_threads"} & set(
                self.fields):  # of its needs, the one that failed
            return ("an IterableDataset splits its samples among its workers itself: autofix "
                    "leaves its workers and threads as they are (change them by hand)")
        return f"needs {self.needs}" if self.needs else "does not apply"

    def unknown(self, facts: Facts) -> str | None:
        """What ``applies`` reads that the run does not say (in words: a saved trace holds no
        host), where that alone keeps the fix from applying: the report then offers it as
        advice, without a prediction, naming what it could not tell. None (default):
        nothing it reads is unknown."""
        return None

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        """Why the diagnosed run already has this fix (its change is the run's current
        setting), from its metrics; None when it does not or cannot be told (default)."""
        return None

    # ------------------------------------------------------------------ what
    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        """The configs to measure, best guess first (default: ``change`` applied)."""
        return [config.replace(**self.change)] if self.change else []

    def candidates(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        """The configs autofix measures for this fix, in order; none equal to ``config``
        (empty: advice only, or nothing left to change)."""
        if not self.auto:
            return []
        out: list[TrainConfig] = []
        for c in self.search(config, facts):
            if c != config and c not in out:
                out.append(c)
        return out

    def apply(self, config: TrainConfig, facts: Facts | None = None) -> TrainConfig:
        """A new config with this fix applied (its first candidate; the input is never
        changed). ``config`` itself when there is nothing left to change."""
        if not self.auto:
            raise ValueError(f"fix {self.id!r} is advice only: autofix cannot apply it")
        cands = self.candidates(config, Facts() if facts is None else facts)
        return cands[0] if cands else config

    def changes_nothing(self, config: TrainConfig, facts: Facts | None = None) -> bool:
        """True when autofix has nothing to change on ``config`` (already in place, or
        advice only)."""
        return not self.candidates(config, Facts() if facts is None else facts)

    def search_mode(self, config: TrainConfig, candidates: list[TrainConfig]) -> str:
        """How autofix walks ``candidates`` (one of the SEARCH_* modes; default each)."""
        return SEARCH_EACH

    def search_start(self, config: TrainConfig, candidates: list[TrainConfig], *,
                     input_ms: float, compute_ms: float) -> int:
        """Where a climb starts when the model predicted none of its rungs (else autofix
        starts at the rung predicted best): an index into ``candidates``, from the
        baseline's measured input time and compute-only time per step (default: the
        first)."""
        return 0

    def title_for(self, change: Mapping[str, Any] | None) -> str:
        """The fix's title for the exact change a prediction is for (None: the unit's
        own). Default: the unit's title."""
        return self.title

    # ------------------------------------------------------------------ code
    def render(self, setup: Setup | None) -> str:
        """The change by hand for ``setup`` (None: the generic template). Default: the
        template, whatever the setup."""
        return self.code

    def code_for(self, setup: Setup | None) -> str:
        """The change by hand for the user's own DataLoader and optimizer (``setup``); the
        generic template where nothing is known."""
        return self.code if setup is None else with_imports(self.render(setup).strip("\n"))

    def code_for_change(self, setup: Setup | None, config: TrainConfig,
                        change: Mapping[str, Any],
                        others: tuple[tuple[tuple[tuple[str, Any], ...], float], ...] = (),
                        at_least: bool = False) -> str | None:
        """The code of the exact ``change`` a prediction is for, where this fix's own code
        writes an expression that depends on the machine (the worker count, the threads):
        the user then applies what was predicted. ``others``: every config the fix's
        prediction weighed, with its speedup (``Prediction.candidates``); the ones not
        advised are named after the code. ``at_least``: the prediction is a bound
        (``Prediction.at_least``), and so is each of theirs: none is called slower. None:
        the fix's own code says it."""
        if not self.auto or not change or not set(change) <= EXACT_FIELDS or \
                not {"num_workers", "intra_op_threads"} & set(change):
            return None
        after = config.replace(**change)
        if after == config:
            return None
        code = exact_change(setup, config, after, "the change predicted below, for this "
                            "machine's CPUs (measure both ways)")
        rest = [f"{', '.join(setting_words(k, v) for k, v in c)}: {'at least ' if at_least else ''}"
                f"{sp:.2f}x" + (" (slower: not advised)" if round(sp, 2) < 1.0 and not at_least
                                    else "")
                for c, sp in sorted(others, key=lambda o: -o[1])  # fastest first
                if dict(c) != dict(change)]
        advised = next((sp for c, sp in others if dict(c) == dict(change)), None)
        # a config predicted faster than the advice tied with it (_with_headroom)
        tied = advised is not None and any(sp > advised for c, sp in others
                                           if dict(c) != dict(change))
        why = (" (within the model's error of the advice, which leaves the loader the most "
               "time between batches)") if tied else ""
        # each against the step as it is, the settings a config does not name unchanged
        bound = (" (each a bound, as the advice's: what the model assumed was not timed; "
                 "one under 1.00x may still help)") if at_least else ""
        return code + (f"\n# also predicted, against the step as it is, other settings "
                       f"unchanged: {'; '.join(rest)}{why}{bound}" if rest else "")

    # ------------------------------------------------------------------ prediction
    def predict(self, predictor: Predictor, config: TrainConfig, facts: Facts
                ) -> Prediction | str:
        """The step time this fix is expected to give: its transform replayed for each config
        autofix would measure (advice: the fix as it stands), the best of them; else why
        the model cannot tell."""
        return self.predict_as_fix(predictor, config, facts)

    def predict_as_fix(self, predictor: Predictor, config: TrainConfig, facts: Facts
                       ) -> Prediction | str:
        """:meth:`predict` as every fix does it (a unit that refines it calls this)."""
        if self.transform is None:
            return f"{NO_MODEL} {self.id} does to a step" + (
                f": {self.unmodelled}" if self.unmodelled else "")
        if self.auto:
            changes = [{k: new for k, (_, new) in config.diff(c).items()}
                       for c in self.candidates(config, facts)]
            if not changes:
                return self.why_not(config, facts) or "nothing left to change"
        else:
            changes = [dict(self.change or {})]
        best: Prediction | str = "no model of this fix"
        each: list[tuple[tuple[tuple[str, Any], ...], float]] = []
        preds: list[Prediction] = []
        for change in changes:
            try:
                p = predictor.predict_change(self.transform, change)
            except Exception as e:  # a broken transform is reported, never raised
                return f"the model failed: {type(e).__name__}: {e}"
            if isinstance(p, str):
                # a config the run withholds (Predictor.withhold) is not one to advise: the
                # others are still told apart; the reason stands where none is left
                if predictor.withholds(change) is None:
                    return p
                best = p if isinstance(best, str) else best
                continue
            each.append((tuple(sorted(change.items())), p.speedup))
            preds.append(p)
            if isinstance(best, str) or p.step_ms < best.step_ms:
                best = p
        if isinstance(best, Prediction):
            best = _with_headroom(best, preds)
            best = dataclasses.replace(best, at_least=self.predicts_at_least,
                                       candidates=tuple(each))
        return best

    def with_transform(self, transform: Transform | GraphChange) -> Fix:
        """This fix predicting through ``transform`` (a bare graph function declares
        nothing beyond the graph)."""
        return dataclasses.replace(self, transform=as_transform(transform))

    def to_json(self, code: str | None = None) -> dict[str, Any]:
        """``code``: the code rendered for a run (default: the generic template)."""
        return {"id": self.id, "title": self.title, "code": code or self.code,
                "auto": self.auto}


def _with_headroom(best: Prediction, preds: list[Prediction]) -> Prediction:
    """Of the configs that tie with ``best`` (the fast end of a config's range reaches
    within :data:`TIE` of the best point: one capture cannot tell them apart, and their
    points trade places capture to capture), the one whose workers leave the step the most
    time between batches (``loader_share``; none: no workers to wait for): a tie hides how
    much a worker's batch may cost more than the one timed after the loop, and a loader
    with headroom absorbs it."""
    # a config whose point does not help never ties with one that does, however wide its
    # range (a noisy input's): it would be advice the model itself predicts to gain nothing;
    # no loader's headroom makes a config predicted slower the advice (where all are, the
    # least slow is what the fix is said to give)
    if best.speedup < SLOWER:
        return best
    ties = [p for p in preds if p.step_ms <= best.step_ms * (1 + TIE)
            or (p.reach * (1 + TIE) >= best.speedup and p.speedup >= SLOWER
                and (p.speedup >= HELPS or best.speedup < HELPS))]
    return min(ties, key=lambda p: (p.loader_share or 0.0, p.step_ms))


def registry(fixes: Iterable[Fix]) -> dict[str, Fix]:
    """id -> fix; an id twice, or an ``instead`` that names no fix, is refused."""
    out: dict[str, Fix] = {}
    for f in fixes:
        if f.id in out:
            raise ValueError(f"fix id {f.id!r} declared twice")
        out[f.id] = f
    for f in out.values():
        unknown = [i for i in f.instead if i not in out]
        if unknown:
            raise ValueError(f"fix {f.id!r}: instead names unknown fix {unknown[0]!r}")
    return out


__all__ = ["CANNOT_TELL", "SEARCH_CLIMB", "SEARCH_DESCEND", "SEARCH_EACH", "TIE", "Facts", "Fix",
           "Transform", "cannot_tell", "registry", "setting_words"]
