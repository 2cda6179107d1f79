"""Build small but realistic torch.profiler / Kineto Chrome-trace documents for tests.

The output mimics real traces written by torch.profiler (see ``../shared/traces``):

* current style (PyTorch 2.x): categories ``cpu_op``, ``user_annotation``, ``cuda_runtime``,
  ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``gpu_user_annotation``, ``ac2g`` flow events,
  ``[memory]`` instants with ``cat: cpu_instant_event`` and allocator totals, ``M`` metadata
  with sort indices, ``schemaVersion``/``deviceProperties``/``distributedInfo``/
  ``baseTimeNanoseconds``, fractional (ns) timestamps, runtime/kernel ``External id``;
* legacy style (``legacy=True``, the 2021 ResNet-50 traces): categories ``Operator``,
  ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``; lowercase ``external id`` (+ ``external
  ts``) on runtime and device events; string ``tid`` values (``"4242"``, ``"stream 7"``);
  ``async``/``launch`` flow events; ``[memory]`` instants without category or totals; integer
  microsecond timestamps; no ``gpu_user_annotation``, no sort-index metadata.

Everything is in microseconds. The host is one thread whose time cursor is ``now``; every
device stream is FIFO, so a host that launches faster than the GPU executes queues work ahead
of it, and blocking calls (pageable copies, synchronizations) hold the host until the device
work they wait for is done. The builder is deterministic: same calls, same document.

Scenario functions at the bottom (``healthy()``, ``dataloader_bound()``, ...) return a builder
already filled with six steps that plant exactly one symptom each. ``measure()`` is a small,
independent oracle for the figures a scenario plants (shares of the ProfilerStep window); it is
test scaffolding, not the project's metrics code.
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import json
import math
import pathlib
from collections.abc import Iterable, Iterator
from typing import Any

Event = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Names as they appear in real traces
# --------------------------------------------------------------------------------------------

ELEMENTWISE_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
ELEMENTWISE_ADD_BF16 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3>)"
)
ELEMENTWISE_MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
    "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, "
    "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> "
    ">, at::detail::Array<char*, 2>)"
)
GELU_BF16 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
    "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >"
    "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
    "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)"
)
GELU_FP32 = GELU_BF16.replace("c10::BFloat16", "float").replace("{lambda()#4}", "{lambda()#2}")
LAYER_NORM_BF16 = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*)"
)
LAYER_NORM_FP32 = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
    "(int, float, float const*, float const*, float const*, float*, float*, float*)"
)
SOFTMAX_BF16 = (
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, "
    "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)
REDUCE_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >("
    "at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, "
    "float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
    "float, 4>)"
)
FILL_FLOAT = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)"
)
MULTI_TENSOR_APPLY = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<{depth}>, at::native::(anonymous namespace)::{functor}<float, "
    "{depth}, {r}, {w}>, {op}>(at::native::(anonymous namespace)::TensorListMetadata<{depth}>, "
    "at::native::(anonymous namespace)::{functor}<float, {depth}, {r}, {w}>, {op})"
)

#: bf16 tensor-core GEMMs (Hopper cuBLAS / cuBLASLt "nvjet")
GEMM_BF16 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas",
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNN",
)
#: fp32 SIMT GEMMs (no tensor cores)
GEMM_FP32 = (
    "ampere_sgemm_128x64_nn",
    "cutlass_80_simt_sgemm_256x128_8x4_nt_align1",
    "volta_sgemm_128x64_nn",
)

NCCL_KERNEL_LEGACY = "ncclKernel_{coll}_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_KERNEL = "ncclDevKernel_{coll}_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
_NCCL_ANNOTATION = {
    "AllReduce": "nccl:all_reduce",
    "AllGather": "nccl:all_gather",
    "ReduceScatter": "nccl:reduce_scatter",
    "Broadcast": "nccl:broadcast",
    "SendRecv": "nccl:all_to_all",
}
_NCCL_OP = {
    "AllReduce": "c10d::allreduce_",
    "AllGather": "c10d::_allgather_base_",
    "ReduceScatter": "c10d::_reduce_scatter_base_",
    "Broadcast": "c10d::broadcast_",
    "SendRecv": "c10d::alltoall_base_",
}

#: CUPTI callback ids, as in real traces
CBID = {
    "cudaLaunchKernel": 211,
    "cudaGraphLaunch": 311,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventSynchronize": 137,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaEventQuery": 138,
}

_SYNC_KINDS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
_MEMCPY_KINDS = ("HtoD", "DtoH", "DtoD")

# (numSms, sharedMemPerMultiprocessor, sharedMemPerBlockOptin) by compute capability
_SM_TABLE: dict[tuple[int, int], tuple[int, int, int]] = {
    (7, 0): (80, 98304, 98304),
    (7, 5): (40, 65536, 65536),
    (8, 0): (108, 167936, 166912),
    (8, 6): (84, 102400, 101376),
    (8, 9): (128, 102400, 101376),
    (9, 0): (132, 233472, 232448),
}

# host-side costs of an aten op around its runtime call (us)
_OP_PRE = 3.0
_OP_POST = 2.0
_SYNC_TAIL = 3.0  # a sync returns this long after the work it waits for ends
_GPU_PID = 0  # device 0 is the only GPU the builder emits


def _r3(x: float) -> float:
    return round(x, 3)


class TraceBuilder:
    """Incrementally build one rank's Kineto trace (see module docstring)."""

    def __init__(
        self,
        *,
        legacy: bool = False,
        device: str | None = "NVIDIA H100 80GB HBM3",
        cc: tuple[int, int] = (9, 0),
        total_mem: int = 80 * 2**30,
        rank: int | None = None,
        world_size: int | None = None,
        backend: str | None = None,
        pid: int = 4242,
        t0: float = 1_700_000_000_000.0,
        gpu_annotations: bool = True,
    ) -> None:
        self.legacy = legacy
        self.device = device
        self.cc = cc
        self.total_mem = total_mem
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.pid = pid
        self.t0 = t0
        # current-style traces mirror user annotations with GPU work onto the device timeline
        self.gpu_annotations = gpu_annotations and not legacy
        self.now: float = t0 + 100.0
        self._events: list[Event] = []  # everything except metadata, in creation order
        self._dev: list[tuple[Event, float, float]] = []  # device X events with exact times
        self._gpu_ann: list[Event] = []
        self._stack: list[tuple[Event, str, int]] = []  # (event, kind, len(self._dev) at open)
        self._ext = 0
        self._corr = 10_000
        self._ev_idx = 0
        self._stream_free: dict[int, float] = {}
        self._step_no = 1
        self._last_alloc: dict[int, int] = {}
        self._addr = 0x7F3A_0000_0000
        self._end: float = self.now

    # ---------------------------------------------------------------- low-level primitives
    @property
    def has_gpu(self) -> bool:
        return self.device is not None

    def _need_gpu(self, what: str) -> None:
        if self.device is None:
            raise RuntimeError(f"{what}() needs a GPU; this is a CPU-only builder (device=None)")

    def _host_tid(self) -> int | str:
        return str(self.pid) if self.legacy else self.pid

    def _dev_tid(self, stream: int) -> int | str:
        return f"stream {stream}" if self.legacy else stream

    def _touch(self, t: float) -> None:
        self._end = max(self._end, t)

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _link(self) -> Event | None:
        """The host op that CUPTI records link to (innermost cpu op; any op in legacy)."""
        for ev, kind, _ in reversed(self._stack):
            if self.legacy or kind == "cpu_op":
                return ev
        return None

    def _open(self, name: str, kind: str) -> Event:
        self._ext += 1
        if self.legacy:
            cat = "Operator"
            args: dict[str, Any] = {
                "Device": self.pid,
                "External id": self._ext,
                "Trace name": "PyTorch Profiler",
                "Trace iteration": 0,
            }
        else:
            cat = kind
            args = {"External id": self._ext, "Ev Idx": self._ev_idx}
            self._ev_idx += 1
        ev: Event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": self._host_tid(),
            "ts": self.now,
            "dur": 0.0,
            "args": args,
        }
        self._events.append(ev)
        self._stack.append((ev, kind, len(self._dev)))
        return ev

    def _close(self, ev: Event) -> None:
        top, kind, dev_mark = self._stack.pop()
        assert top is ev, "spans must close in LIFO order"
        ev["dur"] = self.now - ev["ts"]
        self._touch(self.now)
        if (
            self.gpu_annotations
            and kind == "user_annotation"
            and not ev["name"].startswith(("nccl:", "enumerate(DataLoader)"))
            and len(self._dev) > dev_mark
        ):
            launched = self._dev[dev_mark:]
            start = min(s for _, s, _ in launched)
            end = max(e for _, _, e in launched)
            first = min(launched, key=lambda x: x[1])[0]
            self._gpu_ann.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": ev["name"],
                    "pid": _GPU_PID,
                    "tid": first["tid"],
                    "ts": start,
                    "dur": end - start,
                    "args": {"External id": ev["args"]["External id"]},
                }
            )

    @contextlib.contextmanager
    def _span(
        self, name: str, kind: str = "cpu_op", pre: float = 0.0, post: float = 0.0
    ) -> Iterator[Event]:
        ev = self._open(name, kind)
        self.now += pre
        try:
            yield ev
        finally:
            self.now += post
            self._close(ev)

    def _maybe_op(self, name: str | None) -> contextlib.AbstractContextManager[Any]:
        if name is None:
            return contextlib.nullcontext()
        return self._span(name, "cpu_op", pre=_OP_PRE, post=_OP_POST)

    def _runtime(self, name: str, dur: float, corr: int | None = None) -> tuple[int, float]:
        """A CUDA runtime call on the host at ``now`` lasting ``dur``; returns (corr, start)."""
        corr = self._next_corr() if corr is None else corr
        link = self._link()
        if self.legacy:
            args: dict[str, Any] = {
                "cbid": CBID.get(name, 0),
                "correlation": corr,
                "external id": link["args"]["External id"] if link else 0,
                "external ts": link["ts"] if link else self.now,
            }
            cat = "Runtime"
        else:
            args = {"cbid": CBID.get(name, 0), "correlation": corr}
            if link is not None:
                args = {"External id": link["args"]["External id"], **args}
            cat = "cuda_runtime"
        start = self.now
        self._events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": self._host_tid(),
                "ts": start,
                "dur": dur,
                "args": args,
            }
        )
        self.now = start + dur
        self._touch(self.now)
        return corr, start

    def _flow(self, corr: int, host_ts: float, stream: int, dev_ts: float) -> None:
        cat, name = ("async", "launch") if self.legacy else ("ac2g", "ac2g")
        self._events.append(
            {"ph": "s", "id": corr, "pid": self.pid, "tid": self.pid, "ts": host_ts,
             "cat": cat, "name": name}
        )
        self._events.append(
            {"ph": "f", "id": corr, "pid": _GPU_PID, "tid": self._dev_tid(stream), "ts": dev_ts,
             "cat": cat, "name": name, "bp": "e"}
        )

    def _device(
        self,
        kind: str,
        name: str,
        *,
        stream: int,
        start: float,
        dur: float,
        corr: int,
        extra: dict[str, Any],
    ) -> Event:
        link = self._link()
        ext = link["args"]["External id"] if link else 0
        if self.legacy:
            cat = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}[kind]
            args: dict[str, Any] = {
                "device": _GPU_PID,
                "context": 1,
                "stream": stream,
                "correlation": corr,
                "external id": ext,
            }
            if kind == "kernel":
                args = {"queued": 0, **args}
        else:
            cat = kind
            args = {"External id": ext}
            if kind == "kernel":
                args["queued"] = 0
            args.update({"device": _GPU_PID, "context": 1, "stream": stream, "correlation": corr})
        args.update(extra)
        ev: Event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": _GPU_PID,
            "tid": self._dev_tid(stream),
            "ts": start,
            "dur": dur,
            "args": args,
        }
        self._events.append(ev)
        self._dev.append((ev, start, start + dur))
        self._stream_free[stream] = start + dur
        self._touch(start + dur)
        return ev

    def _geometry(self, name: str, dur: float) -> dict[str, Any]:
        sms = _SM_TABLE.get(self.cc, _SM_TABLE[(9, 0)])[0]
        low = name.lower()
        if "gemm" in low or "nvjet" in low:
            regs, smem, block = 168, 49152 if "simt" in low or "sgemm" in low else 200704, 256
            grid = sms * max(1, min(8, int(dur // 60) + 1))
        elif low.startswith("nccl"):
            regs, smem, block, grid = 96, 41760, 640, 16
        else:
            regs, smem, block = 28, 0, 128
            grid = max(1, int(dur * sms / 3))
        blocks_per_sm = grid / sms
        warps = blocks_per_sm * block / 32
        return {
            "registers per thread": regs,
            "shared memory": smem,
            "blocks per SM": round(blocks_per_sm, 6),
            "warps per SM": round(warps, 6),
            "grid": [grid, 1, 1],
            "block": [block, 1, 1],
            "est. achieved occupancy %": int(min(100.0, warps / 64 * 100)),
        }

    def _launch(
        self, name: str, *, dur: float, launch_dur: float, stream: int, queue_delay: float = 0.0
    ) -> Event:
        corr, rt_start = self._runtime("cudaLaunchKernel", launch_dur)
        start = max(self.now + queue_delay, self._stream_free.get(stream, -math.inf))
        ev = self._device(
            "kernel", name, stream=stream, start=start, dur=dur, corr=corr,
            extra=self._geometry(name, dur),
        )
        self._flow(corr, rt_start, stream, start)
        return ev

    def _queued_end(self, stream: int | None) -> float:
        if stream is None:
            return max(self._stream_free.values(), default=-math.inf)
        return self._stream_free.get(stream, -math.inf)

    # ------------------------------------------------------------------------- public API
    @contextlib.contextmanager
    def step(self, n: int | None = None) -> Iterator[int]:
        """A ``ProfilerStep#N`` span around whatever is added inside (N auto-increments)."""
        if n is not None:
            self._step_no = n
        n = self._step_no
        self._step_no += 1
        with self._span(f"ProfilerStep#{n}", "user_annotation"):
            yield n

    @contextlib.contextmanager
    def op(self, name: str) -> Iterator[Event]:
        """A ``cpu_op`` span around whatever is added inside (no implicit overhead)."""
        with self._span(name, "cpu_op") as ev:
            yield ev

    @contextlib.contextmanager
    def annotation(self, name: str) -> Iterator[Event]:
        """A ``user_annotation`` (record_function) span around whatever is added inside."""
        with self._span(name, "user_annotation") as ev:
            yield ev

    def idle(self, dur: float) -> None:
        """The host does nothing traced for ``dur`` (Python overhead, sleeping, ...)."""
        self.now += dur
        self._touch(self.now)

    def cpu(self, dur: float, name: str = "aten::relu") -> None:
        """A host op of ``dur`` on the main thread."""
        with self._span(name, "cpu_op"):
            self.now += dur

    def dataloader(self, dur: float, *, workers: int = 0) -> None:
        """``enumerate(DataLoader)#..._DataLoaderIter.__next__`` lasting ``dur``.

        With ``workers == 0`` the main process collates, so the span holds two ``aten::stack``
        ops (10% of it); with workers it is a plain wait.
        """
        it = "_SingleProcessDataLoaderIter" if workers == 0 else "_MultiProcessingDataLoaderIter"
        with self._span(f"enumerate(DataLoader)#{it}.__next__", "user_annotation"):
            end = self.now + dur
            if workers == 0 and dur >= 20:
                self.now += dur * 0.85
                for _ in range(2):
                    self.cpu(dur * 0.05, "aten::stack")
            self.now = end

    def kernel(
        self,
        name: str = ELEMENTWISE_ADD,
        *,
        dur: float,
        launch_dur: float = 5.0,
        stream: int = 7,
        queue_delay: float = 0.0,
        op: str | None = "aten::add",
    ) -> None:
        """``op`` (cpu_op) > ``cudaLaunchKernel`` on the host, and the kernel on ``stream``.

        The kernel starts at max(launch end + queue_delay, end of the previous work on the
        stream). ``op=None`` emits the bare runtime call (inside an op you opened yourself).
        """
        self._need_gpu("kernel")
        with self._maybe_op(op):
            self._launch(name, dur=dur, launch_dur=launch_dur, stream=stream,
                         queue_delay=queue_delay)

    def graph_launch(
        self,
        kernels: Iterable[tuple[str, float]],
        *,
        launch_dur: float = 12.0,
        stream: int = 7,
        name: str = "cudaGraphLaunch",
    ) -> None:
        """Replay a captured CUDA graph: one ``cudaGraphLaunch`` (``hipGraphLaunch`` with
        ``name=``) on the host, and its ``(kernel name, dur)`` kernels back to back on
        ``stream``, each carrying the launch's correlation id (as CUPTI reports them)."""
        self._need_gpu("graph_launch")
        corr, rt_start = self._runtime(name, launch_dur)
        start = max(self.now, self._stream_free.get(stream, -math.inf))
        for i, (kname, dur) in enumerate(kernels):
            self._device("kernel", kname, stream=stream, start=start, dur=dur, corr=corr,
                         extra=self._geometry(kname, dur))
            if i == 0:
                self._flow(corr, rt_start, stream, start)
            start += dur + 1.0

    def memcpy(
        self,
        kind: str = "HtoD",
        *,
        bytes: int,
        dur: float,
        pinned: bool = False,
        blocking: bool = True,
        stream: int = 7,
    ) -> None:
        """A ``tensor.to(...)`` copy: ``aten::to`` > ``aten::copy_`` > ``cudaMemcpyAsync``.

        Pageable HtoD/DtoH copies keep the host inside ``cudaMemcpyAsync`` until (nearly) the
        end of the copy, which itself waits for the work already queued on ``stream``. Blocking
        copies (``non_blocking=False``) are followed by ``cudaStreamSynchronize`` until the copy
        ends. Pinned non-blocking copies return after a few us.
        """
        self._need_gpu("memcpy")
        if kind not in _MEMCPY_KINDS:
            raise ValueError(f"kind must be one of {_MEMCPY_KINDS}")
        host = "Pinned" if pinned else "Pageable"
        name = {
            "HtoD": f"Memcpy HtoD ({host} -> Device)",
            "DtoH": f"Memcpy DtoH (Device -> {host})",
            "DtoD": "Memcpy DtoD (Device -> Device)",
        }[kind]
        host_blocks = kind != "DtoD" and not pinned
        with self._span("aten::to", pre=2.0, post=1.0):
            ctx = (
                contextlib.nullcontext() if self.legacy else self._span("aten::_to_copy", pre=1.0)
            )
            with ctx:
                self.cpu(3.0, "aten::empty_strided")
                with self._span("aten::copy_", pre=_OP_PRE, post=_OP_POST):
                    self._copy(name, nbytes=bytes, dur=dur, stream=stream,
                               host_blocks=host_blocks, sync=blocking)

    def _copy(
        self, name: str, *, nbytes: int, dur: float, stream: int, host_blocks: bool, sync: bool
    ) -> None:
        corr = self._next_corr()
        call = self.now
        start = max(call + 8.0, self._stream_free.get(stream, -math.inf))
        end = start + dur
        # a pageable copy returns once its last staging chunk is handed to the DMA engine
        ret = max(call + 6.0, end - min(0.04 * dur, 80.0)) if host_blocks else call + 6.0
        self._runtime("cudaMemcpyAsync", ret - call, corr=corr)
        bw = nbytes / max(dur, 1e-3) / 1e3
        self._device("gpu_memcpy", name, stream=stream, start=start, dur=dur, corr=corr,
                     extra={"bytes": nbytes, "memory bandwidth (GB/s)": bw})
        self._flow(corr, call, stream, start)
        if sync:
            self._runtime("cudaStreamSynchronize", max(2.0, end + _SYNC_TAIL - self.now))

    def memset(
        self, *, bytes: int, dur: float, stream: int = 7, op: str = "aten::cudnn_convolution"
    ) -> None:
        """``cudaMemsetAsync`` (inside ``op``; cuDNN workspaces are the usual source)."""
        self._need_gpu("memset")
        with self._span(op, pre=_OP_PRE, post=_OP_POST):
            corr, call = self._runtime("cudaMemsetAsync", 4.0)
            start = max(self.now, self._stream_free.get(stream, -math.inf))
            bw = bytes / max(dur, 1e-3) / 1e3
            self._device("gpu_memset", "Memset (Device)", stream=stream, start=start, dur=dur,
                         corr=corr, extra={"bytes": bytes, "memory bandwidth (GB/s)": bw})
            self._flow(corr, call, stream, start)

    def sync(
        self, kind: str = "cudaStreamSynchronize", *, via_item: bool = False, stream: int = 7
    ) -> None:
        """Block the host until queued device work is done (+ a few us).

        ``cudaStreamSynchronize`` and ``cudaEventSynchronize`` (after a ``cudaEventRecord``)
        wait for ``stream``; ``cudaDeviceSynchronize`` waits for every stream.

        ``via_item=True`` is a ``.item()`` call: ``aten::item`` > ``aten::_local_scalar_dense``
        > a 4-byte DtoH ``cudaMemcpyAsync`` + ``cudaStreamSynchronize`` (``kind`` must stay the
        default). As in real traces, current PyTorch copies into pinned memory so the wait is in
        ``cudaStreamSynchronize``; legacy (2021) copied to pageable memory so the wait is inside
        ``cudaMemcpyAsync`` and the following sync is short.
        """
        self._need_gpu("sync")
        if kind not in _SYNC_KINDS:
            raise ValueError(f"kind must be one of {_SYNC_KINDS}")
        if via_item:
            if kind != "cudaStreamSynchronize":
                raise ValueError(".item() always synchronizes with cudaStreamSynchronize")
            with self._span("aten::item", pre=2.0, post=1.0), self._span(
                "aten::_local_scalar_dense", pre=2.0, post=1.0
            ):
                name = (
                    "Memcpy DtoH (Device -> Pageable)"
                    if self.legacy
                    else "Memcpy DtoH (Device -> Pinned)"
                )
                self._copy(name, nbytes=4, dur=1.5, stream=stream, host_blocks=self.legacy,
                           sync=True)
            return
        if kind == "cudaEventSynchronize":
            self._runtime("cudaEventRecord", 3.0)
        target = self._queued_end(None if kind == "cudaDeviceSynchronize" else stream)
        self._runtime(kind, max(2.0, target + _SYNC_TAIL - self.now))

    def stream_wait(self, *, stream: int = 7, on: int = 20) -> None:
        """``cudaEventRecord`` on ``on`` + ``cudaStreamWaitEvent``: work queued on ``stream``
        from now on starts only after everything queued so far on ``on``."""
        self._need_gpu("stream_wait")
        self._runtime("cudaEventRecord", 2.0)
        self._runtime("cudaStreamWaitEvent", 2.0)
        self._stream_free[stream] = max(
            self._stream_free.get(stream, -math.inf), self._stream_free.get(on, -math.inf)
        )

    def nccl(
        self,
        *,
        dur: float,
        stream: int = 20,
        coll: str = "AllReduce",
        wait_stream: int | None = 7,
        launch_dur: float = 8.0,
        kernel_name: str | None = None,
    ) -> None:
        """A collective: ``c10d::<coll>`` > ``record_param_comms`` > ``nccl:<coll>`` > launch.

        Like ProcessGroupNCCL, the communication stream first waits for the work queued so far
        on ``wait_stream`` (the compute stream; None for no wait), so a collective launched after
        the backward pass cannot overlap it. Kernel names: ``ncclDevKernel_*`` (NCCL >= 2.19) in
        current style, ``ncclKernel_*`` in legacy style; override with ``kernel_name``.
        """
        self._need_gpu("nccl")
        if coll not in _NCCL_OP:
            raise ValueError(f"coll must be one of {sorted(_NCCL_OP)}")
        if kernel_name is None:
            tmpl = NCCL_KERNEL_LEGACY if self.legacy else NCCL_KERNEL
            kernel_name = tmpl.format(coll=coll)
            if coll not in ("AllReduce", "ReduceScatter"):
                kernel_name = kernel_name.replace("_Sum_float", "_Sum_int8_t").replace(
                    "_Sum_f32", ""
                )
        with self._span(_NCCL_OP[coll], pre=4.0, post=3.0), self._span(
            "record_param_comms", pre=2.0, post=2.0
        ):
            if wait_stream is not None:
                self.stream_wait(stream=stream, on=wait_stream)
            with self._span(_NCCL_ANNOTATION[coll], "user_annotation", pre=2.0, post=2.0):
                self._launch(kernel_name, dur=dur, launch_dur=launch_dur, stream=stream)
            self._runtime("cudaEventRecord", 1.5)

    def optimizer_step(
        self,
        *,
        kernels: int,
        kernel_dur: float = 3.0,
        foreach: bool = False,
        name: str = "AdamW",
        launch_dur: float = 5.0,
    ) -> None:
        """``Optimizer.step#<name>.step``.

        ``foreach=False``: ``kernels`` per-parameter launches (``aten::mul_``, ``aten::lerp_``,
        ``aten::addcmul_``, ``aten::sqrt``, ``aten::addcdiv_`` in turn) of ``kernel_dur`` each.
        ``foreach=True``: the same GPU work in max(4, ceil(kernels / 64)) ``multi_tensor_apply``
        launches under ``aten::_foreach_*`` ops. CPU-only builders emit the host ops only.
        """
        ops = ("aten::mul_", "aten::lerp_", "aten::addcmul_", "aten::sqrt", "aten::addcdiv_")
        with self._span(f"Optimizer.step#{name}.step", "user_annotation", pre=10.0, post=5.0):
            if foreach:
                n = max(4, math.ceil(kernels / 64))
                fops = ("aten::_foreach_mul_", "aten::_foreach_lerp_",
                        "aten::_foreach_addcmul_", "aten::_foreach_addcdiv_")
                per = kernels * kernel_dur / n
                for i in range(n):
                    fop = fops[i * len(fops) // n]
                    if not self.has_gpu:
                        self.cpu(per, fop)
                        continue
                    binary = "mul" in fop
                    functor = "BinaryOpScalarFunctor" if binary else "PointwiseOpScalarFunctor"
                    kname = MULTI_TENSOR_APPLY.format(
                        depth=3 if "mul" not in fop else 2, functor=functor,
                        r=2 if "mul" not in fop else 1, w=1, op="std::multiplies<float>",
                    )
                    self.kernel(kname, dur=per, launch_dur=launch_dur, op=fop)
            else:
                for i in range(kernels):
                    o = ops[i % len(ops)]
                    if not self.has_gpu:
                        self.cpu(kernel_dur, o)
                        continue
                    self.kernel(ELEMENTWISE_MUL if o == "aten::mul_" else ELEMENTWISE_ADD,
                                dur=kernel_dur, launch_dur=launch_dur, op=o)

    def zero_grad(self, *, params: int, set_to_none: bool = True, name: str = "AdamW") -> None:
        """``Optimizer.zero_grad#<name>.zero_grad``.

        ``set_to_none=True`` only drops references (0.4 us of host per param, no GPU work);
        ``False`` runs ``aten::zero_`` > ``aten::fill_`` > a ~2 us FillFunctor kernel per param.
        """
        with self._span(f"Optimizer.zero_grad#{name}.zero_grad", "user_annotation",
                        pre=5.0, post=3.0):
            if set_to_none:
                self.now += 0.4 * params
                return
            for _ in range(params):
                with self._span("aten::zero_", pre=1.0, post=1.0):
                    if self.has_gpu:
                        self.kernel(FILL_FLOAT, dur=2.0, op="aten::fill_")
                    else:
                        self.cpu(1.0, "aten::fill_")

    def memory(self, *, allocated: int, reserved: int, device_id: int = 0) -> None:
        """A ``[memory]`` instant at ``now``: the allocator after an allocation or free.

        Current style carries ``Total Allocated``/``Total Reserved``; legacy style only has
        ``Device Type``/``Device Id``/``Bytes`` like the 2021 traces. ``Bytes`` is the change in
        ``allocated`` since the previous event for that device.
        """
        cuda = self.has_gpu and device_id >= 0
        key = device_id if cuda else -1
        delta = allocated - self._last_alloc.get(key, 0)
        self._last_alloc[key] = allocated
        self._addr += 0x20_0000
        if self.legacy:
            ev: Event = {"ph": "i", "s": "t", "name": "[memory]", "pid": self.pid,
                         "tid": self.pid, "ts": self.now,
                         "args": {"Device Type": 1 if cuda else 0,
                                  "Device Id": device_id if cuda else -1, "Bytes": delta}}
        else:
            ev = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                  "pid": self.pid, "tid": self.pid, "ts": self.now,
                  "args": {"Total Reserved": reserved, "Total Allocated": allocated,
                           "Bytes": delta, "Addr": self._addr,
                           "Device Id": device_id if cuda else -1,
                           "Device Type": 1 if cuda else 0, "Ev Idx": self._ev_idx}}
            self._ev_idx += 1
        self._events.append(ev)

    # ------------------------------------------------------------------------------ output
    def _device_properties(self) -> list[dict[str, Any]]:
        if self.device is None:
            return []
        sms, smem_sm, smem_optin = _SM_TABLE.get(self.cc, _SM_TABLE[(9, 0)])
        return [
            {
                "id": _GPU_PID,
                "name": self.device,
                "totalGlobalMem": self.total_mem,
                "computeMajor": self.cc[0],
                "computeMinor": self.cc[1],
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048 if self.cc[0] != 7 or self.cc[1] == 0 else 1024,
                "regsPerBlock": 65536,
                "regsPerMultiprocessor": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "sharedMemPerMultiprocessor": smem_sm,
                "numSms": sms,
                "sharedMemPerBlockOptin": smem_optin,
            }
        ]

    def _distributed_info(self) -> dict[str, Any] | None:
        if self.rank is None and self.world_size is None and self.backend is None:
            return None
        info: dict[str, Any] = {}
        if self.backend is not None:
            info["backend"] = self.backend
        if self.rank is not None:
            info["rank"] = self.rank
        if self.world_size is not None:
            info["world_size"] = self.world_size
        if not self.legacy and self.world_size is not None and self.backend is not None:
            be = self.backend
            cfg = "cuda:nccl" if be == "nccl" else f"cpu:{be},cuda:{be}"
            info["pg_count"] = 1
            info["pg_config"] = [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": cfg,
                 "pg_size": self.world_size, "ranks": list(range(self.world_size))}
            ]
            if self.backend == "nccl":
                info["nccl_version"] = "2.21.5"
        return info

    def _metadata(self) -> list[Event]:
        ts = self.t0
        leg = self.legacy
        proc = "python" if leg else "python3"
        out: list[Event] = [
            {"name": "process_name", "ph": "M", "ts": ts, "pid": self.pid, "tid": 0,
             "args": {"name": proc}},
            {"name": "process_labels", "ph": "M", "ts": ts, "pid": self.pid, "tid": 0,
             "args": {"labels": "CPU"}},
        ]
        if not leg:
            out.append({"name": "process_sort_index", "ph": "M", "ts": ts, "pid": self.pid,
                        "tid": 0, "args": {"sort_index": self.pid}})
        if self.has_gpu:
            out.append({"name": "process_name", "ph": "M", "ts": ts, "pid": _GPU_PID, "tid": 0,
                        "args": {"name": proc}})
            out.append({"name": "process_labels", "ph": "M", "ts": ts, "pid": _GPU_PID,
                        "tid": 0, "args": {"labels": f"GPU {_GPU_PID}"}})
            if not leg:
                out.append({"name": "process_sort_index", "ph": "M", "ts": ts, "pid": _GPU_PID,
                            "tid": 0, "args": {"sort_index": 16777216 + _GPU_PID}})
                for s in sorted(self._stream_free):
                    out.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": _GPU_PID,
                                "tid": s, "args": {"name": f"stream {s} "}})
                    out.append({"name": "thread_sort_index", "ph": "M", "ts": ts,
                                "pid": _GPU_PID, "tid": s, "args": {"sort_index": s}})
        thread = f"thread {self.pid} ({'python' if leg else 'pt_main_thread'})"
        out.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": self.pid,
                    "tid": self._host_tid(), "args": {"name": thread}})
        if not leg:
            out.append({"name": "thread_sort_index", "ph": "M", "ts": ts, "pid": self.pid,
                        "tid": self.pid, "args": {"sort_index": self.pid}})
        return out

    def _fix_times(self, ev: Event) -> Event:
        ev = dict(ev)
        rnd = (lambda x: int(round(x))) if self.legacy else _r3
        if "ts" in ev:
            start = ev["ts"]
            ev["ts"] = rnd(start)
            if "dur" in ev:
                # round both ends, so spans that nest before rounding still nest after it
                ev["dur"] = rnd(rnd(start + ev["dur"]) - rnd(start))
        if self.legacy and "args" in ev and "external ts" in ev["args"]:
            ev["args"] = {**ev["args"], "external ts": rnd(ev["args"]["external ts"])}
        return ev

    def build(self) -> dict[str, Any]:
        """The full trace document (a fresh dict each call)."""
        if self._stack:
            raise RuntimeError(f"unclosed spans: {[e['name'] for e, _, _ in self._stack]}")
        end = self._end + 50.0
        events = [self._fix_times(e) for e in (*self._events, *self._gpu_ann)]
        events += [self._fix_times(e) for e in self._metadata()]
        trace_pid = "Traces" if self.legacy else "Spans"
        tail: list[Event] = [
            {"ph": "X", "cat": "Trace", "ts": self.t0, "dur": end - self.t0, "pid": trace_pid,
             "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        ]
        if not self.legacy:
            tail.append({"name": "process_sort_index", "ph": "M", "ts": self.t0, "pid": "Spans",
                         "tid": 0, "args": {"sort_index": 536870912}})
        tail += [
            {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
             "tid": "Trace PyTorch Profiler", "ts": self.t0},
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
             "ts": end + 20.0},
        ]
        events += [self._fix_times(e) for e in tail]
        doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": self._device_properties()}
        dist = self._distributed_info()
        if dist is not None:
            doc["distributedInfo"] = dist
        if not self.legacy:
            doc["record_shapes"] = 0
        doc["traceEvents"] = events
        if not self.legacy:
            doc["traceName"] = f"./log/host_{self.pid}.{int(self.t0 // 1000)}.pt.trace.json"
            doc["displayTimeUnit"] = "ms"
            doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
        return doc

    def write(self, path: str | pathlib.Path, *, gz: bool | None = None) -> pathlib.Path:
        """Write the document as JSON (gzipped when ``gz`` or the name ends in ``.gz``)."""
        path = pathlib.Path(path)
        if gz is None:
            gz = path.suffix == ".gz"
        data = json.dumps(self.build()).encode()
        if gz:
            # no name and mtime=0 in the header: the bytes are identical run to run
            with (
                open(path, "wb") as raw,
                gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f,
            ):
                f.write(data)
        else:
            path.write_bytes(data)
        return path


# --------------------------------------------------------------------------------------------
# Scenarios: six steps each, one planted symptom (see each docstring for its magnitude)
# --------------------------------------------------------------------------------------------

STEPS = 6
# forward / backward kernels of one transformer-ish layer: (kernel, dur us, op)
_FWD_BF16 = (
    (LAYER_NORM_BF16, 45.0, "aten::native_layer_norm"),
    (GEMM_BF16[0], 420.0, "aten::mm"),
    (SOFTMAX_BF16, 70.0, "aten::_softmax"),
    (GEMM_BF16[1], 360.0, "aten::mm"),
    (GELU_BF16, 55.0, "aten::gelu"),
    (ELEMENTWISE_ADD_BF16, 30.0, "aten::add"),
)
_BWD_BF16 = (
    (ELEMENTWISE_ADD_BF16, 30.0, "aten::add"),
    (GEMM_BF16[1], 360.0, "aten::mm"),
    (GEMM_BF16[1], 360.0, "aten::mm"),
    (GELU_BF16, 70.0, "aten::gelu_backward"),
    (GEMM_BF16[0], 420.0, "aten::mm"),
    (GEMM_BF16[0], 420.0, "aten::mm"),
    (LAYER_NORM_BF16, 80.0, "aten::native_layer_norm_backward"),
)
_FWD_FP32 = (
    (LAYER_NORM_FP32, 60.0, "aten::native_layer_norm"),
    (GEMM_FP32[0], 1100.0, "aten::mm"),
    (GEMM_FP32[1], 950.0, "aten::mm"),
    (GELU_FP32, 90.0, "aten::gelu"),
    (ELEMENTWISE_ADD, 50.0, "aten::add"),
)
_BWD_FP32 = (
    (ELEMENTWISE_ADD, 50.0, "aten::add"),
    (GEMM_FP32[1], 950.0, "aten::mm"),
    (GEMM_FP32[2], 950.0, "aten::mm"),
    (GELU_FP32, 110.0, "aten::gelu_backward"),
    (GEMM_FP32[0], 1100.0, "aten::mm"),
    (GEMM_FP32[0], 1100.0, "aten::mm"),
    (LAYER_NORM_FP32, 110.0, "aten::native_layer_norm_backward"),
)


def _gpu_us(kernels: Iterable[tuple[str, float, str]]) -> float:
    return sum(d for _, d, _ in kernels)


_GRAD_NODE = {
    "aten::mm": "MmBackward0",
    "aten::add": "AddBackward0",
    "aten::gelu_backward": "GeluBackward0",
    "aten::native_layer_norm_backward": "NativeLayerNormBackward0",
}


def _layer(
    b: TraceBuilder,
    kernels: Iterable[tuple[str, float, str]],
    *,
    pace: float,
    scale: float = 1.0,
    backward: bool = False,
) -> None:
    """Launch one layer's kernels, then spend host time so the host runs at ``pace`` x the
    GPU's speed (pace < 1: the host gains on the GPU, so work queues up ahead of it)."""
    t_host = b.now
    gpu = 0.0
    for name, dur, op in kernels:
        d = dur * scale
        gpu += d
        if backward:
            grad = _GRAD_NODE.get(op, "AddBackward0")
            with b.op(f"autograd::engine::evaluate_function: {grad}"), b.op(grad):
                b.kernel(name, dur=d, op=op)
        else:
            b.kernel(name, dur=d, op=op)
    spent = b.now - t_host
    rest = pace * gpu - spent
    if rest > 0:
        b.cpu(min(rest * 0.2, 40.0), "aten::view")
        b.idle(rest - min(rest * 0.2, 40.0))


def _inputs(b: TraceBuilder, *, pinned: bool = True, blocking: bool = False,
            image_bytes: int = 9_633_792, image_dur: float = 400.0) -> None:
    b.memcpy("HtoD", bytes=image_bytes, dur=image_dur, pinned=pinned, blocking=blocking)
    b.memcpy("HtoD", bytes=512, dur=2.0, pinned=pinned, blocking=blocking)


def _train_step(
    b: TraceBuilder,
    *,
    layers: int = 12,
    fwd: tuple[tuple[str, float, str], ...] = _FWD_BF16,
    bwd: tuple[tuple[str, float, str], ...] = _BWD_BF16,
    pace: float = 0.97,
    loader_us: float = 150.0,
    workers: int = 8,
    pinned: bool = True,
    blocking: bool = False,
    image_bytes: int = 9_633_792,
    image_dur: float = 400.0,
    params: int = 160,
    set_to_none: bool = True,
    opt_kernels: int = 800,
    foreach: bool = True,
    allocated: int | None = None,
    reserved: int | None = None,
    comm: tuple[int, float] | None = None,
    hidden_copy: bool = False,
) -> None:
    """One training iteration: loader, inputs, zero_grad, forward, loss, backward, (comm),
    optimizer. ``comm=(buckets, us per bucket)`` adds all-reduces after the backward pass."""
    b.dataloader(loader_us, workers=workers)
    _inputs(b, pinned=pinned, blocking=blocking, image_bytes=image_bytes, image_dur=image_dur)
    b.zero_grad(params=params, set_to_none=set_to_none)
    if allocated is not None and reserved is not None:
        b.memory(allocated=allocated, reserved=reserved)
    with b.annotation("## forward ##"):
        for _ in range(layers):
            _layer(b, fwd, pace=pace)
        if hidden_copy:  # class weights built on the CPU every step: 64 bytes, pageable
            b.memcpy("HtoD", bytes=64, dur=1.5, pinned=False, blocking=True)
        b.kernel(REDUCE_SUM, dur=25.0, op="aten::nll_loss_forward")
    with b.annotation("## backward ##"):
        for _ in range(layers):
            _layer(b, bwd, pace=pace, backward=True)
    if comm is not None:
        buckets, per = comm
        for _ in range(buckets):
            b.nccl(dur=per)
        b.stream_wait(stream=7, on=20)  # the reducer makes the optimizer wait for the grads
        b.idle(pace * buckets * per)
    if allocated is not None and reserved is not None:
        b.memory(allocated=int(allocated * 0.8), reserved=reserved)
    t_host = b.now
    b.optimizer_step(kernels=opt_kernels, foreach=foreach)
    # LR scheduler, logging, prof.step(): the host keeps its pace through the optimizer too
    b.idle(max(0.0, pace * opt_kernels * 3.0 - (b.now - t_host)))


def healthy(*, steps: int = STEPS, pace: float = 0.97, **kw: Any) -> TraceBuilder:
    """A well-fed H100: nothing to report.

    ~34 ms steps: 12 layers of bf16 tensor-core GEMMs (sm90_xmma / nvjet, 360-420 us) and a
    few elementwise kernels, launched by a host running at ``pace`` (0.97) x the GPU's speed, so
    kernels queue ahead of a busy GPU. GPU busy ~99% of the window, DataLoader (8 workers,
    150 us) ~0.4%, pinned non_blocking input copies, no syncs, foreach AdamW, zero_grad with
    set_to_none, allocator at 30/34 GiB of 80 GiB.
    """
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            _train_step(b, pace=pace, allocated=30 * 2**30, reserved=34 * 2**30)
    return b


def dataloader_bound(*, workers: int = 0, share: float = 0.4, steps: int = STEPS,
                     **kw: Any) -> TraceBuilder:
    """Input-bound: ``share`` (0.4) of every step is spent in DataLoader ``__next__``
    (``_SingleProcessDataLoaderIter`` when ``workers == 0``), while the GPU, having drained
    the previous step's work, sits idle. 8 layers (~24 ms GPU) + ~16 ms loader: GPU busy ~60%.
    """
    b = TraceBuilder(**kw)
    gpu = 8 * (_gpu_us(_FWD_BF16) + _gpu_us(_BWD_BF16)) + 25 + 400 + 800 * 3.0
    compute_host = 0.99 * gpu  # host time of the rest of the step (paced at 0.99)
    loader = share / (1 - share) * compute_host
    for _ in range(steps):
        with b.step():
            _train_step(b, layers=8, pace=0.99, loader_us=loader, workers=workers)
    return b


def pageable_copies(*, copy_mb: float = 28.9, gbps: float = 9.6, steps: int = STEPS,
                    **kw: Any) -> TraceBuilder:
    """Large pageable, blocking host-to-device copies of the batch (``copy_mb`` MB at
    ``gbps`` GB/s, ~3 ms): the host sits inside ``cudaMemcpyAsync`` ~10% of the window (and
    cudaStreamSynchronize after each copy) instead of running ahead. GPU otherwise healthy.
    """
    b = TraceBuilder(**kw)
    nbytes = int(copy_mb * 1e6)
    for _ in range(steps):
        with b.step():
            _train_step(b, pinned=False, blocking=True, image_bytes=nbytes,
                        image_dur=nbytes / (gbps * 1e3))
    return b


def sync_bound(*, chunks: int = 4, kernels: int = 120, kernel_dur: float = 30.0,
               post_sync_us: float = 1500.0, steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """Per-step ``.item()`` synchronizations: each step runs ``chunks`` (4) rounds of
    ``kernels`` (120) x ``kernel_dur`` (30 us) kernels, then ``loss.item()`` (the host waits
    ~2.4 ms in cudaStreamSynchronize while the queue drains; legacy style: inside
    cudaMemcpyAsync, as in 2021 traces), then ``post_sync_us`` (1.5 ms)
    of host work with an empty GPU queue. GPU idle ~25-30% of the window; host blocked in
    synchronization ~50%.
    """
    b = TraceBuilder(**kw)
    names = (ELEMENTWISE_ADD, ELEMENTWISE_MUL, REDUCE_SUM, GELU_FP32)
    ops = ("aten::add", "aten::mul", "aten::sum", "aten::gelu")
    for _ in range(steps):
        with b.step():
            b.dataloader(150.0, workers=8)
            _inputs(b)
            b.zero_grad(params=160)
            for c in range(chunks):
                for i in range(kernels):
                    k = (i + c) % len(names)
                    b.kernel(names[k], dur=kernel_dur, op=ops[k])
                b.sync(via_item=True)
                b.cpu(post_sync_us * 0.3, "aten::div")  # host-side metric bookkeeping
                b.idle(post_sync_us * 0.7)
            b.optimizer_step(kernels=800, foreach=True)
    return b


def launch_bound(*, kernels: int = 1500, launch_dur: float = 8.0, steps: int = STEPS,
                 **kw: Any) -> TraceBuilder:
    """Launch-bound: ``kernels`` (1500) tiny kernels (2-4 us) per step, each behind an ~8 us
    ``cudaLaunchKernel`` (+5 us of op overhead): ~20 ms steps with the GPU busy ~25%.
    """
    b = TraceBuilder(**kw)
    names = (ELEMENTWISE_ADD, ELEMENTWISE_MUL, FILL_FLOAT, GELU_FP32)
    ops = ("aten::add", "aten::mul", "aten::fill_", "aten::gelu")
    durs = (2.0, 3.0, 4.0, 2.5, 3.5)
    for _ in range(steps):
        with b.step():
            b.dataloader(150.0, workers=8)
            _inputs(b)
            b.zero_grad(params=160)
            for i in range(kernels):
                b.kernel(names[i % 4], dur=durs[i % 5], launch_dur=launch_dur, op=ops[i % 4])
            b.optimizer_step(kernels=200, foreach=True)
    return b


def fp32_gemm(*, steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """Healthy pipeline on an A100 (cc 8.0) whose GEMMs run in fp32 on SIMT cores
    (``ampere_sgemm_128x64_nn``, ``cutlass_80_simt_sgemm_*``, ``volta_sgemm_128x64_nn``): GEMMs
    are ~85% of kernel time; GPU busy ~99%. The fix is AMP/TF32, not the pipeline.
    """
    kw.setdefault("device", "NVIDIA A100-SXM4-80GB")
    kw.setdefault("cc", (8, 0))
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            _train_step(b, layers=4, fwd=_FWD_FP32, bwd=_BWD_FP32,
                        allocated=30 * 2**30, reserved=34 * 2**30)
    return b


def memory_pressure(*, reserved_frac: float = 0.95, steps: int = STEPS,
                    **kw: Any) -> TraceBuilder:
    """Healthy timing, but the caching allocator holds ``reserved_frac`` (95%) of the GPU's
    memory: ``[memory]`` events with Total Reserved = 0.95 x totalGlobalMem and Total
    Allocated peaking at ~0.90 x.
    """
    b = TraceBuilder(**kw)
    reserved = int(b.total_mem * reserved_frac)
    for _ in range(steps):
        with b.step():
            _train_step(b, allocated=int(b.total_mem * 0.90), reserved=reserved)
    return b


def comm_not_overlapped(*, share: float = 0.3, buckets: int = 4, overlap: bool = False,
                        steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """DDP on rank 0 of 8 (nccl): all-reduce kernels (``ncclDevKernel_AllReduce_*``, stream
    20) take ``share`` (~30%) of each step and start only after the whole backward pass, so
    none of it overlaps compute; the optimizer waits for them.

    ``overlap=True`` is the healthy counterpart: the same buckets launched during the backward
    pass, hidden behind the remaining backward kernels.
    """
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 8)
    kw.setdefault("backend", "nccl")
    b = TraceBuilder(**kw)
    layers = 8
    compute = layers * (_gpu_us(_FWD_BF16) + _gpu_us(_BWD_BF16)) + 25 + 400 + 800 * 3.0
    per = share / (1 - share) * compute / buckets
    for _ in range(steps):
        with b.step():
            if not overlap:
                _train_step(b, layers=layers, comm=(buckets, per))
                continue
            b.dataloader(150.0, workers=8)
            _inputs(b)
            b.zero_grad(params=160)
            with b.annotation("## forward ##"):
                for _ in range(layers):
                    _layer(b, _FWD_BF16, pace=0.97)
            with b.annotation("## backward ##"):
                for i in range(layers):
                    _layer(b, _BWD_BF16, pace=0.97, backward=True)
                    if i % 2 == 1 and i < layers - 1:
                        b.nccl(dur=per * 0.4)  # smaller than the compute left to hide it
            b.nccl(dur=per * 0.1)
            b.stream_wait(stream=7, on=20)
            b.optimizer_step(kernels=800, foreach=True)
    return b


def optimizer_per_param(*, kernels: int = 300, steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """Healthy pipeline whose optimizer step launches ``kernels`` (300) tiny (3 us) kernels
    per step, one per parameter and op (no foreach): ~3 ms of host launches per step for
    ~0.9 ms of GPU work.
    """
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            _train_step(b, opt_kernels=kernels, foreach=False)
    return b


def zero_grad_fill(*, params: int = 200, steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """Healthy pipeline whose ``zero_grad(set_to_none=False)`` zeroes ``params`` (200)
    gradients one by one: 200 ``aten::zero_`` > ``aten::fill_`` launches (~1.8 ms of host) and
    200 FillFunctor kernels per step.
    """
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            _train_step(b, params=params, set_to_none=False)
    return b


_DECODE_KERNELS = (
    (GEMM_BF16[0], 6.0, "aten::addmm"),
    (GELU_BF16, 2.5, "aten::gelu"),
    (GEMM_BF16[1], 7.0, "aten::addmm"),
    (LAYER_NORM_BF16, 3.0, "aten::native_layer_norm"),
)


def _decode_token(b: TraceBuilder, *, graph: bool, layers: int) -> None:
    if graph:
        b.graph_launch([(n, d) for _ in range(layers) for n, d, _ in _DECODE_KERNELS])
        b.idle(30.0)  # sampling the next token in Python
    else:
        for _ in range(layers):
            for n, d, op in _DECODE_KERNELS:
                b.kernel(n, dur=d, launch_dur=5.0, op=op)
                b.cpu(6.0, "aten::view")  # module and dispatcher overhead between launches
    b.kernel(REDUCE_SUM, dur=4.0, op="aten::argmax")


def graph_decode(*, graph: bool = True, tokens: int = 16, layers: int = 40, steps: int = STEPS,
                 **kw: Any) -> TraceBuilder:
    """LLM-style decoding (inference: no backward, no optimizer): each step makes ``tokens``
    (16) tokens; each token runs ``layers`` (40) x 4 tiny kernels (2.5-7 us), replayed by one
    ``cudaGraphLaunch`` (``graph=False``: launched one by one, each behind its op, so the GPU
    waits for the host), then an argmax; the step ends reading the token with ``.item()``.
    With the graph ~98% of kernels come from graph launches and the GPU is busy ~90%.
    """
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            for _ in range(tokens):
                _decode_token(b, graph=graph, layers=layers)
            b.sync(via_item=True)
    return b


def eager_decode(**kw: Any) -> TraceBuilder:
    """``graph_decode`` without the CUDA graph: launch-bound inference."""
    return graph_decode(graph=False, tokens=4, **kw)


def compiled_launch_bound(**kw: Any) -> TraceBuilder:
    """``launch_bound`` where the tiny kernels are Triton kernels (torch.compile / Inductor
    output): still launch-bound, but compiled already."""
    b = launch_bound(**kw)
    names = ("triton_poi_fused_add_mul_0", "triton_poi_fused_gelu_1", "triton_red_fused_sum_2")
    for i, ev in enumerate(e for e in b._events if e.get("cat") == "kernel"):
        if not ev["name"].startswith(("nvjet", "sm90")):
            ev["name"] = names[i % 3]
    return b


def hidden_sync(*, steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """Healthy training (the host runs ahead of a busy GPU) except that after the forward pass
    each step builds a 64-byte tensor on the CPU and copies it with a plain ``.cuda()``
    (pageable, blocking): the copy waits for all queued forward work, so the host is blocked
    ~1.1 ms per step for 64 bytes while the GPU keeps running. The GPU then idles only until
    the host launches the backward pass: a small cost for a long host wait.
    """
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            _train_step(b, hidden_copy=True)
    return b


def cpu_only(*, steps: int = STEPS, **kw: Any) -> TraceBuilder:
    """A CPU-only run (``deviceProperties == []``): only cpu_op / user_annotation events
    (plus CPU ``[memory]`` instants); ~33 ms steps. Every GPU rule must be "not applicable".
    """
    kw.setdefault("device", None)
    b = TraceBuilder(**kw)
    for _ in range(steps):
        with b.step():
            b.dataloader(1500.0, workers=2)
            b.zero_grad(params=40)
            b.memory(allocated=512 * 2**20, reserved=0)
            with b.annotation("## forward ##"):
                for _ in range(4):
                    with b.op("aten::linear"):
                        b.cpu(10.0, "aten::t")
                        b.cpu(2400.0, "aten::addmm")
                    b.cpu(300.0, "aten::relu")
            with b.annotation("## backward ##"):
                for _ in range(4):
                    with b.op("autograd::engine::evaluate_function: AddmmBackward0"), b.op(
                        "AddmmBackward0"
                    ):
                        b.cpu(2300.0, "aten::mm")
                        b.cpu(2300.0, "aten::mm")
                    b.cpu(350.0, "aten::threshold_backward")
            b.optimizer_step(kernels=200, kernel_dur=4.0, foreach=True)
    return b


SCENARIOS = {
    "healthy": healthy,
    "dataloader_bound": dataloader_bound,
    "pageable_copies": pageable_copies,
    "sync_bound": sync_bound,
    "launch_bound": launch_bound,
    "fp32_gemm": fp32_gemm,
    "memory_pressure": memory_pressure,
    "comm_not_overlapped": comm_not_overlapped,
    "optimizer_per_param": optimizer_per_param,
    "zero_grad_fill": zero_grad_fill,
    "cpu_only": cpu_only,
    "graph_decode": graph_decode,
    "eager_decode": eager_decode,
    "compiled_launch_bound": compiled_launch_bound,
    "hidden_sync": hidden_sync,
}


# --------------------------------------------------------------------------------------------
# measure(): an independent oracle for what a scenario plants
# --------------------------------------------------------------------------------------------
#
# Plain Python over the event dicts (no numpy, nothing from diagnose), following the
# definitions the metrics document: time is counted inside the ProfilerStep spans only,
# counts and kernel-time shares take the events whose midpoint lies in a step, and what a
# trace cannot give (no GPU, no DataLoader, no collectives, ...) is None, never 0.

_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
_KERNEL_CATS = {"kernel", "Kernel"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime"}
_HOST_SPAN_CATS = {"user_annotation", "Operator"}
_HOST_OP_CATS = {"cpu_op", "user_annotation", "Operator"}
_SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
               "cudaMemcpy"}
_SYNC_OPS_ORACLE = {"aten::item", "aten::_local_scalar_dense"}

Span = tuple[float, float]


def _union(intervals: Iterable[Span], lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` clipped to [lo, hi]."""
    clipped = sorted((max(s, lo), min(e, hi)) for s, e in intervals)
    total, reach = 0.0, -math.inf
    for s, e in clipped:
        if e <= s or e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total


def _merged(intervals: Iterable[Span]) -> list[Span]:
    """The union of ``intervals`` as sorted disjoint spans."""
    out: list[Span] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, max(s, e)))
    return out


def _starts_inside(spans: list[Span], x: float) -> bool:
    """Does ``x`` lie in some span, after its start (start < x <= end)? ``spans``: merged."""
    k = bisect.bisect_left(spans, (x, -math.inf)) - 1
    return k >= 0 and spans[k][0] < x <= spans[k][1]


def _x_events(doc: dict[str, Any]) -> list[Event]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _steps(ev: list[Event]) -> list[Span]:
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                   if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") in _HOST_SPAN_CATS)
    if steps:
        return steps
    return [(min(e["ts"] for e in ev), max(e["ts"] + e["dur"] for e in ev))]


def _pageable_blocked(ev: list[Event]) -> list[Span]:
    """Host time blocked by pageable host-to-device copies: each copy's API call, widened
    to the ``aten::copy_`` op on its thread that holds it."""
    corr = {e["args"]["correlation"] for e in ev if e.get("cat") in _DEVICE_CATS
            and "Pageable" in e["name"] and "HtoD" in e["name"]}
    copy_ops = sorted((e for e in ev if e["name"] == "aten::copy_"), key=lambda e: e["ts"])
    out = []
    for r in ev:
        if r.get("cat") not in _RUNTIME_CATS or r["args"].get("correlation") not in corr \
                or not r["name"].startswith("cudaMemcpy"):
            continue
        lo, hi = r["ts"], r["ts"] + r["dur"]
        holder = [op for op in copy_ops if op["ts"] <= lo]
        if holder and holder[-1]["ts"] + holder[-1]["dur"] >= hi and holder[-1]["tid"] == r["tid"]:
            lo, hi = holder[-1]["ts"], holder[-1]["ts"] + holder[-1]["dur"]
        out.append((lo, hi))
    return _merged(out)


def idle_split(doc: dict[str, Any]) -> dict[str, float | None]:
    """The GPU's idle time in the steps, split by cause (shares of the summed step time).

    A gap is a stretch of a step with no kernel, copy or memset. The DataLoader claims the
    part of it the host spends in ``enumerate(DataLoader)``; the rest goes to ``sync`` if
    the gap begins inside a synchronising call (or a blocking pageable copy), to ``launch``
    if the work that ends it was launched after the gap began, else to ``other``; a gap whose
    ending work was already queued when it began is never the host's doing (sync or launch).
    """
    ev = _x_events(doc)
    steps = _steps(ev)
    dev = sorted((e for e in ev if e.get("cat") in _DEVICE_CATS), key=lambda e: e["ts"])
    names = ("gpu_idle", "idle_input", "idle_sync", "idle_launch", "idle_other",
             "idle_copy_sync", "idle_graph_launch")
    if not dev:
        return dict.fromkeys(names)
    busy = _merged((e["ts"], e["ts"] + e["dur"]) for e in dev)
    dl = [(e["ts"], e["ts"] + e["dur"]) for e in ev
          if "DataLoader" in e["name"] and e.get("cat") in _HOST_SPAN_CATS]
    sync = _merged((e["ts"], e["ts"] + e["dur"]) for e in ev
                   if (e.get("cat") in _RUNTIME_CATS and e["name"] in _SYNC_CALLS)
                   or (e.get("cat") in _HOST_OP_CATS and e["name"] in _SYNC_OPS_ORACLE))
    blocked = _pageable_blocked(ev)
    launch_end = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in ev
                  if e.get("cat") in _RUNTIME_CATS}
    graph_corr = {e["args"]["correlation"] for e in ev if e.get("cat") in _RUNTIME_CATS
                  and e["name"] == "cudaGraphLaunch"}
    starts = [e["ts"] for e in dev]
    total = dict.fromkeys(names, 0.0)
    for s, e in steps:
        cursor, gaps = s, []
        for bs, be in busy:  # the complement of the busy time within the step
            if be <= s or bs >= e:
                continue
            if bs > cursor:
                gaps.append((cursor, bs))
            cursor = max(cursor, be)
        if cursor < e:
            gaps.append((cursor, e))
        for gs, ge in gaps:
            total["gpu_idle"] += ge - gs
            waiting = _union(dl, gs, ge)
            total["idle_input"] += waiting
            rest = max(ge - gs - waiting, 0.0)
            k = bisect.bisect_left(starts, ge)
            nxt = dev[k] if k < len(dev) else None
            launched = launch_end.get(nxt["args"]["correlation"]) if nxt else None
            late = launched is not None and launched >= gs - 1e-3
            queued = launched is not None and not late
            copy = _starts_inside(blocked, gs) and not queued
            if (_starts_inside(sync, gs) or copy) and not queued:
                total["idle_sync"] += rest
                total["idle_copy_sync"] += rest if copy else 0.0
            elif late:
                total["idle_launch"] += rest
                if nxt is not None and nxt["args"]["correlation"] in graph_corr:
                    total["idle_graph_launch"] += rest
            else:
                total["idle_other"] += rest
    window = sum(e - s for s, e in steps)
    return {k: v / window for k, v in total.items()}


def measure(doc: dict[str, Any]) -> dict[str, float | None]:
    """What a scenario plants, measured inside the ProfilerStep spans (see above).

    window_us: summed step time; steps; step_ms: mean step time. Shares of the window:
    gpu_busy (union of kernel/memcpy/memset time), dataloader (DataLoader spans),
    memcpy_host (host time in cudaMemcpy* calls), sync_host (host time in synchronising
    calls: *Synchronize, blocking cudaMemcpy, .item()), nccl (union of NCCL kernel time).
    comm_overlap: share of NCCL time overlapping other kernels. Of the window's kernel time:
    gemm_share, gemm_fp32_share (sgemm/simt); gemm_fp32_of_gemm: the fp32 share of GEMM time
    (every builder GEMM name tells its precision). Per step: kernels_per_step,
    optimizer_kernels_per_step (kernel launches inside optimizer.step()), zero_fill_per_step
    (launches inside zero_grad()). max_reserved_frac: peak reserved / device memory. The
    idle split: :func:`idle_split`.
    """
    ev = _x_events(doc)
    steps = _steps(ev)
    win = sum(e - s for s, e in steps)
    n = len(steps)

    def in_steps(sel: Iterable[Event]) -> float:
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in sel]
        return sum(_union(spans, s, e) for s, e in steps)

    def in_window(e: Event) -> bool:
        mid = e["ts"] + e["dur"] / 2
        return any(s <= mid < t for s, t in steps)

    dev = [e for e in ev if e.get("cat") in _DEVICE_CATS]
    gpu = bool(dev)
    kern = [e for e in dev if e["cat"] in _KERNEL_CATS and in_window(e)]
    nccl = [e for e in dev if e["cat"] in _KERNEL_CATS and e["name"].startswith("nccl")]
    compute = [e for e in dev if e["cat"] in _KERNEL_CATS and not e["name"].startswith("nccl")]
    ktime = sum(e["dur"] for e in kern)
    gemm = [e for e in kern if "gemm" in e["name"] or e["name"].startswith("nvjet")]
    fp32 = [e for e in gemm if "sgemm" in e["name"] or "simt" in e["name"]]
    runtime = [e for e in ev if e.get("cat") in _RUNTIME_CATS]
    host_ops = [e for e in ev if e.get("cat") in _HOST_OP_CATS]
    opt = [e for e in ev if e["name"].startswith("Optimizer.step#") and e["cat"] in _HOST_SPAN_CATS]
    zg = [e for e in ev if e["name"].startswith("Optimizer.zero_grad#")
          and e["cat"] in _HOST_SPAN_CATS]
    dl = [e for e in ev if "DataLoader" in e["name"] and e["cat"] in _HOST_SPAN_CATS]

    def launches_in(spans: list[Event]) -> int:
        return sum(
            1 for r in runtime if r["name"] == "cudaLaunchKernel"
            and any(s["ts"] < r["ts"] + r["dur"] / 2 <= s["ts"] + s["dur"] for s in spans)
        )

    reserved = [e["args"]["Total Reserved"] for e in doc["traceEvents"]
                if e.get("name") == "[memory]" and "Total Reserved" in e.get("args", {})]
    total_mem = (doc.get("deviceProperties") or [{}])[0].get("totalGlobalMem", 0)
    nccl_time = in_steps(nccl)
    overlap = nccl_time + in_steps(compute) - in_steps(nccl + compute)
    sync = [e for e in runtime if e["name"] in _SYNC_CALLS] + [
        e for e in host_ops if e["name"] in _SYNC_OPS_ORACLE]
    out: dict[str, float | None] = {
        "window_us": win,
        "steps": float(n),
        "step_ms": win / n / 1e3,
        "gpu_busy": in_steps(dev) / win if gpu else None,
        "dataloader": in_steps(dl) / win if dl else None,
        "memcpy_host": in_steps(e for e in runtime if e["name"].startswith("cudaMemcpy")) / win
        if gpu else None,
        "sync_host": in_steps(sync) / win if gpu else None,
        "nccl": nccl_time / win if gpu else None,
        "comm_overlap": overlap / nccl_time if nccl_time > 0 else None,
        "gemm_share": sum(e["dur"] for e in gemm) / ktime if ktime > 0 else None,
        "gemm_fp32_share": sum(e["dur"] for e in fp32) / ktime if gemm else None,
        "gemm_fp32_of_gemm": sum(e["dur"] for e in fp32) / sum(e["dur"] for e in gemm)
        if gemm else None,
        "kernels_per_step": len(kern) / n if gpu else None,
        "optimizer_kernels_per_step": launches_in(opt) / n if opt and gpu else None,
        "zero_fill_per_step": launches_in(zg) / n if zg else None,
        "max_reserved_frac": (max(reserved) / total_mem) if reserved and total_mem else None,
    }
    out.update(idle_split(doc))
    return out
