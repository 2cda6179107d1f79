"""A live capture tracks one of the loop's own steps in place (diagnose/memory/inplace.py):
the report's ``memory`` section, by kind and module, on a CPU MLP with a real DataLoader;
the user's training is left exactly as it would have run; ``memory=False`` turns it off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
from diagnose.session import diagnose  # noqa: E402

IN, HID, OUT, BATCH = 32, 64, 4, 16
#: Linear(32, 64) and Linear(64, 4) with biases, float32
PARAM_BYTES = (IN * HID + HID + HID * OUT + OUT) * 4
#: AdamW: exp_avg and exp_avg_sq per parameter, a float32 step per tensor (4 tensors)
ADAMW_STATE_BYTES = 2 * PARAM_BYTES + 4 * 4
#: a batch: float32 inputs and int64 targets
BATCH_BYTES = BATCH * IN * 4 + BATCH * 8
SCHEDULE = {"steps": 2, "warmup": 0, "wait": 1, "clock_steps": 2, "sample_hz": 0,
            "print_report": False}


@pytest.fixture(autouse=True)
def _planned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact step counts: no extra steps timed on a busy machine."""
    monkeypatch.setattr(steps_mod, "EXTEND", 1)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 1)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 1)


def _job(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(BATCH * 12, IN, generator=g),
                         torch.randint(0, OUT, (BATCH * 12,), generator=g))
    return model, opt, DataLoader(data, batch_size=BATCH, num_workers=0)


def _train(model: nn.Module, opt: Any, loader: DataLoader, d: Any = None) -> None:
    for x, y in loader:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if d is not None and d.done:
            break


def _run(tmp_path: Path, **kw: Any) -> tuple[Any, nn.Module, Any]:
    model, opt, loader = _job()
    with diagnose(model, loader, out_dir=tmp_path, **SCHEDULE, **kw) as d:
        _train(model, opt, loader, d)
    return d, model, opt


def test_a_live_capture_reports_the_steps_memory_by_kind(tmp_path: Path) -> None:
    d, _, _ = _run(tmp_path)
    mem = d.report.to_json()["memory"]
    assert mem["source"] == "tracker" and mem["measured"].startswith("the loop's own step")
    kinds = mem["by_kind"]
    assert sum(kinds.values()) == mem["peak_bytes"]  # the tracker's count, CPU: nothing else
    assert mem["model"]["parameters"] == PARAM_BYTES
    assert mem["model"]["optimizer_state"] == ADAMW_STATE_BYTES
    assert kinds["parameters"] == PARAM_BYTES and kinds["optimizer_state"] == ADAMW_STATE_BYTES
    assert mem["batch_size"] == BATCH and mem["batch_bytes"] == BATCH_BYTES
    # the loader's work is not the step's: the batch is "other", the dataset is not counted
    assert max(p["other"] for p in mem["timeline"]["points"]) == BATCH_BYTES
    assert mem["step"] == {"amp_dtype": None, "set_to_none": True, "micro_batches": 1}
    assert {m["module"] for m in mem["top_modules"]} >= {"1"}  # the ReLU's saved output
    assert {tuple(w["change"]) for w in mem["what_if"]} >= {("batch_size",)}
    assert all(w["range"][1] >= w["peak_bytes"] for w in mem["what_if"])
    assert mem["kept_after_step"] == {"bytes": 0, "modules": []}  # backward freed its graph
    assert "ME005" not in {f.rule for f in d.report.findings}
    text = d.report.render_text(width=140)
    assert "Memory" in text and "what-ifs" in text
    # the HTML page shows the same section (a new user found it only in the console)
    page = (d.run_dir / "report.html").read_text()
    assert 'id="memory"' in page and "Memory what-ifs" in page and "batch_size" in page
    ctx = json.loads((d.run_dir / "context.json").read_text())
    assert ctx["memory"]["peak_bytes"] == mem["peak_bytes"]
    phases = ctx["capture"]["step_clock"]["phase"]
    assert phases.count("settle") == 1  # the tracked step: untimed


def test_a_graph_kept_past_its_step_is_found(tmp_path: Path) -> None:
    """A new user's loop kept a forward's output each step with autograd on (an
    'evaluation' outside torch.no_grad()): 8 MiB a step, and the report said nothing. The
    tracked step's saved tensors still alive as it ends are that graph: ME005, with the
    module that made them."""
    model, opt, loader = _job()
    kept: list[Any] = []
    with diagnose(model, loader, out_dir=tmp_path, **SCHEDULE) as d:
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            kept.append(model(x))  # the leak: its graph lives on
            opt.step()
            opt.zero_grad()
            if d.done:
                break
    after = d.report.to_json()["memory"]["kept_after_step"]
    # the first Linear saves its input (the batch's own: not an activation), the ReLU its
    # output, the second Linear the ReLU's output: a batch of 64 float32, counted once
    assert after["bytes"] == BATCH * HID * 4 and after["modules"][0]["module"] == "1"
    (f,) = [f for f in d.report.findings if f.rule == "ME005"]
    assert f.severity == "warning" and f.fixes == ["release_graphs"]
    assert "ReLU" in f.message and "grows by that much a step" in " ".join(f.hints)


def test_an_activation_the_loop_still_names_is_no_graph(tmp_path: Path) -> None:
    """A new user's loop kept its hidden activation in a variable past the step (``h``,
    saved for backward by the head; backward freed the graph): that is the loop's own
    variable, not a graph outliving its step, so no ME005; nor is a forward whose output is
    dropped unused (a review found that one reported: the saved output held its grad_fn).
    The same loop that also keeps such an output with its graph is one."""
    for leak in (False, True):
        model, opt, loader = _job()
        body, head = model[:2], model[2:]
        kept: list[Any] = []
        with diagnose(model, loader, out_dir=tmp_path / str(leak), **SCHEDULE) as d:
            for x, y in loader:
                h = body(x)
                nn.functional.cross_entropy(head(h), y).backward()
                model(x).argmax(-1)  # a graph made and dropped at once: none is kept
                if leak:
                    kept.append(head(h))
                opt.step()
                opt.zero_grad()
                if d.done:
                    break
        assert h.grad_fn is not None  # still named by the loop, its graph freed
        after = d.report.to_json()["memory"]["kept_after_step"]
        me005 = [f for f in d.report.findings if f.rule == "ME005"]
        if leak:  # the second Linear saved the ReLU's output again, in a graph kept
            assert after["bytes"] == BATCH * HID * 4 and len(me005) == 1
        else:
            assert after == {"bytes": 0, "modules": []} and not me005


def test_the_users_training_is_left_as_it_would_have_run(tmp_path: Path) -> None:
    """The same loop over the same batches, with and without diagnose(): the same weights
    and optimizer state, to the bit (the tracked step is the loop's own, run once)."""
    model, opt, loader = _job()
    _train(model, opt, loader)
    tracked, topt, tloader = _job()
    with diagnose(tracked, tloader, out_dir=tmp_path, loss_fn=nn.functional.cross_entropy,
                  **SCHEDULE) as d:
        _train(tracked, topt, tloader)  # on to the loader's end, past d.done
    mem = d.report.to_json()["memory"]
    assert mem["what_if"][0]["method"] == "re-run under FakeTensorMode"
    for p, q in zip(model.parameters(), tracked.parameters(), strict=True):
        assert torch.equal(p, q)
    s1, s2 = opt.state_dict()["state"], topt.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"]) for k in s1)


def test_memory_off_tracks_nothing(tmp_path: Path) -> None:
    d, _, _ = _run(tmp_path, memory=False)
    assert d.report.to_json().get("memory") is None
    ctx = json.loads((d.run_dir / "context.json").read_text())
    assert "memory" not in ctx


def test_a_loop_that_slices_its_batches_is_tracked_at_d_step(tmp_path: Path) -> None:
    """No DataLoader: ``d.step()`` marks the steps; the slices of the data tensor held in
    memory are not counted as the step's (they share its storage)."""
    model, opt, _ = _job()
    xs, ys = torch.randn(BATCH * 100, IN), torch.randint(0, OUT, (BATCH * 100,))
    with diagnose(model, None, out_dir=tmp_path, **SCHEDULE) as d:
        for i in range(12):
            x, y = xs[i * BATCH:(i + 1) * BATCH], ys[i * BATCH:(i + 1) * BATCH]
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            d.step()
            if d.done:
                break
    mem = d.report.to_json()["memory"]
    assert mem["batch_size"] == BATCH
    # the data tensor (200 KB) is not in the step's count, its slices are not the step's
    assert max(p["activations"] + p["other"] for p in mem["timeline"]["points"]) < 20_000
    assert mem["by_kind"]["optimizer_state"] == ADAMW_STATE_BYTES


#: the CPU allocator's error, as torch 2.x raises it (a RuntimeError, not OutOfMemoryError)
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
           "allocate memory: you tried to allocate 2097152 bytes. Error code 12 (Cannot "
           "allocate memory)")


@pytest.mark.parametrize("error", [
    torch.OutOfMemoryError("out of memory: Tried to allocate 2.00 MiB"),
    RuntimeError(CPU_OOM)], ids=["device", "cpu_allocator"])
def test_an_out_of_memory_error_in_the_tracked_step_is_explained(tmp_path: Path,
                                                                 error: Exception) -> None:
    """A device's error and the CPU allocator's (a new user's CPU job got no explanation:
    the tracker's test read "out of memory" only)."""
    model, opt, loader = _job()
    with pytest.raises(type(error)), \
            diagnose(model, loader, out_dir=tmp_path, **SCHEDULE) as d:
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            if d._hooks is not None and d._hooks.memory.state == "tracking":
                raise error
            opt.step()
            opt.zero_grad()
    mem = d.report.to_json()["memory"]
    assert mem["oom"]["requested_bytes"] == 2 * 2**20
    assert mem["oom"]["phase"] in ("forward", "backward")
    assert mem["oom"]["by_kind"]["parameters"] == PARAM_BYTES
    assert "oom_explanation" in mem
