"""Sanity tests of the synthetic-trace builder the rule tests rely on."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from typing import Any

import pytest

from tests.tracebuilder import (
    GEMM_BF16,
    SCENARIOS,
    TraceBuilder,
    comm_not_overlapped,
    cpu_only,
    healthy,
    measure,
)

EPS = 0.01  # us; timestamps are rounded to ns (current) or us (legacy)

CURRENT_CATS = {
    "cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset",
    "gpu_user_annotation", "ac2g", "cpu_instant_event", "Trace",
}
LEGACY_CATS = {"Operator", "Runtime", "Kernel", "Memcpy", "Memset", "async", "Trace"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "Runtime"}
HOST_SPAN_CATS = {"cpu_op", "user_annotation", "Operator"}


def _small(legacy: bool = False) -> TraceBuilder:
    """One of everything, in two steps."""
    b = TraceBuilder(legacy=legacy, rank=0, world_size=2, backend="nccl")
    for _ in range(2):
        with b.step():
            b.dataloader(200.0, workers=0)
            b.memcpy("HtoD", bytes=4_000_000, dur=300.0, pinned=False)
            b.memcpy("HtoD", bytes=4_000_000, dur=170.0, pinned=True, blocking=False)
            b.zero_grad(params=3, set_to_none=False)
            b.memory(allocated=2**30, reserved=2 * 2**30)
            b.kernel(GEMM_BF16[0], dur=400.0, op="aten::mm")
            b.kernel(dur=20.0)
            b.memset(bytes=1 << 20, dur=3.0)
            b.sync("cudaEventSynchronize")
            b.kernel(dur=50.0)
            b.sync(via_item=True)
            b.nccl(dur=120.0)
            b.memcpy("DtoD", bytes=1 << 20, dur=2.0)
            b.memcpy("DtoH", bytes=1 << 10, dur=2.0, pinned=False)
            b.optimizer_step(kernels=6)
            b.optimizer_step(kernels=130, foreach=True)
            b.cpu(30.0)
            b.idle(10.0)
            b.sync("cudaDeviceSynchronize")
    return b


def _x(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _all_docs() -> list[tuple[str, dict[str, Any]]]:
    return [("small", _small().build()), ("small-legacy", _small(legacy=True).build())] + [
        (name, fn().build()) for name, fn in SCENARIOS.items()
    ]


DOCS = _all_docs()
IDS = [name for name, _ in DOCS]


@pytest.mark.parametrize(("name", "doc"), DOCS, ids=IDS)
def test_json_round_trip(name: str, doc: dict[str, Any]) -> None:
    text = json.dumps(doc, allow_nan=False)  # no inf/nan leaks from the stream bookkeeping
    assert json.loads(text) == doc
    assert doc["schemaVersion"] == 1
    assert isinstance(doc["deviceProperties"], list)


def test_write_gz_and_plain_and_deterministic(tmp_path: Any) -> None:
    b = _small()
    doc = b.build()
    gz = b.write(tmp_path / "rank0.pt.trace.json.gz")
    with gzip.open(gz, "rt") as f:
        assert json.load(f) == doc
    plain = b.write(tmp_path / "rank0.pt.trace.json")
    assert plain.read_bytes()[:1] == b"{"
    assert json.loads(plain.read_text()) == doc
    forced = b.write(tmp_path / "forced.json", gz=True)
    assert forced.read_bytes()[:2] == b"\x1f\x8b"
    again = _small().write(tmp_path / "again.pt.trace.json.gz")
    assert again.read_bytes() == gz.read_bytes()


@pytest.mark.parametrize(("name", "doc"), DOCS, ids=IDS)
def test_events_well_formed(name: str, doc: dict[str, Any]) -> None:
    legacy = any(e.get("cat") == "Operator" for e in doc["traceEvents"])
    allowed = LEGACY_CATS if legacy else CURRENT_CATS
    for e in doc["traceEvents"]:
        assert e["ph"] in {"X", "i", "s", "f", "M"}, e
        assert isinstance(e["name"], str) and "ts" in e and "pid" in e and "tid" in e, e
        assert isinstance(e["ts"], int if legacy else float), e
        if "cat" in e:
            assert e["cat"] in allowed, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            assert "args" in e
        if e["ph"] == "f":
            assert e["bp"] == "e"
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "process_labels", "process_sort_index",
                                 "thread_name", "thread_sort_index"}
    for e in _x(doc):
        if e["cat"] in DEVICE_CATS:
            want = f"stream {e['args']['stream']}" if legacy else e["args"]["stream"]
            assert e["tid"] == want and e["pid"] == e["args"]["device"] == 0
        elif e["cat"] in HOST_SPAN_CATS | RUNTIME_CATS:
            assert e["tid"] == (str(e["pid"]) if legacy else e["pid"])


@pytest.mark.parametrize(("name", "doc"), DOCS, ids=IDS)
def test_correlation_and_flows_match(name: str, doc: dict[str, Any]) -> None:
    legacy = any(e.get("cat") == "Operator" for e in doc["traceEvents"])
    ext_key = "external id" if legacy else "External id"
    xs = _x(doc)
    runtime = {e["args"]["correlation"]: e for e in xs if e["cat"] in RUNTIME_CATS}
    assert len(runtime) == sum(1 for e in xs if e["cat"] in RUNTIME_CATS), "unique correlations"
    ops = {e["args"]["External id"]: e for e in xs if e["cat"] in HOST_SPAN_CATS}
    device = [e for e in xs if e["cat"] in DEVICE_CATS]
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts.keys() == ends.keys() == {e["args"]["correlation"] for e in device}
    for d in device:
        corr = d["args"]["correlation"]
        rt = runtime[corr]
        if rt["name"] == "cudaGraphLaunch":  # a replay: many kernels, one call, one flow
            first = min(e["ts"] for e in device if e["args"]["correlation"] == corr)
            assert d["ts"] >= rt["ts"] - EPS and ends[corr]["ts"] == first
            assert starts[corr]["ts"] == rt["ts"] and d["cat"] == "kernel"
            continue
        assert rt["args"][ext_key] == d["args"][ext_key]
        assert d["ts"] >= rt["ts"] - EPS, "device work cannot start before its API call"
        assert starts[corr]["ts"] == rt["ts"] and starts[corr]["pid"] == rt["pid"]
        assert ends[corr]["ts"] == d["ts"] and ends[corr]["tid"] == d["tid"]
        op = ops[rt["args"][ext_key]]  # the linked op encloses the runtime call
        assert op["ts"] - EPS <= rt["ts"] and rt["ts"] + rt["dur"] <= op["ts"] + op["dur"] + EPS
        if d["cat"] in ("kernel", "Kernel"):
            assert rt["name"] == "cudaLaunchKernel"
        else:
            want = "cudaMemcpyAsync" if "Memcpy" in d["name"] else "cudaMemsetAsync"
            assert rt["name"] == want


@pytest.mark.parametrize(("name", "doc"), DOCS, ids=IDS)
def test_host_spans_nest_and_steps_contain_their_events(name: str, doc: dict[str, Any]) -> None:
    host = sorted(
        (e for e in _x(doc) if e["cat"] in HOST_SPAN_CATS | RUNTIME_CATS),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    stack: list[dict[str, Any]] = []
    for e in host:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS:
            stack.pop()
        if stack:
            top = stack[-1]
            assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + EPS, (top["name"], e["name"])
        stack.append(e)
    steps = [e for e in host if e["name"].startswith("ProfilerStep#")]
    assert [int(s["name"].split("#")[1]) for s in steps] == list(range(1, len(steps) + 1))
    for a, b in zip(steps, steps[1:], strict=False):
        assert a["ts"] + a["dur"] <= b["ts"] + EPS, "steps do not overlap"
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    for e in host:  # the scenarios and _small() add everything inside a step
        assert lo - EPS <= e["ts"] and e["ts"] + e["dur"] <= hi + EPS, e["name"]


@pytest.mark.parametrize(("name", "doc"), DOCS, ids=IDS)
def test_streams_are_fifo(name: str, doc: dict[str, Any]) -> None:
    by_stream: dict[Any, list[dict[str, Any]]] = {}
    for e in _x(doc):
        if e["cat"] in DEVICE_CATS:
            by_stream.setdefault(e["tid"], []).append(e)
    for evs in by_stream.values():
        evs.sort(key=lambda e: e["ts"])
        for a, b in zip(evs, evs[1:], strict=False):
            assert a["ts"] + a["dur"] <= b["ts"] + EPS


def test_both_naming_styles() -> None:
    cur, leg = _small().build(), _small(legacy=True).build()
    cur_cats = {e.get("cat") for e in cur["traceEvents"]} - {None}
    leg_cats = {e.get("cat") for e in leg["traceEvents"]} - {None}
    assert cur_cats == CURRENT_CATS
    assert leg_cats == LEGACY_CATS
    assert {"displayTimeUnit", "baseTimeNanoseconds"} <= cur.keys()
    assert cur["distributedInfo"]["backend"] == "nccl" and "pg_config" in cur["distributedInfo"]
    assert leg["distributedInfo"] == {"backend": "nccl", "rank": 0, "world_size": 2}

    def names(doc: dict[str, Any]) -> set[str]:
        return {e["name"] for e in doc["traceEvents"]}

    for n in (
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        "Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)",
        "Memcpy DtoD (Device -> Device)", "Memcpy DtoH (Device -> Pageable)", "Memset (Device)",
        "Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad", "aten::item",
        "aten::_local_scalar_dense", "aten::copy_", "aten::to", "aten::zero_", "aten::fill_",
        "cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
        "cudaMemsetAsync", "cudaStreamWaitEvent", "[memory]",
    ):
        assert n in names(cur) and n in names(leg), n
    assert "Memcpy DtoH (Device -> Pinned)" in names(cur)  # .item() copies to pinned memory now
    assert any(n.startswith("ncclDevKernel_AllReduce") for n in names(cur))
    assert any(n.startswith("ncclKernel_AllReduce_RING_LL_Sum_float") for n in names(leg))
    assert "aten::_to_copy" in names(cur) and "aten::_to_copy" not in names(leg)

    cur_mem = [e for e in cur["traceEvents"] if e["name"] == "[memory]"]
    leg_mem = [e for e in leg["traceEvents"] if e["name"] == "[memory]"]
    assert cur_mem[0]["cat"] == "cpu_instant_event" and cur_mem[0]["s"] == "t"
    assert {"Total Allocated", "Total Reserved", "Bytes", "Device Type", "Device Id", "Addr"} <= (
        cur_mem[0]["args"].keys()
    )
    assert cur_mem[0]["args"]["Device Type"] == 1
    assert "cat" not in leg_mem[0]
    assert leg_mem[0]["args"] == {"Device Type": 1, "Device Id": 0, "Bytes": 2**30}
    rt = next(e for e in _x(leg) if e["cat"] == "Runtime")
    assert {"cbid", "correlation", "external id", "external ts"} == rt["args"].keys()
    leg_meta = {e["name"] for e in leg["traceEvents"] if e["ph"] == "M"}
    assert leg_meta == {"process_name", "process_labels", "thread_name"}


def test_device_properties_follow_the_constructor() -> None:
    doc = TraceBuilder(device="NVIDIA A100-SXM4-80GB", cc=(8, 0), total_mem=1234).build()
    (props,) = doc["deviceProperties"]
    assert (props["name"], props["computeMajor"], props["computeMinor"]) == (
        "NVIDIA A100-SXM4-80GB", 8, 0,
    )
    assert props["totalGlobalMem"] == 1234 and props["numSms"] == 108
    assert "distributedInfo" not in doc


def test_fifo_queueing_and_blocking_semantics() -> None:
    b = TraceBuilder()
    with b.step():
        t = b.now
        b.kernel(dur=1000.0)  # a busy GPU ...
        b.kernel(dur=10.0)  # ... queues the next kernel behind it
        assert b.now - t < 30.0, "launches return at once"
        b.memcpy("HtoD", bytes=1 << 20, dur=50.0, pinned=True, blocking=False)
        assert b.now - t < 60.0, "pinned non_blocking copies do not block"
        b.sync()
        assert b.now >= t + 1000.0 + 10.0 + 50.0
        t = b.now
        b.kernel(dur=500.0)
        b.memcpy("HtoD", bytes=1 << 20, dur=100.0, pinned=False, blocking=False)
        assert b.now >= t + 500.0 + 100.0 * 0.9, "pageable copies hold the host"
        b.kernel(dur=5.0, queue_delay=40.0)
    kernels = [e for e in _x(b.build()) if e["cat"] == "kernel"]
    assert kernels[1]["ts"] >= kernels[0]["ts"] + kernels[0]["dur"] - EPS
    launch = [e for e in _x(b.build()) if e["name"] == "cudaLaunchKernel"][-1]
    assert kernels[-1]["ts"] >= launch["ts"] + launch["dur"] + 40.0 - EPS


def test_comm_waits_for_compute() -> None:
    m = measure(comm_not_overlapped().build())
    assert m["comm_overlap"] < 0.01
    assert measure(comm_not_overlapped(overlap=True).build())["comm_overlap"] > 0.8


def test_cpu_only_has_no_gpu_anything() -> None:
    doc = cpu_only().build()
    assert doc["deviceProperties"] == []
    cats = Counter(e.get("cat") for e in doc["traceEvents"])
    assert set(cats) - {None, "Trace", "cpu_instant_event"} == {"cpu_op", "user_annotation"}
    assert all(e["pid"] != 0 for e in doc["traceEvents"]), "nothing on a GPU process"
    b = TraceBuilder(device=None)
    for call in (
        lambda: b.kernel(dur=1.0),
        lambda: b.memcpy(bytes=1, dur=1.0),
        lambda: b.memset(bytes=1, dur=1.0),
        lambda: b.sync(),
        lambda: b.nccl(dur=1.0),
    ):
        with pytest.raises(RuntimeError):
            call()


def test_deterministic() -> None:
    assert healthy().build() == healthy().build()
    assert json.dumps(_small(legacy=True).build()) == json.dumps(_small(legacy=True).build())


def test_unclosed_or_bad_arguments_raise() -> None:
    b = TraceBuilder()
    cm = b.step()
    cm.__enter__()
    with pytest.raises(RuntimeError):
        b.build()
    cm.__exit__(None, None, None)
    with pytest.raises(ValueError):
        b.sync("cudaDeviceSynchronize", via_item=True)
    with pytest.raises(ValueError):
        b.memcpy("HtoH", bytes=1, dur=1.0)


# the magnitudes each scenario's docstring promises (measured by the independent oracle;
# None: the trace has nothing to measure it on)
EXPECT: dict[str, dict[str, tuple[float, float] | None]] = {
    "healthy": {"gpu_busy": (0.95, 1.0), "dataloader": (0.0, 0.01), "memcpy_host": (0, 0.01),
                "sync_host": (0.0, 0.0), "max_reserved_frac": (0.3, 0.6)},
    "dataloader_bound": {"dataloader": (0.35, 0.45), "gpu_busy": (0.5, 0.7)},
    "pageable_copies": {"memcpy_host": (0.07, 0.14), "gpu_busy": (0.9, 1.0)},
    "sync_bound": {"gpu_busy": (0.6, 0.8), "sync_host": (0.3, 0.7)},
    "launch_bound": {"gpu_busy": (0.15, 0.4), "kernels_per_step": (1000, 3000)},
    "fp32_gemm": {"gemm_fp32_share": (0.7, 1.0), "gpu_busy": (0.95, 1.0)},
    "memory_pressure": {"max_reserved_frac": (0.94, 0.96), "gpu_busy": (0.95, 1.0)},
    "comm_not_overlapped": {"nccl": (0.25, 0.35), "comm_overlap": (0.0, 0.01)},
    "optimizer_per_param": {"optimizer_kernels_per_step": (300, 300)},
    "zero_grad_fill": {"zero_fill_per_step": (200, 200)},
    "cpu_only": {"gpu_busy": None, "kernels_per_step": None, "dataloader": (0.04, 0.06)},
    "graph_decode": {"gpu_busy": (0.75, 0.9), "kernels_per_step": (2500, 2700)},
    "eager_decode": {"gpu_busy": (0.2, 0.4), "kernels_per_step": (600, 700)},
    "compiled_launch_bound": {"gpu_busy": (0.15, 0.4), "kernels_per_step": (1000, 3000)},
    "hidden_sync": {"gpu_busy": (0.95, 1.0), "memcpy_host": (0.0, 0.05)},
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_magnitudes(name: str) -> None:
    m = measure(SCENARIOS[name]().build())
    assert m["steps"] == 6
    assert 10.0 <= m["step_ms"] <= 100.0
    for key, want in EXPECT[name].items():
        got = m[key]
        if want is None or got is None:
            assert want is None and got is None, (key, got)
        else:
            assert want[0] <= got <= want[1], (key, got)


@pytest.mark.parametrize("name", ["healthy", "dataloader_bound", "sync_bound"])
def test_legacy_scenarios_plant_the_same_symptom(name: str) -> None:
    cur, leg = measure(SCENARIOS[name]().build()), measure(SCENARIOS[name](legacy=True).build())
    for key in ("gpu_busy", "dataloader", "gpu_idle", "idle_input", "idle_sync", "idle_launch"):
        a, b = cur[key], leg[key]
        assert a is not None and b is not None and abs(a - b) < 0.01, key
