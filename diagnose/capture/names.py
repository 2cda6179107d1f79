"""The names the user's own code binds its DataLoader and dataset to, so that a fix's code
reads ``train_dl = DataLoader(train_ds, ...)`` rather than ``loader = DataLoader(dataset,
...)``: looked up by identity among the variables of the first frame outside this package
(the ``with diagnose(...)`` line's), locals before globals. A frame inside a training
library (a callback's) names its own variables, not the user's: none are taken there."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

#: modules whose frames are a library's, not the user's training script
_LIBRARIES = ("diagnose", "torch", "lightning", "pytorch_lightning", "transformers",
              "accelerate", "contextlib")


def _user_frame() -> FrameType | None:
    """The first frame up the stack outside this package and the training libraries'
    own code; None where a library's frame comes first (a callback)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__", "").split(".")[0] == "diagnose":
        f = f.f_back
    if f is None or f.f_globals.get("__name__", "").split(".")[0] in _LIBRARIES:
        return None
    return f


def _name_of(obj: Any, frame: FrameType) -> str | None:
    """The first public name bound to ``obj`` itself in ``frame``'s locals, then globals."""
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if value is obj and name.isidentifier() and not name.startswith("_"):
                return name
    return None


def loader_names(loader: Any) -> dict[str, str]:
    """``{"variable": ..., "dataset_variable": ...}`` for ``loader`` and its dataset, as
    far as the user's frame names them (empty where none does)."""
    if loader is None:
        return {}
    frame = _user_frame()
    if frame is None:
        return {}
    try:
        out = {"variable": _name_of(loader, frame),
               "dataset_variable": _name_of(getattr(loader, "dataset", None), frame)
               if getattr(loader, "dataset", None) is not None else None}
    finally:
        del frame
    return {k: v for k, v in out.items() if v}
