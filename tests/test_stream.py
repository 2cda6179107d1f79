"""The chunked (streaming) reader gives exactly what the whole-document reader gives."""

from __future__ import annotations

import gzip
import json
import os

import pytest

import diagnose.trace.stream as stream
from diagnose.errors import TraceError
from diagnose.trace import read_trace
from tests import tracebuilder as tb
from tests.conftest import REPO, all_shared_traces
from tests.readers import trace_difference


def assert_same(a, b):
    assert trace_difference(a, b) is None, trace_difference(a, b)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 32 * 1024)  # many chunks even on small files
    monkeypatch.setattr(stream, "BLOCK_BYTES", 8 * 1024)


FILES = all_shared_traces() + sorted((REPO / "samples" / "traces").rglob("*.json.gz"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:40])
def test_streaming_equals_whole_read(path, small_chunks):
    whole = read_trace(path, stream=False)
    streamed = stream.read_streaming(path, 2**40)  # raises NotStreamable if it fell back
    assert_same(whole, streamed)


@pytest.mark.parametrize("legacy", [False, True])
def test_builder_traces_stream(tmp_path, small_chunks, legacy):
    p = tmp_path / "t.pt.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps(tb.launch_bound(legacy=legacy).build(),
                                           indent=2).encode()))
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["minified", "json.dump"])
def test_one_line_json_streams(tmp_path, small_chunks, separators, gz):
    """A trace on one long line (json.dump with no indent, as other tools re-export or
    merge traces) is cut by the string-aware scan, not read whole."""
    data = json.dumps(tb.launch_bound().build(), separators=separators).encode()
    assert b"\n" not in data
    p = tmp_path / ("one-line.json.gz" if gz else "one-line.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))


def test_odd_values_fall_back_to_the_lenient_path(tmp_path, small_chunks):
    doc = tb.healthy().build()
    doc["traceEvents"][5]["dur"] = "12.5"  # a number written as a string
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc, indent=2))
    with pytest.raises(stream.NotStreamable):
        stream.read_streaming(p, 2**40)
    assert len(read_trace(p, stream=True)) == len(read_trace(p, stream=False))


def test_streaming_errors_are_trace_errors(tmp_path, small_chunks, monkeypatch):
    raw = json.dumps(tb.healthy().build(), indent=2).encode()
    gz = gzip.compress(raw)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        read_trace(cut, stream=True)
    big = tmp_path / "big.json.gz"
    big.write_bytes(gz)
    monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", str(len(raw) // 2))
    with pytest.raises(TraceError, match="byte limit"):
        read_trace(big, stream=True)


def test_multi_member_gzip_streams(tmp_path, small_chunks):
    raw = json.dumps(tb.healthy().build(), indent=2).encode()
    half = len(raw) // 2
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(raw[:half]) + gzip.compress(raw[half:]))
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))


def test_one_event_per_line_layout_streams(tmp_path, small_chunks):
    """Writers that put each event on one line (`\\n  {...},`) stream too."""
    doc = tb.healthy().build()
    events = doc.pop("traceEvents")
    body = ",\n  ".join(json.dumps(e) for e in events)
    head = json.dumps(doc)[:-1]
    p = tmp_path / "lines.json"
    p.write_text(head + ', "traceEvents": [\n  ' + body + '\n], "traceName": "x"}')
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))


@pytest.mark.parametrize("indent", [2, None], ids=["indented", "one-line"])
@pytest.mark.parametrize("chunk", [64, 4096, 8 * 2**20], ids=["events-longer-than-chunk",
                                                                "many-chunks", "one-chunk"])
def test_parallel_read_equals_whole_read(tmp_path, small_chunks, monkeypatch, chunk, indent,
                                         forkable):
    """Byte ranges decoded in worker processes merge into exactly the whole-read Trace,
    whatever the chunk size (a chunk smaller than one event makes the buffer grow) and
    the layout."""
    from diagnose.trace import parallel

    monkeypatch.setattr(parallel, "_WINDOW", 4096)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", chunk)
    doc = tb.launch_bound().build()
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc, indent=indent))
    assert_same(read_trace(p, stream=False), parallel.read_parallel(p, 2**40, 3))
    # and through read_trace's own choice, with the size threshold lowered
    from diagnose.trace import reader

    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 1)
    assert_same(read_trace(p, stream=False), read_trace(p, stream=True, workers=2))


GZ_FILES = [p for p in FILES if p.name.endswith(".gz")]


@pytest.mark.parametrize("path", GZ_FILES[:3] + GZ_FILES[-2:], ids=lambda p: p.name[:40])
def test_pipelined_gz_read_equals_whole_read(path, small_chunks, monkeypatch, forkable):
    """A .json.gz decompressed here and decoded by worker processes, many small arrays in
    flight, merges into exactly the whole-read Trace; read_trace picks that path for a
    large .gz."""
    from diagnose.trace import parallel, reader

    whole = read_trace(path, stream=False)
    assert_same(whole, parallel.read_pipelined(path, 2**40, 2))
    monkeypatch.setattr(reader, "PIPELINE_MIN_GZ_BYTES", 1)
    called = []
    monkeypatch.setattr(reader, "read_pipelined",
                        lambda *a: called.append(a) or parallel.read_pipelined(*a))
    assert_same(whole, read_trace(path, stream=True, workers=2))
    assert called


def test_pipelined_read_reports_bad_gzip_in_one_line(tmp_path, forkable):
    from diagnose.trace import parallel

    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(json.dumps(tb.healthy().build(), indent=2).encode())[:-20])
    with pytest.raises(TraceError, match="truncated gzip"):
        parallel.read_pipelined(p, 2**40, 2)


def test_parallel_read_refuses_odd_layouts(tmp_path):
    from diagnose.trace import parallel

    p = tmp_path / "list.json"
    p.write_text(json.dumps(tb.healthy().build()["traceEvents"]))  # a bare list of events
    with pytest.raises(stream.NotStreamable):
        parallel.read_parallel(p, 2**40, 2)


def test_events_without_phase_decode_plain(tmp_path, small_chunks):
    """Chunks are decoded by phase (flows come out field-less); an event with no or an
    unknown ``ph`` switches the reader to plain events and nothing is lost."""
    doc = tb.launch_bound().build()
    evs = doc["traceEvents"]
    n_flows = sum(1 for e in evs if e.get("ph") in ("s", "t", "f"))
    assert n_flows > 0
    for i, e in enumerate(evs):
        if i % 7 == 3:
            e.pop("ph", None)
        elif i % 11 == 5:
            e["ph"] = "?"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=2))
    d = stream.ChunkDecoder()
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))
    assert d.by_phase
    assert d.decode(b'[{"ph": "X", "ts": 1}, {"ts": 2}]')[1].ts == 2.0 and not d.by_phase
    flows = stream.ChunkDecoder().decode(b'[{"ph": "s", "id": 1, "ts": 5, "cat": "ac2g"}]')
    assert not hasattr(flows[0], "ts")  # nothing of a flow is kept


def _die(*_args):
    """A worker's task that kills its process (a module-level function: tasks are pickled)."""
    os._exit(9)


@pytest.mark.parametrize("gz", [False, True], ids=["byte-ranges", "pipelined"])
def test_a_dead_worker_costs_speed_not_the_analysis(tmp_path, monkeypatch, gz, forkable):
    """A worker process that dies (the OOM killer, say) breaks the pool; the file is then
    read in this process, with the same result."""
    from diagnose.trace import parallel, reader

    data = json.dumps(tb.launch_bound().build(), indent=2).encode()
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(reader, "PIPELINE_MIN_GZ_BYTES", 1)
    monkeypatch.setattr(parallel, "_decode_range", _die)
    monkeypatch.setattr(parallel, "_decode_array", _die)
    with pytest.raises(parallel.BrokenProcessPool):
        (parallel.read_pipelined if gz else parallel.read_parallel)(p, 2**40, 2)
    assert_same(read_trace(p, stream=False), read_trace(p, stream=True, workers=2))
