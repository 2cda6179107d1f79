"""Each loop shape people write (tests/loops/shapes.py), wrapped as the README's first
snippet shows and never calling ``d.step()``: its steps are found, at least 3 are profiled,
and each profiled and timed step is one whole step of that loop (its batches, its model
calls)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from diagnose.memory.profile import OUTSIDE  # noqa: E402
from diagnose.runfolder import load_context, trace_files  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.loops.shapes import (  # noqa: E402
    make_accum,
    make_contrastive,
    make_gan,
    make_hf,
    make_lm,
    make_parts_called,
    make_reinforce,
    make_sliced,
)

#: the schedule every test runs: 2 wait steps, 1 warmup, 3 profiled, 4 timed by the clock
PLAN: dict[str, Any] = {"steps": 3, "wait": 2, "warmup": 1, "clock_steps": 4,
                        "sample_hz": 0, "print_report": False, "analyze": False}


def profiled_steps(run_dir: Path) -> list[int]:
    (trace,) = trace_files(run_dir)
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sorted(int(m.group(1)) for e in events if e.get("ph") == "X"
                  for m in [re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))] if m)


def whole_steps(run_dir: Path, column: str) -> list[Any]:
    """``column`` of the clock's steps after the first (the run's first holds its start)."""
    ctx = load_context(run_dir)
    assert ctx is not None
    clock = ctx["capture"]["step_clock"]
    return [v for p, v in zip(clock["phase"], clock[column], strict=True)][1:]


def run(job: Any, tmp_path: Path, *args: Any, **kw: Any) -> Any:
    with diagnose(*args, out_dir=tmp_path, **{**PLAN, **kw}) as d:
        n = job.loop(d, 500)
    assert d.done and n < 500, (d.step_mode, d.steps_seen, n)
    assert len(profiled_steps(d.run_dir)) == 3
    return d


def test_language_model_on_tensor_slices_with_a_hand_written_update(tmp_path: Path) -> None:
    job = make_lm()
    d = run(job, tmp_path, job.model)  # diagnose(model): no loader, no optimizer
    assert d.step_mode == "backward"
    assert set(whole_steps(d.run_dir, "forwards")) == {1}
    ctx = load_context(d.run_dir)
    assert ctx["capture"]["step_signals"]["grads_set_to_none"] is True
    assert ctx["optimizer"] is None and ctx["capture"]["steps_untold"] is None


def test_language_model_with_no_model_given(tmp_path: Path) -> None:
    job = make_lm()
    d = run(job, tmp_path)  # diagnose(): the loop's calls find the model
    assert d.step_mode == "backward"
    assert set(whole_steps(d.run_dir, "forwards")) == {1}
    model = load_context(d.run_dir)["model"]
    assert model["class"] == "RNNModel" and model["found"] is True
    assert model["param_count"] == sum(p.numel() for p in job.model.parameters())


def test_gan_with_the_discriminator_alone_as_the_readme_shows(tmp_path: Path) -> None:
    job = make_gan()
    d = run(job, tmp_path, job.model, job.loader)  # diagnose(model, loader): netD only
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "batches")) == {1}
    assert set(whole_steps(d.run_dir, "forwards")) == {3}  # netD: real, fake, fake again
    (note,) = [n for n in d.notes if "not given to diagnose()" in n]
    assert "Adam (4 tensors" in note and "ran 3 times a step" in note
    assert "diagnose([netG, netD], loader)" in note


def test_gan_with_both_models_as_a_list(tmp_path: Path) -> None:
    job = make_gan()
    d = run(job, tmp_path, job.per_step["models"], job.loader)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "batches")) == {1}
    assert set(whole_steps(d.run_dir, "forwards")) == {4}  # netG once, netD three times
    ctx = load_context(d.run_dir)
    assert [o["class"] for o in ctx["optimizers"]] == ["Adam", "Adam"]
    assert ctx["model"]["class"] == "Sequential+Sequential" and len(ctx["model"]["parts"]) == 2
    assert not [n for n in d.notes if "not given" in n]
    # both optimizers' steps are timed, in every step
    assert all(ms > 0 for ms in whole_steps(d.run_dir, "optimizer_ms"))
    # and both models' parameters and both Adams' states are the step's model states
    models = job.per_step["models"]
    params = sum(p.numel() * p.element_size() for m in models for p in m.parameters())
    mem = ctx["memory"]["model"]
    assert mem["parameters"] == params and mem["optimizer_state"] >= 2 * params
    # their modules are named under each model's class and place in the list
    mods = [t["module"] for t in ctx["memory"]["top_modules"]]
    assert mods and all(m.startswith(("Sequential[0].", "Sequential[1].")) or m == OUTSIDE
                        for m in mods), mods  # a tensor the loop made outside every model


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="the thread timing needs 2 threads")
def test_a_model_whose_parts_the_loop_calls_is_timed_by_its_parts(
        tmp_path: Path, every_probe: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A LightningModule's shape: ``training_step`` calls ``self.head(self.net(x))``, never
    the module's forward. Each part's calls from outside it are the loop's forward, and the
    thread timing (the probes after the loop, here put back) replays the parts on their
    first inputs (a new user's Lightning run had no thread timing: CF008 untold)."""
    import diagnose.session.after_loop as after_loop
    import diagnose.session.lifecycle as lifecycle

    monkeypatch.setattr(lifecycle, "time_after_loop", after_loop.time_after_loop)
    job = make_parts_called()
    d = run(job, tmp_path, job.model, job.loader)
    assert all(ms > 0 for ms in whole_steps(d.run_dir, "forward_ms"))
    threads = load_context(d.run_dir)["threads"]
    assert threads is not None and threads["models"] == 2, threads
    assert threads["work_ms"] > 0 and threads["work_1thread_ms"] > 0


def test_gan_with_no_model_given(tmp_path: Path) -> None:
    job = make_gan()
    d = run(job, tmp_path, None, job.loader)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "batches")) == {1}
    ctx = load_context(d.run_dir)
    assert len(ctx["optimizers"]) == 2 and ctx["model"]["found"] is True


def test_batches_sliced_from_tensors_with_one_optimizer(tmp_path: Path) -> None:
    job = make_sliced()
    d = run(job, tmp_path, job.model)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "forwards")) == {1}
    # its steps start at the model's call, inside it: one step's memory is tracked from
    # one optimizer step to the next instead, without d.step()
    mem = load_context(d.run_dir)["memory"]
    params = sum(p.numel() * p.element_size() for p in job.model.parameters())
    assert mem["model"]["parameters"] == params
    assert mem["model"]["optimizer_state"] == params  # SGD's momentum buffers
    assert not [n for n in d.notes if "no step's memory was tracked" in n]


def test_reinforce_an_episode_of_policy_calls_then_one_update(tmp_path: Path) -> None:
    job = make_reinforce()
    d = run(job, tmp_path, job.model)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "forwards")) == {job.per_step["forwards"]}


def test_contrastive_two_views_two_model_calls(tmp_path: Path) -> None:
    job = make_contrastive()
    d = run(job, tmp_path, job.model, job.loader)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "batches")) == {1}
    assert set(whole_steps(d.run_dir, "forwards")) == {2}


def test_hugging_face_style_dict_batches(tmp_path: Path) -> None:
    job = make_hf()
    d = run(job, tmp_path, job.model, job.loader)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "batches")) == {1}
    assert all(b > 0 for b in whole_steps(d.run_dir, "batch_bytes"))  # the dict's tensors


def test_gradient_accumulation_one_step_per_optimizer_step(tmp_path: Path) -> None:
    job = make_accum(k=4)
    d = run(job, tmp_path, job.model, job.loader)
    assert d.step_mode == "optimizer"
    assert set(whole_steps(d.run_dir, "batches")) == {4}
    assert set(whole_steps(d.run_dir, "forwards")) == {4}
    phases = load_context(d.run_dir)["capture"]["step_clock"]["phase"]
    assert "untold" not in phases  # no batch was taken for a step on the way


def test_evaluation_first_then_training_starts_the_wait_over(tmp_path: Path) -> None:
    """Batches without backward look like inference; once the optimizer steps, the wait
    starts over and the profiled steps are whole training steps."""
    job = make_sliced()
    opt = torch.optim.SGD(job.model.parameters(), lr=0.01)
    batches = [(torch.randn(16, 32), torch.randint(0, 10, (16,))) for _ in range(200)]
    from torch.utils.data import DataLoader

    loader = DataLoader(batches, batch_size=None)
    with diagnose(job.model, loader, out_dir=tmp_path, **PLAN) as d:
        for i, (x, y) in enumerate(loader):
            if i < 1:  # a quick evaluation first
                with torch.no_grad():
                    job.model(x)
                continue
            torch.nn.functional.cross_entropy(job.model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if d.done:
                break
    assert d.done and d.step_mode == "optimizer"
    clock = load_context(d.run_dir)["capture"]["step_clock"]
    # a step on a batch alone, then the step in which the optimizer first stepped; then
    # the wait again
    assert clock["phase"][:6] == ["untold"] * 2 + ["wait"] * 2 + ["warmup", "active"]
    active = [i for i, p in enumerate(clock["phase"]) if p == "active"]
    assert len(active) == 3 and len(profiled_steps(d.run_dir)) == 3
    assert {clock["batches"][i] for i in active} == {1}
    assert not [n for n in d.notes if "may not be whole" in n]


def test_inference_without_a_loader_steps_on_model_calls(tmp_path: Path) -> None:
    job = make_sliced()
    x = torch.randn(16, 32)
    with diagnose(job.model, out_dir=tmp_path, **PLAN) as d, torch.no_grad():
        for _ in range(500):
            job.model(x)
            if d.done:
                break
    assert d.done and d.step_mode == "forward"
    assert len(profiled_steps(d.run_dir)) == 3
