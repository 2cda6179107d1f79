"""The "diagnose" tab in TensorBoard (``diagnose/report/tb_plugin``).

A real TensorBoard, started through its program API with the default plugins plus ours
(the entry point needs an installed distribution: ``tests/test_wheel.py`` checks it there),
serves a log dir the tool wrote: the listing shows the plugin, its routes give the runs and a
run's diagnosis, everything the tab loads comes from the server itself, and headless Chromium
with the network shut off renders the tab. Routes and file handling are also tested on the
plugin object alone, without a server.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("tensorboard")

from werkzeug.test import Client  # noqa: E402

from diagnose import analyze  # noqa: E402
from diagnose.report.html import render_html  # noqa: E402
from diagnose.report.memory_text import (  # noqa: E402
    WHAT_IF_TITLE,
    memory_lines,
    shows_memory,
    what_if_table,
)
from diagnose.report.plots import figures  # noqa: E402
from diagnose.report.tb_plugin.plugin import DiagnoseLoader, DiagnosePlugin  # noqa: E402
from diagnose.report.tb_plugin.runfile import RUN_FILE, find_runs, read_run_file  # noqa: E402
from diagnose.report.tensorboard import _free_port, stop_process, write_logdir  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.report.test_html import (  # noqa: E402
    AUTOFIX,
    XSS,
    XSS_DEVICE,
    _squash,
    chromium,
    fake_samples,
    multi_rank_run,
    parse,
)
from tests.report.test_tensorboard import CPU_SLOW, assert_gone, descendants, get_json, poll  # noqa: E402

HOST = "127.0.0.1"
BASE = "/data/plugin/diagnose"
# TensorBoard as `tensorboard --logdir` runs it, with our loader added to the plugins it finds
# (already there when this package is installed with its entry point)
LAUNCH = """
import sys
from tensorboard import default, program
from diagnose.report.tb_plugin.plugin import DiagnoseLoader
plugins = default.get_plugins()
if DiagnoseLoader not in plugins:
    plugins.append(DiagnoseLoader)
tb = program.TensorBoard(plugins=plugins)
tb.configure(argv=[None, "--logdir", sys.argv[1], "--host", sys.argv[2], "--port", sys.argv[3]])
sys.exit(tb.main())
"""
# a URL that leaves the server: a scheme, or a protocol-relative //host in a string,
# attribute, url() or import
EXTERNAL = re.compile(r"""[a-z][a-z0-9+.-]*://|["'(=`]\s*//[^/\s]""", re.IGNORECASE)
# a real capture's run folder (a minGPT on CPU): its tracked step's memory by kind, what-ifs
MEMORY_RUN = REPO / "benchmarks" / "captures" / "cpu_validate" / "mingpt_adder" / "20261202-030634-893"


def fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            data = r.read()
            if r.headers.get("Content-Encoding") == "gzip":
                data = gzip.decompress(data)
            return r.status, r.headers.get("Content-Type", ""), data
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def write_broken(logdir: Path, name: str, content: str) -> Path:
    run = logdir / name
    run.mkdir(parents=True)
    (run / RUN_FILE).write_text(content)
    return run


# ---------------------------------------------------------------------------- log dir
@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """cpu (with autofix rows), hostile (two ranks, names made of markup, samples), memory
    (a real capture with its memory section), a broken file, a nested run, and a run of
    plain TensorBoard scalars that is not ours."""
    tmp = tmp_path_factory.mktemp("tbplugin")
    logs = tmp / "logs"
    cpu = analyze(CPU_SLOW)
    write_logdir(cpu, logs, run="cpu", autofix=[*AUTOFIX, (XSS, 120.0, 119.0)])
    hostile = analyze(multi_rank_run(tmp), samples=fake_samples())
    write_logdir(hostile, logs, run="hostile")
    memory = analyze(str(MEMORY_RUN))
    write_logdir(memory, logs, run="memory")
    write_logdir(cpu, logs / "team" / "exp1", run="again")
    write_broken(logs, "broken", '{"format": "torch-diagnose-run", "vers')
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    (logs / "plain").mkdir()
    EventFileWriter(str(logs / "plain")).close()
    return {"logs": logs, "cpu": cpu, "hostile": hostile, "memory": memory}


@pytest.fixture(scope="module")
def server(logdir: dict[str, Any]) -> Iterator[str]:
    """A real TensorBoard over the log dir; stopped with every process it started."""
    port = _free_port(HOST)
    log = logdir["logs"].parent / "tensorboard.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(logdir["logs"]), HOST,
                                 str(port)], stdout=fh, stderr=subprocess.STDOUT,
                                cwd=logdir["logs"].parent,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        url = f"http://{HOST}:{port}"
        poll("TensorBoard up", lambda: get_json(f"{url}/data/plugins_listing"))
        yield url
    finally:
        kids = descendants(proc.pid)
        stop_process(proc)
        assert_gone(kids)


# -------------------------------------------------------------------- the real server
@pytest.mark.slow
def test_listing_shows_the_tab_and_routes_give_runs_and_diagnosis(
        server: str, logdir: dict[str, Any]) -> None:
    listing = get_json(f"{server}/data/plugins_listing")
    tab = listing["diagnose"]
    assert tab["enabled"] is True and tab["tab_name"] == "Diagnose"
    assert tab["loading_mechanism"] == {"type": "IFRAME",
                                        "module_path": f"{BASE}/index.js"}

    runs = {r["run"]: r for r in get_json(f"{server}{BASE}/runs")}
    assert set(runs) == {"cpu", "hostile", "memory", "broken", "team/exp1/again"}  # not "plain"
    assert "not valid JSON" in runs["broken"]["error"]
    cpu: Any = logdir["cpu"]
    assert runs["cpu"]["worst"] == cpu.worst() == "critical"
    assert runs["cpu"]["headline"] == cpu.findings[0].message
    assert runs["cpu"]["alarms"] is None  # not a watched run

    q = urllib.parse.urlencode
    view = get_json(f"{server}{BASE}/run?{q({'run': 'cpu'})}")
    assert [(f["rule"], f["message"]) for f in view["findings"]] == [
        (f.rule, f.message) for f in cpu.findings]
    (in001,) = [f for f in view["findings"] if f["rule"] == "IN001"]
    assert in001["fixes"][0]["id"] == "num_workers" and "num_workers=" in in001["fixes"][0]["code"]
    assert dict((k, v) for k, v, _ in in001["evidence"])["dataloader_share"] == (
        f"{cpu.metrics['dataloader_share']:.1%}")
    summary = dict(view["summary"])
    assert summary["profiled"].startswith(f"{cpu.metrics['step_count']} steps (ProfilerStep)")
    assert summary["step time"].endswith("as profiled (a saved trace: no steps were timed "
                                         "without the profiler)")
    assert [p["key"] for p in view["plots"]] == list(figures(cpu, AUTOFIX)) == [
        "breakdown", "autofix"]
    assert [r[0] for r in view["autofix"]["rows"]] == [str(r[0]) for r in AUTOFIX] + [XSS]
    assert view["autofix"]["rows"][0][1:] == ["176.3 ms", "126.5 ms", "-28.2%", "", "",
                                              "better"]  # no speedup, no prediction given
    assert view["traces"] and view["traces"][0].endswith(".pt.trace.json.gz")
    assert view["memory"] is None and shows_memory(cpu) is None  # a trace: no memory section

    status, ctype, svg = fetch(f"{server}{BASE}/plot?{q({'run': 'cpu', 'name': 'breakdown'})}")
    assert status == 200 and ctype.startswith("image/svg+xml") and svg.startswith(b"<svg")
    status, _, _ = fetch(f"{server}{BASE}/plot?{q({'run': 'cpu', 'name': 'idle'})}")
    assert status == 404  # a CPU trace has no GPU idle plot
    for bad in ("nope", "../cpu", str(logdir["logs"] / "cpu"), ""):
        status, _, body = fetch(f"{server}{BASE}/run?{q({'run': bad})}")
        assert status == 404 and "no diagnose run" in json.loads(body)["error"]


@pytest.mark.slow
def test_a_runs_memory_section_is_the_reports(server: str, logdir: dict[str, Any]) -> None:
    """A new user's trial: the tab had only the mem_* scalars, not the memory by kind and
    the what-ifs the text and HTML reports show. The tab's are theirs, line for line."""
    rep: Any = logdir["memory"]
    mem = shows_memory(rep)
    assert mem is not None and mem["source"] == "tracker"  # a tracked step
    view = get_json(f"{server}{BASE}/run?{urllib.parse.urlencode({'run': 'memory'})}")
    shown = view["memory"]
    assert shown["lines"] == [list(x) for x in memory_lines(mem)]
    cols, rows = what_if_table(mem)
    assert len(rows) == len(mem["what_if"]) > 3
    assert shown["what_if"] == {"title": WHAT_IF_TITLE, "columns": cols, "rows": rows,
                                "numeric": [1, 2, 3]}  # peak, range, step ms
    # the numbers themselves, from the report's JSON: the peak, the largest kind, each
    # what-if's predicted peak
    peak = shown["lines"][0][0]
    kinds = sorted(mem["by_kind"].items(), key=lambda kv: -kv[1])
    assert peak.startswith(f"peak {mem['peak_bytes'] / 2**20:,.1f} MiB") and kinds[0][0] == "activations"
    assert f"activations {kinds[0][1] / 2**20:,.1f} MiB ({kinds[0][1] / sum(mem['by_kind'].values()):.0%})" in peak
    assert [r[1] for r in rows] == [f"{w['peak_bytes'] / 2**20:,.1f} MiB" for w in mem["what_if"]]
    assert any(r[0].startswith("checkpoint ") for r in rows)
    # as the text report (-v) and report.html print them
    text = _squash(rep.render_text(width=400, detail=True))
    page = _squash("".join(parse(render_html(rep)).text))
    for line, _ in shown["lines"]:
        assert _squash(line) in text and _squash(line) in page
    for row in rows:
        assert all(c in text and c in page for c in row if c), row


@pytest.mark.slow
def test_everything_the_tab_loads_comes_from_the_server(server: str) -> None:
    entry = fetch(f"{server}/data/plugin_entry.html?name=diagnose")
    assert entry[0] == 200
    # the frame TensorBoard makes: <base href="plugin/diagnose/">, then import("./index.js")
    assert b'<base href="plugin/diagnose/"' in entry[2] and b"./index.js" in entry[2]
    parts = {"entry": entry}
    for name in ("index.js", "index.html", "tab.css"):
        parts[name] = fetch(f"{server}{BASE}/{name}")
    for name, (status, _, body) in parts.items():
        text = body.decode()
        assert status == 200, name
        assert not EXTERNAL.findall(text), (name, EXTERNAL.findall(text))
        assert "@import" not in text and "url(" not in text, name
    assert parts["index.js"][1].startswith("text/javascript")
    js = parts["index.js"][2].decode()
    assert "innerHTML" not in js and "outerHTML" not in js and "insertAdjacentHTML" not in js
    assert "document.write" not in js and "eval(" not in js
    # every URL the script asks for is one of the plugin's routes, relative to it
    assert set(re.findall(r"getJSON\('([^']+)'", js)) == {"runs", "run"}
    assert "src: `plot?" in js and "href: 'tab.css'" in js


# --------------------------------------------------------------------------- browser
def browse(url: str, tmp: Path, *, screenshot: Path | None = None) -> tuple[str, list[str]]:
    """(the DOM once the page's requests are done, console messages) of ``url`` in headless
    Chromium that can reach nothing but 127.0.0.1."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp / 'chromium-profile'}",
           # offline: every name resolves to nothing and any proxied request goes nowhere
           "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>;127.0.0.1",
           "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000"]
    if screenshot is not None:
        cmd += ["--window-size=1400,2400", "--hide-scrollbars", f"--screenshot={screenshot}"]
    else:
        cmd += ["--dump-dom"]
    proc = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    return proc.stdout, console


def tab_url(server: str, run: str) -> str:
    """The document TensorBoard puts in the tab's frame, opened at ``run``."""
    return f"{server}/data/plugin_entry.html?name=diagnose#run={urllib.parse.quote(run)}"


@pytest.mark.slow
def test_tab_renders_offline_in_a_browser(server: str, logdir: dict[str, Any],
                                          tmp_path: Path) -> None:
    dom, console = browse(tab_url(server, "cpu"), tmp_path)
    assert console == [], console
    d = parse(dom)
    text = _squash("".join(d.text))
    for f in logdir["cpu"].findings:
        assert d.ids.get(f"finding-{f.rule}") == "article", f.rule
        assert _squash(f.message) in text and f.title in text
    assert "Load batches in worker processes" in text and "autofix can apply" in text
    assert d.ids.get("plot-breakdown") == "figure" and d.ids.get("autofix") == "section"
    assert XSS in text  # the autofix label, as text
    assert d.scripts == 0  # the tab replaced TensorBoard's loader; nothing was injected
    assert all(not re.match(r"[a-z]+:|//", u) for u in d.links), d.links  # all same-server
    for run in ("hostile", "memory", "broken", "team/exp1/again"):
        assert run in text  # the run list
    assert "memory" not in d.ids  # no memory section where the run has none

    dom, console = browse(tab_url(server, "memory"), tmp_path)
    assert console == [], console
    d = parse(dom)
    text = _squash("".join(d.text))
    assert d.ids.get("memory") == "section" and WHAT_IF_TITLE in text
    mem = shows_memory(logdir["memory"])
    assert mem is not None
    for line, _ in memory_lines(mem):
        assert _squash(line) in text
    for row in what_if_table(mem)[1]:
        assert all(c in text for c in row), row


@pytest.mark.slow
def test_names_from_traces_stay_text_and_broken_runs_say_why(server: str, tmp_path: Path) -> None:
    dom, console = browse(tab_url(server, "hostile"), tmp_path)
    assert console == [], console
    d = parse(dom)
    text = "".join(d.text)
    assert XSS in text and XSS_DEVICE in text  # kernel and device name, shown as text
    assert d.scripts == 0 and not any(u.startswith("<") for u in d.links), d.links  # no on*=
    assert "<img src=\"x\"" not in dom and "&lt;script&gt;" in dom
    assert d.ids.get("plot-ranks") == "figure" and d.ids.get("plot-samples") == "figure"

    dom, console = browse(tab_url(server, "broken"), tmp_path)
    assert console == [], console
    text = _squash("".join(parse(dom).text))
    assert "This run cannot be shown: diagnose.json is not valid JSON" in text


# ------------------------------------------------------------------- the plugin alone
def plugin_for(logdir: Path | str | None) -> DiagnosePlugin:
    from tensorboard.plugins import base_plugin

    ctx = base_plugin.TBContext(logdir=None if logdir is None else str(logdir),
                                flags=SimpleNamespace(logdir=None), plugin_name_to_instance={})
    plugin = DiagnoseLoader().load(ctx)
    assert isinstance(plugin, DiagnosePlugin)
    return plugin


def route(plugin: DiagnosePlugin, path: str, **args: str) -> tuple[int, Any]:
    app = plugin.get_plugin_apps()[path]
    resp = Client(app).get(path, query_string=args)
    body = resp.get_data()
    ctype = resp.headers.get("Content-Type", "")
    return resp.status_code, json.loads(body) if "json" in ctype else body.decode()


def test_active_only_where_a_log_dir_holds_diagnose_runs(tmp_path: Path) -> None:
    assert not plugin_for(None).is_active()
    assert not plugin_for("gs://bucket/logs").is_active()
    assert not plugin_for(tmp_path / "missing").is_active()
    logs = tmp_path / "logs"
    (logs / "plain").mkdir(parents=True)
    plugin = plugin_for(logs)
    assert not plugin.is_active()
    res = write_logdir(analyze(CPU_SLOW), logs)
    assert (res.run_dir / RUN_FILE).is_file()
    assert plugin.runs(fresh=True) == {"slow_loader": res.run_dir}
    assert plugin.is_active()
    assert route(plugin, "/runs")[1][0]["run"] == "slow_loader"


def test_broken_and_missing_files_give_a_clear_message(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    good = write_logdir(analyze(CPU_SLOW), logs, run="good").run_dir
    doc = json.loads((good / RUN_FILE).read_text())
    cases = {
        "truncated": ('{"format": "torch-diagnose-run", "ver', "not valid JSON"),
        "foreign": ('{"some": "json"}', "not written by torch-diagnose"),
        "future": (json.dumps({**doc, "version": 99}), "upgrade torch-diagnose"),
        "noreport": (json.dumps({**doc, "report": [1]}), "holds no report"),
    }
    for name, (content, _) in cases.items():
        write_broken(logs, name, content)
    # wrong types inside: shown as missing, never a traceback
    odd = {**doc, "plots": {"breakdown": {"svg": "<script>"}}, "autofix": {"rows": [["x"]]},
           "report": {**doc["report"], "findings": ["?", {"rule": 3, "severity": "bad",
                                                          "evidence": [], "fixes": "x"}],
                      "metrics": {"step_count": "many", "gpu_busy_frac": "half"},
                      "memory": {"source": "tracker", "by_kind": [1], "what_if": "x"}}}
    write_broken(logs, "odd", json.dumps(odd))
    plugin = plugin_for(logs)
    runs = {r["run"]: r for r in route(plugin, "/runs")[1]}
    assert set(runs) == {"good", "odd", *cases}
    for name, (_, says) in cases.items():
        assert says in runs[name]["error"], name
        status, body = route(plugin, "/run", run=name)
        assert status == 200 and says in body["error"] and body["run"] == name
    status, body = route(plugin, "/run", run="odd")
    assert status == 200 and "error" not in body, body
    assert [(f["rule"], f["severity"], f["fixes"]) for f in body["findings"]] == [("3", "info", [])]
    assert body["plots"] == [] and body["autofix"] is None and body["memory"] is None
    summary = dict(body["summary"])
    assert "GPU busy" not in summary and summary["step time"] == "none profiled"  # read as missing
    assert route(plugin, "/plot", run="odd", name="breakdown")[0] == 404

    # a run removed after it was listed
    (good / RUN_FILE).unlink()
    status, body = route(plugin, "/run", run="good")
    assert status == 200 and "is missing" in body["error"]
    with pytest.raises(Exception, match="is missing"):
        read_run_file(good)


def test_run_file_round_trip_and_overwrite(tmp_path: Path) -> None:
    rep = analyze(CPU_SLOW)
    logs = tmp_path / "logs"
    write_logdir(rep, logs, run="r", autofix=AUTOFIX)
    doc = read_run_file(logs / "r")
    assert doc["report"]["findings"] == json.loads(json.dumps(rep.to_json()))["findings"]
    assert doc["autofix"]["rows"] == [[str(r[0]), float(r[1]), float(r[2]), *[None] * 6]
                                      for r in AUTOFIX]
    assert set(doc["plots"]) == set(figures(rep, AUTOFIX))
    write_logdir(rep, logs, run="r", overwrite=True)  # --overwrite: ours, so rewritten
    assert read_run_file(logs / "r")["autofix"] is None
    assert find_runs(logs) == {"r": logs / "r"}
    assert find_runs(logs / "r") == {".": logs / "r"}  # the log dir may be the run itself
