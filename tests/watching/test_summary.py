"""The record, the text summary at the end and the progress line: at most once per
``progress_s`` (checked once a second), none when it is None."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from diagnose import watch  # noqa: E402
from diagnose.watching import Watch  # noqa: E402


def _loop(seconds: float, **kw: Any) -> Any:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
    with watch(model, loader, baseline=False, **kw) as w:
        end = time.monotonic() + seconds  # inside the watch: its start may be slow
        while time.monotonic() < end:
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(0.002)
    return w


def test_progress_lines_come_at_most_as_often_as_asked(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    w = _loop(3.2, out_dir=tmp_path, progress_s=1.5, print_summary=True)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("torch-diagnose watch: step ")]
    # the first comes at the first once-a-second check 1.5 s in; then at most one per
    # 1.5 s of the watch's own duration (~3.2 s: 2 at most, more if a slow host ran on)
    most = int(w.to_json()["duration_s"] // 1.5)
    assert 1 <= len(lines) <= most, (lines, most)
    assert " ms/step (p90 " in lines[0] and "alarms" in lines[0]
    assert f"torch-diagnose watch: {w.steps:,} steps in " in err  # the summary at the end
    assert "energy: not measured: no NVML GPU" in err


def test_no_progress_line_when_none_is_asked(tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    w = _loop(1.5, out_dir=tmp_path, progress_s=None, print_summary=False)
    assert capsys.readouterr().err == ""
    rec = json.loads(json.dumps(w.to_json()))  # plain JSON, no numpy or objects
    assert rec["steps"] == w.steps and rec["step_mode"] == "optimizer"
    assert rec["settings"]["detector"]["step_time"]["h"] == 10.0
    assert (Path(w.run_dir) / "watch.json").exists()
    assert w.summary().startswith("torch-diagnose watch: ")


def test_diagnose_watch_is_the_function(tmp_path: Path) -> None:
    import diagnose

    assert callable(diagnose.watch) and isinstance(diagnose.watch(None, None), Watch)
    with pytest.raises(Exception, match="one `with` block"):
        w = Watch(out_dir=tmp_path, print_summary=False, sample_hz=0)
        with w:
            pass
        with w:
            pass


@pytest.mark.parametrize("steps", [1, 5, 8, 13])
def test_n_optimizer_steps_are_n_steps(tmp_path: Path, steps: int) -> None:
    """A loop that breaks after its N-th optimizer step (or runs out of batches) has taken
    N steps: the last one's boundary waits for a batch that never comes, and the watch
    closes it on exit; the record and the timeline say N too."""
    from diagnose.watching import read_timeline

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=4)
    with watch(model, loader, out_dir=tmp_path, baseline=False, print_summary=False,
               progress_s=None) as w:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i + 1 == steps:
                break
    n = min(steps, 10)  # 10 batches: 13 runs the loader out
    assert w.steps == n and w.to_json()["steps"] == n
    tl = read_timeline(w.run_dir)
    assert tl is not None and len(tl["steps"]["ms"]) == n
