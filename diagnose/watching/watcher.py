"""``with watch(model, loader, out_dir=...) as w:`` around a whole, unchanged training loop:
every step is timed (wall time, loader wait: :mod:`.clock`) into bounded memory
(:mod:`.store`) and the run folder (:mod:`.timeline`, flushed every ``flush_s``); a sampler
thread reads the host and the GPU at ``sample_hz`` (:mod:`.sampling`). Detectors
(:mod:`.detector`, :mod:`.signals`) test step time and loader wait every ``TEST_S``
(:mod:`.steptests`), GPU utilisation and memory each sample, energy per window
(:mod:`.energy`). A baseline window is profiled once the step time's baseline is learnt; at
an alarm the next steps are (:mod:`.window`), analysed on a background thread and compared
with the baseline (:mod:`.changes`), rate-limited; detectors rest meanwhile. Under
torch.distributed each rank watches itself and names a straggler (:mod:`.ranks`).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from diagnose.capture import distributed, loader_shim
from diagnose.capture import runinfo as ctxmod
from diagnose.capture.boundaries import unknown_options, wrong_arguments
from diagnose.capture.samplers import Sampler, SamplerThread
from diagnose.errors import CaptureError, OptionError
from diagnose.runfolder import new_run_dir, samples_file, write_json

from . import summary as summ
from .alarm import SIGNALS, Alarm
from .captures import Capture, Captures
from .clock import StepClock
from .detector import Change, Detector, Params
from .energy import WINDOW_S, EnergyMeter
from .host import HostContext, explain, neighbours
from .ranks import RankWatch
from .sampling import EnergyNvmlSampler, Tee, watch_samplers
from .signals import PARAMS, WORSE, Reference, from_x, to_x
from .steptests import StepTests
from .store import StepStore
from .timeline import STEP_DTYPE, TIMELINE_VERSION, TimelineWriter, timeline_files

__all__ = ["Watch", "watch"]

#: steps after a window that the detectors skip (the profiler's leftovers)
AFTER_WINDOW_SKIP = 2
#: the steps are tested at least this often (s) and every this many steps: an alarm's
#: step is the step it was detected at either way; its capture starts this much later
TEST_S, MAX_UNTESTED = 0.25, 1024
#: alarms kept in memory at most (all are in the timeline; the oldest without a capture go)
MAX_ALARMS = 10_000
SAMPLED = ("gpu_util", "memory", "energy")  # the signals tested per sample
STEP_SIGNALS = ("step_time", "loader_wait")  # the signals tested per step

_active_lock = threading.Lock()
_active: Watch | None = None


class Watch:
    """Watch a whole training run (see the module docstring; options in docs/watch.md).

    ``capture_steps`` steps are profiled per capture (after one warm-up step);
    ``baseline``: profile a baseline window once the run settles; ``max_captures`` and
    ``capture_interval_s`` limit the captures alarms take; ``sample_hz``: host/GPU samples
    a second (0: none); ``progress_s``: a progress line on stderr at most this often
    (None: none); ``warmup_steps``: steps before the detectors learn; ``rank_every``,
    ``rank_margin``: the straggler check under torch.distributed; ``params``: detector
    parameters by signal (step_time's given: counts kept, not paced); ``gpu``: the GPU
    index NVML samples (the model's); ``energy_window_s``: the shortest energy window.
    """

    def __init__(self, model: Any = None, loader: Any = None, *,
                 out_dir: str | os.PathLike[str] | None = None, capture_steps: int = 5,
                 baseline: bool = True, max_captures: int = 5,
                 capture_interval_s: float = 600.0, sample_hz: float = 1.0,
                 progress_s: float | None = 60.0, warmup_steps: int = 20,
                 rank_every: int = 20, rank_margin: float = 0.10,
                 params: dict[str, Params] | None = None, gpu: int | None = None,
                 energy_window_s: float = WINDOW_S, analysis_timeout_s: float = 120.0,
                 print_summary: bool = True, flush_s: float = 2.0, ring: int = 8192,
                 block: int = 1000, **unknown: Any) -> None:
        if why := unknown_options("watch", unknown, Watch.__init__):
            raise OptionError(why)
        if capture_steps < 1 or warmup_steps < 0 or rank_every < 1 or max_captures < 0:
            raise CaptureError("watch(): need capture_steps >= 1, warmup_steps >= 0, "
                               "rank_every >= 1, max_captures >= 0")
        if why := wrong_arguments(model, loader, "watch", sample_hz=sample_hz,
                                  progress_s=progress_s, capture_interval_s=capture_interval_s):
            raise CaptureError(why)
        self.model, self.loader, self.out_dir = model, loader, out_dir
        self.capture_steps, self.baseline_wanted = capture_steps, baseline
        self.max_captures, self.capture_interval_s = max_captures, capture_interval_s
        self.sample_hz, self.progress_s = sample_hz, progress_s
        self.warmup_steps, self.rank_every, self.rank_margin = warmup_steps, rank_every, rank_margin
        self.params = {**PARAMS, **(params or {})}
        self.gpu, self.analysis_timeout_s = gpu, analysis_timeout_s
        self.print_summary, self.flush_s = print_summary, flush_s
        self.run_dir: Path | None = None
        self.rank: int | None = None
        self.world_size = 1
        self.steps = 0
        self.alarms: list[Alarm] = []
        self.alarms_dropped = 0  # past MAX_ALARMS (the timeline has them)
        self.spikes: deque[Alarm] = deque(maxlen=1000)
        self.spike_count = 0
        self.shifts: deque[Alarm] = deque(maxlen=1000)  # changes for the better: no alarms
        self.shift_count = 0
        self.notes: list[str] = []
        self.started = self.ended = 0.0
        self.store = StepStore(ring=ring, block=block, on_block=self._on_block,
                               on_steps=self._on_steps)
        self.energy = EnergyMeter(window_s=energy_window_s)
        self.host: dict[str, Any] = {}  # the last host sample's process CPU and RSS
        self._host = HostContext()
        self._unexplained: list[Alarm] = []  # step alarms waiting for the machine's context
        self._lock = threading.RLock()
        self._writer: TimelineWriter | None = None
        self._clock: StepClock | None = None
        self._sampler: SamplerThread | None = None
        self._tees: list[Tee] = []
        self._gpu_sampler: EnergyNvmlSampler | None = None
        self._caps: Captures | None = None
        self._ranks: RankWatch | None = None
        self._dist: Any = None
        self._context: dict[str, Any] = {}
        self._sample_dets = {s: Detector(self.params[s]) for s in SAMPLED}
        self._waiting: dict[str, int] = {}  # Reference.waiting's signals: the change's start
        self._refs = {s: Reference(w, self.params[s].min_change, n=self.params[s].min_len,
                                   since=warmup_steps if s in STEP_SIGNALS else None)
                      for s, w in WORSE.items()}
        self._tests = StepTests(self.params, warmup_steps, self._on_change,
                                lambda: bool(self._waiting),
                                lambda n: self._judge_again(n, STEP_SIGNALS),
                                pace="step_time" not in (params or {}))
        self.rests = self._tests.rests  # (first, stop): the steps not tested
        self._due_step, self._due_t = 1, 0.0  # _due runs at this step or this time
        self._next_gather = rank_every
        self._sample_n: dict[str, int] = {}
        self._perf0 = 0.0
        self._next_tick = 0.0
        self._next_flush = 0.0
        self._next_progress = 0.0
        self._entered = False

    # ------------------------------------------------------------------ public
    def step(self, mark: bool = True) -> None:
        """Mark a step boundary yourself (the automatic ones are off from the first call;
        ``mark=False``: only turn them off, as a trainer's callback does at its start)."""
        if self._clock is not None and mark:
            self._clock.manual()
        elif self._clock is not None:
            self._clock.mode = "manual"

    @property
    def testing(self) -> bool:
        """Steps are being tested now: the step time's baseline is learnt, the detectors
        not resting (a capture's window or analysis, the relearning after the baseline's)."""
        caps = self._caps
        return self._tests.det.ready and not self._tests.relearn and caps is not None and not caps.quiet

    @property
    def step_mode(self) -> str | None:
        return self._clock.mode if self._clock is not None else None

    def to_json(self) -> dict[str, Any]:
        """The whole record (what ``watch.json`` holds)."""
        return summ.record(self)

    def summary(self) -> str:
        """The text summary printed at the end."""
        return summ.text(self.to_json())

    @property
    def baseline(self) -> Any:
        """The baseline window's Report (None until it is analysed)."""
        return self._caps.baseline if self._caps is not None else None

    @property
    def captures(self) -> list[Capture]:
        """The captures started, in order (see :mod:`.captures`)."""
        return list(self._caps.jobs) if self._caps is not None else []

    # ------------------------------------------------------------------ enter
    def __enter__(self) -> Watch:
        global _active
        if self._entered:
            raise CaptureError("a watch() can be used for one `with` block only")
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise CaptureError("watch() needs PyTorch: install torch first") from e
        with _active_lock:
            if _active is not None:
                raise CaptureError("watch(): another watch() block is already running")
            _active = self
        self._entered = True
        try:
            self._open()
        except BaseException:
            self._close_parts()
            with _active_lock:
                _active = None
            raise
        return self

    def _open(self) -> None:
        self._dist = distributed.current()
        try:
            self.run_dir = (self._dist.run_dir(self.out_dir) if self._dist is not None
                            else new_run_dir(self.out_dir))
        except OSError as e:
            raise CaptureError(f"cannot create a run folder under {self.out_dir!r}: {e}") from e
        if self._dist is not None:
            self.rank, self.world_size = self._dist.rank, self._dist.world_size
            if self.world_size > 1:
                self._ranks = RankWatch(self.rank, self.world_size, every=self.rank_every,
                                        window=3 * self.rank_every, margin=self.rank_margin)
        self._context = ctxmod.collect(self.model, self.loader)
        dl = self._context.get("dataloader") or {}
        bs = dl.get("batch_size")
        self.energy.batch_size = bs if isinstance(bs, int) and bs > 0 else None
        self._writer = TimelineWriter(self.run_dir, self.rank)
        self._writer.record("meta", version=TIMELINE_VERSION, rank=self.rank,
                            world_size=self.world_size, pid=os.getpid(), t0=time.time(),
                            steps_file=timeline_files(self.rank)[1],
                            step_record=[[n, STEP_DTYPE[n].str] for n in STEP_DTYPE.names or ()],
                            settings=summ.settings(self))
        self._writer.flush()
        self._clock = StepClock(self.model, self.loader, self._on_step)
        self._caps = Captures(
            steps=self.capture_steps, max_captures=self.max_captures,
            interval_s=self.capture_interval_s, rank=self.rank,
            worker_name=self._dist.worker_name if self._dist is not None else None,
            context=self._capture_context, before=self._before,
            record=self._writer.record, defer=lambda: self._tests.under_way)
        if self.sample_hz:
            self._sampler = SamplerThread(self._samplers(), self.run_dir, self.sample_hz)
            self._sampler.path = Path(self.run_dir) / samples_file(self.rank)
            self._sampler.start()
        self.started = time.time()
        self._perf0 = time.perf_counter()
        self._next_tick = self._perf0 + 1.0
        self._next_flush = self._perf0 + self.flush_s
        self._next_progress = self._perf0 + (self.progress_s or math.inf)
        self._clock.install()
        self.notes.extend(self._clock.notes)

    def _samplers(self) -> list[Sampler]:
        clock = self._clock
        hooked = (clock is not None and self.loader is not None
                  and loader_shim.missing(self.loader) is None)
        dev = self._context.get("device") or {}
        self._tees, self._gpu_sampler = watch_samplers(
            step=lambda: self.steps, on_row=self._on_row, device=dev, gpu=self.gpu,
            worker_pids=(lambda: list(clock.worker_pids)) if hooked and clock else None)
        return list(self._tees)

    # ------------------------------------------------------------------ each step
    def _on_step(self, now: float, ms: float, wait: float) -> None:
        """A step ended (the training thread's hot path: a store write and two compares;
        the rest runs in :meth:`_due`, at most every ``TEST_S`` or ``MAX_UNTESTED`` steps,
        at each step of a window, and at each step the ranks gather at)."""
        n = self.steps = self.steps + 1
        self.store.add(now - self._perf0, ms, wait)
        if n >= self._due_step or now >= self._due_t:
            self._due(now, ms, wait)

    def _due(self, now: float, ms: float, wait: float) -> None:
        """The steps since the last call are tested; a window's step is counted, the once
        a second work done, the ranks gathered, a capture started; the next call is set."""
        caps = self._caps
        assert caps is not None
        if caps.analyst.busy:  # an analysis shares the CPUs: not the job's own pace
            self._host.hold()
        if caps.window is not None:
            over = caps.step(ms, wait)  # the window is over: the job's own steps again
            self._tests.skip(self.steps, self.steps + AFTER_WINDOW_SKIP if over else None)
            if over:
                self._host.tick(self.steps)
            if self._clock is not None:
                self._clock.restart()
        else:
            self._test(self.steps)
        if now >= self._next_tick:
            self._tick(now)
        if self._ranks is not None and self.steps >= self._next_gather:
            self._next_gather = self.steps + self.rank_every
            self._gather()  # every rank at the same step, inside a window or not
        if caps.due and self.run_dir is not None:
            self._test(self.steps)
            self._tests.rest(self.steps)
            self._host.reset()
            caps.start(self.steps, self.run_dir)
            if self._clock is not None:
                self._clock.restart()
        self._due_t = min(now + TEST_S, self._next_tick)
        self._due_step = (self.steps + 1 if caps.window is not None else min(
            self.steps + MAX_UNTESTED, self._next_gather if self._ranks else sys.maxsize))

    def _test(self, upto: int) -> None:
        """The steps before ``upto`` not tested yet go to the detectors (:mod:`.steptests`)."""
        caps = self._caps
        self._tests.test(self.store, upto, caps is not None and caps.analyst.busy,
                         self._settle)

    def _tick(self, now: float) -> None:
        """About once a second on the training thread: spikes, settling, flushing, progress."""
        self._next_tick = now + 1.0
        self._host.tick(self.steps, window=self._caps is not None and self._caps.window is not None)
        self._explain()
        self._drain_spikes()
        if now >= self._next_flush:
            self._next_flush = now + self.flush_s
            self.store.take_new()
            if self._writer is not None:
                self._writer.flush()
        if now >= self._next_progress:
            self._next_progress = now + (self.progress_s or math.inf)
            print(summ.progress_line(self), file=sys.stderr, flush=True)

    def _drain_spikes(self, final: bool = False) -> None:
        """Spikes the per-step detectors confirmed (at the end: their candidates too)."""
        for signal, sp in self._tests.spikes(final):
            self._spike(signal, sp.index, sp.value, sp.baseline)

    def _explain(self, final: bool = False) -> None:
        """The machine's context for the step alarms whose change has a second of ticks
        after it (at the end: whatever there is); the reference of those not the job's
        (its neighbours', or passed by their window) goes back."""
        for a in self._caps.take_passed() if self._caps is not None else []:
            self._back(a, passed=True)
        for a in list(self._unexplained):
            h = self._host.around(a.start or a.step, self.steps)
            if h is not None or final:
                self._unexplained.remove(a)
            if h is None:
                continue
            a.host, ends = h, (a.before, a.after) if a.signal == "step_time" else (None, None)
            a.host_line = explain(h, *ends)
            if self._writer is not None:  # the alarm's record was written before it
                self._writer.record("host", step=a.step, signal=a.signal, host=h,
                                    host_line=a.host_line, neighbours=neighbours(h, *ends))
            if neighbours(h, *ends):  # not the job's: its capture and its level go back
                a.neighbours = True
                self._back(a)

    def _back(self, a: Alarm, passed: bool = False) -> None:
        if a is next((x for x in reversed(self.alarms) if x.signal == a.signal), None):
            self._refs[a.signal].neighbours(passed)
        if self._caps is not None:
            self._caps.release(a)

    def _settle(self) -> None:
        """First baseline learnt: the loader's detector starts, the baseline window is asked for."""
        self._tests.settle(self._clock is not None and self._clock.loader_hooked,
                           [self._refs[s] for s in STEP_SIGNALS])
        if self.baseline_wanted and self._caps is not None:
            self._caps.ask_baseline()
            self._tests.relearn = True

    # ------------------------------------------------------------------ alarms
    def _on_change(self, signal: str, c: Change, step: int) -> None:
        ref = self._refs[signal]
        worse = ref.judge(c.before, c.after, c.index, c.sigma, start=c.start)
        if ref.waiting is not None:
            self._waiting[signal] = c.start
            if not worse:  # for the worse: judged again on its relearnt level (then a shift
                return  # or an alarm), not a shift now
        if worse:
            self._on_alarm(signal, ref.measured_from(c), step)
            return
        self._shift(signal, c, step)

    def _shift(self, signal: str, c: Change, step: int) -> None:
        """A change for the better, or back to about the reference: recorded, no alarm."""
        alarm = self._alarm(signal, c, step, "shift")
        self.shifts.append(alarm)
        self.shift_count += 1
        if self._writer is not None:
            self._writer.record("shift", **alarm.to_json())

    def _alarm(self, signal: str, c: Change, step: int, kind: str) -> Alarm:
        off = self._tests.wait_off if signal == "loader_wait" else 0.0
        return Alarm(step=step, signal=signal, kind=kind,
                     before=round(from_x(signal, c.before, off), 6),
                     after=round(from_x(signal, c.after, off), 6), unit=SIGNALS[signal],
                     t=time.time(), start=c.start, rank=self.rank)

    def _on_alarm(self, signal: str, c: Change, step: int) -> None:
        alarm = self._alarm(signal, c, step, "change")
        if signal in ("step_time", "loader_wait"):
            self._unexplained.append(alarm)
        self._raise(alarm, capture=True)

    def _judge_again(self, step: int, signals: tuple[str, ...]) -> None:
        """A change for the worse judged too small: once its detector learnt the new level,
        that level is judged (an alarm if it is worse than the reference by enough)."""
        for signal in signals:
            start = self._waiting.get(signal)
            det = self._tests.wait_det if signal == "loader_wait" else (
                self._tests.det if signal == "step_time" else self._sample_dets.get(signal))
            ref = self._refs[signal]
            if start is None or det is None or det.mu is None:
                continue
            del self._waiting[signal]
            before = ref.waiting
            if before is None:
                continue
            index = step if signal in ("step_time", "loader_wait") else \
                self._sample_n.get(signal, 0)
            change = Change(index, start, before, det.mu, det.sigma)
            if ref.settled(det.mu, step, det.mu_span):
                self._on_alarm(signal, ref.measured_from(change), step)
            else:  # it settled back to about the reference: a shift, not an alarm
                self._shift(signal, change, step)

    def _raise(self, alarm: Alarm, *, capture: bool, why: str | None = None) -> None:
        with self._lock:
            self.alarms.append(alarm)
            if len(self.alarms) > MAX_ALARMS:
                old = next((i for i, a in enumerate(self.alarms) if a.capture_dir is None), 0)
                del self.alarms[old]
                self.alarms_dropped += 1
            if capture and self._caps is not None:
                self._caps.want(alarm)
            else:
                alarm.capture_why = why
            if self._writer is not None:
                self._writer.record("alarm", **alarm.to_json())

    def _spike(self, signal: str, index: int, x: float, base: float) -> None:
        off = self._tests.wait_off if signal == "loader_wait" else 0.0
        a = Alarm(step=index, signal=signal, kind="spike",
                  before=round(from_x(signal, base, off), 6),
                  after=round(from_x(signal, x, off), 6), unit=SIGNALS[signal], t=time.time(),
                  rank=self.rank)
        self.spikes.append(a)
        self.spike_count += 1
        if self._writer is not None:
            self._writer.spike(index, signal, a.before, a.after, a.unit)

    # ------------------------------------------------------------------ captures
    def _capture_context(self) -> tuple[dict[str, Any], Any, str | None]:
        """What a capture's context.json takes from the run."""
        return (self._context, self._clock.optimizer if self._clock else None,
                self.step_mode)

    def _before(self, first: int, stop: int) -> tuple[list[float], list[float]]:
        """The unprofiled steps before a window (ms, loader wait ms) that the ring holds."""
        _, ms, wait = self.store.span(first, stop)
        return ms.tolist(), wait.tolist()

    # ------------------------------------------------------------------ samples
    def _on_row(self, name: str, t: float, row: dict[str, Any]) -> None:
        """A sample (the sampler thread): GPU signals to their detectors, energy windows."""
        if name == "host":
            self.host = {"proc_cpu_pct": row.get("proc_cpu_pct"),
                         "proc_rss_bytes": row.get("proc_rss_bytes")}
            self._host.sample(int(row.get("step") or 0), row)
            return
        step = int(row.get("step") or 0)
        quiet = self._caps is None or self._caps.quiet
        win = self.energy.add(t, step, row.get("energy_mj"))
        if win is not None and self._writer is not None:
            self._writer.record("energy", **win)
        for signal, v in (("gpu_util", row.get("util_pct")),
                          ("memory", row.get("mem_used_bytes")),
                          ("energy", win["j_per_step"] if win else None)):
            if not isinstance(v, int | float) or quiet or (signal == "energy" and v <= 0):
                continue
            det = self._sample_dets[signal]
            c = det.update(to_x(signal, float(v)), self._count(signal))
            if c is not None:
                self._on_change(signal, c, step)
            elif signal in self._waiting:
                self._judge_again(step, (signal,))
        if self._writer is not None:
            self._writer.flush(steps=False)

    def _count(self, signal: str) -> int:
        """A running index per sampled signal (its detector's own clock)."""
        n = self._sample_n.get(signal, 0)
        self._sample_n[signal] = n + 1
        return n

    # ------------------------------------------------------------------ many ranks
    def _gather(self) -> None:
        rw = self._ranks
        assert rw is not None
        t0 = time.perf_counter()
        _, ms, wait = self.store.last(rw.window)
        try:
            summaries = rw.gather(rw.summary(self.steps, ms, wait))
        except Exception as e:  # the group is gone, or a rank left: stop gathering
            self._ranks = None
            self.notes.append(f"the per-rank gather stopped: {type(e).__name__}: {e}")
            return
        rw.cost_s += time.perf_counter() - t0
        if self.rank == 0 and self._writer is not None:
            self._writer.record("ranks", step=self.steps, summaries=summaries)
        s = rw.judge(summaries)
        if s is not None and (self.rank == 0 or s.rank == self.rank):
            alarm = Alarm(step=self.steps, signal="rank", kind="change",
                          before=round(s.others_ms, 6), after=round(s.step_ms, 6), unit="ms",
                          t=time.time(), rank=s.rank)
            if s.rank == self.rank:
                self._raise(alarm, capture=True)
            else:
                self._raise(alarm, capture=False,
                            why=f"rank {s.rank} takes the capture (its own folder under "
                                "captures/)")
        if self._clock is not None:
            self._clock.restart()

    # ------------------------------------------------------------------ exit
    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        global _active
        try:
            self._close_parts()
            self._finish(exc)
        except Exception as e:  # the user's own exception (if any) comes through untouched
            print(f"torch-diagnose: watch could not finish {self.run_dir}: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
        finally:
            with _active_lock:
                if _active is self:
                    _active = None

    def _close_parts(self) -> None:
        """Hooks off, an open window stopped, samplers stopped; each even if one failed."""
        try:
            if self._clock is not None:
                # the last optimizer step, whose boundary waited for a batch that never
                # came, is a step too (N optimizer steps: N steps), outside any window
                last = self._clock.pending_step()
                if last is not None and (self._caps is None or self._caps.window is None):
                    self.steps += 1
                    self.store.add(last[0] - self._perf0, last[1], last[2])
                self._clock.remove()
                self.notes.extend(f"step hook failed: {e}" for e in self._clock.errors)
        finally:
            try:
                if self._caps is not None:
                    self._caps.stop()
            finally:
                if self._sampler is not None and not self._sampler.stop():
                    self.notes.append("the sampler thread did not stop within 5 s")

    def _finish(self, exc: BaseException | None) -> None:
        if self._caps is not None and self._caps.window is None:
            self._test(self.steps)
        self._tests.end(self.steps)
        self._host.tick(self.steps)
        self._explain(final=True)
        self.notes.extend(f"the watch's {t.name} samples: {e}" for t in self._tees
                          for e in t.errors)
        if self.alarms_dropped:
            self.notes.append(f"{self.alarms_dropped} older alarms are in the timeline only "
                              f"(at most {MAX_ALARMS:,} kept in memory)")
        self._drain_spikes(final=True)
        if self._caps is not None and not self._caps.wait(self.analysis_timeout_s):
            self.notes.append(f"analyses still running after {self.analysis_timeout_s:.0f} s "
                              "were left (their alarms say 'pending')")
        self.ended = time.time()
        raised = None
        if exc is not None:
            why = str(exc)[:200]
            raised = type(exc).__name__ + (f": {why}" if why else "")
            self.notes.append(f"the loop raised {raised}")
        self.store.take_new()
        rec = self.to_json()
        if self._writer is not None:
            self._writer.record("end", steps=self.steps, t=self.ended,
                                alarms=len(self.alarms), spikes=self.spike_count,
                                raised=raised)
            self._writer.close()
            self.notes.extend(f"timeline writing stopped: {e}" for e in self._writer.errors)
        if self.run_dir is not None:
            name = f"watch{f'.rank{self.rank}' if self.rank else ''}.json"
            write_json(self.run_dir / name, rec, default=str)
        if self.print_summary and (self.rank is None or self.rank == 0):
            print(summ.text(rec), file=sys.stderr)

    # ------------------------------------------------------------------ store hand-over
    def _on_block(self, row: dict[str, float]) -> None:
        if self._writer is not None:
            self._writer.record("block", **row)

    def _on_steps(self, first: int, t: Any, ms: Any, wait: Any) -> None:
        if self._writer is not None:
            self._writer.steps(first, t, ms, wait)


#: the public name: ``with watch(model, loader) as w:`` makes a Watch
watch = Watch
