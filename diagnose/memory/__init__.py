"""Where a training step's bytes go, why it ran out, and what a change does to its peak.

- :mod:`.kinds`: the kinds (parameters, gradients, optimizer state, activations,
  temporaries, other) and the model states computed from the model and the optimizer;
- :mod:`.tracker`: one step measured with torch's MemTracker (by kind, by module, the
  timeline, an out-of-memory error caught); :mod:`.profile`: that measurement as data;
- :mod:`.fake`: a step re-run under FakeTensorMode at a changed setting;
- :mod:`.whatif`: a change's peak scaled from the measured kinds; :mod:`.live`: the what-ifs
  of a live capture, re-run where the step is a function; :mod:`.oom`: an OOM explained;
- :mod:`.inplace`: one of the loop's own steps tracked where it runs (a live session's);
- :mod:`.trace`: what a trace's ``[memory]`` events say; :mod:`.section`: the analysis
  result's ``memory`` section.

The modules that run torch (tracker, fake, live) are imported when first used, so that
analysing a trace never imports torch.
"""

from __future__ import annotations

from typing import Any

from .kinds import KINDS, model_states, predicted_state_bytes
from .oom import FIT_MARGIN, explain
from .section import memory_section
from .trace import trace_memory
from .whatif import WhatIf, changes, largest_batch, scaled, scaled_what_ifs


def track_step(model: Any, optimizer: Any, batch: Any, step_fn: Any, **kw: Any) -> Any:
    """One real step measured (see :func:`diagnose.memory.tracker.track_step`)."""
    from .tracker import track_step as run

    return run(model, optimizer, batch, step_fn, **kw)


def measure(model: Any, optimizer: Any, batch: Any, step_fn: Any, **kw: Any) -> dict[str, Any]:
    """One real step measured and its memory section (see :func:`.live.measure`)."""
    from .live import measure as run

    return run(model, optimizer, batch, step_fn, **kw)


__all__ = ["FIT_MARGIN", "KINDS", "WhatIf", "changes", "explain", "largest_batch", "measure",
           "memory_section", "model_states", "predicted_state_bytes", "scaled",
           "scaled_what_ifs", "trace_memory", "track_step"]
