"""Watch a whole training run: a near-free step clock, change detection, captures taken
at the moment a change is detected, and what changed against a baseline window.

    from diagnose import watch
    with watch(model, loader, out_dir="runs") as w:
        for x, y in loader:
            ...
    w.alarms        # sustained changes, each with the diagnosis of its profiled window
    w.to_json()     # the whole record (also <run>/watch.json)

The rooms: :mod:`.watcher` (the lifecycle), :mod:`.clock` (step boundaries and times),
:mod:`.store` (bounded memory), :mod:`.timeline` (the run folder's files, and reading
them back), :mod:`.detector` and :mod:`.signals` (change points), :mod:`.captures` (when
to profile; the windows) and :mod:`.window` (one window, its analysis), :mod:`.changes`
(against the baseline), :mod:`.host` (the machine around an alarm), :mod:`.energy`,
:mod:`.sampling`, :mod:`.ranks`, :mod:`.summary`. See docs/watch.md.
"""

from .alarm import Alarm
from .timeline import read_timeline
from .watcher import Watch, watch

__all__ = ["Alarm", "Watch", "read_timeline", "watch"]
