"""What every sample shares: finding torch-diagnose in a source checkout, and the CLI.

Importing this module first lets ``from diagnose import diagnose`` work when the
samples run from a checkout where the package is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if importlib.util.find_spec("diagnose") is None:  # a source checkout, not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cli(main: Callable[..., Any], doc: str | None) -> None:
    """``python samples/<name>.py [--out DIR] [--steps N]``."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="folder for the run folder (default diagnose-runs/)")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps")
    args = ap.parse_args()
    main(args.out, steps=args.steps)
