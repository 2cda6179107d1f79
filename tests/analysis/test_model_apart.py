"""A large trace's step model and memory section are built in a forked process while the
metrics are computed here: the same model and section as built here, built here where
that process dies, and never forked where one CPU is to be used."""

from __future__ import annotations

import os

import pytest

import diagnose.analysis as an
import diagnose.model_apart as apart
from diagnose.trace.parallel import fork_pool
from tests.conftest import shared_trace

TRACE = "kineto/resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz"


def _built(path: str, workers: int | None = None) -> tuple[dict, dict | None, dict]:
    """(the step model's JSON, the memory section, the metrics) of one file's analysis."""
    _, _, ms, _ = an._analyze_file(path, workers)
    return ms.tables[an.MODEL_TABLE].to_json(), ms.tables[an.MEMORY_TABLE], ms.values


@pytest.fixture
def forks(monkeypatch, forkable) -> list:
    """Every trace forks its model (two CPUs, no least size); the pools made, recorded."""
    monkeypatch.setattr(apart, "usable_cpus", lambda: 2)
    monkeypatch.setattr(apart, "MODEL_APART_MIN_EVENTS", 0)
    pools: list = []
    monkeypatch.setattr(apart, "fork_pool", lambda n: pools.append(fork_pool(n)) or pools[-1])
    return pools


def _here(path: str, monkeypatch) -> tuple[dict, dict | None, dict]:
    with monkeypatch.context() as m:
        m.setattr(apart, "MODEL_APART_MIN_EVENTS", 10**12)
        return _built(path)


def test_the_forked_model_is_the_one_built_here(monkeypatch, forks) -> None:
    path = str(shared_trace(TRACE))
    here = _here(path, monkeypatch)
    assert not forks
    forked = _built(path)
    assert len(forks) == 1 and forks[0] is not None  # built in the forked process
    assert here[0]["replayed_ms"] > 0 and forked == here


_PARENT = os.getpid()
_REAL_FORKED = apart._forked_model


def _dies_in_the_child():
    """Kills the forked process (the OOM killer, say); module level, as pool tasks are."""
    if os.getpid() != _PARENT:
        os._exit(9)
    return _REAL_FORKED()


def test_a_killed_model_process_is_built_here(monkeypatch, forks) -> None:
    path = str(shared_trace(TRACE))
    here = _here(path, monkeypatch)
    monkeypatch.setattr(apart, "_forked_model", _dies_in_the_child)
    assert _built(path) == here
    assert len(forks) == 1 and forks[0] is not None  # the fork was tried, and died


def test_a_read_inside_a_pool_does_not_fork_again(monkeypatch, forks) -> None:
    path = str(shared_trace(TRACE))
    _built(path, workers=1)  # as _read_all's pool runs each file
    assert forks == []


def test_the_forked_process_is_waited_for_when_the_metrics_fail(forks) -> None:
    import psutil

    from diagnose.trace import read_trace

    t = read_trace(shared_trace(TRACE))

    def fails() -> None:
        raise ValueError("a metric's defect")

    with pytest.raises(ValueError, match="a metric's defect"):
        apart.beside(t, None, None, fails)
    assert len(forks) == 1 and forks[0] is not None
    assert not [k for k in psutil.Process().children(recursive=True)
                if k.status() != psutil.STATUS_ZOMBIE]


def test_a_fork_that_fails_builds_the_model_here(monkeypatch, forks) -> None:
    """A fork refused by the system (ENOMEM on a huge trace, say) is no error: the model
    and memory section are built here, as without a second CPU."""
    path = str(shared_trace(TRACE))
    here = _here(path, monkeypatch)

    def no_fork(*a, **k):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor.submit", no_fork)
    assert _built(path) == here
    assert len(forks) == 1 and forks[0] is not None
