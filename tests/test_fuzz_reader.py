"""Property: any file, however broken, ends in a Report or the project's own error."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from diagnose import analyze
from diagnose.errors import DiagnoseError
from tests.fuzz_strategies import trace_file


def analyze_bytes(data: bytes, workdir: Path) -> None:
    """Raises only if the reader/analysis fails in a way it must not."""
    p = workdir / "case.pt.trace.json"
    p.write_bytes(data)
    try:
        report = analyze(p)
    except DiagnoseError as e:
        msg = str(e)
        assert msg and "\n" not in msg and str(p) in msg, msg
        return
    report.to_json()
    report.render_text()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(trace_file())
def test_any_file_gives_report_or_clear_error(data):
    with tempfile.TemporaryDirectory() as d:
        analyze_bytes(data, Path(d))
