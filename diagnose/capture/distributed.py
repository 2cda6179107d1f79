"""Capture under torch.distributed (torchrun, DDP, FSDP): one run folder, one report.

When ``with diagnose(...)`` opens inside an initialised default process group, the
session hands these jobs to :class:`DistributedCapture`:

- **one run folder for all ranks**: rank 0 creates ``<out_dir>/<stamp>/`` and
  publishes its path; every rank writes into it. On several machines without a
  shared file system each machine gets a folder of the same name with its own ranks.
- **files named with the rank**: each rank's trace is
  ``<host>_<pid>_rank<N>.<ns>.pt.trace.json.gz`` (torch.profiler itself writes the
  rank, world size and backend into the trace's ``distributedInfo``); rank N > 0
  samples into ``samples.rank<N>.jsonl``.
- **one cross-rank report**: on exit each rank measures its own trace and sends rank 0
  a small summary (metrics, context, notes: a few kB, never the trace). Rank 0 writes
  ``context.json`` (its own context, the others' under ``rank_contexts``) and evaluates
  the rules over all ranks (per-rank table, stragglers) with the same code as
  ``torch-diagnose analyze RUN``. The other ranks keep a report of their own rank.

The exchange goes through torch.distributed itself: the key-value store of the default
process group (the one ``init_process_group`` rendezvoused with), with timeouts.
Nothing waits on a collective, so profiling only some ranks (``if rank == 0: with
diagnose(...)``) cannot hang the job: rank 0 reports on the ranks that joined, and a
rank whose rank 0 does not join waits ``JOIN_TIMEOUT_S`` for the folder, then captures
alone. Where that store cannot be reached, ``dist.broadcast_object_list`` and
``dist.gather_object`` on the default group do the same; then every rank must enter and
leave the block, and with NCCL each rank's device must be set first.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from diagnose.runfolder import (
    new_run_dir,
    samples_file,
    trace_files,
    write_context,
)

__all__ = ["DistributedCapture", "current"]

#: how long a rank waits for rank 0's run folder when it enters the block
JOIN_TIMEOUT_S = 60.0
#: how long rank 0 waits, on exit, for the summaries of the ranks that joined
GATHER_TIMEOUT_S = 300.0
_KEY = "torch_diagnose"
_sessions = itertools.count(1)  # every rank opens its sessions in the same order


def current() -> DistributedCapture | None:
    """The capture helper for this process, or None outside an initialised process group."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    local = os.environ.get("LOCAL_RANK")
    store = None
    try:
        from torch.distributed import distributed_c10d

        store = distributed_c10d._get_default_store()
    except Exception:  # pragma: no cover - private API moved: use collectives
        store = None
    return DistributedCapture(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        backend=str(dist.get_backend()),
        local_rank=int(local) if local and local.isdigit() else None,
        session=next(_sessions),
        store=store,
    )


@dataclass
class DistributedCapture:
    rank: int
    world_size: int
    backend: str
    local_rank: int | None = None
    session: int = 1
    store: Any = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)
    step_model: Any = field(default=None, repr=False)  # this rank's replay (_measure)
    memory: Any = field(default=None, repr=False)  # this rank's memory section (_measure)

    @property
    def worker_name(self) -> str:
        """The trace's name before ``.<ns>.pt.trace.json.gz``: host, pid and rank."""
        return f"{socket.gethostname()}_{os.getpid()}_rank{self.rank}"

    def info(self) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world_size, "backend": self.backend,
                "local_rank": self.local_rank}

    def _key(self, name: str) -> str:
        return f"{_KEY}/{self.session}/{name}"

    # ------------------------------------------------------------------ enter
    def run_dir(self, out_dir: str | os.PathLike[str] | None) -> Path:
        """The run folder shared by all ranks: rank 0 makes it, the others receive its path."""
        if self.store is None:
            return self._run_dir_collective(out_dir)
        if self.rank == 0:
            path = new_run_dir(out_dir).resolve()
            self.store.set(self._key("run_dir"), str(path))
        else:
            try:
                self.store.wait([self._key("run_dir")], timedelta(seconds=JOIN_TIMEOUT_S))
                path = Path(self.store.get(self._key("run_dir")).decode())
            except Exception:  # rank 0 is not in the block: capture this rank alone
                self.notes.append(f"rank 0 did not open diagnose() within {JOIN_TIMEOUT_S:.0f} s:"
                                  " this rank was captured and reported alone")
                self.store = None
                self.world_size = 1
                return new_run_dir(out_dir)
            path.mkdir(parents=True, exist_ok=True)  # another machine: same name, its ranks
        self.store.set(self._key(f"joined/{self.rank}"), "1")
        return path

    def _run_dir_collective(self, out_dir: str | os.PathLike[str] | None) -> Path:
        import torch.distributed as dist

        box: list[Any] = [None, None]
        if self.rank == 0:
            try:
                box[0] = str(new_run_dir(out_dir).resolve())
            except OSError as e:
                box[1] = f"{type(e).__name__}: {e}"
        dist.broadcast_object_list(box, src=0)
        if box[1] is not None:
            raise OSError(f"rank 0 could not create the run folder: {box[1]}")
        path = Path(box[0])
        path.mkdir(parents=True, exist_ok=True)
        return path

    def samples_path(self, run_dir: Path) -> Path:
        return Path(run_dir) / samples_file(self.rank)

    def own_traces(self, run_dir: Path) -> list[Path]:
        """This rank's traces in the shared folder."""
        prefix = self.worker_name + "."
        return [p for p in trace_files(run_dir) if p.name.startswith(prefix)]

    # ------------------------------------------------------------------- exit
    def finish(self, run_dir: Path, context: dict[str, Any], *, analyze: bool = True) -> Any:
        """Measure this rank, bring every rank's summary to rank 0, write context.json.

        Returns the cross-rank Analysis on rank 0 and this rank's own Analysis elsewhere
        (None when ``analyze`` is False or nothing could be measured).
        """
        from diagnose.analysis import capture_notes, report_from_ranks, with_fix_code

        context = dict(context)
        context["distributed"] = self.info()
        if self.notes:
            context.setdefault("capture", {}).setdefault("notes", []).extend(self.notes)
        summary: dict[str, Any] = {"rank": self.rank, "context": context, "result": None,
                                   "error": None}
        own = None
        if analyze:
            try:
                own = self._measure(run_dir, context)
                summary["result"] = None if own is None else _pack(own)
            except Exception as e:  # a broken trace on one rank must not stall the others
                summary["error"] = f"{type(e).__name__}: {e}"
        def alone() -> Any:
            if own is None:
                return None
            report = report_from_ranks([str(run_dir)], [own])
            report.notes[:0] = capture_notes(context, report.metrics)
            self._attach_own(report)
            return with_fix_code(report, context)

        if self.world_size == 1:  # captured alone
            write_context(run_dir, context)
            return alone()
        gathered = self._gather(summary)
        if self.rank != 0:
            return alone()
        ctx0 = dict(context)
        ctx0["rank_contexts"] = {str(s["rank"]): s["context"] for s in gathered
                                 if isinstance(s, dict) and s.get("rank") not in (None, 0)}
        write_context(run_dir, ctx0)
        if not analyze:
            return None
        return self._combine(run_dir, gathered, context)

    def _gather(self, summary: dict[str, Any]) -> list[Any]:
        """Rank 0: the summaries of every rank that joined (its own first); others: []."""
        if self.store is None:
            import torch.distributed as dist

            out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
            dist.gather_object(summary, out, dst=0)
            return out or []
        payload = json.dumps(summary, default=str)
        if self.rank != 0:
            self.store.set(self._key(f"summary/{self.rank}"), payload)
            return []
        joined = [r for r in range(1, self.world_size)
                  if self.store.check([self._key(f"joined/{r}")])]
        got: list[Any] = [summary]
        keys = [self._key(f"summary/{r}") for r in joined]
        with contextlib.suppress(Exception):  # take what arrived; the missing are named below
            self.store.wait(keys, timedelta(seconds=GATHER_TIMEOUT_S))
        for r, key in zip(joined, keys, strict=True):
            if self.store.check([key]):
                got.append(json.loads(self.store.get(key).decode()))
            else:
                got.append({"rank": r, "context": None, "result": None,
                            "error": f"no summary within {GATHER_TIMEOUT_S:.0f} s"})
        absent = self.world_size - 1 - len(joined)
        if absent:
            self.notes.append(f"{absent} of {self.world_size} ranks did not open diagnose(): "
                              "the report covers the ranks that did")
        return got

    def _measure(self, run_dir: Path, context: dict[str, Any]) -> Any:
        from diagnose.analysis import (
            MEMORY_TABLE,
            _analyze_file,
            _guarded_gains,
            _memory,
            grads_cleared,
            whole_steps,
        )
        from diagnose.metrics import compute_all
        from diagnose.result import RankResult
        from diagnose.rules.engine import load_rules
        from diagnose.runfolder import load_samples

        traces = self.own_traces(run_dir)
        if not traces:
            return None
        path, rank, ms, _declared = _analyze_file(str(traces[-1]), None, whole_steps(context),
                                                  grads_cleared(context))
        from diagnose.stepmodel import MODEL_TABLE

        # this rank's replay, for its report's step model line (not sent: it is no JSON)
        self.step_model = ms.tables.pop(MODEL_TABLE, None)
        values = compute_all(ms, context, load_samples(run_dir, rank=self.rank))
        # the step tracked in place, as the run folder's analysis reads it (its metrics
        # join this rank's, for the memory rules)
        self.memory = _memory(context, ms.tables.pop(MEMORY_TABLE, None), values)
        # many ranks: rank 0 grades this rank's findings by what its own model predicts
        gains = (_guarded_gains(values, self.step_model, context, load_rules())
                 if self.world_size > 1 else {})
        return RankResult(path, self.rank if rank is None else rank, values, ms.series,
                          ms.notes, gains=gains)

    def _combine(self, run_dir: Path, gathered: list[Any], context: dict[str, Any]) -> Any:
        from diagnose.analysis import capture_notes, report_from_ranks, with_fix_code
        from diagnose.result import RankResult
        from diagnose.runfolder import load_samples

        ranks: list[RankResult] = []
        notes: list[str] = list(self.notes)
        for i, s in enumerate(gathered):
            if not isinstance(s, dict):
                notes.append(f"rank {i}: sent no summary")
                continue
            if s.get("error"):
                notes.append(f"rank {s.get('rank', i)}: could not be measured: {s['error']}")
            elif s.get("result") is None:
                notes.append(f"rank {s.get('rank', i)}: no trace was written")
            else:
                ranks.append(_unpack(s["result"]))
        if not ranks:
            return None
        report = report_from_ranks([str(run_dir)], ranks, samples=load_samples(run_dir))
        report.notes[:0] = notes + capture_notes(context, report.metrics)
        self._attach_own(report)
        return with_fix_code(report, context)

    def _attach_own(self, report: Any) -> None:
        """This rank's own replay on its report (the step model line; the CLI's analysis of
        the run folder attaches the rank whose replay is furthest from its step), and its
        memory section with the peaks it predicts, as the run folder's analysis gives them
        (the first rank's)."""
        from diagnose.fixes.peaks import predict_peaks

        report.memory = self.memory
        predict_peaks(report.findings, report.memory, report.metrics)
        if self.step_model is not None:
            from diagnose.stepmodel.prediction import attach_models

            attach_models(report, [(self.rank, self.step_model)])


def _pack(r: Any) -> dict[str, Any]:
    return {"path": r.path, "rank": r.rank, "metrics": r.metrics, "series": r.series,
            "notes": list(r.notes), "gains": dict(r.gains)}


def _unpack(d: dict[str, Any]) -> Any:
    from diagnose.result import RankResult

    gains = d.get("gains")
    return RankResult(d["path"], d["rank"], d["metrics"], d["series"], d["notes"],
                      gains=gains if isinstance(gains, dict) else {})
