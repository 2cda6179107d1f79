"""Capture: profiler window, samplers, run context and the run folder they write.

``diagnose.session`` puts these together behind ``with diagnose(model, loader)``;
each piece also works alone (the samplers and run folder need no torch).
"""

from diagnose.runfolder import (
    CONTEXT_FILE,
    SAMPLES_FILE,
    load_context,
    load_samples,
    new_run_dir,
    trace_files,
)

__all__ = [
    "CONTEXT_FILE",
    "SAMPLES_FILE",
    "load_context",
    "load_samples",
    "new_run_dir",
    "trace_files",
]
