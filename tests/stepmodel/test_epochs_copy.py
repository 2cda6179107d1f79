"""The pages a step writes, copied after an epoch's forks (diagnose/stepmodel/epochs.py)."""

from __future__ import annotations

import pytest

from diagnose.stepmodel.epochs import epoch_start_ms, fork_copy_ms
from diagnose.stepmodel.facts import Facts

#: a CPU run without workers, its worker's start, batch, hand-over and stop timed
RUN = dict(dataloader_num_workers=0, dataloader_epoch_batches=10, cpu_count=2,
           input_worker_start_ms=30.0, input_worker_fork_ms=10.0, input_worker_batch_ms=4.0,
           input_worker_handover_ms=1.0, input_worker_stop_ms=6.0)
#: the copies timed: the work's 40 ms, and 64 MiB of states at 2 ms a MiB
COPIES = dict(input_worker_fork_copy_ms=40.0, input_worker_fork_copy_ms_per_mib=2.0,
              mem_model_states_bytes=64 * 2**20)


def test_the_first_step_after_the_forks_copies_the_memory_the_step_writes() -> None:
    """The work's copies and the optimizer's (states x price): 40 + 128 ms once an epoch,
    spread over its 10 steps; nothing for workers that fork once."""
    facts = Facts(**RUN, **COPIES)
    assert fork_copy_ms(facts) == pytest.approx(168.0)
    then = epoch_start_ms(facts, {"num_workers": 2})
    without = epoch_start_ms(Facts(**RUN), {"num_workers": 2})
    assert then is not None and without is not None
    # start: max(2 forks + batch + hand-over, one start + batch, 2 (start-up + batch) / 2)
    assert without == pytest.approx((max(2 * 10 + 4 + 1, 30 + 4, 2 * (29 + 4) / 2) + 6) / 10)
    assert then - without == pytest.approx(16.8)
    assert epoch_start_ms(facts, {"num_workers": 2, "persistent_workers": True}) == 0.0


def test_the_copies_count_what_was_timed() -> None:
    """The work's part not timed (a model on a GPU, a loader that does not fork, a saved
    trace): 0; the states or their price not known: the work's part alone."""
    assert fork_copy_ms(Facts(**RUN)) == 0.0
    no_work = {k: v for k, v in COPIES.items() if k != "input_worker_fork_copy_ms"}
    assert fork_copy_ms(Facts(**RUN, **no_work)) == 0.0
    assert fork_copy_ms(Facts(**RUN, input_worker_fork_copy_ms=40.0,
                              mem_model_states_bytes=2**26)) == pytest.approx(40.0)
    assert fork_copy_ms(Facts(**RUN, input_worker_fork_copy_ms=40.0,
                              input_worker_fork_copy_ms_per_mib=2.0)) == pytest.approx(40.0)


def test_the_runs_own_start_seen_gets_the_copies_the_clock_did_not_time() -> None:
    """Workers now, their start seen (the wait for the first batch) but no boundary step
    timed: the copies of the step after it are added to the wait and the end."""
    seen = dict(RUN, dataloader_num_workers=2, dataloader_start_ms=50.0, **COPIES)
    assert epoch_start_ms(Facts(**seen)) == pytest.approx((50.0 + 168.0 + 6.0) / 10)


def test_one_thread_copies_at_the_one_thread_price() -> None:
    """A change to one intra-op thread from two: the copies at the one-thread price over
    torch's (2 ms a MiB against 0.5: a quarter); no scaling without that price, or where
    torch ran on one thread already."""
    two = Facts(**RUN, **COPIES, torch_num_threads=2,
                input_worker_fork_copy_ms_per_mib_1thread=0.5)
    assert fork_copy_ms(two, threads=1) == pytest.approx(168.0 / 4)
    assert fork_copy_ms(two, threads=2) == pytest.approx(168.0)
    then = epoch_start_ms(two, {"num_workers": 2, "intra_op_threads": 1})
    more = epoch_start_ms(two, {"num_workers": 2})
    assert then is not None and more is not None
    assert more - then == pytest.approx((168.0 - 42.0) / 10)
    assert fork_copy_ms(Facts(**RUN, **COPIES, torch_num_threads=2), threads=1) == 168.0
    one = Facts(**RUN, **COPIES, torch_num_threads=1,
                input_worker_fork_copy_ms_per_mib_1thread=0.5)
    assert fork_copy_ms(one, threads=1) == 168.0
