"""A fix as a Hugging Face Trainer user makes it (diagnose/fixes/trainer_args.py): the
TrainingArguments fields, the lines before trainer.train(), or the DataLoader code headed
by where a Trainer takes it."""

from __future__ import annotations

from diagnose import analyze
from diagnose.fixes import FIXES
from diagnose.fixes.config import TrainConfig
from diagnose.fixes.trainer_args import ELSEWHERE, after_loader_args, trainer_code
from diagnose.metrics.context.clock_note import clock_note
from tests import tracebuilder as tb
from tests.rules.test_rules import _ctx, _write


def test_a_change_is_written_as_the_training_arguments_it_sets():
    before = TrainConfig(num_workers=4, batch_size=8)
    code = trainer_code(before, {"num_workers": 0, "batch_size": 8}, "fewer workers")
    assert code == ("# before\nargs = TrainingArguments(..., dataloader_num_workers=4)\n"
                    "# after: fewer workers\nargs = TrainingArguments(..., "
                    "dataloader_num_workers=0)")
    amp = trainer_code(before, {"amp_dtype": "bfloat16", "grad_accum_steps": 2}, "x")
    assert amp is not None and "bf16=True, gradient_accumulation_steps=2" in amp
    threads = trainer_code(before, {"num_workers": 2, "intra_op_threads": 1}, "split")
    assert threads is not None
    assert threads.endswith("dataloader_num_workers=2)\ntorch.set_num_threads(1)\n"
                            "trainer.train()")
    compile(threads, "fix", "exec")
    # no TrainingArguments field: the caller keeps the DataLoader code
    assert trainer_code(before, {"batched_fetch": True}, "x") is None
    assert trainer_code(before, {"num_workers": 4}, "x") is None  # nothing changes


def test_a_templates_own_loader_settings_are_read_from_its_code():
    """An unpredicted fix's after: the settings its DataLoader call writes, as written."""
    got = after_loader_args(FIXES["num_workers"].code)
    assert got is not None and "num_workers" in got and "sched_getaffinity" in got["num_workers"]
    split = after_loader_args(FIXES["threads"].code)
    assert split is not None and "sched_getaffinity" in split["intra_op_threads"]
    assert after_loader_args("torch.set_num_threads(1)") is None
    assert after_loader_args("not python (") is None


def test_a_trainer_runs_findings_are_fixed_in_its_arguments(tmp_path):
    """A run the transformers callback captured: IN004's fix is the Trainer's
    ``dataloader_num_workers``, not a DataLoader call the user never wrote; a fix with no
    field says where a Trainer user makes it. The same run without the callback keeps the
    DataLoader call."""
    path = _write(tmp_path, "loader", tb.dataloader_bound(workers=4, share=0.1))
    ctx = _ctx(dataloader={"num_workers": 16, "batch_size": 8}, cpu_count=4)
    plain = analyze(path, context=ctx)
    hf = analyze(path, context={**ctx, "trainer": "transformers"})
    (mine,) = [f for f in plain.findings if f.rule == "IN004"]
    (theirs,) = [f for f in hf.findings if f.rule == "IN004"]
    code = theirs.fix_code.get("num_workers_cap", "")
    assert "dataloader_num_workers=16" in code and "DataLoader(" not in code, code
    assert "DataLoader(" in mine.fix_code.get("num_workers_cap", FIXES["num_workers_cap"].code)
    for f in hf.findings:
        for fid, text in f.fix_code.items():
            assert "DataLoader(" not in text or text.startswith(ELSEWHERE), (fid, text)
    # the page badges no fix for autofix: the Trainer builds what autofix would change
    from diagnose.report.html import render_html

    assert "badge auto" in render_html(plain) and "badge auto" not in render_html(hf)


def test_the_clock_note_names_the_callback_of_a_trainers_run():
    m = {"step_time_unprofiled_reliable": False, "step_time_unprofiled_steps": 4}
    assert "(diagnose(..., clock_steps=30))" in (clock_note(dict(m)) or "")
    assert "(DiagnoseCallback(..., clock_steps=30))" in (
        clock_note({**m, "run_trainer": "transformers"}) or "")


def test_a_lightning_runs_loader_fixes_say_which_dataloader(tmp_path):
    """A new user of the Lightning callback read IN004's fix as `loader = DataLoader(
    dataset, ...)` beside a DataModule: on a Lightning run each DataLoader fix says it is
    the one train_dataloader() returns; fixes without one are as they were."""
    from diagnose.fixes.for_run import LIGHTNING_LOADER

    path = _write(tmp_path, "loader", tb.dataloader_bound(workers=4, share=0.1))
    ctx = _ctx(dataloader={"num_workers": 16, "batch_size": 8}, cpu_count=4)
    plain = analyze(path, context=ctx)
    lit = analyze(path, context={**ctx, "trainer": "lightning"})
    (theirs,) = [f for f in lit.findings if f.rule == "IN004"]
    code = theirs.fix_code["num_workers_cap"]
    assert code.startswith(LIGHTNING_LOADER) and "DataLoader(" in code
    for f, g in zip(plain.findings, lit.findings, strict=True):
        for fid in g.fixes:
            ours = g.fix_code.get(fid, FIXES[fid].code)
            before = f.fix_code.get(fid, FIXES[fid].code)
            assert ours == (LIGHTNING_LOADER + before if "DataLoader(" in before else before)


def test_a_trainer_runs_checkpointing_is_its_gradient_checkpointing_argument():
    """A new user's Hugging Face run was offered activation checkpointing as
    ``h = checkpoint(self.block, h)``: code a Trainer user does not own. It is
    ``TrainingArguments(gradient_checkpointing=True)`` there."""
    from diagnose.fixes.for_run import code_for_run
    from diagnose.rules.engine import Finding

    def code(ctx):
        f = Finding(rule="ME004", title="t", category="memory", severity="info", message="m",
                    evidence={}, estimated_gain=None, fixes=["activation_checkpointing"])
        code_for_run([f], {}, ctx)
        return f.fix_code.get("activation_checkpointing", FIXES["activation_checkpointing"].code)

    hf = code({"trainer": "transformers"})
    assert hf.endswith("args = TrainingArguments(..., gradient_checkpointing=True)"), hf
    assert "checkpoint(self.block" in code({})  # a hand-written loop keeps its own code
