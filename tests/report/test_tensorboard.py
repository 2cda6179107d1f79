"""`torch-diagnose tensorboard`: the log dir it writes, the adapted trace, and a real TensorBoard.

The server tests start ``python -m tensorboard.main`` on 127.0.0.1 (a free port) over a log
directory the tool wrote, and read what the torch-tb-profiler plugin and the scalars and
text plugins serve. The plugin's Overview shows each category's share of the *step time
breakdown* (``performance[0].children[].extra``, in %), the same quantity as our
``share_dataloader`` metric (kernel > memcpy > memset > communication > runtime >
DataLoader > CPU exec: each claims only time no higher category claimed), so that is
what is compared.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("torch_tb_profiler")

from diagnose.api import analyze  # noqa: E402
from diagnose.cli import main  # noqa: E402
from diagnose.report.tensorboard import (  # noqa: E402
    GPU_STEP_CAT,
    _free_port,
    adapt_trace,
    copy_name,
    stop_process,
    tensorboard_command,
    write_logdir,
)
from tests.conftest import REPO, SHARED_TRACES, shared_trace  # noqa: E402

CPU_SLOW = REPO / "samples" / "traces" / "cpu" / "slow_loader.pt.trace.json.gz"
GPU_NW0 = "kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
AMD = "hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
DEADLINE_S = 120.0  # the plugin parses each trace in a spawned process: slow on a busy machine
HOST = "127.0.0.1"


# ----------------------------------------------------------------------------- helpers
def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def load(p: Path) -> Any:
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if p.name.endswith(".gz") else raw)


def ev(name: str, cat: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def write_json(p: Path, obj: Any) -> Path:
    data = json.dumps(obj).encode()
    p.write_bytes(gzip.compress(data) if p.name.endswith(".gz") else data)
    return p


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        data = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
    return json.loads(data)


def poll(what: str, fn: Callable[[], Any], deadline_s: float = DEADLINE_S) -> Any:
    """Call ``fn`` until it returns something truthy (errors count as not yet)."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = fn()
            if last:
                return last
        except (urllib.error.URLError, ConnectionError, OSError, KeyError, ValueError) as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{what}: not ready after {deadline_s:.0f} s (last: {last!r})")


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def assert_gone(procs: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(procs, timeout=20)
    for p in alive:  # never leave them behind, even when the assertion fails
        p.kill()
    assert not alive, f"processes left behind: {alive}"


@contextmanager
def tensorboard(logdir: Path, log: Path) -> Iterator[str]:
    """A real TensorBoard over ``logdir``; always stopped, with all its children."""
    port = _free_port(HOST)
    with log.open("wb") as fh:
        proc = subprocess.Popen(tensorboard_command(logdir, HOST, port), stdout=fh,
                                stderr=subprocess.STDOUT, cwd=logdir)
    kids: list[psutil.Process] = []
    try:
        base = f"http://{HOST}:{port}/data/plugin"
        poll("TensorBoard up", lambda: get_json(f"{base}/pytorch_profiler/runs") is not None)
        yield base
    finally:
        kids = descendants(proc.pid)
        stop_process(proc)
        assert proc.returncode is not None
        assert_gone(kids)


def plugin_runs(base: str, want: set[str]) -> bool:
    r = get_json(f"{base}/pytorch_profiler/runs")
    return not r["loading"] and want <= set(r["runs"])


def plugin_overview(base: str, run: str) -> dict[str, Any]:
    """The Overview of the run's only worker and span, found through the plugin's routes."""
    q = urllib.parse.urlencode
    workers = get_json(f"{base}/pytorch_profiler/workers?{q({'run': run, 'view': 'Overview'})}")
    assert len(workers) == 1, workers
    spans = get_json(f"{base}/pytorch_profiler/spans?{q({'run': run, 'worker': workers[0]})}")
    span = spans[0] if spans else "default"
    return get_json(f"{base}/pytorch_profiler/overview?"
                    f"{q({'run': run, 'worker': workers[0], 'span': span})}")


def plugin_share_pct(overview: dict[str, Any], part: str = "DataLoader") -> float:
    (avg,) = overview["performance"]  # "Average Step Time" with one child per category
    return float(next(c["extra"] for c in avg["children"] if c["name"] == part))


def steps_share_pct(overview: dict[str, Any], part: str = "DataLoader") -> float:
    """The same share from the per-step rows (sum of the part / sum of step totals)."""
    cols = [c.get("name") for c in overview["steps"]["columns"]]
    i = cols.index(part)
    parts = [c for c in cols[1:] if c is not None]
    rows = overview["steps"]["rows"]
    total = sum(sum(r[cols.index(p)] for p in parts) for r in rows)
    return 100.0 * sum(r[i] for r in rows) / total


# ------------------------------------------------------------------------ the server
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One TensorBoard over: our CPU run, the raw (unadapted) CPU trace, our GPU run."""
    logdir = tmp_path_factory.mktemp("tb") / "logs"
    before = sha(CPU_SLOW)
    cpu = analyze(CPU_SLOW)
    info: dict[str, Any] = {"cpu": cpu, "cpu_write": write_logdir(cpu, logdir, run="cpu")}
    assert sha(CPU_SLOW) == before  # the user's file is only read
    raw = logdir / "cpu_raw"
    raw.mkdir()
    shutil.copyfile(CPU_SLOW, raw / "slow_loader.1.pt.trace.json.gz")  # as torch writes it
    want = {"cpu", "cpu_raw"}
    gpu_path = SHARED_TRACES / GPU_NW0
    if gpu_path.exists():
        info["gpu"] = analyze(gpu_path)
        write_logdir(info["gpu"], logdir, run="gpu")
        want.add("gpu")
    with tensorboard(logdir, logdir.parent / "tensorboard.log") as base:
        poll("plugin runs loaded", lambda: plugin_runs(base, want))
        info["base"] = base
        yield info


@pytest.mark.slow
def test_plugin_overview_dataloader_share_matches_ours_cpu(served: dict[str, Any]) -> None:
    ours = served["cpu"].metrics["share_dataloader"] * 100
    ov = plugin_overview(served["base"], "cpu")
    plugin = plugin_share_pct(ov)
    print(f"slow_loader (CPU, user_annotation DataLoader): plugin {plugin:.2f}% ours {ours:.2f}%")
    assert ours > 80  # DataLoader-bound: the comparison means something
    assert abs(plugin - ours) <= 2.0
    assert abs(steps_share_pct(ov) - ours) <= 2.0
    assert len(ov["steps"]["rows"]) == served["cpu"].metrics["step_count"]


@pytest.mark.slow
def test_without_adaptation_plugin_shows_no_dataloader(served: dict[str, Any]) -> None:
    """The same trace as torch wrote it: the plugin drops the user_annotation DataLoader."""
    plugin = plugin_share_pct(plugin_overview(served["base"], "cpu_raw"))
    ours = served["cpu"].metrics["share_dataloader"] * 100
    print(f"slow_loader unadapted: plugin {plugin:.2f}% ours {ours:.2f}%")
    assert plugin < 1.0
    assert ours - plugin > 80


@pytest.mark.slow
def test_plugin_overview_dataloader_share_matches_ours_gpu(served: dict[str, Any]) -> None:
    shared_trace(GPU_NW0)  # skips with a reason where ../shared/traces is absent
    rep = served["gpu"]
    ours = rep.metrics["share_dataloader"] * 100
    ov = plugin_overview(served["base"], "gpu")
    plugin = plugin_share_pct(ov)
    print(f"resnet50 num_workers=0 (V100): plugin {plugin:.2f}% ours {ours:.2f}%")
    assert ours > 25
    assert abs(plugin - ours) <= 2.0
    env = {e["title"]: e["value"] for e in ov["environments"]}
    assert env["Device Type"] == "GPU"


@pytest.mark.slow
def test_scalars_and_text_served(served: dict[str, Any]) -> None:
    base, rep = served["base"], served["cpu"]
    q = urllib.parse.urlencode

    def cpu_tags() -> dict[str, Any]:
        return get_json(f"{base}/scalars/tags").get("cpu", {})

    need = {"metrics/share_dataloader", "metrics/step_time_median_ms", "step/step_ms",
            "step/dataloader_share", "step/dataloader_ms"}
    tags = poll("scalar tags", lambda: need <= set(cpu_tags()) and cpu_tags())
    assert "share of step time" in tags["metrics/share_dataloader"]["description"].lower()

    def scalars(tag: str) -> list[list[float]]:
        return get_json(f"{base}/scalars/scalars?{q({'run': 'cpu', 'tag': tag})}")

    ((_, step, value),) = scalars("metrics/share_dataloader")
    assert step == 0 and value == pytest.approx(rep.metrics["share_dataloader"], rel=1e-6)
    per_step = scalars("step/step_ms")
    assert [s for _, s, _ in per_step] == list(range(rep.metrics["step_count"]))
    assert [v for _, _, v in per_step] == pytest.approx(rep.series["step_ms"], rel=1e-6)
    shares = [v for _, _, v in scalars("step/dataloader_share")]
    assert all(0.8 < s <= 1.0 for s in shares)

    text_tags = poll("text tags", lambda: get_json(f"{base}/text/tags").get("cpu"))
    assert {"findings", "notes"} <= set(text_tags)
    (findings,) = get_json(f"{base}/text/text?{q({'run': 'cpu', 'tag': 'findings'})}")
    html = findings["text"]
    assert "IN001" in html and "<table>" in html and "num_workers" in html
    (notes,) = get_json(f"{base}/text/text?{q({'run': 'cpu', 'tag': 'notes'})}")
    assert "user_annotation -&gt; cpu_op" in notes["text"] or "user_annotation -> cpu_op" in notes[
        "text"]


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["ctrl_c", "sigterm"])
def test_serve_prints_url_and_ctrl_c_stops_everything(tmp_path: Path, stop: str) -> None:
    """`--serve` as a person runs it: the URL is printed, Ctrl-C (SIGINT to the terminal's
    process group) stops TensorBoard and every process it started; so does SIGTERM to
    torch-diagnose alone (a `kill`: a new user's left TensorBoard serving on its port)."""
    out = tmp_path / "out.txt"
    logdir = tmp_path / "logs"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "diagnose", "tensorboard", str(CPU_SLOW), "--logdir",
             str(logdir), "--serve", "--port", "0"],
            stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, start_new_session=True)
    kids: list[psutil.Process] = []
    try:
        line = poll("URL printed", lambda: next(
            (x for x in out.read_text().splitlines() if x.startswith("TensorBoard: http://")),
            None), deadline_s=60)
        url = line.split()[1].rstrip("/")
        assert url.startswith(f"http://{HOST}:")  # loopback by default
        base = f"{url}/data/plugin"
        poll("run served", lambda: plugin_runs(base, {"slow_loader"}))
        kids = descendants(proc.pid)
        assert kids, "TensorBoard runs as a child process"
        if stop == "ctrl_c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, out.read_text()
        assert "TensorBoard stopped." in out.read_text()
        assert "Traceback" not in out.read_text().split("TensorBoard stopped.")[-1]
    finally:
        if proc.poll() is None:
            kids = kids or descendants(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert_gone(kids)


# ------------------------------------------------------------- the trace adaptation
def test_adapted_copy_changes_only_dataloader_categories(tmp_path: Path) -> None:
    before = sha(CPU_SLOW)
    c = adapt_trace(CPU_SLOW, tmp_path, "w.1.pt.trace.json.gz")
    assert sha(CPU_SLOW) == before
    a, b = load(CPU_SLOW), load(c.path)
    assert list(a) == list(b)
    assert {k: v for k, v in a.items() if k != "traceEvents"} == {
        k: v for k, v in b.items() if k != "traceEvents"}
    assert len(a["traceEvents"]) == len(b["traceEvents"]) == c.events
    changed = [(x, y) for x, y in zip(a["traceEvents"], b["traceEvents"], strict=True) if x != y]
    assert len(changed) == c.dataloader_events == 3
    for x, y in changed:
        assert x["cat"] == "user_annotation" and y["cat"] == "cpu_op"
        assert x["name"].startswith("enumerate(DataLoader)#") and {**x, "cat": "cpu_op"} == y
    assert c.gpu_step_events == 0 and not c.wrapped


def test_gpu_side_step_annotations_and_bare_lists(tmp_path: Path) -> None:
    events = [
        ev("ProfilerStep#1", "user_annotation", 0, 100),
        ev("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "user_annotation",
           1, 40),
        ev("enumerate(DataPipe)#ShufflerIterDataPipe", "user_annotation", 50, 5),
        ev("Optimizer.step#SGD.step", "user_annotation", 60, 10),
        ev("aten::mm", "cpu_op", 41, 9),
        ev("ProfilerStep#1", "gpu_user_annotation", 30, 90, pid=0, tid=7),
        ev("enumerate(DataLoader)#x.__next__", "gpu_user_annotation", 30, 5, pid=0, tid=7),
        {"ph": "i", "name": "marker", "ts": 3, "pid": 1, "tid": 1, "s": "t"},
        [1, 2],  # junk: copied as is
    ]
    src = write_json(tmp_path / "bare.json", events)
    c = adapt_trace(src, tmp_path, "bare.5.pt.trace.json.gz")
    out = load(c.path)
    assert c.wrapped and list(out) == ["traceEvents"]
    cats = [e["cat"] if isinstance(e, dict) and "cat" in e else None for e in out["traceEvents"]]
    assert cats == ["user_annotation", "cpu_op", "cpu_op", "user_annotation", "cpu_op",
                    GPU_STEP_CAT, "gpu_user_annotation", None, None]
    assert out["traceEvents"][-1] == [1, 2]
    assert (c.dataloader_events, c.gpu_step_events) == (2, 1)


def test_trace_needing_nothing_is_copied_byte_for_byte(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "traceEvents": [ev("ProfilerStep#3", "cpu_op", 0, 10),
                                               ev("enumerate(DataLoader)#a.__next__", "Operator",
                                                  1, 5)]}
    for name in ("old.json", "old.json.gz"):
        src = write_json(tmp_path / name, doc)
        dst = tmp_path / f"out_{name}"
        dst.mkdir()
        c = adapt_trace(src, dst, "old.7.pt.trace.json.gz")
        assert not c.adapted
        assert c.path.read_bytes() == src.read_bytes()
        assert c.path.name == ("old.7.pt.trace.json.gz" if name.endswith(".gz")
                               else "old.7.pt.trace.json")


def test_copy_names_follow_the_plugins_worker_pattern(tmp_path: Path) -> None:
    from torch_tb_profiler.consts import WORKER_PATTERN

    taken: set[tuple[str, str]] = set()
    p = tmp_path / "host_12.1623143089861.pt.trace.json.gz"
    p.write_bytes(b"")
    assert copy_name(p, taken) == "host_12.1623143089861.pt.trace.json.gz"
    assert copy_name(p, taken) == "host_12_2.1623143089861.pt.trace.json.gz"  # same name again
    q = tmp_path / "my trace (rank 0).json"
    q.write_bytes(b"")
    name = copy_name(q, taken)
    m = WORKER_PATTERN.match(name)
    assert m and m.group(1) == "my_trace_rank_0" and m.group(2)  # a span is always given


def test_amd_trace_plugin_steps_match_ours_after_adaptation(tmp_path: Path) -> None:
    """A current GPU trace has device-side ``ProfilerStep#`` annotations; unadapted, the plugin
    counts them as extra host steps."""
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import ProfileRole

    src = shared_trace(AMD)
    ours = analyze(src).metrics

    # the trace's last ProfilerStep is a 49 us stub holding nothing (the profiler stopped
    # as it began): ours leaves it out (and says so), the plugin counts it
    hollow = int(any("holds no operator" in n for n in analyze(src).notes))

    def plugin(doc: Any) -> tuple[int, float]:
        d = RunProfileData.from_json("w", 1, doc)
        kept = d.steps_costs[:len(d.steps_costs) - hollow]
        return len(d.steps_costs), sum(c.costs[ProfileRole.Total] for c in kept) / len(kept) / 1e3

    raw_steps, _ = plugin(load(src))
    c = adapt_trace(src, tmp_path, "amd.1.pt.trace.json.gz")
    steps, mean_ms = plugin(load(c.path))
    assert c.gpu_step_events >= 1
    assert raw_steps > ours["step_count"] + hollow
    assert steps == ours["step_count"] + hollow
    assert mean_ms == pytest.approx(ours["step_time_mean_ms"], rel=0.02)


# ------------------------------------------------------------------ log dir content
def read_events(run_dir: Path) -> tuple[dict[str, list[Any]], dict[str, list[str]]]:
    from tensorboard.backend.event_processing.event_accumulator import (
        TENSORS,
        EventAccumulator,
    )
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    acc.Reload()
    scal: dict[str, list[Any]] = {}
    text: dict[str, list[str]] = {}
    for tag in acc.Tags()["tensors"]:
        evs = acc.Tensors(tag)
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        vals = [tensor_util.make_ndarray(e.tensor_proto) for e in evs]
        if plugin == "text":
            text[tag] = [v.item().decode() for v in vals]
        else:
            assert plugin == "scalars"
            scal[tag] = [(e.step, e.wall_time, float(v)) for e, v in zip(evs, vals, strict=True)]
    return scal, text


def test_logdir_layout_scalars_samples_and_text(tmp_path: Path) -> None:
    t0 = 1_700_000_000.0
    samples = {
        "version": 1, "info": {}, "marks": {},
        "series": {
            "host": {"t": [t0, t0 + 0.1, t0 + 0.2], "cpu_pct": [[10.0, 30.0], [50.0, 70.0], None],
                     "iowait_pct": [1.0, None, 3.0], "proc_cpu_pct": [90.0, 95.0, 99.0]},
            "gpu": {"t": [t0, t0 + 0.1], "util_pct": [40.0, 60.0]},
        },
    }
    rep = analyze(CPU_SLOW, samples=samples)
    res = write_logdir(rep, tmp_path / "logs")
    assert res.run == "slow_loader" and res.run_dir == tmp_path / "logs" / "slow_loader"
    files = sorted(p.name for p in res.run_dir.iterdir())
    assert any(f.startswith("events.out.tfevents.") for f in files)
    assert [f for f in files if f.endswith(".pt.trace.json.gz")] == [res.copies[0].path.name]
    scal, text = read_events(res.run_dir)
    assert scal["samples/host/cpu_pct_mean"] == [(0, t0, 20.0), (1, t0 + 0.1, 60.0)]
    assert [s for s, _, _ in scal["samples/host/iowait_pct"]] == [0, 2]
    assert [v for _, _, v in scal["samples/gpu/util_pct"]] == [40.0, 60.0]
    assert [v for _, _, v in scal["step/step_ms"]] == pytest.approx(rep.series["step_ms"])
    assert scal["metrics/share_dataloader"][0][2] == pytest.approx(rep.metrics["share_dataloader"])
    assert scal["metrics/host_cpu_mean_pct"][0][2] == pytest.approx(rep.metrics["host_cpu_mean_pct"])
    assert not any(t.startswith("metrics/has_") for t in scal)  # booleans are not scalars
    (md,) = text["findings"]
    assert "| critical | IN001 | input |" in md and "```python" in md
    assert "DataLoader share of step time **93.2%**" in md


def test_multi_rank_writes_per_rank_scalars(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "traceEvents": [
        ev("ProfilerStep#1", "user_annotation", 0, 100),
        ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 1, 50),
        ev("aten::mm", "cpu_op", 60, 30)]}
    (tmp_path / "in").mkdir()
    paths = [write_json(tmp_path / "in" / f"rank{r}.json", {**doc, "distributedInfo": {"rank": r, "world_size": 2}})
             for r in (0, 1)]
    rep = analyze(paths)
    res = write_logdir(rep, tmp_path / "logs", run="dist")
    assert sorted(p.name for p in res.run_dir.glob("*.pt.trace.json.gz")) == [
        c.path.name for c in sorted(res.copies, key=lambda c: c.path.name)]
    assert len(res.copies) == 2 and all(c.dataloader_events == 1 for c in res.copies)
    for r in (0, 1):
        scal, _ = read_events(res.run_dir / f"rank{r}")
        assert scal["step/dataloader_share"][0][2] == pytest.approx(0.5)


# ------------------------------------------------------------------------- the CLI
def test_cli_writes_and_refuses_to_clobber(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    logdir = tmp_path / "logs"
    assert main(["tensorboard", str(CPU_SLOW), "--logdir", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert "3 DataLoader events re-categorised" in out and "tensorboard --logdir" in out
    assert main(["tensorboard", str(CPU_SLOW), "--logdir", str(logdir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already exists" in err
    keep = logdir / "slow_loader" / "my_notes.txt"
    keep.write_text("mine")
    assert main(["tensorboard", str(CPU_SLOW), "--logdir", str(logdir), "--overwrite"]) == 0
    run_dir = logdir / "slow_loader"
    assert keep.read_text() == "mine"  # --overwrite replaces only what we wrote
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert len(list(run_dir.glob("*.pt.trace.json.gz"))) == 1


@pytest.mark.parametrize("argv, says", [
    (["missing.pt.trace.json.gz"], "no such file"),
    ([str(CPU_SLOW), "--port", "70000"], "not a port"),
    (["not_json.json"], "not valid JSON"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                             argv: list[str], says: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not_json.json").write_text("{oops")
    assert main(["tensorboard", *argv, "--logdir", str(tmp_path / "logs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torch-diagnose: error:") and "\n" not in err and says in err


def test_a_log_folder_given_back_is_shown_not_read_as_traces(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log folder the command wrote holds trace copies beside its event files: given
    back as a path it was read as bare traces, and a new log folder written from them with
    no finding. Alone with ``--serve`` it is now shown as it is; otherwise refused with a
    hint (exit 2, one line), nothing written."""
    import diagnose.report.tensorboard as tb

    logdir = tmp_path / "logs"
    assert main(["tensorboard", str(CPU_SLOW), "--logdir", str(logdir)]) == 0
    capsys.readouterr()
    served: list[tuple[str, str, int]] = []
    monkeypatch.setattr(tb, "serve", lambda d, h, p: served.append((str(d), h, p)) or 0)
    assert main(["tensorboard", str(logdir), "--serve", "--port", "6123"]) == 0
    assert served == [(str(logdir), "127.0.0.1", 6123)]
    other = tmp_path / "again"
    assert main(["tensorboard", str(logdir), "--logdir", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a TensorBoard log folder" in err and "--serve" in err
    assert not other.exists()
    # its run folder is one too (event files one level down or in it)
    assert main(["tensorboard", str(logdir / "slow_loader"), "--logdir", str(other)]) == 2
    # a user's own folder of event files and profiler traces is a run: its traces are read
    own = tmp_path / "mine"
    own.mkdir()
    shutil.copyfile(CPU_SLOW, own / CPU_SLOW.name)
    (own / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    assert main(["tensorboard", str(own), "--logdir", str(other)]) == 0
    # a folder holding a log folder deeper down (a project's, beside its runs) is not one
    from diagnose.cli.analysis import tensorboard_logs

    assert tensorboard_logs(str(logdir)) and not tensorboard_logs(str(tmp_path))


def test_cli_refuses_to_write_next_to_the_source(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    src = run / "host_1.99.pt.trace.json.gz"
    shutil.copyfile(CPU_SLOW, src)
    before = sha(src)
    assert main(["tensorboard", str(src), "--logdir", str(tmp_path / "runs"), "--run", "r1",
                 "--overwrite"]) == 2
    assert "source trace" in capsys.readouterr().err
    assert sha(src) == before


def test_command_needs_no_torch_and_says_when_tensorboard_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = ("import sys\nfor m in {block!r}: sys.modules[m] = None  # import m -> ImportError\n"
            "from diagnose.cli import main\n"
            "sys.exit(main(['tensorboard', {src!r}, '--logdir', 'logs']))")
    r = subprocess.run([sys.executable, "-c", code.format(block=["torch"], src=str(CPU_SLOW))],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "logs" / "slow_loader").glob("events.out.tfevents.*"))
    r = subprocess.run([sys.executable, "-c",
                        code.format(block=["torch", "tensorboard"], src=str(CPU_SLOW))],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "torch-diagnose[tensorboard]" in r.stderr
    # a log folder shown without TensorBoard says what to install, not to run it again
    code_serve = ("import sys\nfor m in {block!r}: sys.modules[m] = None\n"
                  "from diagnose.cli import main\n"
                  "sys.exit(main(['tensorboard', 'logs', '--serve']))")
    r = subprocess.run([sys.executable, "-c", code_serve.format(block=["torch", "tensorboard"])],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "torch-diagnose[tensorboard]" in r.stderr
    # a path that is not there is said first, whatever is installed
    r = subprocess.run([sys.executable, "-c", code.format(block=["torch", "tensorboard"],
                                                          src="/nonexistent/run")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "/nonexistent/run: no such file or folder" in r.stderr


# ----------------------------------------------------------------------- the session
def test_session_option_writes_the_run(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from diagnose.session import diagnose

    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))),
                        batch_size=8)
    with diagnose(model, loader, steps=2, warmup=0, wait=0, out_dir=tmp_path / "runs",
                  sample_hz=0, print_report=False, tensorboard=tmp_path / "tb") as d:
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if d.done:
                break
    assert d.report is not None and d.tensorboard_dir is not None
    assert d.run_dir is not None and d.tensorboard_dir == tmp_path / "tb" / d.run_dir.name
    (copy,) = d.tensorboard_dir.glob("*.pt.trace.json.gz")
    doc = load(copy)
    dl = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("enumerate(DataLoader)")]
    assert dl and all(e["cat"] == "cpu_op" for e in dl)
    scal, text = read_events(d.tensorboard_dir)
    assert len(scal["step/step_ms"]) == d.report.metrics["step_count"]
    assert "findings" in text
