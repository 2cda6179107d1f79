"""A memory finding's fixes carry their predicted peak (diagnose/analysis.py
``predict_peaks``): in the JSON's ``fixes[].predicted`` (``peak_bytes``, ``peak_range``),
in the text's fix panel and the HTML's, with or without a trace (a run that ran out of
memory in its first step has none, and no step-model prediction)."""

from __future__ import annotations

import json

import pytest

from diagnose import analyze
from diagnose.report.html import render_html
from tests import tracebuilder as tb

from .test_section import CTX, SECTION


@pytest.fixture
def trace(tmp_path):
    return tb.healthy().write(tmp_path / "healthy.pt.trace.json.gz")


def _fix(report, rule: str, fix: str) -> dict:
    (f,) = [f for f in report.to_json()["findings"] if f["rule"] == rule]
    (x,) = [x for x in f["fixes"] if x["id"] == fix]
    return x


def test_a_traced_memory_finding_gets_the_what_if_peak(trace):
    """ME004 (a warning: the tracked step ran out) offers checkpointing: its what-if
    predicts 5800 of 10,000 bytes (5800-6000); the step model cannot predict the advice."""
    oom = {**SECTION, "oom": {"held_bytes": 9000, "requested_bytes": 2000}}
    r = analyze(trace, context={**CTX, "memory": oom})
    x = _fix(r, "ME004", "activation_checkpointing")
    p = x["predicted"]
    assert p["peak_bytes"] == 5800 and p["peak_range"] == [5800, 6000]
    assert p["change"] == {"checkpoint_modules": ["0", "1"]}
    assert "step_ms" not in p and "speedup" not in p  # no time prediction: no step keys
    assert isinstance(x["predicted_why"], str)  # ... and it says why
    assert p["peak_fits"] is True  # the trace's device holds 10,000 bytes
    text = r.render_text(width=200)
    assert "peak 9.8 -> 5.7 KiB predicted (5.7-5.9)" in text
    assert "peak 9.8 -&gt; 5.7 KiB predicted" in render_html(r)
    json.dumps(r.to_json())


def test_a_finding_outside_memory_gets_no_peak(trace):
    r = analyze(trace, context={**CTX, "memory": SECTION})
    for f in r.findings:
        assert not f.peaks or f.category == "memory", f.rule


def test_an_out_of_memory_run_without_a_trace(tmp_path):
    """A real tracked step of a tower that runs out of an emulated 1.5 MB, in a run folder
    with no trace: ME001's fixes each get a peak below the whole step's, against that
    budget (the explanation's), grad_accumulation the fewest passes that fit."""
    torch = pytest.importorskip("torch")
    from diagnose.memory.live import measure

    from . import models as M

    limit = 1_500_000
    model = M.tower(depth=3, width=64)
    sec = measure(model, torch.optim.AdamW(model.parameters()), M.batch(256, 64), M.loss,
                  limit_bytes=limit)
    assert sec["oom"] is not None
    ctx = {**CTX, "dataloader": {**CTX["dataloader"], "batch_size": 256},
           "oom": {"message": sec["oom"]["message"], "device": "cpu",
                   "requested_bytes": sec["oom"].get("requested_bytes")}, "memory": sec}
    (tmp_path / "context.json").write_text(json.dumps(ctx))
    r = analyze(tmp_path)
    assert r.memory is not None and not r.ranks
    full = sec["full_step"]["peak_bytes"]
    for fid in ("grad_accumulation", "amp", "activation_checkpointing"):
        x = _fix(r, "ME001", fid)
        p = x["predicted"]
        assert set(p) == {"change", "peak_bytes", "peak_range", "peak_method", "peak_fits"}, fid
        assert p["peak_fits"] == (p["peak_range"][1] <= limit * 0.9)
        assert p["peak_range"][0] <= p["peak_bytes"] <= p["peak_range"][1] and p["peak_bytes"] < full
        assert "no steps were profiled" in x["predicted_why"]
    acc = _fix(r, "ME001", "grad_accumulation")["predicted"]
    fitting = [w for w in sec["what_if"] if set(w["change"]) == {"batch_size", "grad_accum_steps"}
               and w["range"][1] <= limit * 0.9]
    if fitting:
        assert acc["change"] == fitting[0]["change"]
    lead = r.findings[0].fixes[0]
    p = _fix(r, "ME001", lead)["predicted"]
    text = r.render_text(width=200)
    assert "ME001 fix" in text and "MiB predicted (" in text
    assert ("over the 1.4 MiB budget" in text) == (not p["peak_fits"])


def test_an_out_of_memory_error_after_the_tracked_step_predicts_no_peak(tmp_path):
    """The tracked step fit (10,000 bytes) and a later step ran out (a new user's CPU job
    whose later forward asked for terabytes): the tracked step's what-ifs say nothing of
    the one that failed, so ME001's fixes carry no peak ("peak 0.0 -> 6103.5 GiB" before)
    and the finding says why."""
    ctx = {**CTX, "oom": {"message": "DefaultCPUAllocator: can't allocate memory: you tried "
                          "to allocate 26214400000000 bytes.", "device": "cpu",
                          "requested_bytes": 26214400000000},
           "memory": {**SECTION, "what_if": [
               {"change": {"batch_size": 32, "grad_accum_steps": 2}, "peak_bytes": 6000,
                "range": [6000, 6200], "method": "re-run under FakeTensorMode"}]}}
    (tmp_path / "context.json").write_text(json.dumps(ctx))
    r = analyze(tmp_path)
    (f,) = [f for f in r.findings if f.rule == "ME001"]
    assert not f.peaks
    assert any("came later, untracked" in h for h in f.hints)
    for x in r.to_json()["findings"][r.findings.index(f)]["fixes"]:
        assert "peak_bytes" not in (x.get("predicted") or {})
