"""Trainer callbacks: a real Lightning ``Trainer.fit`` and a real Hugging Face ``Trainer.train``
on tiny CPU models, each with ``DiagnoseCallback``, over a real DataLoader whose per-sample
transform does real CPU work (num_workers=0), so the job is input-bound.

The callbacks must name the input bottleneck (IN001, category ``input``), leave a run folder
with a trace, print one report (on rank 0), write into the trainer's TensorBoard folder,
close on errors, and never change what is learned (same losses and weights under a seed).

This file is also the script Lightning's DDP launcher runs on two CPU ranks
(``--lightning-ddp OUT_DIR``; Lightning starts rank 1 by running it again).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # run as the DDP script: import this checkout's diagnose and tests
    sys.path.insert(0, str(REPO))

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.optim import optimizer as optim_mod  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
import diagnose.session.lifecycle as session_mod  # noqa: E402
from diagnose.errors import CaptureError, DiagnoseError  # noqa: E402

ORIGINAL_NEXT = _BaseDataLoaderIter.__next__


@pytest.fixture(autouse=True)
def _planned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step counts here are exact: no extra steps timed when a busy machine makes them vary
    (tests/test_step_clock.py tests that extension on its own)."""
    monkeypatch.setattr(steps_mod, "EXTEND", 1)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 1)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 1)
DIM, CLASSES, VOCAB, SEQ = 16, 3, 64, 8
STEPS, MAX_STEPS = 3, 7  # profiled steps (after wait=1, warmup=1), steps trained


class SlowFeatures(Dataset):
    """Seeded random vectors whose ``__getitem__`` runs a real CPU transform (about a
    millisecond per sample: a few dozen small matrix products), as decoding and
    augmentation do. ``tokens=True`` gives Hugging Face style dicts (token ids + labels)."""

    def __init__(self, n: int = 192, tokens: bool = False, rounds: int = 40) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, DIM, generator=g)
        self.y = torch.randint(0, CLASSES, (n,), generator=g)
        self.w = torch.randn(DIM, DIM, generator=g) / DIM**0.5
        self.tokens = tokens
        self.rounds = rounds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        x = self.x[i]
        for _ in range(self.rounds):
            x = torch.tanh(x @ self.w + 0.1)
        if not self.tokens:
            return x, self.y[i]
        ids = (x[:SEQ].abs() * 997).long() % VOCAB
        return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.y[i]}


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """One intra-op thread: on a busy 2-core machine the pool's barrier made the tiny BERT's
    steps swing between 7 and 500 ms (its small matmuls wait for a descheduled thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_context(run_dir: Path) -> dict[str, Any]:
    """The run folder's context.json (read here: the run folder module may move)."""
    return json.loads((Path(run_dir) / "context.json").read_text())


def trace_files(run_dir: Path) -> list[Path]:
    return sorted(Path(run_dir).glob("*.pt.trace.json.gz"))


def assert_clean() -> None:
    """No DataLoader patch, optimizer hook, sampler thread or open session left behind."""
    assert _BaseDataLoaderIter.__next__ is ORIGINAL_NEXT
    assert not any(t.name == "diagnose-samplers" for t in threading.enumerate())
    assert session_mod._active is None


def assert_input_bound(cb: Any) -> None:
    """The report names the DataLoader as the bottleneck, and the run folder holds a trace.
    IN001's severity is the time its best fix is predicted to save (num_workers=2 beside
    torch's one thread), which a busy 2-CPU host can read as none: the finding itself, and
    no other input rule above info, is what the callback must give."""
    report = cb.report
    assert report is not None, cb.session.notes
    found = [(f.rule, f.severity) for f in report.findings]
    assert "IN001" in [f.rule for f in report.findings if f.category == "input"], found
    assert [f.rule for f in report.at_least("warning") if f.category == "input"] in (
        [], ["IN001"]), found
    assert report.metrics["dataloader_share"] >= 0.10
    assert cb.run_dir is not None and cb.run_dir.is_dir()
    assert len(trace_files(cb.run_dir)) == 1
    capture = load_context(cb.run_dir)["capture"]
    assert capture["step_mode"] == "manual"
    assert capture["window_complete"] is True
    assert capture["batches"] >= 1 + 1 + STEPS  # the session saw the loader the trainer iterates
    assert (cb.run_dir / "report.html").is_file()


TRAINERS = ["lightning", "transformers"]


def callback(kind: str, tmp_path: Path, **kw: Any) -> Any:
    mod = pytest.importorskip(f"diagnose.integrations.{kind}")
    return mod.DiagnoseCallback(steps=STEPS, out_dir=tmp_path / "runs", **kw)


def train(kind: str, tmp_path: Path, callbacks: list[Any], **kw: Any) -> tuple[Any, list[Any]]:
    """Lightning ``fit`` or Hugging Face ``train``: the trained model and its losses."""
    if kind == "lightning":
        module = lightning_fit(callbacks, **kw)
        return module, module.losses
    return hf_train(tmp_path, callbacks, **kw)


# ------------------------------------------------------------------------------ Lightning
def lightning_module(fail_at: int | None = None) -> Any:
    L = pytest.importorskip("lightning.pytorch")

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Dropout(0.1),
                                     nn.Linear(32, CLASSES))
            self.losses: list[torch.Tensor] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if fail_at is not None and batch_idx == fail_at:
                raise RuntimeError("planted failure in training_step")
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.losses.append(loss.detach().clone())
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    return Classifier()


def lightning_fit(callbacks: list[Any], *, logger: Any = False, fail_at: int | None = None,
                  max_steps: int = MAX_STEPS, **trainer_kw: Any) -> Any:
    """A seeded Trainer.fit of a tiny classifier; returns the trained module."""
    L = pytest.importorskip("lightning.pytorch")
    L.seed_everything(0, verbose=False)
    module = lightning_module(fail_at)
    loader = DataLoader(SlowFeatures(), batch_size=16, shuffle=True, num_workers=0)
    trainer_kw.setdefault("devices", 1)
    trainer = L.Trainer(max_steps=max_steps, callbacks=callbacks, logger=logger,
                        accelerator="cpu", enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        **trainer_kw)
    trainer.fit(module, loader)
    return module


def test_lightning_writes_into_the_tensorboard_loggers_log_dir(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    L = pytest.importorskip("lightning.pytorch")
    logger = L.loggers.TensorBoardLogger(str(tmp_path / "tb"), name="exp")
    cb = callback("lightning", tmp_path, print_report=False)
    lightning_fit([cb], logger=logger)
    tb = cb.session.tensorboard_dir
    assert tb is not None, cb.session.notes
    assert Path(tb).parent == Path(logger.log_dir)
    assert list(Path(tb).glob("events.out.tfevents.*"))
    assert list(Path(tb).rglob("*.pt.trace.json.gz"))  # the trace, for the profiler plugin


def test_lightning_memory_runs_forward_and_backward_inside_the_closure(tmp_path: Path) -> None:
    """Lightning runs the step's forward and backward inside optimizer.step(closure): the
    tracked step's activations are the forward's and its peak is not the optimizer's (a new
    user's CNN read "peak in optimizer: temporaries 95%", activations 0)."""
    cb = callback("lightning", tmp_path, print_report=False)
    lightning_fit([cb], max_steps=16)
    mem = load_context(cb.run_dir).get("memory")
    assert mem is not None, cb.session.notes
    assert mem["by_kind"]["activations"] > 0 and mem["peak_phase"] != "optimizer", mem
    assert {"forward", "backward", "optimizer"} <= set(mem["phases"]), mem


def test_lightning_exception_closes_the_session(tmp_path: Path) -> None:
    hooks_before = dict(optim_mod._global_optimizer_post_hooks)
    cb = callback("lightning", tmp_path, print_report=False)
    with pytest.raises(RuntimeError, match="planted failure"):
        lightning_fit([cb], fail_at=3)  # inside the window (wait 1, warmup 1, steps 3)
    assert_clean()
    assert dict(optim_mod._global_optimizer_post_hooks) == hooks_before
    ctx = load_context(cb.run_dir)
    assert ctx["exception"]["type"] == "RuntimeError"
    assert ctx["capture"]["window_complete"] is False


def test_lightning_callback_is_a_callback_of_both_packages(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning.pytorch")
    cb = callback("lightning", tmp_path)
    assert isinstance(cb, L.Callback)
    try:
        import pytorch_lightning
    except ImportError:
        return
    assert isinstance(cb, pytorch_lightning.Callback)


# ------------------------------------------------------------------------ Hugging Face
def hf_model() -> Any:
    """A tiny BERT built from a config (a few thousand parameters; nothing is downloaded)."""
    tf = pytest.importorskip("transformers")
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=SEQ, num_labels=CLASSES)
    return tf.BertForSequenceClassification(cfg)


def hf_train(tmp_path: Path, callbacks: list[Any], *, report_to: Any = "none",
             fail_at: int | None = None) -> tuple[Any, list[torch.Tensor]]:
    """A seeded Trainer.train of the tiny BERT; returns the model and its per-step losses."""
    tf = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    tf.set_seed(0)
    model = hf_model()
    losses: list[torch.Tensor] = []

    def record(module: Any, args: Any, out: Any) -> None:
        if fail_at is not None and len(losses) == fail_at:
            raise RuntimeError("planted failure in forward")
        losses.append(out.loss.detach().clone())

    model.register_forward_hook(record)
    args = tf.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=MAX_STEPS, per_device_train_batch_size=16,
        learning_rate=1e-2, report_to=report_to, use_cpu=True, dataloader_num_workers=0,
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0)
    trainer = tf.Trainer(model=model, args=args, train_dataset=SlowFeatures(tokens=True),
                         callbacks=callbacks)
    trainer.train()
    return model, losses


def test_hf_writes_into_the_trainers_tensorboard_folder(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    cb = callback("transformers", tmp_path, print_report=False)
    hf_train(tmp_path, [cb], report_to=["tensorboard"])
    tb = cb.session.tensorboard_dir
    assert tb is not None, cb.session.notes
    runs = tmp_path / "out" / "runs"
    assert Path(tb).parent in {runs, *runs.glob("*")}  # transformers 5 / 4 (logging_dir)
    assert list(Path(tb).glob("events.out.tfevents.*"))
    # the trainer's own TensorBoard run is in the same folder tree
    assert [p for p in runs.rglob("events.out.tfevents.*") if Path(tb) not in p.parents]


def test_hf_exception_inside_the_window_then_close(tmp_path: Path) -> None:
    """No exception hook in TrainerCallback (the documented limit): the session stays open
    until close() (or the next train()); close() removes everything and keeps the trace."""
    cb = callback("transformers", tmp_path, print_report=False)
    with pytest.raises(RuntimeError, match="planted failure"):
        hf_train(tmp_path, [cb], fail_at=3)
    assert session_mod._active is cb.session  # still open: nothing ended it
    cb.close()
    assert_clean()
    assert load_context(cb.run_dir)["capture"]["window_complete"] is False
    cb.close()  # idempotent


def test_hf_next_train_closes_a_session_left_open(tmp_path: Path) -> None:
    cb = callback("transformers", tmp_path, print_report=False)
    with pytest.raises(RuntimeError, match="planted failure"):
        hf_train(tmp_path / "a", [cb], fail_at=2)
    first = cb.session
    hf_train(tmp_path / "b", [cb])
    assert cb.session is not first and first.run_dir != cb.run_dir
    assert load_context(first.run_dir)["capture"]["window_complete"] is False
    assert cb.report is not None
    assert_clean()


# ------------------------------------------------------------------------------- both
@pytest.mark.parametrize("kind", TRAINERS)
def test_trainer_names_the_input_bottleneck(kind: str, tmp_path: Path, capfd: Any) -> None:
    cb = callback(kind, tmp_path)
    # the trainer's own first import (seconds, more on a busy host) is not the callback's
    if kind == "lightning":
        pytest.importorskip("lightning.pytorch").Trainer  # noqa: B018
    else:
        tf = pytest.importorskip("transformers")  # lazy: the attributes import the trainer
        pytest.importorskip("accelerate")
        tf.Trainer, tf.TrainingArguments, tf.BertForSequenceClassification  # noqa: B018
    t0 = time.perf_counter()
    train(kind, tmp_path, [cb])
    took = time.perf_counter() - t0
    assert_input_bound(cb)
    assert_clean()
    # the report writes a fix in the trainer's own settings: a Trainer user never wrote
    # the DataLoader call (a Lightning user did, in train_dataloader())
    assert load_context(cb.run_dir)["trainer"] == kind
    (in001,) = [f for f in cb.report.findings if f.rule == "IN001"]
    code = in001.fix_code.get("num_workers", "")
    assert ("TrainingArguments(" in code) == (kind == "transformers"), code
    err = capfd.readouterr().err
    assert err.count("torch-diagnose: run folder") == 1  # the report, printed once
    # a few seconds here; a callback that hung or slept out a timeout would take far longer
    assert took < 120, f"{kind}: training with the callback took {took:.1f} s"


@pytest.mark.parametrize("kind", TRAINERS)
def test_training_results_unchanged(kind: str, tmp_path: Path) -> None:
    plain, plain_losses = train(kind, tmp_path / "a", [])
    cb = callback(kind, tmp_path, print_report=False)
    profiled, losses = train(kind, tmp_path / "b", [cb])
    assert cb.report is not None
    assert len(plain_losses) == len(losses) == MAX_STEPS
    assert torch.equal(torch.stack(plain_losses), torch.stack(losses))
    for (name, a), b in zip(plain.state_dict().items(), profiled.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("module", TRAINERS)
def test_options_are_the_sessions(module: str, tmp_path: Path) -> None:
    mod = pytest.importorskip(f"diagnose.integrations.{module}")
    with pytest.raises(CaptureError, match="steps >= 1"):
        mod.DiagnoseCallback(steps=0)
    # named as the user's own call (not the Session's), and a count given as text
    with pytest.raises(TypeError, match=r"^DiagnoseCallback\(\): no option 'stepz' \(did you "
                                        r"mean 'steps'\?\)"):
        mod.DiagnoseCallback(stepz=3)
    with pytest.raises(CaptureError, match="steps='5': need whole numbers"):
        mod.DiagnoseCallback(steps="5")
    with pytest.raises(DiagnoseError, match="come from the trainer"):
        mod.DiagnoseCallback(loader=[])


@pytest.mark.parametrize(("module", "blocked", "extra"), [
    ("lightning", ("lightning", "lightning.pytorch", "pytorch_lightning"), "lightning"),
    ("transformers", ("transformers",), "transformers"),
])
def test_missing_trainer_names_the_extra(module: str, blocked: tuple[str, ...], extra: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnose.integrations._common import MissingExtraError

    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    monkeypatch.delitem(sys.modules, f"diagnose.integrations.{module}", raising=False)
    with pytest.raises(MissingExtraError) as e:
        importlib.import_module(f"diagnose.integrations.{module}")
    assert f"pip install 'torch-diagnose[{extra}]'" in str(e.value)
    assert isinstance(e.value, ImportError) and isinstance(e.value, DiagnoseError)
    assert "\n" not in str(e.value)


def test_rank_zero_prints_other_ranks_do_not(tmp_path: Path, capfd: Any) -> None:
    """The rank test without a process group: the shared capture prints only where the
    trainer says this is rank 0, and every rank keeps its report."""
    from diagnose.integrations._common import TrainerCapture

    reports = []
    for rank_zero in (False, True):
        cap = TrainerCapture("test", {"steps": 2, "warmup": 0, "wait": 0, "clock_steps": 4,
                                      "out_dir": tmp_path, "sample_hz": 0})
        model = nn.Linear(DIM, CLASSES)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        # 2 profiled steps, 1 settling, then 4 timed without the profiler (and 8 after a
        # fork where the clock so far says a worker finding may warn): it closes itself
        loader = DataLoader(SlowFeatures(384, rounds=1), batch_size=16)
        cap.begin(model, loader, rank_zero=rank_zero, logdir=None)
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            cap.step()
            if not cap.open:
                break
        assert not cap.open
        reports.append(cap.report)
        err = capfd.readouterr().err
        assert err.count("torch-diagnose: run folder") == (1 if rank_zero else 0)
    assert all(r is not None for r in reports)
    assert_clean()


# ------------------------------------------------------------------------ Lightning DDP
def ddp_worker(out: str) -> None:
    """Two CPU ranks (gloo): Lightning starts rank 1 by running this file again."""
    import contextlib
    import io

    from diagnose.integrations.lightning import DiagnoseCallback

    torch.set_num_threads(1)
    cb = DiagnoseCallback(steps=STEPS, out_dir=out)
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        lightning_fit([cb], strategy="ddp", devices=2, max_steps=MAX_STEPS)
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    report = cb.report
    Path(out, f"result{rank}.json").write_text(json.dumps({
        "printed": buf.getvalue().count("torch-diagnose: run folder"),
        "run_dir": str(cb.run_dir),
        "ranks": None if report is None else sorted(r.rank for r in report.ranks),
        "findings": [] if report is None else [(f.rule, f.category, f.severity)
                                               for f in report.findings],
    }))


@pytest.mark.slow
def test_lightning_ddp_two_cpu_ranks(tmp_path: Path) -> None:
    pytest.importorskip("lightning.pytorch")
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--lightning-ddp",
                           str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)
    took = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0 = json.loads((tmp_path / "result0.json").read_text())
    r1 = json.loads((tmp_path / "result1.json").read_text())
    assert (r0["printed"], r1["printed"]) == (1, 0)  # one report, from global rank 0
    assert r0["run_dir"] == r1["run_dir"]  # one run folder for both ranks
    assert r0["ranks"] == [0, 1]  # rank 0's report covers both ranks
    assert r1["ranks"] == [1]
    assert ("IN001", "input") in [tuple(f[:2]) for f in r0["findings"]]
    assert len(trace_files(Path(r0["run_dir"]))) == 2
    print(f"Lightning DDP (2 CPU ranks) took {took:.1f} s")


if __name__ == "__main__" and sys.argv[1:2] == ["--lightning-ddp"]:
    ddp_worker(sys.argv[2])
