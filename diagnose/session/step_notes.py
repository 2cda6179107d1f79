"""What the session says of the loop's steps: that it could not tell them (the report's
first line, naming ``d.step()``), and models the user did not give it.

Both read what :class:`~diagnose.capture.boundaries.StepFinder` saw; nothing here touches
the user's objects.
"""

from __future__ import annotations

import statistics
from typing import Any

from diagnose.capture.boundaries import StepFinder

#: how the report's first line starts where the steps could not be told
UNTOLD = "torch-diagnose could not tell where this loop's steps begin and end"


def untold_line(why: str) -> str:
    """The report's first line where no step boundary was found, with ``why`` and the
    remedy: ``d.step()`` once a step."""
    return (f"{UNTOLD}: {why}; no step was profiled. Call d.step() at the end of each "
            "step in the `with` block")


def untold_note(finder: StepFinder, *, ended_early: bool) -> str | None:
    """:func:`untold_line` where the finder placed no boundary (None where it did, or where
    ``d.step()`` was used). ``ended_early``: the loop raised (then that is the reason)."""
    if ended_early:
        return None
    why = finder.untold()
    return None if why is None else untold_line(why)


def _fmt(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def others_note(finder: StepFinder, clock: dict[str, list[Any]], given: int) -> str | None:
    """Optimizers that stepped parameters of no model given (a GAN with one of its two
    models given): what they are, how many times the models given ran a step, and how to
    pass them all. None where every optimizer that stepped counted."""
    if not finder.others or not given:
        return None
    opts = ", ".join(f"{cls} ({n} tensors, {_fmt(v)} values)"
                     for cls, n, v in finder.others.values())
    calls = [c for p, c in zip(clock.get("phase", []), clock.get("forwards", []), strict=False)
             if p in ("wait", "after") and isinstance(c, int)]
    ran = ""
    if len(calls) >= 2 and statistics.median(calls) > 1:
        k = statistics.median(calls)
        ran = (f"; the model{'s' if given > 1 else ''} given ran {k:g} times a step")
    counted = ", ".join(type(o).__name__ for o in finder.optimizer_list) or "none"
    some = "an optimizer" if len(finder.others) == 1 else f"{len(finder.others)} optimizers"
    return (f"{some} stepped parameters of modules not given to diagnose(): {opts}{ran}. "
            f"Steps follow the given model's optimizers ({counted}); pass every model to "
            "see the whole step, e.g. diagnose([netG, netD], loader)")
