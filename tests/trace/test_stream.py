"""The chunked (streaming) reader gives exactly what the whole-document reader gives."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diagnose.trace.stream as stream
from diagnose.errors import TraceError
from diagnose.trace import cut, read_trace
from tests import tracebuilder as tb
from tests.conftest import REPO, all_shared_traces
from tests.fuzz_strategies import LAYOUTS, _dumps, clean_event, json_value, tricky_text
from tests.readers import InProcessExecutor, check_chunked_reads, trace_difference
from tests.readers import small_chunks as tiny_pieces


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
    flight, merges into exactly the whole-read Trace; read_trace takes that path for a
    large .gz whose text cannot be cut into ranges."""
    from diagnose.trace import parallel, reader

    whole = read_trace(path, stream=False)
    assert_same(whole, parallel.read_pipelined(path, 2**40, 2))
    monkeypatch.setattr(reader, "PIPELINE_MIN_GZ_BYTES", 1)

    def no_ranges(*_a):
        raise stream.NotStreamable

    monkeypatch.setattr(reader, "read_text_ranges", no_ranges)
    called = []
    monkeypatch.setattr(reader, "read_pipelined",
                        lambda *a: called.append(a) or parallel.read_pipelined(*a))
    assert_same(whole, read_trace(path, stream=True, workers=2))
    assert called


@pytest.mark.parametrize("path", GZ_FILES[:3] + GZ_FILES[-2:], ids=lambda p: p.name[:40])
def test_text_ranges_of_a_gz_read_equal_whole_read(path, small_chunks, monkeypatch, forkable):
    """A .json.gz whose ranges of text each worker decompresses up to its end and decodes
    alone merges into exactly the whole-read Trace; read_trace takes that path first for
    a large .gz."""
    from diagnose.trace import parallel, reader

    whole = read_trace(path, stream=False)
    assert_same(whole, parallel.read_text_ranges(path, 2**40, 2))
    monkeypatch.setattr(reader, "PIPELINE_MIN_GZ_BYTES", 1)
    called = []
    monkeypatch.setattr(reader, "read_text_ranges",
                        lambda *a: called.append(a) or parallel.read_text_ranges(*a))
    monkeypatch.setattr(reader, "read_pipelined", lambda *a: pytest.fail("not needed"))
    assert_same(whole, read_trace(path, stream=True, workers=2))
    assert called


def test_text_ranges_that_meet_inside_one_long_event(tmp_path):
    """Ranges whose nominal ends fall inside one event far longer than a range: each finds
    the same next event, ranges left without one are empty, and every event is read
    once. A gzip whose trailer's size is less than the file (an empty or small last
    member, padding) gives way: its ranges would all fall at the text's start."""
    from diagnose.trace import parallel

    doc = tb.launch_bound().build()
    doc["traceEvents"][5].setdefault("args", {})["blob"] = "x" * 200_000
    text = json.dumps(doc, indent=2).encode()
    whole_path = tmp_path / "t.json"
    whole_path.write_bytes(text)
    whole = read_trace(whole_path, stream=False)
    ex = InProcessExecutor()
    p = tmp_path / "one.json.gz"
    p.write_bytes(gzip.compress(text))
    with tiny_pieces(4096, 8192, 61):
        for workers in (2, 3, 7):
            assert_same(whole, parallel.read_text_ranges(p, 2**40, workers, pool=ex))
        for tail in (gzip.compress(b""), gzip.compress(b" " * 10), b"\0" * 8):
            p.write_bytes(gzip.compress(text) + tail)
            with pytest.raises(stream.NotStreamable):
                parallel.read_text_ranges(p, 2**40, 2, pool=ex)


def test_one_line_ranges_whose_end_falls_between_two_events(tmp_path):
    """On one line an event is found by ``}, {``, at its ``{``: a range's end that falls
    between a long event's ``}`` and the next ``{`` must still meet the next range's
    start there, whatever the padding puts where (an event was lost here once)."""
    from diagnose.trace import parallel

    events = [{"ph": "X", "name": f"op{i}", "cat": "cpu_op", "pid": 1, "tid": 1,
               "ts": 10 * i, "dur": 5} for i in range(40)]
    p = tmp_path / "t.json.gz"
    same = 0
    for pad in range(1980, 2010):
        events[30]["args"] = {"blob": "x" * pad}
        p.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
        whole = read_trace(p, stream=False)
        for workers in (1, 2, 3):
            try:
                got = parallel.read_text_ranges(p, 2**40, workers, pool=InProcessExecutor())
            except stream.NotStreamable:
                continue
            assert_same(whole, got)
            same += 1
    assert same > 60  # most cuts find their events: the test reads ranges, not fallbacks


def test_text_ranges_give_way_where_the_text_is_past_the_limit(tmp_path, monkeypatch):
    """A gzip whose head is within the limit and whose text is not: the ranges' workers
    give way, and read_trace says why in one line."""
    from diagnose.trace import parallel, reader

    text = json.dumps(tb.launch_bound().build(), indent=2).encode()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text))
    limit = len(text) // 2
    with tiny_pieces(4096, 4096, 61):
        with pytest.raises(stream.NotStreamable):
            parallel.read_text_ranges(p, limit, 2, pool=InProcessExecutor())
        monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", str(limit))
        monkeypatch.setattr(reader, "PIPELINE_MIN_GZ_BYTES", 1)
        monkeypatch.setattr(parallel, "fork_pool", lambda n: InProcessExecutor())
        with pytest.raises(TraceError, match="limit"):
            read_trace(p, stream=True, workers=2)


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
    assert bytes(d.decode(b'[{"ph": "X", "ts": 1}, {"ts": 2}]')[1].ts) == b"2" and not d.by_phase
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
    monkeypatch.setattr(parallel, "_decode_text_range", _die)
    for read in ((parallel.read_pipelined, parallel.read_text_ranges) if gz
                 else (parallel.read_parallel,)):
        with pytest.raises(parallel.BrokenProcessPool):
            read(p, 2**40, 2)
    assert_same(read_trace(p, stream=False), read_trace(p, stream=True, workers=2))


# ------------------------------------------------------------------ the cut of any layout


def value_ends(values: list, sep: bytes) -> tuple[bytes, list[int], int]:
    """``[`` + the values joined by ``sep`` + ``]`` + a trailer; the offsets just past each
    value that ends with a bracket, and the offset of the array's closing bracket."""
    parts = [json.dumps(v).encode() for v in values]
    ends, off = [], 1
    for p in parts:
        off += len(p)
        if p[-1:] in b"}]":
            ends.append(off)
        off += len(sep)
    return b"[" + sep.join(parts) + b'], "x": "]"}', ends, off - len(sep)


def scan_in_pieces(text: bytes, splits: list[int], window: int, monkeypatch) -> tuple[list, int]:
    """Scanner over text[1:] (the array's content), one call per piece between ``splits``."""
    monkeypatch.setattr(cut, "SCAN_WINDOW", window)
    s, ends, close = cut.Scanner(), [], -1
    bounds = [1, *sorted(p for p in splits if 1 < p < len(text)), len(text)]
    for a, b in itertools.pairwise(bounds):
        found, close = s.scan(text, a, b)
        ends += found.tolist()
        if close >= 0:
            break
    return ends, close


TRICKY_VALUES = [
    {"name": '}, {"ph": "X", "ts": 1}'}, {"a": "\\"}, {"b": '\\"'}, {"c": '\\\\"}, {'},
    {"d": "\u00e9\u202e\x00", "e": [{"f": "]"}, "[", {}]}, [], {}, 7, "}]", None,
    {'"k"': {"\\": ["x" * 300, '"' * 50, "\\" * 51]}},
]


@pytest.mark.parametrize("window", [1, 2, 3, 64, 2**20])
def test_scanner_every_split_point(window, monkeypatch):
    """Values whose strings hold brackets, commas, escaped quotes and backslash runs, with
    the text split at every byte (in a string, between a backslash and what it escapes,
    inside a run of backslashes) and scanned in windows of every small size: the value
    ends and the array's end are found exactly."""
    text, ends, close = value_ends(TRICKY_VALUES, b", ")
    step = 1 if window > 3 else 17  # every byte with big windows; a sample with tiny ones
    for p in range(1, len(text), step):
        assert scan_in_pieces(text, [p], window, monkeypatch) == (ends, close), p


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(json_value, st.dictionaries(tricky_text, json_value, max_size=3)),
                min_size=1, max_size=8),
       st.sampled_from([b",", b", ", b" ,\n\t"]), st.lists(st.integers(0, 5000), max_size=6),
       st.sampled_from([1, 5, 61, 2**20]))
def test_scanner_matches_the_values(values, sep, splits, window):
    text, ends, close = value_ends(values, sep)
    with pytest.MonkeyPatch.context() as mp:
        assert scan_in_pieces(text, splits, window, mp) == (ends, close)


def test_scanner_carries_escapes_across_windows(monkeypatch):
    r"""A window that ends in the middle of a run of backslashes: `\\\"` is an escaped
    backslash then an escaped quote (still in the string); `\\"` ends the string."""
    monkeypatch.setattr(cut, "SCAN_WINDOW", 1)
    for body, ends in ((rb'{"a": "\\\"}, {"}', [18]), (rb'{"a": "\\"}, {"b": 1}', [12, 22])):
        s = cut.Scanner()
        found, close = s.scan(b"[" + body + b"]", 1, len(body) + 2)
        assert (found.tolist(), close) == (ends, len(body) + 1)


def test_array_start_is_the_top_level_key():
    text = (b'{"a": "\\"traceEvents\\": [", "m": {"traceEvents": [1]}, '
            b'"traceEvents" : [{"ph": "X"}]}')
    m = cut.array_start(text)
    assert m is not None and m.start() == text.rindex(b'"traceEvents" : [')
    assert cut.array_start(b'[{"traceEvents": [{}]}]') is None  # a list, not a document
    assert cut.array_start(b'{"x": ["traceEvents": [') is None


def test_event_array_wants_exactly_one_comma():
    assert cut.event_array(b'{"a": 1} ,\n ', 12) == b'[{"a": 1}]'
    assert cut.event_array(b'{"a": 1}\n', 9, comma=False) == b'[{"a": 1}]'
    for text in (b'{"a": 1}\n', b"  ,  ", b""):
        with pytest.raises(stream.NotStreamable):
            cut.event_array(text, len(text))
    with pytest.raises(stream.NotStreamable):
        cut.event_array(b"  ", 2, comma=False)


def small_trace() -> dict:
    """A trace small enough to read in pieces of a few bytes (~100 events, 23 kB)."""
    return tb.launch_bound(kernels=10, steps=1).build()


def _trace_with(layout: str, tricky: str) -> dict:
    doc = small_trace()
    for i, e in enumerate(doc["traceEvents"]):
        if i % 3 == 0:
            e.setdefault("args", {})["note"] = tricky * (1 + i % 7)
    doc["traceName"] = tricky
    return doc


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("sizes", [(512, 1024, 61), (97, 300, 7)], ids=["512", "97"])
def test_strings_that_look_like_structure_stream(tmp_path, layout, sizes):
    """Events whose strings hold fake events, brackets, escaped quotes and backslash runs
    (long ones across every chunk and window): the streaming and pipelined readers give
    the whole read's Trace in every layout, never a fallback; the byte-range and
    text-range readers give it too, or (a range start guessed inside a string) give way."""
    doc = _trace_with(layout, '}, {"ph": "X", "cat": "kernel", "ts": 0} \\" \\\\" ]}')
    p = tmp_path / "t.json"
    p.write_bytes(_dumps(doc, layout))
    whole = read_trace(p, stream=False)
    ex = InProcessExecutor()
    with tiny_pieces(*sizes):
        assert_same(whole, stream.read_streaming(p, 2**40))
        assert_same(whole, parallel_module().read_pipelined(p, 2**40, 2, pool=ex))
        for read in (parallel_module().read_parallel, parallel_module().read_text_ranges):
            try:
                assert_same(whole, read(p, 2**40, 3, pool=ex))
            except stream.NotStreamable:
                assert layout not in ("indent 1", "indent 2")


def parallel_module():
    from diagnose.trace import parallel

    return parallel


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(clean_event(), min_size=1, max_size=25), st.sampled_from(list(LAYOUTS)),
       tricky_text, st.sampled_from([(512, 1024, 61), (97, 300, 7)]))
def test_clean_traces_stream_in_every_layout(events, layout, text, sizes):
    """Well-typed events with tricky strings before, in and after them, in any layout:
    the streaming reader never falls back and gives the whole read's Trace; a trace the
    whole read refuses (its timed events mostly run backwards: ten or more of the drawn
    -5 us durations) it refuses alike."""
    kernel = {"ph": "X", "cat": "kernel", "name": text, "pid": 0, "tid": 7, "ts": 1.0,
              "dur": 2.0, "args": {text: text}}
    doc = {text: [text], "traceEvents": [kernel, *events], "traceName": text}
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        p.write_bytes(_dumps(doc, layout))
        try:
            whole = read_trace(p, stream=False)
        except TraceError as e:
            assert "negative durations" in str(e)
            with tiny_pieces(*sizes), pytest.raises(TraceError, match="negative durations"):
                stream.read_streaming(p, 2**40)
            return
        with tiny_pieces(*sizes):
            assert_same(whole, stream.read_streaming(p, 2**40))


def _separators(data: bytes) -> list[int]:
    """Offsets of the commas between events (after each event's closing brace)."""
    ends = cut.Scanner().scan(data, cut.array_start(data).end(), len(data))[0]
    return [data.index(b",", e) for e in ends.tolist() if data.find(b",", e) >= 0
            and not data[e:data.index(b",", e)].strip()]


@pytest.mark.parametrize("layout", ["indent 2", "one line", "minified"])
@pytest.mark.parametrize("bad", [b" ", b",,", b"\x0c,", b", ,"], ids=repr)
def test_a_broken_separator_is_never_accepted(tmp_path, layout, bad):
    """A missing, doubled or odd-spaced comma between two events makes the file invalid
    JSON: wherever it falls (at a cut or not), every chunked reader refuses it or reads
    the whole file instead (which refuses it), never returns events."""
    data = _dumps(small_trace(), layout)
    p = tmp_path / "t.json"
    for i in _separators(data)[::9]:
        p.write_bytes(data[:i] + bad + data[i + 1:])
        with pytest.raises(TraceError):
            read_trace(p, stream=False)
        outcomes, problems = check_chunked_reads(p, (97, 300, 7))
        assert not problems, (i, problems)
        assert not any(o.endswith("same trace") for o in outcomes)


def test_only_json_white_space_is_left_out(tmp_path):
    r"""Text a cut leaves out (around the array's brackets and commas) may only be JSON's
    own white space: a form feed there is invalid JSON, refused by every reader."""
    data = _dumps(small_trace(), "one line")
    for bad in (data.replace(b'"traceEvents": [', b'"traceEvents":\x0c['),
                data.replace(b'"traceEvents": [', b'"traceEvents": [\x0c'),
                data[:data.rindex(b"]")] + b"\x0c" + data[data.rindex(b"]"):]):
        p = tmp_path / "t.json"
        p.write_bytes(bad)
        with pytest.raises(TraceError):
            read_trace(p, stream=False)
        with pytest.raises((stream.NotStreamable, TraceError)):
            stream.read_streaming(p, 2**40)


def test_nested_or_second_event_arrays(tmp_path, small_chunks):
    """A "traceEvents" key inside another field is not the event array; a second
    top-level one (the whole read takes the last) makes the chunked read give way."""
    doc = tb.launch_bound().build()
    events = json.dumps(doc.pop("traceEvents"))
    fake = '[{"ph": "X", "cat": "kernel", "name": "fake", "ts": 1, "dur": 1}]'
    p = tmp_path / "t.json"
    p.write_text('{"meta": {"traceEvents": ' + fake + '}, "traceEvents": ' + events + "}")
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))
    p.write_text('{"traceEvents": ' + events + ', "traceEvents": ' + fake + "}")
    with pytest.raises(stream.NotStreamable):
        stream.read_streaming(p, 2**40)
    assert_same(read_trace(p, stream=False), read_trace(p, stream=True))


def test_events_on_their_own_lines_only_at_first(tmp_path, small_chunks):
    """The first event on its own line, the rest on one line: the line cut finds no more
    line breaks and scans from there on."""
    doc = tb.launch_bound().build()
    events = ", ".join(json.dumps(e) for e in doc.pop("traceEvents"))
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [\n  ' + events + '], "traceName": "x"}')
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))


def test_unkept_events_ts_checked_but_not_flows(tmp_path, small_chunks):
    """An event the columns leave out still has its ``ts`` checked (a metadata event's
    null ts makes the chunked read give way, as the whole read refuses it); a flow's is
    not read by any reader, so a null there streams and gives the whole read's trace."""
    doc = tb.launch_bound().build()
    evs = doc["traceEvents"]
    flow = next(i for i, e in enumerate(evs) if e.get("ph") in ("s", "t", "f"))
    evs[flow]["ts"] = None
    p = tmp_path / "flow.json"
    p.write_text(json.dumps(doc, indent=2))
    assert_same(read_trace(p, stream=False), stream.read_streaming(p, 2**40))
    evs.append({"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": None,
                "args": {"name": "x"}})
    p.write_text(json.dumps(doc, indent=2))
    with pytest.raises(stream.NotStreamable):
        stream.read_streaming(p, 2**40)
    assert len(read_trace(p, stream=True)) == len(read_trace(p, stream=False))
