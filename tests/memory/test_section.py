"""The analysis result's memory section: its JSON shape from a live capture's tracked step
and from a trace alone, its metrics, the text section, and ME004 (activations dominate the
peak and checkpointing would cut it) firing on its symptom and quiet on a healthy run."""

from __future__ import annotations

import pytest

from diagnose import analyze
from diagnose.memory.section import KEYS
from tests import tracebuilder as tb

from .test_whatif import PROF

CTX = {"dataloader": {"num_workers": 4, "pin_memory": True, "batch_size": 64,
                      "persistent_workers": True, "prefetch_factor": 2},
       "cudnn_benchmark": True, "optimizer": {"class": "AdamW", "foreach": True},
       "model": {"param_count": 1000, "is_dataparallel": False, "has_conv": False},
       "cpu_count": 8, "torch_num_threads": 8, "oom": None}

#: activations 60% of the peak; checkpointing predicted to leave 60% of it for 25% more time
SECTION = {**PROF, "peak_bytes": 10_000,
           "by_kind": {"parameters": 1000, "gradients": 500, "optimizer_state": 2000,
                       "activations": 6000, "temporaries": 300, "other": 200},
           "top_modules": [{"module": "0.1", "class": "GELU", "saved_bytes": 800}],
           "what_if": [{"change": {"checkpoint_modules": ["0", "1"]}, "peak_bytes": 5800,
                        "range": [5800, 6000], "method": "re-run under FakeTensorMode"}],
           "blocks": {**PROF["blocks"], "forward_s": 0.1,
                      "blocks": [{"module": m, "saved_bytes": 800, "forward_s": 0.05}
                                 for m in ("0", "1")]},
           "step_s": 0.4, "oom": None}


@pytest.fixture
def trace(tmp_path):
    return tb.healthy().write(tmp_path / "healthy.pt.trace.json.gz")


def _me004(report):
    return [f for f in report.findings if f.rule == "ME004"]


def test_a_tracked_step_leads_the_section(trace):
    r = analyze(trace, context={**CTX, "memory": SECTION})
    doc = r.to_json()["memory"]
    assert set(KEYS) <= set(doc) and doc["source"] == "tracker"
    assert doc["peak_bytes"] == 10_000 and doc["by_kind"]["activations"] == 6000
    assert doc["trace"]["peak_bytes"] == 30 * 2**30  # the allocator's, from the trace
    w = doc["what_if"][0]
    assert set(w) >= {"change", "peak_bytes", "range", "method"}
    # its time from the run's step time and the blocks' share of the tracked step
    assert w["step_ms"] == pytest.approx(r.metrics["step_time_median_ms"] * 1.25, rel=1e-3)
    m = r.metrics
    assert (m["mem_activations_frac"], m["mem_checkpoint_peak_frac"],
            m["mem_checkpoint_time_frac"], m["mem_checkpoint_blocks"]) == (0.6, 0.6, 0.25, 2)
    text = r.render_text()
    assert "Memory what-ifs" in text and "checkpoint 2 blocks" in text and "GELU" in text
    assert "step ms" in text  # the checkpoint's time
    untimed = {**SECTION, "what_if": [{"change": {"batch_size": 32}, "peak_bytes": 5000,
                                        "range": [5000, 5000], "method": "scaled"}],
               "blocks": None}
    short = analyze(trace, context={**CTX, "memory": untimed})
    # no memory finding: the short report names the what-ifs, the full one shows them
    assert "Memory what-ifs" not in short.render_text() and "1 memory what-if," in " ".join(
        short.render_text(width=400).split())
    text = short.render_text(detail=True)
    assert "Memory what-ifs" in text and "step ms" not in text  # no empty column
    assert "no lower than the peak now" not in text
    # a change whose peak is no lower than the peak now (a new user's GAN: checkpointing
    # 2 blocks, 21.7 MiB over 21.1) says so beside its method
    worse = {**untimed, "what_if": [{"change": {"batch_size": 128}, "peak_bytes": 10_500,
                                      "range": [10_000, 10_500], "method": "scaled"}]}
    text = analyze(trace, context={**CTX, "memory": worse}).render_text(width=160, detail=True)
    assert "scaled; no lower than the peak now" in text
    # a point at the peak whose range reaches below it may not lower it: not "no lower"
    reach = {**untimed, "what_if": [{"change": {"batch_size": 128}, "peak_bytes": 10_500,
                                      "range": [9_000, 10_500], "method": "scaled"}]}
    text = analyze(trace, context={**CTX, "memory": reach}).render_text(width=160, detail=True)
    assert "scaled; may not lower the peak" in text and "no lower than" not in text
    # its whole range above the peak (a new user's batch_size=128, 28.6-33.5 MiB over 22.9)
    above = {**untimed, "what_if": [{"change": {"batch_size": 128}, "peak_bytes": 14_000,
                                      "range": [12_000, 14_000], "method": "scaled"}]}
    text = analyze(trace, context={**CTX, "memory": above}).render_text(width=160, detail=True)
    assert "scaled; above the peak now" in text and "no lower than" not in text


def test_a_trace_alone_gives_its_growth_and_batch_what_ifs(trace):
    r = analyze(trace, context=CTX)
    doc = r.to_json()["memory"]
    assert set(KEYS) <= set(doc) and doc["source"] == "trace"
    assert doc["peak_bytes"] == 30 * 2**30 and doc["timeline"]["unit"] == "us"
    assert [w["change"] for w in doc["what_if"]] == [{"batch_size": 32}, {"batch_size": 128}]
    for w in doc["what_if"]:
        assert w["range"][0] <= w["peak_bytes"] <= w["range"][1]
    assert r.metrics["mem_step_peak_bytes"] is None
    assert "Memory" not in r.render_text()  # a trace's totals alone: not printed


def test_me004_fires_on_its_symptom(trace):
    (f,) = _me004(analyze(trace, context={**CTX, "memory": SECTION}))
    assert f.severity == "info" and f.fixes == ["activation_checkpointing"]
    assert "60%" in f.message and "{" not in f.message
    assert any("25%" in h for h in f.hints)
    # a step that ran out of memory: a warning
    oom = {**SECTION, "oom": {"held_bytes": 9000, "requested_bytes": 2000}}
    (f,) = _me004(analyze(trace, context={**CTX, "memory": oom}))
    assert f.severity == "warning"


def test_me004_quiet_on_a_healthy_run(trace):
    r = analyze(trace, context=CTX)
    assert not _me004(r)
    assert "ME004" in {n.rule for n in r.not_evaluated}
    small = {**SECTION, "by_kind": {**SECTION["by_kind"], "activations": 2000,
                                    "optimizer_state": 6000}}
    assert not _me004(analyze(trace, context={**CTX, "memory": small}))


def test_a_what_ifs_change_reads_as_the_settings_it_names() -> None:
    """A new user read "zero grad set to none False": the table names the settings as a
    fix's change does."""
    from diagnose.report.memory_text import _change

    assert _change({"batch_size": 32, "grad_accum_steps": 2}) == "batch_size=32, grad_accum_steps=2"
    assert _change({"zero_grad_set_to_none": False}) == "zero_grad(set_to_none=False)"
    assert _change({"checkpoint_modules": ["a", "b"]}) == "checkpoint 2 blocks"


def test_a_wrapped_memory_line_keeps_its_indent():
    """A narrow terminal wraps the peak-by-kind line; its continuation stays under the
    section's indent rather than at column 0."""
    from rich.console import Console

    from diagnose.report.memory_text import memory_renderables
    console = Console(width=40, record=True, color_system=None)
    for r in memory_renderables(SECTION):
        console.print(r)
    lines = [ln for ln in console.export_text().splitlines() if ln.strip()]
    at = lines.index("Memory")
    body = lines[at + 1:at + 4]  # the peak line, wrapped over several rows
    assert len(body) == 3 and all(ln.startswith("  ") for ln in body), lines
