"""Samplers: real psutil host series, NVML where a GPU exists, failures reported not raised."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from diagnose.capture.samplers import (
    HostSampler,
    NvmlSampler,
    Sampler,
    SamplerThread,
    UnavailableSampler,
    usable_cpus,
)
from diagnose.metrics.samples import CATALOG, samples_metrics, samples_notes
from diagnose.runfolder import SAMPLES_FILE, load_samples


def no_sampler_thread() -> bool:
    return not any(t.name == "diagnose-samplers" for t in threading.enumerate())


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


class Exploding(Sampler):
    name = "exploding"

    def __init__(self, after: int) -> None:
        self.after = after
        self.calls = 0
        self.closed = False

    def sample(self) -> dict[str, Any]:
        self.calls += 1
        if self.calls > self.after:
            raise ZeroDivisionError("sensor went away")
        return {"value": self.calls}

    def close(self) -> None:
        self.closed = True


def test_host_series_real(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # 10 Hz: the kernel counts a process's CPU time in 10 ms ticks, so a tick of 100 ms
        # resolves 10% of a core (at 50 Hz one tick of 20 ms reads 0, 50 or 100%, and a
        # loaded host that gives this process half a core reads 0 half the time)
        st = SamplerThread([HostSampler(worker_pids=lambda: [child.pid])], tmp_path, hz=10)
        with st:
            # burn until the sampler has ticked enough (a deadline, not a tick-rate guess:
            # the machine may be loaded)
            deadline = time.monotonic() + 20
            while st.rows < 10 and time.monotonic() < deadline:
                burn(0.1)
            st.mark("active_start")
            while st.rows < 20 and time.monotonic() < deadline:
                burn(0.1)
            st.mark("active_end")
        assert no_sampler_thread()
    finally:
        child.kill()
        child.wait()
    s = load_samples(tmp_path)
    assert s is not None
    assert s["info"]["host"]["cores"] == usable_cpus()
    host = s["series"]["host"]
    n = len(host["t"])
    assert n >= 20
    assert all(len(col) == n for col in host.values())
    assert host["t"] == sorted(host["t"]) and s["t0"] <= host["t"][0]
    assert all(len(row) == len(usable_cpus()) for row in host["cpu_pct"])
    # this process burned CPU the whole time: most ticks see it near one full core
    busy = sorted(v for v in host["proc_cpu_pct"] if v is not None)
    assert busy[len(busy) // 2] > 10  # measured, and clearly not idle (other load shares the cores)
    assert min(host["proc_rss_bytes"]) > 10_000_000
    assert set(host["workers_count"]) == {1}  # the child, followed by pid
    assert all(r > 0 for r in host["workers_rss_bytes"])
    assert set(s["marks"]) == {"active_start", "active_end"}
    assert s["errors"] == [] and s["unavailable"] == {}
    m = samples_metrics(s)
    assert set(m) == set(CATALOG)
    # busy, however loaded the machine (a loaded one gives this process well under a core)
    assert m["proc_cpu_mean_pct"] > 10 and m["workers_count"] == 1
    assert 0 <= m["host_cpu_mean_pct"] <= m["host_cpu_busiest_core_pct"] <= 100
    assert m["gpu_util_mean_pct"] is None and m["gpu_mem_total_bytes"] is None
    assert m["sample_count"] >= 3


def test_children_followed_without_pid_list(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with SamplerThread([HostSampler()], tmp_path, hz=20):
            time.sleep(0.5)
    finally:
        child.kill()
        child.wait()
    s = load_samples(tmp_path)
    assert s is not None and 1 in s["series"]["host"]["workers_count"]


def test_failing_sampler_is_reported_not_raised(tmp_path: Path) -> None:
    bad = Exploding(after=3)
    st = SamplerThread([bad, HostSampler()], tmp_path, hz=50)
    st.start()
    time.sleep(0.4)
    assert st.alive  # the host sampler goes on after the other one failed
    assert st.stop()
    assert no_sampler_thread()
    assert bad.closed and bad.calls == 4
    assert st.errors == ["exploding: ZeroDivisionError: sensor went away"]
    s = load_samples(tmp_path)
    assert s is not None
    assert s["series"]["exploding"]["value"] == [1, 2, 3]
    assert len(s["series"]["host"]["t"]) > 5
    assert s["errors"][0]["sampler"] == "exploding"
    assert "exploding sampler failed and was stopped: ZeroDivisionError: sensor went away" in (
        samples_notes(s)
    )


def test_unavailable_gpu_gives_the_report_line(tmp_path: Path) -> None:
    with SamplerThread([UnavailableSampler("gpu", "no CUDA device visible to torch")], tmp_path):
        time.sleep(0.05)
    s = load_samples(tmp_path)
    assert s is not None
    assert samples_notes(s) == ["GPU sampling not available: no CUDA device visible to torch"]
    assert samples_metrics(s)["gpu_util_mean_pct"] is None


def test_open_failure_of_one_sampler_leaves_others(tmp_path: Path) -> None:
    class BrokenOpen(Sampler):
        name = "broken"

        def open(self) -> dict[str, Any]:
            raise OSError("permission denied")

    with SamplerThread([BrokenOpen(), HostSampler()], tmp_path, hz=50):
        time.sleep(0.2)
    s = load_samples(tmp_path)
    assert s is not None and "host" in s["series"]
    assert s["errors"][0]["error"] == "OSError: permission denied"


def test_stop_is_prompt_and_file_closed(tmp_path: Path) -> None:
    st = SamplerThread([HostSampler()], tmp_path, hz=0.1)  # one tick in 10 s
    st.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    assert st.stop()  # joined within its 5 s timeout
    # the wait is interrupted, not slept out (~10 s); a slow host's join is far below that
    assert time.perf_counter() - t0 < 5.0
    assert no_sampler_thread()
    lines = (tmp_path / SAMPLES_FILE).read_text().splitlines()
    assert json.loads(lines[-1])["type"] == "end"
    st.mark("late")  # after stop: ignored, no exception


def test_nvml_sampler_real_gpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the real NVML path needs one")
    props = torch.cuda.get_device_properties(0)
    st = SamplerThread([NvmlSampler(index=0, uuid=str(props.uuid))], tmp_path, hz=20)
    with st:
        a = torch.randn(4096, 4096, device="cuda")
        end = time.time() + 1.0
        while time.time() < end:
            a = a @ a
            a = a / a.norm()
        torch.cuda.synchronize()
    s = load_samples(tmp_path)
    assert s is not None, "no samples"
    assert s["errors"] == [] and "gpu" not in s["unavailable"]
    gpu = s["series"]["gpu"]
    assert len(gpu["t"]) >= 5
    assert max(v for v in gpu["util_pct"] if v is not None) > 0
    assert s["info"]["gpu"]["mem_total_bytes"] > 0
    m = samples_metrics(s)
    assert m["gpu_mem_used_max_bytes"] > 0 and m["gpu_util_mean_pct"] is not None


def _fake_pynvml(fail_after: int | None = None) -> types.ModuleType:
    """A stand-in for pynvml with the calls NvmlSampler makes (no GPU here)."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
        pass

    nv.NVMLError = NVMLError
    nv.NVMLError_NotSupported = NVMLError_NotSupported
    nv.NVML_CLOCK_SM = 1
    nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    state = {"n": 0, "shutdown": 0}
    nv.state = state
    nv.nvmlInit = lambda: None

    def shutdown() -> None:
        state["shutdown"] += 1

    nv.nvmlShutdown = shutdown

    def by_uuid(u: str) -> str:
        if u != "GPU-abc":
            raise NVMLError("Not Found")
        return "handle"

    nv.nvmlDeviceGetHandleByUUID = by_uuid
    nv.nvmlDeviceGetHandleByIndex = lambda i: "handle"
    nv.nvmlDeviceGetName = lambda h: b"Fake GPU"
    nv.nvmlDeviceGetUUID = lambda h: "GPU-abc"
    nv.nvmlSystemGetDriverVersion = lambda: "999.1"
    mem = types.SimpleNamespace(total=16 << 30, used=4 << 30)

    def meminfo(h: str) -> Any:
        state["n"] += 1
        if fail_after is not None and state["n"] > fail_after:
            raise NVMLError("GPU is lost")
        return mem

    nv.nvmlDeviceGetMemoryInfo = meminfo
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87, memory=40)
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1410
    nv.nvmlDeviceGetPowerUsage = lambda h: 250_000  # mW

    def power_not_supported(h: str) -> int:
        raise NVMLError_NotSupported("Not Supported")

    nv.power_not_supported = power_not_supported
    nv.nvmlDeviceGetPcieThroughput = lambda h, kind: 2000 if kind == 1 else 500
    me = types.SimpleNamespace(pid=__import__("os").getpid(), usedGpuMemory=3 << 30)
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=1, usedGpuMemory=1),
        me,
    ]
    return nv


def test_nvml_sampler_fields_with_stub_bindings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU here: checks NvmlSampler's field mapping and NotSupported handling against a stub."""
    nv = _fake_pynvml()
    nv.nvmlDeviceGetPowerUsage = nv.power_not_supported  # this "board" has no power sensor
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with SamplerThread([NvmlSampler(index=0, uuid="abc")], tmp_path, hz=50):
        time.sleep(0.2)
    s = load_samples(tmp_path)
    assert s is not None
    info = s["info"]["gpu"]
    assert (
        info["name"] == "Fake GPU"
        and info["found_by"] == "uuid"
        and info["mem_total_bytes"] == 16 << 30
    )
    gpu = s["series"]["gpu"]
    assert set(gpu["util_pct"]) == {87} and set(gpu["power_w"]) == {None}
    assert set(gpu["proc_mem_bytes"]) == {3 << 30}
    m = samples_metrics(s)
    assert m["gpu_util_mean_pct"] == 87 and m["gpu_power_mean_w"] is None
    assert m["gpu_pcie_rx_mean_mbps"] == 2.0 and m["gpu_pcie_tx_mean_mbps"] == 0.5
    assert m["gpu_mem_used_max_bytes"] == 4 << 30 and m["gpu_sm_clock_mean_mhz"] == 1410
    assert nv.state["shutdown"] == 1
    assert s["errors"] == []


def test_nvml_pcie_read_once_a_period(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's PCIe throughput blocks ~21 ms a call (it measures over 20 ms): read once per
    PCIE_PERIOD_S, None (not read) on the ticks between, never a repeated old value."""
    nv = _fake_pynvml()
    calls = []
    nv.nvmlDeviceGetPcieThroughput = lambda h, kind: calls.append(kind) or 2000
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(NvmlSampler, "PCIE_PERIOD_S", 0.25)
    with SamplerThread([NvmlSampler(index=0)], tmp_path, hz=50):
        time.sleep(0.6)
    gpu = load_samples(tmp_path)["series"]["gpu"]
    rx = gpu["pcie_rx_kbps"]
    read = [v for v in rx if v is not None]
    assert len(rx) > 10 and 2 <= len(read) <= 4 and set(read) == {2000}
    assert len(calls) == 2 * len(read)  # rx and tx together
    assert len([v for v in gpu["util_pct"] if v is not None]) == len(rx)  # the rest every tick


def test_nvml_error_ends_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _fake_pynvml(fail_after=3)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    st = SamplerThread([NvmlSampler(index=0), HostSampler()], tmp_path, hz=50)
    with st:
        time.sleep(0.3)
    s = load_samples(tmp_path)
    assert s is not None
    assert [e["error"] for e in s["errors"]] == ["NVMLError: GPU is lost"]
    assert len(s["series"]["gpu"]["t"]) == 2  # open read memory once, then two good ticks
    assert len(s["series"]["host"]["t"]) > 5
    assert nv.state["shutdown"] == 1


def test_nvml_missing_library_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nv = _fake_pynvml()

    def no_lib() -> None:
        raise nv.NVMLError("NVML Shared Library Not Found")

    nv.nvmlInit = no_lib
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with SamplerThread([NvmlSampler(index=0)], tmp_path):
        time.sleep(0.05)
    s = load_samples(tmp_path)
    assert s is not None
    assert samples_notes(s) == [
        "GPU sampling not available: NVML could not start: NVML Shared Library Not Found"
    ]


def test_sampler_failure_inside_diagnose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler that raises mid-run: training finishes, the failure is in the run's notes."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import diagnose.session.lifecycle as session_mod
    from diagnose.session import diagnose

    monkeypatch.setattr(session_mod, "_run_analysis", lambda run_dir: None)
    calls = {"n": 0}
    real = HostSampler.sample

    def flaky(self: HostSampler) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] > 2:
            raise RuntimeError("/proc vanished")
        return real(self)

    monkeypatch.setattr(HostSampler, "sample", flaky)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=4)
    with diagnose(model, loader, steps=3, out_dir=tmp_path, sample_hz=100) as d:
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            time.sleep(0.02)
    assert calls["n"] == 3
    s = load_samples(d.run_dir)
    assert s is not None
    assert "host sampler failed and was stopped: RuntimeError: /proc vanished" in samples_notes(s)
    assert "GPU sampling not available: no CUDA device visible to torch" in samples_notes(s)
    assert no_sampler_thread()


def test_load_samples_tolerates_damage(tmp_path: Path) -> None:
    assert load_samples(tmp_path) is None  # no file
    (tmp_path / SAMPLES_FILE).write_text("garbage\n")
    assert load_samples(tmp_path) is None  # no header
    lines = [
        {"type": "meta", "version": 1, "pid": 1, "interval_s": 0.1, "t0": 10.0},
        {"type": "sample", "sampler": "host", "t": 10.1, "proc_cpu_pct": 50.0},
        {"type": "sample", "sampler": "host", "t": 10.2, "proc_cpu_pct": 70.0, "iowait_pct": 1.0},
        {"type": "sample", "sampler": "host", "t": "bad"},
        ["not", "a", "dict"],
    ]
    text = (
        "\n".join(json.dumps(x) for x in lines) + '\n{"type": "sample", "sampler": "host", "t": 1'
    )
    (tmp_path / SAMPLES_FILE).write_text(text)  # ends in a torn line, as after a kill
    s = load_samples(tmp_path)
    assert s is not None
    host = s["series"]["host"]
    assert host["t"] == [10.1, 10.2]
    assert host["proc_cpu_pct"] == [50.0, 70.0] and host["iowait_pct"] == [None, 1.0]
    assert samples_metrics(s)["proc_cpu_mean_pct"] == 60.0


def test_samples_metrics_window_and_none() -> None:
    assert samples_metrics(None) == dict.fromkeys(CATALOG)
    assert samples_notes(None) == []
    t = [float(i) for i in range(10)]
    s = {
        "series": {
            "host": {
                "t": t,
                "cpu_pct": [[10.0, 90.0]] * 5 + [[50.0, 50.0]] * 5,
                "iowait_pct": [2.0] * 10,
                "steal_pct": [None] + [5.0] * 9,
                "proc_cpu_pct": [100.0] * 10,
                "proc_rss_bytes": list(range(10)),
                "workers_count": [0, 0, 2, 2, 2, 2, 2, 2, 2, 2],
                "workers_cpu_pct": [None, None, None, 80.0, 80.0, 80.0, 60.0, 60.0, 60.0, 60.0],
                "workers_cpu_n": [0, 0, 0, 2, 2, 2, 2, 2, 2, 2],
                "workers_rss_bytes": [0] * 10,
            }
        },
        "marks": {},
        "info": {},
    }
    m = samples_metrics(s)
    assert m["host_cpu_mean_pct"] == 50.0
    assert m["host_cpu_busiest_core_pct"] == 70.0  # core 1: (5*90 + 5*50)/10
    assert m["host_iowait_frac"] == 0.02
    assert m["host_steal_frac"] == 0.05  # an unread tick is left out, not taken as 0
    assert m["workers_count"] == 2 and m["workers_cpu_mean_pct"] == pytest.approx(240 / 7 / 1)
    assert m["workers_cpus"] == pytest.approx(240 / 7 / 100 * 2)  # per worker x the most alive
    assert m["proc_rss_max_bytes"] == 9 and m["sample_count"] == 10
    assert m["gpu_util_mean_pct"] is None
    s["marks"] = {"active_start": 5.0, "active_end": 9.0}  # 5 ticks inside: the window is used
    m = samples_metrics(s)
    assert m["host_cpu_busiest_core_pct"] == 50.0 and m["sample_count"] == 5
    s["marks"] = {"active_start": 5.0, "active_end": 6.0}  # too few inside: all ticks
    assert samples_metrics(s)["sample_count"] == 10


def test_other_processes_cpu_is_the_busy_cpus_less_the_runs_own() -> None:
    """Two CPUs 90% and 80% busy (1.7 CPUs), the training process 100% of one core, its
    workers 40%: other processes did 0.3 CPUs' worth; a row without the workers' column
    (none alive) 0.7; the mean over the rows 0.5. A row where the run's own CPU comes out
    above the CPUs' busy time (samples taken a moment apart, a descendant's CPU counted as
    it is reaped) counts less than 0: it is the mean that is clamped at 0, not each row
    (clamped rows would read others where the job's own lumps only moved between ticks)."""
    host = {"t": [0.0, 1.0, 2.0], "cpu_pct": [[90.0, 80.0], [90.0, 80.0], [50.0, 40.0]],
            "proc_cpu_pct": [100.0, 100.0, 120.0], "workers_cpu_pct": [40.0, None, 10.0]}
    m = samples_metrics({"series": {"host": host}, "marks": {}, "info": {}})
    assert m["host_cpu_others_cpus"] == pytest.approx((0.3 + 0.7 - 0.4) / 3, abs=1e-3)
    host["proc_cpu_pct"] = [100.0, 200.0, 120.0]
    assert samples_metrics({"series": {"host": host}, "marks": {}, "info": {}})[
        "host_cpu_others_cpus"] == 0.0
    del host["proc_cpu_pct"]
    assert samples_metrics({"series": {"host": host}, "marks": {}, "info": {}})[
        "host_cpu_others_cpus"] is None


def test_the_runs_other_descendants_are_its_own_not_other_processes() -> None:
    """torch.compile's workers and checks are children of the training process but no
    DataLoader workers: their column (``kids_cpu_pct``) counts as the run's own CPU. The
    first row's 1.7 busy CPUs less 1.0 (the process), 0.4 (workers) and 0.3 (compile)
    leave 0 to other processes; the second (no workers) 1.7 - 1.0 - 0.5 = 0.2."""
    host = {"t": [0.0, 1.0], "cpu_pct": [[90.0, 80.0], [90.0, 80.0]],
            "proc_cpu_pct": [100.0, 100.0], "workers_cpu_pct": [40.0, None],
            "kids_cpu_pct": [30.0, 50.0]}
    m = samples_metrics({"series": {"host": host}, "marks": {}, "info": {}})
    assert m["host_cpu_others_cpus"] == pytest.approx((0.0 + 0.2) / 2, abs=1e-3)


_DESCENDANTS = """
import json, resource, subprocess, sys, tempfile, time
from diagnose.capture.samplers import HostSampler, SamplerThread
from diagnose.runfolder import load_samples
BURN = "import time\\nend = time.perf_counter() + {s}\\nwhile time.perf_counter() < end: pass"
SIDE = ("import subprocess, sys, time; subprocess.run([sys.executable, '-c', sys.argv[1]]); "
        "time.sleep(1.5)")
out = tempfile.mkdtemp()
pids = []
st = SamplerThread([HostSampler(worker_pids=lambda: pids)], out, hz=10)
with st:
    live = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.5)])
    # a followed worker whose own child does the work, reaped while the worker lives on
    # (torch.compile's sidecar and its pool)
    side = subprocess.Popen([sys.executable, "-c", SIDE, BURN.format(s=0.8)])
    pids.append(side.pid)
    live.wait()
    side.wait()
    for _ in range(3):
        subprocess.run([sys.executable, "-c", BURN.format(s=0.2)], check=True)
    time.sleep(2.5)  # read again after the last: the rate of each read holds a second
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"host": load_samples(out)["series"]["host"],
                  "used": used.ru_utime + used.ru_stime}))
"""


def test_descendants_cpu_live_and_reaped() -> None:
    """The CPU of the process's descendants that are not its followed DataLoader workers
    (``kids_cpu_pct``): a child burning CPU, a followed worker's own child (reaped by the
    worker: its time lands in the worker's children times), short children run and reaped
    (as torch.compile's checks). Run in a fresh process (this one's other children would
    count), summed over the ticks against the children's own CPU times, of which the
    worker's own (a Python start-up) is a small part: a loaded host gives them less than
    a core."""
    got = json.loads(subprocess.run([sys.executable, "-c", _DESCENDANTS], check=True,
                                    capture_output=True, text=True, timeout=120).stdout)
    host, used = got["host"], got["used"]
    kids, ticks = host["kids_cpu_pct"], host["t"]
    # % of a core x the tick's seconds, summed: the descendants' CPU seconds
    seen = sum(v / 100.0 * (b - a) for v, a, b in zip(kids[1:], ticks, ticks[1:], strict=False))
    assert 0.8 * used <= seen <= 1.25 * used


def test_memory_stays_flat_over_many_ticks(tmp_path: Path) -> None:
    """Rows go to the file, not to memory: thousands of ticks leave the heap where it was."""
    import tracemalloc

    class Fast(Sampler):
        name = "fast"

        def sample(self) -> dict[str, Any]:
            return {"a": 1.5, "b": [1.0, 2.0, 3.0, 4.0], "c": 123456789}

    tracemalloc.start()
    try:
        st = SamplerThread([Fast()], tmp_path, hz=5000)
        st.start()
        while st.rows < 300:
            time.sleep(0.01)
        base = tracemalloc.get_traced_memory()[0]
        start_rows = st.rows
        while st.rows < start_rows + 3000:
            time.sleep(0.01)
        grown = tracemalloc.get_traced_memory()[0] - base
        assert st.stop()
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown  # ~100 bytes a row would be 300 kB
    s = load_samples(tmp_path)
    assert s is not None and len(s["series"]["fast"]["t"]) >= 3300


# ---------------------------------------------------------------- /proc/stat fast path
_STAT = (b"cpu  500 10 200 9000 90 0 5 0 40 0\n"
         b"cpu0 300 10 100 4000 50 0 5 0 40 0\n"
         b"cpu2 200 0 100 5000 40 0 0 30 0 0\n"
         b"cpu3 1 2\n"  # too short to hold iowait: left out
         b"intr 123 4 5\nctxt 99\ncpu9 1 1 1 1 1 1 1 1\n")


def test_parse_proc_stat() -> None:
    """Per-CPU ticks by CPU number (an offline cpu1 leaves a gap, not a shift): total of
    user..steal (guest is inside user), idle + iowait, iowait, steal; only the first
    block; a line that ends before steal has none."""
    from diagnose.capture.samplers import parse_proc_stat

    assert parse_proc_stat(_STAT) == {0: (4465, 4050, 50, 0), 2: (5370, 5040, 40, 30)}
    assert parse_proc_stat(b"cpu  1 1 1 1 1\ncpu0 5 0 5 80 10\n") == {0: (100, 90, 10, 0)}
    assert parse_proc_stat(b"") == {}


@contextmanager
def opened_host() -> Iterator[HostSampler]:
    """A HostSampler opened for the block and closed after it, whatever the block did."""
    s = HostSampler()
    s.open()
    try:
        yield s
    finally:
        s.close()


def test_fast_cpu_matches_psutil() -> None:
    """The /proc/stat path gives what psutil's per-CPU times give over the same ticks."""
    with opened_host() as s:
        if s._stat is None:
            pytest.skip("no /proc/stat here")
        prev_fast, prev_ps = s._ticks, s._psutil.cpu_times(percpu=True)
        s._prev = prev_ps
        burn(0.05)
        fast = s._cpu_fast()
        slow = s._cpu_psutil()
        # the two reads are microseconds apart: a tick (10 ms) may fall between them
        for a, b in zip(fast[0], slow[0], strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert a == pytest.approx(b, abs=25.0)
        assert prev_fast and len(prev_ps) >= len(s._cores)
        row = s.sample()
        assert len(row["cpu_pct"]) == len(s._cores)
    assert s._stat is None


def test_fast_path_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /proc/stat cannot be opened the sampler reads psutil, with the same row."""
    import os as _os

    real_open = _os.open

    def no_stat(path: Any, *a: Any, **k: Any) -> int:
        if str(path) == "/proc/stat":
            raise PermissionError("no")
        return real_open(path, *a, **k)

    monkeypatch.setattr("diagnose.capture.samplers.os.open", no_stat)
    with opened_host() as s:
        assert s._stat is None
        burn(0.02)
        row = s.sample()
        assert len(row["cpu_pct"]) == len(s._cores)
        assert set(row) >= {"cpu_pct", "iowait_pct", "steal_pct", "proc_cpu_pct",
                            "proc_rss_bytes"}


def test_stat_read_grows_to_hold_every_cpu() -> None:
    """A first read too short for the per-CPU block is made larger, and stays larger."""
    with opened_host() as s:
        if s._stat is None:
            pytest.skip("no /proc/stat here")
        whole = s._read_stat()
        s._stat_size = 16
        assert s._read_stat().keys() == whole.keys()
        assert s._stat_size > 16


def test_other_processes_cpus_between_two_snapshots() -> None:
    """What other processes took between two snapshots: the usable CPUs' busy time less
    this process's and its descendants' (a child's work counts as the run's own), over the
    wall time; a real child busy for a while is not "other"."""
    from diagnose.capture.others import children_cpus, cpu_snapshot, others_cpus

    assert others_cpus((0.0, 10.0, 2.0), (2.0, 13.0, 3.5)) == 0.75  # (3 - 1.5) / 2 s
    assert others_cpus((0.0, 10.0, 2.0), (2.0, 11.0, 3.5)) == 0.0  # never below none
    assert others_cpus(None, (2.0, 1.0, 1.0)) is None
    assert others_cpus((1.0, 1.0, 1.0), (1.0, 2.0, 1.0)) is None
    a = cpu_snapshot()
    if a is None:
        pytest.skip("no /proc/stat here")
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt=time.time()\nwhile time.time()-t<0.6: pass"])
    child.wait()
    b = cpu_snapshot()
    assert b is not None and b[2] - a[2] >= 0.3  # the reaped child's CPU is the run's own
    got = others_cpus(a, b)
    assert got is not None and got >= 0.0
    # ... and this process's children's (its DataLoader workers' over the clock's steps)
    kids = children_cpus(a, b)
    assert kids is not None and kids * (b[0] - a[0]) >= 0.3
    assert children_cpus((0.0, 10.0, 2.0, 1.0), (2.0, 13.0, 3.5, 2.0)) == 0.5
    assert children_cpus((0.0, 10.0, 2.0), (2.0, 13.0, 3.5)) is None  # no children's time
