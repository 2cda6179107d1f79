"""Many ranks: per-rank table, run-scope metrics and rules (stragglers and their cause),
the cross-rank spread in findings, and the real 8-rank DLRM traces."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest

import diagnose.analysis as api_module
from diagnose import analyze
from diagnose.analysis import RankResult, _read_all, report_from_ranks, with_fix_code
from diagnose.metrics import CATALOG
from diagnose.metrics.ranks import RUN_CATALOG, run_metrics
from diagnose.trace import find_trace_files
from diagnose.trace.parallel import fork_pool
from tests import rankbuilder as rb
from tests import tracebuilder as tb
from tests.conftest import shared_trace

DLRM = "param/dlrm_kineto"


def _imbalance(report):
    return [f for f in report.findings if f.category == "imbalance"]


def _write(tmp_path: Path, run: rb.RankRun, name: str = "run") -> Path:
    return run.write(tmp_path / f"{name}.pt.trace.json.gz")


# ----------------------------------------------------------------------------- built runs
def test_balanced_run_has_no_imbalance_finding(tmp_path):
    r = analyze(_write(tmp_path, rb.balanced(4)))
    assert len(r.ranks) == 4
    assert not _imbalance(r), r.render_text()
    assert r.metrics["straggler_lag_frac"] < 0.05
    # ranks wait little for each other: no finding says communication is mostly waiting
    assert not any("waiting" in h for f in r.findings for h in f.hints)
    assert "IM001" not in {n.rule for n in r.not_evaluated}  # evaluated, and quiet


@pytest.mark.parametrize("world", [2, 8])
def test_balanced_run_any_world_size(tmp_path, world):
    r = analyze(_write(tmp_path, rb.balanced(world)))
    assert not _imbalance(r), r.render_text()


def test_slow_input_rank_is_the_straggler_with_cause_input(tmp_path):
    r = analyze(_write(tmp_path, rb.slow_input(4, rank=2, loader_us=6000.0)))
    (f,) = _imbalance(r)
    assert f.rule == "IM001" and f.ranks == [2] and f.severity in ("warning", "critical")
    assert f.evidence["straggler_rank"] == 2 and f.evidence["straggler_cause"] == "input"
    assert "Rank 2 is the straggler" in f.message and "cause: input" in f.message
    # the lag is what the peers wait in all-reduce: ~ the extra 5.85 ms of loading
    assert r.metrics["straggler_wait_ms"] == pytest.approx(5.85, abs=0.3)
    assert r.metrics["straggler_cause_ms"] == pytest.approx(5.85, abs=0.3)
    # synchronous DP: step times are equal; the peers' communication is inflated instead
    assert r.metrics["rank_step_time_spread"] < 0.02
    comm = {x.rank: x.metrics["comm_ms_per_step"] for x in r.ranks}
    assert min(comm, key=comm.get) == 2
    assert any("waiting" in h for h in f.hints)
    # the communication finding says its time is mostly waiting, with the spread across ranks
    (cm,) = [x for x in r.findings if x.rule == "CM001"]
    assert any("straggler rank 2" in h for h in cm.hints), cm.hints
    assert cm.evidence["rank_comm_exposed_frac_min_rank"] == 2
    assert cm.evidence["rank_comm_frac_min"] < cm.evidence["rank_comm_frac_max"]


def test_waiting_for_a_straggler_is_not_communication_at_stake(tmp_path):
    """Rank 1 loads 20 ms a step in its own process; rank 0 waits for it inside the
    all-reduce, so most of rank 0's step reads as exposed collectives. A new user's DDP job
    was told CM001 was critical with 92% at stake, and offered DDP bucket tuning first.
    Communication itself costs what the rank that waits least has exposed: CM001 is graded
    by that (at most a warning here), and IM001 leads with the straggler."""
    r = analyze(_write(tmp_path, rb.slow_input(2, rank=1, loader_us=20000.0)))
    (cm,) = [x for x in r.findings if x.rule == "CM001"]
    least = r.metrics["rank_comm_exposed_frac_min"]
    assert least < 0.15 < r.metrics["rank_comm_exposed_frac_max"]
    assert cm.estimated_gain == pytest.approx(least, abs=1e-3)
    assert cm.severity == "warning" and cm.graded_down_from == "critical"
    assert any("rank 1, which waits least" in h for h in cm.hints), cm.hints
    assert r.findings[0].severity == "critical" and r.findings[0].rule != "CM001"
    # the ranks table names the straggler; a run without one has no empty column
    assert "straggler" in r.render_text(width=140)
    quiet = analyze(_write(tmp_path, rb.balanced(2), name="quiet")).render_text(width=140)
    header = quiet[quiet.index("Ranks"):quiet.index("Ranks") + 400].splitlines()[2]
    assert header.rstrip().endswith("overlap ┃"), header


def test_slow_compute_rank_is_the_straggler_with_cause_compute(tmp_path):
    r = analyze(_write(tmp_path, rb.slow_compute(4, rank=3, scale=1.5)))
    (f,) = _imbalance(r)
    assert f.ranks == [3] and f.evidence["straggler_cause"] == "compute"
    assert r.metrics["straggler_compute_ms"] > 1.4 * r.metrics["peer_compute_ms"]
    # more workers (or, in their place, cheaper samples) serve a slow input, not this
    # (a new user's compute straggler was offered "Make each sample cheaper to produce")
    assert "num_workers" not in f.fixes and "faster_input" not in f.fixes, f.fixes
    slow = analyze(_write(tmp_path / "in", rb.slow_input(4, rank=2, loader_us=6000.0)))
    (g,) = _imbalance(slow)
    assert "num_workers" in g.fixes or "faster_input" in g.fixes, g.fixes


def test_independent_ranks_use_step_time(tmp_path):
    """No collectives: nobody waits, the slow rank simply takes longer steps."""
    r = analyze(_write(tmp_path, rb.ddp_run(3, collectives=False, compute_scale={1: 1.5})))
    (f,) = _imbalance(r)
    assert f.ranks == [1] and f.evidence["straggler_cause"] == "compute"
    assert r.metrics["straggler_wait_ms"] is None
    assert r.metrics["rank_comm_frac_min"] is None


def test_per_rank_table(tmp_path):
    r = analyze(_write(tmp_path, rb.slow_input(4, rank=1)))
    text = r.render_text(width=130)
    assert "Ranks" in text
    for col in ("step ms", "GPU busy", "DataLoader", "comm", "overlap", "straggler"):
        assert col in text
    row = next(line for line in text.splitlines() if line.strip("│ ").startswith("1 "))
    assert "yes (input)" in row  # in the straggler column
    assert text.count("yes (") == 1


def test_json_carries_ranks_and_run_metrics(tmp_path):
    rep = analyze(_write(tmp_path, rb.slow_input(2, rank=1))).to_json()
    json.dumps(rep)
    assert [x["rank"] for x in rep["ranks"]] == [0, 1]
    for k in RUN_CATALOG:
        assert k in rep["metrics"] and k in CATALOG
    assert rep["units"]["straggler_lag_ms"] == "ms"
    (f,) = [x for x in rep["findings"] if x["rule"] == "IM001"]
    assert f["ranks"] == [1] and f["estimated_gain"] == pytest.approx(
        rep["metrics"]["straggler_lag_frac"], abs=1e-3)


def test_single_rank_lists_run_rules_as_not_evaluated(tmp_path):
    p = tb.comm_not_overlapped().write(tmp_path / "r0.pt.trace.json.gz")
    r = analyze(p)
    reasons = {n.rule: n.reason for n in r.not_evaluated}
    assert "2 or more ranks" in reasons["IM001"]
    assert "straggler_rank" not in r.metrics
    # per-rank collective time agrees with the existing communication metrics
    m = r.metrics
    assert m["comm_source"] == "device"
    assert m["comm_ms_per_step"] == pytest.approx(m["comm_frac"] * m["step_time_mean_ms"],
                                                   rel=1e-3)
    assert m["comm_exposed_ms_per_step"] == pytest.approx(
        m["comm_exposed_frac"] * m["step_time_mean_ms"], rel=1e-3)


def test_no_collectives_means_none_not_zero(tmp_path):
    r = analyze(tb.healthy().write(tmp_path / "h.pt.trace.json.gz"))
    assert r.metrics["comm_ms_per_step"] is None and r.metrics["comm_source"] is None


# --------------------------------------------------------------------- run_metrics alone
def _m(step: float, comm: float | None, inp: float = 1.0, busy: float | None = 0.5) -> dict:
    return {"step_time_mean_ms": step, "step_time_median_ms": step, "comm_ms_per_step": comm,
            "comm_exposed_ms_per_step": comm, "dataloader_wait_ms_per_step": inp,
            "dataloader_share": inp / step, "gpu_busy_frac": busy}


def test_misaligned_windows_still_find_the_rank_that_waits_least():
    """One profiled step taken at different moments (as in the DLRM traces): the straggler
    started late, so its own step is the *shortest*; its peers' waits still name it."""
    ranks = [(0, _m(18.0, 8.0)), (1, _m(19.0, 9.0)), (2, _m(17.5, 7.5)), (3, _m(12.0, 1.5))]
    m = run_metrics(ranks)
    assert m["straggler_rank"] == 3
    assert m["straggler_wait_ms"] == pytest.approx(8.0 - 1.5)
    assert m["rank_step_time_min_ms"] == 12.0 and m["rank_comm_frac_min_rank"] == 3
    assert m["straggler_cause"] == "compute"  # 9.5 ms of own compute vs 9.0 on the others
    # nothing inside its window exceeds the others: the cause is unknown, and IM001 says why
    ranks[3] = (3, _m(11.5, 1.5))
    rep = report_from_ranks(["x"], [RankResult(f"r{r}", r, m, {}, []) for r, m in ranks])
    (f,) = _imbalance(rep)
    assert f.ranks == [3] and f.message.endswith("cause: unknown")
    assert any("falls outside them" in h for h in f.hints)


def test_run_metrics_need_two_ranks_with_steps():
    m = run_metrics([(0, _m(10.0, 1.0)), (1, {"step_time_mean_ms": None})])
    assert m["straggler_rank"] is None and m["rank_step_time_spread"] is None
    assert m["rank_gpu_busy_min"] == 0.5  # extremes still come from the ranks that have them


def test_unknown_ranks_are_numbered_by_position():
    m = run_metrics([(None, _m(10.0, 3.0)), (None, _m(10.0, 0.5, inp=3.5))])
    assert m["straggler_rank"] == 1 and m["straggler_cause"] == "input"


def test_rank0_report_from_gathered_summaries_matches_analyze(tmp_path):
    """What rank 0 of a live run builds from gathered metrics equals analyzing the traces."""
    folder = _write(tmp_path, rb.slow_input(3, rank=0))
    full = analyze(folder)
    gathered = [RankResult(x.path, x.rank, json.loads(json.dumps(x.metrics)), x.series, x.notes)
                for x in full.ranks]
    again = with_fix_code(report_from_ranks([str(folder)], gathered), None)  # as rank 0
    assert [f.to_json() for f in again.findings] == [f.to_json() for f in full.findings]
    assert again.metrics == full.metrics


# ----------------------------------------------------------------------- run folders
def test_run_folder_gives_each_rank_its_own_context_and_samples(tmp_path):
    run = tmp_path / "run"
    _write(tmp_path, rb.balanced(2))  # writes run_ranks/
    (tmp_path / "run_ranks").rename(run)
    ctx = {"dataloader": {"num_workers": 8}, "cpu_count": 16,
           "rank_contexts": {"1": {"dataloader": {"num_workers": 0}, "cpu_count": 16}}}
    (run / "context.json").write_text(json.dumps(ctx))
    r = analyze(run)
    workers = {x.rank: x.metrics["dataloader_num_workers"] for x in r.ranks}
    assert workers == {0: 8, 1: 0}


# ------------------------------------------------------------------------ parallel read
def test_parallel_read_equals_serial(tmp_path, monkeypatch, forkable):
    import diagnose.analysis as api

    files = find_trace_files(_write(tmp_path, rb.slow_input(4)))
    serial = _read_all(files)
    monkeypatch.setattr(api, "_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(api, "usable_cpus", lambda: 2)
    pools = []
    monkeypatch.setattr(api, "fork_pool", lambda n: pools.append(fork_pool(n)) or pools[-1])
    par = api._read_all(files)
    assert pools and pools[0] is not None  # the files really went through the pool
    assert [(p, r, m.values, d) for p, r, m, d in par] == [
        (p, r, m.values, d) for p, r, m, d in serial]



_PARENT = os.getpid()
_REAL_ANALYZE_FILE = api_module._analyze_file


def _dies_in_a_worker(path, workers=None, max_steps=None, grads_set_to_none=None):
    """Per-file work that kills any worker process it runs in (the OOM killer, say) and
    works in the test's own process. Module level: pool tasks are pickled."""
    if os.getpid() != _PARENT:
        os._exit(9)
    return _REAL_ANALYZE_FILE(path, workers, max_steps, grads_set_to_none)


def test_dead_rank_worker_falls_back_to_reading_here(tmp_path, monkeypatch, forkable):
    files = find_trace_files(_write(tmp_path, rb.slow_input(2)))
    serial = _read_all(files)
    monkeypatch.setattr(api_module, "_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(api_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(api_module, "_analyze_file", _dies_in_a_worker)
    pools = []
    monkeypatch.setattr(api_module, "fork_pool", lambda n: pools.append(fork_pool(n)) or pools[-1])
    par = api_module._read_all(files)
    assert pools and pools[0] is not None  # the pool was tried (and its workers died)
    assert [(p, r, m.values, d) for p, r, m, d in par] == [
        (p, r, m.values, d) for p, r, m, d in serial]


def test_no_fork_while_other_threads_run(tmp_path, monkeypatch):
    """A process with other Python threads (a training loop's loader threads, a notebook
    kernel) is never forked: a lock held by another thread would stay locked in the child.
    The reading is then done in this process, with the same result."""
    from diagnose.trace import parallel, read_trace

    p = tmp_path / "t.json"
    p.write_text(json.dumps(tb.launch_bound().build(), indent=2))
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert parallel._other_threads()
        assert fork_pool(2) is None
        with pytest.raises(parallel.NotStreamable):
            parallel.read_parallel(p, 2**40, 2)
        assert len(read_trace(p, stream=True, workers=2)) == len(read_trace(p, stream=False))
    finally:
        stop.set()
        t.join()
    # it is the threads that stop it: without them (as in the CLI) there is a pool
    monkeypatch.setattr(parallel, "_other_threads", lambda: False)
    pool = fork_pool(2)
    assert pool is not None
    pool.shutdown()


# ----------------------------------------------------------------------- config: gloo
@pytest.mark.parametrize(("backend", "gpu", "fires"), [
    ("gloo", True, True), ("nccl", True, False), ("gloo", False, False), (None, True, False)])
def test_gloo_on_gpus(tmp_path, backend, gpu, fires):
    kw = {"rank": 0, "world_size": 2, "backend": backend} if backend else {}
    b = tb.healthy(**kw) if gpu else tb.cpu_only(**kw)
    r = analyze(b.write(tmp_path / "t.pt.trace.json.gz"))
    hit = [f for f in r.findings if f.rule == "CF005"]
    assert bool(hit) == fires, r.render_text()
    if fires:  # no collectives in this trace: no time at stake, so the warning is capped
        assert hit[0].severity == "info" and hit[0].graded_down_from == "warning"
        assert "gloo" in hit[0].message


# ------------------------------------------------------------------------- real traces
def test_dlrm_per_rank_table_imbalance_and_communication():
    r = analyze(shared_trace(DLRM))
    assert sorted(x.rank for x in r.ranks) == list(range(8))
    text = r.render_text(width=140)
    table = text[text.index("Ranks"):text.index("Findings")]
    rows = [line for line in table.splitlines() if line.strip("│ ")[:1].isdigit()]
    assert len(rows) == 8
    # GPU busy ranges 21-62% across ranks (shared/traces/README)
    assert 0.15 <= r.metrics["rank_gpu_busy_min"] <= 0.30
    assert 0.55 <= r.metrics["rank_gpu_busy_max"] <= 0.70
    (im,) = _imbalance(r)
    # rank 7 arrives last at the first collectives: every other rank's NCCL kernels wait
    # for it (its own run ~10 us), so it has the least communication time of all
    assert im.ranks == [7] and im.evidence["straggler_rank"] == 7
    assert im.evidence["rank_step_time_min_ms"] < im.evidence["rank_step_time_max_ms"]
    assert im.evidence["rank_comm_frac_min"] < 0.2 < 0.5 < im.evidence["rank_comm_frac_max"]
    (cm,) = [f for f in r.findings if f.category == "communication"]
    ev = cm.evidence
    assert ev["rank_comm_frac_min"] == pytest.approx(0.14, abs=0.02)
    assert ev["rank_comm_frac_max"] == pytest.approx(0.57, abs=0.02)
    assert ev["rank_comm_exposed_frac_min_rank"] == 7
    assert any("14.0% (rank 7) to 57.0% (rank 1)" in h for h in cm.hints), cm.hints
    # DDP's buckets overlap the all-reduce; DLRM's embedding exchange (send/recv, 4.0 ms
    # against all-reduce's 1.8 ms on rank 0) is not theirs, and not at stake for their fix
    assert 0 < ev["comm_exposed_allreduce_frac"] < 0.5 * ev["comm_exposed_frac"]
    assert cm.estimated_gain == pytest.approx(ev["comm_exposed_allreduce_frac"], abs=1e-3)
    assert any("exposed all-reduce, what DDP's buckets overlap" in h for h in cm.hints)


def test_a_many_rank_finding_is_graded_as_its_worst_rank_alone():
    """The many-rank report predicts no fix, but grades each rank's finding by that rank's
    own step model before merging: a rule's raw share is an upper bound. DLRM's LA001 reads
    a GPU waiting on launches for 29-65% of each rank's window; CUDA graphs save 6% of
    the step by each rank's own model. Every rule comes out as the worst rank's own report
    grades it, time at stake included."""
    from diagnose.rules.engine import severity_rank

    folder = shared_trace(DLRM)
    many = analyze(folder)
    alone: dict[str, list[tuple[str, float | None]]] = {}
    for p in sorted(Path(folder).glob("*.json")):
        for f in analyze(p).findings:
            alone.setdefault(f.rule, []).append((f.severity, f.estimated_gain))
    run_rules = {"IM001"}  # needs the ranks together: no rank's own report has it
    for f in many.findings:
        if f.rule in run_rules:
            continue
        worst = max(alone[f.rule], key=lambda x: (severity_rank(x[0]), x[1] or 0.0))
        assert (f.severity, f.estimated_gain) == worst, f.rule
    (la,) = [f for f in many.findings if f.rule == "LA001"]
    assert la.severity == "warning" and la.graded_down_from == "critical"
    assert la.estimated_gain < 0.1 < la.evidence["idle_kernel_launch_frac"]
    assert any("own step model" in h for h in la.hints), la.hints
    assert all(x["predicted"] is None and "one rank" in x["predicted_why"]
               for x in la.to_json()["fixes"])


def test_dlrm_is_one_run_and_names_its_straggler_alike_everywhere(capsys):
    """The 8 DLRM traces say rank r of world size 8 (distributedInfo): one run, and rank 7 is
    rank 7 in the table, the finding, its message, the JSON and the HTML."""
    from diagnose.api import analyze_runs
    from diagnose.cli import main

    folder = shared_trace(DLRM)
    runs = analyze_runs(folder)
    assert len(runs) == 1
    r = runs.runs[0]
    by_path = {Path(x.path).name.split("_")[0]: x.rank for x in r.ranks}
    assert by_path == {f"worker{i}": i for i in range(8)}  # each trace keeps its own rank
    (im,) = _imbalance(r)
    assert im.ranks == [7] and "Rank 7 is the straggler" in im.message
    text = r.render_text(width=160)
    (row,) = [line for line in text.splitlines() if "yes (" in line]
    assert row.strip("│ ").startswith("7 ")
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "runs" not in doc and doc["metrics"]["straggler_rank"] == 7
    assert [f["ranks"] for f in doc["findings"] if f["rule"] == "IM001"] == [[7]]
    assert sorted(x["rank"] for x in doc["ranks"]) == list(range(8))
    assert ">7</td>" in r.to_html()


def test_a_cpu_run_of_ranks_has_no_gpu_column(tmp_path):
    """Two CPU ranks (gloo): the ranks table leaves out "GPU busy", which would read n/a
    on every row, and says its figures are the profiled steps'."""
    bs = [tb.TraceBuilder(device=None, rank=r, world_size=2, backend="gloo", pid=4000 + r)
          for r in range(2)]
    for _ in range(tb.STEPS):
        for r, b in enumerate(bs):
            with b.step():
                b.dataloader(500 + 1500 * r, workers=1)
                b.cpu(4000, "aten::addmm")
    text = analyze(_write(tmp_path, rb.RankRun(bs))).render_text(width=130)
    table = text[text.index("Ranks"):]
    assert "Ranks (profiled steps)" in table and "DataLoader" in table
    assert "GPU busy" not in table


def test_a_lag_within_the_ranks_noise_is_no_straggler():
    """Two ranks sharing 2 CPUs: rank 1's 7.7 ms mean step is 1.9 ms over rank 0's on 5
    profiled steps whose cv is 0.5 (2 x its standard error sqrt(2) * 7 * 0.5 / sqrt(5) =
    4.4 ms is above the lag): no IM001. The same lag over steps that vary by 2% is one."""
    def rank(step: float, cv: float) -> dict:
        return {**_m(step, 1.0), "step_time_cv": cv, "step_count": 5}

    noisy = run_metrics([(0, rank(5.8, 0.5)), (1, rank(7.7, 0.5))])
    assert noisy["straggler_rank"] == 1 and noisy["straggler_lag_ms"] == pytest.approx(1.9)
    se = math.hypot(7.7 * 0.5 / math.sqrt(5), 5.8 * 0.5 / math.sqrt(5))
    assert noisy["straggler_lag_noise_ms"] == pytest.approx(se, abs=1e-3)
    quiet = run_metrics([(0, rank(5.8, 0.02)), (1, rank(7.7, 0.02))])
    assert quiet["straggler_lag_noise_ms"] < 1.9 / 2
    for cv, fires in ((0.5, False), (0.02, True)):
        rep = report_from_ranks(["x"], [RankResult(f"r{r}", r, rank(step, cv), {}, [])
                                        for r, step in ((0, 5.8), (1, 7.7))])
        assert bool(_imbalance(rep)) == fires, cv


def test_a_lag_within_what_the_ranks_waited_for_a_cpu_is_no_straggler():
    """A new user's symmetric 2-rank gloo job on a busy 2-CPU host was given a straggler,
    rank 1 in one capture and rank 0 in the next: its training threads waited 21-38% of
    their steps for a CPU. What the other ranks so waited per step joins the lag's noise; a
    lag beyond twice that (a rank that sleeps 20 ms a step) stays a straggler, and so does
    a rank that alone waits for a CPU (another process on its cores: it stays put)."""
    def rank(step: float, wait: float | None) -> dict:
        return {**_m(step, 1.0), "step_time_cv": 0.02, "step_count": 5,
                "step_cpu_wait_unprofiled_share": wait}

    busy = run_metrics([(0, rank(18.8, 0.21)), (1, rank(21.9, 0.38))])
    se = math.hypot(18.8 * 0.02 / math.sqrt(5), 21.9 * 0.02 / math.sqrt(5))
    assert busy["straggler_lag_noise_ms"] == pytest.approx(math.hypot(se, 0.21 * 18.8), abs=1e-3)
    for waits, lag, fires in (((0.21, 0.38), 3.1, False), ((None, 0.38), 3.1, True),
                              ((0.11, 0.16), 20.0, True), ((0.0, 0.4), 20.0, True)):
        rep = report_from_ranks(["x"], [RankResult(f"r{r}", r, rank(step, w), {}, [])
                                        for r, step, w in ((0, 18.8, waits[0]),
                                                           (1, 18.8 + lag, waits[1]))])
        assert bool(_imbalance(rep)) == fires, (waits, lag)


@pytest.mark.parametrize("hidden", [False, True])
def test_a_cpu_runs_collectives_are_communication_too(tmp_path, hidden):
    """A CPU rank (gloo) whose all-reduce follows its compute: 3 of every 7 ms are
    collectives that nothing hides, and CM001 says so from the host's spans (a 300-rank
    gloo trace spent 85% of its step in gloo:all_reduce and was told nothing points at a
    bottleneck). The same all-reduce on gloo's own thread beside the compute is hidden."""
    import gzip

    b = tb.TraceBuilder(device=None, rank=0, world_size=2, backend="gloo")
    for _ in range(tb.STEPS):
        with b.step():
            b.cpu(4000, "aten::addmm")
            with b.annotation("gloo:all_reduce"):
                b.idle(3000)
    doc = b.build()
    if hidden:  # gloo's thread runs it during the compute; the main thread does not wait
        ops = sorted((e for e in doc["traceEvents"] if e.get("name") == "aten::addmm"),
                     key=lambda e: e["ts"])
        spans = sorted((e for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce"),
                       key=lambda e: e["ts"])
        for op, span in zip(ops, spans, strict=True):
            span.update(ts=op["ts"], tid=99)
    path = tmp_path / "gloo.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    r = analyze(path)
    m = r.metrics
    assert m["comm_source"] == "host"
    assert m["comm_frac"] == pytest.approx(3 / 7, rel=0.02)
    cm = [f for f in r.findings if f.rule == "CM001"]
    # the breakdown agrees: its communication is what the main thread's work leaves of them
    # (a CPU DDP run read "other 76%" beside CM001's 70.5% collectives)
    assert m["share_cpu_exec"] == pytest.approx(4 / 7, rel=0.02)
    assert m["share_communication"] == pytest.approx(0.0 if hidden else 3 / 7, abs=0.01)
    assert m["share_other"] == pytest.approx(3 / 7 if hidden else 0.0, abs=0.01)  # idle
    if hidden:
        assert m["comm_exposed_frac"] == pytest.approx(0.0, abs=0.01) and not cm
        assert m["comm_overlap_frac"] == pytest.approx(1.0, abs=0.01)
    else:
        assert m["comm_exposed_frac"] == pytest.approx(3 / 7, rel=0.02)
        assert cm and cm[0].severity == "critical"
