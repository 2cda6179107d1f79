"""The terminal's fix panel shows a warning's first fix to try: never one the step model
predicts to slow the job (its hint says so) or one that does not apply to the run as it is;
a fix it cannot tell or a bound stays offered."""

from __future__ import annotations

from types import SimpleNamespace

from diagnose.fixes.findings import offered
from diagnose.report.text import _fix_panels
from diagnose.rules.engine import Finding
from diagnose.stepmodel.prediction import Prediction


def _finding(preds: dict) -> Finding:
    return Finding("IN001", "input", "warning", "Training waits on the DataLoader", "m", {},
                   list(preds), 0.5, predictions=preds)


def _titles(f: Finding) -> list[str]:
    return [str(p.title) for p in _fix_panels(SimpleNamespace(findings=[f]))]


def test_a_fix_predicted_slower_is_not_the_panel() -> None:
    slower = Prediction({"num_workers": 2}, 12.5, 0.8, (9.0, 16.0), 10.0)
    helps = Prediction({"num_workers": 2, "intra_op_threads": 1}, 8.0, 1.25, (7.0, 9.0), 10.0)
    f = _finding({"num_workers": slower, "threads": helps})
    assert offered(f) == ["threads"]
    assert _titles(f) == ["IN001 fix: Split the CPUs between torch's threads and the "
                          "loader's workers"]
    # every fix slower: no panel at all
    only = _finding({"num_workers": slower})
    assert offered(only) == [] and _titles(only) == []
    # the JSON form reads the same; a bound or no prediction stays offered
    as_json = _finding({"num_workers": slower.to_json(), "threads": "cannot tell"})
    assert offered(as_json) == ["threads"]
    # a fix that does not apply to the run as it is (worker settings with no workers)
    off = _finding({"persistent_workers": "does not apply to this run: needs worker "
                    "processes (num_workers > 0)", "threads": helps})
    assert offered(off) == ["threads"]
    # ... but a memory fix whose what-if predicts a peak is offered whatever autofix can try
    peak = _finding({"activation_checkpointing": "does not apply to this run: needs a step "
                     "over its memory budget"})
    peak.peaks = {"activation_checkpointing": {"peak_bytes": 5800}}
    assert offered(peak) == ["activation_checkpointing"]
    bound = Prediction({"num_workers": 2}, 12.5, 0.8, (9.0, 16.0), 10.0, at_least=True)
    assert offered(_finding({"num_workers": bound})) == ["num_workers"]


def test_a_saved_trace_offers_the_fix_it_cannot_rule_out_without_a_number() -> None:
    """A saved trace whose loop loaded in process (IN001, critical): it does not say how many
    CPUs the host has, which num_workers reads; the fix is offered as advice, its panel
    saying what could not be predicted, not dropped as if it did not apply. The worker
    settings that need workers (persistent, prefetch) still do not apply."""
    from diagnose.api import analyze
    from diagnose.fixes.findings import NOT_KNOWN
    from tests.conftest import REPO

    r = analyze(REPO / "samples" / "traces" / "gpu" / "pageable_copy.pt.trace.json.gz")
    f = next(x for x in r.findings if x.rule == "IN001")
    assert f.severity == "critical"
    assert f.predictions["num_workers"] == f"{NOT_KNOWN} how many CPUs the host has"
    assert f.predictions["persistent_workers"].startswith("does not apply to this run")
    assert offered(f)[0] == "num_workers"
    panel = _fix_panels(SimpleNamespace(findings=[f]))[0]
    assert "how many CPUs the host has" in str(panel.subtitle)


def test_a_live_run_with_its_cpus_known_keeps_a_fix_that_does_not_apply_off() -> None:
    """Where the run says how many CPUs there are, a fix that does not apply is not offered:
    ``unknown`` names nothing."""
    from diagnose.fixes import FIXES
    from diagnose.stepmodel.facts import Facts

    known = Facts(cpu_count=2, torch_num_threads=2)
    assert FIXES["num_workers"].unknown(known) is None
    assert FIXES["threads"].unknown(known) is None
    assert FIXES["num_workers"].unknown(Facts()) is not None
    assert FIXES["persistent_workers"].unknown(Facts()) is None
    # a live run whose loader gave no dataset to batch: not a saved trace's unknown
    assert FIXES["batched_fetch"].unknown(known) is None
    assert FIXES["batched_fetch"].unknown(Facts()) is not None
    # an IterableDataset has no indices: said so, not "not a plain TensorDataset"
    why = FIXES["batched_fetch"].in_place({"dataloader_iterable": True,
                                           "dataloader_dataset_tensor_indexable": False})
    assert why is not None and "IterableDataset" in why and "TensorDataset" not in why


def test_a_change_down_to_no_workers_is_titled_so_and_shown_once() -> None:
    """IN001's num_workers search landed on num_workers=0 (3 workers on 2 CPUs) and
    IN004's cap on the same: the panel's title says where the change lands, not "worker
    processes", and the second finding points to the first's panel instead of repeating
    it."""
    none = Prediction({"num_workers": 0}, 7.9, 1.48, (6.5, 9.7), 11.7)
    in001 = _finding({"num_workers": none})
    in004 = Finding("IN004", "config", "warning", "More DataLoader workers than CPUs", "m",
                    {}, ["num_workers_cap"], 0.3, predictions={"num_workers_cap": none})
    code = "loader = DataLoader(dataset, batch_size=64)"
    in001.fix_code = {"num_workers": code}
    in004.fix_code = {"num_workers_cap": code}
    panels = _fix_panels(SimpleNamespace(findings=[in001, in004]))
    assert str(panels[0].title) == ("IN001 fix: Load batches in the training process "
                                    "(DataLoader num_workers=0)")
    assert str(panels[1]) == ("IN004 fix: Load batches in the training process (DataLoader "
                              "num_workers=0), the same change as IN001's above")
    two = _finding({"num_workers": Prediction({"num_workers": 2}, 8.0, 1.2, (7, 9), 9.6)})
    assert _titles(two) == ["IN001 fix: Load batches in 2 worker processes "
                            "(DataLoader num_workers=2)"]


def test_a_fix_that_needs_workers_beside_one_that_removes_them_says_either_or() -> None:
    """IN004's num_workers=0 and IN005's persistent_workers=True cannot both be applied
    (DataLoader refuses persistent workers without workers): the report says so."""
    in004 = Finding("IN004", "config", "warning", "More DataLoader workers than CPUs", "m",
                    {}, ["num_workers_cap"], 0.3, predictions={
                        "num_workers_cap": Prediction({"num_workers": 0}, 7.9, 1.48,
                                                      (6.5, 9.7), 11.7)})
    in005 = Finding("IN005", "input", "warning", "Every epoch starts the workers again",
                    "m", {}, ["persistent_workers"], 0.12, predictions={
                        "persistent_workers": Prediction({"persistent_workers": True}, 10.4,
                                                         1.12, (9.5, 11.2), 11.7)})
    lines = [str(p) for p in _fix_panels(SimpleNamespace(findings=[in004, in005]))
             if not hasattr(p, "title")]
    assert lines == ["IN005's fix needs worker processes: apply it or IN004's num_workers=0, "
                     "not both"]
    alone = [p for p in _fix_panels(SimpleNamespace(findings=[in005])) if not hasattr(p, "title")]
    assert alone == []


def test_a_line_too_long_for_the_edge_is_read_in_full_inside_the_box() -> None:
    """The prediction line sits on the box's bottom edge where the width holds it; a longer
    one (a reason why nothing is predicted) goes inside the box, wrapped, not cut off."""
    import io

    from rich.console import Console

    from diagnose.fixes.findings import ON_A_BUSY_MACHINE

    def drawn(f: Finding, width: int) -> str:
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None).print(
            _fix_panels(SimpleNamespace(findings=[f]))[0])
        return buf.getvalue()

    why = (f"{ON_A_BUSY_MACHINE} in 41% of the timed steps; predict again when it is "
           "quieter, or time it by hand: autofix leaves an IterableDataset's workers as "
           "they are")
    long_ = _finding({"num_workers": why})
    for width in (80, 120):
        text = drawn(long_, width)
        assert " ".join(text.replace("│", " ").split()).count("IterableDataset's workers "
                                                              "as they are") == 1, text
        assert text.rstrip().splitlines()[-1].strip("╰─╯ ") == ""  # a bare bottom edge
    short = _finding({"num_workers": Prediction({"num_workers": 2}, 8.0, 1.25, (7.0, 9.0),
                                                10.0)})
    assert "predicted 10.0 -> 8.0 ms" in drawn(short, 80).rstrip().splitlines()[-1]


def test_every_warning_ends_with_its_fix_and_says_why_it_is_not_predicted() -> None:
    """A new user's report: IN001's panel (prefetch_factor, "cannot tell: the waits came
    in bursts ...") had no line at all, and IN003, whose first fix was the same, had no
    panel and no word of one. The panel says why nothing is predicted; the second finding
    points to the first's panel."""
    from diagnose.fixes.unit import CANNOT_TELL
    from diagnose.report.text import fix_line

    why = f"{CANNOT_TELL} the waits came in bursts (one step waited 33 ms)"
    in001 = _finding({"prefetch_factor": why})
    assert fix_line(in001, "prefetch_factor") == (
        "not predicted: the waits came in bursts (one step waited 33 ms)")
    in003 = Finding("IN003", "input", "warning", "t", "m", {}, ["prefetch_factor"], 0.1,
                    predictions={"prefetch_factor": why})
    panels = _fix_panels(SimpleNamespace(findings=[in001, in003]))
    assert len(panels) == 2 and str(panels[0].title).startswith("IN001 fix: ")
    assert str(panels[1]) == ("IN003 fix: Queue more batches ahead (DataLoader "
                              "prefetch_factor), as IN001's above")
