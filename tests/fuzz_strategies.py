"""Hypothesis strategies that build and mutate trace files for the reader fuzz tests.

Used by tests/test_fuzz_reader.py (a few hundred cases per run) and by
benchmarks/fuzz_reader.py (10,000+ cases). A case is the raw bytes of a file.
"""

from __future__ import annotations

import gzip
import json

from hypothesis import strategies as st

CATS = ["cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy",
        "gpu_memset", "gpu_user_annotation", "python_function", "Trace", "ac2g", "Operator",
        "Runtime", "Kernel", "Memcpy", "Memset", "cuda_sync", "mtia_runtime", "", "???"]
NAMES = ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#x",
         "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
         "cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "aten::item",
         "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
         "volta_sgemm_128x64_nn", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
         "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad", "aten::zero_",
         "[memory]", "<script>alert(1)</script>", "", "é\u202e\x00"]

# Strings that a cut which did not know JSON strings would take for structure: brackets,
# commas, colons, quotes and backslashes (escaped by json.dumps: \" and \\), runs of them,
# control characters and non-ASCII (\uXXXX escapes, or raw UTF-8), whole fake events, and
# long strings that cross every window and chunk boundary of the chunked readers.
TRICKY_CHARS = list('{}[],:"\\ /\n\tu0') + ["\x00", "\x1f", "é", "\u202e", "\U0001f600"]
FAKE_EVENTS = ['}, {"ph": "X", "ts": 1, "dur": 2}', '"}]}', '}]', '\\', '\\"', '"\\',
               '\\\\"', '\\u0022', '}, {', '},{"', '], [', '\\"}, {\\"']
tricky_text = st.one_of(
    st.text(st.sampled_from(TRICKY_CHARS), max_size=16),
    st.sampled_from(FAKE_EVENTS),
    st.builds(lambda s, n: s * n, st.one_of(st.text(st.sampled_from(TRICKY_CHARS), min_size=1,
                                                    max_size=6), st.sampled_from(FAKE_EVENTS)),
              st.integers(50, 400)),
)

weird_number = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1e-9, 1e15, 1e300, -1e300, 2**63, -(2**63)]),
)
scalar = st.one_of(st.none(), st.booleans(), weird_number, st.text(max_size=8),
                   weird_number.map(str), tricky_text)
json_value = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=6), tricky_text),
                                                 inner, max_size=3)),
    max_leaves=6)

ARG_KEYS = ["correlation", "External id", "external id", "device", "stream", "bytes",
            "Total Allocated", "Total Reserved", "Bytes", "Device Type", "Device Id",
            "memory bandwidth (GB/s)", "name", "labels"]


@st.composite
def clean_event(draw) -> dict:
    """A well-typed event, so that many cases reach the metrics and rules."""
    ev = {"ph": draw(st.sampled_from(["X", "X", "X", "i"])), "cat": draw(st.sampled_from(CATS)),
          "name": draw(st.one_of(st.sampled_from(NAMES), tricky_text)),
          "pid": draw(st.sampled_from([1, 0, "Spans"])),
          "tid": draw(st.sampled_from([1, 7, "stream 7"])),
          "ts": draw(st.floats(0, 1e5, allow_nan=False)),
          "dur": draw(st.one_of(st.floats(0, 1e4, allow_nan=False), st.just(-5.0)))}
    if draw(st.booleans()):
        ev["args"] = {k: draw(st.integers(-1, 10**6)) for k in
                      draw(st.lists(st.sampled_from(ARG_KEYS[:11]), max_size=4, unique=True))}
        if draw(st.booleans()):  # args the analysis does not read: skipped by the decoder
            ev["args"][draw(tricky_text)] = draw(st.one_of(tricky_text, json_value))
    return ev


@st.composite
def event(draw) -> dict:
    if draw(st.integers(0, 2)):
        return draw(clean_event())
    ev: dict = {}
    if draw(st.booleans()) or True:
        ev["ph"] = draw(st.one_of(st.sampled_from(["X", "X", "X", "i", "M", "s", "f", "B", "E"]),
                                  scalar))
    for key, strat in (("cat", st.one_of(st.sampled_from(CATS), scalar)),
                       ("name", st.one_of(st.sampled_from(NAMES), scalar)),
                       ("pid", st.one_of(st.integers(-5, 5), st.sampled_from(["Spans", "1"]),
                                         scalar)),
                       ("tid", st.one_of(st.integers(0, 5), st.just("stream 7"), scalar)),
                       ("ts", st.one_of(st.floats(0, 1e6), weird_number, scalar)),
                       ("dur", st.one_of(st.floats(0, 1e4), weird_number, scalar))):
        if draw(st.integers(0, 9)) > 0:  # mostly present
            ev[key] = draw(strat)
    if draw(st.booleans()):
        args = {}
        for k in draw(st.lists(st.sampled_from(ARG_KEYS), max_size=5, unique=True)):
            args[k] = draw(st.one_of(weird_number, scalar, json_value))
        ev["args"] = args if draw(st.integers(0, 9)) else draw(json_value)
    return ev


@st.composite
def document(draw):
    events = draw(st.lists(event(), max_size=30))
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return events  # a bare array of events
    doc: dict = {"traceEvents": events}
    if shape == 1:
        doc["traceEvents"] = draw(json_value)  # traceEvents of the wrong type
    if draw(st.booleans()):
        doc["deviceProperties"] = draw(st.one_of(
            st.just([{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 * 2**30,
                      "computeMajor": 9, "computeMinor": 0}]), json_value))
    if draw(st.booleans()):
        doc["distributedInfo"] = draw(st.one_of(st.just({"rank": 1, "world_size": 2,
                                                         "backend": "nccl"}), json_value))
    if draw(st.booleans()):
        doc["schemaVersion"] = draw(scalar)
    if isinstance(doc, dict) and draw(st.booleans()):  # fields before and after the events
        doc = {draw(tricky_text): draw(json_value), **doc, "traceName": draw(tricky_text)}
    return doc


#: How a document is written: json.dumps keyword arguments. Indented: one event per block
#: of lines, as torch.profiler writes them (cut at line breaks); compact: one long line
#: (json.dump with no indent, as other tools re-export or merge traces; cut by the scan).
LAYOUTS = {
    "indent 1": {"indent": 1},
    "indent 2": {"indent": 2},
    "one line": {},
    "minified": {"separators": (",", ":")},
    "one line, raw UTF-8": {"ensure_ascii": False},
}
INDENTED = ("indent 1", "indent 2")
COMPACT = ("one line", "minified", "one line, raw UTF-8")


def _dumps(obj, layout: str = "one line") -> bytes:
    """JSON text in one of LAYOUTS (NaN/inf let through as literals)."""
    return json.dumps(obj, default=str, allow_nan=True, **LAYOUTS[layout]).encode(
        "utf-8", "surrogatepass")


@st.composite
def mutated(draw, data: bytes) -> bytes:
    how = draw(st.integers(0, 8))
    if how == 0 or not data:
        return data
    if how == 1:  # truncated JSON
        return data[: draw(st.integers(0, len(data)))]
    if how == 2:  # flipped bytes
        b = bytearray(data)
        for _ in range(draw(st.integers(1, 5))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] = draw(st.integers(0, 255))
        return bytes(b)
    if how == 3:  # garbage inserted
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.binary(max_size=20)) + data[i:]
    if how == 4:  # gzip of the document, maybe truncated
        gz = gzip.compress(data)
        return gz if draw(st.booleans()) else gz[: draw(st.integers(0, len(gz)))]
    if how == 5:  # gzip of garbage
        return gzip.compress(draw(st.binary(max_size=200)))
    if how == 6:  # numbers written as strings
        return data.replace(b": 1", b': "1').replace(b'1,', b'1",') if b": 1" in data else data
    if how == 7:  # deep nesting
        depth = draw(st.sampled_from([50, 1000, 100_000]))
        return b'{"traceEvents": ' + b"[" * depth + b"]" * depth + b"}"
    return draw(st.binary(max_size=300))  # binary garbage


@st.composite
def trace_file(draw) -> bytes:
    return draw(mutated(_dumps(draw(document()), draw(st.sampled_from(list(LAYOUTS))))))


@st.composite
def trace_case(draw) -> dict[str, bytes]:
    """One document written indented and compactly, and a file made from one of the two
    (mutated): {"indent 2": ..., "minified": ..., "mutated": ...}."""
    doc = draw(document())
    layouts = [draw(st.sampled_from(INDENTED)), draw(st.sampled_from(COMPACT))]
    files = {name: _dumps(doc, name) for name in layouts}
    files["mutated"] = draw(mutated(files[draw(st.sampled_from(layouts))]))
    return files
