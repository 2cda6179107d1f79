"""Energy per step from NVML's total-energy counter over windows (a fake NVML: no GPU
here), and null with a reason where there is no counter."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from diagnose.watching.energy import EnergyMeter
from diagnose.watching.sampling import EnergyNvmlSampler, Tee
from tests.watching import fakes


def test_windows_need_time_and_steps() -> None:
    m = EnergyMeter(window_s=10, min_steps=20, batch_size=4)
    assert m.add(0.0, 0, 1_000_000) is None  # the first reading opens a window
    assert m.add(5.0, 100, 2_000_000) is None  # 5 s: too short
    assert m.add(11.0, 110, 3_000_000) == {
        "t0": 0.0, "t1": 11.0, "first": 0, "steps": 110, "joules": 2000.0,
        "j_per_step": pytest.approx(2000 / 110), "watts": pytest.approx(2000 / 11, rel=1e-3),
        "j_per_sample": pytest.approx(2000 / 110 / 4)}
    assert m.add(25.0, 120, 4_000_000) is None  # 10 steps: too few
    assert m.add(26.0, 130, 5_000_000)["steps"] == 20
    s = m.summary()
    assert s["j_per_step"] == pytest.approx(4000 / 130) and s["windows"] == 2


def test_a_counter_that_goes_back_starts_a_new_window() -> None:
    m = EnergyMeter(window_s=1, min_steps=1)
    m.add(0.0, 0, 9_000_000)
    assert m.add(2.0, 10, 1_000) is None  # the driver reloaded
    assert m.add(4.0, 20, 2_001_000)["joules"] == 2000.0


def test_no_window_gives_null_with_the_reason() -> None:
    m = EnergyMeter()
    assert m.add(0.0, 0, None) is None
    s = m.summary("not measured: no NVML GPU (no CUDA device visible to torch)")
    assert s["j_per_step"] is None and "no NVML GPU" in s["why"]
    assert "no window" in EnergyMeter().summary()["why"]


def test_the_sampler_reads_the_counter_and_tees_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes.install(monkeypatch, watts=200.0)
    rows = []
    s = Tee(EnergyNvmlSampler(index=0), lambda: 42, lambda n, t, r: rows.append((n, r)))
    s.open()
    a0 = time.monotonic()  # the fake's counter runs on this clock
    r0 = s.sample()
    a1 = time.monotonic()
    time.sleep(0.25)
    b0 = time.monotonic()
    r1 = s.sample()
    b1 = time.monotonic()
    assert r0["step"] == 42 and rows[0][0] == "gpu"
    # 200 W over the real gap between the two reads (at least the 0.25 s slept, more on a
    # busy host), within one of the counter's 100 ms steps (20 J) either way
    moved, tick = r1["energy_mj"] - r0["energy_mj"], 200 * 100
    assert 200 * 1000 * (b0 - a1) - tick - 1 <= moved <= 200 * 1000 * (b1 - a0) + tick + 1
    assert moved >= 2 * tick  # 0.25 s holds two whole steps of the counter
    s.close()


def test_a_board_without_the_counter_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes.install(monkeypatch, energy=False)
    s = EnergyNvmlSampler(index=0)
    s.open()
    assert s.sample()["energy_mj"] is None and s.sample()["util_pct"] == 90
    assert "no NVML total-energy counter" in (s.energy_why or "")


def _job(steps: int, sleep_s: float, **watch_kw: object) -> object:
    import torch

    from diagnose import watch

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    with watch(model, loader, baseline=False, print_summary=False, progress_s=None,
               **watch_kw) as w:
        done = 0
        while done < steps:
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(sleep_s)
                done += 1
                if done >= steps:
                    break
    return w


def test_joules_per_step_through_a_watched_loop(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    fakes.install(monkeypatch, watts=300.0)
    w = _job(150, 0.01, out_dir=tmp_path, gpu=0, sample_hz=20, energy_window_s=0.3)
    e = w.to_json()["energy"]
    assert e["why"] is None and e["windows"] >= 2
    # the board draws 300 W: the windows' joules are 300 W x the time they span (timed by
    # the windows themselves, so a busy machine that stretches the steps changes both),
    # within the counter's 100 ms grain (30 J) and 0.1 s for each end's read and its
    # timestamp not being one instant; their J/step is those joules over their steps
    wins = list(w.energy.windows)
    assert len(wins) == e["windows"] and 0 < e["steps"] <= 150
    assert all(b["first"] == a["first"] + a["steps"] for a, b in zip(wins, wins[1:], strict=False))
    assert e["steps"] == sum(x["steps"] for x in wins)
    span = wins[-1]["t1"] - wins[0]["t0"]
    # each step sleeps 10 ms: no more steps than that allows are counted in the span
    assert e["steps"] <= (span + 0.05) / 0.01 + 1, (e, span)
    assert e["joules"] == pytest.approx(300 * span, abs=30 + 300 * 0.1)
    assert e["j_per_step"] == pytest.approx(e["joules"] / e["steps"], rel=1e-4)
    assert e["j_per_sample"] == pytest.approx(e["j_per_step"] / 4)


def test_joules_per_step_are_null_on_a_cpu_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    w = _job(30, 0.0, out_dir=tmp_path, sample_hz=20)
    e = w.to_json()["energy"]
    assert e["j_per_step"] is None
    assert e["why"] == "not measured: no NVML GPU (no CUDA device visible to torch)"
