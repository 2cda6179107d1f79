"""A file of the package holds one idea: none is over 600 lines (CONTRIBUTING)."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "diagnose"
LIMIT = 600
FILES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_files() -> None:
    assert len(FILES) > 50


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_file_over_the_limit(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= LIMIT, f"{path.relative_to(PACKAGE.parent)} has {n} lines: split it by idea"
