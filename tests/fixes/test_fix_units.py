"""Fix units: the catalog by category, registration, in-place, the search autofix runs, and
the prediction slot."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re

import pytest

from diagnose.errors import RuleError
from diagnose.fixes import (
    FIXES,
    SEARCH_CLIMB,
    SEARCH_DESCEND,
    SEARCH_EACH,
    Fix,
    Prediction,
    TrainConfig,
    catalog,
)
from diagnose.fixes.code import AFFINITY, LoaderSpec, Setup, some_workers
from diagnose.fixes.unit import registry
from diagnose.rules.engine import CATEGORIES, builtin_rules, load_rules
from diagnose.stepmodel.facts import Facts

CPU2 = Facts(device_type="cpu", cpu_count=2)
CUDA8 = Facts(device_type="cuda", cpu_count=8, bf16_supported=True)


# ---------------------------------------------------------------------- the registry
def _catalog_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(catalog.__path__))


def test_every_catalog_module_is_read_by_the_registry() -> None:
    assert sorted(m.__name__.rsplit(".", 1)[1] for m in catalog.MODULES) == _catalog_modules()


@pytest.mark.parametrize("name", _catalog_modules())
def test_every_fix_declared_is_registered(name: str) -> None:
    """A unit declared in a catalog module but missing from its FIXES fails here."""
    mod = importlib.import_module(f"diagnose.fixes.catalog.{name}")
    declared = [v for v in vars(mod).values() if isinstance(v, Fix)]
    assert declared, name
    for fix in declared:
        assert fix in mod.FIXES, f"{fix.id} is declared in {name}.py but not in its FIXES"
        assert FIXES[fix.id] is fix
    # each names a rule category; a module named after a category holds only its fixes
    # (the others are named after what their fixes change: workers, threads, fetch)
    assert {f.category for f in mod.FIXES} <= set(CATEGORIES)
    if name in CATEGORIES:
        assert {f.category for f in mod.FIXES} == {name}


def test_the_registry_is_every_module_s_units_and_nothing_else() -> None:
    units = [f for m in catalog.MODULES for f in m.FIXES]
    assert list(FIXES.values()) == units
    assert all(isinstance(f, Fix) and f.title and f.code for f in units)


def test_registry_refuses_a_duplicate_id_or_an_unknown_instead() -> None:
    a = Fix("a", "A", "# before\n# after")
    with pytest.raises(ValueError, match="twice"):
        registry([a, Fix("a", "A again", "# before\n# after")])
    with pytest.raises(ValueError, match="unknown fix 'nope'"):
        registry([Fix("b", "B", "# before\n# after", instead=("nope",))])


def test_every_fix_a_rule_names_is_registered_and_an_unknown_one_is_refused(tmp_path) -> None:
    for r in builtin_rules():
        assert all(f in FIXES for f in r.fixes), r.id
    src = (tmp_path / "mine.toml")
    src.write_text('''[[rule]]
id = "XX001"
category = "input"
title = "t"
when = "dataloader_share > 0.5"
warning = "dataloader_share > 0.5"
gain = "dataloader_share"
message = "m"
fixes = ["num_workerz"]
[rule.docs]
detects = "d"
why = "w"
fix = "f"
false_positives = "p"
''')
    with pytest.raises(RuleError, match="unknown fix 'num_workerz'"):
        load_rules([src])


def test_every_fix_is_used_by_a_rule_or_as_another_s_instead() -> None:
    named = {f for r in builtin_rules() for f in r.fixes}
    named |= {i for f in FIXES.values() for i in f.instead}
    assert named == set(FIXES)


# ---------------------------------------------------------------------- the search autofix runs
def test_the_worker_fixes_share_one_search_and_say_how_to_walk_it() -> None:
    nw, cap = FIXES["num_workers"], FIXES["num_workers_cap"]
    assert nw.search_key == cap.search_key == "num_workers"
    assert {f.search_key for f in FIXES.values()} == {None, "num_workers"}
    up = nw.candidates(TrainConfig(), Facts(cpu_count=8))
    assert [c.num_workers for c in up] == [1, 2, 4, 8]
    assert nw.search_mode(TrainConfig(), up) == SEARCH_CLIMB
    down = cap.candidates(TrainConfig(num_workers=6), CPU2)
    assert cap.search_mode(TrainConfig(num_workers=6), down) == SEARCH_DESCEND
    assert FIXES["foreach_optimizer"].search_mode(TrainConfig(), []) == SEARCH_EACH
    # the climb starts at the workers input needs: 10 ms of input per step made by one
    # process, against 3 ms of compute, needs 4 workers
    start = nw.search_start(TrainConfig(), up, input_ms=10.0, compute_ms=3.0)
    assert up[start].num_workers == 4
    assert up[nw.search_start(TrainConfig(), up, input_ms=0.1, compute_ms=3.0)].num_workers == 1
    assert up[nw.search_start(TrainConfig(), up, input_ms=99.0, compute_ms=1.0)].num_workers == 8
    # two workers already made that input: each takes twice as long
    two = nw.candidates(TrainConfig(num_workers=2), Facts(cpu_count=8))
    i = nw.search_start(TrainConfig(num_workers=2), two, input_ms=5.0, compute_ms=3.0)
    assert two[i].num_workers == 4


# ---------------------------------------------------------------------- the prediction slot
def test_a_fix_without_a_transform_says_it_has_no_prediction() -> None:
    p = FIXES["faster_input"].predict(object(), TrainConfig(num_workers=2), CPU2)
    assert isinstance(p, str) and "faster_input" in p


class _Predictor:
    """Stands in for the step model's Predictor: a step time per change, from a formula."""

    def __init__(self, input_ms: float, compute_ms: float) -> None:
        self.input_ms, self.compute_ms = input_ms, compute_ms
        self.asked: list[dict] = []

    def predict_change(self, transform, change):
        self.asked.append(dict(change))
        out = transform(None, change, Facts())
        if isinstance(out, str):
            return out
        now = self.input_ms + self.compute_ms
        step = self.input_ms / max(1, change.get("num_workers", 0)) + self.compute_ms
        return Prediction(dict(change), step, now / step, (step * 0.9, step * 1.1), now)


def test_a_fix_predicts_through_its_transform_for_each_config_autofix_would_measure() -> None:
    def workers(graph, change, facts):
        return graph  # the stand-in predictor does the arithmetic

    fix = FIXES["num_workers"].with_transform(workers)
    assert fix.id == "num_workers" and FIXES["num_workers"].transform is not workers
    pr = _Predictor(input_ms=10.0, compute_ms=10.0)
    p = fix.predict(pr, TrainConfig(), Facts(cpu_count=8))
    # every rung autofix would climb was predicted; the best is reported
    assert pr.asked == [{"num_workers": n} for n in (1, 2, 4, 8)]
    assert isinstance(p, Prediction) and p.change == {"num_workers": 8}
    assert p.to_json() == {"change": {"num_workers": 8}, "step_ms": 11.25,
                           "speedup": round(20 / 11.25, 3), "range": [10.125, 12.375],
                           "speedup_range": [round(20 / 12.375, 3), round(20 / 10.125, 3)]}

    def broken(graph, change, facts):
        raise ZeroDivisionError("no steps")

    q = FIXES["amp"].with_transform(broken).predict(pr, TrainConfig(), CUDA8)
    assert isinstance(q, str) and "ZeroDivisionError" in q
    # an advice-only fix predicts the change it stands for (here: none, a sync removed)
    pr.asked.clear()
    FIXES["remove_sync"].with_transform(workers).predict(pr, TrainConfig(), CPU2)
    assert pr.asked == [{}]


# ---------------------------------------------------------------------- in place
def _after_workers(code: str, cpus: int) -> int:
    """The num_workers the ``# after`` of a fix's code sets, evaluated on ``cpus`` CPUs."""
    after = code.split("# after", 1)[1].replace(AFFINITY, str(cpus))
    expr = re.search(r"num_workers=((?:[^(),]|\([^()]*\))+)", after)
    assert expr, code
    tree = ast.parse(expr.group(1), mode="eval")
    return int(eval(compile(tree, "<fix>", "eval"), {"min": min, "max": max}))


@pytest.mark.parametrize("cpus", [1, 2, 3, 8, 12])
def test_num_workers_is_in_place_exactly_when_its_code_changes_nothing(cpus: int) -> None:
    """The run's own loader (a Setup, as context.json gives it) with every worker count:
    the fix is left out exactly when the worker count its code sets is the current one."""
    for fid in ("num_workers", "num_workers_cap"):
        fix = FIXES[fid]
        for nw in range(0, cpus + 3):
            setup = Setup(LoaderSpec(batch_size=32, shuffle=True, num_workers=nw))
            code = fix.code_for(setup)
            metrics = {"dataloader_num_workers": nw, "cpu_count": cpus}
            if fid == "num_workers_cap" and nw == 0:  # nothing to cap: the generic example
                assert code == fix.code and "no worker" in (fix.in_place(metrics) or "")
                continue
            after = _after_workers(code, cpus)
            assert (fix.in_place(metrics) is not None) == (after == nw), (fid, nw, cpus)
    assert some_workers(2) == 1 and some_workers(1) == 0 and some_workers(16) == 8


def test_more_workers_than_the_template_sets_stay_on_offer_where_loading_waits() -> None:
    """7 workers on 8 CPUs is the template's count; where a worker's batch waits (0.5 ms
    of 10 on a CPU) more workers than CPUs are tried, so the fix is not in place."""
    fix = FIXES["num_workers"]
    metrics = {"dataloader_num_workers": 7, "cpu_count": 8, "input_worker_batch_ms": 10.0}
    assert fix.in_place({**metrics, "input_worker_batch_cpu_ms": 10.0}) is not None
    assert fix.in_place({**metrics, "input_worker_batch_cpu_ms": 0.5}) is None


def test_the_template_count_is_not_in_place_where_the_search_goes_downward() -> None:
    """7 workers on 8 CPUs is the template's count; on CPUs the diagnosis saw saturated
    the search goes down from it (the run's code sets fewer), so it is not in place."""
    fix = FIXES["num_workers"]
    metrics = {"dataloader_num_workers": 7, "cpu_count": 8}
    assert fix.in_place({**metrics, "host_cpu_mean_pct": 40.0}) is not None
    assert fix.in_place({**metrics, "host_cpu_mean_pct": 95.0}) is None


def test_in_place_needs_the_setting_known() -> None:
    for fix in FIXES.values():
        assert fix.in_place({}) is None, fix.id  # a bare trace: nothing is known
    assert FIXES["num_workers"].in_place({"dataloader_num_workers": 1}) is None  # CPUs?


def _metrics_of(config: TrainConfig) -> dict:
    """The context metrics a run with ``config`` records."""
    return {"dataloader_num_workers": config.num_workers,
            "dataloader_pin_memory": config.pin_memory,
            "dataloader_persistent_workers": config.persistent_workers,
            "dataloader_prefetch_factor": config.prefetch_factor,
            "cudnn_benchmark": config.cudnn_benchmark,
            "optimizer_foreach": config.optimizer_foreach,
            "optimizer_fused": config.optimizer_fused, "cpu_count": 8}


@pytest.mark.parametrize("fid", ["persistent_workers", "cudnn_benchmark", "foreach_optimizer"])
def test_in_place_agrees_with_the_configs_autofix_would_try(fid: str) -> None:
    """For a fix whose setting the context records: in place exactly when autofix has
    nothing to change on that TrainConfig (where the fix applies at all)."""
    fix = FIXES[fid]
    facts = Facts(device_type="cuda", model_has_conv=True, cpu_count=8)
    configs = [TrainConfig(num_workers=w, persistent_workers=p and w > 0, cudnn_benchmark=b,
                           optimizer_foreach=fe, optimizer_fused=fu)
               for w in (0, 2) for p in (False, True) for b in (False, True)
               for fe, fu in ((None, None), (True, None), (None, True), (False, None))]
    for c in configs:
        if fid == "persistent_workers" and c.num_workers == 0:
            continue  # the code adds workers: a change, not in place
        in_place = fix.in_place(_metrics_of(c)) is not None
        nothing = fix.why_not(c, facts) is not None or fix.changes_nothing(c, facts)
        assert in_place == nothing, (fid, c)


def test_threads_are_in_place_when_threads_and_workers_fit_the_cpus() -> None:
    t = FIXES["threads"]
    m = {"dataloader_num_workers": 1, "cpu_count": 2}
    assert t.in_place({**m, "torch_num_threads": 2}) is None  # 2 + 1 > 2: split them
    assert "no split" in (t.in_place({**m, "torch_num_threads": 1}) or "")
    assert "fit" in (t.in_place({**m, "torch_num_threads": 2, "cpu_count": 4}) or "")
    assert "set_num_threads" in t.code and "before" in t.code and "after" in t.code


# ---------------------------------------------------------------------- not offered when in place
def _in001(tmp_path, **ctx):
    from diagnose import analyze
    from tests import tracebuilder as tb

    path = tb.dataloader_bound(workers=1).write(tmp_path / "dl.pt.trace.json.gz")
    report = analyze(path, context={"dataloader": {"num_workers": 1, "batch_size": 64},
                                    **ctx})
    (f,) = [f for f in report.findings if f.rule == "IN001"]
    return f, report


def test_a_fix_already_in_place_is_not_offered_and_what_else_to_try_is(tmp_path) -> None:
    """num_workers=1 on 2 CPUs is what the num_workers fix sets: the finding does not offer
    it again; it offers what else to try (split the CPUs with torch's threads, cheaper
    samples) and says why."""
    f, report = _in001(tmp_path, cpu_count=2, torch_num_threads=2)
    assert "num_workers" not in f.fixes
    # what else to try takes num_workers' place (threads: the rule names it already); the
    # order after it follows the step model's predictions
    assert f.fixes[0] == "faster_input"
    assert sorted(f.fixes) == ["batched_fetch", "faster_input", "persistent_workers",
                               "prefetch_factor", "threads"]
    (hint,) = [h for h in f.hints if h.startswith("Not suggested")]
    assert "num_workers=1 already" in hint and "2 CPUs" in hint and "try instead" in hint
    assert set(f.fix_code) <= set(f.fixes)
    j = next(x for x in report.to_json()["findings"] if x["rule"] == "IN001")
    assert [x["id"] for x in j["fixes"]] == f.fixes
    text = report.render_text(width=132)
    assert "Make each sample cheaper" in text  # the first fix offered is shown


def test_what_else_to_try_leaves_out_what_is_in_place_too(tmp_path) -> None:
    # torch already on 1 thread beside 1 worker on 2 CPUs: the split is in place as well
    f, _ = _in001(tmp_path, cpu_count=2, torch_num_threads=1)
    assert f.fixes[0] == "faster_input" and "threads" not in f.fixes
    # more CPUs: the fix would add workers, so it is offered as before
    f, _ = _in001(tmp_path, cpu_count=8, torch_num_threads=8)
    assert sorted(f.fixes) == ["batched_fetch", "num_workers", "persistent_workers",
                               "prefetch_factor", "threads"]
    assert not [h for h in f.hints if h.startswith("Not suggested")]


def test_a_finding_whose_every_fix_is_in_place_says_nothing_here_helps(tmp_path) -> None:
    from diagnose import analyze
    from tests import tracebuilder as tb

    path = tb.optimizer_per_param().write(tmp_path / "opt.pt.trace.json.gz")
    ctx = {"optimizer": {"class": "AdamW", "foreach": True}}
    (f,) = [f for f in analyze(path, context=ctx).findings if f.rule == "CF001"]
    assert f.fixes == [] and f.fix_code == {}
    assert any("already runs foreach" in h for h in f.hints)
    assert any(h.startswith("Every fix the tool has for this finding is already in place")
               for h in f.hints)


def test_a_tie_goes_to_the_config_whose_loader_has_headroom():
    """Configs predicted within TIE of the best step tie: the one whose workers leave the
    step the most time between batches is the advice (a worker's batch may cost more in
    the loop than the one timed after it); outside the tie, the fastest."""
    from diagnose.fixes.unit import TIE, _with_headroom
    from diagnose.stepmodel.prediction import Prediction

    def pred(ms: float, share: float | None) -> Prediction:
        return Prediction({"ms": ms}, ms, 20.0 / ms, (ms, ms), 20.0, loader_share=share)

    one, two, three = pred(10.0, 1.0), pred(10.0 * (1 + TIE / 2), 0.5), pred(12.0, 0.3)
    assert _with_headroom(one, [one, two, three]) is two
    far = pred(10.0 * (1 + 2 * TIE), 0.2)
    assert _with_headroom(one, [one, far]) is one
    assert _with_headroom(one, [one, pred(10.1, None)]).step_ms == 10.1  # no workers at all


# ---------------------------------------------------------------------- the fields a fix changes
def test_a_fix_changes_only_the_fields_it_declares() -> None:
    """``Fix.fields`` (its realisations' key: tests/project/test_house.py) holds every
    field its candidates change, over configs and machines that make each fix search."""
    configs = [TrainConfig(), TrainConfig(num_workers=6, batch_size=32, grad_accum_steps=4),
               TrainConfig(num_workers=2, batch_size=12, prefetch_factor=2,
                           optimizer_foreach=False, zero_grad_set_to_none=False)]
    machines = [CPU2, CUDA8, CUDA8.replace(fused_supported=True, torch_num_threads=8,
                                           model_has_conv=True, allow_compile=True, oom=True,
                                           dataloader_dataset_tensor_indexable=True),
                CPU2.replace(torch_num_threads=2, host_cpu_mean_pct=95.0),
                CPU2.replace(torch_num_threads=2, step_others_cpus_unprofiled=1.0)]
    searched = set()
    # checkpointing's candidates are the blocks a memory section names: bound to one
    from diagnose.fixes.catalog.memory import ACTIVATION_CHECKPOINTING
    bound = ACTIVATION_CHECKPOINTING.for_memory(
        {"what_if": [{"change": {"checkpoint_modules": ["0"]}, "peak_bytes": 1}]})
    for fix in [*(f for f in FIXES.values() if f.id != bound.id), bound]:
        if not fix.auto:
            assert fix.fields == ()
            continue
        assert fix.fields, fix.id
        for c in configs:
            for facts in machines:
                for cand in fix.candidates(c, facts):
                    assert set(c.diff(cand)) <= set(fix.fields), fix.id
                    searched.add(fix.id)
    assert searched == {i for i, f in FIXES.items() if f.auto}


def test_a_loaders_worker_code_goes_where_its_search_goes() -> None:
    """7 workers on 8 CPUs, the template's count: where the worker's batch waits (0.5 ms
    of 10 on a CPU) the fix stays on offer (above) and, with no prediction to set the
    count (a saved trace, many ranks), its code must not read 7 -> min(8, CPUs - 1) = 7:
    it names the count the search climbs to. Loading on the CPU keeps the template."""
    from diagnose.fixes.for_run import code_for_run
    from diagnose.rules.engine import Finding

    ctx = {"dataloader": {"num_workers": 7, "batch_size": 32, "shuffle": True}}
    metrics = {"dataloader_num_workers": 7, "cpu_count": 8, "input_worker_batch_ms": 10.0,
               "input_worker_batch_cpu_ms": 0.5}

    def code(m):
        f = Finding(rule="IN001", title="t", category="input", severity="warning",
                    message="m", evidence={}, estimated_gain=0.3, fixes=["num_workers"])
        code_for_run([f], m, ctx)
        return f.fix_code.get("num_workers", FIXES["num_workers"].code)

    waits = code(metrics)
    assert "num_workers=7)" in waits.split("# after")[0]
    assert _after_workers(waits, 8) == most_workers_of(metrics) > 8
    assert "min(8" in code({**metrics, "input_worker_batch_cpu_ms": 10.0})
    # 2 workers on 2 saturated CPUs (a new user's, the prediction withheld on a busy
    # machine): the search goes down, and so does the code, saying why
    ctx["dataloader"]["num_workers"] = 2
    busy = code({"dataloader_num_workers": 2, "cpu_count": 2, "host_cpu_mean_pct": 99.0})
    assert _after_workers(busy, 2) == 1 and "fewer workers" in busy, busy


def most_workers_of(metrics) -> int:
    from diagnose.fixes.worker_search import most_workers

    return most_workers(Facts.from_metrics(metrics))
