"""Capture: ``with diagnose(model, loader)`` around plain training loops (CPU, real torch.profiler).

Analysis is replaced by a recording stub here (``diagnose.session.lifecycle._run_analysis``) so
these tests check capture alone; tests/test_samples.py runs the real pipeline end to end.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.optim import optimizer as optim_mod  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
import diagnose.session.after_loop as after_loop  # noqa: E402
import diagnose.session.lifecycle as session_mod  # noqa: E402
from diagnose.capture.runinfo import is_oom, parse_oom_message  # noqa: E402
from diagnose.errors import CaptureError, OptionError  # noqa: E402
from diagnose.runfolder import load_context, load_samples, trace_files  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.datasets import Pairs, train  # noqa: E402

ORIGINAL_NEXT = _BaseDataLoaderIter.__next__


@pytest.fixture(autouse=True)
def _planned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step counts here are exact: no extra steps timed when a busy machine makes them vary
    (tests/test_step_clock.py tests that extension on its own), and none after a fork
    where the clock so far says a worker finding may warn (tests/capture/test_forked_steps.py)."""
    monkeypatch.setattr(after_loop, "fork_steps_wanted", lambda *_: False)
    monkeypatch.setattr(steps_mod, "EXTEND", 1)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 1)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 1)


def make(seed: int = 0, **loader_kw: Any) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ds = loader_kw.pop("dataset", None) or Pairs()
    loader = DataLoader(ds, batch_size=8, **loader_kw)
    return model, opt, loader


class FakeReport:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.printed = 0

    def print(self) -> None:
        self.printed += 1


@pytest.fixture
def analysis(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []

    def fake(run_dir: Path) -> FakeReport:
        calls.append(run_dir)
        return FakeReport(run_dir)

    monkeypatch.setattr(session_mod, "_run_analysis", fake)
    return calls


def read_trace(run_dir: Path) -> dict[str, Any]:
    files = trace_files(run_dir)
    assert len(files) == 1, files
    assert files[0].name.endswith(".pt.trace.json.gz")
    with gzip.open(files[0], "rt") as fh:
        return json.load(fh)


def step_numbers(trace: dict[str, Any]) -> list[int]:
    nums = []
    for e in trace["traceEvents"]:
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))
        if m and e.get("ph") == "X":
            nums.append(int(m.group(1)))
    return sorted(nums)


def assert_clean() -> None:
    """No hook, patch or sampler thread left behind."""
    assert _BaseDataLoaderIter.__next__ is ORIGINAL_NEXT
    assert not any(t.name == "diagnose-samplers" for t in threading.enumerate())
    assert session_mod._active is None


def test_plain_loop_unchanged(tmp_path: Path, analysis: list[Path]) -> None:
    hooks_before = dict(optim_mod._global_optimizer_post_hooks)
    model, opt, loader = make()
    with diagnose(model, loader, steps=3, warmup=1, out_dir=tmp_path, sample_hz=20) as d:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert_clean()
    assert dict(optim_mod._global_optimizer_post_hooks) == hooks_before

    run = d.run_dir
    assert run is not None and run.parent == tmp_path
    assert re.fullmatch(r"\d{8}-\d{6}-\d{3}", run.name)
    assert d.done and d.step_mode == "optimizer"
    assert d.steps_seen == 7  # boundaries counted while profiling: wait 3 + warmup 1 + 3
    # exactly one cycle: wait=3 (the default), warmup=1, then the 3 active steps #4, #5, #6
    assert step_numbers(read_trace(run)) == [4, 5, 6]
    trace = read_trace(run)
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in names
    assert any(str(n).startswith("Optimizer.step#SGD") for n in names)
    assert not trace.get("profile_memory")  # lean by default: no memory events
    assert not trace.get("record_shapes")

    ctx = load_context(run)
    assert ctx is not None
    assert ctx["dataloader"]["num_workers"] == 0
    assert ctx["dataloader"]["batch_size"] == 8
    assert ctx["dataloader"]["pin_memory"] is False
    assert ctx["model"]["param_count"] == sum(p.numel() for p in model.parameters())
    assert ctx["model"]["param_dtype"] == "float32" and ctx["model"]["device"] == "cpu"
    assert ctx["model"]["is_dataparallel"] is False and ctx["model"]["has_conv"] is False
    assert ctx["optimizer"]["class"] == "SGD"
    assert ctx["cpu_count"] == len(os.sched_getaffinity(0))
    assert ctx["torch_num_threads"] == torch.get_num_threads()
    assert ctx["torch_version"] == torch.__version__
    assert ctx["device"]["type"] == "cpu"
    assert ctx["capture"]["window_complete"] is True
    assert ctx["oom"] is None and ctx["exception"] is None
    # each probe's own time (ms): the probes after the loop, each within the probes'
    # budget or recorded as skipped, with why; no fetch is timed for a Dataset of its
    # own, whose batches one dataset[indices] call cannot fetch
    assert all(v >= 0 for v in ctx["probes_ms"].values())
    assert not {"fetches", "work_after_fetch"} & set(ctx["probes_ms"])
    assert ctx["dataloader"]["batched_fetch_ms"] is None
    rec = ctx["probes"]
    assert rec["share"] == 0.05 and rec["budget_ms"] is not None
    assert "threads" in ctx["probes_ms"] or rec["skipped"]["threads"]

    assert analysis == [run]  # analysed once, the run folder, after everything was written
    assert d.report.run_dir == run and d.report.printed == 1


def test_capture_does_not_change_training(tmp_path: Path, analysis: list[Path]) -> None:
    """Same seed, same data: parameters and optimizer state are bit-identical with and without."""
    m1, o1, l1 = make(seed=3)
    train(m1, o1, l1)
    m2, o2, l2 = make(seed=3)
    with diagnose(m2, l2, steps=2, out_dir=tmp_path, sample_hz=0):
        train(m2, o2, l2)
    for (k1, v1), (k2, v2) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=True):
        assert k1 == k2 and torch.equal(v1, v2), k1
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for k in s1["state"]:
        assert torch.equal(s1["state"][k]["momentum_buffer"], s2["state"][k]["momentum_buffer"])
    assert not o2._optimizer_step_post_hooks and not o2._optimizer_step_pre_hooks


def test_exception_propagates_and_everything_is_removed(
    tmp_path: Path, analysis: list[Path]
) -> None:
    hooks_before = dict(optim_mod._global_optimizer_post_hooks)
    model, opt, loader = make()
    boom = ValueError("user bug at step 4")
    with (
        pytest.raises(ValueError) as info,
        diagnose(model, loader, steps=5, wait=1, out_dir=tmp_path, sample_hz=20) as d,
    ):
        for i, (x, y) in enumerate(loader):
            if i == 4:
                raise boom
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert info.value is boom  # the very same exception object, unchanged
    assert_clean()
    assert dict(optim_mod._global_optimizer_post_hooks) == hooks_before
    ctx = load_context(d.run_dir)
    assert ctx is not None
    assert ctx["exception"] == {"type": "ValueError", "message": "user bug at step 4"}
    assert ctx["oom"] is None
    assert ctx["capture"]["window_complete"] is False
    # it failed inside the active window: the steps recorded so far were still written
    assert step_numbers(read_trace(d.run_dir)) == [2, 3, 4]
    assert analysis == [d.run_dir]  # a partial report was made
    assert d.report is not None


def test_one_cycle_then_profiler_off(tmp_path: Path, analysis: list[Path]) -> None:
    model, opt, loader = make()
    seen_done_at = None
    profiling: list[tuple[bool, bool]] = []  # (d.done, profiler on) per iteration
    with diagnose(model, loader, steps=2, warmup=1, wait=2, clock_steps=3, out_dir=tmp_path,
                  sample_hz=0) as d:
        for epoch in range(2):  # keeps going long after the window
            for i, (x, y) in enumerate(loader):
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                profiling.append((d.done, torch._C._autograd._profiler_enabled()))
                if d.done and seen_done_at is None:
                    seen_done_at = (epoch, i)
    # wait 2, warmup 1, active 2, then 3 unprofiled steps (the first after the window
    # settles, untimed; 1 wait + 2 after are the clock's 3) before d.done
    assert [on for done, on in profiling if not done] == [False, False, False, True, True,
                                                         False, False, False]
    assert not any(on for done, on in profiling if done)  # off for good once done
    assert len(profiling) == 2 * len(loader)
    # the 8th boundary comes as batch #8 is pulled (after 8 optimizer steps): that
    # iteration sees d.done
    assert seen_done_at == (0, 8)
    assert step_numbers(read_trace(d.run_dir)) == [3, 4]
    assert len(trace_files(d.run_dir)) == 1  # no second cycle
    assert d.steps_seen == 5


def test_inference_loop_steps_on_batches(tmp_path: Path, analysis: list[Path]) -> None:
    model, _, loader = make()
    with diagnose(model, loader, steps=3, wait=1, out_dir=tmp_path, sample_hz=0) as d, \
            torch.no_grad():
        for x, _y in loader:
            model(x)
            if d.done:
                break
    assert d.step_mode == "dataloader"
    assert step_numbers(read_trace(d.run_dir)) == [2, 3, 4]
    ctx = load_context(d.run_dir)
    assert ctx is not None and ctx["optimizer"] is None
    assert_clean()


def test_manual_steps_without_dataloader(tmp_path: Path, analysis: list[Path]) -> None:
    model, opt, _ = make()
    batches = [(torch.randn(8, 16), torch.randint(0, 3, (8,))) for _ in range(10)]
    with diagnose(model, None, steps=3, wait=1, clock_steps=3, out_dir=tmp_path,
                  sample_hz=0) as d:
        for x, y in batches:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            d.step()
    assert d.step_mode == "manual" and d.steps_seen == 5 and d.done
    assert step_numbers(read_trace(d.run_dir)) == [2, 3, 4]
    ctx = load_context(d.run_dir)
    assert ctx is not None and ctx["dataloader"] is None and ctx["optimizer"]["class"] == "SGD"


def test_optimizer_boundary_when_loop_does_not_use_loader(
    tmp_path: Path, analysis: list[Path]
) -> None:
    model, opt, loader = make()
    # 8 boundaries: each step but the first starts at the model's call after opt.step()
    batches = [(torch.randn(8, 16), torch.randint(0, 3, (8,))) for _ in range(9)]
    with diagnose(model, loader, steps=2, wait=1, clock_steps=3, out_dir=tmp_path,
                  sample_hz=0) as d:
        for x, y in batches:  # not `loader`
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert d.step_mode == "optimizer" and d.done
    assert step_numbers(read_trace(d.run_dir)) == [2, 3]


def test_other_optimizers_do_not_count(tmp_path: Path, analysis: list[Path]) -> None:
    model, opt, loader = make()
    other = torch.optim.SGD([nn.Parameter(torch.zeros(3))], lr=0.1)
    with diagnose(model, loader, steps=3, wait=1, clock_steps=3, out_dir=tmp_path,
                  sample_hz=0) as d:
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            other.step()  # e.g. an EMA or a second model: not the model's optimizer
            other.step()
            opt.step()
    ctx = load_context(d.run_dir)
    assert ctx is not None
    # counted until d.done: the window (5 boundaries), 1 settling and 3 timed steps after it
    assert ctx["capture"]["optimizer_steps"] == 9
    assert ctx["optimizer"]["param_count"] == sum(p.numel() for p in model.parameters())
    # the step's work is more than the model's: the metric the step model reads says so
    from diagnose.metrics.context.cpu import cpu_metrics
    assert cpu_metrics(ctx, {})["optimizer_values_outside_models"] == 3


def test_real_worker_processes_sampled_and_gone(tmp_path: Path, analysis: list[Path]) -> None:
    me = psutil.Process()
    assert me.children() == []
    model, opt, loader = make(dataset=Pairs(n=512, delay_s=0.006), num_workers=2)
    with diagnose(model, loader, steps=4, out_dir=tmp_path, sample_hz=40) as d:
        train(model, opt, loader, limit=12)
    worker_pids = d.worker_pids
    assert len(worker_pids) == 2
    ctx = load_context(d.run_dir)
    assert ctx is not None and ctx["capture"]["worker_pids"] == worker_pids
    assert ctx["dataloader"]["num_workers"] == 2 and ctx["dataloader"]["prefetch_factor"] == 2
    names = {e.get("name") for e in read_trace(d.run_dir)["traceEvents"]}
    assert "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" in names
    samples = load_samples(d.run_dir)
    assert samples is not None
    host = samples["series"]["host"]
    assert max(c for c in host["workers_count"] if c is not None) == 2
    assert any(r for r in host["workers_rss_bytes"] if r)
    # the loop's iterator is gone, so are its workers; the sampler thread is joined
    deadline = time.monotonic() + 10
    while me.children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert me.children() == []
    assert_clean()


def test_out_of_memory_is_recorded_and_propagates(tmp_path: Path, analysis: list[Path]) -> None:
    model, opt, loader = make()
    with (
        pytest.raises(RuntimeError) as info,
        diagnose(model, loader, steps=3, out_dir=tmp_path, sample_hz=0) as d,
    ):
        for i, (x, y) in enumerate(loader):
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if i == 3:
                # 128 TiB: more than a 47-bit address space holds, so the allocator
                # refuses even where the kernel overcommits memory
                torch.empty(1 << 45, dtype=torch.float32)
    assert is_oom(info.value)
    assert_clean()
    ctx = load_context(d.run_dir)
    assert ctx is not None and ctx["oom"] is not None
    oom = ctx["oom"]
    assert oom["device"] == "cpu"
    assert oom["requested_bytes"] == 4 * (1 << 45)  # read from the allocator's message
    assert oom["total_bytes"] is None and oom["in_use_bytes"] is None  # CPU: unknown, not invented
    assert oom["process_rss_bytes"] > 0
    assert ctx["exception"]["type"] == "RuntimeError"


def test_oom_messages_parsed() -> None:
    gib, mib = 1 << 30, 1 << 20
    current = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
        "of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.67 GiB memory "
        "in use. Of the allocated memory 75.00 GiB is allocated by PyTorch, and 1.20 GiB is reserved "
        "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )
    p = parse_oom_message(current)
    assert p["requested_bytes"] == 2 * gib
    assert p["total_bytes"] == round(79.19 * gib)
    assert p["free_bytes"] == round(1.5 * gib)
    assert p["in_use_bytes"] == 75 * gib
    assert p["reserved_unallocated_bytes"] == round(1.2 * gib)
    assert p["device"] == "cuda:0"
    old = (
        "CUDA out of memory. Tried to allocate 36.00 MiB (GPU 1; 7.93 GiB total capacity; "
        "130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)"
    )
    p = parse_oom_message(old)
    assert p["requested_bytes"] == 36 * mib and p["device"] == "cuda:1"
    assert p["total_bytes"] == round(7.93 * gib) and p["in_use_bytes"] == round(130.35 * mib)
    assert p["free_bytes"] == round(47.06 * mib)
    hip = (
        "HIP out of memory. Tried to allocate 2.23 GiB. GPU 0 has a total capacty of 63.98 GiB of "
        "which 1.88 GiB is free. Of the allocated memory 60.87 GiB is allocated by PyTorch, and "
        "941.24 MiB is reserved by PyTorch but unallocated."
    )
    p = parse_oom_message(hip)
    assert p["total_bytes"] == round(63.98 * gib) and p["in_use_bytes"] == round(60.87 * gib)
    cpu = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 4398046511104 bytes. Error code 12 (Cannot allocate memory)"
    )
    p = parse_oom_message(cpu)
    assert p == {
        "requested_bytes": 4398046511104,
        "total_bytes": None,
        "free_bytes": None,
        "in_use_bytes": None,
        "reserved_unallocated_bytes": None,
        "device": "cpu",
    }
    nothing = parse_oom_message("out of memory")
    assert all(v is None for v in nothing.values())
    assert is_oom(torch.OutOfMemoryError("x"))
    assert is_oom(RuntimeError(current)) and is_oom(RuntimeError(cpu))
    assert not is_oom(RuntimeError("shape mismatch")) and not is_oom(ValueError("out of memory"))


def test_cuda_style_oom_error_recorded(tmp_path: Path, analysis: list[Path]) -> None:
    msg = (
        "CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 15.77 GiB "
        "of which 100.00 MiB is free. Of the allocated memory 14.90 GiB is allocated by PyTorch, "
        "and 20.00 MiB is reserved by PyTorch but unallocated."
    )
    model, opt, loader = make()
    with (
        pytest.raises(torch.OutOfMemoryError),
        diagnose(model, loader, steps=2, out_dir=tmp_path, sample_hz=0) as d,
    ):
        train(model, opt, loader, limit=3)
        raise torch.OutOfMemoryError(msg)
    ctx = load_context(d.run_dir)
    assert ctx is not None
    oom = ctx["oom"]
    assert oom["type"] == "OutOfMemoryError" and oom["device"] == "cuda:0"
    assert oom["requested_bytes"] == 512 * (1 << 20)
    assert oom["in_use_bytes"] == round(14.9 * (1 << 30))
    assert oom["sources"]["requested_bytes"] == "message"


def test_nested_capture_refused(tmp_path: Path, analysis: list[Path]) -> None:
    model, opt, loader = make()
    with diagnose(model, loader, steps=1, out_dir=tmp_path, sample_hz=0):
        with pytest.raises(CaptureError), diagnose(model, loader, out_dir=tmp_path):
            pass
        train(model, opt, loader, limit=4)
    assert_clean()


def test_bad_arguments_are_capture_errors(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        diagnose(None, None, steps=0)
    with pytest.raises(CaptureError, match="steps='5', wait=True: need whole numbers"):
        diagnose(None, None, steps="5", wait=True)
    import numpy as np

    diagnose(None, None, steps=np.int64(3))  # numpy's integers are whole numbers too
    with pytest.raises(CaptureError):
        diagnose(None, None, sample_hz=-1)
    model, _, loader = make()
    with pytest.raises(CaptureError, match="the first argument is a DataLoader and the "
                                           "second a Sequential: give the model first"):
        diagnose(loader, model)
    diagnose(model, loader)  # the right way round: made, not entered
    # a new user's watch took a string as its model, and a string as sample_hz raised
    # a TypeError from deep inside; each is one clear error now, for both
    from diagnose import watch

    for name, make_it in (("diagnose", diagnose), ("watch", watch)):
        with pytest.raises(CaptureError, match=rf"{name}\(\): the model is a str, not a "):
            make_it("abc", loader)
        with pytest.raises(CaptureError, match=r"the model 'D' is an int, not a torch"):
            make_it({"G": model, "D": 3}, loader)
        with pytest.raises(CaptureError, match=rf"{name}\(\): the loader is a str, not an "):
            make_it(model, "abc")
        for hz in ("x", -1, float("nan")):
            with pytest.raises(CaptureError, match=rf"{name}\(\): sample_hz must be a number"):
                make_it(model, loader, sample_hz=hz)
    # a new user's optimizer=lambda: 0 and loss_fn="ce" were taken without a word (the
    # loss failed later, in each memory what-if)
    with pytest.raises(CaptureError, match=r"optimizer is a function, not a torch.optim"):
        diagnose(model, loader, optimizer=lambda: 0)
    with pytest.raises(CaptureError, match=r"loss_fn is a str, not a function"):
        diagnose(model, loader, loss_fn="ce")
    with pytest.raises(CaptureError, match=r"step_fn is a type, not a function"):
        diagnose(model, loader, step_fn=torch.nn.CrossEntropyLoss)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    diagnose(model, loader, optimizer=opt, loss_fn=torch.nn.CrossEntropyLoss())  # fits
    # a misspelled option named Session.__init__ in Python's own TypeError
    with pytest.raises(OptionError, match=r"diagnose\(\): no option 'stpes' \(did you mean "
                                           r"'steps'\?\)"):
        diagnose(model, loader, stpes=5)
    with pytest.raises(TypeError, match=r"watch\(\): no option 'zzz'; its options: model, "):
        watch(model, loader, zzz=1)
    with pytest.raises(CaptureError, match=r"watch\(\): progress_s must be a number >= 0"):
        watch(model, loader, progress_s="x")
    with pytest.raises(CaptureError, match=r"capture_interval_s must be a number >= 0"):
        watch(model, loader, capture_interval_s=-1)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CaptureError), diagnose(None, None, out_dir=blocker / "sub"):
        pass
    assert_clean()


def test_short_loop_notes_incomplete_window(tmp_path: Path, analysis: list[Path]) -> None:
    model, opt, loader = make()
    with diagnose(model, loader, steps=5, out_dir=tmp_path, sample_hz=0) as d:
        train(model, opt, loader, limit=1)
    assert not d.done
    assert trace_files(d.run_dir) == []
    assert any("cut short by the end of the loop" in n for n in d.notes)
    assert any("no trace was written" in n for n in d.notes)
    ctx = load_context(d.run_dir)
    assert ctx is not None and ctx["capture"]["window_complete"] is False


def test_analysis_failure_does_not_mask_user_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(run_dir: Path) -> Any:
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(session_mod, "_run_analysis", broken)
    model, opt, loader = make()
    with (
        pytest.raises(KeyError, match="mine"),
        diagnose(model, loader, steps=2, out_dir=tmp_path, sample_hz=0) as d,
    ):
        train(model, opt, loader, limit=3)
        raise KeyError("mine")
    assert d.report is None
    assert any("analysis exploded" in n for n in d.notes)
    assert_clean()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_capture_records_device_and_gpu_series(tmp_path: Path, analysis: list[Path]) -> None:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 3)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(Pairs(n=4096, dim=512), batch_size=64)
    with diagnose(model, loader, steps=20, out_dir=tmp_path, sample_hz=20) as d:
        for x, y in loader:
            x, y = x.to(dev), y.to(dev)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            time.sleep(0.01)  # the window spans a few sampler ticks
            if d.done:
                break
    ctx = load_context(d.run_dir)
    assert ctx is not None
    assert ctx["device"]["type"] == "cuda" and ctx["device"]["capability"] is not None
    assert ctx["model"]["device"].startswith("cuda") and ctx["capture"]["activities"][:2] == [
        "CPU",
        "CUDA",
    ]
    cats = {e.get("cat") for e in read_trace(d.run_dir)["traceEvents"]}
    assert "kernel" in cats
    samples = load_samples(d.run_dir)
    assert samples is not None and samples["errors"] == []
    assert "gpu" not in samples["unavailable"], samples["unavailable"]
    gpu = samples["series"]["gpu"]
    assert len(gpu["t"]) >= 2 and max(v for v in gpu["mem_used_bytes"] if v is not None) > 0
    assert len(samples["series"]["host"]["t"]) >= 2


def test_an_in_process_tensor_loaders_batched_fetch_is_timed_after_the_loop(
        tmp_path: Path, analysis: list[Path], every_probe: None) -> None:
    """A TensorDataset loader without workers, whose per-sample fetch of 256 rows outweighs
    a tiny model's step: its batched fetch's inputs are timed after the loop (one
    indexing call against 256 ``__getitem__`` calls and a collate), under
    ``work_after_fetch`` with the work after each where torch has 2 threads or more, else
    alone under ``fetches``; nothing is timed on enter. Every probe runs (``every_probe``):
    on a busy host the loop's wait can fall under the share the budget's gate needs."""
    from torch.utils.data import TensorDataset

    torch.manual_seed(0)
    model = nn.Linear(16, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randint(0, 3, (4096,))),
                        batch_size=256, shuffle=True)
    with diagnose(model, loader, steps=3, warmup=1, out_dir=tmp_path) as d:
        train(model, opt, loader, d)
    assert_clean()
    ctx = load_context(d.run_dir)
    assert ctx is not None
    dl = ctx["dataloader"]
    assert dl["batched_fetch_ms"] > 0 and dl["batched_fetch_per_sample_ms"] > 0
    probe = "work_after_fetch" if torch.get_num_threads() >= 2 else "fetches"
    assert probe in ctx["probes_ms"]
    assert ("work_after_fetch" in dl) == (probe == "work_after_fetch")
