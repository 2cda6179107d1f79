"""The model's own work (its forward, and forward with backward) on torch's intra-op
threads and on one thread.

In the loop, :class:`ForwardTimer` times every forward call with a pair of module hooks
(the clock's ``forward_ms`` column): the forward as the job runs it, beside its workers and
whatever else holds the CPUs. After the loop, :func:`time_threads` runs the first batch the
model saw alone (each model its own, where the loop has several: :func:`models_work`),
alternately on torch's threads and on one thread. The model follows Amdahl:
``work_1thread_ms / work_ms`` is what one thread costs the model's ops (the part that does
not scale stays), and the loop's forward over the quiet one is the contention the job met.
Nothing of the run changes (:func:`model_work`); only a CPU model on more than one
intra-op thread is timed.
"""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from functools import partial
from typing import Any, NamedTuple

from ...stepmodel.calibration import THREADS_NOISE_MAX
from ..eager import eager
from .common import (
    SLOW_S,
    cannot_afford,
    median_noise,
    out_of_time,
    settled,
    timed,
)
from .held_hooks import user_hooks_held

#: rounds of (torch's threads, one thread) after one warm-up round of each: ROUNDS at
#: least, then more, up to MAX_ROUNDS within ROUNDS_S seconds in all, until their medians
#: are settled (:func:`~.common.settled`: what the threads give drifts on a shared host)
ROUNDS = 3
MAX_ROUNDS = 40
ROUNDS_S = 0.3
#: a thread timing this noisy (``noise``: the relative standard error of its medians)
#: is timed again after the other probes even where their budget is spent, and the two
#: joined (:func:`joined_threads`): the predictions that read it aim within 15% of the
#: measured speedup, which an input noisier than that cannot give
AGAIN_NOISE = 0.15
#: idle time before each timed forward (and backward) (s): in a training loop torch's
#: thread pool sleeps while the step does other work (loading, the optimizer, Python), and
#: waking it is part of what its threads cost; timed back to back they would look better
IDLE_S = 0.005

#: a model's calls stand for its first call's work where at least this share of them had its
#: input shapes: an epoch's short last batch is one call in tens; a model called on inputs
#: of changing shapes (sequences of their own lengths) is not timed by its first call
SAME_SHAPES = 0.9

#: a pair of model inputs as a forward call received them: (args, kwargs)
Inputs = tuple[tuple[Any, ...], dict[str, Any]]


class ModelCalls(NamedTuple):
    """A model's outermost calls in the loop (:meth:`ForwardTimer.calls`): how many, whether
    they had its first call's input shapes (at least :data:`SAME_SHAPES` of them), and how
    many of their outputs a backward went through (their gradient hook fired)."""

    calls: int
    same: bool
    backprops: int = 0
#: the devices whose autocast a recorded forward may have run under
AUTOCAST_DEVICES = ("cpu", "cuda")
#: model -> the autocast its recorded forward ran under ((device, dtype), ...): kept by
#: :class:`ForwardTimer` with the inputs, replayed by :func:`model_work` (a decoder that got
#: bfloat16 activations from its encoder under autocast cannot take them without it)
_AUTOCAST: weakref.WeakKeyDictionary[Any, tuple[tuple[str, Any], ...]] = (
    weakref.WeakKeyDictionary())


def autocast_now() -> tuple[tuple[str, Any], ...]:
    """The autocast on at this moment: ((device, dtype), ...), empty where none is."""
    import torch

    out = []
    for dev in AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(dev):
                out.append((dev, torch.get_autocast_dtype(dev)))
        except (RuntimeError, TypeError, AttributeError):  # an older torch, no such device
            continue
    return tuple(out)


class ForwardTimer:
    """Times every forward call of ``model`` into ``on_forward(seconds)`` and keeps the
    first call's inputs (CPU models only) for :func:`time_threads`.

    A loop may never call the model itself, only its parts: a LightningModule's
    ``training_step`` that calls ``self.net(x)``. Until the model's own forward runs, its
    direct children (those with parameters) are timed the same way when called from
    outside it, each keeping its first inputs: those parts are then the model's work
    (:meth:`works`). Once the model's own forward runs, their hooks go.

    On a CPU model, ``on_backward()`` is called as the output of an outermost call gets its
    gradient (a hook on its first floating-point tensor that records one): the model's
    backward begins."""

    def __init__(self, model: Any, on_forward: Callable[[float], None],
                 on_backward: Callable[[], None] | None = None) -> None:
        self.model = model
        self.on_forward = on_forward
        # what an output's gradient hook calls: a cell, not the timer, so that an output
        # kept past the session holds neither the timer nor the first inputs
        self._backward_cell: list[Callable[[], None] | None] = [on_backward]
        self._own: Inputs | None = None
        self._parts: dict[int, tuple[Any, Inputs]] = {}  # by id, in first-call order
        # by module id: its outermost calls, and those with its first call's input shapes
        # (CPU models: what the quiet timing of its first inputs stands for)
        self._calls: dict[int, int] = {}
        self._first_sig: dict[int, Any] = {}
        self._same: dict[int, int] = {}
        self._backprops: dict[int, int] = {}  # by module id: outputs a backward went through
        self._keep = on_cpu(model)
        self._t0: list[float] = []
        self._depth = 0  # inside the model's own forward
        self._handles = [model.register_forward_pre_hook(eager(self._pre), with_kwargs=True),
                         model.register_forward_hook(eager(self._post), always_call=True)]
        children = getattr(model, "children", None)
        self._part_handles = [] if not callable(children) else [
            h for c in children() if any(True for _ in c.parameters())
            for h in (c.register_forward_pre_hook(eager(self._part_pre), with_kwargs=True),
                      c.register_forward_hook(eager(self._part_post), always_call=True))]

    @property
    def inputs(self) -> Inputs | None:
        """The inputs of the first forward: the model's own, else its first part's."""
        works = self.works()
        return works[0][1] if works else None

    def works(self) -> list[tuple[Any, Inputs]]:
        """(module, its first inputs) of what the loop called: the model, else the parts
        it called directly (none on a GPU model)."""
        if self._own is not None:
            return [(self.model, self._own)]
        return list(self._parts.values())

    def calls(self) -> dict[int, ModelCalls]:
        """{id(module): :class:`ModelCalls`} for the modules of :meth:`works` (CPU models
        only; none on a GPU model)."""
        return {k: ModelCalls(n, self._same.get(k, 0) >= SAME_SHAPES * n,
                              self._backprops.get(k, 0)) for k, n in self._calls.items()}

    def _count(self, module: Any, args: Any, kwargs: Any) -> None:
        if not self._keep:
            return
        key = id(module)
        self._calls[key] = self._calls.get(key, 0) + 1
        sig = _signature(args, kwargs)
        first = self._first_sig.setdefault(key, sig)
        self._same[key] = self._same.get(key, 0) + (sig == first)

    def _pre(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._part_handles:  # the model itself is called: its parts are its work
            self._drop_parts()
        if not self._depth:
            self._count(module, args, kwargs)
        self._depth += 1
        if self._keep and self._own is None:
            self._own = (tuple(args), dict(kwargs))
            with suppress(TypeError):  # a model that cannot be weakly referenced
                _AUTOCAST[module] = autocast_now()
        self._t0.append(time.perf_counter())

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._t0:
            self.on_forward(time.perf_counter() - self._t0.pop())
        if not self._depth:
            self._watch_backward(module, output)

    def _watch_backward(self, module: Any, output: Any) -> None:
        """A hook on the output's first floating-point tensor where it records a gradient
        (CPU models): its gradient's arrival is the model's backward's start, and counts a
        backward through this call of ``module``."""
        if self._backward_cell[0] is None or not self._keep:
            return
        out = _first_tensor(output)
        if out is not None and out.requires_grad:
            out.register_hook(partial(_grad_arrived, self._backward_cell, self._backprops,
                                      id(module)))

    def _part_pre(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._depth:
            return
        if self._keep and id(module) not in self._parts:
            self._parts[id(module)] = (module, (tuple(args), dict(kwargs)))
            with suppress(TypeError):
                _AUTOCAST[module] = autocast_now()
        self._count(module, args, kwargs)
        self._t0.append(time.perf_counter())

    def _part_post(self, module: Any, args: Any, output: Any) -> None:
        if not self._depth and self._t0:
            self.on_forward(time.perf_counter() - self._t0.pop())
            self._watch_backward(module, output)

    def _drop_parts(self) -> None:
        for h in self._part_handles:
            h.remove()
        self._part_handles = []
        self._parts = {}
        self._calls, self._first_sig, self._same, self._backprops = {}, {}, {}, {}

    def remove(self) -> None:
        self._backward_cell[0] = None
        for h in self._handles:
            h.remove()
        self._handles = []
        for h in self._part_handles:
            h.remove()
        self._part_handles = []


def _grad_arrived(cell: list[Callable[[], None] | None], counts: dict[int, int], key: int,
                  grad: Any) -> None:
    """A timed output's gradient hook: counts a backward through module ``key``'s call and
    tells the cell's callable (neither once its timer is removed); the gradient is left as
    it is."""
    on = cell[0]
    if on is not None:
        counts[key] = counts.get(key, 0) + 1
        on()


def _signature(args: Any, kwargs: Any) -> tuple[Any, ...]:
    """What a forward call's inputs look like, cheaply: each positional and keyword input's
    shape and dtype where a tensor, one level into a tuple, list or dict (a batch), else its
    type. Two calls with one signature do the same work, as far as their shapes tell."""
    def one(x: Any, deep: bool = True) -> Any:
        shape = getattr(x, "shape", None)
        if shape is not None and hasattr(x, "dtype"):
            return tuple(shape), x.dtype
        if deep and isinstance(x, tuple | list):
            return tuple(one(v, False) for v in x)
        if deep and isinstance(x, dict):
            return tuple((k, one(v, False)) for k, v in x.items())
        return type(x)

    return tuple(one(a) for a in args), tuple((k, one(v)) for k, v in kwargs.items())


def per_call_forward(forwards: Sequence[float], calls: Sequence[int]) -> float | None:
    """The quiet forward of the loop's mean forward call (ms): each model's forward alone
    (``forwards``, on its first inputs), weighted by the calls the loop made of it
    (``calls``); None where no call was counted."""
    total = sum(calls)
    if total <= 0 or len(forwards) != len(calls):
        return None
    return sum(f * c for f, c in zip(forwards, calls, strict=True)) / total


def on_cpu(model: Any) -> bool:
    """True where the model's first parameter is on the CPU."""
    try:
        p = next(iter(model.parameters()), None)
    except Exception:
        return False
    return p is not None and p.device.type == "cpu"


def _first_tensor(out: Any) -> Any:
    """The first floating-point tensor in a forward's output (a tensor, or nested in a
    tuple, list or dict), else None."""
    import torch

    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    items = out.values() if isinstance(out, dict) else out if isinstance(
        out, tuple | list) else ()
    for v in items:
        t = _first_tensor(v)
        if t is not None:
            return t
    return None


def recorded_autocast(model: Any) -> tuple[tuple[str, Any], ...]:
    """The autocast ``model``'s recorded forward ran under ((device, dtype), ...), as
    :class:`ForwardTimer` kept it; empty where none was (or none could be kept: a model
    that cannot be weakly referenced)."""
    try:
        return _AUTOCAST.get(model, ())
    except TypeError:
        return ()


def _widened(x: Any) -> Any:
    """``x`` with each half-precision floating tensor in it (nested in tuples, lists and
    dicts) as float32: the activations an fp32 forward would have handed on."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    if isinstance(x, dict):
        return {k: _widened(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_widened(v) for v in x]
    if isinstance(x, tuple):
        got = [_widened(v) for v in x]
        return type(x)(*got) if hasattr(x, "_fields") else tuple(got)  # a namedtuple's type
    return x


@contextmanager
def model_work(model: Any, inputs: Inputs, idle_s: float = IDLE_S, cast: bool = True
               ) -> Iterator[tuple[Callable[[], float], Callable[[], float]]]:
    """(the forward of the last work, the work) on ``inputs``: the work, the forward with
    its backward after ``idle_s`` asleep, returns its seconds; the first callable the
    seconds its forward took (the forward as the loop runs it, recording for backward: no
    forward is timed apart). The backward goes through ``torch.autograd.grad`` (no
    ``.grad`` is written). The forward runs under the autocast the recorded one ran under
    (:class:`ForwardTimer`); without ``cast`` in none (fp32, the loop's autocast left
    out). The user's hooks are held back meanwhile (:mod:`.held_hooks`). The RNG state,
    the model's buffers (BatchNorm's running statistics) and torch's thread count are put
    back on the way out."""
    import torch

    args, kwargs = inputs
    casts = recorded_autocast(model)
    if casts and not cast:  # a part fed bf16/fp16 activations under autocast gets fp32 ones
        args, kwargs = _widened(args), _widened(kwargs)
    params = [p for p in model.parameters() if p.requires_grad]
    n = torch.get_num_threads()
    rng = torch.get_rng_state()
    buffers = [(b, b.detach().clone()) for b in model.buffers()]

    fwd = [0.0]

    def forward() -> float:
        return fwd[0]

    def work() -> float:
        if idle_s:  # as in the loop: the pool has been idle while a batch loaded
            time.sleep(idle_s)
        t0 = time.perf_counter()
        with torch.enable_grad(), ExitStack() as casting:  # as the loop's forward runs
            for dev, dtype in casts if cast else ():
                casting.enter_context(torch.autocast(dev, dtype=dtype))
            got = model(*args, **kwargs)
            fwd[0] = time.perf_counter() - t0
            casting.close()  # the backward outside autocast, as the loop runs it
            out = _first_tensor(got)
            if params and out is not None and out.requires_grad:
                torch.autograd.grad(out.float().sum(), params, allow_unused=True)
        return time.perf_counter() - t0

    try:
        with user_hooks_held([model]):  # the user's hooks see no probe's calls
            yield forward, work
    finally:
        torch.set_num_threads(n)
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng)


def cpu_pairs(model: Any, inputs: Inputs, others: Sequence[tuple[Any, Inputs]] = ()
              ) -> list[tuple[Any, Inputs]]:
    """The model with its first inputs, then the loop's other models on the CPU with theirs
    (those whose inputs were seen), as :func:`models_work` takes them."""
    return [(model, inputs), *((m, x) for m, x in others
                               if m is not model and x is not None and on_cpu(m))]


class Forwards:
    """The forwards of the last work of :func:`models_work`: called, their sum (s);
    :meth:`each`, each model's; :meth:`works`, each model's forward with its backward."""

    def __init__(self, each: Sequence[Callable[[], float]], works: list[float]) -> None:
        self._each = list(each)
        self._works = works  # filled by the work as it runs

    def __call__(self) -> float:
        return sum(f() for f in self._each)

    def each(self) -> list[float]:
        return [f() for f in self._each]

    def works(self) -> list[float]:
        return list(self._works)


@contextmanager
def models_work(pairs: list[tuple[Any, Inputs]], idle_s: float = IDLE_S, cast: bool = True
                ) -> Iterator[tuple[Forwards, Callable[[], float]]]:
    """:func:`model_work` of several models (a GAN's generator and discriminator, each on
    the first inputs its forward got), as one work: each model's forward with its
    backward in turn, one idle spell before them all; the forwards (:class:`Forwards`)
    their sum, and each model's. One model: its own :func:`model_work`. ``cast``: as
    :func:`model_work`'s."""
    last = [0.0] * len(pairs)  # each model's last work (s)
    if len(pairs) == 1:
        with model_work(*pairs[0], idle_s=idle_s, cast=cast) as (forward, one):

            def own() -> float:
                last[0] = one()
                return last[0]

            yield Forwards([forward], last), own
        return
    with ExitStack() as stack:
        each = [stack.enter_context(model_work(m, x, idle_s=0.0, cast=cast)) for m, x in pairs]

        def work() -> float:
            if idle_s:
                time.sleep(idle_s)
            for i, (_, w) in enumerate(each):
                last[i] = w()
            return sum(last)

        yield Forwards([f for f, _ in each], last), work


@timed("threads")
def time_threads(model: Any, inputs: Inputs | None,
                 others: Sequence[tuple[Any, Inputs]] = (),
                 calls: Mapping[int, tuple[int, ...]] | None = None) -> dict[str, Any] | None:
    """The model's work on ``inputs`` timed on torch's threads and on one thread (ms, the
    median of :data:`ROUNDS` to :data:`MAX_ROUNDS` alternating rounds): the forward on
    torch's threads (``forward_ms``, timed within the work, to set beside the loop's own
    forward), and the forward with its backward (``work_ms``, ``work_1thread_ms``), as
    :func:`model_work` runs them (nothing of the run changes); ``others``: the loop's other
    models with their first inputs, timed in the same work (:func:`models_work`). None
    where it does not apply (no inputs, a GPU model, one thread already). A round: the
    work on torch's threads (its forward timed within it), then on one thread; the first
    warms the work up and measures a round. ``calls``: the loop's calls of each model
    (:meth:`ForwardTimer.calls`); where every model called is timed here and each call
    had its first call's input shapes, ``forward_per_call_ms`` is the quiet forward of the
    loop's mean call (:func:`per_call_forward`): a GAN calls its discriminator three
    times a step and its generator once."""
    if inputs is None or model is None or not on_cpu(model):
        return None
    import torch

    n = torch.get_num_threads()
    if n < 2:
        return None
    pairs = cpu_pairs(model, inputs, others)
    times: dict[str, list[float]] = {"forward": [], "work": [], "work_1thread": []}
    each: list[list[float]] = []  # each round's forward of each model
    works: list[list[float]] = []  # ... and its forward with its backward
    backward = any(p.requires_grad for m, _ in pairs for p in m.parameters())
    start = time.perf_counter()
    with models_work(pairs) as (forward, work):
        for k in range(MAX_ROUNDS + 1):
            if k > ROUNDS and (time.perf_counter() - start > ROUNDS_S or out_of_time()
                               or settled(*times.values())):
                break
            t0 = time.perf_counter()
            torch.set_num_threads(n)
            times["work"].append(work())
            times["forward"].append(forward())
            each.append(forward.each())
            works.append(forward.works())
            torch.set_num_threads(1)
            times["work_1thread"].append(work())
            if k == 0 and time.perf_counter() - t0 > 3 * SLOW_S:
                break  # a work too slow for more rounds: its one round is the timing
            if k == 0:  # the first round warms the work up, and measures a round
                round_s = time.perf_counter() - t0
                for v in times.values():
                    v.clear()
                each.clear()
                works.clear()
                if cannot_afford(round_s, ROUNDS):
                    return None
            if time.perf_counter() - t0 > 3 * SLOW_S:
                break
    if not times["work"]:
        return None
    out: dict[str, Any] = {"torch_threads": n, "backward": backward, "models": len(pairs)}
    for name, v in times.items():
        out[f"{name}_ms"] = round(statistics.median(v) * 1e3, 4)
    out["rounds"], out["noise"] = len(times["work"]), median_noise(*times.values())
    per_call = _per_call_ms(pairs, each, calls)
    if per_call is not None:
        out["forward_per_call_ms"] = per_call
    back = _per_call_backward_ms(pairs, each, works, calls)
    if back is not None:
        out["backward_per_call_ms"] = back
    if out["rounds"] == 1:  # one round, its warm-up in it: its noise is not known, and is
        out["noise"] = THREADS_NOISE_MAX  # taken as the most a prediction reads
    return out


def _timed_calls(pairs: Sequence[tuple[Any, Inputs]],
                 calls: Mapping[int, tuple[int, ...]] | None) -> list[tuple[int, ...]] | None:
    """``calls`` (:class:`ModelCalls`) of each timed model, in ``pairs``' order, where it
    counts a call of each of them, every call it counts is of one of them, and each had its
    first call's input shapes: the quiet timing of their first inputs stands for every
    call; else None."""
    if not calls or not pairs:
        return None
    got = [calls.get(id(m)) for m, _ in pairs]
    if any(c is None or not c[1] for c in got) or sum(c[0] for c in calls.values()) != sum(
            c[0] for c in got if c is not None):
        return None
    return [c for c in got if c is not None]


def _per_call_ms(pairs: Sequence[tuple[Any, Inputs]], each: list[list[float]],
                 calls: Mapping[int, tuple[int, ...]] | None) -> float | None:
    """:func:`per_call_forward` of the timed models (ms, each model's median forward),
    where their calls are timed (:func:`_timed_calls`); else None."""
    got = _timed_calls(pairs, calls)
    if got is None or not each:
        return None
    medians = [statistics.median(r[i] for r in each) * 1e3 for i in range(len(pairs))]
    got_ms = per_call_forward(medians, [c[0] for c in got])
    return None if got_ms is None else round(got_ms, 4)


def _per_call_backward_ms(pairs: Sequence[tuple[Any, Inputs]], each: list[list[float]],
                          works: list[list[float]],
                          calls: Mapping[int, tuple[int, ...]] | None) -> float | None:
    """The quiet backward of the loop's mean forward call (ms): each model's backward alone
    (the median of its work less its forward, on torch's threads) weighted by the calls
    a backward went through (:class:`ModelCalls`' ``backprops``: a call under no_grad, or
    whose output no loss reached, adds none), over every call counted; None where the
    calls are not timed (:func:`_timed_calls`) or no backward went through any."""
    got = _timed_calls(pairs, calls)
    if got is None or not each or len(works) != len(each):
        return None
    backs = [int(c[2]) if len(c) > 2 else 0 for c in got]
    total = sum(c[0] for c in got)
    if not sum(backs) or total <= 0:
        return None
    ms = [statistics.median(w[i] - f[i] for w, f in zip(works, each, strict=True)) * 1e3
          for i in range(len(pairs))]
    if any(b and v <= 0 for b, v in zip(backs, ms, strict=True)):
        return None
    return round(sum(b * v for b, v in zip(backs, ms, strict=True)) / total, 4)
