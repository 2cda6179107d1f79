"""Importing the samples from their folder (they import their own ``_common`` as a
sibling, as ``python samples/<name>.py`` would)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def sample(name: str) -> ModuleType:
    if str(SAMPLES) not in sys.path:
        sys.path.insert(0, str(SAMPLES))
    return importlib.import_module(name)
