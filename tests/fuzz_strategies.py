"""Trace files for the fuzz tests: generated and byte-mutated ones, and real traces
mutated into other shapes.

``trace_file``/``trace_case`` (hypothesis strategies) build documents with odd fields,
types and numbers and mutate their bytes: a case is the raw bytes of a file
(tests/trace/test_fuzz_reader.py). ``MUTATIONS`` turn a real trace's loaded document into
the shapes other recordings or broken writers give, ``mutate`` chains them
(tests/trace/test_trace_shapes.py). benchmarks/fuzz_reader.py runs both at scale.
"""

from __future__ import annotations

import gzip
import json
import math

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


# ------------------------------------------------------------- shapes of real traces
# Mutations of a real trace's document into the shapes other recordings have (CUDA
# activity alone, no flows, no ProfilerStep, one step, ...) or that a broken writer could
# give (duplicated, shuffled, negative durations, args of the wrong type). Each is a pure
# function (doc, rng) -> doc of a document already loaded ({"traceEvents": [...], ...});
# tests/trace/test_trace_shapes.py runs the analysis on each, the benchmark at scale.

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "cuda_sync"})
CPU_CATS = frozenset({"cpu_op", "Operator", "python_function", "user_annotation",
                      "cpu_instant_event"})
FLOW_CATS = frozenset({"ac2g", "fwdbwd", "async"})


def _evs(doc: dict) -> list[dict]:
    return [e for e in doc.get("traceEvents") or [] if isinstance(e, dict)]


def _with(doc: dict, events: list) -> dict:
    return {**doc, "traceEvents": events}


def _is_step(e: dict) -> bool:
    return str(e.get("name", "")).startswith("ProfilerStep#")


def _is_device(e: dict) -> bool:
    return e.get("cat") in DEVICE_CATS


def _is_meta(e: dict) -> bool:
    return e.get("ph") == "M"


def _num(x: object, default: float = 0.0) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else default


def _steps(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if _is_step(e) and e.get("cat") != "gpu_user_annotation"),
                  key=lambda e: _num(e.get("ts")))


def _edit(events: list[dict], f, pick=lambda e: True) -> list[dict]:
    """A copy of each event that ``pick`` selects, changed by ``f`` (which edits in place)."""
    out = []
    for e in events:
        if pick(e):
            e = dict(e)
            f(e)
        out.append(e)
    return out


def _span(e: dict) -> tuple[float, float]:
    s = _num(e.get("ts"))
    return s, s + max(_num(e.get("dur")), 0.0)


def m_kernels_only(doc, rng):
    return _with(doc, [e for e in _evs(doc) if _is_device(e) or _is_meta(e)])


def m_no_runtime(doc, rng):
    return _with(doc, [e for e in _evs(doc) if e.get("cat") not in RUNTIME_CATS])


def m_no_flows(doc, rng):
    return _with(doc, [e for e in _evs(doc) if e.get("cat") not in FLOW_CATS
                       and e.get("ph") not in ("s", "f", "t")])


def m_no_profiler_step(doc, rng):
    return _with(doc, [e for e in _evs(doc) if not _is_step(e)])


def m_one_step(doc, rng):
    """The first step and what overlaps it (the rest of the window dropped)."""
    evs = _evs(doc)
    steps = _steps(evs)
    if not steps:
        return _with(doc, evs[: max(1, len(evs) // 3)])
    s0, s1 = _span(steps[0])
    return _with(doc, [e for e in evs if _is_meta(e) or (
        (not _is_step(e) or e is steps[0]) and _span(e)[0] <= s1 and _span(e)[1] >= s0)])


def m_duplicated(doc, rng):
    return _with(doc, [e for e in _evs(doc) for _ in (0, 1)])


def m_shuffled(doc, rng):
    evs = list(_evs(doc))
    rng.shuffle(evs)
    return _with(doc, evs)


def m_zero_durations(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(dur=0), lambda e: "dur" in e))


def m_negative_durations(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(dur=-_num(e["dur"], 1.0)),
                            lambda e: "dur" in e and rng.random() < 0.5))


def m_string_args(doc, rng):
    def f(e):
        e["args"] = {k: str(v) for k, v in e["args"].items()}
    return _with(doc, _edit(_evs(doc), f, lambda e: isinstance(e.get("args"), dict)))


def m_null_args(doc, rng):
    def f(e):
        if rng.random() < 0.5:
            e["args"] = None
        else:
            e["args"] = dict.fromkeys(e["args"])
    return _with(doc, _edit(_evs(doc), f, lambda e: isinstance(e.get("args"), dict)))


def m_second_device(doc, rng):
    """Each device op again on a second GPU (pid + 1, device 1), launched by the same call."""
    extra = []
    for e in _evs(doc):
        if _is_device(e):
            e = dict(e)
            pid = e.get("pid")
            e["pid"] = pid + 1 if isinstance(pid, int) else f"{pid}-1"
            if isinstance(e.get("args"), dict):
                e["args"] = {**e["args"], "device": 1}
            extra.append(e)
    return _with(doc, _evs(doc) + extra)


def m_huge_timestamps(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(ts=_num(e["ts"]) + 2.0**53),
                            lambda e: "ts" in e))


def m_half_dropped(doc, rng):
    return _with(doc, [e for e in _evs(doc) if rng.random() < 0.5])


def m_steps_and_kernels_only(doc, rng):
    """What a trace recorded with CUDA activity alone holds: ProfilerStep and device ops."""
    return _with(doc, [e for e in _evs(doc) if _is_step(e) or _is_device(e) or _is_meta(e)])


def m_no_cpu_ops(doc, rng):
    """ProfilerStep, runtime calls and device ops: no operators, no Python frames."""
    return _with(doc, [e for e in _evs(doc) if e.get("cat") not in CPU_CATS or _is_step(e)])


def m_minimal(doc, rng):
    """One step and one kernel: the smallest trace with device work in a step."""
    evs = _evs(doc)
    steps = _steps(evs)
    step = steps[0] if steps else {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0",
                                   "pid": 1, "tid": 1, "ts": 0.0, "dur": 1000.0}
    s0, s1 = _span(step)
    dev = sorted((e for e in evs if _is_device(e)),
                 key=lambda e: not s0 <= _num(e.get("ts")) <= s1)  # one inside the step first
    kernel = dev[0] if dev else {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                                 "ts": s0 + 1, "dur": 10.0}
    return _with(doc, [step, kernel])


def m_missing_fields(doc, rng):
    keys = ["ts", "dur", "name", "cat", "pid", "tid", "ph", "args"]
    return _with(doc, _edit(_evs(doc), lambda e: e.pop(rng.choice(keys), None),
                            lambda e: rng.random() < 0.5))


def m_unknown_categories(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(cat=rng.choice(["mystery", "", "Kernel2",
                                                                           "gpu_op"])),
                            lambda e: rng.random() < 0.5))


def m_overlapping_steps(doc, rng):
    """Each step runs 1.5x its length, into the next one."""
    return _with(doc, _edit(_evs(doc), lambda e: e.update(dur=_num(e.get("dur"), 1.0) * 1.5),
                            _is_step))


def m_nested_steps(doc, rng):
    """A second ProfilerStep inside each step (its middle half, same thread)."""
    extra = []
    for i, st_ in enumerate(_steps(_evs(doc))):
        s, e = _span(st_)
        extra.append({**st_, "name": f"ProfilerStep#{900 + i}", "ts": s + (e - s) / 4,
                      "dur": (e - s) / 2})
    return _with(doc, _evs(doc) + extra)


def m_empty_step(doc, rng):
    """A step after the last event, with nothing in it."""
    evs = _evs(doc)
    steps = _steps(evs)
    end = max((_span(e)[1] for e in evs), default=0.0)
    proto = steps[-1] if steps else {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}
    return _with(doc, [*evs, {**proto, "name": "ProfilerStep#999", "ts": end + 100.0,
                              "dur": 500.0}])


def m_zero_length_steps(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(dur=0), _is_step))


def m_numbers_as_strings(doc, rng):
    def f(e):
        for k in ("ts", "dur", "pid", "tid"):
            if k in e:
                e[k] = str(e[k])
    return _with(doc, _edit(_evs(doc), f, lambda e: rng.random() < 0.5))


def m_bare_array(doc, rng):
    return _evs(doc)


def m_no_metadata(doc, rng):
    return {"traceEvents": [e for e in _evs(doc) if not _is_meta(e)]}


def m_one_thread(doc, rng):
    """Every host event on one pid and tid (the device ops keep theirs)."""
    return _with(doc, _edit(_evs(doc), lambda e: e.update(pid=1, tid=1),
                            lambda e: not _is_device(e)))


def m_same_correlation(doc, rng):
    def f(e):
        e["args"] = {**e["args"], "correlation": 1}
    return _with(doc, _edit(_evs(doc), f, lambda e: isinstance(e.get("args"), dict)
                            and "correlation" in e["args"]))


def m_steps_on_other_thread(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(tid=424242), _is_step))


def m_huge_durations(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(dur=1e15),
                            lambda e: rng.random() < 0.05))


def m_instants(doc, rng):
    """Half the complete events written as instants (no duration)."""
    def f(e):
        e["ph"] = "i"
        e.pop("dur", None)
    return _with(doc, _edit(_evs(doc), f, lambda e: e.get("ph") == "X" and rng.random() < 0.5))


def m_no_events(doc, rng):
    return _with(doc, [])


def m_device_before_steps(doc, rng):
    """The device ops moved before the first step (a host that ran ahead, clocks apart)."""
    evs = _evs(doc)
    steps = _steps(evs)
    t0 = _span(steps[0])[0] if steps else 0.0
    return _with(doc, _edit(evs, lambda e: e.update(ts=_num(e.get("ts")) - t0 - 1e6), _is_device))


def m_nan_numbers(doc, rng):
    """NaN and infinite times and durations here and there, written as Python writes them
    (NaN and Infinity literals, which JSON itself does not allow)."""
    def f(e):
        e[rng.choice(["ts", "dur"])] = rng.choice([math.nan, math.inf, -math.inf])
    return _with(doc, _edit(_evs(doc), f, lambda e: rng.random() < 0.1))


def m_steps_in_other_process(doc, rng):
    return _with(doc, _edit(_evs(doc), lambda e: e.update(pid=777), _is_step))


def m_clock_skew(doc, rng):
    """The device's clock 100 us behind the host's: device ops start before their launch."""
    return _with(doc, _edit(_evs(doc), lambda e: e.update(ts=_num(e.get("ts")) - 100.0),
                            _is_device))


def m_launches_on_other_thread(doc, rng):
    """The runtime calls recorded on a thread of their own (as autograd's device thread)."""
    return _with(doc, _edit(_evs(doc), lambda e: e.update(tid=31337),
                            lambda e: e.get("cat") in RUNTIME_CATS))


MUTATIONS = {
    "kernels only": m_kernels_only,
    "no runtime calls": m_no_runtime,
    "no flows": m_no_flows,
    "no ProfilerStep": m_no_profiler_step,
    "one step": m_one_step,
    "duplicated events": m_duplicated,
    "shuffled order": m_shuffled,
    "zero durations": m_zero_durations,
    "negative durations": m_negative_durations,
    "string args": m_string_args,
    "null args": m_null_args,
    "second device": m_second_device,
    "huge timestamps": m_huge_timestamps,
    "half the events dropped": m_half_dropped,
    "steps with kernels only": m_steps_and_kernels_only,
    "no CPU ops": m_no_cpu_ops,
    "one step, one kernel": m_minimal,
    "missing fields": m_missing_fields,
    "unknown categories": m_unknown_categories,
    "overlapping steps": m_overlapping_steps,
    "nested steps": m_nested_steps,
    "a step with no events": m_empty_step,
    "zero-length steps": m_zero_length_steps,
    "numbers as strings": m_numbers_as_strings,
    "bare event array": m_bare_array,
    "no metadata": m_no_metadata,
    "one host thread": m_one_thread,
    "one correlation id": m_same_correlation,
    "steps on another thread": m_steps_on_other_thread,
    "huge durations": m_huge_durations,
    "instant events": m_instants,
    "no events": m_no_events,
    "device ops before the steps": m_device_before_steps,
    "NaN and Infinity literals": m_nan_numbers,
    "steps in another process": m_steps_in_other_process,
    "device clock behind": m_clock_skew,
    "launches on another thread": m_launches_on_other_thread,
}


def mutate(doc: dict, names: list[str], seed: int) -> dict | list:
    """``doc`` with the named mutations applied in order (their random choices seeded)."""
    import random

    rng = random.Random(seed)
    out: dict | list = doc
    for n in names:
        out = MUTATIONS[n](out if isinstance(out, dict) else {"traceEvents": out}, rng)
    return out
