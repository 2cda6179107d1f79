"""Findings people can trust (issue 12): severity follows the time at stake, every gain is
measured, and nothing already in place is advised.

Synthetic traces come from tests/tracebuilder.py; the real ones from ../shared/traces and
tests/data/gpu (recorded on an H100 by tests/data/record_gpu_traces.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.errors import RuleError
from diagnose.rules.engine import (
    CRITICAL_GAIN,
    INFERENCE_REASON,
    WARNING_GAIN,
    builtin_rules,
    evaluate,
    load_rule_file,
    load_rules,
)
from tests import tracebuilder as tb
from tests.conftest import shared_trace
from tests.rules.test_rules import _clock_waits, _ctx, _samples

GPU_DATA = Path(__file__).parents[1] / "data" / "gpu"
ADVICE_IN_PLACE = {"torch_compile", "cuda_graphs"}
TRAINING_ONLY = {"CF001", "CF002", "CM001", "PR002"}


def _write(tmp_path: Path, name: str, b: tb.TraceBuilder) -> Path:
    return b.write(tmp_path / f"{name}.pt.trace.json.gz")


def _rule(tmp_path: Path, body: str, name: str = "mine.toml") -> Path:
    docs = ('[rule.docs]\ndetects = "d"\nwhy = "w"\nfix = "f"\nfalse_positives = "p"\n')
    p = tmp_path / name
    p.write_text(body + docs)
    return p


USER_RULE = '''[[rule]]
id = "MY001"
category = "{category}"
title = "Mine"
when = "step_time_mean_ms > 0"
warning = "step_time_mean_ms > 0"
critical = "step_time_mean_ms > 0"
message = "step {{step_time_mean_ms:.1f}} ms"
gain = "{gain}"
fixes = ["num_workers"]
'''


# --------------------------------------------------------------- severity from time at stake
@pytest.mark.parametrize(("gain", "category", "want"), [
    ("0.01", "input", "info"),         # a warning condition, 1% at stake: info
    ("0.05", "input", "warning"),      # a critical condition, 5% at stake: warning
    ("0.30", "input", "critical"),
    ("0.0", "memory", "critical"),     # memory (out of memory, near capacity) is exempt
])
def test_severity_is_capped_by_the_gain(tmp_path, gain, category, want):
    rules = load_rule_file(_rule(tmp_path, USER_RULE.format(gain=gain, category=category)))
    (f,), _ = evaluate(rules, {"step_time_mean_ms": 10.0})
    assert f.severity == want
    if want != "critical":
        assert f.graded_down_from == "critical"
        hint = f.hints[-1]
        assert hint.startswith(f"{want}: graded down from critical")
        assert f"{float(gain):.1%} of step time at stake" in hint
        assert f.to_json()["graded_down_from"] == "critical"
    else:
        assert f.graded_down_from is None and f.to_json()["graded_down_from"] is None


@pytest.mark.parametrize(("gain", "want", "shown"), [
    ("0.0198", "info", "1.98%"),      # "2.0%" would read as the 2% a warning needs
    ("0.1496", "warning", "14.96%"),  # and "15.0%" as the 15% a critical needs
    ("0.0123", "info", "1.2%"),
])
def test_a_gain_just_below_a_threshold_does_not_read_as_it(tmp_path, gain, want, shown):
    rules = load_rule_file(_rule(tmp_path, USER_RULE.format(gain=gain, category="input")))
    (f,), _ = evaluate(rules, {"step_time_mean_ms": 10.0})
    assert f.severity == want and f"{shown} of step time at stake" in f.hints[-1], f.hints
    f.take_gain(float(gain))  # the same wording where a prediction grades it
    assert f.severity == want and f"{shown} of step time at stake" in f.hints[-1], f.hints


def test_thresholds_are_the_documented_ones():
    assert (WARNING_GAIN, CRITICAL_GAIN) == (0.02, 0.15)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "under 2%: info" in readme and "under 15%: at most warning" in readme


def test_a_gain_that_cannot_be_computed_is_info_and_says_why(tmp_path):
    rules = load_rule_file(_rule(tmp_path, USER_RULE.format(gain="host_cpu_mean_pct / 100",
                                                            category="input")))
    (f,), _ = evaluate(rules, {"step_time_mean_ms": 10.0, "host_cpu_mean_pct": None})
    assert f.severity == "info" and f.estimated_gain is None
    assert "no estimate of the time at stake" in f.hints[-1]
    assert "host_cpu_mean_pct" in f.hints[-1] and "samples" in f.hints[-1]


def test_no_builtin_gain_is_a_bare_constant():
    for r in builtin_rules():
        if r.gain is None:
            assert r.category == "memory", r.id
            continue
        assert r.gain.names, f"{r.id}: gain {r.gain.src!r} names no measurement"


def test_a_rule_without_a_gain_must_be_a_memory_rule(tmp_path):
    body = USER_RULE.format(gain="x", category="input").replace('gain = "x"\n', "")
    with pytest.raises(RuleError, match="MY001: needs a gain"):
        load_rule_file(_rule(tmp_path, body))


def test_healthy_traces_have_nothing_at_warning(tmp_path):
    for name, path in [("healthy", _write(tmp_path, "h", tb.healthy())),
                       ("cpu healthy", Path(__file__).parents[2] / "samples" / "traces"
                        / "cpu" / "healthy.pt.trace.json.gz")]:
        r = analyze(path)
        assert not r.at_least("warning"), (name, r.render_text())


def test_a_fix_is_offered_where_its_fix_when_holds(tmp_path):
    """``[rule.fix_when]``: a fix offered only where its condition holds (unknown metric:
    left out); a condition for a fix the rule does not name, or over no metric, is refused."""
    body = USER_RULE.format(gain="0.3", category="input").replace(
        'fixes = ["num_workers"]', 'fixes = ["num_workers", "prefetch_factor"]') + (
        '[rule.fix_when]\nprefetch_factor = "dataloader_num_workers > 0"\n')
    rules = load_rule_file(_rule(tmp_path, body))
    for workers, want in ((2, ["num_workers", "prefetch_factor"]), (0, ["num_workers"]),
                          (None, ["num_workers"])):
        (f,), _ = evaluate(rules, {"step_time_mean_ms": 10.0, "dataloader_num_workers": workers})
        assert f.fixes == want, workers
    with pytest.raises(RuleError, match="fix_when names 'pin_memory', which is not in its"):
        load_rule_file(_rule(tmp_path, body.replace("prefetch_factor =", "pin_memory =")))
    with pytest.raises(RuleError, match="unknown metric 'dataloader_workers' in fix_when"):
        load_rule_file(_rule(tmp_path, body.replace('workers > 0"', 'workers > 0 or dataloader_workers"')))


# ---------------------------------------------------------- user rules: names and division
def test_unknown_metric_is_refused_at_load_with_close_names(tmp_path):
    body = USER_RULE.format(gain="dataloader_shares", category="input")
    with pytest.raises(RuleError) as info:
        load_rule_file(_rule(tmp_path, body))
    msg = str(info.value)
    assert "rule MY001" in msg and "unknown metric 'dataloader_shares' in gain" in msg
    assert "did you mean dataloader_share" in msg


@pytest.mark.parametrize("field", ["when", "message", "evidence"])
def test_unknown_metric_anywhere_in_a_rule(tmp_path, field):
    body = USER_RULE.format(gain="0.1 * dataloader_share", category="input")
    body = {
        "when": body.replace('when = "step_time_mean_ms > 0"', 'when = "gpu_bussy_frac > 0"'),
        "message": body.replace("{{step_time_mean_ms:.1f}}", "{gpu_bussy_frac}").replace(
            "{step_time_mean_ms:.1f}", "{gpu_bussy_frac}"),
        "evidence": body + 'evidence = ["gpu_bussy_frac"]\n',
    }[field]
    with pytest.raises(RuleError, match="unknown metric 'gpu_bussy_frac'.*gpu_busy_frac"):
        load_rule_file(_rule(tmp_path, body))


def test_context_sample_and_run_metrics_are_known(tmp_path):
    body = USER_RULE.format(gain="0.1 * dataloader_share", category="input").replace(
        'when = "step_time_mean_ms > 0"',
        'when = "(dataloader_num_workers or 0) >= 0 and (host_cpu_mean_pct or 0) >= 0 '
        'and (straggler_lag_frac or 0) >= 0 and (comm_exposed_ms_per_step or 0) >= 0"')
    assert load_rule_file(_rule(tmp_path, body))


def test_unknown_metric_through_the_cli_is_one_line_exit_2(tmp_path):
    rules = _rule(tmp_path, USER_RULE.format(gain="dataloader_shares", category="input"))
    trace = _write(tmp_path, "h", tb.healthy(steps=2))
    proc = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(trace),
                           "--rules", str(rules)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "MY001" in lines[0] and "dataloader_shares" in lines[0]
    assert "dataloader_share" in lines[0].split("did you mean", 1)[1]


def test_division_by_zero_is_said_so(tmp_path):
    body = USER_RULE.format(gain="0.1", category="input").replace(
        'when = "step_time_mean_ms > 0"', 'when = "step_time_mean_ms / step_count_zero > 1"')
    body = body.replace("step_count_zero", "memcpy_h2d_count")
    rules = load_rule_file(_rule(tmp_path, body))
    found, skipped = evaluate(rules, {"step_time_mean_ms": 10.0, "memcpy_h2d_count": 0})
    assert not found
    assert skipped[0].reason == "division by zero in 'step_time_mean_ms / memcpy_h2d_count'"
    assert "unknown metric" not in skipped[0].reason


def test_division_by_a_literal_zero_is_said_so(tmp_path):
    body = USER_RULE.format(gain="0.1", category="input").replace(
        'when = "step_time_mean_ms > 0"', 'when = "step_time_mean_ms / 0 > 1"')
    _, skipped = evaluate(load_rule_file(_rule(tmp_path, body)), {"step_time_mean_ms": 10.0})
    assert skipped[0].reason == "division by zero in 'step_time_mean_ms / 0'"


# ---------------------------------------------------------------- graphs and compiled code
def _advice(report) -> set[str]:
    return {fix for f in report.findings for fix in f.fixes}


def test_graph_replays_are_not_launch_bound(tmp_path):
    r = analyze(_write(tmp_path, "graph", tb.graph_decode()))
    m = r.metrics
    assert m["uses_cuda_graphs"] is True and m["graph_kernel_frac"] > 0.97
    assert m["kernels_per_step"] > 2000 and m["launched_kernels_per_step"] < 50
    assert not [f for f in r.findings if f.category == "launch"]
    assert not _advice(r) & ADVICE_IN_PLACE
    assert any("CUDA/HIP graphs are in use" in n for n in r.notes)
    # without the graph the same decoding is launch-bound, and CUDA graphs are the advice
    eager = analyze(_write(tmp_path, "eager", tb.eager_decode()))
    la = [f for f in eager.findings if f.rule == "LA001"]
    assert la and la[0].severity == "critical" and "cuda_graphs" in la[0].fixes


def test_hip_graph_launches_count_too(tmp_path):
    b = tb.TraceBuilder(device="AMD Instinct MI250X")
    for _ in range(6):
        with b.step():
            for _ in range(16):
                b.graph_launch([(tb.ELEMENTWISE_ADD, 3.0)] * 160, name="hipGraphLaunch")
            b.sync()
    r = analyze(_write(tmp_path, "hip", b))
    assert r.metrics["uses_cuda_graphs"] is True and r.metrics["graph_launches_per_step"] == 16
    assert not [f for f in r.findings if f.rule == "LA001"]


def test_triton_kernels_get_no_torch_compile_advice(tmp_path):
    r = analyze(_write(tmp_path, "compiled", tb.compiled_launch_bound()))
    assert r.metrics["uses_compiled_code"] is True
    la = [f for f in r.findings if f.rule == "LA001"]
    assert la and "torch_compile" not in la[0].fixes and "cuda_graphs" in la[0].fixes
    assert any(h.startswith("Not suggested: torch.compile") for h in la[0].hints)
    assert any("compiled code is in use" in n for n in r.notes)


def test_real_graph_replay_trace():
    """H100, a 16-block fp16 MLP decoded at batch 1: replayed by cudaGraphLaunch 8x a step."""
    r = analyze(GPU_DATA / "graph_decode.pt.trace.json.gz")
    assert r.metrics["graph_kernel_frac"] > 0.97
    assert not [f for f in r.findings if f.category == "launch" or f.rule == "UT001"]
    assert not _advice(r) & ADVICE_IN_PLACE


@pytest.mark.parametrize("path", [
    GPU_DATA / "compiled_train.pt.trace.json.gz",
    "hta/triton_example__triton_example.json.gz",
], ids=["h100-compiled-train", "hta-triton-example"])
def test_real_triton_traces_get_no_torch_compile_advice(path):
    p = path if isinstance(path, Path) else shared_trace(path)
    r = analyze(p)
    assert r.metrics["uses_compiled_code"] is True
    assert "torch_compile" not in _advice(r)


# ------------------------------------------------------------------------------- inference
def test_inference_trace_gets_no_training_advice(tmp_path):
    r = analyze(_write(tmp_path, "eager", tb.eager_decode()))
    assert r.metrics["is_training"] is False and r.metrics["has_backward"] is False
    assert any(n.startswith("this looks like inference") for n in r.notes)
    reasons = {n.rule: n.reason for n in r.not_evaluated}
    for rule in TRAINING_ONLY:
        assert reasons[rule] == INFERENCE_REASON
    assert not {f.rule for f in r.findings} & TRAINING_ONLY
    marked = {x.id for x in builtin_rules() if x.training_only}
    assert marked == TRAINING_ONLY


def test_training_traces_are_training(tmp_path):
    assert analyze(_write(tmp_path, "h", tb.healthy(steps=2))).metrics["is_training"] is True
    r = analyze(shared_trace("kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"))
    assert r.metrics["is_training"] is True
    assert not any("inference" in n for n in r.notes)


@pytest.mark.parametrize("name", ["graph_decode", "eager_decode"])
def test_real_inference_traces(name):
    r = analyze(GPU_DATA / f"{name}.pt.trace.json.gz")
    assert r.metrics["is_training"] is False
    assert any(n.startswith("this looks like inference") for n in r.notes)
    assert {n.rule for n in r.not_evaluated} >= {"CF001", "CF002"}


def test_too_few_ops_to_tell():
    r = analyze(shared_trace("hta/triton_example__triton_example.json.gz"))
    assert r.metrics["is_training"] is None
    assert not any("inference" in n for n in r.notes)


# ------------------------------------------------------------ host waits graded by the GPU
def test_hidden_sync_is_named_and_costs_the_gpu_idle(tmp_path):
    r = analyze(_write(tmp_path, "hs", tb.hidden_sync()))
    m = r.metrics
    assert m["memcpy_pageable_hidden_sync"] is True
    # blocked ~1.1 ms a step for 64 bytes while the GPU ran the queued forward pass
    assert m["memcpy_pageable_blocked_ms_per_step"] > 50 * m["memcpy_pageable_expected_ms_per_step"]
    assert m["memcpy_pageable_blocked_gpu_busy_frac"] > 0.9
    (f,) = [f for f in r.findings if f.category == "transfer"]
    assert f.rule == "TR002" and "hidden synchronisation" in f.message
    # the batch is copied pinned already: the 64-byte tensor is to be made on the GPU
    assert f.fixes == ["device_tensors"]
    # the time at stake is the GPU idle after it, not the host's wait
    assert f.estimated_gain == pytest.approx(m["idle_copy_sync_frac"], abs=1e-4)
    assert f.estimated_gain < 0.01 < m["memcpy_pageable_blocked_ms_per_step"] / m["step_time_mean_ms"]
    assert f.severity == "info"
    fix = f.to_json()["fixes"][0]["code"]
    assert 'device="cuda"' in fix and "non_blocking=True" in fix


def test_real_hidden_sync_h100():
    """A 16-float tensor copied with a plain .cuda() after the forward pass: the host waits
    ~5 ms a step in cudaStreamSynchronize while the GPU computes."""
    r = analyze(GPU_DATA / "hidden_sync_train.pt.trace.json.gz")
    m = r.metrics
    assert m["memcpy_pageable_hidden_sync"] is True and m["memcpy_pageable_blocked_ms_per_step"] > 4
    (f,) = [f for f in r.findings if f.rule == "TR002"]
    # what is at stake is the step model's prediction for pinned, non-blocking copies: the
    # host freed from the wait queues ahead, so at most the GPU's idle time is won
    p = f.predictions["pin_memory"]
    assert f.estimated_gain == pytest.approx(1 - p.step_ms / p.base_ms, abs=1e-3)
    assert 0 < f.estimated_gain <= 1 - m["gpu_busy_frac"] + 0.01
    assert f.severity in ("info", "warning")
    assert not [f for f in r.findings if f.rule in ("TR001", "SY001")]


def test_dlrm_tiny_pageable_copies_are_not_critical():
    """11.5 KB of pageable copies a step: the host's blocked time is not the cost. Each
    rank's step model puts pinning at 1.08-1.11x (tests/analysis/test_ranks.py: the
    many-rank report grades by it)."""
    r = analyze(shared_trace("param/dlrm_kineto"))
    tr = [f for f in r.findings if f.category == "transfer"]
    assert tr and all(f.severity != "critical" and (f.estimated_gain or 0) < 0.12 for f in tr)
    assert any(f.rule == "TR002" for f in tr)


# ------------------------------------------------------------------------- measured gains
def test_pr001_gain_is_the_expected_saving():
    r = analyze(shared_trace("hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"))
    m = r.metrics
    assert m["tensor_core_peak_ratio"] == 8.0 and m["tensor_core_speedup"] == 4.0  # V100
    (f,) = [f for f in r.findings if f.rule == "PR001"]
    # the time at stake is the step model's prediction for AMP, below the ceiling of its
    # model: the fp32 GEMM time AMP's 4x would save, and the other kernels' memory-bound
    # share (the host's own work, 34 ms of a 96 ms step, holds the step above the GPU's)
    from diagnose.stepmodel.calibration import AMP_MEMORY_BOUND_SCALE

    gemm = m["gemm_fp32_ms_per_step"]
    ceiling = (gemm * (1 - 1 / 4) + (m["kernel_ms_per_step"] - gemm)
               * (1 - AMP_MEMORY_BOUND_SCALE)) / m["step_time_mean_ms"]
    p = f.predictions["amp"]
    assert f.estimated_gain == pytest.approx(1 - p.step_ms / p.base_ms, abs=2e-3)
    assert 0.02 <= f.estimated_gain < ceiling


def test_pr001_sliver_of_fp32_is_info():
    r = analyze(shared_trace("kineto/test__gpu_metrics_input.json"))
    pr = [f for f in r.findings if f.rule == "PR001"]
    assert all(f.severity == "info" for f in pr)


def test_h100_fp32_ffma_gemms_are_not_tensor_core():
    """sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_ is fp32 FFMA (SIMT) despite 'xmma'."""
    m = analyze(GPU_DATA / "hidden_sync_train.pt.trace.json.gz").metrics
    assert m["gemm_fp32_frac"] == 1.0


def test_cf002_gain_is_the_fill_cost(tmp_path):
    r = analyze(_write(tmp_path, "zg", tb.zero_grad_fill()))
    (f,) = [f for f in r.findings if f.rule == "CF002"]
    # the step model's prediction for set_to_none: at most what the fills cost
    p = f.predictions["set_to_none"]
    assert f.estimated_gain == pytest.approx(1 - p.step_ms / p.base_ms, abs=1e-4)
    assert 0 < f.estimated_gain <= r.metrics["zero_grad_cost_frac"] + 1e-3


def test_in004_gain_needs_samples(tmp_path):
    from tests.rules.test_rules import _ctx, _samples

    path = _write(tmp_path, "dl", tb.dataloader_bound(workers=4, share=0.1))
    ctx = _ctx(dataloader={"num_workers": 16}, cpu_count=4)
    bare = [f for f in analyze(path, context=ctx).findings if f.rule == "IN004"][0]
    assert bare.severity == "info" and bare.estimated_gain is None
    assert "host_cpu_mean_pct" in bare.hints[-1] and "samples" in bare.hints[-1]
    busy = [f for f in analyze(path, context=ctx, samples=_samples(97.0)).findings
            if f.rule == "IN004"][0]
    assert busy.severity == "warning" and busy.estimated_gain >= 0.05
    idle = [f for f in analyze(path, context=ctx, samples=_samples(40.0)).findings
            if f.rule == "IN004"][0]
    assert idle.severity == "info" and idle.estimated_gain == 0.0


@pytest.mark.parametrize(("workers", "cpu_ms", "fires"), [
    (16, 0.5, False), (17, 0.5, True), (16, 9.0, True), (16, None, True)])
def test_in004_leaves_workers_whose_loading_waits(tmp_path, workers, cpu_ms, fires):
    """16 workers on 4 CPUs whose batch, timed after the loop, wanted a CPU 0.5 ms of 10
    (their loading waits on files or the network): not too many, up to 4 a CPU. Held 9 ms
    of 10, or not timed: IN004 fires, as before."""
    from tests.rules.test_rules import _ctx, _samples

    path = _write(tmp_path, "dl", tb.dataloader_bound(workers=4, share=0.1))
    ctx = _ctx(dataloader={"num_workers": workers, "worker_batch_ms": 10.0,
                           "worker_batch_cpu_ms": cpu_ms}, cpu_count=4)
    got = [f.rule for f in analyze(path, context=ctx, samples=_samples(97.0)).findings]
    assert ("IN004" in got) == fires, got


def test_user_rules_load_with_the_pack(tmp_path):
    p = _rule(tmp_path, USER_RULE.format(gain="dataloader_share", category="input"))
    assert "MY001" in {r.id for r in load_rules([p])}


@pytest.mark.parametrize("rule", ["IN001", "IN002", "IN006"])
def test_the_loaders_time_at_stake_is_the_jobs_own(rule):
    """On a CPU run the wait at stake is the one the clock timed without the profiler (a
    new user's job: 17.9% of the profiled window, 7.3% of its own steps; the report said
    "gain <= 18%"); the profiled share where the clock timed none; on a GPU run the
    device's idle time waiting for input."""
    (r,) = [x for x in builtin_rules() if x.id == rule]
    m = {"idle_input_frac": None, "dataloader_wait_unprofiled_share": 0.073,
         "dataloader_share": 0.179}
    assert r.gain.evaluate(m) == 0.073
    assert r.gain.evaluate({**m, "dataloader_wait_unprofiled_share": None}) == 0.179
    assert r.gain.evaluate({**m, "idle_input_frac": 0.12}) == 0.12


def _clock_steady(wait_ms: float, step_ms: float = 40.0, n: int = 40) -> dict:
    """A capture whose clock timed ``n`` unprofiled steps, none starting workers, each
    waiting ``wait_ms`` on the loader, and one epoch's start that waited 400 ms."""
    waits = [400.0] + [wait_ms] * n
    return _ctx(capture={"step_clock": {"phase": ["after"] * (n + 2),
                                        "ms": [step_ms, step_ms + 400.0] + [step_ms] * n,
                                        "dataloader_ms": [0.0, *waits],
                                        "loader_starts": [0, 1] + [0] * n}})


@pytest.mark.parametrize("workers", [0, 4])
def test_the_loader_rules_grade_by_the_steady_unprofiled_wait(tmp_path, workers):
    """IN001/IN002's grade comes from the unprofiled steps that began no epoch (many
    more than the window's few, at the job's own pace), not the window's share: a window
    that waited 8% under the profiler while 40 steady steps waited 13.5% is a warning, and
    a window at 12% whose steady steps waited 4% stays info; each says where its grade came
    from. An epoch's start (IN005's) among the steps moves neither."""
    low = _write(tmp_path, "low", tb.dataloader_bound(workers=workers, share=0.08))
    busy = _samples(97.0) if workers else None
    r = analyze(low, context=_clock_steady(5.4), samples=busy)
    assert r.metrics["dataloader_wait_steady_share"] == pytest.approx(5.4 / 40, rel=1e-3)
    assert r.metrics["dataloader_wait_unprofiled_share"] > 0.2  # the epoch's start with them
    rules = ("IN001", "IN002") if workers else ("IN001",)
    for rule in rules:
        (f,) = [f for f in r.findings if f.rule == rule]
        assert f.severity == "warning", rule
        # the headline quotes the figure the grade reads; the window's own, a hint
        assert f.message.startswith("13.5% of step time"), f.message
        assert "without the profiler, in the steps that began no epoch" in f.message, rule
        assert any("the window's steps waited 8.1%" in h for h in f.hints), rule
    high = _write(tmp_path, "high", tb.dataloader_bound(workers=workers, share=0.12))
    r = analyze(high, context=_clock_steady(1.6), samples=busy)
    graded = [f for f in r.findings if f.rule in rules]
    assert graded and {f.severity for f in graded} == {"info"}
    assert all(f.message.startswith("4.0% of step time") for f in graded)
    assert all(any("the window's steps waited 12.1%" in h for h in f.hints) for f in graded)
    # without the starts column the window's share grades, as before
    r = analyze(low, context=_clock_waits([5.4] * 40), samples=busy)
    assert r.metrics["dataloader_wait_steady_share"] is None
    assert {f.severity for f in r.findings if f.rule == "IN001"} == {"info"}
