"""Reading torch.profiler / Kineto Chrome traces: layouts, spellings, leniency, bad input."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from diagnose.errors import TraceError
from diagnose.trace import Kind, find_trace_files, read_trace
from diagnose.trace.stream import read_streaming
from tests import tracebuilder as tb


# ----------------------------------------------------------------------------- helpers
def ev(name: str = "aten::mm", cat: str = "cpu_op", ts: Any = 10.0, dur: Any = 5.0,
       pid: Any = 1, tid: Any = 1, ph: str = "X", **args: Any) -> dict[str, Any]:
    """One Chrome-trace event; keyword arguments become its ``args``."""
    e: dict[str, Any] = {"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid,
                         "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def doc(*events: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A trace document: ``{"traceEvents": [...], **top}``."""
    return {"traceEvents": list(events), **top}


def write(path: Path, obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path``, gzipped when the name ends in .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


SIMPLE = doc(ev("ProfilerStep#1", "user_annotation", 0.0, 100.0),
             ev("aten::mm", "cpu_op", 10.0, 20.0),
             ev("cudaLaunchKernel", "cuda_runtime", 12.0, 3.0, correlation=7),
             ev("volta_sgemm_128x64_nn", "kernel", 20.0, 40.0, pid=0, tid=7,
                device=0, stream=7, correlation=7))


def assert_simple(t) -> None:
    assert len(t) == 4
    assert t.names_of(np.arange(4)) == [
        "ProfilerStep#1", "aten::mm", "cudaLaunchKernel", "volta_sgemm_128x64_nn"]
    assert t.kind.tolist() == [Kind.ANNOTATION, Kind.CPU_OP, Kind.RUNTIME, Kind.KERNEL]
    assert t.ts.tolist() == [0.0, 10.0, 12.0, 20.0]
    assert t.dur.tolist() == [100.0, 20.0, 3.0, 40.0]
    assert t.correlation[2:].tolist() == [7.0, 7.0]
    assert t.device[3] == 0.0
    assert t.dropped_events == 0


# ----------------------------------------------------------------------------- good input
@pytest.mark.parametrize("name", ["t.pt.trace.json", "t.pt.trace.json.gz"])
def test_reads_plain_and_gzipped_file(tmp_path, name):
    p = write(tmp_path / name, SIMPLE)
    t = read_trace(p)
    assert_simple(t)
    assert t.path == str(p)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_a_byte_order_mark_before_the_json_is_skipped(tmp_path, gz, stream):
    """Text saved by an editor or a Windows tool may start with UTF-8's byte order mark:
    read whole or in chunks, plain or gzipped, it is the same trace."""
    data = b"\xef\xbb\xbf" + json.dumps(SIMPLE, indent=1).encode()
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    # the chunked read itself (read_trace would fall back to the whole read)
    assert_simple(read_streaming(p, 2**30) if stream else read_trace(p, stream=False))


def test_gzip_is_detected_by_content_not_by_name(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(gzip.compress(json.dumps(SIMPLE).encode()))
    assert_simple(read_trace(p))


def test_folder_of_traces(tmp_path):
    a = write(tmp_path / "b.pt.trace.json.gz", SIMPLE)
    b = write(tmp_path / "a.pt.trace.json", SIMPLE)
    # not traces: other suffixes, and the run folder's own JSON side files
    (tmp_path / "notes.txt").write_text("x")
    for side in ("context.json", "report.json", "samples.json"):
        write(tmp_path / side, {"x": 1})
    assert find_trace_files(tmp_path) == [b, a]
    assert [len(read_trace(p)) for p in find_trace_files(tmp_path)] == [4, 4]


def test_an_autofix_run_folder_reads_as_its_capture(tmp_path):
    """`torch-diagnose autofix` writes autofix.json beside the folder of its capture: the
    capture's trace is what the folder holds (a new user's `analyze diagnose-runs` read
    autofix.json as a trace and stopped: "no 'traceEvents' in the file")."""
    run = tmp_path / "diagnose-runs" / "20261202-113310-793"
    write(run / "autofix.json", {"decisions": []})
    trace = write(run / "20261202-113310-999" / "vm_1.1796211191650053018.pt.trace.json.gz",
                  SIMPLE)
    assert find_trace_files(run) == [trace]
    assert find_trace_files(tmp_path / "diagnose-runs") == [trace]


def test_a_folders_other_json_files_are_passed_over(tmp_path):
    """A folder holding a trace and an ``hparams.json`` (a new user's; or a package's
    ``.cdx.json`` under a folder searched below) was refused whole: "no 'traceEvents' in the
    file". Files without ``"traceEvents"`` near their start are passed over, by their text
    (a trace under any name, gzipped or not, is kept); a file named alone is still read,
    and says what it is not."""
    t1 = write(tmp_path / "run" / "trace.json", SIMPLE)  # no profiler's name
    t2 = tmp_path / "run" / "t2.json"
    t2.write_bytes(gzip.compress(json.dumps(SIMPLE).encode()))  # gzipped under .json
    hp = write(tmp_path / "run" / "hparams.json", {"lr": 0.1, "note": "traceEvents"})
    write(tmp_path / "run" / "metrics.json.gz", [1, 2, 3])
    assert find_trace_files(tmp_path / "run") == [t2, t1]
    write(tmp_path / "pkg" / "deep" / "sbom.cdx.json", {"bomFormat": "CycloneDX"})
    with pytest.raises(TraceError, match=r"holds no trace files.*passed over.*sbom\.cdx\.json"):
        find_trace_files(tmp_path / "pkg")
    assert find_trace_files(hp) == [hp]
    with pytest.raises(TraceError, match="no 'traceEvents'|has no events"):
        read_trace(hp)


def test_several_paths_and_duplicates(tmp_path):
    a = write(tmp_path / "one" / "a.json", SIMPLE)
    b = write(tmp_path / "two" / "b.json.gz", SIMPLE)
    assert find_trace_files([a, str(b), a, tmp_path / "two"]) == [a, b]


def test_tensorboard_run_folder_layout(tmp_path):
    run = tmp_path / "run"
    p = write(run / "host_123.1700000000000.pt.trace.json.gz", SIMPLE)
    assert find_trace_files(run) == [p]


def test_tensorboard_plugins_profile_layout(tmp_path):
    run = tmp_path / "run"
    p1 = write(run / "plugins" / "profile" / "2024_01_01_10_00_00" / "host.pt.trace.json.gz",
               SIMPLE)
    p2 = write(run / "plugins" / "profile" / "2024_01_01_11_00_00" / "host.pt.trace.json.gz",
               SIMPLE)
    (run / "events.out.tfevents.1700000000.host").write_bytes(b"\0\1")
    assert find_trace_files(run) == [p1, p2]
    # a log dir of several runs finds every run's traces
    other = write(tmp_path / "run2" / "w.pt.trace.json", SIMPLE)
    assert find_trace_files(tmp_path) == [p1, p2, other]
    assert_simple(read_trace(p1))


def test_both_category_spellings_map_to_the_same_kinds(tmp_path):
    current = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation"]
    legacy = ["Kernel", "Memcpy", "Memset", "Runtime", "Operator", "user_annotation"]
    expected = [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.RUNTIME, Kind.CPU_OP,
                Kind.ANNOTATION]
    kinds = []
    for label, cats in (("now", current), ("2021", legacy)):
        d = doc(*(ev(f"e{i}", c, ts=float(i)) for i, c in enumerate(cats)))
        kinds.append(read_trace(write(tmp_path / f"{label}.json", d)).kind.tolist())
    assert kinds[0] == kinds[1] == [int(k) for k in expected]


def test_other_kinds(tmp_path):
    d = doc(ev("[memory]", "cpu_instant_event", ph="i", dur=0),
            ev("[memory]", "", ph="i", dur=0),
            ev("nccl:all_reduce", "gpu_user_annotation"),
            ev("train.py(12): step", "python_function"),
            ev("cuLaunchKernel", "cuda_driver"),
            ev("PyTorch Profiler (0)", "Trace"),
            ev("unknown", "mtia_runtime"))
    t = read_trace(write(tmp_path / "k.json", d))
    kinds = dict(zip(t.names_of(np.arange(len(t))), t.kind.tolist(), strict=True))
    # an unknown category is either set aside or kept as OTHER, never given a known kind
    assert kinds.pop("unknown", Kind.OTHER) == Kind.OTHER
    assert t.kind[:2].tolist() == [Kind.MEMORY, Kind.MEMORY]
    assert kinds == {"[memory]": Kind.MEMORY, "nccl:all_reduce": Kind.GPU_ANNOTATION,
                     "train.py(12): step": Kind.PYTHON, "cuLaunchKernel": Kind.RUNTIME,
                     "PyTorch Profiler (0)": Kind.TRACE}


def test_metadata_and_flow_events_are_skipped(tmp_path):
    d = doc({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
            ev("aten::add"),
            {"ph": "s", "cat": "ac2g", "name": "", "pid": 1, "tid": 1, "ts": 11, "id": 3},
            {"ph": "f", "cat": "ac2g", "name": "", "pid": 0, "tid": 7, "ts": 20, "id": 3})
    t = read_trace(write(tmp_path / "m.json", d))
    assert len(t) == 1 and t.names_of(np.arange(1)) == ["aten::add"]


def test_string_pids_and_tids(tmp_path):
    d = doc(ev("a", pid="Spans", tid="PyTorch Profiler"),
            ev("k", "Kernel", pid=0, tid="stream 7"),
            ev("b", pid=1234, tid=1234))
    t = read_trace(write(tmp_path / "s.json", d))
    assert [t.pids[i] for i in t.pid_id] == ["Spans", "0", "1234"]
    assert [t.tids[i] for i in t.tid_id] == ["PyTorch Profiler", "stream 7", "1234"]
    assert t.dropped_events == 0


def test_float_and_sub_microsecond_times(tmp_path):
    d = doc(ev("a", ts=1623143089861.125, dur=0.25),
            ev("b", ts=1623143089861.5, dur=0.001),
            ev("c", ts=7, dur=3))
    t = read_trace(write(tmp_path / "f.json.gz", d))
    assert t.ts.tolist() == [1623143089861.125, 1623143089861.5, 7.0]
    assert t.dur.tolist() == [0.25, 0.001, 3.0]
    assert t.end[0] == 1623143089861.375


def test_negative_duration_counts_as_zero(tmp_path):
    """A few negative durations count as 0 and are said; a trace whose timed events mostly
    run backwards is no profiler's (a new user's file of them read as a healthy 1.9 ms
    step): one line, exit 2."""
    from diagnose.metrics.device import unread_note

    t = read_trace(write(tmp_path / "n.json", doc(ev(dur=-5.0), ev(dur=2.0), ev(dur=3.0))))
    assert t.dur.tolist() == [0.0, 2.0, 3.0] and t.negative_durations == 1
    assert (unread_note(t) or "").startswith("1 event has a negative duration: counted as")
    backwards = doc(*[ev(ts=10.0 * i, dur=-5.0) for i in range(12)], ev(dur=3.0))
    with pytest.raises(TraceError, match="12 of its 13 timed events have negative durations"):
        read_trace(write(tmp_path / "b.json", backwards))


def test_missing_top_level_metadata(tmp_path):
    t = read_trace(write(tmp_path / "plain.json", SIMPLE))
    assert t.device_properties == []
    assert t.distributed_info is None
    assert t.schema_version is None
    assert t.rank is None and t.world_size is None and t.backend is None


def test_top_level_metadata_is_kept(tmp_path):
    props = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8}]
    d = {**SIMPLE, "schemaVersion": 1, "deviceProperties": props,
         "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8}}
    t = read_trace(write(tmp_path / "meta.json", d))
    assert t.device_properties == props
    assert t.schema_version == 1
    assert (t.rank, t.world_size, t.backend) == (3, 8, "nccl")


def test_compute_properties_stand_in_for_device_properties(tmp_path):
    props = [{"id": 0, "name": "Tesla V100"}]
    t = read_trace(write(tmp_path / "c.json", {**SIMPLE, "computeProperties": props}))
    assert t.device_properties == props


def test_bare_array_of_events(tmp_path):
    p = write(tmp_path / "bare.json", SIMPLE["traceEvents"])
    assert_simple(read_trace(p))


@pytest.mark.parametrize(
    ("name", "info", "rank"),
    [
        ("plain.pt.trace.json", None, None),
        ("host_rank-3.1700.pt.trace.json", None, 3),
        ("rank_12.json", None, 12),
        ("resnet50_num_workers_0__worker5.1623143089861.pt.trace.json", None, 5),
        ("worker_7.json", None, 7),
        ("rank-7.json", {"rank": 2, "world_size": 8}, 2),  # distributedInfo wins
        ("rank-7.json", {"rank": "2"}, 7),  # a non-int rank falls back to the name
        ("plain.json", {"rank": 0}, 0),
    ],
)
def test_rank(tmp_path, name, info, rank):
    d = {**SIMPLE, "distributedInfo": info} if info is not None else SIMPLE
    assert read_trace(write(tmp_path / name, d)).rank == rank


# ----------------------------------------------------------------------------- lenient path
def test_number_written_as_string_is_coerced(tmp_path):
    d = doc(ev("a", ts="12.5", dur="2"), ev("b", ts=20.0))
    t = read_trace(write(tmp_path / "l.json", d))
    assert t.ts.tolist() == [12.5, 20.0]
    assert t.dur.tolist() == [2.0, 5.0]
    assert t.dropped_events == 0


def test_event_with_unusable_field_is_dropped_and_counted(tmp_path):
    d = doc(ev("a"), ev("bad", dur="oops"), ev("bad2", ts=[1]), ev("c", ts=30.0), 7)
    t = read_trace(write(tmp_path / "l.json", d))
    assert t.names_of(np.arange(len(t))) == ["a", "c"]
    assert t.dropped_events == 3


def test_bad_arg_is_dropped_but_event_and_other_args_kept(tmp_path):
    d = doc(ev("k", "kernel", device="x", stream=7, correlation=3),
            ev("k2", "kernel", device=1, correlation=4))
    t = read_trace(write(tmp_path / "l.json", d))
    assert len(t) == 2 and t.dropped_events == 0
    assert t.kind.tolist() == [Kind.KERNEL, Kind.KERNEL]
    assert np.isnan(t.device[0]) and t.device[1] == 1.0
    assert t.correlation.tolist() == [3.0, 4.0]


def test_lenient_path_keeps_top_level_metadata(tmp_path):
    props = [{"id": 0, "name": "Tesla V100"}]
    d = doc(ev("a", ts="1.5"), ev("b", dur="oops"), schemaVersion=1, deviceProperties=props,
            distributedInfo={"rank": 5, "world_size": 16, "backend": "gloo"})
    t = read_trace(write(tmp_path / "l.json.gz", d))
    assert len(t) == 1 and t.dropped_events == 1
    assert t.device_properties == props
    assert t.schema_version == 1
    assert (t.rank, t.world_size, t.backend) == (5, 16, "gloo")


def test_lenient_bare_array(tmp_path):
    t = read_trace(write(tmp_path / "l.json", [ev("a", ts="3"), ev("b", dur="oops")]))
    assert t.ts.tolist() == [3.0] and t.dropped_events == 1


# ----------------------------------------------------------------------------- bad input
def _gz_truncated(p: Path) -> None:
    big = doc(*(ev(f"op{i}", ts=float(i)) for i in range(2000)))
    data = gzip.compress(json.dumps(big).encode())
    p.write_bytes(data[: len(data) // 2])


BAD_FILES: dict[str, tuple[Any, str]] = {
    # name: (bytes, or a function writing the file; a phrase the message must hold)
    "not_json": (b'{"traceEvents": [ {"ph": "X", ', "not valid JSON"),
    # where in the text, not "(byte 0)", which a new user read as a NUL byte
    "not_json_text": (b"hello, world", "not valid JSON (JSON is malformed: invalid character "
                                       "at the text's first byte)"),
    "not_json_later": (b'{"traceEvents": [}', "at byte offset 17"),
    "truncated_gzip": (_gz_truncated, "truncated gzip"),
    "gzip_magic_then_garbage": (b"\x1f\x8b" + b"garbage" * 20, "corrupt gzip"),
    "gzip_of_garbage": (gzip.compress(b"\x00\x01 this is no json \xff" * 10), "not valid JSON"),
    "no_trace_events": (json.dumps({"schemaVersion": 1, "foo": []}).encode(), "traceEvents"),
    "empty": (b"", "empty file"),
    "whitespace_only": (b"  \n\t", "empty file"),
    "empty_trace_events": (json.dumps({"traceEvents": []}).encode(), "no events"),
    "trace_events_not_a_list": (json.dumps({"traceEvents": 5}).encode(), "not a list"),
    "no_usable_event": (json.dumps({"traceEvents": [1, "x"]}).encode(), "usable"),
    "top_level_number": (b"42", "top level"),
    "top_level_string": (b'"a trace"', "top level"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_raises_trace_error_naming_file_and_problem(tmp_path, case):
    content, phrase = BAD_FILES[case]
    p = tmp_path / f"{case}.pt.trace.json"
    if callable(content):
        content(p)
    else:
        p.write_bytes(content)
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}: ")
    assert phrase in msg
    assert "\n" not in msg
    assert ei.value.path == str(p)


def test_folder_without_traces(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("x")
    write(tmp_path / "context.json", {"a": 1})
    with pytest.raises(TraceError, match="holds no trace files") as ei:
        find_trace_files(tmp_path)
    assert str(ei.value).startswith(f"{tmp_path}: ")
    # the tool's own files are named as such (a new user copied report.json alone and
    # read "no trace files" as a fault in it)
    assert str(ei.value).endswith("context.json is this tool's own output, not a trace: "
                                  "name the run folder the trace is in")


def test_empty_folder(tmp_path):
    with pytest.raises(TraceError, match="holds no trace files") as ei:
        find_trace_files(tmp_path)
    assert "own output" not in str(ei.value)


def test_missing_path(tmp_path):
    p = tmp_path / "nope.json"
    with pytest.raises(TraceError, match="no such file") as ei:
        find_trace_files([write(tmp_path / "ok.json", SIMPLE), p])
    assert str(ei.value).startswith(f"{p}: ")
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    assert str(ei.value).startswith(f"{p}: ") and "No such file" in str(ei.value)


def test_a_watched_runs_folder_names_its_captures(tmp_path):
    """A watched run's folder (watch.jsonl, watch.json, captures/NNN-*/ with traces) is no
    trace: compare and metrics on it say where its profiled windows are, instead of
    reading the tool's own watch.json as a trace; a capture's folder reads as any run."""
    run = tmp_path / "watch" / "20261130-072122-615"
    write(run / "captures" / "001-baseline" / "t.pt.trace.json", SIMPLE)
    (run / "watch.jsonl").write_text('{"kind": "meta"}\n')
    (run / "watch.json").write_text('{"steps": 10}')
    with pytest.raises(TraceError, match="watched run's folder.*captures/") as ei:
        find_trace_files(run)
    assert str(ei.value).startswith(f"{run}: ")
    assert find_trace_files(run / "captures" / "001-baseline") == [
        run / "captures" / "001-baseline" / "t.pt.trace.json"]


def test_folder_passed_to_read_trace(tmp_path):
    write(tmp_path / "a.json", SIMPLE)
    with pytest.raises(TraceError, match="is a folder") as ei:
        read_trace(tmp_path)
    assert str(ei.value).startswith(f"{tmp_path}: ")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root reads a chmod-000 file anyway")
def test_unreadable_file(tmp_path):
    p = write(tmp_path / "secret.json", SIMPLE)
    p.chmod(0)
    try:
        with pytest.raises(TraceError, match="cannot read") as ei:
            read_trace(p)
        assert str(ei.value).startswith(f"{p}: ")
    finally:
        p.chmod(0o600)


def test_decompression_limit(tmp_path, monkeypatch):
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc(ev(name="x" * 1_000_000))).encode()))
    read_trace(p)  # fine under the default limit
    monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", "1000")
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}: ")
    assert "1000 byte limit" in msg and "TORCH_DIAGNOSE_MAX_TRACE_BYTES" in msg


def test_size_limit_applies_to_plain_files(tmp_path, monkeypatch):
    p = write(tmp_path / "big.json", doc(ev(name="x" * 5000)))
    monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", "1000")
    with pytest.raises(TraceError, match="1000 byte limit"):
        read_trace(p)


def test_limit_just_large_enough_reads(tmp_path, monkeypatch):
    raw = json.dumps(SIMPLE).encode()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(raw))
    monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", str(len(raw)))
    assert_simple(read_trace(p))
    monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", str(len(raw) - 1))
    with pytest.raises(TraceError, match="limit"):
        read_trace(p)


# ----------------------------------------------------------------------------- known bugs
def test_multi_member_gzip(tmp_path):
    raw = json.dumps(SIMPLE).encode()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(raw[:100]) + gzip.compress(raw[100:]))
    assert gzip.decompress(p.read_bytes()) == raw  # valid gzip for Python's own reader
    assert_simple(read_trace(p))


def test_empty_bare_array_is_refused(tmp_path):
    p = write(tmp_path / "empty.json", [])
    with pytest.raises(TraceError, match="no events"):
        read_trace(p)


def test_trace_error_survives_pickling():
    import pickle

    e = pickle.loads(pickle.dumps(TraceError("/x/t.json", "empty file")))
    assert str(e) == "/x/t.json: empty file" and e.path == "/x/t.json"


def test_odd_name_or_pid_is_left_out_but_event_kept(tmp_path):
    d = doc(ev("a"), {"ph": "X", "cat": "cpu_op", "name": 5, "pid": [1], "tid": 1,
                      "ts": 20.0, "dur": 1.0})
    t = read_trace(write(tmp_path / "l.json", d))
    assert len(t) == 2 and t.dropped_events == 0
    assert t.names_of(np.arange(2)) == ["a", ""]


def test_sparse_column_reads_like_the_dense_one():
    """Args few events carry are stored sparse; every way the analysis indexes a column
    gives what the dense column (NaN where absent) would."""
    from diagnose.trace.columns import SparseColumn

    dense = np.full(10, np.nan)
    dense[[1, 4, 9]] = [10.0, 40.0, 90.0]
    col = SparseColumn(np.array([1, 4, 9]), np.array([10.0, 40.0, 90.0]), 10)
    assert len(col) == 10 and np.array_equal(col.dense(), dense, equal_nan=True)
    mask = np.zeros(10, bool)
    mask[[0, 4, 9]] = True
    for sel in (mask, np.array([9, 0, 4, 4]), np.array([-1, -6]), np.arange(10),
                np.zeros(0, np.int64), np.zeros(10, bool)):
        assert np.array_equal(col[sel], dense[sel], equal_nan=True), sel
    assert col[4] == 40.0 and np.isnan(col[3]) and col[-1] == 90.0
    empty = SparseColumn(np.zeros(0, np.int64), np.zeros(0), 3)
    assert np.isnan(empty[np.arange(3)]).all() and empty.nbytes == 0


def test_a_gz_name_on_bytes_that_are_not_gzip_says_so(tmp_path):
    """Random bytes named .json.gz: the name promised gzip, so the message says it is not,
    rather than pointing at a JSON character; gzipped garbage keeps the JSON message."""
    p = tmp_path / "run.pt.trace.json.gz"
    p.write_bytes(bytes(range(7, 250)) * 3)
    with pytest.raises(TraceError, match="named .gz but not gzip-compressed, and not JSON"):
        read_trace(p)
    p.write_bytes(gzip.compress(b"\x00\x01 this is no json"))
    with pytest.raises(TraceError, match="not valid JSON"):
        read_trace(p)


def test_a_trace_of_some_of_its_events(tmp_path):
    """``Trace.take``: the events asked for, in order, with the same name tables and the
    sparse columns' values kept at the events' new places."""
    b = tb.TraceBuilder()
    for _ in range(3):
        with b.step():
            b.cpu(50.0)
            b.memcpy("HtoD", bytes=4096, dur=20.0)
            b.kernel(dur=30.0)
    t = read_trace(b.write(tmp_path / "t.json.gz"))
    copies = np.flatnonzero(t.kind == Kind.MEMCPY)
    idx = np.sort(np.concatenate([copies[1:], np.flatnonzero(t.kind == Kind.KERNEL)]))
    sub = t.take(idx)
    assert len(sub) == len(idx) and sub.names is t.names
    assert np.array_equal(sub.ts, t.ts[idx]) and np.array_equal(sub.name_id, t.name_id[idx])
    assert np.array_equal(sub.nbytes.dense(), t.nbytes[idx], equal_nan=True)
    assert np.count_nonzero(sub.nbytes.dense() == 4096) == len(copies) - 1
