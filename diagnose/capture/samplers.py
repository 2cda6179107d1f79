"""Background samplers: host (psutil) and GPU (NVML) time series during a capture.

One daemon thread (``SamplerThread``) ticks at ``hz`` and asks every sampler for
one row; rows stream to ``samples.jsonl`` in the run folder (format and the dict
``runfolder.load_samples`` builds from it are documented there), so memory stays
flat however long the run. Samplers never take the training down:

- a sampler that cannot start (no GPU, no NVML) is recorded as *unavailable*
  with the reason, and the others run;
- an exception from a running sampler ends that sampler and is recorded as an
  *error* (type and message); the thread and the other samplers go on;
- the thread itself catches everything, and ``stop()`` always joins it.

Every line of Python a tick runs holds the GIL the training thread needs between its
ops (and a sampler thread the OS preempts while holding it stalls the loop for a whole
time slice), so a tick does little in Python: the host's counters come from preads of
``/proc`` files kept open and split in C (:func:`parse_proc_stat`), psutil only where
those files are missing, NVML through ctypes. ``benchmarks/capture_overhead.py`` times a
tick and the loop with the samplers on.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from diagnose.runfolder import SAMPLES_FILE, SAMPLES_VERSION

from .followed import Descendants, Followed, local_ranks, peer_pids

DEFAULT_HZ = 10.0
_FLUSH_EVERY_S = 1.0


class SamplerUnavailable(Exception):
    """A sampler cannot run here; the message is the reason shown to the user."""


class Sampler:
    """One source of time series. Subclasses set ``name`` and implement the three calls.

    ``open`` runs on the sampler thread and returns static facts (``info``) or
    raises ``SamplerUnavailable``; ``sample`` returns one row of numbers (None
    where a value could not be read); ``close`` releases what ``open`` took.
    """

    name: str = "sampler"

    def open(self) -> dict[str, Any]:
        return {}

    def sample(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        return None


class UnavailableSampler(Sampler):
    """Stands for a sampler known in advance not to work here (e.g. no CUDA device)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def open(self) -> dict[str, Any]:
        raise SamplerUnavailable(self.reason)

    def sample(self) -> dict[str, Any]:  # pragma: no cover - never opened
        raise SamplerUnavailable(self.reason)


#: /proc/stat's per-CPU columns summed into a CPU's time: user nice system idle iowait irq
#: softirq steal (guest and guest_nice are already inside user and nice, as psutil counts)
_STAT_TOTAL = 8
_STAT_IDLE, _STAT_IOWAIT, _STAT_STEAL = 3, 4, 7


def parse_proc_stat(data: bytes) -> dict[int, tuple[int, int, int, int]]:
    """``/proc/stat``'s per-CPU lines as {cpu: (total, idle + iowait, iowait, steal)} in
    clock ticks (online CPUs only; a line too short to hold iowait is left out, one without
    steal has 0: the time a hypervisor ran something else on the CPU)."""
    out: dict[int, tuple[int, int, int, int]] = {}
    for line in data.split(b"\n")[1:]:  # the first line is the sum over CPUs
        if not line.startswith(b"cpu"):
            break  # the per-CPU lines come first, together
        f = line.split()
        if len(f) <= _STAT_IOWAIT + 1 or not f[0][3:].isdigit():
            continue
        v = [int(x) for x in f[1:_STAT_TOTAL + 1]]
        out[int(f[0][3:])] = (sum(v), v[_STAT_IDLE] + v[_STAT_IOWAIT], v[_STAT_IOWAIT],
                              v[_STAT_STEAL] if len(v) > _STAT_STEAL else 0)
    return out


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (affinity), or all of them where unknown."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


class HostSampler(Sampler):
    """Per-core CPU busy %, system iowait, this process and its DataLoader workers; under
    torchrun the other ranks on this host too (``peers_cpu_pct``: the job's own CPU).

    ``worker_pids`` returns the pids of the DataLoader workers to follow (the
    session reads them off the loader's iterator); when it is None, all child
    processes are followed instead, re-listed once a second.
    """

    name = "host"

    def __init__(
        self,
        pid: int | None = None,
        worker_pids: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self._pid = os.getpid() if pid is None else pid
        self._worker_pids = worker_pids
        self._cores: list[int] = []
        self._proc: Any = None
        self._prev: Any = None
        self._children: list[int] = []
        self._root: Any = None  # torchrun's agent, whose other ranks are the job's own
        self._peer_list: list[int] = []
        self._peers_at = 0.0
        self._children_at = 0.0
        self._statm: int | None = None  # fd of /proc/<pid>/statm for the fast path
        self._stat: int | None = None  # fd of /proc/stat (per-CPU ticks), kept open
        self._ticks: dict[int, tuple[int, int, int, int]] = {}
        self._stat_size = 8192  # bytes read from /proc/stat a tick (grows to hold every CPU)
        self._self_prev: tuple[float, float] = (0.0, 0.0)  # (wall, cpu) seconds

    def open(self) -> dict[str, Any]:
        try:
            import psutil
        except ImportError as e:  # pragma: no cover - psutil is a dependency
            raise SamplerUnavailable(f"psutil is not installed: {e}") from e
        self._psutil = psutil
        self._proc = psutil.Process(self._pid)
        self._proc.cpu_percent(None)  # the first call only primes the counter
        self._loader_procs, self._peers = Followed(psutil), Followed(psutil)
        self._kids = Descendants(psutil, self._proc)  # the job's own, not its workers
        if local_ranks() >= 2 and self._pid == os.getpid():
            with contextlib.suppress(psutil.Error):
                self._root = self._proc.parent()
        if self._pid == os.getpid():
            # fast path for our own process: os.times() and one pread of statm cost a
            # few microseconds, psutil's oneshot() about 40 (this runs every tick)
            try:
                self._statm = os.open(f"/proc/{self._pid}/statm", os.O_RDONLY)
                self._page = os.sysconf("SC_PAGE_SIZE")
                t = os.times()
                self._self_prev = (time.monotonic(), t.user + t.system)
            except (OSError, AttributeError, ValueError):
                self._statm = None
        self._cores = usable_cpus()
        try:  # fast path: one pread and a split in C, no psutil objects per tick
            self._stat = os.open("/proc/stat", os.O_RDONLY)
            self._ticks = self._read_stat()
            if not self._ticks:
                raise ValueError("no per-CPU lines")
        except (OSError, ValueError):
            self._close_stat()
            self._prev = psutil.cpu_times(percpu=True)
        return {"cores": self._cores, "cpu_count": len(self._cores), "pid": self._pid}

    def _read_stat(self) -> dict[int, tuple[int, int, int, int]]:
        assert self._stat is not None
        data = os.pread(self._stat, self._stat_size, 0)
        # the per-CPU block ends where "intr" starts; more CPUs than fit: a larger read, kept
        while len(data) >= self._stat_size and b"\nintr" not in data:
            self._stat_size *= 4
            data = os.pread(self._stat, self._stat_size, 0)
        return parse_proc_stat(data)

    def _close_stat(self) -> None:
        if self._stat is not None:
            with contextlib.suppress(OSError):
                os.close(self._stat)
            self._stat = None

    def _cpu_fast(self) -> tuple[list[float | None], float | None, float | None]:
        """Per usable core busy % and the system's iowait % and steal % since the last
        tick, from /proc/stat's ticks (the same figures :meth:`_cpu_psutil` computes)."""
        cur = self._read_stat()
        prev, self._ticks = self._ticks, cur
        cpu_pct: list[float | None] = []
        for c in self._cores:
            a, b = cur.get(c), prev.get(c)
            dt = a[0] - b[0] if a is not None and b is not None else 0
            cpu_pct.append(round(max(0.0, min(100.0, 100.0 * (1.0 - (a[1] - b[1]) / dt))), 2)
                           if a is not None and b is not None and dt > 0 else None)
        d_total = d_iowait = d_steal = 0
        for c, a in cur.items():
            b = prev.get(c)
            if b is not None:
                d_total += a[0] - b[0]
                d_iowait += a[2] - b[2]
                d_steal += a[3] - b[3]
        if d_total <= 0:
            return cpu_pct, None, None
        return (cpu_pct, round(100.0 * d_iowait / d_total, 3),
                round(100.0 * d_steal / d_total, 3))

    @staticmethod
    def _total(t: Any) -> float:
        # guest time is already counted in user/nice on Linux (psutil does the same)
        return sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)

    @staticmethod
    def _idle(t: Any) -> float:
        return t.idle + getattr(t, "iowait", 0.0)

    def sample(self) -> dict[str, Any]:
        cpu_pct, iowait, steal = (self._cpu_fast() if self._stat is not None
                                  else self._cpu_psutil())
        if self._statm is not None:
            proc_cpu, proc_rss = self._self_stats()
        else:
            with self._proc.oneshot():
                proc_cpu = round(self._proc.cpu_percent(None), 2)
                proc_rss = int(self._proc.memory_info().rss)

        count, w_cpu, w_n, w_rss = self._sample_workers()
        row = {
            "cpu_pct": cpu_pct,
            "iowait_pct": iowait,
            "steal_pct": steal,
            "proc_cpu_pct": proc_cpu,
            "proc_rss_bytes": proc_rss,
            "workers_count": count,
            "workers_cpu_pct": w_cpu,
            "workers_cpu_n": w_n,
            "workers_rss_bytes": w_rss,
            "kids_cpu_pct": self._kids.sample(self._loader_procs),
        }
        if self._root is not None:  # the other ranks on this host: the job's, not others'
            row["peers_cpu_pct"] = self._peers.sample(self._current_peer_pids())[1]
        return row

    def _cpu_psutil(self) -> tuple[list[float | None], float | None, float | None]:
        """Per usable core busy %, iowait % and steal % from psutil (no /proc/stat here)."""
        psutil = self._psutil
        cur = psutil.cpu_times(percpu=True)
        prev, self._prev = self._prev, cur
        cpu_pct: list[float | None] = []
        for c in self._cores:
            if c >= len(cur) or c >= len(prev):
                cpu_pct.append(None)
                continue
            dt = self._total(cur[c]) - self._total(prev[c])
            didle = self._idle(cur[c]) - self._idle(prev[c])
            cpu_pct.append(
                round(max(0.0, min(100.0, 100.0 * (1.0 - didle / dt))), 2) if dt > 0 else None
            )
        n = min(len(cur), len(prev))
        d_total = sum(self._total(cur[i]) - self._total(prev[i]) for i in range(n))

        def share(field: str) -> float | None:  # of all CPU time, system-wide (%)
            if d_total <= 0 or not hasattr(cur[0], field):
                return None
            d = sum(getattr(cur[i], field) - getattr(prev[i], field) for i in range(n))
            return round(100.0 * d / d_total, 3)

        return cpu_pct, share("iowait"), share("steal")

    def _self_stats(self) -> tuple[float | None, int]:
        assert self._statm is not None
        t = os.times()
        now, cpu = time.monotonic(), t.user + t.system
        (w0, c0), self._self_prev = self._self_prev, (now, cpu)
        pct = round(100.0 * (cpu - c0) / (now - w0), 2) if now > w0 else None
        rss = int(os.pread(self._statm, 128, 0).split()[1]) * self._page
        return pct, rss

    def close(self) -> None:
        if self._statm is not None:
            with contextlib.suppress(OSError):
                os.close(self._statm)
            self._statm = None
        self._close_stat()

    def _current_worker_pids(self) -> list[int]:
        if self._worker_pids is not None:
            return [p for p in self._worker_pids() if isinstance(p, int)]
        now = time.monotonic()
        if now - self._children_at >= 1.0:
            self._children_at = now
            try:
                self._children = [c.pid for c in self._proc.children(recursive=False)]
            except self._psutil.Error:
                self._children = []
        return self._children

    def _sample_workers(self) -> tuple[int, float | None, int, int]:
        """(live workers, summed CPU % of those read twice, how many those are, summed RSS)."""
        return self._loader_procs.sample(self._current_worker_pids())

    def _current_peer_pids(self) -> list[int]:
        """The job's other processes on this host (:func:`~.followed.peer_pids`), listed
        again once a second; none outside torchrun."""
        if self._root is None:
            return []
        now = time.monotonic()
        if now - self._peers_at >= 1.0:
            self._peers_at = now
            self._peer_list = peer_pids(self._proc, self._root, self._psutil)
        return self._peer_list


class NvmlSampler(Sampler):
    """GPU utilization, memory, SM clock, power, PCIe throughput through NVML (``pynvml``).

    The device is found by UUID, else PCI bus id (both survive
    CUDA_VISIBLE_DEVICES renumbering), else by index. A field the device does
    not support reads None; any other NVML error ends the sampler.

    PCIe throughput is read at most once per :data:`PCIE_PERIOD_S` (None between): NVML
    measures it over a 20 ms window, so each of its two calls blocks ~21 ms (measured on
    an H100), while every other field takes 3-10 us.
    """

    PCIE_PERIOD_S = 1.0

    name = "gpu"

    def __init__(
        self,
        index: int = 0,
        uuid: str | None = None,
        pci_bus_id: str | None = None,
        pid: int | None = None,
    ) -> None:
        self._index = index
        self._uuid = uuid
        self._pci = pci_bus_id
        self._pid = os.getpid() if pid is None else pid
        self._nvml: Any = None
        self._handle: Any = None
        self._unsupported: set[str] = set()
        self._pcie_at = -float("inf")

    def open(self) -> dict[str, Any]:
        try:
            import pynvml
        except ImportError as e:
            raise SamplerUnavailable(
                f"NVML bindings not installed (pip install nvidia-ml-py): {e}"
            ) from e
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise SamplerUnavailable(f"NVML could not start: {e}") from e
        self._nvml = pynvml
        how = None
        tries: list[tuple[str, Callable[[], Any]]] = []
        if self._uuid:
            u = self._uuid if self._uuid.startswith(("GPU-", "MIG-")) else f"GPU-{self._uuid}"
            tries.append(("uuid", lambda: pynvml.nvmlDeviceGetHandleByUUID(u)))
        if self._pci:
            tries.append(("pci_bus_id", lambda: pynvml.nvmlDeviceGetHandleByPciBusId(self._pci)))
        tries.append(("index", lambda: pynvml.nvmlDeviceGetHandleByIndex(self._index)))
        last: Exception | None = None
        for how_, get in tries:
            try:
                self._handle = get()
                how = how_
                break
            except Exception as e:
                last = e
        if self._handle is None:
            self.close()
            raise SamplerUnavailable(f"NVML has no handle for GPU {self._index}: {last}")
        info: dict[str, Any] = {"index": self._index, "found_by": how}
        for key, call in (
            ("name", lambda: pynvml.nvmlDeviceGetName(self._handle)),
            ("uuid", lambda: pynvml.nvmlDeviceGetUUID(self._handle)),
            ("mem_total_bytes", lambda: int(pynvml.nvmlDeviceGetMemoryInfo(self._handle).total)),
            ("nvml_driver", lambda: pynvml.nvmlSystemGetDriverVersion()),
        ):
            try:
                v = call()
                info[key] = v.decode() if isinstance(v, bytes) else v
            except Exception:
                info[key] = None
        return info

    def _read(self, field: str, call: Callable[[], Any]) -> Any:
        if field in self._unsupported:
            return None
        try:
            return call()
        except self._nvml.NVMLError_NotSupported:
            self._unsupported.add(field)
            return None

    def _proc_mem(self) -> int | None:
        nv = self._nvml
        procs = nv.nvmlDeviceGetComputeRunningProcesses(self._handle)
        for p in procs:
            if p.pid == self._pid:
                used = p.usedGpuMemory
                return int(used) if isinstance(used, int) else None
        return None  # not listed (e.g. another PID namespace): unknown, not 0

    def sample(self) -> dict[str, Any]:
        nv, h = self._nvml, self._handle
        util = self._read("util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = self._read("mem_used_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used))
        clock = self._read("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        power = self._read("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
        rx = tx = None
        now = time.monotonic()
        if now - self._pcie_at >= self.PCIE_PERIOD_S:
            self._pcie_at = now
            rx = self._read("pcie_rx_kbps",
                            lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))
            tx = self._read("pcie_tx_kbps",
                            lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES))
        proc_mem = self._read("proc_mem_bytes", self._proc_mem)
        return {
            "util_pct": util,
            "mem_used_bytes": mem,
            "sm_clock_mhz": clock,
            "power_w": power,
            "pcie_rx_kbps": rx,
            "pcie_tx_kbps": tx,
            "proc_mem_bytes": proc_mem,
        }

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None


def _describe(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


class SamplerThread:
    """Runs samplers on one daemon thread and streams their rows to ``samples.jsonl``.

    ``start()`` returns at once (samplers open on the thread); ``mark(name)``
    stamps an instant (e.g. the profiled window's start); ``stop()`` ends
    sampling and always joins the thread. Usable as a context manager.
    """

    def __init__(
        self,
        samplers: Sequence[Sampler],
        run_dir: str | os.PathLike[str],
        hz: float = DEFAULT_HZ,
    ) -> None:
        if hz <= 0:
            raise ValueError(f"sample rate must be > 0 Hz, got {hz}")
        self.samplers = list(samplers)
        self.path = Path(run_dir) / SAMPLES_FILE
        self.interval = 1.0 / hz
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None
        self._thread: threading.Thread | None = None
        self._last_flush = 0.0
        self.rows = 0
        self.errors: list[str] = []  # "sampler: Type: message", also in the file
        self.unavailable: dict[str, str] = {}

    # -- writer (any thread) -------------------------------------------------
    def _write(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec, separators=(",", ":"), allow_nan=False, default=str)
        with self._lock:
            if self._fh is None:
                return
            self._fh.write(line + "\n")
            now = time.monotonic()
            if now - self._last_flush >= _FLUSH_EVERY_S:
                self._fh.flush()
                self._last_flush = now

    def mark(self, name: str, t: float | None = None) -> None:
        """Record a named instant (unix seconds) in the samples file."""
        with contextlib.suppress(Exception):  # never worth an exception in the user's loop
            self._write({"type": "mark", "name": name, "t": time.time() if t is None else t})

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> SamplerThread:
        if self._thread is not None:
            raise RuntimeError("SamplerThread already started")
        self._fh = self.path.open("a", encoding="utf-8")
        self._write(
            {
                "type": "meta",
                "version": SAMPLES_VERSION,
                "pid": os.getpid(),
                "interval_s": self.interval,
                "t0": time.time(),
            }
        )
        self._thread = threading.Thread(target=self._run, name="diagnose-samplers", daemon=True)
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the thread to finish after its current tick; does not wait."""
        self._stop.set()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop and join the thread; True if it ended within ``timeout`` seconds."""
        self._stop.set()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout)
        alive = t is not None and t.is_alive()
        if not alive:
            self._close_file()
        return not alive

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> SamplerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_file(self) -> None:
        with self._lock:
            if self._fh is not None:
                with contextlib.suppress(OSError):
                    self._fh.close()
                self._fh = None

    # -- the thread ------------------------------------------------------------
    def _error(self, s: Sampler, e: BaseException) -> None:
        text = _describe(e)
        self.errors.append(f"{s.name}: {text}")
        self._write({"type": "error", "sampler": s.name, "t": time.time(), "error": text})

    def _run(self) -> None:
        active: list[Sampler] = []
        try:
            for s in self.samplers:
                try:
                    info = s.open()
                except SamplerUnavailable as e:
                    self.unavailable[s.name] = str(e)
                    self._write({"type": "unavailable", "sampler": s.name, "reason": str(e)})
                    continue
                except Exception as e:
                    self._error(s, e)
                    self._safe_close(s)
                    continue
                self._write({"type": "info", "sampler": s.name, **(info or {})})
                active.append(s)
            next_t = time.monotonic() + self.interval
            while active and not self._stop.wait(max(0.0, next_t - time.monotonic())):
                next_t += self.interval
                if next_t < time.monotonic():  # fell behind (suspended, slow NVML): skip ticks
                    next_t = time.monotonic() + self.interval
                now = time.time()
                for s in list(active):
                    try:
                        row = s.sample()
                        self._write({"type": "sample", "sampler": s.name, "t": now, **row})
                        self.rows += 1
                    except Exception as e:
                        self._error(s, e)
                        active.remove(s)
                        self._safe_close(s)
        except Exception as e:  # the writer itself failed (disk full, ...): stop quietly
            self.errors.append(f"sampler thread: {_describe(e)}")
        finally:
            for s in active:
                self._safe_close(s)
            with contextlib.suppress(Exception):
                self._write({"type": "end", "t": time.time(), "rows": self.rows})
            if self._stop.is_set():
                self._close_file()

    @staticmethod
    def _safe_close(s: Sampler) -> None:
        with contextlib.suppress(Exception):
            s.close()
