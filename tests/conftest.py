"""Shared fixtures: the real traces in ../shared/traces (skipped with a reason where absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = Path(os.environ.get("TORCH_DIAGNOSE_SHARED_TRACES", REPO.parent / "shared" / "traces"))


def shared_trace(rel: str) -> Path:
    """Path of a real trace under ../shared/traces; skips the test if it is not there."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"real trace {rel} not available ({SHARED_TRACES} absent)")
    return p


def all_shared_traces() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


@pytest.fixture
def shared() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} absent: real-trace tests need ../shared/traces")
    return SHARED_TRACES
