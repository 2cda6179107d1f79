"""Every shape a real trace can take ends in a report or one clear line, never a traceback.

Real traces (bundled in samples/traces, and a few small ones from ../shared/traces where
that folder is present) are mutated into the shapes other recordings and broken writers
give (tests/fuzz_strategies.py ``MUTATIONS``: CUDA activity alone, no flows, one step,
duplicated or shuffled events, negative durations, args of the wrong type, ...). Each
mutated file is analysed as the command line analyses it (``diagnose.cli.main``, in this
process): exit 0 with a report on stdout, or exit 2 with one line on stderr. A step model
may be missing, with its reason, but never because the model's own code failed.

``test_each_mutation_of_each_trace`` runs every named mutation on every chosen trace
(len(MUTATIONS) x traces cases, listed); the property test draws chains of mutations.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnose import cli
from diagnose.stepmodel.step import FAILED
from tests.conftest import REPO, SHARED_TRACES
from tests.fuzz_strategies import MUTATIONS, mutate

#: small real traces: two bundled ones (always there; GPU and CPU) and one from
#: ../shared/traces (2021 category names) run through every mutation; the property test
#: also draws an AMD trace (hip* names, copies without pageable/pinned)
SAMPLE_TRACES = ["gpu/slow_loader", "cpu/slow_loader"]
SHARED = ["kineto/test__gpu_metrics_input.json"]
SHARED_DRAWN = [*SHARED, "hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
TRACES = [f"samples:{n}" for n in SAMPLE_TRACES] + [f"shared:{n}" for n in SHARED]
#: examples of the property test a run (each one analysis)
CHAINS = 30


def _path(name: str) -> Path:
    where, rel = name.split(":", 1)
    if where == "samples":
        return REPO / "samples" / "traces" / f"{rel}.pt.trace.json.gz"
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"real trace {rel} not available ({SHARED_TRACES} absent)")
    return p


@functools.cache
def _doc(name: str) -> dict:
    p = _path(name)
    with gzip.open(p) if p.name.endswith(".gz") else open(p, "rb") as f:
        doc = json.load(f)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


#: the command line's parser, built once (building it costs a fifth of a small analysis)
_parser: Callable[[], argparse.ArgumentParser] = functools.cache(cli._parser)


def analyze_cli(path: Path, fmt: str = "json") -> tuple[int, str, str]:
    """``torch-diagnose analyze PATH --format FMT`` in this process (``cli.main``, its
    parser built once): (exit code, stdout, stderr). Any exception the command line lets
    through propagates (a test failure)."""
    out, err = io.StringIO(), io.StringIO()
    with (mock.patch.object(cli, "_parser", _parser), contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err)):
        rc = cli.main(["analyze", str(path), "--format", fmt])
    return rc, out.getvalue(), err.getvalue()


def _runs(out: str) -> list[dict]:
    """The run documents of a JSON report (one run, or several under "runs")."""
    doc = json.loads(out)
    return doc.get("runs", [doc])


def check_shape(doc: dict | list, tmp: Path, fmt: str = "json") -> int:
    """Write ``doc`` and analyse it: a report, or exit 2 with one clear line."""
    p = tmp / "case.pt.trace.json"
    p.write_text(json.dumps(doc, allow_nan=True, default=str))
    rc, out, err = analyze_cli(p, fmt)
    assert "Traceback" not in err, err
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("torch-diagnose: error: "), err
        assert not out, out
        return rc
    assert rc == 0, (rc, err)
    assert out.strip(), "no report"
    if fmt == "json":
        for r in _runs(out):
            why = r["step_model_why"]
            assert not (isinstance(why, str) and why.startswith(FAILED)), why
    else:
        assert FAILED not in out, out
    return rc


@pytest.mark.parametrize("mutation", list(MUTATIONS))
@pytest.mark.parametrize("trace", TRACES)
def test_each_mutation_of_each_trace(trace, mutation, tmp_path):
    check_shape(mutate(_doc(trace), [mutation], seed=0), tmp_path)


def test_enough_cases_per_run():
    """At least 90 mutated cases a run: the listed ones (every mutation on every trace)
    and the property test's chains, with the bundled traces alone."""
    assert len(SAMPLE_TRACES) * len(MUTATIONS) + CHAINS >= 90


@pytest.mark.parametrize("mutation", ["steps with kernels only", "one step, one kernel",
                                      "one correlation id", "no ProfilerStep"])
def test_text_report(mutation, tmp_path):
    """Shapes that once crashed the step model, as text (the list runs JSON)."""
    check_shape(mutate(_doc("samples:gpu/slow_loader"), [mutation], seed=0), tmp_path, "text")


def test_cuda_activity_alone_has_no_host_numbers(tmp_path):
    """ProfilerStep and device ops only: what needs the host's ops or runtime calls is
    None (rules on it are not evaluated), the step model says why it has none, and the
    device's own numbers stand."""
    p = tmp_path / "case.pt.trace.json"
    p.write_text(json.dumps(mutate(_doc("samples:gpu/slow_loader"),
                                   ["steps with kernels only"], seed=0)))
    rc, out, _ = analyze_cli(p)
    assert rc == 0
    r = _runs(out)[0]
    m = r["metrics"]
    for k in ("launches_per_step", "idle_launch_frac", "idle_other_frac", "share_runtime",
              "share_cpu_exec", "share_other", "sync_calls_per_step", "item_calls_per_step",
              "memcpy_pageable_hidden_sync", "dataparallel_ops_per_step", "uses_cuda_graphs"):
        assert m[k] is None, k
    assert m["step_count"] == 3 and m["kernels_per_step"] > 0 and m["gpu_busy_frac"] > 0
    assert r["step_model"] is None and "launched" in r["step_model_why"]
    skipped = {n["rule"]: n["reason"] for n in r["not_evaluated"]}
    assert "no runtime calls" in skipped["UT002"] and "LA001" in skipped


def test_one_step_one_kernel_and_one_correlation_id(tmp_path):
    """The smallest trace with device work in a step reports (without a model: no launch
    is recorded); a correlation id shared by every call still gives a model (each device
    op taken as launched by the latest call before it, no sync as a launch: no cycle)."""
    doc = _doc("samples:gpu/slow_loader")
    assert check_shape(mutate(doc, ["one step, one kernel"], seed=0), tmp_path) == 0
    p = tmp_path / "same.pt.trace.json"
    p.write_text(json.dumps(mutate(doc, ["one correlation id"], seed=0)))
    rc, out, _ = analyze_cli(p)
    r = _runs(out)[0]
    assert rc == 0 and r["step_model"] is not None, r["step_model_why"]


@settings(max_examples=CHAINS, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(trace=st.sampled_from(SAMPLE_TRACES + SHARED_DRAWN),
       chain=st.lists(st.sampled_from(list(MUTATIONS)), min_size=1, max_size=3),
       seed=st.integers(0, 2**16), fmt=st.sampled_from(["json", "json", "text"]))
def test_chains_of_mutations(trace, chain, seed, fmt, tmp_path):
    name = f"samples:{trace}" if trace in SAMPLE_TRACES else f"shared:{trace}"
    if name.startswith("shared:") and not (SHARED_TRACES / trace).exists():
        name = f"samples:{SAMPLE_TRACES[0]}"  # ../shared absent: the bundled trace instead
    check_shape(mutate(_doc(name), chain, seed), tmp_path, fmt)
