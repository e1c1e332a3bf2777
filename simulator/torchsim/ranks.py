"""A simulated rank's torch program: a thread of its own, run only while the rank's simulated device runs.

How ranks are scheduled: the engine runs each rank's device as a greenlet, one at a time, in simulated time
order (``simulator.core.engine``). A torch program cannot run on a greenlet itself (torch keeps per-thread
state: autograd's graph tasks, grad mode, dispatch modes), so each rank's program runs on a thread, and the
rank's greenlet and its thread pass one baton: the greenlet starts the thread and waits; the thread runs the
program until it needs the device (a collective, a send, a receive's wait) and hands the request over; the
greenlet does it on the device (which may let other ranks run, in their turn) and hands the answer back.
Only one thread runs at any moment, in the order the engine decides: the same program gives the same trace,
event for event. What torch keeps per process is swapped at each hand-over, so each rank has its own, as
separate processes do: the default random generator (each starting from torch's default seed), and the default
dtype, anomaly mode and attention backends (``process_state``; each starting from the caller's). DTensor's
custom op handlers are kept per rank by ``c10d``.

What the program does between requests (the aten ops it computes, the modules' outputs) waits in the rank's
``RankSink`` and is recorded on the device at the next request, in program order, before the request.
"""

from __future__ import annotations

import queue
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import bookkeeping
from .c10d import RankWorld, install
from .context import RankAborted, RankContext, enter, internal
from .names import (
    Call,
    Gradients,
    ModuleRecorder,
    grad_name,
    input_name,
    parameter_name,
    paused,
    recording,
    result_name,
)
from .pricing import Pricing
from .process_state import TorchState
from .stops import install_sleep, interrupt, no_progress, program_line
from .values import LocalPart, Nested, placement_of, to_numpy
from .works import unwaited_error

_DEFAULT_RNG = torch.Generator().get_state()  # a fresh process's generator: torch's default seed
# One simulated rank runs torch at a time in the whole process, even with two simulations side by side: what
# torch keeps per process (the default generator, sys.excepthook) is swapped at each turn, never shared.
_TURN = threading.Lock()


class Event:
    """Something the program did, recorded on the device at its next request (``record``)."""

    payload: Any = None
    row: int | None = None

    def record(self, dev: Any) -> None:
        raise NotImplementedError


class Priced(Event):
    def __init__(self, name: str, flops: float, inputs: list, out: Any) -> None:
        self.name, self.flops, self.inputs, self.out = name, flops, inputs, out

    def record(self, dev: Any) -> None:
        out = self.out
        dev.compute(self.name, lambda *_: out, *self.inputs, flops=self.flops, keep=False, label="torch")


class Value(Event):
    """A named value: a module's output (an op of its inputs, taking no time: its ops were priced), a parameter
    or gradient (held), or what the program returned."""

    def __init__(self, kind: str, name: str, array: Any, inputs: tuple, index: Any, partial: Any, doc: str) -> None:
        self.kind, self.name, self.array, self.inputs = kind, name, array, inputs
        self.index, self.partial, self.doc = index, partial, doc

    def record(self, dev: Any) -> None:
        self.row = dev.ops_recorded
        if self.kind == "hold":
            self.payload = dev.hold(self.name, self.array, index=self.index, partial=self.partial, doc=self.doc)
            return
        arr = self.array
        self.payload = dev.compute(
            self.name, lambda *_: arr, *self.inputs, seconds=0.0, index=self.index, partial=self.partial, doc=self.doc
        )


class Amend(Event):
    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn = fn

    def record(self, dev: Any) -> None:
        self.fn(dev)


class RankSink(ModuleRecorder):
    """One rank's record of what its program did between requests: priced ops, named values."""

    def __init__(self, ctx: RankContext) -> None:
        super().__init__((__file__,))
        self.ctx = ctx
        self.events: list[Event] = []
        # id(tensor) -> the values it was recorded as (a module's output is often its last submodule's too)
        self._values: dict[int, tuple[weakref.ref, list[Value]]] = {}
        self._received: dict[int, tuple[weakref.ref, Any]] = {}  # id(tensor) -> the receive that filled it

    # ---- what the program did -------------------------------------------------------------------
    def priced(self, name: str, flops: float, inputs: list, out: Any) -> None:
        where = self.stack[-1].path if self.stack and self.stack[-1].path else None
        self.events.append(Priced(f"{where}: {name}" if where else name, flops, inputs, out))

    def started(self, call: Call, first: bool) -> None:
        for i, t in enumerate(call.inputs):  # a received tensor fed to a module: its message carries the input
            entry = self._received.pop(id(t), None)
            if entry is not None and entry[0]() is t:
                index = self._index(t)
                name, req = input_name(call.name, i), entry[1]
                self.events.append(Amend(lambda dev, q=req, n=name, x=index: dev.amend_received(q, name=n, index=x)))
        if first:
            for pname, param in call.module.named_parameters(recurse=False):
                if _dtensor_spec(param) is not None:  # a plain parameter may be any part of the model's
                    self.value("hold", parameter_name(call.path, pname), param, (), f"parameter {pname} of {call.path}")

    def gradient(self, name: str, grad: torch.Tensor, step: int) -> None:
        self.value("hold", name, grad, (), f"the gradient optimizer step {step} uses")

    def output(self, call: Call, name: str, value: torch.Tensor, raw: bool) -> None:
        with internal(self.ctx):
            inputs = tuple(to_numpy(t, self.ctx.rank, name) for t in call.inputs)
        what = "raw output" if raw else "output"
        self.value("op", name, value, inputs, f"the {what} of module {call.path} ({type(call.module).__name__})")

    def value(self, kind: str, name: str, t: torch.Tensor, inputs: tuple, doc: str) -> Value | None:
        index, partial, op = self._placement(t)
        if op not in (None, "sum", "avg"):  # a partial max or min: no sum of terms to compare
            return None
        with internal(self.ctx):
            arr = to_numpy(t, self.ctx.rank, name)
        v = Value(kind, name, arr, inputs, index, partial, doc)
        self.events.append(v)
        entry = self._values.get(id(t))
        if entry is None or entry[0]() is not t:
            entry = self._values[id(t)] = (weakref.ref(t), [])
        entry[1].append(v)
        return v

    def _placement(self, t: torch.Tensor) -> tuple[Any, Any, str | None]:
        spec = _dtensor_spec(t)
        if spec is None and self.ctx.world is not None:
            spec = self.ctx.world.spec_of(t)
        world, rank = self.ctx.world, self.ctx.rank
        places = world.places(rank) if world is not None else ()
        groups = world.groups(rank) if world is not None else ()
        if spec is not None:
            index, group, op = placement_of(spec)
            # the DTensor may itself be a block of the model's value (split by the mesh's other dims)
            names = spec.mesh.mesh_dim_names or ()
            others = tuple(g for g in groups if g[2] not in names) if names else ()
            outer = LocalPart(tuple(spec.shape), rank, self.ctx.world_size, places, others)
            return Nested(index, tuple(spec.shape), outer, tuple(names)), group, op
        return LocalPart(tuple(t.shape), rank, self.ctx.world_size, places, groups), None, None

    def _index(self, t: torch.Tensor) -> Any:
        return self._placement(t)[0]

    def recorded(self, t: torch.Tensor) -> list[Value]:
        """The values ``t`` was recorded as, the latest last."""
        entry = self._values.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else []

    # ---- what collectives and receives learn ---------------------------------------------------------
    def reduced(self, t: torch.Tensor, group: tuple[int, ...], op: str) -> str | None:
        """``t`` is about to be all-reduced: if it is a module's output, that output was one term of a sum over the
        group (it is now marked so), and the all-reduce's result is the module's value: its name is returned."""
        if op not in ("sum", "avg") or len(group) < 2:
            return None
        world = self.ctx.world
        others = world.groups(self.ctx.rank, without=group) if world is not None else ()
        # the terms' sum is the whole value, or (on a mesh of several dims) the block the other dims give this rank
        index = (
            Nested(None, tuple(t.shape), LocalPart(tuple(t.shape), self.ctx.rank, groups=others)) if others else None
        )
        terms = self._terms(t, group, index)
        # the collective's result is named for the whole value only (a block's sum is checked as its terms' sum)
        return terms[-1].name if terms and index is None else None

    def declared(self, t: torch.Tensor, spec: Any) -> None:
        """``DTensor.from_local(t, mesh, placements)`` said what ``t`` is: a module's output declared ``Partial`` is
        one term of a sum over the mesh's ranks that share the rank's coordinates on the other dims."""
        index, group, op = placement_of(spec)
        if group is not None and len(group) > 1 and op in ("sum", "avg"):
            self._terms(t, group, index)

    def _terms(self, t: torch.Tensor, group: tuple[int, ...], index: Any) -> list[Value]:
        """Mark the module outputs ``t`` was recorded as (not yet said to be partial) as terms of a sum over
        ``group``; ``index``: the block of the whole value they are terms of (None: all of it)."""
        terms = [v for v in self.recorded(t) if v.kind == "op" and v.partial is None]
        for v in terms:
            v.index = index if index is not None or isinstance(v.index, LocalPart) else v.index
            if v.row is None:  # not on the device yet: it goes there as a partial sum
                v.partial = group
            else:
                self.events.append(Amend(lambda dev, r=v.row, i=v.index: dev.amend_op(r, partial=group, index=i)))
        return terms

    def backward(self, tensors: Any, grads: Any) -> None:
        """``torch.autograd.backward(tensors, grads)``: a received tensor given as the gradient of a module's output
        carries that output's gradient (``a.grad``, as ``Reference.of_torch`` names it)."""
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        grads = [grads] if isinstance(grads, torch.Tensor) else list(grads)
        for t, g in zip(tensors, grads):
            entry = self._received.pop(id(g), None) if isinstance(g, torch.Tensor) else None
            values = [v for v in self.recorded(t) if v.kind == "op"]
            if entry is None or entry[0]() is not g or not values:
                continue
            name, req, index = grad_name(values[-1].name), entry[1], values[-1].index
            self.events.append(Amend(lambda dev, q=req, n=name, x=index: dev.amend_received(q, name=n, index=x)))

    def received(self, t: torch.Tensor, req: Any) -> None:
        self._received[id(t)] = (weakref.ref(t), req)

    def flush(self, dev: Any) -> None:
        events, self.events = self.events, []
        for e in events:
            e.record(dev)


def _dtensor_spec(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t._spec if isinstance(t, DTensor) else None


class RankThread:
    """One simulated rank's program on its thread, driven by the rank's greenlet (see the module docstring).

    timeout: the seconds of wall-clock time the program may compute between two torch.distributed calls (None:
             no limit); past them the thread is stopped and ``stops.NoProgressError`` names where every rank of
             ``peers()`` (the simulation's threads; None on a real rank: this one alone) was.
    start:   torch's per-process state the program starts with (the caller's; None: as it is now)."""

    def __init__(
        self,
        ctx: RankContext,
        program: Callable[..., Any],
        args: tuple,
        store: Any,
        timeout: float | None = None,
        peers: Callable[[], Iterable[RankThread]] | None = None,
        start: TorchState | None = None,
    ) -> None:
        install_sleep()
        bookkeeping.install(paused)
        self.ctx = ctx
        self.timeout, self.peers = timeout, peers
        ctx.request = self._request
        ctx.world = RankWorld()
        ctx.sink = RankSink(ctx)
        self.program, self.args, self.store = program, args, store
        self._to_rank: queue.SimpleQueue = queue.SimpleQueue()
        self._to_device: queue.SimpleQueue = queue.SimpleQueue()
        self._rng = _DEFAULT_RNG.clone()
        self._torch = start or TorchState.now()  # this rank's own per-process state, while another rank runs
        self._aborted = False
        # the thread waits for its greenlet (in a request, or done): it runs none of the program's code now
        self._parked = False
        self._state = threading.Lock()  # orders _aborted and _parked between the thread and abort()
        self.doing: str | None = "computing"  # the torch call the rank is in, for errors ("finished" at the end)
        self.last_calls: deque[str] = deque(maxlen=3)  # its latest completed torch.distributed calls
        self.line = ""  # the program's line the thread ran when it was stopped for making no progress
        self.thread = threading.Thread(target=self._main, name=f"simulated rank {ctx.rank}", daemon=True)

    # ---- the device's side (the rank's greenlet) ---------------------------------------------------------
    def run(self, dev: Any) -> Any:
        """Run the program to its end, doing what it asks on ``dev``; returns what it returned (as NumPy)."""
        self.thread.start()
        try:
            while True:
                kind, a, b = self._next()
                if kind == "call":
                    self.ctx.sink.flush(dev)
                    self.doing = b
                    answer = a(dev)
                    self.last_calls.append(b)
                    self.doing = "computing"
                    self._to_rank.put(("ok", answer))
                elif kind == "done":
                    self.ctx.sink.flush(dev)
                    self.doing = "finished"
                    return _resolve(a)
                else:  # the program raised
                    self.doing = f"raised {type(a).__name__}"
                    raise a
        finally:
            self.abort()

    def _next(self) -> tuple:
        """The thread's next request; it computes meanwhile, for ``timeout`` seconds at most."""
        try:
            return self._to_device.get(timeout=self.timeout)
        except queue.Empty:
            self.line = program_line(self.thread)
            if self.peers is None:  # a real rank: the others are processes of their own
                raise no_progress(self.ctx.rank, self.timeout or 0.0, [self], None) from None
            raise no_progress(self.ctx.rank, self.timeout or 0.0, self.peers(), self.ctx.world_size) from None

    def abort(self) -> None:
        """End the thread if it still runs (the run failed, elsewhere or here, or was interrupted): ``RankAborted``
        is raised in its pending call, or in the program's own code if it computes (``stops``)."""
        if not self.thread.is_alive():
            return
        with self._state:
            self._aborted = True
            self.ctx.stop.set()  # wakes a sleeping rank
            if not self._parked:
                interrupt(self.thread)
        self._to_rank.put(("abort", None))
        self.thread.join(timeout=10)

    # ---- the rank's side (its thread) -------------------------------------------------------------------
    def _request(self, fn: Callable[[Any], Any], what: str) -> Any:
        with self._state:
            if self._aborted:
                raise RankAborted
            self._parked = True
        self._rng, self._torch = torch.get_rng_state(), TorchState.now()
        _TURN.release()
        self._to_device.put(("call", fn, what))
        kind, answer = self._to_rank.get()
        _TURN.acquire()
        if kind == "abort":
            raise RankAborted
        with self._state:
            self._parked = False
        torch.set_rng_state(self._rng)
        self._torch.restore()
        return answer

    def _main(self) -> None:
        ctx = self.ctx
        enter(ctx)
        _TURN.acquire()
        torch.set_rng_state(self._rng)
        self._torch.restore()
        try:
            with recording(ctx.sink), Pricing():
                hook = sys.excepthook  # torch prefixes the process's tracebacks with its rank: not one rank's here
                dist.init_process_group("simulator", rank=ctx.rank, world_size=ctx.world_size, store=self.store)
                sys.excepthook = hook
                out = self.program(*self.args)
                unwaited = unwaited_error(ctx)
                if unwaited is not None:
                    raise unwaited
                grads = Gradients.of(ctx.sink)
                for name, g in grads.items:
                    ctx.sink.value("hold", name, g, (), "a gradient")
                plan = _plan(ctx.sink, out, result_name(ctx.sink))
            answer: tuple = ("done", plan, None)
        except RankAborted:
            answer = ()
        except BaseException as exc:  # the program's own error: the device raises it, naming the rank
            fix = _launcher_fix(exc)
            if fix and exc.args:
                exc.args = (f"{exc.args[0]}: {fix}", *exc.args[1:])
            answer = ("error", exc, None)
        finally:
            with self._state:
                self._parked = True
            ctx.world.release()
            enter(None)
            _TURN.release()
        if answer:
            self._to_device.put(answer)


LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _launcher_fix(exc: BaseException) -> str | None:
    """The fix for what a script written for torchrun does that simulated ranks provide otherwise: they are
    initialised already, threads of one process (no RANK per rank in the environment), on the CPU."""
    if "default process group twice" in str(exc):
        return ("simulate_torch and run_real initialise torch.distributed on each rank; leave init_process_group out "
                "of the program (a script that runs it under torchrun calls it first)")  # fmt: skip
    if isinstance(exc, KeyError) and exc.args and exc.args[0] in LAUNCHER_VARIABLES:
        return (f"torchrun's {exc.args[0]} is not set: the simulated ranks are threads of one process, which share "
                "its environment; ask torch.distributed instead (dist.get_rank(), dist.get_world_size())")  # fmt: skip
    if "cuda" in str(exc).lower() and not torch.cuda.is_available():
        return ("the simulated ranks run on the CPU, without CUDA: leave .cuda(), .to('cuda') and "
                "torch.cuda.set_device out, or choose the device by torch.cuda.is_available()")  # fmt: skip
    return None


def _plan(sink: RankSink, out: Any, name: str = "output") -> Any:
    """What the program returned, each tensor as the value the device will hold (resolved after the flush): the
    value a module output was recorded as, if the tensor still holds it, else a new value ``output``
    (``output[0]``, ``output['k']`` in a structure), named as the reference names the model's result."""
    if isinstance(out, torch.Tensor):
        v = (sink.recorded(out) or [None])[-1]
        if v is not None and (v.kind != "op" or not _same(v.array, out, sink)):
            v = None  # changed since (all-reduced in place, ...): what it holds now is what was returned
        return v if v is not None else sink.value("hold", name, out, (), "what the program returned")
    if isinstance(out, dict):
        return {k: _plan(sink, v, f"{name}[{k!r}]") for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return type(out)(_plan(sink, v, f"{name}[{i}]") for i, v in enumerate(out))
    if isinstance(out, nn.Module):
        return None
    return out


def _same(array: Any, t: torch.Tensor, sink: RankSink) -> bool:
    with internal(sink.ctx):
        now = to_numpy(t, sink.ctx.rank, "the result")
    return now.shape == array.shape and bool((now == array).all())


def _resolve(plan: Any) -> Any:
    if isinstance(plan, Value):
        return plan.payload
    if isinstance(plan, dict):
        return {k: _resolve(v) for k, v in plan.items()}
    if isinstance(plan, (list, tuple)):
        return type(plan)(_resolve(v) for v in plan)
    return plan


__all__ = ["RankAborted", "RankThread", "install"]
