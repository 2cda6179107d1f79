"""Each rule: a trace (or context) that shows its symptom fires it; a healthy one does not.

Plus the rule pack's own integrity: unique ids, every documentation section,
every fix it names exists, and every rule has a case here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.fixes import FIXES
from diagnose.rules.engine import (
    CATEGORIES,
    DOC_SECTIONS,
    WARNING_GAIN,
    builtin_rules,
    load_rules,
)
from tests import rankbuilder as rb
from tests import tracebuilder as tb
from tests.memory.test_section import SECTION

SEV = {"info": 0, "warning": 1, "critical": 2}
CTX_HEALTHY = {
    "dataloader": {"num_workers": 4, "pin_memory": True, "batch_size": 64,
                   "persistent_workers": True, "prefetch_factor": 2},
    "cudnn_benchmark": True,
    "optimizer": {"class": "AdamW", "foreach": True},
    "model": {"param_count": 1000, "is_dataparallel": False, "has_conv": False},
    "cpu_count": 8,
    "torch_num_threads": 8,
    "oom": None,
}


def _ctx(**over):
    ctx = {k: (dict(v) if isinstance(v, dict) else v) for k, v in CTX_HEALTHY.items()}
    for key, val in over.items():
        if isinstance(val, dict) and isinstance(ctx.get(key), dict):
            ctx[key].update(val)
        else:
            ctx[key] = val
    return ctx


def _gc_clock(pauses: list[float]) -> dict:
    """A capture whose clock timed steps of 20 ms (the first left out, as the session does)
    with the collector's pauses ``pauses`` (ms; a pause over 5 ms was a full collection)."""
    n = len(pauses)
    return {"step_clock": {"phase": ["wait"] * n, "ms": [20.0 + p for p in pauses],
                           "gc_ms": pauses, "gc_full": [int(p > 5) for p in pauses]}}


def _cpu_steps(**kw):
    """CPU only: 8 steps of 20 ms of ops on the training thread."""
    b = tb.TraceBuilder(device=None)
    for _ in range(8):
        with b.step():
            b.cpu(20_000.0, "aten::addmm")
    return b


def _autocast(work: float, fp32: float, noise: float = 0.02) -> dict:
    """The autocast probe's timing: the model's work under bf16 autocast and in fp32 (ms)."""
    return {"dtype": "bfloat16", "work_ms": work, "work_fp32_ms": fp32, "ratio": work / fp32,
            "rounds": 5, "noise": noise, "native": False, "capability": "AVX2"}


# --- traces that plant one symptom each -------------------------------------------------
def _bursty_loader(workers: int = 4, **kw):
    b = tb.TraceBuilder(**kw)
    for i in range(6):
        with b.step():
            b.dataloader(60_000.0 if i == 0 else 300.0, workers=workers)
            for _ in range(20):
                b.kernel(dur=1500.0)
            b.sync()
    return b


def _host_bound(**kw):
    """Long kernels, but the host does CPU work between launches: the GPU waits."""
    b = tb.TraceBuilder(**kw)
    for _ in range(6):
        with b.step():
            b.dataloader(50.0, workers=4)
            for _ in range(40):
                b.cpu(400.0, name="aten::index")  # CPU-side tensor work in the step
                b.kernel(dur=120.0)
            b.sync()
    return b


def _no_host_activity(**kw):
    """A launch-bound run profiled with CUDA activity only: idle the trace cannot attribute."""
    doc = tb.launch_bound(**kw).build()
    keep = [e for e in doc["traceEvents"]
            if e.get("cat") not in ("cuda_runtime", "Runtime", "cuda_driver", "ac2g")]
    doc["traceEvents"] = keep
    return doc


def _queued_idle(**kw):
    """Work launched well ahead, the GPU idle before each kernel starts (a device-side
    wait the trace does not show): idle with no host cause the trace can name."""
    b = tb.TraceBuilder(**kw)
    for _ in range(tb.STEPS):
        with b.step():
            for i in range(10):
                b.kernel(tb.ELEMENTWISE_ADD, dur=50.0, launch_dur=5.0, queue_delay=300.0 * i)
    return b


def _fragmented(**kw):
    b = tb.healthy(**kw)
    b.memory(allocated=40 * 2**30, reserved=70 * 2**30)
    return b


CONV_TC = "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"


def _conv_net(**kw):
    """A conv net on an A100: convolutions are most of the step (cuDNN benchmark matters)."""
    kw.setdefault("device", "NVIDIA A100-SXM4-80GB")
    kw.setdefault("cc", (8, 0))
    b = tb.TraceBuilder(**kw)
    for _ in range(6):
        with b.step():
            b.dataloader(150.0, workers=8)
            for _ in range(40):
                b.kernel(CONV_TC, dur=300.0, op="aten::cudnn_convolution")
                b.kernel(tb.ELEMENTWISE_ADD, dur=20.0)
                b.idle(280.0)
            b.sync()
    return b


def _dataparallel(**kw):
    """Healthy steps plus nn.DataParallel's own ops on the host (~4 ms of a ~38 ms step)."""
    b = tb.TraceBuilder(**kw)
    for _ in range(6):
        with b.step():
            b.cpu(2500.0, "Broadcast")
            b.cpu(800.0, "Scatter")
            tb._train_step(b)
            b.cpu(700.0, "Gather")
    return b


def _epoch_clock(workers: int = 4, persistent: bool = False) -> dict:
    """A context whose clock timed 12 steps of 20 ms but two that started an epoch (220 ms:
    the workers stopped and started again), with 20 batches an epoch."""
    starts = [1 if i in (1, 7) else 0 for i in range(12)]
    return _ctx(dataloader={"num_workers": workers, "persistent_workers": persistent,
                            "len": 20},
                capture={"step_clock": {"phase": ["wait"] * 12,
                                        "ms": [220.0 if s else 20.0 for s in starts],
                                        "loader_starts": starts}})


def _samples(cpu_pct: float, n: int = 30) -> dict:
    """A run's host samples with every CPU ``cpu_pct`` busy."""
    t = [i * 0.1 for i in range(n)]
    return {"series": {"host": {"t": t, "cpu_pct": [[cpu_pct] * 4 for _ in t],
                                "iowait_pct": [0.0] * n}},
            "marks": {}, "info": {}}


def _pools(blas_threads: int = 2, wait_ms: float = 8.0, others: float = 0.02) -> dict:
    """A 2-CPU run without workers, torch on 2 threads and numpy's OpenBLAS on
    ``blas_threads`` beside it, whose clock timed 8 steps of 40 ms with the training thread
    ``wait_ms`` of each runnable but off a CPU, other processes at ``others`` CPUs then."""
    return _ctx(dataloader={"num_workers": 0, "persistent_workers": False},
                cpu_count=2, torch_num_threads=2,
                thread_pools=[{"user_api": "openmp", "internal_api": "openmp",
                               "prefix": "libgomp", "num_threads": 2, "torch": True},
                              {"user_api": "blas", "internal_api": "openblas",
                               "prefix": "libscipy_openblas", "num_threads": blas_threads,
                               "torch": False}],
                capture={"step_clock": {"phase": ["wait"] * 8, "ms": [40.0] * 8,
                                        "cpu_wait_ms": [wait_ms] * 8},
                         "after_others_cpus": others})


def _shared_cpus(others: float = 1.0, wait_ms: float = 8.0, one_ms: float = 4.0,
                 threads: int = 2, workers: int = 0, noise: float = 0.05, cpus: int = 2,
                 workers_cpus: float | None = None) -> dict:
    """A ``cpus``-CPU run without a DataLoader (or with ``workers``), torch on ``threads``
    threads, whose clock timed 8 steps of 40 ms with the training thread ``wait_ms`` of
    each runnable but off a CPU while other processes held ``others`` CPUs (and the
    workers ``workers_cpus``, where given); after the loop the model's forward and
    backward took 10 ms on torch's threads and ``one_ms`` on one."""
    return _ctx(dataloader={"num_workers": workers, "persistent_workers": False},
                cpu_count=cpus, torch_num_threads=threads, thread_pools=None,
                threads={"forward_ms": 3.0, "work_ms": 10.0, "work_1thread_ms": one_ms,
                         "noise": noise},
                capture={"step_clock": {"phase": ["wait"] * 8, "ms": [40.0] * 8,
                                        "cpu_wait_ms": [wait_ms] * 8},
                         "after_others_cpus": others, "after_workers_cpus": workers_cpus})


def _quota(quota: float | None = 1.0, wait_ms: float = 16.0, threads: int = 2,
           others: float = 0.02) -> dict:
    """A 2-CPU run without a DataLoader, torch on ``threads`` threads beside numpy's
    OpenBLAS on 2, its cgroup's CPU quota ``quota`` CPUs (None: no quota), whose clock timed
    8 steps of 40 ms with the training thread ``wait_ms`` of each runnable but off a CPU
    (the quota's pauses), other processes at ``others`` CPUs."""
    ctx = _pools(wait_ms=wait_ms, others=others)
    ctx.update(cpu_quota=quota, torch_num_threads=threads)
    return ctx


def _worker_pools(cpus: float = 1.9, workers: int = 3, cpu_count: int = 2, **loader) -> dict:
    """A run with ``workers`` DataLoader workers on ``cpu_count`` CPUs whose batch, timed in
    a forked worker after the loop, kept ``cpus`` CPUs busy (a pool beside its thread)."""
    return _ctx(dataloader={"num_workers": workers, "persistent_workers": True,
                            "worker_batch_ms": 40.0, "worker_batch_cpu_ms": 38.0,
                            "worker_batch_cpus": cpus, **loader},
                cpu_count=cpu_count, torch_num_threads=cpu_count)


def _loop_work(between_ms: float, loader: dict | None = None) -> dict:
    """A capture whose clock timed 20 ms steps with ``between_ms`` of each between the
    optimizer's step and the next forward; no DataLoader given (``loader``: one was)."""
    n = 8
    return _ctx(dataloader=loader, capture={"step_clock": {
        "phase": ["wait"] * n, "ms": [20.0] * n, "between_ms": [between_ms] * n}})


def test_the_loops_own_work_between_steps_is_told_only_without_a_dataloader(tmp_path):
    """IN007: 8 of 20 ms between steps, no DataLoader: a warning; 0.5 ms: nothing; the
    same 8 ms beside a DataLoader given to diagnose: the input rules' (its wait by cause);
    on a GPU run: the GPU's idle rules'."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    (own,) = [f for f in analyze(path, context=_loop_work(8.0)).findings if f.rule == "IN007"]
    assert any("No DataLoader was given to diagnose" in h for h in own.hints)
    assert not [f for f in analyze(path, context=_loop_work(0.5)).findings
                if f.rule == "IN007"]
    # a generator given as the loader: its batches are the loop's own work, and the hint
    # says so rather than asking for a loader it was given
    gen = _loop_work(8.0)
    gen["capture"]["loader_given_other"] = "generator"
    (own,) = [f for f in analyze(path, context=gen).findings if f.rule == "IN007"]
    assert not any("No DataLoader was given" in h for h in own.hints)
    assert any("The loader given to diagnose is no torch DataLoader" in h for h in own.hints)
    given = _loop_work(8.0, loader=dict(CTX_HEALTHY["dataloader"]))
    assert not [f for f in analyze(path, context=given).findings if f.rule == "IN007"]
    # a DataLoader the loop did not give to diagnose still shows in the trace: IN001's,
    # which says to give it
    b = tb.TraceBuilder(device=None)
    for _ in range(8):
        with b.step():
            b.dataloader(8_000.0)
            b.cpu(12_000.0, "aten::addmm")
    seen = _write(tmp_path, "seen", b)
    report = analyze(seen, context=_loop_work(8.0))
    assert not [f for f in report.findings if f.rule == "IN007"]
    (in001,) = [f for f in report.findings if f.rule == "IN001"]
    assert any("not given to diagnose" in h for h in in001.hints)
    # ... and where a list was given as the loader, IN001 says that it is no DataLoader,
    # not that none was given (a new user's list of batches)
    listed = _loop_work(8.0)
    listed["capture"]["loader_given_other"] = "list"
    (in001,) = [f for f in analyze(seen, context=listed).findings if f.rule == "IN001"]
    assert not any("not given to diagnose" in h for h in in001.hints)
    assert any("The loader given to diagnose is no torch DataLoader (a list" in h
               for h in in001.hints)
    # on a GPU the time between steps may be a wait for the device (a .item()): not judged
    gpu = _write(tmp_path, "gpu", tb.healthy())
    assert not [f for f in analyze(gpu, context=_loop_work(8.0)).findings
                if f.rule == "IN007"]


def _own_samples(others_cpus: float, n: int = 30) -> dict:
    """A 2-CPU run's host samples: the training process at 180%, other processes at
    ``others_cpus`` of a CPU."""
    t = [i * 0.1 for i in range(n)]
    core = (180.0 + 100.0 * others_cpus) / 2
    return {"series": {"host": {"t": t, "cpu_pct": [[core, core] for _ in t],
                                "proc_cpu_pct": [180.0] * n, "iowait_pct": [0.0] * n}},
            "marks": {}, "info": {}}


def _busy_workers(workers_pct: float = 80.0, n: int = 30) -> dict:
    """A 2-CPU run's host samples with its 2 DataLoader workers at ``workers_pct`` (of a
    CPU, together) and the CPUs full."""
    t = [i * 0.1 for i in range(n)]
    return {"series": {"host": {"t": t, "cpu_pct": [[100.0, 100.0] for _ in t],
                                "iowait_pct": [0.0] * n, "proc_cpu_pct": [100.0] * n,
                                "workers_count": [2] * n, "workers_cpu_pct": [workers_pct] * n,
                                "workers_cpu_n": [2] * n}},
            "marks": {}, "info": {}}


def _write(tmp_path: Path, name: str, obj) -> Path:
    import gzip
    import json

    if isinstance(obj, tb.TraceBuilder):
        return obj.write(tmp_path / f"{name}.pt.trace.json.gz")
    p = tmp_path / f"{name}.pt.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps(obj).encode()))
    return p


# rule -> (trace factory, context, minimum severity expected); samples: SAMPLES
POSITIVE = {
    "IN001": (lambda: tb.dataloader_bound(), None, "critical"),
    "IN002": (lambda: tb.dataloader_bound(workers=4), None, "info"),
    "IN003": (_bursty_loader, None, "warning"),
    # the epochs' starts are on the clock, not in the profiled window: a healthy trace
    "IN005": (tb.healthy, _epoch_clock(), "warning"),
    "IN004": (lambda: tb.dataloader_bound(workers=4, share=0.1),
              _ctx(dataloader={"num_workers": 16}, cpu_count=4), "warning"),
    "CF006": (_cpu_steps, _ctx(capture=_gc_clock([0, 0.1, 30, 0.1, 0.2, 40, 0.1, 0.1]),
                                gc_frozen_objects=0), "warning"),
    "TR001": (tb.pageable_copies, None, "warning"),
    # a hidden sync costs little GPU time here (the host catches up at once): info, truthfully
    "TR002": (tb.hidden_sync, None, "info"),
    "SY001": (tb.sync_bound, None, "critical"),
    "LA001": (tb.launch_bound, None, "critical"),
    "UT001": (_host_bound, None, "warning"),
    "UT002": (_queued_idle, None, "warning"),
    "PR001": (tb.fp32_gemm, None, "warning"),
    "PR002": (_cpu_steps, _ctx(capture=_gc_clock([0.1] * 8), cpu_autocast=_autocast(20.0, 16.0)),
              "warning"),
    "ME001": (tb.healthy, _ctx(oom={"requested_bytes": 2 * 2**30, "in_use_bytes": 75 * 2**30,
                                     "total_bytes": 80 * 2**30, "device": "cuda:0"}), "critical"),
    "ME002": (tb.memory_pressure, None, "warning"),
    "ME003": (_fragmented, None, "warning"),
    "ME004": (tb.healthy, _ctx(memory=SECTION), "info"),
    "ME005": (tb.healthy, _ctx(memory={**SECTION, "kept_after_step": {"bytes": 1000, "modules": [
        {"module": "0.1", "class": "GELU", "saved_bytes": 1000}]}}), "warning"),
    "CM001": (tb.comm_not_overlapped, None, "critical"),
    "CF001": (tb.optimizer_per_param, None, "warning"),
    "CF002": (tb.zero_grad_fill, None, "info"),
    "CF003": (_conv_net, _ctx(cudnn_benchmark=False, model={"has_conv": True}), "warning"),
    "CF004": (_dataparallel, _ctx(model={"is_dataparallel": True}), "warning"),
    "CF005": (lambda: tb.comm_not_overlapped(world_size=2, backend="gloo"), None, "warning"),
    "CF007": (_cpu_steps, _pools(), "warning"),
    "CF008": (_cpu_steps, _shared_cpus(), "warning"),
    "CF009": (_cpu_steps, _quota(), "warning"),
    "CF010": (_cpu_steps, _shared_cpus(others=0.0, workers=2), "warning"),
    "IN006": (lambda: tb.dataloader_bound(workers=3), _worker_pools(), "warning"),
    "IN007": (_cpu_steps, _loop_work(8.0), "warning"),
    # run-scope: the factory is a whole run, written as one folder with a trace per rank
    "IM001": (lambda: rb.slow_input(4, rank=2), None, "warning"),
}
SAMPLES = {"IN004": _samples(97.0), "CF007": _own_samples(0.02), "CF010": _busy_workers()}


def test_every_builtin_rule_has_a_case():
    assert {r.id for r in builtin_rules()} == set(POSITIVE)


@pytest.mark.parametrize("rule_id", sorted(POSITIVE))
def test_rule_fires_on_its_symptom(rule_id, tmp_path):
    factory, ctx, min_sev = POSITIVE[rule_id]
    path = _write(tmp_path, rule_id, factory())
    report = analyze(path, context=ctx, samples=SAMPLES.get(rule_id))
    hits = [f for f in report.findings if f.rule == rule_id]
    assert hits, f"{rule_id} did not fire:\n{report.render_text()}"
    f = hits[0]
    assert SEV[f.severity] >= SEV[min_sev], (f.severity, f.message)
    # the message quotes numbers from the metrics, not placeholders
    assert "{" not in f.message and f.message != f.title
    rule = next(r for r in builtin_rules() if r.id == rule_id)
    # the fixes are the rule's, ordered by the step model's predicted effect; one already in
    # place in the run is left out with a hint (its ``instead`` fixes then stand in)
    from diagnose.fixes import FIXES

    placed = [x for x in rule.fixes if FIXES[x].in_place(report.metrics) is not None]
    instead = {i for x in placed for i in FIXES[x].instead}
    assert set(f.fixes) == (set(rule.fixes) - set(placed)) | instead
    assert len(f.fixes) == len(set(f.fixes)) and f.category == rule.category
    assert all(any(FIXES[x].title in h for h in f.hints) for x in placed)
    # a warning has time behind it
    if SEV[f.severity] >= 1 and f.category != "memory":
        assert f.estimated_gain is not None and f.estimated_gain >= WARNING_GAIN, f


@pytest.mark.parametrize("rule_id", sorted(POSITIVE))
def test_rule_quiet_on_healthy_run(rule_id, tmp_path):
    path = _write(tmp_path, "healthy", tb.healthy())
    report = analyze(path, context=_ctx())
    assert not [f for f in report.findings if f.rule == rule_id]


def test_bursts_of_an_in_process_loader_are_not_blamed_on_workers(tmp_path):
    """IN003's fixes (persistent workers, a deeper prefetch queue) need worker processes: an
    in-process loader's bursts (a slow sample, the garbage collector pausing the fetch)
    are not its symptom."""
    path = _write(tmp_path, "bursty0", _bursty_loader(workers=0))
    report = analyze(path)
    assert report.metrics["dataloader_multiprocess"] is False
    assert not [f for f in report.findings if f.rule == "IN003"]


@pytest.mark.parametrize("workers,persistent", [(4, True), (0, False)])
def test_epoch_starts_judged_only_where_workers_start_again(tmp_path, workers, persistent):
    """IN005 reads the clock's epoch starts: 200 ms beyond a 20 ms step every 20 steps is
    10 ms of a 30 ms mean step (a third); persistent workers or none start nothing again."""
    path = _write(tmp_path, "healthy", tb.healthy())
    fires = analyze(path, context=_epoch_clock())
    assert fires.metrics["dataloader_epoch_start_share"] == pytest.approx(1 / 3, abs=1e-3)
    (f,) = [f for f in fires.findings if f.rule == "IN005"]
    assert f.severity == "critical" and f.fixes[0] == "persistent_workers"
    quiet = analyze(path, context=_epoch_clock(workers, persistent))
    assert quiet.metrics["dataloader_epoch_start_share"] is None
    assert not [f for f in quiet.findings if f.rule == "IN005"]
    # judged, not left unevaluated: `compare` then says the fix resolved it
    assert not [n for n in quiet.not_evaluated if n.rule == "IN005"]


@pytest.mark.parametrize(("work", "fp32", "noise"), [
    (8.0, 12.0, 0.02),  # a CPU that computes in bf16 (AMX): autocast is the faster
    (12.0, 10.0, 0.15),  # 1.2x, inside its rounds' noise taken twice
    (12.0, 11.9, 0.0),  # under 10% slower
])
def test_cpu_autocast_is_blamed_only_where_fp32_timed_faster_past_the_noise(
        tmp_path, work, fp32, noise):
    path = _write(tmp_path, "cpu", _cpu_steps())
    ctx = _ctx(capture=_gc_clock([0.1] * 8), cpu_autocast=_autocast(work, fp32, noise))
    report = analyze(path, context=ctx)
    assert not [f for f in report.findings if f.rule == "PR002"]
    assert report.metrics["cpu_autocast_ratio"] == pytest.approx(work / fp32, rel=1e-3)


def test_cpu_autocast_finding_is_predicted_from_the_fp32_timing(tmp_path):
    """8 steps of 20 ms of ops, the unprofiled step 20.1 ms; the work under autocast 20 ms
    against 16 ms in fp32 (1.25x): the rule's own estimate is 4 ms off the step (20%,
    a warning); the step model's, the ops at 1 / 1.25 of their time, a 16.1 ms step. The
    hint names the CPU's instructions."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    ctx = _ctx(capture=_gc_clock([0.1] * 8), cpu_autocast=_autocast(20.0, 16.0))
    report = analyze(path, context=ctx)
    (f,) = [f for f in report.findings if f.rule == "PR002"]
    assert f.severity == "warning" and "20.0 ms under it against 16.0 ms in fp32" in f.message
    assert report.metrics["cpu_autocast_saving_frac"] == pytest.approx(4.0 / 20.1, abs=1e-3)
    assert any("AVX2" in h for h in f.hints)
    p = f.predictions["cpu_fp32"]
    assert p.step_ms == pytest.approx(16.1, abs=0.2)


def test_gc_pauses_healthy_and_frozen(tmp_path):
    """Small collections only (no full one): no finding. gc.freeze() already in place: the
    finding offers no fix that is there."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    quiet = analyze(path, context=_ctx(capture=_gc_clock([0.1] * 8), gc_frozen_objects=0))
    assert not [f for f in quiet.findings if f.rule == "CF006"]
    frozen = analyze(path, context=_ctx(capture=_gc_clock([0, 0.1, 30, 0.1, 0.2, 40, 0.1, 0.1]),
                                        gc_frozen_objects=250_000))
    (f,) = [f for f in frozen.findings if f.rule == "CF006"]
    assert "gc_freeze" not in f.fixes or any("in place" in h for h in f.hints)


def test_thread_pools_told_apart_from_a_busy_machine(tmp_path):
    """CF007 names the process's own pools where the training thread waited for a CPU and
    other processes took almost none over the same steps; the workers' prediction is
    withheld for it, saying so (not "other processes held the CPU"). A machine busy over
    those steps (a test suite's burst the window's samples missed: a new user's script
    with no numpy work fired CF007 so), a pool of one thread, or a wait under 5% of the
    steps: no CF007."""
    from diagnose.fixes.findings import ON_A_BUSY_MACHINE, OWN_POOLS

    path = _write(tmp_path, "cpu", tb.dataloader_bound())
    own = analyze(path, context=_pools(), samples=_own_samples(0.02))
    (f,) = [f for f in own.findings if f.rule == "CF007"]
    assert "openblas" in f.message and "2 threads beside torch's 2 on 2 CPUs" in f.message
    assert 'threadpool_limits(limits={"libscipy_openblas": 1})' in f.fix_code.get(
        "thread_pools", FIXES["thread_pools"].code)
    (in001,) = [f for f in own.findings if f.rule == "IN001"]
    why = in001.predictions["num_workers"]
    assert isinstance(why, str) and why.startswith(OWN_POOLS) and "CF007" in why
    busy = analyze(path, context=_pools(others=1.5), samples=_own_samples(0.02))
    assert not [f for f in busy.findings if f.rule == "CF007"]
    (in001,) = [f for f in busy.findings if f.rule == "IN001"]
    assert str(in001.predictions["num_workers"]).startswith(ON_A_BUSY_MACHINE)
    # a wait that other processes explain: 0.35 of 2 CPUs keeps a thread that wants one
    # waiting ~17% of the time (a burner at that load read 11-22%, no numpy work at all)
    for ctx in (_pools(blas_threads=1), _pools(wait_ms=1.0), _pools(others=0.35)):
        quiet = analyze(path, context=ctx, samples=_own_samples(0.02))
        assert not [f for f in quiet.findings if f.rule == "CF007"]
    # workers that oversubscribe the CPUs (IN004's) are the likelier holders: the corpus's
    # 4-6 workers on 2 CPUs, numpy loaded in every process, kept their predictions
    many = _pools()
    many["dataloader"] = {**many["dataloader"], "num_workers": 4}
    workers = analyze(path, context=many, samples=_own_samples(0.02))
    assert not [f for f in workers.findings if f.rule == "CF007"]
    assert not any(isinstance(p, str) and p.startswith(OWN_POOLS)
                   for f in workers.findings for p in f.predictions.values())


def test_a_burst_before_the_window_is_not_blamed_on_the_runs_own_pools(tmp_path):
    """A new user's loop with numpy loaded, no numpy work: 3 steps before the window waited
    half their time for a CPU (another process's burst), the steps after it 0.6%, other
    processes at 0.00 CPUs over those. The wait is read over the steps the others were
    read over: no CF007, and the workers' prediction is not withheld for the pools."""
    from diagnose.fixes.findings import OWN_POOLS

    path = _write(tmp_path, "cpu", tb.dataloader_bound())
    ctx = _pools(others=0.0)
    ctx["capture"]["step_clock"] = {
        "phase": ["wait"] * 4 + ["after"] * 20, "ms": [350.0] * 4 + [10.0] * 20,
        "cpu_wait_ms": [175.0] * 4 + [0.06] * 20}
    report = analyze(path, context=ctx, samples=_own_samples(0.02))
    assert report.metrics["step_cpu_wait_unprofiled_share"] < 0.01
    assert not [f for f in report.findings if f.rule == "CF007"]
    (in001,) = [f for f in report.findings if f.rule == "IN001"]
    assert not str(in001.predictions.get("num_workers")).startswith(OWN_POOLS)


def test_torch_threads_short_of_the_cpus_other_processes_leave(tmp_path):
    """CF008: another process held a CPU of 2 over the timed steps, the training thread
    waited 20% of them, and one thread timed faster than torch's 2 after the loop: hold
    torch to the one CPU left, the run's count in the code, not predicted (no model of the
    turns). No CF008 where others held little, where the wait was small, where one thread
    was no faster (beyond the timing's noise), with torch on one thread, or where the job's
    own workers oversubscribe the CPUs (IN004's)."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    report = analyze(path, context=_shared_cpus())
    (f,) = [f for f in report.findings if f.rule == "CF008"]
    assert f.severity == "warning" and f.fixes == ["torch_threads"]  # a 20% wait
    (big,) = [f for f in analyze(path, context=_shared_cpus(wait_ms=16.0)).findings
              if f.rule == "CF008"]
    assert big.severity == "critical"  # a 40% wait, 58% of the timing at stake
    assert "held 1.00 of them" in f.message and "10.0 ms on torch's threads against 4.0 ms" \
        in f.message
    assert f.estimated_gain == pytest.approx(1 - 0.4 * 1.05, rel=0.01)  # one thread's saving
    assert "torch.set_num_threads(1)" in f.fix_code["torch_threads"]
    assert not [h for h in f.hints if "DataLoader workers" in h]  # the job has none
    # not predicted: the host's work is modelled, but not a thread pool taking turns
    assert str(f.predictions["torch_threads"]).startswith("no model of what torch_threads")
    from diagnose.report.text import fix_line

    # the report says why, not only that the change is not replayed (a new user's trial)
    assert fix_line(f, "torch_threads") == (
        "not predicted: the step model does not replay torch's threads taking turns with "
        "other processes, or a CPU quota's pauses (the finding's own numbers are the thread "
        "timing beside the same load; autofix measures it); time it before and after")
    # the run's own count in the code: 4 CPUs, others on 1.0, torch on 4 threads: 3
    (f4,) = [f for f in analyze(path, context=_shared_cpus(cpus=4, threads=4)).findings
             if f.rule == "CF008"]
    assert "torch.set_num_threads(3)" in f4.fix_code["torch_threads"]
    for ctx in (_shared_cpus(others=0.2), _shared_cpus(wait_ms=1.0),
                _shared_cpus(one_ms=9.8), _shared_cpus(one_ms=9.0, noise=0.2),
                _shared_cpus(threads=1), _shared_cpus(workers=2)):
        quiet = analyze(path, context=ctx)
        assert not [f for f in quiet.findings if f.rule == "CF008"], ctx


def test_cf008s_time_at_stake_is_set_beside_the_loops_own_pace(tmp_path):
    """Two captures of one job under the same neighbour (a new user's trial): the thread
    timing after the loop met its load once (148 ms against 12.7 ms on one thread) and not
    the other time (18.8 against 11.4), and CF008 put 91% and 13% at stake. Where the loop's
    forward ran slower than the quiet one (here 9 ms against 3 ms: 3.0x), one thread's work
    is set beside the loop's own pace: 1 - 0.4 / 3 x 1.05; with the quiet timing nearly
    even (10 ms on torch's threads against 9 on one), still 1 - 0.9 / 3 x 1.05; the hint
    says so. A loop that ran at its quiet pace (the timing met the same neighbour) keeps the
    quiet ratio, whatever share of a CPU the others left one thread; where they left none,
    the quiet ratio too, and no hint."""
    path = _write(tmp_path, "cpu", _cpu_steps())

    def clocked(forward_ms: float = 9.0, **kw):
        ctx = _shared_cpus(**kw)
        ctx["capture"]["step_clock"].update(forward_ms=[forward_ms] * 8, forwards=[1] * 8)
        return ctx

    (f,) = [f for f in analyze(path, context=clocked()).findings if f.rule == "CF008"]
    assert f.estimated_gain == pytest.approx(1 - 0.4 / 3 * 1.05, rel=0.01)
    assert any("ran 3.0x its pace timed alone" in h for h in f.hints)
    (even,) = [f for f in analyze(path, context=clocked(one_ms=9.0)).findings
               if f.rule == "CF008"]
    assert even.estimated_gain == pytest.approx(1 - 0.9 / 3 * 1.05, rel=0.01)
    for ctx in (clocked(forward_ms=3.0, others=1.5), clocked(others=2.0)):
        (same,) = [f for f in analyze(path, context=ctx).findings if f.rule == "CF008"]
        assert same.estimated_gain == pytest.approx(1 - 0.4 * 1.05, rel=0.01)
        assert not any("its pace timed alone" in h for h in same.hints)
    # the quiet timing alone, as before, where the loop's forward was not timed
    (plain,) = [f for f in analyze(path, context=_shared_cpus()).findings if f.rule == "CF008"]
    assert plain.estimated_gain == pytest.approx(1 - 0.4 * 1.05, rel=0.01)
    assert not any("its pace timed alone" in h for h in plain.hints)


def test_torch_threads_and_busy_workers_outnumbering_the_cpus(tmp_path):
    """CF010: torch on 2 threads beside 2 busy workers (0.80 CPUs) on 2 CPUs, no other
    process, the training thread waiting 20% of the timed steps: a warning whose first fix
    is the threads split (a new user's sensor job showed 20-27% and "No findings"; the
    split measured 1.15-1.25x). Not where the workers idle, the wait is small, torch runs
    on one thread, the two fit the CPUs, another process holds a CPU (CF008's), or the loop
    waits on its loader 10% or more (IN001 and IN002 name the split)."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    report = analyze(path, context=_shared_cpus(others=0.0, workers=2), samples=_busy_workers())
    (f,) = [f for f in report.findings if f.rule == "CF010"]
    assert f.severity == "warning" and set(f.fixes) == {"threads", "num_workers"}
    assert "2 threads beside the DataLoader's 2 workers on 2 CPUs" in f.message
    assert "20% of the time" in f.message
    assert any("0.80 CPUs' worth of work in the profiled window" in h for h in f.hints)
    assert not [f for f in report.findings if f.rule == "CF008"]
    waits = _shared_cpus(others=0.0, workers=2)
    waits["capture"]["step_clock"].update(dataloader_ms=[6.0] * 8,  # 15% of each 40 ms step
                                          loader_starts=[0] * 8)
    for ctx, samples in ((_shared_cpus(others=0.0, workers=2), _busy_workers(0.8)),
                         (_shared_cpus(others=0.0, workers=2, wait_ms=1.0), _busy_workers()),
                         (_shared_cpus(others=0.0, workers=2, threads=1), _busy_workers()),
                         (_shared_cpus(others=0.0, workers=2, cpus=4, threads=2),
                          _busy_workers()),
                         (_shared_cpus(others=1.0, workers=2), _busy_workers()),
                         (waits, _busy_workers())):
        quiet = analyze(path, context=ctx, samples=samples)
        assert not [f for f in quiet.findings if f.rule == "CF010"], ctx


@pytest.mark.parametrize("window_pct,clock_cpus,fires", [
    (8.0, 0.28, True), (12.0, 0.28, True), (80.0, 0.02, False), (8.0, None, False)])
def test_the_clock_says_how_busy_the_workers_were(tmp_path, window_pct, clock_cpus, fires):
    """CF010 reads the workers' CPUs over the steps whose wait it reads, where the clock
    measured them: a new user's two-loader job read 0.07-0.13 CPUs in the profiled window
    (the 0.10 gate, on 2 CPUs, let the warning come and go over three quiet captures) and
    0.27-0.29 on the clock each time. The window's own figure counts only without it."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    ctx = _shared_cpus(others=0.0, workers=2, workers_cpus=clock_cpus)
    report = analyze(path, context=ctx, samples=_busy_workers(window_pct))
    found = [f for f in report.findings if f.rule == "CF010"]
    assert bool(found) is fires
    if found and clock_cpus is not None:
        assert any(f"{clock_cpus:.2f} CPUs' worth of work over those same steps" in h
                   for h in found[0].hints)


@pytest.mark.parametrize("workers_pct,fires", [(0.8, True), (180.0, False), (None, False)])
def test_idle_workers_do_not_hide_torch_threads_short_of_the_cpus(tmp_path, workers_pct,
                                                                  fires):
    """A new user's dict-batch job: 2 workers that prefetched cheap rows (0.004 CPUs
    together) beside torch's 2 threads on 2 CPUs, another process on 0.78 of them: one
    thread timed 2x faster, and "No findings". Workers that used less of the CPUs than
    the other processes held do not make it the job's own oversubscription; workers that
    used more (IN004's and the threads split's), or whose use was not sampled, still do."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    t = [i * 0.1 for i in range(30)]
    host: dict = {"t": t, "cpu_pct": [[100.0, 100.0] for _ in t], "iowait_pct": [0.0] * 30,
                  "proc_cpu_pct": [100.0] * 30}
    if workers_pct is not None:
        host.update(workers_count=[2] * 30, workers_cpu_pct=[workers_pct] * 30,
                    workers_cpu_n=[2] * 30)
    samples = {"series": {"host": host}, "marks": {}, "info": {}}
    report = analyze(path, context=_shared_cpus(workers=2, others=0.78), samples=samples)
    found = [f for f in report.findings if f.rule == "CF008"]
    assert bool(found) == fires, (report.metrics.get("workers_cpus"), found)
    if fires:
        assert "torch.set_num_threads(1)" in found[0].fix_code["torch_threads"]
        # the job's own workers are named beside the other processes' CPUs
        assert ("The job's own 2 DataLoader workers did 0.01 CPUs' worth of work in the "
                "profiled window, on the same 2 CPUs; the other processes' 0.78 are beyond "
                "them." in found[0].hints), found[0].hints
        # the clock's own measure, over the steps the others' CPUs and the wait were read
        # over (the report's DataLoader line reads it too), where it was taken
        clocked = analyze(path, context=_shared_cpus(workers=2, others=0.78, workers_cpus=0.3),
                          samples=samples)
        (f,) = [f for f in clocked.findings if f.rule == "CF008"]
        assert ("The job's own 2 DataLoader workers did 0.30 CPUs' worth of work over the "
                "steps timed without the profiler, on the same 2 CPUs; the other processes' "
                "0.78 over those steps are beyond them." in f.hints), f.hints


def test_torch_threads_beyond_the_cgroups_cpu_quota(tmp_path):
    """CF009: a 1-CPU quota on a 2-CPU machine, torch on 2 threads, the training thread
    waiting 40% of its steps: hold torch to the quota's one CPU, the wait at stake; CF007
    (numpy's idle pool beside torch's) leaves the wait to it. No quota (CF007's then), one at the CPUs, a quota under a CPU short of
    torch's threads, a wait under 5%, or a saved trace with no context: no CF009."""
    path = _write(tmp_path, "cpu", _cpu_steps())
    report = analyze(path, context=_quota())
    (f,) = [f for f in report.findings if f.rule == "CF009"]
    assert f.severity == "critical" and f.fixes == ["torch_threads"]  # a 40% wait
    assert "may use 1.00 CPUs' worth of time of the 2 it sees" in f.message
    assert f.estimated_gain == pytest.approx(0.4)
    assert "torch.set_num_threads(1)" in f.fix_code["torch_threads"]
    assert report.metrics["cpu_quota_cpus"] == 1.0
    assert not [f for f in report.findings if f.rule in ("CF007", "CF008")]
    for ctx in (_quota(None), _quota(2.0), _quota(1.5), _quota(wait_ms=1.0)):
        quiet = analyze(path, context=ctx)
        assert not [f for f in quiet.findings if f.rule == "CF009"], ctx
    assert [f.rule for f in analyze(path, context=_quota(None)).findings] == ["CF007"]
    assert analyze(path, context=_quota(None)).metrics["cpu_quota_cpus"] == 2.0
    assert analyze(path).metrics["cpu_quota_cpus"] is None


def test_the_loader_rules_say_when_a_quota_sizes_the_cpus(tmp_path):
    """IN001 and IN004 size workers and threads by the CPUs the process sees; under a
    cgroup quota below them a hint says so, with the quota; with none, no hint."""
    path = _write(tmp_path, "loader", tb.dataloader_bound(workers=4, share=0.2))
    quota = analyze(path, context=_ctx(dataloader={"num_workers": 16}, cpu_count=4,
                                       cpu_quota=2.0))
    said = [f.rule for f in quota.findings
            if any("may use 2.00 CPUs' worth of time of the 4 it sees" in h for h in f.hints)]
    assert set(said) == {"IN001", "IN004"}
    none = analyze(path, context=_ctx(dataloader={"num_workers": 16}, cpu_count=4,
                                      cpu_quota=None))
    assert not any("CPUs' worth of time" in h for f in none.findings for h in f.hints)


def test_the_cgroups_cpu_quota_is_read_along_its_path(tmp_path):
    """cgroup v2's cpu.max and v1's cfs quota over its period, the least along the
    process's path to the mount's root; "max", -1, a missing file or no cpu controller:
    no quota."""
    from diagnose.values import cpu_quota

    v2 = tmp_path / "v2"
    (v2 / "kube" / "pod").mkdir(parents=True)
    (v2 / "kube" / "cpu.max").write_text("150000 100000\n")
    (v2 / "kube" / "pod" / "cpu.max").write_text("max 100000\n")
    own = tmp_path / "cgroup2"
    own.write_text("0::/kube/pod\n")
    assert cpu_quota(str(v2), str(own)) == 1.5
    (v2 / "kube" / "pod" / "cpu.max").write_text("50000 100000\n")
    assert cpu_quota(str(v2), str(own)) == 0.5
    (v2 / "kube" / "cpu.max").write_text("max 100000\n")
    (v2 / "kube" / "pod" / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(str(v2), str(own)) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct" / "docker").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    mine = tmp_path / "cgroup1"
    mine.write_text("4:memory:/docker\n2:cpu,cpuacct:/docker\n0::/\n")
    assert cpu_quota(str(v1), str(mine)) == 2.0
    mine.write_text("4:memory:/docker\n")
    assert cpu_quota(str(v1), str(mine)) is None
    assert cpu_quota(str(v1), str(tmp_path / "absent")) is None


def test_torch_threads_count_is_the_whole_cpus_left():
    """The fix's count: the whole CPUs other processes leave, at least one, fewer than
    torch's threads now; not offered where torch runs on one thread."""
    from diagnose.fixes.catalog.threads import TORCH_THREADS
    from diagnose.fixes.config import TrainConfig
    from diagnose.stepmodel.facts import Facts

    def count(n, t, others):
        return TORCH_THREADS.count(Facts(cpu_count=n, torch_num_threads=t,
                                         step_others_cpus_unprofiled=others))
    assert count(2, 2, 1.0) == 1 and count(2, 2, 1.9) == 1
    assert count(8, 8, 2.5) == 5 and count(8, 4, 0.5) == 3
    # the job's own workers keep their CPUs
    assert TORCH_THREADS.count(Facts(cpu_count=8, torch_num_threads=6, dataloader_num_workers=2,
                                     step_others_cpus_unprofiled=2.5)) == 3
    assert count(2, 1, 1.0) is None and count(2, 2, None) is None
    # a cgroup's quota: no more threads than its whole CPUs, with or without others known
    quota = TORCH_THREADS.count(Facts(cpu_count=64, torch_num_threads=32, cpu_quota_cpus=4.0))
    assert quota == 4
    assert TORCH_THREADS.count(Facts(cpu_count=64, torch_num_threads=32, cpu_quota_cpus=4.0,
                                     step_others_cpus_unprofiled=40.0)) == 4
    assert TORCH_THREADS.count(Facts(cpu_count=2, torch_num_threads=2, cpu_quota_cpus=2.0)) \
        is None
    cfgs = TORCH_THREADS.search(TrainConfig(), Facts(cpu_count=8, torch_num_threads=8,
                                                     step_others_cpus_unprofiled=5.2))
    assert [c.intra_op_threads for c in cfgs] == [2, 1]  # then one thread, what was timed
    assert TORCH_THREADS.in_place({"torch_num_threads": 1}) is not None
    assert TORCH_THREADS.in_place({"torch_num_threads": 2}) is None


def test_a_busy_saturated_machine_puts_no_time_behind_withheld_worker_fixes(tmp_path):
    """IN001 on a loader-bound trace whose every applicable fix was withheld (other
    processes held the CPU the training thread waited for): with the CPUs 97% busy no CPU
    is spare for the work those fixes move, so no time is at stake and the finding is
    info, saying why; with CPUs to spare (50% busy) the rule's own grade stands."""
    from diagnose.fixes.findings import ON_A_BUSY_MACHINE

    path = _write(tmp_path, "cpu", tb.dataloader_bound())
    busy = analyze(path, context=_pools(others=1.5), samples=_samples(97.0))
    (f,) = [f for f in busy.findings if f.rule == "IN001"]
    assert str(f.predictions["num_workers"]).startswith(ON_A_BUSY_MACHINE)
    assert f.severity == "info" and f.estimated_gain == 0.0
    assert any("by the CPUs' load: 97% busy" in h for h in f.hints)
    spare = analyze(path, context=_pools(others=1.5), samples=_samples(50.0))
    (g,) = [f for f in spare.findings if f.rule == "IN001"]
    assert g.severity != "info" and not any("CPUs' load" in h for h in g.hints)


def test_pools_in_every_worker(tmp_path):
    """IN006: a worker's batch kept 1.9 CPUs busy, 3 workers on 2 CPUs, the loop waiting on
    the loader. Its fix holds each worker's pools to one thread in a worker_init_fn that
    calls the user's own; the run's predictor withholds the workers' predictions (autofix's
    trials too), saying why. One thread a batch, or workers whose threads fit: no IN006."""
    from diagnose.fixes.findings import WORKER_POOLS

    path = _write(tmp_path, "loader", tb.dataloader_bound(workers=3))
    fires = analyze(path, context=_worker_pools(worker_init_fn="seed_worker"))
    (f,) = [f for f in fires.findings if f.rule == "IN006"]
    assert "1.9 CPUs" in f.message and "3 such workers on 2 CPUs" in f.message
    code = f.fix_code.get("worker_pools", FIXES["worker_pools"].code)
    assert "threadpool_limits(1)" in code and "seed_worker(worker_id)" in code
    assert "worker_init_fn=one_thread" in code
    compile(code, "fix", "exec")
    (in001,) = [f for f in fires.findings if f.rule == "IN001"]
    withheld = [p for p in in001.predictions.values()
                if isinstance(p, str) and p.startswith(WORKER_POOLS)]
    assert withheld and "threadpool_limits(1)" in withheld[0]
    assert (fires.predictor.withholds({"num_workers": 2}) or "").startswith(WORKER_POOLS)
    quiet = analyze(path, context=_worker_pools(cpus=1.0))
    assert not [f for f in quiet.findings if f.rule == "IN006"]
    assert not any(isinstance(p, str) and p.startswith(WORKER_POOLS)
                   for f in quiet.findings for p in f.predictions.values())
    # one worker's 1.9 CPUs fit 4 CPUs: no IN006; a config of more workers than 4 / 1.9
    # loses its number, and a fix is advised among its others (the threads' 3 threads)
    fits = analyze(path, context=_worker_pools(workers=1, cpu_count=4))
    assert not [f for f in fits.findings if f.rule == "IN006"]
    (in001,) = [f for f in fits.findings if f.rule == "IN001"]
    told = [p.change for p in in001.predictions.values() if not isinstance(p, str)]
    assert {"intra_op_threads": 3} in told and all(c.get("num_workers", 1) * 1.9 <= 4
                                                   for c in told), told
    assert fits.predictor.withholds({"num_workers": 2}) is None  # 3.8 CPUs fit 4
    assert (fits.predictor.withholds({"num_workers": 3}) or "").startswith(WORKER_POOLS)


def test_in006_fires_where_the_predictions_are_withheld():
    """IN006's threshold is the one the workers' predictions are withheld from (and the
    fix's in-place check reads): a rule that fired below it would offer a fix beside
    predictions that still stand, one above it would withhold them unexplained."""
    from diagnose.metrics.context import WORKER_POOL_CPUS
    from diagnose.rules.engine import builtin_rules

    (rule,) = [r for r in builtin_rules() if r.id == "IN006"]
    assert f"input_worker_batch_cpus >= {WORKER_POOL_CPUS}" in rule.when.src


@pytest.mark.parametrize("legacy", [False, True])
def test_healthy_run_has_nothing_at_warning(tmp_path, legacy):
    path = _write(tmp_path, "healthy", tb.healthy(legacy=legacy))
    report = analyze(path, context=_ctx())
    assert report.findings == [], report.render_text()


@pytest.mark.parametrize("name", sorted(set(tb.SCENARIOS) - {"healthy", "cpu_only"}))
def test_scenarios_fire_only_their_own_rule(name, tmp_path):
    """No collateral warnings: a planted symptom yields its own finding and nothing else."""
    expected = {
        "dataloader_bound": {"IN001"}, "pageable_copies": {"TR001"}, "sync_bound": {"SY001"},
        "launch_bound": {"LA001"}, "fp32_gemm": {"PR001"}, "memory_pressure": {"ME002"},
        "comm_not_overlapped": {"CM001"}, "optimizer_per_param": {"CF001"},
        "zero_grad_fill": {"CF002"}, "graph_decode": set(), "eager_decode": {"LA001"},
        "compiled_launch_bound": {"LA001"}, "hidden_sync": {"TR002"},
    }[name]
    report = analyze(_write(tmp_path, name, tb.SCENARIOS[name]()), context=_ctx())
    assert {f.rule for f in report.findings} == expected, report.render_text()


def test_near_misses_stay_below_warning(tmp_path):
    # 6% DataLoader wait: worth an info line, not a warning
    r = analyze(_write(tmp_path, "dl6", tb.dataloader_bound(share=0.06)), context=_ctx())
    sev = {f.rule: f.severity for f in r.findings}
    assert sev.get("IN001") == "info"
    # memory at 80% of capacity: no finding
    r = analyze(_write(tmp_path, "mem80", tb.memory_pressure(reserved_frac=0.80)), context=_ctx())
    assert not [f for f in r.findings if f.category == "memory"]
    # overlapped communication: no finding
    r = analyze(_write(tmp_path, "ovl", tb.comm_not_overlapped(overlap=True)), context=_ctx())
    assert not [f for f in r.findings if f.category == "communication"]


def test_context_rules_not_evaluated_without_context(tmp_path):
    r = analyze(_write(tmp_path, "h", tb.healthy()))
    reasons = {n.rule: n.reason for n in r.not_evaluated}
    for rule in ("ME001", "IN004", "CF003"):
        assert "live capture" in reasons[rule], reasons


# --- the pack itself ------------------------------------------------------------------
def test_pack_integrity():
    rules = builtin_rules()
    assert len(rules) >= 12
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    cats = {r.category for r in rules}
    for needed in ("input", "transfer", "sync", "launch", "precision", "memory",
                   "communication", "utilization", "config"):
        assert needed in cats
    for r in rules:
        assert re.fullmatch(r"[A-Z]{2,4}\d{3}", r.id)
        assert r.category in CATEGORIES
        for s in DOC_SECTIONS:
            assert len(r.docs[s]) > 40, (r.id, s)
        assert r.fixes and all(f in FIXES for f in r.fixes)
        assert r.warning is not None, f"{r.id} needs graded thresholds"


def test_fix_docs_show_before_and_after():
    for fix in FIXES.values():
        assert "before" in fix.code and "after" in fix.code, fix.id


def test_user_rules_with_a_duplicate_id_are_refused(tmp_path):
    from diagnose.errors import RuleError

    src = (Path(__file__).parents[2] / "rules" / "input.toml").read_text()
    (tmp_path / "dup.toml").write_text(src)
    with pytest.raises(RuleError, match="defined twice"):
        load_rules([tmp_path / "dup.toml"])


MY_RULE = """[[rule]]
id = "MY001"
category = "input"
title = "Batches take long to arrive"
when = "dataloader_wait_ms_per_step >= 20"
message = "Each step waits {dataloader_wait_ms_per_step:.1f} ms for data"
gain = "dataloader_share"
fixes = ["num_workers"]
"""


def test_a_rule_of_your_own_needs_no_docs_and_is_told_what_it_lacks(tmp_path):
    """A new user's rule without [rule.docs] was refused with msgspec's "Object missing
    required field `docs` - at `$.rule[0]`", before any more useful check: the docs are
    optional (`rules MY001` leaves their sections out), and a rule that lacks a field it
    needs is named, with the field."""
    from rich.console import Console

    from diagnose.errors import RuleError
    from diagnose.report.text import render_rule

    (tmp_path / "mine.toml").write_text(MY_RULE)
    (rule,) = [r for r in load_rules([tmp_path / "mine.toml"]) if r.id == "MY001"]
    con = Console(width=120, record=True)
    for part in render_rule(rule):
        con.print(part)
    text = con.export_text()
    assert "How to fix" in text and "What it detects" not in text
    (tmp_path / "mine.toml").write_text(MY_RULE.replace('title = "Batches take long to arrive"\n', ""))
    with pytest.raises(RuleError, match=r"rule MY001 has no title \(each rule needs id,"):
        load_rules([tmp_path / "mine.toml"])
    (tmp_path / "mine.toml").write_text(MY_RULE.replace('["num_workers"]', '"num_workers"'))
    with pytest.raises(RuleError, match=r"rule MY001 fixes: Expected `array`, got `str`"):
        load_rules([tmp_path / "mine.toml"])
    (tmp_path / "mine.toml").write_text("rule = 5\n")  # a new user's: not [[rule]] tables
    with pytest.raises(RuleError, match=r"`rule` must be a list of \[\[rule\]\] tables"):
        load_rules([tmp_path / "mine.toml"])


def test_each_rule_sits_in_the_file_of_its_category():
    """rules/<category>.toml holds exactly that category's rules: one file per category."""
    files = {Path(r.source).stem for r in builtin_rules()}
    assert files == set(CATEGORIES)
    for r in builtin_rules():
        assert Path(r.source).name == f"{r.category}.toml", (r.id, r.source)


def test_how_to_fix_is_prose_the_code_comes_from_the_fix_units():
    """No hand-written before/after in a rule's docs: `rules ID` shows each fix's own code
    (the same rendering a finding shows), so the two can never differ."""
    for r in builtin_rules():
        text = r.docs["fix"]
        assert "# before" not in text and "# after" not in text, r.id
        assert not [line for line in text.splitlines() if line.startswith("    ")], r.id


def test_idle_the_trace_cannot_attribute_is_not_evaluated(tmp_path):
    """CUDA activity alone (no runtime calls): the trace cannot say why the GPU idled, so
    UT002 is not evaluated with that reason rather than blaming no host cause."""
    report = analyze(_write(tmp_path, "cuda_only", _no_host_activity()))
    assert not [f for f in report.findings if f.rule == "UT002"]
    reasons = {n.rule: n.reason for n in report.not_evaluated}
    assert "runtime calls" in reasons.get("UT002", ""), reasons


def _clock_waits(waits: list[float], step_ms: float = 40.0) -> dict:
    """A capture whose clock timed unprofiled steps of ``step_ms`` with these loader waits."""
    n = len(waits)
    return _ctx(capture={"step_clock": {"phase": ["after"] * n,
                                        "ms": [step_ms + w for w in waits],
                                        "dataloader_ms": list(waits)}})


@pytest.mark.parametrize("workers", [0, 4])
def test_a_window_wait_the_unprofiled_steps_did_not_show_stays_info(tmp_path, workers):
    """The profiled window waited 40% of its steps on the loader (a stall in its few steps)
    while 40 steps timed without the profiler waited 2%: IN001-IN003 stay at info and say
    why. Where those steps waited too (12%), the window's grade stands."""
    path = _write(tmp_path, "bound", tb.dataloader_bound(workers=workers))
    calm = analyze(path, context=_clock_waits([0.8] * 40),
                   samples=_samples(97.0) if workers else None)
    assert calm.metrics["dataloader_wait_unprofiled_share"] == pytest.approx(0.8 / 40.8, rel=1e-3)
    inputs = [f for f in calm.findings if f.rule in ("IN001", "IN002", "IN003")]
    assert inputs and {f.severity for f in inputs} == {"info"}
    assert all(any("Without the profiler the loop waited 2.0%" in h for h in f.hints)
               for f in inputs)
    waits = analyze(path, context=_clock_waits([5.5] * 40),
                    samples=_samples(97.0) if workers else None)
    (f,) = [f for f in waits.findings if f.rule == "IN001"]
    assert f.severity == "critical"
    assert not any("Without the profiler" in h for h in f.hints)


def test_epoch_starts_not_seen_say_so(tmp_path):
    """Workers that restart each epoch, but no epoch's start among the timed steps: IN005
    is not evaluated, and says why in words, not only the metric's name."""
    path = _write(tmp_path, "healthy", tb.healthy())
    ctx = _ctx(dataloader={"num_workers": 4, "persistent_workers": False, "len": 200},
               capture={"step_clock": {"phase": ["wait"] * 12, "ms": [20.0] * 12,
                                       "loader_starts": [0] * 12}})
    report = analyze(path, context=ctx)
    (why,) = [n.reason for n in report.not_evaluated if n.rule == "IN005"]
    assert "no epoch began among the steps timed without the profiler" in why
    # a loop with no DataLoader activity whose context names persistent workers has none
    # to start again: judged, not left unevaluated
    b = tb.TraceBuilder(device=None)
    for _ in range(5):
        with b.step():
            b.cpu(3000, "aten::addmm")
    bare = analyze(_write(tmp_path, "bare", b), context=_ctx(
        capture={"step_clock": {"phase": ["wait"] * 12, "ms": [20.0] * 12}}))
    assert bare.metrics["dataloader_persistent_workers"] is True
    assert not [n for n in bare.not_evaluated if n.rule == "IN005"]
    assert not [f for f in bare.findings if f.rule == "IN005"]


@pytest.mark.parametrize("own_pct, others_hint", [(380.0, False), (150.0, True)])
def test_a_busy_host_blames_the_loader_only_for_its_own_work(tmp_path, own_pct, others_hint):
    """IN002 on 4 CPUs 97% busy: where the training process and its workers did that work,
    the loader is CPU-bound; where other processes held 2.4 CPUs of it (the sampler's
    busy time less the run's own), the hint says so instead of blaming the samples."""
    samples = _samples(97.0)
    host = samples["series"]["host"]
    host["proc_cpu_pct"] = [own_pct - 8.0] * len(host["t"])
    host["workers_cpu_pct"] = [8.0] * len(host["t"])
    report = analyze(_write(tmp_path, "bound", tb.dataloader_bound(workers=4)), samples=samples)
    (f,) = [f for f in report.findings if f.rule == "IN002"]
    assert report.metrics["host_cpu_others_cpus"] == pytest.approx(3.88 - own_pct / 100)
    others = any("other processes' work: the workers got" in h for h in f.hints)
    bound = any("the loader is CPU-bound" in h for h in f.hints)
    assert (others, bound) == (others_hint, not others_hint), f.hints
    # one rank of two on this host: the other processes are the job's other rank among
    # others, and the hint says so instead of asking for a quieter host
    rank = analyze(_write(tmp_path, "rank", tb.dataloader_bound(workers=4, rank=0,
                                                                world_size=2,
                                                                backend="gloo")),
                   samples=samples)
    (g,) = [g for g in rank.findings if g.rule == "IN002"]
    ranks = [h for h in g.hints if "this job's other ranks on this host among them" in h]
    assert len(ranks) == others_hint and not any("quieter host" in h for h in g.hints)
    # the window busy with other processes, the steps timed after it quiet (a new user's
    # IN002 said to capture again beside IN001's "other processes took 0.00 CPUs"): the
    # load passed, and the hint says so instead of asking for a quieter host
    quiet = analyze(_write(tmp_path, "quiet", tb.dataloader_bound(workers=4)), samples=samples,
                    context=_ctx(dataloader={"num_workers": 4}, cpu_count=4,
                                 capture={"after_others_cpus": 0.0}))
    (q,) = [q for q in quiet.findings if q.rule == "IN002"]
    passing = [h for h in q.hints if "a passing load" in h]
    assert len(passing) == others_hint and not any("quieter host" in h for h in q.hints)


def test_a_burst_the_unprofiled_steps_did_not_show_stays_info(tmp_path):
    """IN003: one profiled step waited 60 ms for its batch (a new user's window caught one
    32.6 ms stall). Where 40 steps timed without the profiler waited at most 3x their
    median, it was a one-off: info, saying so; where one of them stalled too, a warning."""
    path = _write(tmp_path, "bursty", _bursty_loader())
    calm = analyze(path, context=_clock_waits([1.0] * 39 + [3.0], step_ms=10.0))
    (f,) = [f for f in calm.findings if f.rule == "IN003"]
    assert f.severity == "info" and calm.metrics["dataloader_wait_unprofiled_max_ms"] == 3.0
    assert any(h.startswith("No step timed without the profiler stalled so: the longest "
                            "waited 3.0 ms, the median 1.0 ms") for h in f.hints), f.hints
    stalls = analyze(path, context=_clock_waits([1.0] * 39 + [30.0], step_ms=10.0))
    (g,) = [f for f in stalls.findings if f.rule == "IN003"]
    assert g.severity == "warning" and not any(h.startswith("No step") for h in g.hints)


def test_a_busy_host_with_more_workers_and_threads_than_cpus_is_told_so(tmp_path):
    """IN002 on 4 CPUs 97% busy with the run's own work, its 4 workers beside torch's 4
    threads: the hint says they outnumber the CPUs (fewer of them help), not that the
    samples alone are to blame; with torch on no thread count known, it says CPU-bound."""
    samples = _samples(97.0)
    host = samples["series"]["host"]
    host["proc_cpu_pct"] = [372.0] * len(host["t"])
    host["workers_cpu_pct"] = [8.0] * len(host["t"])
    path = _write(tmp_path, "bound", tb.dataloader_bound(workers=4))
    report = analyze(path, samples=samples, context={
        "cpu_count": 4, "torch_num_threads": 4, "dataloader": {"num_workers": 4}})
    (f,) = [f for f in report.findings if f.rule == "IN002"]
    assert any("the 4 workers with torch's 4 threads outnumber the 4 CPUs" in h
               for h in f.hints), f.hints
    assert not any("the loader is CPU-bound" in h for h in f.hints)


def test_ddp_buckets_are_offered_only_for_gradients_that_fill_them(tmp_path):
    """CM001's bucket settings for a model whose gradients fill DDP's 25 MiB buckets; a
    model of 1,000 parameters gets none, and a hint that each all-reduce pays its latency
    (a new user's 0.5 MiB CPU model was offered bucket_cap_mb "for gradients of well over
    25 MiB"); a saved trace that does not say the model's size keeps the fix."""
    path = _write(tmp_path, "comm", tb.comm_not_overlapped())

    def cm001(ctx):
        (f,) = [f for f in analyze(path, context=ctx).findings if f.rule == "CM001"]
        return f

    small = cm001(_ctx())
    assert small.fixes == []
    assert any("1,000 parameters make gradients of well under" in h for h in small.hints)
    big = cm001(_ctx(model={"param_count": 50_000_000}))
    assert big.fixes == ["overlap_communication"]
    assert not any("well under one of DDP's" in h for h in big.hints)
    assert cm001(None).fixes == ["overlap_communication"]


def test_a_worker_batch_not_timed_says_why(tmp_path):
    """A new user's IterableDataset left IN006 'needs input_worker_batch_cpus' with no
    reason: an iterable dataset says the session cannot make one of its batches apart from
    the loop; a map-style one whose batch was not timed points to the probes' record."""
    path = _write(tmp_path, "bound", tb.dataloader_bound(workers=2))
    clock = {"step_clock": {"phase": ["wait"] * 12, "ms": [20.0] * 12,
                            "loader_starts": [0] * 12}}
    for iterable, said in ((True, "an IterableDataset: the session cannot make one of its "
                                  "batches apart from the loop"),
                           (False, "no worker's batch was timed after the loop")):
        ctx = _ctx(dataloader={"num_workers": 2, "iterable_dataset": iterable},
                   capture=clock)
        report = analyze(path, context=ctx)
        (why,) = [n.reason for n in report.not_evaluated if n.rule == "IN006"]
        assert said in why, why
