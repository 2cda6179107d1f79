"""``torch-diagnose tensorboard RUN`` on a watched run's folder: a real watch over a real
loop, written as scalars by step (bucket medians), the summary as text and the timeline
plot for the Diagnose tab, served by a real TensorBoard; the tab's run list gives a
watched run's alarms (their count, the worst)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
torch = pytest.importorskip("torch")

from diagnose import watch  # noqa: E402
from diagnose.cli import main  # noqa: E402
from diagnose.report.tb_plugin.runfile import RUN_FILE  # noqa: E402
from diagnose.report.tb_watch import POINTS  # noqa: E402
from diagnose.report.tensorboard import _free_port, stop_process  # noqa: E402
from diagnose.watching import read_timeline  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.datasets import train  # noqa: E402
from tests.report.test_tb_plugin import BASE, HOST, LAUNCH, fetch, plugin_for, route  # noqa: E402
from tests.report.test_tensorboard import (  # noqa: E402
    assert_gone,
    descendants,
    get_json,
    poll,
    read_events,
)
from tests.watching.test_analyze_watched import _run as timeline_run  # noqa: E402


def _watched(tmp_path: Path, steps: int = 3000) -> Path:
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    done = 0
    with watch(model, loader, out_dir=tmp_path / "runs", baseline=False, max_captures=0,
               sample_hz=20, print_summary=False, progress_s=None) as w:
        while done < steps:  # epoch after epoch, the user's plain loop
            done += train(model, opt, loader, limit=steps - done)
    assert w.run_dir is not None
    return Path(w.run_dir)


def _alarmed(tmp_path: Path, severity: str, *, two: bool = True) -> Path:
    """A watched run's folder written by the timeline's own writer: one alarm (``two``: two
    of one change), its capture's report finding IN001 at ``severity``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    run = timeline_run(tmp_path, end=True, second_signal=two)
    (run / "captures" / "002-step600-step_time" / "report.json").write_text(json.dumps(
        {"findings": [{"rule": "IN001", "severity": severity, "title": "waits on the loader"},
                      {"rule": "CF001", "severity": "info", "title": "cudnn.benchmark"}]}))
    return run


def test_a_watched_runs_list_entry_says_its_alarms(tmp_path: Path) -> None:
    """A new user's trial: a watched run that raised an alarm was listed as `worst: null,
    counts: {}` (an "ok" badge). Each alarm counts at its capture's worst finding's
    severity, at least a warning; a run written before the severities were: warnings."""
    logs = tmp_path / "logs"
    for name, severity, two in (("critical", "critical", True), ("quiet", "info", False)):
        run = _alarmed(tmp_path / name, severity, two=two)
        assert main(["tensorboard", str(run), "--logdir", str(logs), "--run", name]) == 0
    doc = json.loads((logs / "critical" / RUN_FILE).read_text())
    assert doc["report"]["watched"]["alarm_severities"] == ["critical", "critical"]
    del doc["report"]["watched"]["alarm_severities"]
    (logs / "older").mkdir()
    (logs / "older" / RUN_FILE).write_text(json.dumps(doc))
    plugin = plugin_for(logs)
    runs = {r["run"]: r for r in route(plugin, "/runs")[1]}
    got = {n: (r["worst"], r["counts"], r["alarms"]) for n, r in runs.items()}
    assert got == {"critical": ("critical", {"critical": 2}, 2),
                   "quiet": ("warning", {"warning": 1}, 1),
                   "older": ("warning", {"warning": 2}, 2)}
    assert runs["critical"]["headline"].startswith("A watched run: 2 alarms")
    status, view = route(plugin, "/run", run="critical")
    assert status == 200 and (view["worst"], view["alarms"]) == ("critical", 2)
    assert view["findings"] == []  # the captures' findings are runs of their own


def _scalars(run: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[str]]]:
    scal, text = read_events(run)
    return {t: [(s, v) for s, _, v in pts] for t, pts in scal.items()}, text


@pytest.mark.slow
def test_a_watched_run_becomes_a_tensorboard_run_with_its_timeline(tmp_path: Path) -> None:
    run_dir = _watched(tmp_path)
    logs = tmp_path / "logs"
    alarmed = _alarmed(tmp_path / "alarmed", "critical")
    assert main(["tensorboard", str(alarmed), "--logdir", str(logs), "--run", "alarmed"]) == 0
    assert main(["tensorboard", str(run_dir), "--logdir", str(logs), "--run", "watched"]) == 0
    out = logs / "watched"
    sc, text = _scalars(out)
    assert "steps" in text["watch"][0] and "alarms:" in text["watch"][0]
    steps = sc["watch/step_ms"]
    assert 1000 < len(steps) <= POINTS and steps[0][0] == 0 and steps[-1][0] >= 2990
    assert all(v > 0 for _, v in steps) and "watch/loader_wait_ms" in sc
    host = [t for t in sc if t.startswith("samples/host/")]
    assert host and all(0 <= s <= 3000 for t in host for s, _ in sc[t])  # at the step taken
    doc = json.loads((out / RUN_FILE).read_text())
    assert doc["plots"]["timeline"]["svg"].startswith("<svg")
    assert doc["report"]["notes"][0].startswith("watched run: 3,000 steps")  # the last closed on exit
    # the watched run is only read; writing again needs --overwrite
    assert main(["tensorboard", str(run_dir), "--logdir", str(logs), "--run", "watched"]) == 2
    assert main(["tensorboard", str(run_dir), "--logdir", str(run_dir.parent), "--run",
                 run_dir.name]) == 2  # never into the watched run's own folder

    port = _free_port(HOST)
    with (tmp_path / "tb.log").open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(logs), HOST, str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        url = f"http://{HOST}:{port}"
        poll("TensorBoard up", lambda: get_json(f"{url}/data/plugins_listing"))
        runs = {r["run"]: r for r in get_json(f"{url}{BASE}/runs")}
        # the steady job's own alarms (none on a quiet host; a busy one's neighbours may
        # make one): the list entry counts what the run recorded
        alarms = len((read_timeline(run_dir) or {}).get("alarms") or [])
        assert runs["watched"]["alarms"] == alarms
        assert (runs["watched"]["worst"] is None) == (alarms == 0)
        if alarms == 0:
            assert runs["watched"]["counts"] == {}
        assert (runs["alarmed"]["worst"], runs["alarmed"]["counts"]) == ("critical",
                                                                         {"critical": 2})
        assert runs["alarmed"]["alarms"] == 2
        # the tab says it is a watched run, timed without the profiler (a new user's read
        # "No findings" and "as profiled (a saved trace ...)" beside 2 alarms)
        assert runs["watched"]["headline"].startswith(
            "A watched run: no alarm" if alarms == 0 else f"A watched run: {alarms} alarm")
        view = get_json(f"{url}{BASE}/run?{urllib.parse.urlencode({'run': 'watched'})}")
        step = dict(view["summary"])["step time"]
        assert "without the profiler" in step and "saved trace" not in step, step
        q = urllib.parse.urlencode
        status, ctype, svg = fetch(f"{url}{BASE}/plot?{q({'run': 'watched', 'name': 'timeline'})}")
        assert status == 200 and ctype.startswith("image/svg+xml") and svg.startswith(b"<svg")
        points = get_json(f"{url}/data/plugin/scalars/scalars?"
                          f"{q({'run': 'watched', 'tag': 'watch/step_ms'})}")
        assert len(points) > 100 and points[-1][1] >= 2990  # [wall, step, value]
    finally:
        kids = descendants(proc.pid)
        stop_process(proc)
        assert_gone(kids)
