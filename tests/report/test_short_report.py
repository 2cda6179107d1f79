"""The terminal report is short by default: what a user acts on. Each of the session's
timings, an info finding's reasons, the what-ifs beside no memory finding and the rules
not evaluated are left to ``-v`` (``detail``), and its last line says so; a share of the
step that one change sets for several findings is given once."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from diagnose.report.text import _findings_table, step_lines
from diagnose.rules.engine import Finding
from diagnose.stepmodel.prediction import Prediction

SPLIT = Prediction({"num_workers": 2, "intra_op_threads": 1}, 24.5, 1.31, (18.7, 34.5), 32.1)
FEWER = Prediction({"num_workers": 1}, 28.0, 1.15, (25.0, 31.0), 32.1)


def _finding(rule: str, severity: str, preds: dict, hint: str) -> Finding:
    f = Finding(rule, "input", severity, f"{rule} title", f"{rule} message", {}, list(preds),
                0.1, hints=[hint], predictions=preds)
    best = max(preds.values(), key=lambda p: p.speedup)
    f.take_gain(1 - best.step_ms / best.base_ms, change=best.change)
    f.severity = severity  # as graded by its rule (take_gain caps it by the share)
    return f


def _table(findings: list[Finding], detail: bool) -> str:
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(
        _findings_table(SimpleNamespace(findings=findings), detail))  # type: ignore[arg-type]
    return buf.getvalue()


def _gains(out: str) -> dict[str, str]:
    """rule -> its gain cell, from the table's rows."""
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if "│" in line]
    return {r[2]: r[-2] for r in rows if len(r) > 3 and r[2]}


def test_one_change_sets_one_share_and_info_reasons_wait_for_detail() -> None:
    lead = _finding("IN004", "warning", {"threads": SPLIT}, "why IN004")
    same = _finding("IN001", "info", {"threads": SPLIT, "num_workers": FEWER}, "why IN001")
    other = _finding("IN002", "info", {"num_workers": FEWER}, "why IN002")
    short = _table([lead, same, other], detail=False)
    # IN001's best change is IN004's: its share is not counted twice; IN002's is its own
    assert _gains(short) == {"IN004": "≤ 24%", "IN001": "= IN004", "IN002": "≤ 13%"}
    assert "why IN004" in short and "why IN001" not in short and "why IN002" not in short
    full = _table([lead, same, other], detail=True)
    assert _gains(full) == _gains(short) and "why IN001" in full and "why IN002" in full


def test_the_short_report_promises_only_the_reasons_detail_adds() -> None:
    """A new user ran ``-v`` for "an info finding's reasons" and IN002's row showed only
    its message: its one hint was in the warning's row already. The last line counts
    only the info findings that ``-v`` gives a hint not shown."""
    from diagnose.report.text import _left_out

    lead = _finding("IN004", "warning", {"threads": SPLIT}, "the run's CPUs")
    shared = _finding("IN002", "info", {"num_workers": FEWER}, "the run's CPUs")
    report = SimpleNamespace(findings=[lead, shared], metrics={}, not_evaluated=[])
    assert _left_out(report, None, True) == []  # type: ignore[arg-type]
    own = _finding("IN001", "info", {"num_workers": FEWER}, "why IN001")
    report.findings.append(own)
    assert _left_out(report, None, True) == ["an info finding's reasons"]  # type: ignore[arg-type]
    full = _table(report.findings, detail=True)
    assert full.count("the run's CPUs") == 1 and "why IN001" in full


def test_a_share_the_rules_own_estimate_sets_stands_on_its_own() -> None:
    """A finding whose share is not its best prediction's (the rule's own estimate) shows
    that share, whatever change an earlier finding led with, as an estimate (``~``), not
    as the most a fix saves: a new user's CF008 read "gain ≤ 66%" and its fix saved 86%.
    A prediction's share is what a fix saves at most (``≤``); the JSON says which."""
    lead = _finding("IN004", "warning", {"threads": SPLIT}, "h")
    own = Finding("IN001", "input", "info", "IN001 title", "IN001 message", {}, ["threads"],
                  0.5, hints=["h2"], predictions={"threads": SPLIT})
    assert _gains(_table([lead, own], detail=False)) == {"IN004": "≤ 24%", "IN001": "~ 50%"}
    assert own.to_json()["estimated_gain_bound"] is False
    assert lead.to_json()["estimated_gain_bound"] is True
    from diagnose.report.html import _finding as html_finding

    assert "could save about 50% of step time (the rule" in str(html_finding(own))
    assert "could save up to 24% of step time" in str(html_finding(lead))


def test_the_timings_each_are_for_detail() -> None:
    m = {"step_count": 5, "steps_source": "ProfilerStep", "step_time_median_ms": 10.0,
         "step_time_p90_ms": 11.0, "probes_ms_total": 350.5,
         "probes_ms_each": "threads 0.25 s, cpu_capacity 0.10 s"}
    short, full = step_lines(m, each=False)[1], step_lines(m)[1]
    assert short is not None and short.endswith("the session's own timings of the job took 0.4 s")
    assert full is not None and "spent timing the compute on fewer threads 0.25 s" in full


def test_the_dataloader_line_says_what_the_workers_cost_the_cpus() -> None:
    """A new user read "No findings" beside a 19% wait of the training thread for a CPU
    his two workers held: the DataLoader line names the workers' CPUs and that wait where
    other processes held under half a CPU; with other processes busy, or a wait under 5%,
    the CPUs alone; without workers or samples, nothing. The workers' CPUs are those of the
    steps whose wait it states, the unprofiled ones; the window's (where a slowed loop
    left them idle: another new user read 0.06 CPUs of workers that did 0.35) say so."""
    from diagnose.report.text import unprofiled_dl

    m = {"dataloader_wait_unprofiled_share": 0.008, "step_workers_cpus_unprofiled": 0.321,
         "workers_cpus": 0.06,
         "dataloader_num_workers": 2, "step_cpu_wait_unprofiled_share": 0.1872,
         "step_others_cpus_unprofiled": 0.0, "torch_num_threads": 2, "cpu_count": 2}
    assert unprofiled_dl(m) == ("; 0.8% without the profiler; its 2 workers used 0.32 CPUs, "
                                "and the training thread waited 19% of its steps for a CPU "
                                "the run itself held (its workers and threads)")
    busy = {**m, "step_others_cpus_unprofiled": 0.98}
    assert unprofiled_dl(busy).endswith("its 2 workers used 0.32 CPUs")
    assert unprofiled_dl({**m, "step_cpu_wait_unprofiled_share": 0.02}).endswith("0.32 CPUs")
    window = {**m, "step_workers_cpus_unprofiled": None, "step_cpu_wait_unprofiled_share": 0}
    assert unprofiled_dl(window).endswith("its 2 workers used 0.06 CPUs in the profiled window")
    assert unprofiled_dl({**m, "workers_cpus": None, "step_workers_cpus_unprofiled": None}) == (
        "; 0.8% without the profiler")
    assert unprofiled_dl({**m, "dataloader_num_workers": 0, "workers_count": None}) == (
        "; 0.8% without the profiler")


def test_a_finding_graded_down_to_info_says_why_and_shows_its_zero() -> None:
    """A new user's in-process loader: "35.0% of step time waiting on DataLoader", info,
    with an empty gain cell; why (no fix saves any of it) was left to ``-v``. The short
    report shows an info finding's grading-down reason, and a share of 0 as "none" (a
    trial's user read "≤ 0%" beside "10.9% waiting" as a contradiction)."""
    same = Prediction({"num_workers": 2}, 32.1, 1.0, (28.0, 36.0), 32.1)
    f = Finding("IN001", "input", "warning", "IN001 title", "35.0% waiting", {},
                ["num_workers"], 0.35, hints=["why IN001"], predictions={"num_workers": same})
    f.take_gain(0.0, change=same.change)
    assert f.severity == "info"
    short = _table([f], detail=False)
    assert _gains(short) == {"IN001": "none"}
    assert "graded down from warning" in short and "why IN001" not in short


def test_the_html_and_tensorboard_words_for_nothing_at_stake() -> None:
    """The HTML and the TensorBoard tab say a share of 0 a prediction set in words, as the
    terminal shows "none": not "could save up to 0%"."""
    from diagnose.report.markup import gain_words
    from diagnose.values import a_type

    assert gain_words(0.0, True) == "no fix is predicted to save step time"
    assert gain_words(0.24, True) == "fixing it could save up to 24% of step time"
    assert [a_type(x) for x in (3, [], object())] == ["an int", "a list", "an object"]
