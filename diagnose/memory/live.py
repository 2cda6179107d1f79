"""The memory section of a live capture: the measured step, its what-ifs, and an
out-of-memory error explained.

With the step as a function (``step_fn(model, batch) -> loss``) every what-if is re-run
under FakeTensorMode (:mod:`.fake`) and the scaled estimate is kept beside it; without
one, the what-ifs are scaled from the measured kinds (:mod:`.whatif`). A step that ran out
of memory is re-run whole under FakeTensorMode at its own batch (its tracked timeline stops
at the failure), and the largest batch that fits is searched with fake re-runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .fake import Base, FakeRunError, fake_step
from .oom import FIT_MARGIN, explain
from .profile import StepMemory
from .tensors import leading_size, model_device
from .tracker import StepFn, StepSpec, track_step
from .whatif import FAKE, FAKE_HIGH, WhatIf, changes, largest_batch, recompute_ms, scaled

#: fake re-runs a search for the largest batch may take (a bisection over 1..2x the guess)
SEARCH_RUNS = 8
#: which of the changes to predict (a caller that needs only some of them)
Keep = Callable[[Mapping[str, Any]], bool]


def supported_amp(device: torch.device) -> tuple[str, ...]:
    """The autocast dtypes worth predicting on ``device``: bf16 on CPUs and on GPUs that
    run it natively, fp16 on GPUs."""
    if device.type == "cuda":
        try:
            bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch: no including_emulation
            bf16 = torch.cuda.is_bf16_supported()
        return ("bfloat16", "float16") if bf16 else ("float16",)
    return ("bfloat16",) if device.type == "cpu" else ()


def _extra(prof: Mapping[str, Any]) -> tuple[int, float]:
    """What the base step held beyond the tracker's count: bytes held throughout (CUDA:
    untracked before the step) and the allocator's surplus at the peak, as a share."""
    untracked = int(prof.get("untracked_bytes") or 0)
    alloc = prof.get("allocator_peak_bytes")
    tracked = int(prof.get("tracked_peak_bytes") or 0)
    if not isinstance(alloc, int) or tracked <= 0:
        return untracked, 0.0
    surplus = max(0, alloc - tracked - untracked)
    return untracked, surplus / tracked


def fake_what_ifs(model: Any, optimizer: Any, batch: Any, step_fn: StepFn,
                  prof: Mapping[str, Any], *, step_ms: float | None = None,
                  only: Keep | None = None) -> list[WhatIf]:
    """Each change of :func:`~.whatif.changes` (those ``only`` keeps) re-run under
    FakeTensorMode (scaled where the re-run fails, with a note saying why)."""
    base = Base.of(prof.get("step"))
    fixed, surplus = _extra(prof)
    out = []
    for ch in changes(prof, amp_dtypes=supported_amp(model_device(model))):
        if only is not None and not only(ch):
            continue
        est = scaled(prof, ch)
        try:
            m = fake_step(model, optimizer, batch, step_fn, ch, base)
        except FakeRunError as e:
            if est is not None:
                est.note = f"{e}; scaled instead"
                est.step_ms = recompute_ms(prof, ch, step_ms)
                out.append(est)
            continue
        peak = m.tracked_peak_bytes + fixed
        high = int(peak * (1 + FAKE_HIGH + surplus))
        out.append(WhatIf(ch, peak, (peak, high), FAKE, step_ms=recompute_ms(prof, ch, step_ms),
                          scaled_bytes=est.peak_bytes if est is not None else None))
    return out


def largest_batch_fake(model: Any, optimizer: Any, batch: Any, step_fn: StepFn, base: Base,
                       budget_bytes: int, guess: int | None, fixed: int = 0,
                       surplus: float = 0.0) -> int | None:
    """The largest batch whose re-run under FakeTensorMode fits the budget less
    FIT_MARGIN, by bisection from ``guess`` (at most SEARCH_RUNS re-runs); None: none
    found to fit. Raises FakeRunError where the step cannot run on fake tensors. A batch
    fits where the high end of its what-if range does (``fixed``, ``surplus``: see
    :func:`fake_what_ifs`)."""
    room = budget_bytes * (1 - FIT_MARGIN)
    runs = 0

    def fits(n: int) -> bool:
        nonlocal runs
        runs += 1
        m = fake_step(model, optimizer, batch, step_fn, {"batch_size": n}, base)
        return int((m.tracked_peak_bytes + fixed) * (1 + FAKE_HIGH + surplus)) <= room
    lo, hi = 0, max(2, 2 * (guess or 1))
    if guess and fits(guess):
        lo = guess
    else:
        hi = max(1, guess or 1)
    while hi - lo > 1 and runs < SEARCH_RUNS:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo or None


def live_section(measured: StepMemory, *, model: Any = None, optimizer: Any = None,
                 batch: Any = None, step_fn: StepFn | None = None,
                 budget_bytes: int | None = None, step_ms: float | None = None,
                 only: Keep | None = None) -> dict[str, Any]:
    """The JSON memory section of a measured step (``context.json``'s ``memory``);
    ``only``: the changes to predict (default: all)."""
    prof = measured.to_json()
    fn = step_fn
    can_fake = model is not None and batch is not None and fn is not None
    base = Base.of(prof.get("step"))
    full: dict[str, Any] | None = None
    notes: list[str] = []
    if measured.oom is not None and fn is not None and can_fake:
        try:
            whole = fake_step(model, optimizer, batch, fn, {}, base)
            whole.untracked_bytes = measured.untracked_bytes  # held outside the job
            full = whole.to_json()
            full["step"] = prof.get("step")
        except FakeRunError as e:
            notes.append(str(e))
    basis = full if full is not None else prof
    if fn is not None and can_fake and measured.oom is None:
        why = _unlike(model, optimizer, batch, fn, base, measured.tracked_peak_bytes)
        if why is not None:
            notes.append(why)
            can_fake = False
    if fn is not None and can_fake:
        what = fake_what_ifs(model, optimizer, batch, fn, basis, step_ms=step_ms, only=only)
    else:
        what = []
        for ch in changes(basis, amp_dtypes=supported_amp(model_device(model))
                          if model is not None else ("bfloat16",)):
            if only is not None and not only(ch):
                continue
            w = scaled(basis, ch)
            if w is not None:
                w.step_ms = recompute_ms(basis, ch, step_ms)
                what.append(w)
    section = {**prof, "what_if": [w.to_json() for w in what], "notes": notes}
    if full is not None:
        section["full_step"] = {k: full[k] for k in ("peak_bytes", "by_kind", "peak_phase",
                                                     "top_modules")}
    if measured.oom is not None:
        budget = budget_bytes or _device_budget(measured.device)
        largest, how = None, None
        if fn is not None and can_fake and budget:
            guess = largest_batch(basis, budget, FIT_MARGIN)
            try:
                largest = largest_batch_fake(model, optimizer, batch, fn, base, budget,
                                             guess, *_extra(prof))
                how = "re-runs under FakeTensorMode"
            except FakeRunError as e:
                notes.append(str(e))
        section["oom_explanation"] = explain(prof, budget, section["what_if"], full,
                                             largest, how)
    return section


#: a re-run of the step as it is, under FakeTensorMode, that tracks outside this many times
#: the step tracked (or its inverse) is not that step: the re-runs track torch's
#: MemTracker within about 1% (docs/memory.md), so this wide a gap says the model's work
#: changed since (a step counter, a curriculum), not the counting
UNLIKE = 2.0


def _unlike(model: Any, optimizer: Any, batch: Any, fn: StepFn, base: Base,
            tracked: int) -> str | None:
    """Why the what-ifs are scaled, not re-run: the step as it is, re-run under
    FakeTensorMode, tracks outside :data:`UNLIKE` times the tracked step's peak (None: it
    agrees, or could not run: each what-if then says why itself)."""
    try:
        again = fake_step(model, optimizer, batch, fn, {}, base).tracked_peak_bytes
    except FakeRunError:
        return None
    if tracked <= 0 or again <= 0 or 1 / UNLIKE <= again / tracked <= UNLIKE:
        return None
    return (f"the step re-run under FakeTensorMode after the loop tracked "
            f"{again / 2**20:,.1f} MiB against the {tracked / 2**20:,.1f} MiB of the step "
            "tracked in the loop: the model's work changed since; the what-ifs are scaled")


def _device_budget(device: str) -> int | None:
    """The bytes the step could have had: a GPU's memory; on the CPU, what this process
    holds now and what the host has available (psutil), within a cgroup's limit where one
    is set. None where not known."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    if device != "cpu":
        return None
    try:
        import psutil

        budget = int(psutil.Process().memory_info().rss + psutil.virtual_memory().available)
    except Exception:  # psutil missing or refused: no budget, no largest batch
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
    except OSError:
        return budget
    return min(budget, int(limit)) if limit.isdigit() else budget


def measure(model: Any, optimizer: Any, batch: Any, step_fn: StepFn, *,
            spec: StepSpec | None = None, budget_bytes: int | None = None,
            step_ms: float | None = None, limit_bytes: int | None = None,
            only: Keep | None = None) -> dict[str, Any]:
    """One real step tracked (:func:`~.tracker.track_step`, the model is updated) and its
    memory section: kinds, modules, timeline, what-ifs (those ``only`` keeps), and an OOM
    explained. ``limit_bytes`` emulates a device of that size (and is the budget if none is
    given). An optimizer with no state yet (its first step makes it: Adam's moments) is
    stepped twice, both tracked, and the second is the section's: every later step holds
    that state from its start, which the first one does not."""
    fresh = optimizer is not None and not getattr(optimizer, "state", True)
    m = track_step(model, optimizer, batch, step_fn, spec=spec, limit_bytes=limit_bytes)
    notes = []
    if fresh and m.oom is None and getattr(optimizer, "state", None):
        m = track_step(model, optimizer, batch, step_fn, spec=spec, limit_bytes=limit_bytes)
        notes.append("the optimizer had no state yet: its first step made it, and the "
                     "second step, which holds it throughout as every later one does, is "
                     "the one measured (the model was updated twice)")
    sec = live_section(m, model=model, optimizer=optimizer, batch=batch, step_fn=step_fn,
                       budget_bytes=budget_bytes or limit_bytes, step_ms=step_ms, only=only)
    sec["notes"] = [*notes, *sec.get("notes", [])]
    return sec


__all__ = ["fake_what_ifs", "largest_batch_fake", "leading_size", "live_section", "measure",
           "supported_amp"]
