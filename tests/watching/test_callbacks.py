"""``WatchCallback`` for Lightning and Hugging Face: a watch over the whole of ``fit`` /
``train``, each trainer step a step, closed when training ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from diagnose.watching import read_timeline  # noqa: E402
from tests.project.test_integrations import MAX_STEPS, train  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["lightning", "transformers"])
def test_watch_callback_times_every_trainer_step(kind: str, tmp_path: Path) -> None:
    mod: Any = pytest.importorskip(f"diagnose.integrations.{kind}")
    cb = mod.WatchCallback(out_dir=tmp_path / "runs", baseline=False, print_summary=False,
                           progress_s=None, sample_hz=0)
    train(kind, tmp_path, [cb])
    assert cb.watch is not None and cb.run_dir is not None
    assert cb.watch.step_mode == "manual" and cb.watch.steps == MAX_STEPS
    tl = read_timeline(cb.run_dir)
    assert tl is not None and tl["complete"] and len(tl["steps"]["ms"]) == MAX_STEPS
    assert (cb.run_dir / "watch.json").is_file() and cb.alarms == []
    cb.close()  # closed already: nothing happens
