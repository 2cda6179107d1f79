"""A step re-run under FakeTensorMode counts what the changed job, run for real, counts; the
user's objects are left as they were; the tracker also wraps a loop's own iteration."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from diagnose.memory.fake import Base, fake_step  # noqa: E402
from diagnose.memory.tracker import StepTracker, run_step  # noqa: E402

from . import models as M  # noqa: E402


@pytest.mark.parametrize("change", [{"batch_size": 64}, {"checkpoint_modules": ["0", "1"]},
                                    {"batch_size": 16, "grad_accum_steps": 2},
                                    {"zero_grad_set_to_none": False},
                                    {"optimizer_class": "SGD"}])
def test_fake_counts_what_the_real_changed_job_counts(change):
    model = M.tower(depth=2, width=64)
    opt = torch.optim.AdamW(model.parameters())
    b = M.batch(32, 64)
    run_step(model, opt, [b], M.loss)
    before = [p.detach().clone() for p in model.parameters()]
    fake = fake_step(model, opt, b, M.loss, change, Base())
    real = fake_step(*copy.deepcopy((model, opt)), b, M.loss, change, Base(), fake=False)
    assert fake.tracked_peak_bytes == real.tracked_peak_bytes
    assert fake.by_kind() == real.by_kind()
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters(), strict=True))


def test_the_tracker_wraps_a_loops_own_step_with_micro_batches():
    model = M.tower(depth=2, width=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    b = M.batch(32, 64)
    run_step(model, opt, [b, b], M.loss)
    with StepTracker(model, opt, b) as t:  # the user's loop: two micro-batches, one step
        for _ in range(2):
            (M.loss(model, b) / 2).backward()
        opt.step()
        opt.zero_grad()
    prof = t.result().to_json()
    assert prof["model"]["optimizer_state"] == prof["model"]["parameters"]  # one buffer
    assert prof["peak_bytes"] > prof["model"]["parameters"] * 3  # + gradients + buffer
    assert prof["by_kind"]["gradients"] > 0 and prof["top_modules"]
