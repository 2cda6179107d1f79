"""Property: any file, however broken, ends in a Report or the project's own error."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnose import analyze
from diagnose.errors import DiagnoseError
from tests.fuzz_strategies import COMPACT, INDENTED, _dumps, document, trace_file
from tests.readers import check_chunked_reads, chunked_readers


def analyze_bytes(data: bytes, workdir: Path) -> None:
    """Raises only if the reader/analysis fails in a way it must not, or if a chunked
    reader disagrees with the whole-document read."""
    p = workdir / "case.pt.trace.json"
    p.write_bytes(data)
    _, problems = check_chunked_reads(p)
    assert not problems, problems
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


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(document(), st.sampled_from(INDENTED), st.sampled_from(COMPACT), st.booleans(),
       st.sampled_from([(512, 1024, 61), (97, 300, 7)]))
def test_chunked_readers_agree_on_generated_traces(doc, indented, compact, gz, sizes):
    """Generated traces (odd fields, types and numbers, strings full of brackets, commas,
    quotes and backslashes), each written as torch.profiler writes them and on one line,
    read by every chunked reader cut into tiny pieces: the same Trace as the whole read,
    the whole read instead, or the same refusal."""
    for layout in (indented, compact):
        data = _dumps(doc, layout)
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "case.pt.trace.json"
            p.write_bytes(gzip.compress(data) if gz else data)
            outcomes, problems = check_chunked_reads(p, sizes)
        assert not problems, (layout, problems)
        assert len(outcomes) == len(chunked_readers())
