"""The reference pages: the generated ones are fresh, every relative link lands, and the
headline pages stay short enough to read.

docs/rules.md, docs/metrics.md and docs/calibration.md are written by docs/generate.py from
the rule pack, the metric declarations and the calibration module; benchmarks/RESULTS.md by
benchmarks/make_results.py from the saved runs. A change to any of those sources without
regenerating the page fails here, with the command to run.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
BENCH = REPO / "benchmarks"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), BENCH / "README.md",
         BENCH / "RESULTS.md"]
MAX_RESULTS_LINES = 400
#: a line of RESULTS.md (tables apart) is wrapped to this width
MAX_RESULTS_WIDTH = 110


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings, and its explicit <a id> anchors."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    out = set(re.findall(r'<a id="([^"]+)"', text))
    for h in re.findall(r"^#{1,6} (.+)$", text, re.M):
        keep = "".join(c for c in h.strip().lower() if c.isalnum() or c in " -_")
        out.add(keep.replace(" ", "-"))
    return out


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_generated_pages_are_fresh():
    gen = _load(DOCS / "generate.py", "docs_generate")
    stale = gen.stale()
    assert not stale, f"stale: {', '.join('docs/' + s for s in stale)}; run python docs/generate.py"


def test_generated_pages_cover_every_rule_metric_and_fix():
    from diagnose import FIXES
    from diagnose.metrics import CATALOG
    from diagnose.rules.engine import load_rule_file

    rules = (DOCS / "rules.md").read_text()
    for f in sorted((REPO / "rules").glob("*.toml")):
        for r in load_rule_file(f):
            assert f"### {r.id} " in rules, r.id
    for fid in FIXES:
        assert f"### `{fid}`" in rules, fid
    metrics = (DOCS / "metrics.md").read_text()
    import diagnose.metrics.ranks  # noqa: F401  (the cross-rank metrics join the catalog)

    for name in CATALOG:
        assert f"| `{name}` |" in metrics, name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_lands(page: Path):
    assert page.exists(), page
    for link in _links(page):
        if re.match(r"^[a-z]+:", link):  # http:, https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        dest = (page.parent / target).resolve() if target else page
        assert dest.exists(), f"{page.relative_to(REPO)}: link to {link} lands nowhere"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), \
                f"{page.relative_to(REPO)}: {link}: no heading #{anchor} in {dest.name}"


def test_the_readme_links_every_docs_page():
    readme = (REPO / "README.md").read_text()
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
    assert "(benchmarks/RESULTS.md)" in readme and "(benchmarks/README.md)" in readme


def test_pages_use_the_package_s_current_names():
    old = ("diagnose/tune", "diagnose.tune", "diagnose/model/", "diagnose.model.",
           "diagnose/engine.py", "diagnose/expr.py", "diagnose/template.py", "TuneReport",
           "TuneResult")
    for page in PAGES:
        text = page.read_text()
        for name in old:
            assert name not in text, f"{page.relative_to(REPO)} names {name!r}"


def test_results_is_a_headline_page_and_fresh():
    text = (BENCH / "RESULTS.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= MAX_RESULTS_LINES, f"RESULTS.md is {len(lines)} lines"
    wide = [ln for ln in lines if not ln.startswith("|") and len(ln) > MAX_RESULTS_WIDTH]
    assert not wide, wide[:3]
    mk = _load(BENCH / "make_results.py", "bench_make_results")
    assert text == mk.assemble(), "benchmarks/RESULTS.md is stale: run " \
                                  "python benchmarks/make_results.py"


def test_the_benchmarks_readme_names_every_script_and_job():
    readme = (BENCH / "README.md").read_text()
    scripts = [p for p in BENCH.glob("*.py") if not p.name.startswith("_")]
    for p in [*scripts, BENCH / "gpu_run.sh"]:
        assert f"`{p.name}`" in readme, f"benchmarks/README.md does not name {p.name}"
    for p in (BENCH / "jobs").glob("*.py"):
        if not p.name.startswith("_"):
            assert f"`jobs/{p.stem}`" in readme, p.stem
    assert "tuning jobs" in readme
